"""Mark: which packs, and which entries of each, the live checkpoints need (reachability).

Layer 4's whole-repository walks (uses :mod:`snapstore.repo.repository`); shared by ``verify``
(:mod:`snapstore.maintenance.verify`) and garbage collection (:mod:`snapstore.maintenance.gc`).
Starting from every live manifest, :class:`Marker` walks each message tree (memoised by node id)
and collects every pack a live checkpoint needs, including the packs that data-block
dictionaries depend on, following the forwarding records of retired packs. Runs whose newest
record lists segments (format 2) are marked one at a time with their segments indexed, the
segments of consecutive runs fetched together in parallel waves.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import ColdObjectError, IntegrityError, NotFoundError, SnapstoreError
from ..format import keys
from ..format.manifest import KIND_CHECKPOINT
from ..format.pack import T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER, T_VALUE
from ..format.segs import Seg
from ..format.tree import FLAG_PIECES, Ref, decode_pieces
from ..repo.repository import Repository
from ..stores.base import max_concurrency


class Needed:
    """The needed entries of one pack, compact (GC): a bitmap over the pack's entries in header
    order (1 bit per entry instead of ~100 bytes per needed ``(type, id)``), plus the needs added
    after it was made (a set). Iterating needs the pack: :meth:`entries`."""

    __slots__ = ("bits", "nbits", "extra")

    def __init__(self, pack, needed):
        order = {k: i for i, k in enumerate(pack.entries)}
        bits = bytearray((len(order) + 7) // 8)
        self.extra: set = set()
        n = 0
        for x in needed:
            i = order.get(x)
            if i is None:
                self.extra.add(x)  # not in this pack (skipped by its readers too): kept as is
            elif not bits[i >> 3] & (1 << (i & 7)):
                bits[i >> 3] |= 1 << (i & 7)
                n += 1
        self.bits, self.nbits = bytes(bits), n

    def add(self, x) -> None:
        self.extra.add(x)

    def __len__(self) -> int:
        """Needs recorded (an entry needed again after compaction may count twice)."""
        return self.nbits + len(self.extra)

    def entries(self, pack) -> set:
        """The needed ``(type, id)`` set, given the same pack (by id) this was made from."""
        ks = list(pack.entries)
        out = {ks[i] for i in range(min(len(ks), len(self.bits) * 8)) if self.bits[i >> 3] & (1 << (i & 7))}
        return out | self.extra


@dataclass
class Reach:
    """What live checkpoints need: packs, and each pack's needed entries ``(type, id)``."""

    packs: dict = field(default_factory=lambda: defaultdict(set))
    nodes_seen: set = field(default_factory=set)
    node_hints: set = field(default_factory=set)  # (node id, pack) pairs needed
    order: list = field(default_factory=list)  # the keys of ``packs`` in the order they were found
    refs: dict = field(default_factory=dict)  # (message id, pack) -> Ref, level-0 refs (deduplicated)
    fwd_used: set = field(default_factory=set)  # retired packs named by live hints (keep their fwd records)
    hinted: set = field(default_factory=set)  # packs named directly by live hints
    seg_hinted: set = field(default_factory=set)  # packs named by live hints whose entry a segment held
    present: set | None = None  # packs known to exist (from a listing); None: ask the store
    fwd: dict = field(default_factory=dict)  # retired pack -> packs its entries moved to
    unresolved: list = field(default_factory=list)  # (pack, type, id) that no forwarding record resolves
    seg_home: dict | None = None  # (type, id) -> segment pack, for the run being marked (format 2)
    fresh_segs: set = field(default_factory=set)  # segments of newest records read again during mark
    seg_standins: set = field(default_factory=set)  # packs standing in for segments GC rewrote
    cold: set = field(default_factory=set)  # cold archive bundles (not restored) live checkpoints read, not read here
    usage: dict = field(default_factory=dict)  # pack -> (live raw bytes, raw bytes, needed entries) when last cached
    waves: int = 0  # parallel waves of segment fetches made while marking (format 2)

    def note_usage(self, repo: Repository, pids, compact: bool = False) -> None:
        """Record, for each pack of ``pids`` still in the repository's pack cache, the raw bytes of
        its needed entries, its raw bytes and how many entries are needed, so that GC can judge how
        dead the pack is without fetching it again (see :meth:`pack_usage`). ``compact``: also
        replace its needed set by a :class:`Needed` bitmap."""
        with repo.lock:
            for pid in pids:
                needed = self.packs.get(pid)
                pack = repo.cache.get(pid)
                if needed is None or pack is None:
                    continue
                if isinstance(needed, Needed):
                    if self.usage.get(pid, (0, 0, -1))[2] == len(needed):
                        continue
                    needed = needed.entries(pack)
                ents = pack.entries
                total = sum(e.length for e in ents.values())
                live = sum(ents[x].length for x in needed if x in ents)
                if compact:
                    self.packs[pid] = Needed(pack, needed)
                self.usage[pid] = (live, total, len(self.packs[pid]))

    def needed_entries(self, pid: bytes, pack) -> set:
        """The ``(type, id)`` entries needed of pack ``pid`` (``pack``: that pack, parsed)."""
        got = self.packs.get(pid, ())
        return got.entries(pack) if isinstance(got, Needed) else set(got)

    def pack_usage(self, repo: Repository, pid: bytes) -> tuple[int, int]:
        """``(live raw bytes, raw bytes)`` of a pack mark found needed: from :meth:`note_usage` when
        its needed entries have not changed since (needed sets only grow), else from the pack
        (fetched again if it left the cache). Raises ObjectNotFound / IntegrityError."""
        needed = self.packs.get(pid, ())
        u = self.usage.get(pid)
        if u is not None and u[2] == len(needed):
            return u[0], u[1]
        pack = repo.get_pack(pid)
        needed = self.needed_entries(pid, pack)
        total = sum(e.length for e in pack.entries.values())
        return sum(pack.entries[x].length for x in needed if x in pack.entries), total

    def home(self, repo: Repository, pack: bytes, etype: int, eid: bytes, seen: set | None = None) -> bytes | None:
        """The pack that now holds an entry hinted at ``pack`` (following forwarding records).

        A retired pack that still exists and holds the entry is its own home when none of the packs
        it forwards to has the entry (a reference made after the repack that dropped it).
        """
        if pack not in self.fwd:
            return pack
        seen = seen if seen is not None else set()
        if pack in seen:
            return None
        seen.add(pack)
        self.fwd_used.add(pack)
        for new in self.fwd[pack]:
            if new in self.fwd:
                h = self.home(repo, new, etype, eid, seen)
                if h is not None:
                    return h
                continue
            if self.present is not None and new not in self.present:
                continue  # cached copies of deleted packs do not count
            try:
                if (etype, eid) in repo.get_pack(new).entries:
                    return new
            except ColdObjectError:
                # an archive bundle in GLACIER/DEEP_ARCHIVE, not restored, standing in for a pack
                # GC took: the entry is in it (docs/format.md §28, "Cold bundles in a mark")
                self.cold.add(new)
                return new
            except (NotFoundError, IntegrityError):
                continue  # gone, or damaged (readers skip it too)
        if self.present is None or pack in self.present:
            try:
                if (etype, eid) in repo.get_pack(pack).entries:
                    return pack
            except NotFoundError:
                pass
            except IntegrityError:
                return pack  # damaged and no other copy: the needed pack is this one (reported)
        return None

    def need(self, repo: Repository, pack: bytes, etype: int, eid: bytes) -> None:
        """Record that entry ``(etype, eid)``, hinted at ``pack``, is needed: in the run's segment
        holding it (format 2), else in its home (:meth:`home`); one no home holds goes to
        :attr:`unresolved`. A hinted ``pack`` whose entry a segment holds goes to
        :attr:`seg_hinted` (not :attr:`hinted`: GC keeps nothing for it; an archive names it in
        its bundle's ``replaces``, docs/format.md §28, a reader may start from it)."""
        # format 2: a segment of the run's newest record that holds the entry is its home (the
        # per-save pack the hint names is deleted once merged into a tier pack)
        h = self.seg_home.get((etype, eid)) if self.seg_home else None
        if h is not None:
            self.seg_hinted.add(pack)
            got = self.packs.get(h)
            if got is None:
                got = self.packs[h] = set()
                self.order.append(h)
            got.add((etype, eid))
            return
        self.hinted.add(pack)
        h = self.home(repo, pack, etype, eid)
        if h is None:
            self.unresolved.append((pack, etype, eid))
            return
        got = self.packs.get(h)
        if got is None:
            got = self.packs[h] = set()
            self.order.append(h)
        got.add((etype, eid))


