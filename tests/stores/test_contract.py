"""The ObjectStore contract, once, on every store: create-only put, compare-and-swap, ranges,
head, listing (order, prefix, start_after, limit, pages), list_dirs, delete_many (batches),
request accounting, key validation, and one shared store under many threads.

The ``store`` fixture runs every test on each entry of :data:`STORES`: the in-memory store, a local
directory (with and without fsync), S3 in process (moto's ``mock_aws``, key prefix ``repo``) and S3
over moto's HTTP server on 127.0.0.1. A new store gets the whole contract by adding one entry.
What only one store does (its files, its wire requests, its errors) is tested in ``test_local.py``,
``test_memory.py`` and ``test_s3.py``.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from snapstore.errors import InvalidInputError, ObjectNotFound, PreconditionFailed
from snapstore.stores import LocalStore, MemoryStore
from snapstore.stores.base import ObjectInfo, ObjectStore, check_key
from snapstore.stores.s3 import S3Store
from tests.helpers.lockway import force_flock
from tests.helpers.s3_fixtures import seed_objects

STORES = {
    "memory": lambda make: make("memory"),
    "local": lambda make: make("local", fsync=True),
    "local-nofsync": lambda make: make("local", fsync=False),
    # the journal's flock(2) lock files, as on macOS (the OFD constants removed from fcntl)
    "local-flock": lambda make: make("local", fsync=True),
    "sqlite": lambda make: make("sqlite"),
    # every object of 8 bytes or more a value file beside the database
    "sqlite-beside": lambda make: make("sqlite", beside_min=8),
    "s3-inprocess": lambda make: make("s3"),
    "s3-http": lambda make: make("s3-http"),
}
"""Store name -> ``build(store_factory)`` returning a fresh, empty store (closed at teardown)."""


@pytest.fixture(params=list(STORES))
def store(request, store_factory):
    """A fresh, empty store of each kind in :data:`STORES`."""
    if request.param == "local-flock":
        force_flock(request.getfixturevalue("monkeypatch"))
    return STORES[request.param](store_factory)


def _no_temp_files(store) -> None:
    if isinstance(store, LocalStore):
        assert store.temp_files() == []
        leftovers = [os.path.join(p, f) for p, _, fs in os.walk(store.root) for f in fs if f.startswith(".tmp")]
        assert leftovers == []


def _fill_fast(store, keys) -> None:
    """Create empty objects ``keys`` (through moto's backend for S3: listing is under test, not PUT)."""
    if isinstance(store, S3Store):
        seed_objects(store, keys)
    else:
        for k in keys:
            store.put(k, b"")


# --- put, put_if_match ------------------------------------------------------------------------------

def test_is_an_object_store(store):
    assert isinstance(store, ObjectStore)
    assert isinstance(store.url, str) and store.url


def test_put_is_create_only(store):
    info = store.put("a/b", b"hello")
    assert isinstance(info, ObjectInfo)
    assert info.key == "a/b" and info.size == 5 and info.etag
    assert abs(info.mtime - store.head("a/b").mtime) < 5
    with pytest.raises(PreconditionFailed) as ei:
        store.put("a/b", b"other")
    assert ei.value.key == "a/b" and "a/b" in str(ei.value)
    assert store.get("a/b") == b"hello"
    _no_temp_files(store)


def test_put_empty_and_binary(store):
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.head("empty").size == 0
    blob = bytes(range(256)) * 1000
    store.put("bin/x", blob)
    assert store.get("bin/x") == blob


def test_put_if_match(store):
    i1 = store.put("k", b"v1")
    i2 = store.put_if_match("k", b"v2", i1.etag)
    assert store.get("k") == b"v2"
    assert i2.etag != i1.etag
    assert store.head("k").etag == i2.etag
    # stale etag: refused, content unchanged
    with pytest.raises(PreconditionFailed) as ei:
        store.put_if_match("k", b"v3", i1.etag)
    assert ei.value.key == "k"
    assert store.get("k") == b"v2"
    # etag None means "only if absent"
    with pytest.raises(PreconditionFailed):
        store.put_if_match("k", b"v4", None)
    assert store.get("k") == b"v2"
    # an etag for a missing key is refused (S3: 404), nothing is created
    with pytest.raises(PreconditionFailed):
        store.put_if_match("missing", b"x", i2.etag)
    with pytest.raises(ObjectNotFound):
        store.get("missing")
    # None on an absent key creates it
    i5 = store.put_if_match("new", b"n", None)
    assert store.get("new") == b"n" and i5.etag == store.head("new").etag
    _no_temp_files(store)


def test_put_if_match_same_size_rewrite_changes_etag(store):
    i1 = store.put("k", b"aaaa")
    i2 = store.put_if_match("k", b"bbbb", i1.etag)
    assert i2.etag != i1.etag
    with pytest.raises(PreconditionFailed):
        store.put_if_match("k", b"cccc", i1.etag)
    assert store.get("k") == b"bbbb"


def test_concurrent_writers_share_one_store(store):
    """One store object, many threads: every create-only put of a contended key has exactly one
    winner (moto serialises requests, so on S3 this is no race proof)."""

    def attempt(i: int):
        try:
            return store.put(f"c/{i % 10}", str(i).encode())
        except PreconditionFailed:
            return None

    before = store.stats.snapshot()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(40)))
    assert sum(r is not None for r in results) == 10
    assert store.stats.since(before).counts["PUT"] == 40
    assert [o.key for o in store.list("c/")] == [f"c/{i}" for i in range(10)]
    for i in range(10):
        assert int(store.get(f"c/{i}")) % 10 == i


