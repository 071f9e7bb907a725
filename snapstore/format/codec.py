"""Byte-level codecs: exact JSON encoding of user values, varints, and the checksummed envelope.

Pure functions over bytes; no I/O.

Exact JSON
    A value is encoded as compact JSON (no spaces, dict key order kept). Most values go through
    orjson (fast); values orjson cannot represent exactly (integers outside the 64-bit range, strings
    holding surrogate code points) are encoded by :func:`dumps_exact` and flagged ``exact``: a reader
    must decode those with a parser that keeps arbitrary-precision integers, after decoding the bytes
    with ``surrogatepass`` (Python: :func:`loads_exact`). Tuples encode as lists. NaN/Infinity, non-string
    keys and any non-JSON object raise :class:`~snapstore.errors.InvalidMessageError`.
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
import threading
from contextlib import contextmanager

import blake3
import orjson
import zstandard

from ..errors import IntegrityError, InvalidMessageError
from .elide import RestoredEnvelope

MAX_DEPTH = 254
"""Most lists and dicts a stored JSON value (message, session state, user field) may nest.
Deeper values raise :class:`~snapstore.errors.InvalidMessageError` before anything is written
(checked iteratively), and stored JSON nested deeper is refused as corrupt before it is parsed,
so every encoder and decoder on the way stays within its own limit (orjson encodes 254 levels;
the exact decoder recurses once per level, well inside the interpreter's recursion limit)."""

MAX_WINDOW = 1 << 27
"""Largest zstd window (bytes) a reader accepts; writers use at most 8 MiB (level 19)."""

_READ_PIECE = 1 << 20

ONE_SHOT_MAX = 32 << 20
"""Largest recorded length (bytes) :func:`zstd_decompress` decompresses in one call (into a buffer
of exactly that size); longer frames are streamed, so memory grows only with real output."""

_DCTX = threading.local()


def _plain_dctx() -> "zstandard.ZstdDecompressor":
    """This thread's decompressor without dictionary (window capped at :data:`MAX_WINDOW`);
    reusing one saves its setup on every block (a context is not safe to share across threads)."""
    d = getattr(_DCTX, "d", None)
    if d is None:
        d = _DCTX.d = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    return d


def prepared_dict(raw: bytes) -> "zstandard.ZstdCompressionDict":
    """A raw-content zstd dictionary prepared once, for a dictionary that is a constant of the
    format (the manifest dictionaries): pass the result as ``zdict`` to :func:`zstd_decompress`
    (or :func:`open_envelope`) and each thread reuses one decompressor for it instead of setting
    up a dictionary and a decompression context on every call. Keep the object for the life of
    the process (module constants): each thread holds one decompressor per prepared dictionary.

    Args:
        raw: the dictionary's bytes.
    """
    return zstandard.ZstdCompressionDict(raw, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def _dict_dctx(zdict) -> "zstandard.ZstdDecompressor":
    """A decompressor for dictionary ``zdict``: raw bytes (a pack's own dictionary) get a new one;
    a :func:`prepared_dict` gets this thread's decompressor for it, made on first use."""
    if not isinstance(zdict, zstandard.ZstdCompressionDict):
        zd = zstandard.ZstdCompressionDict(zdict, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        return zstandard.ZstdDecompressor(dict_data=zd, max_window_size=MAX_WINDOW)
    per = getattr(_DCTX, "dicts", None)
    if per is None:
        per = _DCTX.dicts = {}
    got = per.get(id(zdict))
    if got is None:  # the dictionary object is kept beside its decompressor: its id stays its own
        got = per[id(zdict)] = (zdict, zstandard.ZstdDecompressor(dict_data=zdict, max_window_size=MAX_WINDOW))
    return got[1]

_ORJSON_OPTS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _reject(obj):
    raise TypeError(f"not a JSON value: {type(obj).__name__}")


def validate(value, path: str = "value") -> None:
    """Check that ``value`` is an exact JSON value.

    Allowed: ``None``, ``bool``, ``int`` (any size), finite ``float``, ``str`` (any code points,
    lone surrogates included), ``list``/``tuple`` of allowed values, ``dict`` with ``str`` keys.

    Args:
        value: the value to check.
        path: how to name the value in the error message (e.g. ``"messages[3]"``).
    Raises:
        InvalidMessageError: naming the path of the first offending element and why.
    """
    stack = [(value, path, 0)]
    while stack:
        v, p, depth = stack.pop()
        t = type(v)
        if t is str or v is None or t is bool or t is int:
            continue
        if t is float:
            if not math.isfinite(v):
                raise InvalidMessageError(f"{p}: {v!r} is not valid JSON (NaN and Infinity are refused)")
            continue
        if depth >= MAX_DEPTH:
            raise InvalidMessageError(f"{p}: nesting deeper than {MAX_DEPTH} levels (the limit for stored JSON)")
        if isinstance(v, dict):
            for k, x in v.items():
                if type(k) is not str and not isinstance(k, str):
                    raise InvalidMessageError(f"{p}: dict key {k!r} is not a string")
                stack.append((x, f"{p}[{k!r}]", depth + 1))
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                stack.append((x, f"{p}[{i}]", depth + 1))
        elif isinstance(v, str):
            continue
        elif isinstance(v, bool) or isinstance(v, int):
            continue
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise InvalidMessageError(f"{p}: {v!r} is not valid JSON (NaN and Infinity are refused)")
        else:
            raise InvalidMessageError(f"{p}: {type(v).__name__} is not a JSON value")


def encode_json(value) -> tuple[bytes, bool]:
    """Encode a JSON value exactly; return ``(bytes, exact)``.

    The value should have passed :func:`validate` (this function does not detect NaN).
    ``exact`` is True when the bytes need an exact decoder (see module docstring).

    Raises:
        InvalidMessageError: the value holds something JSON cannot represent.
    """
    try:
        return orjson.dumps(value, default=_reject, option=_ORJSON_OPTS), False
    except TypeError as e:
        msg = str(e)
        if "64-bit" not in msg and "surrogates" not in msg and "Integer" not in msg:
            raise InvalidMessageError(msg) from None
    try:
        return dumps_exact(value), True
    except (TypeError, ValueError) as e:
        raise InvalidMessageError(str(e)) from None


_DIGITS_LOCK = threading.Lock()
_digits_users = 0
_digits_saved = 0


@contextmanager
def any_int_digits():
    """Lift Python's limit on int <-> decimal string conversion (4,300 digits by default,
    ``sys.set_int_max_str_digits``) while the block runs, so that integers of any size encode and
    decode exactly. The limit is process-wide: it is lifted while at least one block is inside and
    put back as it was when the last one leaves (nested and concurrent blocks are counted under a
    lock). A no-op on Pythons without the limit.
    """
    global _digits_users, _digits_saved
    if not hasattr(sys, "set_int_max_str_digits"):
        yield
        return
    with _DIGITS_LOCK:
        if _digits_users == 0:
            _digits_saved = sys.get_int_max_str_digits()
            sys.set_int_max_str_digits(0)
        _digits_users += 1
    try:
        yield
    finally:
        with _DIGITS_LOCK:
            _digits_users -= 1
            if _digits_users == 0:
                sys.set_int_max_str_digits(_digits_saved)


def dumps_exact(value) -> bytes:
    """Compact JSON that keeps big integers and surrogate code points exactly.

    Strings are written as UTF-8, except that surrogate code points (which UTF-8 cannot hold) are
    written as their 3-byte generalised-UTF-8 form (Python's ``surrogatepass``), so that two
    adjacent surrogates stay two code points instead of being merged by a JSON parser.
    """
    with any_int_digits():
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8", "surrogatepass")


def loads_exact(data: bytes, max_depth: int = MAX_DEPTH):
    """Inverse of :func:`dumps_exact`.

    Args:
        data: the JSON bytes.
        max_depth: deepest nesting accepted (checked before parsing, so no recursion limit is met).
    Raises:
        ValueError: not JSON, not UTF-8 (surrogates allowed), or nested deeper than ``max_depth``.
    """
    check_depth(data, max_depth)
    with any_int_digits():
        return json.loads(data.decode("utf-8", "surrogatepass"))


_DIGITS_AS_ZERO = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))  # translate: a digit -> "0", else " "
_LONG_NUMBER = b"0" * 19


def loads_exact_fast(data: bytes, max_depth: int = MAX_DEPTH):
    """:func:`loads_exact`, through orjson where that gives the same value: for the small JSON
    documents of the repository's own records (config, manifests), which every read parses.

    orjson reads integers past 64 bits as floats, so a document holding 19 digits in a row (an
    integer that may not fit, or anything else that looks so) goes to :func:`loads_exact`, and
    so does every document orjson refuses (lone surrogates, NaN, invalid UTF-8: the exact parser
    accepts or refuses it as before). Depth is checked first, as there.

    Args:
        data: the JSON bytes.
        max_depth: deepest nesting accepted.
    Raises:
        ValueError: not JSON, not UTF-8 (surrogates allowed), or nested deeper than ``max_depth``.
    """
    check_depth(data, max_depth)
    if _LONG_NUMBER not in data.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    with any_int_digits():
        return json.loads(data.decode("utf-8", "surrogatepass"))


def check_depth(data: bytes, limit: int = MAX_DEPTH) -> None:
    """Raise ValueError if the JSON text ``data`` nests lists/dicts deeper than ``limit`` levels.

    A linear scan over the bytes (brackets inside strings do not count); no recursion.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        return
    depth = 0
    in_str = False
    # scan only the bytes that matter: quotes, backslashes and brackets
    for m in _JSON_STRUCT.finditer(data):
        c = m.group()
        if in_str:  # an escape (backslash and the byte after it) is one match: never a quote
            if c == b'"':
                in_str = False
            continue
        if c == b'"':
            in_str = True
        elif c in (b"[", b"{"):
            depth += 1
            if depth > limit:
                raise ValueError(f"JSON nested deeper than {limit} levels")
        elif c in (b"]", b"}"):
            depth -= 1


_JSON_STRUCT = re.compile(rb'\\.|["\[\]{}]', re.S)


def decode_json(data: bytes, exact: bool, key: str = "chunk"):
    """Decode bytes written by :func:`encode_json` (``exact`` as returned there).

    Raises:
        IntegrityError: the bytes are not such JSON (names ``key``).
    """
    try:
        if exact:
            return loads_exact(data)
        return orjson.loads(data)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"not a stored JSON value: {e}") from None


def zstd_decompress(key: str, frame: bytes, limit: int, zdict: "bytes | zstandard.ZstdCompressionDict | None" = None, *,
                    expected: int | None = None, what: str = "object") -> bytes:
    """Decompress one zstd frame in bounded memory: at most ``limit`` bytes are ever produced.

    A frame whose length is known (``expected``, or else the content size its header declares)
    and at most :data:`ONE_SHOT_MAX` and ``limit`` is decompressed in one call into a buffer of
    exactly that length (a declared size above ``limit`` is refused before anything is
    allocated; a frame that does not inflate to exactly that length is corrupt). Any other frame
    is streamed through zstandard's decompression reader in 1 MiB pieces, so a frame whose header
    claims a huge content size allocates nothing up front and a frame that really inflates past
    ``limit`` is stopped at ``limit + 1`` bytes. The window size is capped at :data:`MAX_WINDOW`.

    Args:
        key: the object key, named in errors.
        frame: the compressed bytes (one zstd frame; anything after it is ignored).
        limit: the most uncompressed bytes the format allows for this object.
        zdict: raw-content dictionary, if the frame was compressed with one: its bytes, or a
            :func:`prepared_dict` (a format constant: a reused decompressor per thread).
        expected: the exact uncompressed size the format records, if it records one.
        what: what the frame is, for error messages (e.g. ``"block 1"``).
    Returns:
        The uncompressed bytes.
    Raises:
        IntegrityError: not a zstd frame, corrupt, larger than ``limit`` or not ``expected`` bytes.
    """
    if expected is not None and expected > limit:
        raise IntegrityError(key, f"{what} claims {expected} bytes uncompressed (limit {limit})")
    try:
        dctx = _plain_dctx() if zdict is None else _dict_dctx(zdict)
        if expected is None:
            # no recorded length (envelopes): the frame's declared content size, when it has one
            # within the limit, sizes a one-shot output buffer (zstd refuses a frame that inflates
            # to any other length); a declared size past the limit is refused before allocating
            declared = zstandard.frame_content_size(frame)
            if declared > limit:
                raise IntegrityError(key, f"{what} decompresses to more than {limit} bytes (the limit for it; "
                                     f"its frame declares {declared})")
            if 0 < declared <= ONE_SHOT_MAX:
                out = dctx.decompress(frame, max_output_size=declared)
                if len(out) != declared:
                    raise IntegrityError(key, f"{what} decompressed to {len(out)} bytes, its frame declares {declared}")
                return out
        elif expected <= ONE_SHOT_MAX:
            # the length is recorded (a pack block): one call into an output buffer of exactly
            # that size, about 3x faster than streaming. The frame's own content-size field, if
            # present, would size the buffer instead, so it must say the same or be absent.
            declared = zstandard.frame_content_size(frame)
            if declared != -1 and declared > expected:
                raise IntegrityError(key, f"{what} decompresses to more than the {expected} bytes recorded "
                                     f"(its frame declares {declared})")
            if declared != -1 and declared < expected:
                raise IntegrityError(key, f"{what} decompressed to {declared} bytes, expected {expected} "
                                     "(as its frame declares)")
            out = dctx.decompress(frame, max_output_size=max(expected, 1)) if expected else b""
            if len(out) != expected:
                raise IntegrityError(key, f"{what} decompressed to {len(out)} bytes, expected {expected}")
            return out
        # read in 1 MiB pieces up to one byte past what is allowed (faster than readinto a buffer
        # of the recorded size, and as fast as one-shot decompress)
        want = (limit if expected is None else expected) + 1
        out = bytearray()
        with dctx.stream_reader(frame, read_size=1 << 16, read_across_frames=False) as reader:
            while len(out) < want:
                piece = reader.read(min(_READ_PIECE, want - len(out)))
                if not piece:
                    break
                out += piece
        if expected is not None and len(out) > expected:
            raise IntegrityError(key, f"{what} decompresses to more than the {expected} bytes recorded")
    except zstandard.ZstdError as e:
        raise IntegrityError(key, f"{what} does not decompress: {e}") from None
    if len(out) > limit:
        raise IntegrityError(key, f"{what} decompresses to more than {limit} bytes (the limit for it)")
    if expected is not None and len(out) != expected:
        raise IntegrityError(key, f"{what} decompressed to {len(out)} bytes, expected {expected}")
    return bytes(out)


# --------------------------------------------------------------------------------------------
# varints (unsigned LEB128)

def put_varint(out: bytearray, n: int) -> None:
    """Append unsigned LEB128 encoding of ``n`` (>= 0) to ``out``."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def get_varint(buf, pos: int) -> tuple[int, int]:
    """Decode an unsigned LEB128 at ``pos``; return ``(value, new_pos)``. Raises ValueError."""
    n = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


# --------------------------------------------------------------------------------------------
# checksummed envelope for small mutable-key objects (config, manifests, index records)

_ENV_HEADER = struct.Struct("<4sBB16s")  # magic, version, compression (0 none, 1 zstd), blake3-128(body)


def seal_envelope(magic: bytes, version: int, body: bytes, zdict: bytes | None = None, compress: bool = True) -> bytes:
    """Wrap ``body`` as ``magic(4) | version(1) | compression(1) | checksum(16) | stored body``.

    The checksum is blake3-128 of ``magic | version | compression | stored body``.

    Compression: 0 none, 1 zstd, 2 zstd with ``zdict`` as a raw-content dictionary (a constant of
    the format, see docs/format.md); the smallest is used. ``compress=False``: always 0 (the body
    is already compressed, e.g. a version-4 manifest's ``codec | data``).
    """
    options = [(body, 0)]
    if compress:
        options.append((zstandard.ZstdCompressor(level=19, write_checksum=False).compress(body), 1))
    if zdict and compress:
        zd = zstandard.ZstdCompressionDict(zdict, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        options.append((zstandard.ZstdCompressor(level=19, dict_data=zd, write_checksum=False,
                                                 write_dict_id=False).compress(body), 2))
    stored, flag = min(options, key=lambda o: len(o[0]))
    digest = blake3.blake3(magic + bytes([version, flag]) + stored).digest(16)
    return _ENV_HEADER.pack(magic, version, flag, digest) + stored


ENVELOPE_LIMITS = {b"SNCF": 1 << 20, b"SNMF": 16 << 20, b"SNIX": 64 << 10, b"SNFW": 1 << 20,
                   b"SNFM": 16 << 20, b"SNFC": 32 << 20, b"SNGC": 16 << 20}
"""Largest stored body (bytes, after decompression) of each kind of envelope: config, manifest,
index record, per-pack forwarding record, forwarding-map shard, forwarding-record cache, GC
candidate record (docs/format.md §3, "Limits")."""


def open_envelope(key: str, magic: bytes, data: bytes, zdict: "bytes | zstandard.ZstdCompressionDict | None" = None,
                  limit: int | None = None) -> tuple[int, bytes]:
    """Verify and unwrap an envelope; return ``(version, body)``.

    Args:
        key: object key, named in errors.
        magic: the expected 4-byte magic.
        data: the object's bytes.
        zdict: the format's dictionary for this kind of object (needed for compression 2): its
            bytes or, better, a :func:`prepared_dict` of them.
        limit: the largest body (bytes) allowed; default :data:`ENVELOPE_LIMITS` for ``magic``
            (1 MiB for a magic not listed). Decompression stops there (bounded memory).
    Raises:
        IntegrityError: wrong magic, bad checksum, undecodable or too large body (names ``key``).
    """
    if limit is None:
        limit = ENVELOPE_LIMITS.get(magic, 1 << 20)
    if len(data) < _ENV_HEADER.size:
        raise IntegrityError(key, "truncated object")
    m, version, flag, digest = _ENV_HEADER.unpack_from(data)
    if m != magic:
        raise IntegrityError(key, f"bad magic {m!r}, expected {magic!r}")
    stored = data[_ENV_HEADER.size:]
    # (a RestoredEnvelope's checksum was just computed from these bytes, after the AEAD of an
    # encrypted repository authenticated them: checking it again cannot fail, §27)
    if type(data) is not RestoredEnvelope and blake3.blake3(data[:6] + stored).digest(16) != digest:
        raise IntegrityError(key, "checksum mismatch")
    if version < 1:
        raise IntegrityError(key, f"invalid format version {version}")
    if flag in (1, 2):
        if flag == 2 and not zdict:
            raise IntegrityError(key, "compressed with a dictionary this object kind does not have")
        return version, zstd_decompress(key, stored, limit, zdict if flag == 2 else None, what="body")
    if flag != 0:
        raise IntegrityError(key, f"unknown compression flag {flag}")
    if len(stored) > limit:
        raise IntegrityError(key, f"body of {len(stored)} bytes exceeds the limit {limit}")
    return version, stored
