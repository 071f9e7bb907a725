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
import struct

import blake3
import orjson
import zstandard

from ..errors import IntegrityError, InvalidMessageError

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
        if depth > 5000:
            raise InvalidMessageError(f"{p}: nesting deeper than 5000 levels")
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


def dumps_exact(value) -> bytes:
    """Compact JSON that keeps big integers and surrogate code points exactly.

    Strings are written as UTF-8, except that surrogate code points (which UTF-8 cannot hold) are
    written as their 3-byte generalised-UTF-8 form (Python's ``surrogatepass``), so that two
    adjacent surrogates stay two code points instead of being merged by a JSON parser.
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8", "surrogatepass")


def loads_exact(data: bytes):
    """Inverse of :func:`dumps_exact`."""
    return json.loads(data.decode("utf-8", "surrogatepass"))


def decode_json(data: bytes, exact: bool):
    """Decode bytes written by :func:`encode_json` (``exact`` as returned there)."""
    if exact:
        return loads_exact(data)
    return orjson.loads(data)


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


def seal_envelope(magic: bytes, version: int, body: bytes, zdict: bytes | None = None) -> bytes:
    """Wrap ``body`` as ``magic(4) | version(1) | compression(1) | checksum(16) | stored body``.

    The checksum is blake3-128 of ``magic | version | compression | stored body``.

    Compression: 0 none, 1 zstd, 2 zstd with ``zdict`` as a raw-content dictionary (a constant of
    the format, see docs/format.md); the smallest is used.
    """
    options = [(body, 0), (zstandard.ZstdCompressor(level=19, write_checksum=False).compress(body), 1)]
    if zdict:
        zd = zstandard.ZstdCompressionDict(zdict, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        options.append((zstandard.ZstdCompressor(level=19, dict_data=zd, write_checksum=False,
                                                 write_dict_id=False).compress(body), 2))
    stored, flag = min(options, key=lambda o: len(o[0]))
    digest = blake3.blake3(magic + bytes([version, flag]) + stored).digest(16)
    return _ENV_HEADER.pack(magic, version, flag, digest) + stored


def open_envelope(key: str, magic: bytes, data: bytes, zdict: bytes | None = None) -> tuple[int, bytes]:
    """Verify and unwrap an envelope; return ``(version, body)``.

    Args:
        key: object key, named in errors.
        magic: the expected 4-byte magic.
        data: the object's bytes.
        zdict: the format's dictionary for this kind of object (needed for compression 2).
    Raises:
        IntegrityError: wrong magic, bad checksum or undecodable body (names ``key``).
    """
    if len(data) < _ENV_HEADER.size:
        raise IntegrityError(key, "truncated object")
    m, version, flag, digest = _ENV_HEADER.unpack_from(data)
    if m != magic:
        raise IntegrityError(key, f"bad magic {m!r}, expected {magic!r}")
    stored = data[_ENV_HEADER.size:]
    if blake3.blake3(data[:6] + stored).digest(16) != digest:
        raise IntegrityError(key, "checksum mismatch")
    if version < 1:
        raise IntegrityError(key, f"invalid format version {version}")
    if flag in (1, 2):
        try:
            if flag == 2:
                if not zdict:
                    raise IntegrityError(key, "compressed with a dictionary this object kind does not have")
                zd = zstandard.ZstdCompressionDict(zdict, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
                return version, zstandard.ZstdDecompressor(dict_data=zd).decompress(stored)
            return version, zstandard.ZstdDecompressor().decompress(stored)
        except zstandard.ZstdError as e:
            raise IntegrityError(key, f"cannot decompress: {e}") from None
    if flag != 0:
        raise IntegrityError(key, f"unknown compression flag {flag}")
    return version, stored
