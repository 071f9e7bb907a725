"""Packs: one immutable object holding everything new in one save.

Layout (integers are unsigned LEB128 varints unless noted; see docs/format.md "Packs")::

    "SNPK" | u8 version=1 | pack id (8)
    block 0 .. block n-1            contiguous, starting at byte 13
    header                          block table, then entry table
    u32le header_len
    blake3-128 of every byte before this field (16 bytes)

    block table:  varint nblocks; per block: u8 kind, varint clen, varint rawlen, then for
                  kinds 1 and 2: [kind 2 only: state_id(16) state_pack(8)] ids_digest(16)
                  varint a, varint b, varint dict_len.
                  kind 0: a zstd frame; 3: stored uncompressed; 1: a zstd frame compressed with a
                  raw-content dictionary described by the pack's one state entry; 2: the same with
                  the state named explicitly; 4 (a zstd frame) and 5 (stored): an *array block*,
                  followed by varint nitems; 6: an array block in a zstd frame compressed with
                  a shared object's chunk as raw-content dictionary: u8 kind, shared pack id(8),
                  content id(16), varint clen, varint rawlen, varint nitems.
    entry table:  varint nentries; per entry: u8 type, id(16), varint block, varint length;
                  an entry's offset is the sum of the lengths of the entries before it in the
                  same block (entries are listed in block order).

Array blocks (docs/format.md §8): the raw bytes are a JSON array, ``[`` + items joined by ``,`` +
``]``, each item one message's JSON made of one or more consecutive chunk entries (a message stored
whole, or the pieces of a large one). An entry whose type byte has bit 7 set (``0x80 | c``)
continues the item of the entry before it; every other entry starts an item, one byte (the ``[``
or a ``,``) after the end of the entry before it. ``nitems`` counts the items. A message may
appear in an array block more than once (a list repeats it); its entries then repeat too.

Pack ids are 8 random bytes chosen by the writer (the key is ``packs/<2 hex>/<16 hex>``); pack
contents are verified by the trailing checksum and each entry by its content id.

Entry types: ``c`` chunk (a message's JSON, a CDC piece, a session-state piece, or a value blob),
``n`` tree node, ``s`` spine state, ``u`` upper spine, ``p`` pieces list of a large message, ``v``
spine of a session-state value tree. Dictionary: the last
``dict_len`` bytes of the concatenated JSON of messages ``[a, b)`` of the list described by the
state; ``ids_digest`` is the keyed blake3-128 of those messages' concatenated ids, so a reader
that already holds those messages can use them directly.

Pure functions; no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import NamedTuple

import blake3
import zstandard

from ..errors import IntegrityError, InvalidInputError
from .codec import MAX_WINDOW, get_varint, put_varint, zstd_decompress
from .elide import RestoredPack
from .ids import ID_BYTES, PACK_ID_BYTES

MAGIC = b"SNPK"
VERSION = 1
T_CHUNK, T_NODE, T_STATE, T_UPPER, T_PIECES = b"c"[0], b"n"[0], b"s"[0], b"u"[0], b"p"[0]
T_VALUE = b"v"[0]
"""Entry type of a session-state value tree's spine (docs/format.md §7; the layout of ``s``)."""
T_HOLE = b"h"[0]
"""Entry type of an array block's *hole* (docs/format.md §8): a zero-length entry standing for one
item, a message stored elsewhere under its content id (a ``c`` entry holding it whole, or a ``p``
entry listing its pieces), whose JSON a reader splices in at the hole's offset."""
T_FIELDS = b"l"[0]
"""Entry type of an archive bundle's *fields entry* (docs/format.md §28): the data-locating fields of
the records of its thin bundle logs (:mod:`snapstore.format.archfields`), in its metadata block;
its id is the content id of its bytes. Only bundles hold one."""
ENTRY_TYPES = {T_CHUNK: "chunk", T_NODE: "node", T_STATE: "state", T_UPPER: "upper", T_PIECES: "pieces",
               T_VALUE: "value spine", T_HOLE: "hole", T_FIELDS: "fields"}
TRAILER = struct.Struct("<I16s")
"""The pack's last 20 bytes: ``u32le header_len`` and the blake3-128 checksum."""

