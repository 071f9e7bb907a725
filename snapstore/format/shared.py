"""Shared objects: a large message stored once for every run that starts with it (docs/format.md §29).

Layer 0, pure. A *shared object* is an ordinary pack (§8) holding one chunk entry, written under a
pack id derived from the message's content id and a UTC day (the *epoch*): every writer saving
that message in that day computes the same id, so the second and later runs reference the first
one's object instead of storing the message again. The id is keyed (the repository's content-id
key), so it says nothing about the content to anyone without the key, and two repositories never
share an id for the same message.

Layout of a shared pack id (8 bytes): ``0xff | epoch (3 bytes, big-endian) | 4 bytes of
blake3(b"snapstore shared\\0" + epoch (3 bytes) + content id, key=K)``. GC measures a shared
pack's age from the end of its epoch (:func:`effective_mtime`): writers reference a shared pack
only during its epoch (and publish within a bounded time after it), which is what makes reuse by
writers that never saw each other safe beside a GC (the argument is in docs/format.md §29).
"""

from __future__ import annotations

EPOCH_SECONDS = 86400
"""Length of an epoch (seconds): a shared object is reused by the writers of one UTC day; the
next day's first writer stores a new one (at most one copy per message and day)."""

SHARED_MIN = 8192
"""Bytes of JSON from which a message of a run's first save is stored as a shared object. Smaller
messages cost less stored again than the request that looks a shared object up."""

SHARED_PREFIX = 0xFF
"""First byte of every shared pack id."""

_EPOCH_MAX = (1 << 24) - 1


def epoch_at(wall: float) -> int:
    """The epoch (UTC day number) of wall-clock time ``wall`` (seconds since 1970, UTC).

    Raises:
        ValueError: a time outside the epochs a pack id can name (before 1970, after year 47,000).
    """
    e = int(wall // EPOCH_SECONDS)
    if not 0 <= e <= _EPOCH_MAX:
        raise ValueError(f"time {wall!r} is outside the shared-object epochs")
    return e


def epoch_end(epoch: int) -> float:
    """Seconds since 1970 (UTC) at which epoch ``epoch`` ends."""
    return float((epoch + 1) * EPOCH_SECONDS)


def shared_pack_id(hasher, content_id: bytes, epoch: int) -> bytes:
    """The pack id of the shared object holding message ``content_id`` in epoch ``epoch``.

    Args:
        hasher: the repository's :class:`~snapstore.format.ids.Hasher` (keyed: the id is not
            derivable without the repository's content-id key).
        content_id: the message's 16-byte content id.
        epoch: the epoch (:func:`epoch_at`), 0 to 2^24 - 1.
    Returns:
        8 bytes, starting with :data:`SHARED_PREFIX`.
    Raises:
        ValueError: an epoch out of range or a content id that is not 16 bytes.
    """
    if not 0 <= epoch <= _EPOCH_MAX or len(content_id) != 16:
        raise ValueError("shared pack id: epoch out of range or content id not 16 bytes")
    eb = epoch.to_bytes(3, "big")
    return bytes([SHARED_PREFIX]) + eb + hasher.content_id(b"snapstore shared\0" + eb + content_id)[:4]


def shared_epoch(pack_id: bytes) -> int | None:
    """The epoch a shared pack id names, or None when ``pack_id`` is not shaped as one.

    (A random pack id of an ordinary pack starts with ``0xff`` one time in 256: GC then treats it
    as shared only when its epoch is plausible, see :func:`effective_mtime`.)"""
    if len(pack_id) != 8 or pack_id[0] != SHARED_PREFIX:
        return None
    return int.from_bytes(pack_id[1:4], "big")


def effective_mtime(pack_id: bytes, mtime: float, now: float) -> float:
    """The time from which GC measures the age of pack ``pack_id`` (store time ``mtime``, seconds):
    for a shared pack of an epoch that has begun by ``now`` (store time), the end of that epoch if
    later than ``mtime``; for any other pack ``mtime``. A random id that merely starts with
    ``0xff`` and names a future epoch is an ordinary pack (it is aged by its ``mtime``)."""
    e = shared_epoch(pack_id)
    if e is None:
        return mtime
    end = epoch_end(e)
    if end - EPOCH_SECONDS > now:
        return mtime
    return max(mtime, end)
