"""``verify``: check that every object a reader may touch exists and parses, and name the leftovers.

Layer 4's whole-repository walks (uses :mod:`snapstore.maintenance.runs` and
:mod:`snapstore.maintenance.mark`). :class:`Verifier` runs one step per concern (its
:attr:`Verifier.STEPS`, in order): list, the run logs, tool outcomes, log segments, gaps, mark, needed entries,
data, segments, the other packs readers touch, unreferenced packs, crash leftovers. A new area of
the layout gets a step of its own.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import blake3

from ..errors import CompactedRecordError, IntegrityError, ObjectNotFound, SnapstoreError
from ..format import keys, runmark
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, ArchivedManifest
from ..format.index import decode_index
from ..format.bundle import ARCHIVE, COLD_CLASSES, bundle_id_from_index_key
from ..format.bundle import DATA as BUNDLE_DATA
from ..format.bundle import decode_index as decode_bundle_index
from ..format.pack import T_CHUNK, Pack
from ..format.removals import decode_removals, merge_ranges
from ..format.tree import Ref, exact_count
from ..repo.bundles import archived_runs
from ..repo.log.bundlelog import read_copies
from ..repo.repository import Repository
from . import outcomes
from .forwarding import ForwardMap
from .mark import Marker, MarkScope
from .runs import RunListing, head_segments, read_all_runs, segments_by_run
from ..stores.base import store_capabilities

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
        bundles_not_read: indexed archive bundles whose data was not read: without ``read_data``
            every bundle (only its listed size is compared with its index record); with it, those
            in ``GLACIER``/``DEEP_ARCHIVE`` not restored (each also a ``bundle-not-read`` warning).
    """

    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    checked: dict = field(default_factory=dict)
    bundles_not_read: int = 0

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not self.errors

def _unaccounted(removed: list, starts: list, lo: int, hi: int):
    """Yield the sub-ranges ``(a, b)`` of the positions ``[lo, hi]`` that no range of ``removed``
    (merged inclusive ranges, sorted; ``starts``: their first positions) covers."""
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


def _needed_by(runs: list) -> str:
    """`` (needed by run 'a', 'b' ...)`` naming up to five runs, or '' for none."""
    if not runs:
        return ""
    named = ", ".join(repr(r) for r in runs[:5]) + (f" and {len(runs) - 5} more" if len(runs) > 5 else "")
    return f" (needed by run{'s' if len(runs) > 1 else ''} {named})"


