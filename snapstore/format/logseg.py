"""Log segments (format 2): copies of a run's log records in one object, so listing a run reads
O(log n) objects instead of one manifest per checkpoint (docs/format.md §8a).

A level-L log segment covers the ``LOG_FANOUT**L`` log positions ending at ``hi`` (those with
``hi - LOG_FANOUT**L < seq <= hi``; ``hi + 1`` is a multiple of ``LOG_FANOUT**L``) and holds the
exact bytes of every manifest in that range that existed when it was written. It lives at
``runs/<R>/l/<16 hex of 2^64-1-hi>.<L>``. A copy is used only for positions whose manifest the
reader's LIST still shows: positions are never reused within a run's life, so the copy is the
object itself.

Pure functions; no I/O.
"""

from __future__ import annotations

import struct

import blake3
import zstandard

from ..errors import IntegrityError, InvalidInputError
from .codec import get_varint, put_varint, zstd_decompress
from .keys import SEQ_MAX

LOG_FANOUT = 16
MAX_LEVEL = 3
"""Levels 1..3: segments of 16, 256 and 4,096 positions."""
LOG_MAGIC = b"SNLG"
LOG_VERSION = 2
MAX_RAW = 64 << 20
"""Largest decoded log segment a reader accepts (bytes): 4,096 manifests of at most 16 KiB."""
_HEAD = struct.Struct("<4sB16s")


def span(level: int) -> int:
    """Positions covered by a level-``level`` log segment."""
    return LOG_FANOUT ** level


def logseg_prefix(run_key: str) -> str:
    """``runs/<run key>/l/``."""
    return f"runs/{run_key}/l/"


def logseg_key(run_key: str, hi: int, level: int) -> str:
    """Key of the level-``level`` log segment ending at position ``hi``."""
    if not (1 <= level <= MAX_LEVEL and 0 <= hi < SEQ_MAX and (hi + 1) % span(level) == 0):
        raise ValueError(f"no log segment of level {level} ends at {hi}")
    return f"runs/{run_key}/l/{SEQ_MAX - hi:016x}.{level}"


def parse_logseg_key(key: str) -> tuple[int, int] | None:
    """``(hi, level)`` of a log-segment key, or None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    parts = name.split(".")
    if len(parts) != 2 or len(parts[0]) != 16 or len(parts[1]) != 1:
        return None
    try:
        hi = SEQ_MAX - int(parts[0], 16)
        level = int(parts[1])
    except ValueError:
        return None
    if not (1 <= level <= MAX_LEVEL) or hi < 0 or (hi + 1) % span(level):
        return None
    return hi, level


def encode_logseg(records: list[tuple[int, bytes]]) -> bytes:
    """Encode ``[(seq, manifest bytes)]`` (ascending seq) as a log segment object:
    ``"SNLG" | u8 version | checksum(16) | zstd frame of (varint n, n x (varint seq, varint len, bytes))``,
    where the checksum is blake3-128 of the zstd frame.

    Raises:
        InvalidInputError: the records take more than :data:`MAX_RAW` bytes (a reader would refuse
            the segment; the writer leaves the range to be read manifest by manifest).
    """
    body = bytearray()
    put_varint(body, len(records))
    for seq, data in records:
        put_varint(body, seq)
        put_varint(body, len(data))
        body += data
    if len(body) > MAX_RAW:
        raise InvalidInputError(f"log segment of {len(body)} bytes exceeds the limit {MAX_RAW}")
    frame = zstandard.ZstdCompressor(level=6, write_checksum=False).compress(bytes(body))
    return _HEAD.pack(LOG_MAGIC, LOG_VERSION, blake3.blake3(frame).digest(16)) + frame


def decode_logseg(key: str, data: bytes) -> list[tuple[int, bytes]]:
    """Inverse of :func:`encode_logseg`, in bounded memory (at most :data:`MAX_RAW` bytes decoded).

    Raises:
        IntegrityError: bad magic, checksum, size or structure (names ``key``).
    """
    if len(data) < _HEAD.size:
        raise IntegrityError(key, "truncated log segment")
    magic, version, digest = _HEAD.unpack_from(data)
    frame = data[_HEAD.size:]
    if magic != LOG_MAGIC:
        raise IntegrityError(key, f"bad magic {magic!r}, expected {LOG_MAGIC!r}")
    if blake3.blake3(frame).digest(16) != digest:
        raise IntegrityError(key, "checksum mismatch")
    if version > LOG_VERSION:
        raise IntegrityError(key, f"log segment version {version} is newer than supported")
    body = zstd_decompress(key, frame, MAX_RAW, what="log segment")  # bounded, whatever the frame claims
    try:
        n, pos = get_varint(body, 0)
        if n > span(MAX_LEVEL) or n * 3 > len(body):
            raise ValueError(f"{n} records")
        out = []
        last = -1
        for _ in range(n):
            seq, pos = get_varint(body, pos)
            ln, pos = get_varint(body, pos)
            if seq <= last or pos + ln > len(body):
                raise ValueError("records out of order or truncated")
            out.append((seq, bytes(body[pos:pos + ln])))
            pos += ln
            last = seq
        if pos != len(body):
            raise ValueError("trailing bytes")
    except (ValueError, IndexError) as e:
        raise IntegrityError(key, f"malformed log segment: {e}") from None
    return out
