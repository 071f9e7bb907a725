"""Checksum elision: the 16-byte blake3 checksum an object's own format carries, left out of a
sealed object of form 2 and recomputed on reading (docs/format.md §27 "Sealed objects, form 2").

Pure functions; no I/O. Three shapes, chosen by the plaintext's first 4 bytes (which elision keeps):

* ``SNPK`` (a pack, §8): the last 16 bytes are ``blake3-128`` of everything before them;
* ``SNLG`` (a log segment, §12): bytes 5-20 are ``blake3-128`` of bytes 21 onwards;
* anything else (an envelope, §2: manifests, index, removal, outcome, GC, forwarding records):
  bytes 6-21 are ``blake3-128`` of bytes 0-5 and 22 onwards.

A plaintext is elidable when its shape's checksum holds and it has at least :data:`MIN_ELIDABLE`
bytes; the elided plaintext is the plaintext without those 16 bytes. Only keys of the kinds that
hold such objects (:func:`elidable_key`) are elided, so that a store can tell from a key and a
stored size alone which layout an object has.
"""

from __future__ import annotations

import blake3

CHECKSUM = 16
"""Bytes of the checksum left out."""
MIN_ELIDABLE = 21
"""The shortest plaintext elided (a log segment's header is 21 bytes, an envelope's 22)."""
ELIDABLE_PREFIXES = ("packs/", "runs/", "fwd/", "gc/candidates/", "gc/fwd-cache", "archive/index/")
"""Key prefixes (§4) whose objects are packs, log segments, envelopes, or 0-1 byte stubs, voids and pins."""


def elidable_key(key: str) -> bool:
    """True if objects under ``key`` (str) are elided when their checksum holds (form 2)."""
    return key.startswith(ELIDABLE_PREFIXES)


def _digest(data) -> bytes:
    return blake3.blake3(data).digest(CHECKSUM)


def elide(plain: bytes) -> bytes | None:
    """``plain`` (bytes) without its own checksum, or None when it has none that holds (too short,
    or the 16 bytes of its shape are not the checksum of the rest)."""
    n = len(plain)
    if n < MIN_ELIDABLE:
        return None
    mv = memoryview(plain)
    magic = bytes(mv[:4])
    if magic == b"SNPK":
        return bytes(mv[:n - CHECKSUM]) if _digest(mv[:n - CHECKSUM]) == mv[n - CHECKSUM:] else None
    if magic == b"SNLG":
        return bytes(mv[:5]) + bytes(mv[21:]) if _digest(mv[21:]) == mv[5:21] else None
    if n < 22:
        return None
    rest = bytes(mv[:6]) + bytes(mv[22:])
    return rest if _digest(rest) == mv[6:22] else None


def restore(elided: bytes) -> bytes:
    """The plaintext :func:`elide` made ``elided`` (bytes) from: its checksum put back.

    Raises:
        ValueError: ``elided`` is shorter than any elided plaintext.
    """
    n = len(elided)
    if n < MIN_ELIDABLE - CHECKSUM:
        raise ValueError("an elided plaintext is too short")
    magic = elided[:4]
    if magic == b"SNPK":
        return elided + _digest(elided)
    if magic == b"SNLG":
        return elided[:5] + _digest(elided[5:]) + elided[5:]
    if n < 6:
        raise ValueError("an elided envelope is too short")
    return elided[:6] + _digest(elided) + elided[6:]
