"""The config's ``encryption`` section: the data key wrapped in key slots (docs/format.md §27).

Pure functions; no I/O of their own (a KMS slot's wrap and unwrap go through the KMS key object
passed in, :class:`snapstore.stores.kms.KmsKey`). A repository's data key (32 random bytes) never
leaves the client in the clear: each slot holds it encrypted (AES-256-GCM) under a key derived
from a passphrase with scrypt, or wrapped by AWS KMS (:mod:`snapstore.format.kmsslots`). From the data key come, by keyed blake3 with distinct contexts, the content-id key (the
config's ``key`` of an unencrypted repository, §2) and the master key of the per-object keys
(:mod:`snapstore.format.sealed`).
"""

from __future__ import annotations

import os
import re

import blake3

from ..errors import EncryptionError, IntegrityError, WrongPassphrase

SECTION_VERSION = 1
CIPHER = "aes-256-gcm"
"""The cipher of a repository whose objects are sealed in form 1 (snapstore.format.sealed)."""
CIPHER_SIV = "aes-256-gcm-siv"
"""The cipher of a repository created since form 2 (snapstore.format.sealed2): its objects are
AES-256-GCM-SIV sealed; the config's MAC binds it."""
CIPHER_3 = "aes-256-gcm-siv+gcm"
"""The cipher of a repository created since form 3 (snapstore.format.sealed3): form 2, except
packs of one segment, AES-256-GCM sealed under a synthetic nonce; the config's MAC binds it."""
SCRYPT_N = 1 << 15
"""Default scrypt cost (2^15, r 8, p 1: 32 MiB and about 0.1 s per unlock)."""
SCRYPT_R, SCRYPT_P = 8, 1
MAX_SLOTS = 16
_HEX8 = re.compile(r"^[0-9a-f]{8}$")


def _aesgcm():
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    return AESGCM


def _kek(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode("utf-8", "surrogatepass"))


def _slot_aad(repo_id: str, key_id: str, slot_id: str) -> bytes:
    return f"snapstore-slot\0{repo_id}\0{key_id}\0{slot_id}".encode()


def content_key(data_key: bytes) -> bytes:
    """The content-id key (32 bytes) of a repository whose data key is ``data_key``."""
    return blake3.blake3(b"snapstore content ids", key=data_key).digest(32)


def object_master(data_key: bytes) -> bytes:
    """The key (32 bytes) per-object keys are derived from (:func:`object_key`)."""
    return blake3.blake3(b"snapstore object keys", key=data_key).digest(32)


def object_key(master: bytes, salt: bytes) -> bytes:
    """The AES-256-GCM key (32 bytes) of the object sealed with random ``salt`` (16 bytes)."""
    return blake3.blake3(salt, key=master).digest(32)


def config_mac(data_key: bytes, cfg) -> str:
    """The MAC (64 hex digits) binding an encrypted repository's config ``cfg`` (a
    :class:`~snapstore.format.config.RepoConfig`) to its data key: keyed blake3 of the canonical
    JSON of its format version, repository id, creation time, settings and key id. Key slots are
    left out (each authenticates itself), so adding or removing one keeps the MAC."""
    import json

    from .times import format_time
    body = {"version": cfg.version, "repo_id": cfg.repo_id, "created": format_time(cfg.created),
            "key_id": cfg.encryption["key_id"], **{k: getattr(cfg, k) for k in cfg.SETTINGS}}
    if cfg.encryption.get("cipher", CIPHER) != CIPHER:  # form 2 (§27): bound, so it is not switched back
        body["cipher"] = cfg.encryption["cipher"]
    mac_key = blake3.blake3(b"snapstore config mac", key=data_key).digest(32)
    return blake3.blake3(json.dumps(body, sort_keys=True, separators=(",", ":")).encode(), key=mac_key).hexdigest()