# --- get, head ----------------------------------------------------------------------------------------

def test_get_range(store):
    store.put("r", b"0123456789")
    assert store.get("r", (0, 4)) == b"0123"
    assert store.get("r", (3, 7)) == b"3456"
    assert store.get("r", (5, 5)) == b""
    assert store.get("r", (8, 100)) == b"89"  # truncated like a slice
    assert store.get("r", (50, 60)) == b""  # past the end (S3: 416)
    assert store.get("r") == b"0123456789"
    with pytest.raises(InvalidInputError):
        store.get("r", (5, 2))
    with pytest.raises(ObjectNotFound) as ei:
        store.get("nope", (0, 1))
    assert ei.value.key == "nope"


def test_a_ranged_get_is_one_request_of_the_range(store):
    data = bytes(range(256)) * 4
    store.put("blob", data)
    assert store.get("blob", (1000, 5000)) == data[1000:5000]
    stats = store.stats.snapshot()
    assert store.get("blob", (10, 110)) == data[10:110]
    d = store.stats.since(stats)
    assert d.counts["GET"] == 1 and d.bytes_down == 100


def test_get_and_head_missing(store):
    with pytest.raises(ObjectNotFound) as ei:
        store.get("no/such")
    assert ei.value.key == "no/such" and "no/such" in str(ei.value)
    with pytest.raises(ObjectNotFound):
        store.head("no/such")
    # a "directory" is not an object
    store.put("dir/child", b"x")
    with pytest.raises(ObjectNotFound):
        store.get("dir")
    with pytest.raises(ObjectNotFound):
        store.head("dir")


def test_head(store):
    before = time.time()
    info = store.put("h/x", b"abc")
    h = store.head("h/x")
    assert h.key == "h/x" and h.size == 3 and h.etag == info.etag
    assert before - 5 <= h.mtime <= time.time() + 5


# --- list, list_dirs ----------------------------------------------------------------------------------

KEYS = ["a/b", "a/b/c", "a/bc", "a-c", "a.d", "a0", "a/b.d", "b", "ba/a", "runs/x/m/ff", "runs/x/m/fe",
        "runs/x/c/1", "runs/y/m/00", "z_9"]


def _fill(store):
    for k in KEYS:
        # "a/b" is a file and "a/b/c" would need "a/b" as a directory on a file system: keys that
        # are both an object and a prefix of another object cannot coexist in the local store
        if k == "a/b/c":
            continue
        store.put(k, k.encode())
    return sorted(k for k in KEYS if k != "a/b/c")


