"""Sealed objects of form 2 (docs/format.md §27 "Sealed objects, form 2"): checksums left out and
put back, exact listed sizes, nonces derived from the key, form-1 objects and form-1 repositories
still read (and written), and everything that does not authenticate refused. (Repositories are
created in form 3 since; ``new_repo`` here turns each into a form-2 one, as created before.)"""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import codec, elide, keyslots, sealed, sealed2
from snapstore.format.config import RepoConfig
from snapstore.repo.repository import Repository
from snapstore.stores.crypt import SealedStore
from snapstore.stores.local import LocalStore
from tests.helpers.sealed_fixtures import put_raw

PW = "pw"


def opened(inner) -> SealedStore:
    return SealedStore(inner, PW, scrypt_n=1024)


def new_repo(inner) -> SealedStore:
    """A new form-2 repository at ``inner`` (as created before form 3), opened."""
    Repository.init(opened(inner))
    as_form(inner, keyslots.CIPHER_SIV)
    return opened(inner)


def as_form(inner, cipher: str) -> None:
    """Make the repository at ``inner`` (empty but for its config) one whose config names
    ``cipher``, its MAC recomputed as that version computed it."""
    store = opened(inner)
    cfg = RepoConfig.from_bytes("config", inner.get("config"))
    cfg.encryption["cipher"] = cipher
    cfg.encryption["mac"] = keyslots.config_mac(store.data_key(), cfg)
    inner.put_if_match("config", cfg.to_bytes(), inner.head("config").etag)


def as_form1(inner) -> None:
    """Make the repository at ``inner`` one created before form 2 (cipher AES-256-GCM, its MAC
    recomputed as that version computed it)."""
    as_form(inner, keyslots.CIPHER)


def saved_repo(tmp_path, name="r"):
    inner = LocalStore(tmp_path / name, fsync=False)
    store = new_repo(inner)
    mgr = CheckpointManager(store)
    msgs = []
    for i in range(6):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "lorem " * (30 * i)}]
        mgr.save("run", msgs, step=i)
    return inner, store, mgr, msgs


def test_real_objects_are_elided_listed_exactly_and_read_back(tmp_path):
    inner, store, mgr, msgs = saved_repo(tmp_path)
    assert store.form == 2
    fresh = opened(inner)
    listed = {i.key: i.size for i in fresh.list("") if i.key != "config"}
    raw = {i.key: i.size for i in inner.list("") if i.key != "config"}
    kinds = set()
    for key, size in listed.items():
        plain = fresh.get(key)
        assert len(plain) == size == fresh.head(key).size, key
        if size >= elide.MIN_ELIDABLE:
            assert elide.elide(plain) is not None, key  # a checksum that holds: left out
            assert raw[key] == size + 4, key  # stored: the plaintext less its checksum, a tag, the key id
            kinds.add(plain[:4])
        else:
            assert raw[key] == size + 20, key
    assert {b"SNMF", b"SNPK"} <= kinds
    assert CheckpointManager(opened(inner)).latest("run").messages == msgs
    assert CheckpointManager(opened(inner)).verify(read_data=True).ok


@pytest.mark.parametrize("magic", [b"SNMF", b"SNPK", b"SNLG"])
def test_each_shape_round_trips_and_a_bad_checksum_is_kept_whole(tmp_path, magic):
    store = new_repo(LocalStore(tmp_path / "r", fsync=False))
    body = os.urandom(300)
    if magic == b"SNMF":
        plain = codec.seal_envelope(magic, 1, body, compress=False)
    elif magic == b"SNLG":
        import blake3
        plain = magic + b"\x01" + blake3.blake3(body).digest(16) + body
    else:
        import blake3
        head = magic + body
        plain = head + blake3.blake3(head).digest(16)
    assert elide.restore(elide.elide(plain)) == plain
    k = "runs/bx/m/ffffffffffffffff"
    store.put(k, plain)
    assert len(store.inner.get(k)) == len(plain) + 4 and store.get(k) == plain and store.head(k).size == len(plain)
    assert store.get(k, (3, 40)) == plain[3:40] and store.get(k, (-7, None)) == plain[-7:]
    bad = bytearray(plain)
    bad[-1] ^= 1  # its checksum no longer holds: stored whole, read back as it was
    store.put_if_match(k, bytes(bad), store.head(k).etag)
    assert len(store.inner.get(k)) == len(bad) + 20 and opened(store.inner).get(k) == bytes(bad)
    assert store.head(k).size == len(bad) + 16  # (listed at the elided size its stored size has, §27)


