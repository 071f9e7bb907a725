"""Garbage collection: mark-and-sweep with two-phase deletion and a grace period, plus repacking.

Layer 4 (uses :mod:`snapstore.repo.repository` and the mark phase of :mod:`snapstore.maintenance.mark`). The safety
argument is in docs/format.md, section 21. In short:

* Mark walks every live manifest (trees memoised by node id) and finds, per pack, the entries live
  checkpoints need (following forwarding records of retired packs).
* An unreferenced pack first becomes a *candidate* (listed in a ``gc/candidates/<id>`` record whose
  store timestamp says when). A later GC deletes it only if the record is older than the grace
  period, the pack is still unreferenced and the pack itself is older than the grace period. With
  ``grace_period=0`` (the caller asserts no other writers) unreferenced objects go at once.
* Mostly-dead packs, and small live packs (the per-save packs), are *repacked*: live entries are
  copied into new, larger packs (one zstd frame per pack, no dictionary), a forwarding record in
  the forwarding map (:mod:`snapstore.maintenance.forwarding`, shards ``fwd/<1 hex>``) names the new packs,
  and the old pack is retired (the next GC makes it a candidate). Forwarding records that name a
  pack are rewritten to name its targets only when that pack is deleted, so a retired pack stays
  reachable for as long as it exists.
* ``gc/fwd-cache`` keeps the whole map in one object; readers use it as hints (see
  :meth:`Repository.forward_hints`).
* Ages come from the store's object timestamps, never the local clock.
* One GC at a time: ``gc/lock`` (:mod:`snapstore.maintenance.lock`) is created create-only and
  removed at the end; a lock older than ``lock_timeout`` seconds (store time) is considered stale.

The phases, as restic's prune: :func:`plan_gc` lists the repository, marks what the live
checkpoints need (:class:`GCMarker`) and selects the packs to repack, returning a :class:`GCPlan`;
:meth:`GCPlan.execute` repacks, plans the sweep (:func:`snapstore.maintenance.sweep.plan_sweep`)
and sweeps. A dry run calls :meth:`GCPlan.estimate` instead: the repack builds its packs without
writing them and the sweep plan is counted, not executed. One exception to "planning writes
nothing": mostly dead segments are copied while mark has them cached (docs/format.md §21,
"Copying while marking"); those copies are new packs nothing names until the repack retires
their sources, and are deleted if the plan is abandoned.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Callable

from ..errors import InvalidInputError, ObjectNotFound, SnapstoreError
from ..format import keys, runmark
from ..format.manifest import FREE_AFTER, KIND_TOMBSTONE
from ..format.shared import effective_mtime
from ..repo.packcache import PACK_COST
from ..repo.bundles import archived_runs
from ..repo.repository import Repository
from ..stores.base import max_concurrency, store_capabilities
from .bundlegc import list_bundle_objects
from ..format.logseg import BUNDLE_LOGS, bundlelog_id
from .forwarding import ForwardMap
from .gcreport import GCOptions, GCReport, account_flush
from .lock import LOCK_KEY, LOCK_TIMEOUT, LockKeeper, acquire, break_lock, release
from .mark import Marker, MarkScope, bundle_standins
from .repack import PackWriter, SegmentRewrites, copy_live, prefetch_wave
from .runs import head_segments, list_run_range, list_runs, read_runs_slim, segments_by_run
from .sweep import FWD_CACHE_KEY, plan_sweep, read_forward_cache

GC_CACHE_BYTES = 128 << 20
"""Pack-cache budget (bytes, as the repository counts them: a pack's compressed and uncompressed
bytes and its entry table, :func:`snapstore.repo.packcache.pack_cost`) while GC runs (raised for the
largest run's segments, :data:`MARK_CACHE_FACTOR`, up to the repository's own budget)."""

MARK_CACHE_FACTOR = 48
"""GC's pack-cache budget while marking is at least this many times the listed (compressed) bytes
of the largest run's segments, plus twice :data:`~snapstore.repo.packcache.PACK_COST` per pack:
twice what the cache charges for them (:func:`~snapstore.repo.packcache.pack_cost`: compressed
bytes, uncompressed ones at up to about 10x, an entry table entry per 20 bytes or more of pack),
up to the repository's own budget."""

