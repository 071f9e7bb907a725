"""The write path: building a save in memory (dedup, chunking, the tree, the pack).

Layer 3, the :class:`SavePreparer` part of :class:`snapstore.repo.repository.Repository`
(``repo.saves``). What a writer keeps between saves (:class:`ListState`) and what a save produces
(:class:`PreparedSave`) are in :mod:`snapstore.repo.liststate`.
:meth:`SavePreparer.prepare_save` writes nothing: the caller PUTs the pack and publishes the manifest
(:mod:`snapstore.repo.log.records`, :mod:`snapstore.manager.facade`). See docs/format.md §18.
"""

from __future__ import annotations

import operator
from itertools import islice
from dataclasses import dataclass, field
from datetime import datetime, timezone

import orjson

from ..errors import InvalidInputError, SnapstoreError
from ..format.codec import _ORJSON_OPTS, encode_json, validate
from ..format.ids import new_pack_id
from ..format.manifest import KIND_CHECKPOINT, Manifest
from ..format.pack import DATA_BLOCK_MAX, T_CHUNK, T_NODE, T_PIECES, T_STATE, T_UPPER, T_VALUE, DictSpec, PackBuilder
from ..format.tree import FLAG_EXACT, FLAG_PIECES, Ref, Spine, encode_pieces, exact_count
from ..format.valuetree import ValueTree, split_value
from .liststate import MARKS_KEEP, RECENT_RAW_KEEP, ListMark, ListState, PreparedSave, ValueKnown, json_digest


SAVE_SMALL_LEVEL = 9
"""zstd level of the blocks of at most :data:`~snapstore.format.pack.SMALL_BLOCK` raw bytes of a
per-save pack compressed against a shared object (docs/format.md §29, "Dictionaries"; about
0.4 ms for the 2.5 kB of a typical append); other packs and larger blocks keep the config's level."""


def _fastcdc():
    """``fastcdc.fastcdc``, imported on first use: only writers cut large values, and the package
    (with click, which it imports) costs a reader's fresh process about 9 ms of import time."""
    from fastcdc import fastcdc

    return fastcdc


HOLE_MIN = 4096
"""Bytes of JSON from which an appended message stored before (a list repeating it) becomes a hole
in the array blocks instead of a copy (docs/format.md §8): a reader fetches it where it is stored;
a shorter one costs less as a copy than as a lookup."""

REWIND_MAX = 4096
"""Messages a save that keeps the parent's first ``p`` messages and changes what follows re-appends
at most to the tree from the parent's nearest :class:`ListMark` at or before ``p``; further back, the
tree is rebuilt from the first message."""


@dataclass
class _SaveBuild:
    """The working state of one :meth:`SavePreparer.prepare_save`, shared by its phases.

    ``parent``/``messages``: the parent list's state and the new list; ``ids``/``flags``/``raws``:
    per position of the new list, its content id, ref flags and exact JSON (filled as needed);
    ``prefix``: how many of the parent's messages are kept as they are; ``digest``: the list digest
    after them (None: computed at the end); ``append``: the new list extends the parent's; ``pb``:
    the pack being built; ``known``/``known_pieces``: what dedup may reuse; ``tail_refs``/
    ``all_refs``: refs of positions ``prefix`` on / of the whole list (None: not loaded);
    ``arrays``: the appended messages go into array blocks; ``new_chunks``/``new_bytes``: stored;
    ``rewind``: the parent's mark the tree and digest restart from (a list that keeps the parent's
    first ``prefix`` messages, then differs), or None; ``marks``: this save's new marks;
    ``shared``: the shared packs referenced instead of storing their messages (§29).
    """

    parent: ListState
    messages: list
    n_old: int = 0
    n: int = 0
    ids: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    raws: list = field(default_factory=list)
    prefix: int = 0
    digest: object = None
    append: bool = False
    pb: PackBuilder | None = None
    known: dict = field(default_factory=dict)
    known_pieces: dict = field(default_factory=dict)
    tail_refs: list = field(default_factory=list)
    all_refs: list | None = None
    arrays: bool = False
    new_chunks: int = 0
    new_bytes: int = 0
    rewind: int | None = None
    marks: dict = field(default_factory=dict)
    shared: list = field(default_factory=list)

    def __post_init__(self):
        self.n_old = self.parent.count
        self.n = n = len(self.messages)
        self.ids, self.flags, self.raws = [b""] * n, [0] * n, [None] * n


