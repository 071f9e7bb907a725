"""Key slots of an encrypted repository added and removed (docs/format.md §27): the config's
``encryption`` section rewritten by compare-and-swap on its ETag, nothing else touched.

Removing a slot revokes a passphrase, not the data key: whoever unwrapped the data key before
(or kept an old config) still reads every object. Rotating the data key (rekey) is not built.
"""

from __future__ import annotations

from ..errors import EncryptionError, PreconditionFailed
from ..format import keyslots
from ..format.config import RepoConfig
from ..stores.crypt import SealedStore, is_sealed

CONFIG = "config"


def _config(store: SealedStore) -> tuple[RepoConfig, str]:
    if not is_sealed(store):
        raise EncryptionError("key slots are managed through an encrypted store: give the passphrase")
    store.data_key()  # unlock (WrongPassphrase / EncryptionError)
    info = store.inner.head(CONFIG)
    cfg = RepoConfig.from_bytes(CONFIG, store.inner.get(CONFIG))
    return cfg, info.etag


def _write(store: SealedStore, cfg: RepoConfig, etag: str) -> None:
    try:
        store.inner.put_if_match(CONFIG, cfg.to_bytes(), etag)
    except PreconditionFailed:
        raise PreconditionFailed(f"the config of {store.url} changed meanwhile (another key change?); "
                                 "nothing was written: run the command again") from None


def list_slots(store: SealedStore) -> list[dict]:
    """The key slots of the repository ``store`` (a :class:`SealedStore`) opens.

    Returns:
        ``[{"id": 8 hex digits, "kdf": "scrypt", "n": cost}, ...]`` in slot order.
    Raises:
        EncryptionError / WrongPassphrase: the store cannot open the repository.
    """
    cfg, _ = _config(store)
    return [{"id": s["id"], "kdf": s["kdf"], "n": s["n"]} for s in cfg.encryption["slots"]]


def add_slot(store: SealedStore, new_passphrase: str, scrypt_n: int = keyslots.SCRYPT_N) -> str:
    """Add a key slot for ``new_passphrase`` (a non-empty str) to the repository ``store`` opens.

    Returns:
        The new slot's id (8 hex digits).
    Raises:
        EncryptionError: 16 slots already, or a bad passphrase or cost; WrongPassphrase: the
            store's passphrase opens no slot; PreconditionFailed: the config changed meanwhile.
    """
    cfg, etag = _config(store)
    cfg.encryption, slot_id = keyslots.with_slot(cfg.encryption, store.data_key(), new_passphrase, cfg.repo_id,
                                                 scrypt_n)
    _write(store, cfg, etag)
    return slot_id


def remove_slot(store: SealedStore, slot_id: str) -> None:
    """Remove key slot ``slot_id`` (8 hex digits) from the repository ``store`` opens.

    Raises:
        EncryptionError: no such slot, or the last one; WrongPassphrase; PreconditionFailed.
    """
    cfg, etag = _config(store)
    cfg.encryption = keyslots.without_slot(cfg.encryption, slot_id)
    _write(store, cfg, etag)
