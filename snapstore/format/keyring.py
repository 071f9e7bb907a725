"""Rotated data keys: the keys an encrypted repository's older objects are sealed under, and its
content-id key, wrapped under the current data key (docs/format.md §27 "Rotation").

Pure functions; no I/O. A section that was never rotated (version 1) has neither: its content-id
key is derived from its one data key. Rotation (version 2) makes a new data key, the *current*
one (new objects are sealed under it, the slots wrap it), and keeps under it:

- ``"content"``: the content-id key, unchanged for the repository's life (every content id in
  every pack and manifest is keyed by it), ``nonce (12) | AES-256-GCM(W, nonce, K, aad)``;
- ``"retired"``: ``[{"id": <8 hex>, "wrapped": <hex nonce | ct>}]``, each older data key whose
  objects may still exist, wrapped the same way;

with ``W = blake3("snapstore key wrap", key=D)`` of the current data key ``D`` and
``aad = "snapstore-" what "\\0" repo_id "\\0" current key id "\\0" wrapped key id`` (``what``
``content`` or ``retired``). Nonces are random: ``W`` wraps a few keys per rotation and is new
with each data key.
"""

from __future__ import annotations

import os
import re

import blake3

from ..errors import IntegrityError

ROTATED_VERSION = 2
"""The section version of a repository whose data key was rotated at least once."""
MAX_RETIRED = 64

_HEX8 = re.compile(r"^[0-9a-f]{8}$")


def _aesgcm():
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return AESGCM


def _wrap_key(data_key: bytes) -> bytes:
    return blake3.blake3(b"snapstore key wrap", key=data_key).digest(32)


def _aad(what: str, repo_id: str, key_id: str, wrapped_id: str) -> bytes:
    return f"snapstore-{what}\0{repo_id}\0{key_id}\0{wrapped_id}".encode()


def wrap(data_key: bytes, key_id: str, repo_id: str, what: str, wrapped_id: str, value: bytes) -> str:
    """``value`` (32 bytes) wrapped under data key ``data_key`` (id ``key_id``), as stored (hex)."""
    nonce = os.urandom(12)
    return (nonce + _aesgcm()(_wrap_key(data_key)).encrypt(nonce, value, _aad(what, repo_id, key_id, wrapped_id))).hex()


def unwrap(data_key: bytes, key_id: str, repo_id: str, what: str, wrapped_id: str, stored: str) -> bytes:
    """Inverse of :func:`wrap`.

    Raises:
        IntegrityError: naming ``config``: it does not authenticate (altered, or moved).
    """
    from cryptography.exceptions import InvalidTag
    raw = bytes.fromhex(stored)
    try:
        return _aesgcm()(_wrap_key(data_key)).decrypt(raw[:12], raw[12:], _aad(what, repo_id, key_id, wrapped_id))
    except InvalidTag:
        raise IntegrityError("config", f"the wrapped {what} key {wrapped_id} does not open under key {key_id} "
                             "(changed outside snapstore)") from None


def content_key_of(section: dict, data_key: bytes, repo_id: str, derive) -> bytes:
    """The repository's content-id key: unwrapped (a rotated section) or ``derive(data_key)``.

    Raises:
        IntegrityError: the wrapped key does not open.
    """
    if "content" not in section:
        return derive(data_key)
    return unwrap(data_key, section["key_id"], repo_id, "content", "content", section["content"])


def retired_keys(section: dict, data_key: bytes, repo_id: str) -> dict[str, bytes]:
    """Retired key id (8 hex) -> its data key (32 bytes), unwrapped under the current one.

    Raises:
        IntegrityError: one does not open.
    """
    return {r["id"]: unwrap(data_key, section["key_id"], repo_id, "retired", r["id"], r["wrapped"])
            for r in section.get("retired", ())}


def rotated(section: dict, data_key: bytes, repo_id: str, content_key: bytes, new_slot) -> tuple[dict, bytes]:
    """The section after a rotation, and the new data key.

    Args:
        section: the current section (version 1 or 2). data_key: its current data key.
        content_key: the repository's content-id key (kept). new_slot: ``new_slot(new data key,
            new key id) -> slot dict`` (the one slot of the new section, for the caller's passphrase).
    Returns:
        ``(new section, new data key)``: version 2, a new key id, the old current key added to
        the retired ones (all rewrapped under the new key), the content key wrapped.
    Raises:
        IntegrityError: a retired key of ``section`` does not open.
    """
    old = retired_keys(section, data_key, repo_id)
    old[section["key_id"]] = data_key
    if len(old) > MAX_RETIRED:
        from ..errors import EncryptionError
        raise EncryptionError(f"{len(old)} retired keys: run rekey first (it drops the keys no object uses)")
    new_key, new_id = os.urandom(32), os.urandom(4).hex()
    while new_id in old:
        new_id = os.urandom(4).hex()
    out = {k: v for k, v in section.items() if k not in ("retired", "content", "mac")}
    out.update(version=ROTATED_VERSION, key_id=new_id, slots=[new_slot(new_key, new_id)],
               content=wrap(new_key, new_id, repo_id, "content", "content", content_key),
               retired=[{"id": i, "wrapped": wrap(new_key, new_id, repo_id, "retired", i, k)} for i, k in sorted(old.items())])
    return out, new_key


def without_retired(section: dict, ids: set) -> dict:
    """``section`` without the retired keys ``ids`` (8 hex each)."""
    return dict(section, retired=[r for r in section.get("retired", ()) if r["id"] not in ids])


def check(d: dict) -> None:
    """Check the rotation fields of a version-2 section.

    Raises:
        IntegrityError: naming ``config``, when they are not the documented shape.
    """
    def bad(why):
        raise IntegrityError("config", f"malformed encryption section: {why}")
    try:
        if len(bytes.fromhex(d["content"])) != 12 + 32 + 16:
            bad("content is not a wrapped key")
        retired = d["retired"]
        if not isinstance(retired, list) or len(retired) > MAX_RETIRED:
            bad(f"retired is not a list of at most {MAX_RETIRED}")
        for r in retired:
            if not (isinstance(r, dict) and _HEX8.match(r["id"]) and r["id"] != d["key_id"]
                    and len(bytes.fromhex(r["wrapped"])) == 60):
                bad(f"a retired key is not the documented shape: {str(r)[:80]!r}")
    except (KeyError, TypeError, ValueError):
        bad("content or retired missing or not hex")


__all__ = ["ROTATED_VERSION", "check", "content_key_of", "retired_keys", "rotated", "unwrap", "without_retired", "wrap"]
