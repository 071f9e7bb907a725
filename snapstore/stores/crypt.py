"""SealedStore: client-side encryption as a layer between the repository and any ObjectStore
(docs/format.md §27).

Every object except ``config`` is stored sealed, bound to the repository id, the object's key and
the data key's id: in form 3 (:mod:`snapstore.format.sealed3`: packs of one segment AES-256-GCM
under a synthetic nonce, everything else as form 2) in a repository whose config names
``aes-256-gcm-siv+gcm`` (every one created now); in form 2 (:mod:`snapstore.format.sealed2`:
AES-256-GCM-SIV, nonces derived from the key, the object's own checksum left out) in one whose
config names ``aes-256-gcm-siv``; else in form 1 (:mod:`snapstore.format.sealed`: AES-256-GCM in
64 KiB segments under a per-object salt); form-1 objects read in every one. What the
layers above read and write is the plaintext, so they work unchanged. LIST, HEAD and PUT report
plaintext sizes (0-byte stubs and 1-byte void records keep their meaning, §14, §15); an object
whose stored size no sealed object has is reported with :data:`UNSEALED_SIZE` added, so that no
reader takes it for a stub or void, and every read of it fails. Conditional writes (create-only,
ETag compare-and-swap) pass through: the ETag is the stored object's.

The store unlocks itself from the repository's config (one slot opened with the passphrase) on
first use; creating a repository goes through :meth:`SealedStore.seal_config`.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Iterable, Iterator

from ..errors import EncryptionError, IntegrityError, KeyRequired
from ..format import keyring, keyslots, kmsslots, sealed, sealed2, sealed3
from .base import ObjectInfo, check_range, store_capabilities

CONFIG = "config"
UNSEALED_SIZE = 1 << 48
"""Added to the listed size of an object that cannot be a sealed object (a plaintext object put
beside sealed ones): large enough that no reader takes it for a 0-byte stub or 1-byte void."""
_SMALL_MIN, _SMALL_MAX, _KEY_ID = sealed2.TAG + sealed2.KEY_ID, sealed2.SMALL_MAX, sealed2.KEY_ID
_V1_TRAILER, _V1_MAGIC_END, _V1_MAGIC = sealed.TRAILER, sealed.TRAILER - 4, sealed.MAGIC
TRAILER_CACHE = 4096
"""Trailers (33 bytes each) remembered per store, so that a ranged read after a suffix read of
the same object costs one request."""


_aesgcm_class = None
_siv_class = None
_invalid_tag_class = None


def _InvalidTag():
    """``cryptography``'s InvalidTag, imported on first use."""
    global _invalid_tag_class
    if _invalid_tag_class is None:
        from cryptography.exceptions import InvalidTag
        _invalid_tag_class = InvalidTag
    return _invalid_tag_class


def _AESGCMSIV():
    """``cryptography``'s AESGCMSIV class, imported on first use."""
    global _siv_class
    if _siv_class is None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
        _siv_class = AESGCMSIV
    return _siv_class


def _AESGCM():
    """``cryptography``'s AESGCM class, imported on first use."""
    global _aesgcm_class
    if _aesgcm_class is None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        _aesgcm_class = AESGCM
    return _aesgcm_class


def _info(info: ObjectInfo, size: int) -> ObjectInfo:
    return ObjectInfo(info.key, size, info.etag, info.mtime)


def plain_listed_size(key: str, stored: int, form: int = 1) -> int:
    """The size LIST and HEAD report for an object of ``stored`` bytes under ``key`` in a
    repository sealing in ``form`` (1, 2 or 3: :mod:`~snapstore.format.sealed`,
    :mod:`~snapstore.format.sealed2`, :mod:`~snapstore.format.sealed3`)."""
    if key == CONFIG:
        return stored
    if form == 3:
        lay = sealed3.layout_of(key, stored)
        return UNSEALED_SIZE + stored if lay is None else lay[1]
    if form == 2:
        lay = sealed2.layout_of(key, stored)
        return UNSEALED_SIZE + stored if lay is None else lay[1]
    p = sealed.plain_size(stored)
    return UNSEALED_SIZE + stored if p is None else p


def repository_form(section: dict) -> int:
    """The sealed form (1, 2 or 3) new objects of the repository with ``section`` (its config's
    ``encryption``) are written in: 3 when its cipher is :data:`keyslots.CIPHER_3` (every
    repository created now), 2 when it is AES-256-GCM-SIV, else 1."""
    cipher = section.get("cipher")
    return 3 if cipher == keyslots.CIPHER_3 else 2 if cipher == sealed2.CIPHER else 1



