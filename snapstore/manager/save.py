"""Saving a checkpoint: preparing it on the head the caller continues, writing its pack (and the
tier pack when it completes a tier), publishing its manifest, and retrying after a lost reply.

Layer 4 (docs/format.md §18, §20). :func:`save` decides what to do on a conflict, a taken pack id
or a save that paused past half the GC grace period; :func:`save_once` is one attempt: index
record, then data, then the manifest (write order), with the GC-safety re-check before
publishing. A retry of an attempt whose outcome is unknown reuses its write id and pack (the
view's ``pending``), so a manifest that landed is read back, not written twice. Functions take the
manager (``mgr``).
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone

from . import callers, history, publish, retention, views
from ..repo.log import runmarks
from ..repo.tiers import plan_save
from ..errors import (ConflictError, InvalidInputError, ObjectNotFound, PreconditionFailed, RepositoryNotFound,
                     SnapstoreError)
from ..format import keys
from ..format.codec import any_int_digits, validate
from ..format.fields import validate_fields
from ..format.ids import check_checkpoint_id, check_run_id, new_checkpoint_id, new_write_id
from ..format.manifest import KIND_CHECKPOINT, VIEW_TTL, Manifest, check_record_size
from ..repo.repository import Repository


def save(mgr, run_id: str, messages: list, *, step=None, token_usage=None, session_state=None,
         metrics=None, agent_id=None, status=None, metadata=None, checkpoint_id: str | None = None,
         parent_id: str | None = None, expect_head=None) -> str:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.save` (arguments, return value and
    errors as documented there)."""
    check_run_id(run_id)
    exp = views.expect(expect_head)
    if checkpoint_id is not None:
        check_checkpoint_id(checkpoint_id)
    if parent_id is not None:
        check_checkpoint_id(parent_id)
    if not isinstance(messages, (list, tuple)):
        raise InvalidInputError(f"messages must be a list, got {type(messages).__name__}")
    validate_fields(step=step, token_usage=token_usage, metrics=metrics, status=status)
    fields = {"step": step, "token_usage": token_usage, "metrics": metrics, "agent_id": agent_id,
              "status": status, "metadata": metadata}
    for k, v in fields.items():
        validate(v, k)
    check_record_size(fields)
    if mgr._repo is None:
        # the first write into an empty location must not create the repository for bad input
        try:
            mgr._open(False)
        except RepositoryNotFound:
            for i, msg in enumerate(messages):
                validate(msg, f"messages[{i}]")
            validate(session_state, "session_state")
    with mgr._run_lock(run_id):
        seen = callers.seen(mgr, run_id)
        v0 = mgr._views.get(run_id)
        cached = v0 is not None and v0.loaded  # built on a head this manager knew before the call
        stale = 0
        for attempt in range(mgr.SAVE_ATTEMPTS):
            try:
                return save_once(mgr, run_id, messages, fields, session_state, checkpoint_id, parent_id,
                                       exp, seen, late_ok=stale >= mgr.STALE_REBUILDS)
            except _Stale:
                stale += 1
                continue  # build again with a new pack (fresh view if the run changed)
            except _PackIdCollision:
                v = mgr._views.get(run_id)
                if v is not None:
                    v.pending = None  # that pack id belongs to another pack: no attempt of ours used it
                continue  # build again (new pack id)
            except PreconditionFailed:
                # the run moved after the head this save was built on. A save with an explicit
                # parent or expected head decides again on the new head; a caller without a
                # view of the run continues from it if the head it used was this manager's
                # cached one (a new manager would have read the newer head)
                if (parent_id is None and exp is None and not cached) or attempt == mgr.SAVE_ATTEMPTS - 1:
                    raise ConflictError(
                        f"run {run_id!r} changed: another writer saved, rolled back or deleted checkpoints "
                        "after the head this save continues (its log position is taken); call latest() and "
                        "retry, or fork() the run") from None
                views.load_view(mgr, run_id)
                cached = False
    raise ConflictError(f"run {run_id!r}: gave up saving after {mgr.SAVE_ATTEMPTS} attempts (each was built "
                        "again because its pack id was taken or it paused longer than half the GC grace period)")


class _PackIdCollision(Exception):
    """A new pack's random id is taken by a different pack (vanishingly rare): pick another."""


class _Stale(Exception):
    """A save paused longer than half the GC grace period after writing its pack: build it again."""


