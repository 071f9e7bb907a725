"""Forwarding records (docs/format.md "Forwarding"): where a retired pack's live entries moved.

Three encodings: the per-pack record (``fwd/<pack hex>``, ``SNFW``, the layout before the
forwarding map: read, written only by tests and migration), the forwarding-map shard
(``fwd/<hex digit>``, ``SNFM``) GC writes, and the advisory forwarding-record cache
(``gc/fwd-cache``, ``SNFC``) readers keep.

Pure functions; no I/O.
"""

from __future__ import annotations

import json

import zstandard

from ..errors import IntegrityError, InvalidInputError
from .checks import checked_ms, checked_pack_id, checked_str
from .codec import ENVELOPE_LIMITS, loads_exact, open_envelope, seal_envelope, zstd_decompress
from .config import FORMAT_VERSION

FORWARD_MAGIC = b"SNFW"


def encode_forward(to: list[bytes]) -> bytes:
    """Encode a per-pack forwarding record (the layout before the forwarding map; only tests and
    migration use it): the packs a retired pack's live entries moved to."""
    return seal_envelope(FORWARD_MAGIC, FORMAT_VERSION, json.dumps({"to": [p.hex() for p in to]}).encode())


def decode_forward(key: str, data: bytes) -> list[bytes]:
    """Decode a forwarding record; return the list of pack ids. Raises IntegrityError."""
    _, body = open_envelope(key, FORWARD_MAGIC, data)
    try:
        return [checked_pack_id(h) for h in loads_exact(body, 2)["to"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed forwarding record: {e}") from None


FWD_MAP_MAGIC = b"SNFM"

_ZSTD_FRAME = b"\x28\xb5\x2f\xfd"
_SHARD_ZSTD_MIN = 4096  # smaller shards are stored as JSON (the envelope compresses them if that helps)


def encode_forward_shard(entries: dict[bytes, tuple[list[bytes], float]]) -> bytes:
    """Encode a forwarding-map shard: retired pack id -> (the packs its live entries moved to, store
    time in seconds since the epoch (UTC) at which GC last wrote the record). ``SNFM`` envelope
    around JSON ``{"<pack hex>": [<ms>, ["<pack hex>", ...]], ...}`` (sorted), as one zstd frame
    (level 3) when it is at least 4 KiB."""
    body = json.dumps({p.hex(): [int(round(t * 1000)), [x.hex() for x in to]]
                       for p, (to, t) in sorted(entries.items())}, separators=(",", ":")).encode()
    if len(body) > ENVELOPE_LIMITS[FWD_MAP_MAGIC]:
        raise InvalidInputError(f"forwarding-map shard of {len(body)} bytes exceeds the limit "
                                f"{ENVELOPE_LIMITS[FWD_MAP_MAGIC]} (readers would refuse it)")
    if len(body) >= _SHARD_ZSTD_MIN:
        body = zstandard.ZstdCompressor(level=3).compress(body)
    return seal_envelope(FWD_MAP_MAGIC, FORMAT_VERSION, body)


def decode_forward_shard(key: str, data: bytes, shard: str | None = None) -> dict[bytes, tuple[list[bytes], float]]:
    """Inverse of :func:`encode_forward_shard`. ``shard``: the shard's hex digit; every record
    must belong to it. Raises IntegrityError on a malformed shard."""
    _, body = open_envelope(key, FWD_MAP_MAGIC, data)
    try:
        if body[:4] == _ZSTD_FRAME:
            body = zstd_decompress(key, body, ENVELOPE_LIMITS[FWD_MAP_MAGIC], what="forwarding-map shard")
        d = loads_exact(body, 3)
        out = {checked_pack_id(p): ([checked_pack_id(x) for x in v[1]], checked_ms(v[0]) / 1000.0) for p, v in d.items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed forwarding-map shard: {e}") from None
    if shard is not None and any(p.hex()[:1] != shard for p in out):
        raise IntegrityError(key, "forwarding-map shard holds a record of another shard")
    return out


FWD_CACHE_MAGIC = b"SNFC"


def encode_forward_cache(entries: dict[bytes, tuple]) -> bytes:
    """Encode the forwarding-record cache: retired pack -> ``(ETag of the shard the record was read
    from, its targets)`` or ``(ETag, targets, store time the record was written in seconds)``.
    ``SNFC`` envelope around zstd-compressed JSON ``{"<pack hex>": ["<etag>", ["<hex>", ...], <ms>?]}``."""
    def value(v):
        out = [v[0], [t.hex() for t in v[1]]]
        if len(v) > 2 and v[2] is not None:
            out.append(int(round(v[2] * 1000)))
        return out
    body = json.dumps({p.hex(): value(v) for p, v in entries.items()}, separators=(",", ":")).encode()
    if len(body) > ENVELOPE_LIMITS[FWD_CACHE_MAGIC]:
        raise InvalidInputError(f"forwarding-record cache of {len(body)} bytes exceeds the limit "
                                f"{ENVELOPE_LIMITS[FWD_CACHE_MAGIC]} (it is advisory: not written)")
    return seal_envelope(FWD_CACHE_MAGIC, FORMAT_VERSION, zstandard.ZstdCompressor(level=3).compress(body))


def decode_forward_cache(key: str, data: bytes) -> dict[bytes, tuple[str, list[bytes], float | None]]:
    """Inverse of :func:`encode_forward_cache`: pack -> ``(etag, targets, time or None)``.
    Raises IntegrityError on a malformed object."""
    _, body = open_envelope(key, FWD_CACHE_MAGIC, data)
    try:
        d = loads_exact(zstd_decompress(key, body, ENVELOPE_LIMITS[FWD_CACHE_MAGIC], what="forwarding-record cache"), 3)
        return {checked_pack_id(p): (checked_str(v[0], "ETag", empty=True), [checked_pack_id(t) for t in v[1]],
                              checked_ms(v[2]) / 1000.0 if len(v) > 2 else None) for p, v in d.items()}
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed forwarding-record cache: {e}") from None
