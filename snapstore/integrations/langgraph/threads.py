"""Whole-thread operations: delete, delete by LangGraph run id, copy, prune (retention).

Each acts on a run's head as it lists it, with an explicit ``expect_head``, and is decided again
on the new head when another writer moved the run meanwhile (:func:`retry_moved`). Only
manifests go; ``gc()`` reclaims the data.
"""

from __future__ import annotations

from typing import Sequence

from ...errors import CheckpointNotFound, ConflictError, InvalidInputError, RunNotFound
from ...format.ids import seq_hint
from ...manager.facade import EMPTY_RUN
from .ids import ns_run_id_for, run_id_for
from . import checkpoints, sidewrites
from .layout import Head
from .registry import register, runs
from .state import SaverState


def retry_moved(s: SaverState, run: str, op):
    """Run ``op()`` (which reads the run's head and acts on it with an explicit
    ``expect_head``), again when another writer moved the run meanwhile, at most
    ``save_attempts`` times; returns what ``op`` returns.

    The saver is one caller per LangGraph thread whatever OS thread or asyncio task calls it
    (LangGraph puts from its executor threads): operations that move a run's head pass the
    head they just read as ``expect_head`` instead of relying on what the calling context
    saw (docs/format.md §20), so they conflict only with a writer that moved the run between
    that read and the operation, and are then decided again on the new head.

    Raises:
        ConflictError: the run kept moving.
    """
    for attempt in range(s.save_attempts):
        try:
            return op()
        except ConflictError:
            if attempt == s.save_attempts - 1:
                raise
            s.forget(run)
    raise AssertionError("unreachable")


def delete_run(s: SaverState, run: str) -> None:
    """Tombstone ``run`` at the head it has now (nothing for a missing run)."""
    got = s.manager.head(run)
    if got is None:
        return
    try:
        s.manager.delete(run, expect_head=got.id)
    except RunNotFound:
        pass


def delete_thread(s: SaverState, thread_id: str) -> None:
    """Delete every namespace run of the thread, then its registry."""
    for run, _t, _ns in runs(s, thread_id):
        with s.rlock(run):
            try:
                retry_moved(s, run, lambda: delete_run(s, run))
            finally:
                s.forget(run)
    reg = ns_run_id_for(str(thread_id))
    retry_moved(s, reg, lambda: delete_run(s, reg))  # last: its runs are gone


def delete_for_runs(s: SaverState, run_ids: Sequence[str]) -> None:
    """Delete the checkpoints whose LangGraph metadata ``run_id`` is one of ``run_ids``, with
    their writes, in every LangGraph run of the repository."""
    wanted = {str(r) for r in run_ids}
    if not wanted:
        return
    for run, _t, _ns in runs(s):
        with s.rlock(run):
            def once():
                checkpoints.materialize(s, run)  # pending-checkpoint objects into a record (§4b)
                ix = s.index(run)
                doomed = []
                for cid, rec in ix.cps.items():
                    if s.codec.md_from(rec.md).get("run_id") in wanted:
                        doomed.extend(r.sid for r in ix.all_of(cid))
                if doomed:
                    _drop_folded(s, run, doomed)
                    s.forget(run)
                    s.manager.delete_many(run, doomed, expect_head=ix.head)
            retry_moved(s, run, once)


def _drop_folded(s: SaverState, run: str, doomed: list) -> None:
    """Delete the pending objects (layout §4a, §4b) that the records ``doomed`` folded (their
    state's ``fo``), beside the records of their window (a record's parent and grandparent):
    once a record is deleted nothing names them, and a pending-checkpoint object left beside
    the record that becomes the newest would bring a deleted checkpoint back."""
    sidewrites.flush_deletes(s)
    listed = s.manager.list(run)
    parent = {c.id: c.parent_id for c in listed}
    seq = {c.id: c.seq for c in listed}
    pairs = []
    for sid in doomed:
        if sid not in seq:
            continue
        _items, st = s.record(run, sid, seq[sid])
        calls = (st.get("fo") or ()) if isinstance(st, dict) else ()
        p = parent.get(sid)
        for anchor in (p, parent.get(p) if p else None):
            if anchor:
                pairs.extend((anchor, c) for c in calls)
    if pairs:
        s.manager.delete_outcomes(run, pairs)


