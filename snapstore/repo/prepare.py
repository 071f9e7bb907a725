"""The write path: building a save in memory (dedup, chunking, the tree, the pack).

Layer 3, the :class:`WritePath` mixin of :class:`snapstore.repo.repository.Repository`, plus what a
writer keeps between saves (:class:`ListState`) and what a save produces (:class:`PreparedSave`).
:meth:`WritePath.prepare_save` writes nothing: the caller PUTs the pack and publishes the manifest
(:mod:`snapstore.repo.log.records`, :mod:`snapstore.manager.facade`). See docs/format.md §18.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone

import orjson

from ..errors import InvalidInputError, SnapstoreError
from ..format.codec import _ORJSON_OPTS, encode_json, validate
from ..format.ids import PACK_ID_BYTES, Hasher
from ..format.manifest import KIND_CHECKPOINT, Manifest
from ..format.pack import DATA_BLOCK_MAX, T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER, T_VALUE, DictSpec, PackBuilder
from ..format.tree import FLAG_EXACT, FLAG_PIECES, Ref, Spine, encode_pieces, exact_count
from ..format.valuetree import ValueTree, split_value

RECENT_RAW_KEEP = 4
"""Multiple of ``dict_bytes`` of recent message JSON a writer keeps in memory for dictionaries."""


def _fastcdc():
    """``fastcdc.fastcdc``, imported on first use: only writers cut large values, and the package
    (with click, which it imports) costs a reader's fresh process about 9 ms of import time."""
    from fastcdc import fastcdc

    return fastcdc


@dataclass
class ValueKnown:
    """What a writer knows about one stored session-state value tree (docs/format.md §7): the
    tree itself and the entries it references, which the next save may reuse (dedup).

    Attributes:
        tree: the manifest field (:class:`~snapstore.format.valuetree.ValueTree`).
        pieces: piece id -> level-0 Ref (pack hint) of every piece of the value.
        nodes: node id -> pack id of every sealed node of the value's tree.
        upper: ``(upper id, pack id)`` of the spine's upper entry, or None.
    """

    tree: ValueTree
    pieces: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    upper: tuple | None = None


@dataclass
class ListState:
    """What a writer knows about one message list (normally its run's head).

    Attributes:
        spine: the open right edge of the list's tree (None while ``refs_pending``).
        count / size: messages and their total JSON bytes.
        digest: incremental keyed blake3 over the list's JSON without the closing bracket
            (``[`` + the messages' JSON joined by ``,``); see :meth:`ListState.digest_hex`.
        state: ``(state id, pack id)`` of the stored spine, or None for an empty list.
        ids: every message id in order, or None when not loaded (cold writer).
        refs: every level-0 ref in order, or None when not loaded.
        objs: the caller's message objects of the last save (identity fast path), or None.
        raws: encoded JSON per position for recent positions (older entries are None): bytes, or
            a read-only memoryview into a cached pack block (a restore slices without copying).
        known: chunk id -> Ref, for dedup within the run.
        known_pieces: piece id -> Ref.
        nodes: node id -> pack id of the nodes of this list's tree (reused only from here: GC safety).
        value: the session-state value tree of the same checkpoint, when it has one and the
            writer read or wrote it (:class:`ValueKnown`), else None.
        exact: how many messages carry the EXACT flag (the manifest's ``messages.x``), None
            when unknown.
        refs_pending: True after a restore from array blocks (no tree read): ``spine`` is None
            and ``ids``/``refs``/``known``/``nodes`` are empty until the next save loads them.
        arrays_exact: True when the run's array blocks hold exactly this list (its messages in
            order, and nothing after them): an append that writes its messages into arrays keeps
            it true (the manifest's ``messages.a``, docs/format.md §19). An empty list starts true.
            None when unknown (a parent record written before ``messages.a``): an append keeps it
            unknown (``a`` absent, read hash first), anything else makes it False.
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
    value: ValueKnown | None = None
    exact: int | None = 0
    refs_pending: bool = False
    arrays_exact: bool | None = True

    def digest_hex(self) -> str:
        """The list digest stored in manifests: keyed blake3-128 of the list's compact JSON."""
        if self.digest is None:
            return self.digest_hex_value or ""
        d = self.digest.copy()
        d.update(b"]")
        return d.hexdigest(16)


