"""SealedStore (snapstore.stores.crypt, docs/format.md §27) on real stores: sizes, ranged reads,
conditional writes, and objects that were not sealed here refused with IntegrityError."""

from __future__ import annotations

import os

import pytest

from snapstore.errors import EncryptionError, IntegrityError, ObjectNotFound, PreconditionFailed, WrongPassphrase
from snapstore.format import sealed, sealed2
from snapstore.repo.repository import Repository
from snapstore.stores.crypt import UNSEALED_SIZE, SealedStore
from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore

S = sealed.SEGMENT
SIZES = [0, 1, 15, S - 1, S, S + 1, 2 * S, 3 * S + 5]
BLOB = "archive/data/standard/2026-12/"
"""Objects of arbitrary bytes go under archive bundle keys (§28): a kind whose objects carry no
checksum of their own, so form 2 stores them whole (packs, records and log segments: below)."""


def stored_len(n: int) -> int:
    """Stored bytes of a form-2 object of ``n`` arbitrary plaintext bytes."""
    return sealed2.stored_size(n, sealed2.SMALL if n <= S else sealed2.LARGE)


def sealed_repo(inner, pw="pw"):
    store = SealedStore(inner, pw, scrypt_n=1024)
    Repository.init(store)
    return store


@pytest.fixture(params=["memory", "local"])
def inner(request, tmp_path):
    s = MemoryStore() if request.param == "memory" else LocalStore(tmp_path / "r", fsync=False)
    yield s
    s.close()


def test_sizes_and_whole_reads_round_trip(inner):
    store = sealed_repo(inner)
    for n in SIZES:
        data = os.urandom(n)
        info = store.put(f"{BLOB}{n:016x}", data)
        assert info.size == n
        assert store.get(f"{BLOB}{n:016x}") == data
        assert store.head(f"{BLOB}{n:016x}").size == n
        raw = inner.get(f"{BLOB}{n:016x}")
        assert len(raw) == stored_len(n) and data[:8] not in raw[:-4] or n < 8
    assert {i.key: i.size for i in store.list(BLOB)} == {f"{BLOB}{n:016x}": n for n in SIZES}


