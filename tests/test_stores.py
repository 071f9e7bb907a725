"""The ObjectStore contract on the local-directory store and the in-memory store.

Create-only put, compare-and-swap, ranges, head, listing (order, prefix, start_after, limit),
list_dirs, delete_many, key validation, request accounting, and for LocalStore: create-only across
real OS processes, no temp files left behind, the fsync path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from snapstore.errors import InvalidInputError, ObjectNotFound, PreconditionFailed, StoreError
from snapstore.stores import LocalStore, MemoryStore, open_store
from snapstore.stores.base import ObjectInfo, ObjectStore, check_key

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["local", "local-nofsync", "memory", "sqlite", "sqlite-beside"])
def store(request, tmp_path):
    if request.param.startswith("sqlite"):
        from snapstore.stores.sqlite import SqliteStore
        # sqlite-beside: every object of 8 bytes or more is a value file beside the database
        s = SqliteStore(tmp_path / "store.db", beside_min=8 if request.param == "sqlite-beside" else 1 << 20)
        request.addfinalizer(s.close)
        return s
    if request.param == "local":
        return LocalStore(tmp_path / "store", fsync=True)
    if request.param == "local-nofsync":
        return LocalStore(tmp_path / "store", fsync=False)
    return MemoryStore()


def _no_temp_files(store) -> None:
    if isinstance(store, LocalStore):
        assert store.temp_files() == []
        leftovers = [os.path.join(p, f) for p, _, fs in os.walk(store.root) for f in fs if f.startswith(".tmp")]
        assert leftovers == []


# --- basics ----------------------------------------------------------------------------------------

def test_is_an_object_store(store):
    assert isinstance(store, ObjectStore)
    assert isinstance(store.url, str) and store.url


def test_put_is_create_only(store):
    info = store.put("a/b", b"hello")
    assert isinstance(info, ObjectInfo)
    assert info.key == "a/b" and info.size == 5 and info.etag
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
    # an etag for a missing key is refused, nothing is created
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


def test_get_range(store):
    store.put("r", b"0123456789")
    assert store.get("r", (0, 4)) == b"0123"
    assert store.get("r", (3, 7)) == b"3456"
    assert store.get("r", (5, 5)) == b""
    assert store.get("r", (8, 100)) == b"89"
    assert store.get("r") == b"0123456789"
    with pytest.raises(ObjectNotFound) as ei:
        store.get("nope", (0, 1))
    assert ei.value.key == "nope"


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


def test_list_many_keys_counts_pages(store):
    n = 2345
    for i in range(n):
        store.put(f"p/{i:05d}", b"")
    s0 = store.stats.snapshot()
    got = [i.key for i in store.list("p/")]
    assert got == [f"p/{i:05d}" for i in range(n)]
    assert store.stats.since(s0).counts["LIST"] == 3
    s1 = store.stats.snapshot()
    assert [i.key for i in store.list("p/", limit=1)] == ["p/00000"]
    assert store.stats.since(s1).counts["LIST"] == 1
    s2 = store.stats.snapshot()
    store.delete_many(f"p/{i:05d}" for i in range(n))
    assert store.stats.since(s2).counts["DELETE"] == 3
    assert list(store.list("p/")) == []


def test_list_dirs(store):
    for k in ["runs/a/m/1", "runs/b/c/2", "runs/b/m/3", "runs/file", "runs/c/x", "other/d/e"]:
        store.put(k, b"x")
    assert list(store.list_dirs("runs/")) == ["a", "b", "c"]
    assert list(store.list_dirs("runs/b/")) == ["c", "m"]
    assert list(store.list_dirs("")) == ["other", "runs"]
    assert list(store.list_dirs("nothing/")) == []


def test_delete_many_ignores_missing(store):
    for k in ["d/1", "d/2", "d/3"]:
        store.put(k, b"x")
    store.delete_many(["d/1", "d/missing", "zz/none", "d/3"])
    assert [i.key for i in store.list("d/")] == ["d/2"]
    store.delete_many([])
    store.delete_many(["d/1"])  # already gone
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


# --- key validation --------------------------------------------------------------------------------

BAD_KEYS = ["../x", "a/../b", "..", ".", "a//b", ".hidden", "a/.hidden", "A", "a/B", "", "/a", "a/", "a\\b",
            "a b", "é", "a\x00b", "./a", "a/./b"]


def test_check_key_rejects_bad_keys():
    for k in BAD_KEYS + [None, 5, b"a"]:
        with pytest.raises(InvalidInputError):
            check_key(k)
    for k in ["a", "a/b", "packs/0c/0cff4a51d3c22bcc", "runs/b2e/m/ffff", "a.b", "a-b_c", "0"]:
        assert check_key(k) == k


@pytest.mark.parametrize("key", BAD_KEYS)
def test_invalid_keys_rejected_on_write(store, key, tmp_path):
    with pytest.raises(InvalidInputError):
        store.put(key, b"x")
    with pytest.raises(InvalidInputError):
        store.put_if_match(key, b"x", None)
    with pytest.raises(InvalidInputError):
        store.put_if_match(key, b"x", '"1"')
    # nothing was written anywhere near the store
    if isinstance(store, LocalStore):
        written = [os.path.join(p, f) for p, _, fs in os.walk(tmp_path) for f in fs]
        assert written == []
    elif isinstance(store, MemoryStore):
        assert store.raw() == {}
    else:  # sqlite: the file is not even created
        assert not os.path.exists(store.path) and list(store.list("")) == []


@pytest.mark.parametrize("key", ["../x", "a//b", ".hidden", "A", "a/../b"])
def test_invalid_keys_rejected_on_read_and_delete(store, key):
    """Every operation validates keys (the contract is the same on every backend)."""
    store.put("x", b"keep")
    with pytest.raises(InvalidInputError):
        store.get(key)
    with pytest.raises(InvalidInputError):
        store.head(key)
    with pytest.raises(InvalidInputError):
        store.delete_many([key])
    assert store.get("x") == b"keep"


def test_local_get_cannot_escape_root(tmp_path):
    outside = tmp_path / "secret"
    outside.write_bytes(b"secret")
    st = LocalStore(tmp_path / "store")
    st.put("x", b"1")
    for k in ["../secret", "x/../../secret"]:
        with pytest.raises(InvalidInputError):
            st.get(k)
        with pytest.raises(InvalidInputError):
            st.delete_many([k])
    assert outside.read_bytes() == b"secret"


# --- LocalStore specifics --------------------------------------------------------------------------

def test_local_store_files_and_no_temp_files(tmp_path):
    st = LocalStore(tmp_path / "deep" / "root", fsync=True)  # created on first write, fsync path
    info = st.put("packs/ab/abcdef", b"data")
    assert (tmp_path / "deep" / "root" / "packs" / "ab" / "abcdef").read_bytes() == b"data"
    st.put_if_match("packs/ab/abcdef", b"data2", info.etag)
    with pytest.raises(PreconditionFailed):
        st.put("packs/ab/abcdef", b"x")
    with pytest.raises(PreconditionFailed):
        st.put_if_match("packs/ab/abcdef", b"x", info.etag)
    for i in range(20):
        st.put(f"m/{i}", os.urandom(100))
    assert st.temp_files() == []
    # the temp files and lock files are not keys
    assert all(not i.key.startswith(".") and "/." not in i.key for i in st.list(""))
    assert [i.key for i in st.list("packs/")] == ["packs/ab/abcdef"]
    assert st.get("packs/ab/abcdef") == b"data2"


def test_local_store_reports_crash_leftovers(tmp_path):
    st = LocalStore(tmp_path / "r", fsync=False)
    st.put("a/b", b"x")
    leftover = tmp_path / "r" / "a" / ".tmp-deadbeef"
    leftover.write_bytes(b"half")
    assert st.temp_files() == [str(leftover)]
    assert [i.key for i in st.list("")] == ["a/b"]


def test_local_store_root_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError):
        LocalStore(f)


def test_local_store_persists_across_instances(tmp_path):
    a = LocalStore(tmp_path / "r")
    info = a.put("k/1", b"v")
    b = LocalStore(tmp_path / "r")
    assert b.get("k/1") == b"v"
    assert b.head("k/1").etag == info.etag
    with pytest.raises(PreconditionFailed):
        b.put("k/1", b"w")


def test_open_store_picks_backends(tmp_path):
    assert isinstance(open_store(str(tmp_path / "x")), LocalStore)
    assert isinstance(open_store(tmp_path / "y"), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}/z"), LocalStore)
    assert isinstance(open_store("memory://"), MemoryStore)
    m = MemoryStore()
    assert open_store(m) is m
    with pytest.raises(InvalidInputError):
        open_store("ftp://host/x")


def test_memory_store_helpers():
    m = MemoryStore(clock=lambda: 1234.5)
    info = m.put("a", b"1")
    assert info.mtime == 1234.5 and m.head("a").mtime == 1234.5
    assert m.raw() == {"a": b"1"}
    m.corrupt("a", b"2")
    assert m.get("a") == b"2"
    assert m.head("a").etag != info.etag


_RACE_SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from snapstore.stores import LocalStore
    from snapstore.errors import PreconditionFailed
    root, me, go, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    st = LocalStore(root, fsync=True)
    etag = st.head("cas").etag  # every process reads the same etag before the start signal
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    won = []
    for i in range(n):
        try:
            st.put(f"race/{i:03d}", me.encode())
            won.append(i)
        except PreconditionFailed:
            pass
    try:  # compare-and-swap race on one key, from the etag all of them saw
        st.put_if_match("cas", me.encode(), etag)
        cas = True
    except PreconditionFailed:
        cas = False
    print(json.dumps({"won": won, "cas": cas}), flush=True)
""")


