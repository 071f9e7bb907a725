"""Sealed objects of form 3 (docs/format.md §27 "Sealed objects, form 3"): packs of one segment
AES-256-GCM sealed under a synthetic nonce stored in front, everything else as form 2; exact
listed sizes; the nonce a function of the key, the authenticated data and the plaintext (no
(key, nonce) pair encrypts two plaintexts, whatever the object key); form-2 repositories keep
writing form 2; everything that does not authenticate refused."""

from __future__ import annotations

import os

import blake3
import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import elide, keyslots, sealed2, sealed3
from snapstore.format.config import RepoConfig
from snapstore.maintenance.sealedcheck import verify_structure
from snapstore.repo.repository import Repository
from snapstore.stores.crypt import UNSEALED_SIZE, SealedStore
from snapstore.stores.local import LocalStore
from tests.helpers.sealed_fixtures import put_raw

PW = "pw"
PACK = "packs/ab/ab00000000000001"
S = sealed2.SEGMENT


def opened(inner) -> SealedStore:
    return SealedStore(inner, PW, scrypt_n=1024)


def new_repo(inner) -> SealedStore:
    store = opened(inner)
    Repository.init(store)
    return store


def pack_plain(n: int, key: str = PACK) -> bytes:
    """A pack-shaped plaintext of ``n`` bytes (at least 29) for ``key``: "SNPK", version 1, the pack
    id ``key`` names, random bytes, its checksum (which holds)."""
    head = b"SNPK\x01" + bytes.fromhex(key[-16:]) + os.urandom(n - 29)
    return head + blake3.blake3(head).digest(16)


def saved_repo(tmp_path, name="r"):
    inner = LocalStore(tmp_path / name, fsync=False)
    store = new_repo(inner)
    mgr = CheckpointManager(store)
    msgs = []
    for i in range(6):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "lorem " * (30 * i) + os.urandom(200 * i).hex()}]
        mgr.save("run", msgs, step=i)
    return inner, store, mgr, msgs


def test_new_repositories_are_form_3_packs_gcm_the_rest_form_2(tmp_path):
    inner, store, mgr, msgs = saved_repo(tmp_path)
    assert store.form == 3
    assert RepoConfig.from_bytes("config", inner.get("config")).encryption["cipher"] == keyslots.CIPHER_3
    fresh = opened(inner)
    packs = 0
    for info in fresh.list(""):
        if info.key == "config":
            continue
        plain, stored = fresh.get(info.key), inner.get(info.key)
        assert len(plain) == info.size == fresh.head(info.key).size, info.key
        if info.key.startswith("packs/"):
            packs += 1
            # nonce 12 + tag 16 + key id 4, less the checksum 16 and the head 13 (magic, version, pack id)
            assert elide.elide(plain) is not None and len(stored) == len(plain) + 3, info.key
            assert stored[-4:] == bytes.fromhex(fresh.key_id)
        elif len(plain) >= elide.MIN_ELIDABLE:
            assert len(stored) == len(plain) + 4, info.key  # form 2, elided
        else:
            assert len(stored) == len(plain) + 20, info.key  # form 2, small
    assert packs >= 2
    assert CheckpointManager(opened(inner)).latest("run").messages == msgs
    assert CheckpointManager(opened(inner)).verify(read_data=True).ok
    rep = verify_structure(inner, RepoConfig.from_bytes("config", inner.get("config")))
    assert not rep.errors, rep.errors


@pytest.mark.parametrize("n", [34, 300, 40_000, S, S + 29])
def test_elided_packs_round_trip_with_ranges_and_suffixes(tmp_path, n):
    store = new_repo(LocalStore(tmp_path / "r", fsync=False))
    plain = pack_plain(n)
    store.put(PACK, plain)
    raw = store.inner.get(PACK)
    assert len(raw) == n + 3 and sealed3.layout_of(PACK, len(raw)) == (sealed3.ELIDED, n)
    fresh = opened(store.inner)
    got = fresh.get(PACK)
    assert got == plain and isinstance(got, elide.RestoredPack)  # its checksum put back by the reader
    assert fresh.head(PACK).size == n
    assert opened(store.inner).get(PACK, (3, 20)) == plain[3:20]
    assert opened(store.inner).get(PACK, (-7, None)) == plain[-7:]
    assert opened(store.inner).get(PACK, (-(n + 50), None)) == plain


