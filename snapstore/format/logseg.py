"""Log segments (format 2): copies of a run's log records in one object, so listing a run reads
O(log n) objects instead of one manifest per checkpoint (docs/format.md §12).

A level-L log segment covers the ``LOG_FANOUT**L`` log positions ending at ``hi`` (those with
``hi - LOG_FANOUT**L < seq <= hi``; ``hi + 1`` is a multiple of ``LOG_FANOUT**L``) and holds a copy
of every manifest in that range that existed when it was written. It lives at
``runs/<R>/l/<16 hex of 2^64-1-hi>.<L>``. A copy is used only for positions whose manifest the
reader's LIST still shows: positions are never reused within a run's life, so the copy is the
object itself.

Two versions are read:

* **3** (written by this version): each record as its manifest's envelope version and JSON body,
  all bodies in ONE zstd frame (compressed with the manifest dictionary): consecutive records
  repeat the run id, field names and most of the segment list, so a level-1 segment of 16 records
  costs about a third of the 16 manifests.
* **2** (earlier writers): each record as the exact manifest object (its own sealed, compressed
  envelope) inside a zstd frame, which therefore compresses nothing.

Pure functions; no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import blake3
import zstandard

from ..errors import IntegrityError, InvalidInputError
from . import archlog
from .codec import get_varint, prepared_dict, put_varint, zstd_decompress
from .elide import RestoredLog
from .keys import SEQ_MAX
from .archfields import full_body
from .manifest import MANIFEST_DICT_V1, Manifest, open_manifest

LOG_FANOUT = 16
MAX_LEVEL = 3
"""Levels 1..3: segments of 16, 256 and 4,096 positions."""
LOG_MAGIC = b"SNLG"
LOG_VERSION = 3
"""The version writers of this code write; readers accept 2 and 3."""
LOG_VERSION_OBJECTS = 2
"""Version 2: records are whole manifest objects (read, never written)."""
LOG_VERSION_ARCHIVE = 4
"""Version 4: an archive log (:mod:`snapstore.format.archlog`), written only under an archive-log key."""
LOG_VERSION_BUNDLE = 5
"""Version 5: a bundle log (:mod:`snapstore.format.archlog`): the logs of consecutive runs one archive
bundle serves (about 64 KiB of records a part), at ``archive/log/<16 hex bundle id><4 hex part>``, read
through each run's pointer (docs/format.md §28)."""
LOG_VERSION_THIN = 6
"""Version of a thin bundle log (docs/format.md §28): version 5 plus a flag column; a thin
record's data-locating fields are in its bundle's fields entry (:mod:`snapstore.format.archfields`)."""
BUNDLE_LOGS = "archive/log/"
"""Prefix of bundle logs."""
ARCHIVE_LEVEL = MAX_LEVEL + 1
"""The level :func:`parse_logseg_key` gives an archive log (``.a``): it covers positions 0 to ``hi``
(:func:`seg_lo`), not an aligned range."""
POINTER_LEVEL = MAX_LEVEL + 2
"""The level :func:`parse_logseg_key` gives a bundle-log pointer (``<hi>.<log id>.b``, 0 bytes):
the run's records up to ``hi`` are in the bundle log it names; it covers positions 0 to ``hi``."""
WHOLE_LEVELS = (ARCHIVE_LEVEL, POINTER_LEVEL)
"""Levels whose object covers a run's whole log up to ``hi`` (any positions)."""
MAX_RAW = 64 << 20
"""Largest decoded log segment a reader accepts (bytes): 4,096 manifests of at most 16 KiB."""
_HEAD = struct.Struct("<4sB16s")
_LEVELS_ZSTD = {1: 19, 2: 19, 3: 12}
"""zstd level per log-segment level. Measured on the records of a LangGraph run (2 cores shared
with other jobs): 16 records about 4 ms at 19; 256 records 0.1-0.3 s at 19 (106 B a record) against
74 ms at 12 (118 B) and 21 ms at 9 (122 B), paid by the one save in 256 that writes it; 4,096
records (about 4 MB of JSON) about 0.4 s at 12."""
_ZDICT = prepared_dict(MANIFEST_DICT_V1)


