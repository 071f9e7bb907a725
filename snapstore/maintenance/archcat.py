"""The hot catalogue of an archived run: its whole log in one archive log (docs/format.md §28).

Layer 3. After a bundle's switch (its index record written), :func:`compact_run_log` does, per run
the bundle serves, in this order:

1. gathers every record of the run's log (each listed manifest: a full one by GET, a stub from
   its copy in a log segment) as ``(envelope version, JSON body)``, each checked to decode to the
   manifest the archive listed;
2. writes them create-only as ONE archive log (``runs/<R>/l/<inverted hi>.a``, a log segment of
   version 4: columnar, ids as bytes, one zstd frame), reads it back and checks every record
   byte for byte (an existing one, from an interrupted archive, is read and checked the same way);
3. replaces every full manifest it holds with a 0-byte stub (compare-and-swap on the ETag
   listed in step 1: a record pruned or deleted meanwhile is never recreated); the key stays,
   so the position's create-only slot and the conflict contract (§20) are as before;
4. deletes the run's other log segments whose every listed position the archive log holds.

A kill at any step leaves every record readable: before (3) the manifests and segments are as
they were; after it each stub's copy is in the archive log (durable and checked before the first
stub) and, until (4), in its segment too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IntegrityError, InvalidInputError, ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.logseg import archlog_key, decode_logseg, encode_archlog, seg_lo
from ..format.manifest import Manifest, is_void, open_manifest
from ..repo.log.bulk import list_infos, list_logsegs
from ..repo.repository import Repository
from ..stores.base import store_capabilities
from ..stores.batch import BatchPut, BatchRefused


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
            copies = decode_logseg(lk, repo.store.get(lk))
        except (ObjectNotFound, IntegrityError):
            continue
        for c in copies:
            if c.seq in infos and c.seq not in recs:
                try:
                    recs[c.seq] = c.record(lk)
                except IntegrityError:
                    continue
    full = [s for s, i in infos.items() if i.size > 0 and not is_void(i.size)]

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


def compact_run_log(repo: Repository, run_key: str, listed: dict, hook=None) -> CompactResult:
    """Write run ``run_key``'s archive log, stub its manifests, drop its other log segments
    (module docstring).

    Args:
        repo: the repository.
        run_key: the run's key segment.
        listed: ``seq -> Manifest`` the archive read of the run (each record gathered must equal it).
        hook: optional ``hook(step)`` called after ``"after_archlog"`` (written and read back),
            ``"after_stub"`` (the first stub written) and ``"after_logsegs"`` (segments deleted).
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
    # stubs: compare-and-swap on the listed ETag, never creating a key
    todo = [(keys.manifest_key(run_key, s), infos[s]) for s in sorted(recs) if infos[s].size > 0]
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
                hook("after_stub")
    else:
        for n, (k, i) in enumerate(todo):
            try:
                store.put_if_match(k, b"", i.etag)
                res.stubbed += 1
            except (PreconditionFailed, ObjectNotFound):
                continue
            if res.stubbed == 1 and hook:
                hook("after_stub")
    # the run's other log segments, where the archive log holds every position they cover
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
        hook("after_logsegs")
    return res

