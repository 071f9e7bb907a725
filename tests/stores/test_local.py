"""LocalStore beyond the ObjectStore contract (tests/stores/test_contract.py): keys cannot escape
the root, no temp files left behind, crash leftovers reported, a file as root refused, objects
persist across instances, create-only and compare-and-swap across real OS processes, the fsync path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from snapstore.errors import InvalidInputError, PreconditionFailed, StoreError
from snapstore.stores import LocalStore
from tests.helpers import paths

ROOT = paths.ROOT


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