MAX_BLOCK_RAW = 128 << 20
"""Largest uncompressed block (bytes; twice the largest chunk a config allows). A reader refuses a
pack whose header records more, and never decompresses a block past the length its header
records, so reading one block costs at most about twice this in memory. Writers start a new block
(without dictionary) instead of growing one past it (docs/format.md §8)."""
MAX_BLOCKS = 4096

DATA_BLOCK_MAX = 1 << 20
"""Largest uncompressed *data* block writers make (bytes): chunks (messages, message pieces,
session-state pieces) beyond it go into further data blocks, so that a reader needing a few
entries of a large pack fetches only the blocks holding them with byte ranges (docs/format.md §8).
A single entry larger than this gets a block of its own. Metadata (block 0) is not split."""

SMALL_BLOCK = 32 << 10
"""Largest raw block (bytes) a writer compresses at its builder's ``small_level`` (a higher zstd
level: small blocks cost little CPU at any level, and a short run's few small packs are most of
what it stores). A writer's choice; readers need not know it."""

HEADER_POS = 5 + PACK_ID_BYTES
"""Offset of block 0 (bytes): magic, version, pack id."""

TRAILER_BYTES = 4 + 16
"""Bytes after the header: u32 header length and the checksum."""


@dataclass(frozen=True, slots=True)
class DictSpec:
    """Where a data block's raw-content dictionary comes from (see module docstring)."""

    state_id: bytes | None
    state_pack: bytes | None
    start: int
    end: int
    length: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a pack: byte ``offset``/``clen`` in the pack, ``rawlen`` uncompressed;
    ``stored`` blocks are not compressed."""

    offset: int
    clen: int
    rawlen: int
    dict: DictSpec | None
    stored: bool = False
    array: bool = False
    """An array block (kinds 4 and 5): its raw bytes are a JSON array of messages (see the module
    docstring)."""
    nitems: int = 0
    """Array blocks: the number of items (messages) in the array."""
    parts: tuple = ()
    """Array blocks: every entry in block order, ``(type, id, offset, length, continues)``
    (duplicates kept: :attr:`Pack.entries` holds one entry per type and id)."""
    shared: tuple | None = None
    """Array blocks of kind 6: ``(shared pack id (8 bytes), content id (16 bytes))`` of the chunk
    whose bytes are the block's raw-content dictionary (a shared object, docs/format.md §8, §29)."""


class Entry(NamedTuple):
    """One entry: ``type`` (a ``T_*`` byte), ``id``, ``block`` index, ``offset``/``length`` in the raw block.

    A named tuple rather than a frozen dataclass: a pack's header is parsed into one per entry,
    and a tuple is several times cheaper to build (docs/design-notes.md §2.20, "CPU of a cold read")."""

    type: int
    id: bytes
    block: int
    offset: int
    length: int


