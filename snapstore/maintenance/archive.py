"""Archive: rewrite finished runs into immutable, hard-compressed bundles (docs/format.md §28).

Layer 3. :func:`archive` selects runs, marks what their live checkpoints need (the same
:class:`~snapstore.maintenance.mark.Marker` GC uses), copies every needed entry into one bundle
per large run (small runs grouped), and then, in this order:

1. writes the bundle create-only under ``archive/data/<retention class>/<month>/<id>`` (on S3 with
   ``StorageClass=``; other stores record the class in the index only);
2. reads it back whole and checks its checksum and every entry against what was copied (a
   ``GLACIER``/``DEEP_ARCHIVE`` bundle: the bytes sent are checked, and its stored size and ETag);
3. writes the bundle's hot index record ``archive/index/<id>``: the switch. From then on GC marks
   the runs it serves by the bundle and their hot packs become garbage (candidates, then deleted
   a grace period later); readers reach the bundle when a hot pack is gone.

4. per run the bundle serves, its hot catalogue (:mod:`snapstore.maintenance.archcat`): the run's
   whole log in one archive log, read back, then its manifests stubbed and its other log
   segments deleted.

A crash before step 3 leaves an unindexed bundle (``verify`` warns, nothing reads it) and the run
as it was; after it, the hot packs are still there until GC. Nothing is lost at any point.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Callable

import blake3

from ..errors import ConflictError, IntegrityError, InvalidInputError, RunNotFound
from ..format import keys
from ..format.bundle import (COLD_CLASSES, BundleIndex, bundle_key, check_retention_class, check_storage_class, encode_index,
                             index_key)
from ..format.archfields import encode_fields
from ..format.ids import new_pack_id
from ..format.manifest import KIND_CHECKPOINT, KIND_TOMBSTONE
from ..format.pack import T_FIELDS, Pack, PackBuilder
from ..format.segs import encode_segs
from ..format.times import format_time
from ..repo.bundles import archived_runs
from ..repo.log.stubs import default_compact_log
from ..repo.repository import Repository
from .archcat import compact_bundle_logs
from .bundlegc import switch_deadline
from .forwarding import read_forward_map
from .mark import Marker, MarkScope, bundle_standins
from .runs import list_runs, read_all_runs, segments_by_run

BUNDLE_MIN = 16 << 20
"""A run needing at least this many raw bytes gets a bundle of its own; smaller runs are grouped."""
BUNDLE_MAX_RAW = 512 << 20
"""A group of small runs is closed once it holds this many raw bytes (about 16-128 MiB compressed)."""
BUNDLE_LEVEL = 19
"""zstd level of bundle blocks."""
BUNDLE_ZSTD_PARAMS: dict | None = None
"""More zstd parameters for bundle blocks (:class:`~snapstore.format.pack.PackBuilder`'s
``zstd_params``, e.g. long-range matching); None: level 19's own. Measured on the shared
trajectories (``benchmarks/archive_size.py --level/--ldm``), neither a higher level nor long-range
matching pays inside 4 MiB blocks (docs/format.md §28)."""
BUNDLE_BLOCK = 4 << 20
"""Largest raw data block of a bundle (bytes): what a ranged read of one entry fetches at most."""


@dataclass
class ArchiveReport:
    """What :func:`archive` did.

    Attributes:
        runs: ids of the runs archived by this call.
        skipped: run id -> why it was not archived (already archived, no live checkpoint, ...).
        bundles: keys of the bundles written.
        checkpoints: live checkpoints the bundles serve.
        bytes_before: listed bytes of the hot packs the bundles replace.
        bytes_after: bytes of the bundles.
        index_bytes: bytes of the hot index records written.
        storage_class: the class the bundles were written with.
        pruned: ids of the checkpoints a ``keep`` policy pruned before archiving
            (:meth:`CheckpointManager.archive`).
        catalogue_bytes: bytes of the archive logs written (each archived run's whole log in one
            object, its manifests then 0-byte stubs; :mod:`snapstore.maintenance.archcat`).
        hot_logs: run id -> why its log was left as it was (no archive log written).
    """

    runs: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    bundles: list = field(default_factory=list)
    checkpoints: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    index_bytes: int = 0
    storage_class: str = ""
    pruned: list = field(default_factory=list)
    catalogue_bytes: int = 0
    hot_logs: dict = field(default_factory=dict)


def call_hook(hooks: dict | None, name: str, **kw) -> None:
    """Call ``hooks[name](**kw)`` when the caller (a test) gave such a hook; the archive and
    unarchive steps name theirs (``after_bundle_put``, ``after_readback``...)."""
    if hooks and name in hooks:
        hooks[name](**kw)


def check_read_back(key: str, pack: Pack, copied: dict, what: str) -> None:
    """Check that ``pack`` (parsed from the object ``key`` as read back) holds every entry of
    ``copied`` (``{(type, id): raw bytes}``) with exactly those bytes, before anything names it.

    Raises:
        IntegrityError: an entry is missing or differs (``what``: "bundle" or "pack", for the message).
    """
    for (etype, eid), raw in copied.items():
        e = pack.entries.get((etype, eid))
        if e is None or pack.entry_bytes(e) != raw:
            raise IntegrityError(key, f"{what} read back lacks entry {eid.hex()}; nothing switched")


def archive(repo: Repository, run_ids: list | None = None, finished_before: datetime | None = None,
            storage_class: str = "GLACIER_IR", retention_class: str = "default",
            expire_after_days: int | None = None, hooks: dict | None = None,
            progress: Callable[[str, int, int], None] | None = None, grace_period: float = 3600.0,
            stub: bool | None = None, bundle_min: int | None = None) -> ArchiveReport:
    """Archive runs into bundles (module docstring; docs/format.md §28).

    Args:
        repo: the repository.
        run_ids: the runs to archive (ids); None: every run.
        finished_before: only runs whose newest checkpoint was created before this time (an aware
            datetime, or naive as UTC); None: no time condition.
        storage_class: one of :data:`~snapstore.format.bundle.STORAGE_CLASSES`.
        retention_class: key segment grouping bundles by retention (``[a-z0-9._-]``).
        expire_after_days: days after which the bundles' data may expire (names the expiry month in
            the key, for lifecycle rules); None: ``never``.
        hooks: test hooks called after each step: ``after_mark``, ``after_bundle_put``,
            ``after_readback``, ``after_index``, and per run ``after_archlog``, ``after_stub``,
            ``after_logsegs`` (keyword arguments describe the state).
        progress: optional ``progress(phase, done, total)``.
        grace_period: the grace period (seconds) of the GCs that may run beside: each bundle's
            index record is written within half of it from the start of the bundle's upload, or
            the bundle is deleted and nothing switched (GC collects an unindexed bundle older than
            half of it, docs/format.md §28). 0: no GC runs meanwhile (no deadline).
        stub: replace the archived runs' full manifests by 0-byte stubs after their bundle log is
            written (:func:`~snapstore.maintenance.archcat.compact_bundle_logs`); None: the store's
            default for writers (:func:`~snapstore.repo.log.stubs.default_compact_log`: a local
            directory yes, S3 no, where each stub would be a PUT).
        bundle_min: raw bytes at which a run gets a bundle of its own (:func:`plan_archive`);
            None: :data:`BUNDLE_MIN`.
    Returns:
        An :class:`ArchiveReport`.
    Raises:
        InvalidInputError: a bad storage class, retention class, day count or ``bundle_min``.
        RunNotFound: a run named in ``run_ids`` has no record.
        IntegrityError / ObjectNotFound: a live checkpoint is unreadable, or the bundle read back
            differs from what was written (nothing is switched then).
        ConflictError: a bundle's upload and check took longer than half ``grace_period`` (it
            was deleted; nothing switched for its runs: archive again).
        StoreError: the store failed.
    """
    if not isinstance(grace_period, (int, float)) or grace_period < 0:
        raise InvalidInputError("grace_period must be a non-negative number of seconds")
    _check_options(storage_class, retention_class, expire_after_days)
    if finished_before is not None and finished_before.tzinfo is None:
        finished_before = finished_before.replace(tzinfo=timezone.utc)
    rep = ArchiveReport(storage_class=storage_class)
    store = repo.store
    plan = plan_archive(repo, run_ids, finished_before, expire_after_days, bundle_min)
    rep.skipped = plan.skipped
    if not plan.chosen:
        return rep
    chosen, by_run_need, groups, month, now = plan.chosen, plan.need, plan.groups, plan.month, plan.now
    call_hook(hooks, "after_mark", runs=list(chosen))
    listed_sizes = plan.listed_sizes
    for gi, group in enumerate(groups):
        fields = {rk: record_fields(chosen[rk].manifests) for rk in group}
        ix, _copied = _write_bundle(repo, group, chosen, by_run_need, storage_class, retention_class, month,
                                    now, hooks, switch_deadline(grace_period), fields)
        data = encode_index(ix)
        store.put(index_key(ix.bundle), data)  # the switch
        call_hook(hooks, "after_index", bundle=ix.bundle, key=ix.key)
        # the hot catalogue: the runs' logs in one bundle log, each run pointing at it, its
        # manifests stubbed (§28)
        done = compact_bundle_logs(repo, ix.bundle, {rk: chosen[rk].manifests for rk in group}, fields=fields,
                                   hook=lambda step, rk: call_hook(hooks, step, run=None if rk is None
                                                                   else chosen[rk].live[0].run_id),
                                   stub=default_compact_log(store) if stub is None else bool(stub))
        for rk, res in done.items():
            rep.catalogue_bytes += res.bytes
            if res.key is None:
                rep.hot_logs[chosen[rk].live[0].run_id] = res.why
        rep.bundles.append(ix.key)
        rep.runs.extend(chosen[rk].live[0].run_id for rk in group)
        rep.checkpoints += sum(len(chosen[rk].live) for rk in group)
        rep.bytes_before += sum(listed_sizes.get(p, 0) for p in ix.replaces)
        rep.bytes_after += ix.size
        rep.index_bytes += len(data)
        if progress:
            progress("archive", gi + 1, len(groups))
    repo.bundles.load()
    return rep


def _check_options(storage_class: str, retention_class: str, expire_after_days) -> None:
    """Raise InvalidInputError for a bad storage class, retention class or day count."""
    check_storage_class(storage_class)
    check_retention_class(retention_class)
    if expire_after_days is not None and (isinstance(expire_after_days, bool) or not isinstance(expire_after_days, int)
                                          or expire_after_days < 0):
        raise InvalidInputError("expire_after_days must be a non-negative integer or None")


@dataclass
class ArchiveDryRun:
    """What :func:`archive` would do now (:func:`archive_dry_run`); nothing was written.

    Attributes:
        runs: ids of the runs it would archive.
        skipped: run id -> why it would not be archived (as :attr:`ArchiveReport.skipped`).
        checkpoints: live checkpoints the bundles would serve.
        storage_class: the class the bundles would be written with.
        bundles: one dict per bundle it would write, in order: ``{"runs": [run ids], "checkpoints":
            int, "raw_bytes": int (uncompressed bytes copied in, after dedup: the bundle is that
            compressed at zstd -19, and smaller still when runs share content), "hot_bytes": int
            (listed bytes of the hot packs it replaces), "key": str (``archive/data/<retention
            class>/<month>/<id>``, the id drawn when the bundle is written, shown as ``<id>``)}``.
        raw_bytes / hot_bytes: their sums.
        bundle_min: the grouping threshold (raw bytes at which a run gets a bundle of its own).
        pruned: ids of the checkpoints a ``keep`` policy would prune first
            (:meth:`CheckpointManager.archive` with ``dry_run``); the bundle figures count every
            live checkpoint then, an upper bound.
    """

    runs: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    checkpoints: int = 0
    storage_class: str = ""
    bundles: list = field(default_factory=list)
    raw_bytes: int = 0
    hot_bytes: int = 0
    bundle_min: int = 0
    pruned: list = field(default_factory=list)


def archive_dry_run(repo: Repository, run_ids: list | None = None, finished_before: datetime | None = None,
                    storage_class: str = "GLACIER_IR", retention_class: str = "default",
                    expire_after_days: int | None = None, bundle_min: int | None = None) -> ArchiveDryRun:
    """What :func:`archive` with these arguments would archive, writing nothing: the same
    selection, mark and grouping (:func:`plan_archive`), no bundle built.

    Args:
        As :func:`archive`.
    Returns:
        An :class:`ArchiveDryRun`.
    Raises:
        InvalidInputError / RunNotFound / IntegrityError: as :func:`archive`, before it writes.
    """
    _check_options(storage_class, retention_class, expire_after_days)
    plan = plan_archive(repo, run_ids, finished_before, expire_after_days, bundle_min)
    out = ArchiveDryRun(skipped=plan.skipped, storage_class=storage_class, bundle_min=plan.bundle_min)
    for group in plan.groups:
        n = sum(len(plan.chosen[rk].live) for rk in group)
        raw, hot = sum(plan.raw[rk] for rk in group), plan.hot_bytes(group)
        out.bundles.append({"runs": [plan.run_id(rk) for rk in group], "checkpoints": n, "raw_bytes": raw,
                            "hot_bytes": hot, "key": bundle_key(retention_class, plan.month, b"").rstrip("/") + "/<id>"})
        out.runs += [plan.run_id(rk) for rk in group]
        out.checkpoints += n
        out.raw_bytes += raw
        out.hot_bytes += hot
    return out


@dataclass
class ArchivePlan:
    """What :func:`archive` would do now (:func:`plan_archive`), before it writes anything.

    Attributes:
        chosen: run key -> the run's log (:class:`~snapstore.maintenance.runs.RunLog`), the runs to archive.
        skipped: run id -> why it is not archived.
        need: run key -> ``(needed entries by pack id, every pack id a reader may start from)``.
        groups: the bundles to write: each a list of run keys (one large run alone, small runs together).
        raw: run key -> raw bytes its live checkpoints need (what is compared with ``bundle_min``).
        listed_sizes: pack id -> listed bytes of the hot packs.
        month: the key's month segment (``YYYY-MM`` of the expiry, or ``never``).
        now: the time the plan was made (UTC), the bundles' creation time.
        bundle_min: the grouping threshold used (bytes).
    """

    chosen: dict
    skipped: dict
    need: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)
    raw: dict = field(default_factory=dict)
    listed_sizes: dict = field(default_factory=dict)
    month: str = "never"
    now: datetime | None = None
    bundle_min: int = BUNDLE_MIN

    def run_id(self, rk: str) -> str:
        """The id of the chosen run whose key is ``rk``."""
        return self.chosen[rk].live[0].run_id

    def hot_bytes(self, group: list) -> int:
        """Listed bytes of the hot packs the bundle of ``group`` (run keys) replaces."""
        touched = set().union(*(self.need[rk][1] for rk in group)) if group else set()
        return sum(self.listed_sizes.get(p, 0) for p in touched)


def plan_archive(repo: Repository, run_ids: list | None = None, finished_before: datetime | None = None,
                 expire_after_days: int | None = None, bundle_min: int | None = None) -> ArchivePlan:
    """Choose the runs :func:`archive` archives, mark what their live checkpoints need and group
    them into bundles, writing nothing (the first step of :func:`archive`, and its dry run's whole).

    Args:
        repo / run_ids / finished_before / expire_after_days: as :func:`archive`.
        bundle_min: raw bytes (uncompressed, after dedup: the entries the run's live checkpoints
            need) at which a run gets a bundle of its own; None: :data:`BUNDLE_MIN` (16 MiB).
    Returns:
        An :class:`ArchivePlan` (``groups`` empty when no run is chosen).
    Raises:
        InvalidInputError: a bad ``bundle_min``. RunNotFound / IntegrityError: as :func:`select_runs`.
    """
    if bundle_min is None:
        bundle_min = BUNDLE_MIN
    if isinstance(bundle_min, bool) or not isinstance(bundle_min, int) or bundle_min < 1:
        raise InvalidInputError(f"bundle_min must be a positive number of bytes, not {bundle_min!r}")
    if finished_before is not None and finished_before.tzinfo is None:
        finished_before = finished_before.replace(tzinfo=timezone.utc)
    store = repo.store
    chosen, skipped = _select(repo, run_ids, finished_before)
    plan = ArchivePlan(chosen, skipped, bundle_min=bundle_min)
    if not chosen:
        return plan
    # what the chosen runs' live checkpoints need, per pack (the marker GC uses)
    fmap = read_forward_map(repo)
    segs = segments_by_run(chosen)
    # a run archived before and continued since still names hot packs GC took: the bundles that
    # replace them stand in for them, as in GC's mark (docs/format.md §28)
    bundles = repo.bundles.load()
    for info in store.list(keys.PACKS):
        pid = keys.pack_id_from_key(info.key)
        if pid is not None:
            plan.listed_sizes[pid] = info.size
    present = set(plan.listed_sizes)
    fwd = bundle_standins(fmap.to, bundles, present)
    present |= set(bundles)
    for rk, log in chosen.items():
        marker = Marker(repo, MarkScope(dict(fwd), present, {log.live[0].run_id: segs.get(log.live[0].run_id, [])}))
        reach = marker.run(log.live)
        need = {pid: set(v) for pid, v in reach.packs.items()}
        # every pack a reader of these checkpoints may start from (docs/format.md §28): the homes,
        # the packs hints name (also those whose entries a segment holds), forwarding's, the segments
        touched = (set(need) | set(reach.hinted) | set(reach.seg_hinted) | set(reach.fwd_used)
                   | {sg.pack for sg in segs.get(log.live[0].run_id, [])})
        plan.need[rk] = (need, touched)
    # group: a large run alone, small runs together
    small: list[str] = []
    small_raw = 0
    for rk in sorted(chosen, key=lambda r: chosen[r].live[0].run_id):
        raw = plan.raw[rk] = _raw_size(repo, plan.need[rk][0])
        if raw >= bundle_min:
            plan.groups.append([rk])
            continue
        small.append(rk)
        small_raw += raw
        if small_raw >= BUNDLE_MAX_RAW:
            plan.groups.append(small)
            small, small_raw = [], 0
    if small:
        plan.groups.append(small)
    plan.now = datetime.now(timezone.utc)
    plan.month = ("never" if expire_after_days is None
                  else (plan.now + timedelta(days=expire_after_days)).strftime("%Y-%m"))
    return plan


def select_runs(repo: Repository, run_ids: list | None = None,
                finished_before: datetime | None = None) -> tuple[list, dict]:
    """The runs :func:`archive` would archive now, without writing anything.

    Args:
        repo: the repository.
        run_ids / finished_before: as :func:`archive`.
    Returns:
        ``(run ids chosen, {run id: why skipped})``.
    Raises:
        RunNotFound: a run named in ``run_ids`` has no record. IntegrityError: a log is corrupt.
    """
    if finished_before is not None and finished_before.tzinfo is None:
        finished_before = finished_before.replace(tzinfo=timezone.utc)
    chosen, skipped = _select(repo, run_ids, finished_before)
    return [log.live[0].run_id for log in chosen.values()], skipped


def choose_runs(repo: Repository, run_ids: list | None = None,
                finished_before: datetime | None = None) -> tuple[dict, dict]:
    """As :func:`select_runs`, with each chosen run's number of live checkpoints.

    Returns:
        ``({run id: live checkpoints}, {run id: why skipped})``.
    Raises:
        As :func:`select_runs`.
    """
    if finished_before is not None and finished_before.tzinfo is None:
        finished_before = finished_before.replace(tzinfo=timezone.utc)
    chosen, skipped = _select(repo, run_ids, finished_before)
    return {log.live[0].run_id: len(log.live) for log in chosen.values()}, skipped


def _select(repo: Repository, run_ids, finished_before) -> tuple[dict, dict]:
    """run key -> RunLog of the runs to archive, and run id -> why others are skipped."""
    listing = list_runs(repo)
    wanted = None
    if run_ids is not None:
        wanted = {repo.run_key(r): r for r in run_ids}
        for rk, r in wanted.items():
            if rk not in listing.manifests:
                raise RunNotFound(f"run {r!r} has no checkpoint")
    keys_by_run = {rk: ks for rk, ks in listing.manifests.items() if wanted is None or rk in wanted}
    logs = read_all_runs(repo, keys_by_run, logsegs_by_run={k: v for k, v in listing.logseg_positions().items()
                                                            if k in keys_by_run})
    bundles = repo.bundles.load()
    done = archived_runs(bundles, {rk: [m.seq for m in log.live] for rk, log in logs.items()})
    chosen, skipped = {}, {}
    for rk, log in logs.items():
        name = log.head.run_id if log.head is not None else rk
        if log.corrupt:
            raise log.corrupt[0][1]
        if not log.live:
            skipped[name] = "no live checkpoint"
        elif rk in done:
            skipped[name] = "already archived"
        elif finished_before is not None and max(m.created for m in log.live) >= finished_before:
            newest = max(m.created for m in log.live)
            skipped[name] = (f"still active: its newest checkpoint ({_iso(newest)}) is not older than the "
                             f"cutoff {_iso(finished_before)} (--finished-before, or now minus --idle)")
        else:
            chosen[rk] = log
    return chosen, skipped


def _iso(t) -> str:
    """``t`` (an aware datetime) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    from datetime import timezone
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _raw_size(repo: Repository, need: dict) -> int:
    total = 0
    for pid, entries in need.items():
        try:
            pack = repo.cache.get_pack(pid)
        except Exception:  # noqa: BLE001 - sized when copied; an unreadable pack fails there
            continue
        total += sum(pack.entries[k].length for k in entries if k in pack.entries)
    return total


def record_fields(manifests: dict) -> dict:
    """``{seq: moved fields}`` of the records ``manifests`` (``{seq: Manifest}``): what a thin
    bundle log leaves out of each and the bundle's fields entry holds (docs/format.md §28;
    :data:`~snapstore.format.archfields.MOVED`), as the record's JSON has them."""
    out = {}
    for s, m in manifests.items():
        f = {}
        if m.kind == KIND_CHECKPOINT:
            f["digest"], f["state"] = m.digest, m.state
            if m.exact_tag is not None:
                f["xt"] = m.exact_tag
        if m.kind != KIND_TOMBSTONE:
            if m.segs is not None:
                f["segs"] = encode_segs(m.segs)
            elif m.segs_text is not None:
                f["segs"] = m.segs_text
        out[s] = f
    return out


def _write_bundle(repo: Repository, group: list, chosen: dict, by_run_need: dict, storage_class: str,
                  retention: str, month: str, now: datetime, hooks,
                  deadline: float | None = None, fields: dict | None = None) -> tuple[BundleIndex, dict]:
    """Build, write, read back and check one bundle; return its (unpublished) index record.
    ``deadline``: seconds from the start of the upload within which the check must be over (else
    the bundle is deleted and ConflictError raised), None for none. ``fields``: ``{run key:
    {seq: moved fields}}`` (:func:`record_fields`) for the bundle's fields entry (§28); None:
    none (the bundle logs of its runs stay whole)."""
    store = repo.store
    bid = new_pack_id()
    builder = PackBuilder(bid, level=BUNDLE_LEVEL, zstd_params=BUNDLE_ZSTD_PARAMS)
    copied: dict = {}
    replaces: set = set()
    segs = segments_by_run({rk: chosen[rk] for rk in group})
    for rk in group:
        need, touched = by_run_need[rk]
        replaces |= touched
        # index the run's segment packs first, as a restore does: an entry whose hint names a
        # per-save pack merged away since (a data block's dictionary messages) is found there
        repo.locator.prefetch_segments(segs.get(chosen[rk].live[0].run_id, []))
        for pid, entries in need.items():
            pack = repo.cache.get_pack(pid)
            order = sorted((k for k in entries if k in pack.entries), key=lambda k: (pack.entries[k].block,
                                                                                       pack.entries[k].offset))
            for etype, eid in order:
                if (etype, eid) in copied:
                    continue  # content shared by the bundle's runs is stored once
                raw = repo.read_entry(etype, eid, pid)
                copied[(etype, eid)] = raw
                builder.add(etype, eid, raw)
    if fields is not None:
        # the records' data-locating fields, in the metadata block the suffix read brings (§28)
        raw = encode_fields(fields)
        eid = repo.hasher.content_id(raw)
        builder.add(T_FIELDS, eid, raw)
        copied[(T_FIELDS, eid)] = raw
    data, _ = builder.build(data_block_max=BUNDLE_BLOCK)
    key = bundle_key(retention, month, bid)
    checksum = blake3.blake3(data).digest(16)
    put_class = getattr(store, "put_with_storage_class", None)
    started = time.monotonic()
    if put_class is not None:
        written = put_class(key, data, storage_class)
    else:
        written = store.put(key, data)
    call_hook(hooks, "after_bundle_put", bundle=bid, key=key)
    # read back whole and check every byte before anything names the bundle; a class that
    # cannot be read in place is checked from the bytes sent, and its stored size and ETag
    if storage_class in COLD_CLASSES and put_class is not None:  # elsewhere the class is only recorded
        # (the ETag is compared with the one the PUT returned, not with an MD5: S3's ETags are not
        # MD5s under SSE-KMS or multipart uploads, nor a sealed object's, §27)
        info = store.head(key)
        sent = getattr(written, "etag", None)
        if info.size != len(data) or (sent and info.etag and info.etag != sent):
            raise IntegrityError(key, "stored bundle's size or ETag differs from what was written; nothing switched")
        back = data
    else:
        back = store.get(key)
    if blake3.blake3(back).digest(16) != checksum:
        raise IntegrityError(key, "bundle read back differs from what was written; nothing switched")
    check_read_back(key, Pack.parse(key, back, bid), copied, "bundle")
    call_hook(hooks, "after_readback", bundle=bid, key=key)
    if deadline is not None and time.monotonic() - started > deadline:
        # a GC beside may have found it unindexed and older than half its grace period: never switch it
        store.delete_many([key])
        raise ConflictError(f"bundle {key} took {time.monotonic() - started:.0f} s to write and check, more than "
                            f"half the GC grace period ({deadline:.0f} s); deleted, nothing switched: archive again")
    runs = {rk: {"run": chosen[rk].live[0].run_id, "seqs": [m.seq for m in chosen[rk].live]} for rk in group}
    ix = BundleIndex(bid, key, storage_class, len(data), checksum, format_time(now), runs, sorted(replaces - {bid}))
    return ix, copied
