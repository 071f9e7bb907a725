"""The run log read and written in bulk (format 2): listing a run from its log segments.

Layer 3. A run's log is its manifests, one object per record (docs/format.md §11). Reading every
checkpoint's summary one GET at a time costs a request per checkpoint; log segments
(:mod:`snapstore.format.logseg`) hold copies of 16, 256 or 4,096 consecutive records, written by
the writer whose save ends such a range. Listing a run is then: LIST the manifest keys (pages in
parallel) beside one LIST of the log segments, then one parallel wave of GETs of the segments
covering the listed positions plus the few manifests no segment covers.
"""

from __future__ import annotations

from ...errors import IntegrityError, ObjectNotFound, SnapstoreError
from ...format import keys
from ...format.logseg import (WHOLE_LEVELS, MAX_LEVEL, LogCopy, decode_logseg, encode_logseg, logseg_key, logseg_prefix,
                            parse_logseg_key, seg_lo, span)
from .bundlelog import read_copies
from ...format.manifest import Manifest, open_manifest, record_positions
from ..repository import Repository

PAGE = 1000
"""Keys per LIST page (S3's maximum)."""


def list_positions(repo: Repository, run_key: str) -> list[int]:
    """Every log position (sequence number) of the run that has a manifest, newest first.

    The first LIST page gives the newest position; the rest of the range is then listed in
    parallel, one page per 1,000 positions (``start_after`` computed from the position), so a run
    of n records costs ``ceil(n / 1000)`` LIST requests in 2 sequential round trips.

    Void records (docs/format.md §15) are not records: their positions are left out, so no copy
    of the record they replaced is ever read for them.

    Raises:
        StoreError: the store failed.
    """
    return record_positions(list_infos(repo, run_key).values())


def list_infos(repo: Repository, run_key: str) -> dict:
    """The run's manifest objects as :func:`list_positions` lists them (same requests):
    ``{seq: ObjectInfo}``, newest first, void records included (their size tells them apart:
    :func:`~snapstore.format.manifest.is_void`). What a deleter needs of each (its age, its ETag)
    is here, so removing listed records lists nothing again.

    Raises:
        StoreError: the store failed.
    """
    prefix = keys.manifests_prefix(run_key)
    infos = list(repo.store.list(prefix, limit=PAGE))
    out = {keys.seq_from_manifest_key(i.key): i for i in infos}
    if len(infos) < PAGE:
        return out
    low = keys.seq_from_manifest_key(infos[-1].key)
    starts = list(range(low - 1, -1, -PAGE))  # each page lists positions <= start

    def page(start: int) -> list:
        after = keys.manifest_key(run_key, start + 1)
        return list(repo.store.list(prefix, start_after=after, limit=PAGE))

    for part in repo.pool.map(page, starts):
        for i in part:
            out.setdefault(keys.seq_from_manifest_key(i.key), i)
    return dict(sorted(out.items(), reverse=True))


def list_logsegs(repo: Repository, run_key: str) -> dict[tuple[int, int], str]:
    """The run's log segments: ``(hi, level) -> key`` (keys that do not parse are ignored)."""
    out = {}
    for info in repo.store.list(logseg_prefix(run_key)):
        p = parse_logseg_key(info.key)
        if p is not None:
            out[p] = info.key
    return out


def choose_logsegs(seqs, logsegs: dict) -> tuple[list, set]:
    """Choose, largest level first, the log segments that cover positions in ``seqs``.

    Args:
        seqs: positions that have a manifest (from a listing).
        logsegs: ``(hi, level) -> key`` (from :func:`list_logsegs` or a listing).
    Returns:
        ``([(key, covered positions)], positions no chosen segment covers)``. A level-1 segment is
        chosen for one position, and an archive log (it may hold the only copy of a stub); larger
        ones only when they cover two or more.
    """
    chosen: list[tuple[str, set]] = []
    left = set(seqs)
    for (hi, level), key in sorted(logsegs.items(), key=lambda x: (-x[0][1], -x[0][0])):
        lo = seg_lo(hi, level)
        cover = {s for s in left if lo <= s <= hi}
        if len(cover) >= 2 or (cover and level in (1, *WHOLE_LEVELS)):
            chosen.append((key, cover))
            left -= cover
    return chosen, left


def _check(repo: Repository, run_key: str, seq: int, copy: LogCopy, where: str, light: bool = False) -> Manifest:
    """Decode a copy of the manifest at ``seq`` found in log segment ``where`` and check that it
    belongs there (run and position). Raises IntegrityError (naming both)."""
    key = keys.manifest_key(run_key, seq)
    m = copy.manifest(f"{key} (copy in {where})" if where else key, light)
    if m.seq != seq or repo.run_key(m.run_id) != run_key:
        raise IntegrityError(where or key, f"holds the manifest of run {m.run_id!r} position {m.seq}, not of {key}")
    return m