class PackBuilder:
    """Accumulate entries for one pack, then :meth:`build` its bytes.

    Entries go into data blocks (chunks; the first optionally compressed with a dictionary; each
    at most ``data_block_max`` raw bytes) followed by the metadata block (nodes, states, value
    spines, pieces lists; no dictionary), which sits next to the header so that a ranged reader's
    first (suffix) GET holds it.

    Args:
        pack_id: the pack's 8-byte id (random, chosen by the writer before building).
        level: zstd compression level.
        zstd_params: more zstd parameters for blocks compressed without a dictionary
            (``ZstdCompressionParameters.from_level`` keywords, e.g. ``{"enable_ldm": 1,
            "window_log": 23}``); None: the level's defaults. A window above what readers accept
            (:data:`~snapstore.format.codec.MAX_WINDOW`) raises InvalidInputError.
    """

    def __init__(self, pack_id: bytes, level: int = 3, zstd_params: dict | None = None):
        self.pack_id = pack_id
        self.level = level
        if zstd_params and (1 << int(zstd_params.get("window_log", 0) or 0)) > MAX_WINDOW:
            raise InvalidInputError(f"window_log {zstd_params['window_log']} exceeds what readers accept "
                                    f"({MAX_WINDOW.bit_length() - 1})")
        self.zstd_params = dict(zstd_params) if zstd_params else None
        self._meta: list[tuple[int, bytes, bytes]] = []
        self._data: list[tuple[int, bytes, bytes]] = []
        self._ids: set[tuple[int, bytes]] = set()
        self.dict_spec: DictSpec | None = None
        self.dict_bytes: bytes = b""
        self._dict_ids: frozenset = frozenset()
        self.raw_bytes = 0  # uncompressed bytes of all entries added so far
        self.raw_blocks: dict[int, bytes] = {}  # after build(): block index -> uncompressed bytes
        self.first_ids: frozenset = frozenset()  # chunks placed first among the data (see build)
        self._items: list[list[tuple[bytes, bytes]]] = []  # array items, in list order
        self.array_dict: tuple[bytes, bytes, bytes] | None = None  # (shared pack id, content id, bytes)
        self.small_level: int | None = None  # zstd level of blocks of at most SMALL_BLOCK raw bytes

    def __contains__(self, key: tuple[int, bytes]) -> bool:
        return key in self._ids

    def add(self, etype: int, eid: bytes, raw: bytes) -> bool:
        """Add an entry (ignored if the same type+id was added already); return True if added."""
        if (etype, eid) in self._ids:
            return False
        self._ids.add((etype, eid))
        (self._data if etype == T_CHUNK else self._meta).append((etype, eid, raw))
        self.raw_bytes += len(raw)
        return True

    def add_item(self, parts: list[tuple[bytes, bytes]]) -> None:
        """Append one message to the pack's array blocks (docs/format.md §8): ``parts`` is
        ``[(chunk id, bytes)]``, the message's JSON whole (one part) or in consecutive chunks.

        Items keep their order and are never deduplicated (a list that repeats a message holds it
        twice). A chunk placed here is not also added to the ordinary data blocks: a later
        :meth:`add` of the same chunk id is ignored.
        """
        if not parts:
            raise InvalidInputError("an array item needs at least one part")
        for pid, raw in parts:
            self._ids.add((T_CHUNK, pid))
            self.raw_bytes += len(raw)
        self._items.append([(T_CHUNK, pid, raw) for pid, raw in parts])

    def add_hole(self, message_id: bytes) -> None:
        """Append a hole to the array blocks: an item standing for a message stored under its
        content id ``message_id`` as a chunk or a pieces list (in this pack or another), which
        keeps it deduplicated; readers splice its JSON in (docs/format.md §8)."""
        self._items.append([(T_HOLE, message_id, b"")])

    def set_dictionary(self, spec: DictSpec, dict_bytes: bytes, made_of: set | None = None) -> None:
        """Compress the data block with ``dict_bytes`` (raw content), recorded as ``spec``.

        Args:
            made_of: content ids of the chunks the dictionary is read from (its messages and their
                pieces). A chunk with one of these ids added to this pack (a session-state piece or
                a repeated message equal to one of them) goes into the block without dictionary:
                a reader resolving the dictionary must never need the block it decompresses.
        """
        self.dict_spec = spec
        self.dict_bytes = dict_bytes
        self._dict_ids = frozenset(made_of or ())

    def _level_for(self, rawlen: int) -> int:
        """zstd level of a block of ``rawlen`` raw bytes: :attr:`small_level` (when set and higher
        than ``level``) for a block of at most :data:`SMALL_BLOCK` bytes, else ``level``."""
        if self.small_level is not None and rawlen <= SMALL_BLOCK:
            return max(self.level, self.small_level)
        return self.level

    def set_array_dictionary(self, shared_pack: bytes, content_id: bytes, raw: bytes) -> None:
        """Compress the array blocks with ``raw``, the bytes of chunk ``content_id`` (16 bytes) in
        the shared pack ``shared_pack`` (8 bytes, starting with ``0xff``), as raw-content dictionary
        (block kind 6, docs/format.md §8). The writer must list that shared pack in every record
        that lists this pack (docs/format.md §29, "Dictionaries").

        Raises:
            InvalidInputError: ``shared_pack`` is not a shared pack id, or ``content_id`` not 16 bytes.
        """
        if len(shared_pack) != PACK_ID_BYTES or shared_pack[0] != 0xFF or len(content_id) != ID_BYTES:
            raise InvalidInputError("an array dictionary must name a chunk of a shared pack (id starting with 0xff)")
        self.array_dict = (shared_pack, content_id, raw)

    @property
    def empty(self) -> bool:
        """True when nothing was added."""
        return not self._ids and not self._items

    def build(self, block_max: int = MAX_BLOCK_RAW, data_block_max: int = DATA_BLOCK_MAX) -> tuple[bytes, dict]:
        """Return ``(pack bytes, sizes)`` where sizes splits the bytes into ``data`` and ``meta``.

        Args:
            block_max: largest raw block (bytes; tests lower it): metadata or data beyond it go into
                further blocks without a dictionary (normally there are exactly two blocks).
            data_block_max: largest raw data block (bytes, at most ``block_max``): chunks beyond it
                go into further data blocks without a dictionary (only the first data block has
                it), so a ranged reader fetches only the blocks it needs; an entry larger than
                this gets a block of its own.
        Raises:
            InvalidInputError: one entry is larger than ``block_max``.
        """
        out = bytearray(MAGIC)
        out.append(VERSION)
        out += self.pack_id
        blocks: list[Block] = []
        entries: list[Entry] = []
        conts: set[int] = set()  # indexes into entries that continue an array item
        data_clen = 0
        groups = []
        meta, data = self._meta, self._data
        dict_ids = self._dict_ids
        if self.dict_spec is not None and dict_ids:
            meta = meta + [it for it in data if it[1] in dict_ids]
            data = [it for it in data if it[1] not in dict_ids]
        if self.first_ids:
            # what only older checkpoints need (their session-state pieces, messages a rewrite
            # dropped) first, then the chunks a reader of the newest checkpoint needs (its
            # messages), so that those sit in the last data blocks, next to the metadata block
            # and the header: the tail a ranged reader reads first (docs/format.md §8, §19)
            first = self.first_ids
            data = [it for it in data if it[1] not in first] + [it for it in data if it[1] in first]
        # data blocks first, then the array blocks, the metadata block last (beside the header)
        dlimit = min(block_max, data_block_max)
        for items, use_dict, limit, is_data in ((data, True, dlimit, True), (meta, False, block_max, False)):
            if not is_data and self._items:
                # array blocks: whole items, at most ``dlimit`` raw bytes each (a larger item gets
                # a block of its own)
                cur, size = [], 1
                for parts in self._items:
                    n = sum(len(r) for _, _, r in parts) + 1
                    if n + 1 > block_max:
                        raise InvalidInputError(f"a message of {n - 1} bytes is larger than a pack block may be ({block_max})")
                    if cur and size + n > dlimit:
                        groups.append((cur, "array", True))
                        cur, size = [], 1
                    cur.append(parts)
                    size += n
                groups.append((cur, "array", True))
            cur, size = [], 0
            for it in items:
                if len(it[2]) > block_max:
                    raise InvalidInputError(f"an entry of {len(it[2])} bytes is larger than a pack block may be ({block_max})")
                if cur and size + len(it[2]) > limit:
                    groups.append((cur, use_dict, is_data))
                    cur, size, use_dict = [], 0, False  # only a type's first block has the dictionary
                cur.append(it)
                size += len(it[2])
            if cur or not (is_data and self._items):
                groups.append((cur, use_dict, is_data))
        for bi, (items, use_dict, is_data) in enumerate(groups):
            raw = bytearray()
            if use_dict == "array":
                raw.append(0x5B)  # [
                for k, parts in enumerate(items):
                    if k:
                        raw.append(0x2C)  # ,
                    for j, (etype, eid, r) in enumerate(parts):
                        if j:
                            conts.add(len(entries))
                        entries.append(Entry(etype, eid, bi, len(raw), len(r)))
                        raw += r
                raw.append(0x5D)  # ]
                self.raw_blocks[bi] = bytes(raw)
                # the frame declares its content size (a few bytes): zstd then decompresses it in
                # one pass into the output, without a window buffer (half the fresh pages)
                alevel = self._level_for(len(raw))
                ref = None
                if self.array_dict is not None:
                    # compressed against a shared object's message (kind 6; one compression: a
                    # frame with a dictionary is at most a few bytes longer than one without)
                    zd = zstandard.ZstdCompressionDict(self.array_dict[2], dict_type=zstandard.DICT_TYPE_RAWCONTENT)
                    comp = zstandard.ZstdCompressor(level=alevel, dict_data=zd, write_checksum=False,
                                                    write_dict_id=False, write_content_size=True).compress(self.raw_blocks[bi])
                    ref = self.array_dict[:2]
                else:
                    comp = zstandard.ZstdCompressor(level=alevel, write_checksum=False,
                                                    write_content_size=True).compress(self.raw_blocks[bi])
                stored = len(comp) >= len(raw)
                if stored:
                    comp, ref = bytes(raw), None
                blocks.append(Block(len(out), len(comp), len(raw), None, stored, True, len(items), shared=ref))
                data_clen += len(comp)
                out += comp
                continue
            for etype, eid, r in items:
                entries.append(Entry(etype, eid, bi, len(raw), len(r)))
                raw += r
            self.raw_blocks[bi] = bytes(raw)
            spec = self.dict_spec if (use_dict and self.dict_spec and self.dict_bytes and raw) else None
            if spec:
                zd = zstandard.ZstdCompressionDict(self.dict_bytes, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
                cctx = zstandard.ZstdCompressor(level=self.level, dict_data=zd, write_checksum=False,
                                                write_dict_id=False, write_content_size=True)
            elif self.zstd_params:
                cctx = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters.from_level(
                    self.level, write_checksum=0, write_content_size=1, **self.zstd_params))
            else:
                cctx = zstandard.ZstdCompressor(level=self._level_for(len(raw)), write_checksum=False,
                                                write_content_size=True)
            comp = cctx.compress(self.raw_blocks[bi]) if raw else b""
            stored = not spec and len(comp) >= len(raw)
            if stored:
                comp = bytes(raw)
            blocks.append(Block(len(out), len(comp), len(raw), spec, stored))
            if is_data:
                data_clen += len(comp)
            out += comp
        header = bytearray()
        put_varint(header, len(blocks))
        for b in blocks:
            if b.dict:
                if b.dict.state_id is None:
                    header.append(1)
                else:
                    header.append(2)
                    header += b.dict.state_id + b.dict.state_pack
            elif b.array and b.shared is not None:
                header.append(6)
                header += b.shared[0] + b.shared[1]
            elif b.array:
                header.append(5 if b.stored else 4)
            else:
                header.append(3 if b.stored else 0)
            put_varint(header, b.clen)
            put_varint(header, b.rawlen)
            if b.array:
                put_varint(header, b.nitems)
            if b.dict:
                header += b.dict.digest
                put_varint(header, b.dict.start)
                put_varint(header, b.dict.end)
                put_varint(header, b.dict.length)
        put_varint(header, len(entries))
        for k, e in enumerate(entries):
            header.append(e.type | 0x80 if k in conts else e.type)
            header += e.id
            put_varint(header, e.block)
            put_varint(header, e.length)
        out += header
        out += struct.pack("<I", len(header))
        out += blake3.blake3(bytes(out)).digest(16)
        return bytes(out), {"data": data_clen, "meta": len(out) - data_clen}


