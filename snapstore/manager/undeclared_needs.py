"""Dependencies that records of earlier releases did not declare (docs/format.md §22).

Pure functions over a checkpoint's ``metadata`` (no I/O, no snapstore imports), used by
:mod:`snapstore.manager.retention`. The LangGraph saver declares its DeltaChannel delta chains in each
record's ``snapstore.needs`` metadata since that key exists; the records it wrote before (both
of its record layouts: ``"lg": "c"``/``"w"`` and ``"lg": "C"``/``"W"``) declare nothing, yet a
checkpoint that does not hold a DeltaChannel value rebuilds it from its ancestors back to the
nearest one that does. Retention cannot tell from such a record where that chain starts (writes
stored before their checkpoint's parent was put may sit anywhere older), so a run holding one
keeps every checkpoint older than a kept record of the saver: it never cuts the chain, and says
so in the plan's reasons. ``SnapstoreSaver.prune(thread_ids)`` reads the records themselves and
keeps exactly the chain.
"""

from __future__ import annotations

from collections.abc import Callable

NEEDS_KEY = "snapstore.needs"
"""The declared-dependency key (:data:`snapstore.manager.retention.NEEDS_KEY`)."""

LANGGRAPH_KINDS = frozenset({"c", "w", "C", "W"})
"""Values of the LangGraph saver's ``"lg"`` metadata key on its checkpoint and writes records."""

LANGGRAPH_LEGACY_WHY = ("LangGraph DeltaChannel thread written by an earlier release, which did not declare its delta "
                        "chain: every older checkpoint is kept; SnapstoreSaver.prune([thread]) keeps exactly the chain")
"""The ``by`` of the dependency such a record gets (retention's reason ``needed by <id> (...)``)."""


def undeclared_langgraph(metadata) -> bool:
    """True if ``metadata`` (a checkpoint's metadata field, any JSON value) is that of a LangGraph
    saver record without :data:`NEEDS_KEY` (written by a release before it)."""
    return isinstance(metadata, dict) and metadata.get("lg") in LANGGRAPH_KINDS and NEEDS_KEY not in metadata


def langgraph_legacy_delta(metadata) -> bool:
    """True if ``metadata`` is a LangGraph checkpoint record of an earlier release whose state
    needs its ancestors: it has a parent (``parent``) and its LangGraph metadata (``md``) names
    a DeltaChannel channel (``counters_since_delta_snapshot``) the record does not hold
    (``chs``), or that metadata is not JSON (``mdb``: unknown, so assumed). The saver of this
    release declares :data:`NEEDS_KEY` on every such record, so none of its records is taken
    for one (a record of it with ``mdb`` and no dependency is: then its run keeps more)."""
    if not undeclared_langgraph(metadata) or metadata.get("lg") not in ("c", "C") or not metadata.get("parent"):
        return False
    if "mdb" in metadata:
        return True
    md = metadata.get("md")
    counters = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
    if not isinstance(counters, dict) or not counters:
        return False
    held = metadata.get("chs")
    held = set(held) if isinstance(held, list) and all(isinstance(h, str) for h in held) else set()
    return any(ch not in held for ch in counters)


def legacy_needs(metadatas) -> Callable[[object], "tuple[int, str] | None"]:
    """A function ``metadata -> (0, why) | None`` for the records of ONE run whose metadata
    fields are ``metadatas`` (any iterable): when any of them is a LangGraph DeltaChannel
    checkpoint record of an earlier release (:func:`langgraph_legacy_delta`), every LangGraph
    record of that run without declared needs needs every older checkpoint (``(0, why)``);
    otherwise (and for any other record) None."""
    if not any(langgraph_legacy_delta(md) for md in metadatas):
        return lambda md: None
    return lambda md: (0, LANGGRAPH_LEGACY_WHY) if undeclared_langgraph(md) else None
