"""A run's log read as its live checkpoints: walking the log newest first past rollback records
(the positions they hide) to the first tombstone, and resolving the effective head.

Layer 4, below the manager's views: functions over a :class:`~snapstore.repo.repository.Repository`
and a run key (docs/format.md §11, §12, §17). Records are read in parallel batches (:func:`scan`) or
in one wave through the run's log segments (:func:`scan_bulk`).
"""

from __future__ import annotations

from ..errors import ObjectNotFound
from ..format import keys
from ..format.liveness import LIVE, TOMBSTONE, LogWalk
from ..format.manifest import KIND_CHECKPOINT, KIND_TOMBSTONE, Manifest, is_void
from ..repo.log.bulk import list_logsegs, list_positions, read_records, read_stubs
from ..repo.log.pages import PAGE, log_infos


def live_records(seqs, got: dict, walk: LogWalk):
    """Walk log positions ``seqs`` (newest first) with their records ``got``: yield
    ``(seq, checkpoint Manifest, False)`` for each live checkpoint, and a last ``(seq, record,
    True)`` at a tombstone. Positions hidden by a rollback record are skipped; ``walk`` (a
    :class:`~snapstore.format.liveness.LogWalk`) carries the rule's state over between calls."""
    for s in seqs:
        m = got.get(s)
        if m is None:
            continue
        verdict = walk.judge(s, m)
        if verdict == TOMBSTONE:
            yield s, m, True
            return
        if verdict == LIVE:
            yield s, m, False


def carried_segs(newest: Manifest | None) -> list | None:
    """The segment list a new log record inherits from the run's newest record (None: none)."""
    if newest is None or newest.kind == KIND_TOMBSTONE:
        return None
    return newest.segment_list()


def resolve(repo, rk: str, newest: Manifest | None, known: dict | None = None) -> Manifest | None:
    """The effective head checkpoint of run key ``rk`` for its newest log record ``newest``: the
    record itself (a checkpoint), its target (a rollback record: the newest live checkpoint at or
    below the target when the target is gone), or None (no record, a tombstone, nothing live).
    ``known``: ``{seq: Manifest or None}`` of records read just now; a rollback's target found
    there as a checkpoint is not read again.

    Raises:
        IntegrityError: a record read is corrupt; StoreError: a request failed.
    """
    if newest is None or newest.kind == KIND_TOMBSTONE:
        return None
    if newest.kind == KIND_CHECKPOINT:
        return newest
    tseq = int(newest.target["seq"])
    t = known.get(tseq) if known else None
    if t is not None and t.kind == KIND_CHECKPOINT:
        return t
    try:
        t = repo.read_manifest_key(keys.manifest_key(rk, tseq))
        if t.kind == KIND_CHECKPOINT:
            return t
    except ObjectNotFound:
        pass
    for s, cid, m in scan(repo, rk, below=tseq + 1):
        return m
    return None


def scan(repo, rk: str, below: int | None = None, want: int | None = None, first: list | None = None):
    """Yield ``(seq, checkpoint id, Manifest)`` of live checkpoints, newest first.

    Skips positions hidden by rollback records and stops at a tombstone. The log is listed page
    by page as the walk goes (:func:`snapstore.repo.log.pages.log_infos`: the positions below
    ``below`` only, never the whole run up front) and manifests are read in parallel batches,
    the first of ``want + 2`` (a rollback record or two among them cost no second round trip),
    then doubling up to 64; so the first k results cost one LIST and about k GETs in two round
    trips, whatever the run's length.

    Args:
        repo: the repository. rk: the run's key segment.
        below: only positions strictly below this (a listing's cursor); None: from the newest.
        want: how many results the caller expects to take (None: unknown, maybe all).
        first: the run's first LIST page, listed already with limit :func:`first_page_limit`
            ``(want)`` (:mod:`snapstore.manager.firstread`); only without ``below``.
    """
    limit = first_page_limit(want)
    infos = log_infos(repo.store, rk, below=below, first_limit=limit, first=first if below is None else None)
    walk = LogWalk()  # positions in (target, rollback) are hidden
    batch = 4 if want is None else want + 2
    while True:
        chunk = []
        for info in infos:
            if not is_void(info.size):
                chunk.append(keys.seq_from_manifest_key(info.key))
                if len(chunk) >= batch:
                    break
        if not chunk:
            return
        batch = min(batch * 2, 64)
        todo = [s for s in chunk if not walk.hides(s)]
        got = read_many(repo, rk, todo)
        for s, m, end in live_records(chunk, got, walk):
            if end:
                return
            yield s, m.checkpoint_id, m


def first_page_limit(want: int | None) -> int:
    """Keys the first LIST of :func:`scan` asks for: ``2 * want + 32`` (room for void records
    and rollback records among the newest), or a full page without ``want``."""
    return PAGE if want is None else min(PAGE, 2 * max(0, want) + 32)


def scan_bulk(repo, rk: str, below: int | None = None, want: int | None = None):
    """Like :func:`scan`, reading records through the run's log segments: the positions are
    listed beside the run's log segments, then read in one parallel wave (docs/format.md §12),
    so a run of n checkpoints costs O(n / 1000 + log n) requests in a few round trips instead
    of n GETs.

    Args:
        below: only positions strictly below this (a cursor): listed from there, page by page.
        want: how many results the caller will take at most (None: all): positions are then
            listed and read in chunks of ``want + 2`` (growing), so a page of a long run costs
            what the page holds.
    """
    pool = repo.pool
    f_segs = pool.submit(list_logsegs, repo, rk)
    if below is None and want is None:
        seqs = list_positions(repo, rk)
        got = read_records(repo, rk, seqs, f_segs.result())
        for s, m, end in live_records(seqs, got, LogWalk()):
            if end:
                return
            yield s, m.checkpoint_id, m
        return
    infos = log_infos(repo.store, rk, below=below, first_limit=PAGE if want is None else min(PAGE, want + 34))
    walk = LogWalk()
    batch = None if want is None else want + 2
    while True:
        chunk = []
        for info in infos:
            if not is_void(info.size):
                chunk.append(keys.seq_from_manifest_key(info.key))
                if batch is not None and len(chunk) >= batch:
                    break
        if not chunk:
            return
        if batch is not None:
            batch = min(batch * 2, 4 * PAGE)
        got = read_records(repo, rk, [x for x in chunk if not walk.hides(x)], f_segs.result())
        for s, m, end in live_records(chunk, got, walk):
            if end:
                return
            yield s, m.checkpoint_id, m


def read_many(repo, rk: str, seqs: list[int]) -> dict[int, Manifest]:
    """Read the log records at positions ``seqs`` of run key ``rk`` in parallel: ``{seq: Manifest
    or None}`` (None: no record there any more)."""
    stub = object()

    def one(s):
        key = keys.manifest_key(rk, s)
        try:
            data = repo.store.get(key)
            return s, (repo.manifest_from_object(key, data) if data or len(seqs) <= 1 else stub)
        except ObjectNotFound:
            return s, None
    if len(seqs) <= 1:
        return dict(one(s) for s in seqs)
    got = dict(repo.pool.map(one, seqs))
    stubs = [s for s, m in got.items() if m is stub]
    if stubs:  # compacted records (docs/format.md §14): from their log segments, together
        found = read_stubs(repo, rk, stubs)
        got.update({s: found.get(s) for s in stubs})
    return got
