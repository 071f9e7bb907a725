"""Garbage collection: mark-and-sweep with two-phase deletion and a grace period, plus repacking.

Layer 4 (uses :mod:`snapstore.repo.repository` and the mark phase of :mod:`snapstore.maintenance.check`). The safety
argument is in docs/format.md, section 13. In short:

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
* One GC at a time: ``gc/lock`` is created create-only and removed at the end; a lock older than
  ``lock_timeout`` seconds (store time) is considered stale.
"""

from __future__ import annotations

import bisect
import json
import threading
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from .check import head_segments, mark, read_runs_slim, segments_by_run, void_record
from ..format.logseg import parse_logseg_key, span
from ..errors import (ConflictError, IntegrityError, InvalidInputError, ObjectNotFound, PreconditionFailed,
                     SnapstoreError)
from ..repo.log import runmarks
from ..format import keys, runmark
from ..format.codec import loads_exact, open_envelope, seal_envelope
from ..format.ids import is_pack_hex
from ..format.manifest import (FORMAT_VERSION, FREE_AFTER, KIND_ROLLBACK, KIND_TOMBSTONE, decode_forward_cache, decode_index,
                              encode_forward_cache)
from . import outcomes
from ..format.removals import decode_removals, is_removals_key, merge_ranges
from .forwarding import ForwardMap
from .repack import PackWriter, SegmentRewrites, copy_live, prefetch_wave
from ..repo.repository import Repository
from ..stores.base import max_concurrency

GC_CACHE_BYTES = 24 << 20
"""Pack-cache budget (bytes, as the repository counts them: about 3x a pack's size) while GC runs
(raised to 6x the listed bytes of the largest run's segments, up to the repository's own budget)."""

CANDIDATES_MAGIC = b"SNGC"
LOCK_KEY = "gc/lock"
LOCK_TIMEOUT = 300.0
"""Seconds (store time) after its last refresh at which another GC's lock is stale. A running GC
refreshes its lock every ``LOCK_TIMEOUT / 5`` seconds, so only a GC that stopped (killed, its
machine gone) leaves a lock this old."""
CANDIDATES_PREFIX = "gc/candidates/"
MARK_ATTEMPTS = 3
"""Times a GC beside writers lists and marks again when a pack went between its listing and mark's
read of it (writers merge tiers and delete their inputs while GC runs)."""


@dataclass
class GCReport:
    """What a GC run did (or, with ``dry_run``, would do).

    Attributes:
        dry_run: nothing was changed.
        grace_period: seconds.
        max_unused: the fraction of a live pack's bytes that must be dead before it is rewritten.
        store_time: the store's clock at the start (seconds since the epoch, UTC).
        live_checkpoints / live_packs: what mark found live.
        segment_packs: packs listed as segments by the runs' newest records (format 2): kept whole,
            never repacked.
        deleted: objects deleted by category (``packs``, ``forward``, ``manifests``, ``index``, ``log``
            (format-2 log segments), ``runmarks`` (run markers of removed runs, §13), ``outcomes`` (tool
            outcomes of gone checkpoints, §25), ``gc``).
        reclaimed_bytes: bytes of deleted objects minus bytes of new packs written.
        reclaimed_objects: objects deleted minus objects written.
        repacked_packs / new_packs / repack_bytes_in / repack_bytes_out: the repack step.
        refetched_packs: packs GC fetched again after mark had read them (to judge or to copy
            them): the per-save and format-1 packs it merges, and a mostly dead segment only when
            it had left the pack cache before its run was marked, or another run needed more of
            it after it was copied (a segment is otherwise copied while mark has it cached).
        added_forward: forwarding records written for packs this GC repacked (new or extended).
        redirected_forward: existing forwarding records rewritten to point past a pack deleted now.
        removed_forward: forwarding records dropped from the map (nothing leads to them any more).
        forward_writes: forwarding-map shards written (created or replaced).
        deleted["forward"] counts forwarding-map objects deleted: shards left empty, and per-pack
            records of the older layout once their shard holds them.
        pending_candidates: unreferenced packs waiting for the grace period to pass.
        pending_objects / pending_bytes: other objects no longer needed (hidden or dead log
            records, orphaned index records, log segments whose manifests are all gone) that are
            younger than the grace period: a GC after it has passed deletes them.
            ``pending_kinds`` counts them by the categories of ``deleted``.
        corrupt_packs: keys of the packs found damaged (checksum mismatch, undecodable) while
            marking. A damaged pack whose live entries are all found in other copies (a retired
            pack's forwarding targets, a segment) is unreferenced like any other and deleted once
            the grace period has passed; a damaged pack that is the only copy of a live entry
            stops GC (IntegrityError) before anything is deleted.
        leftovers_removed / leftover_bytes_removed: crash leftovers removed (``dry_run``: that
            would be removed): temporary files a killed process left in a local store, incomplete
            S3 multipart uploads; only those older than the grace period (store time).
        leftovers_pending: younger leftovers, left for a later GC (a write may still be running).
        elapsed: seconds.
    """

    dry_run: bool
    grace_period: float
    max_unused: float = 0.25
    store_time: float = 0.0
    live_checkpoints: int = 0
    live_packs: int = 0
    segment_packs: int = 0
    deleted: dict = field(default_factory=lambda: defaultdict(int))
    deleted_bytes: int = 0
    written_bytes: int = 0
    written_objects: int = 0
    repacked_packs: int = 0
    new_packs: int = 0
    repack_bytes_in: int = 0
    repack_bytes_out: int = 0
    refetched_packs: int = 0
    pending_candidates: int = 0
    pending_objects: int = 0
    pending_bytes: int = 0
    pending_kinds: dict = field(default_factory=lambda: defaultdict(int))
    added_forward: int = 0
    redirected_forward: int = 0
    removed_forward: int = 0
    forward_writes: int = 0
    corrupt_packs: list = field(default_factory=list)
    leftovers_removed: int = 0
    leftover_bytes_removed: int = 0
    leftovers_pending: int = 0
    elapsed: float = 0.0

    @property
    def reclaimed_bytes(self) -> int:
        return self.deleted_bytes - self.written_bytes

    @property
    def reclaimed_objects(self) -> int:
        return sum(self.deleted.values()) - self.written_objects

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"dry_run": self.dry_run, "grace_period": self.grace_period, "max_unused": self.max_unused,
                "store_time": self.store_time,
                "live_checkpoints": self.live_checkpoints, "live_packs": self.live_packs,
                "deleted": dict(self.deleted), "reclaimed_bytes": self.reclaimed_bytes,
                "reclaimed_objects": self.reclaimed_objects, "repacked_packs": self.repacked_packs,
                "new_packs": self.new_packs, "repack_bytes_in": self.repack_bytes_in,
                "repack_bytes_out": self.repack_bytes_out, "refetched_packs": self.refetched_packs,
                "pending_candidates": self.pending_candidates,
                "pending_objects": self.pending_objects, "pending_bytes": self.pending_bytes,
                "pending_kinds": dict(self.pending_kinds),
                "added_forward": self.added_forward, "redirected_forward": self.redirected_forward,
                "removed_forward": self.removed_forward, "forward_writes": self.forward_writes,
                "corrupt_packs": list(self.corrupt_packs), "leftovers_removed": self.leftovers_removed,
                "leftover_bytes_removed": self.leftover_bytes_removed, "leftovers_pending": self.leftovers_pending,
                "elapsed": round(self.elapsed, 3)}


