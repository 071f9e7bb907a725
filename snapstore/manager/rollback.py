"""Rollback and deletion: log records that move a run's head back (rollback records) or end the
run (tombstones), and removing the records they hide (docs/format.md §17, §20).

Layer 4. Sequence numbers are never reused: a rollback publishes a new record at the position
after the head (target: the checkpoint rolled back to), deleting a run publishes a tombstone
first, so a writer still holding the old head conflicts instead of reviving it. Moving the head
is conditional like a save (:func:`snapstore.manager.views.head_check`). The public operations are
:meth:`~snapstore.manager.facade.CheckpointManager.rollback`, ``delete`` and ``delete_many``; functions take
the manager (``mgr``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from . import callers, history, publish, views
from .checkpoint import Checkpoint, make_checkpoint
from ..errors import CheckpointNotFound, ConflictError, PreconditionFailed, RunNotFound
from ..format import keys
from ..format.ids import check_checkpoint_id, new_write_id
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest


def rollback(mgr, run_id: str, checkpoint_id: str, *, expect_head=None) -> Checkpoint:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.rollback` (arguments, return value and
    errors as documented there)."""
    check_checkpoint_id(checkpoint_id)
    exp = views.expect(expect_head)
    with mgr.state.run_lock(run_id):
        if not mgr.state.exists():
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        rk = mgr.state.run_key(run_id)
        check = views.head_check(mgr, run_id, rk, exp, callers.seen(mgr, run_id), "rollback")
        newest = mgr.repo.head(rk)
        if check is not None:
            check(newest)
        try:
            target = mgr.repo.find_checkpoint(rk, checkpoint_id)
        except CheckpointNotFound:
            if check is not None:
                check(mgr.repo.head(rk))  # gone because the run moved: that is the conflict
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None

        def make(seq, _n):
            return Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id=new_write_id(),
                            created=datetime.now(timezone.utc), target={"seq": target.seq, "id": checkpoint_id},
                            segs=history.carried_segs(_n))
        rec = newest
        if not (newest is not None and newest.kind == KIND_CHECKPOINT and newest.seq == target.seq):
            if check is not None:
                rec = publish.publish_record(mgr, run_id, rk, newest, make(newest.seq + 1, newest), "rollback")
            else:
                rec = publish.append_record(mgr, run_id, rk, make)
            remove_range(mgr, rk, target.seq, rec.seq)
        v = views.load_view(mgr, run_id)
        msgs, ls = mgr.repo.load_with_state(target, v.head_segs)
        v.list_state = ls
        views.saw(mgr, run_id, checkpoint_id, rec.seq, rec.write_id)
        v.live = None
        return make_checkpoint(mgr.repo, target, msgs)


def delete(mgr, run_id: str, checkpoint_id: str | None = None, *, expect_head=None) -> None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.delete` (arguments, return value and
    errors as documented there)."""
    exp = views.expect(expect_head)
    with mgr.state.run_lock(run_id):
        if checkpoint_id is not None:
            check_checkpoint_id(checkpoint_id)
        if not mgr.state.exists():
            if checkpoint_id is None:
                raise RunNotFound(f"run {run_id!r} not found")
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        rk = mgr.state.run_key(run_id)
        check = views.head_check(mgr, run_id, rk, exp, callers.seen(mgr, run_id), "delete")
        if checkpoint_id is None:
            newest = mgr.repo.head(rk)
            if newest is None or history.resolve(mgr.repo, rk, newest) is None:
                if exp is not None and check is not None:
                    check(newest)
                raise RunNotFound(f"run {run_id!r} not found")
            if check is not None:
                check(newest)
            tomb = delete_run(mgr, run_id, rk, newest if check is not None else None)
            mgr.state.views.pop(run_id, None)
            views.saw(mgr, run_id, None, tomb.seq, tomb.write_id)
        else:
            check_checkpoint_id(checkpoint_id)
            if exp is not None:
                check(mgr.repo.head(rk))  # explicit compare-and-swap: whatever is deleted
            try:
                m = mgr.repo.find_checkpoint(rk, checkpoint_id)
            except CheckpointNotFound:
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
            rec = delete_checkpoints(mgr, run_id, rk, [(m.seq, checkpoint_id)], check)
            mgr.state.views.pop(run_id, None)
            if rec is not None:
                views.saw_record(mgr, run_id, rk, rec)


def delete_many(mgr, run_id: str, checkpoint_ids, *, expect_head=None) -> list[str]:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.delete_many` (arguments, return value and
    errors as documented there)."""
    exp = views.expect(expect_head)
    wanted = {check_checkpoint_id(c) for c in checkpoint_ids}
    with mgr.state.run_lock(run_id):
        if not wanted or not mgr.state.exists():
            return []
        rk = mgr.state.run_key(run_id)
        check = views.head_check(mgr, run_id, rk, exp, callers.seen(mgr, run_id), "delete")
        if exp is not None:
            check(mgr.repo.head(rk))
        doomed = [(s, c) for s, c, _ in history.scan_bulk(mgr.repo, rk) if c in wanted]
        if doomed:
            rec = delete_checkpoints(mgr, run_id, rk, doomed, check)
            mgr.state.views.pop(run_id, None)
            if rec is not None:
                views.saw_record(mgr, run_id, rk, rec)
        return [c for _, c in doomed]


def remove_range(mgr, rk: str, low: int, high: int) -> list:
    """Remove every record with low < seq < high (and index records; young records become void
    records, :meth:`~snapstore.repo.log.records.LogRecords.remove_records`). Returns removed (seq, id)."""
    seqs = [s for s in mgr.repo.manifest_seqs(rk) if low < s < high]
    got = history.read_many(mgr.repo, rk, seqs)
    entries = [(s, m.checkpoint_id if (m and m.kind == KIND_CHECKPOINT) else None) for s, m in got.items()]
    mgr.repo.remove_records(rk, entries)
    return entries


def delete_run(mgr, run_id: str, rk: str, newest: Manifest | None = None) -> Manifest:
    """Publish a tombstone (at exactly the position after ``newest`` when given: conditional;
    else at the next free one), then remove the run's older records. Returns the tombstone."""
    def make(seq, _n):
        return Manifest(kind=KIND_TOMBSTONE, run_id=run_id, seq=seq, write_id=new_write_id(),
                        created=datetime.now(timezone.utc))
    if newest is not None:
        tomb = publish.publish_record(mgr, run_id, rk, newest, make(newest.seq + 1, newest), "delete")
    else:
        tomb = publish.append_record(mgr, run_id, rk, make)
    mgr.repo.store.delete_many(i.key for i in mgr.repo.store.list(keys.index_prefix(rk)))
    mgr.repo.remove_records(rk, [(s, None) for s in mgr.repo.manifest_seqs(rk) if s < tomb.seq])
    return tomb