MARK_ATTEMPTS = 3
"""Times a GC beside writers lists and marks again when a pack went between its listing and mark's
read of it (writers merge tiers and delete their inputs while GC runs)."""

MERGE_OUTPUTS = 8
"""Small packs that forwarding records point at are merged only when at least this many are small."""

SEG_PENDING_BYTES = 16 << 20
"""Bytes of segment rewrites (built during mark) whose writes may be in flight at once."""

__all__ = ["GCReport", "GCPlan", "GCMarker", "gc", "plan_gc", "break_lock", "LOCK_KEY", "LOCK_TIMEOUT",
           "FWD_CACHE_KEY", "GC_CACHE_BYTES", "MERGE_OUTPUTS"]


def gc(repo: Repository, grace_period: float = 3600.0, dry_run: bool = False, max_unused: float = 0.25,
       small_pack_bytes: int = 1 << 20, target_pack_bytes: int = 8 << 20, repack_level: int = 9,
       lock_timeout: float = LOCK_TIMEOUT, progress: Callable[[str, int, int], None] | None = None,
       hooks: dict | None = None, force: bool = False, inventory=None) -> GCReport:
    """Collect garbage: delete what no live checkpoint needs, repack what is mostly dead or small.

    Args:
        repo: the repository.
        grace_period: seconds an unreferenced object must stay unreferenced (and exist) before it is
            deleted. 0 asserts that nothing else writes to the repository: then unreferenced objects
            are deleted by this call.
        dry_run: compute and report, change nothing.
        max_unused: repack a live pack when more than this fraction of its bytes is dead.
        small_pack_bytes: live packs smaller than this are merged (when there are at least two).
        target_pack_bytes: uncompressed size at which a new pack is closed during repacking.
        repack_level: zstd level for repacked packs.
        lock_timeout: seconds (store time) after its last refresh at which another GC's lock is
            stale and taken over (a running GC refreshes its own every ``lock_timeout / 5``); a lock
            whose process is gone on this machine is taken over at once.
        progress: optional ``progress(phase, done, total)``.
        hooks: test hooks called between phases: ``after_list``, ``after_mark``, ``after_repack``,
            ``before_sweep``, ``after_bundle_index_deleted``, ``after_sweep`` (keyword arguments
            describe the state).
        force: also delete dead archive bundles whose storage class's minimum duration has not
            passed (S3 bills the rest of it: ``GCReport.early_deletion_fee``, USD); without it they
            are kept and reported in ``GCReport.held_bundles`` (docs/format.md §28).
        inventory: None (LIST ``packs/``), or an S3 Inventory to take the packs from instead: the
            ``s3://BUCKET/KEY`` of its ``manifest.json`` or an
            :class:`~snapstore.maintenance.inventory.Inventory`. A pack it does not list, or lists
            as modified after its creation, is never deleted (docs/format.md §21, "Listing from an
            S3 Inventory").
    Returns:
        A :class:`GCReport`.
    Raises:
        ConflictError: another GC holds the lock.
        InvalidInputError: a negative grace period or a bad threshold; a malformed inventory, or
            one of another bucket (:func:`~snapstore.maintenance.inventory.read_inventory`).
        IntegrityError / ObjectNotFound: a live checkpoint is unreadable (GC deletes nothing then).
    """
    if grace_period < 0 or not 0 <= max_unused <= 1:
        raise InvalidInputError("grace_period must be >= 0 and max_unused within [0, 1]")
    opts = GCOptions(grace_period, dry_run, max_unused, small_pack_bytes, target_pack_bytes, repack_level,
                     lock_timeout, progress, hooks, force)
    if isinstance(inventory, str):
        from .inventory import read_inventory
        inventory = read_inventory(inventory, repo.store)
    opts.inventory = inventory
    t0 = time.monotonic()
    store = repo.store
    now = repo.store_time()
    token = os.urandom(8).hex()
    keeper = None
    if not dry_run:
        keeper = LockKeeper(repo, token, acquire(repo, now, lock_timeout, token), max(0.05, lock_timeout / 5))
    # mark needs each pack once, while its run is marked (what the sweep needs of it is kept in
    # ``Reach.usage``): a small pack cache bounds GC's memory whatever the repository's size
    cache_limit = repo.cache.limit
    repo.cache.limit = min(cache_limit, GC_CACHE_BYTES)
    try:
        for attempt in range(MARK_ATTEMPTS):
            marked = []

            def lock_check():
                if keeper is not None:
                    keeper.check()
                marked.append(True)  # mark is over: from here on GC writes and deletes
            try:
                with repo.whole_packs():  # GC copies and checks whole packs: no ranged reads
                    plan = plan_gc(repo, opts, now, cache_limit, lock_check)
                    rep = plan.estimate() if dry_run else plan.execute()
                break
            except ObjectNotFound as e:
                # beside writers (grace > 0) a pack can go between the listing and mark's read of
                # it (a tier merged and its inputs deleted twice over): list and mark again; mark
                # has changed nothing yet (its copies are removed when it stops)
                if marked or grace_period == 0 or attempt == MARK_ATTEMPTS - 1 or \
                        not str(getattr(e, "key", "")).startswith(keys.PACKS):
                    raise
                now = repo.store_time()
    finally:
        repo.cache.limit = cache_limit
        if keeper is not None:
            keeper.stop()
            release(repo, token)
    if store_capabilities(store).empty_dirs and not dry_run:
        store.remove_empty_dirs()
    if store_capabilities(store).vacuum and not dry_run:
        store.compact()  # a SQLite file gives its free pages back (stores/sqlite.py)
    rep.elapsed = time.monotonic() - t0
    return rep


