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

:func:`restore` returns its plaintext as one of three ``bytes`` subclasses, one per shape
(:class:`RestoredPack`, :class:`RestoredLog`, :class:`RestoredEnvelope`): the checksum in it was
computed by the reader from the very bytes it covers (after the AEAD authenticated them), so the
parser of that shape skips checking it again (docs/format.md §27 "Checksums put back"); every other
``bytes`` (a plain repository's, a form-1 or small object's, a range) is checked as always.
"""

from __future__ import annotations

import blake3

CHECKSUM = 16
"""Bytes of the checksum left out."""
MIN_ELIDABLE = 21
"""The shortest plaintext elided (a log segment's header is 21 bytes, an envelope's 22)."""
ELIDABLE_PREFIXES = ("packs/", "runs/", "fwd/", "gc/candidates/", "gc/fwd-cache", "archive/index/")
"""Key prefixes (§4) whose objects are packs, log segments, envelopes, or 0-1 byte stubs, voids and pins."""


class Restored(bytes):
    """A plaintext whose checksum :func:`restore` put back (a ``bytes``; slices are plain ``bytes``)."""

    __slots__ = ()


class RestoredPack(Restored):
    """A pack (``SNPK``) whose last 16 bytes :func:`restore` computed from the bytes before them."""

    __slots__ = ()


class RestoredLog(Restored):
    """A log segment (``SNLG``) whose bytes 5-20 :func:`restore` computed from bytes 21 on."""

    __slots__ = ()


class RestoredEnvelope(Restored):
    """An envelope whose bytes 6-21 :func:`restore` computed from bytes 0-5 and 22 on."""

    __slots__ = ()


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


def restore(elided: bytes) -> Restored:
    """The plaintext :func:`elide` made ``elided`` (bytes) from: its checksum put back, as the
    :class:`Restored` subclass of its shape (a parser of that shape need not check it again).

    Raises:
        ValueError: ``elided`` is shorter than any elided plaintext.
    """
    n = len(elided)
    if n < MIN_ELIDABLE - CHECKSUM:
        raise ValueError("an elided plaintext is too short")
    magic = elided[:4]
    if magic == b"SNPK":
        return RestoredPack(b"".join((elided, blake3.blake3(elided).digest(CHECKSUM))))
    mv = memoryview(elided)
    if magic == b"SNLG":
        return RestoredLog(b"".join((mv[:5], blake3.blake3(mv[5:]).digest(CHECKSUM), mv[5:])))
    if n < 6:
        raise ValueError("an elided envelope is too short")
    return RestoredEnvelope(b"".join((mv[:6], blake3.blake3(elided).digest(CHECKSUM), mv[6:])))