class _VerifyMarker(Marker):
    """Mark for ``verify``: unreadable parts become :class:`Problem` items (not exceptions), and
    every live manifest's ``messages.x`` (version 5, docs/format.md §11) is checked against its
    tree as each run is marked (its segments indexed): the number of the list's refs with the
    EXACT flag, counted once per node (memoised across checkpoints), and the keyed tag
    ``messages.xt``. A mismatch is an error naming the manifest: a reader of array blocks would
    parse with orjson a list that needs the exact parser. A tree that cannot be read is left to
    mark, which reports it.

    Args:
        repo: the repository.
        scope: a :class:`~snapstore.maintenance.mark.MarkScope`.
        rep: the :class:`VerifyReport` receiving the ``messages.x`` errors.
        keep_index: see :class:`~snapstore.maintenance.mark.Marker`.
    """

    def __init__(self, repo: Repository, scope: MarkScope, rep: VerifyReport, keep_index: bool):
        super().__init__(repo, scope, keep_index=keep_index)
        self.rep, self.memo = rep, {}
        self.found: dict = {}  # (code, key) -> [message, run ids that need the object, corrupt cause key]
        self.folded: set = set()  # keys of packs reported under the corrupt object holding their entries
        self._run_id = None
        self._failed: list = []  # (code, key) of every failure, in order
        self._in_dicts = False
        self.dict_runs: dict = {}  # (code, key) a dictionary pass met -> the runs named only because of it
        self._under: dict = {}  # memo key (state, node, message ref) -> the failures found below it

    def mark_run(self, run_id: str, checkpoints: list, segs: list, done: int) -> tuple[int, list, list]:
        """:meth:`Marker.mark_run`, remembering which run is marked (named in its problems)."""
        self._run_id = run_id
        return super().mark_run(run_id, checkpoints, segs, done)

    def fail(self, code: str, key: str, err: Exception) -> None:
        """Record the problem (verify goes on): one per object, naming the runs that need it."""
        cause = getattr(err, "key", None) if isinstance(err, IntegrityError) else None
        got = self.found.setdefault((code, key), [str(err), [], cause])
        if got[2] is None:
            got[2] = cause
        if self._in_dicts:
            self.dict_runs.setdefault((code, key), [])
        if self._run_id is not None and self._run_id not in got[1]:
            got[1].append(self._run_id)
            if self._in_dicts:
                self.dict_runs[(code, key)].append(self._run_id)
        self._failed.append((code, key))

    def dictionaries(self, start: int) -> None:
        """:meth:`Marker.dictionaries`, noting which runs it names (:attr:`dict_runs`): the pass
        runs once per pack, in the first run that finds it, so a partitioned verify keeps those
        names only from the first partition that has them."""
        self._in_dicts = True
        try:
            Marker.dictionaries(self, start)
        finally:
            self._in_dicts = False

    def _memo(self, key, hit: bool, go) -> None:
        """Run ``go()`` (a walk below memo key ``key``); when the walk was memoised already
        (``hit``: it stops at once), the failures found below ``key`` before are attributed to the
        run marked now too, so a problem names every run that needs the object whatever order
        the runs are marked in (and a partitioned verify, which marks runs apart, names the same)."""
        if hit:
            for fk in self._under.get(key, ()):
                runs = self.found[fk][1]
                if self._run_id is not None and self._run_id not in runs:
                    runs.append(self._run_id)
            go()
            return
        start = len(self._failed)
        go()
        if len(self._failed) > start:
            self._under[key] = list(dict.fromkeys(self._failed[start:]))

    def visit_ref(self, r: Ref, level: int) -> None:
        """:meth:`Marker.visit_ref`, attributing failures below a memoised ref to this run (:meth:`_memo`)."""
        reach = self.reach
        if level == 0:
            key = ("r", r.id, r.pack)
            hit = (r.id, r.pack) in reach.refs
        else:
            key = ("n", r.id)
            hit = r.id in reach.nodes_seen
        self._memo(key, hit, lambda: Marker.visit_ref(self, r, level))

    def walk_list(self, m) -> None:
        """:meth:`Marker.walk_list`, attributing failures below a memoised state to this run (:meth:`_memo`)."""
        key = (bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        self._memo(("s",) + key, key in self.seen_states, lambda: Marker.walk_list(self, m))

    @property
    def needed_by(self) -> dict:
        """Key of each object found unreadable -> ids of the runs whose live checkpoints need it."""
        return found_needed_by(self.found)

    @property
    def problems(self) -> list:
        """The :class:`Problem` of each unreadable object (:func:`found_problems`); sets :attr:`folded`."""
        out, self.folded = found_problems(self.found)
        return out

    def count(self, node: Ref) -> int:
        """EXACT refs below tree node ``node`` (memoised by node id)."""
        got = self.memo.get(node.id)
        if got is None:
            lv, items = self.repo.read_node(node.id, node.pack)
            got = self.memo[node.id] = exact_count(items) if lv == 0 else sum(map(self.count, items))
        return got

    def check_run(self, checkpoints) -> None:
        """Check ``messages.x`` and ``messages.xt`` of each of ``checkpoints`` (see the class)."""
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


def found_needed_by(found: dict) -> dict:
    """Key of each object found unreadable -> ids of the runs whose live checkpoints need it.

    Args:
        found: ``(code, key) -> [message, run ids, cause key or None]``, as :class:`_VerifyMarker`
            collects it (or the union of several partitions' collections, runs merged in order).
    """
    out: dict = {}
    for (_, key), (_, runs, _) in found.items():
        out.setdefault(key, []).extend(r for r in runs if r not in out.get(key, ()))
    return out


def found_problems(found: dict) -> tuple[list, set]:
    """The :class:`Problem` of each object mark found unreadable, with the runs whose live
    checkpoints need it, and the set of keys folded into their cause.

    Problems are grouped by cause: when the objects a checkpoint names could not be read
    because another object is corrupt (the entries of packs merged into a segment pack are
    read from that segment, docs/format.md §18), the one corrupt object is reported once,
    naming how many of the packs it replaced live checkpoints need, and those packs are not
    reported again as missing.

    Args:
        found: ``(code, key) -> [message, run ids, cause key or None]`` (see :func:`found_needed_by`).
    Returns:
        ``(problems, folded)``: a list of :class:`Problem` and the keys reported under their cause.
    """
    causes: dict = {}  # corrupt object key -> [message, keys reached through it, runs]
    for (code, key), (msg, runs, cause) in found.items():
        if cause is not None and cause != key:
            got = causes.setdefault(cause, [msg, [], []])
            got[1].append(key)
            got[2].extend(r for r in runs if r not in got[2])
    folded = {k for _, ks, _ in causes.values() for k in ks}
    out = []
    for cause, (msg, reached, runs) in causes.items():
        shown = ", ".join(reached[:3]) + (f" and {len(reached) - 3} more" if len(reached) > 3 else "")
        out.append(Problem("corrupt-object", cause, f"{msg}; it holds the entries of {len(reached)} "
                           f"pack{'s' if len(reached) > 1 else ''} merged into it ({shown})"
                           + _needed_by(runs)))
    for (code, key), (msg, runs, cause) in found.items():
        if key in folded or key in causes:
            continue
        out.append(Problem(code, key, msg + _needed_by(runs)))
    return out, folded


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
        repo.read_entry_in(pack, etype, eid, None)
    content_id = repo.hasher.content_id
    for bi, b in enumerate(pack.blocks):
        if b.array:
            raw = pack.raw_block(bi)
            for etype, eid, off, ln, _ in b.parts:
                if etype == T_CHUNK and content_id(raw[off:off + ln]) != eid:
                    raise IntegrityError(pack.key, f"entry {eid.hex()} (c) in array block {bi} does not match its content id")


def verify(repo: Repository, read_data: bool = False, progress: Callable[[str, int, int], None] | None = None,
           accept_missing: bool = False) -> VerifyReport:
    """Check the repository.

    Every reachable object must exist and parse: manifests, packs (checksums), tree nodes and
    states (content ids), and every entry a live checkpoint references. Every other pack a reader
    may still touch (packs live hints name, retired ones included, the packs their forwarding
    records lead to, the newest records' segments) is read and its checksum checked. With
    ``read_data`` every message chunk is also decompressed and hashed, and so is every entry of
    those packs that needs no dictionary. Leftovers of crashes or interrupted operations
    (unreferenced packs, temp files, hidden manifests, dangling index records) are warnings.
    Every pack is read whole (its checksum verified).

    Args:
        repo: the repository.
        read_data: also read and hash every chunk.
        progress: called as ``progress(phase, done, total)``.
        accept_missing: put manifests deleted outside snapstore on record as removed (§16).
    Returns:
        A :class:`VerifyReport`.
    Raises:
        StoreError: the store failed (what the repository holds is reported, not raised).
    """
    with repo.whole_packs():
        return Verifier(repo, read_data, progress, accept_missing).run()


class Verifier:
    """One run of :func:`verify`; each of :attr:`STEPS` is a method that adds to :attr:`rep`.

    Args:
        repo: the repository.
        read_data: also read and hash every chunk.
        progress: ``progress(phase, done, total)`` or None.
        accept_missing: put manifests deleted outside snapstore on record as removed (§16).
    """

    STEPS = ("list_objects", "check_logs", "check_outcomes", "check_logsegs", "check_gaps", "mark", "check_bundles", "check_needed", "check_data",
             "check_segments", "check_touched", "report_unreferenced", "report_leftovers")

    def __init__(self, repo: Repository, read_data: bool = False,
                 progress: Callable[[str, int, int], None] | None = None, accept_missing: bool = False):
        self.repo, self.read_data, self.progress, self.accept_missing = repo, read_data, progress, accept_missing
        self.rep = VerifyReport()
        self.listing = RunListing()
        self.all_infos: list = []
        self.packs_present: dict = {}  # pack id -> key
        self.fwd_infos: list = []
        self.outcome_keys: list = []  # tool outcomes (§25)
        self.logs: dict = {}
        self.fwd: dict = {}
        self.live: list = []
        self.copies_above: dict = defaultdict(dict)  # run -> position above its newest -> segment
        self.reach = None
        self.segs: dict = {}
        self.damaged: set = set()
        self.folded: set = set()  # merged-away packs whose entries sit in a corrupt pack (reported there)
        self.lost_logsegs: set = set()  # damaged log segments that held the only copy of compacted records
        self.needed_by: dict = {}  # unreadable object key -> ids of the runs that need it (from mark)
        self.archive_infos: dict = {}  # key -> ObjectInfo under archive/ (§28)
        self.archived: set = set()  # run keys marked by their bundles
        self.bundles: dict = {}
        self.marker = None  # the mark step's _VerifyMarker (its ``found``: what it could not read)
        self.marker_problems: list = []  # the problems it reported

    def run(self) -> VerifyReport:
        """Run every step; return the report."""
        with self.repo.lock:
            self.repo.cache.forget_corrupt()  # judge damage on what the store holds now, not on earlier reads
        for step in self.STEPS:
            getattr(self, step)()
        reach, logs = self.reach, self.logs
        self.rep.checked = {"runs": sum(1 for log in logs.values() if log.live), "checkpoints": len(self.live),
                            "packs": len(reach.packs), "nodes": len(reach.nodes_seen), "messages": len(reach.refs),
                            "objects": len(self.all_infos)}
        return self.rep

    def run_name(self, rk: str) -> str:
        """How a message names run key ``rk``: ``run '<id>'`` from its log's newest record, else
        ``run key <rk>`` (a run whose records could not be read)."""
        log = self.logs.get(rk)
        if log is not None and log.head is not None:
            return f"run {log.head.run_id!r}"
        return f"run key {rk}"

    def warn(self, code: str, key: str, message: str) -> None:
        """Add a warning :class:`Problem`."""
        self.rep.warnings.append(Problem(code, key, message))

    def error(self, code: str, key: str, message: str) -> None:
        """Add an error :class:`Problem`."""
        self.rep.errors.append(Problem(code, key, message))

    def reported(self, key: str) -> bool:
        """True if an error names ``key`` already."""
        return any(p.key == key for p in self.rep.errors)

    def gated_error(self, code: str, key: str, message: str, gates: tuple = (), fold: str | None = None) -> None:
        """Add an error unless one already names a key of ``gates`` or ``fold`` is a key reported
        under its cause (:attr:`folded`): one problem per cause. (A partition of
        :mod:`snapstore.maintenance.partverify` keeps ``gates`` and ``fold`` for its driver, which
        applies them again against every partition's errors.)"""
        if (fold is not None and fold in self.folded) or any(self.reported(g) for g in gates if g is not None):
            return
        self.error(code, key, message)

    def list_objects(self) -> None:
        """List the repository once and sort what it holds; anything outside the layout is an
        ``unknown-object`` warning."""
        self.all_infos = list(self.repo.store.list(""))
        self.fwd_infos = [i for i in self.all_infos if i.key.startswith(keys.FWD)]
        for info in self.all_infos:
            k = info.key
            where = keys.parse_key(k)
            if where.kind in ("config", "fwd", "gc"):
                continue
            if k.startswith(ARCHIVE):  # bundles and their index records (§28): check_bundles
                self.archive_infos[k] = info
                continue
            if where.kind == "runmark":
                if runmark.parse(k) is None:  # run markers (§13): advisory, only their shape is checked
                    self.warn("unknown-object", k, "not a run marker (docs/format.md §13)")
                continue
            if where.kind == "pack":
                self.packs_present[keys.pack_id_from_key(k)] = k
                continue
            if outcomes.is_outcome_key(k):
                self.outcome_keys.append(k)
                continue
            if self.listing.add(info) is None:
                self.warn("unknown-object", k, "not part of the snapstore layout")

    def check_logs(self) -> None:
        """Read every run's log and the forwarding map: unreadable records, hidden ones, a head
        rolling back to a checkpoint that is gone, index records."""
        repo, store, rk_index = self.repo, self.repo.store, self.listing.index
        self.logs = read_all_runs(repo, self.listing.manifests)
        self.load_forwarding()
        for rk, log in self.logs.items():
            by_seg: dict = {}  # unreadable log segment -> (its error, the stub manifests it held the only copy of)
            for k, err in log.corrupt:
                seg = getattr(err, "segment", None) if isinstance(err, CompactedRecordError) else None
                if seg is not None:
                    by_seg.setdefault(seg[0], (seg[1], []))[1].append(k)
                    continue
                code = "compacted-record-without-copy" if isinstance(err, CompactedRecordError) else "corrupt-manifest"
                self.error(code, k, str(err))
            for lk, (msg, stubs) in by_seg.items():  # one problem per cause (the damaged segment)
                seqs = sorted(keys.seq_from_manifest_key(k) for k in stubs)
                where = f"position {seqs[0]}" if len(seqs) == 1 else f"{len(seqs)} positions ({seqs[0]}-{seqs[-1]})"
                self.error("corrupt-logseg", lk, f"{msg}; it held the only copy of the compacted records of "
                           f"{where} of {self.run_name(rk)}")
                self.lost_logsegs.add(lk)
            for s in log.hidden:
                self.warn("orphaned-manifest", keys.manifest_key(rk, s),
                          "hidden by a rollback or deletion (cleanup not finished); removed by 'snapstore gc'")
            if log.head is not None and log.head.kind == KIND_ROLLBACK:
                t = int(log.head.target["seq"])
                if t not in log.manifests:
                    # a delete or prune that decided before a rollback to this checkpoint published
                    # removed it after: both acknowledged, the head resolves to the newest live
                    # checkpoint below it (docs/format.md §11), nothing is lost
                    below = next((m for m in log.live if m.seq < t), None)
                    now = f"checkpoint {below.checkpoint_id!r}" if below is not None else "no checkpoint"
                    self.warn("rollback-target-gone", keys.manifest_key(rk, t),
                              f"head of run {log.head.run_id!r} rolls back to a checkpoint that a delete or "
                              f"prune beside the rollback removed; the head is the newest live one below it "
                              f"({now})")
            self.live.extend(log.live)
            live_seqs = {m.seq: m for m in log.live}
            for info in rk_index.get(rk, []):
                ik = info.key
                try:
                    seq, _ = decode_index(ik, store.get(ik))
                except ObjectNotFound:
                    continue
                except SnapstoreError as e:
                    self.error("corrupt-index", ik, str(e))
                    continue
                if seq not in live_seqs:
                    self.warn("orphaned-index", ik, f"points at position {seq}, which holds no live checkpoint; "
                              "removed by 'snapstore gc'")

    def load_forwarding(self, report: bool = True) -> None:
        """Read the forwarding map (:attr:`fwd`); with ``report``, an unreadable record is a
        ``corrupt-forward`` error and a key outside the layout an ``unknown-object`` warning (a
        partition of :mod:`snapstore.maintenance.partverify` reads it without reporting: its
        driver reports it once)."""
        fmap = ForwardMap.load(self.repo, self.fwd_infos)
        if report:
            for fk, err in fmap.errors:
                self.error("corrupt-forward", fk, str(err))
            for fk in self.fwd_infos:
                if keys.parse_fwd_key(fk.key) is None:
                    self.warn("unknown-object", fk.key, "not part of the snapstore layout")
        self.fwd = dict(fmap.to)

    def check_outcomes(self) -> None:
        """Tool outcomes (the writes area, docs/format.md §25): each decodes; one no live
        checkpoint anchors is a warning (GC removes it)."""
        outcomes.verify_outcomes(self.repo, self.outcome_keys, self.logs, self.rep)

    def check_logsegs(self) -> None:
        """Log segments (format 2): each copy must be exactly the manifest still at its position;
        the copies above a run's newest record are kept for :meth:`check_gaps`."""
        store = self.repo.store
        for rk, linfos in self.listing.logsegs.items():
            log = self.logs.get(rk)
            newest = max(log.manifests) if log is not None and log.manifests else None
            for linfo in linfos:
                lk = linfo.key
                try:
                    recs = read_copies(store, lk, self.repo)
                except ObjectNotFound:
                    continue
                except SnapstoreError as e:
                    if lk not in self.lost_logsegs:  # else reported as the error it is, above
                        self.warn("corrupt-logseg", lk, f"{e}; a copy: listing reads the manifests instead")
                    continue
                for c in recs:
                    seq = c.seq
                    if newest is not None and seq > newest:
                        self.copies_above[rk][seq] = lk
                    if log is not None and seq in log.manifests:
                        m = log.manifests[seq]
                        try:
                            copy = c.manifest(lk)
                            # an archived record's moved fields are in its bundle, which verify does
                            # not read (it may be cold): the rest is compared (--read-data: the bundle)
                            if any(isinstance(x, ArchivedManifest) and not x.loaded for x in (copy, m)):
                                same = copy.equal_unloaded(m)
                            else:
                                same = copy == m  # every field, not only the write id
                        except SnapstoreError:
                            same = False
                        if not same:
                            self.warn("corrupt-logseg", lk, f"its copy of position {seq} differs from the "
                                      "manifest; listing reads the manifest instead")
                            break

    def check_gaps(self) -> None:
        """Report log positions of a run that hold nothing (no manifest, compacted record or void
        record) and that no removal record names (docs/format.md §16): a manifest deleted outside
        snapstore. Below the run's newest record every position was written once; above it, a
        position counts if a log segment of the run's current life (written after its oldest
        record) holds a copy of it (the newest records were deleted). Only in a repository whose
        writers record removals (config ``removals`` 1); at most 8 errors per run, one per range.
        With ``accept_missing``, the gaps below a run's newest record are put on record as removed
        (a removal record each run) and reported as ``accepted-missing`` warnings instead: the
        checkpoints there are lost, and saying so lets ``verify`` pass again."""
        if not getattr(self.repo.config, "removals", 0):
            return  # written before removal records: its gaps cannot be told apart (§16)
        void_seqs: dict[str, set] = defaultdict(set)
        for rk, vinfos in self.listing.voids.items():
            for info in vinfos:
                void_seqs[rk].add(keys.seq_from_manifest_key(info.key))
        for rk, mkeys in self.listing.manifests.items():
            pos = []
            for k in mkeys:
                try:
                    pos.append(keys.seq_from_manifest_key(k))
                except IntegrityError:
                    continue  # a stray name: reported as a corrupt manifest
            if pos:
                self._run_gaps(rk, mkeys, set(pos) | void_seqs.get(rk, set()), max(pos))

    def _removed(self, rk: str) -> list:
        """The merged ranges the removal records of run key ``rk`` name."""
        removed: list = []
        for xinfo in self.listing.removals.get(rk, []):
            xk = xinfo.key
            try:
                removed.extend(decode_removals(xk, self.repo.store.get(xk)))
            except ObjectNotFound:
                continue
            except SnapstoreError as e:
                self.warn("corrupt-removals", xk, f"{e}; gaps it may name are reported below")
        return merge_ranges(removed)

    def _run_gaps(self, rk: str, mkeys: list, present: set, top: int) -> None:
        """:meth:`check_gaps` for run key ``rk`` (manifest keys ``mkeys``, positions ``present``,
        newest position ``top``)."""
        infos = self.listing.infos
        lowest_mtime = min((infos[k].mtime for k in mkeys if k in infos), default=0.0)
        removed = self._removed(rk)
        starts = [r[0] for r in removed]
        gaps: list = []
        prev = -1
        for p in sorted(present):
            if p > top:
                break
            if p > prev + 1:
                gaps.extend(_unaccounted(removed, starts, prev + 1, p - 1))
            prev = p
        for p, lk in sorted(self.copies_above.get(rk, {}).items()):
            if p not in present and (infos.get(lk) is None or infos[lk].mtime >= lowest_mtime):
                gaps.extend((a, b, lk) for a, b in _unaccounted(removed, starts, p, p))
        log = self.logs.get(rk)
        run = repr(log.head.run_id) if log is not None and log.head is not None else f"key {rk}"
        if self.accept_missing and gaps:
            below = [[g[0], g[1]] for g in gaps if len(g) == 2]
            if below:
                self.repo.record_removals(rk, ranges=merge_ranges(below))
                for lo, hi in below:
                    self.warn("accepted-missing", keys.manifest_key(rk, lo),
                              f"positions {lo}-{hi} of run {run}: lost, now on record as removed")
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
            self.error("missing-manifest", keys.manifest_key(rk, lo), why)

    def mark(self) -> None:
        """Mark every live checkpoint (unreadable parts are errors; ``messages.x`` is checked)."""
        if self.progress:
            self.progress("manifests", len(self.live), len(self.live))
        self.load_bundles()
        logs = {rk: log for rk, log in self.logs.items() if rk not in self.archived}
        fwd = dict(self.fwd)  # gone packs of runs that continued after their archive: their bundles
        for bid, ix in self.bundles.items():
            for p in ix.replaces:
                if p not in self.packs_present and p not in self.fwd:
                    fwd.setdefault(p, []).append(bid)
        scope = MarkScope(fwd, set(self.packs_present) | set(self.bundles), segments_by_run(logs))
        self.marker = marker = _VerifyMarker(self.repo, scope, self.rep, keep_index=self.read_data)
        self.reach = reach = marker.run([m for log in logs.values() for m in log.live])
        self.marker_problems = marker.problems
        self.rep.errors.extend(self.marker_problems)
        self.folded, self.needed_by = marker.folded, marker.needed_by
        for pid, etype, eid in reach.unresolved:
            self.error("missing-entry", keys.fwd_shard_key(pid),
                       f"entry {chr(etype)} {eid.hex()} of retired pack {pid.hex()} is in none of "
                       "the packs its forwarding record names")
        self.report_unused_forwarding(reach.fwd_used)

    def report_unused_forwarding(self, fwd_used: set) -> None:
        """A forwarding record of a retired pack no live hint names (not in ``fwd_used``, pack
        ids) is an ``unreferenced-forward`` warning."""
        for pid in self.fwd:
            if pid not in fwd_used:
                self.warn("unreferenced-forward", keys.fwd_shard_key(pid),
                          f"no live hint names retired pack {pid.hex()}; its record is dropped by GC")

    def load_bundles(self) -> None:
        """Read the bundle index records listed (hot, §28); a corrupt one is an error. The runs
        bundles serve whole are checked through their bundles (:meth:`check_bundles`), not walked."""
        self.read_bundle_index()
        self.archived = archived_runs(self.bundles, {rk: [m.seq for m in log.live] for rk, log in self.logs.items()})

    def read_bundle_index(self, report: bool = True) -> None:
        """Read the bundle index records listed into :attr:`bundles`; with ``report`` a corrupt
        one is a ``corrupt-bundle-index`` error."""
        for k in sorted(self.archive_infos):
            if bundle_id_from_index_key(k) is None:
                continue
            try:
                ix = decode_bundle_index(k, self.repo.store.get(k))
            except ObjectNotFound:
                continue
            except SnapstoreError as e:
                if report:
                    self.error("corrupt-bundle-index", k, str(e))
                continue
            self.bundles[ix.bundle] = ix
        # the readers' catalogue too: mark reaches a bundle standing in for a gone hot pack (a run
        # continued after its archive), and the pack cache finds the bundle's key through it; not
        # loaded, it read packs/<bundle id>, found nothing and took the bundle for gone
        self.repo.bundles.install(self.bundles)

    def check_bundles(self) -> None:
        """Every indexed bundle exists with its recorded size; with ``read_data`` (and a class
        readable in place) its bytes match the recorded checksum and parse as a pack holding the
        entries its runs need. A bundle no index names is a warning (an interrupted archive)."""
        indexed = {ix.key for ix in self.bundles.values()}
        for k, info in self.archive_infos.items():
            if k.startswith(BUNDLE_DATA) and k not in indexed:
                self.warn("unindexed-bundle", k, "no index record names this bundle (an archive was "
                          "interrupted before its switch); nothing reads it")
        for bid, ix in self.bundles.items():
            info = self.archive_infos.get(ix.key)
            if info is None:
                self.error("missing-bundle", ix.key, f"bundle of {', '.join(sorted(v['run'] for v in ix.runs.values()))} "
                           "is missing")
                continue
            if info.size != ix.size:
                self.error("corrupt-bundle", ix.key, f"{info.size} bytes, its index records {ix.size}")
                continue
            if not self.read_data:
                self.rep.bundles_not_read += 1
                continue
            state = getattr(self.repo.store, "restore_state", None)
            if ix.storage_class in COLD_CLASSES and state is not None and state(ix.key) != "restored":
                self.rep.bundles_not_read += 1
                self.warn("bundle-not-read", ix.key, f"in {ix.storage_class} and not restored: not read "
                          "('snapstore restore' it to check its data)")
                continue
            try:
                data = self.repo.store.get(ix.key)
                if blake3.blake3(data).digest(16) != ix.checksum:
                    raise IntegrityError(ix.key, "checksum differs from its index record")
                pack = Pack.parse(ix.key, data, bid)
                for e in pack.entries.values():
                    pack.entry_bytes(e)
            except SnapstoreError as e:
                self.error("corrupt-bundle", ix.key, str(e))

    def check_needed(self) -> None:
        """Every needed entry must be in its pack."""
        repo, reach = self.repo, self.reach
        for i, (pid, needed) in enumerate(reach.packs.items()):
            if pid in self.bundles:
                continue  # checked by check_bundles
            pk = keys.pack_key(pid)
            if pk in self.folded:
                continue  # its entries sit in a corrupt pack, reported once under that pack
            if pid not in self.packs_present:
                self.gated_error("missing-pack", pk, "referenced by a live checkpoint", (pk,), pk)
                continue
            try:
                pack = repo.get_pack(pid)
            except SnapstoreError as e:
                self.gated_error("corrupt-pack", pk, str(e), (pk,), pk)
                continue
            for etype, eid in needed:
                if (etype, eid) not in pack.entries:
                    self.gated_error("missing-entry", pack.key, f"entry {chr(etype)} {eid.hex()} is referenced but "
                                     "absent", (), pk)
            if self.progress:
                self.progress("packs", i + 1, len(reach.packs))

    def check_data(self) -> None:
        """With ``read_data``: every live message read and hashed, and each session-state value
        tree as a whole (its pieces joined must be the value it names)."""
        if not self.read_data:
            return
        refs = list(self.reach.refs.values())
        for i, r in enumerate(refs):
            try:
                self.repo.message_raw(r)
            except SnapstoreError as e:
                pk = keys.pack_key(r.pack)
                cause = (getattr(e, "key", None) if isinstance(e, IntegrityError) else None) or pk
                # one problem per cause: not when already reported (by mark, or for another message)
                self.gated_error("corrupt-chunk" if isinstance(e, IntegrityError) else "missing-pack", cause, str(e),
                                 (cause, pk), pk)
            if self.progress and (i % 500 == 0 or i + 1 == len(refs)):
                self.progress("data", i + 1, len(refs))
        live = [m for m in self.live if self.repo.run_key(m.run_id) not in self.archived]  # archived: check_bundles
        for tree in dict.fromkeys(m.session_state_tree for m in live if m.session_state_tree is not None):
            try:
                self.repo.read_value(tree)
            except SnapstoreError as e:
                self.gated_error("corrupt-state" if isinstance(e, IntegrityError) else "missing-pack",
                                 keys.pack_key(tree.pack), str(e), (getattr(e, "key", None),))

    def check_segments(self) -> None:
        """The newest records' segments: present (unless GC deleted or rewrote them with nothing
        lost) and readable; a damaged one every live entry of which has another copy is a warning."""
        self.segs = segs = head_segments(self.logs)
        lost = self.lost()
        for pid, rk in segs.items():
            state, err = self.probe_segment(pid)
            self.judge_segment(pid, state, err, lost, self.run_name(rk), self.head_run_id(rk), pid in self.reach.packs)

    def lost(self) -> bool:
        """Whether live entries were not found (a ``missing-pack`` or ``missing-entry`` error so far)."""
        return any(p.code in ("missing-pack", "missing-entry") for p in self.rep.errors)

    def head_run_id(self, rk: str) -> str | None:
        """The run id of run key ``rk``'s newest record, None when its log has none."""
        log = self.logs.get(rk)
        return log.head.run_id if log is not None and log.head is not None else None

    def probe_segment(self, pid: bytes) -> tuple:
        """Read segment pack ``pid`` (with ``read_data`` its entries too): ``("absent", None)``
        when it is gone and no forwarding record names it, ``("moved", None)`` when gone but
        rewritten, ``("reported", None)`` when an error names it already, ``("bad", message)``
        when it does not read, ``("ok", None)``."""
        if pid not in self.packs_present:
            # deleted by GC with nothing live in it, or rewritten (forwarding record): fine, unless
            # live entries were not found (reported above), which then most likely lived here
            return ("moved" if pid in self.fwd else "absent"), None
        if self.reported(keys.pack_key(pid)):
            return "reported", None
        try:
            pack = self.repo.get_pack(pid)
            if self.read_data:
                _read_entries(self.repo, pack, True)
        except SnapstoreError as e:
            return "bad", str(e)
        return "ok", None

    def judge_segment(self, pid: bytes, state: str, err: str | None, lost: bool, name: str, run_id: str | None,
                      needed: bool) -> None:
        """Report segment ``pid`` of the run named ``name`` (``run_id``) from what
        :meth:`probe_segment` found: gone while live entries were not found (``lost``) is an
        error; damaged is an error when a live checkpoint needs it (``needed``) or entries were
        lost, else a warning (readers read another copy)."""
        k = keys.pack_key(pid)
        if state == "absent" and lost:
            self.missing_segment(k, run_id, name)
        elif state == "bad" and not self.reported(k):
            if needed or lost:
                self.error("corrupt-pack", k, f"a segment of {name}: {err}")
            else:  # readers skip it: every live entry was found in another copy
                self.warn("corrupt-unneeded-pack", k, f"a segment of {name}: {err}; every "
                          "live entry is read from another copy; reclaimed by 'snapstore gc'")

    def missing_segment(self, k: str, run_id: str | None, name: str) -> None:
        """Report segment ``k`` of the run ``run_id`` (named ``name`` in messages), gone while live
        entries were not found: one error, folding in the missing packs that run needs (most
        likely merged into the segment, docs/format.md §18), which are then not reported one by one."""
        gone = [p.key for p in self.rep.errors if p.code == "missing-pack" and p.key != k
                and run_id in self.needed_by.get(p.key, ())]
        msg = f"a segment of the newest record of {name}; live entries were not found, which may have lived here"
        if gone:
            drop = set(gone)
            self.rep.errors = [p for p in self.rep.errors if not (p.code == "missing-pack" and p.key in drop)]
            shown = ", ".join(gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
            msg = (f"a segment of the newest record of {name}; {len(gone)} pack"
                   f"{'s' if len(gone) > 1 else ''} its live checkpoints need are missing too, most likely "
                   f"merged into it ({shown})")
        self.error("missing-pack", k, msg)

    def check_touched(self) -> None:
        """The other packs a reader may still touch: packs live hints name (a retired one is read
        first until GC deletes it) and the packs their forwarding records lead to. Damage there is
        harmless while every entry readers look for is found in another copy (the homes, checked
        above): a warning; GC deletes the pack once it is unreferenced."""
        for pid, msg in self.touched_damage():
            self.damaged.add(pid)
            self.warn("corrupt-unneeded-pack", keys.pack_key(pid), msg)

    def touched_damage(self) -> list:
        """Read the packs :meth:`check_touched` covers; return ``[(pack id, warning message)]``
        of those that do not read."""
        reach, fwd = self.reach, self.fwd
        out = []
        touch = set(reach.hinted) | set(reach.fwd_used)
        stack = list(touch)
        while stack:
            for t in fwd.get(stack.pop(), ()):
                if t not in touch:
                    touch.add(t)
                    stack.append(t)
        for i, pid in enumerate(sorted(touch)):
            if pid in reach.packs or pid in self.segs or pid not in self.packs_present:
                continue
            k = keys.pack_key(pid)
            try:
                pack = self.repo.get_pack(pid)
                if self.read_data:
                    _read_entries(self.repo, pack, False)  # a dictionary's sources may be gone (§21)
            except SnapstoreError as e:
                what = "retired by gc" if pid in fwd else "named by live hints"
                out.append((pid, f"{what}: {e}; every live entry is read from another copy; reclaimed by "
                            "'snapstore gc'"))
            if self.progress and (i % 500 == 0 or i + 1 == len(touch)):
                self.progress("hinted packs", i + 1, len(touch))
        return out

    def report_unreferenced(self) -> None:
        """Packs nothing live needs: retired ones waiting for their grace period, and the others.

        While a manifest is unreadable (a corrupt record: e.g. a plaintext object in an encrypted
        repository) what it references is unknown, so packs no readable record uses are not
        called unreferenced: they are counted in that manifest's error (one line per cause)."""
        unread = [p for p in self.rep.errors if p.code.startswith("corrupt")
                  and keys.parse_key(p.key).kind == "manifest"]
        held = []
        for pid, k in self.packs_present.items():
            if pid in self.reach.packs or pid in self.segs or pid in self.damaged:
                continue
            if pid in self.fwd:
                self.warn("retired-pack", k, "repacked by gc (its live entries were copied to new packs); deleted "
                          "by a later 'snapstore gc' once the grace period has passed")
            elif unread:
                held.append(k)
            else:
                self.warn("unreferenced-pack", k, "no live checkpoint uses it (left by rollback, delete, prune, a "
                          "conflict or an interrupted save); reclaimed by 'snapstore gc'")
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            p = unread[0]
            p.message += (f"; {len(held)} pack{'s' if len(held) > 1 else ''} no readable record uses may be "
                          f"what it names ({shown})")

    def report_leftovers(self) -> None:
        """Crash leftovers of the store (temp files, incomplete multipart uploads)."""
        find = self.repo.store.leftovers if store_capabilities(self.repo.store).leftovers else None
        try:
            left = find() if find is not None else []
        except SnapstoreError as e:  # e.g. not allowed to list multipart uploads
            left = []
            self.warn("leftovers-unknown", "", f"cannot list crash leftovers: {e}")
        for it in left:
            if it.upload_id is None:
                self.warn("temp-file", it.name, "temporary file of an interrupted write; removed by "
                          "'snapstore gc' once older than the grace period")
            else:
                self.warn("incomplete-upload", it.name, f"multipart upload {it.upload_id} of an "
                          "interrupted write; aborted by 'snapstore gc' once older than the grace period")
