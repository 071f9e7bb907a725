"""Reading every run's log in bulk, classified: the live checkpoints of each run (the input of mark,
``verify``, ``stats`` and GC) and the listing of the run folders sorted by area.

Layer 4's whole-repository walks (uses :mod:`snapstore.repo.repository` and
:mod:`snapstore.repo.log.bulk`). Which records are live is the rule of
:mod:`snapstore.format.liveness`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from ..errors import IntegrityError, ObjectNotFound, SnapstoreError
from ..format import keys
from ..format.liveness import HIDDEN, LIVE, LogWalk
from ..format.logseg import parse_logseg_key
from ..format.manifest import KIND_TOMBSTONE, ArchivedManifest, Manifest, is_void
from ..format.removals import is_removals_key
from ..repo.log.bulk import choose_logsegs, copies_from_logseg, list_logsegs
from ..repo.repository import Repository


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


_HEX = frozenset("0123456789abcdef")
_LENGTHS: dict = {}  # the hex lengths of packed states, one shared tuple per shape


class LogEntry:
    """What GC keeps of a log record once its run's log is read and classified (a few hundred
    bytes instead of a :class:`Manifest`'s ~1.5 KB): enough to mark it (``kind``, ``run_id``,
    ``state``, session-state refs) and to decide which records to delete (``seq``, ``kind``,
    ``target``). ``checkpoint_id`` is not kept (None).

    ``state`` (the spine's ``[state id hex, pack hex, ...]``) is kept as the bytes the hex digits
    spell, one object of about 60 bytes, with the digits' lengths shared by every entry of the same
    shape, instead of a tuple of strings (about 200 bytes; benchmarks/mark_memory.py): reading
    :attr:`state` gives the same tuple of strings back. A state that is not lowercase hex of even
    lengths is kept as it is."""

    __slots__ = ("kind", "run_id", "seq", "target", "_state", "_lengths", "session_state_ref", "session_state_tree")
    checkpoint_id = None

    def __init__(self, m: Manifest, run_id: str):
        self.kind, self.run_id, self.seq = m.kind, run_id, m.seq
        self.target = {"seq": int(m.target["seq"])} if m.target else None
        # a record of a thin bundle log keeps its state in its bundle (§28): read only if marked
        if isinstance(m, ArchivedManifest) and not m.loaded:
            self._state, self._lengths = m, None
        else:
            self._state, self._lengths = _pack_state(m.state)
        self.session_state_ref, self.session_state_tree = m.session_state_ref, m.session_state_tree

    @property
    def state(self) -> tuple | None:
        """The record's ``state`` as a tuple of strings (as :class:`Manifest` has it), or None; for
        a record of a thin bundle log, read from its bundle on first use."""
        if isinstance(self._state, ArchivedManifest):
            self._state, self._lengths = _pack_state(self._state.state)
        if self._lengths is None:
            return self._state
        h = self._state.hex()
        out, pos = [], 0
        for n in self._lengths:
            out.append(h[pos:pos + n])
            pos += n
        return tuple(out)


def _pack_state(state) -> tuple:
    """``(packed bytes, shared lengths tuple)`` for a state of lowercase even-length hex strings;
    ``(tuple(state) or None, None)`` otherwise."""
    if not state:
        return None, None
    if all(isinstance(x, str) and len(x) % 2 == 0 and _HEX.issuperset(x) for x in state):
        lengths = tuple(len(x) for x in state)
        return bytes.fromhex("".join(state)), _LENGTHS.setdefault(lengths, lengths)
    return tuple(state), None


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
    """Compute which manifests of a run are live (pure function of the records, by the rule of
    :mod:`snapstore.format.liveness`).

    Args:
        run_key: the run's key segment.
        manifests: position -> Manifest, every record read.
        corrupt: ``(key, error)`` of the records that could not be read.
    Returns:
        A :class:`RunLog`.
    """
    live, hidden = [], []
    walk = LogWalk()
    seqs = sorted(manifests, reverse=True)
    head = manifests[seqs[0]] if seqs else None
    for s in seqs:
        verdict = walk.judge(s, manifests[s])
        if verdict == HIDDEN:
            hidden.append(s)
        elif verdict == LIVE:
            live.append(manifests[s])
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


def segments_by_run(logs: dict) -> dict:
    """run id -> the segment list of the run's newest record (format 2; runs without one are
    left out), for :func:`mark`."""
    return {run: segs for _rk, run, segs in _newest_segments(logs)}


@dataclass
class RunListing:
    """The objects under ``runs/`` sorted by area (one LIST), per run key.

    Attributes:
        manifests: run key -> keys of its manifests that hold a record (void records left out).
        voids: run key -> ObjectInfo of its void records (docs/format.md §15).
        index: run key -> ObjectInfo of its checkpoint-id index records.
        logsegs: run key -> ObjectInfo of its log segments (keys that parse as one).
        removals: run key -> ObjectInfo of its removal records (§16).
        pins: run key -> ObjectInfo of its fork pin (§10: a fork lists the run's segments).
        other: ObjectInfo of every other object listed.
        infos: key -> ObjectInfo of everything listed.
    """

    manifests: dict = field(default_factory=lambda: defaultdict(list))
    voids: dict = field(default_factory=lambda: defaultdict(list))
    index: dict = field(default_factory=lambda: defaultdict(list))
    logsegs: dict = field(default_factory=lambda: defaultdict(list))
    removals: dict = field(default_factory=lambda: defaultdict(list))
    pins: dict = field(default_factory=dict)
    other: list = field(default_factory=list)
    infos: dict = field(default_factory=dict)

    def add(self, info) -> str | None:
        """File the listed object ``info`` (an ObjectInfo); return the kind it was filed as
        (``"manifest"``, ``"void"``, ``"index"``, ``"logseg"``, ``"removals"``, ``"pin"``), or None when it
        went to :attr:`other`."""
        k = info.key
        self.infos[k] = info
        where = keys.parse_key(k)
        rk = where.run_key
        if where.kind == "manifest":
            if void_record(info):
                self.voids[rk].append(info)
                return "void"
            self.manifests[rk].append(k)
            return "manifest"
        if where.kind == "index":
            self.index[rk].append(info)
            return "index"
        if where.kind == "removals" and is_removals_key(k):
            self.removals[rk].append(info)
            return "removals"
        if where.kind == "pin" and where.rest == keys.PIN_NAME:
            self.pins[rk] = info
            return "pin"
        if where.kind == "logseg" and parse_logseg_key(k) is not None:
            self.logsegs[rk].append(info)
            return "logseg"
        self.other.append(info)
        return None

    def logseg_positions(self) -> dict:
        """run key -> ``{(hi, level): key}`` of its log segments (for :func:`read_all_runs`)."""
        return {rk: {parse_logseg_key(i.key): i.key for i in infos} for rk, infos in self.logsegs.items()}


def list_runs(repo: Repository) -> RunListing:
    """LIST ``runs/`` once and sort what it holds (:class:`RunListing`)."""
    out = RunListing()
    for info in repo.store.list(keys.RUNS):
        out.add(info)
    return out


def list_run_range(repo: Repository, after: str | None, last: str) -> RunListing:
    """LIST only the run folders whose run key ``rk`` satisfies ``after < rk <= last`` (strings;
    ``after`` None: no lower bound) and sort what they hold (:class:`RunListing`).

    A partition of a partitioned job (:mod:`snapstore.maintenance.partitions`) lists its own key
    range, not the repository: the LIST starts after ``runs/<after>0`` and stops at the first key
    at or past ``runs/<last>0``. Run keys use only ``[a-z2-7]`` and hex digits (all above ``/``,
    :func:`snapstore.format.ids.name_key`), so the keys of one run folder are contiguous and
    sort in run-key order, and ``runs/<k>/...`` < ``runs/<k>0`` for every key of run ``k``.

    Args:
        repo: the repository.
        after: the exclusive lower bound (the previous partition's last run key), or None.
        last: the inclusive upper bound (``"\U0010ffff"``: none).
    Returns:
        The :class:`RunListing` of those runs' objects.
    """
    out = RunListing()
    stop = f"{keys.RUNS}{last}0"
    start = f"{keys.RUNS}{after}0" if after else None
    for info in repo.store.list(keys.RUNS, start_after=start):
        if info.key >= stop:
            break
        rk = info.key[len(keys.RUNS):].split("/", 1)[0]
        if (after is None or rk > after) and rk <= last:
            out.add(info)
    return out


_STUB = object()


def _read_stubs(repo: Repository, stubs: dict[str, list[str]], light: bool) -> list:
    """Read compacted records (0-byte manifests, docs/format.md §14) from their copies: per run,
    one LIST of its log segments, then the covering ones (largest first) in parallel; a stub left
    without a valid copy is read alone, raising CompactedRecordError. Returns
    ``[(run key, manifest key, Manifest | None, error | None)]``."""
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

    return [r for rs in repo.pool.map(_task_reader(repo, manifest, light), tasks) for r in rs]


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
        run key -> :class:`RunLog`, in run-key order.
    """
    if keys_by_run is None:
        keys_by_run = list_runs(repo).manifests
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
    pool = repo.pool
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
    # in run-key order (not a set's, which differs between processes): what depends on the order
    # of runs (which run a shared segment is named after) is the same in every process and partition
    return {rk: classify(rk, per.get(rk, {}), bad.get(rk)) for rk in sorted(set(keys_by_run) | set(per))}
