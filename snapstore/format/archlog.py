"""Archive logs: a whole archived run's log records in one columnar, compressed object
(docs/format.md §28, "The hot catalogue of an archived run").

An archive log is a log segment of version 4 (``"SNLG" | u8 4 | checksum(16) | zstd frame``,
§12) under ``runs/<R>/l/<16 hex of 2^64-1-hi>.a``, holding every record of the run's log up to
position ``hi`` (any positions, not an aligned range). Its frame, compressed with
``MANIFEST_DICT_V2`` (§11) as a raw-content dictionary, holds the records column by column:

``varint n | n x varint (seq - previous seq - 1) | n x u8 manifest version | n x varint body
length | the n JSON bodies``

so the positions, versions and lengths cost about a byte a record and the bodies, one after the
other, share one compression context (field names, run digest, pack ids, the parent id that is
the previous record's id). *Informative:* splitting hex ids out as bytes into their own column
compressed worse on the shared trajectories (zstd's entropy stage already codes a hex digit in
about 4 bits, and the split broke matches); see docs/format.md §28.

Pure functions; no I/O.
"""

from __future__ import annotations

import zstandard

from ..errors import IntegrityError, InvalidInputError
from .codec import get_varint, prepared_dict, put_varint, zstd_decompress
from .manifest import MANIFEST_DICT_V2

LEVEL = 19
"""zstd level of the frame."""
_ZDICT = prepared_dict(MANIFEST_DICT_V2)


def encode_frame(records: list[tuple[int, int, bytes]], max_raw: int) -> bytes:
    """The zstd frame of an archive log holding ``[(seq, envelope version, JSON body)]``
    (strictly ascending seq).

    Raises:
        InvalidInputError: positions not strictly ascending, a version outside 1-255, or more than
            ``max_raw`` bytes before compression.
    """
    cols = bytearray()
    put_varint(cols, len(records))
    last = -1
    for seq, version, _ in records:
        if seq <= last or not 1 <= version <= 255:
            raise InvalidInputError(f"archive log record at {seq} (version {version}) out of order or invalid")
        put_varint(cols, seq - last - 1)
        last = seq
    cols += bytes(version for _, version, _ in records)
    for _, _, body in records:
        put_varint(cols, len(body))
    for _, _, body in records:
        cols += body
    if len(cols) > max_raw:
        raise InvalidInputError(f"archive log of {len(cols)} bytes exceeds the limit {max_raw}")
    return zstandard.ZstdCompressor(level=LEVEL, dict_data=_ZDICT, write_checksum=False,
                                    write_dict_id=False).compress(bytes(cols))


def decode_frame(key: str, frame: bytes, max_raw: int) -> list[tuple[int, int, bytes]]:
    """Inverse of :func:`encode_frame`: ``[(seq, envelope version, JSON body)]``, decompressing
    at most ``max_raw`` bytes whatever the frame claims.

    Raises:
        IntegrityError: the frame or its columns are malformed (names ``key``).
    """
    body = zstd_decompress(key, frame, max_raw, _ZDICT, what="archive log")
    try:
        n, pos = get_varint(body, 0)
        if n * 3 > len(body):
            raise ValueError(f"{n} records")
        seqs, last = [], -1
        for _ in range(n):
            d, pos = get_varint(body, pos)
            last += d + 1
            seqs.append(last)
        versions = body[pos:pos + n]
        pos += n
        if len(versions) != n or 0 in versions:
            raise ValueError("bad version column")
        lengths = []
        for _ in range(n):
            ln, pos = get_varint(body, pos)
            lengths.append(ln)
        out = []
        for seq, version, ln in zip(seqs, versions, lengths):
            if pos + ln > len(body):
                raise ValueError("truncated body column")
            out.append((seq, version, bytes(body[pos:pos + ln])))
            pos += ln
        if pos != len(body):
            raise ValueError("trailing bytes")
    except (ValueError, IndexError) as e:
        raise IntegrityError(key, f"malformed archive log: {e}") from None
    return out