@dataclass(frozen=True, slots=True)
class LogCopy:
    """One record of a log segment.

    Attributes:
        seq: its log position.
        version: the manifest's envelope version (segment version 3), or None when ``data`` is the
            whole manifest object (segment version 2).
        data: the manifest's JSON body (version 3) or its object bytes (version 2).
    """

    seq: int
    version: int | None
    data: bytes
    fill: object = None
    where: object = None

    def manifest(self, key: str, light: bool = False, run_id: str | None = None) -> Manifest:
        """Decode the copy (``key`` names it in errors; ``light`` and ``run_id`` as
        :meth:`Manifest.from_bytes`: a compact record is read as belonging to the run ``key`` names).
        A thin copy (``fill`` set, a thin bundle log's, docs/format.md §28) decodes to an
        :class:`~snapstore.format.manifest.ArchivedManifest`, whose moved fields ``fill()``
        gives when first used.

        Raises:
            IntegrityError: the copy is not a valid manifest.
            UnsupportedFormatError: written by a newer format version.
        """
        if self.version is None:
            return Manifest.from_bytes(key, self.data, light, run_id)
        return Manifest.from_body(key, self.version, self.data, light, run_id, self.fill, self.where)

    def record(self, key: str) -> tuple[int, bytes]:
        """``(envelope version, JSON body)`` of the copy (what :func:`encode_logseg` takes); a
        thin copy's whole body (its moved fields read through ``fill``, then put back:
        :func:`~snapstore.format.archfields.full_body`).

        Raises:
            IntegrityError: a version-2 copy whose envelope is corrupt; a thin copy whose fields
                are not to be had (and what ``fill`` raises).
        """
        if self.version is None:
            return open_manifest(key, self.data)
        if self.fill is not None:
            fkey, moved = self.fill()
            try:
                return self.version, full_body(self.data, moved)
            except ValueError as e:
                raise IntegrityError(fkey, f"thin record at position {self.seq} not put back: {e}") from None
        return self.version, self.data


def span(level: int) -> int:
    """Positions covered by a level-``level`` log segment."""
    return LOG_FANOUT ** level


def seg_lo(hi: int, level: int) -> int:
    """The lowest position a log segment ``(hi, level)`` (as :func:`parse_logseg_key` gives it)
    may hold: ``hi - 16^level + 1``, or 0 for an archive log (:data:`ARCHIVE_LEVEL`)."""
    return 0 if level in WHOLE_LEVELS else hi - span(level) + 1


def archlog_key(run_key: str, hi: int) -> str:
    """``runs/<R>/l/<16 hex of 2^64-1-hi>.a``: the archive log of run ``run_key`` whose newest record
    is at ``hi`` (docs/format.md §28). Raises ValueError for a position out of range."""
    if not 0 <= hi < SEQ_MAX:
        raise ValueError(f"no archive log ends at {hi}")
    return f"runs/{run_key}/l/{SEQ_MAX - hi:016x}.a"


LOG_ID_BYTES = 10
"""A bundle log's id: the bundle's id (8 bytes) and the part's number (2 bytes, big-endian)."""


def log_id(bundle_id: bytes, part: int) -> bytes:
    """The id of part ``part`` (0-65535) of the bundle logs of bundle ``bundle_id`` (8 bytes)."""
    if len(bundle_id) != 8 or not 0 <= part < 1 << 16:
        raise ValueError(f"no bundle log {part} of {bundle_id.hex()}")
    return bundle_id + part.to_bytes(2, "big")


def pointer_key(run_key: str, hi: int, lid: bytes) -> str:
    """``runs/<R>/l/<16 hex of 2^64-1-hi>.<20 hex log id>.b``: the 0-byte pointer saying that run
    ``run_key``'s records up to ``hi`` are in the bundle log ``lid`` (:func:`log_id`; docs/format.md
    §28). Raises ValueError for a position out of range or a bad id."""
    if not 0 <= hi < SEQ_MAX or len(lid) != LOG_ID_BYTES:
        raise ValueError(f"no bundle-log pointer at {hi} for {lid.hex()}")
    return f"runs/{run_key}/l/{SEQ_MAX - hi:016x}.{lid.hex()}.b"


