"""The hot catalogue of archived runs: their whole logs in one bundle log (docs/format.md §28).

Layer 3. After a bundle's switch (its index record written), :func:`compact_bundle_logs` does, for
the runs the bundle serves, in this order:

1. gathers every record of each run's log (each listed manifest: a full one by GET, a stub from
   its copy in a log segment) as ``(envelope version, JSON body)``, each checked to decode to the
   manifest the archive listed (a run that fails this keeps its log as it was);
2. writes them create-only as ONE bundle log (``archive/log/<bundle id>``, a log segment of
   version 6: every run's records columnar in one zstd frame, each *thin*: without the
   data-locating fields the bundle's fields entry holds, :mod:`snapstore.format.archfields`),
   reads it back and checks every record byte for byte (an existing one, from an interrupted
   archive, is read and checked the same way);
3. writes each run's 0-byte pointer ``runs/<R>/l/<inverted hi>.<bundle id>.b`` create-only;
4. replaces every full manifest it holds with a 0-byte stub (compare-and-swap on the ETag
   listed in step 1: a record pruned or deleted meanwhile is never recreated); the key stays,
   so the position's create-only slot and the conflict contract (§20) are as before;
5. deletes the run's other log segments (and earlier archive logs and pointers) whose every
   listed position the bundle log holds.

A kill at any step leaves every record readable: before (4) the manifests and segments are as
they were; after it each stub's copy is in the bundle log (durable and checked before the first
pointer) and, until (5), in its segment too. :func:`compact_run_log` is the one-run form the
version before wrote (an archive log ``runs/<R>/l/<inverted hi>.a``, version 4), which readers still read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IntegrityError, InvalidInputError, ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.logseg import (archlog_key, bundlelog_key, log_id, decode_bundlelog, decode_logseg, encode_archlog, encode_bundlelog,
                             pointer_key, seg_lo)
from ..format.archfields import thin_body
from ..format.manifest import Manifest, is_void, open_manifest
from ..repo.log.bulk import list_infos, list_logsegs
from ..repo.log.bundlelog import read_copies
from ..repo.repository import Repository
from ..stores.base import store_capabilities
from ..stores.batch import BatchPut, BatchRefused


PART_RAW = 64 << 10
"""Bytes of records (before compression) after which a bundle log part is closed: on the shared
trajectories parts of 64 KiB took 90.7 B a record against 88.3 B for one part per bundle, and a
read of one run's stub fetches at most about 15 KB (docs/format.md §28)."""


@dataclass
class CompactResult:
    """What :func:`compact_run_log` did for one run.

    Attributes:
        key: the archive log's key (None: none written, the run's log left as it was).
        records: records it holds. stubbed: manifests replaced by stubs.
        deleted: log segments deleted. bytes: the archive log's size. why: why none was written.
    """

    key: str | None = None
    records: int = 0
    stubbed: int = 0
    deleted: int = 0
    bytes: int = 0
    why: str = ""


def _gather(repo: Repository, run_key: str, infos: dict, lsegs: dict, listed: dict) -> dict:
    """``seq -> (envelope version, body)`` for every listed non-void position; raises ValueError
    naming a position with no readable record (or one that differs from ``listed``)."""
    recs: dict = {}
    for (_hi, _lvl), lk in sorted(lsegs.items(), key=lambda x: -x[0][1]):
        try:
            copies = read_copies(repo.store, lk, repo)
        except (ObjectNotFound, IntegrityError):
            continue
        for c in copies:
            if c.seq in infos and c.seq not in recs:
                try:
                    recs[c.seq] = c.record(lk)
                except IntegrityError:
                    continue
    # a manifest is read only where no segment gave a copy (the newest positions past the last
    # level-1 segment, a range whose segment is gone): O(log n) GETs for a run of n, not n
    full = [s for s, i in infos.items() if i.size > 0 and not is_void(i.size) and s not in recs]

    def get_one(s):
        try:
            return s, repo.store.get(keys.manifest_key(run_key, s))
        except ObjectNotFound:
            return s, None
    for s, data in repo.pool.map(get_one, full):
        if data is not None and len(data) > 0:
            recs[s] = open_manifest(keys.manifest_key(run_key, s), data)
    out = {}
    for s, info in infos.items():
        if is_void(info.size):
            continue
        if s not in recs:
            raise ValueError(f"position {s} has no readable record")
        version, body = recs[s]
        key = keys.manifest_key(run_key, s)
        m = Manifest.from_body(key, version, body)
        if m.seq != s or repo.run_key(m.run_id) != run_key or (s in listed and listed[s] != m):
            raise ValueError(f"position {s}'s record differs from the one listed")
        out[s] = (version, body)
    return out


def _checked_back(key: str, data: bytes, recs: dict) -> bool:
    """True when the archive log ``data`` holds every record of ``recs`` byte for byte."""
    try:
        got = {c.seq: (c.version, c.data) for c in decode_logseg(key, data)}
    except IntegrityError:
        return False
    return all(got.get(s) == r for s, r in recs.items())