def make_slot(data_key: bytes, passphrase: str, repo_id: str, key_id: str, n: int = SCRYPT_N) -> dict:
    """A new key slot: ``data_key`` (32 bytes) wrapped under ``passphrase`` (a non-empty str).

    Args:
        repo_id: the repository id (16 hex digits); key_id: the data key's id (8 hex digits);
        n: the scrypt cost (a power of two, 2^10 to 2^20).
    Returns:
        The slot as stored: ``{"id", "kdf": "scrypt", "n", "r", "p", "salt", "wrapped"}``.
    Raises:
        EncryptionError: an empty passphrase or a cost out of range.
    """
    if not isinstance(passphrase, str) or not passphrase:
        raise EncryptionError("the passphrase must be a non-empty string")
    if not isinstance(n, int) or n < 1 << 10 or n > 1 << 20 or n & (n - 1):
        raise EncryptionError(f"scrypt cost n must be a power of two in [2^10, 2^20], got {n!r}")
    slot_id, salt = os.urandom(4).hex(), os.urandom(16)
    kek = _kek(passphrase, salt, n, SCRYPT_R, SCRYPT_P)
    wrapped = _aesgcm()(kek).encrypt(bytes(12), data_key, _slot_aad(repo_id, key_id, slot_id))
    return {"id": slot_id, "kdf": "scrypt", "n": n, "r": SCRYPT_R, "p": SCRYPT_P, "salt": salt.hex(),
            "wrapped": wrapped.hex()}


def new_section(passphrase: str, repo_id: str, n: int = SCRYPT_N) -> tuple[dict, bytes]:
    """A new ``encryption`` section with one slot for ``passphrase``, and its fresh data key.

    Returns:
        ``(section dict, data key (32 bytes))``. Raises: EncryptionError (see :func:`make_slot`).
    """
    data_key, key_id = os.urandom(32), os.urandom(4).hex()
    return ({"version": SECTION_VERSION, "cipher": CIPHER_3, "segment": 65536, "key_id": key_id,
             "slots": [make_slot(data_key, passphrase, repo_id, key_id, n)]}, data_key)


def check_section(d) -> dict:
    """Check the shape of a stored ``encryption`` section and return it.

    Raises:
        IntegrityError: naming ``config``, when it is not the documented shape.
    """
    def bad(why):
        raise IntegrityError("config", f"malformed encryption section: {why}")
    from . import keyring
    if not isinstance(d, dict) or d.get("version") not in (SECTION_VERSION, keyring.ROTATED_VERSION) \
            or d.get("cipher") not in (CIPHER, CIPHER_SIV, CIPHER_3) or d.get("segment") != 65536:
        bad("unknown version, cipher or segment size")
    if d["version"] == keyring.ROTATED_VERSION:
        keyring.check(d)  # a rotated key: the retired keys and the content key (format.md §27 "Rotation")
    if not isinstance(d.get("key_id"), str) or not _HEX8.match(d["key_id"]):
        bad("key_id is not 8 hex digits")
    if not isinstance(d.get("mac"), str) or not re.match(r"^[0-9a-f]{64}$", d["mac"]):
        bad("mac is not 64 hex digits")
    slots = d.get("slots")
    if not isinstance(slots, list) or not 1 <= len(slots) <= MAX_SLOTS:
        bad(f"slots is not a list of 1-{MAX_SLOTS}")
    from . import kmsslots
    for s in slots:
        if kmsslots.is_kms(s):
            if not kmsslots.shape_ok(s):
                bad(f"a KMS slot is not the documented shape: {str(s)[:80]!r}")
            continue
        try:
            ok = (isinstance(s, dict) and s.get("kdf") == "scrypt" and _HEX8.match(s["id"])
                  and all(type(s[k]) is int for k in ("n", "r", "p"))
                  and 1 << 10 <= s["n"] <= 1 << 20 and 1 <= s["r"] <= 32 and 1 <= s["p"] <= 16
                  and len(bytes.fromhex(s["salt"])) == 16 and len(bytes.fromhex(s["wrapped"])) == 48)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            bad(f"a slot is not the documented shape: {str(s)[:80]!r}")
    return d


