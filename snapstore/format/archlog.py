"""Archive logs: a whole archived run's log records in one columnar, compressed object
(docs/format.md §28, "The hot catalogue of archived runs").

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

A **bundle log** (log segment version 5, §28) holds the whole logs of every run one archive
bundle serves in ONE frame, so small runs share one compression context (the run digest, shared
pack ids, the structure of their records) and one object: ``varint r | r x (varint key length |
run key (UTF-8) | varint n_i)`` followed by the columns above over all records, run by run (each
run's position deltas restarting at -1). :func:`encode_bundle_frame` / :func:`decode_bundle_frame`.

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
    _columns(cols, records)
    return _compressed(cols, records, max_raw, "archive log")


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


def _columns(cols: bytearray, records: list) -> None:
    """Append the position column of ``records`` (``[(seq, version, body)]``) to ``cols``: each
    seq as a varint gap from the one before. Raises InvalidInputError: out of order, bad version."""
    last = -1
    for seq, version, _ in records:
        if seq <= last or not 1 <= version <= 255:
            raise InvalidInputError(f"archive log record at {seq} (version {version}) out of order or invalid")
        put_varint(cols, seq - last - 1)
        last = seq


def _compressed(cols: bytearray, records: list, max_raw: int, what: str, flags: list | None = None) -> bytes:
    """``cols`` followed by the version, (``flags``: flag,) length and body columns of
    ``records``, as one zstd frame.

    Raises:
        InvalidInputError: more than ``max_raw`` bytes before compression (names ``what``).
    """
    cols += bytes(version for _, version, _ in records)
    if flags is not None:
        cols += bytes(flags)
    for _, _, body in records:
        put_varint(cols, len(body))
    for _, _, body in records:
        cols += body
    if len(cols) > max_raw:
        raise InvalidInputError(f"{what} of {len(cols)} bytes exceeds the limit {max_raw}")
    return zstandard.ZstdCompressor(level=LEVEL, dict_data=_ZDICT, write_checksum=False,
                                    write_dict_id=False).compress(bytes(cols))


def encode_bundle_frame(runs: dict, max_raw: int, thin: dict | None = None) -> bytes:
    """The zstd frame of a bundle log holding ``{run key: [(seq, envelope version, JSON body)]}``
    (each run's positions strictly ascending; runs in sorted key order).

    ``thin``: a thin bundle log (version 6, docs/format.md §28): ``{run key: [bool per record]}``,
    True where the body is thin (its moved fields in the bundle,
    :mod:`snapstore.format.archfields`); written as a flag column (u8 per record, 1 thin, 0 whole)
    after the version column.

    Raises:
        InvalidInputError: positions out of order, a bad version, an empty run, or more than
            ``max_raw`` bytes before compression.
    """
    cols = bytearray()
    order = sorted(runs)
    put_varint(cols, len(order))
    for rk in order:
        if not runs[rk]:
            raise InvalidInputError(f"bundle log run {rk!r} has no record")
        kb = rk.encode()
        put_varint(cols, len(kb))
        cols += kb
        put_varint(cols, len(runs[rk]))
    allrecs = [r for rk in order for r in runs[rk]]
    for rk in order:
        _columns(cols, runs[rk])
    flags = None
    if thin is not None:
        flags = []
        for rk in order:
            if len(thin[rk]) != len(runs[rk]):
                raise InvalidInputError(f"bundle log run {rk!r}: {len(thin[rk])} flags for {len(runs[rk])} records")
            flags += [1 if t else 0 for t in thin[rk]]
    return _compressed(cols, allrecs, max_raw, "bundle log", flags)


def decode_bundle_frame(key: str, frame: bytes, max_raw: int, thin: bool = False) -> dict:
    """Inverse of :func:`encode_bundle_frame`: ``{run key: [(seq, envelope version, JSON body)]}``,
    decompressing at most ``max_raw`` bytes whatever the frame claims. ``thin`` (version 6): the
    frame has the flag column, and each record is ``(seq, version, body, is thin)``.

    Raises:
        IntegrityError: the frame or its columns are malformed (names ``key``).
    """
    body = zstd_decompress(key, frame, max_raw, _ZDICT, what="bundle log")
    try:
        r, pos = get_varint(body, 0)
        if r * 3 > len(body):
            raise ValueError(f"{r} runs")
        heads = []
        for _ in range(r):
            ln, pos = get_varint(body, pos)
            rk = bytes(body[pos:pos + ln]).decode()
            if pos + ln > len(body) or not rk:
                raise ValueError("truncated run key")
            pos += ln
            n, pos = get_varint(body, pos)
            if n == 0 or n * 3 > len(body):
                raise ValueError(f"run {rk!r}: {n} records")
            heads.append((rk, n))
        if len({rk for rk, _ in heads}) != len(heads):
            raise ValueError("a run key twice")
        seqs = []
        for rk, n in heads:
            last = -1
            for _ in range(n):
                d, pos = get_varint(body, pos)
                last += d + 1
                seqs.append(last)
        total = len(seqs)
        versions = body[pos:pos + total]
        pos += total
        if len(versions) != total or 0 in versions:
            raise ValueError("bad version column")
        flags = None
        if thin:
            flags = body[pos:pos + total]
            pos += total
            if len(flags) != total or any(f > 1 for f in flags):
                raise ValueError("bad flag column")
        lengths = []
        for _ in range(total):
            ln, pos = get_varint(body, pos)
            lengths.append(ln)
        out: dict = {}
        i = 0
        for rk, n in heads:
            recs = out[rk] = []
            for _ in range(n):
                if pos + lengths[i] > len(body):
                    raise ValueError("truncated body column")
                rec = (seqs[i], versions[i], bytes(body[pos:pos + lengths[i]]))
                recs.append(rec + (flags[i] == 1,) if thin else rec)
                pos += lengths[i]
                i += 1
        if pos != len(body):
            raise ValueError("trailing bytes")
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed bundle log: {e}") from None
    return out
