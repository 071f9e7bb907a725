"""Byte-range reads: the stores' ranged ``get`` (whole, ``[start, end)``, open and suffix ranges)
on the local store, the memory store and S3 (moto in process and over HTTP), and the reader's
ranged fetch of packs much larger than what a checkpoint needs (docs/format.md §6, §11)."""

from __future__ import annotations

import os

import pytest

from snapstore.errors import IntegrityError, InvalidInputError, ObjectNotFound
from tests.s3_fixtures import store_factory  # noqa: F401 - fixture

KINDS = ("memory", "local", "s3", "s3-http")
DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize("kind", KINDS)
def test_store_ranges(kind, store_factory):  # noqa: F811
    store = store_factory(kind)
    store.put("packs/ab/abcdef0123456789", DATA)
    key = "packs/ab/abcdef0123456789"
    before = store.stats.snapshot()
    cases = {None: DATA, (0, 10): DATA[:10], (100, 5000): DATA[100:5000], (10_000, 20_000): DATA[10_000:],
             (10_240, 10_300): b"", (7, 7): b"", (5000, None): DATA[5000:], (0, None): DATA,
             (-36, None): DATA[-36:], (-10_240, None): DATA, (-1 << 40, None): DATA}
    for rng, want in cases.items():
        assert store.get(key, rng) == want, rng
    d = store.stats.since(before)
    assert d.counts["GET"] + d.counts["HEAD"] == len(cases)
    assert d.bytes_down == sum(len(v) for v in cases.values())
    for bad in ((-1, 5), (5, 4), (1.0, 2), (0, True), "0-4", (1, 2, 3), (-5, 10)):
        with pytest.raises(InvalidInputError):
            store.get(key, bad)
    with pytest.raises(ObjectNotFound):
        store.get("packs/ab/abcdef0123456780", (-20, None))


def test_local_range_refuses_links(tmp_path):
    from snapstore.stores.local import LocalStore

    store = LocalStore(str(tmp_path / "s"))
    store.put("packs/aa/aaaaaaaaaaaaaaaa", DATA)
    os.symlink(tmp_path / "s" / "packs" / "aa" / "aaaaaaaaaaaaaaaa", tmp_path / "s" / "packs" / "aa" / "bbbbbbbbbbbbbbbb")
    assert store.get("packs/aa/aaaaaaaaaaaaaaaa", (-4, None)) == DATA[-4:]
    with pytest.raises(IntegrityError):
        store.get("packs/aa/bbbbbbbbbbbbbbbb", (-4, None))
    with pytest.raises(IntegrityError):
        store.get("packs/aa/bbbbbbbbbbbbbbbb", (0, 4))
