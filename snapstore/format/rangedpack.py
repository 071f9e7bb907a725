"""Packs read with byte ranges (docs/format.md §19, ranged reads): a pack's header and trailer
from one suffix read, its blocks fetched as they are needed, and the streamed checksum of a pack
too large to hold whole. The layout is :mod:`snapstore.format.pack`'s.

Pure functions over a ``fetch(start, end) -> bytes`` callable the caller supplies; no I/O of
their own.
"""

from __future__ import annotations

import blake3

from ..errors import IntegrityError
from . import pack  # pack.parse_header looked up per call (benchmarks/local_read.py --phases wraps it)
from .pack import HEADER_POS, MAGIC, MAX_BLOCKS, TRAILER, TRAILER_BYTES, VERSION, Block, Pack


class RangedPack(Pack):
    """A pack read with byte ranges: its header and trailer (from one suffix read) and the blocks
    fetched so far (docs/format.md §19, ranged reads).

    The pack checksum cannot be verified without every byte, so a ranged pack is trusted only as
    far as its entries are: every entry a reader takes from it is verified by its content id, and a
    block that does not decompress to its recorded length is corrupt (``IntegrityError`` naming the
    pack). Readers that must verify whole packs (``verify --read-data``, GC) read them whole, or,
    when a pack is too large for one read, stream its checksum (:func:`parse_in_ranges`).

    Args:
        key: the pack's object key.
        pack_id: its id (from the key; the bytes holding the id are not read).
        blocks, entries: the parsed header.
        size: the pack's length in bytes (from the header: blocks, header and trailer).
        have: compressed bytes of the blocks already read, by block index.
        fetch: ``fetch(start, end) -> bytes`` reads pack bytes ``[start, end)`` (one ranged GET);
            used for a block that is needed but was not fetched in the caller's parallel wave.
    """

    whole = False
    checksummed = False
    """True when every byte was read once to verify the checksum (:func:`parse_in_ranges`)."""

    def __init__(self, key: str, pack_id: bytes, blocks: list[Block], entries: dict, size: int,
                 have: dict, fetch):
        super().__init__(key, b"", pack_id, blocks, entries)
        self.size = size
        self._have: dict[int, bytes] = dict(have)
        self._fetch = fetch

    @property
    def nbytes(self) -> int:
        """Bytes of the pack held in memory (the compressed blocks fetched so far)."""
        return sum(len(v) for v in self._have.values())

    def block_at_hand(self, block: int) -> bool:
        return block in self._have or block in self._raw

    def missing(self, blocks) -> list[int]:
        """The block indices among ``blocks`` neither fetched nor decompressed yet, sorted."""
        return sorted({b for b in blocks if b not in self._have and b not in self._raw and self.blocks[b].clen})

    def ranges(self, blocks, gap: int = 16 << 10) -> list[tuple[int, int]]:
        """Byte ranges ``[start, end)`` of the pack covering ``blocks`` (indices), adjacent blocks
        (or blocks less than ``gap`` bytes apart) joined into one range."""
        out: list[list[int]] = []
        for bi in sorted(set(blocks)):
            b = self.blocks[bi]
            if out and b.offset - out[-1][1] <= gap:
                out[-1][1] = max(out[-1][1], b.offset + b.clen)
            else:
                out.append([b.offset, b.offset + b.clen])
        return [(a, e) for a, e in out]

    def add_range(self, start: int, data: bytes) -> None:
        """Take the bytes ``data`` read at pack offset ``start``: every block they cover whole is kept.

        Raises:
            IntegrityError: fewer bytes than asked for (the object is shorter than its header says).
        """
        for bi, b in enumerate(self.blocks):
            if b.offset >= start and b.offset + b.clen <= start + len(data) and bi not in self._have:
                self._have[bi] = bytes(data[b.offset - start:b.offset - start + b.clen])

    def _comp(self, block: int) -> bytes:
        got = self._have.get(block)
        if got is None:
            b = self.blocks[block]
            data = self._fetch(b.offset, b.offset + b.clen)
            if len(data) != b.clen:
                raise IntegrityError(self.key, f"block {block} is cut short: read {len(data)} of {b.clen} bytes "
                                     f"at offset {b.offset} (the pack is shorter than its header says)")
            self._have[block] = got = bytes(data)
        return got

    def raw_block(self, block: int, dict_bytes: bytes | None = None, keep: bool = True) -> bytes:
        raw = super().raw_block(block, dict_bytes, keep)
        if block in self._raw:
            self._have.pop(block, None)  # keep one copy (the uncompressed one is memoised)
        return raw