def plan_gc(repo: Repository, opts: GCOptions, now: float, cache_limit: int,
            lock_check: Callable[[], None] = lambda: None) -> "GCPlan":
    """List, mark and select what to repack (see the module docstring); the caller holds the GC lock.

    Args:
        repo: the repository (its pack cache budget already lowered to GC's).
        opts: the :class:`GCOptions`.
        now: the store's clock at the start (seconds since the epoch, UTC).
        cache_limit: the repository's own pack-cache budget (bytes): mark may raise GC's up to it.
        lock_check: called once mark is over; raises ConflictError when the lock was lost.
    Returns:
        A :class:`GCPlan`, to :meth:`~GCPlan.execute` (or, for a dry run, :meth:`~GCPlan.estimate`).
    Raises:
        IntegrityError / ObjectNotFound: a live checkpoint is unreadable (nothing is deleted).
        ConflictError: the lock was lost.
    """
    plan = GCPlan(repo, opts, now, cache_limit)
    plan.inventory = opts.inventory
    plan.list_repository()
    try:
        plan.mark()
        lock_check()  # a GC that lost its lock writes no pack or forwarding record
        plan.plan_repack()
    except BaseException:
        plan.abandon()
        raise
    plan.lock_check = lock_check
    return plan


class GCMarker(Marker):
    """Mark for GC: beside writers, a run whose packs vanished while marking is marked again with
    its newest record's segments; once each run is marked, the mostly dead segments it met are
    copied while still cached (:meth:`SegmentRewrites.on_run`).

    Args:
        repo: the repository.
        scope: a :class:`MarkScope` (GC passes ``sizes``, so segments are fetched in waves).
        rewrites: the :class:`SegmentRewrites` copying mostly dead segments.
    """

    refreshes = True

    def __init__(self, repo: Repository, scope: MarkScope, rewrites: SegmentRewrites):
        super().__init__(repo, scope, keep_refs=False)
        self.rewrites = rewrites

    def refresh(self, run_id: str) -> list:
        """The segment list of run ``run_id``'s newest record, read again."""
        newest = self.repo.head(self.repo.run_key(run_id))
        return newest.segment_list() if newest is not None and newest.kind != KIND_TOMBSTONE else []

    def on_run(self, reach, pids) -> None:
        """Copy the mostly dead segments of the run just marked (see :class:`SegmentRewrites`)."""
        self.rewrites.on_run(reach, pids)


