"""DeltaChannel history (layout §5): the sections a checkpoint record carries, and the walk.

A checkpoint put on top of its parent's newest record carries, per DeltaChannel channel it does
not hold, its history section (the seed and the on-path writes), so the latest checkpoint's
history is read from one record. Otherwise (records of the earlier layout, a stale section) the
parent chain is walked over one listing of the run.
"""

from __future__ import annotations

import time
from typing import Sequence

from ...errors import IntegrityError, SnapstoreError
from .deps import DeltaChannelHistory
from .layout import Head, Rec, RunIndex, covers, decode_checkpoint, dedup, head_view, parse_hist
from . import sidewrites
from .state import SaverState
from .writes import own_rows, writes_of


def history_for(head: Head, parent: str | None, values: dict, md: dict) -> dict | None:
    """Per DeltaChannel channel that the new checkpoint does not hold: its history section
    (items), computed from the parent's record as the run's newest record ``head`` carries
    it. Channels whose parent history is unknown here are left out (readers then walk).

    Args:
        parent: the parent checkpoint id (None: a root); values: the new checkpoint's channel
            values; md: its LangGraph metadata (``counters_since_delta_snapshot`` names the
            DeltaChannel channels).
    Returns:
        ``{channel: [items]}``, or None when no channel needs a section.
    """
    counters = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
    need = [ch for ch in (counters if isinstance(counters, dict) else ()) if ch not in values]
    if not need:
        return None
    if parent is None:
        return {ch: [] for ch in need}
    view = covers(head, parent)
    if view is None or view["base"] != "c" or view["pre"] or view["stale"]:
        return None
    items, cst = view["items"], view["cst"]
    lay = {row[0]: row for row in cst["layout"]}
    phist = cst.get("hist") or {}
    pmeta = items[cst["meta"]]["lgmeta"]
    pending = dedup(view["rows"])
    out = {}
    for ch in need:
        ws = []
        for task, _p, c, _i, kind, its in pending:
            if c == ch:
                ws.append({"lgw": [task, kind, len(its)]})
                ws.extend(its)
        if ch in lay:
            _c, kind, start, count = lay[ch]
            out[ch] = [{"lgs": [kind, count]}] + items[start:start + count] + ws
        elif ch in phist:
            start, count = phist[ch]
            out[ch] = items[start:start + count] + ws
        elif pmeta.get("parent") is None:
            out[ch] = ws
    return out


def delta_channel_history(s: SaverState, run: str, cid: str | None,
                          channels: Sequence[str]) -> dict[str, DeltaChannelHistory]:
    """``get_delta_channel_history`` of checkpoint ``cid`` (None: the latest) of ``run``: from
    the newest record's sections when they answer, else by :func:`delta_walk` over the run's
    newest records, more of them until the walk ends inside the window.

    Raises:
        IntegrityError: a record read is not a valid LangGraph record.
    """
    with s.rlock(run):
        h = s.heads.get(run)
        if h is None or h.items is None or time.monotonic() - h.read_at > s.head_fresh_s:
            h = sidewrites.current(s, run, fresh=True)  # with the pending-writes objects beside it (§4a)
        got = hist_from_head(s, run, h, cid, channels)
        if got is not None:
            return got
        if cid is None and h.cps:
            # the latest is a pending-checkpoint object (§4b), not the newest record's own
            hv = head_view(h)
            cid = hv[0] if hv is not None else h.cps[-1][0]
    limit = 64
    while True:
        # the newest records of the run, more of them until the walk ends inside the window
        # (a DeltaChannel snapshot is at most snapshot_frequency updates back)
        ix = s.index(run, limit)
        exhausted = ix.listed < limit
        for vcid, items, st, field_md, _oc in h.cps:  # pending-checkpoint objects (§4b)
            ix.cps[vcid] = Rec(h.id, h.seq, field_md, view=(items, st))
        out = delta_walk(s, run, ix, cid, channels, exhausted, h.folded)
        if out is not None:
            return out
        limit *= 4


def hist_from_head(s: SaverState, run: str, h: Head, cid: str | None, channels: Sequence[str]) -> dict | None:
    """The history of ``channels`` from the sections of the newest record ``h``, or None when
    it does not carry checkpoint ``cid`` (None: the latest) with a section for each."""
    hv = head_view(h)
    if hv is None or (cid is not None and cid != hv[0]):
        return None
    view = hv[1]
    if view["stale"]:
        return None
    hist = view["cst"].get("hist") or {}
    if not all(ch in hist for ch in channels):
        return None
    try:
        return {ch: parse_hist(s.codec, view["items"], hist[ch][0], hist[ch][1], ch) for ch in channels}
    except SnapstoreError:
        raise
    except Exception as e:
        raise IntegrityError(f"run {run!r} record {h.id!r} (log position {h.seq})",
                             f"not a valid LangGraph history section: {type(e).__name__}: {e}") from e


def delta_walk(s: SaverState, run: str, ix: RunIndex, cid: str | None, channels: Sequence[str],
               complete: bool, extra: dict | None = None) -> dict | None:
    """The history walk over the records ``ix`` holds; None if it needs older records
    (``complete``: ``ix`` is the whole run, a missing ancestor ends the walk; ``extra``: write
    rows per checkpoint id from the pending-writes objects beside the newest record, §4a)."""
    extra = extra or {}
    target = ix.cps.get(cid) if cid else ix.latest()
    if target is None and not complete:
        return None
    remaining = set(channels)
    blocks: list[dict] = []   # per ancestor, newest ancestor first: ch -> [writes]
    seeds: dict = {}
    cur = target.md.get("parent") if target is not None else None
    while cur and remaining:
        a = ix.cps.get(cur)
        if a is None:
            if not complete:
                return None
            break
        wrecs = [w for w in ix.writes.get(cur, []) if remaining & set(w.md.get("chs") or ())]
        block: dict = {}
        # the writes its record carries (stored before it was put): the writes records that
        # held them may be gone (retention keeps a delta chain from the ancestor's record on)
        own = (remaining & set(a.md.get("wch") or ())) and own_rows(run, a, *s.cp_record(run, a))
        more = [r for r in extra.get(cur, ()) if r[2] in remaining]
        if wrecs or own or more:
            for w in writes_of(s, run, ix.writes.get(cur, []), list(own or ()) + more):
                if w[1] in remaining:
                    block.setdefault(w[1], []).append(w)
        blocks.append(block)
        here = remaining & set(a.md.get("chs") or ())
        if here:
            values = decode_checkpoint(s.codec, *s.cp_record(run, a), cur, run)["channel_values"]
            for ch in here:
                seeds[ch] = values[ch]
            remaining -= here
        cur = a.md.get("parent")
    out: dict = {}
    for ch in channels:
        ws: list = []
        for block in reversed(blocks):
            ws.extend(block.get(ch, []))
        entry: DeltaChannelHistory = {"writes": ws}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        out[ch] = entry
    return out