WAVE_BYTES = 24 << 20
"""Most pack bytes (as listed) :func:`mark` fetches in one wave of several runs' segments (and at
most the repository's pack cache budget over :data:`WAVE_SHARE`, so a wave stays cached until its
runs are marked)."""

WAVE_SHARE = 48
"""A wave's listed bytes are at most the pack cache's budget over this: the cache charges a pack
up to about 24x its listed bytes (:func:`snapstore.repo.packcache.pack_cost`: compressed and
uncompressed bytes, its entry table), so a wave takes at most half the cache."""


@dataclass
class MarkScope:
    """What :class:`Marker` marks against, from the caller's listing.

    Attributes:
        fwd: forwarding records (retired pack id -> the pack ids its entries moved to); needs are
            attributed to the packs that now hold the entries, and the retired packs named by live
            hints go to ``reach.fwd_used``.
        present: ids of the packs that exist (from a listing), so cached copies of deleted packs
            are never taken for live ones; None: ask the store.
        segs_by_run: format 2: run id -> the segment list of the run's newest record. An entry
            held by one of those segments has that segment as its home (before its hint); the
            run's checkpoints are marked together, with that run's segments indexed.
        sizes: pack id -> listed bytes. The segments of consecutive runs are fetched together in
            parallel waves of up to the store's ``max_concurrency`` packs and :data:`WAVE_BYTES`
            listed bytes (each run is still marked on its own, with its own memo); None: a wave
            holds one run's segments.
    """

    fwd: dict = field(default_factory=dict)
    present: set | None = None
    segs_by_run: dict = field(default_factory=dict)
    sizes: dict | None = None


