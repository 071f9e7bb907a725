"""Pending writes as objects beside the run's newest record (layout §4a), folded into the next record.

A ``put_writes`` on a run whose newest record is of this layout is not a record of its own: it is
one *pending-writes object*, a tool outcome (``CheckpointManager.record_outcome``,
docs/format.md §25) anchored at that newest record, whose result is the encoded writes. The next
``put`` reads the objects beside its head and beside the head's parent record (the *window*),
folds them into the head as a writes record built on it would carry them (:func:`current`), so
the new checkpoint record carries them like any other, and deletes the objects it folded once it
is saved. Readers of the latest checkpoint read the newest record and the objects of its window
the same way, so the latest checkpoint and its pending writes come from one record and its
objects.

Why the window is enough (the writer's confirmation): a writer stores its object at head ``H``
and returns only once the run's head is still ``H`` (else it stores the writes again at the new
head). So a record ``R`` built on ``H`` was saved after the object was, and the record built on
``R`` lists ``H``'s objects after that: every acknowledged object is folded by then, and until
then it is in the window of the newest record. A record names the objects it folded (state
``fo``) so that a reader does not fold them twice while they are being deleted.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Sequence

from ...errors import CheckpointNotFound, ConflictError, IntegrityError, SnapstoreError
from ...format.ids import seq_hint
from .layout import Head, Rec, covers, unspan
from .state import SaverState
from . import writes as _writes

MARK = "lgpw"
"""The key marking a tool outcome's result as a pending-writes object of this layout."""

CP_MARK = "lgpc"
"""The key marking a tool outcome's result as a pending-checkpoint object (layout §4b)."""


def cp_payload(field_md: dict, st: dict, sp: list, t: int) -> dict:
    """The result JSON of one pending-checkpoint object (layout §4b): the checkpoint record's
    field ``field_md`` and state ``st`` as a record built on the run's newest record (folded)
    would hold them, its items as ``sp`` (:func:`~.layout.spans_of` into the anchor record's
    items), stored at time ``t`` (ns)."""
    return {CP_MARK: 1, "t": t, "f": field_md, "st": st, "sp": sp}


def cp_of(p: Any) -> tuple[str, dict, int] | None:
    """``(checkpoint id, payload, time)`` of a pending-checkpoint object's result, None for an
    outcome that is not one.

    Raises:
        ValueError: it is marked as one but malformed.
    """
    if not isinstance(p, dict) or p.get(CP_MARK) != 1:
        return None
    f, st, sp, t = p["f"], p["st"], p["sp"], p["t"]
    if not (isinstance(f, dict) and f.get("lg") == "C" and isinstance(f.get("id"), str) and isinstance(st, dict)
            and st.get("v") == 2 and isinstance(sp, list) and isinstance(t, int)):
        raise ValueError("a pending-checkpoint object needs f (a checkpoint field), st (a v2 state), sp and t")
    return f["id"], p, t


def is_v2(h: Head) -> bool:
    """True if ``h`` is a record of this layout (pending-writes objects are anchored only there)."""
    return h.id is not None and h.items is not None and isinstance(h.st, dict) and h.st.get("v") == 2


def payload(cid: str, new_rows: list, t: int) -> dict:
    """The result JSON of one pending-writes object: the writes ``new_rows`` (encoded rows of one
    task, :func:`~.writes.encode_rows`) for checkpoint ``cid``, stored at time ``t`` (ns)."""
    task, path = new_rows[0][0], new_rows[0][1]
    return {MARK: 1, "for": cid, "task": task, "path": path, "t": t,
            "w": [[ch, idx, kind, list(its)] for _t, _p, ch, idx, kind, its in new_rows]}


def rows_of(p: Any) -> tuple[str, list, int] | None:
    """``(checkpoint id, write rows, time)`` of a pending-writes object's result, None for an
    outcome that is not one (another caller's tool outcome).

    Raises:
        ValueError: it is marked as one but malformed.
    """
    if not isinstance(p, dict) or p.get(MARK) != 1:
        return None
    cid, task, path, t, w = p["for"], p["task"], p["path"], p["t"], p["w"]
    if not (isinstance(cid, str) and isinstance(task, str) and isinstance(path, str) and isinstance(t, int)
            and isinstance(w, list) and w):
        raise ValueError("a pending-writes object needs for, task, path (strings), t (an int) and w")
    out = []
    for row in w:
        ch, idx, kind, its = row
        if not (isinstance(ch, str) and isinstance(idx, int) and isinstance(kind, str) and isinstance(its, list)):
            raise ValueError(f"not a write row: {row!r}")
        out.append((task, path, ch, idx, kind, its))
    return cid, out, t


