"""Run markers written beside liveness-changing log records, and ``runs()`` read from LIST pages.

Layer 3. ``CheckpointManager.runs()`` needs, per run, whether its newest log record leaves it a
live checkpoint, and its run id. Both live inside the newest manifest, so without help that is a
LIST and a GET per run. Run markers (:mod:`snapstore.format.runmark`, docs/format.md §13) are
empty objects under ``runmarks/`` written only when a record changes a run's liveness (its first
checkpoint, a tombstone, a checkpoint after a tombstone); a steady-state save writes none.

Writers (:func:`before_publish`, :func:`after_publish`, called by
:meth:`snapstore.repo.log.records.LogRecords.publish`): an *intent* marker before the record (a
checkpoint at position 0 writes its *commit* at once instead), the *commit* after it has landed,
then the run's older markers are deleted. Readers (:func:`live_run_ids`): one LIST of
``runs/`` (run directories) beside one LIST of ``runmarks/``; a run whose newest commit says live
(and no intent is newer) costs nothing more; a ``t`` commit costs one LIST (max-keys 1) to check
that the tombstone it names is still the head; anything else (no markers: a repository or run
written before markers; an intent in flight or left by a crash) falls back to reading the head.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import PreconditionFailed, SnapstoreError
from ...format import keys
from ...format import runmark
from ...format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest


@dataclass
class Pending:
    """A marker written before a record was published.

    Attributes:
        key: the marker's key.
        intent: True for an intent (deleted once the commit is written, or if the record does not
            land), False for a commit written ahead (position 0 of a run with no record).
    """

    key: str
    intent: bool


def marks_record(m: Manifest, revives: bool) -> bool:
    """Whether publishing ``m`` changes (or may change) the run's liveness: every tombstone and
    rollback record, and a checkpoint whose log predecessor leaves the run without a live
    checkpoint (``revives``)."""
    return m.kind in (KIND_TOMBSTONE, KIND_ROLLBACK) or (revives and m.kind == KIND_CHECKPOINT)


def before_publish(store, run_key: str, m: Manifest, revives: bool) -> Pending | None:
    """Write the marker that must exist before record ``m`` is published (create-only).

    A tombstone, or a checkpoint after a dead predecessor: an intent. The first checkpoint of a run
    with no record at all (``seq`` 0): its live commit at once; should the record not land, the
    marker says what the only possible record at position 0 (a checkpoint) would say, and a crash
    before the manifest leaves at most a run directory of leftovers listed until GC removes them.

    Args:
        store: the object store.
        run_key: the run's key segment.
        m: the record about to be published.
        revives: the writer's log predecessor leaves the run with no live checkpoint (or there is
            none).
    Returns:
        The marker written, or None when ``m`` needs none (or the ahead-of-time commit failed:
        readers then read the head).
    Raises:
        StoreError: an intent could not be written (the record must not be published without it).
    """
    if not marks_record(m, revives):
        return None
    if m.kind == KIND_ROLLBACK:
        key = runmark.rollback_key(run_key, m.seq)
        try:
            store.put(key, b"")
        except PreconditionFailed:
            pass
        return Pending(key, True)
    if m.kind == KIND_CHECKPOINT and m.seq == 0:
        key = runmark.live_key(run_key, 0, m.run_id)
        try:
            store.put(key, b"")
        except PreconditionFailed:
            pass  # an earlier attempt (or a racing writer of the same first checkpoint position)
        except SnapstoreError:
            return None  # best effort: without a marker the run is read the old way
        return Pending(key, False)
    kind = runmark.TOMB if m.kind == KIND_TOMBSTONE else runmark.LIVE
    key = runmark.intent_key(run_key, m.seq, kind, os.urandom(8))
    store.put(key, b"")
    return Pending(key, True)


def abandon(store, pending: Pending | None) -> None:
    """The record ``pending`` was written for did not land (conflict): delete its intent (best
    effort; a leftover intent only makes readers read that run's head)."""
    if pending is None or not pending.intent or pending.key.endswith("." + runmark.ROLLBACK):
        return  # (a rollback marker has no nonce: it may be the winner's; a stale one is harmless)
    try:
        store.delete_many([pending.key])
    except SnapstoreError:
        pass


def after_publish(store, run_key: str, m: Manifest, pending: Pending | None, etag: str | None) -> None:
    """Write the commit marker of record ``m`` (now published) and delete the run's older markers.

    Best effort: a failure leaves the intent, so readers read that run's head (correct, slower).

    Args:
        store: the object store.
        run_key: the run's key segment.
        m: the record just published.
        pending: what :func:`before_publish` wrote (None: nothing, nothing to do).
        etag: the ETag of the published manifest object (tombstones; None: read with a HEAD).
    """
    if pending is None or not pending.intent or m.kind == KIND_ROLLBACK:
        return  # a rollback's marker stays until a later record of the run removes it
    try:
        if m.kind == KIND_TOMBSTONE:
            if etag is None:
                etag = store.head(keys.manifest_key(run_key, m.seq)).etag
            commit = runmark.tomb_key(run_key, m.seq, etag)
        else:
            commit = runmark.live_key(run_key, m.seq, m.run_id)
        try:
            store.put(commit, b"")
        except PreconditionFailed:
            pass
        old = [i.key for i in store.list(runmark.run_prefix(run_key))
               if i.key != commit and (p := runmark.parse(i.key)) is not None and p.seq <= m.seq
               and (p.seq < m.seq or p.intent)]
        # oldest first: a crash part-way leaves the newest of them, never an older verdict alone
        old.sort(key=lambda k: runmark.parse(k).seq)
        if old:
            store.delete_many(old)
    except SnapstoreError:
        pass


def after_rollback_head(store, run_key: str, rollback_seq: int) -> None:
    """A checkpoint was just published on top of the rollback record at ``rollback_seq``: its
    ``r`` marker no longer decides anything (the new checkpoint is the head). Best effort: a
    leftover only makes readers read that run's head."""
    try:
        store.delete_many([runmark.rollback_key(run_key, rollback_seq)])
    except SnapstoreError:
        pass


def list_marks(store) -> dict[str, list[runmark.RunMark]]:
    """Every run marker, grouped by run key (one LIST of ``runmarks/``, paged by 1,000 keys).
    Keys that do not parse are skipped (``verify`` reports them)."""
    out: dict[str, list[runmark.RunMark]] = {}
    for info in store.list(runmark.PREFIX):
        p = runmark.parse(info.key)
        if p is not None:
            out.setdefault(p.run_key, []).append(p)
    return out


def live_run_ids(store, run_keys: list[str], marks: dict, run_key_of, fallback, pool=None) -> list[str]:
    """The run ids of ``run_keys`` whose head is a live checkpoint (in no order).

    Args:
        store: the object store.
        run_keys: the run directories listed under ``runs/``.
        marks: :func:`list_marks` of the same moment.
        run_key_of: ``run id -> run key`` of this repository (checks an id carried in a key).
        fallback: ``list of run keys -> their live run ids``, reading each head (LIST + GET).
        pool: an executor for the confirming LISTs of ``t`` commits (None: one at a time).
    Returns:
        The live run ids. Requests: none for runs whose markers say live; one LIST (max-keys 1) per
        run whose newest commit is a tombstone; ``fallback``'s for the others.
    Raises:
        StoreError, IntegrityError: as ``fallback`` and the store.
    """
    from ...format.ids import decode_name_key

    out: list[str] = []
    slow: list[str] = []
    check: list[tuple[str, runmark.RunMark]] = []
    for rk in run_keys:
        v = runmark.judge(marks.get(rk, []))
        if v.state == "live":
            rid = None
            if rk.startswith("b"):
                try:
                    rid = decode_name_key(rk)
                except (ValueError, UnicodeDecodeError):
                    rid = None
            elif v.newest.name is not None and run_key_of(v.newest.name) == rk:
                rid = v.newest.name
            if rid is None:
                slow.append(rk)  # a long id not carried in the key (or a key that lies)
            else:
                out.append(rid)
        elif v.state == "dead?":
            check.append((rk, v.newest))
        else:
            slow.append(rk)

    def confirm(item) -> str | None:
        rk, mark = item
        for info in store.list(keys.manifests_prefix(rk), limit=1):
            try:
                same = keys.seq_from_manifest_key(info.key) == mark.seq
            except SnapstoreError:
                return rk
            return None if same and info.etag and runmark.etag_tag(info.etag) == mark.tag else rk
        return rk  # no manifest: the directory holds leftovers only; read it the old way

    # the confirming LISTs run beside the fallback's reads; a tombstone no longer the head joins
    # the fallback afterwards
    checked = [pool.submit(confirm, c) for c in check] if pool is not None else None
    if slow:
        out.extend(fallback(slow))
    again = [rk for rk in (f.result() for f in checked) if rk is not None] if checked is not None else \
        [rk for rk in map(confirm, check) if rk is not None]
    if again:
        out.extend(fallback(again))
    return out


def gc_doomed(mark_infos: list, run_seqs: dict, tomb_going: dict, mature: float, grace: float) -> list:
    """The run markers a GC deletes, in the order to delete them (oldest position first, so an
    interrupted GC leaves a run's newest markers, never an older verdict alone).

    Args:
        mark_infos: the :class:`~snapstore.stores.base.ObjectInfo` of every key under
            ``runmarks/`` (listed after ``runs/``).
        run_seqs: run key -> the positions of its manifests in GC's listing.
        tomb_going: run key -> the position of its lone tombstone this GC deletes (the run's last
            record): its markers up to that position go, before the tombstone.
        mature: store time (seconds since the epoch, UTC) before which an object is older than
            the grace period.
        grace: the grace period in seconds (0: no writer is active).
    Returns:
        ``[(key, size)]``: the markers of runs that lose their last record, and the markers older
        than the grace period of runs with no manifest at all (left by a run GC removed, or by a
        first save that never published: its writer publishes within half a grace period).
    """
    out = []
    for info in mark_infos:
        p = runmark.parse(info.key)
        if p is None:
            continue
        old = grace == 0 or info.mtime <= mature
        t = tomb_going.get(p.run_key)
        if (t is not None and p.seq <= t) or (old and not run_seqs.get(p.run_key) and t is None):
            out.append((p.seq, info.key, info.size))
    out.sort()
    return [(k, size) for _, k, size in out]


def marker_problems(marks_keys: list[str]) -> list[str]:
    """The keys under ``runmarks/`` that are not run markers (``verify`` warns about them)."""
    return [k for k in marks_keys if runmark.parse(k) is None]


__all__ = ["Pending", "marks_record", "before_publish", "abandon", "after_publish", "list_marks",
           "live_run_ids", "marker_problems"]
