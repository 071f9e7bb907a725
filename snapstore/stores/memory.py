"""In-memory object store, for tests and throwaway repositories."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Callable, Iterable, Iterator

from ..errors import ObjectNotFound, PreconditionFailed
from .base import ObjectInfo, RequestStats, StoreCapabilities, check_key, check_range, slice_range, check_whole_read


class MemoryStore:
    """A thread-safe dict of key -> bytes implementing :class:`~snapstore.stores.base.ObjectStore`.

    Args:
        clock: callable returning the current time in seconds since the epoch (UTC); used for
            object ``mtime``. Tests pass a controllable clock; default ``time.time``.
    """

    def __init__(self, clock: Callable[[], float] | None = None):
        self.url = "memory://"
        self.stats = RequestStats()
        self._clock = clock or time.time
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, str, float]] = {}
        self._etags = itertools.count(1)
        #: What this store is (see :class:`~snapstore.stores.base.StoreCapabilities`): 16
        #: requests worth running in parallel (reads hold one lock, so more threads do not make
        #: them faster; 16, the repository's historical pool size, keeps concurrent code paths
        #: exercised in tests); reads through the thread pool like a remote store's, full run
        #: logs, nothing optional.
        self.capabilities = StoreCapabilities(max_concurrency=16)

    def _store(self, key: str, data: bytes) -> ObjectInfo:
        etag = f'"{next(self._etags):x}"'
        mtime = self._clock()
        self._objects[key] = (bytes(data), etag, mtime)
        self.stats.counts["PUT"] += 1
        self.stats.bytes_up += len(data)
        return ObjectInfo(key, len(data), etag, mtime)

    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key``; raises PreconditionFailed if it exists."""
        check_key(key)
        with self._lock:
            if key in self._objects:
                self.stats.counts["PUT"] += 1
                raise PreconditionFailed(key)
            return self._store(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Replace ``key`` if its ETag is ``etag`` (``None``: only if absent); else PreconditionFailed."""
        check_key(key)
        with self._lock:
            cur = self._objects.get(key)
            if (cur is None) != (etag is None) or (cur is not None and cur[1] != etag):
                self.stats.counts["PUT"] += 1
                raise PreconditionFailed(key)
            return self._store(key, data)

    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """Return the bytes (or a range of them, see :func:`~snapstore.stores.base.check_range`);
        raises ObjectNotFound, InvalidInputError (a malformed range), ObjectTooLarge (a whole read
        of more than its kind of object may be, :func:`~snapstore.stores.base.whole_read_limit`)."""
        check_key(key)
        byte_range = check_range(key, byte_range)
        with self._lock:
            self.stats.counts["GET"] += 1
            try:
                data = self._objects[key][0]
            except KeyError:
                raise ObjectNotFound(key) from None
            if byte_range is None:
                check_whole_read(key, len(data))  # as every store: raises ObjectTooLarge
            data = slice_range(data, byte_range)
            self.stats.bytes_down += len(data)
            return data

    def head(self, key: str) -> ObjectInfo:
        """Return ObjectInfo; raises ObjectNotFound."""
        check_key(key)
        with self._lock:
            self.stats.counts["HEAD"] += 1
            try:
                data, etag, mtime = self._objects[key]
            except KeyError:
                raise ObjectNotFound(key) from None
            return ObjectInfo(key, len(data), etag, mtime)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> Iterator[ObjectInfo]:
        """Yield objects under ``prefix`` in key order (one LIST counted per 1,000 keys)."""
        with self._lock:
            keys = sorted(k for k in self._objects if k.startswith(prefix) and (start_after is None or k > start_after))
            if limit is not None:
                keys = keys[:limit]
            self.stats.counts["LIST"] += max(1, (len(keys) + 999) // 1000)
            infos = [ObjectInfo(k, len(self._objects[k][0]), self._objects[k][1], self._objects[k][2]) for k in keys]
        return iter(infos)

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Yield the distinct next path segments below ``prefix``, sorted."""
        with self._lock:
            self.stats.counts["LIST"] += 1
            segs = {k[len(prefix):].split("/", 1)[0] for k in self._objects
                    if k.startswith(prefix) and "/" in k[len(prefix):]}
        return iter(sorted(segs))

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete keys (missing ones ignored); one DELETE counted per 1,000 keys."""
        keys = [check_key(k) for k in keys]
        with self._lock:
            for k in keys:
                self._objects.pop(k, None)
            self.stats.counts["DELETE"] += (len(keys) + 999) // 1000

    def close(self) -> None:
        """Nothing to release."""

    # test helpers -------------------------------------------------------------------------------
    def raw(self) -> dict[str, bytes]:
        """Return a snapshot ``{key: bytes}`` of every object (for tests)."""
        with self._lock:
            return {k: v[0] for k, v in self._objects.items()}

    def corrupt(self, key: str, data: bytes) -> None:
        """Overwrite ``key`` unconditionally (for tests that simulate damage)."""
        with self._lock:
            old = self._objects[key]
            self._objects[key] = (data, old[1] + "x", old[2])
