"""The read path: the pack cache, locating entries, and reading trees and restores.

Layer 3, the :class:`ReadPath` mixin of :class:`snapstore.repo.repository.Repository`. It holds:

* the pack cache (parsed, checksum-verified packs; parallel fetches on a bounded thread pool);
* the segment index (format 2): entries of a run's segment packs, found by ``(type, id)`` before
  the location hint in a ref is followed (docs/format.md §10);
* forwarding lookups for readers: where the entries of a pack retired by GC went (the hints of
  ``gc/fwd-cache``, then the forwarding map itself; :mod:`snapstore.maintenance.forwarding` writes it);
* reading entries (verified by content id, data blocks decompressed with their dictionary), tree
  nodes and spines, and whole restores (messages, session state, a writer's :class:`ListState`).

The mixin uses the attributes :meth:`Repository.__init__` sets (store, config, hasher, params, the
cache and its lock). See docs/format.md §19 for the byte-level read procedure.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from operator import itemgetter
from typing import Callable

import orjson

from ..errors import IntegrityError, NotFoundError, ObjectNotFound, ObjectTooLarge, SnapstoreError
from ..format import keys
from ..format.codec import decode_json, loads_exact
from ..format.ids import Hasher
from ..format.manifest import Manifest
from ..format.forward import decode_forward, decode_forward_cache, decode_forward_shard
from ..format.pack import T_CHUNK, T_HOLE, T_NODE, T_PIECES, T_STATE, T_UPPER, T_VALUE, DictSpec, Pack
from ..format.rangedpack import parse_in_ranges, parse_tail
from ..format.tree import FLAG_EXACT, FLAG_PIECES, Ref, Spine, decode_node, decode_pieces, exact_count
from ..format.valuetree import READ_PIECE_MAX, ValueTree
from .prepare import RECENT_RAW_KEEP, ListState, ValueKnown, _json_digest
from ..stores.base import store_capabilities


_REF_ID = itemgetter(0)
"""A :class:`~snapstore.format.tree.Ref`'s ``id`` (its first field), for C-level passes over refs."""


class _ReadCtx:
    """Messages decoded so far by an in-order restore; lets data blocks find their dictionary.

    ``verified``: whether the raws added were each checked against their content id. When not
    (a restore that verifies the whole list afterwards), the raws a dictionary is cut from are
    checked here first: a dictionary made of damaged bytes would decompress a block into
    garbage, and the pack would keep that garbage as its decompressed block."""

    def __init__(self, hasher: Hasher, verified: bool = True, refs: list | None = None, raws: list | None = None):
        """``refs``/``raws``: the list being restored and the list its raws are appended to, in
        order, by the caller (instead of :meth:`add`): message ``i`` is known once ``raws`` holds
        it, and its id is ``refs[i].id``."""
        self.hasher = hasher
        self.verified = verified
        self.refs = refs
        self.ids: list[bytes] = []
        self.raws: list = [] if raws is None else raws

    def add(self, mid: bytes, raw: bytes) -> None:
        self.ids.append(mid)
        self.raws.append(raw)

    def _id(self, i: int) -> bytes:
        return self.refs[i].id if self.refs is not None else self.ids[i]

    def dict_for(self, spec: DictSpec) -> bytes | None:
        if spec.end > len(self.raws) or spec.start > spec.end:
            return None
        ids = ([r.id for r in self.refs[spec.start:spec.end]] if self.refs is not None
               else self.ids[spec.start:spec.end])
        if self.hasher.content_id(b"".join(ids)) != spec.digest:
            return None
        # the last ``length`` bytes of messages [start, end): join only as many as needed
        parts, acc, i = [], 0, spec.end
        while i > spec.start and acc < spec.length:
            i -= 1
            if not self.verified and self.hasher.content_id(self.raws[i]) != self._id(i):
                return None  # the caller resolves the dictionary from verified reads
            parts.append(self.raws[i])
            acc += len(self.raws[i])
        if acc < spec.length:
            return None
        blob = b"".join(reversed(parts))
        return blob[len(blob) - spec.length:]


def _arrays_exact(m: Manifest) -> bool | None:
    """What record ``m`` says of its run's arrays (``messages.a``, :attr:`ListState.arrays_exact`):
    True (1), False (0), or None when it does not say (a record written before ``messages.a``)."""
    return None if m.arrays is None else m.arrays == 1


