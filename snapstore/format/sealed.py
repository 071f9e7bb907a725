"""Sealed objects: one stored object's bytes encrypted in fixed segments (docs/format.md §27).

Pure functions; no I/O. An object's plaintext (the bytes the layout above stores: a pack, a
manifest, an empty run marker...) is cut into segments of :data:`SEGMENT` bytes (the last one
shorter, possibly empty; an empty plaintext is one empty segment), each encrypted with
AES-256-GCM under a key of its own object, and followed by a trailer::

    segment 0 | segment 1 | ... | segment n-1 | trailer
    segment i  = AES-256-GCM(object key, nonce_i, plaintext_i, aad_i)   (len(plaintext_i) + 16)
    trailer    = "SNEC" | u8 version (1) | key id (4) | salt (16) | u64 BE plaintext length

The object key is ``blake3(salt, key=object master key)`` (a fresh random 16-byte salt per
written object); ``nonce_i`` is ``u32 BE i | u8 last (1 on the final segment, else 0) | 7 zero
bytes``; ``aad_i`` binds the trailer and the object's key (its name in the repository, which
names its kind and run) and the repository id: ``"SNEC" | version | key id | salt | length |
repo id (8) | utf-8 key``. Ranged reads decrypt whole segments only (:func:`segments_for`).
"""

from __future__ import annotations

import struct

MAGIC = b"SNEC"
VERSION = 1
SEGMENT = 64 << 10
"""Plaintext bytes per segment (the last segment of an object may be shorter)."""
TAG = 16
TRAILER = 4 + 1 + 4 + 16 + 8
"""Trailer length in bytes."""
CSEG = SEGMENT + TAG
"""Stored bytes per full segment."""


def nsegments(plain_len: int) -> int:
    """Number of segments of a plaintext of ``plain_len`` bytes (at least 1)."""
    return max(1, -(-plain_len // SEGMENT))


def sealed_size(plain_len: int) -> int:
    """Stored bytes of a sealed object whose plaintext is ``plain_len`` bytes."""
    return plain_len + TAG * nsegments(plain_len) + TRAILER


def plain_size(stored_len: int) -> int | None:
    """Plaintext bytes of a sealed object of ``stored_len`` stored bytes, or None when no sealed
    object has that size (shorter than a trailer and one tag)."""
    m = stored_len - TRAILER
    if m < TAG:
        return None
    n = max(1, -(-m // CSEG))
    p = m - TAG * n
    return p if p >= 0 and sealed_size(p) == stored_len else None


def pack_trailer(key_id: bytes, salt: bytes, plain_len: int) -> bytes:
    """The trailer (:data:`TRAILER` bytes) of a sealed object."""
    return MAGIC + bytes([VERSION]) + key_id + salt + struct.pack(">Q", plain_len)


def parse_trailer(trailer: bytes) -> tuple[bytes, bytes, int] | None:
    """``(key id (4), salt (16), plaintext length)`` of a trailer, or None if it is not one."""
    if len(trailer) != TRAILER or trailer[:4] != MAGIC or trailer[4] != VERSION:
        return None
    return trailer[5:9], trailer[9:25], struct.unpack(">Q", trailer[25:33])[0]


def nonce(index: int, last: bool) -> bytes:
    """The 12-byte nonce of segment ``index`` (``last``: it is the object's final segment)."""
    return struct.pack(">IB", index, 1 if last else 0) + bytes(7)


_LAST0 = bytes([0, 0, 0, 0, 1]) + bytes(7)  # nonce(0, last=True)


def segment_aad(trailer: bytes, repo_id: bytes, key: str) -> bytes:
    """The authenticated data of every segment of the object stored under ``key`` (str) in the
    repository ``repo_id`` (8 bytes), with trailer ``trailer``."""
    return trailer + repo_id + key.encode()


def seal(aead, key_id: bytes, salt: bytes, repo_id: bytes, key: str, plain: bytes) -> bytes:
    """Encrypt ``plain`` (bytes) as the sealed object stored under ``key``.

    Args:
        aead: an AEAD object for the object key (``cryptography``'s ``AESGCM``).
        key_id: 4 bytes naming the data key. salt: the 16 random bytes the object key came from.
        repo_id: the repository id (8 bytes). key: the object's key (str).
    Returns:
        The stored bytes (:func:`sealed_size` of ``len(plain)``).
    """
    trailer = pack_trailer(key_id, salt, len(plain))
    aad = segment_aad(trailer, repo_id, key)
    n = nsegments(len(plain))
    mv = memoryview(plain)
    parts = [aead.encrypt(nonce(i, i == n - 1), mv[i * SEGMENT:(i + 1) * SEGMENT], aad) for i in range(n)]
    parts.append(trailer)
    return b"".join(parts)


def segments_for(plain_len: int, start: int, end: int) -> tuple[int, int]:
    """The segments ``[first, last]`` holding plaintext bytes ``[start, end)`` of an object of
    ``plain_len`` bytes (``0 <= start <= end <= plain_len``; an empty range maps to one segment)."""
    n = nsegments(plain_len)
    first = min(start // SEGMENT, n - 1)
    last = min(max(end - 1, start) // SEGMENT, n - 1)
    return first, last


def open_segments(aead, trailer: bytes, repo_id: bytes, key: str, first: int, data: bytes) -> bytes:
    """Decrypt consecutive stored segments ``data`` starting at segment ``first``.

    Args:
        aead: the AEAD of the object key. trailer: the object's trailer (bytes).
        repo_id, key: as for :func:`seal`. data: whole stored segments (bytes).
    Returns:
        Their plaintext.
    Raises:
        cryptography.exceptions.InvalidTag: a segment does not authenticate (the caller names
            the key); ValueError: ``data`` is not whole segments of this object.
    """
    plain_len = int.from_bytes(trailer[25:33], "big")
    n = nsegments(plain_len)
    aad = segment_aad(trailer, repo_id, key)
    if n == 1 and first == 0:  # the common case: a small object, one segment
        if len(data) != plain_len + TAG:
            raise ValueError("a segment is truncated" if len(data) < plain_len + TAG else "more bytes than the object has")
        return aead.decrypt(_LAST0, data, aad)
    out, pos, i = [], 0, first
    mv = memoryview(data)
    while pos < len(data):
        if i >= n:
            raise ValueError("more segments than the object has")
        seg_plain = min(SEGMENT, plain_len - i * SEGMENT)
        clen = seg_plain + TAG
        if pos + clen > len(data):
            raise ValueError("a segment is truncated")
        out.append(aead.decrypt(nonce(i, i == n - 1), mv[pos:pos + clen], aad))
        pos += clen
        i += 1
    return b"".join(out)
