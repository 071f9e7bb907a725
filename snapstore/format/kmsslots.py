"""KMS key slots: the data key wrapped by AWS KMS instead of a passphrase (docs/format.md §27
"KMS slots").

Pure functions; no I/O (the KMS calls are :mod:`snapstore.stores.kms`'s). A KMS slot is
``{"id": <8 hex>, "kdf": "kms", "key": <KMS key id, ARN or alias>, "wrapped": <hex of KMS's
CiphertextBlob>}``: KMS Encrypt of the data key under that KMS key with the encryption context
:func:`context`, which KMS authenticates (a slot copied into another repository, onto another
data key id or slot id does not decrypt).
"""

from __future__ import annotations

import re

KDF = "kms"
_HEX8 = re.compile(r"^[0-9a-f]{8}$")


def context(repo_id: str, key_id: str, slot_id: str) -> dict[str, str]:
    """The KMS encryption context of a slot: its repository id, data key id and slot id."""
    return {"snapstore-repo": repo_id, "snapstore-key": key_id, "snapstore-slot": slot_id}


def is_kms(slot: dict) -> bool:
    """True if ``slot`` (a slot dict) is a KMS slot."""
    return isinstance(slot, dict) and slot.get("kdf") == KDF


def shape_ok(slot: dict) -> bool:
    """True if ``slot`` has the documented shape of a KMS slot."""
    try:
        return (is_kms(slot) and bool(_HEX8.match(slot["id"])) and isinstance(slot["key"], str)
                and 0 < len(slot["key"]) <= 2048 and 0 < len(bytes.fromhex(slot["wrapped"])) <= 6144)
    except (KeyError, TypeError, ValueError):
        return False


def make(slot_id: str, kms_key: str, blob: bytes) -> dict:
    """The stored slot for KMS key ``kms_key`` and its CiphertextBlob ``blob``."""
    return {"id": slot_id, "kdf": KDF, "key": kms_key, "wrapped": blob.hex()}


__all__ = ["KDF", "context", "is_kms", "make", "shape_ok"]
