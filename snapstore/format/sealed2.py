"""Sealed objects, form 2: AES-256-GCM-SIV with nonces derived from the object's key and the
object's own checksum left out (docs/format.md §27 "Sealed objects, form 2").

Pure functions; no I/O. Three layouts, told apart by the object's key (:func:`elide.elidable_key`)
and its stored size alone, so that LIST and HEAD report exact plaintext sizes::

    elided  (an elidable key, a plaintext P of 21 to 65,552 bytes whose checksum holds):
            GCM-SIV(k, nonce(0, last), P without its checksum, aad(1)) | key id (4)    len(P) + 4
    small   (any other plaintext of at most 65,536 bytes):
            GCM-SIV(k, nonce(0, last), P, aad(0)) | key id (4)                       len(P) + 20
    large   (more than 65,536 bytes, not elided; n >= 2 segments of 65,536 bytes, the last shorter):
            seg_0 | ... | seg_{n-1} | u64 BE len(P) | key id (4)                     len(P) + 16 n + 12
            seg_i = GCM-SIV(k, nonce(i, i = n-1), P_i, aad(0))

    k          = blake3("snapstore sealed objects siv", key=M)   one key per data key
    nonce(i,l) = blake3("snapstore siv nonce" | u32 BE i | u8 l | repo id (8) | utf-8 key)[:12]
    aad(e)     = "SNE2" | u8 e | key id (4) | u64 BE len(P) | repo id (8) | utf-8 key

``M`` is the data key's object master key (form 1's, :func:`keyslots.object_master`).
"""

from __future__ import annotations

import struct

import blake3

from . import elide

MAGIC = b"SNE2"
from .keyslots import CIPHER_SIV as CIPHER  # noqa: E402  (the config names form 2 by its cipher)
"""The config's ``encryption.cipher`` of a repository whose objects are sealed in form 2."""
SEGMENT = 64 << 10
TAG = 16
KEY_ID = 4
LEN = 8
CSEG = SEGMENT + TAG
"""Stored bytes of a full segment of a large object."""
SMALL_MAX = SEGMENT + TAG + KEY_ID
"""The largest stored size of an elided or small object (65,556); large objects are at least
65,581 bytes, so a suffix read of ``SMALL_MAX + 1`` bytes tells the two apart."""
LARGE_TRAILER = LEN + KEY_ID
ELIDED, SMALL, LARGE = "elided", "small", "large"


def object_key(master: bytes) -> bytes:
    """The AES-256-GCM-SIV key (32 bytes) of every form-2 object under the data key whose object
    master key is ``master`` (32 bytes)."""
    return blake3.blake3(b"snapstore sealed objects siv", key=master).digest(32)


