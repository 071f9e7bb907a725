"""Content ids and the mapping of user-supplied names (run ids, checkpoint ids) to object keys.

Pure functions; no I/O. See ``docs/format.md`` sections "Primitives" and "Keys".
"""

from __future__ import annotations

import base64
import os
import re
import threading
import time

import blake3

from ..errors import InvalidCheckpointIdError, InvalidRunIdError

ID_BYTES = 16
"""Content ids are the first 16 bytes (128 bits) of a keyed blake3 digest."""

PACK_ID_BYTES = 8
"""Pack ids are 8 random bytes; a writer whose create-only pack write collides picks another id."""

NAME_INLINE_MAX = 96
"""Encoded names longer than this many characters are replaced by a hash (see :func:`name_key`)."""


class Hasher:
    """Keyed blake3 hashing with a repository's 32-byte key.

    Args:
        key: the repository key (32 bytes, from the repository config).
    """

    def __init__(self, key: bytes):
        if len(key) != 32:
            raise ValueError("repository key must be 32 bytes")
        self.key = key

    def content_id(self, data: bytes) -> bytes:
        """Return the 16-byte content id of ``data`` (keyed blake3, truncated)."""
        return blake3.blake3(data, key=self.key).digest(ID_BYTES)

    def new_digest(self) -> "blake3.blake3":
        """Return an incremental keyed hasher (for list digests)."""
        return blake3.blake3(key=self.key)

    def exact_tag(self, digest_hex: str, exact: int, arrays: int | None = None) -> str:
        """The keyed tag of a manifest's ``messages.x`` and ``messages.a`` (docs/format.md §11):
        binds how many of the list's messages need the exact parser, and whether the run's array
        blocks held exactly this list when it was saved (``arrays``: 0 or 1; None for records
        without ``messages.a``), to the list digest under the repository key, so that a record
        re-sealed with another ``x`` or ``a`` is not believed (16 hex digits)."""
        data = b"messages.x\x00" + digest_hex.encode() + b"\x00" + str(exact).encode()
        if arrays is not None:
            data += b"\x00a" + str(arrays).encode()
        return blake3.blake3(data, key=self.key).hexdigest(8)

    def name_hash(self, data: bytes) -> str:
        """Return the 32-hex-char keyed hash used for long names."""
        return blake3.blake3(b"name\x00" + data, key=self.key).hexdigest(ID_BYTES)


_PACK_HEX = re.compile(r"[0-9a-f]{16}")
_ID_HEX = re.compile(r"[0-9a-f]{32}")


def is_pack_hex(text) -> bool:
    """True when ``text`` is a ``str`` of exactly 16 lowercase hex digits (a pack id as stored)."""
    return isinstance(text, str) and _PACK_HEX.fullmatch(text) is not None


def is_id_hex(text) -> bool:
    """True when ``text`` is a ``str`` of exactly 32 lowercase hex digits (a content id as stored)."""
    return isinstance(text, str) and _ID_HEX.fullmatch(text) is not None


def check_run_id(run_id) -> str:
    """Return ``run_id`` if it is a non-empty ``str``; else raise InvalidRunIdError."""
    if not isinstance(run_id, str) or run_id == "":
        raise InvalidRunIdError(f"run id must be a non-empty string, got {run_id!r}")
    return run_id


def check_checkpoint_id(checkpoint_id) -> str:
    """Return ``checkpoint_id`` if it is a non-empty ``str``; else raise InvalidCheckpointIdError."""
    if not isinstance(checkpoint_id, str) or checkpoint_id == "":
        raise InvalidCheckpointIdError(f"checkpoint id must be a non-empty string, got {checkpoint_id!r}")
    return checkpoint_id


_B32 = "abcdefghijklmnopqrstuvwxyz234567"
_B32_VALUE = {c: i for i, c in enumerate(_B32)}


def b32_lower(raw: bytes) -> str:
    """``base64.b32encode(raw)`` in lower case without its ``=`` padding, computed on one integer
    (the standard library builds a 1,024-entry table on its first call, about 50 us of a fresh
    process's first read; this costs about 0.2 us per character)."""
    n = len(raw)
    if not n:
        return ""
    chars = (8 * n + 4) // 5
    v = int.from_bytes(raw, "big") << (5 * chars - 8 * n)
    a = _B32
    return "".join([a[(v >> s) & 31] for s in range(5 * chars - 5, -1, -5)])