class Pack:
    """A parsed, verified pack.

    Use :meth:`parse`; then :meth:`raw_block` to decompress blocks and :attr:`entries` to locate
    entries (keyed by ``(type, id)``).
    """

    whole = True
    """True: every byte of the pack was read and its checksum verified (see
    :class:`snapstore.format.rangedpack.RangedPack`)."""

    shared_dicts = None
    """``shared_dicts(shared pack id, content id) -> bytes``: the verified bytes of a shared
    object's chunk, the dictionary of this pack's array blocks of kind 6 (set by the repository's
    pack cache, :mod:`snapstore.repo.packcache`; None: such a block raises IntegrityError)."""

    def __init__(self, key: str, data: bytes, pack_id: bytes, blocks: list[Block], entries: dict):
        self.key = key
        self.data = data
        self.id = pack_id
        self.blocks = blocks
        self.entries: dict[tuple[int, bytes], Entry] = entries
        self._raw: dict[int, bytes] = {}
        self._used: set[int] = set()  # blocks decompressed once without being kept (raw_block keep=False)

    @property
    def nbytes(self) -> int:
        """Bytes of the pack held in memory (compressed)."""
        return len(self.data)

    def _comp(self, block: int) -> bytes:
        b = self.blocks[block]
        return self.data[b.offset:b.offset + b.clen]

    def block_at_hand(self, block: int) -> bool:
        """True when block ``block`` (an index) is in memory, compressed or not: :meth:`raw_block`
        needs no request for it (always, for a pack read whole)."""
        return True

    def held_block(self, block: int) -> bytes | None:
        """The uncompressed bytes of block ``block`` (an index) if this pack holds them already
        (decompressed by :meth:`raw_block` or given to :meth:`hold_blocks`), else None."""
        return self._raw.get(block)

    def held_blocks(self) -> dict[int, bytes]:
        """Every uncompressed block this pack holds: block index -> bytes (a copy)."""
        return dict(self._raw)

    def hold_blocks(self, blocks: dict[int, bytes]) -> None:
        """Keep uncompressed blocks (block index -> bytes) that whoever built or read the pack
        already has, so they are not decompressed again. A block index out of range, or bytes
        whose length is not the header's uncompressed length, is ignored."""
        for b, raw in blocks.items():
            if 0 <= b < len(self.blocks) and len(raw) == self.blocks[b].rawlen:
                self._raw[b] = raw

    @classmethod
    def parse(cls, key: str, data: bytes, pack_id: bytes | None = None) -> "Pack":
        """Verify the checksum and parse the header.

        Args:
            key: the object key (named in errors).
            data: the whole pack.
            pack_id: the pack's id (from its key).
        Raises:
            IntegrityError: bad magic, checksum or structure (names ``key``).
        """
        restored = type(data) is RestoredPack
        if type(data) is not bytes and not restored:
            data = bytes(data)  # slices of it are ids (dict keys): they must be bytes
        if len(data) < 5 + PACK_ID_BYTES + TRAILER.size or data[:4] != MAGIC:
            raise IntegrityError(key, "not a snapstore pack (bad magic or truncated)")
        hlen, digest = TRAILER.unpack_from(data, len(data) - TRAILER.size)
        body_end = len(data) - 16
        # (a RestoredPack's checksum was just computed from these bytes, after the AEAD of an
        # encrypted repository authenticated them: checking it again cannot fail, §27)
        if not restored and blake3.blake3(memoryview(data)[:body_end]).digest(16) != digest:
            raise IntegrityError(key, "checksum mismatch")
        if data[4] != VERSION:
            raise IntegrityError(key, f"unsupported pack version {data[4]}")
        stored_id = bytes(data[5:5 + PACK_ID_BYTES])
        if pack_id is not None and stored_id != pack_id:
            raise IntegrityError(key, f"holds pack {stored_id.hex()}, not the pack its key names")
        hstart = body_end - 4 - hlen
        if hstart < HEADER_POS:
            raise IntegrityError(key, "malformed header: header length larger than the pack")
        blocks, entries = parse_header(key, data, hstart, body_end - 4, hstart)
        return cls(key, data, stored_id, blocks, entries)

    def dict_state(self, spec: DictSpec) -> tuple[bytes, bytes]:
        """Return ``(state id, pack id)`` of the state a dictionary spec refers to."""
        if spec.state_id is not None:
            return spec.state_id, spec.state_pack
        for e in self.entries.values():
            if e.type == T_STATE:
                return e.id, self.id
        raise IntegrityError(self.key, "no state entry for the dictionary")

    def raw_block(self, block: int, dict_bytes: bytes | None = None, keep: bool = True) -> bytes:
        """Decompress block ``block`` (memoised). ``dict_bytes`` is required if the block has a dict.

        ``keep=False``: the first time, the bytes are not kept (a caller that reads a block once,
        in a process that reads it once, lets its memory be reused as soon as it drops them); a
        block asked for again is kept.

        Raises:
            IntegrityError: the frame does not decompress to the recorded length.
        """
        raw = self._raw.get(block)
        if raw is not None:
            return raw
        if not keep and block not in self._used:
            self._used.add(block)
        else:
            keep = True
        b = self.blocks[block]
        comp = self._comp(block)
        if b.rawlen == 0:
            raw = b""
        elif b.stored:
            raw = comp
        else:
            # bounded: never more than the length the (checksummed) header records
            if b.shared is not None and dict_bytes is None:
                dict_bytes = self._shared_dict(b.shared)
            raw = zstd_decompress(self.key, comp, MAX_BLOCK_RAW,
                                  (dict_bytes or b"") if (b.dict or b.shared is not None) else None,
                                  expected=b.rawlen, what=f"block {block}")
        if len(raw) != b.rawlen:
            raise IntegrityError(self.key, f"block {block} decompressed to {len(raw)} bytes, expected {b.rawlen}")
        if keep:
            self._raw[block] = raw
        return raw

    def _shared_dict(self, ref: tuple) -> bytes:
        """The dictionary of an array block of kind 6: chunk ``ref[1]`` of shared pack ``ref[0]``,
        from :attr:`shared_dicts`. Raises IntegrityError when no source is set or it fails."""
        src = self.shared_dicts
        if src is None:
            raise IntegrityError(self.key, f"an array block needs the shared object {ref[0].hex()} as its "
                                 "dictionary and no reader of shared objects is at hand")
        return src(ref[0], ref[1])

    def entry_bytes(self, entry: Entry, dict_bytes: bytes | None = None) -> bytes:
        """Return an entry's uncompressed bytes (not verified against its id; callers verify)."""
        raw = self.raw_block(entry.block, dict_bytes)
        return raw[entry.offset:entry.offset + entry.length]


