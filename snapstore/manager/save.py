"""Saving a checkpoint: preparing it on the head the caller continues, writing its pack (and the
tier pack when it completes a tier), publishing its manifest, and retrying after a lost reply.

Layer 4 (docs/format.md §18, §20). :func:`save` decides what to do on a conflict, a taken pack id
or a save that paused past half the GC grace period; :func:`save_once` is one attempt: index
record, then data, then the manifest (write order), with the GC-safety re-check before
publishing. A retry of an attempt whose outcome is unknown reuses its write id and pack (the
view's ``pending``), so a manifest that landed is read back, not written twice. On a store with
atomic batches (a SQLite file, ``StoreCapabilities.atomic_batch``) the data is not written ahead:
the packs, the manifest, the merged packs' deletion and the log segment ending at the record are
one transaction at publish (:mod:`snapstore.repo.log.onecommit`), with the same conflict outcomes.
Functions take the manager (``mgr``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import datetime

from . import callers, history, publish, retention, views
from .callers import Seen
from ..repo import pins
from ..repo.log import bulk, onecommit, runmarks
from ..repo.tiers import plan_save
from ..errors import (ConflictError, InvalidInputError, ObjectNotFound, PreconditionFailed, RepositoryNotFound,
                     SnapstoreError)
from ..format import keys
from ..format.codec import any_int_digits, validate
from ..format.fields import validate_fields
from ..format.ids import check_checkpoint_id, check_run_id, new_checkpoint_id, new_write_id
from ..format.manifest import KIND_CHECKPOINT, VIEW_TTL, Manifest, check_record_size
from ..format.segs import Seg
from ..repo.repository import Repository


def save(mgr, run_id: str, messages: list, *, step=None, token_usage=None, session_state=None,
         metrics=None, agent_id=None, status=None, metadata=None, checkpoint_id: str | None = None,
         parent_id: str | None = None, expect_head=None, at: "RecordAt | None" = None) -> str:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.save` (arguments, return value and
    errors as documented there). ``at`` (not public; :mod:`snapstore.manager.portable`): publish at
    this log position with this creation time and fork origin instead of the next position and now
    (a run imported from a portable bundle keeps its positions, docs/format.md §30)."""
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
    if mgr.state.opened is None:
        # the first write into an empty location must not create the repository for bad input
        try:
            mgr.state.repository(False)
        except RepositoryNotFound:
            for i, msg in enumerate(messages):
                validate(msg, f"messages[{i}]")
            validate(session_state, "session_state")
    with mgr.state.run_lock(run_id):
        args = SaveArgs(run_id, messages, fields, session_state, checkpoint_id, parent_id, exp,
                        callers.seen(mgr, run_id), at)
        v0 = mgr.state.views.get(run_id)
        cached = v0 is not None and v0.loaded  # built on a head this manager knew before the call
        stale = 0
        for attempt in range(mgr.SAVE_ATTEMPTS):
            try:
                return save_once(mgr, args, late_ok=stale >= mgr.STALE_REBUILDS)
            except _Stale:
                stale += 1
                continue  # build again with a new pack (fresh view if the run changed)
            except _PackIdCollision:
                v = mgr.state.views.get(run_id)
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


@dataclass(frozen=True)
class SaveArgs:
    """One save as its caller asked for it, validated (what every attempt of it builds on).

    Attributes:
        run_id: the run. messages: the full message list (JSON values).
        fields: ``{"step", "token_usage", "metrics", "agent_id", "status", "metadata"}``.
        session_state: a JSON value or None. checkpoint_id / parent_id: as given to ``save``.
        expect: :func:`snapstore.manager.views.expect` of ``expect_head`` (None: none given).
        seen: what the calling context last saw of the run (:class:`~snapstore.manager.callers.Seen`
            or None), read under the run's lock.
    """

    run_id: str
    messages: list
    fields: dict
    session_state: object
    checkpoint_id: str | None
    parent_id: str | None
    expect: tuple | None = None
    seen: Seen | None = None
    at: "RecordAt | None" = None


@dataclass(frozen=True)
class RecordAt:
    """Where and when an imported checkpoint's record goes (:mod:`snapstore.manager.portable`).

    Attributes:
        seq: its log position (at least the position after the run's newest record; the positions
            skipped must be on record as removed, docs/format.md §16).
        created: its creation time (an aware datetime).
        origin: ``{"run": run id, "id": checkpoint id}`` for the first checkpoint of a fork, or None.
        parent: the parent id the record names (whether or not that checkpoint is still there;
            ``parent_id`` is only the checkpoint deduplicated against), or None.
    """

    seq: int
    created: datetime
    origin: dict | None = None
    parent: str | None = None