class GCPlan:
    """One garbage collection: what it listed and marked, what it repacks, and its report.

    Made by :func:`plan_gc`; its phases are methods, in order: :meth:`list_repository`,
    :meth:`mark`, :meth:`plan_repack` (planning), then :meth:`execute` (:meth:`repack`, the sweep
    plan, :meth:`SweepPlan.execute`) or, for a dry run, :meth:`estimate`.

    Args:
        repo: the repository.
        opts: the :class:`GCOptions`.
        now: the store's clock at the start (seconds since the epoch, UTC).
        cache_limit: the repository's own pack-cache budget (bytes).

    Attributes (after planning):
        rep: the :class:`GCReport`.
        listing: the :class:`~snapstore.maintenance.runs.RunListing` of ``runs/``.
        infos: key -> ObjectInfo of everything listed.
        packs: pack id -> ObjectInfo of the listed packs.
        cands: key -> ObjectInfo of the candidate records.
        probes: clock probes left by interrupted GCs.
        mark_infos: the run markers listed.
        logs: run key -> RunLog (records kept as LogEntry).
        fmap / fwd / listed / fwd_cached: the forwarding map, retired pack -> targets (including
            this GC's), the records as read -> their store time, ``gc/fwd-cache`` as read.
        reach: what mark found (:class:`~snapstore.maintenance.mark.Reach`).
        seg_keep: segment packs kept whole -> run key.
        select / seg_select: packs merged / segments rewritten on their own.
        retired_now: packs this GC retired.
        run_range: None, or ``(after, last)`` run keys (``after`` exclusive or None, ``last``
            inclusive): only those runs' folders are listed (:func:`~snapstore.maintenance.runs.list_run_range`) and their logs read
            and marked (a partition of :mod:`snapstore.maintenance.partitions`; never swept).
        inventory: None, or the :class:`~snapstore.maintenance.inventory.Inventory` whose packs
            stand in for the LIST of ``packs/`` (then mark asks the store whether a pack exists:
            packs newer than the inventory are not in it).
    """

    def __init__(self, repo: Repository, opts: GCOptions, now: float, cache_limit: int):
        self.repo, self.opts, self.now, self.cache_limit = repo, opts, now, cache_limit
        self.grace = opts.grace_period
        self.mature = now - self.grace  # unreferenced that long ago: deletable (two-phase)
        self.log_mature = now - max(self.grace, FREE_AFTER)
        self.rep = opts.report()
        self.rep.store_time = now
        self.lock_check: Callable[[], None] = lambda: None
        self.packs: dict = {}
        self.cands: dict = {}
        self.probes: list = []
        self.retired_now: list = []
        self.select: list = []
        self.seg_select: list = []
        self.seg_writer = PackWriter(repo.store, self.rep, opts.dry_run, SEG_PENDING_BYTES, opts.target_pack_bytes,
                                     opts.repack_level)
        self.rewrites = None
        self.run_range: tuple | None = None  # (after, last] run keys: list, read and mark only these runs
        self.inventory = None  # an Inventory (maintenance/inventory.py): packs from it, not from a LIST

    # ---- list
    def list_repository(self) -> None:
        """List everything once (the run log first, then the data: every pack a manifest read
        here references was written before that manifest, so the data listing contains it; a
        writer publishing meanwhile only adds packs newer than grace/2, never candidates), read
        every run's log and the forwarding map.

        Raises:
            IntegrityError: a log record or forwarding record is unreadable (GC deletes nothing).
        """
        repo, store = self.repo, self.repo.store
        if self.run_range is not None:  # a partition (maintenance/partitions.py): only its key range is listed
            self.listing = list_run_range(repo, *self.run_range)
        else:
            self.listing = list_runs(repo)
        self.infos = self.listing.infos
        self.mark_infos = list(store.list(runmark.PREFIX))  # run markers (§13), after the run log
        # format 2: the listed manifests that log segments cover are read from their copies there
        self.logs = read_runs_slim(repo, self.listing.manifests, self.listing.logseg_positions())
        for log in self.logs.values():  # records kept as LogEntry: bounded memory
            if log.corrupt:
                k, err = log.corrupt[0]
                raise err if isinstance(err, SnapstoreError) else SnapstoreError(str(err))
        self.listing.manifests.clear()  # (the keys stay in ``infos``)
        fwd_listing = []
        inv = self.inventory
        for prefix in (keys.PACKS, keys.FWD, keys.GC):
            # an inventory's packs: only those listed at or before its creation (§21)
            listing = inv.packs if inv is not None and prefix == keys.PACKS else store.list(prefix)
            for info in listing:
                k = info.key
                self.infos[k] = info
                pid = keys.pack_id_from_key(k)
                if pid is not None:
                    # a shared pack is aged from the end of its epoch: writers reuse it until then
                    # (docs/format.md §29); every other pack from its store time
                    eff = effective_mtime(pid, info.mtime, self.now)
                    self.packs[pid] = info if eff == info.mtime else replace(info, mtime=eff)
                elif k.startswith(keys.FWD):
                    fwd_listing.append(info)
                elif k.startswith(keys.GC_CANDIDATES):
                    self.cands[k] = info
                elif k.startswith(keys.GC_CLOCK) and info.mtime <= self.now - self.opts.lock_timeout:
                    self.probes.append(info)  # left by an interrupted GC
        # archive bundles (docs/format.md §28): runs every live checkpoint of which a bundle
        # serves are marked by their bundles, never walked (no bundle is read); the bundles are
        # listed before their index records are read, so a bundle switched meanwhile is indexed
        self.bundle_objs, self.bundle_index_infos = list_bundle_objects(store)
        # bundle logs (§28), after the run logs: one written since is named by an index record
        # written before it, read below
        self.bundle_logs = {lid: info for info in store.list(BUNDLE_LOGS)
                            if (lid := bundlelog_id(info.key)) is not None}
        self.bundles = repo.bundles.load()
        self.archived = archived_runs(self.bundles, {rk: [m.seq for m in log.live] for rk, log in self.logs.items()})
        self.opts.hook("after_list", packs=set(self.packs))
        self.rep.live_checkpoints = sum(len(log.live) for log in self.logs.values())
        self.fwd_cached = read_forward_cache(repo, self.infos.get(FWD_CACHE_KEY))
        self.fmap = fmap = ForwardMap.load(repo, fwd_listing, self.fwd_cached)
        fmap.etag_like = next((i.etag for i in self.infos.values() if i.etag), "")  # sizes dry-run estimates
        if fmap.errors:
            k, err = fmap.errors[0]
            raise err if isinstance(err, SnapstoreError) else SnapstoreError(f"{k}: {err}")
        self.listed = dict(fmap.time)  # forwarding records as read -> store time they were last written
        self.fwd = fwd = dict(fmap.to)  # retired pack -> targets, including those of packs this GC retires
        packs = self.packs
        # GC redirects records: never trust what this process read earlier; retired packs
        # already deleted go straight to their forwarding records
        # (with an inventory a retired pack missing from it may exist: no such shortcut)
        repo.forwarding.reset(fwd, gone=(pid for pid in fwd if pid not in packs) if inv is None else ())
        repo.cache.forget_corrupt()  # damage is judged on what the store holds now (reported below)

    # ---- mark
    def mark(self) -> None:
        """Mark every live checkpoint, copying mostly dead segments as their runs are marked.

        Raises:
            ObjectNotFound: a live entry is found nowhere, or a live pack is missing with no
                writer beside (grace 0): GC stops (run verify).
        """
        repo, logs, packs = self.repo, self.logs, self.packs
        sizes = {p: i.size for p, i in packs.items()}
        logs = {rk: log for rk, log in logs.items() if rk not in self.archived}  # marked by their bundles
        segs_by_run = segments_by_run(logs)
        # the pack cache must hold the largest run's segments twice over (that run's wave and what
        # its walk reads), or marking it would fetch its packs again
        biggest = max((sum(MARK_CACHE_FACTOR * sizes.get(sg.pack, 0) + 2 * PACK_COST for sg in segs)
                       for segs in segs_by_run.values()), default=0)
        repo.cache.limit = max(repo.cache.limit, min(self.cache_limit, biggest))
        seg_keep = head_segments(logs)  # format 2: where the runs' entries live; their writers merge them
        self.tier_levels = {sg.pack: sg.level for segs in segs_by_run.values() for sg in segs}
        self.sizes = sizes
        # a mostly dead segment is copied as soon as its run is marked, while mark has it cached, so
        # that no pack is fetched twice (docs/format.md §21, "Copying while marking"; docs/design-notes.md
        # §2.24); the new packs are written as they fill up, a bounded number of bytes in flight
        self.rewrites = SegmentRewrites(repo, self.seg_writer, seg_keep, packs, self.fwd, self.tier_levels,
                                        self.opts.max_unused)
        live = [m for log in logs.values() for m in log.live]
        # a pack gone from a run that continued after its archive: its bundles stand in for it
        # (as forwarding targets, for this mark only; the forwarding map is not changed)
        fwd = bundle_standins(self.fwd, self.bundles, set(packs))
        # with an inventory, existence is asked of the store: packs newer than it are not listed
        present = set(packs) | set(self.bundles) if self.inventory is None else None
        marker = GCMarker(repo, MarkScope(fwd, present, segs_by_run, sizes), self.rewrites)
        self.reach = reach = marker.run(live)
        for p in reach.fresh_segs | reach.seg_standins:
            seg_keep.setdefault(p, "")
        # a segment GC rewrote (retired, below) is kept by the pack standing in for it, not itself
        self.seg_keep = seg_keep = {p: rk for p, rk in seg_keep.items() if p not in self.fwd}
        if reach.unresolved:
            pid, etype, eid = reach.unresolved[0]
            raise ObjectNotFound(keys.fwd_key(pid),
                                 f"live entry {eid.hex()} of retired pack {pid.hex()} not found; GC stopped")
        for pid in reach.packs:
            if pid not in packs and pid not in seg_keep and pid not in self.bundles:
                self._unlisted_live(pid)
        self.rep.live_packs = len(reach.packs)
        # damaged packs met while marking: readers (and this mark) took their entries from other
        # copies, so they are unreferenced unless they are the only copy (then a read above failed)
        self.rep.corrupt_packs = sorted(keys.pack_key(p) for p in repo.corrupt_packs() if p in packs)
        self.opts.hook("after_mark", live=set(reach.packs))
        if self.opts.progress:
            self.opts.progress("mark", len(reach.packs), len(reach.packs))

    def _unlisted_live(self, pid: bytes) -> None:
        """A live pack not in this GC's listing, yet mark read it: written after the listing (a
        tier a writer merged, found through a run's newer head), and perhaps merged again and
        deleted since. This GC deletes only listed packs, so it is never at risk; with writers
        active (grace > 0) the packs it was merged from are only made candidates and judged again
        by a later GC. With grace 0 (no writer) a missing one is damage: raise ObjectNotFound."""
        if self.grace > 0:
            self.seg_keep.setdefault(pid, "")
            return
        try:
            self.repo.store.head(keys.pack_key(pid))
            self.seg_keep.setdefault(pid, "")
            return
        except ObjectNotFound:
            pass
        raise ObjectNotFound(keys.pack_key(pid), f"live pack {keys.pack_key(pid)} is missing; GC stopped (run verify)")

    # ---- plan the repack
    def plan_repack(self) -> None:
        """Select mostly dead packs and small live packs to merge (:attr:`select`), and the mostly
        dead segments to rewrite on their own (:attr:`seg_select`)."""
        reach, packs, fwd, max_unused = self.reach, self.packs, self.fwd, self.opts.max_unused
        select = []
        for pid, needed in reach.packs.items():
            if pid in self.bundles:
                continue  # an archive bundle: immutable, never repacked here
            if pid in self.seg_keep:
                # a segment: its writer merges it (tiered compaction) and GC never merges it with
                # other packs; a mostly dead tier pack (checkpoints pruned) is rewritten on its own,
                # with a forwarding record from it to its rewrite (docs/format.md §21)
                if pid in packs and self.tier_levels.get(pid, 1) >= 1:
                    try:
                        live_raw, total = self._usage(pid)
                    except ObjectNotFound:
                        continue
                    if 1 - live_raw / (total or 1) > max_unused:
                        self.seg_select.append(pid)
                continue
            if pid in fwd:
                # retired, yet it holds live entries its forwarding record does not lead to
                # (referenced again after its repack dropped them): move them too, and extend its record
                select.append((packs[pid].mtime, pid, 1.0))
                continue
            try:
                live_raw, total = self._usage(pid)  # measured while marking: no second GET
            except ObjectNotFound:
                continue  # merged into a tier pack and deleted by its writer since the listing
            unused = 1 - live_raw / (total or 1)
            if unused > max_unused or packs[pid].size < self.opts.small_pack_bytes:
                select.append((packs[pid].mtime, pid, unused))
        # A small pack that forwarding records point at (an earlier repack's output) costs a rewrite
        # of each of those records when it is merged again; merge such packs only MERGE_OUTPUTS at a
        # time, so that a record is rewritten O(log) times, not once per GC, while writers keep
        # adding packs.
        targets = {t for ts in fwd.values() for t in ts}
        small_targets = [x for x in select if x[1] in targets and x[2] <= max_unused]
        if len(small_targets) < MERGE_OUTPUTS:
            select = [x for x in select if not (x[1] in targets and x[2] <= max_unused)]
        select.sort()
        worth = len(select) >= 2 or any(u > max_unused for _, _, u in select)
        self.select = [pid for _, pid, _ in select] if select and worth else []

    def _usage(self, pid: bytes) -> tuple[int, int]:
        """``reach.pack_usage``, counting in ``rep.refetched_packs`` a pack it has to fetch again
        (its needs grew after mark measured it, and it left the pack cache)."""
        repo, reach = self.repo, self.reach
        u = reach.usage.get(pid)
        if u is None or u[2] != len(reach.packs.get(pid, ())):
            with repo.lock:
                if pid not in repo.cache:
                    self.rep.refetched_packs += 1
        return reach.pack_usage(repo, pid)

    def abandon(self) -> None:
        """Planning or the repack failed: wait for the segment copies mark made and delete them
        (nothing names them)."""
        if self.rewrites is None:
            return
        self.rewrites.discard_all()
        try:
            self.seg_writer.finish()
        except SnapstoreError:
            pass  # a pack that failed to land needs no deleting; one that landed is deleted below
        try:
            self.rewrites.delete_discarded(self.repo.store, self.opts.dry_run)
        except SnapstoreError:
            pass  # left as unreferenced packs: a later GC collects them

    # ---- execute
    def execute(self) -> GCReport:
        """Repack, then sweep what the sweep plan says; return the report.

        Raises:
            InvalidInputError: the plan was made for a dry run (use :meth:`estimate`).
            ConflictError: the lock or a forwarding-map shard was lost meanwhile (nothing deleted).
        """
        if self.opts.dry_run:
            raise InvalidInputError("a dry-run GC plan is estimated, not executed")
        sweep = self._repack_and_plan_sweep()
        sweep.execute()
        self.opts.hook("after_sweep")
        return self.rep

    def estimate(self) -> GCReport:
        """Dry run: the report of what :meth:`execute` would do (the repack builds its packs and
        writes none; the sweep plan is counted); change nothing."""
        self._repack_and_plan_sweep().count()
        return self.rep

    def _repack_and_plan_sweep(self):
        self.repack()
        sweep = plan_sweep(self)
        self.opts.hook("before_sweep", delete_packs=set(sweep.del_packs), candidates=set(sweep.new_cand_p))
        self.lock_check()  # a GC that lost its lock (taken over as stale) deletes nothing
        return sweep

    # ---- repack
    def repack(self) -> None:
        """Merge :attr:`select`; rewrite :attr:`seg_select` one at a time, each rewrite holding
        exactly one segment's live entries. Most were copied while mark had them cached (with
        every need mark ended with); the others are fetched again, in parallel waves. The
        forwarding-map shards are written once, after every rewrite is durable."""
        rep, reach, repo, progress = self.rep, self.reach, self.repo, self.opts.progress
        try:
            if self.select:
                heads = [log.live[0] for log in self.logs.values() if log.live]
                self.retired_now = self.repack_packs(self.select, heads)
        except BaseException:
            self.abandon()
            raise
        early, late = {}, []
        for pid in self.seg_select:
            c = self.rewrites.take(pid, len(reach.packs[pid]))
            if c is not None:
                early[pid] = c
            else:
                late.append(pid)
        self.rewrites.discard_all()  # copied, but not rewritten after all (more of it is live than it was)
        try:
            for i, (pid, c) in enumerate(early.items()):
                rep.repacked_packs += 1
                rep.repack_bytes_in += c.size_in
                if progress:
                    progress("repack", i + 1, len(self.seg_select))
            self._rewrite_late(late)
        finally:
            self.seg_writer.finish()  # every copy made during mark is durable before a record names it
            self.rewrites.delete_discarded(repo.store, self.opts.dry_run)
        if early:
            self.retire(list(early), {p: c.moved for p, c in early.items()})
            self.retired_now += list(early)
        if self.seg_select:
            account_flush(rep, self.fmap.flush(dry_run=self.opts.dry_run))
        self.opts.hook("after_repack", retired=set(self.retired_now))

    def _rewrite_late(self, late: list) -> None:
        """Rewrite the segments ``late`` (not copied during mark) one at a time, fetched in waves."""
        per_wave, budget, fetched = max_concurrency(self.repo.store), max(1, self.repo.cache.limit // 6), 0
        for i, pid in enumerate(late):
            if i >= fetched:
                fetched, n = prefetch_wave(self.repo, late, i, self.sizes, per_wave, budget)
                self.rep.refetched_packs += n
            try:
                self.retired_now += self.repack_packs([pid], [], flush=False)
            except ObjectNotFound as e:
                if e.key != keys.pack_key(pid):
                    raise
                # merged and deleted by its writer since mark read it (its entries are in the
                # writer's new tier pack, which the run's newest record lists): nothing to rewrite

    def repack_packs(self, pids: list[bytes], heads: list, flush: bool = True) -> list[bytes]:
        """Copy the live entries of ``pids`` into new packs, then write their forwarding records
        (:meth:`retire`); return the retired pack ids. The packs are fetched in parallel waves of
        up to the store's ``max_concurrency`` (and a sixth of the pack cache by listed bytes);
        those not cached count in ``rep.refetched_packs`` (mark read every one of them before).
        ``heads``: each run's newest checkpoint, decoded first so that dictionaries come for free.
        ``flush=False``: leave writing the changed forwarding-map shards to the caller (after
        every rewrite it makes is durable).

        Raises:
            ConflictError: a forwarding-map shard changed meanwhile (the retired packs stay live).
        """
        repo, rep, opts = self.repo, self.rep, self.opts
        for m in heads:  # decode each run's newest list in order: dictionaries then come for free
            try:
                repo.decode_blocks(m)
            except SnapstoreError:
                pass  # the copy below reads entries one by one and reports what is wrong
        # new packs are built and written as they fill up (at most PackWriter.MAX_PENDING bytes in
        # flight), so memory stays bounded by one open pack plus the writes in progress
        writer = PackWriter(repo.store, rep, opts.dry_run, target=opts.target_pack_bytes, level=opts.repack_level)
        cur = None
        moved: dict[bytes, set] = {}
        size_in = 0
        per_wave = max_concurrency(repo.store)
        budget = max(1, repo.cache.limit // 6)
        fetched = 0
        try:
            for i, pid in enumerate(pids):
                if i >= fetched:  # the next packs in one parallel wave (as many as the cache holds)
                    fetched, n = prefetch_wave(repo, pids, i, self.sizes, per_wave, budget)
                    rep.refetched_packs += n
                pack = repo.get_pack(pid)
                size_in += len(pack.data)
                cur, moved[pid] = copy_live(repo, pid, pack, self.reach.needed_entries(pid, pack), cur, writer)
                if opts.progress:
                    opts.progress("repack", i + 1, len(pids))
            if cur is not None:
                writer.close(cur)
        finally:
            writer.finish()  # every new pack is durable before any forwarding record names one
        rep.repacked_packs += len(pids)
        rep.repack_bytes_in += size_in
        self.retire(pids, moved)
        # after the new packs are durable (writer.finish above); a dry run counts what it would write
        if flush:
            account_flush(rep, self.fmap.flush(dry_run=opts.dry_run))
        return list(pids)

    def retire(self, pids: list[bytes], moved: dict) -> None:
        """Retire the packs ``pids`` whose live entries were copied into the new packs ``moved``
        (pack id -> ids of the new packs): a forwarding record (in the map, and in :attr:`fwd`)
        for every retired pack that hints or older records lead to; a pack retired before keeps
        its targets and gets the new ones added. Writes nothing: the caller flushes the map once
        every new pack is durable."""
        fwd, fmap, rep, now = self.fwd, self.fmap, self.rep, self.now
        named = {t for ts in fwd.values() for t in ts}
        for pid in pids:
            if pid in fwd:
                fwd[pid] = list(dict.fromkeys(list(fwd[pid]) + sorted(moved.get(pid, ()))))
                fmap.set(pid, fwd[pid], now)
                rep.added_forward += 1
            else:
                fwd[pid] = sorted(moved.get(pid, ()))
                if pid in self.reach.hinted or (self.grace and pid in named):
                    fmap.set(pid, fwd[pid], now)
                    rep.added_forward += 1
                # else nothing leads to it but records that are spliced when it is deleted, which with
                # grace 0 is in this GC: the record would be unreferenced at once
        if self.opts.dry_run:
            return
        with self.repo.lock:
            for pid in pids:
                self.repo.forwarding.drop(pid)
