"""Key slots of an encrypted repository added and removed, its data key rotated, and its objects
rewritten under the current key (docs/format.md §27): the config's ``encryption`` section is
rewritten by compare-and-swap on its ETag.

Removing a slot revokes a passphrase, not the data key: whoever unwrapped the data key before
(or kept an old config) still reads every object. :func:`rotate_key` makes a new data key (new
objects are sealed under it, only the caller's passphrase opens it); :func:`rekey` rewrites the
objects sealed under older keys and then drops those keys from the config.
"""

from __future__ import annotations

from ..errors import EncryptionError, ObjectNotFound, PreconditionFailed
from ..format import keyring, keyslots, sealed
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


def _write(store: SealedStore, cfg: RepoConfig, etag: str) -> bytes:
    data = cfg.to_bytes()
    try:
        store.inner.put_if_match(CONFIG, data, etag)
    except PreconditionFailed:
        raise PreconditionFailed(f"the config of {store.url} changed meanwhile (another key change?); "
                                 "nothing was written: run the command again") from None
    return data


def list_slots(store: SealedStore) -> list[dict]:
    """The key slots of the repository ``store`` (a :class:`SealedStore`) opens.

    Returns:
        ``[{"id": 8 hex digits, "kdf": "scrypt", "n": cost}, ...]`` in slot order (a KMS slot:
        ``{"id", "kdf": "kms", "key": the KMS key}``).
    Raises:
        EncryptionError / WrongPassphrase: the store cannot open the repository.
    """
    cfg, _ = _config(store)
    return [{"id": s["id"], "kdf": s["kdf"], "n": s["n"]} if s["kdf"] == "scrypt" else
            {"id": s["id"], "kdf": s["kdf"], "key": s["key"]} for s in cfg.encryption["slots"]]


def add_slot(store: SealedStore, new_passphrase: str, scrypt_n: int = keyslots.SCRYPT_N) -> str:
    """Add a key slot for ``new_passphrase`` (a non-empty str) to the repository ``store`` opens.

    Returns:
        The new slot's id (8 hex digits).
    Raises:
        EncryptionError: 16 slots already, a bad passphrase or cost, or ``new_passphrase``
            already opens a slot (named; nothing is written: a second slot for one passphrase
            would only make removing it need two steps); WrongPassphrase: the store's
            passphrase opens no slot; PreconditionFailed: the config changed meanwhile.
    """
    cfg, etag = _config(store)
    if isinstance(new_passphrase, str) and new_passphrase:
        dup = keyslots.opened_slot(cfg.encryption, new_passphrase, cfg.repo_id)  # one scrypt per slot
        if dup is not None:
            raise EncryptionError(f"that passphrase already opens key slot {dup[0]}: no slot added "
                                  "(choose another passphrase, or keep using that slot)")
    cfg.encryption, slot_id = keyslots.with_slot(cfg.encryption, store.data_key(), new_passphrase, cfg.repo_id,
                                                 scrypt_n)
    _write(store, cfg, etag)
    return slot_id


def add_kms_slot(store: SealedStore, kms) -> str:
    """Add a key slot that ``kms`` (a :class:`~snapstore.stores.kms.KmsKey`) opens: the data key
    wrapped by KMS Encrypt, bound to the repository, key id and slot id by its encryption context.

    Returns:
        The new slot's id (8 hex digits).
    Raises:
        EncryptionError: 16 slots already; WrongPassphrase: ``store`` opens no slot;
        StoreError / CredentialsError: KMS refused; PreconditionFailed: the config changed meanwhile.
    """
    cfg, etag = _config(store)
    if len(cfg.encryption["slots"]) >= keyslots.MAX_SLOTS:
        raise EncryptionError(f"the repository has {keyslots.MAX_SLOTS} key slots already; remove one first")
    slot = keyslots.new_kms_slot(store.data_key(), kms, cfg.repo_id, cfg.encryption["key_id"])
    cfg.encryption = dict(cfg.encryption, slots=cfg.encryption["slots"] + [slot])
    _write(store, cfg, etag)
    return slot["id"]


def remove_slot(store: SealedStore, slot_id: str) -> None:
    """Remove key slot ``slot_id`` (8 hex digits) from the repository ``store`` opens.

    Raises:
        EncryptionError: no such slot, or the last one; WrongPassphrase; PreconditionFailed.
    """
    cfg, etag = _config(store)
    cfg.encryption = keyslots.without_slot(cfg.encryption, slot_id)
    _write(store, cfg, etag)


