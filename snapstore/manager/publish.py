"""Publishing a log record: the create-only write that claims a run's next log position, and the
log segments written after it (docs/format.md §11, §12).

Layer 4, used by saving, rollback, deletion and fork. :func:`append_record` publishes at the next
free position (retrying), :func:`publish_record` at exactly the position after the head a
conditional operation checked; :func:`after_publish` remembers the record's bytes and writes the
log segments that end at it. Functions take the manager (``mgr``) whose views they update.
"""

from __future__ import annotations

from ..errors import ConflictError, PreconditionFailed, SnapstoreError
from ..format.manifest import Manifest
from ..repo.log.stubs import prefetch, write_stubs
from ..repo.log.bulk import write_logsegs
from ..repo.log.segbatch import write_at_one_commit
from ..stores.base import store_capabilities
from ..repo.log.records import _UNSET
from .views import RunView


_NOT_READ = object()  # append_record: no newest record given (read it)

LOG_CACHE = 256
"""Recent log records (their bytes) a manager keeps per run to write log segments."""


def after_publish(mgr, rk: str, v: "RunView | None", seq: int, data: bytes, done=(), deletes=()) -> bool:
    """Remember a record just published and write the log segments that end at it (format 2,
    docs/format.md §12; best effort, a failure costs listing speed only). ``done``: keys of the
    segments already written in the record's own transaction (a save at one commit).
    ``deletes``: keys to delete (the packs a save's tier merged) in the log stubs' atomic batch
    when one is written (a store with ``write_batch``). On a store with ``write_batch`` the
    segments, the lower-level segments a level-2/3 one makes redundant and the stubs are one
    batch (:func:`~snapstore.repo.log.segbatch.write_at_one_commit`). Returns True when
    ``deletes`` were deleted (else the caller deletes them)."""
    cache = None
    if v is not None:
        if v.log_cache is None:
            v.log_cache = {}
        cache = v.log_cache
        cache[seq] = data
        if len(cache) > mgr.LOG_CACHE:
            for s in sorted(cache)[:len(cache) - mgr.LOG_CACHE]:
                del cache[s]
    if (seq + 1) % 16 == 0:
        known = cache or {seq: data}
        started = None
        if mgr.compact_log:
            try:  # the stubs' LIST and segment GET go beside the new segment's PUT (§14)
                started = prefetch(mgr.repo, rk, seq)
            except SnapstoreError:
                started = None
        if store_capabilities(mgr.repo.store).atomic_batch:
            # segments, lower-level deletions and stubs in one batch: one commit (segbatch)
            _, _, deleted = write_at_one_commit(mgr.repo, rk, seq, known, done, started, deletes)
            return deleted
        try:
            written = write_logsegs(mgr.repo, rk, seq, known, done)
        except SnapstoreError:
            written = []
        if started is not None and written:
            write_stubs(mgr.repo, rk, seq, known, started, deletes)
            return True
        elif started is not None:
            for f in started:  # the segment was not written (by us): leave the range full
                f.cancel() or f.exception()
    return False


def append_record(mgr, run_id: str, rk: str, make, first=_NOT_READ, pending=_UNSET) -> Manifest:
    """Publish a rollback/tombstone record at the next free position (fresh head; retries).

    ``first``: the run's newest record (or None), read by the caller just now: the first attempt
    goes after it without reading the head again; ``pending``: the run marker written already
    for the position after ``first`` (:meth:`~snapstore.repo.log.records.LogRecords.publish`)."""
    for attempt in range(16):
        newest = first if attempt == 0 and first is not _NOT_READ else mgr.repo.head(rk)
        seq = 0 if newest is None else newest.seq + 1
        m = make(seq, newest)
        try:
            data = mgr.repo.publish(rk, m, pending=pending if attempt == 0 and first is not _NOT_READ else _UNSET)
            after_publish(mgr, rk, mgr.state.views.get(m.run_id), seq, data)
            return m
        except PreconditionFailed:
            continue
    raise ConflictError(f"run {run_id!r} is changing too fast; gave up publishing a log record")


def publish_record(mgr, run_id: str, rk: str, newest: Manifest | None, m: Manifest, what: str,
                   pending=_UNSET) -> Manifest:
    """Publish a rollback/tombstone record ``m`` at exactly the position after ``newest`` (the
    head a conditional operation checked). Raises ConflictError if the run moved meanwhile.
    ``pending``: the run marker written already for ``m``'s position (default: written here)."""
    try:
        data = mgr.repo.publish(rk, m, pending=pending)
    except PreconditionFailed:
        raise ConflictError(f"run {run_id!r} changed while checking it for {what} (another writer saved, "
                            "rolled back or deleted); read the head again and retry") from None
    after_publish(mgr, rk, mgr.state.views.get(run_id), m.seq, data)
    return m