def bundle_standins(fwd: dict, bundles: dict, present: set) -> dict:
    """Forwarding for a mark where archive bundles stand in for hot packs GC took (docs/format.md
    §28): ``fwd`` (retired pack id -> pack ids its entries moved to) plus, for every pack a
    bundle's index ``replaces`` that is neither in ``present`` nor already forwarded, that bundle
    (and any other bundle replacing it). A run that continued after its archive still names those
    packs in its newer records' refs and hints.

    Args:
        fwd: the forwarding map (8-byte pack id -> list of 8-byte pack ids); not changed.
        bundles: bundle id -> :class:`~snapstore.format.bundle.BundleIndex` (its ``replaces``).
        present: ids of the hot packs that exist (from a listing).

    Returns:
        A new dict in ``fwd``'s shape, for this mark only (the stored forwarding map is not changed).
    """
    out = dict(fwd)
    for bid, ix in bundles.items():
        for p in ix.replaces:
            if p not in present and p not in fwd:
                out.setdefault(p, []).append(bid)
    return out


def _code_of(err: Exception) -> str:
    return "missing-pack" if isinstance(err, NotFoundError) else "corrupt-object"


class Marker:
    """The mark phase: walk every given checkpoint's tree and record what it needs (a :class:`Reach`).

    Nodes are visited once (memoised by id), so the cost is O(live distinct data), not
    O(checkpoints x history). Packs whose data blocks use a dictionary keep the dictionary's
    state (and through it the messages it names) live. Subclasses hook in by overriding
    :meth:`fail`, :meth:`refresh`, :meth:`on_run` and :meth:`check_run`.

    Args:
        repo: the repository.
        scope: a :class:`MarkScope`.
        keep_index: leave every run's segments in the repository's segment index afterwards (verify
            reads the data through it); by default each run's entries leave the index once that
            run is marked, so memory holds one run's index at a time.
        keep_refs: return every level-0 ref in ``reach.refs`` (verify reads them); False (GC)
            drops each run's refs and visited nodes once the run is marked, so the memo holds
            one run at a time (runs without segments share one memo, as in format 1), and keeps
            each pack's needed entries as a :class:`Needed` bitmap once its run is marked.
    """

    refreshes = False
    """Whether :meth:`refresh` reads a run's newest record again (GC beside writers). When False a
    pack that vanished while marking is an error."""

    def __init__(self, repo: Repository, scope: MarkScope, keep_index: bool = False, keep_refs: bool = True):
        self.repo, self.scope = repo, scope
        self.keep_index, self.keep_refs = keep_index, keep_refs
        self.reach = Reach(fwd=dict(scope.fwd or {}), present=scope.present)
        self.seen_states: set = set()

    # ---- hooks
    def fail(self, code: str, key: str, err: Exception) -> None:
        """Something a live checkpoint needs is unreadable: ``code`` (``missing-pack`` or
        ``corrupt-object``), the object ``key``, the error. Default: raise ``err``."""
        raise err

    def refresh(self, run_id: str) -> list:
        """The segment list of run ``run_id``'s newest record, read again (only called when
        :attr:`refreshes`): a pack of the run vanished while marking (its writer merged it into a
        tier pack after the log was read), and the run is marked again with the new segments
        (their packs go to ``reach.fresh_segs``)."""
        return []

    def on_run(self, reach: Reach, pids: list) -> None:
        """Called once each run is marked, with the packs it met (``reach.usage`` holds their
        needed and total raw bytes) while they are still in the pack cache: GC copies the live
        entries of the segments it rewrites then, so that it fetches no pack a second time
        (docs/format.md §21). Default: nothing."""

    def check_run(self, checkpoints: list) -> None:
        """Called after :meth:`on_run` with the run's checkpoint manifests while its segments are
        still indexed (verify checks ``messages.x`` there). Default: nothing."""

    # ---- walking one tree
    def visit_ref(self, r: Ref, level: int) -> None:
        """Need the entries of tree ref ``r`` at tree ``level`` (0: a message) and, for a node,
        everything below it."""
        repo, reach = self.repo, self.reach
        if level == 0:
            if (r.id, r.pack) in reach.refs:
                return
            reach.refs[(r.id, r.pack)] = r
            if r.flags & FLAG_PIECES:
                reach.need(repo, r.pack, T_PIECES, r.id)
                try:
                    pieces = decode_pieces(repo.read_entry(T_PIECES, r.id, r.pack))
                except ColdObjectError:
                    return  # in a cold bundle, which holds every entry below it (§28)
                except (SnapstoreError, ValueError) as e:
                    self.fail(_code_of(e), keys.pack_key(r.pack), e)
                    return
                for p in pieces:
                    reach.need(repo, p.pack, T_CHUNK, p.id)
            else:
                reach.need(repo, r.pack, T_CHUNK, r.id)
            return
        # a node's id covers its children (and their hints), so it is walked once; but the same
        # node may be stored in several packs (a rewritten list seals it again): each hint is needed
        if (r.id, r.pack) in reach.node_hints:
            return
        reach.node_hints.add((r.id, r.pack))
        reach.need(repo, r.pack, T_NODE, r.id)
        if r.id in reach.nodes_seen:
            return
        reach.nodes_seen.add(r.id)
        try:
            lv, items = repo.read_node(r.id, r.pack)
        except ColdObjectError:
            return  # in a cold bundle, which holds every entry below it (§28)
        except SnapstoreError as e:
            self.fail(_code_of(e), keys.pack_key(r.pack), e)
            return
        for x in items:
            self.visit_ref(x, lv)

    def dictionaries(self, start: int) -> None:
        """Need the dictionaries of the packs found from ``reach.order[start]`` on: a pack whose
        data block has a dictionary needs that state's messages (packs found on the way are
        appended to ``reach.order`` and visited in turn). This includes a retired pack that still
        holds a live entry its repack did not copy: readers read that entry there."""
        repo, reach = self.repo, self.reach
        i = start
        while i < len(reach.order):
            pid = reach.order[i]
            i += 1
            try:
                pack = repo.get_pack(pid)
            except ColdObjectError:
                continue  # a cold bundle holds its blocks' dictionaries itself (§28)
            except SnapstoreError as e:
                self.fail(_code_of(e), keys.pack_key(pid), e)
                continue
            for b in pack.blocks:
                if b.shared is not None:
                    # an array block compressed against a shared object's message (block kind 6,
                    # docs/format.md §8, §29): that chunk is needed wherever the block is
                    try:
                        reach.need(repo, b.shared[0], T_CHUNK, b.shared[1])
                    except SnapstoreError as e:
                        self.fail(_code_of(e), keys.pack_key(b.shared[0]), e)
                    continue
                if b.dict is None:
                    continue
                try:
                    st_id, st_pack = pack.dict_state(b.dict)
                    reach.need(repo, st_pack, T_STATE, st_id)
                    spine = repo.read_state(st_id, st_pack)
                    if spine.upper:
                        reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
                    # the nodes read to find the range are needed too (they may be in no live tree)
                    for r in repo.refs_range(spine, b.dict.start, b.dict.end,
                                             on_node=lambda r: reach.need(repo, r.pack, T_NODE, r.id)):
                        self.visit_ref(r, 0)
                except ColdObjectError:
                    continue  # the dictionary's state is in a cold bundle, with all below it
                except SnapstoreError as e:
                    self.fail(_code_of(e), pack.key, e)
                    continue

    def walk_value(self, tree) -> None:
        """Need a session-state value tree (docs/format.md §7): its spine, upper entry, nodes and pieces."""
        repo, reach = self.repo, self.reach
        key = ("v", tree.spine, tree.pack)
        if key in self.seen_states:
            return
        self.seen_states.add(key)
        reach.need(repo, tree.pack, T_VALUE, tree.spine)
        try:
            spine = repo.read_state(tree.spine, tree.pack, T_VALUE)
        except ColdObjectError:
            return  # in a cold bundle, which holds every entry below it (§28)
        except SnapstoreError as e:
            self.fail(_code_of(e), keys.pack_key(tree.pack), e)
            return
        if spine.upper:
            reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
        for level, r in spine.top_down():
            self.visit_ref(r, level)

    def walk(self, m) -> None:
        """Need everything checkpoint manifest ``m`` references: its session state and its list."""
        if m.session_state_ref:
            sid, pack, size, flags = m.session_state_ref
            self.visit_ref(Ref(bytes.fromhex(sid), size, 1, flags, bytes.fromhex(pack)), 0)
        if m.session_state_tree is not None:
            self.walk_value(m.session_state_tree)
        if m.state:
            self.walk_list(m)

    def walk_list(self, m) -> None:
        """Need the message list of checkpoint manifest ``m`` (which has one): its state, its tree."""
        repo, reach = self.repo, self.reach
        sid, spack = bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1])
        if (sid, spack) in self.seen_states:
            return
        self.seen_states.add((sid, spack))
        reach.need(repo, spack, T_STATE, sid)
        try:
            spine = repo.read_state(sid, spack)
        except ColdObjectError:
            return  # in a cold bundle, which holds every entry below it (§28)
        except SnapstoreError as e:
            self.fail(_code_of(e), keys.pack_key(spack), e)
            return
        if spine.upper:
            reach.need(repo, spine.upper[1], T_UPPER, spine.upper[0])
        try:
            repo.prefetch(repo.packs_to_fetch((T_NODE if level else (T_PIECES if r.flags & FLAG_PIECES else T_CHUNK), r.id, r.pack)
                                          for level, r in spine.top_down()))
        except ColdObjectError:
            pass  # (a prefetch only: each read below meets the cold bundle on its own)
        for level, r in spine.top_down():
            self.visit_ref(r, level)

    # ---- segments (format 2)
    def seg_packs(self, segs, fresh: bool = False) -> list:
        """The packs holding a segment list's entries: each present segment, or the present packs
        a rewritten (retired) segment's forwarding record leads to; those records are used.
        ``fresh``: the list was read after the listing (its new packs are not in ``present``)."""
        reach, present = self.reach, self.scope.present
        out = []

        def add(p, depth):
            if p in reach.fwd and depth < 8:
                reach.fwd_used.add(p)  # a listed segment keeps its record as a hint would
                if present is None or p in present:
                    out.append(p)  # still there (grace period): only for entries the rewrite dropped
                for t in reach.fwd[p]:
                    add(t, depth + 1)  # later packs win in the index
                return
            if present is None or fresh or p in present:
                out.append(p)
        listed = {sg.pack for sg in segs}
        for sg in segs:
            reach.hinted.add(sg.pack)
            add(sg.pack, 0)
        out = list(dict.fromkeys(out))
        reach.seg_standins.update(p for p in out if p not in listed)
        return out

    def wave(self, run_ids: list, i: int) -> int:
        """Fetch the segments of runs ``run_ids[i], run_ids[i+1], ...`` in one parallel wave (as
        many runs as fit); return the index of the first run left out. Forwarded or vanished
        segments are left to the run's own :meth:`prefetch_segments`, which then finds the others
        cached."""
        repo, reach, scope = self.repo, self.reach, self.scope
        per_wave = max_concurrency(repo.store)
        wave_bytes = max(1, min(WAVE_BYTES, repo.cache.limit // WAVE_SHARE))
        todo, nbytes, j = [], 0, i
        while j < len(run_ids):
            ps = [sg.pack for sg in scope.segs_by_run.get(run_ids[j]) or ()
                  if (scope.present is None or sg.pack in scope.present) and sg.pack not in reach.fwd]
            b = sum((scope.sizes or {}).get(p, 0) for p in ps)
            if j > i and (scope.sizes is None or len(todo) + len(ps) > per_wave or nbytes + b > wave_bytes):
                break
            todo += ps
            nbytes += b
            j += 1
        with repo.lock:
            todo = [p for p in dict.fromkeys(todo) if p not in repo.cache]
        todo = [p for p in todo if not self._cold(p)]
        if todo:
            repo.prefetch(todo, no_forward=set(todo))
            reach.waves += 1
        return j

    def _refreshed(self, run_id: str) -> list:
        segs = list(self.refresh(run_id) or ())
        self.reach.fresh_segs.update(sg.pack for sg in segs)
        return segs

    def _cold(self, pack_id: bytes) -> bool:
        """True if ``pack_id`` is an archive bundle in a class that needs a restore
        (``GLACIER``/``DEEP_ARCHIVE``) and is not restored: a mark never reads it."""
        try:
            self.repo.bundles.key(pack_id)
        except ColdObjectError:
            return True
        return False

    def hold_segments(self, run_id: str, segs: list, fresh: bool) -> tuple[list, list, bool]:
        """Fetch the packs holding run ``run_id``'s segments ``segs``; while one is gone from the
        store (merged and deleted by the run's writer since the log was read) and
        :attr:`refreshes`, read the newest record again (a busy writer merges often). Returns
        ``(held packs, the segment list used, fresh)``."""
        repo = self.repo
        held = []
        for _ in range(8):
            held = self.seg_packs(segs, fresh) if segs else []
            cold = [p for p in held if self._cold(p)]
            if cold:  # a cold bundle standing in for segments: kept, never read (§28)
                held = [p for p in held if p not in cold]
                self.reach.cold.update(cold)
                for p in cold:
                    self.reach.packs[p]  # (a defaultdict: the bundle is reached, so GC keeps it)
            if held:
                repo.prefetch_segments([Seg(p, 1) for p in held])
            # gone = not in the store (a damaged segment is not gone: its entries are read from
            # other copies); a pack the cache already evicted again (a run whose packs, with
            # the ones a rewrite put its entries in, outgrow the cache) is not gone either
            gone = [p for p in held if repo.pack_absent(p)]
            if not gone or not self.refreshes:
                break
            segs, fresh = self._refreshed(run_id), True
        return held, segs, fresh

    def walk_checkpoints(self, checkpoints: list) -> None:
        """:meth:`walk` every manifest of ``checkpoints``, their state packs fetched 256 at a time."""
        repo = self.repo
        for n, m in enumerate(checkpoints):
            if n % 256 == 0:  # fetch the next state packs in one parallel wave
                repo.prefetch(repo.packs_to_fetch((T_STATE, bytes.fromhex(x.state[0]), bytes.fromhex(x.state[1]))
                                              for x in checkpoints[n:n + 256] if x.state))
            self.walk(m)

    def mark_run(self, run_id: str, checkpoints: list, segs: list, done: int) -> tuple[int, list, list]:
        """Mark one run's ``checkpoints`` with its segments ``segs`` indexed, then the
        dictionaries of the packs found since ``reach.order[done]``. A pack that vanished meanwhile
        makes the run be marked again with its newest record's segments (up to 3 passes, when
        :attr:`refreshes`). Returns ``(index in reach.order where this run's finds start, held
        segment packs, the segment list used last)``. Raises NotFoundError when the last pass
        still misses a pack."""
        repo, reach = self.repo, self.reach
        fresh, own_memo = False, bool(segs)
        for attempt in range(3):
            reach.seg_home = None
            held, segs, fresh = self.hold_segments(run_id, segs, fresh)
            if held:
                reach.seg_home = repo.segment_index(held)
            first = len(reach.order)
            try:
                self.walk_checkpoints(checkpoints)
                self.dictionaries(done)  # with this run's segments indexed
                return first, held, segs
            except NotFoundError:
                if not self.refreshes or attempt == 2:
                    raise
                for p in reach.order[first:]:  # homes found by the failed pass: found again below
                    reach.packs.pop(p, None)
                del reach.order[first:]
                if own_memo:  # a run with segments has its own memo: start it again
                    reach.refs.clear()
                    reach.node_hints.clear()
                    reach.nodes_seen.clear()
                if held:
                    repo.forget_segments(held)
                segs, fresh = self._refreshed(run_id), True
                self.seen_states.clear()
        raise AssertionError("unreachable")

    def run(self, manifests) -> Reach:
        """Mark every checkpoint of ``manifests`` (an iterable of :class:`Manifest`; other kinds
        are skipped), run by run.

        Returns:
            The :class:`Reach`.
        Raises:
            IntegrityError / ObjectNotFound: from :meth:`fail` (by default) when something is unreadable.
        """
        repo, reach = self.repo, self.reach
        by_run: dict = defaultdict(list)
        for m in manifests:
            if m.kind == KIND_CHECKPOINT:
                by_run[m.run_id].append(m)
        all_refs: dict = {}  # refs and nodes of the runs with segments (for the caller: verify reads them)
        all_nodes: set = set()
        done = 0
        shared_memo = (reach.refs, reach.node_hints, reach.nodes_seen, set(self.seen_states))
        run_ids = list(by_run)
        fetched_until = 0  # runs whose segments a wave has fetched
        for ri, (run_id, checkpoints) in enumerate(by_run.items()):
            segs = list(self.scope.segs_by_run.get(run_id) or ())
            if segs and ri >= fetched_until:
                fetched_until = self.wave(run_ids, ri)
            # what a walk memoises (refs, node hints, nodes, states) is attributed to a home; with
            # segments the home depends on the run, so a run with segments gets its own memo (runs
            # without share one, as in format 1)
            self.seen_states.clear()
            if segs:
                reach.refs, reach.node_hints, reach.nodes_seen = {}, set(), set()
            else:
                reach.refs, reach.node_hints, reach.nodes_seen = shared_memo[0], shared_memo[1], shared_memo[2]
                self.seen_states.update(shared_memo[3])
            first, held, segs = self.mark_run(run_id, checkpoints, segs, done)
            met = list(dict.fromkeys(reach.order[first:] + list(held)))
            reach.note_usage(repo, met, compact=not self.keep_refs)
            self.on_run(reach, met)
            self.check_run(checkpoints)
            if not self.keep_refs and segs:
                with repo.lock:
                    repo.trees.forget_nodes()  # decoded nodes: the next run (own memo) reads its own
            done = len(reach.order)
            if held and not self.keep_index:
                repo.forget_segments(held)
            if segs:
                if self.keep_refs:
                    all_refs.update(reach.refs)
                    all_nodes.update(reach.nodes_seen)
            else:
                shared_memo[3].update(self.seen_states)
        for k, v in all_refs.items():
            shared_memo[0].setdefault(k, v)
        shared_memo[2].update(all_nodes)
        reach.refs, reach.node_hints, reach.nodes_seen = shared_memo[0], shared_memo[1], shared_memo[2]
        reach.seg_home = None
        self.dictionaries(done)
        reach.note_usage(repo, reach.order[done:], compact=not self.keep_refs)
        return reach