def window(s: SaverState, run: str, base: Head, known=()) -> list:
    """The pending objects of the window of record ``base``: beside it and beside its parent
    record, less those ``base`` folded (its state's ``fo``), as ``(time, anchor record id,
    call id, checkpoint id, rows, cp)``, oldest first: ``rows`` the writes of a pending-writes
    object (§4a; ``cp`` None), ``cp`` the payload of a pending-checkpoint object (§4b; ``rows``
    None). ``known``: call ids also left out (the caller holds them folded already).

    Raises:
        IntegrityError: an object is malformed.
    """
    skip = set(base.st.get("fo") or ()) if isinstance(base.st, dict) else set()
    skip.update(known)
    got = []
    anchors = [(a, seq_hint(a) if seq is None else seq) for a, seq in ((base.parent, None), (base.id, base.seq))
               if a is not None]
    # the run's listing vouches for both (the newest record and its parent are live), so one
    # LIST of the run's writes area, no liveness check
    found = s.manager.outcomes_beside(run, [(a, seq) for a, seq in anchors if seq is not None], skip=skip)
    for anchor, outs in found.items():
        for call, res in outs.items():
            if call in skip:
                continue
            try:
                got_ = rows_of(res)
                cp = cp_of(res) if got_ is None else None
            except (KeyError, TypeError, ValueError) as e:
                raise IntegrityError(f"run {run!r} pending object {call!r} beside record {anchor!r}",
                                     f"not a valid LangGraph pending-writes or pending-checkpoint object: "
                                     f"{type(e).__name__}: {e}") from e
            if got_ is not None:
                got.append((got_[2], anchor, call, got_[0], got_[1], None))
            elif cp is not None:
                got.append((cp[2], anchor, call, cp[0], None, cp[1]))
    got.sort(key=lambda g: (g[0], g[2]))
    return got


def fold_one(s: SaverState, run: str, v: Head, anchor: str, call: str, cid: str, new_rows: list) -> Head:
    """``v`` with one pending-writes object folded in: what a writes record built on ``v``
    for those writes would hold (writes stored already for ``cid``, per task and index, are
    left out), on the same record."""
    view = covers(v, cid)
    known = {(r[0], r[3]) for r in view["rows"]} if view is not None else set()
    fresh = [r for r in new_rows if r[3] < 0 or (r[0], r[3]) not in known]
    base = v.base or v
    folded = dict(v.folded)
    if fresh:
        items, st, md, _step = _writes.writes_record(s, run, v, cid, fresh)
        folded[cid] = folded.get(cid, []) + fresh
    else:
        items, st, md = v.items, v.st, v.md
    return Head(base.id, items, st, md, base.seq, read_at=v.read_at, parent=base.parent, base=base,
                fo=v.fo + ((anchor, call),), folded=folded, cps=v.cps)


def fold_cp(v: Head, anchor: str, call: str, items: list, st: dict, field_md: dict) -> Head:
    """``v`` with one pending-checkpoint object folded in (layout §4b): the checkpoint record it
    describes (``items``, state ``st``, field ``field_md``) as the newest record, on the same
    stored record, remembered in ``cps`` (a later one of the same id replaces it)."""
    base = v.base or v
    cid = field_md["id"]
    cps = tuple(c for c in v.cps if c[0] != cid) + ((cid, items, st, field_md, (anchor, call)),)
    return Head(base.id, items, st, field_md, base.seq, read_at=v.read_at, parent=base.parent, base=base,
                fo=v.fo + ((anchor, call),), folded=dict(v.folded), cps=cps)


def anchor_items(s: SaverState, run: str, base: Head, anchor: str) -> list:
    """The items of record ``anchor`` (the newest record ``base`` or its parent), which a
    pending-checkpoint object beside it refers to."""
    if anchor == base.id:
        return base.items
    return s.record(run, anchor, seq_hint(anchor))[0]


def cp_items(s: SaverState, run: str, base: Head, anchor: str, call: str, cp: dict) -> list:
    """The items of the pending-checkpoint object ``call`` beside ``anchor`` (payload ``cp``).

    Raises:
        IntegrityError: its spans do not fit the anchor's items.
    """
    try:
        return unspan(anchor_items(s, run, base, anchor), cp["sp"])
    except (KeyError, TypeError, ValueError) as e:
        raise IntegrityError(f"run {run!r} pending checkpoint {call!r} beside record {anchor!r}",
                             f"not a valid LangGraph pending-checkpoint object: {type(e).__name__}: {e}") from e