_TYPE, _CONT = itemgetter(0), itemgetter(4)  # of an array part (type, id, offset, length, continues)


def parse_header(key: str, data, hstart: int, hend: int, blocks_end: int | None) -> tuple[list[Block], dict]:
    """Parse a pack header held in ``data[hstart:hend]`` (positions in ``data``). Block offsets
    are offsets in the pack, starting at :data:`HEADER_POS`; ``blocks_end`` is where the header
    starts in the pack (the blocks must end exactly there), None when unknown (a ranged read: the
    caller derives it from the blocks).

    ``data`` is bytes or a buffer (``data[hend:]`` may hold the trailer). Returns ``(blocks,
    entries)``: the :class:`Block` list in pack order and every :class:`Entry` by ``(type, id)``.

    Raises:
        IntegrityError: the header is malformed (names ``key``).
    """
    if type(data) is not bytes and type(data) is not RestoredPack:  # (a RestoredPack's slices are bytes)
        data = bytes(data)  # slices of it are ids (dict keys): they must be bytes
    try:
        header = memoryview(data)[:hend]  # reads past the header's end raise IndexError

        def take(pos: int, n: int) -> bytes:
            if pos + n > hend:
                raise ValueError("truncated header")
            return bytes(data[pos:pos + n])

        pos = hstart
        nblocks, pos = get_varint(header, pos)
        if nblocks > MAX_BLOCKS:
            raise ValueError(f"{nblocks} blocks (at most {MAX_BLOCKS})")
        blocks = []
        off = HEADER_POS
        for _ in range(nblocks):
            kind = header[pos]
            pos += 1
            if kind > 6:
                raise ValueError(f"unknown block kind {kind}")
            sid = spk = ref = None
            if kind == 6:
                ref = (take(pos, PACK_ID_BYTES), take(pos + PACK_ID_BYTES, ID_BYTES))
                pos += ID_BYTES + PACK_ID_BYTES
                if ref[0][0] != 0xFF:
                    raise ValueError("an array block's dictionary names a pack that is not a shared object")
            if kind == 2:
                sid = take(pos, ID_BYTES)
                spk = take(pos + ID_BYTES, PACK_ID_BYTES)
                pos += ID_BYTES + PACK_ID_BYTES
            clen, pos = get_varint(header, pos)
            rawlen, pos = get_varint(header, pos)
            if rawlen > MAX_BLOCK_RAW:
                raise ValueError(f"a block claims {rawlen} bytes uncompressed (at most {MAX_BLOCK_RAW})")
            if (kind == 3 or kind == 5) and clen != rawlen:
                raise ValueError("a stored block's lengths differ")
            if kind >= 4:
                nitems, pos = get_varint(header, pos)
                if not 0 < nitems < rawlen:
                    raise ValueError(f"an array block of {rawlen} bytes claims {nitems} items")
                blocks.append(Block(off, clen, rawlen, None, kind == 5, True, nitems, shared=ref))
                off += clen
                if blocks_end is not None and off > blocks_end:
                    raise ValueError("blocks run into the header")
                continue
            spec = None
            if kind in (1, 2):
                dg = take(pos, 16)
                pos += 16
                a, pos = get_varint(header, pos)
                b, pos = get_varint(header, pos)
                dl, pos = get_varint(header, pos)
                if a > b or dl > MAX_BLOCK_RAW:
                    raise ValueError("dictionary range out of order or too long")
                spec = DictSpec(sid, spk, a, b, dl, dg)
            blocks.append(Block(off, clen, rawlen, spec, kind == 3))
            off += clen
            if blocks_end is not None and off > blocks_end:
                raise ValueError("blocks run into the header")
        if blocks_end is not None and off != blocks_end:
            raise ValueError("blocks do not end where the header starts")
        n, pos = get_varint(header, pos)
        if n * (2 + ID_BYTES + 1) > hend - pos:
            raise ValueError(f"header too short for {n} entries")
        entries = {}
        fill = [0] * nblocks
        arr = [b.array for b in blocks]
        parts: dict = {bi: [] for bi in range(nblocks) if arr[bi]} if True in arr else None
        # the hot loop of a cold read (one pass per entry): one-byte block indexes and one- and
        # two-byte lengths inline, nothing checked per entry that the checks after the loop
        # cover. Reads past the header's end land in the trailer or raise IndexError, and
        # ``pos == hend`` after the loop rejects both; a block index past the table raises
        # IndexError at ``fill[bi]``; an entry reaching past its block makes that block's sum
        # of lengths differ from its recorded length (lengths are not negative)
        new = tuple.__new__
        try:
            for _ in range(n):
                end = pos + 17
                bi = data[end]
                if bi < 0x80:
                    ln = data[end + 1]
                    p = end + 2
                else:
                    bi, p = get_varint(header, end)
                    ln = data[p]
                    p += 1
                if ln >= 0x80:
                    x = data[p]
                    if x < 0x80:
                        ln = (ln & 0x7F) | (x << 7)
                        p += 1
                    else:
                        ln, p = get_varint(header, p - 1)
                f = fill[bi]
                t = data[pos]
                eid = data[pos + 1:end]
                if parts is not None and (t >= 0x80 or arr[bi]):
                    # an array block's entry: one separator byte before each item, none before
                    # an entry continuing one (bit 7 of its type)
                    cont = t >= 0x80
                    if cont:
                        t &= 0x7F
                        ps = parts.get(bi)
                        if not ps or ps[-1][0] == T_HOLE:  # outside an array block, or nothing to continue
                            raise ValueError("an entry continues no array item")
                    else:
                        f += 1
                    parts[bi].append((t, eid, f, ln, cont))
                fill[bi] = f + ln
                entries[(t, eid)] = new(Entry, (t, eid, bi, f, ln))
                pos = p
        except IndexError:
            raise ValueError("truncated header, or an entry in a block the pack does not have") from None
        if pos != hend:
            raise ValueError("header length mismatch")
        types = set(map(itemgetter(0), entries))
        if not ENTRY_TYPES.keys() >= types:
            bad = min(types - ENTRY_TYPES.keys())
            raise ValueError(f"unknown entry type {bad}")
        if parts is not None:
            # C-level passes over the parts (map/itemgetter), not a generator step per entry
            for bi, ps in parts.items():
                b = blocks[bi]
                got = len(ps) - sum(map(_CONT, ps))
                if got != b.nitems:
                    raise ValueError(f"array block {bi} holds {got} items, its header says {b.nitems}")
                if T_HOLE in set(map(_TYPE, ps)) and any(x[3] or x[4] for x in ps if x[0] == T_HOLE):
                    raise ValueError(f"array block {bi} holds a hole that is not empty or continues an item")
                fill[bi] += 1  # the closing bracket
                blocks[bi] = Block(b.offset, b.clen, b.rawlen, None, b.stored, True, b.nitems, tuple(ps), b.shared)
            if not set(map(_TYPE, chain.from_iterable(parts.values()))) <= {T_CHUNK, T_HOLE}:
                raise ValueError("an array block holds an entry that is neither a chunk nor a hole")
        if T_HOLE in types and any(e.type == T_HOLE and not arr[e.block] for e in entries.values()):
            raise ValueError("a hole outside an array block")
        if fill != [b.rawlen for b in blocks]:
            raise ValueError("a block's length is not the sum of its entries' lengths (or an entry lies outside its block)")
        if any(b.dict and b.dict.state_id is None for b in blocks):
            if sum(1 for e in entries.values() if e.type == T_STATE) != 1:
                raise ValueError("dictionary refers to the pack's state entry but there is not exactly one")
    except (ValueError, IndexError) as e:
        raise IntegrityError(key, f"malformed header: {e}") from None
    return blocks, entries
