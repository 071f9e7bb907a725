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

from dataclasses import dataclass
from datetime import datetime, timezone

from . import callers, firstread, history, publish, views
from .checkpoint import Checkpoint, make_checkpoint
from ..errors import CheckpointNotFound, ConflictError, PreconditionFailed, RunNotFound
from ..format import keys
from ..format.ids import check_checkpoint_id, new_write_id, seq_hint
from ..format.liveness import LogWalk
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest, is_void, record_positions
from ..repo.log import runmarks
from ..repo.log.pages import range_infos
from ..repo.log.records import _UNSET


ROLLBACK_PAGE = 64
"""Keys of the run's newest positions a rollback lists first: its head and, for a rollback up to
about that far back, the whole range it hides (ETags and ages for the removal, without a
second LIST)."""


def rollback(mgr, run_id: str, checkpoint_id: str, *, expect_head=None) -> Checkpoint:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.rollback` (arguments, return value and
    errors as documented there).

    Requests, in about five round trips whatever the run's length: (1) one LIST of the run's
    newest positions (beside the config GET and versioning check of a fresh manager,
    :mod:`snapstore.manager.firstread`); (2) the head's GET, the target's GET, the GETs of the
    records the rollback hides (their ids name index records to delete) and the ``r`` run marker
    at the position after the listed head, together; (3) the rollback record's create-only PUT,
    while the target's segment packs are fetched beside; (4)-(5) the removal of the hidden range
    (:meth:`~snapstore.repo.log.records.LogRecords.remove_records`).
    """
    check_checkpoint_id(checkpoint_id)
    exp = views.expect(expect_head)
    with mgr.state.run_lock(run_id):
        known_at = mgr.state.clock()
        early = firstread.early_listing(mgr, run_id, ROLLBACK_PAGE)
        if not mgr.state.exists():
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        repo = mgr.repo
        rk = mgr.state.run_key(run_id)
        check = views.head_check(mgr, run_id, rk, exp, callers.seen(mgr, run_id), "rollback")
        listed = firstread.listed(early, rk)
        if listed is None:
            known_at = mgr.state.clock()
            listed = list(repo.store.list(keys.manifests_prefix(rk), limit=ROLLBACK_PAGE))
        positions = record_positions(listed)
        top = positions[0] if positions else None
        hint = seq_hint(checkpoint_id)
        pool = repo.pool
        f_head = pool.submit(repo.head, rk, listed)
        f_target = pool.submit(repo.find_checkpoint, rk, checkpoint_id)
        hidden = [x for x in positions if hint is not None and hint < x < top]  # (the head: f_head)
        f_hidden = pool.submit(history.read_many, repo, rk, hidden) if hidden else None
        # the r marker of the record at top + 1 (a marker left by a rollback that does not happen
        # is harmless: runs() reads that run's head, docs/format.md §13)
        f_mark = pool.submit(runmarks.before_publish, repo.store, rk, _probe_rollback(run_id, top + 1), False) \
            if top is not None and top != hint else None
        try:
            newest = f_head.result()
            if check is not None:
                check(newest)
            try:
                target = f_target.result()
            except CheckpointNotFound:
                if check is not None:
                    check(repo.head(rk))  # gone because the run moved: that is the conflict
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
        except BaseException:
            for f in (f_hidden, f_mark):
                if f is not None:
                    f.exception()
            raise
        segs = history.carried_segs(newest)
        f_load = pool.submit(repo.load_with_state, target, segs or None)  # the packs, beside the publish

        def make(seq, _n):
            return Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id=new_write_id(),
                            created=datetime.now(timezone.utc), target={"seq": target.seq, "id": checkpoint_id},
                            segs=history.carried_segs(_n))
        rec = newest
        try:
            if not (newest is not None and newest.kind == KIND_CHECKPOINT and newest.seq == target.seq):
                pending = _UNSET
                if f_mark is not None:
                    pend = f_mark.result()  # raises if the marker could not be written: nothing published
                    if newest is not None and newest.seq == top:
                        pending = pend
                if check is not None:
                    rec = publish.publish_record(mgr, run_id, rk, newest, make(newest.seq + 1, newest), "rollback",
                                                 pending=pending)
                else:
                    rec = publish.append_record(mgr, run_id, rk, make, first=newest, pending=pending)
                got = None
                if rec.seq == top + 1 and newest.seq == top:
                    got = dict(f_hidden.result()) if f_hidden is not None else {}
                    got[top] = newest
                remove_range(mgr, rk, target.seq, rec.seq, listed if got is not None else None, got)
            msgs, ls = f_load.result()
        except BaseException:
            for f in (f_hidden, f_mark, f_load):
                if f is not None:
                    f.exception()
            raise
        v = mgr.state.views.get(run_id) or views.RunView()
        v.head_seq, v.head_write_id = rec.seq, rec.write_id
        v.head_segs = rec.segment_list() if rec.kind != KIND_TOMBSTONE else []
        v.head, v.list_state, v.live = target, ls, None
        v.confirmed_at, v.loaded = known_at, True
        mgr.state.views[run_id] = v
        views.saw(mgr, run_id, checkpoint_id, rec.seq, rec.write_id)
        return make_checkpoint(repo, target, msgs)


def _probe_rollback(run_id: str, seq: int) -> Manifest:
    """A stand-in rollback record at ``seq``: what :func:`snapstore.repo.log.runmarks.before_publish`
    needs to name its ``r`` marker (kind and position)."""
    return Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id="0" * 16,
                    created=datetime.now(timezone.utc), target={"seq": 0, "id": "x"})


def delete(mgr, run_id: str, checkpoint_id: str | None = None, *, expect_head=None) -> None:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.delete` (arguments, return value and
    errors as documented there).

    Deleting one checkpoint costs about five round trips whatever the run's length: (1) one LIST
    of the run's newest positions (beside the config GET and versioning check of a fresh
    manager); (2) the GETs of the newest records and of the checkpoint, and the ``r`` run marker
    at the position after the listed head, together (:func:`read_newest`); (3) the create-only
    PUT of the rollback record when the head moves; (4)-(5) the removal of what it hides
    (:meth:`~snapstore.repo.log.records.LogRecords.remove_records`). When those reads do not
    settle it (deep rollback chains, a run that changed between LIST and GET) the run is read
    again (:func:`delete_checkpoints`)."""
    exp = views.expect(expect_head)
    with mgr.state.run_lock(run_id):
        early = None
        if checkpoint_id is not None:
            check_checkpoint_id(checkpoint_id)
            early = firstread.early_listing(mgr, run_id, ROLLBACK_PAGE)  # beside the config GET
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
            fresh = read_newest(mgr, run_id, rk, checkpoint_id, firstread.listed(early, rk))
            if exp is not None:
                if fresh is not None:  # explicit compare-and-swap: whatever is deleted
                    check(fresh.newest, fresh.got)
                else:
                    check(mgr.repo.head(rk))
            m = fresh.target if fresh is not None else None
            if m is None:
                try:
                    m = mgr.repo.find_checkpoint(rk, checkpoint_id)
                except CheckpointNotFound:
                    raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
            rec = delete_checkpoints(mgr, run_id, rk, [(m.seq, checkpoint_id)], check, fresh=fresh)
            mgr.state.views.pop(run_id, None)
            if rec is not None:
                known = fresh.got.get(int(rec.target["seq"])) if fresh is not None and rec.target else None
                if known is not None and known.kind == KIND_CHECKPOINT and known.checkpoint_id == rec.target["id"]:
                    views.saw(mgr, run_id, known.checkpoint_id, rec.seq, rec.write_id)  # read in the wave
                else:
                    views.saw_record(mgr, run_id, rk, rec)


HEAD_WAVE = 4
"""Records a checkpoint delete reads in its first wave, newest first: the head and the records
below it (a rollback record or a void among them costs no second round trip)."""


@dataclass
class Fresh:
    """A run's newest records read in one wave after one LIST (:func:`read_newest`): what a
    checkpoint delete decides from when nothing is published meanwhile.

    Attributes:
        newest: the run's newest record (Manifest) at the listed top position.
        top: that position (int).
        live: ``[(seq, checkpoint id)]`` of the live checkpoints newest first, down to the first
            one that is not ``target`` or to the end of the run's live checkpoints (complete
            for the decision of :func:`delete_checkpoints`).
        target: the checkpoint's manifest, or None (not found among the reads: look it up).
        listed: the LIST page (ObjectInfos, newest first) the reads followed.
        infos: ``{seq: ObjectInfo}`` of the page; ``covers(seq)`` tells whether a position is in it.
        got: ``{seq: Manifest or None}`` of every record read.
        pending: the ``r`` marker written at ``top + 1`` (a Pending), or ``_UNSET``: none.
    """

    newest: Manifest
    top: int
    live: list
    target: Manifest | None
    listed: list
    infos: dict
    got: dict
    pending: object = _UNSET

    def covers(self, seq: int) -> bool:
        """True when the listing shows every object at ``seq`` (its page reached below it)."""
        return len(self.listed) < ROLLBACK_PAGE or (bool(self.infos) and seq >= min(self.infos))


def read_newest(mgr, run_id: str, rk: str, checkpoint_id: str, listed: list | None) -> Fresh | None:
    """One wave for deleting checkpoint ``checkpoint_id`` of run key ``rk``: list the run's newest
    :data:`ROLLBACK_PAGE` positions (unless ``listed``, the page :mod:`~snapstore.manager.firstread`
    sent beside the config GET, is given), then GET the newest :data:`HEAD_WAVE` records, the
    checkpoint's own record (its position from its id) and, when that position is among the
    newest records read (so the head may move), the ``r`` run marker at the position after the
    listed head (docs/format.md §13: a writer may write it beside its reads; one with no
    rollback record at its position only makes ``runs()`` read that run's head), all together.

    Args:
        mgr: the manager. run_id: the run. rk: its key segment. checkpoint_id: a checked id.
        listed: ObjectInfos of the run's manifests, newest first, or None.
    Returns:
        A :class:`Fresh`, or None when the wave does not settle the decision (no record, a head
        gone between LIST and GET, the live checkpoints below the head out of reach): the
        caller reads the run the usual way.
    Raises:
        IntegrityError: a record read is corrupt; StoreError: a request failed (the marker's
        failure too: nothing was published).
    """
    repo = mgr.repo
    if listed is None:
        listed = list(repo.store.list(keys.manifests_prefix(rk), limit=ROLLBACK_PAGE))
    positions = record_positions(listed)
    if not positions:
        return None
    top = positions[0]
    chunk = positions[:HEAD_WAVE]
    hint = seq_hint(checkpoint_id)
    reads = list(chunk) + ([hint] if hint is not None and hint not in chunk and hint in positions else [])
    pool = repo.pool
    f_mark = pool.submit(runmarks.before_publish, repo.store, rk, _probe_rollback(run_id, top + 1), False) \
        if hint in chunk else None
    try:
        got = history.read_many(repo, rk, reads)
    except BaseException:
        if f_mark is not None:
            f_mark.exception()
        raise
    pending = f_mark.result() if f_mark is not None else _UNSET  # raises if it could not be written
    newest = got.get(top)
    if newest is None:
        return None
    target = got.get(hint) if hint is not None else None
    if target is not None and not (target.kind == KIND_CHECKPOINT and target.checkpoint_id == checkpoint_id):
        target = None
    live, settled = [], len(chunk) == len(positions) and len(listed) < ROLLBACK_PAGE
    for s, m, end in history.live_records(chunk, got, LogWalk()):
        if end:
            settled = True
            break
        live.append((s, m.checkpoint_id))
        if m.checkpoint_id != checkpoint_id:
            settled = True
            break
    if not settled:
        return None
    infos = {keys.seq_from_manifest_key(i.key): i for i in listed}
    return Fresh(newest, top, live, target, listed, infos, got, pending)


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


def remove_range(mgr, rk: str, low: int, high: int, listed: list | None = None, got: dict | None = None) -> list:
    """Remove every record with low < seq < high (and index records; young records become void
    records, :meth:`~snapstore.repo.log.records.LogRecords.remove_records`). Returns removed (seq, id).

    The positions come from LIST pages starting right below ``high``
    (:func:`snapstore.repo.log.pages.range_infos`), so the cost is that of the range, not of the
    run. ``listed``: ObjectInfos of the run's newest positions listed after the newest record
    below ``high`` was read (used when they reach down to ``low``); ``got``: ``{seq: Manifest}``
    of those records read already."""
    infos = None
    if listed is not None:
        seqs = [keys.seq_from_manifest_key(i.key) for i in listed]
        if seqs and (min(seqs) <= low + 1 or len(listed) < ROLLBACK_PAGE):
            infos = {s: i for s, i in zip(seqs, listed) if low < s < high}
    if infos is None:
        infos = range_infos(mgr.repo.store, rk, low, high)
    seqs = [s for s, i in infos.items() if not is_void(i.size)]
    have = {s: got[s] for s in seqs if got is not None and s in got}
    have.update(history.read_many(mgr.repo, rk, [s for s in seqs if s not in have]))
    entries = [(s, m.checkpoint_id if (m and m.kind == KIND_CHECKPOINT) else None) for s, m in have.items()]
    mgr.repo.remove_records(rk, entries, infos)
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
                       store_now=None, fresh: Fresh | None = None) -> Manifest | None:
    """Delete live checkpoints ``[(seq, id)]``; if the head is among them, move the head first.

    ``listed``: the :class:`~snapstore.manager.summaries.Listing` the caller decided from, or None.
    While the run's newest record is still the one listed at ``listed.top`` (a LIST of one key
    shows the same object: nothing published since), its live checkpoints, its newest record
    and, when the head does not move, the listed objects' ages are taken from it instead of
    being read again; otherwise, and after a lost race, the run is read again
    (:func:`snapstore.manager.history.scan`). ``store_now``: the store's clock for the removals
    (:meth:`~snapstore.repo.log.records.LogRecords.store_clock`), or None: one probe.
    ``fresh``: the run's newest records read just now (:func:`read_newest`, instead of
    ``listed``): the first attempt decides from them with no further read, publishes with the
    ``r`` marker written there, and removes the hidden range with the ages and records of that
    wave.

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
    for attempt in range(16):
        wave = fresh if attempt == 0 else None
        if wave is not None:
            newest, live = wave.newest, wave.live
            infos = wave.infos if all(wave.covers(s) for s in doomed_seqs) else None
        elif (newest := _newest(mgr, rk, listed)) is not None and listed is not None \
                and newest.seq == listed.top:
            live = listed.pairs()
            infos = listed.infos
        else:
            infos = None
            live = []  # the live checkpoints down to the newest one not doomed (not the whole run)
            for s, c, _m in history.scan(mgr.repo, rk, want=len(doomed_seqs) + 1):
                live.append((s, c))
                if s not in doomed_seqs:
                    break
        listed = None  # a retry reads the run again
        if newest is None or not live or live[0][0] not in doomed_seqs:
            break
        if check is not None:
            check(newest, wave.got if wave is not None else None)
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
        pending = wave.pending if wave is not None and rec.kind == KIND_ROLLBACK else _UNSET
        try:
            data = mgr.repo.publish(rk, rec, pending=pending)
        except PreconditionFailed:
            if check is not None:
                raise ConflictError(f"run {run_id!r} changed while deleting its head checkpoint; read the "
                                    "head again and retry") from None
            continue  # the run moved on: decide again
        publish.after_publish(mgr, rk, None, rec.seq, data)
        moved = rec
        infos = None  # the range below the new record is listed again (remove_range)
        # everything between the new head and the record is now hidden: remove it (incl. doomed)
        done = {s for s, _ in remove_range(mgr, rk, ts, rec.seq, wave.listed if wave is not None else None,
                                           wave.got if wave is not None else None)}
        if not survivors:
            mgr.repo.store.delete_many(i.key for i in mgr.repo.store.list(keys.index_prefix(rk)))
        doomed = [(s, c) for s, c in doomed if s not in done]
        break
    else:
        raise ConflictError(f"run {run_id!r} is changing too fast; gave up deleting")
    mgr.repo.remove_records(rk, doomed, infos, store_now)
    return moved
