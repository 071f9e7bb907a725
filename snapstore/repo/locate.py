"""Locating entries: the segment index, forwarding lookups, and the waves of pack fetches.

Layer 3, three parts of :class:`snapstore.repo.repository.Repository`:

* :class:`SegmentIndex` (``repo.segments``): entries of a run's segment packs, found by ``(type, id)``
  before the location hint in a ref is followed (docs/format.md §10);
* :class:`ForwardLookup` (``repo.forwarding``): where the entries of a pack retired by GC went (the
  hints of ``gc/fwd-cache``, then the forwarding map itself; :mod:`snapstore.maintenance.forwarding`
  writes it);
* :class:`Locator` (``repo.locator``): fetching packs in parallel waves (following forwarding
  records), fetching a record's segments and indexing them, and :meth:`Locator.locate`, which finds
  the pack holding an entry.
"""

from __future__ import annotations

import threading
import time

from ..errors import ColdObjectError, IntegrityError, NotFoundError, ObjectNotFound, SnapstoreError
from ..format import keys
from ..format.bundle import DATA as BUNDLE_DATA
from ..format.forward import decode_forward, decode_forward_cache, decode_forward_shard
from ..format.pack import Pack
from ..stores.base import ObjectStore, store_capabilities
from .packcache import PackCache, WaveGate


class SegmentIndex:
    """``(type, id) -> pack id`` over the segment packs read so far (format 2), and why the last
    :meth:`Locator.prefetch_segments` could not read some. Shares ``cache``'s lock.

    Args:
        cache: the repository's pack cache (its lock).
    """

    WHERE_MAX = 1_000_000
    """Most entries the segment index holds (about 150 bytes each once their packs left the
    cache: at most about 150 MB); it is cleared when full (a read then indexes its run's segments
    again from the run's newest record). A run of 1,000,000 messages has about that many."""

    def __init__(self, cache: PackCache):
        self._cache = cache
        self._where: dict = {}  # (type, id) -> id of a cached tier pack holding it
        self._indexed: set = set()  # ids of the packs whose entries are in _where
        self._errors: dict = {}  # segment pack -> why the last prefetch_segments could not read it

    @property
    def entries(self) -> dict:
        """The live mapping ``(type, id) -> pack id``, for hot loops. Read only."""
        return self._where

    def get(self, key: tuple[int, bytes]) -> bytes | None:
        """The indexed segment pack holding entry ``key`` (``(type, id)``), or None."""
        return self._where.get(key)

    def __contains__(self, key: tuple[int, bytes]) -> bool:
        return key in self._where

    def is_indexed(self, pack_id: bytes) -> bool:
        """Are pack ``pack_id``'s entries in the index (a segment, or a pack a segment's forwarding
        record leads to)?"""
        return pack_id in self._indexed

    def add(self, pack: Pack) -> None:
        """Make a segment pack's entries findable by ``(type, id)`` (see :meth:`Locator.locate`). The
        index outlives the pack cache: an evicted segment is fetched again when an entry is wanted."""
        with self._cache.lock:
            if len(self._where) + len(pack.entries) > self.WHERE_MAX:
                self._where.clear()
                self._indexed.clear()
            self._indexed.add(pack.id)
            self._where.update(dict.fromkeys(pack.entries, pack.id))

    def forget(self, packs) -> None:
        """Drop the entries of ``packs`` (pack ids) from the index (GC marks run by run, so that the
        index holds one run's entries at a time)."""
        drop = set(packs)
        with self._cache.lock:
            self._indexed -= drop
            self._where = {k: v for k, v in self._where.items() if v not in drop}

    @property
    def errors(self) -> dict:
        """Segment pack id -> the SnapstoreError the last :meth:`Locator.prefetch_segments` met
        reading it (a copy)."""
        with self._cache.lock:
            return dict(self._errors)

    @errors.setter
    def errors(self, errors: dict) -> None:
        with self._cache.lock:
            self._errors = errors