def current(s: SaverState, run: str, fresh: bool = False) -> Head:
    """The run's newest record with the pending-writes objects of its window folded in (the
    head a new record is built on, and the latest checkpoint's reader's): the held record
    (``fresh``: checked against the store first, :meth:`~.state.SaverState.fresh_head`) and
    one listing of each of the two anchors of its window."""
    h = s.fresh_head(run) if fresh else s.head(run)
    if not is_v2(h):
        return h
    base = h.base or h
    if h.fo and not window(s, run, base, known={c for _a, c in h.fo}):
        return h  # nothing beside it that the held one has not folded: no GET
    got = window(s, run, base)
    if sorted((a, c) for _t, a, c, _cid, _r, _cp in got) == sorted(h.fo):
        return h
    v = Head(base.id, base.items, base.st, base.md, base.seq, read_at=h.read_at, parent=base.parent)
    for _t, anchor, call, cid, rows_, cp in got:
        if cp is not None:
            v = fold_cp(v, anchor, call, cp_items(s, run, base, anchor, call, cp), cp["st"], cp["f"])
        else:
            v = fold_one(s, run, v, anchor, call, cid, rows_)
    if v.fo:
        v.base = base
    else:
        v = base
    s.heads[run] = v
    return v


def extra_rows(s: SaverState, run: str, head_id: str | None, parent_id: str | None,
               head_seq: int | None = None, reader=None) -> tuple[dict, dict]:
    """What the pending objects beside record ``head_id`` and its parent ``parent_id`` add for
    readers that list the run (``list``, a checkpoint by id): ``(write rows per checkpoint id,
    {checkpoint id: Rec}`` of the pending-checkpoint objects (``Rec.view`` holding their items
    and state; a later object of an id replaces an earlier one)``)``. Objects the newest record
    folded are left out (its ``fo``); rows folded already are dropped by the readers'
    deduplication anyway."""
    if head_id is None:
        return {}, {}
    items, st = s.record(run, head_id, seq_hint(head_id) if head_seq is None else head_seq, reader)
    h = Head(head_id, items, st, {}, head_seq, parent=parent_id)
    out: dict = {}
    cps: dict = {}
    for _t, anchor, call, cid, rows_, cp in window(s, run, h):
        if cp is not None:
            cps[cid] = Rec(anchor, seq_hint(anchor), cp["f"],
                           view=(cp_items(s, run, h, anchor, call, cp), cp["st"]))
        else:
            out.setdefault(cid, []).extend(rows_)
    return out, cps


def delete_folded(s: SaverState, run: str, fo: Sequence, flush: bool = False) -> None:
    """Delete the pending-writes objects ``fo`` (``(anchor, call id)``) now that a saved record
    carries them: queued, and deleted in one batch once ``delete_batch`` are queued for the run
    (``flush``: now). An object waiting is harmless: the record that folded it names it
    (``fo``) while it is in the newest record's window, and no reader looks beyond the window.
    A failed deletion leaves them (GC deletes them with their record)."""
    with s.lock:
        q = s.doomed.setdefault(run, [])
        q.extend(fo)
        if not q or (len(q) < s.delete_batch and not flush):
            return
        todo = list(q)
        del s.doomed[run]
    try:
        s.manager.delete_outcomes(run, todo)
    except SnapstoreError:
        pass


def flush_deletes(s: SaverState) -> None:
    """Delete every queued pending-writes object (:func:`delete_folded`), e.g. on close."""
    for run in list(s.doomed):
        delete_folded(s, run, (), flush=True)


def put_writes(s: SaverState, run: str, cid: str, writes: Sequence[tuple[str, Any]], task_id: str,
               task_path: str) -> None:
    """Store task ``task_id``'s ``writes`` for checkpoint ``cid``: one pending-writes object
    beside the run's newest record when that is of this layout, else a writes record
    (:func:`~.writes.put_writes`: an empty run). Writes stored already (per task and index) are
    skipped. Returns once the object is stored and the run's head is still the record it is
    beside (else it is stored again beside the new head). The caller holds the run's lock.

    Raises:
        ConflictError: the run kept moving (``save_attempts`` times).
        UnsupportedValueError: the serializer refuses a value.
    """
    for attempt in range(s.save_attempts):
        seen = s.seen.setdefault((run, cid), set())
        # first on the record held (no listing: the check after storing tells a moved head, and
        # writes another writer stored meanwhile are at worst stored again, then deduplicated);
        # after a move, on the newest record with its window read
        head = s.head(run) if attempt == 0 else current(s, run)
        if not is_v2(head):
            return _writes.put_writes(s, run, cid, writes, task_id, task_path)
        todo = _writes.writes_to_store(head, cid, seen, writes, task_id)
        if not todo:
            return
        new_rows = _writes.encode_rows(s, run, todo, task_id, task_path)
        call = secrets.token_hex(8)
        try:
            s.manager.record_outcome(run, head.id, call, payload(cid, new_rows, time.time_ns()))
        except CheckpointNotFound:
            s.forget(run)  # the record went (deleted, pruned): store beside the new head
            continue
        now = s.manager.head(run)
        if now is not None and now.id == head.id:
            s.heads[run] = fold_one(s, run, head, head.id, call, cid, new_rows)
            seen.update((task_id, w) for w, _c, _v in todo if w >= 0)
            return
        s.forget(run)  # the run moved meanwhile: its new head may not have folded it, store it there too
    raise ConflictError(f"put_writes: run {run!r} kept moving ({s.save_attempts} attempts)")
