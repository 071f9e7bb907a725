"""Sealed objects, form 3: form 2 for every object except packs of at most 64 KiB, which are
AES-256-GCM sealed under a synthetic nonce stored in front (docs/format.md §27 "Sealed objects,
form 3").

Pure functions; no I/O. A form-3 repository seals exactly as form 2 (:mod:`sealed2`) except for
objects under ``packs/`` whose plaintext fits one segment, in two layouts::

    elided3  (a ``packs/`` key, a plaintext P of 21 to 65,552 bytes whose checksum holds):
             N (12) | GCM(g, N, P without its checksum, aad3(1)) | key id (4)        len(P) + 16
    small3   (any other ``packs/`` plaintext of at most 65,536 bytes):
             N (12) | GCM(g, N, P, aad3(0)) | key id (4)                             len(P) + 32

    g        = blake3("snapstore sealed objects gcm", key=M)        one AES-256-GCM key per data key
    s        = blake3("snapstore synthetic nonces", key=M)          the nonce key, never an AEAD key
    N        = blake3(aad3(e) | X, key=s)[:12]                      X: the bytes encrypted
    aad3(e)  = "SNE3" | u8 e | key id (4) | u64 BE len(P) | repo id (8) | utf-8 key

Larger ``packs/`` objects and every other key are form 2's (GCM-SIV: nonces from the key). The
nonce is a PRF of everything the sealing takes (the authenticated data, hence the key, and the
plaintext), so one ``(g, N)`` pair encrypts two different plaintexts only if two different inputs
of a 96-bit PRF collide: whatever the key is (a pack id drawn twice, a create-only PUT refused
after its body was sent, a retried write of other bytes). The reader takes ``N`` from the object
and hashes nothing to open it.
"""

from __future__ import annotations

import blake3

from . import elide, sealed2

MAGIC = b"SNE3"
NONCE = 12
TAG = 16
KEY_ID = sealed2.KEY_ID
PREFIX = "packs/"
"""Keys of the objects form 3 seals with AES-256-GCM (when they fit one segment)."""
SMALL_MAX = sealed2.SEGMENT + TAG + NONCE + KEY_ID
"""The largest stored size of an elided3 or small3 object (65,568); form 2's large objects are at
least 65,581 bytes, so a suffix read of ``SMALL_MAX + 1`` bytes tells them apart."""
SMALL_MIN = NONCE + TAG + KEY_ID
"""The smallest stored size of a small3 object (an empty plaintext: 32)."""
ELIDED_MIN = elide.MIN_ELIDABLE + NONCE + KEY_ID
"""The smallest stored size of an elided3 object (a 21-byte plaintext: 37)."""
ELIDED, SMALL = "elided3", "small3"


def gcm_key(master: bytes) -> bytes:
    """The AES-256-GCM key (32 bytes) of every form-3 pack under the data key whose object master
    key is ``master`` (32 bytes)."""
    return blake3.blake3(b"snapstore sealed objects gcm", key=master).digest(32)


def nonce_key(master: bytes) -> bytes:
    """The key (32 bytes) of the synthetic nonces under the object master key ``master``."""
    return blake3.blake3(b"snapstore synthetic nonces", key=master).digest(32)


def is_gcm_key(key: str) -> bool:
    """True if objects under ``key`` (str) take a form-3 GCM layout when they fit one segment."""
    return key.startswith(PREFIX)


def stored_size(plain_len: int, layout: str) -> int:
    """Stored bytes of a form-3 GCM object of ``plain_len`` plaintext bytes in ``layout``."""
    return plain_len + (NONCE + KEY_ID if layout == ELIDED else NONCE + TAG + KEY_ID)


def layout_of(key: str, stored_len: int) -> tuple[str, int] | None:
    """``(layout, plaintext bytes)`` of a form-3 object of ``stored_len`` bytes under ``key``
    (a form-2 layout for keys and sizes form 3 leaves to form 2), or None when no form-3 object
    has that size. (A ``packs/`` object of 37 to 65,568 bytes is elided3; a plaintext without a
    checksum that holds stored there, never written by snapstore, is a small3 object read as one,
    and listed 16 bytes longer than it is.)"""
    if not is_gcm_key(key):
        return sealed2.layout_of(key, stored_len)
    if stored_len > SMALL_MAX:
        lay = sealed2.layout_of(key, stored_len)
        return lay if lay is not None and lay[0] == sealed2.LARGE else None
    if stored_len >= ELIDED_MIN:
        return ELIDED, stored_len - NONCE - KEY_ID
    if stored_len >= SMALL_MIN:
        return SMALL, stored_len - SMALL_MIN
    return None