PASSPHRASE_ENV = "SNAPSTORE_PASSPHRASE"
KMS_KEY_ENV = "SNAPSTORE_KMS_KEY"


def keys_from_env(passphrase: str | None = None, kms_key: str | None = None) -> tuple[str | None, str | None]:
    """The repository keys to open with: ``passphrase`` and ``kms_key`` (a KMS key id, ARN or alias)
    as given, each None one taken from ``$SNAPSTORE_PASSPHRASE`` / ``$SNAPSTORE_KMS_KEY``; an empty
    variable counts as unset. Returns ``(passphrase or None, kms_key or None)``; raises nothing."""
    if passphrase is None:
        passphrase = os.environ.get(PASSPHRASE_ENV) or None
    if kms_key is None:
        kms_key = os.environ.get(KMS_KEY_ENV) or None
    return passphrase, kms_key


def sealed_if_keyed(store, passphrase: str | None = None, kms_key=None):
    """``store`` opened through its encryption when a key is given: a :class:`SealedStore` over it
    with ``passphrase`` and/or ``kms_key`` (a KMS key id, ARN or alias, or a
    :class:`~snapstore.stores.kms.KmsKey`); ``store`` itself when neither is given or it is sealed
    already.

    Raises:
        EncryptionError / WrongPassphrase: the keys do not open the repository (see
            :class:`SealedStore`); StoreError: no KMS client can be made.
    """
    if (passphrase is None and kms_key is None) or is_sealed(store):
        return store
    kms = None
    if kms_key is not None:
        from .kms import KmsKey

        kms = kms_key if isinstance(kms_key, KmsKey) else KmsKey(kms_key)
    return SealedStore(store, passphrase, kms=kms)