def _encode_candidates(packs: list[str], fwd: list[str]) -> bytes:
    return seal_envelope(CANDIDATES_MAGIC, FORMAT_VERSION, json.dumps({"packs": packs, "fwd": fwd}).encode())


def _decode_candidates(key: str, data: bytes) -> tuple[set, set]:
    """``(pack hex ids, forwarding-record hex ids)`` of a candidate record. Raises IntegrityError."""
    _, body = open_envelope(key, CANDIDATES_MAGIC, data)
    try:
        d = loads_exact(body, 2)
        out = set(d.get("packs", [])), set(d.get("fwd", []))
    except (ValueError, TypeError, AttributeError) as e:
        raise IntegrityError(key, f"malformed candidate record: {e}") from None
    if not all(isinstance(h, str) and is_pack_hex(h) for part in out for h in part):
        raise IntegrityError(key, "malformed candidate record: an id is not 16 lowercase hex digits")
    return out


class _Hooks:
    def __init__(self, hooks: dict | None):
        self.hooks = hooks or {}

    def __call__(self, name: str, **info) -> None:
        fn = self.hooks.get(name)
        if fn is not None:
            fn(**info)


def gc(repo: Repository, grace_period: float = 3600.0, dry_run: bool = False, max_unused: float = 0.25,
       small_pack_bytes: int = 1 << 20, target_pack_bytes: int = 8 << 20, repack_level: int = 9,
       lock_timeout: float = LOCK_TIMEOUT, progress: Callable[[str, int, int], None] | None = None,
       hooks: dict | None = None) -> GCReport:
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
            ``before_sweep``, ``after_sweep`` (keyword arguments describe the state).
    Returns:
        A :class:`GCReport`.
    Raises:
        ConflictError: another GC holds the lock.
        InvalidInputError: a negative grace period or a bad threshold.
        IntegrityError / ObjectNotFound: a live checkpoint is unreadable (GC deletes nothing then).
    """
    if grace_period < 0 or not 0 <= max_unused <= 1:
        raise InvalidInputError("grace_period must be >= 0 and max_unused within [0, 1]")
    t0 = time.monotonic()
    hook = _Hooks(hooks)
    rep = GCReport(dry_run=dry_run, grace_period=grace_period, max_unused=max_unused)
    store = repo.store
    now = repo.store_time()
    rep.store_time = now
    token = os.urandom(8).hex()
    keeper = None
    if not dry_run:
        keeper = _LockKeeper(repo, token, _lock(repo, now, lock_timeout, token), max(0.05, lock_timeout / 5))
    # mark needs each pack once, while its run is marked (what the sweep needs of it is kept in
    # ``Reach.usage``): a small pack cache bounds GC's memory whatever the repository's size
    cache_limit = repo._cache_limit
    repo._cache_limit = min(cache_limit, GC_CACHE_BYTES)
    try:
        for attempt in range(MARK_ATTEMPTS):
            marked = []

            def lock_check():
                if keeper is not None:
                    keeper.check()
                marked.append(True)  # mark is over: from here on GC writes and deletes
            try:
                with repo.whole_packs():  # GC copies and checks whole packs: no ranged reads
                    _run(repo, rep, now, grace_period, dry_run, max_unused, small_pack_bytes, target_pack_bytes,
                         repack_level, progress, hook, lock_timeout, cache_limit, lock_check)
                break
            except ObjectNotFound as e:
                # beside writers (grace > 0) a pack can go between the listing and mark's read of
                # it (a tier merged and its inputs deleted twice over): list and mark again; mark
                # has changed nothing yet (its copies are removed when it stops)
                if marked or grace_period == 0 or attempt == MARK_ATTEMPTS - 1 or \
                        not str(getattr(e, "key", "")).startswith(keys.PACKS):
                    raise
                rep = GCReport(dry_run=dry_run, grace_period=grace_period, max_unused=max_unused)
                now = repo.store_time()
                rep.store_time = now
    finally:
        repo._cache_limit = cache_limit
        if keeper is not None:
            keeper.stop()
            _unlock(repo, token)
    if hasattr(store, "remove_empty_dirs") and not dry_run:
        store.remove_empty_dirs()
    if hasattr(store, "compact") and not dry_run:
        store.compact()  # a SQLite file gives its free pages back (stores/sqlite.py)
    rep.elapsed = time.monotonic() - t0
    return rep


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _proc_start(pid: int) -> str:
    """The start time (clock ticks since boot) of process ``pid`` on this machine, '' if unknown,
    None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return ""


def _lock_body(token: str) -> bytes:
    pid = os.getpid()
    return json.dumps({"host": os.uname().nodename, "pid": pid, "token": token, "boot": _boot_id(),
                       "start": _proc_start(pid) or ""}).encode()