def test_list_order_and_prefix(store):
    keys = _fill(store)
    assert [i.key for i in store.list("")] == keys
    for prefix in ["a", "a/", "a/b", "runs/", "runs/x/", "runs/x/m/", "runs/x/m/f", "b", "zz", "runs/q/"]:
        got = [i.key for i in store.list(prefix)]
        assert got == [k for k in keys if k.startswith(prefix)], prefix
    infos = list(store.list("runs/x/m/"))
    assert all(isinstance(i, ObjectInfo) for i in infos)
    assert [i.size for i in infos] == [len(i.key) for i in infos]
    assert all(i.etag and i.mtime > 0 for i in infos)


def test_list_sorts_bytewise_not_by_number(store):
    keys = ["runs/b/2", "runs/a/1", "runs/a/10", "runs/a/2", "packs/x", "runs-other/z", "runs/c"]
    for k in keys:
        store.put(k, k.encode())
    assert [o.key for o in store.list("")] == sorted(keys)
    assert [o.key for o in store.list("runs/")] == ["runs/a/1", "runs/a/10", "runs/a/2", "runs/b/2", "runs/c"]
    assert [o.key for o in store.list("runs/", start_after="runs/a/10")] == ["runs/a/2", "runs/b/2", "runs/c"]
    assert [o.key for o in store.list("runs/", limit=2)] == ["runs/a/1", "runs/a/10"]
    before = store.stats.snapshot()
    assert [o.key for o in store.list("runs/", limit=1)] == ["runs/a/1"]
    assert store.stats.since(before).counts["LIST"] == 1


def test_list_start_after_and_limit(store):
    keys = _fill(store)
    assert [i.key for i in store.list("", start_after="a0")] == [k for k in keys if k > "a0"]
    assert [i.key for i in store.list("runs/", start_after="runs/x/m/fe")] == \
        [k for k in keys if k.startswith("runs/") and k > "runs/x/m/fe"]
    assert [i.key for i in store.list("", limit=3)] == keys[:3]
    assert [i.key for i in store.list("runs/x/m/", limit=1)] == ["runs/x/m/fe"]
    assert [i.key for i in store.list("", start_after="b", limit=2)] == [k for k in keys if k > "b"][:2]
    assert list(store.list("", limit=0)) == []
    assert [i.key for i in store.list("", start_after="zzz")] == []


def test_list_and_delete_many_keys_count_pages_of_1000(store):
    n = 2345
    keys = [f"p/{i:05d}" for i in range(n)]
    _fill_fast(store, keys)
    s0 = store.stats.snapshot()
    assert [i.key for i in store.list("p/")] == keys
    assert store.stats.since(s0).counts["LIST"] == 3
    s1 = store.stats.snapshot()
    assert len(list(store.list("p/", limit=1500))) == 1500
    assert store.stats.since(s1).counts["LIST"] == 2
    s2 = store.stats.snapshot()
    assert [i.key for i in store.list("p/", limit=1)] == ["p/00000"]
    assert store.stats.since(s2).counts["LIST"] == 1
    s3 = store.stats.snapshot()
    store.delete_many(iter(keys[:1500]))
    assert store.stats.since(s3).counts["DELETE"] == 2
    assert [i.key for i in store.list("p/")] == keys[1500:]
    s4 = store.stats.snapshot()
    store.delete_many(keys)
    assert store.stats.since(s4).counts["DELETE"] == 3
    assert list(store.list("p/")) == []


def test_list_dirs(store):
    for k in ["runs/a/m/1", "runs/a/m/2", "runs/b/c/2", "runs/b/m/3", "runs/file", "runs/c/x", "other/d/e",
              "packs/p1", "top"]:
        store.put(k, b"x")
    assert list(store.list_dirs("runs/")) == ["a", "b", "c"]
    assert list(store.list_dirs("runs/b/")) == ["c", "m"]
    assert list(store.list_dirs("runs/a/")) == ["m"]
    assert list(store.list_dirs("")) == ["other", "packs", "runs"]
    assert list(store.list_dirs("nothing/")) == []


