"""Compacted run logs (format 2, docs/format.md §14): manifests covered by a log segment become
empty stubs.

Layer 3. Every record of a run is stored twice, as its manifest and as its copy in a log segment
(§12). A writer that has just written the level-1 segment ending at position ``seq`` replaces the
manifests of the previous 16-range, ``[seq - 31, seq - 16]``, with 0-byte objects (*stubs*): the
key stays (it is the compare-and-swap slot of that position, so a stale writer's create-only PUT
there still fails), the content is read from the segment's copy
(:meth:`~snapstore.repo.log.records.LogRecords.read_compacted`). The newest 16-31 records always stay
full manifests, so ``head()``, ``latest()`` and a writer's own read-back never meet a stub in steady
state.

Each stub is a compare-and-swap (``put_if_match``) on the ETag the manifest has in a LIST made
just before, so a stub never creates a key (a manifest pruned, rolled back or deleted meanwhile
stays gone) and never replaces anything but the record whose copy was checked. On a store with
atomic batches (``StoreCapabilities.atomic_batch``: a SQLite file, a local directory) the range's
stubs are one ``write_batch`` (one commit or fdatasync, not up to 16). Best effort: any failure
leaves full manifests, which are always valid.
"""

from __future__ import annotations

from ...errors import ObjectNotFound, PreconditionFailed, SnapstoreError
from ...format import keys
from ...format.logseg import MAX_LEVEL, decode_logseg, logseg_key, span
from ...format.manifest import Manifest, is_void
from ..repository import Repository
from ...stores.base import store_capabilities
from ...stores.batch import BatchPut, BatchRefused

KEEP = 16
"""Positions after a stubbed range that always stay full manifests (plus the unfinished range)."""


def default_compact_log(store) -> bool:
    """Whether a writer on ``store`` compacts its run logs by default: True on a local directory
    (each manifest is a file costing a 4 KiB disk block; a stub costs none), False elsewhere (on S3
    a stub is one more PUT, $0.005 per 1,000, against the ~300 bytes, $0.023 per GB-month, it
    saves: break-even after about 60 years)."""
    return store_capabilities(store).compact_log


def stub_range(seq: int) -> tuple[int, int] | None:
    """The 16-range ``(lo, hi)`` a writer stubs after writing the level-1 segment ending at ``seq``
    (``(seq + 1) % 16 == 0``), or None when there is none yet (``seq < 31``)."""
    if (seq + 1) % span(1):
        return None
    hi = seq - KEEP
    lo = hi - span(1) + 1
    return (lo, hi) if lo >= 0 else None


def prefetch(repo: Repository, run_key: str, seq: int):
    """Start (on the repository's pool) the two reads stubbing after position ``seq`` needs: one
    LIST of the range's manifest keys (their sizes and ETags) and the GET of the segment covering
    it (highest level first). Returns the futures ``(list, segment)``, or None when ``seq`` ends
    no stubbed range. Each future's function catches nothing: see :func:`write_stubs`."""
    rng = stub_range(seq)
    if rng is None:
        return None
    lo, hi = rng
    pool = repo.pool

    def listing():
        after = keys.manifest_key(run_key, hi + 1) if hi + 1 < keys.SEQ_MAX else None
        return {keys.seq_from_manifest_key(i.key): i for i in repo.store.list(
            keys.manifests_prefix(run_key), start_after=after, limit=span(1))}

    def segment():
        for level in range(MAX_LEVEL, 0, -1):
            if (hi + 1) % span(level):
                continue
            k = logseg_key(run_key, hi, level)
            try:
                return k, decode_logseg(k, repo.store.get(k))
            except ObjectNotFound:
                continue
        return None, []

    return pool.submit(listing), pool.submit(segment)


def write_stubs(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], started=None,
                deletes=()) -> list[int]:
    """Replace the manifests of :func:`stub_range` ``(seq)`` with 0-byte stubs where their copy in
    the covering log segment is valid and equal to the record.

    Args:
        repo: the repository.
        run_key: the run's key segment.
        seq: the position whose level-1 log segment was just written.
        known: ``seq -> manifest object bytes`` the writer holds (saves GETs of those manifests).
        started: what :func:`prefetch` returned for ``seq`` (None: start it here).
        deletes: keys deleted with the stubs (the packs a save's tier merged): in the stubs'
            batch on a store with ``write_batch``, else by one ``delete_many`` (best effort, as
            the stubs: a failure leaves them for GC).
    Returns:
        The positions stubbed. Never raises :class:`~snapstore.errors.SnapstoreError`: stubbing is
        an optimisation, and a failure leaves full manifests.
    """
    deletes = list(deletes)
    done = _stubs(repo, run_key, seq, known, started, deletes)
    if deletes:  # not written in a batch with stubs
        try:
            repo.store.delete_many(deletes)
        except SnapstoreError:
            pass
    return done