def _owner_dead(body: bytes) -> bool:
    """True if the lock ``body`` names a process of this machine (same host name and boot) that no
    longer exists (restic does the same for its locks)."""
    try:
        d = loads_exact(body, 2)
        if not isinstance(d, dict) or d.get("host") != os.uname().nodename or not d.get("boot") \
                or d.get("boot") != _boot_id() or not isinstance(d.get("pid"), int):
            return False
        start = _proc_start(d["pid"])
        return start is None or (bool(start) and bool(d.get("start")) and start != d.get("start"))
    except (ValueError, UnicodeDecodeError):
        return False


class _LockKeeper:
    """Refreshes this GC's lock (compare-and-swap on its ETag) every ``interval`` seconds from a
    daemon thread; :meth:`check` raises ConflictError once the lock was lost (taken over or removed)."""

    def __init__(self, repo: Repository, token: str, etag: str, interval: float):
        self.repo, self.token, self.etag, self.lost = repo, token, etag, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval,), daemon=True, name="snapstore-gc-lock")
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.etag = self.repo.store.put_if_match(LOCK_KEY, _lock_body(self.token), self.etag).etag
            except (PreconditionFailed, ObjectNotFound):
                self.lost = "it was taken over or removed by another process"
                return
            except SnapstoreError:
                continue  # a failed refresh: try again (the lock goes stale only after LOCK_TIMEOUT)

    def check(self) -> None:
        """Raise ConflictError if the lock is no longer this GC's (before deleting anything)."""
        if self.lost is None:
            try:
                d = loads_exact(self.repo.store.get(LOCK_KEY), 2)
                if not (isinstance(d, dict) and d.get("token") == self.token):
                    self.lost = "another GC holds it now"
            except ObjectNotFound:
                self.lost = "it was removed"
            except (ValueError, UnicodeDecodeError):
                self.lost = "it was replaced by an unreadable object"
        if self.lost is not None:
            raise ConflictError(f"garbage collection stopped before deleting anything: lost its lock {LOCK_KEY} "
                                f"({self.lost})")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def break_lock(repo: Repository) -> bool:
    """Remove the GC lock whoever holds it (``snapstore gc --break-lock``). Only safe when no GC is
    running: a GC whose lock is removed stops before deleting anything, but one past that point
    finishes beside the next. Returns True if there was a lock."""
    try:
        repo.store.head(LOCK_KEY)
    except ObjectNotFound:
        return False
    repo.store.delete_many([LOCK_KEY])
    return True


def _unlock(repo: Repository, token: str) -> None:
    """Remove the lock if it is still ours (a stale-lock takeover may have replaced it)."""
    try:
        d = loads_exact(repo.store.get(LOCK_KEY), 2)
        if isinstance(d, dict) and d.get("token") == token:
            repo.store.delete_many([LOCK_KEY])
    except (ObjectNotFound, ValueError, UnicodeDecodeError):
        pass  # gone, or not ours (a lock we cannot read was not written by this GC)


def _lock(repo: Repository, now: float, timeout: float, token: str) -> str:
    """Take the GC lock; return its ETag. A lock whose owner died on this machine, or that was not
    refreshed for ``timeout`` seconds (store time), is taken over (compare-and-swap).

    Raises:
        ConflictError: a live GC holds it (names its host, process and age).
    """
    body = _lock_body(token)
    for _ in range(4):
        try:
            return repo.store.put(LOCK_KEY, body).etag
        except PreconditionFailed:
            pass
        try:
            info = repo.store.head(LOCK_KEY)
            held = repo.store.get(LOCK_KEY)
        except ObjectNotFound:
            continue  # released meanwhile: try again
        if now - info.mtime < timeout and not _owner_dead(held):
            try:
                d = loads_exact(held, 2)
                who = f" by {d.get('host')} pid {d.get('pid')}" if isinstance(d, dict) else ""
            except (ValueError, UnicodeDecodeError):
                who = ""
            raise ConflictError(f"another garbage collection is running (lock {LOCK_KEY} held{who}, refreshed "
                                f"{max(0.0, now - info.mtime):.0f} s ago; it is stale after {timeout:.0f} s "
                                "without a refresh, or at once if its process is gone on this machine; "
                                "`snapstore gc --break-lock` removes it)")
        try:
            return repo.store.put_if_match(LOCK_KEY, body, info.etag).etag  # stale lock: take it over
        except (PreconditionFailed, ObjectNotFound):
            continue  # another GC took it first, or it was released: look again
    raise ConflictError(f"the GC lock {LOCK_KEY} keeps changing hands; try again")


