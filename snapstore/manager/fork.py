"""Forking a run: a new run whose first checkpoint is a checkpoint of another run.

Layer 4. The new checkpoint shares the source's message tree and, with format 2, its data: the
fork's first record lists the source run's segments as *foreign* segments (docs/format.md §10),
which no writer of the fork merges or deletes, so a fork costs its record, its run marker and its
index record, whatever the history's length. Before it reads the source's head it pins the source
run (:mod:`snapstore.repo.pins`), so that the source's writer stops deleting the packs it merges
and leaves them to GC, whose mark keeps what the fork's segments hold for its checkpoints. The
new run's first record is published create-only like a save (a live run of that id conflicts).
Functions take the manager (``mgr``).
"""

from __future__ import annotations

from datetime import datetime

from . import history, publish, views
from .checkpoint import Checkpoint, make_checkpoint
from .save import RecordAt
from ..repo import pins
from ..errors import CheckpointNotFound, ConflictError, PreconditionFailed
from ..format.ids import check_checkpoint_id, check_run_id, new_checkpoint_id, new_write_id
from ..format.manifest import KIND_CHECKPOINT, Manifest
from ..format.segs import Seg

READ_ATTEMPTS = 3
"""Times a fork reads its source again when more than half the GC grace period passed between
reading the source and publishing (GC safety, docs/format.md §21: a fork dedups its whole list
against its source checkpoint, like a save against its parent)."""


def _arrays_flag(mgr, head, src, segs) -> int | None:
    """``messages.a`` of the fork's first record: 1 only if the run's arrays hold exactly its list,
    i.e. the source checkpoint is the source run's newest record, says 1 under a valid tag, and
    the fork lists exactly that record's segments; else 0 (None when the source does not say)."""
    if src.exact is None:
        return None
    if segs is None:
        return 0
    hasher = mgr.repo.hasher
    same = (head is not None and head.kind == KIND_CHECKPOINT and head.seq == src.seq
            and head.write_id == src.write_id and src.arrays == 1 and src.exact_tag is not None
            and src.exact_tag == hasher.exact_tag(src.digest, src.exact, src.arrays)
            and [(s.pack, s.level) for s in head.segment_list() or []] == [(s.pack, s.level) for s in segs])
    return int(bool(same and mgr.repo.saves.WRITE_ARRAYS))


def _read_source(mgr, rk: str, run_id: str, checkpoint_id: str):
    """The source checkpoint's record, the source run's newest record and the segment list the
    fork inherits (all foreign; None when the repository writes no segments)."""
    try:
        src = mgr.repo.find_checkpoint(rk, checkpoint_id)
    except CheckpointNotFound:
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
    head = mgr.repo.head(rk)
    if not mgr.repo.config.seg_fanout:
        return src, head, None
    # the source run's newest record lists the segments that hold every entry its checkpoints
    # need (a rollback record copies the list); its writer no longer deletes them (pinned)
    segs = history.carried_segs(head) or src.segment_list() or []
    return src, head, [Seg(s.pack, s.level, True) for s in segs]


def fork(mgr, run_id: str, checkpoint_id: str, new_run_id: str, at: RecordAt | None = None,
         new_id: str | None = None) -> Checkpoint:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.fork` (arguments, return value and
    errors as documented there).

    ``at`` and ``new_id`` are for an import (:mod:`snapstore.manager.portable`): the fork's record
    goes at log position ``at.seq`` with creation time ``at.created`` (its ``origin`` is always
    ``run_id``/``checkpoint_id``), and its checkpoint id is ``new_id`` (default: generated for
    its position)."""
    check_run_id(new_run_id)
    check_checkpoint_id(checkpoint_id)
    check_run_id(run_id)
    if not mgr.state.exists():
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
    rk = mgr.state.run_key(run_id)
    if mgr.repo.config.seg_fanout:
        src_view = mgr.state.views.get(run_id)
        if src_view is None or not src_view.pinned:  # pins are never deleted: once seen, no request
            pins.pin(mgr.repo.store, rk)  # durable before the source's head is read (repo/pins.py)
            if src_view is not None:
                src_view.pinned = True
    for _ in range(READ_ATTEMPTS):
        read_at = mgr.state.clock()
        src, head, segs = _read_source(mgr, rk, run_id, checkpoint_id)
        with mgr.state.run_lock(new_run_id):
            nrk = mgr.state.run_key(new_run_id)
            newest = mgr.repo.head(nrk)
            if newest is not None and history.resolve(mgr.repo, nrk, newest) is not None:
                raise ConflictError(f"run {new_run_id!r} already exists")
            seq = at.seq if at is not None else 0 if newest is None else newest.seq + 1
            arrays = _arrays_flag(mgr, head, src, segs)
            m = Manifest(kind=KIND_CHECKPOINT, run_id=new_run_id, seq=seq, write_id=new_write_id(),
                         created=at.created if at is not None else mgr.state.wall_clock(),
                         checkpoint_id=new_id or new_checkpoint_id(seq), parent_id=None,
                         fields=dict(src.fields), session_state=src.session_state,
                         session_state_ref=src.session_state_ref, session_state_tree=src.session_state_tree,
                         has_session_state=src.has_session_state,
                         count=src.count, size=src.size, digest=src.digest, state=src.state, exact=src.exact,
                         arrays=arrays,
                         exact_tag=(mgr.repo.hasher.exact_tag(src.digest, src.exact, arrays)
                                    if src.exact is not None else None),
                         origin={"run": run_id, "id": checkpoint_id}, segs=segs)
            # read before anything of the new run is written: a checkpoint whose data is in an
            # archive bundle that needs a restore (ColdObjectError) or that is damaged refuses the
            # fork here, and no half-made run is left behind (the same read a fork returns)
            msgs, ls = mgr.repo.load_with_state(m)
            if mgr.gc_grace_period > 0 and mgr.state.clock() - read_at > mgr.gc_grace_period / 2:
                continue  # too slow to rely on what was read: read the source again
            mgr.repo.write_index(nrk, m.checkpoint_id, seq, m.write_id)
            try:
                data = mgr.repo.publish(nrk, m, revives=True)
            except PreconditionFailed:
                raise ConflictError(f"run {new_run_id!r} changed while forking") from None
            publish.after_publish(mgr, nrk, None, seq, data)
            mgr.state.views.pop(new_run_id, None)
            v = views.load_view(mgr, new_run_id)
            v.list_state = ls
            views.saw(mgr, new_run_id, m.checkpoint_id, seq, m.write_id)
            return make_checkpoint(mgr.repo, m, msgs)
    raise ConflictError(f"fork of run {run_id!r} took longer than half the GC grace period "
                        f"({mgr.gc_grace_period:g} s) {READ_ATTEMPTS} times; try again")
