"""Reading trees: spines, nodes, whole message lists, and the writer's :class:`ListState` of a checkpoint.

Layer 3, one part of :class:`snapstore.repo.repository.Repository` (``repo.trees``). A checkpoint's
message list is a Merkle tree (:mod:`snapstore.format.tree`); this part reads its spine and nodes
(decoded nodes are remembered: a node's id is its content id), expands it level by level in
parallel waves, and restores the list, verified as a whole against the manifest's list digest
(docs/format.md §19). When the run only appended, :mod:`snapstore.repo.arrays` reads the list
from the segments' array blocks instead, without the tree.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Callable

import orjson

from ..errors import IntegrityError
from ..format import keys
from ..format.codec import decode_json, loads_exact
from ..format.manifest import Manifest
from ..format.pack import T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER
from ..format.tree import FLAG_EXACT, FLAG_PIECES, Ref, Spine, decode_node, decode_pieces, exact_count
from .entries import ReadContext
from .liststate import RECENT_RAW_KEEP, ListState, arrays_exact, json_digest


_REF_ID = itemgetter(0)
"""A :class:`~snapstore.format.tree.Ref`'s ``id`` (its first field), for C-level passes over refs."""


class TreeReader:
    """Spines, nodes and message lists of checkpoints; remembers decoded nodes.

    Args:
        repo: the :class:`~snapstore.repo.repository.Repository` this part belongs to (its
            ``hasher``, ``params``, ``config``, ``cache``, ``segments``, ``locator``, ``entries``
            and ``arrays``).
    """

    def __init__(self, repo):
        self.repo = repo
        self._nodes: dict = {}  # node id -> decoded (level, items)

    @property
    def nodes(self) -> dict:
        """The decoded nodes remembered: node id -> ``(level, items)``. Read only."""
        return self._nodes

    def forget_nodes(self) -> None:
        """Forget every decoded node (GC marks run by run, each with its own memo)."""
        with self.repo.cache.lock:
            self._nodes.clear()

    def read_state(self, state_id: bytes, pack_id: bytes, etype: int = T_STATE) -> Spine:
        """Read and decode a spine (state entry plus its upper entry). Raises IntegrityError/ObjectNotFound.

        ``etype``: :data:`T_STATE` for a message list's spine, :data:`T_VALUE` for the spine of a
        session-state value tree (same layout, docs/format.md §7).
        """
        raw = self.repo.entries.read_entry(etype, state_id, pack_id)
        try:
            run0, upper = Spine.decode_state(raw)
        except (ValueError, IndexError) as e:
            what = "state" if etype == T_STATE else "value spine"
            raise IntegrityError(keys.pack_key(pack_id), f"malformed {what} {state_id.hex()}: {e}") from None
        levels = [run0]
        if upper is not None:
            uraw = self.repo.entries.read_entry(T_UPPER, upper[0], upper[1])
            try:
                levels += Spine.decode_upper(uraw)
            except (ValueError, IndexError) as e:
                raise IntegrityError(keys.pack_key(upper[1]), f"malformed upper entry {upper[0].hex()}: {e}") from None
        return Spine(self.repo.params, levels, upper)

    NODES_MAX = 200_000
    """Most decoded tree nodes a repository object keeps (``_nodes``); cleared when full."""

    def read_node(self, node_id: bytes, pack_id: bytes) -> tuple[int, list[Ref]]:
        """Read and decode a tree node; return ``(level, items)`` (decoded nodes are cached: a node's
        content never changes, its id is its content id)."""
        hit = self._nodes.get(node_id)
        if hit is not None:
            return hit
        hit = self.nodes_at_hand([Ref(node_id, 0, 1, 0, pack_id)]).get(node_id)
        if hit is not None:
            return hit
        raw = self.repo.entries.read_entry(T_NODE, node_id, pack_id)
        try:
            node = decode_node(raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(pack_id), f"malformed node {node_id.hex()}: {e}") from None
        with self.repo.cache.lock:
            if len(self._nodes) >= self.NODES_MAX:
                self._nodes.clear()
            self._nodes[node_id] = node
        return node

    def nodes_at_hand(self, refs) -> dict:
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
        cache, where = self.repo.cache.packs, self.repo.segments.entries
        content_id = self.repo.hasher.content_id
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
            blk = p.held_block(e.block)
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
            with self.repo.cache.lock:
                if len(memo) + len(new) > self.NODES_MAX:
                    memo.clear()
                memo.update(new)
        return out

    def expand(self, spine: Spine, nodes: dict | None = None) -> list[Ref]:
        """Return every level-0 ref of the list, in order.

        Nodes are read level by level. The nodes of a level that are at hand (decoded before, or
        in a cached pack: :meth:`nodes_at_hand`) are taken first; the packs of the others are
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
            got = self.nodes_at_hand(want)
            missing = [(T_NODE, r.id, r.pack) for r in want if r.id not in got]
            if missing:
                self.repo.locator.prefetch(self.repo.locator.packs_to_fetch(missing))
                self.repo.locator.fetch_blocks(missing)
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

    def message_raw(self, ref: Ref, ctx: ReadContext | None = None, verify: bool = True) -> bytes:
        """Return a message's exact JSON bytes (pieces reassembled), verified against ``ref.id``
        (each piece against its own id too) unless ``verify`` is False: the caller then verifies
        the bytes itself (:meth:`read_list`: the list digest covers them)."""
        if not ref.flags & FLAG_PIECES:
            return self.repo.entries.read_entry(T_CHUNK, ref.id, ref.pack, ctx, verify)
        pieces_raw = self.repo.entries.read_entry(T_PIECES, ref.id, ref.pack)
        try:
            pieces = decode_pieces(pieces_raw)
        except (ValueError, IndexError) as e:
            raise IntegrityError(keys.pack_key(ref.pack), f"malformed pieces list {ref.id.hex()}: {e}") from None
        self.repo.locator.prefetch(self.repo.locator.packs_to_fetch((T_CHUNK, p.id, p.pack) for p in pieces))
        self.repo.locator.fetch_blocks((T_CHUNK, p.id, p.pack) for p in pieces)
        raw = b"".join(self.repo.entries.read_entry(T_CHUNK, p.id, p.pack, ctx, verify) for p in pieces)
        if verify and self.repo.hasher.content_id(raw) != ref.id:
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
        self.repo.locator.prefetch(self.repo.locator.packs_to_fetch(items))
        self.repo.locator.fetch_blocks(items)
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
        hasher = self.repo.hasher
        want = m.digest if len(m.digest) == 32 else None
        raws = None
        if want is not None and len(refs) == m.count:
            try:
                # everything at hand (the segments were read): one pass; else one parallel wave
                # for what is not, then the pass again. Large messages first: their pieces lists
                # and pieces in two waves, not two round trips per message
                big = [(r.id, r.pack) for r in refs if r.flags & FLAG_PIECES]
                if big and self.repo.cache.any_ranged():
                    self.repo.arrays.fetch_large(big)
                raws = self._list_raws(refs, verify=False, at_hand=True)
                if raws is None:
                    items = [(T_PIECES if r.flags & FLAG_PIECES else T_CHUNK, r.id, r.pack) for r in refs]
                    self.repo.locator.prefetch(self.repo.locator.packs_to_fetch(items))
                    self.repo.locator.fetch_blocks(items)
                    raws = self._list_raws(refs, verify=False)
            except IntegrityError:
                raws = None  # the per-entry path below finds (and names, or works around) the damage
        if raws is not None:
            digest = json_digest(hasher, raws)
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
        digest = json_digest(hasher, raws)
        if want is not None and m.count == len(refs):
            last = digest.copy()
            last.update(b"]")
            # the first release (a576e36) stored the keyed hash of the concatenated ids instead
            if last.hexdigest(16) != want and hasher.content_id(b"".join(r.id for r in refs)).hex() != want:
                raise IntegrityError(keys.manifest_key(self.repo.run_key(m.run_id), m.seq),
                                     f"checkpoint {m.checkpoint_id}: its messages (each matching its content id) do "
                                     "not match the manifest's list digest")
        return msgs, raws, digest

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
        ctx = ReadContext(self.repo.hasher, verified=verify, refs=refs, raws=out)
        # the packs at hand (the fast path below reads only these), each looked up once when named
        cache = self.repo.cache.at_hand()
        where = self.repo.segments.entries
        content_id = self.repo.hasher.content_id
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
                        blk = p.held_block(e.block)
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
        self.repo.locator.prefetch(r.pack for r in refs)
        ctx = ReadContext(self.repo.hasher)
        for r in refs:
            ctx.add(r.id, self.message_raw(r, ctx))

    def load_with_state(self, m: Manifest, segs=None, fetched: bool = False) -> tuple[list, ListState]:
        """Return ``(messages, ListState)`` for checkpoint ``m``: a restore that also prepares the
        next save (every id known; the caller's objects are not trusted, so ``objs`` is None).

        ``segs``: the segment list to read from (default: ``m``'s own; a caller holding the run's
        newest record passes its list, which covers every checkpoint of the run). The segments and
        the state's pack are fetched in one parallel wave, unless ``fetched`` (the caller read
        ``segs`` with an earlier call: a reader of many checkpoints of one run); then an entry
        whose pack the cache evicted since is fetched where the index or its hint says.
        """
        if segs is None:
            segs = m.segment_list()
        if not m.state:
            if (m.session_state_ref or m.session_state_tree) and not fetched:
                self.repo.locator.prefetch_segments(segs, tail=self.repo.cache.range_tail(m))
            return [], self.list_state(m)  # its messages.a: an emptied list leaves the old one in the arrays
        sref = (bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
        # with segments, the state is in them (the save's own pack is the last one, or merged)
        if not fetched:
            self.repo.locator.prefetch_segments(segs, [] if segs else [bytes.fromhex(h) for h in m.state[1:]],
                                                tail=self.repo.cache.range_tail(m))
        fast = self.repo.arrays.read(m, segs) if segs else None
        if fast is not None:
            msgs, digest = fast
            # no spine read either: the next save loads it with the refs (ListState.refs_pending)
            ls = ListState(spine=None, count=m.count, size=m.size, digest=digest, state=sref, exact=m.exact,
                           digest_hex_value=m.digest, refs_pending=True, arrays_exact=arrays_exact(m))
            return msgs, ls
        spine = self.read_state(*sref)
        nodes: dict = {}
        refs = self.expand(spine, nodes)
        msgs, raws, digest = self.read_list(refs, m)
        ids = list(map(_REF_ID, refs))  # C-level passes over the refs (here and ``known``)
        keep = RECENT_RAW_KEEP * max(self.repo.config.dict_bytes, 1)
        acc = 0
        for i in range(len(raws) - 1, -1, -1):  # from the end: stops at the limit
            acc += len(raws[i])
            if acc > keep:
                raws[:i + 1] = [None] * (i + 1)
                break
        ls = ListState(spine=spine, count=m.count, size=m.size, digest=digest, state=sref, ids=ids, refs=refs,
                       objs=None, raws=raws, known=dict(zip(ids, refs)), nodes=nodes,
                       exact=exact_count(refs), arrays_exact=arrays_exact(m))
        return msgs, ls


    def list_state(self, m: Manifest | None, full: bool = False) -> ListState:
        """Build a writer's :class:`ListState` for checkpoint ``m`` (None: empty list).

        With ``full``, every ref is loaded (needed when the next list is not an append).
        """
        ls = ListState(spine=Spine(self.repo.params), digest=json_digest(self.repo.hasher, []))
        if m is None or not m.state:
            ls.ids, ls.refs, ls.raws = [], [], []
            if m is not None:
                ls.arrays_exact = arrays_exact(m)  # an emptied list: the arrays may hold the old one
            return ls
        ls.digest = None
        ls.digest_hex_value = m.digest
        ls.exact = m.exact
        ls.arrays_exact = arrays_exact(m)
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
        """Record in ``ls.nodes`` every sealed node of its list's tree (node id -> pack id), read
        from the spine down."""
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
