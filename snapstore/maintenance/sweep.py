"""The sweep of a garbage collection: deciding what goes (:func:`plan_sweep`) and deleting it
(:meth:`SweepPlan.execute`); a dry run counts the plan instead (:meth:`SweepPlan.count`).

Layer 4's whole-repository operations, the last phase of :mod:`snapstore.maintenance.gc` (the
safety argument is docs/format.md §21). Deletion is two-phase: an unreferenced pack or
forwarding record first becomes a candidate (a ``gc/candidates/`` record,
:mod:`snapstore.format.gcstate`); a later GC deletes it once the record is older than the grace
period and it is still unreferenced. Log records go once older than the grace period (and than
``FREE_AFTER``). Order of the sweep: the candidate record, forwarding records spliced past the
packs that go, the packs, forwarding records dropped, removal records (§16), index records, run
markers, log segments and manifests (hidden ones before the records hiding them), the candidate
records used, the forwarding cache, crash leftovers.
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import ObjectNotFound, SnapstoreError
from ..format import keys
from ..format.gcstate import candidates_key, decode_candidate_bundles, decode_candidates, encode_candidates
from ..format.logseg import parse_logseg_key, pointer_bundle, seg_lo
from ..format.manifest import KIND_ROLLBACK, KIND_TOMBSTONE
from ..format.forward import decode_forward_cache, encode_forward_cache
from ..format.index import decode_index
from ..format.removals import decode_removals, merge_ranges
from ..repo.log import runmarks
from ..repo.repository import Repository
from .bundlegc import BundleSweep, execute_bundles, plan_bundles
from .gcreport import GCReport, account_flush
from . import outcomes
from ..stores.base import store_capabilities

FWD_CACHE_KEY = keys.FWD_CACHE

REMOVALS_MERGE = 8
"""A run with more removal records than this has them merged into one by GC."""


@dataclass
class _RemovalPlan:
    """What a GC does with removal records (docs/format.md §16): ``write`` run key -> the merged
    ranges of the one record written for it (the positions this GC deletes, with the run's records
    when it has more than :data:`REMOVALS_MERGE`), before the log records go; ``drop`` the
    ``ObjectInfo`` of records deleted afterwards (merged ones, those of runs whose whole log this
    GC removes: their positions restart at 0, and leftovers of runs with no log)."""

    write: dict = field(default_factory=dict)
    drop: list = field(default_factory=list)


def _plan_removals(repo: Repository, del_keys: list, removals_by_run: dict, gone_runs: set, logs: dict,
                   mature: float, grace: float) -> _RemovalPlan:
    """The :class:`_RemovalPlan` for the log records ``del_keys`` (``(key, size, category)``)
    that this GC deletes; ``removals_by_run``: run key -> ObjectInfo of its removal records;
    ``gone_runs``: run keys whose whole log goes; ``logs``: run key -> RunLog; ``mature``: store
    time at or before which a record is old enough to go; ``grace``: seconds."""
    plan = _RemovalPlan()
    by_run: dict[str, list[list[int]]] = defaultdict(list)
    for k, _, c in del_keys:
        if c == "manifests":
            rk = keys.parse_key(k).run_key
            if rk not in gone_runs:
                s_ = keys.seq_from_manifest_key(k)
                by_run[rk].append([s_, s_])
    for rk, infos in removals_by_run.items():
        if rk in gone_runs or (rk not in logs and all(grace == 0 or i.mtime <= mature for i in infos)):
            plan.drop.extend(infos)
        elif len(infos) > REMOVALS_MERGE:
            try:
                got = [r for i in infos for r in decode_removals(i.key, repo.store.get(i.key))]
            except SnapstoreError:
                continue  # left as they are (verify reports a corrupt one)
            by_run[rk].extend(got)
            plan.drop.extend(infos)
    plan.write = {rk: merge_ranges(r) for rk, r in by_run.items()}
    return plan


def read_forward_cache(repo: Repository, cache_info) -> dict:
    """``gc/fwd-cache`` as stored (``{}`` if absent or unreadable: it is advisory).

    Args:
        repo: the repository.
        cache_info: the cache's ObjectInfo from the listing, or None (not listed).
    Returns:
        pack id -> ``(shard ETag, targets, time)``.
    """
    if cache_info is None:
        return {}
    try:
        return decode_forward_cache(FWD_CACHE_KEY, repo.store.get(FWD_CACHE_KEY))
    except SnapstoreError:
        return {}


@dataclass
class SweepPlan:
    """What the sweep of one GC deletes and writes, decided by :func:`plan_sweep`.

    Attributes:
        gc: the :class:`~snapstore.maintenance.gc.GCPlan` it belongs to (its listing, mark,
            forwarding map, report and options).
        del_packs: ids of the packs deleted.
        del_fwd: retired pack ids whose forwarding records are dropped.
        del_keys: ``(key, bytes, category)`` of the other objects deleted (categories of
            ``GCReport.deleted``).
        matured_keys: candidate records whose time has come (or that are unreadable): deleted.
        new_cand_p / new_cand_f: hex ids of the packs / forwarding records that become candidates
            (one new candidate record names them).
        removals: the removal records written and dropped (:class:`_RemovalPlan`).
        bundles: what happens to archive bundles (:class:`~snapstore.maintenance.bundlegc.BundleSweep`).
    """

    gc: object
    del_packs: set = field(default_factory=set)
    del_fwd: set = field(default_factory=set)
    del_keys: list = field(default_factory=list)
    matured_keys: list = field(default_factory=list)
    new_cand_p: list = field(default_factory=list)
    new_cand_f: list = field(default_factory=list)
    removals: _RemovalPlan = field(default_factory=_RemovalPlan)
    bundles: BundleSweep = field(default_factory=BundleSweep)
    matured_bundles: set = field(default_factory=set)
    pending_bundles: set = field(default_factory=set)
    apply: bool = False  # set by execute(): False while a dry run counts the plan

    def count(self) -> None:
        """Dry run: count in the report what :meth:`execute` would delete and write; change nothing."""
        rep = self.gc.rep
        self.apply = False
        self._count_packs()
        self._splice_forwards()
        self._drop_forwards()
        for k, size, cat in self.del_keys:
            rep.deleted[cat] += 1
            rep.deleted_bytes += size
        self._count_matured()
        if self.new_cand_p or self.new_cand_f or self.bundles.new_candidates:
            rep.written_objects += 1
            rep.written_bytes += len(encode_candidates(self.new_cand_p, self.new_cand_f, self.bundles.new_candidates))
        execute_bundles(self.gc, self.bundles, False)
        self._write_removals()
        self._drop_removals()
        self._write_forward_cache()
        self._remove_leftovers()

    def execute(self) -> None:
        """Delete and write what the plan says, in the order of the module docstring.

        Raises:
            ConflictError: a forwarding-map shard changed meanwhile (nothing is deleted then).
            StoreError: the store failed (what was deleted stays deleted; a later GC goes on).
        """
        g, rep, store = self.gc, self.gc.rep, self.gc.repo.store
        self.apply = True
        # the candidate record first, so nothing unreferenced is forgotten
        if self.new_cand_p or self.new_cand_f or self.bundles.new_candidates:
            body = encode_candidates(self.new_cand_p, self.new_cand_f, self.bundles.new_candidates)
            store.put(candidates_key(g.now, os.urandom(4).hex()), body)
            rep.written_objects += 1
            rep.written_bytes += len(body)
        self._splice_forwards()
        doomed = [keys.pack_key(p) for p in self.del_packs]
        for i in range(0, len(doomed), 1000):
            store.delete_many(doomed[i:i + 1000])
            if g.opts.progress:
                g.opts.progress("sweep", min(i + 1000, len(doomed)), len(doomed))
        self._count_packs()
        execute_bundles(g, self.bundles, True)  # dead bundles: index record, then the bundle (§28)
        self._drop_forwards()
        self._write_removals()  # the positions go on record first (§16)
        if self.del_keys:
            del_keys = self.del_keys
            # index records before manifests; hidden manifests before the records that hide them
            store.delete_many([k for k, _, c in del_keys if c == "runmarks"])  # before the tombstones
            store.delete_many([k for k, _, c in del_keys if c in ("index", "gc", "log", "outcomes")])
            man = [k for k, _, c in del_keys if c == "manifests"]
            hidden_first = sorted(man, key=lambda k: k)  # inverted seq: older records sort later
            store.delete_many(hidden_first[::-1])
            for k, size, cat in del_keys:
                rep.deleted[cat] += 1
                rep.deleted_bytes += size
        self._drop_removals()
        if self.matured_keys:
            store.delete_many(self.matured_keys)
        self._count_matured()
        # every forwarding record left, with the ETag of its shard
        self._write_forward_cache()
        self._remove_leftovers()

    def _count_packs(self) -> None:
        rep, packs = self.gc.rep, self.gc.packs
        for p in self.del_packs:
            rep.deleted["packs"] += 1
            rep.deleted_bytes += packs[p].size if p in packs else 0

    def _count_matured(self) -> None:
        rep, cands = self.gc.rep, self.gc.cands
        if self.matured_keys:
            rep.deleted["gc"] += len(self.matured_keys)
            rep.deleted_bytes += sum(cands[k].size for k in self.matured_keys if k in cands)

    def _write_removals(self) -> None:
        """Write the planned removal records (create-only), counted in ``written_*``."""
        g = self.gc
        for rk, ranges in self.removals.write.items():
            sizes = g.repo.record_removals(rk, ranges=ranges, dry_run=not self.apply)
            g.rep.written_objects += len(sizes)
            g.rep.written_bytes += sum(sizes)

    def _drop_removals(self) -> None:
        """Delete the planned removal records (best effort), counted in ``deleted["log"]``."""
        g, drop = self.gc, self.removals.drop
        if not drop:
            return
        if self.apply:
            try:
                g.repo.store.delete_many([i.key for i in drop])
            except SnapstoreError:
                return
        g.rep.deleted["log"] += len(drop)
        g.rep.deleted_bytes += sum(i.size for i in drop)

    def _remove_leftovers(self) -> None:
        """Remove the store's crash leftovers (``store.leftovers()``: temp files of a killed
        process, incomplete multipart uploads) written or initiated at or before ``mature`` (store
        time: now minus the grace period; with grace 0, every one: the caller asserts no other
        writer), and count them in the report. A younger one may belong to a write still running:
        it is counted as pending. Stores without leftovers (memory) have no such method."""
        g = self.gc
        rep, grace, mature = g.rep, g.grace, g.mature
        find = g.repo.store.leftovers if store_capabilities(g.repo.store).leftovers else None
        if find is None:
            return
        try:
            found = find()
        except SnapstoreError:
            return  # e.g. a policy without s3:ListBucketMultipartUploads: leftovers are not GC's to fail on
        old, young = [], 0
        for it in found:
            if grace == 0 or it.mtime <= mature:
                old.append(it)
            else:
                young += 1
        rep.leftovers_pending = young
        if not old:
            return
        try:
            n = g.repo.store.remove_leftovers(old) if self.apply else len(old)
        except SnapstoreError:
            return
        rep.leftovers_removed += n
        rep.leftover_bytes_removed += sum(it.size for it in old)

    def _write_forward_cache(self) -> None:
        """Replace ``gc/fwd-cache`` with every record of the forwarding map (pack id -> (its
        shard's ETag, targets)) unless it already says that; remove it when the map is empty.
        Failures are ignored: readers use the cache only as hints."""
        g = self.gc
        store, rep, fmap, cached = g.repo.store, g.rep, g.fmap, g.fwd_cached
        cache_info = g.infos.get(FWD_CACHE_KEY)
        entries = {p: (fmap.shard_etag(p), to, fmap.time[p]) for p, to in fmap.to.items()}
        if cache_info is not None and cached == {p: (etag, list(to), t) for p, (etag, to, t) in entries.items()}:
            return
        try:
            if not entries:
                if cache_info is not None:
                    if self.apply:
                        store.delete_many([FWD_CACHE_KEY])
                    rep.deleted["gc"] += 1
                    rep.deleted_bytes += cache_info.size
                return
            data = encode_forward_cache(entries)
            if self.apply:
                store.put_if_match(FWD_CACHE_KEY, data, cache_info.etag if cache_info is not None else None)
            rep.written_bytes += len(data) - (cache_info.size if cache_info is not None else 0)
            rep.written_objects += 1 if cache_info is None else 0
        except SnapstoreError:
            pass

    def _splice_forwards(self) -> None:
        """Before packs are deleted: rewrite ("splice") every forwarding record that names one of
        them to name that pack's own targets instead (so chains through deleted packs disappear),
        and write the changed shards. Records in ``del_fwd`` are left to :meth:`_drop_forwards`,
        after the packs are deleted.

        Records are spliced only here, never when a pack is retired: until the retired pack is
        deleted (after a grace period and a new mark) a record still leads to it.

        Raises:
            ConflictError: a shard changed meanwhile (see :meth:`ForwardMap.flush`): nothing is deleted.
        """
        g = self.gc
        del_packs, fwd, fmap = self.del_packs, g.fwd, g.fmap

        def expand(t, seen):
            if t not in del_packs:
                return [t]
            if t in seen:
                return []
            seen.add(t)
            return [x for n in fwd.get(t, ()) for x in expand(n, seen)]

        spliced = {}
        for old, targets in fwd.items():
            if old in self.del_fwd or old not in g.listed or not del_packs.intersection(targets):
                continue  # (records not listed were written by this GC and name new packs only)
            spliced[old] = list(dict.fromkeys(x for t in targets for x in expand(t, set())))
        for old, new in spliced.items():
            fwd[old] = new
            fmap.set(old, new, g.now)
        g.rep.redirected_forward += len(spliced)
        account_flush(g.rep, fmap.flush(dry_run=not self.apply))
        if self.apply:
            with g.repo.lock:
                g.repo.forwarding.update(spliced)

    def _drop_forwards(self) -> None:
        """After packs are deleted: drop the records in ``del_fwd`` from the map and write the
        changed shards (and, once, migrate per-pack records of the older layout)."""
        fmap = self.gc.fmap
        removed = [p for p in self.del_fwd if p in fmap.to]
        for p in removed:
            fmap.remove(p)
        self.gc.rep.removed_forward += len(removed)
        account_flush(self.gc.rep, fmap.flush(dry_run=not self.apply))


def plan_sweep(g) -> SweepPlan:
    """Decide what the sweep of GC ``g`` (a :class:`~snapstore.maintenance.gc.GCPlan` after its
    mark and repack) deletes; counts what waits for the grace period in ``g.rep`` (``pending_*``,
    ``segment_packs``). Reads the candidate and index records (GETs); writes nothing.

    Returns:
        A :class:`SweepPlan`.
    """
    plan = SweepPlan(g)
    _plan_packs(g, plan)
    plan.bundles = plan_bundles(g, plan.matured_bundles, plan.pending_bundles, g.opts.force)
    _plan_log(g, plan)
    _plan_logsegs(g, plan)
    return plan


def _plan_packs(g, plan: SweepPlan) -> None:
    """Packs and forwarding records: deleted (two-phase, by candidate records), or made candidates."""
    # packs retired by this repack become candidates only when a later GC finds them unreferenced
    # (through their forwarding records), unless nothing else writes (grace 0)
    # a segment (format 2) with a live entry is kept whole (or rewritten on its own, above); one
    # without (everything in it pruned, or held by a newer copy) goes like any unreferenced pack:
    # its writer's next merge finds it gone and skips it
    rep, reach, packs, listed, grace, mature = g.rep, g.reach, g.packs, g.listed, g.grace, g.mature
    rep.segment_packs = sum(1 for p in g.seg_keep if p in packs)
    unref_packs = {pid for pid in packs if pid not in reach.packs}
    if grace == 0:
        unref_packs |= set(g.retired_now)
    unref_fwd = {pid for pid in listed if pid not in reach.fwd_used}
    matured_p, matured_f = set(), set()
    pending_p, pending_f = set(), set()
    for k, info in g.cands.items():
        try:
            data = g.repo.store.get(k)
            ps, fs = decode_candidates(k, data)
            bs = decode_candidate_bundles(k, data)
        except (ObjectNotFound, SnapstoreError, ValueError):
            plan.matured_keys.append(k)
            continue
        if info.mtime <= mature:
            matured_p |= ps
            matured_f |= fs
            plan.matured_bundles |= bs
            plan.matured_keys.append(k)
        else:
            pending_p |= ps
            pending_f |= fs
            plan.pending_bundles |= bs
    if grace == 0:
        del_packs = {p for p in unref_packs if p in packs or p in g.retired_now}
        del_fwd = set(unref_fwd)
        # the records of deleted packs that no hint names directly: the sweep rewrites the records
        # that lead to them, so nothing will (with grace > 0 the next GC finds them unreferenced)
        del_fwd |= {p for p in del_packs if p in listed and p not in reach.hinted}
    else:
        del_packs = {p for p in unref_packs if p.hex() in matured_p and p in packs and packs[p].mtime <= mature}
        del_fwd = {p for p in unref_fwd if p.hex() in matured_f and listed[p] <= mature}
    # a pack becomes a candidate only once its writer can no longer publish it (older than grace/2):
    # a reference made to it after it was marked would otherwise go unseen (docs/format.md §21)
    settled = g.now - grace / 2
    plan.new_cand_p = sorted(p.hex() for p in unref_packs - del_packs
                             if p.hex() not in pending_p and p in packs and packs[p].mtime <= settled)
    plan.new_cand_f = sorted(p.hex() for p in unref_fwd - del_fwd if p.hex() not in pending_f and listed[p] <= settled)
    plan.del_packs, plan.del_fwd = del_packs, del_fwd
    rep.pending_candidates = len(unref_packs - del_packs)


def _held(rep: GCReport, size: int, cat: str) -> None:
    """Count an object no longer needed but younger than the grace period."""
    rep.pending_objects += 1
    rep.pending_bytes += size
    rep.pending_kinds[cat] += 1


def _dead_record(log, s_: int, m, hidden: set, head_seq, voids_left: set, rk: str) -> bool:
    """Is the unhidden record ``m`` at position ``s_`` of run log ``log`` dead (nothing needs it)?"""
    if s_ == head_seq:
        # a lone tombstone goes last: while void records remain, positions must not restart at 0
        return m.kind == KIND_TOMBSTONE and not log.live and len(log.manifests) - len(hidden) == 1 \
            and not log.hidden and rk not in voids_left
    if m.kind == KIND_ROLLBACK:
        t = int(m.target["seq"])
        return not any(t < x < s_ for x in log.manifests if x not in hidden) and not any(
            t < x < s_ for x in log.hidden)
    return m.kind == KIND_TOMBSTONE and not any(x < s_ for x in log.manifests)


def _plan_log(g, plan: SweepPlan) -> None:
    """Manifests hidden by rollbacks/tombstones, dead log records, void records, orphaned index
    records and left clock probes. Log records go only once older than the grace period: a writer
    whose knowledge of the run is older than half of it re-reads the head, so no writer can still
    be aiming at a freed position. A position is freed only once older than FREE_AFTER as well
    (docs/format.md §15): writers re-read the head after VIEW_TTL whatever grace period they were
    given."""
    rep, grace, infos, listing, log_mature = g.rep, g.grace, g.infos, g.listing, g.log_mature
    del_keys = plan.del_keys

    def old(key: str) -> bool:
        info = infos.get(key)
        return grace == 0 or (info is not None and info.mtime <= log_mature)

    voids_left = set()  # runs keeping a void record (or a tool outcome, §25) after this GC
    o_doomed, o_held, o_keeping = outcomes.gc_plan(listing.other, g.logs, grace, g.mature)
    del_keys += [(k, size, "outcomes") for k, size in o_doomed]
    for _, size in o_held:
        _held(rep, size, "outcomes")
    voids_left |= o_keeping  # a run's lone tombstone outlives its outcomes (its generation)
    # ... and every bundle index record naming the run: records name log positions, which must not
    # restart at 0 while one is left (docs/format.md §28, "GC")
    voids_left |= {rk for ix in g.bundles.values() for rk in ix.runs}
    for rk, vinfos in listing.voids.items():
        for info in vinfos:
            if grace == 0 or info.mtime <= log_mature:
                del_keys.append((info.key, info.size, "manifests"))
            else:
                _held(rep, info.size, "manifests")
                voids_left.add(rk)
    for rk, log in g.logs.items():
        hidden = set(log.hidden)
        for s_ in log.hidden:
            k = keys.manifest_key(rk, s_)
            if old(k):
                del_keys.append((k, infos[k].size if k in infos else 0, "manifests"))
            else:
                _held(rep, infos[k].size if k in infos else 0, "manifests")
        remaining = sorted(x for x in log.manifests if x not in hidden)
        head_seq = remaining[-1] if remaining else None
        for s_ in remaining:
            k = keys.manifest_key(rk, s_)
            size = infos[k].size if k in infos else 0
            dead = _dead_record(log, s_, log.manifests[s_], hidden, head_seq, voids_left, rk)
            if dead and old(k):
                del_keys.append((k, size, "manifests"))
            elif dead:
                _held(rep, size, "manifests")
        _plan_index(g, plan, listing.index.get(rk, []), {m.seq for m in log.live})
    for rk in listing.index:
        if rk not in g.logs:
            _plan_index(g, plan, listing.index[rk], None)
    for info in g.probes:
        del_keys.append((info.key, info.size, "gc"))


def _plan_index(g, plan: SweepPlan, infos: list, live_seqs: set | None) -> None:
    """Index records (ObjectInfo ``infos``) of one run that point at no live checkpoint (``live_seqs``:
    the run's live positions; None: the run has no log, every record is orphaned)."""
    for info in infos:
        if live_seqs is not None:
            try:
                seq, _ = decode_index(info.key, g.repo.store.get(info.key))
            except (ObjectNotFound, SnapstoreError):
                continue
            if seq in live_seqs:
                continue
        if g.grace == 0 or info.mtime <= g.mature:
            plan.del_keys.append((info.key, info.size, "index"))
        else:
            _held(g.rep, info.size, "index")


def _plan_logsegs(g, plan: SweepPlan) -> None:
    """Run markers of removed runs (§13), log segments (format 2 copies of log records) once no
    manifest of their range is left and older than the grace period (the writer of a range
    publishes its last record first), and the removal records (§16)."""
    del_keys, logs, listing = plan.del_keys, g.logs, g.listing
    going = {k for k, _, c in del_keys if c == "manifests"}
    void_keys = {i.key for vinfos in listing.voids.values() for i in vinfos}
    lone = {rk: keys.seq_from_manifest_key(k) for k, _, c in del_keys if c == "manifests" and k not in void_keys
            for rk in [keys.parse_key(k).run_key] if rk in logs and len(logs[rk].manifests) == 1}
    del_keys[:0] = [(k, size, "runmarks") for k, size in runmarks.gc_doomed(
        g.mark_infos, {rk: log.manifests for rk, log in logs.items()}, lone, g.mature, g.grace)]
    for rk, lsegs in listing.logsegs.items():
        log = logs.get(rk)
        left = sorted(s_ for s_ in (log.manifests if log else ()) if keys.manifest_key(rk, s_) not in going)
        for info in lsegs:
            hi, level = parse_logseg_key(info.key)
            lo = seg_lo(hi, level)
            i = bisect.bisect_left(left, lo)
            if i == len(left) or left[i] > hi:
                if g.grace == 0 or info.mtime <= g.mature:
                    del_keys.append((info.key, info.size, "log"))
                else:
                    _held(g.rep, info.size, "log")
    # bundle logs (§28): one whose bundle no index record names and no pointer that stays names goes once older than
    # the grace period (a partition's GC sees only its runs' pointers: it leaves them alone)
    if getattr(g, "run_range", None) is None and getattr(g, "bundle_logs", None):
        gone = {k for k, _, c in del_keys if c == "log"}
        named = {pointer_bundle(info.key) for lsegs in listing.logsegs.values() for info in lsegs
                 if info.key not in gone}
        for lid, info in g.bundle_logs.items():
            if lid not in named and lid[:8] not in g.bundles:
                if g.grace == 0 or info.mtime <= g.mature:
                    del_keys.append((info.key, info.size, "log"))
                else:
                    _held(g.rep, info.size, "log")
    plan.removals = _plan_removals(g.repo, del_keys, listing.removals, set(lone), logs, g.log_mature, g.grace)