def aad(elided: bool, key_id: bytes, plain_len: int, repo_id: bytes, key: str) -> bytes:
    """The authenticated data of the form-3 GCM object ``key`` (see the module doc)."""
    return b"".join((MAGIC, b"\x01" if elided else b"\x00", key_id, plain_len.to_bytes(8, "big"), repo_id,
                     key.encode()))


class Keyed:
    """The form-3 material of one data key in one repository, derived once and reused for every
    object (docs/format.md §27 "Sealed objects, form 3"): the AES-256-GCM AEAD, the nonce key and
    the constant prefixes of ``aad3(e)``.

    Args:
        aead: ``cryptography``'s ``AESGCM`` for :func:`gcm_key` of the data key's master.
        nonce_key: :func:`nonce_key` of that master (32 bytes).
        key_id: the data key's id (4 bytes). repo_id: the repository id (8 bytes).
    """

    __slots__ = ("aead", "nonce_key", "key_id", "repo_id", "_a")

    def __init__(self, aead, nonce_key: bytes, key_id: bytes, repo_id: bytes):
        self.aead, self.nonce_key, self.key_id, self.repo_id = aead, nonce_key, key_id, repo_id
        self._a = (MAGIC + b"\x00" + key_id, MAGIC + b"\x01" + key_id)

    def seal(self, key: str, plain: bytes) -> bytes | None:
        """The stored bytes of ``plain`` (bytes) under ``key`` in a form-3 GCM layout, or None when
        ``key`` or the size leaves it to form 2 (not a ``packs/`` key, or more than one segment
        and not elided)."""
        if not key.startswith(PREFIX):
            return None
        n = len(plain)
        if n > sealed2.SEGMENT + elide.CHECKSUM:
            return None
        short = elide.elide(plain)
        if short is None:
            if n > sealed2.SEGMENT:
                return None
            short, e = plain, 0
        else:
            e = 1
        a = b"".join((self._a[e], n.to_bytes(8, "big"), self.repo_id, key.encode()))
        h = blake3.blake3(a, key=self.nonce_key)
        h.update(short)
        nc = h.digest(NONCE)
        return b"".join((nc, self.aead.encrypt(nc, short, a), self.key_id))

    def open_stored(self, key: str, data) -> bytes:
        """Decrypt a whole elided3 or small3 object ``data`` (bytes of :data:`SMALL_MIN` to
        :data:`SMALL_MAX` bytes under a ``packs/`` key, ending in this key's id: the caller
        checked).

        Returns:
            The plaintext; an elided one as :func:`elide.restore` returns it (its checksum put
            back, typed by its shape).
        Raises:
            cryptography.exceptions.InvalidTag: it does not authenticate; ValueError: malformed.
        """
        mv = memoryview(data)
        nc = mv[:NONCE]
        body = mv[NONCE:len(data) - KEY_ID]
        n = len(body)  # the ciphertext: len(P) if elided, len(P) + 16 if small
        tail = self.repo_id + key.encode()
        if len(data) >= ELIDED_MIN:
            try:
                return elide.restore(self.aead.decrypt(nc, body, b"".join((self._a[1], n.to_bytes(8, "big"), tail))))
            except _invalid_tag():  # a small3 object stored at an elided size
                pass
        return self.aead.decrypt(nc, body, b"".join((self._a[0], (n - TAG).to_bytes(8, "big"), tail)))


_invalid_tag_class = None


def _invalid_tag():
    """``cryptography``'s InvalidTag, imported on first use."""
    global _invalid_tag_class
    if _invalid_tag_class is None:
        from cryptography.exceptions import InvalidTag
        _invalid_tag_class = InvalidTag
    return _invalid_tag_class