def save_once(mgr, args: SaveArgs, late_ok: bool = False) -> str:
    """One attempt of a save, in write order: decide the parent, prepare, write the index record
    and the data, re-check the run (GC safety), publish the manifest, update the view.

    Args:
        mgr: the manager (the caller holds the run's lock). args: the save.
        late_ok: publish even if the attempt paused longer than half the GC grace period after
            writing its pack (with a RuntimeWarning, once per manager).
    Returns:
        The new checkpoint's id.
    Raises:
        ConflictError: the run moved (see :meth:`~snapstore.manager.facade.CheckpointManager.save`).
        PreconditionFailed: the log position was taken and the caller's loop decides (explicit
            parent or expected head, or no view). _Stale / _PackIdCollision: build it again.
    """
    attempt = _Attempt(mgr, args)
    list_state = attempt.choose_parent()
    attempt.prepare(list_state)
    attempt.write_data()
    attempt.recheck_run()
    attempt.check_pause(late_ok)
    data = attempt.publish()
    return attempt.finish(data)


class _Attempt:
    """The steps of one save attempt (:func:`save_once` runs them in order) and what they share: the run's view,
    the parent checkpoint, the pending save, what was written (for :meth:`undo`) and when."""

    def __init__(self, mgr, args: SaveArgs):
        self.mgr, self.args = mgr, args
        self.started = mgr.state.clock()  # monotonic s
        self.repo = mgr.repo
        self.rk = self.repo.run_key(args.run_id)
        self.view: views.RunView | None = None
        self.parent: Manifest | None = None
        self.pending: views.PendingSave | None = None
        self.revives = False    # first checkpoint, or one after a tombstone: run markers (§13)
        self.mark_put = None    # future of the run marker's write, or None
        self.indexed = False    # the index record is ours
        self.wrote_pack = False
        self.packed_at = 0.0    # monotonic s when the pack writes began
        # a store with atomic batches (a SQLite file): the packs, the manifest and the merged
        # packs' deletion are one transaction at publish (repo/log/onecommit.py)
        self.one_commit = onecommit.one_commit(self.repo.store)
        self.segs_done: list = []  # log segments written in the publish's transaction

    def choose_parent(self):
        """The view, the conflict check, and the parent (``self.parent``: the head, or
        ``parent_id``); returns the parent's message-list writer state (None: no parent)."""
        args, repo, rk = self.args, self.repo, self.rk
        v = views.view(self.mgr, args.run_id)
        if args.expect is not None and (v.head.checkpoint_id if v.head else None) != args.expect[0]:
            v = views.load_view(self.mgr, args.run_id)  # the cached head may be older than the caller's knowledge
        views.conflict_if_moved(args.run_id, v, args.expect, args.seen if args.parent_id is None else None)
        self.view = v
        if args.parent_id is not None and not (v.head is not None and v.head.checkpoint_id == args.parent_id):
            pm, ls = repo.find_checkpoint(rk, args.parent_id), None
        else:
            pm, ls = v.head, v.list_state
        self.parent = pm
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
                raise PreconditionFailed(keys.manifest_key(rk, seq_of(v)), f"run {args.run_id!r} moved since "
                                         "this manager last saw it (its segments were merged)") from None
        return ls

    def prepare(self, list_state) -> None:
        """Prepare the save on the parent (or take the pending one a retry repeats), fill in its
        manifest, and record it as the view's pending save."""
        args, repo, v, pm = self.args, self.repo, self.view, self.parent
        # a shared pack confirmed within this long is reused without asking again (§29): as long
        # as this writer trusts its view of a run (no caching with a grace period of 0)
        repo.shared.trust = min(self.mgr.gc_grace_period / 2, VIEW_TTL)
        prep = repo.prepare_save(list_state, args.messages, args.session_state, args.session_state is not None,
                                 pm.session_state_tree if pm else None,
                                 [s.pack for s in v.head_segs or () if s.foreign])
        ss_id = prep.session_state_tree.id.hex() if prep.session_state_tree else None
        with any_int_digits():  # repr of a field holding an int of more than 4,300 digits
            fingerprint = (prep.state.digest_hex(), prep.state.count, repr(args.fields), args.checkpoint_id,
                           args.parent_id, ss_id, repr(prep.session_state_inline), pm.checkpoint_id if pm else None)
        seq = seq_of(v)
        if args.at is not None:
            if args.at.seq < seq:
                raise ConflictError(f"run {args.run_id!r}: log position {args.at.seq} is taken (the run's next "
                                    f"position is {seq})")
            seq = args.at.seq
        if v.pending is not None and v.pending.fingerprint == fingerprint and v.pending.manifest.seq == seq:
            # retry of an unknown outcome: the same write id, and the same pack (id and bytes) the
            # first attempt may have written and its manifest names: the segment list, the state
            # hints and the pack all stay the first attempt's (a new pack id here left the landed
            # manifest's segments without the pack the writer's later hints name)
            m, tier, superseded, prep = (v.pending.manifest, v.pending.tier, v.pending.superseded,
                                         v.pending.prepared)
        else:
            if prep.pack_id is not None:
                repo.remember_pack(prep.pack_id, prep.pack_bytes, prep.raw_blocks)
            m = Manifest(kind=KIND_CHECKPOINT, run_id=args.run_id, seq=seq, write_id=new_write_id(),
                         created=args.at.created if args.at else self.mgr.state.wall_clock(),
                         checkpoint_id=args.checkpoint_id or new_checkpoint_id(seq),
                         parent_id=args.at.parent if args.at else (pm.checkpoint_id if pm else None),
                         fields=args.fields, origin=args.at.origin if args.at else None)
            # format 2: the run's segment list, merging a tier when this save completes one
            m.segs, tier, superseded = plan_save(repo, _with_shared(v.head_segs or [], prep.shared), prep.pack_id,
                                                 prep.state.ids or ())
            if tier is not None:
                repo.remember_pack(*tier)
        _describe(repo, m, prep, pm, v)
        self.pending = v.pending = views.PendingSave(fingerprint, m, tier, superseded, prep)
        self.mgr.state.hook("after_prepare", run_id=args.run_id, seq=seq, prepared=prep)

    def write_data(self) -> None:
        """Write the index record, then the run marker (if needed), the pack and the tier pack
        (beside each other), before the manifest names them; at one commit only the index record
        (the rest goes into :meth:`publish`'s transaction)."""
        repo, rk, m, prep, tier = self.repo, self.rk, self.pending.manifest, self.pending.prepared, self.pending.tier
        # index record first (a refused duplicate id writes nothing), then data, then the manifest
        self.indexed = repo.write_index(rk, m.checkpoint_id, m.seq, m.write_id)
        self.revives = self.view.head is None
        if self.one_commit:  # the packs and the marker go into the publish's one transaction
            self.mgr.state.hook("after_pack", run_id=self.args.run_id, seq=m.seq, pack_id=prep.pack_id)
            return
        # the run marker it needs (most saves need none: no pool task for them), beside the pack
        self.mark_put = (repo.pool.submit(runmarks.before_publish, repo.store, rk, m, self.revives)
                         if runmarks.marks_record(m, self.revives) else None)
        self.packed_at = self.mgr.state.clock()
        # the tier pack (if this save completes a tier) is written beside the save's own pack; a
        # pack the tier merges at once (this save's own, when it completes the tier) is not written
        # at all, as at one commit: the tier pack holds its entries, and no record names it as a
        # segment (docs/format.md §18)
        tier_put = repo.pool.submit(put_pack, repo, tier[0], tier[1]) if tier is not None else None
        merged_at_once = tier is not None and prep.pack_id in set(self.pending.superseded or ())
        try:
            if prep.pack_bytes is not None and not merged_at_once:
                put_pack(repo, prep.pack_id, prep.pack_bytes)
                self.wrote_pack = True
        finally:
            if tier_put is not None:
                tier_put.result()
        # the hook names the pack written: the tier pack when it took the place of the own pack
        self.mgr.state.hook("after_pack", run_id=self.args.run_id, seq=m.seq,
                            pack_id=tier[0] if merged_at_once else prep.pack_id)

    def undo(self) -> None:
        """A definite conflict: nothing references this attempt's index record or packs; remove
        them (best effort: what is left is GC's) and forget the pending save."""
        v, repo, p = self.view, self.repo, self.pending
        v.pending = None
        v.loaded = False
        try:
            runmarks.abandon(repo.store, self.mark_put.result() if self.mark_put is not None else None)
        except SnapstoreError:
            pass
        junk = [keys.index_key(self.rk, repo.checkpoint_key(p.manifest.checkpoint_id))] if self.indexed else []
        if self.wrote_pack:
            junk.append(keys.pack_key(p.prepared.pack_id))
        if p.tier is not None and not self.one_commit:
            junk.append(keys.pack_key(p.tier[0]))
        if junk:
            try:
                repo.store.delete_many(junk)
            except SnapstoreError:
                pass  # left for GC

    def recheck_run(self) -> None:
        """GC safety: if the view is older than half the grace period (or ``VIEW_TTL``), read the
        run's head again: the parent (and so the data deduplicated against) must still exist and
        the run be the one known (same newest record, not a re-created run); else undo and
        raise ConflictError."""
        mgr, repo, rk, v, pm, m = self.mgr, self.repo, self.rk, self.view, self.parent, self.pending.manifest
        clock = mgr.state.clock
        # a view older than VIEW_TTL may be of a record whose successors were removed since, their
        # positions freed (docs/format.md §15), whatever the grace period: read the head again
        fresh = min(mgr.gc_grace_period / 2, VIEW_TTL)
        if clock() - v.confirmed_at > fresh or (self.args.parent_id is not None and clock() - self.started > fresh):
            newest = repo.head(rk)
            same = (newest.write_id if newest else None) == v.head_write_id and \
                (newest.seq if newest else None) == v.head_seq
            landed = newest is not None and newest.seq == m.seq and newest.write_id == m.write_id
            if landed:
                same = True  # an earlier attempt of this very save landed (its reply was lost): publish reads it back
            elif same and pm is not None and self.args.parent_id is not None:
                try:
                    same = repo.read_manifest_key(keys.manifest_key(rk, pm.seq)).write_id == pm.write_id
                except ObjectNotFound:
                    same = False
            if not same:
                self.undo()
                raise ConflictError(f"run {self.args.run_id!r} changed since this manager last saw it "
                                    "(re-checked before publishing); call latest() and retry")
            v.confirmed_at = clock()

    def check_pause(self, late_ok: bool) -> None:
        """An attempt that paused longer than half the grace period after writing its pack may
        have a pack GC counts as a deletion candidate: undo and raise _Stale (build again), or,
        with ``late_ok``, warn once per manager and go on."""
        mgr = self.mgr
        clock = mgr.state.clock
        # With a grace period of 0 the caller asserts that GC never runs beside an active writer,
        # so no pack can turn into a deletion candidate while this save is in flight: the rule
        # below does not apply (with it, every save was "stale": any time elapsed is > 0).
        # (at one commit the pack is written with its manifest: never in flight, no pause to check)
        # a save referencing shared packs (docs/format.md §29) publishes before their epoch's end
        # plus a quarter of the grace period, else it is built again (in the new epoch)
        if self.pending.prepared.shared and self.repo.shared.expired(self.pending.prepared.shared,
                                                                     mgr.gc_grace_period):
            self.undo()
            raise _Stale()
        if not self.one_commit and mgr.gc_grace_period > 0 and clock() - self.packed_at > mgr.gc_grace_period / 2:
            if not late_ok:
                self.undo()
                raise _Stale()
            if not mgr.state.warned_grace:
                mgr.state.warned_grace = True
                warnings.warn(f"gc_grace_period={mgr.gc_grace_period:g} s is shorter than twice the time a save "
                              f"takes here ({clock() - self.packed_at:.3g} s from pack to publish): saves publish "
                              "anyway, and a GC with that grace period must not run beside this writer",
                              RuntimeWarning, stacklevel=6)

    def publish(self) -> bytes:
        """The create-only write of the manifest at the view's next log position; returns the
        record's bytes. A slow reply (more than ``VIEW_TTL`` after the view) is acknowledged only
        if no newer record exists or the next one continues it (:func:`newer_than_ours`)."""
        mgr, args, v, m = self.mgr, self.args, self.view, self.pending.manifest
        mgr.state.hook("before_publish", run_id=args.run_id, seq=m.seq, manifest=m)
        viewed_at = v.confirmed_at
        try:
            data = self._publish(m)
        except PreconditionFailed:
            self.undo()
            if args.parent_id is not None or args.expect is not None or args.seen is None:
                raise  # the caller's save loop decides: move to the new head and retry, or conflict
            raise ConflictError(f"run {args.run_id!r} changed: another writer saved, rolled back or deleted "
                                f"checkpoints after the one this save continues (log position {m.seq} is "
                                "taken); call latest() and retry, or fork() the run") from None
        if mgr.state.clock() - viewed_at > VIEW_TTL:
            # slow: more than VIEW_TTL passed between this writer's view of the run and the reply to
            # its create-only write, so its position may have been freed and taken (§15)
            try:
                newer_than_ours(mgr, self.rk, m)
            except ConflictError:
                v.pending = None
                v.loaded = False
                raise
        return data

    def _publish(self, m: Manifest) -> bytes:
        """The manifest's create-only write; at one commit with the packs and the merged packs'
        deletion (a pack id taken by other bytes: _PackIdCollision)."""
        if not self.one_commit:
            return self.repo.publish(self.rk, m, self.revives,
                                     self.mark_put.result() if self.mark_put is not None else None)
        p = self.pending
        prep = p.prepared
        gone = set(p.superseded or ())
        # a pack the tier merges at once (this save's own, when it completes the tier) is not
        # written at all: the ordered writes put it and delete it after the manifest
        packs = ([(prep.pack_id, prep.pack_bytes)] if prep.pack_bytes is not None else []) + \
            ([(p.tier[0], p.tier[1])] if p.tier is not None else [])
        packs = [(pid, body) for pid, body in packs if pid not in gone]
        data = m.to_bytes()
        # the log segment ending at this record, when the view holds the 15 records before it
        seg = bulk.first_logseg(self.rk, m.seq, {**(self.view.log_cache or {}), m.seq: data})
        self.segs_done = [seg[0]] if seg is not None else []
        try:
            # the packs the tier merged go in the same transaction unless the run is pinned, which
            # is checked inside it (a fork may list them, docs/format.md §10); a pinned run known
            # to this writer leaves them to GC without asking
            gone_keys = [] if self.view.pinned else [keys.pack_key(x) for x in sorted(gone)]
            if gone:  # the moment a fork may pin the run and list them (tests land one here)
                self.mgr.state.hook("before_merged_delete", run_id=self.args.run_id, seq=m.seq, packs=sorted(gone))
            return onecommit.publish_with_data(self.repo, self.rk, m, packs, self.revives, gone_keys, data,
                                               [seg] if seg is not None else [],
                                               deletes_unless=keys.pin_key(self.rk))
        except onecommit.BatchRefused as e:
            if e.same is False:
                raise _PackIdCollision(e.key) from None
            raise

    def finish(self, data: bytes) -> str:
        """After publishing: the view's head is the new record; log segments, the merged packs'
        deletion, the caller's view, ``max_checkpoints``. Returns the checkpoint id."""
        mgr, repo, rk, v, p = self.mgr, self.repo, self.rk, self.view, self.pending
        m = p.manifest
        if v.head is not None and v.head_seq is not None and v.head.seq != v.head_seq:
            runmarks.after_rollback_head(repo.store, rk, v.head_seq)  # the newest record was a rollback
        v.pending = None
        v.head_seq = m.seq
        v.head_write_id = m.write_id
        v.head_segs = m.segs
        v.head = m
        publish.after_publish(mgr, rk, v, m.seq, data, self.segs_done)
        merged: list[str] = []
        if p.superseded and not self.one_commit:  # (at one commit: in the publish's transaction, unless pinned)
            # the packs merged into the tier pack: the new record's segments hold their entries
            # (a reader or GC that meets a ref hinting at one finds the entry there); a failed
            # delete is left for GC (no newest record lists them). A pinned run (a fork lists its
            # segments) leaves them to GC, which keeps those a fork still lists (docs/format.md §10)
            mgr.state.hook("before_merged_delete", run_id=self.args.run_id, seq=m.seq, packs=list(p.superseded))
            delete, v.pinned = pins.may_delete_merged(repo.store, rk, v.pinned)
            if delete:
                merged = [keys.pack_key(x) for x in p.superseded]
        if merged:
            try:
                repo.store.delete_many(merged)
            except SnapstoreError:
                pass
        v.confirmed_at = mgr.state.clock()
        views.saw(mgr, self.args.run_id, m.checkpoint_id, m.seq, m.write_id)
        v.list_state = p.prepared.state
        if v.live is not None:
            v.live.append((m.seq, m.checkpoint_id, retention.needs_of(m.fields.get("metadata"))))
        if mgr.max_checkpoints is not None:
            retention.enforce_max(mgr, self.args.run_id, rk, v)
        return m.checkpoint_id


def _describe(repo: Repository, m: Manifest, prep, pm: Manifest | None, v: views.RunView) -> None:
    """Fill in what manifest ``m`` says of the prepared save ``prep`` (session state, count, size,
    digest, exactness, ``messages.a``, state hints), ``pm`` being its parent and ``v`` the view."""
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


def _with_shared(segs: list, shared: list) -> list:
    """``segs`` (the run's newest segment list) with the shared packs ``shared`` (ids) a save
    references put first as foreign segments of level 0 (docs/format.md §29): found in the
    restore's segment wave, never merged or deleted by the run's writers."""
    if not shared:
        return segs
    have = {s.pack for s in segs}
    return [Seg(p, 0, True) for p in shared if p not in have] + list(segs)


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