def _b32_lower_decode(enc: str) -> bytes | None:
    """Bytes whose :func:`b32_lower` could be ``enc``, or None when ``enc`` holds a character
    outside ``[a-z2-7]`` (a non-canonical ``enc`` still decodes: callers compare the re-encoding)."""
    v = 0
    get = _B32_VALUE.get
    for c in enc:
        d = get(c)
        if d is None:
            return None
        v = (v << 5) | d
    n = 5 * len(enc) // 8
    return (v >> (5 * len(enc) - 8 * n)).to_bytes(n, "big")


def _b32_chars(nbytes: int) -> int:
    """Length of :func:`b32_lower` of ``nbytes`` bytes."""
    return (8 * nbytes + 4) // 5


def name_key(name: str, hasher: Hasher) -> str:
    """Map an arbitrary non-empty string to one key segment that cannot escape or collide.

    The UTF-8 bytes of ``name`` (lone surrogates kept via ``surrogatepass``) are encoded as
    lowercase, unpadded base32 and prefixed with ``b``; if that is longer than
    :data:`NAME_INLINE_MAX` characters the segment is ``h`` + a 32-hex-char keyed hash instead.
    Only ``[a-z2-7]`` and hex digits appear, so names differing only in case (``A``/``a``) map to
    different lowercase segments, safe on case-insensitive file systems.
    """
    raw = name.encode("utf-8", "surrogatepass")
    if _b32_chars(len(raw)) + 1 <= NAME_INLINE_MAX:
        return "b" + b32_lower(raw)
    return "h" + hasher.name_hash(raw)


def decode_name_key(segment: str) -> str | None:
    """Inverse of :func:`name_key` for inline (``b``) segments; None for hashed (``h``) ones."""
    if not segment.startswith("b"):
        return None
    enc = segment[1:].upper()
    enc += "=" * (-len(enc) % 8)
    return base64.b32decode(enc).decode("utf-8", "surrogatepass")


def name_from_key(segment: str) -> str | None:
    """The name an inline key segment (``b`` + base32, :func:`name_key`) encodes; None for a hashed
    segment or one that is not a valid encoding (a stray or hostile key)."""
    if not segment.startswith("b"):
        return None
    raw = _b32_lower_decode(segment[1:])
    if not raw or b32_lower(raw) != segment[1:]:
        return None
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def name_is_inline(name: str) -> bool:
    """Whether :func:`name_key` encodes ``name`` inline (so its key segment gives the name back)."""
    return _b32_chars(len(name.encode("utf-8", "surrogatepass"))) + 1 <= NAME_INLINE_MAX


def run_digest(run_id: str) -> str:
    """``rd`` of a compact manifest (docs/format.md §11): 8 hex digits of unkeyed
    ``blake3(b"run\\0" + UTF-8 of the run id)[:4]``; ties a record to the run its key names."""
    return blake3.blake3(b"run\0" + run_id.encode("utf-8", "surrogatepass")).hexdigest(4)


_id_lock = threading.Lock()
_last_ms = 0
_counter = 0
_GENERATED = re.compile(r"^[0-9a-f]{20}-([0-9a-f]{1,16})$")


def new_checkpoint_id(seq: int) -> str:
    """Return a new checkpoint id that sorts by creation time and names its sequence number.

    Layout: 12 hex digits of milliseconds since the epoch (UTC), 4 hex digits of a per-process
    counter (ids made in the same millisecond stay in order), 4 random hex digits, ``-``, and the
    checkpoint's sequence number in hex. Readers find such a checkpoint's manifest directly from
    its id; any other id (e.g. caller-supplied) goes through an index record.
    """
    global _last_ms, _counter
    with _id_lock:
        ms = int(time.time() * 1000)
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
        else:
            _counter = 0
        _last_ms = ms
        c = _counter & 0xFFFF
    return f"{ms:012x}{c:04x}{os.urandom(2).hex()}-{seq:x}"


def seq_hint(checkpoint_id: str) -> int | None:
    """The sequence number named by a generated checkpoint id, or None (see :func:`new_checkpoint_id`)."""
    m = _GENERATED.match(checkpoint_id)
    return int(m.group(1), 16) if m else None


def new_pack_id() -> bytes:
    """A random pack id (:data:`PACK_ID_BYTES` bytes) for an ordinary pack, never starting with
    ``0xff``: that first byte is kept for shared packs (docs/format.md §29), so that a random id is
    never taken for one (older releases drew it one time in 256; readers and GC still tell those
    apart by their epoch)."""
    while True:
        pid = os.urandom(PACK_ID_BYTES)
        if pid[0] != 0xFF:
            return pid


def new_write_id() -> str:
    """Return a random 64-bit write id (hex), stamped into manifests to recognise one's own writes."""
    return os.urandom(8).hex()