def opener_slot(store: SealedStore) -> str | None:
    """The id of the slot of the repository's config that ``store`` opens with: its KMS slot when
    it has a KMS key that one names (KMS is tried first, as on unlock), else the first passphrase
    slot its passphrase opens (one scrypt per passphrase slot tried). None when neither applies
    (e.g. a config changed meanwhile).

    Raises:
        EncryptionError / WrongPassphrase: the store cannot open the repository.
    """
    from ..format import kmsslots
    cfg, _ = _config(store)
    if store.kms is not None:
        for s in cfg.encryption["slots"]:
            if kmsslots.is_kms(s) and s["key"] == store.kms.key:
                return s["id"]
    if store.passphrase is not None:
        got = keyslots.opened_slot(cfg.encryption, store.passphrase, cfg.repo_id)
        if got is not None:
            return got[0]
    return None


def rotate_key(store: SealedStore, scrypt_n: int = keyslots.SCRYPT_N) -> str:
    """Rotate the data key of the repository ``store`` opens: a new data key becomes current (new
    objects are sealed under it), wrapped in one slot for ``store``'s passphrase only (the other
    slots are dropped: add them again with :func:`add_slot`); the old key is kept, wrapped under
    the new one, to read the objects sealed under it until :func:`rekey` rewrites them.

    Returns:
        The new key id (8 hex digits).
    Raises:
        EncryptionError / WrongPassphrase: the store cannot open the repository, or 64 retired
            keys already; PreconditionFailed: the config changed meanwhile (nothing written).
    """
    cfg, etag = _config(store)
    old_key = store.data_key()
    section, new_key = keyring.rotated(
        cfg.encryption, old_key, cfg.repo_id, store.content_key,
        lambda k, kid: (keyslots.make_slot(k, store.passphrase, cfg.repo_id, kid, scrypt_n)
                        if store.passphrase is not None else store.new_slot(k, cfg.repo_id, kid)))
    cfg.encryption = section
    section["mac"] = keyslots.config_mac(new_key, cfg)
    store.rekeyed(cfg, new_key, _write(store, cfg, etag))
    return section["key_id"]


def _rewrite(store: SealedStore, key: str, current: str) -> bool:
    """Rewrite ``key`` under the current key unless it already is; False if it is gone."""
    for _ in range(5):
        try:
            info = store.inner.head(key)
            if store.sealed_key_id(store.inner.get(key, (-sealed.TRAILER, None))) == current:
                return True
            plain = store.get(key)  # opened with the retired key it names
            store.put_if_match(key, plain, info.etag)  # copy then switch: one atomic replace, if unchanged
            return True
        except ObjectNotFound:
            return False
        except PreconditionFailed:
            continue  # replaced meanwhile (or deleted): look again
    raise PreconditionFailed(f"{key} kept changing while rekey rewrote it; run rekey again")


def rekey(store: SealedStore, progress=None, passes: int = 3) -> dict:
    """Rewrite every object of the repository ``store`` opens that is sealed under a retired key,
    then drop the retired keys from the config (docs/format.md §27 "Rotation").

    Each object is read, sealed again under the current key and put back by compare-and-swap on
    its ETag (an object replaced or deleted meanwhile is looked at again), so a crash leaves every
    object readable (under the current key or a retired one still in the config) and rekey can be
    run again. The retired keys are dropped only after a listing finds no object under them.
    Writers that opened the repository before the rotation seal under the old key: stop them
    before rekey (their objects written after it would be unreadable).

    Args:
        store: a SealedStore of the repository (its passphrase opens a slot).
        progress: optional ``progress(phase, done, total)``. passes: listings before giving up.
    Returns:
        ``{"rewritten": n objects, "dropped": [retired key ids], "key_id": current key id}``.
    Raises:
        EncryptionError / WrongPassphrase: as :func:`list_slots`; PreconditionFailed: the config
            or an object kept changing; StoreError: as the store.
    """
    cfg, _ = _config(store)
    current = cfg.encryption["key_id"]
    rewritten = 0
    for _ in range(passes):
        stale = [i.key for i in store.inner.list("") if i.key != CONFIG
                 and store.sealed_key_id(store.inner.get(i.key, (-sealed.TRAILER, None))) != current]
        if not stale:
            break
        for n, key in enumerate(stale, 1):
            rewritten += _rewrite(store, key, current)
            if progress is not None:
                progress("rekey", n, len(stale))
    else:
        raise PreconditionFailed("objects sealed under a retired key kept appearing (a writer opened before the "
                                 "rotation is still running?); stop it and run rekey again")
    cfg, etag = _config(store)
    dropped = [r["id"] for r in cfg.encryption.get("retired", ())]
    if dropped:
        cfg.encryption = keyring.without_retired(cfg.encryption, set(dropped))
        store.rekeyed(cfg, store.data_key(), _write(store, cfg, etag))
    return {"rewritten": rewritten, "dropped": dropped, "key_id": current}