def pointer_bundle(key: str) -> bytes | None:
    """The bundle log id (10 bytes) a bundle-log pointer key names, or None if ``key`` is not one."""
    parts = key.rsplit("/", 1)[-1].split(".")
    if len(parts) != 3 or parts[2] != "b" or len(parts[0]) != 16 or len(parts[1]) != 2 * LOG_ID_BYTES:
        return None
    try:
        return bytes.fromhex(parts[1])
    except ValueError:
        return None


def bundlelog_key(lid: bytes) -> str:
    """``archive/log/<20 hex>``: the bundle log ``lid`` (:func:`log_id`; hot)."""
    return f"{BUNDLE_LOGS}{lid.hex()}"


def bundlelog_id(key: str) -> bytes | None:
    """The id (10 bytes) of a bundle log's key, or None if ``key`` is not one."""
    if not key.startswith(BUNDLE_LOGS):
        return None
    h = key[len(BUNDLE_LOGS):]
    if len(h) != 2 * LOG_ID_BYTES:
        return None
    try:
        return bytes.fromhex(h)
    except ValueError:
        return None


def logseg_prefix(run_key: str) -> str:
    """``runs/<run key>/l/``."""
    return f"runs/{run_key}/l/"


def logseg_key(run_key: str, hi: int, level: int) -> str:
    """Key of the level-``level`` log segment ending at position ``hi``."""
    if not (1 <= level <= MAX_LEVEL and 0 <= hi < SEQ_MAX and (hi + 1) % span(level) == 0):
        raise ValueError(f"no log segment of level {level} ends at {hi}")
    return f"runs/{run_key}/l/{SEQ_MAX - hi:016x}.{level}"


def parse_logseg_key(key: str) -> tuple[int, int] | None:
    """``(hi, level)`` of a log-segment key (an archive log's level is :data:`ARCHIVE_LEVEL`), or
    None if ``key`` is not one."""
    name = key.rsplit("/", 1)[-1]
    parts = name.split(".")
    if pointer_bundle(key) is not None:
        try:
            hi = SEQ_MAX - int(parts[0], 16)
        except ValueError:
            return None
        return (hi, POINTER_LEVEL) if 0 <= hi < SEQ_MAX else None
    if len(parts) != 2 or len(parts[0]) != 16 or len(parts[1]) != 1:
        return None
    try:
        hi = SEQ_MAX - int(parts[0], 16)
        if parts[1] == "a":
            return (hi, ARCHIVE_LEVEL) if 0 <= hi < SEQ_MAX else None
        level = int(parts[1])
    except ValueError:
        return None
    if not (1 <= level <= MAX_LEVEL) or hi < 0 or (hi + 1) % span(level):
        return None
    return hi, level


def encode_logseg(records: list[tuple[int, int, bytes]], level: int = 1) -> bytes:
    """Encode ``[(seq, envelope version, manifest JSON body)]`` (ascending seq) as a version-3 log
    segment: ``"SNLG" | u8 3 | checksum(16) | zstd frame`` of
    ``varint n | n x (varint seq | u8 version | varint length | body)``, the frame compressed with
    the manifest dictionary (``MANIFEST_DICT_V1``) at a zstd level chosen by ``level`` (1-3); the
    checksum is blake3-128 of the frame.

    Raises:
        InvalidInputError: positions not strictly ascending, a version outside 1-255, or the records
            take more than :data:`MAX_RAW` bytes (a reader would refuse the segment; the writer
            leaves the range to be read manifest by manifest).
    """
    body = bytearray()
    put_varint(body, len(records))
    last = -1
    for seq, version, data in records:
        if seq <= last or not 1 <= version <= 255:
            raise InvalidInputError(f"log segment record at {seq} (version {version}) out of order or invalid")
        last = seq
        put_varint(body, seq)
        body.append(version)
        put_varint(body, len(data))
        body += data
    if len(body) > MAX_RAW:
        raise InvalidInputError(f"log segment of {len(body)} bytes exceeds the limit {MAX_RAW}")
    frame = zstandard.ZstdCompressor(level=_LEVELS_ZSTD.get(level, 12), dict_data=_ZDICT, write_checksum=False,
                                     write_dict_id=False).compress(bytes(body))
    return _HEAD.pack(LOG_MAGIC, LOG_VERSION, blake3.blake3(frame).digest(16)) + frame