class SavePreparer:
    """Builds a save in memory: one part of :class:`~snapstore.repo.repository.Repository`
    (``repo.saves``; the repository's :meth:`prepare_save` is this part's).

    Holds no state. Args:
        repo: the repository (its ``config``, ``hasher``, ``params``, ``trees`` and ``values``:
            the parent list and the parent's session state are read through them).
    """

    WRITE_ARRAYS = True
    """Appends of format 2 (``seg_fanout`` > 0) put the appended messages into array blocks
    (docs/format.md §8). False writes them as the previous version did (chunks in a data block
    compressed against the messages before them): tests build such repositories with it."""

    def __init__(self, repo):
        self.repo = repo

    def _encode_message(self, msg, path: str) -> tuple[bytes, bool]:
        """``(exact JSON, needs the exact parser)`` of message ``msg`` (``path`` names it in errors).
        Raises InvalidMessageError for a value that is not exact JSON."""
        validate(msg, path)
        return encode_json(msg)
    def prepare_save(self, parent: ListState | None, messages: list, session_state=None,
                     has_session_state: bool = False, parent_state_tree: ValueTree | None = None,
                     listed=()) -> PreparedSave:
        """Build the pack for a new checkpoint whose list is ``messages`` (nothing is written).

        Args:
            parent: the writer's knowledge of the parent list (None: no parent).
            messages: the new checkpoint's full message list (JSON values).
            session_state: the session state value (used when ``has_session_state``).
            has_session_state: whether the checkpoint has a session state (None is a state).
            parent_state_tree: the parent's ``session_state_tree``: a new state larger than
                ``inline_state_max`` reuses the pieces and nodes of that tree (and only that
                tree's: GC safety, docs/format.md §21), read through the read path if
                ``parent.value`` does not already describe it.
            listed: ids of the foreign segments the record publishing this save will list (the
                run's newest record's): the pack's array blocks are compressed against the message
                of the first shared pack among them or among the shared packs this save references
                (docs/format.md §8 block kind 6, §29 "Dictionaries").
        Raises:
            InvalidInputError: ``messages`` is not a list.
            InvalidMessageError: a message or the state is not an exact JSON value.
        Returns:
            PreparedSave with the pack bytes (None if nothing new) and the new ListState.
        """
        if not isinstance(messages, (list, tuple)):
            raise InvalidInputError(f"messages must be a list, got {type(messages).__name__}")
        if parent is None:
            parent = self.repo.trees.list_state(None)
        elif parent.refs_pending:
            parent = self._load_refs(parent)
        b = _SaveBuild(parent, list(messages))
        self._compare_prefix(b)                       # 1. how much of the parent list is kept as is?
        pack_id = new_pack_id()
        b.pb = PackBuilder(pack_id, level=self.repo.config.level)
        first_new = self._store_tail(b)               # 2. refs for the changed tail, new chunks into the pack
        spine, nodes = self._build_tree(b)            # 3. the new tree
        if first_new is not None and first_new > 0 and self.repo.config.dict_bytes > 0 and not b.arrays:
            self._set_dictionary(b, first_new)        # 4. the data block's dictionary
        value = None                                  # 5. session state: inline when small, else a value tree
        ss_inline = None
        if has_session_state:
            value, ss_inline = self._session_state(b, session_state, parent_state_tree)
        ls = self._list_state_after(b, spine, nodes, value)  # 6. the state entry and the new ListState
        ss_tree = value.tree if value is not None else None
        pb = b.pb
        if pb.empty:
            return PreparedSave(None, None, {"data": 0, "meta": 0}, ls, None, ss_inline, has_session_state, 0, 0,
                                session_state_tree=ss_tree, shared=b.shared)
        if b.arrays:
            sd = self.repo.shared.dictionary(list(b.shared) + [p for p in listed if p not in b.shared])
            if sd is not None:
                pb.set_array_dictionary(*sd)
                pb.small_level = SAVE_SMALL_LEVEL
        data, sizes = pb.build()
        return PreparedSave(pack_id, data, sizes, ls, None, ss_inline, has_session_state, b.new_chunks, b.new_bytes,
                            pb.raw_blocks, ss_tree, b.shared)

    def _compare_prefix(self, b: "_SaveBuild") -> None:
        """Set ``b.prefix`` (how many of the parent's messages the new list keeps as they are),
        ``b.digest`` (the list digest after them, or None: computed at the end), and the ids, flags
        and JSON of every position from ``b.prefix`` on (and of the positions compared). A list
        that is not an append makes ``b.parent`` a fully loaded copy of the parent.

        Raises:
            InvalidMessageError: a message is not an exact JSON value.
        """
        parent, messages, n_old = b.parent, b.messages, b.n_old
        hasher = self.repo.hasher
        if parent.objs is not None and parent.ids is not None and len(parent.objs) == n_old:
            # warm writer: the caller's objects from the last save, by identity (a shorter list
            # too: it may keep a long prefix, see _rewind) ...
            m = min(n_old, b.n)
            same = list(map(operator.is_, messages[:m], parent.objs[:m]))
            try:
                b.prefix = same.index(False)
            except ValueError:
                b.prefix = m
            # ... and the most recent ones by value: they are the ones callers tend to mutate
            for i in range(max(0, b.prefix - 4), b.prefix):
                raw, exact = self._encode_message(messages[i], f"messages[{i}]")
                if hasher.content_id(raw) != parent.ids[i]:
                    b.prefix = i
                    break
            if b.prefix == n_old:
                b.digest = parent.digest.copy() if parent.digest is not None else None
        elif 0 < n_old <= b.n:
            d = self._prefix_digest(messages, n_old)
            if d is not None:
                chk = d.copy()
                chk.update(b"]")
                if chk.hexdigest(16) == parent.digest_hex():
                    b.prefix = n_old
                    b.digest = d
                    self._window(b)
        if b.prefix < n_old and self._rewind(b):
            pass
        elif b.prefix < n_old:
            # the list was rewritten (or could not be compared cheaply): compare message by message
            if parent.ids is None or parent.refs is None or not all(parent.ids[:n_old]):
                parent = b.parent = self._reload_full(parent)
            for i in range(b.n):
                self._encode_at(b, i)
            lim = min(n_old, b.n)
            i = 0
            while i < lim and b.ids[i] == parent.ids[i]:
                i += 1
            b.prefix = i
            b.digest = None
        b.append = b.prefix == n_old
        for i in range(b.prefix, b.n):
            if not b.ids[i]:
                self._encode_at(b, i)
        if parent.ids is not None and b.append:
            # the parent's ids, but those this save computed (only its last positions: the ones
            # compared by value, or a cold writer's window) where the parent has none
            new = parent.ids[:b.prefix]
            i = b.prefix - 1
            while i >= 0 and b.ids[i]:
                if not new[i]:
                    new[i] = b.ids[i]
                i -= 1
            b.ids[:b.prefix] = new

    def _rewind(self, b: "_SaveBuild") -> bool:
        """A warm save whose list keeps the parent's first ``b.prefix`` messages (the same objects)
        and differs after them: encode only the positions from ``b.prefix`` on, and set
        ``b.rewind`` to the parent's nearest mark at or before the kept prefix, from which the tree
        and the digest are continued (docs/format.md §18). Returns False (nothing changed) when the
        parent has no such mark within :data:`REWIND_MAX` or does not hold every id and ref.

        Raises:
            InvalidMessageError: a message from ``b.prefix`` on is not an exact JSON value.
        """
        parent, p = b.parent, b.prefix
        if (not parent.marks or parent.ids is None or parent.refs is None or len(parent.ids) != b.n_old
                or len(parent.refs) != b.n_old):
            return False
        q = max((k for k in parent.marks if k <= p), default=None)
        if q is None or p - q > REWIND_MAX or parent.marks[q].digest is None or not all(parent.ids[q:p]):
            return False
        b.ids[:p] = parent.ids[:p]
        for i in range(p, b.n):
            self._encode_at(b, i)
        lim = min(b.n_old, b.n)
        i = p
        while i < lim and b.ids[i] == parent.ids[i]:
            i += 1
        b.prefix = i
        if i == b.n_old:  # the rest equal by value: an append after all
            b.digest = parent.digest.copy() if parent.digest is not None else None
            return True
        praws = parent.raws if parent.raws is not None and len(parent.raws) == b.n_old else None
        for j in range(q, i):  # the JSON the digest is continued with, from the mark on
            if b.raws[j] is None:
                raw = praws[j] if praws is not None else None
                b.raws[j] = raw if raw is not None else encode_json(b.messages[j])[0]
        b.rewind = q
        b.digest = parent.marks[q].digest.copy()
        return True

    def _prefix_digest(self, messages: list, n_old: int):
        """A cold writer's check of the prefix: the JSON digest (without closing bracket) of
        ``messages[:n_old]``, encoded in slices (bounded memory), or None when orjson cannot encode
        them (big ints, surrogates or non-JSON values: compared message by message instead).
        orjson writes NaN/Infinity as null, so a slice that contains null is validated in full.

        Raises:
            InvalidMessageError: a message of a slice holding null is not an exact JSON value.
        """
        d = self.repo.hasher.new_digest()
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
            return None
        return d

    def _encode_at(self, b: "_SaveBuild", i: int) -> None:
        """Encode message ``i`` of ``b``: its JSON, content id and flags.
        Raises InvalidMessageError for a value that is not exact JSON."""
        raw, exact = self._encode_message(b.messages[i], f"messages[{i}]")
        b.raws[i] = raw
        b.ids[i] = self.repo.hasher.content_id(raw)
        b.flags[i] = FLAG_EXACT if exact else 0

    def _store_tail(self, b: "_SaveBuild") -> int | None:
        """Build the refs of positions ``b.prefix`` on (``b.tail_refs``), adding the messages not
        known yet to the pack. Returns the position of the first message stored, or None."""
        cfg = self.repo.config
        pb, messages, ids, raws = b.pb, b.messages, b.ids, b.raws
        known = b.known = dict(b.parent.known)
        b.known_pieces = dict(b.parent.known_pieces)
        first_new = None
        # format 2 appends put every new position's message into the pack's array blocks, in list
        # order (a message stored before is stored again there), so that a reader of the run's
        # newest checkpoint parses the segments' arrays without the tree (docs/format.md §8, §19)
        arrays = b.arrays = self.WRITE_ARRAYS and cfg.seg_fanout > 0 and b.append
        # cross-run dedup (docs/format.md §29): only a run's first save, and only with segments
        # (the shared pack is listed as a foreign segment, found in the segment wave)
        shared = self.repo.shared
        share = b.n_old == 0 and cfg.seg_fanout > 0
        for i in range(b.prefix, b.n):
            mid = ids[i]
            r = known.get(mid)
            parts = [] if arrays else None
            if r is None and share and shared.candidate(raws[i]):
                # a large message of a run's first save (a system prompt, a tool schema): stored
                # once for every run of the epoch in a shared pack, listed as a foreign segment
                sp = shared.ensure(mid, raws[i])
                if sp is not None:
                    r = known[mid] = Ref(mid, len(raws[i]), 1, b.flags[i], sp)
                    if sp not in b.shared:
                        b.shared.append(sp)
            if r is None:
                raw = raws[i]
                r = self._store_blob(pb, mid, raw, b.flags[i], b.known_pieces, parts)
                known[mid] = r
                b.new_chunks += 1
                b.new_bytes += len(raw)
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
            b.tail_refs.append(r)
        return first_new

    def _build_tree(self, b: "_SaveBuild") -> tuple[Spine, dict]:
        """The new list's tree: the parent's spine appended to, or rebuilt from the common prefix.
        Sets ``b.all_refs``; returns ``(spine, nodes)`` (nodes: node id -> pack id of every sealed
        node the new tree references; a node is reused only if the parent's tree has it)."""
        parent, pb, hasher = b.parent, b.pb, self.repo.hasher
        if b.append:
            new_nodes: dict[bytes, bytes] = dict(parent.nodes)
        elif b.rewind is not None:
            # the nodes the tree of the first ``rewind`` refs references: the first ones sealed
            new_nodes = dict(islice(parent.nodes.items(), parent.marks[b.rewind].nodes))
        else:
            new_nodes = {}

        def seal(nid: bytes, data: bytes) -> bytes:
            # reuse a node only if the parent's tree has it (data the parent keeps alive)
            pack = new_nodes.get(nid) or parent.nodes.get(nid)
            if pack is None:
                pb.add(T_NODE, nid, data)
                pack = pb.pack_id
            new_nodes[nid] = pack
            return pack

        if b.append:
            spine = parent.spine.copy()
            b.all_refs = None if parent.refs is None else parent.refs + b.tail_refs
        elif b.rewind is not None:
            spine = Spine(self.repo.params, parent.marks[b.rewind].levels, upper=parent.spine.upper)
            b.all_refs = parent.refs[:b.prefix] + b.tail_refs
            for r in parent.refs[b.rewind:b.prefix]:
                spine.append(r, seal, hasher.content_id)
        else:
            spine = Spine(self.repo.params, upper=parent.spine.upper)
            b.all_refs = parent.refs[:b.prefix] + b.tail_refs
            for r in parent.refs[:b.prefix]:
                spine.append(r, seal, hasher.content_id)
        marks = b.marks
        for i, r in enumerate(b.tail_refs, b.prefix):
            marks[i] = ListMark([list(x) for x in spine.levels], len(new_nodes))
            spine.append(r, seal, hasher.content_id)
        return spine, new_nodes

    def _session_state(self, b: "_SaveBuild", session_state, parent_state_tree: ValueTree | None):
        """Store the session state: ``(ValueKnown, None)`` for one larger than ``inline_state_max``
        (a value tree deduplicated against ``parent_state_tree``), else ``(None, the state)``.
        Raises InvalidMessageError for a state that is not exact JSON."""
        validate(session_state, "session_state")
        raw, exact = encode_json(session_state)
        if len(raw) <= self.repo.config.inline_state_max:
            return None, session_state
        parent = b.parent
        vknown = None
        if parent_state_tree is not None:
            if parent.value is not None and parent.value.tree == parent_state_tree:
                vknown = parent.value
            else:
                try:
                    vknown = self.repo.values.known(parent_state_tree)
                except SnapstoreError:
                    vknown = None  # the parent's tree is unreadable: store this state whole
        return self._store_value(b.pb, session_state, raw, exact, vknown), None

    def _list_state_after(self, b: "_SaveBuild", spine: Spine, nodes: dict, value: ValueKnown | None) -> ListState:
        """Add the state entry to the pack (when the list changed) and return the new list's
        :class:`ListState` (digest, recent JSON kept for dictionaries, what dedup may reuse)."""
        parent, pb, hasher, n, n_old, prefix = b.parent, b.pb, self.repo.hasher, b.n, b.n_old, b.prefix
        raws, tail_refs, all_refs = b.raws, b.tail_refs, b.all_refs
        dropped = parent.refs[prefix:n_old] if b.rewind is not None else ()
        if b.append:
            size = parent.size + sum(r.size for r in tail_refs)
        elif b.rewind is not None:
            size = parent.size - sum(r.size for r in dropped) + sum(r.size for r in tail_refs)
        else:
            size = sum(r.size for r in all_refs)
        if n == 0:
            state = None
        elif b.append and not tail_refs and parent.state is not None:
            state = parent.state
        else:
            def seal_upper(uid: bytes, data: bytes) -> bytes:
                pb.add(T_UPPER, uid, data)
                return pb.pack_id
            sbytes = spine.encode_state(seal_upper, hasher.content_id)
            sid = hasher.content_id(sbytes)
            pb.add(T_STATE, sid, sbytes)
            state = (sid, pb.pack_id)
        digest = b.digest
        start = b.rewind if b.rewind is not None else prefix
        if digest is None:
            digest = json_digest(hasher, (raws[i] if raws[i] is not None else encode_json(b.messages[i])[0]
                                          for i in range(prefix)))
            start = prefix
        marks = b.marks
        for i in range(start, n):
            mk = marks.get(i) if i >= prefix else None
            if mk is not None:
                mk.digest = digest.copy()
            if i > 0:
                digest.update(b",")
            digest.update(raws[i])
        # the marks the next save may restart from: the parent's at or before the kept prefix
        # (only when this save's nodes keep the parent's order: an append or a rewind), and this
        # save's, the newest MARKS_KEEP
        if b.append:
            kept = dict(parent.marks)
        elif b.rewind is not None:
            kept = {k: v for k, v in parent.marks.items() if k <= prefix}
        else:
            kept = {}
        kept.update(marks)
        if len(kept) > MARKS_KEEP:
            for k in sorted(kept)[:len(kept) - MARKS_KEEP]:
                del kept[k]
        # keep the most recent raw JSON (a few dictionaries' worth) for the next save's dictionary
        old_raws = parent.raws if (parent.raws is not None and len(parent.raws) == n_old) else [None] * n_old
        new_raws = old_raws[:prefix] + raws[prefix:]
        keep = RECENT_RAW_KEEP * max(self.repo.config.dict_bytes, 1)
        acc = 0
        for i in range(n - 1, -1, -1):
            if new_raws[i] is not None:
                acc += len(new_raws[i])
                if acc > keep:
                    new_raws[:i + 1] = [None] * (i + 1)
                    break
        known, known_pieces = b.known, b.known_pieces
        if b.append:
            new_exact = exact_count(tail_refs)
            exact = None if parent.exact is None and n_old else (parent.exact or 0) + new_exact
        elif b.rewind is not None:
            # dedup only against what the new list references (GC safety): the parent's known
            # refs without those only the dropped end held (one also in the kept prefix may go too)
            tail_ids = {r.id for r in tail_refs}
            for r in dropped:
                if r.id not in tail_ids:
                    known.pop(r.id, None)
            known_pieces = {k: r for k, r in known_pieces.items() if r.pack == pb.pack_id}
            exact = (parent.exact - exact_count(dropped) + exact_count(tail_refs) if parent.exact is not None
                     else exact_count(all_refs))
        else:
            # dedup only ever against data the new checkpoint itself keeps alive (GC safety): drop
            # what the rewritten list no longer references
            known = {r.id: r for r in all_refs}
            known_pieces = {k: r for k, r in known_pieces.items() if r.pack == pb.pack_id}
            exact = exact_count(all_refs)
        return ListState(spine=spine, count=n, size=size, digest=digest, state=state,
                         ids=b.ids, refs=all_refs, objs=b.messages, raws=new_raws, known=known,
                         known_pieces=known_pieces, nodes=nodes, value=value, exact=exact, marks=kept,
                         arrays_exact=parent.arrays_exact if b.append and (b.arrays or n == n_old) else False)

    def _store_value(self, pb: PackBuilder, value, raw: bytes, exact: bool, known: ValueKnown | None) -> ValueKnown:
        """Add what is new of a session-state value tree to the pack (docs/format.md §7).

        The value's exact JSON ``raw`` is cut into pieces (:func:`split_value`); pieces and sealed
        nodes that ``known`` (the parent's tree) holds are referenced where they are, the others
        are added to ``pb``, with the value spine entry (and the upper entry when it changed).
        An unchanged value (same content id as ``known``) adds nothing.

        Returns:
            ValueKnown describing the new tree.
        """
        hasher = self.repo.hasher
        sid = hasher.content_id(raw)
        flags = FLAG_EXACT if exact else 0
        if known is not None and known.tree.id == sid and known.tree.size == len(raw) and known.tree.flags == flags:
            return known
        old_pieces = known.pieces if known is not None else {}
        old_nodes = known.nodes if known is not None else {}
        pieces: dict = {}
        nodes: dict = {}
        spine = Spine(self.repo.params, upper=known.upper if known is not None else None)

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

    def _window(self, b: "_SaveBuild") -> None:
        """Encode the last messages before ``b.n_old`` (about a dictionary's worth) for the dictionary."""
        want = max(self.repo.config.dict_bytes, 1)
        acc = 0
        i = b.n_old
        while i > 0 and acc < want:
            i -= 1
            raw, exact = encode_json(b.messages[i])
            b.raws[i] = raw
            b.ids[i] = self.repo.hasher.content_id(raw)
            b.flags[i] = FLAG_EXACT if exact else 0
            acc += len(raw)

    def _reload_full(self, parent: ListState) -> ListState:
        """Load every ref of ``parent`` (for a list that is not an append of it)."""
        if parent.state is None:
            ls = self.repo.trees.list_state(None)
            return ls
        fake = Manifest(kind=KIND_CHECKPOINT, run_id="", seq=0, write_id="", created=datetime.now(timezone.utc),
                        count=parent.count, size=parent.size,
                        state=[parent.state[0].hex(), parent.state[1].hex()])
        ls = self.repo.trees.list_state(fake, full=True)
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
        cfg = self.repo.config
        if len(raw) <= cfg.cdc_threshold:
            if parts is None:
                pb.add(T_CHUNK, bid, raw)
            else:
                parts.append((bid, raw))
            return Ref(bid, len(raw), 1, flags, pb.pack_id)
        cut = []
        for c in _fastcdc()(raw, min_size=cfg.cdc_min, avg_size=cfg.cdc_avg, max_size=cfg.cdc_max, fat=True):
            piece = raw[c.offset:c.offset + c.length]
            cut.append((self.repo.hasher.content_id(piece), piece))
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
    def _set_dictionary(self, b: "_SaveBuild", end: int) -> None:
        """Choose messages ``[a, end)`` before the first new message (position ``end``) as the
        data block's dictionary (about ``dict_bytes`` of their JSON; none when their JSON is not
        at hand or not theirs)."""
        want = self.repo.config.dict_bytes
        pb, messages, ids, raws, parent = b.pb, b.messages, b.ids, b.raws, b.parent
        all_refs, tail_refs, prefix = b.all_refs, b.tail_refs, b.prefix

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

        a = end
        acc = 0
        while a > 0 and acc < want:
            s = size_at(a - 1)
            if s is None:
                break
            a -= 1
            acc += s
        if a == end:
            return
        parts = []
        for i in range(a, end):
            raw = raws[i]
            if raw is None and parent.raws is not None and i < len(parent.raws) and i < prefix:
                raw = parent.raws[i]
            if raw is None:
                raw, _ = encode_json(messages[i])
                if self.repo.hasher.content_id(raw) != ids[i]:
                    return
            parts.append(raw)
        blob = b"".join(parts)
        length = min(want, len(blob))
        digest = self.repo.hasher.content_id(b"".join(ids[a:end]))
        # the chunks a reader reads to build the dictionary must not sit in the block it compresses
        made_of = set(ids[a:end])
        cfg = self.repo.config
        for raw in parts:
            if len(raw) > cfg.cdc_threshold:
                made_of.update(self.repo.hasher.content_id(raw[c.offset:c.offset + c.length]) for c in
                               _fastcdc()(raw, min_size=cfg.cdc_min, avg_size=cfg.cdc_avg, max_size=cfg.cdc_max, fat=True))
        # the list is described by this save's own state entry, which goes into this pack
        pb.set_dictionary(DictSpec(None, None, a, end, length, digest), blob[len(blob) - length:], made_of)
