"""The run log one record at a time: manifests, index records, publishing, finding a checkpoint.

Layer 3, the :class:`LogRecords` mixin of :class:`snapstore.repo.repository.Repository`. A run's log is
its manifests, one object per checkpoint under a key holding the inverted sequence number, written
create-only (the sequence number is the compare-and-swap); index records map a caller-supplied
checkpoint id to its sequence number (docs/format.md §11, §17). Reading the log in bulk (listing a
run through log segments) is :mod:`snapstore.repo.log.bulk`.
"""

from __future__ import annotations

import os
import threading
import time

from ...errors import (CheckpointNotFound, CompactedRecordError, ConflictError, IntegrityError, ObjectNotFound,
                     PreconditionFailed, SnapstoreError)
from ...format import keys
from ...format.logseg import logseg_prefix, parse_logseg_key, seg_lo
from .bundlelog import read_copies
from ...format.ids import seq_hint
from ...format.removals import encode_removal_records, removals_key, to_ranges
from ...format.manifest import FREE_AFTER, KIND_CHECKPOINT, VOID_RECORD, Manifest, is_void, record_positions
from ...format.index import decode_index, encode_index


_UNSET = object()


class LogRecords:
    """Run-log records of :class:`~snapstore.repo.repository.Repository`: manifests and index records
    (a mixin; uses the repository's store and key helpers)."""

    # ------------------------------------------------------------------------------------------
    # manifests and index records

    def manifest_key(self, run_key: str, seq: int) -> str:
        """Key of manifest ``seq`` of a run."""
        return keys.manifest_key(run_key, seq)

    def read_manifest_key(self, key: str, light: bool = False) -> Manifest:
        """Read and verify one manifest (also that it belongs under ``key``: its run and sequence
        number must match); ``light``: see :meth:`Manifest.from_bytes`. Raises ObjectNotFound,
        IntegrityError (:class:`~snapstore.errors.CompactedRecordError` for a compacted record, a
        0-byte manifest, with no valid copy: docs/format.md §14)."""
        return self.manifest_from_object(key, self.store.get(key), light)

    def manifest_from_object(self, key: str, data: bytes, light: bool = False) -> Manifest:
        """:meth:`read_manifest_key` for the object bytes ``data`` already read from ``key`` (a
        0-byte object, a compacted record, is read from its log segment copy)."""
        if not data:
            return self.read_compacted(key, light)
        if is_void(len(data)):
            raise ObjectNotFound(key, f"no record at {key}: a void record (a deleted record whose log position "
                                 "stays taken, docs/format.md §15)")
        m = Manifest.from_bytes(key, data, light)
        where = keys.parse_key(key)
        if (where.kind == "manifest" and (keys.seq_from_manifest_key(key) != m.seq
                                          or self.run_key(m.run_id) != where.run_key)):
            raise IntegrityError(key, f"holds the manifest of run {m.run_id!r} position {m.seq}, not of this key")
        return m

    def read_compacted(self, key: str, light: bool = False) -> Manifest:
        """Read the compacted record (0-byte manifest, docs/format.md §14) at manifest ``key``: its
        content is its copy in a log segment covering its position. LISTs the run's log segments and
        GETs the covering ones, highest level first, until one holds a valid copy of this run at
        this position (decoded and checked as a manifest).

        Args:
            key: ``runs/<R>/m/<inverted seq>``.
            light: see :meth:`Manifest.from_bytes`.
        Returns:
            The record's Manifest.
        Raises:
            CompactedRecordError: no covering segment holds a valid copy (names ``key``).
            StoreError: the store failed.
        """
        where = keys.parse_key(key)
        try:
            seq = keys.seq_from_manifest_key(key)
        except (ValueError, IndexError):
            seq = None
        if where.kind != "manifest" or seq is None:
            raise CompactedRecordError(key, "compacted record without a copy (not a run-log key)")
        run_key = where.run_key
        cover = []
        for info in self.store.list(logseg_prefix(run_key)):
            p = parse_logseg_key(info.key)
            if p is not None and seg_lo(*p) <= seq <= p[0]:
                cover.append((p[1], info.key))
        why, unreadable = "no log segment covers its position", None
        for _, lk in sorted(cover, reverse=True):
            try:
                recs = read_copies(self.store, lk, self)
            except SnapstoreError as e:
                why, unreadable = f"log segment {lk} is unreadable ({e})", (lk, str(e))
                continue
            unreadable = None
            for c in recs:
                if c.seq != seq:
                    continue
                try:
                    m = c.manifest(f"{key} (copy in {lk})", light)
                except SnapstoreError as e:
                    why = f"its copy in {lk} does not decode ({e})"
                    break
                if m.seq != seq or self.run_key(m.run_id) != run_key:
                    why = f"its copy in {lk} is the record of run {m.run_id!r} position {m.seq}"
                    break
                return m
            else:
                why = f"log segment {lk} holds no copy of position {seq}"
        err = CompactedRecordError(key, f"compacted record without a copy: {why}")
        err.segment = unreadable  # (key, error) of the unreadable log segment that was its last hope, or None
        raise err

    def head(self, run_key: str, listed: list | None = None) -> Manifest | None:
        """Return the newest record of the run (one LIST with limit 1, one GET), or None.

        Void records (docs/format.md §15) are not records: writers never leave one newest, so
        only a damaged log makes this list further.

        Args:
            run_key: the run's key segment.
            listed: the first page of the run's manifest keys (ObjectInfos, newest first), listed
                already by the caller (then no LIST is sent unless its newest record is gone).
        Raises:
            IntegrityError: the newest record is corrupt; StoreError: a request failed.
        """
        prefix = keys.manifests_prefix(run_key)
        for attempt in range(8):
            if attempt == 0 and listed is not None:
                info = next((i for i in listed if not is_void(i.size)), None)
                if info is None and not listed:
                    return None
                if info is None:  # only void records in the page: list on, as below
                    info = listed[0]
            else:
                info = next(iter(self.store.list(prefix, limit=1)), None)
            if info is not None and is_void(info.size):
                info = next((i for i in self.store.list(prefix) if not is_void(i.size)), None)
            if info is None:
                return None
            try:
                return self.read_manifest_key(info.key)
            except ObjectNotFound:
                continue  # deleted (or voided) between LIST and GET: look again
        raise ConflictError(f"the log of run key {run_key!r} keeps changing under its newest record; try again")

    def manifest_seqs(self, run_key: str) -> list[int]:
        """Return the sequence numbers of the run's records, newest first (LIST only; void
        records, docs/format.md §15, are left out)."""
        return record_positions(self.store.list(keys.manifests_prefix(run_key)))

    def store_time(self) -> float:
        """The store's current time (seconds since the epoch, UTC): the mtime of a probe object
        written and deleted at once (one PUT and one DELETE). Ages of objects are measured on
        this clock, never on the local one."""
        key = f"gc/clock-{os.urandom(8).hex()}"
        info = self.store.put(key, b"")
        self.store.delete_many([key])
        return info.mtime

    def store_clock(self):
        """A callable giving the store's current time (seconds since the epoch, UTC) for many
        removals: the first call probes the store once (:meth:`store_time`), later calls add the
        local monotonic time elapsed since that probe's reply. It never runs ahead of the store's
        clock (the probe's mtime was taken before its reply arrived), so a record is never taken
        for older than it is; thread-safe."""
        lock, base = threading.Lock(), []

        def now() -> float:
            with lock:
                if not base:
                    t = self.store_time()
                    base.append((t, time.monotonic()))
                t, m = base[0]
            return t + (time.monotonic() - m)
        return now

    def manifest_infos(self, run_key: str, seqs) -> dict:
        """``{seq: ObjectInfo}`` of the run's manifest objects at positions ``seqs`` that exist
        (void records included): a HEAD each for a few, else one LIST over their range."""
        want = set(seqs)
        if not want:
            return {}
        if len(want) <= 4:
            def one(s):
                try:
                    return s, self.store.head(keys.manifest_key(run_key, s))
                except ObjectNotFound:
                    return s, None
            return {s: i for s, i in self.pool.map(one, sorted(want)) if i is not None}
        hi, lo = max(want), min(want)
        after = keys.manifest_key(run_key, hi + 1) if hi + 1 < keys.SEQ_MAX else None
        out = {}
        for info in self.store.list(keys.manifests_prefix(run_key), start_after=after):
            s = keys.seq_from_manifest_key(info.key)
            if s < lo:
                break
            if s in want:
                out[s] = info
        return out

    def remove_records(self, run_key: str, entries: list[tuple[int, str | None]], infos: dict | None = None,
                       store_now=None) -> None:
        """Remove the run's log records at ``[(seq, checkpoint id or None)]`` (and the index
        records of caller-supplied ids) without freeing a position a stale writer may aim at.

        Index records go first, so a crash never leaves a live-looking index without its
        manifest being the one that is gone; then a removal record naming the positions (§16),
        so no gap they leave looks like a lost manifest. A record older than :data:`FREE_AFTER` (store time)
        is deleted; a younger one is replaced by a void record (compare-and-swap on the ETag just
        read), so its position stays taken: a writer that still believes the record before it is
        the run's newest fails its create-only write there instead of publishing a checkpoint
        nobody sees (docs/format.md §15). Positions with no object are skipped.

        Requests: the index records' DeleteObjects, the removal record's PUT and the store-clock
        probe's PUT go out together; then the deletions, the void records and the probe's DELETE
        together: two round trips (three when the positions' ObjectInfos must be read first).

        Args:
            run_key: the run's key segment.
            entries: ``(seq, checkpoint id)`` pairs; the id (None for rollback records and
                tombstones) names the index record to delete.
            infos: ``{seq: ObjectInfo}`` of the run's manifest objects (size, ETag, mtime) from a
                listing the caller made after the record that hides them was decided on (e.g.
                :func:`snapstore.repo.log.bulk.list_infos`), or None: the range is listed here
                (:meth:`manifest_infos`). A record rewritten since that listing is still handled
                right: a void write is conditional on the ETag (re-read on a change), a delete of
                a gone key is a no-op.
            store_now: a callable giving the store's current time (seconds, as
                :meth:`store_time`; e.g. :meth:`store_clock`'s), or None: one probe here (in
                parallel with the removal record).
        Raises:
            StoreError: a request failed (what was removed stays removed; the rest is left).
        """
        idx = [keys.index_key(run_key, self.checkpoint_key(c)) for s, c in entries if c and seq_hint(c) != s]
        want = {s for s, _ in entries}
        if infos is None:
            infos = self.manifest_infos(run_key, want)
        else:
            infos = {s: infos[s] for s in sorted(want) if s in infos}
        if not infos:
            if idx:
                self.store.delete_many(idx)
            return
        pool = self.pool
        f_idx = pool.submit(self.store.delete_many, idx) if idx else None
        f_probe = pool.submit(self._clock_probe) if store_now is None else None
        try:
            self.record_removals(run_key, infos)
        except BaseException:
            if f_idx is not None:
                f_idx.exception()
            if f_probe is not None and f_probe.exception() is None:
                try:
                    self.store.delete_many([f_probe.result()[0]])
                except SnapstoreError:
                    pass  # an empty probe object left under gc/ (as a failed DELETE of store_time leaves)
            raise
        if f_idx is not None:
            f_idx.result()  # index records go before any manifest (raises if they could not)
        probe_key, probe_time = f_probe.result() if f_probe is not None else (None, store_now())
        # ages on the store's clock (never below the newest timestamp just listed)
        now = max(probe_time, max(i.mtime for i in infos.values()))
        old = [s for s, i in infos.items() if now - i.mtime >= FREE_AFTER]
        young = [(s, i) for s, i in infos.items() if now - i.mtime < FREE_AFTER and not is_void(i.size)]
        futs = [pool.submit(self.store.delete_many, [probe_key])] if probe_key is not None else []
        if old:  # DeleteObjects batches of up to 1,000 keys, in parallel (a prune of many)
            doomed = [keys.manifest_key(run_key, s) for s in sorted(old)]
            futs += [pool.submit(self.store.delete_many, doomed[i:i + 1000]) for i in range(0, len(doomed), 1000)]
        futs += [pool.submit(self._void, run_key, s, i) for s, i in young]
        for f in futs:
            f.result()

    def _clock_probe(self) -> tuple[str, float]:
        """Write a probe object: ``(its key, its mtime on the store's clock)``; the caller deletes it."""
        key = f"gc/clock-{os.urandom(8).hex()}"
        return key, self.store.put(key, b"").mtime

    def record_removals(self, run_key: str, positions=(), ranges=None, dry_run: bool = False) -> list[int]:
        """Write removal records (docs/format.md §16) naming ``positions`` of the run (or the
        merged inclusive ``ranges`` ``[[lo, hi], ...]``), create-only, before they are deleted:
        ``verify`` then tells their gap from lost manifests.

        Returns:
            The size in bytes of each record written (with ``dry_run``: that would be written).
        Raises:
            StoreError: the write failed (nothing may be deleted then).
        """
        ranges = to_ranges(positions) if ranges is None else ranges
        sizes = []
        for hi, data in encode_removal_records(ranges):
            if not dry_run:
                self.store.put(removals_key(run_key, hi), data)
            sizes.append(len(data))
        return sizes

    def _void(self, run_key: str, seq: int, info) -> None:
        """Replace the record at ``seq`` by a void record (compare-and-swap, re-read on a change)."""
        key = keys.manifest_key(run_key, seq)
        for _ in range(8):
            if is_void(info.size):
                return
            try:
                self.store.put_if_match(key, VOID_RECORD, info.etag)
                return
            except PreconditionFailed:
                try:
                    info = self.store.head(key)  # changed meanwhile (a compacted record written): again
                except ObjectNotFound:
                    return  # removed by another deleter
        raise ConflictError(f"{key} keeps changing; could not void it")

    def publish(self, run_key: str, m: Manifest, revives: bool = False, pending=_UNSET) -> bytes:
        """Write manifest ``m`` create-only at its sequence number; return the bytes written.

        A refusal is resolved by reading the object back: if it carries our write id, an earlier
        attempt of ours landed and this succeeds. A record that changes the run's liveness (a
        tombstone; a checkpoint with ``revives``) gets its run markers (docs/format.md §13,
        :mod:`snapstore.repo.log.runmarks`): an intent before, a commit after.

        Args:
            run_key: the run's key segment.
            m: the record.
            revives: ``m`` is a checkpoint whose log predecessor (the record at ``m.seq - 1``, or
                none) leaves the run with no live checkpoint.
            pending: what :func:`snapstore.repo.log.runmarks.before_publish` already wrote for ``m`` (a
                save writes it beside its pack); by default it is written here.
        Raises:
            PreconditionFailed: another writer holds that sequence number.
            StoreError: the store failed (also: the intent marker could not be written).
        """
        from . import runmarks

        key = keys.manifest_key(run_key, m.seq)
        data = m.to_bytes()
        if pending is _UNSET:
            pending = runmarks.before_publish(self.store, run_key, m, revives)
        etag = None
        try:
            etag = getattr(self.store.put(key, data), "etag", None)
        except PreconditionFailed:
            try:
                other = self.read_manifest_key(key)
            except ObjectNotFound:
                runmarks.abandon(self.store, pending)
                raise PreconditionFailed(key, f"sequence {m.seq} of run {m.run_id!r} was taken and released") from None
            if other.write_id != m.write_id:
                runmarks.abandon(self.store, pending)
                raise
        runmarks.after_publish(self.store, run_key, m, pending, etag)
        return data

    def write_index(self, run_key: str, checkpoint_id: str, seq: int, write_id: str) -> bool:
        """Record ``checkpoint_id -> seq`` create-only (replacing a dangling record by compare-and-swap).

        Generated ids name their sequence number and need no record: nothing is written for them.

        Returns:
            True if a record was written (or already ours), False if none was needed.
        Raises:
            ConflictError: the run already has a live checkpoint with this id.
        """
        hint = seq_hint(checkpoint_id)
        if hint == seq:
            return False
        if hint is not None:
            # a caller-supplied id shaped like a generated one: it may name a live checkpoint
            try:
                m = self.read_manifest_key(keys.manifest_key(run_key, hint))
                if m.kind == KIND_CHECKPOINT and m.checkpoint_id == checkpoint_id:
                    raise ConflictError(f"run {m.run_id!r} already has a checkpoint with id {checkpoint_id!r}")
            except (ObjectNotFound, ValueError):
                pass
        key = keys.index_key(run_key, self.checkpoint_key(checkpoint_id))
        data = encode_index(seq, write_id)
        try:
            self.store.put(key, data)
            return True
        except PreconditionFailed:
            pass
        info = self.store.head(key)
        old_seq, old_wid = decode_index(key, self.store.get(key))
        if old_wid == write_id:
            return True
        try:
            m = self.read_manifest_key(keys.manifest_key(run_key, old_seq))
            if m.kind == KIND_CHECKPOINT and m.checkpoint_id == checkpoint_id:
                raise ConflictError(f"run {m.run_id!r} already has a checkpoint with id {checkpoint_id!r}")
        except ObjectNotFound:
            pass
        self.store.put_if_match(key, data, info.etag)
        return True

    def read_index(self, run_key: str, checkpoint_id: str) -> int | None:
        """Return the sequence number recorded for ``checkpoint_id``, or None."""
        key = keys.index_key(run_key, self.checkpoint_key(checkpoint_id))
        try:
            return decode_index(key, self.store.get(key))[0]
        except ObjectNotFound:
            return None

    def find_checkpoint(self, run_key: str, checkpoint_id: str) -> Manifest:
        """Return the manifest of ``checkpoint_id`` in the run (index record, then manifest).

        Falls back to scanning the run's manifests when the index record is missing.

        Raises:
            CheckpointNotFound: no such checkpoint.
        """
        seq = seq_hint(checkpoint_id)
        if seq is not None:
            try:
                m = self.read_manifest_key(keys.manifest_key(run_key, seq))
                if m.kind == KIND_CHECKPOINT and m.checkpoint_id == checkpoint_id:
                    return m
            except (ObjectNotFound, ValueError):
                pass
        seq = self.read_index(run_key, checkpoint_id)
        if seq is not None:
            try:
                m = self.read_manifest_key(keys.manifest_key(run_key, seq))
                if m.kind == KIND_CHECKPOINT and m.checkpoint_id == checkpoint_id:
                    return m
            except ObjectNotFound:
                pass
        for s in self.manifest_seqs(run_key):
            try:
                m = self.read_manifest_key(keys.manifest_key(run_key, s))
            except ObjectNotFound:
                continue
            if m.kind == KIND_CHECKPOINT and m.checkpoint_id == checkpoint_id:
                return m
        raise CheckpointNotFound(f"checkpoint {checkpoint_id!r} not found")