def _checked_head(key: str, data: bytes, what: str) -> tuple[int, bytes]:
    """``(version, frame)`` of a ``"SNLG" | u8 version | checksum(16) | frame`` object ``data``
    (a log segment or bundle log: ``what``), its magic and checksum checked.

    Raises:
        IntegrityError: shorter than the header, bad magic, or checksum mismatch (names ``key``).
    """
    if len(data) < _HEAD.size:
        raise IntegrityError(key, f"truncated {what}")
    magic, version, digest = _HEAD.unpack_from(data)
    frame = data[_HEAD.size:]
    if magic != LOG_MAGIC:
        raise IntegrityError(key, f"bad magic {magic!r}, expected {LOG_MAGIC!r}")
    # (a RestoredLog's checksum was just computed from the frame, after the AEAD of an encrypted
    # repository authenticated it: checking it again cannot fail, §27)
    if type(data) is not RestoredLog and blake3.blake3(frame).digest(16) != digest:
        raise IntegrityError(key, "checksum mismatch")
    return version, frame


def decode_logseg(key: str, data: bytes) -> list[LogCopy]:
    """Inverse of :func:`encode_logseg`, and reader of version-2 segments, in bounded memory (at
    most :data:`MAX_RAW` bytes decoded). Copies are returned undecoded (:meth:`LogCopy.manifest`).

    Raises:
        IntegrityError: bad magic, checksum, version, size or structure (names ``key``).
    """
    version, frame = _checked_head(key, data, "log segment")
    if version in (LOG_VERSION_BUNDLE, LOG_VERSION_THIN):
        raise IntegrityError(key, f"a bundle log (version {version}) where a log segment belongs; it is read through a pointer")
    if version == LOG_VERSION_ARCHIVE:
        if not key.endswith(".a"):
            raise IntegrityError(key, "an archive log (version 4) under a log segment's key")
        return [LogCopy(seq, mv, body) for seq, mv, body in archlog.decode_frame(key, frame, MAX_RAW)]
    if key.endswith(".a"):
        raise IntegrityError(key, f"log segment version {version} under an archive log's key")
    if version > LOG_VERSION or version < LOG_VERSION_OBJECTS:
        raise IntegrityError(key, f"log segment version {version} is not one this code reads (2-{LOG_VERSION_ARCHIVE})")
    objects = version == LOG_VERSION_OBJECTS
    # bounded, whatever the frame claims
    body = zstd_decompress(key, frame, MAX_RAW, None if objects else _ZDICT, what="log segment")  # prepared: one decompressor per thread
    try:
        n, pos = get_varint(body, 0)
        if n > span(MAX_LEVEL) or n * 3 > len(body):
            raise ValueError(f"{n} records")
        out = []
        last = -1
        for _ in range(n):
            seq, pos = get_varint(body, pos)
            mv = None
            if not objects:
                if pos >= len(body):
                    raise ValueError("truncated record")
                mv = body[pos]
                pos += 1
                if mv == 0:
                    raise ValueError(f"record {seq} has manifest version 0")
            ln, pos = get_varint(body, pos)
            if seq <= last or pos + ln > len(body):
                raise ValueError("records out of order or truncated")
            out.append(LogCopy(seq, mv, bytes(body[pos:pos + ln])))
            pos += ln
            last = seq
        if pos != len(body):
            raise ValueError("trailing bytes")
    except (ValueError, IndexError) as e:
        raise IntegrityError(key, f"malformed log segment: {e}") from None
    return out