class SealedStore:
    """An :class:`~snapstore.stores.base.ObjectStore` that encrypts every object of ``inner``.

    Args:
        inner: the store holding the sealed bytes (any ObjectStore; closed with this one).
        passphrase: opens a key slot of the repository's config, or the first slot of a
            repository created through this store (a non-empty str; or None with ``kms``).
        scrypt_n: the scrypt cost of slots made through this store (a power of two; default
            :data:`~snapstore.format.keyslots.SCRYPT_N`).
        kms: a :class:`~snapstore.stores.kms.KmsKey` that opens a KMS slot (tried before the
            passphrase), or makes the first slot of a repository created without a passphrase.
    Raises (on first use, from any method):
        EncryptionError: the location holds an unencrypted repository.
        WrongPassphrase: no slot opens with ``passphrase``.
        IntegrityError: a sealed object does not authenticate (names the key and the key id).
    """

    def __init__(self, inner, passphrase: str | None = None, scrypt_n: int = keyslots.SCRYPT_N, *, kms=None):
        if not (passphrase is None and kms is not None) and (not isinstance(passphrase, str) or not passphrase):
            raise EncryptionError("the passphrase must be a non-empty string")
        self.inner, self.passphrase, self.scrypt_n, self.kms = inner, passphrase, scrypt_n, kms
        self.url = inner.url
        self.stats = inner.stats
        self.capabilities = store_capabilities(inner)
        self._lock = threading.Lock()
        # key -> a form-1 trailer (bytes), or a large form-2 object's (plaintext length, key id)
        self._trailers: OrderedDict[str, object] = OrderedDict()
        self._keys = None  # (repo id bytes, key id bytes, object master, content key, data key, section)
        self._masters: dict[bytes, bytes] = {}  # key id -> object master: the current key and retired ones
        self._keyeds: dict[bytes, sealed2.Keyed] = {}  # key id -> its form-2 material (made with _keys)
        self._keyeds3: dict[bytes, sealed3.Keyed] = {}  # key id -> its form-3 packs' material (form 3 only)
        self._form = 1
        self._config_bytes: bytes | None = None  # the config read to unlock, served once to the next get
        self._unlocked_from: bytes | None = None  # the config the keys came from

    # -- keys ------------------------------------------------------------------------------------
    def _unlock_from(self, data: bytes) -> None:
        from ..format.config import RepoConfig
        if self._keys is not None and data == self._unlocked_from:
            return  # the same config as before: no second scrypt
        cfg = RepoConfig.from_bytes(CONFIG, data)
        if cfg.encryption is None:
            raise EncryptionError(f"the repository at {self.url} is not encrypted, but a passphrase was given "
                                  "(open it without one; an encrypted repository is chosen at init)")
        data_key = self._unwrap(cfg.encryption, cfg.repo_id)
        import hmac
        if not hmac.compare_digest(keyslots.config_mac(data_key, cfg), cfg.encryption["mac"]):
            raise IntegrityError(CONFIG, "the config's settings do not match its MAC: changed outside snapstore "
                                 f"(encrypted repository, key {cfg.encryption['key_id']})")
        self._set_keys(cfg.repo_id, cfg.encryption, data_key)
        self._unlocked_from = data

    def _unwrap(self, section: dict, repo_id: str) -> bytes:
        from ..errors import WrongPassphrase
        if self.kms is not None:
            try:
                return keyslots.unlock_kms(section, self.kms, repo_id)
            except WrongPassphrase:
                if self.passphrase is None:
                    raise
        return keyslots.unlock(section, self.passphrase, repo_id)

    def new_slot(self, data_key: bytes, repo_id: str, key_id: str) -> dict:
        """A slot wrapping ``data_key`` for this store's way in: its passphrase, else its KMS key."""
        if self.passphrase is not None:
            return keyslots.make_slot(data_key, self.passphrase, repo_id, key_id, self.scrypt_n)
        return keyslots.new_kms_slot(data_key, self.kms, repo_id, key_id)

    def _set_keys(self, repo_id: str, section: dict, data_key: bytes) -> None:
        content = keyring.content_key_of(section, data_key, repo_id, keyslots.content_key)
        masters = {bytes.fromhex(i): keyslots.object_master(k)
                   for i, k in keyring.retired_keys(section, data_key, repo_id).items()}
        master = keyslots.object_master(data_key)
        masters[bytes.fromhex(section["key_id"])] = master
        self._masters = masters
        rid = bytes.fromhex(repo_id)
        self._keyeds = {i: sealed2.Keyed(_AESGCMSIV()(sealed2.object_key(m)), i, rid) for i, m in masters.items()}
        self._form = repository_form(section)
        self._keyeds3 = {} if self._form != 3 else {
            i: sealed3.Keyed(_AESGCM()(sealed3.gcm_key(m)), sealed3.nonce_key(m), i, rid) for i, m in masters.items()}
        self._keys = (bytes.fromhex(repo_id), bytes.fromhex(section["key_id"]), master, content, data_key, section)

    def _ensure(self):
        if self._keys is None:
            with self._lock:
                if self._keys is None:
                    data = self.inner.get(CONFIG)  # ObjectNotFound: no repository yet
                    self._unlock_from(data)
                    self._config_bytes = data
        return self._keys

    @property
    def content_key(self) -> bytes:
        """The repository's content-id key (32 bytes), derived from the data key."""
        return self._ensure()[3]

    @property
    def key_id(self) -> str:
        """The data key's id (8 hex digits), as errors name it."""
        return self._ensure()[1].hex()

    def seal_config(self, cfg) -> None:
        """Make ``cfg`` (a new :class:`~snapstore.format.config.RepoConfig`, not yet written) the
        config of an encrypted repository: a fresh data key in one slot for this store's
        passphrase, ``cfg.key`` the content key derived from it; this store then uses that key.

        Raises:
            EncryptionError: the passphrase or cost is unusable.
        """
        if self.passphrase is not None:
            section, data_key = keyslots.new_section(self.passphrase, cfg.repo_id, self.scrypt_n)
        else:  # a repository a KMS key opens, no passphrase
            data_key, key_id = os.urandom(32), os.urandom(4).hex()
            section = {"version": keyslots.SECTION_VERSION, "cipher": keyslots.CIPHER_3, "segment": sealed.SEGMENT,
                       "key_id": key_id, "slots": [self.new_slot(data_key, cfg.repo_id, key_id)]}
        cfg.encryption = section
        cfg.key = keyslots.content_key(data_key)
        section["mac"] = keyslots.config_mac(data_key, cfg)
        with self._lock:
            self._set_keys(cfg.repo_id, section, data_key)

    def rekeyed(self, cfg, data_key: bytes, config_bytes: bytes) -> None:
        """Use the keys of ``cfg`` (a config this store just wrote, ``config_bytes`` as stored,
        whose current data key is ``data_key``): after a rotation or a retired key dropped."""
        with self._lock:
            self._set_keys(cfg.repo_id, cfg.encryption, data_key)
            self._unlocked_from = config_bytes
            self._trailers.clear()

    def sealed_key_id(self, trailer: bytes) -> str | None:
        """The key id (8 hex digits) a stored object's last 33 bytes (or all of it, when shorter)
        name, or None if they are not a sealed trailer (form 1) or key id (form 2)."""
        self._ensure()
        parsed = sealed.parse_trailer(trailer[-sealed.TRAILER:])
        if parsed is not None and (self._form == 1 or parsed[0] in self._masters):
            return parsed[0].hex()
        if self._form >= 2 and len(trailer) >= sealed2.TAG + sealed2.KEY_ID:
            return trailer[-sealed2.KEY_ID:].hex()
        return None

    @property
    def form(self) -> int:
        """The sealed form (1, 2 or 3) this store writes objects in (docs/format.md §27); 3 while
        the location has no config yet (a repository created now seals in form 3)."""
        if self._keys is None:
            from ..errors import ObjectNotFound
            try:
                self._ensure()
            except ObjectNotFound:
                return 3
        return self._form

    def data_key(self) -> bytes:
        """The data key (32 bytes) this store unlocked (for adding a key slot)."""
        return self._ensure()[4]

    # -- sealing ---------------------------------------------------------------------------------
    def _aead(self, salt: bytes, master: bytes | None = None):
        return _AESGCM()(keyslots.object_key(self._ensure()[2] if master is None else master, salt))

    def _siv(self, key_id: bytes):
        kd = self._keyeds.get(key_id)
        return None if kd is None else kd.aead

    def _keyed(self, key_id: bytes) -> sealed2.Keyed:
        return self._keyeds[key_id]

    def _seal(self, key: str, data: bytes) -> bytes:
        repo_id, key_id, _, _, _, _ = self._ensure()
        if self._form == 3:
            out = self._keyeds3[key_id].seal(key, bytes(data))
            if out is not None:
                return out
        if self._form >= 2:
            return sealed2.seal(self._siv(key_id), key_id, repo_id, key, bytes(data))
        salt = os.urandom(16)
        return sealed.seal(self._aead(salt), key_id, salt, repo_id, key, bytes(data))

    def _fail(self, key: str, why: str) -> IntegrityError:
        return IntegrityError(key, f"{why} (encrypted repository, key {self._ensure()[1].hex()}: the object "
                              "was not sealed by this repository under this key, or was moved, swapped or altered)")

    def _trailer(self, key: str, data: bytes) -> tuple[bytes, int]:
        t = data[-sealed.TRAILER:]
        parsed = sealed.parse_trailer(t)
        if parsed is None:
            raise self._fail(key, "not a sealed object (plaintext, or foreign)")
        key_id, _, plain_len = parsed
        self._ensure()
        if key_id not in self._masters:
            raise self._fail(key, f"sealed under key {key_id.hex()}, which this repository does not have")
        return t, plain_len

    def _open(self, key: str, trailer: bytes, first: int, data: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        salt = trailer[9:25]
        master = self._masters.get(trailer[5:9])
        if master is None:  # (a remembered trailer of a key dropped since)
            raise self._fail(key, f"sealed under key {trailer[5:9].hex()}, which this repository does not have")
        try:
            return sealed.open_segments(self._aead(salt, master), trailer, self._ensure()[0], key, first, data)
        except (InvalidTag, ValueError) as e:
            raise self._fail(key, "does not authenticate" if isinstance(e, InvalidTag) else str(e)) from None

    def _remember(self, key: str, trailer: bytes) -> None:
        with self._lock:
            self._trailers[key] = trailer
            self._trailers.move_to_end(key)
            while len(self._trailers) > TRAILER_CACHE:
                self._trailers.popitem(last=False)

    def _forget(self, key: str) -> None:
        with self._lock:
            self._trailers.pop(key, None)

    # -- the ObjectStore protocol ----------------------------------------------------------------
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key`` holding ``data`` sealed (``config``: as is). Raises as the inner store."""
        if key == CONFIG:
            return self.inner.put(key, data)
        self._forget(key)
        return _info(self.inner.put(key, self._seal(key, data)), len(data))

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Compare-and-swap ``key`` on the stored object's ETag, ``data`` sealed. Raises as the inner store."""
        if key == CONFIG:
            return self.inner.put_if_match(key, data, etag)
        self._forget(key)
        return _info(self.inner.put_if_match(key, self._seal(key, data), etag), len(data))

    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """The plaintext of ``key``, or of a byte range of it (see ObjectStore.get); a ranged read
        fetches the whole segments it covers (and the trailer, unless remembered).

        Raises:
            ObjectNotFound: no such key. IntegrityError: it is not a sealed object of this
                repository under this key (plaintext, moved, swapped, altered, truncated).
        """
        if self._form >= 2 and key != CONFIG:  # (form 2 or 3: unlocked already) the common reads, in few calls
            if byte_range is None:
                return self._open2(key, self.inner.get(key))
            if type(byte_range) is tuple and len(byte_range) == 2 and byte_range[1] is None \
                    and type(byte_range[0]) is int and byte_range[0] < 0:  # a suffix read (a pack's tail)
                return self._suffix2(key, -byte_range[0])
        if key == CONFIG:
            with self._lock:
                data, self._config_bytes = self._config_bytes, None
            if data is None:
                data = self.inner.get(key)
                self._unlock_from(data)  # (the config may have changed: a slot added or removed)
            return data
        self._ensure()
        rng = check_range(key, byte_range)
        if self._form >= 2:
            return self._get2(key, rng)
        if rng is None:
            data = self.inner.get(key)
            trailer, plain_len = self._trailer(key, data)
            if sealed.sealed_size(plain_len) != len(data):
                raise self._fail(key, f"{len(data)} stored bytes for {plain_len} plaintext bytes")
            return self._open(key, trailer, 0, data[:-sealed.TRAILER])
        start, end = rng
        if start < 0:
            return self._suffix(key, -start)
        with self._lock:
            trailer = self._trailers.get(key)
        if trailer is None:
            trailer = self._read_trailer(key)
        try:
            return self._range(key, trailer, start, end)
        except IntegrityError:
            fresh = self._read_trailer(key)  # a remembered trailer of a replaced object: read it again
            if fresh == trailer:
                raise
            return self._range(key, fresh, start, end)

    # -- forms 2 and 3 (sealed2, sealed3): objects of one segment are read whole, large ones in
    # segments (form 3's large objects are form 2's)
    def _v1_in(self, tail: bytes) -> bytes | None:
        """The form-1 trailer ending ``tail`` when it is one of a key this repository has (an
        object sealed in form 1, read in a repository that writes form 2), else None."""
        t = tail[-sealed.TRAILER:]
        parsed = sealed.parse_trailer(t)
        return t if parsed is not None and parsed[0] in self._masters else None

    def _siv_for(self, key: str, key_id: bytes):
        siv = self._siv(key_id)
        if siv is None:
            raise self._fail(key, f"not a sealed object, or sealed under key {key_id.hex()}, which this repository "
                             "does not have")
        return siv

    def _open2(self, key: str, data: bytes) -> bytes:
        """The plaintext of the whole stored object ``data`` under ``key`` (form 2 or 3, or form 1)."""
        if self._keyeds3 and sealed3.SMALL_MIN <= len(data) <= sealed3.SMALL_MAX and key.startswith(sealed3.PREFIX) \
                and data[-_V1_TRAILER:-_V1_MAGIC_END] != _V1_MAGIC:
            kd3 = self._keyeds3.get(data[-_KEY_ID:])  # form 3: a pack of one segment, AES-256-GCM
            if kd3 is not None:
                try:
                    return kd3.open_stored(key, data)
                except (_InvalidTag(), ValueError) as e:
                    raise self._fail(key, "does not authenticate" if isinstance(e, _InvalidTag()) else str(e)) from None
            return self._open2_any(key, data)
        if _SMALL_MIN <= len(data) <= _SMALL_MAX and data[-_V1_TRAILER:-_V1_MAGIC_END] != _V1_MAGIC:
            # the common case, an elided or small object (no form-1 trailer to try): the key's
            # material derived once (sealed2.Keyed), no copy of the stored bytes
            kd = self._keyeds.get(data[-_KEY_ID:])
            if kd is not None:
                try:
                    return kd.open_stored(key, data)
                except (_InvalidTag(), ValueError) as e:
                    raise self._fail(key, "does not authenticate" if isinstance(e, _InvalidTag()) else str(e)) from None
        return self._open2_any(key, data)

    def _open2_any(self, key: str, data: bytes) -> bytes:
        """:meth:`_open2` of any object: form 1, large, unknown key id, malformed."""
        from cryptography.exceptions import InvalidTag
        t = self._v1_in(data)
        if t is not None and sealed.sealed_size(sealed.parse_trailer(t)[2]) == len(data):
            try:
                return self._open(key, t, 0, data[:-sealed.TRAILER])
            except IntegrityError:
                pass  # (a form-2 object whose last 33 bytes happen to look like a trailer)
        lay = (sealed3 if self._form == 3 else sealed2).layout_of(key, len(data))
        if lay is None:
            raise self._fail(key, f"{len(data)} stored bytes: no sealed object has this size (plaintext, or foreign)")
        layout, plain_len = lay
        key_id = data[-sealed2.KEY_ID:]
        siv = self._siv_for(key, key_id)
        if layout in (sealed3.ELIDED, sealed3.SMALL):
            try:
                return self._keyeds3[key_id].open_stored(key, data)
            except (InvalidTag, ValueError) as e:
                raise self._fail(key, "does not authenticate" if isinstance(e, InvalidTag) else str(e)) from None
        repo_id = self._ensure()[0]
        try:
            if layout == sealed2.LARGE:
                if int.from_bytes(data[-sealed2.LARGE_TRAILER:-sealed2.KEY_ID], "big") != plain_len:
                    raise ValueError(f"{len(data)} stored bytes for the length its trailer names")
                return sealed2.open_segments(siv, key_id, repo_id, key, plain_len, 0, data[:-sealed2.LARGE_TRAILER])
            return self._keyed(key_id).open_whole(key, layout, plain_len, data)
        except (InvalidTag, ValueError) as e:
            raise self._fail(key, "does not authenticate" if isinstance(e, InvalidTag) else str(e)) from None

    def _large_tail(self, key: str, tail: bytes) -> tuple[int, bytes]:
        """``(plaintext length, key id)`` of a large form-2 object whose stored bytes end in ``tail``."""
        plain_len = int.from_bytes(tail[-sealed2.LARGE_TRAILER:-sealed2.KEY_ID], "big")
        key_id = tail[-sealed2.KEY_ID:]
        if sealed2.layout_of(key, sealed2.stored_size(plain_len, sealed2.LARGE)) != (sealed2.LARGE, plain_len):
            raise self._fail(key, "not a sealed object (plaintext, or foreign)")
        self._siv_for(key, key_id)
        return plain_len, key_id

    def _get2(self, key: str, rng) -> bytes:
        if rng is None:
            return self._open2(key, self.inner.get(key))
        start, end = rng
        if start < 0:
            return self._suffix2(key, -start)
        with self._lock:
            known = self._trailers.get(key)
        if isinstance(known, bytes):  # a form-1 object seen before
            return self._range(key, known, start, end)
        if known is not None:
            try:
                return self._range2(key, known, start, end)
            except IntegrityError:
                self._forget(key)  # a remembered layout of a replaced object: look again
        probe = self.inner.get(key, (-(sealed3.SMALL_MAX + 1), None))  # (form 2's largest whole object is smaller)
        t = self._v1_in(probe)
        if t is not None and sealed.sealed_size(sealed.parse_trailer(t)[2]) > sealed3.SMALL_MAX:
            self._remember(key, t)
            return self._range(key, t, start, end)
        if len(probe) <= sealed3.SMALL_MAX:  # the whole object
            plain = self._open2(key, probe)
            return plain[start:end]
        known = self._large_tail(key, probe)
        self._remember(key, known)
        return self._range2(key, known, start, end)

    def _range2(self, key: str, known: tuple[int, bytes], start: int, end: int | None) -> bytes:
        from cryptography.exceptions import InvalidTag
        plain_len, key_id = known
        end = plain_len if end is None else min(end, plain_len)
        start = min(start, end)
        first, last = sealed2.segments_for(plain_len, start, end)
        last_len = min(sealed2.SEGMENT, plain_len - last * sealed2.SEGMENT) + sealed2.TAG
        data = self.inner.get(key, (first * sealed2.CSEG, last * sealed2.CSEG + last_len))
        try:
            plain = sealed2.open_segments(self._siv_for(key, key_id), key_id, self._ensure()[0], key, plain_len,
                                          first, data)
        except (InvalidTag, ValueError) as e:
            raise self._fail(key, "does not authenticate" if isinstance(e, InvalidTag) else str(e)) from None
        base = first * sealed2.SEGMENT
        return plain[start - base:end - base]

    def _suffix2(self, key: str, n: int) -> bytes:
        want = sealed2.LARGE_TRAILER + (-(-n // sealed2.SEGMENT) + 1) * sealed2.CSEG
        data = self.inner.get(key, (-want, None))
        if len(data) < want:  # the whole object
            plain = self._open2(key, data)
            return plain[-n:] if n < len(plain) else plain
        from cryptography.exceptions import InvalidTag
        if self._v1_in(data) is not None:  # a large form-1 object: its own layout
            return self._suffix(key, n)
        plain_len, key_id = self._large_tail(key, data)
        total = sealed2.stored_size(plain_len, sealed2.LARGE)
        if total < len(data):
            raise self._fail(key, f"{len(data)} stored bytes read, the trailer says {total}")
        self._remember(key, (plain_len, key_id))
        off = total - len(data)
        first = -(-off // sealed2.CSEG)
        body = data[first * sealed2.CSEG - off:len(data) - sealed2.LARGE_TRAILER]
        try:
            plain = sealed2.open_segments(self._siv_for(key, key_id), key_id, self._ensure()[0], key, plain_len,
                                          first, body)
        except (InvalidTag, ValueError) as e:
            raise self._fail(key, "does not authenticate" if isinstance(e, InvalidTag) else str(e)) from None
        return plain[-n:] if n < len(plain) else plain

    def _read_trailer(self, key: str) -> bytes:
        tail = self.inner.get(key, (-sealed.TRAILER, None))
        trailer, _ = self._trailer(key, tail)
        self._remember(key, trailer)
        return trailer

    def _range(self, key: str, trailer: bytes, start: int, end: int | None) -> bytes:
        plain_len = sealed.parse_trailer(trailer)[2]
        end = plain_len if end is None else min(end, plain_len)
        start = min(start, end)
        first, last = sealed.segments_for(plain_len, start, end)
        last_len = min(sealed.SEGMENT, plain_len - last * sealed.SEGMENT) + sealed.TAG
        data = self.inner.get(key, (first * sealed.CSEG, last * sealed.CSEG + last_len))
        plain = self._open(key, trailer, first, data)
        base = first * sealed.SEGMENT
        return plain[start - base:end - base]

    def _suffix(self, key: str, n: int) -> bytes:
        want = sealed.TRAILER + (-(-n // sealed.SEGMENT) + 1) * sealed.CSEG
        data = self.inner.get(key, (-want, None))
        trailer, plain_len = self._trailer(key, data)
        total = sealed.sealed_size(plain_len)
        if len(data) > total or (len(data) < want and len(data) != total):
            raise self._fail(key, f"{len(data)} stored bytes read, the trailer says {total}")
        self._remember(key, trailer)
        off = total - len(data)  # stored offset of data[0]
        first = -(-off // sealed.CSEG)
        body = data[first * sealed.CSEG - off:len(data) - sealed.TRAILER]
        plain = self._open(key, trailer, first, body)
        return plain[-n:] if n < len(plain) else plain

    def write_batch(self, puts, deletes: Iterable[str] = (), deletes_unless: str | None = None) -> list:
        """The inner store's atomic batch (:mod:`snapstore.stores.batch`) with every put sealed.

        An ``if_exists="same"`` put compares plaintexts. In forms 2 and 3 sealing is deterministic
        (one plaintext under one key and data key always seals to the same bytes: §27's nonces
        are derived, never drawn), so the sealed put goes to the inner store as ``"same"``, which
        compares stored bytes without a read; only when it finds other bytes there (an object
        sealed under another data key, before a rotation) is the batch tried again the way form 1
        always does it: the existing object read first, holding ``data`` it counts as written
        (its info is returned), holding other bytes the batch is refused (``BatchRefused``,
        ``same=False``). Only on a store whose capabilities declare ``atomic_batch``.

        Returns:
            Per put, its ObjectInfo (plaintext size) or None for a skipped put.
        Raises:
            BatchRefused: as the inner store; IntegrityError: an existing object does not open.
        """
        from ..errors import ObjectNotFound
        from .batch import BatchPut, BatchRefused, check_batch

        puts, deletes = check_batch(puts, deletes)
        if self._ensure() and self._form >= 2 and any(p.if_exists == "same" for p in puts):
            inner_puts = [p if p.key == CONFIG else BatchPut(p.key, self._seal(p.key, p.data), p.etag, p.if_exists)
                          for p in puts]
            for k in [p.key for p in puts] + list(deletes):
                self._forget(k)
            try:
                got = self.inner.write_batch(inner_puts, deletes, deletes_unless)
            except BatchRefused as e:
                if e.same is not False:
                    raise
                # (the batch wrote nothing: the object holds other sealed bytes; compare plaintexts)
            else:
                return [None if info is None else _info(info, len(p.data) if p.key != CONFIG else info.size)
                        for p, info in zip(puts, got)]
        inner_puts, known = [], {}
        for p in puts:
            if p.key == CONFIG:
                inner_puts.append(p)
                continue
            if p.if_exists == "same":
                try:
                    have = self.get(p.key)
                except ObjectNotFound:
                    have = None
                if have is not None:
                    if have != p.data:
                        raise BatchRefused(p.key, same=False)
                    known[p.key] = self.head(p.key)
                    inner_puts.append(BatchPut(p.key, self._seal(p.key, p.data), None, "skip"))
                    continue
                p = BatchPut(p.key, p.data, None, "fail")
            self._forget(p.key)
            inner_puts.append(BatchPut(p.key, self._seal(p.key, p.data), p.etag, p.if_exists))
        for k in deletes:
            self._forget(k)
        got = self.inner.write_batch(inner_puts, deletes, deletes_unless)
        return [known.get(p.key) if p.key in known else
                (None if info is None else _info(info, len(p.data) if p.key != CONFIG else info.size))
                for p, info in zip(puts, got)]

    def head(self, key: str) -> ObjectInfo:
        """The object's info with its plaintext size. Raises ObjectNotFound."""
        info = self.inner.head(key)
        return _info(info, plain_listed_size(key, info.size, self.form))

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> Iterator[ObjectInfo]:
        """The inner store's listing with plaintext sizes (:func:`plain_listed_size`)."""
        form = self.form
        for info in self.inner.list(prefix, start_after, limit):
            yield _info(info, plain_listed_size(info.key, info.size, form))

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """As the inner store (names only)."""
        return self.inner.list_dirs(prefix)

    def delete_many(self, keys: Iterable[str]) -> None:
        """As the inner store."""
        keys = list(keys)
        for k in keys:
            self._forget(k)
        self.inner.delete_many(keys)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()

    def _put_with_storage_class(self, key: str, data: bytes, storage_class: str) -> ObjectInfo:
        """The inner store's ``put_with_storage_class`` (an archive bundle in an S3 storage class,
        §28) of ``data`` sealed. Raises as the inner store."""
        self._forget(key)
        return _info(self.inner.put_with_storage_class(key, self._seal(key, data), storage_class), len(data))

    def __getattr__(self, name):
        # the optional methods the inner store's capabilities declare (leftovers, versioning, ...),
        # and an S3 store's storage-class methods (§28): restores carry no data; a put is sealed
        if name in ("leftovers", "remove_leftovers", "check_versioning", "remove_empty_dirs", "compact",
                    "restore_state", "request_restore"):
            return getattr(self.inner, name)
        if name == "put_with_storage_class" and hasattr(self.inner, name):
            return self._put_with_storage_class
        raise AttributeError(name)


def is_sealed(store) -> bool:
    """True if ``store`` is a :class:`SealedStore`."""
    return isinstance(store, SealedStore)


def raise_if_locked(store, cfg) -> None:
    """Refuse an encrypted repository's config ``cfg`` read through a store that cannot decrypt.

    Raises:
        KeyRequired: ``cfg`` says encryption is on and ``store`` is not a :class:`SealedStore`.
    """
    if cfg.encryption is not None and not is_sealed(store):
        slots = cfg.encryption.get("slots") if isinstance(cfg.encryption, dict) else None
        kinds = {"kms" if kmsslots.is_kms(sl) else "passphrase" for sl in slots or ()}
        ways = []
        if "passphrase" in kinds or not kinds:
            ways.append("a passphrase ($SNAPSTORE_PASSPHRASE, or passphrase=... in Python)")
        if "kms" in kinds:
            ways.append("a KMS key of one of its slots ($SNAPSTORE_KMS_KEY, or kms_key_id=... in Python)")
        raise KeyRequired(f"the repository at {store.url} is encrypted: give {' or '.join(ways)}")


__all__ = ["SealedStore", "UNSEALED_SIZE", "is_sealed", "plain_listed_size", "raise_if_locked", "keys_from_env", "sealed_if_keyed",
           "repository_form"]
