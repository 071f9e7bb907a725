"""Which format a file is in, from its content: the known tools' files by their own marks,
else by shape (:mod:`.shapes`); :func:`detect_format` says which, or fails naming what it saw.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInputError
from .read import EXPECTED, describe
from .shapes import shape_conversations

__all__ = ["detect_format", "is_claudecode_record", "is_openhands_episode", "is_openhands_event",
           "is_openhands_v0_events", "is_tau2_results"]


def is_claudecode_record(value: Any) -> bool:
    """A Claude Code transcript record: an object with a string ``type`` and a session field
    (``uuid``, ``parentUuid``, ``sessionId``, ``messageId`` or ``leafUuid``)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and any(k in value for k in ("uuid", "parentUuid", "sessionId", "messageId", "leafUuid"))
    )


def is_openhands_episode(value: Any) -> bool:
    """An OpenHands evaluation episode: an object with a ``history`` list and an ``instance_id``
    or ``instruction``, and no ``trajectory`` (which would make it SWE-agent's)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and "trajectory" not in value
        and ("instance_id" in value or "instruction" in value)
    )


def is_openhands_event(value: Any) -> bool:
    """An OpenHands V1 event: an object with a string ``kind`` discriminator and no ``role``."""
    return isinstance(value, dict) and isinstance(value.get("kind"), str) and "role" not in value


def is_openhands_v0_events(value: Any) -> bool:
    """An OpenHands V0 event stream: a non-empty list of objects, each with a ``source`` and an
    ``action`` or ``observation`` name (no ``kind``, no ``role``)."""
    return (isinstance(value, list) and bool(value) and all(
        isinstance(e, dict) and "kind" not in e and "role" not in e and "source" in e
        and (isinstance(e.get("action"), str) or isinstance(e.get("observation"), str)) for e in value))


def _is_minisweagent(value: dict) -> bool:
    fmt = value.get("trajectory_format")
    info = value.get("info")
    return (isinstance(fmt, str) and fmt.startswith("mini-swe-agent")) or (
        isinstance(info, dict) and "mini_version" in info
    )


def detect_format(where: str, kind: str, payload: Any) -> str:
    """The format of a file that was read (a member of ``FORMATS``): a known tool's by its marks,
    else ``messages`` or ``events`` by shape.

    Args:
        where: the file's path (for the message).
        kind, payload: as :func:`~.read.read_payload` returns them.
    Raises:
        InvalidInputError: neither a known format nor any message list or event stream, naming
            what the file holds.
    """
    known = _detect_known(kind, payload)
    if known is not None:
        return known
    shaped = _detect_shape(kind, payload)
    if shaped is not None:
        return shaped
    if kind == "jsonl":
        raise InvalidInputError(
            f"{where}: unrecognised JSON Lines records (line {payload[0][0]}), expected Claude Code "
            "session records, OpenHands episodes, {'messages': [...]} objects, or records holding "
            "role/content message lists or action/observation events at any depth (or give "
            "--messages-path)"
        )
    raise InvalidInputError(
        f"{where}: unrecognised JSON {describe(payload)}, expected {EXPECTED}, or records holding "
        "role/content message lists or action/observation events at any depth (or give --messages-path)"
    )


def _detect_known(kind: str, payload: Any) -> str | None:
    """The known format a file is in, by the rules of the known tools (their exact handling)."""
    if kind == "jsonl":
        first = payload[0][1]
        if is_claudecode_record(first):
            return "claudecode"
        if is_openhands_episode(first):
            return "openhands"
        if isinstance(first, dict) and isinstance(first.get("messages"), list):
            return "openai"
        return None
    value = payload
    if isinstance(value, dict):
        if is_tau2_results(value):
            return "taubench"
        if isinstance(value.get("history"), list) and isinstance(value.get("trajectory"), list):
            return "sweagent"
        if isinstance(value.get("messages"), list):
            return "minisweagent" if _is_minisweagent(value) else "openai"
        if is_openhands_episode(value):
            return "openhands"
        if is_claudecode_record(value):
            return "claudecode"
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        first = value[0]
        if isinstance(first.get("traj"), list):
            return "taubench"
        if isinstance(first.get("conversations"), list):
            return "sharegpt"
        if is_openhands_episode(first) or is_openhands_event(first) or is_openhands_v0_events(value):
            return "openhands"
        if "role" in first or isinstance(first.get("messages"), list):
            return "openai"
    return None


def _detect_shape(kind: str, payload: Any) -> str | None:
    """``"messages"`` or ``"events"`` when the file holds message lists / event streams somewhere."""
    found = shape_conversations("", kind, payload)
    if not found:
        return None
    return "events" if all(f.shape == "events" for f in found) else "messages"

def is_tau2_results(value: Any) -> bool:
    """A tau2-bench results object: ``{"timestamp", "info", "tasks": [...], "simulations": [...]}``."""
    return (isinstance(value, dict) and isinstance(value.get("simulations"), list)
            and ("tasks" in value or "info" in value))