def copy_thread(s: SaverState, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every checkpoint and write of a thread (all namespaces) to an empty thread: a fork
    of the source's newest checkpoint, then every record saved again in the source's order
    (deduplicated against the fork), then the fork's base record deleted.

    Raises:
        ConflictError: the target thread already has checkpoints in a namespace being copied.
    """
    for run, _t, ns in runs(s, source_thread_id):
        dst = run_id_for(target_thread_id, ns)
        with s.rlock(dst):
            if s.manager.list(dst, limit=1):
                raise ConflictError(f"copy_thread: thread {target_thread_id!r} already has checkpoints "
                                    f"in namespace {ns!r}")
            _copy_run(s, run, dst)


def _copy_run(s: SaverState, run: str, dst: str) -> None:
    """Copy the records of ``run`` to the empty run ``dst`` (see :func:`copy_thread`)."""
    ix = s.index(run)
    if not ix.recs:
        return
    base = None
    latest = ix.latest()
    register(s, dst)
    if latest is not None:
        base = s.manager.fork(run, latest.sid, dst).id
    s.forget(dst)
    moved: dict = {}  # source position -> (target id, target position)
    by_sid: dict = {}  # source record id -> target record id
    prev = base
    for r in reversed(ix.recs):
        cp = s.manager.get(run, r.sid)
        st = cp.session_state
        md = cp.metadata
        if isinstance(md, dict) and isinstance(md.get("acc"), int):
            md = dict(md)
            if md["acc"] in moved:
                md["acc"] = moved[md["acc"]][1]
            else:
                del md["acc"]
        sid = s.manager.save(dst, cp.messages, step=cp.step, metadata=md, session_state=st,
                             checkpoint_id=r.sid if r.md.get("lg") == "c" else None, parent_id=prev,
                             expect_head=prev or EMPTY_RUN)
        prev = sid
        moved[r.seq] = (sid, s.manager.head(dst).seq if r.md.get("lg") == "c" else seq_hint(sid))
        by_sid[r.sid] = sid
    if base is not None:
        s.manager.delete_many(dst, [base], expect_head=prev)
    # the pending-writes objects of the source's window (§4a), beside the copies of their records
    for anchor in (ix.head, ix.head_parent):
        if anchor in by_sid:
            try:
                outs = s.manager.outcomes(run, anchor)
            except CheckpointNotFound:
                continue
            for call, res in outs.items():
                s.manager.record_outcome(dst, by_sid[anchor], call, res)
    s.forget(dst)


def prune(s: SaverState, thread_ids: Sequence[str], strategy: str, delete) -> None:
    """``SnapstoreSaver.prune``: ``"keep_latest"`` runs :func:`prune_run` on every namespace of
    each thread; ``"delete"`` calls ``delete(thread_id)`` (the saver's ``delete_thread``).

    Raises:
        InvalidInputError: an unknown strategy.
    """
    if strategy not in ("keep_latest", "delete"):
        raise InvalidInputError(f"prune: strategy must be 'keep_latest' or 'delete', got {strategy!r}")
    for t in thread_ids:
        if strategy == "delete":
            delete(t)
            continue
        for run, _t, _ns in runs(s, t):
            with s.rlock(run):
                retry_moved(s, run, lambda: prune_run(s, run))


def _has_outcomes(s: SaverState, run: str, ix) -> bool:
    """True if pending-writes objects beside the newest record's parent are not folded into the
    newest record (layout §4a: that parent is then in the window readers use)."""
    head = next((r for r in ix.recs if r.sid == ix.head), None)
    if head is None:
        return False
    items, st = s.record(run, head.sid, head.seq)
    got = sidewrites.window(s, run, Head(head.sid, items, st, head.md, head.seq, parent=ix.head_parent))
    return any(anchor == ix.head_parent for _t, anchor, _c, _cid, _r, _cp in got)


def prune_run(s: SaverState, run: str) -> None:
    """``prune(strategy="keep_latest")`` of one run, against the head it lists: keeps the latest
    checkpoint, its writes and the DeltaChannel chain it rebuilds from."""
    checkpoints.materialize(s, run)  # pending-checkpoint objects into a record (layout §4b)
    ix = s.index(run)
    latest = ix.latest()
    if latest is None:
        return
    keep = {latest.sid}
    keep.update(w.sid for w in ix.writes.get(latest.md["id"], []))
    # the newest record, and its parent while pending-writes objects not folded into a record
    # yet are beside it (layout §4a: the anchors of the newest record's window)
    if ix.head is not None:
        keep.add(ix.head)
    if ix.head_parent is not None and ix.head_parent not in keep and _has_outcomes(s, run, ix):
        keep.add(ix.head_parent)
    md = s.codec.md_from(latest.md)
    delta = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
    remaining = set(delta or ()) - set(latest.md.get("chs") or ())
    cur = latest.md.get("parent")
    while cur and remaining:
        a = ix.cps.get(cur)
        if a is None:
            break
        keep.add(a.sid)
        keep.update(w.sid for w in ix.writes.get(cur, []))
        remaining -= set(a.md.get("chs") or ())
        cur = a.md.get("parent")
    doomed = [r.sid for r in ix.recs if r.sid not in keep]
    if doomed:
        s.forget(run)
        s.manager.delete_many(run, doomed, expect_head=ix.head)
