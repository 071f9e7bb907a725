"""Counting a restore's sequential round trips by recording which requests run together.

Shared by ``benchmarks/s3.py`` and ``tests/stores/test_s3_manager.py``: wrap a store in :class:`RoundTrips`,
open a manager on the wrapper, call :meth:`RoundTrips.watch` on its repository, read, then look at
:meth:`RoundTrips.rounds`.
"""

from __future__ import annotations

import itertools
import threading


class RoundTrips:
    """A store wrapper recording every request and which *round* it belongs to.

    A round is one parallel batch (a call of ``Locator.prefetch`` (``repo.locator.prefetch``), whose GETs run concurrently in
    the repository's thread pool) or one request made on its own outside any batch. The number of
    rounds is the number of sequential round trips a restore needs when every batch runs fully in
    parallel. ``max_in_flight`` is the highest number of requests seen in progress at once.
    """

    def __init__(self, inner):
        self.inner = inner
        self.url = inner.url
        self.stats = inner.stats
        self.calls: list[tuple] = []  # (round, kind, key)
        self.batch = None
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _do(self, kind, key, fn):
        with self._lock:
            rnd = self.batch if self.batch is not None else ("single", next(self._ids))
            self.calls.append((rnd, kind, key))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return fn()
        finally:
            with self._lock:
                self.in_flight -= 1

    def get(self, key, byte_range=None):
        return self._do("GET", key, lambda: self.inner.get(key, byte_range))

    def head(self, key):
        return self._do("HEAD", key, lambda: self.inner.head(key))

    def list(self, prefix, start_after=None, limit=None):
        return iter(self._do("LIST", prefix, lambda: list(self.inner.list(prefix, start_after, limit))))

    def list_dirs(self, prefix):
        return iter(self._do("LIST", prefix, lambda: list(self.inner.list_dirs(prefix))))

    def watch(self, repo) -> None:
        """Mark each ``repo.locator.prefetch`` call (a fetch wave) as one round."""
        orig = repo.locator.prefetch

        def prefetch(pack_ids, **kw):
            pack_ids = list(pack_ids)
            if self.batch is not None:
                return orig(pack_ids, **kw)
            self.batch = ("batch", next(self._ids))
            try:
                return orig(pack_ids, **kw)
            finally:
                self.batch = None
        repo.locator.prefetch = prefetch

    def rounds(self) -> list[list[tuple]]:
        out: dict = {}
        for rnd, kind, key in self.calls:
            out.setdefault(rnd, []).append((kind, key))
        return list(out.values())
