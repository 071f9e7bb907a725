"""Log segments and log stubs at one commit, on a store with atomic batches.

Layer 3, beside :func:`snapstore.repo.log.bulk.write_logsegs` (the ordered writes) and
:mod:`snapstore.repo.log.stubs`. After publishing position ``seq`` with ``(seq + 1) % 16 == 0`` a
writer writes the log segments ending there, deletes the 16 lower-level segments a complete
level-2/3 segment makes redundant, and stubs the manifests of the previous 16-range
(docs/format.md §12, §14). Written one by one that is a create-only PUT per segment, one batched
DELETE per level and one batch of stubs: on a local directory one fdatasync each, on a SQLite file
one commit each, so a save ending a level-2 range cost 4 and one ending a level-3 range 6.

On a store declaring ``StoreCapabilities(atomic_batch=True)`` this module builds the segments in
memory (a level-3 segment reads the level-2 segment built just before from memory, not from the
store), then writes the segments, the lower-level deletions and the stubs as ONE ``write_batch``:
one commit, whatever the level. The rules of the ordered writes are kept:

* A level-L segment (L >= 2) with a listed position it holds no record for (a lower-level copy
  missing or corrupt) deletes nothing: the lower-level segments may hold the only copy of a stub.
* A stub is written only after its copy was read back from a stored segment and checked equal to
  the record (:func:`~snapstore.repo.log.stubs.checked_stubs`); when that segment is deleted in
  the same batch, the stub is written only if a segment put in the batch holds a copy of its
  position, so the batch never leaves a stub whose only copy it deleted.
* Every segment put is create-only. A batch refused on one (the segment exists: a retry of ours,
  or a racing writer of the same range) falls back to the ordered writes, which skip segments that
  exist and delete only under complete ones; a batch refused on a stub (its manifest changed since
  the LIST) drops that stub and is tried again.

Best effort, as the ordered writes: a failure leaves full manifests and lower-level segments,
costing listing speed only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import SnapstoreError
from ...format.logseg import MAX_LEVEL, encode_logseg, logseg_key, span
from ...stores.batch import BatchPut, BatchRefused
from ..repository import Repository
from . import bulk, stubs


@dataclass
class SegPlan:
    """The log-segment writes after one position, built but not written.

    Attributes:
        puts: ``{key: segment bytes}`` to create (create-only), lowest level first.
        deletes: keys of lower-level segments that a complete segment of this plan makes redundant
            and that are stored (written earlier, or in the record's own transaction).
        held: positions whose copy a segment built by this plan holds (one left out of ``puts``
            because a complete higher-level segment of the plan holds the same records included).
        written: keys of segments already stored with the record (``done``).
    """

    puts: dict[str, bytes] = field(default_factory=dict)
    deletes: list[str] = field(default_factory=list)
    held: set[int] = field(default_factory=set)
    written: list[str] = field(default_factory=list)


def plan_logsegs(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], done=()) -> SegPlan:
    """Build the log segments that end at position ``seq`` in memory (nothing is written).

    Records come from ``known`` (``seq -> manifest object bytes`` the writer holds), then from the
    lower-level segments of the range (those of this plan from memory, the others GET from the
    store; version 2 or 3), then from GETs of the manifests one LIST of the range shows, exactly
    as :func:`~snapstore.repo.log.bulk.write_logsegs` gathers them. A segment that gathered a
    record for every listed position of its range is *complete*: its lower-level segments are then
    dropped from ``puts`` when the plan would write them, else added to ``deletes``.

    Args:
        repo: the repository.
        run_key: the run's key segment.
        seq: the position just published; ``(seq + 1) % 16 == 0`` for anything to be planned.
        known: the records the writer holds.
        done: keys of segments already stored with the record (a save at one commit: its level-1
            segment); not built again.
    Returns:
        The :class:`SegPlan` (empty when no segment ends at ``seq``). Never raises
        :class:`~snapstore.errors.SnapstoreError`: a level whose reads fail is left out.
    """
    plan = SegPlan(written=list(done))
    built: dict[str, dict[int, tuple[int, bytes]]] = {}  # segments of this plan: key -> records
    for level in range(1, MAX_LEVEL + 1):
        if (seq + 1) % span(level):
            break
        lo = seq - span(level) + 1
        key = logseg_key(run_key, seq, level)
        if key in plan.written:
            continue
        recs: dict[int, tuple[int, bytes]] = {}
        for s in range(lo, seq + 1):
            if s in known:
                bulk.add_object(recs, run_key, s, known[s])
        subs: list[str] = []
        try:
            if level > 1:
                sub = span(level - 1)
                subs = [logseg_key(run_key, hi, level - 1) for hi in range(lo + sub - 1, seq + 1, sub)]
            if len(recs) < span(level) and subs:
                bulk.add_from_segments(repo, recs, subs, lo, seq, built)
            missing, listed = bulk.add_listed_manifests(repo, recs, run_key, lo, seq, level)
        except SnapstoreError:
            continue  # the store failed: no segment at this level (a copy costs listing speed only)
        if not recs:
            continue
        # a listed position without a record is a stub whose copy was not found, or a corrupt
        # object: the lower-level segments are then kept (they may hold the only copy of a stub)
        complete = not any(s in listed and s not in recs for s in missing)
        plan.puts[key] = encode_logseg([(s, v, b) for s, (v, b) in sorted(recs.items())], level)
        built[key] = recs
        plan.held.update(recs)
        if level > 1 and complete:
            for k in subs:
                if plan.puts.pop(k, None) is None:
                    plan.deletes.append(k)
    return plan


def write_at_one_commit(repo: Repository, run_key: str, seq: int, known: dict[int, bytes], done=(),
                        started=None, deletes=()) -> tuple[list[str], list[int], bool]:
    """After publishing position ``seq`` on a store with ``write_batch``: the log segments ending
    there, the lower-level segments they make redundant deleted, and the stubs of the previous
    16-range, in one atomic batch (see the module docstring).

    Args:
        repo: the repository (its store has ``write_batch``).
        run_key: the run's key segment.
        seq: the position just published.
        known: ``seq -> manifest object bytes`` the writer holds.
        done: keys of segments already stored in the record's own transaction.
        started: :func:`~snapstore.repo.log.stubs.prefetch` ``(seq)`` when the writer compacts its
            log (None: no stubs).
        deletes: other keys to delete in the batch (the packs a save's tier merged).
    Returns:
        ``(segment keys written, done included; positions stubbed; whether deletes were deleted)``.
        Never raises :class:`~snapstore.errors.SnapstoreError`.
    """
    plan = plan_logsegs(repo, run_key, seq, known, done)
    if not plan.puts and not plan.written:
        _cancel(started)  # no segment written by us: leave the range full (as the ordered writes)
        return [], [], False
    items: list = []
    seg_key = None
    if started is not None:
        seg_key, items = stubs.checked_stubs(repo, run_key, seq, known, started)
        if seg_key in plan.deletes:
            items = [it for it in items if it[0] in plan.held]
    seg_puts = [BatchPut(k, body) for k, body in plan.puts.items()]
    while seg_puts or items or plan.deletes or deletes:
        try:
            repo.store.write_batch(seg_puts + [BatchPut(key, b"", etag=info.etag) for _, key, info, _ in items],
                                   plan.deletes + list(deletes))
            return plan.written + list(plan.puts), sorted(it[0] for it in items), True
        except BatchRefused as e:
            if e.key in plan.puts:
                break  # a segment exists already: the ordered writes decide level by level
            before = len(items)
            items = [it for it in items if it[1] != e.key]
            if len(items) == before:
                return plan.written, [], False
        except SnapstoreError:
            return plan.written, [], False
    else:
        return plan.written, [], False  # nothing to write (the level-1 segment came with the record)
    written = bulk.write_logsegs(repo, run_key, seq, known, done)
    if not written or started is None:
        return written, [], False
    rest = list(deletes)
    stubbed = stubs._stub_batch(repo, items, rest)
    return written, stubbed, not rest


def _cancel(started) -> None:
    """Drop the futures :func:`~snapstore.repo.log.stubs.prefetch` started (their errors unread)."""
    for f in started or ():
        f.cancel() or f.exception()