def copies_from_logseg(repo: Repository, run_key: str, key: str, cover: set,
                       light: bool = False) -> tuple[dict[int, Manifest], set]:
    """Read log segment ``key`` and take the copies of the positions in ``cover``.

    Each copy is decoded and checked against its position like the manifest itself
    (:func:`_check`). Nothing here raises: a segment that is missing, unreadable or could not be
    fetched, and a copy that is absent, corrupt or misplaced, leave their positions to be read from
    the manifests themselves (so that errors name the manifest). A log segment is a copy.

    Returns:
        ``({seq: Manifest}, positions of ``cover`` still to read)``.
    """
    try:
        recs = read_copies(repo.store, key, repo)
    except SnapstoreError:
        return {}, set(cover)
    got: dict[int, Manifest] = {}
    for c in recs:
        if c.seq in cover:
            try:
                got[c.seq] = _check(repo, run_key, c.seq, c, key, light)
            except SnapstoreError:  # corrupt, misplaced, or of a newer version: read the manifest
                continue
    return got, set(cover) - set(got)


def read_records(repo: Repository, run_key: str, seqs, logsegs: dict | None = None) -> dict[int, Manifest]:
    """Read the manifests at positions ``seqs`` of the run, from log segments where they cover them.

    Segments are chosen largest first; one parallel wave GETs them and the manifests no segment
    covers. What a segment does not give (see :func:`copies_from_logseg`) is read from the
    manifests themselves (a second wave). A position whose manifest is gone (deleted meanwhile) is
    left out.

    Args:
        repo: the repository.
        run_key: the run's key segment.
        seqs: positions to read (from :func:`list_positions`: the manifests that exist).
        logsegs: from :func:`list_logsegs` (None: list them).
    Returns:
        ``{seq: Manifest}``.
    Raises:
        IntegrityError: a manifest is corrupt or misplaced.
        StoreError: the store failed.
    """
    if logsegs is None:
        logsegs = list_logsegs(repo, run_key)
    chosen, left = choose_logsegs(seqs, logsegs)
    out: dict[int, Manifest] = {}

    def one(s):
        try:
            return s, repo.read_manifest_key(keys.manifest_key(run_key, s))
        except ObjectNotFound:
            return s, None

    pool = repo.pool
    seg_futs = [pool.submit(copies_from_logseg, repo, run_key, key, cover) for key, cover in chosen]
    man_futs = [pool.submit(one, s) for s in sorted(left, reverse=True)]
    retry: set = set()
    for f in seg_futs:
        got, rest = f.result()
        out.update(got)
        retry |= rest
    for f in man_futs:
        s, m = f.result()
        if m is not None:
            out[s] = m
    if retry:
        for s, m in pool.map(one, sorted(retry, reverse=True)):
            if m is not None:
                out[s] = m
    return out


def read_stubs(repo: Repository, run_key: str, seqs) -> dict[int, Manifest]:
    """Read the compacted records (0-byte manifests, docs/format.md §14) at positions ``seqs``
    together: one LIST of the run's log segments, then the covering segments (largest first) in
    parallel, so n stubs cost about 1 + n/16 requests instead of 2n. A stub left without a valid
    copy is read alone (:meth:`~snapstore.repo.log.records.LogRecords.read_compacted`), which raises.

    Returns:
        ``{seq: Manifest}`` (a position whose manifest is gone by then is left out).
    Raises:
        CompactedRecordError: a stub has no valid copy; StoreError: the store failed.
    """
    got, rest = {}, set(seqs)
    if not rest:
        return got
    chosen, _ = choose_logsegs(rest, list_logsegs(repo, run_key))
    pool = repo.pool
    futs = [pool.submit(copies_from_logseg, repo, run_key, key, cover) for key, cover in chosen]
    for f in futs:
        part, _ = f.result()
        got.update(part)
    for s in sorted(rest - set(got), reverse=True):
        try:
            got[s] = repo.read_manifest_key(keys.manifest_key(run_key, s))
        except ObjectNotFound:
            continue
    return got


def add_object(recs: dict, run_key: str, seq: int, data: bytes) -> None:
    """Add the manifest object ``data`` at ``seq`` to ``recs`` as ``(envelope version, body)``;
    a corrupt object is left out (the segment is a copy; readers read that manifest)."""
    try:
        recs[seq] = open_manifest(keys.manifest_key(run_key, seq), data)
    except IntegrityError:
        pass


def add_from_segments(repo: Repository, recs: dict, subs: list[str], lo: int, hi: int, built=None) -> None:
    """Add to ``recs`` (``seq -> (envelope version, body)``) the records of positions ``lo..hi``
    it lacks, from the lower-level log segments ``subs``: those in ``built`` (``key -> records``,
    segments built in memory and not yet stored) from there, the others GET (a missing or corrupt
    segment gives none; a copy that does not decode is left out).

    Raises:
        StoreError: a GET failed otherwise.
    """
    built = built or {}

    def get_sub(k):
        if k in built:
            return k, None
        try:
            return k, decode_logseg(k, repo.store.get(k))
        except (ObjectNotFound, IntegrityError):
            return k, []
    for k, part in repo.pool.map(get_sub, subs):
        if part is None:
            for s, r in built[k].items():
                recs.setdefault(s, r)
            continue
        for c in part:
            if lo <= c.seq <= hi and c.seq not in recs:
                try:
                    recs[c.seq] = c.record(k)
                except IntegrityError:
                    continue