class ForwardLookup:
    """Readers' view of the forwarding map: retired pack -> the packs its entries moved to.

    Answers from memory, then from the hints of ``gc/fwd-cache``, then from the map's shards. Shares
    ``cache``'s lock. Args:
        store: the object store.
        cache: the repository's pack cache (its lock; its record of gone packs, :meth:`reset`).
    """

    HINTS_MAX_AGE = 60.0
    """Seconds after which a failed forwarding hint makes the reader load ``gc/fwd-cache`` again."""

    def __init__(self, store: ObjectStore, cache: PackCache):
        self.store = store
        self._cache = cache
        self._fwd: dict = {}
        self._hints: dict | None = None  # retired pack -> targets, from gc/fwd-cache (advisory)
        self._hints_at = 0.0
        self._hints_lock = threading.Lock()
        self.archived = None
        self.known_archived = None
        """Optional ``known_archived(pack id)``: as ``archived`` from what is loaded, no request."""
        """Optional ``archived(pack id) -> bundle ids or None``: the archive bundles replacing a hot
        pack the forwarding map does not name (docs/format.md §28)."""

    def known(self, pack_id: bytes) -> list[bytes] | None:
        """What memory says of ``pack_id`` (no GET): its targets, or None (not retired, or not
        looked up yet)."""
        return self._fwd.get(pack_id)

    def reset(self, forward: dict, gone=()) -> None:
        """Replace what memory holds with ``forward`` (retired pack id -> target pack ids: the map
        GC just read; it redirects records, so nothing read earlier is trusted) and remember the
        packs ``gone`` (ids) as deleted, so reads of them go straight to their records."""
        with self._cache.lock:
            self._fwd.clear()
            self._fwd.update(forward)
            self._cache.mark_gone(gone)

    def update(self, forward: dict) -> None:
        """Remember the records ``forward`` (retired pack id -> target pack ids)."""
        with self._cache.lock:
            self._fwd.update(forward)

    def drop(self, pack_id: bytes) -> None:
        """Forget what memory holds for ``pack_id`` (its record changed or went)."""
        with self._cache.lock:
            self._fwd.pop(pack_id, None)

    def hints(self, load: bool = True) -> dict:
        """Retired pack -> the packs its entries moved to, as of the last GC (``gc/fwd-cache``).

        Advisory: GC may have changed a record since, so a reader uses a hint only as the first
        place to look (entries are verified by content id) and falls back to the record itself.
        Loaded with one GET the first time a reader meets a retired pack (``load``); ``{}`` when
        there is no cache or it is unreadable.
        """
        lock = self._cache.lock
        with lock:
            if self._hints is not None or not load:
                return self._hints or {}
        with self._hints_lock:  # one GET, whichever thread gets here first
            with lock:
                if self._hints is not None:
                    return self._hints
            try:
                hints = {p: v[1] for p, v in
                         decode_forward_cache(keys.FWD_CACHE, self.store.get(keys.FWD_CACHE)).items()}
            except SnapstoreError:  # none (ObjectNotFound) or unreadable: read the records themselves
                hints = {}
            with lock:
                self._hints, self._hints_at = hints, time.monotonic()
            return hints

    def hint_failed(self) -> None:
        """A hint led nowhere: load ``gc/fwd-cache`` again on the next miss, once the hints are
        older than :attr:`HINTS_MAX_AGE`."""
        with self._cache.lock:
            if self._hints is not None and time.monotonic() - self._hints_at > self.HINTS_MAX_AGE:
                self._hints = None

    def forward(self, pack_id: bytes, fresh: bool = False) -> list[bytes] | None:
        """Return the packs a retired (repacked) pack's entries moved to, or None if not retired.

        Answers from memory, then from the forwarding hints (:meth:`hints`), then by reading
        the forwarding-map shard ``fwd/<1 hex>`` (one GET; every record in it is remembered), and
        for a pack the shard does not name, a per-pack record ``fwd/<16 hex>`` of a repository not
        yet migrated (one more GET). ``fresh`` skips memory and hints.

        Raises:
            IntegrityError: the shard or record is corrupt.
        """
        if not fresh:
            with self._cache.lock:
                if pack_id in self._fwd:
                    return self._fwd[pack_id]
            hint = self.hints().get(pack_id)
            if hint is not None:
                return hint
        if self.known_archived is not None:
            to = self.known_archived(pack_id)  # an archived pack, once the catalogue is loaded: no GET
            if to is not None:
                with self._cache.lock:
                    self._fwd[pack_id] = to
                return to
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
        if to is None and self.archived is not None:
            to = self.archived(pack_id)
        with self._cache.lock:
            for p, (t, _) in shard.items():
                self._fwd[p] = t
            self._fwd[pack_id] = to
        return to