def test_nonces_come_from_the_key_equal_pairs_reveal_only_equality(tmp_path):
    store = new_repo(LocalStore(tmp_path / "r", fsync=False))
    k, other = "runs/bx/c/bx", "runs/bx/c/by"
    store.put(k, b"one")
    first = store.inner.get(k)
    store.put_if_match(k, b"one", store.head(k).etag)  # the same plaintext again at the same key
    assert store.inner.get(k) == first  # deterministic (GCM-SIV): equal, and only equality, shows
    store.put_if_match(k, b"two", store.head(k).etag)
    assert store.inner.get(k) != first
    store.put(other, b"one")
    assert store.inner.get(other) != first  # another key: another nonce


def test_tampered_elided_objects_are_refused(tmp_path):
    inner, store, mgr, _ = saved_repo(tmp_path)
    other_inner, _, _, _ = saved_repo(tmp_path, "other")
    ms = sorted(i.key for i in inner.list("runs/") if "/m/" in i.key and i.size > 100)
    a, b = ms[0], ms[1]
    ra, rb = inner.get(a), inner.get(b)
    put_raw(inner, a, rb)  # swapped
    put_raw(inner, b, ra)
    for k in (a, b):
        with pytest.raises(IntegrityError, match=rf"{k}.*key [0-9a-f]{{8}}"):
            opened(inner).get(k)
    put_raw(inner, a, ra)
    put_raw(inner, b, rb)
    for i in range(0, len(ra), max(1, len(ra) // 7)):  # any flipped byte, the key id's too
        bad = bytearray(ra)
        bad[i] ^= 0x10
        put_raw(inner, a, bytes(bad))
        with pytest.raises(IntegrityError):
            opened(inner).get(a)
    for cut in (ra[:-5] + ra[-4:], ra[1:], ra[:-1]):
        put_raw(inner, a, cut)
        with pytest.raises(IntegrityError):
            opened(inner).get(a)
    put_raw(inner, a, other_inner.get(a))  # the same key's object from another repository (same passphrase)
    with pytest.raises(IntegrityError):
        opened(inner).get(a)
    plain = elide.restore(b"SNMF\x04\x00" + os.urandom(200))
    put_raw(inner, a, plain)  # a plaintext record dropped in
    with pytest.raises(IntegrityError):
        opened(inner).get(a)


def test_a_repository_created_before_form_2_keeps_form_1(tmp_path):
    inner = LocalStore(tmp_path / "r", fsync=False)
    new_repo(inner)
    as_form1(inner)
    store = opened(inner)
    assert store.form == 1
    mgr = CheckpointManager(store)
    msgs = [{"role": "user", "content": "hello " * 50}]
    mgr.save("run", msgs)
    for i in inner.list(""):
        if i.key != "config":
            p = sealed.plain_size(i.size)
            assert p is not None and len(store.get(i.key)) == p == store.head(i.key).size
            assert sealed.parse_trailer(inner.get(i.key)[-sealed.TRAILER:]) is not None
    assert CheckpointManager(opened(inner)).latest("run").messages == msgs


def test_form_1_objects_read_in_a_form_2_repository(tmp_path):
    inner = LocalStore(tmp_path / "r", fsync=False)
    store = new_repo(inner)
    S = sealed.SEGMENT
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    for n in (0, 1, 700, 3 * S + 11):
        data = os.urandom(n)
        salt = os.urandom(16)
        master = keyslots.object_master(store.data_key())
        k = f"archive/data/standard/2026-12/{n:016x}"
        put_raw(inner, k, sealed.seal(AESGCM(keyslots.object_key(master, salt)), bytes.fromhex(store.key_id), salt,
                                      store._ensure()[0], k, data))
        fresh = opened(inner)
        assert fresh.get(k) == data
        assert fresh.get(k, (-5, None)) == data[-5:] and opened(inner).get(k, (1, 2 * S)) == data[1:2 * S]
        assert fresh.get(k, (n // 2, None)) == data[n // 2:]
        bad = bytearray(inner.get(k))
        bad[0 if n else -1] ^= 1
        put_raw(inner, k, bytes(bad))
        with pytest.raises(IntegrityError):
            opened(inner).get(k)


def test_the_cipher_switched_back_in_the_config_is_refused(tmp_path):
    inner = LocalStore(tmp_path / "r", fsync=False)
    new_repo(inner)
    cfg = RepoConfig.from_bytes("config", inner.get("config"))
    assert cfg.encryption["cipher"] == sealed2.CIPHER
    cfg.encryption["cipher"] = keyslots.CIPHER  # an attacker's downgrade, without the data key
    inner.put_if_match("config", cfg.to_bytes(), inner.head("config").etag)
    with pytest.raises(IntegrityError, match="config"):
        Repository.open(opened(inner), create=False)


def test_layouts_are_told_apart_by_key_and_size():
    S = sealed2.SEGMENT
    for key in ("packs/00/0000000000000000", "archive/data/standard/2026-12/00"):
        seen = {}
        for n in list(range(0, 30)) + [S - 1, S, S + 1, S + 16, S + 17, 2 * S, 5 * S + 3]:
            for layout in (sealed2.ELIDED, sealed2.SMALL, sealed2.LARGE):
                if layout == sealed2.ELIDED and not (elide.elidable_key(key) and 21 <= n <= S + 16):
                    continue
                if layout == sealed2.SMALL and (n > S or (elide.elidable_key(key) and n > 4)):
                    continue
                if layout == sealed2.LARGE and n <= S + (16 if elide.elidable_key(key) else 0):
                    continue
                size = sealed2.stored_size(n, layout)
                assert sealed2.layout_of(key, size) == (layout, n), (key, n, layout)
                assert size not in seen
                seen[size] = n


def test_a_form_1_repository_moves_to_form_2_through_a_portable_bundle(tmp_path):
    # (rekey keeps a repository's form: sizes are listed by it, so a form switched in place would
    # list form-1 stubs and voids as 45- and 46-byte objects mid-way; README "Client-side encryption")
    src_inner = LocalStore(tmp_path / "old", fsync=False)
    new_repo(src_inner)
    as_form1(src_inner)
    src = CheckpointManager(opened(src_inner))
    assert src.store.form == 1
    msgs = []
    for i in range(4):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "lorem " * (20 * i)}]
        src.save("run", msgs, step=i)
    assert all(len(src_inner.get(i.key)) - i.size in (49, 65) for i in opened(src_inner).list("runs/"))
    src.export_bundle(["run"], str(tmp_path / "runs.snap"))
    dst_inner = LocalStore(tmp_path / "new", fsync=False)
    dst = CheckpointManager(new_repo(dst_inner))
    dst.import_bundle(str(tmp_path / "runs.snap"))
    fresh = opened(dst_inner)
    assert fresh.form == 2
    assert CheckpointManager(fresh).latest("run").messages == msgs
    sizes = {i.key: (i.size, len(dst_inner.get(i.key))) for i in fresh.list("") if i.key != "config"}
    assert sizes and all(stored - listed in (4, 20) for listed, stored in sizes.values())  # form 2 only
    assert CheckpointManager(opened(dst_inner)).verify(read_data=True).ok