def _stubs(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], started, deletes: list) -> list[int]:
    """:func:`write_stubs` itself; ``deletes`` is emptied when the stubs' batch deleted them."""
    batch = store_capabilities(repo.store).atomic_batch
    _, done = _checked(repo, run_key, seq, known, started, put_each=not batch)
    if not batch:
        return sorted(done)
    return _stub_batch(repo, done, deletes)


def checked_stubs(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], started=None) -> tuple[str | None, list]:
    """The stubs :func:`write_stubs` would write after position ``seq``, checked but not written,
    for a caller that writes them in its own atomic batch (:mod:`snapstore.repo.log.segbatch`).

    Args:
        repo, run_key, seq, known, started: as :func:`write_stubs`.
    Returns:
        ``(segment key, items)``: the key of the log segment whose copies were checked (None when
        no segment covers the range), and ``[(seq, manifest key, listed ObjectInfo, copy)]`` for each
        position whose copy in that segment is a valid manifest equal to the record; each stub is to
        be written as ``BatchPut(key, b"", etag=info.etag)``. Never raises
        :class:`~snapstore.errors.SnapstoreError` (a failure: no items).
    """
    return _checked(repo, run_key, seq, known, started, put_each=False)


def _checked(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], started, put_each: bool):
    """``(segment key, items)`` of :func:`checked_stubs`; with ``put_each``, each checked stub is
    also written at once (``put_if_match``, in the pool's wave) and the items are the positions
    stubbed."""
    try:
        started = started or prefetch(repo, run_key, seq)
        if started is None:
            return None, []
        f_list, f_seg = started
        listed = f_list.result()
        seg_key, copies = f_seg.result()
    except SnapstoreError:
        return None, []
    lo, hi = stub_range(seq)
    if seg_key is None:
        return None, []
    by_seq = {c.seq: c for c in copies}
    todo = []
    for s in range(lo, hi + 1):
        info = listed.get(s)
        c = by_seq.get(s)
        if info is None or info.size == 0 or is_void(info.size) or c is None:
            continue  # gone (never create a key), already a stub, a void record, or no copy to stand for it
        key = keys.manifest_key(run_key, s)
        try:
            copy = c.manifest(f"{key} (copy in {seg_key})")
            if copy.seq != s or repo.run_key(copy.run_id) != run_key:
                continue
        except SnapstoreError:
            continue
        todo.append((s, key, info, copy))
    if not todo:
        return seg_key, []

    def one(item):
        s, key, info, copy = item
        try:
            data = known.get(s)
            if data is None:
                data = repo.store.get(key)
            if Manifest.from_bytes(key, data) != copy:
                return None
            if not put_each:
                return item  # written by the caller, all stubs in one batch
            repo.store.put_if_match(key, b"", info.etag)
            return s
        except (PreconditionFailed, ObjectNotFound):
            return None  # changed or deleted since the LIST: never recreate or replace it
        except SnapstoreError:
            return None
    return seg_key, [r for r in repo.pool.map(one, todo) if r is not None]


def _stub_batch(repo: Repository, items: list, deletes: list) -> list[int]:
    """Write the stubs ``items`` (``(seq, key, info, copy)`` checked against their copy) and
    delete ``deletes`` as ONE atomic batch of compare-and-swap puts (a store with
    ``write_batch``: one commit, one fdatasync); a stub whose manifest changed since the LIST
    refuses the batch and is dropped, and the rest is tried again. Returns the positions
    stubbed; ``deletes`` is emptied once the batch deleted them."""
    items = list(items)
    while items:
        try:
            repo.store.write_batch([BatchPut(key, b"", etag=info.etag) for _, key, info, _ in items], deletes)
            deletes.clear()
            return sorted(s for s, _, _, _ in items)
        except BatchRefused as e:
            items = [it for it in items if it[1] != e.key]
        except SnapstoreError:
            return []
    return []