SAVE_ATTEMPTS = 8
"""Times ``save`` builds a checkpoint again (pack id taken, paused past half the GC grace
period, or, with ``parent_id``/``expect_head``, the run moved) before giving up."""


STALE_REBUILDS = 2
"""A save that paused longer than half the GC grace period after writing its pack is built
again at most this many times; after that the grace period is shorter than a save takes here
and the save publishes anyway, with a RuntimeWarning (a GC with that grace period must not run
beside this writer)."""


def save_once(mgr, run_id, messages, fields, session_state, checkpoint_id, parent_id, exp=None,
              seen=None, late_ok=False) -> str:
    t_start = mgr._clock()
    repo = mgr.repo
    rk = repo.run_key(run_id)
    v = views.view(mgr, run_id)
    if exp is not None and (v.head.checkpoint_id if v.head else None) != exp[0]:
        v = views.load_view(mgr, run_id)  # the cached head may be older than the caller's knowledge
    views.conflict_if_moved(run_id, v, exp, seen if parent_id is None else None)
    if parent_id is not None:
        if v.head is not None and v.head.checkpoint_id == parent_id:
            pm = v.head
            ls = v.list_state
        else:
            pm = repo.find_checkpoint(rk, parent_id)
            ls = None
    else:
        pm = v.head
        ls = v.list_state
    if ls is None and pm is not None:
        try:
            repo.prefetch_segments(v.head_segs or pm.segment_list())
            ls = repo.list_state(pm)
        except ObjectNotFound:
            # this manager's view of the run may be stale: another writer merged the segments it
            # names into a tier pack and deleted them. If the run moved, decide again on the new
            # head (the save loop reads it); if not, the parent's data is missing
            newest = repo.head(rk)
            if (newest.write_id if newest else None) == v.head_write_id and \
                    (newest.seq if newest else None) == v.head_seq:
                raise
            raise PreconditionFailed(keys.manifest_key(rk, seq_of(v)), f"run {run_id!r} moved since this "
                                     "manager last saw it (its segments were merged)") from None
    prep = repo.prepare_save(ls, messages, session_state, session_state is not None,
                             pm.session_state_tree if pm else None)
    ss_id = prep.session_state_tree.id.hex() if prep.session_state_tree else None
    with any_int_digits():  # repr of a field holding an int of more than 4,300 digits
        fingerprint = (prep.state.digest_hex(), prep.state.count, repr(fields), checkpoint_id, parent_id,
                       ss_id, repr(prep.session_state_inline), pm.checkpoint_id if pm else None)
    seq = seq_of(v)
    if v.pending is not None and v.pending[0] == fingerprint and v.pending[1].seq == seq:
        # retry of an unknown outcome: the same write id, and the same pack (id and bytes) the
        # first attempt may have written and its manifest names: the segment list, the state
        # hints and the pack all stay the first attempt's (a new pack id here left the landed
        # manifest's segments without the pack the writer's later hints name)
        m, tier, superseded, prep = v.pending[1], v.pending[2], v.pending[3], v.pending[4]
    else:
        if prep.pack_id is not None:
            repo.remember_pack(prep.pack_id, prep.pack_bytes, prep.raw_blocks)
        m = Manifest(kind=KIND_CHECKPOINT, run_id=run_id, seq=seq, write_id=new_write_id(),
                     created=datetime.now(timezone.utc), checkpoint_id=checkpoint_id or new_checkpoint_id(seq),
                     parent_id=pm.checkpoint_id if pm else None, fields=fields)
        # format 2: the run's segment list, merging a tier when this save completes one
        m.segs, tier, superseded = plan_save(repo, v.head_segs or [], prep.pack_id, prep.state.ids or ())
        if tier is not None:
            repo.remember_pack(*tier)
    m.session_state = prep.session_state_inline
    m.session_state_ref = prep.session_state_ref
    m.session_state_tree = prep.session_state_tree
    m.has_session_state = prep.has_session_state
    m.count, m.size = prep.state.count, prep.state.size
    m.digest = prep.state.digest_hex()
    m.exact = prep.state.exact
    # messages.a: the run's arrays hold exactly this list only if this save appended to the
    # newest checkpoint of a run whose arrays held exactly that one (a save after a rollback, or
    # continuing an older checkpoint, leaves the arrays holding messages after its parent's)
    at_end = (v.head_seq is None or not v.head_segs) if pm is None else \
        (pm is v.head and v.head.seq == v.head_seq)
    # (a parent record that does not say, written before messages.a, leaves it unsaid: None)
    if not (at_end and repo.config.seg_fanout):
        prep.state.arrays_exact = False
    m.arrays = None if m.exact is None or prep.state.arrays_exact is None else int(bool(prep.state.arrays_exact))
    m.exact_tag = repo.hasher.exact_tag(m.digest, m.exact, m.arrays) if m.exact is not None else None
    m.state = None
    if prep.state.state:
        m.state = [prep.state.state[0].hex(), prep.state.state[1].hex()]
        up = prep.state.spine.upper
        if up is not None and up[1] != prep.state.state[1]:
            m.state.append(up[1].hex())  # prefetch hint: the upper entry's pack
    v.pending = (fingerprint, m, tier, superseded, prep)
    mgr._hook("after_prepare", run_id=run_id, seq=seq, prepared=prep)
    # index record first (a refused duplicate id writes nothing), then data, then the manifest
    indexed = repo.write_index(rk, m.checkpoint_id, seq, m.write_id)
    wrote_pack = False
    revives = v.head is None  # a first checkpoint, or one after a tombstone: run markers (§13)
    # the run marker it needs (most saves need none: no pool task for them), beside the pack
    mark_put = (repo.pool.submit(runmarks.before_publish, repo.store, rk, m, revives)
                if runmarks.marks_record(m, revives) else None)

    def undo() -> None:
        # a definite conflict: nothing references our index record or pack, remove them
        v.pending = None
        v.loaded = False
        try:
            runmarks.abandon(repo.store, mark_put.result() if mark_put is not None else None)
        except SnapstoreError:
            pass
        junk = [keys.index_key(rk, repo.checkpoint_key(m.checkpoint_id))] if indexed else []
        if wrote_pack:
            junk.append(keys.pack_key(prep.pack_id))
        if tier is not None:
            junk.append(keys.pack_key(tier[0]))
        if junk:
            try:
                repo.store.delete_many(junk)
            except SnapstoreError:
                pass  # left for GC
    t_pack = mgr._clock()
    # the tier pack (if this save completes a tier) is written beside the save's own pack
    tier_put = repo.pool.submit(put_pack, repo, tier[0], tier[1]) if tier is not None else None
    try:
        if prep.pack_bytes is not None:
            put_pack(repo, prep.pack_id, prep.pack_bytes)
            wrote_pack = True
    finally:
        if tier_put is not None:
            tier_put.result()
    mgr._hook("after_pack", run_id=run_id, seq=seq, pack_id=prep.pack_id)
    half = mgr.gc_grace_period / 2
    # a view older than VIEW_TTL may be of a record whose successors were removed since, their
    # positions freed (docs/format.md §15), whatever the grace period: read the head again
    fresh = min(half, VIEW_TTL)
    if mgr._clock() - v.confirmed_at > fresh or (parent_id is not None and mgr._clock() - t_start > fresh):
        # GC safety: our parent (and so the data we dedup against) must still exist, and the
        # run must be the one we know (same newest record, not a re-created run)
        newest = repo.head(rk)
        same = (newest.write_id if newest else None) == v.head_write_id and \
            (newest.seq if newest else None) == v.head_seq
        landed = newest is not None and newest.seq == seq and newest.write_id == m.write_id
        if landed:
            same = True  # an earlier attempt of this very save landed (its reply was lost): publish reads it back
        elif same and pm is not None and parent_id is not None:
            try:
                same = repo.read_manifest_key(keys.manifest_key(rk, pm.seq)).write_id == pm.write_id
            except ObjectNotFound:
                same = False
        if not same:
            undo()
            raise ConflictError(f"run {run_id!r} changed since this manager last saw it "
                                "(re-checked before publishing); call latest() and retry")
        v.confirmed_at = mgr._clock()
    # With a grace period of 0 the caller asserts that GC never runs beside an active writer,
    # so no pack can turn into a deletion candidate while this save is in flight: the rule
    # below does not apply (with it, every save was "stale": any time elapsed is > 0).
    if mgr.gc_grace_period > 0 and mgr._clock() - t_pack > half:
        if not late_ok:
            # our pack may already be a GC deletion candidate: build the save again
            undo()
            raise _Stale()
        if not mgr.__dict__.get("_warned_grace"):
            mgr._warned_grace = True
            warnings.warn(f"gc_grace_period={mgr.gc_grace_period:g} s is shorter than twice the time a save "
                          f"takes here ({mgr._clock() - t_pack:.3g} s from pack to publish): saves publish "
                          "anyway, and a GC with that grace period must not run beside this writer",
                          RuntimeWarning, stacklevel=5)
    mgr._hook("before_publish", run_id=run_id, seq=seq, manifest=m)
    viewed_at = v.confirmed_at
    try:
        data = repo.publish(rk, m, revives, mark_put.result() if mark_put is not None else None)
    except PreconditionFailed:
        undo()
        if parent_id is not None or exp is not None or seen is None:
            raise  # the caller's save loop decides: move to the new head and retry, or conflict
        raise ConflictError(f"run {run_id!r} changed: another writer saved, rolled back or deleted "
                            f"checkpoints after the one this save continues (log position {seq} is "
                            "taken); call latest() and retry, or fork() the run") from None
    if mgr._clock() - viewed_at > VIEW_TTL:
        # slow: more than VIEW_TTL passed between this writer's view of the run and the reply to
        # its create-only write, so its position may have been freed and taken (§15): the save
        # is acknowledged only if no newer record exists, or the next one continues it
        try:
            newer_than_ours(mgr, rk, m)
        except ConflictError:
            v.pending = None
            v.loaded = False
            raise
    if v.head is not None and v.head_seq is not None and v.head.seq != v.head_seq:
        runmarks.after_rollback_head(repo.store, rk, v.head_seq)  # the newest record was a rollback
    v.pending = None
    v.head_seq = seq
    v.head_write_id = m.write_id
    v.head_segs = m.segs
    v.head = m
    publish.after_publish(mgr, rk, v, seq, data)
    if superseded:
        # the packs merged into the tier pack: the new record's segments hold their entries
        # (a reader or GC that meets a ref hinting at one finds the entry there); a failed
        # delete is left for GC (no newest record lists them)
        try:
            repo.store.delete_many([keys.pack_key(p) for p in superseded])
        except SnapstoreError:
            pass
    v.confirmed_at = mgr._clock()
    views.saw(mgr, run_id, m.checkpoint_id, seq, m.write_id)
    v.list_state = prep.state
    if v.live is not None:
        v.live.append((seq, m.checkpoint_id, retention.needs_of(m.fields.get("metadata"))))
    if mgr.max_checkpoints is not None:
        retention.enforce_max(mgr, run_id, rk, v)
    return m.checkpoint_id