_DIGEST_BATCH = 1 << 16
"""Bytes :func:`_json_digest` gathers before each hash update: blake3 hashes a long input several
chunks at a time (SIMD), a 2 KB message alone at about a third of that speed."""


def _json_digest(hasher: "Hasher", raws) -> object:
    """Incremental list digest over ``[`` + raws joined by ``,`` (no closing bracket).

    ``raws``: the messages' exact JSON (bytes-like), in list order. Returns the keyed blake3
    hasher (copy it and add ``]`` for the manifest's ``messages.digest``)."""
    d = hasher.new_digest()
    buf = bytearray(b"[")
    first = True
    for r in raws:
        if first:
            first = False
        else:
            buf += b","
        buf += r
        if len(buf) >= _DIGEST_BATCH:
            d.update(buf)
            del buf[:]
    d.update(buf)
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
    session_state_tree: ValueTree | None = None


HOLE_MIN = 4096
"""Bytes of JSON from which an appended message stored before (a list repeating it) becomes a hole
in the array blocks instead of a copy (docs/format.md §8): a reader fetches it where it is stored;
a shorter one costs less as a copy than as a lookup."""


class WritePath:
    """Write path of :class:`~snapstore.repo.repository.Repository`: :meth:`prepare_save` and its
    helpers (a mixin; reads the parent list through the read path's :meth:`list_state`)."""

    WRITE_ARRAYS = True
    """Appends of format 2 (``seg_fanout`` > 0) put the appended messages into array blocks
    (docs/format.md §8). False writes them as the previous version did (chunks in a data block
    compressed against the messages before them): tests build such repositories with it."""

    # ------------------------------------------------------------------------------------------
    # write path

    def _encode_message(self, msg, path: str) -> tuple[bytes, bool]:
        validate(msg, path)
        return encode_json(msg)

    def prepare_save(self, parent: ListState | None, messages: list, session_state=None,
                     has_session_state: bool = False, parent_state_ref: list | None = None,
                     parent_state_tree: ValueTree | None = None) -> PreparedSave:
        """Build the pack for a new checkpoint whose list is ``messages`` (nothing is written).

        Args:
            parent: the writer's knowledge of the parent list (None: no parent).
            messages: the new checkpoint's full message list (JSON values).
            session_state: the session state value (used when ``has_session_state``).
            parent_state_ref: the parent's ``session_state_ref`` (older layout; unused since states
                are written as value trees, kept for callers).
            parent_state_tree: the parent's ``session_state_tree``: a new state larger than
                ``inline_state_max`` reuses the pieces and nodes of that tree (and only that
                tree's: GC safety, docs/format.md §21), read through the read path if
                ``parent.value`` does not already describe it.
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
        elif parent.refs_pending:
            parent = self._load_refs(parent)
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
            if parent.ids is None or parent.refs is None or not all(parent.ids[:n_old]):
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
        # format 2 appends put every new position's message into the pack's array blocks, in list
        # order (a message stored before is stored again there), so that a reader of the run's
        # newest checkpoint parses the segments' arrays without the tree (docs/format.md §8, §19)
        arrays = self.WRITE_ARRAYS and cfg.seg_fanout > 0 and append
        for i in range(prefix, n):
            mid = ids[i]
            r = known.get(mid)
            parts = [] if arrays else None
            if r is None:
                raw = raws[i]
                r = self._store_blob(pb, mid, raw, flags[i], known_pieces, parts)
                known[mid] = r
                new_chunks += 1
                new_bytes += len(raw)
                if first_new is None:
                    first_new = i
            if arrays:
                if parts:
                    pb.add_item(parts)  # stored by this save: one chunk, or all its pieces new
                elif r.flags & FLAG_PIECES or r.size >= HOLE_MIN:
                    pb.add_hole(mid)  # stored before, or in pieces shared with one: stays deduplicated
                else:
                    raw = raws[i]
                    pb.add_item([(mid, raw if raw is not None else encode_json(messages[i])[0])])
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
        if first_new is not None and first_new > 0 and cfg.dict_bytes > 0 and not arrays:
            self._set_dictionary(pb, pack_id, messages, ids, raws, parent, all_refs, tail_refs, prefix, first_new)

        # 5. session state: inline when small, else a value tree deduplicated against the parent's
        ss_ref = None
        ss_inline = None
        ss_tree = None
        value = None
        if has_session_state:
            validate(session_state, "session_state")
            raw, exact = encode_json(session_state)
            if len(raw) > cfg.inline_state_max:
                vknown = None
                if parent_state_tree is not None:
                    if parent.value is not None and parent.value.tree == parent_state_tree:
                        vknown = parent.value
                    else:
                        try:
                            vknown = self.value_known(parent_state_tree)
                        except SnapstoreError:
                            vknown = None  # the parent's tree is unreadable: store this state whole
                value = self._store_value(pb, session_state, raw, exact, vknown)
                ss_tree = value.tree
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
        if append:
            new_exact = exact_count(tail_refs)
            exact = None if parent.exact is None and n_old else (parent.exact or 0) + new_exact
        else:
            exact = exact_count(all_refs)
        ls = ListState(spine=spine, count=count, size=size, digest=digest, state=state,
                       ids=ids, refs=all_refs, objs=messages, raws=new_raws, known=known,
                       known_pieces=known_pieces, nodes=new_nodes, value=value, exact=exact,
                       arrays_exact=parent.arrays_exact if append and (arrays or n == n_old) else False)
        if pb.empty:
            return PreparedSave(None, None, {"data": 0, "meta": 0}, ls, ss_ref, ss_inline, has_session_state, 0, 0,
                                session_state_tree=ss_tree)
        data, sizes = pb.build()
        return PreparedSave(pack_id, data, sizes, ls, ss_ref, ss_inline, has_session_state, new_chunks, new_bytes,
                            pb.raw_blocks, ss_tree)

    def _store_value(self, pb: PackBuilder, value, raw: bytes, exact: bool, known: ValueKnown | None) -> ValueKnown:
        """Add what is new of a session-state value tree to the pack (docs/format.md §7).

        The value's exact JSON ``raw`` is cut into pieces (:func:`split_value`); pieces and sealed
        nodes that ``known`` (the parent's tree) holds are referenced where they are, the others
        are added to ``pb``, with the value spine entry (and the upper entry when it changed).
        An unchanged value (same content id as ``known``) adds nothing.

        Returns:
            ValueKnown describing the new tree.
        """
        hasher = self.hasher
        sid = hasher.content_id(raw)
        flags = FLAG_EXACT if exact else 0
        if known is not None and known.tree.id == sid and known.tree.size == len(raw) and known.tree.flags == flags:
            return known
        old_pieces = known.pieces if known is not None else {}
        old_nodes = known.nodes if known is not None else {}
        pieces: dict = {}
        nodes: dict = {}
        spine = Spine(self.params, upper=known.upper if known is not None else None)

        def seal(nid: bytes, data: bytes) -> bytes:
            pack = nodes.get(nid) or old_nodes.get(nid)
            if pack is None:
                pb.add(T_NODE, nid, data)
                pack = pb.pack_id
            nodes[nid] = pack
            return pack

        for piece in split_value(value, raw, exact):
            pid = hasher.content_id(piece)
            r = pieces.get(pid) or old_pieces.get(pid)
            if r is None:
                pb.add(T_CHUNK, pid, piece)
                r = Ref(pid, len(piece), 1, 0, pb.pack_id)
            pieces[pid] = r
            spine.append(r, seal, hasher.content_id)

        def seal_upper(uid: bytes, data: bytes) -> bytes:
            pb.add(T_UPPER, uid, data)
            return pb.pack_id
        vbytes = spine.encode_state(seal_upper, hasher.content_id)
        vid = hasher.content_id(vbytes)
        pb.add(T_VALUE, vid, vbytes)
        # the nodes still open in the spine are not sealed; what the next save may reuse is what
        # this tree references: its pieces and sealed nodes (and the upper entry)
        return ValueKnown(ValueTree(sid, len(raw), flags, vid, pb.pack_id), pieces, nodes, spine.upper)

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
        ls.arrays_exact = parent.arrays_exact
        ls.known.update(parent.known)
        ls.known_pieces.update(parent.known_pieces)
        return ls

    def _load_refs(self, parent: ListState) -> ListState:
        """``parent`` with every ref loaded (a restore from array blocks reads no tree: the first
        save after it walks the tree once, so that it deduplicates against the whole list, as
        after a restore through the tree). Keeps ``parent``'s digest."""
        ls = self._reload_full(parent)
        ls.digest, ls.digest_hex_value = parent.digest, parent.digest_hex_value
        return ls

    def _store_blob(self, pb: PackBuilder, bid: bytes, raw: bytes, flags: int, known_pieces: dict,
                    parts: list | None = None) -> Ref:
        """Store message ``raw`` (content id ``bid``) in ``pb``: as one chunk, or cut into pieces
        (a pieces entry plus the pieces not in ``known_pieces``). With ``parts`` (a list), a
        message stored as one chunk goes there as ``(id, bytes)`` for an array item instead of
        into the pack's ordinary data blocks, and so do the pieces of a message of at most
        ``DATA_BLOCK_MAX`` bytes none of whose pieces is stored yet (its item is its pieces, in
        order; the pieces entry goes into the metadata block). A larger message, or one that
        shares pieces with one stored before (it stays deduplicated), has its new pieces in the
        data blocks (an array holds a hole for it), and ``parts`` stays empty.
        Returns the message's ref."""
        cfg = self.config
        if len(raw) <= cfg.cdc_threshold:
            if parts is None:
                pb.add(T_CHUNK, bid, raw)
            else:
                parts.append((bid, raw))
            return Ref(bid, len(raw), 1, flags, pb.pack_id)
        cut = []
        for c in _fastcdc()(raw, min_size=cfg.cdc_min, avg_size=cfg.cdc_avg, max_size=cfg.cdc_max, fat=True):
            piece = raw[c.offset:c.offset + c.length]
            cut.append((self.hasher.content_id(piece), piece))
        # an item is one block: a message larger than a data block stays a hole, its pieces in
        # data blocks of at most DATA_BLOCK_MAX (ranged reads fetch only theirs; a block holds at
        # most MAX_BLOCK_RAW, a message may be larger)
        inline = parts is not None and len(raw) <= DATA_BLOCK_MAX and len({pid for pid, _ in cut}) == len(cut) and \
            not any(pid in known_pieces or (T_CHUNK, pid) in pb for pid, _ in cut)
        pieces = []
        for pid, piece in cut:
            pr = known_pieces.get(pid)
            if pr is None:
                if not inline:
                    pb.add(T_CHUNK, pid, piece)
                pr = Ref(pid, len(piece), 1, 0, pb.pack_id)
                known_pieces[pid] = pr
            pieces.append(pr)
        if inline:
            parts.extend(cut)
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
        # the chunks a reader reads to build the dictionary must not sit in the block it compresses
        made_of = set(ids[a:b])
        cfg = self.config
        for raw in parts:
            if len(raw) > cfg.cdc_threshold:
                made_of.update(self.hasher.content_id(raw[c.offset:c.offset + c.length]) for c in
                               _fastcdc()(raw, min_size=cfg.cdc_min, avg_size=cfg.cdc_avg, max_size=cfg.cdc_max, fat=True))
        # the list is described by this save's own state entry, which goes into this pack
        pb.set_dictionary(DictSpec(None, None, a, b, length, digest), blob[len(blob) - length:], made_of)
