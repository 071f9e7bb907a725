"""Turn agent-trajectory files from other tools into checkpoint sequences to replay into snapstore.

``load_trajectory(path)`` reads one file, detects its format from its content (not from its name) and
returns a list of :class:`Conversation` objects. A conversation's ``checkpoints[i]`` is the full message
list an agent would have saved after its ``i``-th turn; replaying them in order with one save per
checkpoint reproduces a realistic run.

Records are kept exactly as the source has them: every message, event or transcript record is the
JSON object parsed from the file (same keys, same key order, same values; large integers stay exact),
never normalised to ``{role, content}``. The checkpoint lists of one conversation share those objects:
treat them as read-only.

Where turns end
---------------
A turn is one assistant step plus the tool results answering it. Everything before the first assistant
message (system prompt, user task, demonstrations) belongs to the first checkpoint, and records that
follow the last turn without starting a new one (a user's final reply, mini-swe-agent's ``exit``
message) belong to the last checkpoint, so the last checkpoint is always the whole history. A message
from the user (not a tool result) after a turn starts the next turn. Checkpoint lists grow by appending
(``checkpoints[i]`` is a prefix of ``checkpoints[i + 1]``), except for SWE-agent function-calling files
(see below). A conversation whose history is empty has no checkpoints.

Formats (``FORMATS``)
---------------------
``openai``
    A JSON list of chat messages ``{"role": ..., ...}``, or ``{"messages": [...]}``, or a JSON list /
    JSON Lines file of ``{"messages": [...]}`` objects (one conversation each, named by zero-padded
    index). ``assistant`` messages start turns; ``tool``/``function`` messages (and unknown roles)
    answer them; ``user``/``system``/``developer`` messages after a turn start the next one.
``sweagent``
    SWE-agent ``.traj``: ``{"trajectory": [...], "history": [...], ...}``. When every
    ``trajectory[i]`` carries ``messages`` (SWE-agent >= 1.0 function calling), those are the real,
    history-processed prompts: checkpoint ``i`` is ``trajectory[i]["messages"]`` as stored, plus a final
    checkpoint equal to ``history`` if it differs from the last one. These are not prefixes of each
    other (old tool outputs get rewritten). Otherwise ``history`` is cut into turns; observations come
    back as ``user`` messages in the older format, so every non-assistant message after an assistant
    message belongs to that assistant's turn.
``minisweagent``
    mini-swe-agent ``.traj.json``: ``{"messages": [...], "trajectory_format": "mini-swe-agent-…", ...}``.
    ``messages`` is cut like the older SWE-agent history; the final ``exit`` message joins the last turn.
``openhands``
    OpenHands V1 SDK events (items with a ``kind`` discriminator). Either a bare JSON list of events
    (one conversation) or JSON Lines / a JSON list of evaluation episodes
    ``{"instance_id", "instruction", "history": [...], ...}`` (one conversation per episode, named by
    ``instance_id``, made unique with ``-2``, ``-3``... suffixes). Only the ``history`` events are
    replayed: the episode's top-level fields (``instruction``, ``metadata``, ``metrics``,
    ``test_result``...) are not messages and are not part of any checkpoint. A checkpoint ends after the
    ``ObservationEvent`` records answering an ``ActionEvent``; parallel ``ActionEvent`` records of one LLM
    response (same ``llm_response_id``) and their observations form one turn. An agent
    ``MessageEvent`` is a turn of its own, a user ``MessageEvent`` starts the next turn, and a final
    action without an observation is the last turn.
``claudecode``
    Claude Code session transcript (JSON Lines, one record per line). ``file-history-snapshot`` and
    ``system`` records (editor snapshots and hook summaries, no conversation data) are skipped; every
    other record is kept as its own element, in file order (the ``parentUuid`` chain of a session file
    is linear). One API response is written as several ``assistant`` lines sharing ``message.id``;
    they are not merged, but they belong to one turn together with the ``tool_result`` records
    answering them. A user record that is not a tool result (a human prompt, an interruption notice)
    starts the next turn.
``taubench``
    tau-bench results: a JSON list of ``{"task_id", "trial", "traj": [...], ...}``; one conversation per
    item (``traj`` is an OpenAI chat list, cut as ``openai``), named ``task<task_id>-trial<trial>``.
``sharegpt``
    ShareGPT / LLaMA-Factory: a JSON list of ``{"conversations": [{"from", "value"}, ...], ...}``; one
    conversation per item named by zero-padded index (``"0007"``). ``gpt`` and ``function_call``
    records start turns, ``observation`` records answer them, ``human``/``system`` records after a turn
    start the next one. Other item fields (``tools``, ``system``) are not replayed.

Errors: every problem with the input (unreadable file, not UTF-8, not JSON, a broken JSON Lines line,
NaN/Infinity, an unrecognised or mismatched structure, an unknown ``format`` name) raises
:class:`snapstore.errors.InvalidInputError` with a one-line message naming the file (and the line or
item where it applies).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from snapstore.errors import InvalidInputError

__all__ = ["FORMATS", "Conversation", "load_trajectory"]

FORMATS: tuple[str, ...] = (
    "openai",
    "sweagent",
    "minisweagent",
    "openhands",
    "claudecode",
    "taubench",
    "sharegpt",
)

_EXPECTED = (
    "an agent trajectory: an OpenAI chat message list or {'messages': [...]}, a SWE-agent .traj, "
    "a mini-swe-agent .traj.json, OpenHands V1 events or episodes (JSON/JSONL), a Claude Code "
    "session JSONL, a tau-bench results list or a ShareGPT list"
)

# Turn roles of a record, used to find where checkpoints end.
_ASSISTANT = "assistant"  # starts a turn (unless it continues the same API response)
_RESULT = "result"  # answers the current turn (tool results, observations, neutral records)
_USER = "user"  # after a turn: starts the next turn

# Claude Code record types that carry no conversation data.
_CLAUDECODE_SKIPPED = ("file-history-snapshot", "system")


@dataclass
class Conversation:
    """One conversation of a trajectory file, as a sequence of checkpoints.

    Attributes:
        name: ``""`` for a single-conversation file (SWE-agent, mini-swe-agent, Claude Code, one chat
            list, a bare OpenHands event list); in a file that is a list / JSON Lines of
            conversations (even a one-item one), a suffix that is stable, unique within the file and
            usable in a run id: the episode's ``instance_id`` (OpenHands), ``task<id>-trial<n>``
            (tau-bench) or the zero-padded item index such as ``"0007"`` (ShareGPT, OpenAI lists).
        checkpoints: ``checkpoints[i]`` is the full message list (a ``list`` of the source's own JSON
            records) after turn ``i``, in order. The last one is the conversation's whole history;
            the list is empty when the source history is empty.
    """

    name: str
    checkpoints: list[list] = field(default_factory=list)

    @property
    def messages(self) -> list:
        """The full history: the last checkpoint, or ``[]`` when there are no checkpoints."""
        return self.checkpoints[-1] if self.checkpoints else []


def load_trajectory(
    path: str | os.PathLike, format: str | None = None
) -> tuple[str, list[Conversation]]:
    """Read a trajectory file and return ``(format_name, conversations)``.

    Args:
        path: a JSON or JSON Lines file (UTF-8; a leading BOM is ignored). JSON Lines is read line by
            line, blank lines are ignored.
        format: one of :data:`FORMATS` to skip detection; ``None`` detects the format from the
            content (the file name is not used).

    Returns:
        ``(format_name, conversations)``: the format used (a member of :data:`FORMATS`) and a list of
        :class:`Conversation` in file order. Single-conversation formats return one conversation named
        ``""``; multi-conversation files return one per item/line with unique names.

    Raises:
        InvalidInputError: the file cannot be read or decoded, is not JSON / JSON Lines (a broken
            JSON Lines line is named by its 1-based line number), contains NaN/Infinity, does not look
            like any known format, does not match the ``format`` given, or ``format`` is unknown.
    """
    where = os.fspath(path)
    if format is not None and format not in FORMATS:
        raise InvalidInputError(
            f"{where}: unknown trajectory format {format!r} (expected one of {', '.join(FORMATS)})"
        )
    kind, payload = _read(where)
    name = format if format is not None else _detect(where, kind, payload)
    conversations = _PARSERS[name](where, kind, payload)
    return name, conversations


# --------------------------------------------------------------------------------------------------
# Reading


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _read(where: str) -> tuple[str, Any]:
    """Return ``("json", value)`` or ``("jsonl", [(line_number, value), ...])``."""
    try:
        with open(where, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InvalidInputError(f"{where}: cannot read trajectory file: {e.strerror or e}") from e
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{where}: not UTF-8 text (bad byte at offset {e.start})") from e
    if not text.strip(" \t\r\n"):
        raise InvalidInputError(f"{where}: empty file, expected {_EXPECTED}")
    try:
        return "json", _loads(text)
    except _NonFinite as e:
        raise InvalidInputError(f"{where}: {e} is not a JSON value (NaN/Infinity are not allowed)") from None
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            raise InvalidInputError(
                f"{where}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
            ) from None
    # More than one JSON value: JSON Lines. Split on "\n" only: JSON strings may hold raw U+2028 etc.
    lines: list[tuple[int, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        if not line:
            continue
        try:
            lines.append((number, _loads(line)))
        except _NonFinite as e:
            raise InvalidInputError(
                f"{where}: line {number}: {e} is not a JSON value (NaN/Infinity are not allowed)"
            ) from None
        except json.JSONDecodeError as e:
            raise InvalidInputError(
                f"{where}: line {number}: invalid JSON Lines record (column {e.colno}: {e.msg})"
            ) from None
    return "jsonl", lines


# --------------------------------------------------------------------------------------------------
# Detection


def _is_claudecode_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and any(k in value for k in ("uuid", "parentUuid", "sessionId", "messageId", "leafUuid"))
    )


def _is_openhands_episode(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and "trajectory" not in value
        and ("instance_id" in value or "instruction" in value)
    )


def _is_openhands_event(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("kind"), str) and "role" not in value


def _is_minisweagent(value: dict) -> bool:
    fmt = value.get("trajectory_format")
    info = value.get("info")
    return (isinstance(fmt, str) and fmt.startswith("mini-swe-agent")) or (
        isinstance(info, dict) and "mini_version" in info
    )


def _detect(where: str, kind: str, payload: Any) -> str:
    if kind == "jsonl":
        first = payload[0][1]
        if _is_claudecode_record(first):
            return "claudecode"
        if _is_openhands_episode(first):
            return "openhands"
        if isinstance(first, dict) and isinstance(first.get("messages"), list):
            return "openai"
        raise InvalidInputError(
            f"{where}: unrecognised JSON Lines records (line {payload[0][0]}), expected Claude Code "
            "session records, OpenHands episodes or {'messages': [...]} objects"
        )
    value = payload
    if isinstance(value, dict):
        if isinstance(value.get("history"), list) and isinstance(value.get("trajectory"), list):
            return "sweagent"
        if isinstance(value.get("messages"), list):
            return "minisweagent" if _is_minisweagent(value) else "openai"
        if _is_openhands_episode(value):
            return "openhands"
        if _is_claudecode_record(value):
            return "claudecode"
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        first = value[0]
        if isinstance(first.get("traj"), list):
            return "taubench"
        if isinstance(first.get("conversations"), list):
            return "sharegpt"
        if _is_openhands_episode(first) or _is_openhands_event(first):
            return "openhands"
        if "role" in first or isinstance(first.get("messages"), list):
            return "openai"
    raise InvalidInputError(f"{where}: unrecognised JSON {_shape(value)}, expected {_EXPECTED}")


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:6])
        return f"object with keys [{keys}{', ...' if len(value) > 6 else ''}]"
    if isinstance(value, list):
        if not value:
            return "empty list"
        return f"list of {type(value[0]).__name__}"
    return type(value).__name__


# --------------------------------------------------------------------------------------------------
# Turn cutting


def _cut(records: list, role_of: Callable[[Any], tuple[str, Any]]) -> list[list]:
    """Cut ``records`` into growing checkpoints (prefixes of ``records``).

    ``role_of(record)`` returns ``(turn_role, response_key)``. An assistant record starts a new turn
    unless the current turn's assistant had the same non-None ``response_key`` (one API response
    split over several records); a user record starts a new turn if the current one has an assistant
    record; result records never start one. Leading records join the first turn and trailing records
    without an assistant record join the last one.
    """
    ends: list[int] = []
    in_turn = False  # the current turn has an assistant record
    key: Any = None
    for i, record in enumerate(records):
        role, rkey = role_of(record)
        if role == _ASSISTANT:
            if in_turn and (rkey is None or rkey != key):
                ends.append(i)
            in_turn, key = True, rkey
        elif role == _USER and in_turn:
            ends.append(i)
            in_turn, key = False, None
    if in_turn or not ends:
        if records:
            ends.append(len(records))
    else:
        ends[-1] = len(records)
    return [records[:end] for end in ends]


def _chat_role(message: dict) -> tuple[str, Any]:
    """OpenAI chat: assistant starts, tool/function (and unknown roles) answer, user/system start."""
    role = message.get("role")
    if role == "assistant":
        return _ASSISTANT, None
    if role in ("user", "system", "developer"):
        return _USER, None
    return _RESULT, None


def _agent_role(message: dict) -> tuple[str, Any]:
    """SWE-agent / mini-swe-agent: everything that is not the assistant answers the assistant."""
    return (_ASSISTANT if message.get("role") == "assistant" else _RESULT), None


_SHAREGPT_ASSISTANT = ("gpt", "function_call", "assistant", "model")
_SHAREGPT_RESULT = ("observation", "tool", "function", "function_response")


def _sharegpt_role(record: dict) -> tuple[str, Any]:
    origin = record.get("from")
    if origin in _SHAREGPT_ASSISTANT:
        return _ASSISTANT, None
    if origin in _SHAREGPT_RESULT:
        return _RESULT, None
    return _USER, None


def _openhands_role(event: dict) -> tuple[str, Any]:
    kind = event.get("kind")
    if kind == "ActionEvent":
        return _ASSISTANT, event.get("llm_response_id")
    if kind == "MessageEvent":
        if event.get("source") == "agent":
            return _ASSISTANT, event.get("llm_response_id")
        return _USER, None
    if kind == "SystemPromptEvent":
        return _USER, None
    return _RESULT, None


def _claudecode_role(record: dict) -> tuple[str, Any]:
    rtype = record.get("type")
    message = record.get("message")
    if rtype == "assistant":
        return _ASSISTANT, message.get("id") if isinstance(message, dict) else None
    if rtype == "user":
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return _RESULT, None
        return _USER, None
    return _RESULT, None


# --------------------------------------------------------------------------------------------------
# Parsers: (where, kind, payload) -> list[Conversation]


def _expect_json(where: str, kind: str, fmt: str, what: str) -> None:
    if kind != "json":
        raise InvalidInputError(f"{where}: JSON Lines file given, but format {fmt!r} expects {what}")


def _records(where: str, value: Any, label: str, required: str | None = None) -> list:
    """Check that ``value`` is a list of JSON objects (each holding key ``required``) and return it."""
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {label} is {_shape(value)}, expected a list of objects")
    for i, record in enumerate(value):
        if not isinstance(record, dict):
            raise InvalidInputError(
                f"{where}: {label}[{i}] is {type(record).__name__}, expected a JSON object"
            )
        if required is not None and required not in record:
            raise InvalidInputError(f"{where}: {label}[{i}] has no {required!r} key")
    return value


def _padded(index: int, count: int) -> str:
    return str(index).zfill(max(4, len(str(max(count - 1, 0)))))


def _unique(names: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 2
        while candidate in seen:
            candidate, n = f"{name}-{n}", n + 1
        seen.add(candidate)
        out.append(candidate)
    return out


def _parse_openai(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = "a list of chat messages, {'messages': [...]}, or a list / JSON Lines of those objects"
    if kind == "jsonl":
        items = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict):
        if "messages" not in payload:
            raise InvalidInputError(f"{where}: {_shape(payload)} has no 'messages', expected {what}")
        msgs = _records(where, payload["messages"], "messages", "role")
        return [Conversation("", _cut(msgs, _chat_role))]
    elif isinstance(payload, list) and payload and isinstance(payload[0], dict) and "role" not in payload[0]:
        items = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list):
        msgs = _records(where, payload, "messages", "role")
        return [Conversation("", _cut(msgs, _chat_role))]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected {what}")
    conversations = []
    for i, (label, item) in enumerate(items):
        if not isinstance(item, dict) or "messages" not in item:
            raise InvalidInputError(f"{where}: {label} is not a {{'messages': [...]}} object")
        msgs = _records(where, item["messages"], f"{label}: messages", "role")
        conversations.append(Conversation(_padded(i, len(items)), _cut(msgs, _chat_role)))
    return conversations


def _parse_sweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sweagent", "a .traj JSON object")
    if not isinstance(payload, dict) or "history" not in payload or "trajectory" not in payload:
        raise InvalidInputError(
            f"{where}: {_shape(payload)}, expected a SWE-agent .traj object with 'history' and 'trajectory'"
        )
    history = _records(where, payload["history"], "history", "role")
    steps = _records(where, payload["trajectory"], "trajectory")
    if steps and all(isinstance(step.get("messages"), list) for step in steps):
        checkpoints = [
            list(_records(where, step["messages"], f"trajectory[{i}].messages"))
            for i, step in enumerate(steps)
        ]
        if checkpoints[-1] != history:
            checkpoints.append(list(history))
    else:
        checkpoints = _cut(history, _agent_role)
    return [Conversation("", checkpoints)]


def _parse_minisweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "minisweagent", "a .traj.json JSON object")
    if not isinstance(payload, dict) or "messages" not in payload:
        raise InvalidInputError(
            f"{where}: {_shape(payload)}, expected a mini-swe-agent object with 'messages'"
        )
    msgs = _records(where, payload["messages"], "messages", "role")
    return [Conversation("", _cut(msgs, _agent_role))]


def _parse_openhands(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = "a list of OpenHands V1 events, or episodes {'instance_id', 'history': [...]} (JSON Lines or list)"
    if kind == "jsonl":
        episodes = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict) and isinstance(payload.get("history"), list):
        events = _records(where, payload["history"], "history")
        return [Conversation("", _cut(events, _openhands_role))]
    elif isinstance(payload, list) and payload and _is_openhands_episode(payload[0]):
        episodes = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list) and all(_is_openhands_event(e) for e in payload):
        return [Conversation("", _cut(payload, _openhands_role))]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected {what}")
    names, conversations = [], []
    for i, (label, episode) in enumerate(episodes):
        if not isinstance(episode, dict) or "history" not in episode:
            raise InvalidInputError(f"{where}: {label} is not an OpenHands episode with 'history'")
        events = _records(where, episode["history"], f"{label}: history")
        instance_id = episode.get("instance_id")
        names.append(str(instance_id) if instance_id not in (None, "") else _padded(i, len(episodes)))
        conversations.append(Conversation("", _cut(events, _openhands_role)))
    for conversation, name in zip(conversations, _unique(names)):
        conversation.name = name
    return conversations


def _parse_claudecode(where: str, kind: str, payload: Any) -> list[Conversation]:
    if kind == "jsonl":
        lines = payload
    elif _is_claudecode_record(payload):
        lines = [(1, payload)]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected Claude Code session JSON Lines")
    records = []
    for number, record in lines:
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise InvalidInputError(f"{where}: line {number}: not a Claude Code record with a 'type'")
        if record["type"] not in _CLAUDECODE_SKIPPED:
            records.append(record)
    return [Conversation("", _cut(records, _claudecode_role))]


def _parse_taubench(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "taubench", "a JSON list of {'task_id', 'trial', 'traj': [...]}")
    items = _records(where, payload, "tau-bench results", "traj")
    names, conversations = [], []
    for i, item in enumerate(items):
        traj = _records(where, item["traj"], f"item {i}: traj", "role")
        trial = item.get("trial")
        names.append(f"task{item.get('task_id', i)}" + (f"-trial{trial}" if trial is not None else ""))
        conversations.append(Conversation("", _cut(traj, _chat_role)))
    for conversation, name in zip(conversations, _unique(names)):
        conversation.name = name
    return conversations


def _parse_sharegpt(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sharegpt", "a JSON list of {'conversations': [{'from', 'value'}, ...]}")
    items = _records(where, payload, "ShareGPT items", "conversations")
    conversations = []
    for i, item in enumerate(items):
        records = _records(where, item["conversations"], f"item {i}: conversations", "from")
        conversations.append(Conversation(_padded(i, len(items)), _cut(records, _sharegpt_role)))
    return conversations


_PARSERS: dict[str, Callable[[str, str, Any], list[Conversation]]] = {
    "openai": _parse_openai,
    "sweagent": _parse_sweagent,
    "minisweagent": _parse_minisweagent,
    "openhands": _parse_openhands,
    "claudecode": _parse_claudecode,
    "taubench": _parse_taubench,
    "sharegpt": _parse_sharegpt,
}
