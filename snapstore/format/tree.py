"""The message list as a content-defined Merkle tree with an open right spine.

A checkpoint's message list is a sequence of level-0 refs (one per message). Refs are grouped into
sealed *nodes*: a level-L node holds a run of level-L items and is itself a level-(L+1) item. A run
is cut (the node sealed) right after an item whose id has its low ``bits`` bits all zero, or when it
reaches ``max_items``. Items not yet in a sealed node form the *spine*: ``levels[L]`` is the open run
at level L. The list is ``expand(levels[top]) + ... + expand(levels[1]) + levels[0]``.

Appending k messages touches only the spine and seals nodes whose runs end: each sealed node is written
once; the spine is stored in a small *state* entry per save. The structure is a deterministic function
of the item sequence, so appending one by one and building from scratch give the same nodes, and
identical prefixes share nodes.

Pure functions over bytes; no I/O. See ``docs/format.md``, section "Message tree".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

from .codec import get_varint, put_varint
from .ids import ID_BYTES, PACK_ID_BYTES

FLAG_PIECES = 1
"""Level-0 ref flag: the message is stored as several CDC pieces; ``id`` names a pieces entry."""
FLAG_EXACT = 2
"""Level-0 ref flag: the message's JSON needs an exact decoder (big ints, lone surrogates)."""

STATE_VERSION = 1


class Ref(NamedTuple):
    """A reference to a message (level 0) or a sealed node (level >= 1).

    Attributes:
        id: 16-byte content id (message chunk id, or node id).
        size: uncompressed bytes of the message(s) covered.
        count: number of messages covered (1 at level 0).
        flags: level-0 flags (:data:`FLAG_PIECES`, :data:`FLAG_EXACT`); 0 for nodes.
        pack: 8-byte id of the pack holding the entry (a location hint).
    """

    id: bytes
    size: int
    count: int
    flags: int
    pack: bytes


@dataclass(frozen=True)
class TreeParams:
    """Tree shape: boundary bits per level 0 / above, and the maximum items per node."""

    leaf_bits: int = 3
    node_bits: int = 3
    max_items: int = 64

    def is_boundary(self, level: int, item_id: bytes) -> bool:
        """True when a run at ``level`` is cut right after the item with ``item_id``."""
        bits = self.leaf_bits if level == 0 else self.node_bits
        return (item_id[-1] & ((1 << bits) - 1)) == 0


def _encode_items(out: bytearray, level: int, items: list[Ref], packs: dict[bytes, int]) -> None:
    put_varint(out, len(items))
    for r in items:
        out += r.id
        put_varint(out, r.size)
        if level == 0:
            out.append(r.flags)
        else:
            put_varint(out, r.count)
        put_varint(out, packs[r.pack])


def _pack_table(groups: Iterable[list[Ref]]) -> dict[bytes, int]:
    table: dict[bytes, int] = {}
    for items in groups:
        for r in items:
            if r.pack not in table:
                table[r.pack] = len(table)
    return table


def _put_table(out: bytearray, table: dict[bytes, int]) -> None:
    put_varint(out, len(table))
    for p in table:
        out += p


