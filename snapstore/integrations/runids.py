"""Run ids of framework surfaces: a prefix naming the surface, then a JSON pair of strings
(``langgraph:["thread","ns"]``, ``openai-agents:["session","branch"]``), so other runs in the
repository are told apart and the pair is read back exactly."""

from __future__ import annotations

import json


def pair_run_id(prefix: str, first: str, second: str, *, ensure_ascii: bool = True) -> str:
    """``prefix`` + the JSON array ``[first, second]``.

    Args:
        prefix: the surface's run-id prefix, e.g. ``"langgraph:"``.
        first, second: the two names (str).
        ensure_ascii: escape non-ASCII characters (a surface keeps the choice its stored ids use).
    """
    return prefix + json.dumps([first, second], ensure_ascii=ensure_ascii)


def parse_pair_run_id(prefix: str, run_id: str) -> tuple[str, str] | None:
    """Inverse of :func:`pair_run_id`: ``(first, second)``, or None for a run id that is not one
    (another prefix, or not a JSON pair of strings after it)."""
    if not run_id.startswith(prefix):
        return None
    try:
        t = json.loads(run_id[len(prefix):])
    except ValueError:
        return None
    if isinstance(t, list) and len(t) == 2 and all(isinstance(x, str) for x in t):
        return t[0], t[1]
    return None