def parse_tail(key: str, tail: bytes, asked: int, pack_id: bytes, fetch) -> Pack:
    """Parse a pack from its last bytes (a suffix read of ``asked`` bytes that returned ``tail``).

    If ``tail`` is the whole pack (shorter than asked, or exactly as long as its header says the
    pack is), it is parsed and checksum-verified as :meth:`Pack.parse` does. Otherwise the header
    is parsed from the tail (one more suffix read through ``fetch`` when the header is longer than
    the tail) and a :class:`RangedPack` is returned, holding the blocks the tail covers whole.

    Args:
        key: the object key (named in errors).
        tail: the bytes read.
        asked: how many bytes the suffix read asked for.
        pack_id: the pack's id (from its key).
        fetch: ``fetch(start, end) -> bytes`` for pack bytes ``[start, end)``; ``fetch(-n, None)``
            for its last ``n`` bytes.
    Raises:
        IntegrityError: truncated, or a malformed header or trailer (names ``key``).
    """
    if len(tail) < asked:
        return Pack.parse(key, tail, pack_id)
    if len(tail) < TRAILER.size + 1:
        raise IntegrityError(key, "not a snapstore pack (truncated)")
    hlen, _ = TRAILER.unpack_from(tail, len(tail) - TRAILER.size)
    if hlen + TRAILER_BYTES > len(tail):
        if hlen > 64 * MAX_BLOCKS + 64 * (1 << 20):
            raise IntegrityError(key, f"malformed header: header length {hlen} is implausible")
        tail = fetch(-(hlen + TRAILER_BYTES), None)
        if len(tail) < hlen + TRAILER_BYTES:
            return Pack.parse(key, tail, pack_id)
    hend = len(tail) - TRAILER_BYTES
    blocks, entries = pack.parse_header(key, tail, hend - hlen, hend, None)
    hstart = blocks[-1].offset + blocks[-1].clen if blocks else HEADER_POS
    size = hstart + hlen + TRAILER_BYTES
    if size == len(tail):
        return Pack.parse(key, tail, pack_id)
    if size < len(tail):
        raise IntegrityError(key, f"malformed header: the header describes a pack of {size} bytes, "
                             f"but more were read")
    base = size - len(tail)  # pack offset of tail[0]
    p = RangedPack(key, pack_id, blocks, entries, size, {}, fetch)
    p.add_range(base, tail[:len(tail) - hlen - TRAILER_BYTES])
    return p


STREAM_STEP = 8 << 20
"""Bytes per ranged read when :func:`parse_in_ranges` streams a pack's checksum."""


def parse_in_ranges(key: str, size: int, pack_id: bytes, fetch, tail: int = 1 << 20) -> "Pack":
    """Parse and checksum-verify a pack too large to hold whole (``size`` bytes, the object's
    length as the store reported it), reading it in byte ranges: the header from a suffix read (as
    :func:`parse_tail`), then every byte once, :data:`STREAM_STEP` at a time, into the checksum
    (nothing of it kept). Memory stays at one step plus the header, whatever ``size`` is.

    Args:
        key: the object key (named in errors).
        size: the object's length in bytes.
        pack_id: the pack's id (from its key).
        fetch: ``fetch(start, end) -> bytes`` for pack bytes ``[start, end)``; ``fetch(-n, None)``
            for its last ``n`` bytes.
        tail: bytes of the first suffix read.
    Returns:
        A :class:`RangedPack` (its blocks fetched when needed) whose ``checksummed`` is True, or a
        :class:`Pack` if the object turned out to be short enough to come whole.
    Raises:
        IntegrityError: bad magic, version or pack id, a malformed header, a header that does not
            describe a pack of ``size`` bytes, bytes cut short, or a checksum mismatch (names ``key``).
    """
    p = parse_tail(key, fetch(-tail, None), tail, pack_id, fetch)
    if p.whole:
        return p
    if p.size != size:
        raise IntegrityError(key, f"malformed header: it describes a pack of {p.size} bytes, the object has {size}")
    head = fetch(0, HEADER_POS)
    if head[:4] != MAGIC:
        raise IntegrityError(key, "not a snapstore pack (bad magic or truncated)")
    h = blake3.blake3()
    end = size - 16
    pos = 0
    while pos < end:
        piece = fetch(pos, min(pos + STREAM_STEP, end))
        if not piece:
            raise IntegrityError(key, f"cut short: no bytes at offset {pos} of {size}")
        h.update(piece)
        pos += len(piece)
    if h.digest(16) != fetch(end, size):
        raise IntegrityError(key, "checksum mismatch")
    if head[4] != VERSION:
        raise IntegrityError(key, f"unsupported pack version {head[4]}")
    if bytes(head[5:HEADER_POS]) != pack_id:
        raise IntegrityError(key, f"holds pack {bytes(head[5:HEADER_POS]).hex()}, not the pack its key names")
    p.checksummed = True
    return p
