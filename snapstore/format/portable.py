"""Portable bundles: runs in one self-describing, checksummed file (docs/format.md §30).

A portable bundle (``snapstore export --bundle``) moves runs between repositories of any
backend and any encryption: it holds their checkpoints as values (exact JSON), not the
repository's objects, so it does not depend on a repository key. Layout::

    header  = b"SNAPBNDL" | u8 version (1) | u32 n | n bytes of header JSON
    block   = b"B" | u32 index | u32 n | blake3-128 of the n bytes | n bytes
    trailer = b"E" | u32 blocks | u64 raw bytes | blake3-256 of every byte before b"E" | b"SNAPBEND"

(integers little-endian). The blocks' bytes, concatenated in order, are ONE zstd frame; it
decompresses to a sequence of items ``u8 kind | varint n | n bytes``. This module writes and reads
that layout (streaming, bounded memory); what the items mean is :mod:`snapstore.manager.portable`'s.

Pure encodings and a file object: no repository I/O.
"""

from __future__ import annotations

import struct

import blake3
import zstandard

from ..errors import IntegrityError, UnsupportedFormatError
from .codec import MAX_WINDOW, get_varint, put_varint

MAGIC = b"SNAPBNDL"
END_MAGIC = b"SNAPBEND"
VERSION = 1
HEADER_LIMIT = 16 << 20
"""Largest header JSON (bytes)."""
BLOCK_LIMIT = 64 << 20
"""Largest stored block (bytes); writers close a block at :data:`BLOCK_RAW` raw bytes."""
ITEM_LIMIT = 256 << 20
"""Largest item body (bytes, uncompressed)."""
BLOCK_RAW = 1 << 20
"""Raw bytes after which a writer closes a block (a flush of the zstd stream)."""
LEVEL = 19
"""zstd level of a bundle's frame."""
WINDOW_LOG = 27
"""zstd window of a bundle's frame (2^27 = 128 MiB: content repeated within that distance, a
message of another run or checkpoint, costs a match, not its bytes); readers accept at most this."""

_BLOCK = struct.Struct("<II16s")
_TRAILER = struct.Struct("<IQ32s8s")


class BundleWriter:
    """Write a portable bundle to a binary file object, streaming.

    Memory: one block (about :data:`BLOCK_RAW` raw bytes) and the zstd compressor's state
    (its window of at most 2^``window_log`` bytes and its tables), whatever is written.

    Args:
        f: a binary file object open for writing (only ``write`` is used).
        header_json: the header object's JSON bytes (at most :data:`HEADER_LIMIT`).
        level / window_log: zstd parameters.
    Raises:
        IntegrityError: a header or (in :meth:`item`) an item over its limit.
    """

    def __init__(self, f, header_json: bytes, level: int = LEVEL, window_log: int = WINDOW_LOG):
        if len(header_json) > HEADER_LIMIT:
            raise IntegrityError("bundle header", f"header of {len(header_json)} bytes exceeds {HEADER_LIMIT}")
        self.f = f
        self.hash = blake3.blake3()
        params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log, enable_ldm=True)
        self._cobj = zstandard.ZstdCompressor(compression_params=params).compressobj()
        self._buf = bytearray()
        self.blocks = 0
        self.raw = 0
        self.stored = 0
        self._emit(MAGIC + bytes([VERSION]) + struct.pack("<I", len(header_json)) + header_json)

    def _emit(self, b: bytes) -> None:
        self.f.write(b)
        self.hash.update(b)
        self.stored += len(b)

    def item(self, kind: bytes, body: bytes) -> None:
        """Append one item (``kind``: one byte; ``body``: at most :data:`ITEM_LIMIT` bytes)."""
        if len(body) > ITEM_LIMIT:
            raise IntegrityError("bundle item", f"item of {len(body)} bytes exceeds {ITEM_LIMIT}")
        n0 = len(self._buf)
        self._buf += kind
        put_varint(self._buf, len(body))
        self._buf += body
        self.raw += len(self._buf) - n0
        if len(self._buf) >= BLOCK_RAW:
            self._block(zstandard.COMPRESSOBJ_FLUSH_BLOCK)

    def _block(self, mode) -> None:
        out = self._cobj.compress(bytes(self._buf)) + self._cobj.flush(mode)
        self._buf.clear()
        if not out:
            return
        self._emit(b"B" + _BLOCK.pack(self.blocks, len(out), blake3.blake3(out).digest(16)) + out)
        self.blocks += 1

    def close(self) -> None:
        """End the frame and write the trailer (the file is complete only after this)."""
        self._block(zstandard.COMPRESSOBJ_FLUSH_FINISH)
        digest = self.hash.digest(32)
        tail = b"E" + _TRAILER.pack(self.blocks, self.raw, digest, END_MAGIC)
        self.f.write(tail)
        self.stored += len(tail)