class Locator:
    """Finding entries' packs: parallel fetch waves, a record's segments, :meth:`locate`.

    Holds no state of its own: it reads and fills ``cache``, ``segments`` and ``forwarding``.
    Args:
        store: the object store.
        cache: the pack cache (:class:`~snapstore.repo.packcache.PackCache`).
        segments: the segment index (:class:`SegmentIndex`).
        forwarding: the forwarding lookups (:class:`ForwardLookup`).
    """

    def __init__(self, store: ObjectStore, cache: PackCache, segments: SegmentIndex, forwarding: ForwardLookup):
        self.store = store
        self.cache = cache
        self.segments = segments
        self.forwarding = forwarding

    def segment_index(self, packs) -> dict:
        """``(type, id) -> pack id`` over ``packs`` (a run's segments and the packs their forwarding
        records lead to; later packs win: the newest copy), reading again any the cache evicted
        since they were fetched: an entry missing from the index would be looked for at its
        location hint, a per-save pack its writer deleted once it was merged. Packs gone or
        damaged are left out (their entries are found through hints and other copies)."""
        out: dict = {}
        for pid in packs:
            with self.cache.lock:
                p = self.cache.get(pid)
            if p is None:
                try:
                    p = self.cache.get_pack(pid)
                except SnapstoreError:
                    continue
            for k in p.entries:
                out[k] = pid
        return out

    def pack_absent(self, pack_id: bytes) -> bool:
        """Is pack ``pack_id`` missing from the store? Cached or known damaged: no; otherwise it is
        read (a pack the cache evicted since it was fetched is read again, and a damaged one is
        remembered as corrupt). Tells a segment merged away by its writer from an evicted one."""
        with self.cache.lock:
            if pack_id in self.cache or self.cache.is_corrupt(pack_id):
                return False
        try:
            self.cache.get_pack(pack_id)
        except NotFoundError:
            return True
        except SnapstoreError:
            return False  # damaged: its entries are read from other copies
        return False

    def prefetch_segments(self, segs, also=(), tail: int | None = None) -> None:
        """Fetch a record's segment packs (and the packs in ``also``) in one parallel wave, and
        index their entries, so that reads find entries there before following the location hints
        in their refs (the per-save packs hints name are deleted once merged into a tier pack).

        A segment GC rewrote (a mostly dead tier pack, docs/format.md §21) is found through its
        forwarding record, and the packs it leads to are indexed in its place. A segment that is
        simply gone (merged away since the record was read) is skipped: the caller reads the
        newest record again when an entry cannot be found.

        ``tail``: bytes of each pack's end to ask for first (default :attr:`PackCache.RANGE_TAIL`; a restore
        passes :meth:`PackCache.range_tail` of its checkpoint): a longer pack is read with byte ranges.
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
        hints = self.forwarding.hints(load=False)
        gone = {}
        for p in packs:
            with self.cache.lock:
                if p in self.cache:
                    continue
                to = self.forwarding.known(p)
            gone[p] = to if to is not None else hints.get(p)
        hinted = [t for to in gone.values() if to for t in to]
        if hinted:
            self.prefetch(hinted, got=got)
        stale = []
        for p, to in gone.items():
            with self.cache.lock:
                if to and all(t in self.cache for t in to):
                    continue
            try:
                to = self.forwarding.forward(p, fresh=True)
            except SnapstoreError:
                to = None
            if to:
                stale.extend(to)
        if stale:
            self.prefetch(stale, got=got)
        held = self.segment_packs(segs, also=got)
        for p in held:
            with self.cache.lock:
                pk = self.cache.get(p)
            if pk is None:
                # read in this wave but evicted since (the run's segments outgrow the pack cache):
                # read again, so that its entries are indexed and not looked for at their hints
                try:
                    pk = self.cache.get_pack(p, ranged=True, tail=tail)
                except SnapstoreError:
                    continue
            if not self.segments.is_indexed(p):
                self.segments.add(pk)
        # remember why a segment could not be read: a read that then finds an entry nowhere names
        # the segment (the object that is damaged or gone), not the per-save pack its hint names
        errors = {}
        with self.cache.lock:
            missing = [p for p in packs if p not in self.cache and not self.forwarding.known(p)]
        for p in missing:
            if p in hints:
                continue
            try:
                self.cache.get_pack(p, ranged=True, tail=tail)
            except SnapstoreError as e:
                errors[p] = e
        with self.cache.lock:
            self.segments.errors = errors

    def segment_packs(self, segs, also=()) -> list[bytes]:
        """The cached packs that hold a segment list's entries: each segment itself, or for one
        GC rewrote, the packs its forwarding record leads to (from memory and the hint cache only;
        :meth:`prefetch_segments` fetches them). ``also``: pack ids to count as cached (read by
        the caller, possibly evicted since)."""
        out: list[bytes] = []
        hints = self.forwarding.hints(load=False)

        def add(p, depth):
            with self.cache.lock:
                cached = p in self.cache or p in also
                to = self.forwarding.known(p)
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


    def packs_to_fetch(self, items) -> list:
        """Hinted packs still to fetch for ``(type, id, hinted pack)`` items (entries already found
        in an indexed tier pack are skipped)."""
        where = self.segments.entries
        return [p for t, i, p in items if (t, i) not in where]

    def fetch_blocks(self, items) -> None:
        """Fetch, in one parallel wave, the blocks not yet read of the ranged packs that hold the
        entries ``items`` (``(type, id, hinted pack)``, looked up as :meth:`locate` does: the
        hinted pack when cached, else the segment index). Adjacent blocks of one pack come in one
        ranged GET. Whole packs and entries not at hand are left alone; a failed GET is left to the
        read that needs the block (it reads it again and reports the error naming the pack)."""
        want: dict = {}
        with self.cache.lock:
            cache, where = self.cache.packs, self.segments.entries
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
        self.cache.fetch_pack_blocks(want)


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
        with self.cache.lock:
            ids = list(dict.fromkeys(pack_ids))
            todo = [p for p in ids if p not in self.cache]
            if got is not None:
                got.update(p for p in ids if p in self.cache)
        claimed = set(todo)
        claim_lock = threading.Lock()

        hints = self.forwarding.hints(load=False)

        gate = None  # the parallel wave's decodes wait for its starts (PackCache.WaveGate)

        def one(p, depth=0, token=None):
            # retired by GC (as of the last GC's hints, or found missing): fetch where its entries
            # went instead, in this same parallel wave (each target once)
            to = hints.get(p) if depth < 4 and p not in no_forward else None
            if not to:
                try:
                    self.cache.get_pack(p, ranged=True, tail=tail,
                                        gate=(gate, token) if token is not None else None)
                    if got is not None:
                        got.add(p)
                    return
                except ColdObjectError:
                    # an archive bundle that needs a restore (docs/format.md §28): a prefetch
                    # skips it; only a read of an entry nothing hot holds meets the error
                    return
                except ObjectNotFound:
                    if p in no_forward:
                        return
                    if token is not None:
                        gate.sent(token)  # its lookups are not what the wave's decodes wait for
                    to = self.forwarding.forward(p)
                except IntegrityError:
                    # corrupt: a retired pack's entries are also where its forwarding record
                    # says (fetched in this wave); the read that needs an entry found nowhere
                    # else reports the damaged pack
                    if p in no_forward:
                        return
                    if token is not None:
                        gate.sent(token)
                    try:
                        to = self.forwarding.forward(p)
                    except SnapstoreError:
                        return
            for t in (to or ()) if depth < 4 else ():
                with claim_lock:
                    if t in claimed:
                        continue
                    claimed.add(t)
                one(t, depth + 1, token)  # a hinted target's GET is the task's first
        if len(todo) <= 1 or (inline_ok and store_capabilities(self.store).inline_reads):
            # a store that reads several objects in one go (SQLite: one statement) reads them so
            self.cache.prime([p for p in todo if not hints.get(p)], tail)
            for p in todo:
                one(p)
            return
        gate = WaveGate()

        def task(p):
            token = gate.running()
            try:
                one(p, token=token)
            finally:
                gate.sent(token)  # ended without a GET (cached, hinted elsewhere) or after it
        list(self.cache.pool.map(task, todo))

    HINTS_MAX_AGE = 60.0
    """Seconds after which a failed forwarding hint makes the reader load ``gc/fwd-cache`` again."""


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
        with self.cache.lock:
            p = self.cache.get(pack_id)
            if p is not None and (etype, eid) in p.entries:
                return p  # the common case: the hinted pack is at hand
            cached = p is not None
            w = self.segments.get((etype, eid)) if not cached and _seen is None else None
            if w is not None:
                p = self.cache.get(w)
                if p is not None and (etype, eid) in p.entries:
                    return p
        if w is not None:
            try:
                p = self.cache.get_pack(w, ranged=True)
            except SnapstoreError:
                p = None
            if p is not None and (etype, eid) in p.entries:
                return p
        hint = None if cached else self.forwarding.hints(load=False).get(pack_id)
        if hint:  # retired as of the last GC: look where its entries went first (no GET of a 404)
            seen = set(_seen or ()) | {pack_id}
            for new in hint:
                try:
                    return self.locate(new, etype, eid, seen)
                except (ObjectNotFound, IntegrityError):
                    continue
            self.forwarding.hint_failed()
        try:
            pack = self.cache.get_pack(pack_id, ranged=True)
        except (ObjectNotFound, IntegrityError) as err:
            # gone, or corrupt (checksum mismatch, undecodable): a retired pack's entries are also
            # in the packs its forwarding record names (a segment's copy was tried above)
            corrupt = isinstance(err, IntegrityError)
            seen = _seen if _seen is not None else set()
            if pack_id in seen:
                raise
            seen.add(pack_id)
            damaged = err if corrupt else None
            gone = None  # a bundle replacing this pack found missing: the object to name (§28)
            for attempt in range(2):
                try:
                    to = self.forwarding.forward(pack_id, fresh=attempt > 0)
                except IntegrityError:
                    if not corrupt:
                        raise
                    to = None  # the damaged pack is the object to name, not its shard
                for new in to or ():
                    try:
                        return self.locate(new, etype, eid, seen)
                    except ObjectNotFound as e:
                        if gone is None and str(getattr(e, "key", "")).startswith(BUNDLE_DATA):
                            gone = e
                        continue
                    except IntegrityError as e:
                        # a damaged target (not one that merely lacks the entry, which is "not
                        # found" and lets the caller read the newest record again): name it if
                        # nothing else holds the entry
                        if damaged is None and self.cache.is_damage(e):
                            damaged = e
                        continue
                with self.cache.lock:  # GC may have redirected the record since we cached it
                    self.forwarding.drop(pack_id)
                seen.difference_update(to or ())
            if damaged is not None:
                raise damaged from None
            with self.cache.lock:
                seg_errors = list(self.segments.errors.values())
            if seg_errors and _seen is None:
                # the entry should have been in a segment that could not be read: name that one
                bad = [e for e in seg_errors if isinstance(e, IntegrityError)] or seg_errors
                raise bad[0] from None
            if _seen is None:
                # an archived run's entries are in its bundles (docs/format.md §28): a bundle found
                # corrupt is the object to name, not the hot pack it replaced
                bad = [e for e in self.cache.corrupt_packs().values()
                       if str(getattr(e, "key", "")).startswith(BUNDLE_DATA)]
                if bad:
                    raise bad[0] from None
            if gone is not None:
                # the hot pack was replaced by a bundle that is gone now: name the bundle's key
                raise gone from None
            raise
        if (etype, eid) not in pack.entries:
            raise IntegrityError(pack.key, f"entry {eid.hex()} ({chr(etype)}) not found in pack")
        return pack


    def holder(self, key: tuple[int, bytes], hint: Pack | bytes) -> Pack | None:
        """The pack at hand holding entry ``key`` (``(type, id)``): ``hint`` (a pack, or the id
        of a cached one) when it holds it, else the segment that does (the segment index), else
        None. No request is made."""
        with self.cache.lock:
            p = hint if isinstance(hint, Pack) else self.cache.get(hint)
            if p is None or key not in p.entries:
                p = self.cache.get(self.segments.get(key) or b"")
        return p if p is not None and key in p.entries else None