def encode_archlog(records: list[tuple[int, int, bytes]]) -> bytes:
    """Encode ``[(seq, envelope version, manifest JSON body)]`` (ascending seq, any positions) as an
    archive log: ``"SNLG" | u8 4 | checksum(16) | frame`` (:func:`snapstore.format.archlog.encode_frame`),
    the checksum blake3-128 of the frame. :func:`decode_logseg` reads it back.

    Raises:
        InvalidInputError: as :func:`encode_logseg` (order, versions, :data:`MAX_RAW`).
    """
    frame = archlog.encode_frame(records, MAX_RAW)
    return _HEAD.pack(LOG_MAGIC, LOG_VERSION_ARCHIVE, blake3.blake3(frame).digest(16)) + frame


def encode_logseg_v2(records: list[tuple[int, bytes]]) -> bytes:
    """A version-2 log segment of ``[(seq, manifest object bytes)]`` (what writers before
    version 3 wrote; kept so tests can build the older layout and show it is still read)."""
    body = bytearray()
    put_varint(body, len(records))
    for seq, data in records:
        put_varint(body, seq)
        put_varint(body, len(data))
        body += data
    frame = zstandard.ZstdCompressor(level=6, write_checksum=False).compress(bytes(body))
    return _HEAD.pack(LOG_MAGIC, LOG_VERSION_OBJECTS, blake3.blake3(frame).digest(16)) + frame


def encode_bundlelog(runs: dict, thin: dict | None = None) -> bytes:
    """Encode ``{run key: [(seq, envelope version, manifest JSON body)]}`` as a bundle log:
    ``"SNLG" | u8 5 | checksum(16) | frame`` (:func:`snapstore.format.archlog.encode_bundle_frame`),
    the checksum blake3-128 of the frame. ``thin`` (``{run key: [bool per record]}``, True where
    the body is thin): a thin bundle log, version 6 (docs/format.md §28).

    Raises:
        InvalidInputError: as :func:`~snapstore.format.archlog.encode_bundle_frame` (:data:`MAX_RAW`).
    """
    frame = archlog.encode_bundle_frame(runs, MAX_RAW, thin)
    version = LOG_VERSION_BUNDLE if thin is None else LOG_VERSION_THIN
    return _HEAD.pack(LOG_MAGIC, version, blake3.blake3(frame).digest(16)) + frame


def decode_bundlelog(key: str, data: bytes, fill=None) -> dict:
    """Inverse of :func:`encode_bundlelog`: ``{run key: [LogCopy]}`` (at most :data:`MAX_RAW`
    bytes decoded). For a thin one (version 6), each thin copy gets ``fill(run key, seq)`` as its
    :attr:`LogCopy.fill` and ``(key, run key, seq)`` as its ``where``; None: a thin copy's fill
    raises IntegrityError when used.

    Raises:
        IntegrityError: bad magic, checksum, version or structure (names ``key``).
    """
    version, frame = _checked_head(key, data, "bundle log")
    if version not in (LOG_VERSION_BUNDLE, LOG_VERSION_THIN):
        raise IntegrityError(key, f"log segment version {version} where a bundle log (version 5 or 6) belongs")
    if version == LOG_VERSION_BUNDLE:
        return {rk: [LogCopy(seq, mv, body) for seq, mv, body in recs]
                for rk, recs in archlog.decode_bundle_frame(key, frame, MAX_RAW).items()}
    out = {}
    for rk, recs in archlog.decode_bundle_frame(key, frame, MAX_RAW, thin=True).items():
        out[rk] = [LogCopy(seq, mv, body, _filler(fill, key, rk, seq), (key, rk, seq)) if t else LogCopy(seq, mv, body)
                   for seq, mv, body, t in recs]
    return out


def _filler(fill, key: str, run_key: str, seq: int):
    """The ``fill`` of one thin copy: ``fill(run_key, seq)``, or an IntegrityError without one."""
    if fill is None:
        def none():
            raise IntegrityError(key, f"a thin record (run {run_key!r} position {seq}) read without its bundle")
        return none
    return lambda: fill(run_key, seq)