def unlock(section: dict, passphrase: str, repo_id: str) -> bytes:
    """The data key (32 bytes) a slot of ``section`` opens with ``passphrase``.

    Raises:
        WrongPassphrase: no slot opens with it.
    """
    got = opened_slot(section, passphrase, repo_id)
    if got is not None:
        return got[1]
    raise WrongPassphrase(f"wrong passphrase: no key slot of repository {repo_id} opens with it "
                          f"({len(section['slots'])} slot(s))")


def opened_slot(section: dict, passphrase: str, repo_id: str) -> tuple[str, bytes] | None:
    """``(slot id, data key)`` of the first passphrase slot of ``section`` that ``passphrase``
    (str) opens, or None when none does (one scrypt per passphrase slot tried; KMS slots are
    skipped). Raises nothing for a wrong passphrase."""
    from cryptography.exceptions import InvalidTag
    for s in section["slots"]:
        if s.get("kdf") != "scrypt":
            continue  # a KMS slot (format/kmsslots.py) opens with a KMS key, not a passphrase
        kek = _kek(passphrase, bytes.fromhex(s["salt"]), s["n"], s["r"], s["p"])
        try:
            return s["id"], _aesgcm()(kek).decrypt(bytes(12), bytes.fromhex(s["wrapped"]),
                                                   _slot_aad(repo_id, section["key_id"], s["id"]))
        except InvalidTag:
            continue
    return None


def unlock_kms(section: dict, kms, repo_id: str) -> bytes:
    """The data key (32 bytes) a KMS slot of ``section`` for ``kms`` (a
    :class:`~snapstore.stores.kms.KmsKey`, or anything with its ``key`` and ``unwrap``) opens.

    Raises:
        WrongPassphrase: no KMS slot names that key, or KMS does not open it.
        StoreError / CredentialsError: KMS refused or cannot be reached.
    """
    from . import kmsslots
    mine = [s for s in section["slots"] if kmsslots.is_kms(s) and s["key"] == kms.key]
    if not mine:
        raise WrongPassphrase(f"no KMS key slot of repository {repo_id} names KMS key {kms.key}")
    last = None
    for s in mine:
        try:
            return kms.unwrap(bytes.fromhex(s["wrapped"]), repo_id, section["key_id"], s["id"])
        except WrongPassphrase as e:
            last = e
    raise last


def new_kms_slot(data_key: bytes, kms, repo_id: str, key_id: str) -> dict:
    """A new KMS slot: ``data_key`` wrapped by ``kms`` (a KmsKey) with the slot's context."""
    from . import kmsslots
    slot_id = os.urandom(4).hex()
    return kmsslots.make(slot_id, kms.key, kms.wrap(data_key, repo_id, key_id, slot_id))


def with_slot(section: dict, data_key: bytes, passphrase: str, repo_id: str, n: int = SCRYPT_N) -> tuple[dict, str]:
    """``section`` with one more slot for ``passphrase``, and the new slot's id.

    Raises:
        EncryptionError: already :data:`MAX_SLOTS` slots, or a bad passphrase or cost.
    """
    if len(section["slots"]) >= MAX_SLOTS:
        raise EncryptionError(f"the repository has {MAX_SLOTS} key slots already; remove one first")
    slot = make_slot(data_key, passphrase, repo_id, section["key_id"], n)
    return dict(section, slots=section["slots"] + [slot]), slot["id"]


def without_slot(section: dict, slot_id: str) -> dict:
    """``section`` without slot ``slot_id`` (8 hex digits).

    Raises:
        EncryptionError: no such slot, or it is the last one (the data would be lost).
    """
    rest = [s for s in section["slots"] if s["id"] != slot_id]
    if len(rest) == len(section["slots"]):
        raise EncryptionError(f"no key slot {slot_id!r} (slots: {', '.join(s['id'] for s in section['slots'])})")
    if not rest:
        raise EncryptionError(f"key slot {slot_id} is the last one: removing it would make the repository unreadable")
    return dict(section, slots=rest)
