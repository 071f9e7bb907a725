"""The repository: opening one, and the class that joins the write path, the read path and the run log.

Layer 3. Uses :mod:`snapstore.stores` for bytes and :mod:`snapstore.format` for encodings. Knows
nothing about checkpoint-manager policy (conflict rules, retention); see :mod:`snapstore.manager.facade`.

:class:`Repository` is composed of named parts, each in its own module, each owning its state:

* ``cache`` (:class:`~snapstore.repo.packcache.PackCache`): parsed packs (LRU with a byte budget),
  the repository's lock and thread pool, packs found corrupt or gone;
* ``segments``, ``forwarding``, ``locator`` (:mod:`snapstore.repo.locate`): the segment index, the
  forwarding lookups, and finding the pack holding an entry (parallel fetch waves);
* ``entries`` (:mod:`snapstore.repo.entries`): an entry's bytes, dictionaries resolved;
* ``trees`` (:mod:`snapstore.repo.trees`): spines, nodes, message lists, a writer's ListState;
* ``arrays`` (:mod:`snapstore.repo.arrays`): the one-pass read of a list from array blocks;
* ``values`` (:mod:`snapstore.repo.values`): session-state value trees;
* ``saves`` (:mod:`snapstore.repo.prepare`): building a save in memory (dedup, pack);
* ``shared`` (:mod:`snapstore.repo.shared`): shared objects, a large message stored once across runs;
* and, as a mixin without state of its own, :class:`~snapstore.repo.log.records.LogRecords`:
  manifests and index records one at a time, publishing, finding a checkpoint.

The methods below the parts are the repository's public read and write API; each is the named
part's method (see there for arguments, returns and raises). This module also opens and creates
repositories and keys user-supplied names.

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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from ..errors import InvalidInputError, ObjectNotFound, PreconditionFailed, RepositoryError, RepositoryNotFound
from ..format import keys
from ..format.ids import Hasher, name_key
from ..format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest
from ..format.config import NEW_SEG_FANOUT, RepoConfig, check_settings
from ..format.pack import T_STATE, Pack
from ..format.tree import Ref, Spine, TreeParams
from ..format.valuetree import ValueTree
from ..stores.base import ObjectStore, max_concurrency
from ..stores import crypt
from .arrays import ArrayReader
from .entries import EntryReader, ReadContext
from .liststate import RECENT_RAW_KEEP, ListState, PreparedSave
from .bundles import BundleCatalogue
from .locate import ForwardLookup, Locator, SegmentIndex
from .log.records import LogRecords
from .packcache import DEFAULT_LIMIT, PackCache
from .prepare import SavePreparer
from .shared import SharedObjects
from .trees import TreeReader
from .values import ValueReader


def _unlocked(store: ObjectStore, cfg: RepoConfig) -> RepoConfig:
    """``cfg`` with its content key, for an encrypted repository the one its store unlocked.

    Raises:
        EncryptionError: the repository is encrypted and ``store`` cannot decrypt it.
    """
    crypt.raise_if_locked(store, cfg)
    if cfg.encryption is not None:
        cfg.key = store.content_key
    return cfg


class Repository(LogRecords):
    """A snapstore repository on an object store.

    Use :meth:`open` (creates the repository on first use) or :meth:`init` (explicit settings).
    Thread-safe.

    Args:
        store: the object store.
        config: the repository config read from ``config``.
        cache_bytes: bound on the in-memory cache of parsed packs (bytes).
        max_workers: threads for parallel GETs when restoring.
    """

    def __init__(self, store: ObjectStore, config: RepoConfig, cache_bytes: int = DEFAULT_LIMIT, max_workers: int | None = None):
        self.store = store
        self.config = config
        self.hasher = Hasher(config.key)
        self.params = TreeParams(config.leaf_bits, config.node_bits, config.max_items)
        if max_workers is None:
            max_workers = max_concurrency(store, 64)
        self.cache = PackCache(store, cache_bytes, max_workers)
        self.segments = SegmentIndex(self.cache)
        self.forwarding = ForwardLookup(store, self.cache)
        self.locator = Locator(store, self.cache, self.segments, self.forwarding)
        self.bundles = BundleCatalogue(store)  # archive bundles (docs/format.md §28)
        self.cache.key_of = self.bundles.key
        self.forwarding.archived = self.bundles.forward
        self.forwarding.known_archived = self.bundles.known
        self.entries = EntryReader(self)
        self.cache.shared_dicts = self.entries.shared_dict  # array blocks of kind 6 (docs/format.md §8)
        self.trees = TreeReader(self)
        self.arrays = ArrayReader(self)
        self.values = ValueReader(self)
        self.saves = SavePreparer(self)
        self.shared = SharedObjects(self)  # shared objects: cross-run dedup (docs/format.md §29)

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
                if next(iter(store.list(keys.PACKS)), None) is not None:  # (one LIST, on this error path only)
                    raise RepositoryNotFound(f"no snapstore repository at {store.url}: it holds packs but no config "
                                             "(a copy into it was interrupted? run that copy again)") from None
                raise RepositoryNotFound(f"no snapstore repository at {store.url} (run 'snapstore init')") from None
            return cls.init(store, exist_ok=True, **settings)
        return cls(store, _unlocked(store, RepoConfig.from_bytes(keys.CONFIG, data)))

    @classmethod
    def init(cls, store: ObjectStore, exist_ok: bool = False, **settings) -> "Repository":
        """Create a repository with ``settings`` (see :class:`RepoConfig`); create-only.

        Raises:
            RepositoryError: one exists already and ``exist_ok`` is False.
            InvalidInputError: an unknown or out-of-range setting.
        """
        cfg = RepoConfig(repo_id=os.urandom(8).hex(), key=os.urandom(32), created=datetime.now(timezone.utc))
        cfg.removals = 1  # this version records every removal of log records (§16)
        cfg.seg_fanout = NEW_SEG_FANOUT  # §10 "Fanout": why 4, not 16
        for k in settings:
            if k not in RepoConfig.SETTINGS:
                raise InvalidInputError(f"unknown repository setting: {k}")
        why = check_settings({k: settings.get(k, getattr(cfg, k)) for k in RepoConfig.SETTINGS})
        if why is not None:
            raise InvalidInputError(f"repository {why}")
        for k, v in settings.items():
            setattr(cfg, k, v)
        if crypt.is_sealed(store):
            store.seal_config(cfg)  # encrypted: a data key in a slot, the content key from it (§27)
        try:
            store.put(keys.CONFIG, cfg.to_bytes())
        except PreconditionFailed:
            if not exist_ok:
                raise RepositoryError(f"a repository already exists at {store.url}") from None
            return cls(store, _unlocked(store, RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG))))
        return cls(store, cfg)

    def close(self, close_store: bool = True) -> None:
        """Shut down the thread pool and (unless ``close_store`` is False) the store."""
        self.cache.close()
        if close_store:
            self.store.close()

    # ------------------------------------------------------------------------------------------
    # the parts' public API, on the repository (each one the named part's method)

    @property
    def lock(self):
        """The repository's re-entrant lock (:attr:`PackCache.lock`)."""
        return self.cache.lock

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The thread pool for parallel requests (:attr:`PackCache.pool`)."""
        return self.cache.pool

    def get_pack(self, pack_id: bytes, ranged: bool = False, tail: int | None = None) -> Pack:
        """:meth:`PackCache.get_pack`: the parsed pack. Raises ObjectNotFound / IntegrityError."""
        return self.cache.get_pack(pack_id, ranged, tail)

    def remember_pack(self, pack_id: bytes, data: bytes, raw_blocks: dict | None = None) -> Pack:
        """:meth:`PackCache.remember`: cache a pack this process built; returns it."""
        return self.cache.remember(pack_id, data, raw_blocks)

    def fetch_pack_blocks(self, want: dict) -> None:
        """:meth:`PackCache.fetch_pack_blocks`: fetch ``{ranged pack: block indexes}`` in one wave."""
        self.cache.fetch_pack_blocks(want)

    def whole_packs(self):
        """:meth:`PackCache.whole_packs`: a context in which packs are read whole only."""
        return self.cache.whole_packs()

    def corrupt_packs(self) -> dict:
        """:meth:`PackCache.corrupt_packs`: pack id -> IntegrityError of the packs found corrupt."""
        return self.cache.corrupt_packs()

    def range_tail(self, m: Manifest) -> int:
        """:meth:`PackCache.range_tail`: bytes of each pack's end a restore of ``m`` asks for first."""
        return self.cache.range_tail(m)

    def forward(self, pack_id: bytes, fresh: bool = False) -> list[bytes] | None:
        """:meth:`ForwardLookup.forward`: where a retired pack's entries went, or None."""
        return self.forwarding.forward(pack_id, fresh)

    def forward_hints(self, load: bool = True) -> dict:
        """:meth:`ForwardLookup.hints`: retired pack -> targets, as of the last GC (advisory)."""
        return self.forwarding.hints(load)

    def forget_segments(self, packs) -> None:
        """:meth:`SegmentIndex.forget`: drop the entries of ``packs`` from the segment index."""
        self.segments.forget(packs)

    def prefetch(self, pack_ids, no_forward=(), tail: int | None = None, inline_ok: bool = False,
                 got: set | None = None) -> None:
        """:meth:`Locator.prefetch`: fetch the packs not cached yet, in one parallel wave."""
        self.locator.prefetch(pack_ids, no_forward=no_forward, tail=tail, inline_ok=inline_ok, got=got)

    def prefetch_segments(self, segs, also=(), tail: int | None = None) -> None:
        """:meth:`Locator.prefetch_segments`: fetch and index a record's segment packs."""
        self.locator.prefetch_segments(segs, also, tail)

    def segment_packs(self, segs, also=()) -> list[bytes]:
        """:meth:`Locator.segment_packs`: the cached packs holding a segment list's entries."""
        return self.locator.segment_packs(segs, also)

    def segment_index(self, packs) -> dict:
        """:meth:`Locator.segment_index`: ``(type, id) -> pack id`` over ``packs``."""
        return self.locator.segment_index(packs)

    def pack_absent(self, pack_id: bytes) -> bool:
        """:meth:`Locator.pack_absent`: is the pack missing from the store?"""
        return self.locator.pack_absent(pack_id)

    def packs_to_fetch(self, items) -> list:
        """:meth:`Locator.packs_to_fetch`: hinted packs still to fetch for ``(type, id, pack)`` items."""
        return self.locator.packs_to_fetch(items)

    def locate(self, pack_id: bytes, etype: int, eid: bytes) -> Pack:
        """:meth:`Locator.locate`: the pack holding entry ``(etype, eid)``. Raises ObjectNotFound /
        IntegrityError."""
        return self.locator.locate(pack_id, etype, eid)

    def read_entry(self, etype: int, eid: bytes, pack_id: bytes, ctx: ReadContext | None = None,
                   verify: bool = True) -> bytes:
        """:meth:`EntryReader.read_entry`: an entry's bytes, verified. Raises IntegrityError /
        ObjectNotFound."""
        return self.entries.read_entry(etype, eid, pack_id, ctx, verify)

    def read_entry_in(self, pack: Pack, etype: int, eid: bytes, ctx: ReadContext | None = None,
                      verify: bool = True) -> bytes:
        """:meth:`EntryReader.read_entry_in`: an entry's bytes from ``pack``. Raises IntegrityError."""
        return self.entries.read_entry_in(pack, etype, eid, ctx, verify)

    def read_state(self, state_id: bytes, pack_id: bytes, etype: int = T_STATE) -> Spine:
        """:meth:`TreeReader.read_state`: a spine. Raises IntegrityError / ObjectNotFound."""
        return self.trees.read_state(state_id, pack_id, etype)

    def read_node(self, node_id: bytes, pack_id: bytes) -> tuple[int, list[Ref]]:
        """:meth:`TreeReader.read_node`: ``(level, items)`` of a tree node."""
        return self.trees.read_node(node_id, pack_id)

    def expand(self, spine: Spine, nodes: dict | None = None) -> list[Ref]:
        """:meth:`TreeReader.expand`: every level-0 ref of a list, in order."""
        return self.trees.expand(spine, nodes)

    def refs_range(self, spine: Spine, start: int, end: int, on_node=None) -> list[Ref]:
        """:meth:`TreeReader.refs_range`: the level-0 refs at positions ``[start, end)``."""
        return self.trees.refs_range(spine, start, end, on_node)

    def message_raw(self, ref: Ref, ctx: ReadContext | None = None, verify: bool = True) -> bytes:
        """:meth:`TreeReader.message_raw`: a message's exact JSON bytes."""
        return self.trees.message_raw(ref, ctx, verify)

    def read_list(self, refs: list[Ref], m: Manifest) -> tuple[list, list, object]:
        """:meth:`TreeReader.read_list`: ``(messages, raws, digest)`` of checkpoint ``m``."""
        return self.trees.read_list(refs, m)

    def decode_blocks(self, m: Manifest) -> None:
        """:meth:`TreeReader.decode_blocks`: decompress every data block ``m``'s messages live in."""
        self.trees.decode_blocks(m)

    def load_with_state(self, m: Manifest, segs=None, fetched: bool = False) -> tuple[list, ListState]:
        """:meth:`TreeReader.load_with_state`: ``(messages, ListState)`` of checkpoint ``m``."""
        return self.trees.load_with_state(m, segs, fetched)

    def list_state(self, m: Manifest | None, full: bool = False) -> ListState:
        """:meth:`TreeReader.list_state`: a writer's ListState for checkpoint ``m`` (None: empty)."""
        return self.trees.list_state(m, full)

    def value_refs(self, tree: ValueTree, nodes: dict | None = None) -> tuple[Spine, list[Ref]]:
        """:meth:`ValueReader.refs`: ``(spine, piece refs)`` of a session-state value tree."""
        return self.values.refs(tree, nodes)

    def read_value(self, tree: ValueTree) -> bytes:
        """:meth:`ValueReader.read`: a value tree's exact JSON bytes, verified."""
        return self.values.read(tree)

    def load_session_state(self, m: Manifest):
        """:meth:`ValueReader.load_session_state`: the checkpoint's session state, or None."""
        return self.values.load_session_state(m)

    def prepare_save(self, parent: ListState | None, messages: list, session_state=None,
                     has_session_state: bool = False, parent_state_tree: ValueTree | None = None,
                     listed=()) -> PreparedSave:
        """:meth:`SavePreparer.prepare_save`: build a save in memory (nothing is written)."""
        return self.saves.prepare_save(parent, messages, session_state, has_session_state, parent_state_tree, listed)

    # ------------------------------------------------------------------------------------------
    # keys for user-supplied names

    def run_key(self, run_id: str) -> str:
        """Key segment of a run id (see :func:`snapstore.format.ids.name_key`)."""
        return name_key(run_id, self.hasher)

    def checkpoint_key(self, checkpoint_id: str) -> str:
        """Key segment of a checkpoint id."""
        return name_key(checkpoint_id, self.hasher)


__all__ = ["Repository", "ListState", "PreparedSave", "KIND_CHECKPOINT", "KIND_ROLLBACK", "KIND_TOMBSTONE",
           "RECENT_RAW_KEEP", "LogRecords"]
