"""What retention must keep with a record (layout §6): its ``NEEDS_KEY`` metadata.

A checkpoint whose DeltaChannel channels it does not hold rebuilds from its ancestors and their
writes; its record declares, as ``snapstore.needs`` ``{"from": position, "by": DELTA_CHAIN}``,
the log position from which the core's retention keeps every record of the run.
"""

from __future__ import annotations

from ...manager.retention import NEEDS_KEY
from .layout import Head
from .state import SaverState

DELTA_CHAIN = "LangGraph checkpoint and DeltaChannel delta chain"
"""The ``by`` of the saver's ``snapstore.needs`` metadata (retention's ``needed by <id> (...)``)."""


def _incomplete(st: dict, md: dict) -> bool:
    """A checkpoint record that may miss writes stored before it (no ``"k"``, marked ``"x"``, or
    carrying writes without naming their channels)."""
    return bool(st.get("x") or not st.get("k") or (st.get("w") and "wch" not in md))


def record_of(s: SaverState, run: str, head: Head, checkpoint_id: str) -> dict | None:
    """Where checkpoint ``checkpoint_id``'s record is and what retention must keep with it:
    ``{"pos": its log position, "from": its own ``NEEDS_KEY`` position or None, "held": the
    channels it holds, "root": it has no parent, "x": it may miss writes stored before it}``,
    from the run's newest record ``head`` when that carries it, else from one listing of
    the run (a put whose parent is an older checkpoint: time travel); None if not found."""
    md, st = head.md or {}, head.st if isinstance(head.st, dict) else {}
    try:
        if md.get("lg") == "C" and md.get("id") == checkpoint_id and st.get("v") == 2 and head.seq is not None:
            n = md.get(NEEDS_KEY)
            return {"pos": head.seq, "from": n.get("from") if isinstance(n, dict) else None,
                    "held": set(md.get("chs") or ()), "root": md.get("parent") is None,
                    "x": _incomplete(st, md)}
        if (md.get("lg") == "W" and st.get("v") == 2 and st.get("cf") == checkpoint_id
                and isinstance(md.get("cpos"), int)):
            c = st["c"]
            meta = head.items[c["meta"]]["lgmeta"]
            return {"pos": md["cpos"], "from": md.get("cfrom"), "held": {row[0] for row in c["layout"]},
                    "root": meta.get("parent") is None, "x": bool(st.get("x") or not c.get("k"))}
    except (KeyError, TypeError, IndexError, AttributeError):
        pass
    a = s.index(run).cps.get(checkpoint_id)
    if a is None:
        return None
    _items, ast = s.cp_record(run, a)
    n = a.md.get(NEEDS_KEY)
    x = not (isinstance(ast, dict) and ast.get("v") == 2 and ast.get("k") == 1 and not ast.get("x")
             and (not ast.get("w") or "wch" in a.md))
    return {"pos": a.seq, "from": n.get("from") if isinstance(n, dict) else None,
            "held": set(a.md.get("chs") or ()), "root": a.md.get("parent") is None, "x": x}


def needs_from(s: SaverState, run: str, head: Head, parent: str | None, md: dict, chs: list) -> int | None:
    """The log position from which a new checkpoint record needs every record of the run
    (written as its ``NEEDS_KEY`` metadata, so that the core's retention keeps them), or None
    when it needs none: a checkpoint whose DeltaChannel channels (its metadata's
    ``counters_since_delta_snapshot``) it does not hold rebuilds from its ancestors back to
    the nearest one holding each (a ``_DeltaSnapshot``) and their writes: from the parent's
    position, or, when the parent lacks one of those channels, from where the parent's own
    chain starts. Conservative where unsure: 0 (every older record) for a parent of an
    earlier release or one that may miss writes stored before it.

    Args:
        md: the new checkpoint's LangGraph metadata; chs: the channels it holds.
    """
    counters = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
    need = {ch for ch in (counters if isinstance(counters, dict) else ()) if ch not in chs}
    if not need or parent is None:
        return None
    p = record_of(s, run, head, parent)
    if p is None:
        return 0  # the parent's record is gone: keep what is left of the chain
    if p["x"]:
        return 0  # writes for it may sit in older records
    if need <= p["held"] or p["root"]:
        return p["pos"]
    return min(p["pos"], p["from"]) if isinstance(p["from"], int) else 0


def carried_needs(head: Head) -> dict:
    """Metadata of a writes record built on ``head``: the carried checkpoint's record position
    (``cpos``), its own ``NEEDS_KEY`` position (``cfrom``) and, as ``NEEDS_KEY``, from where
    this record needs the run's records (the checkpoint's record and its chain: the record is
    listed as that checkpoint only while its checkpoint record is live)."""
    md = head.md or {}
    if md.get("lg") == "W":
        if not isinstance(md.get("cpos"), int):
            return {}
        pos, frm = md["cpos"], md.get("cfrom")
    elif md.get("lg") == "C" and head.seq is not None:
        n = md.get(NEEDS_KEY)
        pos, frm = head.seq, (n.get("from") if isinstance(n, dict) else None)
        st = head.st if isinstance(head.st, dict) else {}
        if _incomplete(st, md):
            frm = 0  # writes for it may sit in older records only
    else:
        return {}
    out = {"cpos": pos, NEEDS_KEY: {"from": min(pos, frm) if isinstance(frm, int) else pos, "by": DELTA_CHAIN}}
    if isinstance(frm, int):
        out["cfrom"] = frm
    return out
