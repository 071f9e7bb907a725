"""Whole-repository walks: the live set of every run, reachability (mark), ``verify`` and ``stats``.

Layer 4 (uses :mod:`snapstore.repo.repository`). The mark phase here is shared by ``verify`` and garbage
collection: starting from every live manifest it walks each message tree (memoised by node id) and
collects every pack a live checkpoint needs, including the packs that data-block dictionaries depend
on.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from ..errors import CompactedRecordError, IntegrityError, NotFoundError, ObjectNotFound, SnapstoreError
from ..format.codec import encode_json
from ..format import keys, runmark
from ..format.logseg import decode_logseg, parse_logseg_key
from ..format.segs import Seg
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest, is_void
from ..format.index import decode_index
from ..format.removals import decode_removals, is_removals_key, merge_ranges
from ..format.pack import T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER, T_VALUE
from ..format.tree import FLAG_PIECES, Ref, decode_pieces, exact_count
from . import outcomes
from .forwarding import ForwardMap
from ..repo.repository import Repository
from ..repo.log.bulk import choose_logsegs, copies_from_logseg
from ..stores.base import max_concurrency, store_capabilities


@dataclass
class Problem:
    """One finding of ``verify``: a ``code`` (e.g. ``corrupt-pack``), the object ``key``, a ``message``."""

    code: str
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.key}: {self.message}"


@dataclass
class VerifyReport:
    """Result of :func:`verify`.

    Attributes:
        errors: problems that mean data is lost or unreadable (codes ``corrupt-*``, ``missing-*``).
        warnings: what GC reclaims later, harmless: leftovers a crash or an interrupted operation
            may leave (``unreferenced-pack``, ``temp-file``, ``orphaned-manifest``,
            ``orphaned-index``, ``incomplete-upload``), packs a repack retired that wait for the
            grace period (``retired-pack``), forwarding records nothing leads to
            (``unreferenced-forward``), and damaged packs a reader may still touch whose live
            entries all have an intact copy elsewhere (``corrupt-unneeded-pack``: readers read the
            copy; GC deletes the pack). Damage where a live entry has no other copy is an error.
        checked: counts of what was examined.
    """

    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    checked: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not self.errors


@dataclass
class RunLog:
    """All log records of one run, classified.

    Attributes:
        run_key: the run's key segment.
        manifests: seq -> Manifest for every readable manifest.
        live: live checkpoint manifests, newest first.
        hidden: seqs of manifests hidden by a rollback record or an older tombstone (leftovers of an
            interrupted rollback/delete; they are not part of the run).
        head: the newest record (or None).
        corrupt: ``(key, error)`` for manifests that could not be read.
    """

    run_key: str
    manifests: dict
    live: list
    hidden: list
    head: Manifest | None
    corrupt: list


class LogEntry:
    """What GC keeps of a log record once its run's log is read and classified (a few hundred
    bytes instead of a :class:`Manifest`'s ~1.5 KB): enough to mark it (``kind``, ``run_id``,
    ``state``, session-state refs) and to decide which records to delete (``seq``, ``kind``,
    ``target``). ``checkpoint_id`` is not kept (None)."""

    __slots__ = ("kind", "run_id", "seq", "target", "state", "session_state_ref", "session_state_tree")
    checkpoint_id = None

    def __init__(self, m: Manifest, run_id: str):
        self.kind, self.run_id, self.seq = m.kind, run_id, m.seq
        self.target = {"seq": int(m.target["seq"])} if m.target else None
        self.state = tuple(m.state) if m.state else None
        self.session_state_ref, self.session_state_tree = m.session_state_ref, m.session_state_tree


def slim_log(log: RunLog) -> RunLog:
    """Replace every record of ``log`` but its head and its newest live checkpoint (kept whole:
    GC reads their segments and blocks) by a :class:`LogEntry`, in place; return ``log``."""
    keep = {id(log.head)} | ({id(log.live[0])} if log.live else set())
    run_id = log.head.run_id if log.head is not None else None
    # (records normally all name the head's run id: share that one string)
    slim = {s: (m if id(m) in keep else LogEntry(m, run_id if m.run_id == run_id else m.run_id))
            for s, m in log.manifests.items()}
    log.live = [slim[m.seq] for m in log.live]
    log.manifests = slim
    return log


def read_runs_slim(repo: Repository, keys_by_run: dict, logsegs_by_run: dict | None = None,
                   batch_keys: int = 4096) -> dict[str, RunLog]:
    """:func:`read_all_runs` (``light``) for GC, in batches of runs of about ``batch_keys``
    manifest keys each, every batch's records made :class:`LogEntry` (:func:`slim_log`) before
    the next is read, so memory holds one batch of decoded manifests at a time. Within a batch
    every GET is in flight together (bounded by the repository's thread pool)."""
    out: dict[str, RunLog] = {}
    batch: dict = {}
    n = 0
    rks = list(keys_by_run)
    for i, rk in enumerate(rks):
        batch[rk] = keys_by_run[rk]
        n += len(keys_by_run[rk])
        if n >= batch_keys or i == len(rks) - 1:
            logs = read_all_runs(repo, batch, light=True,
                                 logsegs_by_run={k: v for k, v in (logsegs_by_run or {}).items() if k in batch})
            out.update((k, slim_log(log)) for k, log in logs.items())
            batch, n = {}, 0
    return out


def classify(run_key: str, manifests: dict[int, Manifest], corrupt: list | None = None) -> RunLog:
    """Compute which manifests of a run are live (pure function of the records).

    Walking newest first: a rollback record at seq s with target t hides every record with
    t < seq < s; a tombstone hides every older record; other checkpoints are live.
    """
    live, hidden = [], []
    skip_above = None
    dead = False
    seqs = sorted(manifests, reverse=True)
    head = manifests[seqs[0]] if seqs else None
    for s in seqs:
        m = manifests[s]
        if dead or (skip_above is not None and s > skip_above):
            hidden.append(s)
            continue
        if m.kind == KIND_TOMBSTONE:
            dead = True
            continue
        if m.kind == KIND_ROLLBACK:
            t = int(m.target["seq"])
            skip_above = t if skip_above is None else min(skip_above, t)
            continue
        live.append(m)
    return RunLog(run_key, manifests, live, hidden, head, corrupt or [])


def _newest_segments(logs: dict):
    """Yield ``(run key, run id, segment list)`` of each run whose newest record lists segments
    (format 2); a malformed list is skipped (reading the manifest reports it)."""
    for rk, log in logs.items():
        h = log.head
        if h is None or h.kind == KIND_TOMBSTONE:
            continue
        try:
            segs = h.segment_list()
        except SnapstoreError:
            continue
        if segs:
            yield rk, h.run_id, segs


def head_segments(logs: dict) -> dict:
    """Segment packs (format 2) listed by each run's newest record: pack id -> the run key.

    They are where the run's entries live (docs/format.md §10): GC keeps them whole and never
    repacks them (their writer merges them), verify does not call them unreferenced.
    """
    out: dict = {}
    for rk, _run, segs in _newest_segments(logs):
        for sg in segs:
            out.setdefault(sg.pack, rk)
    return out


def void_record(info) -> bool:
    """True if the listed object ``info`` is a void record (docs/format.md §15): one byte, under
    a manifest key that names a position (one that does not is a stray name, read and reported
    as a manifest)."""
    if not is_void(info.size):
        return False
    try:
        keys.seq_from_manifest_key(info.key)
        return True
    except IntegrityError:
        return False


def _check_gaps(repo: Repository, rep, keys_by_run: dict, voids: set, removal_keys: dict, copies_above: dict,
                infos: dict, logs: dict, accept: bool = False) -> None:
    """Report log positions of a run that hold nothing (no manifest, compacted record or void
    record) and that no removal record names (docs/format.md §16): a manifest deleted outside
    snapstore. Below the run's newest record every position was written once; above it, a position
    counts if a log segment of the run's current life (written after its oldest record) holds a
    copy of it (the newest records were deleted). Only in a repository whose writers record
    removals (config ``removals`` 1); at most 8 errors per run, one per range. With ``accept``,
    the gaps below a run's newest record are put on record as removed (a removal record each run)
    and reported as ``accepted-missing`` warnings instead: the checkpoints there are lost, and
    saying so lets ``verify`` pass again."""
    if not getattr(repo.config, "removals", 0):
        return  # written before removal records: its gaps cannot be told apart (§16)
    void_seqs: dict[str, set] = defaultdict(set)
    for k in voids:
        void_seqs[k.split("/")[1]].add(keys.seq_from_manifest_key(k))
    for rk, mkeys in keys_by_run.items():
        pos = []
        for k in mkeys:
            try:
                pos.append(keys.seq_from_manifest_key(k))
            except IntegrityError:
                continue  # a stray name: reported as a corrupt manifest
        if not pos:
            continue
        top = max(pos)
        lowest_mtime = min((infos[k].mtime for k in mkeys if k in infos), default=0.0)
        present = set(pos) | void_seqs.get(rk, set())
        removed: list = []
        for xk in removal_keys.get(rk, []):
            try:
                removed.extend(decode_removals(xk, repo.store.get(xk)))
            except ObjectNotFound:
                continue
            except SnapstoreError as e:
                rep.warnings.append(Problem("corrupt-removals", xk, f"{e}; gaps it may name are reported below"))
        removed = merge_ranges(removed)
        starts = [r[0] for r in removed]

        def unaccounted(lo: int, hi: int):
            """Sub-ranges of [lo, hi] that no removal range covers."""
            i = max(0, bisect.bisect_right(starts, lo) - 1)
            cur = lo
            while cur <= hi:
                while i < len(removed) and removed[i][1] < cur:
                    i += 1
                if i < len(removed) and removed[i][0] <= cur:
                    cur = removed[i][1] + 1
                    continue
                end = min(removed[i][0] - 1, hi) if i < len(removed) else hi
                yield cur, end
                cur = end + 1
        gaps: list = []
        prev = -1
        for p in sorted(present):
            if p > top:
                break
            if p > prev + 1:
                gaps.extend(unaccounted(prev + 1, p - 1))
            prev = p
        for p, lk in sorted(copies_above.get(rk, {}).items()):
            if p not in present and (infos.get(lk) is None or infos[lk].mtime >= lowest_mtime):
                gaps.extend((a, b, lk) for a, b in unaccounted(p, p))
        log = logs.get(rk)
        run = repr(log.head.run_id) if log is not None and log.head is not None else f"key {rk}"
        if accept and gaps:
            below = [[g[0], g[1]] for g in gaps if len(g) == 2]
            if below:
                repo.record_removals(rk, ranges=merge_ranges(below))
                for lo, hi in below:
                    rep.warnings.append(Problem("accepted-missing", keys.manifest_key(rk, lo),
                                                f"positions {lo}-{hi} of run {run}: lost, now on record as removed"))
            gaps = [g for g in gaps if len(g) == 3]
        for g in gaps[:8]:
            lo, hi = g[0], g[1]
            where = (f"position {lo}" if lo == hi else f"positions {lo}-{hi}") + f" of run {run}"
            if len(g) == 3:
                why = (f"{where}, above its newest record ({top}), has a copy in {g[2]} but no manifest: "
                       "the run's newest manifest was deleted outside snapstore")
            else:
                why = (f"{where}: no manifest, and no removal record names it: deleted outside snapstore (its "
                       "checkpoint is lost; `verify --accept-missing` records the loss)")
            rep.errors.append(Problem("missing-manifest", keys.manifest_key(rk, lo), why))


def segments_by_run(logs: dict) -> dict:
    """run id -> the segment list of the run's newest record (format 2; runs without one are
    left out), for :func:`mark`."""
    return {run: segs for _rk, run, segs in _newest_segments(logs)}


_STUB = object()


def _read_stubs(repo: Repository, stubs: dict[str, list[str]], light: bool) -> list:
    """Read compacted records (0-byte manifests, docs/format.md §14) from their copies: per run,
    one LIST of its log segments, then the covering ones (largest first) in parallel; a stub left
    without a valid copy is read alone, raising CompactedRecordError. Returns
    ``[(run key, manifest key, Manifest | None, error | None)]``."""
    from ..repo.log.bulk import list_logsegs

    tasks = []
    for rk, ks in stubs.items():
        try:
            lsegs = list_logsegs(repo, rk)
        except SnapstoreError:
            lsegs = {}
        chosen, left = choose_logsegs([keys.seq_from_manifest_key(k) for k in ks], lsegs)
        tasks.extend(("seg", rk, lk, cover) for lk, cover in chosen)
        tasks.extend(("m", rk, keys.manifest_key(rk, sq), None) for sq in left)

    def manifest(rk, k):
        try:
            return rk, k, repo.read_manifest_key(k, light), None
        except SnapstoreError as e:
            return rk, k, None, e

    return [r for rs in repo._pool_get().map(_task_reader(repo, manifest, light), tasks) for r in rs]


def _task_reader(repo: Repository, manifest, light: bool):
    """A reader of one run-log task: ``("m", run key, manifest key, None)`` reads that manifest with
    ``manifest(rk, key)``; ``("seg", run key, log segment key, positions)`` takes the positions'
    copies from the segment and reads the manifests of those it does not give. Each result is a
    list of ``(run key, manifest key, Manifest or None, error or None)``."""
    def one(task):
        kind, rk, k, cover = task
        if kind == "m":
            return [manifest(rk, k)]
        got, rest = copies_from_logseg(repo, rk, k, cover, light)
        out = [(rk, keys.manifest_key(rk, sq), m, None) for sq, m in got.items()]
        out.extend(manifest(rk, keys.manifest_key(rk, sq)) for sq in sorted(rest, reverse=True))
        return out
    return one


def read_all_runs(repo: Repository, keys_by_run: dict[str, list[str]] | None = None,
                  on_error: Callable[[str, Exception], None] | None = None, light: bool = False,
                  logsegs_by_run: dict | None = None) -> dict[str, RunLog]:
    """Read every manifest of every run (in parallel) and classify them (``light``: without user
    fields and inline session states, see :meth:`Manifest.from_bytes`).

    Args:
        repo: the repository.
        keys_by_run: run key -> manifest keys, if already listed (else listed here).
        on_error: called with ``(key, error)`` for unreadable manifests (default: recorded in ``corrupt``).
        logsegs_by_run: run key -> ``{(hi, level): key}`` of its log segments (format 2, from the
            same listing): the listed manifests they cover are read from their copies there (one
            GET per segment instead of one per manifest). A copy that is missing, unreadable or
            not the manifest of its position is replaced by a GET of the manifest itself, so
            errors are still reported on the manifest's own key. None: every manifest is read.
    Returns:
        run key -> :class:`RunLog`.
    """
    if keys_by_run is None:
        keys_by_run = defaultdict(list)
        for info in repo.store.list(keys.RUNS):
            parts = info.key.split("/")
            if len(parts) == 4 and parts[2] == "m" and not void_record(info):
                keys_by_run[parts[1]].append(info.key)
    tasks: list = []
    for rk, ks in keys_by_run.items():
        lsegs = (logsegs_by_run or {}).get(rk)
        if lsegs:
            chosen, left = choose_logsegs([keys.seq_from_manifest_key(k) for k in ks], lsegs)
            tasks.extend(("seg", rk, lk, cover) for lk, cover in chosen)
            tasks.extend(("m", rk, keys.manifest_key(rk, sq), None) for sq in sorted(left, reverse=True))
        else:
            tasks.extend(("m", rk, k, None) for k in ks)

    def manifest(rk, k):
        try:
            data = repo.store.get(k)
            if not data:
                return rk, k, None, _STUB  # a compacted record (§14): read below, per run in bulk
            return rk, k, repo.manifest_from_object(k, data, light), None
        except SnapstoreError as e:
            return rk, k, None, e

    one = _task_reader(repo, manifest, light)
    pool = repo._pool_get()
    results = [r for rs in (pool.map(one, tasks) if len(tasks) > 1 else map(one, tasks)) for r in rs]
    stubs: dict[str, list[str]] = defaultdict(list)
    for rk, k, m, err in results:
        if err is _STUB:
            stubs[rk].append(k)
    if stubs:
        results = [r for r in results if r[3] is not _STUB] + _read_stubs(repo, stubs, light)
    per: dict[str, dict] = defaultdict(dict)
    bad: dict[str, list] = defaultdict(list)
    for rk, k, m, err in results:
        if m is not None:
            per[rk][keys.seq_from_manifest_key(k)] = m
        elif not isinstance(err, ObjectNotFound):
            bad[rk].append((k, err))
            if on_error:
                on_error(k, err)
    return {rk: classify(rk, per.get(rk, {}), bad.get(rk)) for rk in set(keys_by_run) | set(per)}


class Needed:
    """The needed entries of one pack, compact (GC): a bitmap over the pack's entries in header
    order (1 bit per entry instead of ~100 bytes per needed ``(type, id)``), plus the needs added
    after it was made (a set). Iterating needs the pack: :meth:`entries`."""

    __slots__ = ("bits", "nbits", "extra")

    def __init__(self, pack, needed):
        order = {k: i for i, k in enumerate(pack.entries)}
        bits = bytearray((len(order) + 7) // 8)
        self.extra: set = set()
        n = 0
        for x in needed:
            i = order.get(x)
            if i is None:
                self.extra.add(x)  # not in this pack (skipped by its readers too): kept as is
            elif not bits[i >> 3] & (1 << (i & 7)):
                bits[i >> 3] |= 1 << (i & 7)
                n += 1
        self.bits, self.nbits = bytes(bits), n

    def add(self, x) -> None:
        self.extra.add(x)

    def __len__(self) -> int:
        """Needs recorded (an entry needed again after compaction may count twice)."""
        return self.nbits + len(self.extra)

    def entries(self, pack) -> set:
        """The needed ``(type, id)`` set, given the same pack (by id) this was made from."""
        ks = list(pack.entries)
        out = {ks[i] for i in range(min(len(ks), len(self.bits) * 8)) if self.bits[i >> 3] & (1 << (i & 7))}
        return out | self.extra


@dataclass
class Reach:
    """What live checkpoints need: packs, and each pack's needed entries ``(type, id)``."""

    packs: dict = field(default_factory=lambda: defaultdict(set))
    nodes_seen: set = field(default_factory=set)
    node_hints: set = field(default_factory=set)  # (node id, pack) pairs needed
    order: list = field(default_factory=list)  # the keys of ``packs`` in the order they were found
    refs: dict = field(default_factory=dict)  # (message id, pack) -> Ref, level-0 refs (deduplicated)
    fwd_used: set = field(default_factory=set)  # retired packs named by live hints (keep their fwd records)
    hinted: set = field(default_factory=set)  # packs named directly by live hints
    present: set | None = None  # packs known to exist (from a listing); None: ask the store
    fwd: dict = field(default_factory=dict)  # retired pack -> packs its entries moved to
    unresolved: list = field(default_factory=list)  # (pack, type, id) that no forwarding record resolves
    seg_home: dict | None = None  # (type, id) -> segment pack, for the run being marked (format 2)
    fresh_segs: set = field(default_factory=set)  # segments of newest records read again during mark
    seg_standins: set = field(default_factory=set)  # packs standing in for segments GC rewrote
    usage: dict = field(default_factory=dict)  # pack -> (live raw bytes, raw bytes, needed entries) when last cached
    waves: int = 0  # parallel waves of segment fetches made while marking (format 2)

    def note_usage(self, repo: Repository, pids, compact: bool = False) -> None:
        """Record, for each pack of ``pids`` still in the repository's pack cache, the raw bytes of
        its needed entries, its raw bytes and how many entries are needed, so that GC can judge how
        dead the pack is without fetching it again (see :meth:`pack_usage`). ``compact``: also
        replace its needed set by a :class:`Needed` bitmap."""
        with repo._lock:
            for pid in pids:
                needed = self.packs.get(pid)
                pack = repo._cache.get(pid)
                if needed is None or pack is None:
                    continue
                if isinstance(needed, Needed):
                    if self.usage.get(pid, (0, 0, -1))[2] == len(needed):
                        continue
                    needed = needed.entries(pack)
                ents = pack.entries
                total = sum(e.length for e in ents.values())
                live = sum(ents[x].length for x in needed if x in ents)
                if compact:
                    self.packs[pid] = Needed(pack, needed)
                self.usage[pid] = (live, total, len(self.packs[pid]))

    def needed_entries(self, pid: bytes, pack) -> set:
        """The ``(type, id)`` entries needed of pack ``pid`` (``pack``: that pack, parsed)."""
        got = self.packs.get(pid, ())
        return got.entries(pack) if isinstance(got, Needed) else set(got)

    def pack_usage(self, repo: Repository, pid: bytes) -> tuple[int, int]:
        """``(live raw bytes, raw bytes)`` of a pack mark found needed: from :meth:`note_usage` when
        its needed entries have not changed since (needed sets only grow), else from the pack
        (fetched again if it left the cache). Raises ObjectNotFound / IntegrityError."""
        needed = self.packs.get(pid, ())
        u = self.usage.get(pid)
        if u is not None and u[2] == len(needed):
            return u[0], u[1]
        pack = repo.get_pack(pid)
        needed = self.needed_entries(pid, pack)
        total = sum(e.length for e in pack.entries.values())
        return sum(pack.entries[x].length for x in needed if x in pack.entries), total

    def home(self, repo: Repository, pack: bytes, etype: int, eid: bytes, seen: set | None = None) -> bytes | None:
        """The pack that now holds an entry hinted at ``pack`` (following forwarding records).

        A retired pack that still exists and holds the entry is its own home when none of the packs
        it forwards to has the entry (a reference made after the repack that dropped it).
        """
        if pack not in self.fwd:
            return pack
        seen = seen if seen is not None else set()
        if pack in seen:
            return None
        seen.add(pack)
        self.fwd_used.add(pack)
        for new in self.fwd[pack]:
            if new in self.fwd:
                h = self.home(repo, new, etype, eid, seen)
                if h is not None:
                    return h
                continue
            if self.present is not None and new not in self.present:
                continue  # cached copies of deleted packs do not count
            try:
                if (etype, eid) in repo.get_pack(new).entries:
                    return new
            except (NotFoundError, IntegrityError):
                continue  # gone, or damaged (readers skip it too)
        if self.present is None or pack in self.present:
            try:
                if (etype, eid) in repo.get_pack(pack).entries:
                    return pack
            except NotFoundError:
                pass
            except IntegrityError:
                return pack  # damaged and no other copy: the needed pack is this one (reported)
        return None

    def need(self, repo: Repository, pack: bytes, etype: int, eid: bytes) -> None:
        # format 2: a segment of the run's newest record that holds the entry is its home (the
        # per-save pack the hint names is deleted once merged into a tier pack)
        h = self.seg_home.get((etype, eid)) if self.seg_home else None
        if h is not None:
            got = self.packs.get(h)
            if got is None:
                got = self.packs[h] = set()
                self.order.append(h)
            got.add((etype, eid))
            return
        self.hinted.add(pack)
        h = self.home(repo, pack, etype, eid)
        if h is None:
            self.unresolved.append((pack, etype, eid))
            return
        got = self.packs.get(h)
        if got is None:
            got = self.packs[h] = set()
            self.order.append(h)
        got.add((etype, eid))


WAVE_BYTES = 24 << 20
"""Most pack bytes (as listed) :func:`mark` fetches in one wave of several runs' segments (and at
most a sixth of the repository's pack cache, so a wave stays cached until its runs are marked)."""


def mark(repo: Repository, manifests, problems: list | None = None, fwd: dict | None = None,
         present: set | None = None, segs_by_run: dict | None = None, refresh=None,
         keep_index: bool = False, sizes: dict | None = None, keep_refs: bool = True, on_run=None,
         check_run=None) -> Reach:
    """Mark phase: walk every given checkpoint manifest's tree and record what it needs.

    Nodes are visited once (memoised by id), so the cost is O(live distinct data), not
    O(checkpoints x history). Packs whose data blocks use a dictionary keep the dictionary's
    state (and through it the messages it names) live.

    Args:
        repo: the repository.
        manifests: iterable of checkpoint :class:`Manifest` objects.
        problems: if a list, unreadable parts are appended as :class:`Problem` instead of raising.
        fwd: forwarding records (retired pack -> new packs); needs are attributed to the packs that
            now hold the entries, and the retired packs named by live hints go to ``fwd_used``.
        present: ids of the packs that exist (from a listing), so cached copies of deleted packs
            are never taken for live ones.
        segs_by_run: format 2: run id -> the segment list of the run's newest record. An entry
            held by one of those segments has that segment as its home (before its hint); the
            run's checkpoints are marked together, with that run's segments indexed.
        refresh: ``refresh(run_id) -> segment list`` of the run's newest record read again; called
            when a pack of the run vanished while marking (its writer merged it into a tier pack
            after the log was read), and that run is marked again with the new segments (their
            packs go to ``reach.fresh_segs``). None: a vanished pack is an error.
        keep_index: leave every run's segments in the repository's segment index afterwards (verify
            reads the data through it); by default each run's entries leave the index once that
            run is marked, so memory holds one run's index at a time.
        sizes: pack id -> bytes (from the listing). The segments of consecutive runs are fetched
            together in parallel waves of up to the store's ``max_concurrency`` packs and
            :data:`WAVE_BYTES` listed bytes (each run is still marked on its own, with its own
            memo); without ``sizes`` a wave holds one run's segments.
        keep_refs: return every level-0 ref in ``reach.refs`` (verify reads them); False (GC)
            drops each run's refs and visited nodes once the run is marked, so the memo holds
            one run at a time (runs without segments share one memo, as in format 1), and keeps
            each pack's needed entries as a :class:`Needed` bitmap once its run is marked.
        on_run: ``on_run(reach, pids)``, called once each run is marked, with the packs it met
            (``reach.usage`` holds their needed and total raw bytes), while they are still in
            the pack cache: GC copies the live entries of the segments it rewrites then, so that
            it fetches no pack a second time (docs/format.md §21).
        check_run: ``check_run(checkpoints)``, called after ``on_run`` with the run's manifests
            while its segments are still indexed (verify checks ``messages.x`` there).
    Raises:
        IntegrityError / ObjectNotFound: when ``problems`` is None and something is unreadable.
    """
    reach = Reach(fwd=dict(fwd or {}), present=present)

    def fail(code, key, err):
        if problems is None:
            raise err
        problems.append(Problem(code, key, str(err)))

    def code_of(err):
        return "missing-pack" if isinstance(err, NotFoundError) else "corrupt-object"

    def visit_ref(r: Ref, level: int):
        if level == 0:
            if (r.id, r.pack) in reach.refs:
                return
            reach.refs[(r.id, r.pack)] = r
            if r.flags & FLAG_PIECES:
                reach.need(repo, r.pack, T_PIECES, r.id)
                try:
                    pieces = decode_pieces(repo._entry(T_PIECES, r.id, r.pack))
                except (SnapstoreError, ValueError) as e:
                    fail(code_of(e), keys.pack_key(r.pack), e)
                    return
                for p in pieces:
                    reach.need(repo, p.pack, T_CHUNK, p.id)
            else:
                reach.need(repo, r.pack, T_CHUNK, r.id)
            return
        # a node's id covers its children (and their hints), so it is walked once; but the same
        # node may be stored in several packs (a rewritten list seals it again): each hint is needed
        if (r.id, r.pack) in reach.node_hints:
            return
        reach.node_hints.add((r.id, r.pack))
        reach.need(repo, r.pack, T_NODE, r.id)
        if r.id in reach.nodes_seen:
            return
        reach.nodes_seen.add(r.id)
        try:
            lv, items = repo.read_node(r.id, r.pack)
        except SnapstoreError as e:
            fail(code_of(e), keys.pack_key(r.pack), e)
            return
        for x in items:
            visit_ref(x, lv)

    def dictionaries(start: int) -> None:
        # dictionaries: a pack whose data block has a dictionary needs that state's messages (packs
        # found on the way are appended to reach.order and visited in turn). This includes a retired
        # pack that still holds a live entry its repack did not copy: readers read that entry there.
        i = start
        while i < len(reach.order):
            pid = reach.order[i]
            i += 1
            try:
                pack = repo.get_pack(pid)
            except SnapstoreError as e:
                fail(code_of(e), keys.pack_key(pid), e)
                continue
            for b in pack.blocks:
                if b.dict is None:
                    continue
                try:
                    st_id, st_pack = pack.dict_state(b.dict)
                    reach.need(repo, st_pack, T_STATE, st_id)
                    spine = repo.read_state(st_id, st_pack)
                    if spine.upper:
                        reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
                    # the nodes read to find the range are needed too (they may be in no live tree)
                    for r in repo.refs_range(spine, b.dict.start, b.dict.end,
                                             on_node=lambda r: reach.need(repo, r.pack, T_NODE, r.id)):
                        visit_ref(r, 0)
                except SnapstoreError as e:
                    fail(code_of(e), pack.key, e)
                    continue

    seen_states = set()
    by_run: dict = defaultdict(list)
    for m in manifests:
        if m.kind == KIND_CHECKPOINT:
            by_run[m.run_id].append(m)
    segs_by_run = segs_by_run or {}

    def walk_value(tree):
        # a session-state value tree (docs/format.md §7): its spine, upper entry, nodes and pieces
        key = ("v", tree.spine, tree.pack)
        if key in seen_states:
            return
        seen_states.add(key)
        reach.need(repo, tree.pack, T_VALUE, tree.spine)
        try:
            spine = repo.read_state(tree.spine, tree.pack, T_VALUE)
        except SnapstoreError as e:
            fail(code_of(e), keys.pack_key(tree.pack), e)
            return
        if spine.upper:
            reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
        for level, r in spine.top_down():
            visit_ref(r, level)

    def walk(m):
        if m.session_state_ref:
            sid, pack, size, flags = m.session_state_ref
            visit_ref(Ref(bytes.fromhex(sid), size, 1, flags, bytes.fromhex(pack)), 0)
        if m.session_state_tree is not None:
            walk_value(m.session_state_tree)
        if not m.state:
            return
        sid, spack = bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1])
        if (sid, spack) in seen_states:
            return
        seen_states.add((sid, spack))
        reach.need(repo, spack, T_STATE, sid)
        try:
            spine = repo.read_state(sid, spack)
        except SnapstoreError as e:
            fail(code_of(e), keys.pack_key(spack), e)
            return
        if spine.upper:
            reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
        repo.prefetch(repo._packs_for((T_NODE if level else (T_PIECES if r.flags & FLAG_PIECES else T_CHUNK), r.id, r.pack)
                                      for level, r in spine.top_down()))
        for level, r in spine.top_down():
            visit_ref(r, level)

    def seg_packs(segs, fresh=False):
        """The packs holding a segment list's entries: each present segment, or the present packs
        a rewritten (retired) segment's forwarding record leads to; those records are used.
        ``fresh``: the list was read after the listing (its new packs are not in ``present``)."""
        out = []

        def add(p, depth):
            if p in reach.fwd and depth < 8:
                reach.fwd_used.add(p)  # a listed segment keeps its record as a hint would
                if present is None or p in present:
                    out.append(p)  # still there (grace period): only for entries the rewrite dropped
                for t in reach.fwd[p]:
                    add(t, depth + 1)  # later packs win in the index
                return
            if present is None or fresh or p in present:
                out.append(p)
        listed = {sg.pack for sg in segs}
        for sg in segs:
            reach.hinted.add(sg.pack)
            add(sg.pack, 0)
        out = list(dict.fromkeys(out))
        reach.seg_standins.update(p for p in out if p not in listed)
        return out

    all_refs: dict = {}  # refs and nodes of the runs with segments (for the caller: verify reads them)
    all_nodes: set = set()
    done = 0
    shared_memo = (reach.refs, reach.node_hints, reach.nodes_seen, set(seen_states))
    per_wave = max_concurrency(repo.store)
    wave_bytes = max(1, min(WAVE_BYTES, repo._cache_limit // 6))
    run_ids = list(by_run)
    fetched_until = 0  # runs whose segments a wave has fetched

    def wave(i: int) -> int:
        """Fetch the segments of runs ``i, i+1, ...`` in one parallel wave (as many runs as fit);
        return the index of the first run left out. Forwarded or vanished segments are left to
        the run's own :meth:`prefetch_segments`, which then finds the others cached."""
        todo, nbytes, j = [], 0, i
        while j < len(run_ids):
            ps = [sg.pack for sg in segs_by_run.get(run_ids[j]) or ()
                  if (present is None or sg.pack in present) and sg.pack not in reach.fwd]
            b = sum((sizes or {}).get(p, 0) for p in ps)
            if j > i and (sizes is None or len(todo) + len(ps) > per_wave or nbytes + b > wave_bytes):
                break
            todo += ps
            nbytes += b
            j += 1
        with repo._lock:
            todo = [p for p in dict.fromkeys(todo) if p not in repo._cache]
        if todo:
            repo.prefetch(todo, no_forward=set(todo))
            reach.waves += 1
        return j
    for ri, (run_id, checkpoints) in enumerate(by_run.items()):
        segs = list(segs_by_run.get(run_id) or ())
        if segs and ri >= fetched_until:
            fetched_until = wave(ri)
        # what a walk memoises (refs, node hints, nodes, states) is attributed to a home; with
        # segments the home depends on the run, so a run with segments gets its own memo (runs
        # without share one, as in format 1)
        own_memo = bool(segs)
        if segs:
            reach.refs, reach.node_hints, reach.nodes_seen = {}, set(), set()
            seen_states.clear()
        else:
            reach.refs, reach.node_hints, reach.nodes_seen = shared_memo[0], shared_memo[1], shared_memo[2]
            seen_states.clear()
            seen_states.update(shared_memo[3])
        fresh = False
        for attempt in range(3):
            reach.seg_home = None
            held = []
            for _ in range(8):
                held = seg_packs(segs, fresh) if segs else []
                if held:
                    repo.prefetch_segments([Seg(p, 1) for p in held])
                # gone = not in the store (a damaged segment is not gone: its entries are read from
                # other copies); a pack the cache already evicted again (a run whose packs, with
                # the ones a rewrite put its entries in, outgrow the cache) is not gone either
                gone = [p for p in held if repo.pack_absent(p)]
                if not gone or refresh is None:
                    break
                # merged and deleted by the run's writer since the log was read: read the newest
                # record again until its segments are all at hand (a busy writer merges often)
                segs = list(refresh(run_id) or ())
                fresh = True
                reach.fresh_segs.update(sg.pack for sg in segs)
            if held:
                reach.seg_home = repo.segment_index(held)
            first = len(reach.order)
            try:
                for n, m in enumerate(checkpoints):
                    if n % 256 == 0:  # fetch the next state packs in one parallel wave
                        repo.prefetch(repo._packs_for((T_STATE, bytes.fromhex(x.state[0]), bytes.fromhex(x.state[1]))
                                                      for x in checkpoints[n:n + 256] if x.state))
                    walk(m)
                dictionaries(done)  # with this run's segments indexed
                break
            except NotFoundError:
                if refresh is None or attempt == 2:
                    raise
                for p in reach.order[first:]:  # homes found by the failed pass: found again below
                    reach.packs.pop(p, None)
                del reach.order[first:]
                if own_memo:
                    reach.refs.clear()
                    reach.node_hints.clear()
                    reach.nodes_seen.clear()
                if held:
                    repo.forget_segments(held)
                segs = list(refresh(run_id) or ())
                fresh = True
                reach.fresh_segs.update(sg.pack for sg in segs)
                seen_states.clear()
        met = list(dict.fromkeys(reach.order[first:] + list(held)))
        reach.note_usage(repo, met, compact=not keep_refs)
        if on_run is not None:
            on_run(reach, met)
        if check_run is not None:
            check_run(checkpoints)
        if not keep_refs and segs:
            with repo._lock:
                repo._nodes.clear()  # decoded nodes: the next run (own memo) reads its own
        done = len(reach.order)
        if held and not keep_index:
            repo.forget_segments(held)
        if segs:
            if keep_refs:
                all_refs.update(reach.refs)
                all_nodes.update(reach.nodes_seen)
        else:
            shared_memo[3].update(seen_states)
    for k, v in all_refs.items():
        shared_memo[0].setdefault(k, v)
    shared_memo[2].update(all_nodes)
    reach.refs, reach.node_hints, reach.nodes_seen = shared_memo[0], shared_memo[1], shared_memo[2]
    reach.seg_home = None
    dictionaries(done)
    reach.note_usage(repo, reach.order[done:], compact=not keep_refs)
    return reach


class _ExactCheck:
    """``verify``'s check of every live manifest's ``messages.x`` (version 5, docs/format.md §11)
    against its tree, run by :func:`mark` as each run is marked (its segments indexed): the number
    of the list's refs with the EXACT flag, counted once per node (memoised across checkpoints),
    and the keyed tag ``messages.xt``. A mismatch is an error naming the manifest: a reader of
    array blocks would parse with orjson a list that needs the exact parser. A tree that cannot be
    read is left to mark, which reports it."""

    def __init__(self, repo: Repository, rep) -> None:
        self.repo, self.rep, self.memo = repo, rep, {}

    def count(self, node: Ref) -> int:
        """EXACT refs below tree node ``node`` (memoised by node id)."""
        got = self.memo.get(node.id)
        if got is None:
            lv, items = self.repo.read_node(node.id, node.pack)
            got = self.memo[node.id] = exact_count(items) if lv == 0 else sum(map(self.count, items))
        return got

    def __call__(self, checkpoints) -> None:
        repo, hasher = self.repo, self.repo.hasher
        for m in checkpoints:
            if m.exact is None or m.kind != KIND_CHECKPOINT:
                continue
            key = keys.manifest_key(repo.run_key(m.run_id), m.seq)
            if m.exact_tag != hasher.exact_tag(m.digest, m.exact, m.arrays):
                self.rep.errors.append(Problem("corrupt-manifest", key, f"messages.xt does not bind messages.x = "
                                               f"{m.exact} (and messages.a = {m.arrays}) to the list digest "
                                               "under the repository key"))
                continue
            try:
                n = 0
                if m.state:
                    spine = repo.read_state(bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
                    n = sum(self.count(r) if level else exact_count((r,)) for level, r in spine.top_down())
            except SnapstoreError:
                continue  # reported by mark
            if n != m.exact:
                self.rep.errors.append(Problem("corrupt-manifest", key, f"messages.x says {m.exact} messages need "
                                               f"the exact parser; its list has {n}"))


def _read_entries(repo: Repository, pack, with_dicts: bool) -> None:
    """Read every entry of ``pack`` and check it against its content id (``verify --read-data``):
    every part of its array blocks too (an array repeats a message a list repeats; holes hold no
    bytes), and entries of blocks with a dictionary only ``with_dicts``.

    Raises:
        IntegrityError: an entry does not match its content id, or a block does not decompress.
    """
    for (etype, eid), e in pack.entries.items():
        b = pack.blocks[e.block]
        if b.array or (not with_dicts and b.dict is not None):
            continue  # an array's chunks (and holes) are checked part by part below
        repo._entry_in(pack, etype, eid, None)
    content_id = repo.hasher.content_id
    for bi, b in enumerate(pack.blocks):
        if b.array:
            raw = pack.raw_block(bi)
            for etype, eid, off, ln, _ in b.parts:
                if etype == T_CHUNK and content_id(raw[off:off + ln]) != eid:
                    raise IntegrityError(pack.key, f"entry {eid.hex()} (c) in array block {bi} does not match its content id")


def verify(repo: Repository, read_data: bool = False, progress: Callable[[str, int, int], None] | None = None,
           accept_missing: bool = False) -> VerifyReport:
    """Check the repository (every pack read whole, its checksum verified); see :func:`_verify`.
    ``accept_missing``: put manifests deleted outside snapstore on record as removed (§16)."""
    with repo.whole_packs():
        return _verify(repo, read_data, progress, accept_missing)


def _verify(repo: Repository, read_data: bool = False, progress: Callable[[str, int, int], None] | None = None,
            accept_missing: bool = False) -> VerifyReport:
    """Check the repository.

    Every reachable object must exist and parse: manifests, packs (checksums), tree nodes and
    states (content ids), and every entry a live checkpoint references. Every other pack a reader
    may still touch (packs live hints name, retired ones included, the packs their forwarding
    records lead to, the newest records' segments) is read and its checksum checked. With
    ``read_data`` every message chunk is also decompressed and hashed, and so is every entry of
    those packs that needs no dictionary. Leftovers of crashes or interrupted operations
    (unreferenced packs, temp files, hidden manifests, dangling index records) are warnings.

    Args:
        repo: the repository.
        read_data: also read and hash every chunk.
        progress: called as ``progress(phase, done, total)``.
    Returns:
        A :class:`VerifyReport`.
    """
    rep = VerifyReport()
    store = repo.store
    with repo._lock:
        repo._corrupt.clear()  # judge damage on what the store holds now, not on earlier reads
    all_infos = list(store.list(""))
    all_keys = [i.key for i in all_infos]
    fwd_infos = [i for i in all_infos if i.key.startswith(keys.FWD)]
    packs_present = {}
    keys_by_run: dict[str, list[str]] = defaultdict(list)
    index_keys: dict[str, list[str]] = defaultdict(list)
    logseg_keys: dict[str, list[str]] = defaultdict(list)
    removal_keys: dict[str, list[str]] = defaultdict(list)
    outcome_keys: list[str] = []
    voids = {i.key for i in all_infos if void_record(i)}
    for k in all_keys:
        if k == keys.CONFIG:
            continue
        if k.startswith(keys.FWD):
            continue
        if k.startswith(keys.GC):
            continue
        if k.startswith(runmark.PREFIX):
            if runmark.parse(k) is None:  # run markers (§13): advisory, only their shape is checked
                rep.warnings.append(Problem("unknown-object", k, "not a run marker (docs/format.md §13)"))
            continue
        pid = keys.pack_id_from_key(k)
        if pid is not None:
            packs_present[pid] = k
            continue
        parts = k.split("/")
        if len(parts) == 4 and parts[0] == "runs" and parts[2] == "m":
            if k not in voids:  # a void record (§15) keeps a deleted record's position: no record
                keys_by_run[parts[1]].append(k)
        elif len(parts) == 4 and parts[0] == "runs" and parts[2] == "c":
            index_keys[parts[1]].append(k)
        elif len(parts) == 4 and parts[0] == "runs" and parts[2] == "l" and parse_logseg_key(k) is not None:
            logseg_keys[parts[1]].append(k)
        elif is_removals_key(k):
            removal_keys[parts[1]].append(k)
        elif outcomes.is_outcome_key(k):
            outcome_keys.append(k)
        else:
            rep.warnings.append(Problem("unknown-object", k, "not part of the snapstore layout"))
    logs = read_all_runs(repo, keys_by_run)
    outcomes.verify_outcomes(repo, outcome_keys, logs, rep)  # tool outcomes (§25)
    fmap = ForwardMap.load(repo, fwd_infos)
    for fk, err in fmap.errors:
        rep.errors.append(Problem("corrupt-forward", fk, str(err)))
    for fk in fwd_infos:
        if keys.parse_fwd_key(fk.key) is None:
            rep.warnings.append(Problem("unknown-object", fk.key, "not part of the snapstore layout"))
    fwd = dict(fmap.to)
    live = []
    for rk, log in logs.items():
        for k, err in log.corrupt:
            code = "compacted-record-without-copy" if isinstance(err, CompactedRecordError) else "corrupt-manifest"
            rep.errors.append(Problem(code, k, str(err)))
        for s in log.hidden:
            rep.warnings.append(Problem("orphaned-manifest", keys.manifest_key(rk, s),
                                        "hidden by a rollback or deletion (cleanup not finished); removed by 'snapstore gc'"))
        if log.head is not None and log.head.kind == KIND_ROLLBACK:
            t = int(log.head.target["seq"])
            if t not in log.manifests:
                rep.errors.append(Problem("missing-checkpoint", keys.manifest_key(rk, t),
                                          f"head of run {log.head.run_id!r} rolls back to a checkpoint that is gone"))
        live.extend(log.live)
        live_seqs = {m.seq: m for m in log.live}
        for ik in index_keys.get(rk, []):
            try:
                seq, _ = decode_index(ik, store.get(ik))
            except ObjectNotFound:
                continue
            except SnapstoreError as e:
                rep.errors.append(Problem("corrupt-index", ik, str(e)))
                continue
            if seq not in live_seqs:
                rep.warnings.append(Problem("orphaned-index", ik, f"points at position {seq}, which holds no live checkpoint; removed by 'snapstore gc'"))
    # log segments (format 2): each copy must be exactly the manifest still at its position
    copies_above: dict[str, dict[int, str]] = defaultdict(dict)  # run -> position above its newest -> segment
    for rk, lks in logseg_keys.items():
        log = logs.get(rk)
        newest = max(log.manifests) if log is not None and log.manifests else None
        for lk in lks:
            try:
                recs = decode_logseg(lk, store.get(lk))
            except ObjectNotFound:
                continue
            except SnapstoreError as e:
                rep.warnings.append(Problem("corrupt-logseg", lk, f"{e}; a copy: listing reads the manifests instead"))
                continue
            for c in recs:
                seq = c.seq
                if newest is not None and seq > newest:
                    copies_above[rk][seq] = lk
                if log is not None and seq in log.manifests:
                    try:
                        same = c.manifest(lk) == log.manifests[seq]  # every field, not only the write id
                    except SnapstoreError:
                        same = False
                    if not same:
                        rep.warnings.append(Problem("corrupt-logseg", lk, f"its copy of position {seq} differs from the "
                                                    "manifest; listing reads the manifest instead"))
                        break
    _check_gaps(repo, rep, keys_by_run, voids, removal_keys, copies_above, {i.key: i for i in all_infos}, logs,
                accept_missing)
    if progress:
        progress("manifests", len(live), len(live))
    problems: list[Problem] = []
    exact_check = _ExactCheck(repo, rep)
    reach = mark(repo, live, problems, fwd, set(packs_present), segments_by_run(logs), keep_index=read_data,
                 check_run=exact_check)
    rep.errors.extend(problems)
    for pid, etype, eid in reach.unresolved:
        rep.errors.append(Problem("missing-entry", keys.fwd_shard_key(pid),
                                  f"entry {chr(etype)} {eid.hex()} of retired pack {pid.hex()} is in none of "
                                  "the packs its forwarding record names"))
    for pid in fwd:
        if pid not in reach.fwd_used:
            rep.warnings.append(Problem("unreferenced-forward", keys.fwd_shard_key(pid),
                                        f"no live hint names retired pack {pid.hex()}; its record is dropped by GC"))
    # every needed entry must be in its pack
    for i, (pid, needed) in enumerate(reach.packs.items()):
        if pid not in packs_present:
            if not any(p.key == keys.pack_key(pid) for p in rep.errors):
                rep.errors.append(Problem("missing-pack", keys.pack_key(pid), "referenced by a live checkpoint"))
            continue
        try:
            pack = repo.get_pack(pid)
        except SnapstoreError as e:
            if not any(p.key == keys.pack_key(pid) for p in rep.errors):
                rep.errors.append(Problem("corrupt-pack", keys.pack_key(pid), str(e)))
            continue
        for etype, eid in needed:
            if (etype, eid) not in pack.entries:
                rep.errors.append(Problem("missing-entry", pack.key, f"entry {chr(etype)} {eid.hex()} is referenced but absent"))
        if progress:
            progress("packs", i + 1, len(reach.packs))
    if read_data:
        refs = list(reach.refs.values())
        for i, r in enumerate(refs):
            try:
                repo.message_raw(r)
            except SnapstoreError as e:
                rep.errors.append(Problem("corrupt-chunk" if isinstance(e, IntegrityError) else "missing-pack",
                                          keys.pack_key(r.pack), str(e)))
            if progress and (i % 500 == 0 or i + 1 == len(refs)):
                progress("data", i + 1, len(refs))
        # each session-state value tree as a whole: its pieces joined must be the value it names
        for tree in dict.fromkeys(m.session_state_tree for m in live if m.session_state_tree is not None):
            try:
                repo.read_value(tree)
            except SnapstoreError as e:
                if not any(p.key == getattr(e, "key", None) for p in rep.errors):
                    rep.errors.append(Problem("corrupt-state" if isinstance(e, IntegrityError) else "missing-pack",
                                              keys.pack_key(tree.pack), str(e)))
    segs = head_segments(logs)
    lost = any(p.code in ("missing-pack", "missing-entry") for p in rep.errors)
    for pid, rk in segs.items():
        k = keys.pack_key(pid)
        if pid not in packs_present:
            # deleted by GC with nothing live in it, or rewritten (forwarding record): fine, unless
            # live entries were not found (reported above), which then most likely lived here
            if pid not in fwd and lost:
                rep.errors.append(Problem("missing-pack", k, f"a segment of the newest record of run key {rk}; "
                                          "live entries were not found"))
            continue
        if any(p.key == k for p in rep.errors):
            continue
        try:
            pack = repo.get_pack(pid)
            if read_data:
                _read_entries(repo, pack, True)
        except SnapstoreError as e:
            if pid in reach.packs or lost:
                rep.errors.append(Problem("corrupt-pack", k, f"a segment of run key {rk}: {e}"))
            else:  # readers skip it: every live entry was found in another copy
                rep.warnings.append(Problem("corrupt-unneeded-pack", k, f"a segment of run key {rk}: {e}; every "
                                            "live entry is read from another copy; reclaimed by 'snapstore gc'"))
    # the other packs a reader may still touch: packs live hints name (a retired one is read
    # first until GC deletes it) and the packs their forwarding records lead to. Damage there is
    # harmless while every entry readers look for is found in another copy (the homes, checked
    # above): a warning; GC deletes the pack once it is unreferenced
    touch = set(reach.hinted) | set(reach.fwd_used)
    stack = list(touch)
    while stack:
        for t in fwd.get(stack.pop(), ()):
            if t not in touch:
                touch.add(t)
                stack.append(t)
    damaged = set()
    for i, pid in enumerate(sorted(touch)):
        if pid in reach.packs or pid in segs or pid not in packs_present:
            continue
        k = keys.pack_key(pid)
        try:
            pack = repo.get_pack(pid)
            if read_data:
                _read_entries(repo, pack, False)  # a dictionary's sources may be gone (§21)
        except SnapstoreError as e:
            damaged.add(pid)
            what = "retired by gc" if pid in fwd else "named by live hints"
            rep.warnings.append(Problem("corrupt-unneeded-pack", k, f"{what}: {e}; every live entry is read from "
                                        "another copy; reclaimed by 'snapstore gc'"))
        if progress and (i % 500 == 0 or i + 1 == len(touch)):
            progress("hinted packs", i + 1, len(touch))
    for pid, k in packs_present.items():
        if pid in reach.packs or pid in segs or pid in damaged:
            continue
        if pid in fwd:
            rep.warnings.append(Problem("retired-pack", k, "repacked by gc (its live entries were copied to "
                                        "new packs); deleted by a later 'snapstore gc' once the grace period "
                                        "has passed"))
        else:
            rep.warnings.append(Problem("unreferenced-pack", k, "no live checkpoint uses it (left by rollback, delete, prune, a conflict or an interrupted save); reclaimed by 'snapstore gc'"))
    find = store.leftovers if store_capabilities(store).leftovers else None
    try:
        left = find() if find is not None else []
    except SnapstoreError as e:  # e.g. not allowed to list multipart uploads
        left = []
        rep.warnings.append(Problem("leftovers-unknown", "", f"cannot list crash leftovers: {e}"))
    for it in left:
        if it.upload_id is None:
            rep.warnings.append(Problem("temp-file", it.name, "temporary file of an interrupted write; removed by "
                                        "'snapstore gc' once older than the grace period"))
        else:
            rep.warnings.append(Problem("incomplete-upload", it.name, f"multipart upload {it.upload_id} of an "
                                        "interrupted write; aborted by 'snapstore gc' once older than the grace period"))
    rep.checked = {"runs": sum(1 for log in logs.values() if log.live), "checkpoints": len(live),
                   "packs": len(reach.packs), "nodes": len(reach.nodes_seen), "messages": len(reach.refs),
                   "objects": len(all_keys)}
    return rep


S3_STANDARD_PRICES = {"gb_month": 0.023, "PUT": 0.005 / 1000, "LIST": 0.005 / 1000, "GET": 0.0004 / 1000,
                      "HEAD": 0.0004 / 1000, "DELETE": 0.0}
"""S3 Standard list prices, us-east-1 (USD): storage per GB-month, and per request by kind."""


def estimate_cost(stored_bytes: int, requests: dict, prices: dict | None = None) -> dict:
    """Estimate S3 cost in USD.

    Args:
        stored_bytes: bytes stored.
        requests: request counts by kind (``PUT``, ``GET``, ...).
        prices: overrides for :data:`S3_STANDARD_PRICES` (``gb_month`` and per-request prices).
    Returns:
        ``{"prices": ..., "storage_per_month": usd, "requests": usd}``.
    """
    p = dict(S3_STANDARD_PRICES)
    p.update(prices or {})
    return {"prices": p, "storage_per_month": stored_bytes / 1e9 * p["gb_month"],
            "requests": sum(n * p.get(k, 0.0) for k, n in requests.items())}


def session_state_bytes(m: Manifest) -> int:
    """Bytes of checkpoint ``m``'s session state as exact JSON (0 without one): the size its value
    tree or chunk records, or the length of the inline value's encoding."""
    if m.session_state_tree is not None:
        return m.session_state_tree.size
    if m.session_state_ref:
        return int(m.session_state_ref[2])
    if m.has_session_state:
        return len(encode_json(m.session_state)[0])
    return 0


def stats(repo: Repository, prices: dict | None = None) -> dict:
    """Repository statistics.

    Args:
        repo: the repository.
        prices: price overrides for the cost estimate (see :func:`estimate_cost`).
    Returns:
        dict with ``runs`` and ``checkpoints`` (live), ``logical_bytes`` (the JSON bytes of every
        live checkpoint's messages and session state: the cost of storing every checkpoint whole;
        ``message_bytes`` and ``session_state_bytes`` are its two parts), ``stored_bytes`` (all
        objects), ``ratio`` (logical / stored), ``objects`` (category -> ``{"count", "bytes"}``; ``manifests`` also has ``"stubs"``, the compacted records of 0 bytes, when there are any) and
        ``requests`` (this process's store requests so far), and ``cost``: an estimate at S3
        Standard list prices (``storage_per_month`` for what is stored, ``requests`` for the requests
        counted), with the prices used; ``leftovers`` (``{"count", "bytes"}``): crash leftovers
        outside the objects (temporary files of killed processes, incomplete S3 multipart uploads;
        not in ``stored_bytes``), which ``gc`` removes once older than its grace period.
    """
    cats: dict[str, dict] = defaultdict(lambda: {"count": 0, "bytes": 0})
    keys_by_run: dict[str, list[str]] = defaultdict(list)
    logsegs_by_run: dict[str, dict] = defaultdict(dict)
    total = 0
    for info in repo.store.list(""):
        k = info.key
        parts = k.split("/")
        if k == keys.CONFIG:
            c = "config"
        elif parts[0] == "packs":
            c = "packs"
        elif parts[0] == "runs" and len(parts) == 4 and parts[2] == "m":
            c = "manifests"
            if void_record(info):
                cats[c]["voids"] = cats[c].get("voids", 0) + 1  # void records (§15): no record
            else:
                keys_by_run[parts[1]].append(k)
            if info.size == 0:
                cats[c]["stubs"] = cats[c].get("stubs", 0) + 1  # compacted records (§14)
        elif parts[0] == "runs" and len(parts) == 4 and parts[2] == "c":
            c = "index"
        elif parts[0] == "runs" and len(parts) == 4 and parts[2] == "l":
            c = "log"
            pos = parse_logseg_key(k)
            if pos is not None:
                logsegs_by_run[parts[1]][pos] = k
        elif parts[0] == "fwd":
            c = "forward"
        elif parts[0] == "gc":
            c = "gc"
        elif k.startswith(runmark.PREFIX):
            c = "runmarks"
        else:
            c = "other"
        cats[c]["count"] += 1
        cats[c]["bytes"] += info.size
        total += info.size
    # the records log segments cover are read from them (one GET per segment, not per manifest)
    logs = read_all_runs(repo, keys_by_run, logsegs_by_run=logsegs_by_run)
    live = [m for log in logs.values() for m in log.live]
    message_bytes = sum(m.size for m in live)
    state_bytes = sum(session_state_bytes(m) for m in live)
    logical = message_bytes + state_bytes
    find = repo.store.leftovers if store_capabilities(repo.store).leftovers else None
    try:
        left = find() if find is not None else []
    except SnapstoreError:
        left = []  # e.g. not allowed to list multipart uploads
    return {"runs": sum(1 for log in logs.values() if log.live), "checkpoints": len(live),
            "logical_bytes": logical, "message_bytes": message_bytes, "session_state_bytes": state_bytes,
            "stored_bytes": total, "ratio": (logical / total) if total else 0.0,
            "objects": dict(cats), "requests": repo.store.stats.as_dict(),
            "cost": estimate_cost(total, repo.store.stats.counts, prices),
            "leftovers": {"count": len(left), "bytes": sum(it.size for it in left)}}
