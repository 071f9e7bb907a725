"""Forking a run: a new run whose first checkpoint is a checkpoint of another run.

Layer 4. The new checkpoint shares the source's message tree; with format 2 the entries it needs
are first copied into one pack of the new run (:func:`snapstore.repo.tiers.fork_copy`), so the
fork never depends on the source run's packs, which the source's writer merges and deletes. The
new run's first record is published create-only like a save (a live run of that id conflicts).
Functions take the manager (``mgr``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from . import history, publish, views
from .checkpoint import Checkpoint, make_checkpoint
from .save import put_pack
from ..repo.tiers import FORK_LEVEL, fork_copy
from ..errors import CheckpointNotFound, ConflictError, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.ids import check_checkpoint_id, check_run_id, new_checkpoint_id, new_write_id
from ..format.manifest import KIND_CHECKPOINT, Manifest
from ..format.segs import Seg


def fork(mgr, run_id: str, checkpoint_id: str, new_run_id: str) -> Checkpoint:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.fork` (arguments, return value and
    errors as documented there)."""
    check_run_id(new_run_id)
    check_checkpoint_id(checkpoint_id)
    check_run_id(run_id)
    if not mgr.state.exists():
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
    rk = mgr.state.run_key(run_id)
    try:
        src = mgr.repo.find_checkpoint(rk, checkpoint_id)
    except CheckpointNotFound:
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
    # the source run's newest record lists the segments that hold its checkpoints' entries;
    # the fork gets its own copy of what its first checkpoint needs (one pack), so that it
    # never depends on another run's segments
    src_segs = history.carried_segs(mgr.repo.head(rk)) or src.segment_list()
    mgr.repo.prefetch_segments(src_segs)
    copy = None
    if mgr.repo.config.seg_fanout and (src.state or src.session_state_ref or src.session_state_tree):
        copy = fork_copy(mgr.repo, src)
    with mgr.state.run_lock(new_run_id):
        nrk = mgr.state.run_key(new_run_id)
        newest = mgr.repo.head(nrk)
        if newest is not None and history.resolve(mgr.repo, nrk, newest) is not None:
            raise ConflictError(f"run {new_run_id!r} already exists")
        seq = 0 if newest is None else newest.seq + 1
        # the copy holds the list as array items (a new run: nothing before them), so the fork's
        # arrays hold exactly its list (messages.a, docs/format.md §19)
        arrays = None
        if src.exact is not None:
            arrays = int(bool(mgr.repo.saves.WRITE_ARRAYS and (copy is not None or not src.state)))
        m = Manifest(kind=KIND_CHECKPOINT, run_id=new_run_id, seq=seq, write_id=new_write_id(),
                     created=datetime.now(timezone.utc), checkpoint_id=new_checkpoint_id(seq), parent_id=None,
                     fields=dict(src.fields), session_state=src.session_state,
                     session_state_ref=src.session_state_ref, session_state_tree=src.session_state_tree,
                     has_session_state=src.has_session_state,
                     count=src.count, size=src.size, digest=src.digest, state=src.state, exact=src.exact, arrays=arrays,
                     exact_tag=(mgr.repo.hasher.exact_tag(src.digest, src.exact, arrays)
                                if src.exact is not None else None),
                     origin={"run": run_id, "id": checkpoint_id},
                     segs=([Seg(copy[0], FORK_LEVEL)] if copy else []) if mgr.repo.config.seg_fanout else None)
        mgr.repo.write_index(nrk, m.checkpoint_id, seq, m.write_id)
        if copy is not None:
            put_pack(mgr.repo, copy[0], copy[1])
            mgr.repo.remember_pack(*copy)
        try:
            data = mgr.repo.publish(nrk, m, revives=True)
        except PreconditionFailed:
            if copy is not None:
                try:
                    mgr.repo.store.delete_many([keys.pack_key(copy[0])])
                except SnapstoreError:
                    pass  # left for GC
            raise ConflictError(f"run {new_run_id!r} changed while forking") from None
        publish.after_publish(mgr, nrk, None, seq, data)
        mgr.state.views.pop(new_run_id, None)
        v = views.load_view(mgr, new_run_id)
        msgs, ls = mgr.repo.load_with_state(m, v.head_segs)
        v.list_state = ls
        views.saw(mgr, new_run_id, m.checkpoint_id, seq, m.write_id)
        return make_checkpoint(mgr.repo, m, msgs)
