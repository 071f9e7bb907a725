"""What a writer keeps between saves and what a save produces: :class:`ListState`, :class:`ValueKnown`,
:class:`PreparedSave`, and the incremental list digest (:func:`json_digest`).

Layer 3, pure data (no I/O): :mod:`snapstore.repo.trees` builds a :class:`ListState` from a stored
checkpoint, :mod:`snapstore.repo.prepare` builds the next one with each save. See docs/format.md §18.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..format.ids import Hasher
from ..format.manifest import Manifest
from ..format.tree import Spine
from ..format.valuetree import ValueTree

RECENT_RAW_KEEP = 4
"""Multiple of ``dict_bytes`` of recent message JSON a writer keeps in memory for dictionaries."""



MARKS_KEEP = 256
"""Positions a writer keeps a :class:`ListMark` of (the newest ones): enough for the tails of the
last saves of a caller whose list keeps a long prefix and rewrites a short end each save (the
LangGraph saver's records: messages, then a few items that change)."""


@dataclass
class ListMark:
    """The state of a list's save at one position ``p``, as the writer built it: enough to build the
    tree and digest of any list whose first ``p`` messages are the same, without them.

    Attributes:
        levels: the spine's open runs after the first ``p`` refs (copies; :class:`Spine` levels).
        nodes: how many entries of the writer's ``ListState.nodes`` (insertion order: the order
            the nodes were sealed) the tree of the first ``p`` refs references.
        digest: the list digest after the first ``p`` messages (``[`` and their JSON joined by
            ``,``), a blake3 state to copy.
    """

    levels: list
    nodes: int
    digest: object = None


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
        marks: position -> :class:`ListMark`, the tree's spine and the list digest as they were
            before that position, for recent positions this writer itself saved (the tails of its
            last saves, at most :data:`MARKS_KEEP`): a save that keeps the first ``p`` messages and
            changes what follows restarts from the nearest mark at or before ``p`` instead of
            rebuilding the tree and the digest from the first message (docs/format.md §18).
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
    marks: dict = field(default_factory=dict)

    def digest_hex(self) -> str:
        """The list digest stored in manifests: keyed blake3-128 of the list's compact JSON."""
        if self.digest is None:
            return self.digest_hex_value or ""
        d = self.digest.copy()
        d.update(b"]")
        return d.hexdigest(16)


_DIGEST_BATCH = 1 << 16
"""Bytes :func:`json_digest` gathers before each hash update: blake3 hashes a long input several
chunks at a time (SIMD), a 2 KB message alone at about a third of that speed."""


def json_digest(hasher: Hasher, raws) -> object:
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
    """A save built in memory, not yet written: the pack (or None) and the resulting list state.

    Attributes:
        pack_id / pack_bytes: the new pack's id and bytes, or None when the save adds no entry.
        sizes: what the save adds, for stats: ``{"chunks": n, "bytes": n, ...}`` (bytes).
        state: the :class:`ListState` after the save (the next save's parent).
        session_state_ref: the older layout's chunk ref of the session state (None when unused).
        session_state_inline: the session state stored inline in the manifest, or None.
        has_session_state: whether the save has a session state at all.
        new_chunks / new_bytes: chunks the pack adds and their JSON bytes.
        raw_blocks: block index -> uncompressed bytes of the pack's blocks (cache warm-up).
        session_state_tree: the session state's value tree, when stored as one.
        shared: ids of the shared packs (docs/format.md §29) the save references instead of
            storing their messages, in list order (a run's first save only).
    """

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
    shared: list = field(default_factory=list)

def arrays_exact(m: Manifest) -> bool | None:
    """What record ``m`` says of its run's arrays (``messages.a``, :attr:`ListState.arrays_exact`):
    True (1), False (0), or None when it does not say (a record written before ``messages.a``)."""
    return None if m.arrays is None else m.arrays == 1