def compact_bundle_logs(repo: Repository, bundle_id: bytes, runs: dict, hook=None, stub: bool = True,
                        fields: dict | None = None) -> dict:
    """Write the bundle logs of ``bundle_id`` holding the whole logs of ``runs`` (consecutive runs
    in parts of about :data:`PART_RAW` bytes of records), point each run at its part, stub its manifests, drop its other log segments (module docstring; docs/format.md §28).

    Args:
        repo: the repository.
        bundle_id: the bundle (8 bytes) whose index record was just written.
        runs: run key -> ``{seq: Manifest}`` the archive read of the run (each record gathered
            must equal it).
        hook: optional ``hook(step, run_key)`` called after ``"after_archlog"`` (the bundle log
            written and read back; run_key None), and per run after ``"after_stub"`` (its first
            stub written) and ``"after_logsegs"`` (its segments deleted).
        stub: replace the runs' full manifests by 0-byte stubs (one conditional write each; on a
            store with atomic batches two batches per run). False: leave them full (on S3 a stub
            is a PUT per manifest, which costs more than the bytes it saves: docs/format.md §28);
            the bundle log and pointers are written and the covered segments deleted all the same.
        fields: ``{run key: {seq: moved fields}}`` the bundle's fields entry holds (read back and
            checked with it): the bundle logs are thin (version 6), each record whose moved fields
            (:func:`~snapstore.format.archfields.thin_body`) are exactly those stored without
            them, any other whole. None: whole records (version 5).
    Returns:
        run key -> :class:`CompactResult`. A run whose log cannot be gathered whole keeps its log
        as it was (``why`` says why); so do all of them when the bundle log is too large or does
        not read back.
    Raises:
        StoreError: the store failed (whatever is written by then is consistent).
    """
    store = repo.store
    out = {rk: CompactResult() for rk in runs}
    gathered = {}
    for rk, listed in runs.items():
        infos = list_infos(repo, rk)
        lsegs = list_logsegs(repo, rk)
        try:
            recs = _gather(repo, rk, infos, lsegs, listed)
        except (ValueError, SnapstoreError) as e:
            out[rk].why = f"log not gathered whole: {e}"
            continue
        if not recs:
            out[rk].why = "no record"
            continue
        gathered[rk] = (infos, lsegs, recs)
    if not gathered:
        return out
    # consecutive runs (sorted keys) in parts of about PART_RAW bytes of records: a reader of one
    # run's stub GETs one part, not the whole bundle's logs
    parts, part, raw = [], [], 0
    for rk in sorted(gathered):
        part.append(rk)
        raw += sum(len(b) + 4 for _, b in gathered[rk][2].values())
        if raw >= PART_RAW:
            parts.append(part)
            part, raw = [], 0
    if part:
        parts.append(part)
    for n, members in enumerate(parts):
        _write_part(repo, log_id(bundle_id, n), {rk: gathered[rk] for rk in members}, out, hook, stub, fields)
    return out


def _thinned(rk: str, recs: dict, fields: dict) -> tuple[list, list]:
    """``([(seq, version, stored body)], [is thin])`` of one run's records ``recs`` (``seq ->
    (version, body)``): a body whose moved fields are exactly ``fields[rk][seq]`` without them."""
    have = fields.get(rk, {})
    out, flags = [], []
    for s, (v, b) in sorted(recs.items()):
        try:
            thin, moved = thin_body(b)
        except ValueError:
            thin, moved = None, None
        if thin is not None and s in have and have[s] == moved and _same(rk, s, v, b, thin, moved):
            out.append((s, v, thin))
            flags.append(True)
        else:
            out.append((s, v, b))
            flags.append(False)
    return out, flags


def _same(rk: str, s: int, v: int, body: bytes, thin: bytes, moved: dict) -> bool:
    """True when the thin record ``thin`` with ``moved`` put back decodes to the record ``body``
    (every field), as a reader of the bundle log will read it."""
    key = keys.manifest_key(rk, s)
    try:
        whole = Manifest.from_body(key, v, body)
        back = Manifest.from_body(key, v, thin, fill=lambda: (key, moved))
        return back == whole and back.loaded
    except SnapstoreError:
        return False