def test_a_pack_whose_checksum_does_not_hold_is_kept_whole_and_large_packs_are_form_2(tmp_path):
    store = new_repo(LocalStore(tmp_path / "r", fsync=False))
    bad = bytearray(pack_plain(500))
    bad[-1] ^= 1
    store.put(PACK, bytes(bad))
    assert len(store.inner.get(PACK)) == 500 + 32 and opened(store.inner).get(PACK) == bytes(bad)
    assert store.head(PACK).size == 500 + 29  # (listed at the elided size its stored size has, §27)
    other_id = pack_plain(500, "packs/cd/cd00000000000001")  # a pack whose head names another id: whole
    store.put_if_match(PACK, other_id, store.head(PACK).etag)
    assert len(store.inner.get(PACK)) == 500 + 32 and opened(store.inner).get(PACK) == other_id
    odd = "packs/ab/not-a-pack-id"  # a key naming no pack id: never elided3, listed exactly
    store.put(odd, pack_plain(500))
    assert len(store.inner.get(odd)) == 532 and store.head(odd).size == 500 and opened(store.inner).get(odd)
    for n in (0, 4):  # below every elided size: small3
        k = f"packs/ab/ab0000000000000{n}"
        store.put(k, os.urandom(n))
        assert len(store.inner.get(k)) == n + 32 and store.head(k).size == n
        assert opened(store.inner).get(k) == store.get(k)
    big = pack_plain(3 * S + 5, "packs/ab/ab00000000000009")  # more than one segment: form 2's large layout (GCM-SIV segments)
    k = "packs/ab/ab00000000000009"
    store.put(k, big)
    raw = store.inner.get(k)
    assert len(raw) == sealed2.stored_size(len(big), sealed2.LARGE)
    fresh = opened(store.inner)
    assert fresh.get(k) == big and fresh.get(k, (S - 3, 2 * S + 9)) == big[S - 3:2 * S + 9]
    assert opened(store.inner).get(k, (-100, None)) == big[-100:]


def test_layouts_are_told_apart_by_key_and_size():
    seen = {}
    for n in list(range(0, 50)) + [S - 1, S, S + 1, S + 16, S + 17, S + 29, S + 30, 2 * S, 5 * S + 3]:
        for layout in (sealed3.ELIDED, sealed3.SMALL, sealed2.LARGE):
            if layout == sealed3.ELIDED and not 34 <= n <= S + 29:
                continue
            if layout == sealed3.SMALL and n > 4:
                continue
            if layout == sealed2.LARGE and n <= S:
                continue
            size = sealed3.stored_size(n, layout) if layout != sealed2.LARGE else sealed2.stored_size(n, layout)
            assert sealed3.layout_of(PACK, size) == (layout, n), (n, layout)
            assert size not in seen
            seen[size] = n
    for size in list(range(0, 32)) + list(range(sealed3.SMALL_MAX + 1, sealed3.SMALL_MAX + 13)):
        assert sealed3.layout_of(PACK, size) is None, size
    other = "runs/bx/m/ffffffffffffffff"  # every other key: form 2's sizes
    for size in (20, 24, 25, 300, S + 20, sealed2.stored_size(2 * S, sealed2.LARGE)):
        assert sealed3.layout_of(other, size) == sealed2.layout_of(other, size)


def test_synthetic_nonces_never_pair_one_key_nonce_with_two_plaintexts(tmp_path):
    store = new_repo(LocalStore(tmp_path / "r", fsync=False))
    one, two = pack_plain(400), pack_plain(400)
    store.put(PACK, one)
    first = store.inner.get(PACK)
    store.put_if_match(PACK, one, store.head(PACK).etag)  # the same bytes again (a retried put)
    assert store.inner.get(PACK) == first  # deterministic: only equality shows
    store.put_if_match(PACK, two, store.head(PACK).etag)  # a pack id drawn twice, other bytes
    assert store.inner.get(PACK)[:12] != first[:12]  # another nonce
    other = "packs/ab/ab00000000000002"
    store.put(other, one)  # the same bytes under another key
    assert store.inner.get(other)[:12] != first[:12]
    # a create-only PUT refused after its body went over the wire: its nonce too is its own
    from snapstore.errors import PreconditionFailed
    three = pack_plain(400)
    sent = []
    real_put = store.inner.put

    def watching_put(key, data):
        sent.append(data)
        return real_put(key, data)
    store.inner.put = watching_put
    with pytest.raises(PreconditionFailed):
        store.put(other, three)
    store.inner.put = real_put
    nonces = {first[:12], store.inner.get(PACK)[:12], store.inner.get(other)[:12], sent[0][:12]}
    assert len(nonces) == 4