def newer_than_ours(mgr, rk: str, m: Manifest) -> None:
    """After publishing ``m`` slowly: raise ConflictError (and void ``m``) if a newer record
    exists that does not continue ``m`` (``m`` took a position freed under it, docs/format.md
    §15). The record is made void rather than deleted with its pack: a writer that did see it
    may have continued it, and its data stays for GC to judge."""
    repo = mgr.repo
    newest = repo.head(rk)
    if newest is None or newest.seq <= m.seq:
        return
    nxt = history.read_many(repo, rk, [m.seq + 1]).get(m.seq + 1)
    if nxt is not None and nxt.kind == KIND_CHECKPOINT and nxt.parent_id == m.checkpoint_id:
        return  # another writer saw ours and continued it
    repo.remove_records(rk, [(m.seq, m.checkpoint_id)])
    raise ConflictError(f"run {m.run_id!r} changed while this save was in flight (log position {m.seq} was "
                        f"freed and taken again; the run's newest record is at {newest.seq}): the save is not "
                        "kept; call latest() and retry")


def seq_of(v) -> int:
    """The log position a save on view ``v`` takes."""
    return 0 if v.head_seq is None else v.head_seq + 1


def put_pack(repo: Repository, pack_id: bytes, data: bytes) -> None:
    """Write a pack create-only; an existing identical object is our own earlier attempt.

    Raises:
        _PackIdCollision: another pack has that id (the save is built again with a new id).
    """
    pkey = keys.pack_key(pack_id)
    try:
        repo.store.put(pkey, data)
    except PreconditionFailed:
        if repo.store.get(pkey) != data:
            raise _PackIdCollision(pkey) from None
