"""The repository: write path (dedup, pack, publish) and read path (resolve, fetch, verify).

Layer 3. Uses :mod:`snapstore.stores` for bytes and :mod:`snapstore.format` for encodings. Knows
nothing about checkpoint-manager policy (conflict rules, retention); see :mod:`snapstore.api`.

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

import operator
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import fastcdc
import orjson

from .errors import (CheckpointNotFound, ConflictError, IntegrityError, InvalidInputError, ObjectNotFound,
                     PreconditionFailed, RepositoryError, RepositoryNotFound, SnapstoreError)
from .format import keys
from .format.codec import _ORJSON_OPTS, decode_json, encode_json, validate
from .format.ids import PACK_ID_BYTES, Hasher, name_key, seq_hint
from .format.manifest import (KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest, RepoConfig,
                              decode_forward, decode_forward_cache, decode_forward_shard, decode_index, encode_index)
from .format.pack import T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER, DictSpec, Pack, PackBuilder
from .format.tree import FLAG_EXACT, FLAG_PIECES, Ref, Spine, TreeParams, decode_node, decode_pieces, encode_pieces
from .stores.base import ObjectStore

RECENT_RAW_KEEP = 4
"""Multiple of ``dict_bytes`` of recent message JSON a writer keeps in memory for dictionaries."""


@dataclass
class ListState:
    """What a writer knows about one message list (normally its run's head).

    Attributes:
        spine: the open right edge of the list's tree.
        count / size: messages and their total JSON bytes.
        digest: incremental keyed blake3 over the list's JSON without the closing bracket
            (``[`` + the messages' JSON joined by ``,``); see :meth:`ListState.digest_hex`.
        state: ``(state id, pack id)`` of the stored spine, or None for an empty list.
        ids: every message id in order, or None when not loaded (cold writer).
        refs: every level-0 ref in order, or None when not loaded.
        objs: the caller's message objects of the last save (identity fast path), or None.
        raws: encoded JSON per position for recent positions (older entries are None).
        known: chunk id -> Ref, for dedup within the run.
        known_pieces: piece id -> Ref.
        nodes: node id -> pack id of the nodes of this list's tree (reused only from here: GC safety).
    """

    spine: Spine
    count: int = 0
    size: int = 0
    digest: object = None
    state: tuple | None = None
    ids: list | None = None
    refs: list | None = None
    objs: list | None = None
    raws: list | None = None
    known: dict = field(default_factory=dict)
    known_pieces: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    digest_hex_value: str | None = None

    def digest_hex(self) -> str:
        """The list digest stored in manifests: keyed blake3-128 of the list's compact JSON."""
        if self.digest is None:
            return self.digest_hex_value or ""
        d = self.digest.copy()
        d.update(b"]")
        return d.hexdigest(16)


def _json_digest(hasher: "Hasher", raws) -> object:
    """Incremental list digest over ``[`` + raws joined by ``,`` (no closing bracket)."""
    d = hasher.new_digest()
    d.update(b"[")
    first = True
    for r in raws:
        if not first:
            d.update(b",")
        d.update(r)
        first = False
    return d


@dataclass
class PreparedSave:
    """A save built in memory, not yet written: the pack (or None) and the resulting list state."""

    pack_id: bytes | None
    pack_bytes: bytes | None
    sizes: dict
    state: ListState
    session_state_ref: list | None
    session_state_inline: object
    has_session_state: bool
    new_chunks: int
    new_bytes: int
    raw_blocks: dict = field(default_factory=dict)


class _ReadCtx:
    """Messages decoded so far by an in-order restore; lets data blocks find their dictionary."""

    def __init__(self, hasher: Hasher):
        self.hasher = hasher
        self.ids: list[bytes] = []
        self.concat = bytearray()
        self.offs = [0]

    def add(self, mid: bytes, raw: bytes) -> None:
        self.ids.append(mid)
        self.concat += raw
        self.offs.append(len(self.concat))

    def dict_for(self, spec: DictSpec) -> bytes | None:
        if spec.end > len(self.ids) or spec.start > spec.end:
            return None
        if self.hasher.content_id(b"".join(self.ids[spec.start:spec.end])) != spec.digest:
            return None
        end = self.offs[spec.end]
        if end - self.offs[spec.start] < spec.length:
            return None
        return bytes(self.concat[end - spec.length:end])


class Repository:
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
            max_workers = int(getattr(store, "max_concurrency", 64) or 64)
        self._max_workers = max(1, max_workers)
        self._pool: ThreadPoolExecutor | None = None
        self._dicts: dict = {}
        self._fwd: dict = {}
        self._gone: set = set()  # packs found missing (retired by GC): go straight to forwarding
        self._hints: dict | None = None  # retired pack -> targets, from gc/fwd-cache (advisory)
        self._hints_at = 0.0
        self._hints_lock = threading.Lock()
        self._nodes: dict = {}  # node id -> decoded (level, items)
        self._where: dict = {}  # (type, id) -> id of a cached tier pack holding it (format 2 segments)
        self._seg_errors: dict = {}  # segment pack -> why the last prefetch_segments could not read it

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
        for k, v in settings.items():
            if k not in RepoConfig._SETTINGS:
                raise InvalidInputError(f"unknown repository setting: {k}")
            if not isinstance(v, int) or v < 0:
                raise InvalidInputError(f"repository setting {k} must be a non-negative integer, got {v!r}")
            setattr(cfg, k, v)
        if not (1 <= cfg.leaf_bits <= 12 and 1 <= cfg.node_bits <= 12 and cfg.max_items >= 2):
            raise InvalidInputError("tree settings out of range")
        if not (cfg.seg_fanout == 0 or 2 <= cfg.seg_fanout <= 64):
            raise InvalidInputError(f"seg_fanout must be 0 (no segments) or 2-64, got {cfg.seg_fanout}")
        try:
            store.put(keys.CONFIG, cfg.to_bytes())
        except PreconditionFailed:
            if not exist_ok:
                raise RepositoryError(f"a repository already exists at {store.url}") from None
            return cls(store, RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG)))
        return cls(store, cfg)

    def close(self) -> None:
        """Shut down the thread pool and the store."""
        if self._pool:
            self._pool.shutdown(wait=False)
        self.store.close()

    # ------------------------------------------------------------------------------------------
    # keys for user-supplied names

    def run_key(self, run_id: str) -> str:
        """Key segment of a run id (see :func:`snapstore.format.ids.name_key`)."""
        return name_key(run_id, self.hasher)

    def checkpoint_key(self, checkpoint_id: str) -> str:
        """Key segment of a checkpoint id."""
        return name_key(checkpoint_id, self.hasher)

    # ------------------------------------------------------------------------------------------
    # packs

    def _pool_get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="snapstore-get")
            return self._pool

    def _cache_put(self, pack: Pack) -> None:
        with self._lock:
            if pack.id in self._cache:
                return
            self._cache[pack.id] = pack
            self._cache_bytes += len(pack.data) * 3
            while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
                oid, old = self._cache.popitem(last=False)
                self._cache_bytes -= len(old.data) * 3

    def remember_pack(self, pack_id: bytes, data: bytes, raw_blocks: dict | None = None) -> Pack:
        """Cache a pack this process built (before or after writing it), with its blocks already
        uncompressed (``raw_blocks``: block index -> bytes, from :attr:`PackBuilder.raw_blocks`), so
        that merging it into a tier pack needs neither a GET nor its dictionary. Returns the Pack.

        Raises:
            IntegrityError: ``data`` is not a valid pack (a bug: it was just built).
        """
        p = Pack.parse(keys.pack_key(pack_id), data, pack_id)
        for b, raw in (raw_blocks or {}).items():
            if b < len(p.blocks) and len(raw) == p.blocks[b].rawlen:
                p._raw[b] = raw
        with self._lock:
            old = self._cache.get(pack_id)
            if old is not None:
                old._raw.update(p._raw)
                return old
        self._cache_put(p)
        return p

    WHERE_MAX = 4_000_000
    """Most entries the segment index holds (about 150 bytes each); it is cleared when full."""

    def _index_pack(self, pack: Pack) -> None:
        """Make a segment pack's entries findable by ``(type, id)`` (see :meth:`locate`). The index
        outlives the pack cache: an evicted segment is fetched again when an entry is wanted."""
        with self._lock:
            if len(self._where) + len(pack.entries) > self.WHERE_MAX:
                self._where.clear()
            pack.indexed = True
            where = self._where
            for k in pack.entries:
                where[k] = pack.id

    def segment_index(self, packs) -> dict:
        """``(type, id) -> pack id`` over the cached packs in ``packs`` (from :meth:`segment_packs`);
        later packs win (the newest copy)."""
        out: dict = {}
        with self._lock:
            for pid in packs:
                p = self._cache.get(pid)
                if p is not None:
                    for k in p.entries:
                        out[k] = pid
        return out

    def forget_segments(self, packs) -> None:
        """Drop the entries of ``packs`` from the segment index (GC marks run by run, so that the
        index holds one run's entries at a time)."""
        drop = set(packs)
        with self._lock:
            for pid in drop:
                p = self._cache.get(pid)
                if p is not None:
                    p.indexed = False
            self._where = {k: v for k, v in self._where.items() if v not in drop}

    def prefetch_segments(self, segs, also=()) -> None:
        """Fetch a record's segment packs (and the packs in ``also``) in one parallel wave, and
        index their entries, so that reads find entries there before following the location hints
        in their refs (the per-save packs hints name are deleted once merged into a tier pack).

        A segment GC rewrote (a mostly dead tier pack, docs/format.md §13) is found through its
        forwarding record, and the packs it leads to are indexed in its place. A segment that is
        simply gone (merged away since the record was read) is skipped: the caller reads the
        newest record again when an entry cannot be found.
        """
        segs = list(segs or ())
        packs = [s.pack for s in segs]
        self.prefetch(packs + [p for p in also if p], no_forward=set(p for p in also if p) if segs else ())
        held = self.segment_packs(segs)
        for p in held:
            with self._lock:
                pk = self._cache.get(p)
            if pk is not None and not getattr(pk, "indexed", False):
                self._index_pack(pk)
        # remember why a segment could not be read: a read that then finds an entry nowhere names
        # the segment (the object that is damaged or gone), not the per-save pack its hint names
        errors = {}
        with self._lock:
            missing = [p for p in packs if p not in self._cache and not self._fwd.get(p)]
        for p in missing:
            if p in self.forward_hints(load=False):
                continue
            try:
                self.get_pack(p)
            except SnapstoreError as e:
                errors[p] = e
        with self._lock:
            self._seg_errors = errors

    def segment_packs(self, segs) -> list[bytes]:
        """The cached packs that hold a segment list's entries: each segment itself, or for one
        GC rewrote, the packs its forwarding record leads to (from memory and the hint cache only;
        :meth:`prefetch_segments` fetches them)."""
        out: list[bytes] = []
        hints = self.forward_hints(load=False)

        def add(p, depth):
            with self._lock:
                cached = p in self._cache
                to = self._fwd.get(p)
            if to is None:
                to = hints.get(p)
            if cached:
                out.append(p)  # a rewritten segment still there: its rewrite (after it) wins
            if depth < 4:
                for t in to or ():
                    add(t, depth + 1)
        for sg in segs:
            add(sg.pack, 0)
        return list(dict.fromkeys(out))

    def _located(self, etype: int, eid: bytes) -> bool:
        return (etype, eid) in self._where

    def _packs_for(self, items) -> list:
        """Hinted packs still to fetch for ``(type, id, hinted pack)`` items (entries already found
        in an indexed tier pack are skipped)."""
        where = self._where
        return [p for t, i, p in items if (t, i) not in where]

    def get_pack(self, pack_id: bytes) -> Pack:
        """Return the parsed, checksum-verified pack (cached).

        Raises:
            ObjectNotFound: the pack is missing (message names the key).
            IntegrityError: the pack is corrupt.
        """
        key = keys.pack_key(pack_id)
        with self._lock:
            p = self._cache.get(pack_id)
            if p is not None:
                self._cache.move_to_end(pack_id)
                return p
            if pack_id in self._gone:
                raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)")
        try:
            data = self.store.get(key)
        except ObjectNotFound:
            with self._lock:
                self._gone.add(pack_id)
            raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)") from None
        p = Pack.parse(key, data, pack_id)
        self._cache_put(p)
        return p

    def prefetch(self, pack_ids, no_forward=()) -> None:
        """Fetch the packs not yet cached, in parallel (bounded thread pool).

        A pack that is missing is looked up in the forwarding map (and its targets fetched in the
        same wave), except the packs in ``no_forward`` (tier packs: copies, never repacked), which
        are just skipped, as are corrupt packs (the read that needs one reports it).
        """
        with self._lock:
            todo = [p for p in dict.fromkeys(pack_ids) if p not in self._cache]
        claimed = set(todo)
        claim_lock = threading.Lock()

        hints = self.forward_hints(load=False)

        def one(p, depth=0):
            # retired by GC (as of the last GC's hints, or found missing): fetch where its entries
            # went instead, in this same parallel wave (each target once)
            to = hints.get(p) if depth < 4 else None
            if not to:
                try:
                    self.get_pack(p)
                    return
                except ObjectNotFound:
                    if p in no_forward:
                        return
                    to = self.forward(p)
                except IntegrityError:
                    return  # corrupt: the read that needs it reports it
            for t in (to or ()) if depth < 4 else ():
                with claim_lock:
                    if t in claimed:
                        continue
                    claimed.add(t)
                one(t, depth + 1)
        if len(todo) <= 1:
            for p in todo:
                one(p)
            return
        list(self._pool_get().map(one, todo))

    HINTS_MAX_AGE = 60.0
    """Seconds after which a failed forwarding hint makes the reader load ``gc/fwd-cache`` again."""

    def forward_hints(self, load: bool = True) -> dict:
        """Retired pack -> the packs its entries moved to, as of the last GC (``gc/fwd-cache``).

        Advisory: GC may have changed a record since, so a reader uses a hint only as the first
        place to look (entries are verified by content id) and falls back to the record itself.
        Loaded with one GET the first time a reader meets a retired pack (``load``); ``{}`` when
        there is no cache or it is unreadable.
        """
        with self._lock:
            if self._hints is not None or not load:
                return self._hints or {}
        with self._hints_lock:  # one GET, whichever thread gets here first
            with self._lock:
                if self._hints is not None:
                    return self._hints
            try:
                hints = {p: v[1] for p, v in
                         decode_forward_cache(keys.FWD_CACHE, self.store.get(keys.FWD_CACHE)).items()}
            except SnapstoreError:  # none (ObjectNotFound) or unreadable: read the records themselves
                hints = {}
            with self._lock:
                self._hints, self._hints_at = hints, time.monotonic()
            return hints

    def _hint_failed(self) -> None:
        with self._lock:
            if self._hints is not None and time.monotonic() - self._hints_at > self.HINTS_MAX_AGE:
                self._hints = None  # load again on the next miss

    def forward(self, pack_id: bytes, fresh: bool = False) -> list[bytes] | None:
        """Return the packs a retired (repacked) pack's entries moved to, or None if not retired.

        Answers from memory, then from the forwarding hints (:meth:`forward_hints`), then by reading
        the forwarding-map shard ``fwd/<1 hex>`` (one GET; every record in it is remembered), and
        for a pack the shard does not name, a per-pack record ``fwd/<16 hex>`` of a repository not
        yet migrated (one more GET). ``fresh`` skips memory and hints.

        Raises:
            IntegrityError: the shard or record is corrupt.
        """
        if not fresh:
            with self._lock:
                if pack_id in self._fwd:
                    return self._fwd[pack_id]
            hint = self.forward_hints().get(pack_id)
            if hint is not None:
                return hint
        key = keys.fwd_shard_key(pack_id)
        try:
            shard = decode_forward_shard(key, self.store.get(key), keys.fwd_shard(pack_id))
        except ObjectNotFound:
            shard = {}
        if pack_id in shard:
            to = shard[pack_id][0]
        else:
            key = keys.fwd_key(pack_id)
            try:
                to = decode_forward(key, self.store.get(key))
            except ObjectNotFound:
                to = None
        with self._lock:
            for p, (t, _) in shard.items():
                self._fwd[p] = t
            self._fwd[pack_id] = to
        return to

    def locate(self, pack_id: bytes, etype: int, eid: bytes, _seen: set | None = None) -> Pack:
        """Return the pack holding entry ``(etype, eid)``, starting at the hinted pack.

        Format 2: an entry held by an indexed segment (:meth:`prefetch_segments`) is read there
        first when the hinted pack is not cached (the per-save pack a hint names is deleted once a
        writer merged it into a tier pack). If the hinted pack was retired by garbage collection,
        its forwarding record names the packs its live entries moved to.

        Raises:
            ObjectNotFound: the pack is gone and neither a segment nor a forwarding record leads to
                the entry.
            IntegrityError: the pack exists but lacks the entry.
        """
        with self._lock:
            cached = pack_id in self._cache
            w = self._where.get((etype, eid)) if not cached and _seen is None else None
        if w is not None:
            try:
                p = self.get_pack(w)
            except SnapstoreError:
                p = None
            if p is not None and (etype, eid) in p.entries:
                return p
        hint = None if cached else self.forward_hints(load=False).get(pack_id)
        if hint:  # retired as of the last GC: look where its entries went first (no GET of a 404)
            seen = set(_seen or ()) | {pack_id}
            for new in hint:
                try:
                    return self.locate(new, etype, eid, seen)
                except (ObjectNotFound, IntegrityError):
                    continue
            self._hint_failed()
        try:
            pack = self.get_pack(pack_id)
        except ObjectNotFound:
            seen = _seen if _seen is not None else set()
            if pack_id in seen:
                raise
            seen.add(pack_id)
            for attempt in range(2):
                to = self.forward(pack_id, fresh=attempt > 0)
                for new in to or ():
                    try:
                        return self.locate(new, etype, eid, seen)
                    except (ObjectNotFound, IntegrityError):
                        continue
                with self._lock:  # GC may have redirected the record since we cached it
                    self._fwd.pop(pack_id, None)
                seen.difference_update(to or ())
            with self._lock:
                seg_errors = list(self._seg_errors.values())
            if seg_errors and _seen is None:
                # the entry should have been in a segment that could not be read: name that one
                bad = [e for e in seg_errors if isinstance(e, IntegrityError)] or seg_errors
                raise bad[0] from None
            raise
        if (etype, eid) not in pack.entries:
            raise IntegrityError(pack.key, f"entry {eid.hex()} ({chr(etype)}) not found in pack")
        return pack

    def _entry(self, etype: int, eid: bytes, pack_id: bytes, ctx: _ReadCtx | None = None) -> bytes:
        pack = self.locate(pack_id, etype, eid)
        try:
            return self._entry_in(pack, etype, eid, ctx)
        except SnapstoreError:
            if pack.id != pack_id and getattr(pack, "indexed", False):
                # a tier pack (a copy) failed: read the entry where its hint says instead
                return self._entry_in(self.locate(pack_id, etype, eid, set()), etype, eid, ctx)
            # A retired pack exists until GC deletes it, but what its data block's dictionary is
            # made of may already be gone: GC keeps a retired pack's dependencies only while the pack
            # itself holds a live entry. Its live entries were copied (without a dictionary) to the
            # packs its forwarding record names, so read the entry there.
            for new in self.forward(pack.id) or ():
                try:
                    return self._entry_in(self.locate(new, etype, eid, {pack.id}), etype, eid, ctx)
                except (ObjectNotFound, IntegrityError):
                    continue
            raise

    def _entry_in(self, pack: Pack, etype: int, eid: bytes, ctx: _ReadCtx | None) -> bytes:
        e = pack.entries[(etype, eid)]
        spec = pack.blocks[e.block].dict
        d = None
        if spec is not None and e.block not in pack._raw:
            d = ctx.dict_for(spec) if ctx is not None else None
            if d is None:
                d = self._resolve_dict(pack, spec)
        raw = pack.entry_bytes(e, d)
        if etype != T_PIECES and self.hasher.content_id(raw) != eid:
            raise IntegrityError(pack.key, f"entry {eid.hex()} ({chr(etype)}) does not match its content id")
        return raw

    def _resolve_dict(self, pack: Pack, spec: DictSpec) -> bytes:
        key = (pack.id, spec)
        with self._lock:
            d = self._dicts.get(key)
        if d is not None:
            return d
        spine = self.read_state(*pack.dict_state(spec))
        refs = self.refs_range(spine, spec.start, spec.end)
        if self.hasher.content_id(b"".join(r.id for r in refs)) != spec.digest:
            raise IntegrityError(pack.key, "dictionary messages do not match the recorded digest")
        raw = b"".join(self.message_raw(r) for r in refs)
        if len(raw) < spec.length:
            raise IntegrityError(pack.key, "dictionary shorter than recorded")
        d = raw[len(raw) - spec.length:]
        with self._lock:
            if len(self._dicts) > 64:
                self._dicts.clear()
            self._dicts[key] = d
        return d

    # ------------------------------------------------------------------------------------------
    # tree reading

    def read_state(self, state_id: bytes, pack_id: bytes) -> Spine:
        """Read and decode a spine (state entry plus its upper entry). Raises IntegrityError/ObjectNotFound."""
        raw = self._entry(T_STATE, state_id, pack_id)
        try:
            run0, upper = Spine.decode_state(raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(pack_id), f"malformed state {state_id.hex()}: {e}") from None
        levels = [run0]
        if upper is not None:
            uraw = self._entry(T_UPPER, upper[0], upper[1])
            try:
                levels += Spine.decode_upper(uraw)
            except (ValueError, IndexError) as e:
                raise IntegrityError(keys.pack_key(upper[1]), f"malformed upper entry {upper[0].hex()}: {e}") from None
        return Spine(self.params, levels, upper)

    def read_node(self, node_id: bytes, pack_id: bytes) -> tuple[int, list[Ref]]:
        """Read and decode a tree node; return ``(level, items)`` (decoded nodes are cached: a node's
        content never changes, its id is its content id)."""
        hit = self._nodes.get(node_id)
        if hit is not None:
            return hit
        raw = self._entry(T_NODE, node_id, pack_id)
        try:
            node = decode_node(raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(pack_id), f"malformed node {node_id.hex()}: {e}") from None
        with self._lock:
            if len(self._nodes) >= 200_000:
                self._nodes.clear()
            self._nodes[node_id] = node
        return node

    def expand(self, spine: Spine, nodes: dict | None = None) -> list[Ref]:
        """Return every level-0 ref of the list, in order.

        Nodes are fetched level by level with the packs of each level fetched in parallel, so the
        number of sequential round trips is the tree depth. If ``nodes`` is given, every node read
        is recorded in it as ``node id -> pack id``.
        """
        frontier: list[tuple[int, Ref]] = spine.top_down()
        while any(level > 0 for level, _ in frontier):
            self.prefetch(self._packs_for((T_NODE, r.id, r.pack) for level, r in frontier if level > 0))
            nxt: list[tuple[int, Ref]] = []
            for level, r in frontier:
                if level == 0:
                    nxt.append((0, r))
                    continue
                lv, items = self.read_node(r.id, r.pack)
                if nodes is not None:
                    nodes[r.id] = r.pack
                if lv != level - 1:
                    raise IntegrityError(keys.pack_key(r.pack), f"node {r.id.hex()} has level {lv}, expected {level - 1}")
                nxt.extend((lv, x) for x in items)
            frontier = nxt
        return [r for _, r in frontier]

    def refs_range(self, spine: Spine, start: int, end: int,
                   on_node: Callable[[Ref], None] | None = None) -> list[Ref]:
        """Return the level-0 refs at positions ``[start, end)`` of the list, reading only the nodes needed.

        ``on_node(ref)`` is called for every tree node read on the way (GC's mark uses it: those nodes
        are needed to find the range again).
        """
        out: list[Ref] = []

        def walk(items, level, pos):
            for r in items:
                n = r.count
                if pos + n > start and pos < end:
                    if level == 0:
                        out.append(r)
                    else:
                        if on_node is not None:
                            on_node(r)
                        lv, sub = self.read_node(r.id, r.pack)
                        walk(sub, lv, pos)
                pos += n
                if pos >= end:
                    break
            return pos

        pos = 0
        for level in range(len(spine.levels) - 1, -1, -1):
            pos = walk(spine.levels[level], level, pos)
            if pos >= end:
                break
        return out

    def message_raw(self, ref: Ref, ctx: _ReadCtx | None = None) -> bytes:
        """Return a message's exact JSON bytes (pieces reassembled), verified against ``ref.id``."""
        if not ref.flags & FLAG_PIECES:
            return self._entry(T_CHUNK, ref.id, ref.pack, ctx)
        pieces_raw = self._entry(T_PIECES, ref.id, ref.pack)
        try:
            pieces = decode_pieces(pieces_raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(ref.pack), f"malformed pieces list {ref.id.hex()}: {e}") from None
        self.prefetch(self._packs_for((T_CHUNK, p.id, p.pack) for p in pieces))
        raw = b"".join(self._entry(T_CHUNK, p.id, p.pack, ctx) for p in pieces)
        if self.hasher.content_id(raw) != ref.id:
            raise IntegrityError(keys.pack_key(ref.pack), f"message {ref.id.hex()} does not match its content id")
        return raw

    def read_messages(self, refs: list[Ref], raws: list | None = None) -> list:
        """Decode the messages of a list (refs in order); packs are fetched in parallel first.

        If ``raws`` is a list, each message's exact JSON bytes are appended to it.
        """
        self.prefetch(self._packs_for((T_PIECES if r.flags & FLAG_PIECES else T_CHUNK, r.id, r.pack) for r in refs))
        ctx = _ReadCtx(self.hasher)
        out = []
        for r in refs:
            raw = self.message_raw(r, ctx)
            ctx.add(r.id, raw)
            if raws is not None:
                raws.append(raw)
            out.append(decode_json(raw, bool(r.flags & FLAG_EXACT)))
        return out

    def decode_blocks(self, m: Manifest) -> None:
        """Decompress every data block checkpoint ``m``'s messages live in, in list order, so that
        dictionaries come from the in-order fast path (used before bulk copies such as repacking)."""
        if not m.state:
            return
        spine = self.read_state(bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        refs = self.expand(spine)
        self.prefetch(r.pack for r in refs)
        ctx = _ReadCtx(self.hasher)
        for r in refs:
            ctx.add(r.id, self.message_raw(r, ctx))

    def load_with_state(self, m: Manifest, segs=None) -> tuple[list, ListState]:
        """Return ``(messages, ListState)`` for checkpoint ``m``: a restore that also prepares the
        next save (every id known; the caller's objects are not trusted, so ``objs`` is None).

        ``segs``: the segment list to read from (default: ``m``'s own; a caller holding the run's
        newest record passes its list, which covers every checkpoint of the run). The segments and
        the state's pack are fetched in one parallel wave.
        """
        if segs is None:
            segs = m.segment_list()
        if not m.state:
            if m.session_state_ref:
                self.prefetch_segments(segs)
            return [], self.list_state(None)
        sref = (bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        self.prefetch_segments(segs, [bytes.fromhex(h) for h in m.state[1:]])
        spine = self.read_state(*sref)
        nodes: dict = {}
        refs = self.expand(spine, nodes)
        raws: list = []
        msgs = self.read_messages(refs, raws)
        ids = [r.id for r in refs]
        digest = _json_digest(self.hasher, raws)
        keep = RECENT_RAW_KEEP * max(self.config.dict_bytes, 1)
        acc = 0
        for i in range(len(raws) - 1, -1, -1):
            acc += len(raws[i])
            if acc > keep:
                raws[:i + 1] = [None] * (i + 1)
                break
        ls = ListState(spine=spine, count=m.count, size=m.size, digest=digest, state=sref, ids=ids, refs=refs,
                       objs=None, raws=raws, known={r.id: r for r in refs}, nodes=nodes)
        return msgs, ls

    def load_messages(self, m: Manifest) -> list:
        """Return the message list of checkpoint manifest ``m`` (exactly as saved)."""
        return self.load_with_state(m)[0]

    def load_session_state(self, m: Manifest):
        """Return the checkpoint's session state (inline or from its chunk), or None."""
        if m.session_state_ref is None:
            return m.session_state
        sid, pack, size, flags = m.session_state_ref
        raw = self.message_raw(Ref(bytes.fromhex(sid), size, 1, flags, bytes.fromhex(pack)))
        return decode_json(raw, bool(flags & FLAG_EXACT))

    def list_state(self, m: Manifest | None, full: bool = False) -> ListState:
        """Build a writer's :class:`ListState` for checkpoint ``m`` (None: empty list).

        With ``full``, every ref is loaded (needed when the next list is not an append).
        """
        ls = ListState(spine=Spine(self.params), digest=_json_digest(self.hasher, []))
        if m is None or not m.state:
            ls.ids, ls.refs, ls.raws = [], [], []
            return ls
        ls.digest = None
        ls.digest_hex_value = m.digest
        ls.spine = self.read_state(bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        ls.state = (bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        ls.count, ls.size = m.count, m.size
        for level, r in ls.spine.top_down():
            if level == 0:
                ls.known[r.id] = r
            else:
                ls.nodes[r.id] = r.pack
        if full:
            refs = self.expand(ls.spine)
            ls.refs = refs
            ls.ids = [r.id for r in refs]
            for r in refs:
                ls.known[r.id] = r
            self._index_nodes(ls)
        return ls

    def _index_nodes(self, ls: ListState) -> None:
        def walk(level, r):
            if level == 0 or r.id in ls.nodes:
                return
            ls.nodes[r.id] = r.pack
            lv, items = self.read_node(r.id, r.pack)
            for x in items:
                walk(lv, x)
        for level, r in ls.spine.top_down():
            if level > 0:
                ls.nodes.pop(r.id, None)
                walk(level, r)

    # ------------------------------------------------------------------------------------------
    # write path

    def _encode_message(self, msg, path: str) -> tuple[bytes, bool]:
        validate(msg, path)
        return encode_json(msg)

    def prepare_save(self, parent: ListState | None, messages: list, session_state=None,
                     has_session_state: bool = False, parent_state_ref: list | None = None) -> PreparedSave:
        """Build the pack for a new checkpoint whose list is ``messages`` (nothing is written).

        Args:
            parent: the writer's knowledge of the parent list (None: no parent).
            messages: the new checkpoint's full message list (JSON values).
            session_state: the session state value (used when ``has_session_state``).
            parent_state_ref: the parent's ``session_state_ref`` (reused when unchanged).
        Raises:
            InvalidMessageError: a message or the state is not an exact JSON value.
        Returns:
            PreparedSave with the pack bytes (None if nothing new) and the new ListState.
        """
        if not isinstance(messages, (list, tuple)):
            raise InvalidInputError(f"messages must be a list, got {type(messages).__name__}")
        messages = list(messages)
        cfg = self.config
        hasher = self.hasher
        if parent is None:
            parent = self.list_state(None)
        n_old = parent.count
        n = len(messages)
        ids: list[bytes] = [b""] * n
        flags: list[int] = [0] * n
        raws: list[bytes | None] = [None] * n

        # 1. how much of the parent list is kept as is?
        prefix = 0
        digest = None  # list digest state after position `prefix` (None: compute at the end)
        if parent.objs is not None and parent.ids is not None and n_old <= n:
            # warm writer: the caller's objects from the last save, by identity ...
            same = list(map(operator.is_, messages[:n_old], parent.objs))
            try:
                prefix = same.index(False)
            except ValueError:
                prefix = n_old
            # ... and the most recent ones by value: they are the ones callers tend to mutate
            for i in range(max(0, prefix - 4), prefix):
                raw, exact = self._encode_message(messages[i], f"messages[{i}]")
                if hasher.content_id(raw) != parent.ids[i]:
                    prefix = i
                    break
            if prefix == n_old:
                digest = parent.digest.copy() if parent.digest is not None else None
        elif 0 < n_old <= n:
            # cold writer: compare the JSON digest of the prefix with the parent's, encoding it in
            # slices (bounded memory). orjson writes NaN/Infinity as null, so a slice that contains
            # null is validated in full; orjson refuses other non-JSON values itself.
            d = hasher.new_digest()
            d.update(b"[")
            try:
                for j in range(0, n_old, 256):
                    part = orjson.dumps(messages[j:min(j + 256, n_old)], option=_ORJSON_OPTS)
                    if b"null" in part:
                        for i in range(j, min(j + 256, n_old)):
                            validate(messages[i], f"messages[{i}]")
                    if j:
                        d.update(b",")
                    d.update(memoryview(part)[1:-1])
                    del part
            except TypeError:
                d = None  # big ints, surrogates or non-JSON values: message by message below
            if d is not None:
                chk = d.copy()
                chk.update(b"]")
                if chk.hexdigest(16) == parent.digest_hex():
                    prefix = n_old
                    digest = d
                    self._window(messages, n_old, ids, raws, flags, parent)
        if prefix < n_old:
            # the list was rewritten (or could not be compared cheaply): compare message by message
            if parent.ids is None or not all(parent.ids[:n_old]):
                parent = self._reload_full(parent)
            for i in range(n):
                raw, exact = self._encode_message(messages[i], f"messages[{i}]")
                raws[i] = raw
                ids[i] = hasher.content_id(raw)
                flags[i] = FLAG_EXACT if exact else 0
            lim = min(n_old, n)
            i = 0
            while i < lim and ids[i] == parent.ids[i]:
                i += 1
            prefix = i
            digest = None
        append = prefix == n_old
        for i in range(prefix, n):
            if not ids[i]:
                raw, exact = self._encode_message(messages[i], f"messages[{i}]")
                raws[i] = raw
                ids[i] = hasher.content_id(raw)
                flags[i] = FLAG_EXACT if exact else 0
        if parent.ids is not None and append:
            ids[:prefix] = [x if x else y for x, y in zip(ids[:prefix], parent.ids[:prefix])]

        # 2. build refs for the changed tail, writing new chunks into the pack
        pack_id = os.urandom(PACK_ID_BYTES)
        pb = PackBuilder(pack_id, level=cfg.level)
        known = dict(parent.known)
        known_pieces = dict(parent.known_pieces)
        new_chunks = 0
        new_bytes = 0
        first_new = None
        tail_refs: list[Ref] = []
        for i in range(prefix, n):
            mid = ids[i]
            r = known.get(mid)
            if r is None:
                raw = raws[i]
                r = self._store_blob(pb, mid, raw, flags[i], known_pieces)
                known[mid] = r
                new_chunks += 1
                new_bytes += len(raw)
                if first_new is None:
                    first_new = i
            tail_refs.append(r)

        # 3. the new tree: append to the parent's spine, or rebuild from the common prefix
        new_nodes: dict[bytes, bytes] = dict(parent.nodes) if append else {}

        def seal(nid: bytes, data: bytes) -> bytes:
            # reuse a node only if the parent's tree has it (data the parent keeps alive)
            pack = new_nodes.get(nid) or parent.nodes.get(nid)
            if pack is None:
                pb.add(T_NODE, nid, data)
                pack = pack_id
            new_nodes[nid] = pack
            return pack

        if append:
            spine = parent.spine.copy()
            all_refs = None if parent.refs is None else parent.refs + tail_refs
        else:
            spine = Spine(self.params, upper=parent.spine.upper)
            all_refs = parent.refs[:prefix] + tail_refs
            for r in parent.refs[:prefix]:
                spine.append(r, seal, hasher.content_id)
        for r in tail_refs:
            spine.append(r, seal, hasher.content_id)

        # 4. the dictionary for the data block: the messages just before the first new one
        if first_new is not None and first_new > 0 and cfg.dict_bytes > 0:
            self._set_dictionary(pb, pack_id, messages, ids, raws, parent, all_refs, tail_refs, prefix, first_new)

        # 5. session state
        ss_ref = None
        ss_inline = None
        if has_session_state:
            validate(session_state, "session_state")
            raw, exact = encode_json(session_state)
            if len(raw) > cfg.inline_state_max:
                sid = hasher.content_id(raw)
                fl = FLAG_EXACT if exact else 0
                if parent_state_ref and parent_state_ref[0] == sid.hex():
                    ss_ref = parent_state_ref
                else:
                    # not added to known_pieces: a later save must never dedup against data that only
                    # an older checkpoint's session state keeps alive (it may be pruned and collected)
                    r = self._store_blob(pb, sid, raw, fl, {})
                    ss_ref = [sid.hex(), r.pack.hex(), len(raw), r.flags]
            else:
                ss_inline = session_state

        # 6. the state entry and the resulting ListState
        if append:
            size = parent.size + sum(r.size for r in tail_refs)
        else:
            size = sum(r.size for r in all_refs)
        if n == 0:
            state = None
        elif append and not tail_refs and parent.state is not None:
            state = parent.state
        else:
            def seal_upper(uid: bytes, data: bytes) -> bytes:
                pb.add(T_UPPER, uid, data)
                return pack_id
            sbytes = spine.encode_state(seal_upper, hasher.content_id)
            sid = hasher.content_id(sbytes)
            pb.add(T_STATE, sid, sbytes)
            state = (sid, pack_id)
        if digest is not None:
            for i in range(prefix, n):
                if i > 0:
                    digest.update(b",")
                digest.update(raws[i])
        else:
            digest = _json_digest(hasher, (raws[i] if raws[i] is not None else encode_json(messages[i])[0]
                                           for i in range(n)))
        # keep the most recent raw JSON (a few dictionaries' worth) for the next save's dictionary
        old_raws = parent.raws if (parent.raws is not None and len(parent.raws) == n_old) else [None] * n_old
        new_raws = old_raws[:prefix] + raws[prefix:]
        keep = RECENT_RAW_KEEP * max(cfg.dict_bytes, 1)
        acc = 0
        for i in range(n - 1, -1, -1):
            if new_raws[i] is not None:
                acc += len(new_raws[i])
                if acc > keep:
                    new_raws[:i + 1] = [None] * (i + 1)
                    break
        count = n
        if not append:
            # dedup only ever against data the new checkpoint itself keeps alive (GC safety): drop
            # what the rewritten list no longer references
            known = {r.id: r for r in all_refs}
            known_pieces = {k: r for k, r in known_pieces.items() if r.pack == pack_id}
        ls = ListState(spine=spine, count=count, size=size, digest=digest, state=state,
                       ids=ids, refs=all_refs, objs=messages, raws=new_raws, known=known,
                       known_pieces=known_pieces, nodes=new_nodes)
        if pb.empty:
            return PreparedSave(None, None, {"data": 0, "meta": 0}, ls, ss_ref, ss_inline, has_session_state, 0, 0)
        data, sizes = pb.build()
        return PreparedSave(pack_id, data, sizes, ls, ss_ref, ss_inline, has_session_state, new_chunks, new_bytes,
                            pb.raw_blocks)

    def _window(self, messages, n_old, ids, raws, flags, parent) -> None:
        """Encode the last messages before ``n_old`` (about a dictionary's worth) for the dictionary."""
        want = max(self.config.dict_bytes, 1)
        acc = 0
        i = n_old
        while i > 0 and acc < want:
            i -= 1
            raw, exact = encode_json(messages[i])
            raws[i] = raw
            ids[i] = self.hasher.content_id(raw)
            flags[i] = FLAG_EXACT if exact else 0
            acc += len(raw)

    def _reload_full(self, parent: ListState) -> ListState:
        """Load every ref of ``parent`` (for a list that is not an append of it)."""
        if parent.state is None:
            ls = self.list_state(None)
            return ls
        fake = Manifest(kind=KIND_CHECKPOINT, run_id="", seq=0, write_id="", created=datetime.now(timezone.utc),
                        count=parent.count, size=parent.size,
                        state=[parent.state[0].hex(), parent.state[1].hex()])
        ls = self.list_state(fake, full=True)
        ls.known.update(parent.known)
        ls.known_pieces.update(parent.known_pieces)
        return ls

    def _store_blob(self, pb: PackBuilder, bid: bytes, raw: bytes, flags: int, known_pieces: dict) -> Ref:
        cfg = self.config
        if len(raw) <= cfg.cdc_threshold:
            pb.add(T_CHUNK, bid, raw)
            return Ref(bid, len(raw), 1, flags, pb.pack_id)
        pieces = []
        for c in fastcdc.fastcdc(raw, min_size=cfg.cdc_min, avg_size=cfg.cdc_avg, max_size=cfg.cdc_max, fat=True):
            piece = raw[c.offset:c.offset + c.length]
            pid = self.hasher.content_id(piece)
            pr = known_pieces.get(pid)
            if pr is None:
                pb.add(T_CHUNK, pid, piece)
                pr = Ref(pid, len(piece), 1, 0, pb.pack_id)
                known_pieces[pid] = pr
            pieces.append(pr)
        pb.add(T_PIECES, bid, encode_pieces(pieces))
        return Ref(bid, len(raw), 1, flags | FLAG_PIECES, pb.pack_id)

    def _set_dictionary(self, pb, pack_id, messages, ids, raws, parent, all_refs, tail_refs, prefix, b) -> None:
        """Choose messages ``[a, b)`` before the first new message as the data block's dictionary."""
        want = self.config.dict_bytes

        def size_at(i):
            if i >= prefix:
                return tail_refs[i - prefix].size
            if all_refs is not None:
                return all_refs[i].size
            if raws[i] is not None:
                return len(raws[i])
            if parent.raws is not None and i < len(parent.raws) and parent.raws[i] is not None:
                return len(parent.raws[i])
            return None

        a = b
        acc = 0
        while a > 0 and acc < want:
            s = size_at(a - 1)
            if s is None:
                break
            a -= 1
            acc += s
        if a == b:
            return
        parts = []
        for i in range(a, b):
            raw = raws[i]
            if raw is None and parent.raws is not None and i < len(parent.raws) and i < prefix:
                raw = parent.raws[i]
            if raw is None:
                raw, _ = encode_json(messages[i])
                if self.hasher.content_id(raw) != ids[i]:
                    return
            parts.append(raw)
        blob = b"".join(parts)
        length = min(want, len(blob))
        digest = self.hasher.content_id(b"".join(ids[a:b]))
        # the list is described by this save's own state entry, which goes into this pack
        pb.set_dictionary(DictSpec(None, None, a, b, length, digest), blob[len(blob) - length:])

    # ------------------------------------------------------------------------------------------
    # manifests and index records

    def manifest_key(self, run_key: str, seq: int) -> str:
        """Key of manifest ``seq`` of a run."""
        return keys.manifest_key(run_key, seq)

    def read_manifest_key(self, key: str, light: bool = False) -> Manifest:
        """Read and verify one manifest (also that it belongs under ``key``: its run and sequence
        number must match); ``light``: see :meth:`Manifest.from_bytes`. Raises ObjectNotFound,
        IntegrityError."""
        m = Manifest.from_bytes(key, self.store.get(key), light)
        parts = key.split("/")
        if (len(parts) == 4 and (keys.seq_from_manifest_key(key) != m.seq or self.run_key(m.run_id) != parts[1])):
            raise IntegrityError(key, f"holds the manifest of run {m.run_id!r} position {m.seq}, not of this key")
        return m

    def head(self, run_key: str) -> Manifest | None:
        """Return the newest manifest of the run (one LIST with limit 1, one GET), or None."""
        for info in self.store.list(keys.manifests_prefix(run_key), limit=1):
            try:
                return self.read_manifest_key(info.key)
            except ObjectNotFound:
                return self.head(run_key)  # deleted between LIST and GET: look again
        return None

    def manifest_seqs(self, run_key: str) -> list[int]:
        """Return all manifest sequence numbers of the run, newest first (LIST only)."""
        return [keys.seq_from_manifest_key(i.key) for i in self.store.list(keys.manifests_prefix(run_key))]

    def publish(self, run_key: str, m: Manifest) -> bytes:
        """Write manifest ``m`` create-only at its sequence number; return the bytes written.

        A refusal is resolved by reading the object back: if it carries our write id, an earlier
        attempt of ours landed and this succeeds.

        Raises:
            ConflictError: another writer holds that sequence number.
        """
        key = keys.manifest_key(run_key, m.seq)
        data = m.to_bytes()
        try:
            self.store.put(key, data)
        except PreconditionFailed:
            try:
                other = self.read_manifest_key(key)
            except ObjectNotFound:
                raise PreconditionFailed(key, f"sequence {m.seq} of run {m.run_id!r} was taken and released") from None
            if other.write_id != m.write_id:
                raise
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

    def delete_checkpoint_objects(self, run_key: str, entries: list[tuple[int, str | None]]) -> None:
        """Delete manifests (and their index records) for ``(seq, checkpoint id or None)`` pairs.

        Index records go first, so a crash never leaves a live-looking index without its manifest
        being the one that is gone.
        """
        idx = [keys.index_key(run_key, self.checkpoint_key(c)) for s, c in entries if c and seq_hint(c) != s]
        if idx:
            self.store.delete_many(idx)
        self.store.delete_many([keys.manifest_key(run_key, s) for s, _ in entries])


__all__ = ["Repository", "ListState", "PreparedSave", "KIND_CHECKPOINT", "KIND_ROLLBACK", "KIND_TOMBSTONE"]