def test_tampered_packs_are_refused(tmp_path):
    inner, store, mgr, _ = saved_repo(tmp_path)
    other_inner, _, _, _ = saved_repo(tmp_path, "other")
    ps = sorted(i.key for i in inner.list("packs/"))
    a, b = ps[0], ps[1]
    ra, rb = inner.get(a), inner.get(b)
    put_raw(inner, a, rb)  # swapped
    put_raw(inner, b, ra)
    for k in (a, b):
        with pytest.raises(IntegrityError, match=rf"{k}.*key [0-9a-f]{{8}}"):
            opened(inner).get(k)
    put_raw(inner, a, ra)
    put_raw(inner, b, rb)
    moved = "packs/ff/ff00000000000000"
    put_raw(inner, moved, ra)  # moved to another pack id
    with pytest.raises(IntegrityError):
        opened(inner).get(moved)
    for i in list(range(0, 14)) + list(range(14, len(ra), max(1, len(ra) // 9))) + [len(ra) - 1]:
        bad = bytearray(ra)  # any flipped byte: the nonce's, the tag's, the key id's
        bad[i] ^= 0x10
        put_raw(inner, a, bytes(bad))
        with pytest.raises(IntegrityError):
            opened(inner).get(a)
        with pytest.raises(IntegrityError):
            opened(inner).get(a, (-5, None))
    for cut in (ra[:-5] + ra[-4:], ra[1:], ra[:-1], ra[:12] + ra[13:]):
        put_raw(inner, a, cut)
        with pytest.raises(IntegrityError):
            opened(inner).get(a)
    other_packs = sorted(i.key for i in other_inner.list("packs/"))
    put_raw(inner, a, other_inner.get(other_packs[0]))  # from another repository (same passphrase)
    with pytest.raises(IntegrityError):
        opened(inner).get(a)
    plain = mgr.store.get(b)
    put_raw(inner, a, bytes(plain))  # a plaintext pack dropped in
    with pytest.raises(IntegrityError):
        opened(inner).get(a)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCMSIV
    siv = AESGCMSIV(sealed2.object_key(keyslots.object_master(store.data_key())))  # a form-2 sealing at a form-3 key
    repo_id = bytes.fromhex(RepoConfig.from_bytes("config", inner.get("config")).repo_id)
    put_raw(inner, a, sealed2.seal(siv, bytes.fromhex(store.key_id), repo_id, a, bytes(plain)))
    with pytest.raises(IntegrityError):
        opened(inner).get(a)


def test_the_cipher_switched_to_form_2_in_the_config_is_refused(tmp_path):
    inner = LocalStore(tmp_path / "r", fsync=False)
    new_repo(inner)
    cfg = RepoConfig.from_bytes("config", inner.get("config"))
    cfg.encryption["cipher"] = keyslots.CIPHER_SIV  # without the data key: the MAC no longer holds
    inner.put_if_match("config", cfg.to_bytes(), inner.head("config").etag)
    with pytest.raises(IntegrityError, match="config"):
        Repository.open(opened(inner), create=False)


def test_verify_without_the_key_knows_form_3_sizes(tmp_path):
    inner, store, mgr, _ = saved_repo(tmp_path)
    cfg = RepoConfig.from_bytes("config", inner.get("config"))
    assert not verify_structure(inner, cfg).errors
    p = sorted(i.key for i in inner.list("packs/"))[0]
    raw = inner.get(p)
    put_raw(inner, p, raw[:-4] + b"\0\0\0\0")  # another key id
    assert [e.code for e in verify_structure(inner, cfg).errors] == ["corrupt-sealed"]
    put_raw(inner, p, os.urandom(20))  # a size no form-3 pack has
    assert [e.code for e in verify_structure(inner, cfg).errors] == ["corrupt-sealed"]
    assert opened(inner).head(p).size == UNSEALED_SIZE + 20