def _get_table(buf: bytes, pos: int) -> tuple[list[bytes], int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = get_varint(buf, pos)
    end = pos + n * PACK_ID_BYTES
    if end > len(buf):  # before anything is built: a hostile count costs nothing
        raise ValueError("truncated pack table")
    if n == 1:  # the common case: every ref of the node in one pack
        return [bytes(buf[pos:end])], end
    return [bytes(buf[p:p + PACK_ID_BYTES]) for p in range(pos, end, PACK_ID_BYTES)], end


_MIN_ITEM = ID_BYTES + 3
"""Fewest bytes an encoded item takes (id, then three one-byte varints or bytes)."""


def _decode_items(buf: bytes, pos: int, level: int, packs: list[bytes]) -> tuple[list[Ref], int]:
    # the hot loop of a cold read (every ref of a restored list passes here once): one- and
    # two-byte varints inline, refs built as tuples directly. A truncated buffer raises
    # ValueError or IndexError (an id cut short is followed by a read past the end), which
    # callers report as a malformed entry
    if type(buf) is not bytes:
        buf = bytes(buf)
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = get_varint(buf, pos)
    if n * _MIN_ITEM > len(buf) - pos:  # checked before the list is allocated
        raise ValueError(f"{n} items do not fit in the bytes left")
    items: list[Ref] = [None] * n  # type: ignore[list-item]
    new = tuple.__new__
    if level == 0:
        for i in range(n):
            end = pos + ID_BYTES
            b = buf[end]
            if b < 0x80:
                size, pos = b, end + 1
            elif buf[end + 1] < 0x80:
                size, pos = (b & 0x7F) | (buf[end + 1] << 7), end + 2
            else:
                size, pos = get_varint(buf, end)
            b = buf[pos + 1]
            if b < 0x80:
                items[i] = new(Ref, (buf[end - ID_BYTES:end], size, 1, buf[pos], packs[b]))
                pos += 2
            else:
                flags = buf[pos]
                b, pos = get_varint(buf, pos + 1)
                items[i] = new(Ref, (buf[end - ID_BYTES:end], size, 1, flags, packs[b]))
        return items, pos
    for i in range(n):
        end = pos + ID_BYTES
        b = buf[end]
        if b < 0x80:
            size, pos = b, end + 1
        elif buf[end + 1] < 0x80:
            size, pos = (b & 0x7F) | (buf[end + 1] << 7), end + 2
        else:
            size, pos = get_varint(buf, end)
        b = buf[pos]
        if b < 0x80:
            count = b
            pos += 1
        else:
            count, pos = get_varint(buf, pos)
        b = buf[pos]
        if b < 0x80:
            pos += 1
        else:
            b, pos = get_varint(buf, pos)
        items[i] = new(Ref, (buf[end - ID_BYTES:end], size, count, 0, packs[b]))
    return items, pos


def encode_node(level: int, items: list[Ref]) -> bytes:
    """Encode a sealed node: ``u8 level | pack table | items`` (see docs/format.md)."""
    out = bytearray([level])
    table = _pack_table([items])
    _put_table(out, table)
    _encode_items(out, level, items, table)
    return bytes(out)


def decode_node(data: bytes) -> tuple[int, list[Ref]]:
    """Decode a node; return ``(level, items)``. Raises ValueError (or IndexError: truncated)
    on malformed input."""
    if type(data) is not bytes:
        data = bytes(data)  # the ids sliced from it are dict keys: they must be bytes
    level = data[0]
    packs, pos = _get_table(data, 1)
    items, pos = _decode_items(data, pos, level, packs)
    if pos != len(data):
        raise ValueError("trailing bytes in node")
    return level, items


def exact_count(refs) -> int:
    """How many of the level-0 ``refs`` (an iterable of :class:`Ref`) carry FLAG_EXACT: a
    manifest's ``messages.x`` (docs/format.md §11)."""
    return sum(1 for r in refs if r.flags & FLAG_EXACT)


def encode_pieces(pieces: list[Ref]) -> bytes:
    """Encode the piece list of a large message (level-0 refs to the raw CDC pieces)."""
    return encode_node(0, pieces)


def decode_pieces(data: bytes) -> list[Ref]:
    """Inverse of :func:`encode_pieces`."""
    level, items = decode_node(data)
    if level != 0:
        raise ValueError("pieces entry with non-zero level")
    return items


class Spine:
    """The open right edge of a message tree; append refs, collect newly sealed nodes.

    Args:
        params: the tree shape.
        levels: open runs per level (``levels[0]`` = open message refs); copied.
    """

    def __init__(self, params: TreeParams, levels: list[list[Ref]] | None = None, upper: tuple | None = None):
        self.params = params
        self.levels: list[list[Ref]] = [list(x) for x in (levels or [[]])] or [[]]
        self.upper = upper  # (id, pack) of the stored upper entry matching levels[1:], if known

    def copy(self) -> "Spine":
        """Return an independent copy."""
        return Spine(self.params, self.levels, self.upper)

    def count(self) -> int:
        """Number of messages in the list this spine describes."""
        return sum(r.count for lv in self.levels for r in lv)

    def append(self, ref: Ref, seal: Callable[[bytes, bytes], bytes], hasher: Callable[[bytes], bytes]) -> None:
        """Append a level-0 ref.

        Args:
            ref: the message ref.
            seal: called as ``seal(node_id, node_bytes)`` for each newly sealed node; returns the
                8-byte id of the pack the node is (or will be) stored in.
            hasher: content-id function for node bytes.
        """
        level = 0
        item = ref
        while True:
            if len(self.levels) <= level:
                self.levels.append([])
            run = self.levels[level]
            run.append(item)
            if not (self.params.is_boundary(level, item.id) or len(run) >= self.params.max_items):
                return
            data = encode_node(level, run)
            nid = hasher(data)
            pack = seal(nid, data)
            item = Ref(nid, sum(r.size for r in run), sum(r.count for r in run), 0, pack)
            self.levels[level] = []
            level += 1

    def encode_state(self, seal_upper: Callable[[bytes, bytes], bytes], hasher: Callable[[bytes], bytes]) -> bytes:
        """Encode the spine as a *state* entry; the runs above level 0 go to a separate *upper* entry.

        The upper entry changes only when a leaf is sealed, so most saves reuse it. State layout:
        ``u8 version | pack table | u8 has_upper | [upper id(16) varint pack index] | level-0 run``.
        Upper layout: ``u8 version | pack table | u8 nlevels | runs for levels nlevels..1, top first``.

        Args:
            seal_upper: called as ``seal_upper(upper_id, upper_bytes)`` when the upper entry is new;
                returns the pack id it is stored in.
            hasher: content-id function.
        """
        upper_levels = self.levels[1:]
        while upper_levels and not upper_levels[-1]:
            upper_levels = upper_levels[:-1]
        if upper_levels:
            out = bytearray([STATE_VERSION])
            table = _pack_table(upper_levels)
            _put_table(out, table)
            out.append(len(upper_levels))
            for i in range(len(upper_levels) - 1, -1, -1):
                _encode_items(out, i + 1, upper_levels[i], table)
            ub = bytes(out)
            uid = hasher(ub)
            if self.upper is None or self.upper[0] != uid:
                self.upper = (uid, seal_upper(uid, ub))
        else:
            self.upper = None
        out = bytearray([STATE_VERSION])
        groups = [self.levels[0]] + ([[Ref(b"", 0, 0, 0, self.upper[1])]] if self.upper else [])
        table = _pack_table(groups)
        _put_table(out, table)
        if self.upper:
            out.append(1)
            out += self.upper[0]
            put_varint(out, table[self.upper[1]])
        else:
            out.append(0)
        _encode_items(out, 0, self.levels[0], table)
        return bytes(out)

    @staticmethod
    def decode_state(data: bytes) -> tuple[list[Ref], tuple | None]:
        """Decode a state entry; return ``(level-0 run, (upper id, upper pack) or None)``."""
        if not data or data[0] != STATE_VERSION:
            raise ValueError("unknown state version")
        packs, pos = _get_table(data, 1)
        upper = None
        if data[pos]:
            uid = bytes(data[pos + 1:pos + 1 + ID_BYTES])
            pos += 1 + ID_BYTES
            pi, pos = get_varint(data, pos)
            upper = (uid, packs[pi])
        else:
            pos += 1
        run0, pos = _decode_items(data, pos, 0, packs)
        if pos != len(data):
            raise ValueError("trailing bytes in state")
        return run0, upper

    @staticmethod
    def decode_upper(data: bytes) -> list[list[Ref]]:
        """Decode an upper entry; return the runs for levels 1.. (index 0 = level 1)."""
        if not data or data[0] != STATE_VERSION:
            raise ValueError("unknown upper version")
        packs, pos = _get_table(data, 1)
        n = data[pos]
        pos += 1
        levels: list[list[Ref]] = [[] for _ in range(n)]
        for i in range(n - 1, -1, -1):
            levels[i], pos = _decode_items(data, pos, i + 1, packs)
        if pos != len(data):
            raise ValueError("trailing bytes in upper")
        return levels

    def top_down(self) -> list[tuple[int, Ref]]:
        """Return ``(level, item)`` pairs in list order (top level first)."""
        return [(level, r) for level in range(len(self.levels) - 1, -1, -1) for r in self.levels[level]]
