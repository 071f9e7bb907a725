"""A fault-injecting object store wrapper and a memory-store copier, for crash-consistency tests.

Fault modes of :class:`FaultyStore` (after ``arm(k, mode)``):
    crash  operation k and every later one fail (the process died at k).
    once   only operation k fails (a transient error).
    lost   the k-th *write* (put, put_if_match, delete_many, write_batch) is applied, then raises
           (lost reply).

The wrapper declares only the inner store's ``atomic_batch`` capability (and then has
``write_batch``, one operation), so a save on a SQLite file is tested at one commit.
"""

from __future__ import annotations

import contextlib
import itertools
import threading

from snapstore.errors import SnapstoreError, StoreError
from snapstore.stores import MemoryStore
from snapstore.stores.base import StoreCapabilities, store_capabilities

WRITES = ("put", "put_if_match", "delete_many", "write_batch")
"""The store operations that write; the ``lost`` mode counts only these."""


class InjectedFault(StoreError):
    """The fault this wrapper injects (a StoreError, as a failing backend raises)."""


class FaultyStore:
    """An object store wrapper that fails the k-th operation after :meth:`arm` (see module doc).

    ``inner``: any ObjectStore. ``count``: operations seen since the last ``arm``; ``fired``: faults
    raised; ``ops``: ``"op key"`` strings in order. A failing operation raises :class:`InjectedFault`."""

    def __init__(self, inner):
        self.inner = inner
        self.url = inner.url
        self.stats = inner.stats
        self.capabilities = StoreCapabilities(atomic_batch=store_capabilities(inner).atomic_batch)
        self._lock = threading.Lock()
        self.count = 0
        self.fail_at = None
        self.mode = None
        self.fired = 0
        self.ops: list[str] = []

    def arm(self, k: int | None, mode: str = "crash") -> None:
        with self._lock:
            self.count, self.fail_at, self.mode, self.fired, self.ops = 0, k, mode, 0, []

    def disarm(self) -> None:
        self.arm(None, None)

    def _gate(self, op: str, key: str) -> bool:
        with self._lock:
            if self.mode == "lost" and op not in WRITES:
                return False
            self.count += 1
            self.ops.append(f"{op} {key}")
            if self.fail_at is None:
                return False
            hit = self.count >= self.fail_at if self.mode == "crash" else self.count == self.fail_at
            if hit:
                self.fired += 1
            return hit

    def _fail(self, op, key):
        raise InjectedFault(f"injected fault #{self.count}: {op} {key}")

    def put(self, key, data):
        if self._gate("put", key):
            if self.mode == "lost":
                try:
                    self.inner.put(key, data)
                except SnapstoreError:
                    pass
            self._fail("put", key)
        return self.inner.put(key, data)

    def put_if_match(self, key, data, etag):
        if self._gate("put_if_match", key):
            if self.mode == "lost":
                try:
                    self.inner.put_if_match(key, data, etag)
                except SnapstoreError:
                    pass
            self._fail("put_if_match", key)
        return self.inner.put_if_match(key, data, etag)

    def get(self, key, byte_range=None):
        if self._gate("get", key):
            self._fail("get", key)
        return self.inner.get(key, byte_range)

    def head(self, key):
        if self._gate("head", key):
            self._fail("head", key)
        return self.inner.head(key)

    def list(self, prefix, start_after=None, limit=None):
        if self._gate("list", prefix):
            self._fail("list", prefix)
        return self.inner.list(prefix, start_after=start_after, limit=limit)

    def list_dirs(self, prefix):
        if self._gate("list_dirs", prefix):
            self._fail("list_dirs", prefix)
        return self.inner.list_dirs(prefix)

    def delete_many(self, keys):
        keys = list(keys)
        if self._gate("delete_many", ",".join(keys[:3])):
            if self.mode == "lost":
                self.inner.delete_many(keys)
            self._fail("delete_many", ",".join(keys[:3]))
        return self.inner.delete_many(keys)

    def write_batch(self, puts, deletes=(), deletes_unless=None):
        puts, deletes = list(puts), list(deletes)
        where = ",".join(p.key for p in puts[:3])
        if self._gate("write_batch", where):
            if self.mode == "lost":
                try:
                    self.inner.write_batch(puts, deletes, deletes_unless)
                except SnapstoreError:
                    pass
            self._fail("write_batch", where)
        return self.inner.write_batch(puts, deletes, deletes_unless)

    def close(self):
        pass


_CLONES = itertools.count()


def clone(store, clock=None):
    """An independent copy of a memory store or a SQLite-file store (same keys, bytes, ETags and
    timestamps; a SQLite file is copied with SQLite's backup API beside the original)."""
    from snapstore.stores.sqlite import SqliteStore
    if isinstance(store, SqliteStore):
        import sqlite3
        dst = f"{store.path}.clone{next(_CLONES)}.db"
        with contextlib.closing(sqlite3.connect(store.path)) as a, contextlib.closing(sqlite3.connect(dst)) as b:
            a.backup(b)
        return SqliteStore(dst, fsync=False, clock=clock)
    new = MemoryStore(clock=clock)
    with store._lock:
        new._objects = dict(store._objects)
    return new