def _run(repo, rep, now, grace, dry_run, max_unused, small_pack_bytes, target_pack_bytes, level, progress, hook,
         lock_timeout, cache_limit, lock_check):
    store = repo.store
    mature = now - grace          # unreferenced that long ago: deletable (two-phase)
    settled = now - grace / 2     # older than this, a pack's writer can no longer publish it (see docs)
    infos: dict[str, object] = {}
    probes = []
    # ---- list everything once
    packs, fwd_listing, cands, others = {}, [], {}, []
    keys_by_run: dict[str, list[str]] = defaultdict(list)
    voids_by_run: dict[str, list] = defaultdict(list)
    removals_by_run: dict[str, list] = defaultdict(list)  # removal records (§16)
    index_by_run: dict[str, list] = defaultdict(list)
    logseg_by_run: dict[str, list] = defaultdict(list)
    # the run log first, then the data: every pack a manifest read here references was written
    # before that manifest, so the data listing below contains it (a writer publishing meanwhile
    # only adds packs that are newer than grace/2 and so are not deletion candidates)
    for info in store.list(keys.RUNS):
        k = info.key
        infos[k] = info
        parts = k.split("/")
        if len(parts) == 4 and parts[2] == "m":
            if void_record(info):  # a void record (§15): keeps a deleted record's position taken
                voids_by_run[parts[1]].append(info)
            else:
                keys_by_run[parts[1]].append(k)
        elif len(parts) == 4 and parts[2] == "c":
            index_by_run[parts[1]].append(info)
        elif is_removals_key(k):
            removals_by_run[parts[1]].append(info)
        elif len(parts) == 4 and parts[2] == "l" and parse_logseg_key(k) is not None:
            logseg_by_run[parts[1]].append(info)
        else:
            others.append(info)
    mark_infos = list(store.list(runmark.PREFIX))  # run markers (§13), after the run log
    # format 2: the listed manifests that log segments cover are read from their copies there
    lsegs = {rk: {parse_logseg_key(i.key): i.key for i in infos_} for rk, infos_ in logseg_by_run.items()}
    logs = read_runs_slim(repo, keys_by_run, lsegs)  # records kept as LogEntry: bounded memory
    for log in logs.values():
        if log.corrupt:
            k, err = log.corrupt[0]
            raise err if isinstance(err, SnapstoreError) else SnapstoreError(str(err))
    for prefix in (keys.PACKS, keys.FWD, keys.GC):
        for info in store.list(prefix):
            k = info.key
            infos[k] = info
            pid = keys.pack_id_from_key(k)
            if pid is not None:
                packs[pid] = info
            elif k.startswith(keys.FWD):
                fwd_listing.append(info)
            elif k.startswith(CANDIDATES_PREFIX):
                cands[k] = info
            elif k == FWD_CACHE_KEY:
                pass
            elif k.startswith("gc/clock-"):
                if info.mtime <= now - lock_timeout:
                    probes.append(info)  # left by an interrupted GC
            else:
                others.append(info)
    hook("after_list", packs=set(packs))
    sizes_of = {p: i.size for p, i in packs.items()}
    del keys_by_run  # (the keys stay in ``infos``)
    live = [m for log in logs.values() for m in log.live]
    rep.live_checkpoints = len(live)
    fwd_cached = _read_forward_cache(repo, infos.get(FWD_CACHE_KEY))
    fmap = ForwardMap.load(repo, fwd_listing, fwd_cached)
    fmap.etag_like = next((i.etag for i in infos.values() if i.etag), "")  # sizes dry-run estimates
    if fmap.errors:
        k, err = fmap.errors[0]
        raise err if isinstance(err, SnapstoreError) else SnapstoreError(f"{k}: {err}")
    listed = dict(fmap.time)  # forwarding records as read -> store time they were last written
    fwd = dict(fmap.to)       # retired pack -> targets, including those of packs this GC retires
    with repo._lock:
        repo._fwd.clear()  # GC redirects records: never trust what this process read earlier
        repo._corrupt.clear()  # damage is judged on what the store holds now (reported below)
        repo._fwd.update(fwd)
        # retired packs already deleted: go straight to their forwarding records
        repo._gone.update(pid for pid in fwd if pid not in packs)

    # ---- mark
    # the pack cache must hold the largest run's segments twice over (that run's wave and what
    # its walk reads), or marking it would fetch its packs again
    biggest = max((sum(sizes_of.get(sg.pack, 0) for sg in segs) for segs in segments_by_run(logs).values()),
                  default=0)
    repo._cache_limit = max(repo._cache_limit, min(cache_limit, 6 * biggest))
    seg_keep = head_segments(logs)  # format 2: where the runs' entries live; their writers merge them
    def refresh(run_id):
        newest = repo.head(repo.run_key(run_id))
        return newest.segment_list() if newest is not None and newest.kind != KIND_TOMBSTONE else []
    sizes = sizes_of
    tier_levels = {sg.pack: sg.level for segs in segments_by_run(logs).values() for sg in segs}
    # a mostly dead segment is copied as soon as its run is marked, while mark has it cached, so
    # that no pack is fetched twice (docs/format.md §21, "Copying while marking"; docs/design-notes.md §2.24); the new packs are written
    # as they fill up, a bounded number of bytes in flight
    seg_writer = PackWriter(store, rep, dry_run, max_pending=SEG_PENDING_BYTES)
    rewrites = SegmentRewrites(repo, seg_writer, seg_keep, packs, fwd, tier_levels, max_unused, target_pack_bytes,
                               level)
    # copies made so far are deleted if GC stops before it takes them (nothing names them)
    taken = False
    try:
        reach = mark(repo, live, None, fwd, set(packs), segments_by_run(logs), refresh, sizes=sizes,
                     keep_refs=False, on_run=rewrites.on_run)
        for p in reach.fresh_segs | reach.seg_standins:
            seg_keep.setdefault(p, "")
        # a segment GC rewrote (retired, below) is kept by the pack standing in for it, not itself
        seg_keep = {p: rk for p, rk in seg_keep.items() if p not in fwd}
        if reach.unresolved:
            pid, etype, eid = reach.unresolved[0]
            raise ObjectNotFound(keys.fwd_key(pid),
                                 f"live entry {eid.hex()} of retired pack {pid.hex()} not found; GC stopped")
        for pid in reach.packs:
            if pid not in packs and pid not in seg_keep:
                # not in this GC's listing, yet mark read it: written after the listing (a tier a
                # writer merged, found through a run's newer head), and perhaps merged again and
                # deleted since. This GC deletes only listed packs, so it is never at risk; with
                # writers active (grace > 0) the packs it was merged from are only made candidates
                # and judged again by a later GC. With grace 0 (no writer) it is damage: stop.
                if grace > 0:
                    seg_keep.setdefault(pid, "")
                    continue
                try:
                    store.head(keys.pack_key(pid))
                    seg_keep.setdefault(pid, "")
                    continue
                except ObjectNotFound:
                    pass
                raise ObjectNotFound(keys.pack_key(pid),
                                     f"live pack {keys.pack_key(pid)} is missing; GC stopped (run verify)")
        rep.live_packs = len(reach.packs)
        # damaged packs met while marking: readers (and this mark) took their entries from other
        # copies, so they are unreferenced unless they are the only copy (then a read above failed)
        rep.corrupt_packs = sorted(keys.pack_key(p) for p in repo.corrupt_packs() if p in packs)
        hook("after_mark", live=set(reach.packs))
        if progress:
            progress("mark", len(reach.packs), len(reach.packs))

        lock_check()  # a GC that lost its lock writes no pack or forwarding record
        # ---- repack: mostly-dead packs and small live packs
        retired_now: list[bytes] = []
        select = []
        seg_select = []
        for pid, needed in reach.packs.items():
            if pid in seg_keep:
                # a segment: its writer merges it (tiered compaction) and GC never merges it with
                # other packs; a mostly dead tier pack (checkpoints pruned) is rewritten on its own,
                # with a forwarding record from it to its rewrite (docs/format.md §21)
                if pid in packs and tier_levels.get(pid, 1) >= 1:
                    try:
                        live_raw, total = _usage(repo, rep, reach, pid)
                    except ObjectNotFound:
                        continue
                    if 1 - live_raw / (total or 1) > max_unused:
                        seg_select.append(pid)
                continue
            if pid in fwd:
                # retired, yet it holds live entries its forwarding record does not lead to
                # (referenced again after its repack dropped them): move them too, and extend its record
                select.append((packs[pid].mtime, pid, 1.0))
                continue
            try:
                live_raw, total = _usage(repo, rep, reach, pid)  # measured while marking: no second GET
            except ObjectNotFound:
                continue  # merged into a tier pack and deleted by its writer since the listing
            unused = 1 - live_raw / (total or 1)
            if unused > max_unused or packs[pid].size < small_pack_bytes:
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
        if select and worth:
            heads = [log.live[0] for log in logs.values() if log.live]
            retired_now = _repack(repo, rep, [pid for _, pid, _ in select], reach, target_pack_bytes, level,
                                  dry_run, progress, fwd, fmap, heads, grace, now, sizes)
        taken = True
    finally:
        if not taken:
            _abandon(rewrites, seg_writer, store, dry_run)
    # one at a time: each rewrite holds exactly one segment's live entries. Most were copied while
    # mark had them cached (with every need mark ended with); the others are fetched again, in
    # parallel waves. The forwarding-map shards are written once, after every rewrite is durable.
    early, late = {}, []
    for pid in seg_select:
        c = rewrites.take(pid, len(reach.packs[pid]))
        if c is not None:
            early[pid] = c
        else:
            late.append(pid)
    rewrites.discard_all()  # copied, but not rewritten after all (more of it is live than it was)
    try:
        for i, (pid, c) in enumerate(early.items()):
            rep.repacked_packs += 1
            rep.repack_bytes_in += c.size_in
            if progress:
                progress("repack", i + 1, len(seg_select))
        per_wave, budget, fetched = max_concurrency(store), max(1, repo._cache_limit // 6), 0
        for i, pid in enumerate(late):
            if i >= fetched:
                fetched, n = prefetch_wave(repo, late, i, sizes, per_wave, budget)
                rep.refetched_packs += n
            try:
                retired_now += _repack(repo, rep, [pid], reach, target_pack_bytes, level, dry_run, progress, fwd,
                                       fmap, [], grace, now, sizes, flush=False)
            except ObjectNotFound as e:
                if e.key != keys.pack_key(pid):
                    raise
                # merged and deleted by its writer since mark read it (its entries are in the
                # writer's new tier pack, which the run's newest record lists): nothing to rewrite
    finally:
        seg_writer.finish()  # every copy made during mark is durable before a record names it
        rewrites.delete_discarded(store, dry_run)
    if early:
        _retire(repo, rep, list(early), {p: c.moved for p, c in early.items()}, reach, fwd, fmap, grace, now,
                dry_run)
        retired_now += list(early)
    if seg_select:
        _account_flush(rep, fmap.flush(dry_run=dry_run))
    hook("after_repack", retired=set(retired_now))

    # ---- decide what to delete
    # packs retired by this repack become candidates only when a later GC finds them unreferenced
    # (through their forwarding records), unless nothing else writes (grace 0)
    # a segment (format 2) with a live entry is kept whole (or rewritten on its own, above); one
    # without (everything in it pruned, or held by a newer copy) goes like any unreferenced pack:
    # its writer's next merge finds it gone and skips it
    rep.segment_packs = sum(1 for p in seg_keep if p in packs)
    unref_packs = {pid for pid in packs if pid not in reach.packs}
    if grace == 0:
        unref_packs |= set(retired_now)
    unref_fwd = {pid for pid in listed if pid not in reach.fwd_used}
    matured_p, matured_f, matured_keys = set(), set(), []
    pending_p, pending_f = set(), set()
    for k, info in cands.items():
        try:
            ps, fs = _decode_candidates(k, store.get(k))
        except (ObjectNotFound, SnapstoreError, ValueError):
            matured_keys.append(k)
            continue
        if info.mtime <= mature:
            matured_p |= ps
            matured_f |= fs
            matured_keys.append(k)
        else:
            pending_p |= ps
            pending_f |= fs
    if grace == 0:
        del_packs = {p for p in unref_packs if p in packs or p in retired_now}
        del_fwd = set(unref_fwd)
        # the records of deleted packs that no hint names directly: the sweep rewrites the records
        # that lead to them, so nothing will (with grace > 0 the next GC finds them unreferenced)
        del_fwd |= {p for p in del_packs if p in listed and p not in reach.hinted}
    else:
        del_packs = {p for p in unref_packs if p.hex() in matured_p and p in packs and packs[p].mtime <= mature}
        del_fwd = {p for p in unref_fwd if p.hex() in matured_f and listed[p] <= mature}
    # a pack becomes a candidate only once its writer can no longer publish it (older than grace/2):
    # a reference made to it after it was marked would otherwise go unseen (docs/format.md §21)
    new_cand_p = sorted(p.hex() for p in unref_packs - del_packs
                        if p.hex() not in pending_p and p in packs and packs[p].mtime <= settled)
    new_cand_f = sorted(p.hex() for p in unref_fwd - del_fwd if p.hex() not in pending_f and listed[p] <= settled)
    rep.pending_candidates = len(unref_packs - del_packs)

    # manifests hidden by rollbacks/tombstones, dead log records, orphaned index records. Log records
    # go only once older than the grace period: a writer whose knowledge of the run is older than
    # half of it re-reads the head, so no writer can still be aiming at a freed position.
    # A position is freed only once older than FREE_AFTER as well (docs/format.md §15): writers
    # re-read the head after VIEW_TTL whatever grace period they were given.
    log_mature = now - max(grace, FREE_AFTER)

    def old(key: str) -> bool:
        info = infos.get(key)
        return grace == 0 or (info is not None and info.mtime <= log_mature)

    def held(size: int, cat: str) -> None:  # not needed any more, but younger than the grace period
        rep.pending_objects += 1
        rep.pending_bytes += size
        rep.pending_kinds[cat] += 1

    del_keys: list[tuple[str, int, str]] = []
    voids_left = set()  # runs keeping a void record (or a tool outcome, §25) after this GC
    o_doomed, o_held, o_keeping = outcomes.gc_plan(others, logs, grace, mature)
    del_keys += [(k, size, "outcomes") for k, size in o_doomed]
    for _, size in o_held:
        held(size, "outcomes")
    voids_left |= o_keeping  # a run's lone tombstone outlives its outcomes (its generation)
    for rk, vinfos in voids_by_run.items():
        for info in vinfos:
            if grace == 0 or info.mtime <= log_mature:
                del_keys.append((info.key, info.size, "manifests"))
            else:
                held(info.size, "manifests")
                voids_left.add(rk)
    for rk, log in logs.items():
        hidden = set(log.hidden)
        for s_ in log.hidden:
            k = keys.manifest_key(rk, s_)
            if old(k):
                del_keys.append((k, infos[k].size if k in infos else 0, "manifests"))
            else:
                held(infos[k].size if k in infos else 0, "manifests")
        remaining = sorted(x for x in log.manifests if x not in hidden)
        head_seq = remaining[-1] if remaining else None
        for s_ in remaining:
            m = log.manifests[s_]
            k = keys.manifest_key(rk, s_)
            size = infos[k].size if k in infos else 0
            if s_ == head_seq:
                # a lone tombstone goes last: while void records remain, positions must not restart at 0
                dead = m.kind == KIND_TOMBSTONE and not log.live and len(remaining) == 1 and not log.hidden \
                    and rk not in voids_left
            elif m.kind == KIND_ROLLBACK:
                t = int(m.target["seq"])
                dead = not any(t < x < s_ for x in log.manifests if x not in hidden) and not any(
                    t < x < s_ for x in log.hidden)
            else:
                dead = m.kind == KIND_TOMBSTONE and not any(x < s_ for x in log.manifests)
            if dead and old(k):
                del_keys.append((k, size, "manifests"))
            elif dead:
                held(size, "manifests")
        live_seq = {m.seq: m.checkpoint_id for m in log.live}
        for info in index_by_run.get(rk, []):
            try:
                seq, _ = decode_index(info.key, store.get(info.key))
            except (ObjectNotFound, SnapstoreError):
                continue
            if seq not in live_seq and (grace == 0 or info.mtime <= mature):
                del_keys.append((info.key, info.size, "index"))
            elif seq not in live_seq:
                held(info.size, "index")
    for rk in index_by_run:
        if rk not in logs:
            for info in index_by_run[rk]:
                if grace == 0 or info.mtime <= mature:
                    del_keys.append((info.key, info.size, "index"))
                else:
                    held(info.size, "index")
    for info in probes:
        del_keys.append((info.key, info.size, "gc"))
    # log segments (format 2 copies of log records): once no manifest of their range is left,
    # and older than the grace period (the writer of a range publishes its last record first)
    going = {k for k, _, c in del_keys if c == "manifests"}
    void_keys = {i.key for vinfos in voids_by_run.values() for i in vinfos}
    lone = {rk: keys.seq_from_manifest_key(k) for k, _, c in del_keys if c == "manifests" and k not in void_keys
            for rk in [k.split("/")[1]] if rk in logs and len(logs[rk].manifests) == 1}
    del_keys[:0] = [(k, size, "runmarks") for k, size in runmarks.gc_doomed(
        mark_infos, {rk: log.manifests for rk, log in logs.items()}, lone, mature, grace)]
    for rk, lsegs in logseg_by_run.items():
        log = logs.get(rk)
        left = sorted(s_ for s_ in (log.manifests if log else ()) if keys.manifest_key(rk, s_) not in going)
        for info in lsegs:
            hi, level = parse_logseg_key(info.key)
            lo = hi - span(level) + 1
            i = bisect.bisect_left(left, lo)
            if i == len(left) or left[i] > hi:
                if grace == 0 or info.mtime <= mature:
                    del_keys.append((info.key, info.size, "log"))
                else:
                    held(info.size, "log")

    removal_plan = _plan_removals(repo, del_keys, removals_by_run, set(lone), logs, log_mature, grace)
    hook("before_sweep", delete_packs=set(del_packs), candidates=set(new_cand_p))
    lock_check()  # a GC that lost its lock (taken over as stale) deletes nothing
    if dry_run:
        for p in del_packs:
            rep.deleted["packs"] += 1
            rep.deleted_bytes += packs[p].size if p in packs else 0
        _splice_forwards(repo, rep, del_packs, del_fwd, fwd, fmap, listed, now, dry_run=True)
        _drop_forwards(rep, del_fwd, fmap, dry_run=True)
        for k, size, cat in del_keys:
            rep.deleted[cat] += 1
            rep.deleted_bytes += size
        if matured_keys:
            rep.deleted["gc"] += len(matured_keys)
            rep.deleted_bytes += sum(cands[k].size for k in matured_keys if k in cands)
        if new_cand_p or new_cand_f:
            rep.written_objects += 1
            rep.written_bytes += len(_encode_candidates(new_cand_p, new_cand_f))
        _write_removals(repo, rep, removal_plan, dry_run=True)
        _drop_removals(repo, rep, removal_plan, dry_run=True)
        _write_forward_cache(repo, rep, fmap, fwd_cached, infos.get(FWD_CACHE_KEY), dry_run=True)
        _remove_leftovers(repo, rep, mature, grace, dry_run=True)
        return

    # ---- sweep (candidate record first, so nothing unreferenced is forgotten)
    if new_cand_p or new_cand_f:
        ck = CANDIDATES_PREFIX + f"{int(now * 1000):013x}-{os.urandom(4).hex()}"
        body = _encode_candidates(new_cand_p, new_cand_f)
        store.put(ck, body)
        rep.written_objects += 1
        rep.written_bytes += len(body)
    _splice_forwards(repo, rep, del_packs, del_fwd, fwd, fmap, listed, now)
    doomed = [keys.pack_key(p) for p in del_packs]
    for i in range(0, len(doomed), 1000):
        store.delete_many(doomed[i:i + 1000])
        if progress:
            progress("sweep", min(i + 1000, len(doomed)), len(doomed))
    for p in del_packs:
        rep.deleted["packs"] += 1
        rep.deleted_bytes += packs[p].size if p in packs else 0
    _drop_forwards(rep, del_fwd, fmap)
    _write_removals(repo, rep, removal_plan)  # the positions go on record first (§16)
    if del_keys:
        # index records before manifests; hidden manifests before the records that hide them
        store.delete_many([k for k, _, c in del_keys if c == "runmarks"])  # before the tombstones
        store.delete_many([k for k, _, c in del_keys if c in ("index", "gc", "log", "outcomes")])
        man = [k for k, _, c in del_keys if c == "manifests"]
        hidden_first = sorted(man, key=lambda k: k)  # inverted seq: older records sort later
        store.delete_many(hidden_first[::-1])
        for k, size, cat in del_keys:
            rep.deleted[cat] += 1
            rep.deleted_bytes += size
    _drop_removals(repo, rep, removal_plan)
    if matured_keys:
        store.delete_many(matured_keys)
        rep.deleted["gc"] += len(matured_keys)
        rep.deleted_bytes += sum(cands[k].size for k in matured_keys if k in cands)
    # every forwarding record left, with the ETag of its shard
    _write_forward_cache(repo, rep, fmap, fwd_cached, infos.get(FWD_CACHE_KEY))
    _remove_leftovers(repo, rep, mature, grace)
    hook("after_sweep")


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
    plan = _RemovalPlan()
    by_run: dict[str, list[list[int]]] = defaultdict(list)
    for k, _, c in del_keys:
        if c == "manifests":
            rk = k.split("/")[1]
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


def _write_removals(repo: Repository, rep: GCReport, plan: _RemovalPlan, dry_run: bool = False) -> None:
    """Write the planned removal records (create-only), counted in ``written_*``."""
    for rk, ranges in plan.write.items():
        sizes = repo.record_removals(rk, ranges=ranges, dry_run=dry_run)
        rep.written_objects += len(sizes)
        rep.written_bytes += sum(sizes)


def _drop_removals(repo: Repository, rep: GCReport, plan: _RemovalPlan, dry_run: bool = False) -> None:
    """Delete the planned removal records (best effort), counted in ``deleted["log"]``."""
    if not plan.drop:
        return
    if not dry_run:
        try:
            repo.store.delete_many([i.key for i in plan.drop])
        except SnapstoreError:
            return
    rep.deleted["log"] += len(plan.drop)
    rep.deleted_bytes += sum(i.size for i in plan.drop)


def _remove_leftovers(repo: Repository, rep: GCReport, mature: float, grace: float, dry_run: bool = False) -> None:
    """Remove the store's crash leftovers (``store.leftovers()``: temp files of a killed process,
    incomplete multipart uploads) written or initiated at or before ``mature`` (store time: now
    minus the grace period; with grace 0, every one: the caller asserts no other writer), and
    count them in ``rep`` (``dry_run``: count only). A younger one may belong to a write still
    running: it is counted as pending. Stores without leftovers (memory) have no such method."""
    find = getattr(repo.store, "leftovers", None)
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
        n = len(old) if dry_run else repo.store.remove_leftovers(old)
    except SnapstoreError:
        return
    rep.leftovers_removed += n
    rep.leftover_bytes_removed += sum(it.size for it in old)


FWD_CACHE_KEY = keys.FWD_CACHE


def _read_forward_cache(repo: Repository, cache_info) -> dict:
    """``gc/fwd-cache`` as stored (``{}`` if absent or unreadable: it is advisory)."""
    if cache_info is None:
        return {}
    try:
        return decode_forward_cache(FWD_CACHE_KEY, repo.store.get(FWD_CACHE_KEY))
    except SnapstoreError:
        return {}


def _write_forward_cache(repo: Repository, rep: GCReport, fmap: ForwardMap, cached: dict, cache_info,
                         dry_run: bool = False) -> None:
    """Replace ``gc/fwd-cache`` with every record of ``fmap`` (pack id -> (its shard's ETag,
    targets)) unless it already says that (``cached``: its content as read); remove it when the
    map is empty. Failures are ignored: readers use the cache only as hints. ``dry_run``: count only."""
    store = repo.store
    entries = {p: (fmap.shard_etag(p), to, fmap.time[p]) for p, to in fmap.to.items()}
    if cache_info is not None and cached == {p: (etag, list(to), t) for p, (etag, to, t) in entries.items()}:
        return
    try:
        if not entries:
            if cache_info is not None:
                if not dry_run:
                    store.delete_many([FWD_CACHE_KEY])
                rep.deleted["gc"] += 1
                rep.deleted_bytes += cache_info.size
            return
        data = encode_forward_cache(entries)
        if not dry_run:
            store.put_if_match(FWD_CACHE_KEY, data, cache_info.etag if cache_info is not None else None)
        rep.written_bytes += len(data) - (cache_info.size if cache_info is not None else 0)
        rep.written_objects += 1 if cache_info is None else 0
    except SnapstoreError:
        pass


MERGE_OUTPUTS = 8
"""Small packs that forwarding records point at are merged only when at least this many are small."""

def _splice_forwards(repo: Repository, rep: GCReport, del_packs: set, del_fwd: set, fwd: dict,
                     fmap: ForwardMap, listed: dict, now: float, dry_run: bool = False) -> None:
    """Before packs are deleted: rewrite ("splice") every forwarding record that names one of them
    to name that pack's own targets instead (so chains through deleted packs disappear), and write
    the changed shards (``dry_run``: count only). Records in ``del_fwd`` are left to
    :func:`_drop_forwards`, after the packs are deleted.

    Records are spliced only here, never when a pack is retired: until the retired pack is deleted
    (after a grace period and a new mark) a record still leads to it.

    Raises:
        ConflictError: a shard changed meanwhile (see :meth:`ForwardMap.flush`): nothing is deleted.
    """
    def expand(t, seen):
        if t not in del_packs:
            return [t]
        if t in seen:
            return []
        seen.add(t)
        return [x for n in fwd.get(t, ()) for x in expand(n, seen)]

    spliced = {}
    for old, targets in fwd.items():
        if old in del_fwd or old not in listed or not del_packs.intersection(targets):
            continue  # (records not listed were written by this GC and name new packs only)
        spliced[old] = list(dict.fromkeys(x for t in targets for x in expand(t, set())))
    for old, new in spliced.items():
        fwd[old] = new
        fmap.set(old, new, now)
    rep.redirected_forward += len(spliced)
    _account_flush(rep, fmap.flush(dry_run=dry_run))
    if not dry_run:
        with repo._lock:
            repo._fwd.update(spliced)


def _drop_forwards(rep: GCReport, del_fwd: set, fmap: ForwardMap, dry_run: bool = False) -> None:
    """After packs are deleted: drop the records in ``del_fwd`` from the map and write the changed
    shards (and, once, migrate per-pack records of the older layout)."""
    removed = [p for p in del_fwd if p in fmap.to]
    for p in removed:
        fmap.remove(p)
    rep.removed_forward += len(removed)
    _account_flush(rep, fmap.flush(dry_run=dry_run))


SEG_PENDING_BYTES = 16 << 20
"""Bytes of segment rewrites (built during mark) whose writes may be in flight at once."""


def _usage(repo: Repository, rep: GCReport, reach, pid: bytes) -> tuple[int, int]:
    """``reach.pack_usage``, counting in ``rep.refetched_packs`` a pack it has to fetch again
    (its needs grew after mark measured it, and it left the pack cache)."""
    u = reach.usage.get(pid)
    if u is None or u[2] != len(reach.packs.get(pid, ())):
        with repo._lock:
            if pid not in repo._cache:
                rep.refetched_packs += 1
    return reach.pack_usage(repo, pid)


def _abandon(rewrites: SegmentRewrites, writer: PackWriter, store, dry_run: bool) -> None:
    """Mark failed: wait for the segment copies it made and delete them (nothing names them)."""
    rewrites.discard_all()
    try:
        writer.finish()
    except SnapstoreError:
        pass  # a pack that failed to land needs no deleting; one that landed is deleted below
    try:
        rewrites.delete_discarded(store, dry_run)
    except SnapstoreError:
        pass  # left as unreferenced packs: a later GC collects them


def _account_flush(rep: GCReport, res) -> None:
    rep.written_bytes += res.written_bytes
    rep.written_objects += res.written_objects
    rep.forward_writes += res.writes
    if res.deleted_objects:
        rep.deleted["forward"] += res.deleted_objects
        rep.deleted_bytes += res.deleted_bytes



def _repack(repo: Repository, rep: GCReport, pids: list[bytes], reach, target: int, level: int,
            dry_run: bool, progress, fwd: dict, fmap: ForwardMap, heads: list, grace: float,
            now: float, sizes: dict | None = None, flush: bool = True) -> list[bytes]:
    """Copy the live entries of ``pids`` into new packs, then write their forwarding records (in
    ``fmap``, and in ``fwd``: retired pack -> targets); return the retired pack ids. The packs are
    fetched in parallel waves of up to the store's ``max_concurrency`` (and, by ``sizes``: pack id
    -> listed bytes, a sixth of the pack cache); those not cached count in
    ``rep.refetched_packs`` (mark read every one of them before). ``flush=False``: leave writing
    the changed forwarding-map shards to the caller (after every rewrite it makes is durable).

    Raises:
        ConflictError: a forwarding-map shard changed meanwhile (the retired packs stay live).
    """
    store = repo.store
    for m in heads:  # decode each run's newest list in order: dictionaries then come for free
        try:
            repo.decode_blocks(m)
        except SnapstoreError:
            pass  # the copy below reads entries one by one and reports what is wrong
    # new packs are built and written as they fill up (at most PackWriter.MAX_PENDING bytes in
    # flight), so memory stays bounded by one open pack plus the writes in progress
    writer = PackWriter(store, rep, dry_run)
    cur = None
    moved: dict[bytes, set] = {}
    size_in = 0
    sizes = sizes or {}
    per_wave = max_concurrency(store)
    budget = max(1, repo._cache_limit // 6)
    fetched = 0
    try:
        for i, pid in enumerate(pids):
            if i >= fetched:  # the next packs in one parallel wave (as many as the cache holds)
                fetched, n = prefetch_wave(repo, pids, i, sizes, per_wave, budget)
                rep.refetched_packs += n
            pack = repo.get_pack(pid)
            size_in += len(pack.data)
            cur, moved[pid] = copy_live(repo, pid, pack, reach.needed_entries(pid, pack), cur, writer, target, level)
            if progress:
                progress("repack", i + 1, len(pids))
        if cur is not None:
            writer.close(cur)
    finally:
        writer.finish()  # every new pack is durable before any forwarding record names one
    rep.repacked_packs += len(pids)
    rep.repack_bytes_in += size_in
    _retire(repo, rep, pids, moved, reach, fwd, fmap, grace, now, dry_run)
    # after the new packs are durable (writer.finish above); a dry run counts what it would write
    if flush:
        _account_flush(rep, fmap.flush(dry_run=dry_run))
    return list(pids)


def _retire(repo: Repository, rep: GCReport, pids: list[bytes], moved: dict, reach, fwd: dict, fmap: ForwardMap,
            grace: float, now: float, dry_run: bool) -> None:
    """Retire the packs ``pids`` whose live entries were copied into the new packs ``moved``
    (pack id -> ids of the new packs): a forwarding record (in ``fmap``, and in ``fwd``: retired
    pack -> targets) for every retired pack that hints or older records lead to; a pack retired
    before keeps its targets and gets the new ones added. Writes nothing: the caller flushes
    ``fmap`` once every new pack is durable."""
    named = {t for ts in fwd.values() for t in ts}
    for pid in pids:
        if pid in fwd:
            fwd[pid] = list(dict.fromkeys(list(fwd[pid]) + sorted(moved.get(pid, ()))))
            fmap.set(pid, fwd[pid], now)
            rep.added_forward += 1
        else:
            fwd[pid] = sorted(moved.get(pid, ()))
            if pid in reach.hinted or (grace and pid in named):
                fmap.set(pid, fwd[pid], now)
                rep.added_forward += 1
            # else nothing leads to it but records that are spliced when it is deleted, which with
            # grace 0 is in this GC: the record would be unreferenced at once
    if dry_run:
        return
    with repo._lock:
        for pid in pids:
            repo._fwd.pop(pid, None)
