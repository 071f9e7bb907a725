"""Field checks shared by the format's JSON records (manifests, index and forwarding records,
the config): each returns the value when it has the required type and range.

Pure functions; no I/O. Each raises ``ValueError`` naming the field; the decoders turn that into
an :class:`~snapstore.errors.IntegrityError` naming the object.
"""

from __future__ import annotations

from .ids import is_pack_hex
from .keys import SEQ_MAX


def checked_str(v, what: str, empty: bool = False) -> str:
    """``v`` if it is a string (non-empty unless ``empty``); ``what`` names the field in the
    error. Raises ValueError."""
    if not isinstance(v, str) or (not empty and v == ""):
        raise ValueError(f"{what} is not a{'' if empty else ' non-empty'} string")
    return v


def checked_int(v, what: str, hi: int = SEQ_MAX) -> int:
    """``v`` if it is an ``int`` (not ``bool``) in ``[0, hi)``; ``what`` names the field in the
    error. Raises ValueError."""
    if type(v) is not int or not 0 <= v < hi:
        raise ValueError(f"{what} is not an integer in [0, {hi})")
    return v


def checked_pack_id(h) -> bytes:
    """A pack id (8 bytes) from its stored hex form; ValueError unless exactly 16 lowercase hex digits."""
    if not is_pack_hex(h):
        raise ValueError(f"pack id {str(h)[:40]!r} is not 16 lowercase hex digits")
    return bytes.fromhex(h)


def checked_ms(v) -> int:
    """``v`` if it is a time in milliseconds since the epoch (an ``int`` in ``[0, 2**53)``). Raises ValueError."""
    if type(v) is not int or not 0 <= v < 1 << 53:
        raise ValueError(f"time {str(v)[:40]!r} is not milliseconds since the epoch")
    return v