@pytest.mark.parametrize("n", SIZES)
def test_ranged_reads_equal_slices(inner, n):
    store = sealed_repo(inner)
    data = os.urandom(n)
    k = BLOB + "abababababababab"
    store.put(k, data)
    cuts = sorted({0, 1, n // 3, S - 1, S, S + 7, n - 1, n, n + 10})
    for a in cuts:
        for b in cuts:
            if 0 <= a <= b:
                assert store.get(k, (a, b)) == data[a:b], (a, b)
                assert SealedStore(inner, "pw", scrypt_n=1024).get(k, (a, b)) == data[a:b], (a, b)  # nothing remembered
        if a >= 0:
            assert store.get(k, (a, None)) == data[a:]
    for m in (1, 100, S, S + 1, 2 * S + 3, n + 5):
        fresh = SealedStore(inner, "pw", scrypt_n=1024)
        assert fresh.get(k, (-m, None)) == data[-m:]


def test_suffix_then_range_costs_one_request_each(inner):
    store = sealed_repo(inner)
    data = os.urandom(5 * S + 123)
    store.put("packs/cd/cdcdcdcdcdcdcdcd", data)  # (too large to elide: stored whole, in segments)
    before = inner.stats.snapshot()
    assert store.get("packs/cd/cdcdcdcdcdcdcdcd", (-1000, None)) == data[-1000:]
    assert store.get("packs/cd/cdcdcdcdcdcdcdcd", (S + 10, 2 * S + 20)) == data[S + 10:2 * S + 20]
    assert inner.stats.since(before).counts["GET"] == 2


def test_conditional_writes_pass_through(inner):
    store = sealed_repo(inner)
    info = store.put("runs/bx/c/bx", b"one")
    with pytest.raises(PreconditionFailed):
        store.put("runs/bx/c/bx", b"two")
    with pytest.raises(PreconditionFailed):
        store.put_if_match("runs/bx/c/bx", b"two", "not-the-etag")
    store.put_if_match("runs/bx/c/bx", b"two", info.etag)
    assert store.get("runs/bx/c/bx") == b"two"


def test_moved_swapped_flipped_and_plaintext_objects_are_refused(inner):
    store = sealed_repo(inner)
    a, b = "packs/aa/aaaaaaaaaaaaaaaa", "packs/bb/bbbbbbbbbbbbbbbb"
    store.put(a, b"A" * 100)
    store.put(b, b"B" * 100)
    ra, rb = inner.get(a), inner.get(b)
    inner.delete_many([a, b])
    inner.put(a, rb)  # swapped
    inner.put(b, ra)
    for k in (a, b):
        with pytest.raises(IntegrityError, match=rf"{k}.*key [0-9a-f]{{8}}"):
            store.get(k)
        with pytest.raises(IntegrityError):
            store.get(k, (0, 10))
    inner.put("packs/cc/cccccccccccccccc", ra)  # copied under a third name
    with pytest.raises(IntegrityError):
        store.get("packs/cc/cccccccccccccccc")
    for plain in (b"", b"\x00", b"SNPK plaintext pack"):
        inner.delete_many(["runs/bx/m/ffffffffffffffff"])
        inner.put("runs/bx/m/ffffffffffffffff", plain)
        listed = {i.key: i.size for i in store.list("runs/")}
        assert listed["runs/bx/m/ffffffffffffffff"] >= UNSEALED_SIZE  # never a 0-byte stub or 1-byte void
        with pytest.raises(IntegrityError):
            store.get("runs/bx/m/ffffffffffffffff")


def test_flipped_byte_and_truncation_refused(inner):
    store = sealed_repo(inner)
    k = "packs/dd/dddddddddddddddd"
    store.put(k, os.urandom(2 * S + 9))
    raw = inner.get(k)
    for pos in (0, S + 20, len(raw) - sealed2.LARGE_TRAILER - 1, len(raw) - 5, len(raw) - 1):
        bad = bytearray(raw)
        bad[pos] ^= 0x40
        inner.delete_many([k])
        inner.put(k, bytes(bad))
        with pytest.raises(IntegrityError):
            SealedStore(inner, "pw", scrypt_n=1024).get(k)
    inner.delete_many([k])
    for cut in (raw[:-sealed2.LARGE_TRAILER - 1] + raw[-sealed2.LARGE_TRAILER:], raw[:sealed2.CSEG] + raw[-12:],
                raw[:-sealed2.CSEG] + raw[-12:]):
        inner.delete_many([k])
        inner.put(k, cut)
        with pytest.raises(IntegrityError):
            SealedStore(inner, "pw", scrypt_n=1024).get(k)
        with pytest.raises(IntegrityError):
            SealedStore(inner, "pw", scrypt_n=1024).get(k, (-10, None))


def test_other_repository_same_passphrase_refused(tmp_path):
    one, two = sealed_repo(MemoryStore()), sealed_repo(MemoryStore())
    one.put("runs/bx/m/ffffffffffffffff", b"record of repository one")
    two.inner.put("runs/bx/m/ffffffffffffffff", one.inner.get("runs/bx/m/ffffffffffffffff"))
    with pytest.raises(IntegrityError):
        two.get("runs/bx/m/ffffffffffffffff")


def test_wrong_passphrase_and_plain_repository():
    inner = MemoryStore()
    sealed_repo(inner, "right")
    with pytest.raises(WrongPassphrase, match="wrong passphrase"):
        SealedStore(inner, "wrong", scrypt_n=1024).get("runs/x/m/0")
    with pytest.raises(EncryptionError, match="is encrypted"):
        Repository.open(inner, create=False)
    plain = MemoryStore()
    Repository.init(plain)
    with pytest.raises(EncryptionError, match="not encrypted"):
        Repository.open(SealedStore(plain, "pw"), create=False)
    with pytest.raises(ObjectNotFound):
        SealedStore(MemoryStore(), "pw").get("runs/x/m/0")
    with pytest.raises(EncryptionError):
        SealedStore(MemoryStore(), "")


def test_atomic_batch_sealed_and_same_compares_plaintext(tmp_path):
    from snapstore.stores.batch import BatchPut, BatchRefused
    from snapstore.stores.sqlite import SqliteStore

    for inner in (LocalStore(tmp_path / "d", fsync=False), SqliteStore(str(tmp_path / "s.db"))):
        store = sealed_repo(inner)
        assert store.capabilities.atomic_batch
        k, m = "packs/ee/eeeeeeeeeeeeeeee", "runs/bx/m/fffffffffffffffe"
        got = store.write_batch([BatchPut(k, b"pack", if_exists="same"), BatchPut(m, b"")])
        assert [i.size for i in got] == [4, 0]
        assert store.get(k) == b"pack" and store.get(m) == b"" and b"pack" not in inner.get(k)
        again = store.write_batch([BatchPut(k, b"pack", if_exists="same")])  # a retry: counts as written
        assert again[0].size == 4
        with pytest.raises(BatchRefused):
            store.write_batch([BatchPut(k, b"other", if_exists="same")])
        with pytest.raises(BatchRefused):
            store.write_batch([BatchPut(m, b"x")])
        inner.close()


def test_atomic_batch_same_reads_nothing_and_survives_rotation(tmp_path):
    """Forms 2 and 3 seal deterministically: an ``if_exists="same"`` put (a save's pack) is sealed
    and compared by the inner store, with no GET; after a key rotation the same plaintext seals to
    other bytes, and the retry still counts as written (the plaintexts compared), while other
    bytes are still refused."""
    from snapstore.maintenance import keyslots
    from snapstore.stores.batch import BatchPut, BatchRefused

    inner = LocalStore(tmp_path / "d", fsync=False)
    store = sealed_repo(inner)
    small, large = "packs/ee/eeeeeeeeeeeeeeee", "packs/dd/dddddddddddddddd"
    big = os.urandom(200 << 10)  # form 2's segmented layout (over one 64 KiB segment)
    gets = inner.stats.counts["GET"]
    got = store.write_batch([BatchPut(small, b"pack", if_exists="same"), BatchPut(large, big, if_exists="same")])
    assert [i.size for i in got] == [4, len(big)]
    again = store.write_batch([BatchPut(small, b"pack", if_exists="same"), BatchPut(large, big, if_exists="same")])
    assert [i.size for i in again] == [4, len(big)]
    assert inner.stats.counts["GET"] == gets  # neither the first write nor the retry read anything
    stored = inner.get(small)
    keyslots.rotate_key(store, scrypt_n=1024)
    fresh = SealedStore(inner, "pw")
    retry = fresh.write_batch([BatchPut(small, b"pack", if_exists="same")])  # sealed under the new key: other bytes
    assert retry[0].size == 4 and inner.get(small) == stored  # counted as written, the object left as it was
    with pytest.raises(BatchRefused) as e:
        fresh.write_batch([BatchPut(small, b"other", if_exists="same")])
    assert e.value.same is False
    assert fresh.get(small) == b"pack" and fresh.get(large) == big
    inner.close()


@pytest.mark.parametrize("setting", ["removals", "level", "repo_id"])
def test_config_settings_changed_outside_are_refused(setting):
    from snapstore.format.config import RepoConfig

    inner = MemoryStore()
    sealed_repo(inner)
    cfg = RepoConfig.from_bytes("config", inner.get("config"))
    if setting == "repo_id":
        cfg.repo_id = "0" * 16
    else:
        setattr(cfg, setting, 0 if setting == "removals" else 19)  # e.g. gaps no longer reported by verify
    inner.put_if_match("config", cfg.to_bytes(), inner.head("config").etag)
    # (a changed repository id already breaks every slot's authenticated data: no slot opens)
    with pytest.raises(WrongPassphrase if setting == "repo_id" else IntegrityError,
                       match="no key slot" if setting == "repo_id" else "config"):
        Repository.open(SealedStore(inner, "pw"), create=False)
