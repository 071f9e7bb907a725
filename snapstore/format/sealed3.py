"""Sealed objects, form 3: form 2 for every object except packs of at most 64 KiB, which are
AES-256-GCM sealed under a synthetic nonce stored in front (docs/format.md §27 "Sealed objects,
form 3").

Pure functions; no I/O. A form-3 repository seals exactly as form 2 (:mod:`sealed2`) except for
objects under ``packs/`` whose plaintext fits one segment, in two layouts::

    elided3  (a ``packs/<h2>/<h>`` key, a plaintext P of 34 to 65,565 bytes that begins with
             "SNPK" | u8 1 | the pack id the key names, and ends in its checksum, which holds):
             N (12) | GCM(g, N, X = P[13 : len(P) - 16], aad3(1)) | key id (4)           len(P) + 3
    small3   (any other ``packs/`` plaintext of at most 65,536 bytes):
             N (12) | GCM(g, N, X = P, aad3(0)) | key id (4)                             len(P) + 32

    g        = blake3("snapstore sealed objects gcm", key=M)        one AES-256-GCM key per data key
    s        = blake3("snapstore synthetic nonces", key=M)          the nonce key, never an AEAD key
    N        = blake3(aad3(e) | X, key=s)[:12]                      X: the bytes encrypted
    aad3(e)  = "SNE3" | u8 e | key id (4) | u64 BE len(P) | repo id (8) | utf-8 key

An elided3 pack leaves out its 13-byte head (the magic, the version and the pack id, which its
key names) and its checksum: the reader puts all three back. Larger ``packs/`` objects and every
other key are form 2's (GCM-SIV: nonces from the key). The
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
HEAD = 13
"""Bytes of a pack's head left out of an elided3 object: "SNPK", the version (1), the pack id."""
PACK_HEAD = b"SNPK\x01"
ELIDED_MIN = SMALL_MIN + 5
"""The smallest stored size of an elided3 object (37: 5 bytes of ``X``, a 34-byte pack), so that
small3 objects of 0 to 4 bytes (stubs, voids) keep sizes of their own."""
ELIDED_PLAIN_MAX = sealed2.SEGMENT + HEAD + elide.CHECKSUM
"""The largest plaintext elided3 (65,565 bytes: ``X`` of one segment)."""
_OVER = NONCE + TAG + KEY_ID - HEAD - elide.CHECKSUM  # an elided3 object's stored bytes over len(P): 3
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
    return plain_len + (_OVER if layout == ELIDED else SMALL_MIN)


def pack_id_of(key: str) -> bytes | None:
    """The 8-byte pack id a ``packs/<h[0:2]>/<h>`` key names, or None for any other key."""
    if len(key) != 25 or not key.startswith(PREFIX) or key[8] != "/" or key[6:8] != key[9:11]:
        return None
    try:
        return bytes.fromhex(key[9:])
    except ValueError:
        return None


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
    if stored_len >= ELIDED_MIN and pack_id_of(key) is not None:
        return ELIDED, stored_len - _OVER
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
        if n > ELIDED_PLAIN_MAX:
            return None
        pid = pack_id_of(key)
        mv = memoryview(plain)
        if pid is not None and n >= ELIDED_MIN - _OVER and mv[:HEAD] == PACK_HEAD + pid \
                and blake3.blake3(mv[:n - elide.CHECKSUM]).digest(elide.CHECKSUM) == mv[n - elide.CHECKSUM:]:
            short, e = mv[HEAD:n - elide.CHECKSUM], 1
        elif n > sealed2.SEGMENT:
            return None
        else:
            short, e = plain, 0
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
        size = len(data)
        body = mv[NONCE:size - KEY_ID]
        tail = self.repo_id + key.encode()
        if size >= ELIDED_MIN:
            pid = pack_id_of(key)
            if pid is not None:
                try:
                    x = self.aead.decrypt(nc, body, b"".join((self._a[1], (size - _OVER).to_bytes(8, "big"), tail)))
                except sealed2.invalid_tag():  # a small3 object stored at an elided size
                    pass
                else:  # the head and the checksum put back (the pack parser skips checking it again)
                    return elide.restore(b"".join((PACK_HEAD, pid, x)))
        return self.aead.decrypt(nc, body, b"".join((self._a[0], (size - SMALL_MIN).to_bytes(8, "big"), tail)))
