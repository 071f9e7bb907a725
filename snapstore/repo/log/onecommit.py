"""Publishing a checkpoint with its data at one commit, on a store with atomic batches.

Layer 3, beside :meth:`snapstore.repo.log.records.LogRecords.publish`. On a store declaring
``StoreCapabilities(atomic_batch=True)`` (a SQLite file) a save's pack, its tier pack, the run
marker of a run's first checkpoint, its manifest, its level-1 log segment and the deletion of
the packs its tier merged are one ``write_batch`` (:mod:`snapstore.stores.batch`): one transaction, one fsync. The
manifest's create-only write at its log position is decided inside that transaction, so the
conflict contract is the one of the ordered writes (docs/format.md §18, §20) and a manifest is
never visible without its pack: both land or neither does. The packs a tier merged are deleted
in the same transaction only while the run has no pin (``deletes_unless``: the pin's key,
checked inside the transaction; a fork may list them: §10, §23).
"""

from __future__ import annotations

from ...errors import ObjectNotFound, PreconditionFailed
from ...format import keys
from ...format import runmark
from ...format.manifest import KIND_CHECKPOINT, Manifest
from ...stores.base import store_capabilities
from ...stores.batch import BatchPut, BatchRefused
from . import runmarks


def one_commit(store) -> bool:
    """Whether ``store`` writes a save at one commit (it declares ``atomic_batch``)."""
    return store_capabilities(store).atomic_batch


def publish_with_data(repo, run_key: str, m: Manifest, packs: list[tuple[bytes, bytes]], revives: bool = False,
                      deletes=(), data: bytes | None = None, copies=(), deletes_unless: str | None = None) -> bytes:
    """Write ``packs``, manifest ``m`` (create-only at its sequence number) and the run marker it
    needs in one atomic batch, deleting ``deletes`` in it too; return the manifest's bytes.

    A pack key that already holds the same bytes counts as written (an earlier attempt of ours).
    A refused manifest is read back: if it carries our write id, an earlier attempt landed whole
    (with its packs and deletes) and this succeeds. A run's first checkpoint puts its live commit
    marker in the batch; a checkpoint reviving a run after a tombstone writes its intent marker
    before the batch and its commit after it (docs/format.md §13).

    Args:
        repo: the :class:`~snapstore.repo.repository.Repository` (its store has ``write_batch``).
        run_key: the run's key segment.
        m: the checkpoint record.
        packs: ``[(pack id, pack bytes)]`` the record names (its own pack, a tier pack).
        revives: ``m``'s log predecessor leaves the run with no live checkpoint (or there is none).
        deletes: keys removed in the same transaction (the packs a tier merged).
        deletes_unless: a key whose existence (checked in the transaction) skips ``deletes``:
            the run's fork pin (:func:`~snapstore.format.keys.pin_key`).
        data: ``m.to_bytes()`` when the caller already encoded it.
        copies: ``[(key, bytes)]`` written in the batch unless their key exists: copies of log
            records (the level-1 log segment that ends at ``m``, :func:`~snapstore.repo.log.bulk.first_logseg`).
    Returns:
        The manifest object's bytes.
    Raises:
        PreconditionFailed: another writer holds that sequence number (nothing was written).
        BatchRefused: with ``same=False``: a pack id is taken by other bytes (nothing written).
        StoreError: the store failed (nothing was written).
    """
    store = repo.store
    key = keys.manifest_key(run_key, m.seq)
    data = m.to_bytes() if data is None else data
    puts = [BatchPut(keys.pack_key(pid), body, if_exists="same") for pid, body in packs]
    puts += [BatchPut(k, body, if_exists="skip") for k, body in copies]
    pending = None
    if runmarks.marks_record(m, revives):
        if m.kind == KIND_CHECKPOINT and m.seq == 0:
            mark = runmark.live_key(run_key, 0, m.run_id)
            puts.append(BatchPut(mark, b"", if_exists="skip"))
            pending = runmarks.Pending(mark, False)
        else:
            pending = runmarks.before_publish(store, run_key, m, revives)
    puts.append(BatchPut(key, data))
    etag = None
    try:
        etag = (store.write_batch(puts, list(deletes), deletes_unless) if deletes_unless is not None
                else store.write_batch(puts, list(deletes)))[-1].etag
    except BatchRefused as e:
        if e.key != key:
            runmarks.abandon(store, pending)
            raise
        try:
            other = repo.read_manifest_key(key)
        except ObjectNotFound:
            runmarks.abandon(store, pending)
            raise PreconditionFailed(key, f"sequence {m.seq} of run {m.run_id!r} was taken and released") from None
        if other.write_id != m.write_id:
            runmarks.abandon(store, pending)
            raise PreconditionFailed(key) from None
    runmarks.after_publish(store, run_key, m, pending, etag)
    return data