def test_local_create_only_across_processes(tmp_path):
    root = tmp_path / "repo"
    st = LocalStore(root)
    st.put("cas", b"initial")
    go = tmp_path / "go"
    n = 40
    names = ["p0", "p1", "p2", "p3"]
    procs = [subprocess.Popen([sys.executable, "-c", _RACE_SCRIPT, str(ROOT), str(root), name, str(go), str(n)],
                              stdout=subprocess.PIPE, text=True) for name in names]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    go.write_text("go")
    results = {}
    for name, p in zip(names, procs):
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        results[name] = json.loads(out.strip().splitlines()[-1])
    # every key: exactly one winner, and the file holds the winner's bytes
    for i in range(n):
        winners = [name for name in names if i in results[name]["won"]]
        assert len(winners) == 1, (i, winners)
        assert st.get(f"race/{i:03d}") == winners[0].encode()
    # compare-and-swap from the same etag: exactly one winner, whose bytes are stored
    cas_winners = [name for name in names if results[name]["cas"]]
    assert len(cas_winners) == 1, cas_winners
    assert st.get("cas") == cas_winners[0].encode()
    assert st.temp_files() == []


def test_local_fsync_write_path_durable_layout(tmp_path):
    st = LocalStore(tmp_path / "r", fsync=True)
    for i in range(5):
        st.put(f"x/y/{i}", str(i).encode())
    i0 = st.head("x/y/0")
    st.put_if_match("x/y/0", b"new", i0.etag)
    assert st.get("x/y/0") == b"new"
    st.delete_many(["x/y/1"])
    assert [i.key for i in st.list("x/")] == ["x/y/0", "x/y/2", "x/y/3", "x/y/4"]
    assert st.temp_files() == []