def read_items(f, name: str):
    """Read a portable bundle from binary file object ``f``; yield ``header_json`` (bytes) first,
    then ``(kind, body)`` for each item, streaming. Every block's checksum is checked before its
    bytes are used; the trailer (block count, raw length, the whole file's blake3-256) is checked
    after the last item, so a caller MUST treat what it read as unconfirmed until the generator
    ends without an error.

    Args:
        f: binary file object (``read`` only). name: what errors call the file (its path).
    Raises:
        IntegrityError: the file is damaged or truncated (names ``name`` and the block or offset).
        UnsupportedFormatError: a version this reader does not know.
    """
    h = blake3.blake3()
    pos = 0

    def take(n: int, what: str) -> bytes:
        nonlocal pos
        b = f.read(n)
        if len(b) != n:
            raise IntegrityError(name, f"truncated: {what} at byte {pos} needs {n} bytes, the file has {len(b)} more")
        pos += n
        return b

    start = f.read(13)
    if not start:
        raise IntegrityError(name, "an empty file, not a snapstore bundle")
    if start[:8] != MAGIC[:len(start)]:  # (a short text file is not a truncated bundle)
        raise IntegrityError(name, "not a snapstore bundle (no SNAPBNDL magic at its start)")
    if len(start) < 13:
        raise IntegrityError(name, f"truncated: the header at byte 0 needs 13 bytes, the file has {len(start)}")
    head, pos = start, 13
    if head[:8] != MAGIC:
        raise IntegrityError(name, "not a snapstore bundle (no SNAPBNDL magic at its start)")
    if head[8] != VERSION:
        raise UnsupportedFormatError(f"{name}: bundle version {head[8]}; this snapstore reads version {VERSION}")
    (n,) = struct.unpack("<I", head[9:13])
    if n > HEADER_LIMIT:
        raise IntegrityError(name, f"header length {n} exceeds {HEADER_LIMIT}")
    header = take(n, "the header")
    h.update(head)
    h.update(header)
    yield header
    dobj = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).decompressobj()
    buf = bytearray()
    raw = 0
    index = 0
    while True:
        tag_at = pos
        tag = f.read(1)
        pos += len(tag)
        if not tag:
            raise IntegrityError(name, f"truncated: no trailer after block {index - 1} (byte {tag_at})")
        if tag == b"E":
            break
        if tag != b"B":
            raise IntegrityError(name, f"damaged: byte {tag_at} is neither a block nor the trailer")
        bh = take(_BLOCK.size, f"block {index}'s header")
        bi, bn, bsum = _BLOCK.unpack(bh)
        if bi != index:
            raise IntegrityError(name, f"damaged: block {index} at byte {tag_at} says it is block {bi}")
        if bn > BLOCK_LIMIT:
            raise IntegrityError(name, f"damaged: block {index} claims {bn} bytes (limit {BLOCK_LIMIT})")
        data = take(bn, f"block {index}")
        if blake3.blake3(data).digest(16) != bsum:
            raise IntegrityError(name, f"damaged: block {index} (bytes {tag_at}-{pos - 1}) fails its checksum")
        h.update(tag)
        h.update(bh)
        h.update(data)
        index += 1
        try:
            out = dobj.decompress(data)
        except zstandard.ZstdError as e:
            raise IntegrityError(name, f"damaged: block {index - 1} does not decompress: {e}") from None
        raw += len(out)
        buf += out
        at = 0
        while True:
            if len(buf) - at < 2:
                break
            try:
                length, p = get_varint(buf, at + 1)
            except (ValueError, IndexError):
                break
            if length > ITEM_LIMIT:
                raise IntegrityError(name, f"damaged: an item in block {index - 1} claims {length} bytes")
            if len(buf) - p < length:
                break
            yield buf[at:at + 1].decode("latin-1"), bytes(buf[p:p + length])
            at = p + length
        del buf[:at]
        if len(buf) > ITEM_LIMIT + 16:
            raise IntegrityError(name, "damaged: an item longer than the limit")
    tail = take(_TRAILER.size, "the trailer")
    blocks, raw_total, digest, end = _TRAILER.unpack(tail)
    if end != END_MAGIC:
        raise IntegrityError(name, "damaged trailer (no SNAPBEND at the end)")
    if f.read(1):
        raise IntegrityError(name, "damaged: bytes after the trailer")
    if blocks != index or raw_total != raw:
        raise IntegrityError(name, f"damaged: the trailer counts {blocks} blocks and {raw_total} raw bytes, "
                                   f"the file holds {index} and {raw}")
    if buf or not dobj.eof:
        raise IntegrityError(name, "truncated: the compressed stream ends inside an item")
    if h.digest(32) != digest:
        raise IntegrityError(name, "damaged: the file's blake3-256 differs from the trailer's")


def varint_bytes(n: int) -> bytes:
    """``n`` as a varint (§2)."""
    b = bytearray()
    put_varint(b, n)
    return bytes(b)