def nsegments(plain_len: int) -> int:
    """Segments of a small or large object of ``plain_len`` bytes (at least 1)."""
    return max(1, -(-plain_len // SEGMENT))


def stored_size(plain_len: int, layout: str) -> int:
    """Stored bytes of an object of ``plain_len`` plaintext bytes in ``layout``."""
    if layout == ELIDED:
        return plain_len + KEY_ID
    if layout == SMALL:
        return plain_len + TAG + KEY_ID
    return plain_len + TAG * nsegments(plain_len) + LARGE_TRAILER


def layout_of(key: str, stored_len: int) -> tuple[str, int] | None:
    """``(layout, plaintext bytes)`` of a form-2 object of ``stored_len`` bytes under ``key``, or
    None when no form-2 object has that size. (An elidable key's object of 25 to 65,556 bytes is
    elided; a plaintext without a checksum that holds stored there, never written by snapstore,
    is a small object read as one, and listed 16 bytes longer than it is.)"""
    if stored_len < TAG + KEY_ID:
        return None
    if stored_len <= SMALL_MAX:
        if elide.elidable_key(key) and stored_len >= elide.MIN_ELIDABLE + KEY_ID:
            return ELIDED, stored_len - KEY_ID
        return SMALL, stored_len - TAG - KEY_ID
    m = stored_len - LARGE_TRAILER
    n = -(-m // CSEG)
    p = m - TAG * n
    if n >= 2 and p > SEGMENT and stored_size(p, LARGE) == stored_len:
        return LARGE, p
    return None


def nonce(repo_id: bytes, key: str, index: int, last: bool) -> bytes:
    """The 12-byte nonce of segment ``index`` (``last``: the final one) of the object ``key``."""
    return blake3.blake3(b"snapstore siv nonce" + struct.pack(">IB", index, 1 if last else 0) + repo_id
                         + key.encode()).digest(12)


def aad(elided: bool, key_id: bytes, plain_len: int, repo_id: bytes, key: str) -> bytes:
    """The authenticated data of every segment of the object ``key`` (see the module doc)."""
    return MAGIC + bytes([1 if elided else 0]) + key_id + struct.pack(">Q", plain_len) + repo_id + key.encode()


class Keyed:
    """The form-2 material of one data key in one repository, derived once and reused for every
    object (docs/format.md §27 "Sealed objects, form 2"): the AEAD, and the constant prefixes of
    ``nonce(0, 1)`` and ``aad(e)``, so that opening a small or elided object costs one blake3 of
    its key, one decryption and (elided) one blake3 of its plaintext.

    Args:
        aead: ``cryptography``'s ``AESGCMSIV`` for :func:`object_key` of the data key.
        key_id: the data key's id (4 bytes). repo_id: the repository id (8 bytes).
    """

    __slots__ = ("aead", "key_id", "repo_id", "_n0", "_a")

    def __init__(self, aead, key_id: bytes, repo_id: bytes):
        self.aead, self.key_id, self.repo_id = aead, key_id, repo_id
        self._n0 = b"snapstore siv nonce" + struct.pack(">IB", 0, 1) + repo_id
        self._a = (MAGIC + b"\x00" + key_id, MAGIC + b"\x01" + key_id)

    def open_whole(self, key: str, layout: str, plain_len: int, data) -> bytes:
        """Decrypt an elided or small object from its whole stored bytes ``data`` (bytes; the
        key id at its end is this key's: the caller checked). Same result and errors as the
        module's :func:`open_whole` of ``data`` without its key id; no copy of ``data`` is made.

        Raises:
            cryptography.exceptions.InvalidTag: it does not authenticate; ValueError: malformed.
        """
        kb = key.encode()
        nc = blake3.blake3(self._n0 + kb).digest(12)
        body = memoryview(data)[:-KEY_ID]
        tail = self.repo_id + kb
        if layout == ELIDED:
            try:
                return elide.restore(self.aead.decrypt(nc, body, self._a[1] + plain_len.to_bytes(8, "big") + tail))
            except invalid_tag():  # a small object stored at an elided size (a plaintext without a checksum)
                return self.aead.decrypt(nc, body, self._a[0] + (len(body) - TAG).to_bytes(8, "big") + tail)
        return self.aead.decrypt(nc, body, self._a[0] + plain_len.to_bytes(8, "big") + tail)

    def open_stored(self, key: str, data) -> bytes:
        """Decrypt a whole elided or small object ``data`` (bytes of at least ``TAG + KEY_ID`` and
        at most :data:`SMALL_MAX`, ending in this key's id: the caller checked) stored under
        ``key`` (str): :meth:`open_whole` with the layout :func:`layout_of` gives, in one call.

        Returns:
            The plaintext; an elided one as :func:`elide.restore` returns it (its checksum put
            back, typed by its shape).
        Raises:
            cryptography.exceptions.InvalidTag: it does not authenticate; ValueError: malformed.
        """
        kb = key.encode()
        n = len(data) - KEY_ID  # the ciphertext's length: len(P) if elided, len(P) + 16 if small
        body = memoryview(data)[:n]
        nc = blake3.blake3(self._n0 + kb).digest(12)
        if n >= elide.MIN_ELIDABLE and key.startswith(elide.ELIDABLE_PREFIXES):
            try:
                return elide.restore(self.aead.decrypt(nc, body, b"".join((self._a[1], n.to_bytes(8, "big"),
                                                                           self.repo_id, kb))))
            except invalid_tag():  # a small object stored at an elided size (a plaintext without a checksum)
                pass
        return self.aead.decrypt(nc, body, b"".join((self._a[0], (n - TAG).to_bytes(8, "big"), self.repo_id, kb)))


_INVALID_TAG = None


def invalid_tag():
    """``cryptography``'s InvalidTag exception class, imported on first use (the form-3 reader
    catches it too)."""
    global _INVALID_TAG
    if _INVALID_TAG is None:
        from cryptography.exceptions import InvalidTag
        _INVALID_TAG = InvalidTag
    return _INVALID_TAG


def seal(aead, key_id: bytes, repo_id: bytes, key: str, plain: bytes) -> bytes:
    """Encrypt ``plain`` (bytes) as the form-2 object stored under ``key``.

    Args:
        aead: ``cryptography``'s ``AESGCMSIV`` for :func:`object_key` of the current data key.
        key_id: the data key's id (4 bytes). repo_id: the repository id (8 bytes). key: str.
    Returns:
        The stored bytes (:func:`stored_size` of ``len(plain)`` in the layout chosen).
    """
    n = len(plain)
    if elide.elidable_key(key) and n <= SEGMENT + elide.CHECKSUM:
        short = elide.elide(plain)
        if short is not None:
            return aead.encrypt(nonce(repo_id, key, 0, True), short, aad(True, key_id, n, repo_id, key)) + key_id
    a = aad(False, key_id, n, repo_id, key)
    if n <= SEGMENT:
        return aead.encrypt(nonce(repo_id, key, 0, True), plain, a) + key_id
    segs = nsegments(n)
    mv = memoryview(plain)
    parts = [aead.encrypt(nonce(repo_id, key, i, i == segs - 1), mv[i * SEGMENT:(i + 1) * SEGMENT], a)
             for i in range(segs)]
    parts.append(struct.pack(">Q", n) + key_id)
    return b"".join(parts)


def open_whole(aead, key_id: bytes, repo_id: bytes, key: str, layout: str, plain_len: int, body: bytes) -> bytes:
    """Decrypt an elided or small object's ``body`` (its stored bytes without the key id).

    Returns:
        The plaintext (an elided one with its checksum put back).
    Raises:
        cryptography.exceptions.InvalidTag: it does not authenticate; ValueError: malformed.
    """
    from cryptography.exceptions import InvalidTag

    nc = nonce(repo_id, key, 0, True)
    if layout == ELIDED:
        try:
            return elide.restore(aead.decrypt(nc, body, aad(True, key_id, plain_len, repo_id, key)))
        except InvalidTag:  # a small object stored at an elided size (a plaintext without a checksum)
            return aead.decrypt(nc, body, aad(False, key_id, len(body) - TAG, repo_id, key))
    return aead.decrypt(nc, body, aad(False, key_id, plain_len, repo_id, key))


def segments_for(plain_len: int, start: int, end: int) -> tuple[int, int]:
    """The segments ``[first, last]`` of a large object of ``plain_len`` bytes holding plaintext
    bytes ``[start, end)`` (``0 <= start <= end <= plain_len``)."""
    n = nsegments(plain_len)
    return min(start // SEGMENT, n - 1), min(max(end - 1, start) // SEGMENT, n - 1)


def open_segments(aead, key_id: bytes, repo_id: bytes, key: str, plain_len: int, first: int, data: bytes) -> bytes:
    """Decrypt consecutive stored segments ``data`` of a large object, from segment ``first``.

    Raises:
        cryptography.exceptions.InvalidTag: a segment does not authenticate; ValueError: ``data``
            is not whole segments of this object.
    """
    n = nsegments(plain_len)
    a = aad(False, key_id, plain_len, repo_id, key)
    out, pos, i = [], 0, first
    mv = memoryview(data)
    while pos < len(data):
        if i >= n:
            raise ValueError("more segments than the object has")
        clen = min(SEGMENT, plain_len - i * SEGMENT) + TAG
        if pos + clen > len(data):
            raise ValueError("a segment is truncated")
        out.append(aead.decrypt(nonce(repo_id, key, i, i == n - 1), mv[pos:pos + clen], a))
        pos += clen
        i += 1
    return b"".join(out)
