"""Shared objects on the write path: a large message of a run's first save stored once per epoch.

Layer 2, the :class:`SharedObjects` part of :class:`snapstore.repo.repository.Repository`
(``repo.shared``). The save preparer asks :meth:`SharedObjects.ensure` for a message of at least
:data:`~snapstore.format.shared.SHARED_MIN` bytes in a run's first save: the part finds (one GET,
then remembered for a while) or writes (one create-only PUT) the shared pack of that message and
the current epoch, and the save references it instead of storing the message (docs/format.md §29).
Readers need nothing of this module: a shared pack is a pack, listed as a foreign segment of the
run's records and named by its refs' location hints.
"""

from __future__ import annotations

import threading
import time

from ..errors import ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.manifest import VIEW_TTL
from ..format.pack import T_CHUNK, Pack, PackBuilder
from ..format.shared import SHARED_MIN, epoch_at, epoch_end, shared_epoch, shared_pack_id

SHARED_LEVEL = 19
"""zstd level of a shared pack: written once for many runs, so compressed hard (about 3 ms for
a 20 kB message)."""


class SharedObjects:
    """Finds or writes shared packs (docs/format.md §29): one part of
    :class:`~snapstore.repo.repository.Repository` (``repo.shared``).

    Args:
        repo: the repository (its ``store``, ``hasher``, ``config``, ``cache`` and ``entries``).

    Attributes:
        enabled: False turns sharing off (every message is stored in its run's own pack).
        dictionaries: False stops a run's own packs from compressing their array blocks against
            the shared message its records list (block kind 6, docs/format.md §8; benchmarks and
            tests compare with it).
        wall: the wall clock, seconds since 1970 UTC (the epoch of a save; tests replace it).
        clock: a monotonic clock in seconds (how long a confirmation is trusted; tests replace it).
        trust: seconds a confirmed shared pack is reused without asking the store again
            (:data:`~snapstore.format.manifest.VIEW_TTL`, at most half the writer's grace period:
            set by the manager).
    """

    def __init__(self, repo):
        self.repo = repo
        self.enabled = True
        self.dictionaries = True
        self.wall = time.time
        self.clock = time.monotonic
        self.trust = VIEW_TTL
        self._lock = threading.Lock()
        self._confirmed: dict[bytes, float] = {}  # shared pack id -> monotonic time of its confirmation

    def candidate(self, raw: bytes) -> bool:
        """Is a message of exact JSON ``raw`` (bytes) in a run's first save stored shared? At least
        :data:`SHARED_MIN` bytes and one chunk (at most ``cdc_threshold``: a larger one is cut into
        pieces, deduplicated within its run only)."""
        return self.enabled and SHARED_MIN <= len(raw) <= self.repo.config.cdc_threshold

    def epoch_now(self) -> int:
        """The current epoch by :attr:`wall` (:func:`~snapstore.format.shared.epoch_at`)."""
        return epoch_at(self.wall())

    def expired(self, pack_ids, grace: float) -> bool:
        """Has the time to publish a reference to one of the shared packs ``pack_ids`` passed?
        A writer references a shared pack of epoch ``e`` only in a record it publishes before the
        end of ``e`` plus ``grace / 4`` (``grace``: the writer's GC grace period, seconds; 0: never
        expires, GC runs only while writers are idle). docs/format.md §29."""
        if grace <= 0:
            return False
        now = self.wall()
        return any(now >= epoch_end(shared_epoch(p)) + grace / 4 for p in pack_ids if shared_epoch(p) is not None)

    def ensure(self, content_id: bytes, raw: bytes) -> bytes | None:
        """The shared pack of message ``raw`` (content id ``content_id``, 16 bytes) in the current
        epoch, found or written; None when the message is to be stored in the save's own pack (the
        id is taken by a pack that does not hold this message, or the store failed).

        A pack confirmed less than :attr:`trust` seconds ago (by this part) is not asked for again;
        otherwise one GET (the pack is parsed and its entry checked against ``raw``) and, if it is
        missing, one create-only PUT of a new pack holding the message alone.

        Returns:
            The shared pack's 8-byte id, or None.
        """
        repo = self.repo
        try:
            pid = shared_pack_id(repo.hasher, content_id, self.epoch_now())
        except ValueError:
            return None
        with self._lock:
            t = self._confirmed.get(pid)
        if t is not None and self.clock() - t < self.trust:
            return pid
        key = keys.pack_key(pid)
        t0 = self.clock()
        try:
            try:
                data = repo.store.get(key)
            except ObjectNotFound:
                pb = PackBuilder(pid, level=SHARED_LEVEL)
                pb.add(T_CHUNK, content_id, raw)
                data, _ = pb.build()
                try:
                    repo.store.put(key, data)
                except PreconditionFailed:
                    data = repo.store.get(key)  # written meanwhile by another writer: check it as found
            if not self._holds(key, pid, data, content_id, raw):
                return None
        except SnapstoreError:
            return None  # no sharing for this save: the message goes into its own pack
        with self._lock:
            if len(self._confirmed) > 4096:
                self._confirmed.clear()
            self._confirmed[pid] = t0
        return pid

    def dictionary(self, pack_ids) -> tuple[bytes, bytes, bytes] | None:
        """The dictionary a run's own pack may compress its array blocks with (docs/format.md §8,
        block kind 6; §29, "Dictionaries"): the message of the first shared pack among
        ``pack_ids`` (8-byte ids, in segment order: the shared packs the record publishing the pack
        lists) that is cached and holds one chunk. No request is made: a shared pack a save lists
        was confirmed by it or read in its segment wave.

        Returns:
            ``(shared pack id, content id, message bytes)``, or None (none at hand, or sharing off).
        """
        if not (self.enabled and self.dictionaries):
            return None
        repo = self.repo
        for pid in pack_ids:
            if shared_epoch(pid) is None:
                continue
            p = repo.cache.get(pid)
            if p is None:
                continue
            chunks = [e for e in p.entries.values() if e.type == T_CHUNK]
            if len(chunks) != 1 or len(p.entries) != 1 or any(b.shared is not None for b in p.blocks):
                continue
            try:
                raw = repo.entries.read_entry_in(p, T_CHUNK, chunks[0].id)
            except (SnapstoreError, KeyError):
                continue
            return pid, chunks[0].id, raw
        return None

    def _holds(self, key: str, pid: bytes, data: bytes, content_id: bytes, raw: bytes) -> bool:
        """Does pack ``data`` (stored under ``key``) hold message ``raw`` under ``content_id``?
        (A different pack under the id, a 1 in 2^32 clash of the id's hash, or damage: no.) A pack
        that does is cached for the reads that follow."""
        try:
            p = Pack.parse(key, data, pid)
            if (T_CHUNK, content_id) not in p.entries or \
                    self.repo.entries.read_entry_in(p, T_CHUNK, content_id) != raw:
                return False
        except (SnapstoreError, KeyError, ValueError):
            return False
        self.repo.cache.put(p)
        return True