def add_listed_manifests(repo: Repository, recs: dict, run_key: str, lo: int, hi: int, level: int) -> tuple[list, set]:
    """Add to ``recs`` the records of positions ``lo..hi`` it still lacks from GETs of the
    manifests one LIST of the range shows (a manifest gone meanwhile, or corrupt, is left out).

    Returns:
        ``(missing, listed)``: the positions that lacked a record before, and the listed ones
        among the range's (empty when nothing was missing).
    Raises:
        StoreError: the LIST or a GET failed.
    """
    missing = [s for s in range(lo, hi + 1) if s not in recs]
    listed: set = set()
    if missing:
        listed = set(record_positions(repo.store.list(
            keys.manifests_prefix(run_key), start_after=keys.manifest_key(run_key, hi + 1)
            if hi + 1 < keys.SEQ_MAX else None, limit=span(level))))

        def get_one(s):
            try:
                return s, repo.store.get(keys.manifest_key(run_key, s))
            except ObjectNotFound:
                return s, None
        for s, data in repo.pool.map(get_one, [s for s in missing if s in listed]):
            if data is not None:
                add_object(recs, run_key, s, data)
    return missing, listed


def first_logseg(run_key: str, seq: int, known: dict[int, bytes]) -> tuple[str, bytes] | None:
    """The level-1 log segment that ends at position ``seq`` built from ``known`` alone
    (``seq -> manifest object bytes``, the record at ``seq`` included), for a save that writes it
    in the same transaction as that record (:mod:`snapstore.repo.log.onecommit`).

    Returns:
        ``(key, bytes)``, or None when no level-1 segment ends at ``seq`` or ``known`` lacks (or
        cannot open) one of its 16 records (then :func:`write_logsegs` builds it after the publish).
    """
    if (seq + 1) % span(1):
        return None
    recs: dict[int, tuple[int, bytes]] = {}
    for s in range(seq - span(1) + 1, seq + 1):
        if s not in known:
            return None
        add_object(recs, run_key, s, known[s])
    if len(recs) < span(1):
        return None
    return logseg_key(run_key, seq, 1), encode_logseg([(s, v, b) for s, (v, b) in sorted(recs.items())], 1)


def write_logsegs(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], done=()) -> list[str]:
    """After publishing position ``seq``, write the log segments that end there (create-only).

    Records come from ``known`` (``seq -> manifest object bytes`` the writer holds), then from the
    lower-level segments of the range (version 2 or 3), then from GETs of the manifests
    themselves; each is stored as its envelope version and JSON body (segment version 3). Best
    effort: a failure leaves the range to be read manifest by manifest (log segments are copies),
    and a record whose object does not open (corrupt) is left out of the segment.

    Args:
        done: keys of segments already written with the record (not written again, returned).
    Returns:
        The keys written (and ``done``).
    """
    written = list(done)
    for level in range(1, MAX_LEVEL + 1):
        if (seq + 1) % span(level):
            break
        lo = seq - span(level) + 1
        if logseg_key(run_key, seq, level) in written:
            continue
        recs: dict[int, tuple[int, bytes]] = {}
        for s in range(lo, seq + 1):
            if s in known:
                add_object(recs, run_key, s, known[s])
        try:
            if len(recs) < span(level) and level > 1:
                sub = span(level - 1)
                subs = [logseg_key(run_key, hi, level - 1) for hi in range(lo + sub - 1, seq + 1, sub)]
                add_from_segments(repo, recs, subs, lo, seq)
            missing, listed = add_listed_manifests(repo, recs, run_key, lo, seq, level)
            if not recs:
                continue
            # a listed position without a record here is one whose manifest did not open: a stub
            # (§14: its content is its copy in a lower-level segment) or a corrupt object. The
            # lower-level segments are then kept: they may hold the only copy of a stub.
            complete = not any(s in listed and s not in recs for s in missing)
            key = logseg_key(run_key, seq, level)
            repo.store.put(key, encode_logseg([(s, v, b) for s, (v, b) in sorted(recs.items())], level))
            written.append(key)
        except SnapstoreError:
            continue  # exists already (our retry, or a racing writer of the same range), or the store failed
        if level > 1 and complete:
            # the lower-level segments of the range are now redundant copies of copies: without
            # this every record was kept up to 3 more times (a reader that listed one meanwhile
            # falls back to the manifests for its range)
            sub = span(level - 1)
            try:
                repo.store.delete_many([logseg_key(run_key, hi, level - 1) for hi in range(lo + sub - 1, seq + 1, sub)])
            except SnapstoreError:
                pass  # left for GC, which deletes log segments with the positions they cover
    return written