def test_list_dirs_adds_the_trailing_slash(store, request):
    if isinstance(store, MemoryStore):
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "MemoryStore.list_dirs('runs') yields [''] where LocalStore and S3Store add the '/' "
            "(snapstore itself always passes a prefix ending in '/')")))
    for k in ["runs/a/m/1", "runs/b/c/2", "runs/file"]:
        store.put(k, b"")
    assert list(store.list_dirs("runs")) == ["a", "b"]


# --- delete_many, stats -----------------------------------------------------------------------------

def test_delete_many_ignores_missing(store):
    for k in ["d/1", "d/2", "d/3", "keep"]:
        store.put(k, b"x")
    before = store.stats.snapshot()
    store.delete_many(["d/1", "d/missing", "zz/none", "d/3", "d/1"])
    assert store.stats.since(before).counts["DELETE"] == 1
    assert [i.key for i in store.list("")] == ["d/2", "keep"]
    store.delete_many([])
    store.delete_many(iter(["d/1", "keep"]))  # already gone, and an iterator
    assert [i.key for i in store.list("")] == ["d/2"]
    with pytest.raises(ObjectNotFound):
        store.get("d/1")
    # a deleted key can be created again (create-only applies to existing objects only)
    store.put("d/1", b"again")
    assert store.get("d/1") == b"again"


def test_stats_count_requests_and_bytes(store):
    s0 = store.stats.snapshot()
    store.put("s/1", b"12345")
    store.get("s/1")
    store.get("s/1", (1, 3))
    store.head("s/1")
    list(store.list("s/"))
    d = store.stats.since(s0)
    assert d.counts["PUT"] == 1 and d.counts["GET"] == 2 and d.counts["HEAD"] == 1 and d.counts["LIST"] == 1
    assert d.bytes_up == 5 and d.bytes_down == 7
    assert d.total() == 5
    assert json.dumps(d.as_dict())


# --- key validation ---------------------------------------------------------------------------------

BAD_KEYS = ["../x", "a/../b", "..", ".", "a//b", ".hidden", "a/.hidden", "A", "a/B", "", "/a", "a/", "a\\b",
            "a b", "é", "a\x00b", "./a", "a/./b"]


def test_check_key_rejects_bad_keys():
    for k in BAD_KEYS + [None, 5, b"a"]:
        with pytest.raises(InvalidInputError):
            check_key(k)
    for k in ["a", "a/b", "packs/0c/0cff4a51d3c22bcc", "runs/b2e/m/ffff", "a.b", "a-b_c", "0"]:
        assert check_key(k) == k


def _refused(call, key) -> None:
    """``call(key)`` raises InvalidInputError; a failure names the key that got through."""
    try:
        call(key)
    except InvalidInputError:
        return
    pytest.fail(f"bad key {key!r} accepted by {call}")


def test_invalid_keys_rejected_on_write(store, tmp_path):
    """Every bad key, on every write (one store per test: keys are checked before any request, and a
    fresh moto mock per key would cost seconds each)."""
    for key in BAD_KEYS:
        _refused(lambda k: store.put(k, b"x"), key)
        _refused(lambda k: store.put_if_match(k, b"x", None), key)
        _refused(lambda k: store.put_if_match(k, b"x", '"1"'), key)
    # nothing was written anywhere near the store
    assert list(store.list("")) == []
    if isinstance(store, LocalStore):
        written = [os.path.join(p, f) for p, _, fs in os.walk(tmp_path) for f in fs]
        assert written == []
    if isinstance(store, MemoryStore):
        assert store.raw() == {}


def test_invalid_keys_rejected_on_read_and_delete(store):
    """Every operation validates keys (the contract is the same on every backend)."""
    store.put("x", b"keep")
    for key in ["../x", "a//b", ".hidden", "A", "a/../b"]:
        _refused(store.get, key)
        _refused(store.head, key)
        _refused(lambda k: store.delete_many([k]), key)
    assert store.get("x") == b"keep"
