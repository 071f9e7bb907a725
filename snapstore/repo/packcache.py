"""The pack cache: parsed, checksum-verified packs held in memory, and the reads that fill it.

Layer 3, one part of :class:`snapstore.repo.repository.Repository` (``repo.cache``). It owns:

* an LRU of parsed packs (:class:`~snapstore.format.pack.Pack`, whole or ranged) bounded by a byte
  budget (:attr:`PackCache.limit`, :meth:`PackCache.budget`);
* the repository's lock (:attr:`PackCache.lock`, re-entrant; the other parts take it too) and the
  bounded thread pool parallel GETs run on (:attr:`PackCache.pool`);
* what reads learned about packs: the ones found corrupt (read twice), the ones found gone (retired
  by GC and deleted), and whether ranged reads are allowed (:meth:`PackCache.whole_packs`).

See docs/format.md §19 for the byte-level read procedure (ranged reads included).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from ..errors import IntegrityError, ObjectNotFound, ObjectTooLarge, SnapstoreError
from ..format import keys
from ..format.manifest import Manifest
from ..format.pack import T_CHUNK, Pack
from ..format.rangedpack import parse_in_ranges, parse_tail
from ..stores.base import ObjectStore


DEFAULT_LIMIT = 256 << 20
"""The pack cache's default byte budget (bytes)."""

ENTRY_COST = 200
"""Bytes counted per entry of a cached pack: its ``(type, id)`` key, id bytes and Entry tuple."""

PACK_COST = 1024
"""Bytes counted per cached pack besides its data and entries (the Pack object, its block list)."""


def pack_cost(pack: Pack) -> int:
    """Bytes a cached pack may hold (its budget charge): its compressed bytes (a ranged pack:
    every block's, as it may fetch them all), every block uncompressed (what
    :meth:`~snapstore.format.pack.Pack.raw_block` may keep), :data:`ENTRY_COST` per entry and
    :data:`PACK_COST`. An upper bound, fixed when the pack is cached."""
    comp = max(pack.nbytes, sum(b.clen for b in pack.blocks) if not pack.whole else 0)
    return comp + sum(b.rawlen for b in pack.blocks) + ENTRY_COST * len(pack.entries) + PACK_COST


class WaveGate:
    """Holds a parallel wave's decoding back while its GETs are still starting.

    Decoding a pack costs CPU under the GIL (about 2 ms for a tier pack read from a 1 MiB suffix),
    so a response decoded while other threads of the same wave are still building and signing
    their requests delays their sends: on a long run the wave's GETs then start over more than one
    round trip (``benchmarks/wave_spread.py --probe``: at 10,000 saves and 20 ms, 71-79 ms of
    decoding before the last send). A task of the wave calls :meth:`running` when a thread begins
    it, :meth:`sent` with its token just before its first GET or when it ends without one, and
    :meth:`wait` once its bytes are in, before decoding them: the wait returns when no running
    task of the wave is still before its GET. Tasks not yet running (queued behind other work in
    the shared pool) are not waited for, so a wait never depends on a task whose thread it could
    be holding; and a task before its GET waits for nothing of the wave's. Thread-safe.
    """

    WAIT_MAX = 1.0
    """Seconds a decode waits at most (a safety bound; the starts take milliseconds)."""

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._before = 0  # running tasks that have not reached their GET

    def running(self) -> list:
        """A task of the wave begins; returns its token for :meth:`sent`."""
        with self._cv:
            self._before += 1
        return [False]

    def sent(self, token: list) -> None:
        """The task holding ``token`` is about to send its GET, or ends without one (idempotent)."""
        if token[0]:
            return
        token[0] = True
        with self._cv:
            self._before -= 1
            if self._before <= 0:
                self._cv.notify_all()

    def wait(self) -> None:
        """Block until every running task of the wave has reached its GET (at most :attr:`WAIT_MAX`)."""
        with self._cv:
            self._cv.wait_for(lambda: self._before <= 0, self.WAIT_MAX)