def _write_part(repo: Repository, lid: bytes, gathered: dict, out: dict, hook, stub: bool,
                fields: dict | None = None) -> None:
    """Steps 2-5 for the runs of one bundle log ``lid``: ``gathered`` run key -> (infos, lsegs, recs);
    ``fields`` as :func:`compact_bundle_logs`."""
    store = repo.store
    key = bundlelog_key(lid)
    stored = {}
    try:
        if fields is None:
            stored = {rk: [(s, v, b) for s, (v, b) in sorted(g[2].items())] for rk, g in gathered.items()}
            data = encode_bundlelog(stored)
        else:
            thin = {}
            for rk, g in gathered.items():
                stored[rk], thin[rk] = _thinned(rk, g[2], fields)
            data = encode_bundlelog(stored, thin)
    except InvalidInputError as e:
        for rk in gathered:
            out[rk].why = str(e)
        return
    try:
        store.put(key, data)
    except PreconditionFailed:
        pass  # an interrupted archive wrote it: checked below like ours
    why = ""
    try:
        back = store.get(key)
        got = decode_bundlelog(key, back)
    except ObjectNotFound:
        why = "bundle log gone after its write"
    except IntegrityError as e:
        why = f"bundle log {key} read back is unreadable: {e}"
    else:
        for rk in gathered:
            have = {c.seq: (c.version, c.data) for c in got.get(rk, ())}
            if any(have.get(s_) != (v, b) for s_, v, b in stored[rk]):
                why = f"bundle log {key} read back does not hold run {rk}'s records"
    if why:
        for rk in gathered:
            out[rk].why = why
        return
    if hook:
        hook("after_archlog", None)
    share = len(back) // len(gathered)
    for rk, (infos, lsegs, recs) in gathered.items():
        res = out[rk]
        hi = max(recs)
        pk = pointer_key(rk, hi, lid)
        try:
            store.put(pk, b"")
        except PreconditionFailed:
            pass  # an interrupted archive's: it names this bundle log, checked above
        res.key, res.records, res.bytes = pk, len(recs), share
        _stub_and_drop(repo, rk, infos, lsegs, recs, pk, hi, res, hook, stub)


def _stub_and_drop(repo: Repository, run_key: str, infos: dict, lsegs: dict, recs: dict, key: str, hi: int,
                   res: CompactResult, hook, stub: bool = True) -> None:
    """Steps 3-4 for one run whose records ``recs`` are durable in the object ``key`` (an archive
    log, or a pointer to a checked bundle log): stub its manifests, delete the log segments (and
    earlier archive logs and pointers) whose every listed position ``recs`` holds."""
    store = repo.store
    # stubs: compare-and-swap on the listed ETag, never creating a key
    todo = [(keys.manifest_key(run_key, s), infos[s]) for s in sorted(recs) if infos[s].size > 0] if stub else []
    if store_capabilities(store).atomic_batch and todo:
        first = todo[:1]
        rest = todo[1:]
        for part in (first, rest):
            items = list(part)
            while items:
                try:
                    store.write_batch([BatchPut(k, b"", etag=i.etag) for k, i in items], [])
                    res.stubbed += len(items)
                    break
                except BatchRefused as e:
                    items = [it for it in items if it[0] != e.key]
            if part is first and res.stubbed and hook:
                hook("after_stub", run_key)
    else:
        for n, (k, i) in enumerate(todo):
            try:
                store.put_if_match(k, b"", i.etag)
                res.stubbed += 1
            except (PreconditionFailed, ObjectNotFound):
                continue
            if res.stubbed == 1 and hook:
                hook("after_stub", run_key)
    # the run's other log segments, where the new copy holds every position they cover
    doomed = []
    for (shi, level), lk in lsegs.items():
        if lk == key or shi > hi:
            continue
        lo = seg_lo(shi, level)
        if all(s in recs for s in infos if lo <= s <= shi and not is_void(infos[s].size)):
            doomed.append(lk)
    if doomed:
        store.delete_many(doomed)
        res.deleted = len(doomed)
    if hook:
        hook("after_logsegs", run_key)


def compact_run_log(repo: Repository, run_key: str, listed: dict, hook=None, stub: bool = True) -> CompactResult:
    """Write run ``run_key``'s archive log, stub its manifests, drop its other log segments
    (module docstring).

    Args:
        repo: the repository.
        run_key: the run's key segment.
        listed: ``seq -> Manifest`` the archive read of the run (each record gathered must equal it).
        hook: optional ``hook(step)`` called after ``"after_archlog"`` (written and read back),
            ``"after_stub"`` (the first stub written) and ``"after_logsegs"`` (segments deleted).
        stub: as :func:`compact_bundle_logs`.
    Returns:
        A :class:`CompactResult`. A run whose log cannot be gathered whole, or is too large for
        one archive log, keeps its log as it was (``why`` says why).
    Raises:
        StoreError: the store failed (whatever is written by then is consistent).
    """
    store = repo.store
    res = CompactResult()
    infos = list_infos(repo, run_key)
    lsegs = list_logsegs(repo, run_key)
    try:
        recs = _gather(repo, run_key, infos, lsegs, listed)
    except (ValueError, SnapstoreError) as e:
        res.why = f"log not gathered whole: {e}"
        return res
    if not recs:
        res.why = "no record"
        return res
    hi = max(recs)
    key = archlog_key(run_key, hi)
    try:
        data = encode_archlog([(s, v, b) for s, (v, b) in sorted(recs.items())])
    except InvalidInputError as e:
        res.why = str(e)
        return res
    try:
        store.put(key, data)
    except PreconditionFailed:
        pass  # an interrupted archive wrote it: checked below like ours
    try:
        back = store.get(key)
    except ObjectNotFound:
        res.why = "archive log gone after its write"
        return res
    if not _checked_back(key, back, recs):
        res.why = f"archive log {key} read back does not hold the run's records"
        return res
    res.key, res.records, res.bytes = key, len(recs), len(back)
    if hook:
        hook("after_archlog")
    _stub_and_drop(repo, run_key, infos, lsegs, recs, key, hi, res, (lambda step, _rk: hook(step)) if hook else None,
                   stub)
    return res
