"""Unarchive: archived runs brought back hot, the reverse of archive (docs/format.md §28).

Layer 4 (it publishes a log record). For each run, in this order:

1. mark what its live checkpoints need (the :class:`~snapstore.maintenance.mark.Marker` archive
   and GC use; the entries resolve to the bundles once GC took the hot packs), refusing a bundle
   in ``GLACIER``/``DEEP_ARCHIVE`` that is not restored (``ColdObjectError`` naming the
   ``snapstore restore`` command) before anything is written;
2. copy every needed entry into one new hot pack, written create-only, and read it back whole,
   checking every entry (*copy first*);
3. rewrite each serving bundle's index record without the run (compare-and-swap on its ETag;
   ``replaces`` is kept, so a reader that meets a gone hot pack still reaches the bundle): *the
   switch*. From then on the run is not archived: GC walks it, and an entry it resolves to a
   bundle keeps that bundle live;
4. publish a rollback record to the run's head whose segment list is the new pack alone (a
   foreign segment, never merged or deleted by the run's writers; GC keeps it whole as a segment
   of the newest record): readers and writers find every entry there, GC stops reaching the
   bundle, and a bundle that serves nothing more is dead and goes by GC's two phases.

A kill before (3) leaves the run archived as it was (the new pack unreferenced, GC's); between
(3) and (4) the run is hot-by-catalogue and reads through the bundle (GC keeps it, mark reaches
it); after (4) it is hot. Steps (2)-(4) happen within half the GC grace period of the pack's
upload, or the pack is deleted and nothing switched (``ConflictError``), as for archive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from . import publish, views
from ..errors import ConflictError, IntegrityError, ObjectNotFound, PreconditionFailed, RunNotFound
from ..format import keys
from ..format.bundle import BundleIndex, decode_index, encode_index, index_key
from ..format.ids import check_run_id, new_pack_id, new_write_id
from ..format.logseg import logseg_prefix
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, ArchivedManifest, Manifest
from ..format.pack import Pack, PackBuilder
from ..format.segs import Seg
from ..maintenance.archcat import compact_run_log
from ..maintenance.archive import call_hook, check_read_back
from ..maintenance.bundlegc import switch_deadline
from ..maintenance.forwarding import read_forward_map
from ..maintenance.mark import Marker, MarkScope, bundle_standins
from ..maintenance.runs import list_runs, read_all_runs, segments_by_run
from ..repo.log.stubs import default_compact_log

__all__ = ["UnarchiveReport", "unarchive"]


@dataclass
class UnarchiveReport:
    """What :func:`unarchive` did.

    Attributes:
        runs: ids of the runs brought back hot. skipped: run id -> why not (not archived, ...).
        packs: keys of the hot packs written (one per run). checkpoints: live checkpoints now hot.
        bytes: bytes of those packs. bundles: keys of the bundles whose index records were
            rewritten; ``released``: those that now serve no run (GC deletes them).
    """

    runs: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    packs: list = field(default_factory=list)
    checkpoints: int = 0
    bytes: int = 0
    bundles: list = field(default_factory=list)
    released: list = field(default_factory=list)


def unarchive(mgr, run_ids: list, hooks: dict | None = None) -> UnarchiveReport:
    """Bring runs ``run_ids`` back hot (module docstring).

    Args:
        mgr: the manager. run_ids: run ids.
        hooks: test hooks called after each step: ``after_pack_put``, ``after_readback``,
            ``after_switch``, ``after_record`` (keyword arguments ``run``, ``key``).
    Returns:
        An :class:`UnarchiveReport`.
    Raises:
        RunNotFound: a run has no live checkpoint.
        ColdObjectError: a bundle it needs is in a cold class and not restored (nothing written).
        ConflictError: the run changed while being copied, or the copy took longer than half the
            GC grace period (its pack deleted, nothing switched: unarchive again).
        IntegrityError / StoreError: a bundle or the new pack is unreadable, a request failed.
    """
    for r in run_ids:
        check_run_id(r)
    rep = UnarchiveReport()
    repo = mgr.state.repository(False)
    listing = list_runs(repo)
    wanted = {repo.run_key(r): r for r in run_ids}
    for rk, r in wanted.items():
        if rk not in listing.manifests:
            raise RunNotFound(f"run {r!r} has no checkpoint")
    logs = read_all_runs(repo, {rk: listing.manifests[rk] for rk in wanted},
                         logsegs_by_run={k: v for k, v in listing.logseg_positions().items() if k in wanted})
    for rk, log in logs.items():
        if log.corrupt:
            raise log.corrupt[0][1]
        if not log.live:
            raise RunNotFound(f"run {wanted[rk]!r} has no live checkpoint")
    bundles = repo.bundles.load()
    fmap = read_forward_map(repo)
    segs = segments_by_run(logs)
    present = {pid for pid in (keys.pack_id_from_key(i.key) for i in repo.store.list(keys.PACKS)) if pid is not None}
    # a hot pack GC took: the bundles replacing it stand in for it (as GC's mark does, §28)
    fwd = bundle_standins(fmap.to, bundles, present)
    present |= set(bundles)
    for rk, r in wanted.items():
        log = logs[rk]
        serving = sorted(bid for bid, ix in bundles.items() if rk in ix.runs)
        # not served, but the newest record's segments are gone and bundles replace them: an
        # unarchive stopped between its switch and its record (the run reads through the bundles)
        left = not serving and any(sg.pack not in present and sg.pack in fwd for sg in segs.get(r, []))
        if not serving and not left:
            rep.skipped[r] = "not archived"
            continue
        marker = Marker(repo, MarkScope(fwd, present, {r: segs.get(r, [])}))
        reach = marker.run(log.live)
        need = {pid: set(v) for pid, v in reach.packs.items()}
        in_bundles = [pid for pid in need if pid in bundles]
        for bid in set(serving) | set(in_bundles):
            repo.bundles.key(bid)  # ColdObjectError for an unrestored GLACIER/DEEP_ARCHIVE bundle
        _one(mgr, repo, r, rk, log, need, [bundles[b] for b in serving], rep, hooks)
    repo.bundles.load()
    return rep


def _one(mgr, repo, run_id: str, rk: str, log, need: dict, serving: list, rep: UnarchiveReport, hooks) -> None:
    store = repo.store
    pid = new_pack_id()
    builder = PackBuilder(pid, level=repo.config.level)
    copied: dict = {}
    for src, entries in need.items():
        pack = repo.cache.get_pack(src)
        order = sorted((k for k in entries if k in pack.entries),
                       key=lambda k: (pack.entries[k].block, pack.entries[k].offset))
        for etype, eid in order:
            if (etype, eid) in copied:
                continue
            raw = repo.read_entry(etype, eid, src)
            copied[(etype, eid)] = raw
            builder.add(etype, eid, raw)
    data, _ = builder.build()
    key = keys.pack_key(pid)
    started = time.monotonic()
    store.put(key, data)
    call_hook(hooks, "after_pack_put", run=run_id, key=key)
    back = store.get(key)
    check_read_back(key, Pack.parse(key, back, pid), copied, "pack")
    call_hook(hooks, "after_readback", run=run_id, key=key)
    if any(isinstance(m, ArchivedManifest) for m in log.manifests.values()):
        # its records' data-locating fields are in the bundles (a thin bundle log, §28, §31): its
        # whole log goes back hot first (an archive log of whole records, the pointer dropped),
        # before the switch lets GC delete those bundles
        res = compact_run_log(repo, rk, log.manifests, stub=default_compact_log(store))
        if res.key is None:
            store.delete_many([key])
            raise IntegrityError(logseg_prefix(rk), f"run {run_id!r}'s log could not be written back whole "
                                 f"({res.why}); its pack deleted, nothing switched")
    deadline = switch_deadline(mgr.gc_grace_period)
    if deadline is not None and time.monotonic() - started > deadline:
        store.delete_many([key])
        raise ConflictError(f"unarchive of run {run_id!r} took {time.monotonic() - started:.0f} s to copy, more than "
                            f"half the GC grace period ({deadline:.0f} s); its pack deleted, nothing switched: "
                            "unarchive again")
    head = max(log.live, key=lambda m: m.seq)
    newest = repo.head(rk)
    if newest is None or newest.kind == KIND_TOMBSTONE or not _resolves_to(newest, head):
        store.delete_many([key])
        raise ConflictError(f"run {run_id!r} changed while it was copied; nothing switched: unarchive again")
    for ix in serving:  # the switch
        if _release(store, ix, rk):
            rep.released.append(ix.key)
        rep.bundles.append(ix.key)
    call_hook(hooks, "after_switch", run=run_id, key=key)
    m = Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=newest.seq + 1, write_id=new_write_id(),
                 created=datetime.now(timezone.utc), target={"seq": head.seq, "id": head.checkpoint_id},
                 segs=[Seg(pid, 0, True)])
    publish.publish_record(mgr, run_id, rk, newest, m, "unarchive")
    mgr.state.views.pop(run_id, None)
    # the caller moved the head (to the same checkpoint, by a new record): its view is that record,
    # so its next delete/rollback/save is not refused as if another writer had moved it
    views.saw(mgr, run_id, head.checkpoint_id, m.seq, m.write_id)
    call_hook(hooks, "after_record", run=run_id, key=key)
    rep.runs.append(run_id)
    rep.packs.append(key)
    rep.checkpoints += len(log.live)
    rep.bytes += len(data)


def _resolves_to(newest: Manifest, head: Manifest) -> bool:
    """Whether the run's newest record still makes ``head`` its head (no save since the listing)."""
    if newest.kind == KIND_CHECKPOINT:
        return newest.seq == head.seq and newest.write_id == head.write_id
    return newest.kind == KIND_ROLLBACK and newest.target and newest.target.get("seq") == head.seq


def _release(store, ix: BundleIndex, rk: str) -> bool:
    """Rewrite bundle ``ix``'s index record without run ``rk`` (compare-and-swap, re-read on a
    change); True when it then serves no run."""
    k = index_key(ix.bundle)
    for _ in range(8):
        try:
            info = store.head(k)
            cur = decode_index(k, store.get(k))
        except ObjectNotFound:
            return True  # gone (GC deleted a dead record): nothing serves the run
        if rk not in cur.runs:
            return not cur.runs
        runs = {x: v for x, v in cur.runs.items() if x != rk}
        new = BundleIndex(cur.bundle, cur.key, cur.storage_class, cur.size, cur.checksum, cur.created, runs,
                          cur.replaces)
        try:
            store.put_if_match(k, encode_index(new), info.etag)
            return not runs
        except PreconditionFailed:
            continue
    raise ConflictError(f"{k} keeps changing; could not switch it")