def _newest(mgr, rk: str, listed) -> Manifest | None:
    """The run's newest record: with a listing (:class:`~snapstore.manager.summaries.Listing`)
    whose newest object is still the newest (same key and ETag in a LIST of one key), the record
    the listing read (no GET); otherwise :meth:`~snapstore.repo.log.records.LogRecords.head`."""
    top = listed.infos.get(listed.top) if listed is not None and listed.top is not None else None
    if top is not None and listed.top_record is not None and top.etag:
        info = next(iter(mgr.repo.store.list(keys.manifests_prefix(rk), limit=1)), None)
        if info is not None and (info.key, info.etag) == (top.key, top.etag):
            return listed.top_record
    return mgr.repo.head(rk)


def delete_checkpoints(mgr, run_id: str, rk: str, doomed: list, check=None, listed=None,
                       store_now=None) -> Manifest | None:
    """Delete live checkpoints ``[(seq, id)]``; if the head is among them, move the head first.

    ``listed``: the :class:`~snapstore.manager.summaries.Listing` the caller decided from, or None.
    While the run's newest record is still the one listed at ``listed.top`` (a LIST of one key
    shows the same object: nothing published since), its live checkpoints, its newest record
    and, when the head does not move, the listed objects' ages are taken from it instead of
    being read again; otherwise, and after a lost race, the run is read again
    (:func:`snapstore.manager.history.scan`). ``store_now``: the store's clock for the removals
    (:meth:`~snapstore.repo.log.records.LogRecords.store_clock`), or None: one probe.

    The record that moves the head is published at exactly the position after the head the
    decision was based on, so a checkpoint saved concurrently is never hidden by it. With
    ``check`` (see :func:`snapstore.manager.views.head_check`) the head must pass it before it is moved, and a run
    that moves meanwhile raises ConflictError; without, the decision is made again.

    Returns:
        The record that moved the head, or None if the head did not move.
    """
    doomed_seqs = {s for s, _ in doomed}
    moved = None
    infos = None
    for _ in range(16):
        newest = _newest(mgr, rk, listed)
        if listed is not None and newest is not None and newest.seq == listed.top:
            live = listed.pairs()
            infos = listed.infos
        else:
            live = [(s, c) for s, c, _ in history.scan(mgr.repo, rk)]
            infos = None
        listed = None  # a retry reads the run again
        if newest is None or not live or live[0][0] not in doomed_seqs:
            break
        if check is not None:
            check(newest)
        survivors = [(s, c) for s, c in live if s not in doomed_seqs]
        seq = newest.seq + 1
        if survivors:
            ts, tc = survivors[0]
            rec = Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id=new_write_id(),
                           created=datetime.now(timezone.utc), target={"seq": ts, "id": tc},
                           segs=history.carried_segs(newest))
        else:
            ts = -1
            rec = Manifest(kind=KIND_TOMBSTONE, run_id=run_id, seq=seq, write_id=new_write_id(),
                           created=datetime.now(timezone.utc))
        try:
            data = mgr.repo.publish(rk, rec)
        except PreconditionFailed:
            if check is not None:
                raise ConflictError(f"run {run_id!r} changed while deleting its head checkpoint; read the "
                                    "head again and retry") from None
            continue  # the run moved on: decide again
        publish.after_publish(mgr, rk, None, rec.seq, data)
        moved = rec
        infos = None  # the range below the new record is listed again (remove_range)
        # everything between the new head and the record is now hidden: remove it (incl. doomed)
        done = {s for s, _ in remove_range(mgr, rk, ts, rec.seq)}
        if not survivors:
            mgr.repo.store.delete_many(i.key for i in mgr.repo.store.list(keys.index_prefix(rk)))
        doomed = [(s, c) for s, c in doomed if s not in done]
        break
    else:
        raise ConflictError(f"run {run_id!r} is changing too fast; gave up deleting")
    mgr.repo.remove_records(rk, doomed, infos, store_now)
    return moved