class PackCache:
    """Parsed packs in memory (LRU by bytes), the repository's lock and thread pool.

    Thread-safe. Args:
        store: the object store packs are read from.
        limit: byte budget of the cache (bytes; each pack counts :func:`pack_cost`: its compressed
            and uncompressed bytes and its entry table, a bound on what parsing and decompressing
            it holds).
        max_workers: threads of the pool parallel GETs run on (>= 1; settable until first use).
    """

    RANGE_TAIL = 1 << 20
    """Bytes of a pack's end the read path asks for first (one suffix-range GET). A pack no longer
    than this comes whole in that one GET, as before; a longer one yields its header and the blocks
    at its end, and the reader then fetches only the blocks holding the entries it needs
    (docs/format.md §19, ranged reads)."""

    RANGE_TAIL_MIN = 64 << 10
    """Smallest suffix a restore asks for (bytes; see :meth:`range_tail`)."""

    CORRUPT_MAX = 10_000
    """Most corrupt packs a cache remembers (:meth:`corrupt_packs`); the record is cleared when full."""

    def __init__(self, store: ObjectStore, limit: int, max_workers: int):
        self.store = store
        self.lock = threading.RLock()
        """The repository's lock (re-entrant): held for every change of the parts' bookkeeping."""
        self.max_workers = max(1, max_workers)
        """Threads of :attr:`pool` (read when the pool is first made)."""
        self._packs: OrderedDict[bytes, Pack] = OrderedDict()
        self._bytes = 0
        self._cost: dict[bytes, int] = {}  # pack id -> bytes it counts against the budget
        self._limit = limit
        self._pool: ThreadPoolExecutor | None = None
        self._corrupt: dict = {}  # pack -> IntegrityError: found corrupt (read twice); readers use other copies
        self._gone: set = set()  # packs found missing (retired by GC): go straight to forwarding
        self._whole_only = 0  # > 0 inside whole_packs(): no ranged pack reads
        self.shared_dicts = None
        """Optional ``shared_dicts(shared pack id, content id) -> bytes``: given to every cached
        pack with array blocks of kind 6 (:attr:`~snapstore.format.pack.Pack.shared_dicts`, their
        dictionary: a shared object's chunk, docs/format.md §8); set by the repository."""
        self.key_of = None
        """Optional ``key_of(pack id) -> key or None``: where a pack that is not under ``packs/``
        lives (an archive bundle, docs/format.md §28; :class:`~snapstore.repo.bundles.BundleCatalogue`)."""

    # ------------------------------------------------------------------------------------------
    # the LRU

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The thread pool for parallel GETs (made on first use, :attr:`max_workers` threads)."""
        with self.lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="snapstore-get")
            return self._pool

    def close(self) -> None:
        """Shut down the thread pool (without waiting for running GETs)."""
        if self._pool:
            self._pool.shutdown(wait=False)

    @property
    def limit(self) -> int:
        """The byte budget (bytes). Settable: a smaller one evicts on the next put."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value

    @contextmanager
    def budget(self, limit: int):
        """While inside, the byte budget is at most ``limit`` bytes (GC bounds its memory so); the
        budget before is restored on exit. Yields the budget before (bytes)."""
        before = self._limit
        self._limit = min(before, limit)
        try:
            yield before
        finally:
            self._limit = before

    @property
    def packs(self) -> "OrderedDict[bytes, Pack]":
        """The live mapping pack id -> cached :class:`Pack`, for hot loops that look up many
        entries. Read only; hold :attr:`lock` for anything but single lookups."""
        return self._packs

    def get(self, pack_id: bytes) -> Pack | None:
        """The cached pack ``pack_id`` or None (no GET, no LRU update)."""
        return self._packs.get(pack_id)

    def __contains__(self, pack_id: bytes) -> bool:
        return pack_id in self._packs

    def __getitem__(self, pack_id: bytes) -> Pack:
        """The cached pack ``pack_id``. Raises KeyError when it is not cached."""
        return self._packs[pack_id]

    def at_hand(self) -> "AtHand":
        """The cache as one read sees it, without copying it: see :class:`AtHand`."""
        return AtHand(self._packs, self.lock)

    def any_ranged(self) -> bool:
        """True when a cached pack was read with byte ranges (some of its blocks may be missing)."""
        with self.lock:
            return any(not p.whole for p in self._packs.values())

    def put(self, pack: Pack) -> None:
        """Cache ``pack`` (a whole read replaces a ranged one), evicting the least recently used
        packs beyond the budget (the newest pack always stays)."""
        self.attach(pack)
        with self.lock:
            old = self._packs.get(pack.id)
            if old is not None:
                if old.whole or not pack.whole:
                    return
                self.drop(pack.id)  # a whole read replaces a ranged one
                pack.hold_blocks(old.held_blocks())
            self._packs[pack.id] = pack
            cost = self._cost[pack.id] = pack_cost(pack)
            self._bytes += cost
            while self._bytes > self._limit and len(self._packs) > 1:
                oid, _ = self._packs.popitem(last=False)
                self._bytes -= self._cost.pop(oid)

    def attach(self, pack: Pack) -> Pack:
        """Give ``pack`` this cache's :attr:`shared_dicts` when one of its array blocks needs a
        shared object as its dictionary (block kind 6). Returns ``pack``."""
        if self.shared_dicts is not None and pack.shared_dicts is None and \
                any(b.shared is not None for b in pack.blocks):
            pack.shared_dicts = self.shared_dicts
        return pack

    def drop(self, pack_id: bytes) -> None:
        """Evict pack ``pack_id`` if cached."""
        with self.lock:
            if self._packs.pop(pack_id, None) is not None:
                self._bytes -= self._cost.pop(pack_id)

    def remember(self, pack_id: bytes, data: bytes, raw_blocks: dict | None = None) -> Pack:
        """Cache a pack this process built (before or after writing it), with its blocks already
        uncompressed (``raw_blocks``: block index -> bytes, from :attr:`PackBuilder.raw_blocks`), so
        that merging it into a tier pack needs neither a GET nor its dictionary. Returns the Pack.

        Raises:
            IntegrityError: ``data`` is not a valid pack (a bug: it was just built).
        """
        p = self.attach(Pack.parse(keys.pack_key(pack_id), data, pack_id))
        p.hold_blocks(raw_blocks or {})
        with self.lock:
            old = self._packs.get(pack_id)
            if old is not None:
                old.hold_blocks(raw_blocks or {})
                return old
        self.put(p)
        return p

    # ------------------------------------------------------------------------------------------
    # what reads learned: corrupt, gone, whole-only

    @contextmanager
    def whole_packs(self):
        """While inside, every pack is read whole and checksum-verified (verify and GC, which check
        or copy whole packs): no ranged reads, and a pack cached from ranged reads is read again."""
        with self.lock:
            self._whole_only += 1
        try:
            yield
        finally:
            with self.lock:
                self._whole_only -= 1

    def corrupt_packs(self) -> dict:
        """Packs found corrupt so far: pack id -> the IntegrityError (names the key). Readers fall
        back to other copies of their entries; GC and verify report them."""
        with self.lock:
            return dict(self._corrupt)

    def forget_corrupt(self) -> None:
        """Forget which packs were found corrupt (GC and verify judge damage on what the store
        holds now, not on earlier reads)."""
        with self.lock:
            self._corrupt.clear()

    def is_damage(self, err: IntegrityError) -> bool:
        """Is ``err`` the error of a pack found corrupt (not of an entry absent from a sound pack)?"""
        with self.lock:
            return any(err is e or getattr(err, "key", None) == e.key for e in self._corrupt.values())

    def is_corrupt(self, pack_id: bytes) -> bool:
        """Was pack ``pack_id`` found corrupt?"""
        return pack_id in self._corrupt

    def mark_gone(self, pack_ids) -> None:
        """Remember the packs ``pack_ids`` (iterable of ids) as deleted: reads of them raise
        ObjectNotFound without a GET (and readers go to their forwarding records)."""
        with self.lock:
            self._gone.update(pack_ids)

    # ------------------------------------------------------------------------------------------
    # reading packs

    def range_tail(self, m: Manifest) -> int:
        """Bytes of each pack's end a restore of checkpoint ``m`` asks for first: what the
        checkpoint needs, uncompressed (its messages' JSON bytes and its session state's, from the
        manifest), plus 2 KiB per message for tree metadata (a state entry per save, nodes) and
        64 KiB, at least :attr:`RANGE_TAIL_MIN`. A pack that holds only what the checkpoint needs
        is no longer than that (its chunks are compressed), so it still comes whole in one GET;
        a longer pack holds other checkpoints' data (older session states, rewritten or rolled
        back messages) and is read with byte ranges (docs/format.md §19)."""
        need = m.size or 0
        if m.session_state_tree is not None:
            need += m.session_state_tree.size
        elif m.session_state_ref is not None:
            need += int(m.session_state_ref[2])
        return max(self.RANGE_TAIL_MIN, need + 2048 * (m.count or 0) + (64 << 10))

    def get_pack(self, pack_id: bytes, ranged: bool = False, tail: int | None = None,
                 gate: "tuple[WaveGate, list] | None" = None) -> Pack:
        """Return the parsed pack (cached): whole and checksum-verified, or with ``ranged=True`` (a
        restore) possibly a :class:`~snapstore.format.pack.RangedPack`: a pack longer than
        :attr:`RANGE_TAIL` is read from one suffix-range GET (its header and its last blocks), its
        other blocks fetched as they are needed (:meth:`fetch_pack_blocks`), each entry verified by
        its content id. Without ``ranged`` a cached ranged pack is read again whole; a pack larger
        than a store returns whole (:data:`~snapstore.stores.base.PACK_WHOLE_READ_MAX`: the store
        raises ObjectTooLarge before reading it) is read in byte ranges instead, every byte once
        into its checksum (:func:`~snapstore.format.pack.parse_in_ranges`), its blocks fetched as
        needed. ``tail``: the suffix to ask for (bytes; default :attr:`RANGE_TAIL`). ``gate``: ``(a
        WaveGate, the task's token)`` of the parallel wave this read belongs to: the token is
        passed just before the GET, and the bytes are decoded only once the wave's running tasks
        have all reached theirs (:class:`WaveGate`).

        A pack that fails to parse is read a second time (a transfer error is not damage); if it
        fails again it is remembered as corrupt (:meth:`corrupt_packs`), and later calls raise the
        same error without a GET, so a reader that falls back to other copies of its entries
        (forwarding targets, segments) does not fetch the damaged pack once per entry.

        Raises:
            ObjectNotFound: the pack is missing (message names the key).
            IntegrityError: the pack is corrupt (message names the key).
        """
        key = (self.key_of(pack_id) if self.key_of is not None else None) or keys.pack_key(pack_id)
        with self.lock:
            p = self._packs.get(pack_id)
            ranged = ranged and not self._whole_only
            if p is not None and (p.whole or ranged or getattr(p, "checksummed", False)):
                self._packs.move_to_end(pack_id)
                return p
            if pack_id in self._gone:
                raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)")
            bad = self._corrupt.get(pack_id)
        if bad is not None:
            raise bad
        tail = max(1 << 10, tail or self.RANGE_TAIL)
        for attempt in range(2):
            try:
                p = self.attach(self._read(pack_id, key, ranged, tail, gate))
                break
            except IntegrityError as e:
                if attempt == 1:
                    with self.lock:
                        if len(self._corrupt) >= self.CORRUPT_MAX:
                            self._corrupt.clear()
                        self._corrupt[pack_id] = e
                    raise
        self.put(p)
        return p

    def prime(self, pack_ids, tail: int | None = None) -> None:
        """Read the packs ``pack_ids`` (ids, bytes) that are not cached together, in one batched
        store read, when the store has one (``get_batch``: the SQLite store, one statement for a
        restore's few packs instead of one each), and cache each one whole, checksum-verified
        (:meth:`Pack.parse`). Only packs shorter than the suffix :meth:`get_pack` would ask for
        (``tail`` bytes; default :attr:`RANGE_TAIL`) are read so: for those its suffix read returns
        the whole pack too. Packs not returned, or that fail to parse, are left to
        :meth:`get_pack`, which reads them itself (and reads a damaged one twice before it calls
        it corrupt); so are packs known missing or corrupt. Nothing is raised for a pack; a failed
        batch read is left to the reads that follow (which raise their own errors)."""
        batch = getattr(self.store, "get_batch", None)
        if batch is None:
            return
        with self.lock:
            todo = {keys.pack_key(p): p for p in dict.fromkeys(pack_ids)
                    if p not in self._packs and p not in self._gone and p not in self._corrupt}
        if len(todo) < 2:
            return
        try:
            got = batch(list(todo), max(1 << 10, tail or self.RANGE_TAIL))
        except SnapstoreError:
            return
        for key, data in got.items():
            try:
                p = Pack.parse(key, data, todo[key])
            except IntegrityError:
                continue
            self.put(p)

    def _read(self, pack_id: bytes, key: str, ranged: bool, tail: int, gate=None) -> Pack:
        """One read and parse of pack ``pack_id`` (see :meth:`get_pack`; ``gate`` as there).
        Raises ObjectNotFound (and remembers the pack as gone) or IntegrityError."""
        store = self.store
        fetch = lambda a, b: store.get(key, (a, b))  # noqa: E731
        big = None
        if gate is not None:
            gate[0].sent(gate[1])
        try:
            data = store.get(key, (-tail, None)) if ranged else store.get(key)
            if gate is not None:
                gate[0].wait()
        except ObjectTooLarge as e:  # too large to read whole: in byte ranges, checksum streamed
            data, big = b"", e.size
        except ObjectNotFound:
            with self.lock:
                self._gone.add(pack_id)
            raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)") from None
        if big is not None:
            return parse_in_ranges(key, big, pack_id, fetch)
        if not ranged:
            return Pack.parse(key, data, pack_id)
        p = parse_tail(key, data, tail, pack_id, fetch)
        if not p.whole:
            # the metadata blocks (nodes, states, spines): every restore needs them;
            # writers put them last, in the tail just read (older packs: block 0)
            meta = p.missing({e.block for e in p.entries.values() if e.type != T_CHUNK})
            for a, b in p.ranges(meta):
                p.add_range(a, store.get(key, (a, b)))
        return p

    def fetch_pack_blocks(self, want: dict) -> None:
        """Fetch, in one parallel wave, the blocks ``want`` names (``{ranged pack: block indexes}``)
        that are not read yet; adjacent blocks of one pack come in one ranged GET. A failed GET is
        left to the read that needs the block. Whole packs need nothing."""
        jobs = [(p, a, b) for p, blocks in want.items() if not p.whole for a, b in p.ranges(p.missing(blocks))]

        def one(job):
            p, a, b = job
            try:
                data = self.store.get(p.key, (a, b))
            except SnapstoreError:
                return
            p.add_range(a, data)
        if len(jobs) == 1:
            one(jobs[0])
        elif jobs:
            list(self.pool.map(one, jobs))


class AtHand(dict):
    """The pack cache as one list read sees it: ``get(pack id)`` looks a pack up under the cache's
    lock the first time it is named and keeps that answer (a pack evicted meanwhile stays usable: a
    parsed pack never changes). Not a copy of the whole cache per read, which cost what every run
    read so far holds (a reader of thousands of runs, e.g. a LangGraph ``list(None)``)."""

    __slots__ = ("_packs", "_lock")

    def __init__(self, packs, lock):
        super().__init__()
        self._packs, self._lock = packs, lock

    def __missing__(self, pack_id):
        with self._lock:
            p = self._packs.get(pack_id)
        self[pack_id] = p
        return p

    def get(self, pack_id, default=None):
        """The pack ``pack_id`` as first seen by this read, or ``default`` when it was not cached."""
        p = self[pack_id]
        return default if p is None else p

    def __contains__(self, pack_id) -> bool:
        return self[pack_id] is not None
