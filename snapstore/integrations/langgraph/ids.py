"""Run ids of LangGraph threads and the configs that name them (docs/langgraph-layout.md §1).

One snapstore run per ``(thread_id, checkpoint_ns)``, ``langgraph:["<thread_id>", "<ns>"]``, and
a namespace registry run per thread, ``langgraph-ns:["<thread_id>"]``.
"""

from __future__ import annotations

import json

from ...errors import InvalidInputError
from ..runids import pair_run_id, parse_pair_run_id

RUN_PREFIX = "langgraph:"
"""Prefix of the snapstore run ids this saver writes (other runs in the repository are ignored)."""

NS_PREFIX = "langgraph-ns:"
"""Prefix of the run that lists a thread's namespaces (``langgraph-ns:["<thread_id>"]``)."""


def run_id_for(thread_id: str, checkpoint_ns: str = "") -> str:
    """The snapstore run id of a LangGraph thread's namespace: ``langgraph:["thread","ns"]``."""
    return pair_run_id(RUN_PREFIX, str(thread_id), str(checkpoint_ns))


def ns_run_id_for(thread_id: str) -> str:
    """The snapstore run id of a thread's namespace registry: ``langgraph-ns:["thread"]``."""
    return NS_PREFIX + json.dumps([str(thread_id)])


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """Inverse of :func:`run_id_for`: ``(thread_id, checkpoint_ns)``, or None for other runs."""
    return parse_pair_run_id(RUN_PREFIX, run_id)


def target(config, what: str, need_id: bool = False) -> tuple[dict, str, str]:
    """``(configurable, thread_id, checkpoint_ns)`` of a LangGraph config.

    Args:
        config: ``{"configurable": {"thread_id", "checkpoint_ns"?, "checkpoint_id"?}}``.
        what: the saver method asking, named in the error (e.g. ``"put"``).
        need_id: ``checkpoint_id`` is required too.
    Raises:
        InvalidInputError: no ``configurable.thread_id`` (or no ``checkpoint_id`` when needed), or
            a ``checkpoint_ns`` that is not a string.
    """
    c = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(c, dict) or c.get("thread_id") in (None, ""):
        raise InvalidInputError(f"SnapstoreSaver.{what}: config needs configurable.thread_id, got {config!r}")
    if need_id and not c.get("checkpoint_id"):
        raise InvalidInputError(f"SnapstoreSaver.{what}: config needs configurable.checkpoint_id, got {config!r}")
    ns = c.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise InvalidInputError(f"SnapstoreSaver.{what}: checkpoint_ns must be a string, got {ns!r}")
    return c, str(c["thread_id"]), ns


def config_for(thread_id: str, ns: str, checkpoint_id: str) -> dict:
    """``{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}``."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
