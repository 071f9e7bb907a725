"""The repository: opening one, and the class that joins the write path, the read path and the run log.

Layer 3. Uses :mod:`snapstore.stores` for bytes and :mod:`snapstore.format` for encodings. Knows
nothing about checkpoint-manager policy (conflict rules, retention); see :mod:`snapstore.manager.facade`.

:class:`Repository` is made of one mixin per concept, each in its own module:

* :mod:`snapstore.repo.readpath` (:class:`ReadPath`): the pack cache, locating entries (segment index,
  forwarding lookups), reading trees and restores;
* :mod:`snapstore.repo.prepare` (:class:`WritePath`): building a save in memory (dedup, pack), with
  :class:`ListState` and :class:`PreparedSave`;
* :mod:`snapstore.repo.log.records` (:class:`LogRecords`): manifests and index records one at a time,
  publishing, finding a checkpoint.

This module keeps opening and creating a repository and the keys of user-supplied names, and
re-exports the names other modules import from here.

Key concepts (docs/format.md has the byte-level spec):

* A message is a *chunk*: its exact JSON; its content id is keyed blake3-128 of those bytes. Messages
  larger than ``cdc_threshold`` are split into FastCDC pieces plus a *pieces* entry.
* A checkpoint's message list is a Merkle tree (:mod:`snapstore.format.tree`); each save stores the
  tree's open right edge (*state*) and the nodes it sealed.
* Everything new in a save goes into one *pack* (one PUT). The data block is zstd-compressed with a
  raw-content dictionary made of the messages just before the first new one.
* One *manifest* per checkpoint, under a key holding the inverted sequence number, written
  create-only: the sequence number is the compare-and-swap.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from ..errors import InvalidInputError, ObjectNotFound, PreconditionFailed, RepositoryError, RepositoryNotFound
from ..format import keys
from ..format.ids import Hasher, name_key
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE
from ..format.config import RepoConfig, check_settings
from ..format.pack import Pack
from ..format.tree import TreeParams
from .log.records import LogRecords
from .readpath import ReadPath, _ReadCtx
from ..stores.base import ObjectStore, max_concurrency
from .prepare import RECENT_RAW_KEEP, ListState, PreparedSave, WritePath, _json_digest


class Repository(ReadPath, WritePath, LogRecords):
    """A snapstore repository on an object store.

    Use :meth:`open` (creates the repository on first use) or :meth:`init` (explicit settings).
    Thread-safe.

    Args:
        store: the object store.
        config: the repository config read from ``config``.
        cache_bytes: bound on the in-memory cache of parsed packs (bytes).
        max_workers: threads for parallel GETs when restoring.
    """

    def __init__(self, store: ObjectStore, config: RepoConfig, cache_bytes: int = 256 << 20, max_workers: int | None = None):
        self.store = store
        self.config = config
        self.hasher = Hasher(config.key)
        self.params = TreeParams(config.leaf_bits, config.node_bits, config.max_items)
        self._cache: OrderedDict[bytes, Pack] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        self._lock = threading.RLock()
        if max_workers is None:
            max_workers = max_concurrency(store, 64)
        self._max_workers = max(1, max_workers)
        self._pool: ThreadPoolExecutor | None = None
        self._dicts: dict = {}
        self._resolving = threading.local()  # (pack id, DictSpec) pairs whose dictionary this thread is reading
        self._fwd: dict = {}
        self._gone: set = set()  # packs found missing (retired by GC): go straight to forwarding
        self._hints: dict | None = None  # retired pack -> targets, from gc/fwd-cache (advisory)
        self._hints_at = 0.0
        self._hints_lock = threading.Lock()
        self._nodes: dict = {}  # node id -> decoded (level, items)
        self._where: dict = {}  # (type, id) -> id of a cached tier pack holding it (format 2 segments)
        self._seg_errors: dict = {}  # segment pack -> why the last prefetch_segments could not read it
        self._corrupt: dict = {}  # pack -> IntegrityError: found corrupt (read twice); readers use other copies
        self._whole_only = 0  # > 0 inside ReadPath.whole_packs(): no ranged pack reads

    # ------------------------------------------------------------------------------------------
    # opening

    @classmethod
    def open(cls, store: ObjectStore, create: bool = True, **settings) -> "Repository":
        """Open the repository in ``store``; create it if absent and ``create`` is True.

        Args:
            store: object store.
            create: initialise an empty location (with ``settings``) instead of failing.
            **settings: :class:`RepoConfig` settings used only when creating.
        Raises:
            RepositoryError: no repository there and ``create`` is False.
            UnsupportedFormatError: the repository was written by a newer format version.
            IntegrityError: the config object is corrupt.
        """
        try:
            data = store.get(keys.CONFIG)
        except ObjectNotFound:
            if not create:
                raise RepositoryNotFound(f"no snapstore repository at {store.url} (run 'snapstore init')") from None
            return cls.init(store, exist_ok=True, **settings)
        return cls(store, RepoConfig.from_bytes(keys.CONFIG, data))

    @classmethod
    def init(cls, store: ObjectStore, exist_ok: bool = False, **settings) -> "Repository":
        """Create a repository with ``settings`` (see :class:`RepoConfig`); create-only.

        Raises:
            RepositoryError: one exists already and ``exist_ok`` is False.
            InvalidInputError: an unknown or out-of-range setting.
        """
        cfg = RepoConfig(repo_id=os.urandom(8).hex(), key=os.urandom(32), created=datetime.now(timezone.utc))
        cfg.removals = 1  # this version records every removal of log records (§16)
        for k in settings:
            if k not in RepoConfig._SETTINGS:
                raise InvalidInputError(f"unknown repository setting: {k}")
        why = check_settings({k: settings.get(k, getattr(cfg, k)) for k in RepoConfig._SETTINGS})
        if why is not None:
            raise InvalidInputError(f"repository {why}")
        for k, v in settings.items():
            setattr(cfg, k, v)
        try:
            store.put(keys.CONFIG, cfg.to_bytes())
        except PreconditionFailed:
            if not exist_ok:
                raise RepositoryError(f"a repository already exists at {store.url}") from None
            return cls(store, RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG)))
        return cls(store, cfg)

    def close(self, close_store: bool = True) -> None:
        """Shut down the thread pool and (unless ``close_store`` is False) the store."""
        if self._pool:
            self._pool.shutdown(wait=False)
        if close_store:
            self.store.close()

    # ------------------------------------------------------------------------------------------
    # keys for user-supplied names

    def run_key(self, run_id: str) -> str:
        """Key segment of a run id (see :func:`snapstore.format.ids.name_key`)."""
        return name_key(run_id, self.hasher)

    def checkpoint_key(self, checkpoint_id: str) -> str:
        """Key segment of a checkpoint id."""
        return name_key(checkpoint_id, self.hasher)


__all__ = ["Repository", "ListState", "PreparedSave", "KIND_CHECKPOINT", "KIND_ROLLBACK", "KIND_TOMBSTONE",
           "RECENT_RAW_KEEP", "ReadPath", "WritePath", "LogRecords", "_ReadCtx", "_json_digest"]
