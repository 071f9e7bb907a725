"""Checkpoint-id index records (``runs/<R>/c/<id>``, docs/format.md "Index records"): which log
position holds a checkpoint, in an ``SNIX`` envelope around JSON ``{"seq", "write_id"}``.

Pure functions; no I/O.
"""

from __future__ import annotations

import json

from ..errors import IntegrityError
from .checks import checked_int, checked_str
from .codec import loads_exact, open_envelope, seal_envelope
from .config import FORMAT_VERSION

INDEX_MAGIC = b"SNIX"


def encode_index(seq: int, write_id: str) -> bytes:
    """Encode a checkpoint-id index record (``SNIX`` envelope of ``{"seq", "write_id"}``)."""
    return seal_envelope(INDEX_MAGIC, FORMAT_VERSION, json.dumps({"seq": seq, "write_id": write_id}, separators=(",", ":")).encode())


def decode_index(key: str, data: bytes) -> tuple[int, str]:
    """Decode an index record; return ``(seq, write_id)``. Raises IntegrityError."""
    _, body = open_envelope(key, INDEX_MAGIC, data)
    try:
        d = loads_exact(body, 1)
        return checked_int(d["seq"], "seq"), checked_str(d["write_id"], "write_id", empty=True)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed index record: {e}") from None