class ReadPath:
    """Read path of :class:`~snapstore.repo.repository.Repository`: pack cache, segment index,
    forwarding lookups, entries, trees and restores (a mixin; see the module docstring)."""

    # ------------------------------------------------------------------------------------------
    # packs

    def _pool_get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="snapstore-get")
            return self._pool

    def _cache_put(self, pack: Pack) -> None:
        with self._lock:
            old = self._cache.get(pack.id)
            if old is not None:
                if old.whole or not pack.whole:
                    return
                self._cache_drop(pack.id)  # a whole read replaces a ranged one
                pack._raw.update(old._raw)
            self._cache[pack.id] = pack
            pack._acct = max(pack.nbytes, sum(b.clen for b in pack.blocks) if not pack.whole else 0) * 3
            self._cache_bytes += pack._acct
            while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
                oid, old = self._cache.popitem(last=False)
                self._cache_bytes -= old._acct

    def _cache_drop(self, pack_id: bytes) -> None:
        with self._lock:
            old = self._cache.pop(pack_id, None)
            if old is not None:
                self._cache_bytes -= old._acct

    RANGE_TAIL = 1 << 20
    """Bytes of a pack's end the read path asks for first (one suffix-range GET). A pack no longer
    than this comes whole in that one GET, as before; a longer one yields its header and the blocks
    at its end, and the reader then fetches only the blocks holding the entries it needs
    (docs/format.md §19, ranged reads)."""

    RANGE_TAIL_MIN = 64 << 10
    """Smallest suffix a restore asks for (bytes; see :meth:`range_tail`)."""

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

    @contextmanager
    def whole_packs(self):
        """While inside, every pack is read whole and checksum-verified (verify and GC, which check
        or copy whole packs): no ranged reads, and a pack cached from ranged reads is read again."""
        with self._lock:
            self._whole_only = getattr(self, "_whole_only", 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._whole_only -= 1

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
            self._where.update(dict.fromkeys(pack.entries, pack.id))

    def segment_index(self, packs) -> dict:
        """``(type, id) -> pack id`` over ``packs`` (a run's segments and the packs their forwarding
        records lead to; later packs win: the newest copy), reading again any the cache evicted
        since they were fetched: an entry missing from the index would be looked for at its
        location hint, a per-save pack its writer deleted once it was merged. Packs gone or
        damaged are left out (their entries are found through hints and other copies)."""
        out: dict = {}
        for pid in packs:
            with self._lock:
                p = self._cache.get(pid)
            if p is None:
                try:
                    p = self.get_pack(pid)
                except SnapstoreError:
                    continue
            for k in p.entries:
                out[k] = pid
        return out

    def pack_absent(self, pack_id: bytes) -> bool:
        """Is pack ``pack_id`` missing from the store? Cached or known damaged: no; otherwise it is
        read (a pack the cache evicted since it was fetched is read again, and a damaged one is
        remembered as corrupt). Tells a segment merged away by its writer from an evicted one."""
        with self._lock:
            if pack_id in self._cache or pack_id in self._corrupt:
                return False
        try:
            self.get_pack(pack_id)
        except NotFoundError:
            return True
        except SnapstoreError:
            return False  # damaged: its entries are read from other copies
        return False

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

    def prefetch_segments(self, segs, also=(), tail: int | None = None) -> None:
        """Fetch a record's segment packs (and the packs in ``also``) in one parallel wave, and
        index their entries, so that reads find entries there before following the location hints
        in their refs (the per-save packs hints name are deleted once merged into a tier pack).

        A segment GC rewrote (a mostly dead tier pack, docs/format.md §21) is found through its
        forwarding record, and the packs it leads to are indexed in its place. A segment that is
        simply gone (merged away since the record was read) is skipped: the caller reads the
        newest record again when an entry cannot be found.

        ``tail``: bytes of each pack's end to ask for first (default :attr:`RANGE_TAIL`; a restore
        passes :meth:`range_tail` of its checkpoint): a longer pack is read with byte ranges.
        """
        segs = list(segs or ())
        packs = [s.pack for s in segs]
        # each segment itself first, even one GC rewrote (retired, kept through the grace period):
        # it still holds everything, including entries its rewrite dropped that a checkpoint
        # written since needs; only a segment that is gone is looked up in the forwarding map
        also = [p for p in also if p]
        got: set = set()  # read in this wave (a pack the cache evicts again is not gone)
        self.prefetch(packs + also, no_forward=set(packs + also) if segs else (), tail=tail, inline_ok=True, got=got)
        # a segment GC rewrote and deleted: fetch where its forwarding hint says, and if the hint
        # is stale (or there is none), read its record in the forwarding map
        hints = self.forward_hints(load=False)
        gone = {}
        for p in packs:
            with self._lock:
                if p in self._cache:
                    continue
                to = self._fwd.get(p)
            gone[p] = to if to is not None else hints.get(p)
        hinted = [t for to in gone.values() if to for t in to]
        if hinted:
            self.prefetch(hinted, got=got)
        stale = []
        for p, to in gone.items():
            with self._lock:
                if to and all(t in self._cache for t in to):
                    continue
            try:
                to = self.forward(p, fresh=True)
            except SnapstoreError:
                to = None
            if to:
                stale.extend(to)
        if stale:
            self.prefetch(stale, got=got)
        held = self.segment_packs(segs, also=got)
        for p in held:
            with self._lock:
                pk = self._cache.get(p)
            if pk is None:
                # read in this wave but evicted since (the run's segments outgrow the pack cache):
                # read again, so that its entries are indexed and not looked for at their hints
                try:
                    pk = self.get_pack(p, ranged=True, tail=tail)
                except SnapstoreError:
                    continue
            if not getattr(pk, "indexed", False):
                self._index_pack(pk)
        # remember why a segment could not be read: a read that then finds an entry nowhere names
        # the segment (the object that is damaged or gone), not the per-save pack its hint names
        errors = {}
        with self._lock:
            missing = [p for p in packs if p not in self._cache and not self._fwd.get(p)]
        for p in missing:
            if p in hints:
                continue
            try:
                self.get_pack(p, ranged=True, tail=tail)
            except SnapstoreError as e:
                errors[p] = e
        with self._lock:
            self._seg_errors = errors

    def segment_packs(self, segs, also=()) -> list[bytes]:
        """The cached packs that hold a segment list's entries: each segment itself, or for one
        GC rewrote, the packs its forwarding record leads to (from memory and the hint cache only;
        :meth:`prefetch_segments` fetches them). ``also``: pack ids to count as cached (read by
        the caller, possibly evicted since)."""
        out: list[bytes] = []
        hints = self.forward_hints(load=False)

        def add(p, depth):
            with self._lock:
                cached = p in self._cache or p in also
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

    def _packs_for(self, items) -> list:
        """Hinted packs still to fetch for ``(type, id, hinted pack)`` items (entries already found
        in an indexed tier pack are skipped)."""
        where = self._where
        return [p for t, i, p in items if (t, i) not in where]

    def fetch_blocks(self, items) -> None:
        """Fetch, in one parallel wave, the blocks not yet read of the ranged packs that hold the
        entries ``items`` (``(type, id, hinted pack)``, looked up as :meth:`locate` does: the
        hinted pack when cached, else the segment index). Adjacent blocks of one pack come in one
        ranged GET. Whole packs and entries not at hand are left alone; a failed GET is left to the
        read that needs the block (it reads it again and reports the error naming the pack)."""
        want: dict = {}
        with self._lock:
            cache, where = self._cache, self._where
            for t, i, hp in items:
                k = (t, i)
                p = cache.get(hp)
                e = p.entries.get(k) if p is not None else None
                if e is None:
                    w = where.get(k)
                    p = cache.get(w) if w is not None else None
                    e = p.entries.get(k) if p is not None else None
                if e is not None and not p.whole:
                    want.setdefault(p, set()).add(e.block)
        self.fetch_pack_blocks(want)

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
            list(self._pool_get().map(one, jobs))

    CORRUPT_MAX = 10_000
    """Most corrupt packs a repository remembers (:meth:`corrupt_packs`); the record is cleared when full."""

    def get_pack(self, pack_id: bytes, ranged: bool = False, tail: int | None = None) -> Pack:
        """Return the parsed pack (cached): whole and checksum-verified, or with ``ranged=True`` (a
        restore) possibly a :class:`~snapstore.format.pack.RangedPack`: a pack longer than
        :attr:`RANGE_TAIL` is read from one suffix-range GET (its header and its last blocks), its
        other blocks fetched as they are needed (:meth:`fetch_blocks` fetches them in one wave),
        each entry verified by its content id. Without ``ranged`` a cached ranged pack is read
        again whole; a pack larger than a store returns whole
        (:data:`~snapstore.stores.base.PACK_WHOLE_READ_MAX`: the store raises ObjectTooLarge
        before reading it) is read in byte ranges instead, every byte once into its checksum
        (:func:`~snapstore.format.pack.parse_in_ranges`), its blocks fetched as needed.
        ``tail``: the suffix to ask for (bytes; default :attr:`RANGE_TAIL`).

        A pack that fails to parse is read a second time (a transfer error is not damage); if it
        fails again it is remembered as corrupt (:meth:`corrupt_packs`), and later calls raise the
        same error without a GET, so a reader that falls back to other copies of its entries
        (forwarding targets, segments) does not fetch the damaged pack once per entry.

        Raises:
            ObjectNotFound: the pack is missing (message names the key).
            IntegrityError: the pack is corrupt (message names the key).
        """
        key = keys.pack_key(pack_id)
        with self._lock:
            p = self._cache.get(pack_id)
            ranged = ranged and not getattr(self, "_whole_only", 0)
            if p is not None and (p.whole or ranged or getattr(p, "checksummed", False)):
                self._cache.move_to_end(pack_id)
                return p
            if pack_id in self._gone:
                raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)")
            bad = self._corrupt.get(pack_id)
        if bad is not None:
            raise bad
        tail = max(1 << 10, tail or self.RANGE_TAIL)
        fetch = lambda a, b, k=key: self.store.get(k, (a, b))  # noqa: E731
        for attempt in range(2):
            big = None
            try:
                data = self.store.get(key, (-tail, None)) if ranged else self.store.get(key)
            except ObjectTooLarge as e:  # too large to read whole: in byte ranges, checksum streamed
                data, big = b"", e.size
            except ObjectNotFound:
                with self._lock:
                    self._gone.add(pack_id)
                raise ObjectNotFound(key, f"missing pack {key} (referenced but not in the store)") from None
            try:
                if big is not None:
                    p = parse_in_ranges(key, big, pack_id, fetch)
                elif ranged:
                    p = parse_tail(key, data, tail, pack_id, fetch)
                    if not p.whole:
                        # the metadata blocks (nodes, states, spines): every restore needs them;
                        # writers put them last, in the tail just read (older packs: block 0)
                        meta = p.missing({e.block for e in p.entries.values() if e.type != T_CHUNK})
                        for a, b in p.ranges(meta):
                            p.add_range(a, self.store.get(key, (a, b)))
                else:
                    p = Pack.parse(key, data, pack_id)
                break
            except IntegrityError as e:
                if attempt == 1:
                    with self._lock:
                        if len(self._corrupt) >= self.CORRUPT_MAX:
                            self._corrupt.clear()
                        self._corrupt[pack_id] = e
                    raise
        self._cache_put(p)
        return p

    def _is_damage(self, err: IntegrityError) -> bool:
        """Is ``err`` the error of a pack found corrupt (not of an entry absent from a sound pack)?"""
        with self._lock:
            return any(err is e or getattr(err, "key", None) == e.key for e in self._corrupt.values())

    def corrupt_packs(self) -> dict:
        """Packs this repository object found corrupt so far: pack id -> the IntegrityError (names
        the key). Readers fall back to other copies of their entries; GC and verify report them."""
        with self._lock:
            return dict(self._corrupt)

    def prefetch(self, pack_ids, no_forward=(), tail: int | None = None, inline_ok: bool = False,
                 got: set | None = None) -> None:
        """Fetch the packs not yet cached, in parallel (bounded thread pool); with ``inline_ok``
        and a store whose ``inline_reads`` is true (a local directory, memory), one after another
        in this thread (a restore's segment wave: see :class:`~snapstore.stores.local.LocalStore`).

        A pack the forwarding hints name as retired is replaced by its targets, and a pack that is
        missing is looked up in the forwarding map (its targets fetched in the same wave), except
        the packs in ``no_forward`` (segments: fetched themselves, and skipped when missing; the
        caller follows their records), and corrupt packs are skipped (the read that needs one
        reports it). ``got``, if given, receives every pack id read or found cached here.
        """
        with self._lock:
            ids = list(dict.fromkeys(pack_ids))
            todo = [p for p in ids if p not in self._cache]
            if got is not None:
                got.update(p for p in ids if p in self._cache)
        claimed = set(todo)
        claim_lock = threading.Lock()

        hints = self.forward_hints(load=False)

        def one(p, depth=0):
            # retired by GC (as of the last GC's hints, or found missing): fetch where its entries
            # went instead, in this same parallel wave (each target once)
            to = hints.get(p) if depth < 4 and p not in no_forward else None
            if not to:
                try:
                    self.get_pack(p, ranged=True, tail=tail)
                    if got is not None:
                        got.add(p)
                    return
                except ObjectNotFound:
                    if p in no_forward:
                        return
                    to = self.forward(p)
                except IntegrityError:
                    # corrupt: a retired pack's entries are also where its forwarding record
                    # says (fetched in this wave); the read that needs an entry found nowhere
                    # else reports the damaged pack
                    if p in no_forward:
                        return
                    try:
                        to = self.forward(p)
                    except SnapstoreError:
                        return
            for t in (to or ()) if depth < 4 else ():
                with claim_lock:
                    if t in claimed:
                        continue
                    claimed.add(t)
                one(t, depth + 1)
        if len(todo) <= 1 or (inline_ok and store_capabilities(self.store).inline_reads):
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
            p = self._cache.get(pack_id)
            if p is not None and (etype, eid) in p.entries:
                return p  # the common case: the hinted pack is at hand
            cached = p is not None
            w = self._where.get((etype, eid)) if not cached and _seen is None else None
            if w is not None:
                p = self._cache.get(w)
                if p is not None and (etype, eid) in p.entries:
                    return p
        if w is not None:
            try:
                p = self.get_pack(w, ranged=True)
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
            pack = self.get_pack(pack_id, ranged=True)
        except (ObjectNotFound, IntegrityError) as err:
            # gone, or corrupt (checksum mismatch, undecodable): a retired pack's entries are also
            # in the packs its forwarding record names (a segment's copy was tried above)
            corrupt = isinstance(err, IntegrityError)
            seen = _seen if _seen is not None else set()
            if pack_id in seen:
                raise
            seen.add(pack_id)
            damaged = err if corrupt else None
            for attempt in range(2):
                try:
                    to = self.forward(pack_id, fresh=attempt > 0)
                except IntegrityError:
                    if not corrupt:
                        raise
                    to = None  # the damaged pack is the object to name, not its shard
                for new in to or ():
                    try:
                        return self.locate(new, etype, eid, seen)
                    except ObjectNotFound:
                        continue
                    except IntegrityError as e:
                        # a damaged target (not one that merely lacks the entry, which is "not
                        # found" and lets the caller read the newest record again): name it if
                        # nothing else holds the entry
                        if damaged is None and self._is_damage(e):
                            damaged = e
                        continue
                with self._lock:  # GC may have redirected the record since we cached it
                    self._fwd.pop(pack_id, None)
                seen.difference_update(to or ())
            if damaged is not None:
                raise damaged from None
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

    def _entry(self, etype: int, eid: bytes, pack_id: bytes, ctx: _ReadCtx | None = None, verify: bool = True) -> bytes:
        pack = self.locate(pack_id, etype, eid)
        try:
            return self._entry_in(pack, etype, eid, ctx, verify)
        except SnapstoreError as first:
            if pack.id != pack_id and getattr(pack, "indexed", False):
                # a tier pack (a copy) failed: read the entry where its hint says instead; if that
                # is gone too (merged away), the tier pack's failure is the one to name
                try:
                    return self._entry_in(self.locate(pack_id, etype, eid, set()), etype, eid, ctx)
                except (ObjectNotFound, IntegrityError):
                    raise first from None
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

    def _entry_in(self, pack: Pack, etype: int, eid: bytes, ctx: _ReadCtx | None, verify: bool = True) -> bytes:
        """An entry's bytes from ``pack``, checked against its content id unless ``verify`` is
        False (a caller that verifies what it reads as a whole: :meth:`read_list`)."""
        e = pack.entries[(etype, eid)]
        spec = pack.blocks[e.block].dict
        d = None
        if spec is not None and e.block not in pack._raw:
            d = ctx.dict_for(spec) if ctx is not None else None
            if d is None:
                d = self._resolve_dict(pack, spec)
        raw = pack.entry_bytes(e, d)
        if verify and etype != T_PIECES and self.hasher.content_id(raw) != eid:
            raise IntegrityError(pack.key, f"entry {eid.hex()} ({chr(etype)}) does not match its content id")
        return raw

    def _resolve_dict(self, pack: Pack, spec: DictSpec) -> bytes:
        key = (pack.id, spec)
        with self._lock:
            d = self._dicts.get(key)
        if d is not None:
            return d
        busy = self._resolving.__dict__.setdefault("keys", set())
        if key in busy:
            # the dictionary's own messages were found only in the block it compresses (written
            # before writers kept those chunks out of it): a cycle, not data
            raise IntegrityError(pack.key, "the data block's dictionary is made of chunks stored only in that block")
        busy.add(key)
        try:
            spine = self.read_state(*pack.dict_state(spec))
            refs = self.refs_range(spine, spec.start, spec.end)
            if self.hasher.content_id(b"".join(r.id for r in refs)) != spec.digest:
                raise IntegrityError(pack.key, "dictionary messages do not match the recorded digest")
            raw = b"".join(self.message_raw(r) for r in refs)
        finally:
            busy.discard(key)
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

    def read_state(self, state_id: bytes, pack_id: bytes, etype: int = T_STATE) -> Spine:
        """Read and decode a spine (state entry plus its upper entry). Raises IntegrityError/ObjectNotFound.

        ``etype``: :data:`T_STATE` for a message list's spine, :data:`T_VALUE` for the spine of a
        session-state value tree (same layout, docs/format.md §7).
        """
        raw = self._entry(etype, state_id, pack_id)
        try:
            run0, upper = Spine.decode_state(raw)
        except (ValueError, IndexError) as e:
            what = "state" if etype == T_STATE else "value spine"
            raise IntegrityError(keys.pack_key(pack_id), f"malformed {what} {state_id.hex()}: {e}") from None
        levels = [run0]
        if upper is not None:
            uraw = self._entry(T_UPPER, upper[0], upper[1])
            try:
                levels += Spine.decode_upper(uraw)
            except (ValueError, IndexError) as e:
                raise IntegrityError(keys.pack_key(upper[1]), f"malformed upper entry {upper[0].hex()}: {e}") from None
        return Spine(self.params, levels, upper)

    NODES_MAX = 200_000
    """Most decoded tree nodes a repository object keeps (``_nodes``); cleared when full."""

    def read_node(self, node_id: bytes, pack_id: bytes) -> tuple[int, list[Ref]]:
        """Read and decode a tree node; return ``(level, items)`` (decoded nodes are cached: a node's
        content never changes, its id is its content id)."""
        hit = self._nodes.get(node_id)
        if hit is not None:
            return hit
        hit = self._nodes_at_hand([Ref(node_id, 0, 1, 0, pack_id)]).get(node_id)
        if hit is not None:
            return hit
        raw = self._entry(T_NODE, node_id, pack_id)
        try:
            node = decode_node(raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(pack_id), f"malformed node {node_id.hex()}: {e}") from None
        with self._lock:
            if len(self._nodes) >= self.NODES_MAX:
                self._nodes.clear()
            self._nodes[node_id] = node
        return node

    def _nodes_at_hand(self, refs) -> dict:
        """The nodes among ``refs`` (refs of level >= 1) that need no request, decoded: node id ->
        ``(level, items)``. A node is at hand when this repository object decoded it before, or
        when the pack holding it (the hinted one, else the indexed segment) is cached with its
        block in memory (a ranged pack: fetched) and that block is uncompressed or has no
        dictionary (then it is decompressed here, once).
        Every node read here is verified by its content id, as :meth:`read_node` does; one that
        is not at hand, does not match its id or does not decode is left out, for
        :meth:`read_node` to fetch, read from another copy, or report naming its pack.

        A whole level of a walk in one call (a cold restore's tree walk is mostly these calls);
        :meth:`read_node` takes its fast path here too, for one node."""
        memo = self._nodes
        cache, where = self._cache, self._where
        content_id = self.hasher.content_id
        out: dict = {}
        new: dict = {}
        for r in refs:
            nid = r.id
            hit = memo.get(nid)
            if hit is not None:
                out[nid] = hit
                continue
            key = (T_NODE, nid)
            p = cache.get(r.pack)
            e = p.entries.get(key) if p is not None else None
            if e is None:
                w = where.get(key)
                p = cache.get(w) if w is not None else None
                e = p.entries.get(key) if p is not None else None
                if e is None:
                    continue
            blk = p._raw.get(e.block)
            if blk is None:
                if p.blocks[e.block].dict is not None or not p.block_at_hand(e.block):
                    continue
                try:
                    blk = p.raw_block(e.block)
                except IntegrityError:
                    continue
            raw = blk[e.offset:e.offset + e.length]
            if content_id(raw) != nid:
                continue
            try:
                node = decode_node(raw)
            except (ValueError, IndexError):
                continue
            out[nid] = new[nid] = node
        if new:
            with self._lock:
                if len(memo) + len(new) > self.NODES_MAX:
                    memo.clear()
                memo.update(new)
        return out

    def expand(self, spine: Spine, nodes: dict | None = None) -> list[Ref]:
        """Return every level-0 ref of the list, in order.

        Nodes are read level by level. The nodes of a level that are at hand (decoded before, or
        in a cached pack: :meth:`_nodes_at_hand`) are taken first; the packs of the others are
        fetched in parallel, so the number of sequential round trips is at most the tree depth.
        If ``nodes`` is given, every node read is recorded in it as ``node id -> pack id``. Each
        node must have the level below its ref's and cover the messages its ref counts (so the
        expansion is bounded by the counts read so far).

        Raises:
            IntegrityError: a node of the wrong level or count, or malformed (names its pack).
            ObjectNotFound: a node is nowhere to be found.
        """
        # runs of items of one level, in list order (a node's items are one such run)
        groups: list[tuple[int, list[Ref]]] = [(lv, run) for lv in range(len(spine.levels) - 1, -1, -1)
                                               if (run := spine.levels[lv])]
        while any(level > 0 for level, _ in groups):
            want = [r for level, g in groups if level > 0 for r in g]
            got = self._nodes_at_hand(want)
            missing = [(T_NODE, r.id, r.pack) for r in want if r.id not in got]
            if missing:
                self.prefetch(self._packs_for(missing))
                self.fetch_blocks(missing)
            nxt: list[tuple[int, list[Ref]]] = []
            for level, g in groups:
                if level == 0:
                    nxt.append((0, g))
                    continue
                for r in g:
                    node = got.get(r.id)
                    lv, items = node if node is not None else self.read_node(r.id, r.pack)
                    if nodes is not None:
                        nodes[r.id] = r.pack
                    if lv != level - 1:
                        raise IntegrityError(keys.pack_key(r.pack), f"node {r.id.hex()} has level {lv}, expected {level - 1}")
                    covered = len(items) if lv == 0 else sum([x.count for x in items])  # level 0: 1 each
                    if covered != r.count:
                        raise IntegrityError(keys.pack_key(r.pack), f"node {r.id.hex()} covers "
                                             f"{covered} messages, its ref says {r.count}")
                    nxt.append((lv, items))
            groups = nxt
        out: list[Ref] = []
        for _, g in groups:
            out.extend(g)
        return out

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

    def message_raw(self, ref: Ref, ctx: _ReadCtx | None = None, verify: bool = True) -> bytes:
        """Return a message's exact JSON bytes (pieces reassembled), verified against ``ref.id``
        (each piece against its own id too) unless ``verify`` is False: the caller then verifies
        the bytes itself (:meth:`read_list`: the list digest covers them)."""
        if not ref.flags & FLAG_PIECES:
            return self._entry(T_CHUNK, ref.id, ref.pack, ctx, verify)
        pieces_raw = self._entry(T_PIECES, ref.id, ref.pack)
        try:
            pieces = decode_pieces(pieces_raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(ref.pack), f"malformed pieces list {ref.id.hex()}: {e}") from None
        self.prefetch(self._packs_for((T_CHUNK, p.id, p.pack) for p in pieces))
        self.fetch_blocks((T_CHUNK, p.id, p.pack) for p in pieces)
        raw = b"".join(self._entry(T_CHUNK, p.id, p.pack, ctx, verify) for p in pieces)
        if verify and self.hasher.content_id(raw) != ref.id:
            raise IntegrityError(keys.pack_key(ref.pack), f"message {ref.id.hex()} does not match its content id")
        return raw

    def read_messages(self, refs: list[Ref], raws: list | None = None) -> list:
        """Decode the messages of a list (refs in order); packs are fetched in parallel first.

        Every message is verified against its content id (used where no manifest's list digest
        covers the refs; :meth:`read_list` is the restore of a checkpoint). If ``raws`` is a
        list, each message's exact JSON is appended to it (bytes, or a read-only memoryview into a
        cached block).
        """
        items = [(T_PIECES if r.flags & FLAG_PIECES else T_CHUNK, r.id, r.pack) for r in refs]
        self.prefetch(self._packs_for(items))
        self.fetch_blocks(items)
        out = []
        got = self._list_raws(refs, verify=True)
        for r, raw in zip(refs, got):
            if raws is not None:
                raws.append(raw)
            exact = bool(r.flags & FLAG_EXACT)
            out.append(decode_json(bytes(raw) if exact else raw, exact,
                                   f"message {r.id.hex()} (hinted in {keys.pack_key(r.pack)})"))
        return out

    def read_list(self, refs: list[Ref], m: Manifest) -> tuple[list, list, object]:
        """Restore checkpoint ``m``'s message list from its level-0 ``refs`` (in order): return
        ``(messages, raws, digest)``, where ``raws`` holds each message's exact JSON (bytes, or a
        read-only memoryview into a cached block) and ``digest`` is the incremental list digest a
        writer continues from (:attr:`ListState.digest`: ``[`` + the raws joined by ``,``, no
        closing bracket).

        The list is verified as a whole: the keyed hash of its compact JSON (``[`` + raws joined
        by ``,`` + ``]``, one pass, which the writer's digest needs anyway) must be the manifest's
        ``messages.digest`` and the count its ``count``. That check is what makes the per-chunk
        content-id checks redundant on this path (docs/format.md §19, "Verifying a restore");
        nothing is parsed before it passed. A list that fails it (or whose chunks cannot be
        read without help), and a manifest without a digest, take the per-entry path instead
        (every chunk verified by its content id), which names the damaged pack; if every entry
        passes there but the whole does not, the manifest is what is wrong.

        Raises:
            IntegrityError: a damaged entry (names its pack) or a list that does not match its
                manifest (names the manifest).
            ObjectNotFound: an entry is nowhere to be found.
        """
        hasher = self.hasher
        want = m.digest if len(m.digest) == 32 else None
        raws = None
        if want is not None and len(refs) == m.count:
            try:
                # everything at hand (the segments were read): one pass; else one parallel wave
                # for what is not, then the pass again. Large messages first: their pieces lists
                # and pieces in two waves, not two round trips per message
                big = [(r.id, r.pack) for r in refs if r.flags & FLAG_PIECES]
                if big and self._any_ranged():
                    self.fetch_large(big)
                raws = self._list_raws(refs, verify=False, at_hand=True)
                if raws is None:
                    items = [(T_PIECES if r.flags & FLAG_PIECES else T_CHUNK, r.id, r.pack) for r in refs]
                    self.prefetch(self._packs_for(items))
                    self.fetch_blocks(items)
                    raws = self._list_raws(refs, verify=False)
            except IntegrityError:
                raws = None  # the per-entry path below finds (and names, or works around) the damage
        if raws is not None:
            digest = _json_digest(hasher, raws)
            last = digest.copy()
            last.update(b"]")
            if last.hexdigest(16) == want:
                loads = orjson.loads
                msgs = []
                add = msgs.append
                try:
                    for r, raw in zip(refs, raws):
                        add(loads(raw) if not r.flags & FLAG_EXACT else loads_exact(bytes(raw)))
                except (ValueError, RecursionError, UnicodeDecodeError):
                    # bytes the manifest vouches for that do not decode: name the message
                    r = refs[len(msgs)]
                    decode_json(bytes(raws[len(msgs)]), bool(r.flags & FLAG_EXACT),
                                f"message {r.id.hex()} (hinted in {keys.pack_key(r.pack)})")
                    raise
                return msgs, raws, digest
        raws = []
        msgs = self.read_messages(refs, raws)
        digest = _json_digest(hasher, raws)
        if want is not None and m.count == len(refs):
            last = digest.copy()
            last.update(b"]")
            # the first release (a576e36) stored the keyed hash of the concatenated ids instead
            if last.hexdigest(16) != want and hasher.content_id(b"".join(r.id for r in refs)).hex() != want:
                raise IntegrityError(keys.manifest_key(self.run_key(m.run_id), m.seq),
                                     f"checkpoint {m.checkpoint_id}: its messages (each matching its content id) do "
                                     "not match the manifest's list digest")
        return msgs, raws, digest

    def _any_ranged(self) -> bool:
        """True when a pack in the cache was read with byte ranges (some of its blocks may be
        missing)."""
        with self._lock:
            return any(not p.whole for p in self._cache.values())

    def _list_raws(self, refs: list[Ref], verify: bool, at_hand: bool = False) -> list | None:
        """Each ref's exact JSON, in order (the packs already fetched): a read-only memoryview
        into a cached block, or bytes. With ``at_hand``, None as soon as an entry is not in a
        cached pack (or its block is not held: a ranged pack's block not fetched yet), so that
        the caller fetches what is missing in one parallel wave instead of one GET at a time.

        Chunks in a pack at hand are sliced from its uncompressed block (a block without
        dictionary is decompressed here, once); the rest, and every chunk of a block with a
        dictionary not yet decompressed, go through :meth:`message_raw`, which finds the
        dictionary among the messages decoded so far. With ``verify`` each sliced chunk is
        checked against its content id (a mismatch falls back to :meth:`message_raw`, which
        reports or works around it); without, the caller verifies the whole list.
        """
        out: list = []
        ctx = _ReadCtx(self.hasher, verified=verify, refs=refs, raws=out)
        with self._lock:  # the packs at hand now (the fast path below reads only these)
            cache = dict(self._cache)
            where = self._where
        content_id = self.hasher.content_id
        views: dict = {}  # (pack id, block) -> memoryview of the uncompressed block
        for r in refs:
            raw = None
            if r.flags & FLAG_PIECES:
                if at_hand:
                    key = (T_PIECES, r.id)
                    p = cache.get(r.pack)
                    if p is None or key not in p.entries:
                        w = where.get(key)
                        if w is None or w not in cache or key not in cache[w].entries:
                            return None
            else:
                # fast path: a chunk in a pack at hand -- same checks as _entry, fewer calls
                key = (T_CHUNK, r.id)
                p = cache.get(r.pack)
                e = p.entries.get(key) if p is not None else None
                if e is None:
                    w = where.get(key)
                    p = cache.get(w) if w is not None else None
                    e = p.entries.get(key) if p is not None else None
                if e is None and at_hand:
                    return None
                if e is not None:
                    vk = (p.id, e.block)
                    mv = views.get(vk)
                    if mv is None:
                        blk = p._raw.get(e.block)
                        if blk is None and at_hand and not p.block_at_hand(e.block):
                            return None
                        if blk is None and p.blocks[e.block].dict is None:
                            try:
                                blk = p.raw_block(e.block)
                            except IntegrityError:
                                if not verify:
                                    raise
                                blk = None  # let the full path report (or work around) it
                        if blk is not None:
                            mv = views[vk] = memoryview(blk).toreadonly()
                    if mv is not None:
                        raw = mv[e.offset:e.offset + e.length]
                        if verify and content_id(raw) != r.id:
                            raw = None  # let the full path report (or work around) it
            if raw is None:
                raw = self.message_raw(r, ctx, verify)
            out.append(raw)  # ctx sees it: message len(out) - 1 is now known
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
            if m.session_state_ref or m.session_state_tree:
                self.prefetch_segments(segs, tail=self.range_tail(m))
            return [], self.list_state(m)  # its messages.a: an emptied list leaves the old one in the arrays
        sref = (bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        # with segments, the state is in them (the save's own pack is the last one, or merged)
        self.prefetch_segments(segs, [] if segs else [bytes.fromhex(h) for h in m.state[1:]],
                               tail=self.range_tail(m))
        fast = self.read_arrays(m, segs) if segs else None
        if fast is not None:
            msgs, digest = fast
            # no spine read either: the next save loads it with the refs (ListState.refs_pending)
            ls = ListState(spine=None, count=m.count, size=m.size, digest=digest, state=sref, exact=m.exact,
                           digest_hex_value=m.digest, refs_pending=True, arrays_exact=_arrays_exact(m))
            return msgs, ls
        spine = self.read_state(*sref)
        nodes: dict = {}
        refs = self.expand(spine, nodes)
        msgs, raws, digest = self.read_list(refs, m)
        ids = list(map(_REF_ID, refs))  # C-level passes over the refs (here and ``known``)
        keep = RECENT_RAW_KEEP * max(self.config.dict_bytes, 1)
        acc = 0
        for i in range(len(raws) - 1, -1, -1):  # from the end: stops at the limit
            acc += len(raws[i])
            if acc > keep:
                raws[:i + 1] = [None] * (i + 1)
                break
        ls = ListState(spine=spine, count=m.count, size=m.size, digest=digest, state=sref, ids=ids, refs=refs,
                       objs=None, raws=raws, known=dict(zip(ids, refs)), nodes=nodes,
                       exact=exact_count(refs), arrays_exact=_arrays_exact(m))
        return msgs, ls

    def read_arrays(self, m: Manifest, segs) -> tuple[list, object] | None:
        """Restore checkpoint ``m``'s messages from the array blocks of the segments ``segs`` (the
        run's newest record's, already fetched), without the tree (docs/format.md §19, "Array
        blocks"): ``(messages, digest)`` (digest as :meth:`read_list` returns it), or None when
        that is not this list (the caller then reads it through the tree).

        The arrays of the segments, in order, hold every message the run appended, in order; for
        a run that only appended, any checkpoint's list is their first ``count`` items. They are
        used only when none of ``m``'s messages needs the exact parser (the manifest's
        ``messages.x`` is 0, bound to the list by its keyed tag ``messages.xt``) and the keyed
        hash of those items' JSON (holes filled in with the messages they name) is ``m``'s list
        digest (a record saying ``messages.a`` = 1 is parsed while it is hashed, and what was parsed
        is dropped if the hash differs; one without ``messages.a`` is parsed only after the hash
        matched; ``messages.a`` = 0 is not read from arrays). Anything else (a run rewritten, rolled back or
        repacked by GC, a damaged block, a record without ``messages.x``) returns None, and the tree
        path reads, verifies and names damage as always. Memory: the list's JSON once, as when
        reading it through the tree.
        """
        if not m.count or m.exact != 0 or len(m.digest) != 32:
            return None
        if m.arrays == 0:
            return None  # the writer knew the arrays hold more than this list, or another one
        if m.exact_tag != self.hasher.exact_tag(m.digest, 0, m.arrays):
            return None  # x and a not bound to this list under the key (a record re-sealed): the tree
        with self._lock:
            packs = [self._cache.get(s.pack) for s in segs]
        if None in packs:
            return None  # a segment GC rewrote, evicted or gone: the tree path finds its entries
        blocks, held, total = [], 0, 0  # the array blocks holding the first ``count`` items
        for p in packs:
            for bi, b in enumerate(p.blocks):
                if b.array:
                    if held < m.count:
                        blocks.append((p, bi))
                        held += b.nitems
                    total += b.nitems
        if held < m.count:
            return None
        ranged = {p: {bi for q, bi in blocks if q is p} for p in packs if not p.whole}
        if ranged:
            self.fetch_pack_blocks(ranged)
            self._fetch_holes(blocks)
        # the list's JSON is at most messages.bytes plus its brackets and separators: items that
        # come to more are not this list (holes would read a large message once per hole before
        # the digest says so), so what is read stays within what the manifest says the list is
        budget = m.size + m.count + 1
        plan = self._array_plan(m, blocks, budget)
        if plan is None:
            return None
        # one pass only where the writer's knowledge still holds: the arrays hold exactly this
        # list (the head of a run that only appended). An older checkpoint's items are the
        # arrays' first ones too, unless GC dropped arrays since (its copies hold none, and a
        # later merge concatenates what is left): hashed first, so that such a run is not
        # parsed on every read only to be dropped
        return self._parse_arrays(m, plan, hash_first=not (m.arrays == 1 and total == m.count))

    ARRAY_RUN = 48 << 10
    """Most bytes of array items :meth:`read_arrays` parses in one call (a run of consecutive
    items; a longer item on its own). Small enough that the parser's buffers and the copy come
    from memory the previous run freed, rather than fresh pages; large enough that per-call costs
    do not show."""

    def _array_plan(self, m: Manifest, blocks, budget: int):
        """Where checkpoint ``m``'s list is in the array blocks ``blocks`` (``(pack, block index)``
        in list order): per block ``(pack, index, runs, stop)``. ``runs`` cover its items in
        order: ``(start, end, n, None)`` for ``n`` consecutive items stored in the block (their
        bytes, commas between them, are ``[start, end)``), ``(offset, offset, 1, raw)`` for a hole
        (``raw``: the message it names, read here); ``stop`` is where the list's bytes in the block
        end (before the closing bracket, or before the comma after its last item).

        Returns None when the items come to more than ``budget`` bytes or a hole's message cannot
        be read: not this list.
        """
        left = m.count  # items still to take: the list is the arrays' first ``count`` items
        plan = []
        run_max = self.ARRAY_RUN
        for p, bi in blocks:
            if not left:
                break
            b = p.blocks[bi]
            runs: list = []
            stop = b.rawlen - 1
            rs = re = -1  # the current run of stored items: bytes [rs, re), ``rn`` items
            rn = 0
            cur = -1  # where the current item starts
            for t, mid, off, ln, cont in b.parts:
                budget -= ln
                if cont:
                    re = off + ln
                    if rn > 1 and re - rs > run_max:
                        # a multi-part item that made the run too long: it starts a run of its own
                        runs.append((rs, cur - 1, rn - 1, None))
                        rs, rn = cur, 1
                    continue
                cur = off
                if not left:  # past the checkpoint's list (an older checkpoint of the run)
                    stop = off - 1  # before the comma
                    budget += ln
                    break
                left -= 1
                if t == T_HOLE:
                    if rn:
                        runs.append((rs, re, rn, None))
                        rn = 0
                    hraw = self._hole_raw(p, mid, budget)
                    if hraw is None:
                        return None
                    budget -= len(hraw)
                    runs.append((off, off, 1, hraw))
                elif rn and off + ln - rs <= run_max:
                    re = off + ln
                    rn += 1
                else:
                    if rn:
                        runs.append((rs, re, rn, None))
                    rs, re, rn = off, off + ln, 1
            if rn:
                runs.append((rs, re, rn, None))
            if budget < 0:
                return None
            plan.append((p, bi, runs, stop))
        return plan if not left else None

    def _fetch_holes(self, blocks) -> None:
        """Fetch the blocks of ranged packs that the holes of the array blocks ``blocks`` (``(pack,
        block index)``) name (see :meth:`fetch_large`), so that :meth:`_hole_raw` then reads them
        from memory: one round trip per wave, not one per hole."""
        holes = [(x[1], p.id) for p, bi in blocks for x in p.blocks[bi].parts if x[0] == T_HOLE]
        if holes:
            self.fetch_large(holes, chunks=True)

    def fetch_large(self, messages, chunks: bool = False) -> None:
        """Fetch, in two parallel waves, the blocks of ranged packs that large messages need:
        their pieces lists (and, with ``chunks``, the chunk under the message's id, for a message
        that may be stored whole), then the pieces those lists name. ``messages``: ``(message id,
        hinted pack id)``, looked up as :meth:`fetch_blocks` does. Best effort: what cannot be
        found or read is left to the read, which reports it."""
        messages = list(messages)
        items = [(T_PIECES, mid, hp) for mid, hp in messages]
        if chunks:
            items += [(T_CHUNK, mid, hp) for mid, hp in messages]
        self.fetch_blocks(items)
        pieces = []
        for mid, hp in messages:
            home = self._holder((T_PIECES, mid), hp)
            if home is None:
                continue
            try:
                pieces.extend((T_CHUNK, x.id, x.pack) for x in decode_pieces(self._entry(T_PIECES, mid, home.id)))
            except (IndexError, ValueError, SnapstoreError):
                continue
        if pieces:
            self.fetch_blocks(pieces)

    def _holder(self, key: tuple[int, bytes], hint: Pack | bytes) -> Pack | None:
        """The pack at hand holding entry ``key`` (``(type, id)``): ``hint`` (a pack, or the id
        of a cached one) when it holds it, else the segment that does (the segment index), else
        None. No request is made."""
        with self._lock:
            p = hint if isinstance(hint, Pack) else self._cache.get(hint)
            if p is None or key not in p.entries:
                p = self._cache.get(self._where.get(key, b""))
        return p if p is not None and key in p.entries else None

    def _hole_raw(self, p: Pack, mid: bytes, budget: int) -> bytes | None:
        """The message a hole in pack ``p`` names (``mid``: its content id): a chunk under its id,
        or a pieces list; its size is known before its bytes are read, and a message larger than
        ``budget`` bytes is not read (None, as for one that cannot be found or read)."""
        ck = (T_CHUNK, mid)
        home = self._holder(ck, p)
        if home is not None:
            hsize, flags = home.entries[ck].length, 0
        else:
            # a pieces list: in this pack, or (a repeat of a large message stored before) in the
            # segment that holds it
            home = self._holder((T_PIECES, mid), p)
            if home is None:
                return None
            try:
                hsize = sum(x.size for x in decode_pieces(self._entry(T_PIECES, mid, home.id)))
            except (IndexError, ValueError, SnapstoreError):
                return None
            flags = FLAG_PIECES
        if hsize > budget:
            return None
        try:
            hraw = self.message_raw(Ref(mid, hsize, 1, flags, home.id), verify=False)
        except SnapstoreError:
            return None
        return hraw if len(hraw) == hsize else None

    def _parse_arrays(self, m: Manifest, plan, hash_first: bool) -> tuple[list, object] | None:
        """Read the list from the planned array blocks: ``(messages, digest)``, or None when the
        keyed hash of the items' JSON is not ``m``'s list digest or a block or an item is damaged
        (the tree path then reads the list and names the damage).

        Each block is decompressed when its turn comes and dropped after (kept in the pack only
        when read a second time: :meth:`Pack.raw_block` ``keep=False``), the list's JSON is hashed in order (``[``, each
        block's part of the list with its holes' messages in place, commas between blocks), and
        each run of items is parsed in one call. The head of a run whose writer knew the arrays
        held exactly this list, and that they still hold exactly ``count`` items (``messages.a``
        = 1), is parsed while it is hashed, in one pass; what was parsed is dropped if the hash
        differs (a damaged or forged record). Otherwise (``hash_first``: a record written before
        ``messages.a``, or an older checkpoint, whose arrays GC may have thinned), a first pass
        hashes and a second parses only if the hash matched, so that a run whose arrays hold
        another list is not parsed on every read.
        """
        if hash_first:
            got = self._array_pass(plan, False)
            if got is None or got[0].hexdigest(16) != m.digest:
                return None
        got = self._array_pass(plan, True)
        if got is None or got[0].hexdigest(16) != m.digest or len(got[2]) != m.count:
            return None  # not this list (a run rewritten, rolled back...)
        return got[2], got[1]

    def _array_pass(self, plan, parse: bool):
        """One pass over the planned array blocks: ``(digest of the list's JSON, digest without the
        closing bracket, messages)`` (messages empty unless ``parse``), or None when a block does
        not decompress or an item does not parse as the plan says."""
        digest = self.hasher.new_digest()
        update = digest.update
        loads = orjson.loads
        out: list = []
        extend = out.extend
        try:
            for j, (p, bi, runs, stop) in enumerate(plan):
                b = p.blocks[bi]
                raw = p.raw_block(bi, keep=False)  # kept if read again: a process reading many checkpoints
                mv = memoryview(raw)
                update(b"," if j else b"[")
                pos = 1
                close = b.rawlen - 1  # the block's closing bracket
                for s, e, n, hraw in runs:
                    # the bytes around each run and hole are what the hash takes as the list's
                    # brackets and commas (it hashes ``[`` and ``,`` of its own before a block and
                    # the bytes between its brackets), so that parsing the runs apart is parsing
                    # the hashed list: a forged byte there (a digit of a number split in two, a
                    # space for a bracket of a block parsed whole) is not this list
                    c = raw[s - 1]
                    if c != 0x2C and not (s == 1 and c == 0x5B):
                        return None
                    c = raw[e]
                    if c != 0x2C and not (e == close and c == 0x5D):
                        return None
                    if hraw is not None:
                        update(mv[pos:s])
                        update(hraw)
                        pos = s
                        if parse:
                            out.append(loads(hraw))
                    elif parse:
                        if s == 1 and e == stop == close:
                            got = loads(raw)  # the whole block: its own brackets
                        else:
                            got = loads(b"".join((b"[", mv[s:e], b"]")))
                        if type(got) is not list or len(got) != n:
                            return None
                        extend(got)
                update(mv[pos:stop])
                del mv
        except (ValueError, RecursionError, SnapstoreError):
            return None
        last = digest.copy()
        last.update(b"]")
        return last, digest, out

    def load_messages(self, m: Manifest) -> list:
        """Return the message list of checkpoint manifest ``m`` (exactly as saved)."""
        return self.load_with_state(m)[0]

    def value_refs(self, tree: ValueTree, nodes: dict | None = None) -> tuple[Spine, list[Ref]]:
        """Read a session-state value tree's spine and expand it: ``(spine, piece refs in order)``.

        ``nodes``, if given, records every node read (node id -> pack id). Checks that the pieces'
        sizes add up to ``tree.size`` and that none is longer than READ_PIECE_MAX before anything
        is fetched, so a damaged tree cannot make a reader allocate more than the manifest says.

        Raises:
            IntegrityError: a malformed spine or node, or sizes that do not match (names the pack).
            ObjectNotFound: an entry is nowhere to be found.
        """
        spine = self.read_state(tree.spine, tree.pack, T_VALUE)
        refs = self.expand(spine, nodes)
        total = 0
        for r in refs:
            if r.flags or r.size > READ_PIECE_MAX or r.size == 0:
                raise IntegrityError(keys.pack_key(tree.pack), f"value spine {tree.spine.hex()}: piece {r.id.hex()} "
                                     f"has flags {r.flags} and size {r.size} (pieces are plain, 1 to {READ_PIECE_MAX} bytes)")
            total += r.size
        if total != tree.size:
            raise IntegrityError(keys.pack_key(tree.pack), f"value spine {tree.spine.hex()}: pieces hold {total} bytes, "
                                 f"the manifest says {tree.size}")
        return spine, refs

    def value_known(self, tree: ValueTree) -> ValueKnown:
        """What a writer needs to dedup a new session state against stored value tree ``tree``
        (its pieces and sealed nodes, with their pack hints); reads the tree (not the pieces)."""
        nodes: dict = {}
        spine, refs = self.value_refs(tree, nodes)
        return ValueKnown(tree, {r.id: r for r in refs}, nodes, spine.upper)

    def read_value(self, tree: ValueTree) -> bytes:
        """Return a session-state value tree's exact JSON bytes, verified piece by piece and as a
        whole against ``tree.id``. Raises IntegrityError (naming the pack) / ObjectNotFound."""
        _, refs = self.value_refs(tree)
        self.prefetch(self._packs_for((T_CHUNK, r.id, r.pack) for r in refs))
        self.fetch_blocks((T_CHUNK, r.id, r.pack) for r in refs)
        out = bytearray()
        for r in refs:
            piece = self._entry(T_CHUNK, r.id, r.pack)
            if len(piece) != r.size:
                raise IntegrityError(keys.pack_key(r.pack), f"piece {r.id.hex()} is {len(piece)} bytes, its ref says {r.size}")
            out += piece
        raw = bytes(out)
        if self.hasher.content_id(raw) != tree.id:
            raise IntegrityError(keys.pack_key(tree.pack), f"session state {tree.id.hex()} (value spine "
                                 f"{tree.spine.hex()}) does not match its content id")
        return raw

    def load_session_state(self, m: Manifest):
        """Return the checkpoint's session state (inline, from its value tree, or from the chunk
        an earlier version wrote), or None.

        Raises:
            IntegrityError: the stored state is damaged (the error names the object).
            ObjectNotFound: part of it is gone.
        """
        if m.session_state_tree is not None:
            tree = m.session_state_tree
            raw = self.read_value(tree)
            try:
                return decode_json(raw, bool(tree.flags & FLAG_EXACT))
            except (ValueError, UnicodeDecodeError) as e:
                raise IntegrityError(keys.pack_key(tree.pack), f"session state {tree.id.hex()} is not JSON: {e}") from None
        if m.session_state_ref is None:
            return m.session_state
        sid, pack, size, flags = m.session_state_ref
        raw = self.message_raw(Ref(bytes.fromhex(sid), size, 1, flags, bytes.fromhex(pack)))
        return decode_json(raw, bool(flags & FLAG_EXACT), f"session state {sid} (hinted in packs/{pack[:2]}/{pack})")

    def list_state(self, m: Manifest | None, full: bool = False) -> ListState:
        """Build a writer's :class:`ListState` for checkpoint ``m`` (None: empty list).

        With ``full``, every ref is loaded (needed when the next list is not an append).
        """
        ls = ListState(spine=Spine(self.params), digest=_json_digest(self.hasher, []))
        if m is None or not m.state:
            ls.ids, ls.refs, ls.raws = [], [], []
            if m is not None:
                ls.arrays_exact = _arrays_exact(m)  # an emptied list: the arrays may hold the old one
            return ls
        ls.digest = None
        ls.digest_hex_value = m.digest
        ls.exact = m.exact
        ls.arrays_exact = _arrays_exact(m)
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
            ls.exact = exact_count(refs)
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
