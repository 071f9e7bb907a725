"""The single-file SQLite store: URLs and options, its pragmas, bad input, space given back after
deletes, ETags, many threads and many real processes on one file (raw compare-and-swap and
CheckpointManager saves beside a GC process), and the whole CheckpointManager path on it.

The ObjectStore contract itself runs on it in tests/test_stores.py and tests/test_backends.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, InvalidInputError, PreconditionFailed, StoreError
from snapstore.stores import LocalStore, open_store
from snapstore.stores.sqlite import SqliteStore

from tests.helpers.paths import ROOT  # noqa: E402
ENV = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _pragma(store: SqliteStore, name: str):
    with contextlib.closing(sqlite3.connect(store.path)) as c:
        return c.execute(f"PRAGMA {name}").fetchone()[0]


def _writer_pragma(store: SqliteStore, name: str):
    return store._shared().writer.execute(f"PRAGMA {name}").fetchone()[0]


# --- URLs and options --------------------------------------------------------------------------------

def test_urls_open_one_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    forms = [f"sqlite://{tmp_path}/abs.db", "sqlite://rel.db", "plain.db", str(tmp_path / "plain2.db")]
    for loc in forms:
        s = open_store(loc)
        try:
            assert isinstance(s, SqliteStore), loc
            s.put("k", loc.encode())
        finally:
            s.close()
    assert {p.name for p in tmp_path.iterdir()} == {"abs.db", "rel.db", "plain.db", "plain2.db"}
    with contextlib.closing(open_store(str(tmp_path / "rel.db"))) as s:
        assert s.get("k") == b"sqlite://rel.db"
    # a mistyped URL is refused, not made a directory named 'sqlite:'
    for bad in ("sqlite:/x.db", "sqlite:x.db", "s3:bucket/p"):
        with pytest.raises(InvalidInputError, match="without '//'"):
            open_store(bad)
    assert not (tmp_path / "sqlite:").exists()
    # SQLAlchemy's four slashes name the same absolute file
    with contextlib.closing(open_store(f"sqlite:///{tmp_path}/abs.db")) as s:
        assert s.get("k") == f"sqlite://{tmp_path}/abs.db".encode()
    # an existing directory named *.db stays a directory store (a repository made before)
    (tmp_path / "dir.db").mkdir()
    assert isinstance(open_store("dir.db"), LocalStore)
    with pytest.raises(StoreError, match="is a directory"):
        open_store("sqlite://dir.db")


def test_pragmas_default_full_and_normal_option(tmp_path):
    full = open_store(f"sqlite://{tmp_path}/f.db")
    normal = open_store(f"sqlite://{tmp_path}/n.db?synchronous=normal")
    try:
        full.put("a", b"1")
        normal.put("a", b"1")
        assert _writer_pragma(full, "synchronous") == 2    # FULL
        assert _writer_pragma(normal, "synchronous") == 1  # NORMAL
        assert normal.url.endswith("?synchronous=normal")
        # two stores of one file in one process share its one writing connection, each with its setting
        other = open_store(f"sqlite://{tmp_path}/f.db?synchronous=normal")
        assert other._shared() is full._shared()
        other.put("b", b"2")
        assert _writer_pragma(other, "synchronous") == 1
        full.put("c", b"3")
        assert _writer_pragma(full, "synchronous") == 2
        other.close()
        assert _pragma(full, "journal_mode") == "wal"
        assert _pragma(full, "auto_vacuum") == 2           # INCREMENTAL
    finally:
        full.close()
        normal.close()
    for bad in ("sqlite://x.db?synchronous=off", "sqlite://x.db?durable=1", "sqlite://", "sqlite://x.db?lock_timeout=soon"):
        with pytest.raises(InvalidInputError):
            open_store(bad)


def test_reading_never_creates_the_file(tmp_path):
    s = SqliteStore(tmp_path / "sub" / "r.db")
    assert list(s.list("")) == [] and list(s.list_dirs("runs/")) == []
    with pytest.raises(Exception) as ei:
        s.get("config")
    assert type(ei.value).__name__ == "ObjectNotFound"
    s.delete_many(["a"])
    assert not (tmp_path / "sub").exists()
    s.put("runs/x/m/1", b"m")
    assert (tmp_path / "sub" / "r.db").is_file() and list(s.list_dirs("runs/")) == ["x"]
    s.close()


# --- bad input ---------------------------------------------------------------------------------------

def test_bad_files_are_typed_errors_naming_the_path(tmp_path):
    (tmp_path / "d.db").mkdir()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, only some text" * 10)
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as c:
        c.execute("CREATE TABLE t (x)")
        c.commit()
    for path, what in [(tmp_path / "d.db", "directory"), (junk, "not a SQLite database"), (other, "no snapstore store")]:
        with pytest.raises(StoreError) as ei:
            SqliteStore(path)
        assert str(path) in str(ei.value) and what in str(ei.value)
        with pytest.raises(StoreError):
            CheckpointManager(f"sqlite://{path}").save("r", [{"role": "user", "content": "x"}])


def test_short_junk_is_refused_and_an_empty_file_is_an_empty_store(tmp_path):
    # the header is checked by SQLite's first statement (SQLITE_NOTADB), not read twice
    for n in (1, 15, 16, 99, 100, 4096):
        junk = tmp_path / f"junk{n}.db"
        junk.write_bytes((b"x" * n))
        with pytest.raises(StoreError) as ei:
            SqliteStore(junk)
        assert f"not a SQLite database: {junk}" == str(ei.value)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    st = SqliteStore(empty)
    try:
        assert list(st.list("")) == []
        st.put("k", b"v")
        assert st.get("k") == b"v"
    finally:
        st.close()


def _make_read_only(path: Path) -> "callable":
    """Make ``path`` unwritable for this process and return the undo: chmod for a user, the
    immutable attribute for root (which ignores file modes); skips when neither is possible."""
    if os.geteuid() != 0:
        os.chmod(path, 0o444)
        return lambda: os.chmod(path, 0o644)
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root and chattr +i is not available here")
    return lambda: subprocess.run(["chattr", "-i", str(path)], check=True)


def test_read_only_file_reads_and_refuses_writes(tmp_path):
    """A file this process may read and not write: reads work, in this process and a fresh one;
    a write is a StoreError naming the file (no sqlite3 exception)."""
    db = tmp_path / "ro.db"
    with contextlib.closing(SqliteStore(db)) as s:
        s.put("k", b"v")
    undo = _make_read_only(db)
    try:
        with contextlib.closing(open_store(str(db))) as s:
            assert s.get("k") == b"v" and [i.key for i in s.list("")] == ["k"]
            with pytest.raises(StoreError) as ei:
                s.put("x", b"1")
            assert str(db) in str(ei.value) and "read-only" in str(ei.value)
            with pytest.raises(StoreError, match="read-only"):
                s.delete_many(["k"])
        code = ("from snapstore import CheckpointManager\n"
                f"m = CheckpointManager({str(db)!r})\n"
                "m.save('r', [{'role': 'user', 'content': 'x'}])\n")
        out = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and "snapstore.errors.StoreError" in out.stderr and str(db) in out.stderr, out.stderr
        assert "sqlite3." not in out.stderr
    finally:
        undo()


# --- space, ETags --------------------------------------------------------------------------------

def test_file_shrinks_after_deletes_and_compact(tmp_path):
    s = SqliteStore(tmp_path / "s.db", fsync=False)
    keys = [f"packs/{i:03d}" for i in range(40)]
    for k in keys:
        s.put(k, os.urandom(256 << 10))
    s.compact()
    full = os.path.getsize(s.path)
    assert full > 40 * (256 << 10)
    s.delete_many(keys[:30])   # 3/4 of the file free: the delete gives it back
    s.compact()
    after = os.path.getsize(s.path)
    assert after < full * 0.4, (full, after)
    s.delete_many(keys[30:])
    rep = s.compact()
    assert rep["file_bytes"] < 64 << 10 and rep["file_bytes"] == os.path.getsize(s.path)
    assert os.path.getsize(s.path + "-wal") == 0  # the WAL is truncated too
    s.close()


def test_etags_are_content_derived_and_stable(tmp_path):
    a = SqliteStore(tmp_path / "e.db")
    i1 = a.put("k", b"same bytes")
    a.close()
    b = SqliteStore(tmp_path / "e.db")
    assert b.head("k").etag == i1.etag
    assert b.put("k2", b"same bytes").etag == i1.etag
    i3 = b.put_if_match("k", b"other bytes", i1.etag)
    assert i3.etag != i1.etag and b.head("k") == i3
    with pytest.raises(PreconditionFailed):
        b.put_if_match("k", b"x", i1.etag)
    b.close()


def test_large_values_are_files_beside_the_database(tmp_path):
    s = SqliteStore(tmp_path / "v.db")
    big = os.urandom(3 << 20)
    i1 = s.put("packs/ab/big", big)
    s.put("packs/ab/small", b"tiny")
    files = os.listdir(s.values_dir)
    assert len(files) == 1 and os.path.getsize(os.path.join(s.values_dir, files[0])) == len(big)
    assert s.get("packs/ab/big") == big and s.get("packs/ab/big", (1000, 70536)) == big[1000:70536]
    assert s.get("packs/ab/big", (-10, None)) == big[-10:] and s.head("packs/ab/big") == i1
    with pytest.raises(PreconditionFailed):
        s.put("packs/ab/big", big)
    assert len(os.listdir(s.values_dir)) == 1        # the refused put left no file
    big2 = os.urandom(2 << 20)
    s.put_if_match("packs/ab/big", big2, i1.etag)
    assert s.get("packs/ab/big") == big2 and len(os.listdir(s.values_dir)) == 1  # the old file went
    assert s.leftovers() == []
    # what a crash between a value file and its row leaves: listed, then removed by remove_leftovers
    stray = os.path.join(s.values_dir, "0123456789abcdef01234567")
    Path(stray).write_bytes(b"orphan")
    left = s.leftovers()
    assert [x.name for x in left] == ["v.db.values/0123456789abcdef01234567"] and left[0].size == 6
    assert s.remove_leftovers(left) == 1 and not os.path.exists(stray)
    with pytest.raises(InvalidInputError):
        s.remove_leftovers([type(left[0])("../v.db", 1, 0.0)])
    s.delete_many(["packs/ab/big"])
    assert os.listdir(s.values_dir) == [] and s.get("packs/ab/small") == b"tiny"
    s.close()


# --- threads and processes ---------------------------------------------------------------------------

def test_threads_on_two_store_objects_share_one_writer(tmp_path):
    """8 threads on two store objects of one file do compare-and-swap increments: every success is
    counted exactly once; only PreconditionFailed reaches them. One writing connection serves both."""
    s1, s2 = SqliteStore(tmp_path / "t.db"), SqliteStore(tmp_path / "t.db")
    s1.put("counter", b"0")
    assert s1._shared() is s2._shared()
    wins = []
    errors = []

    def work(store):
        n = 0
        while n < 15:
            info = store.head("counter")
            cur = int(store.get("counter"))
            try:
                store.put_if_match("counter", str(cur + 1).encode(), info.etag)
                n += 1
            except PreconditionFailed:
                continue
            except Exception as e:  # noqa: BLE001 - anything else is the failure under test
                errors.append(repr(e))
                return
        wins.append(n)

    ts = [threading.Thread(target=work, args=((s1, s2)[i % 2],)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert int(s2.get("counter")) == sum(wins) == 8 * 15
    s1.close()
    s2.close()


_CAS_CHILD = textwrap.dedent("""
    import sys
    from snapstore.stores import open_store
    from snapstore.errors import PreconditionFailed
    s = open_store(sys.argv[1])
    done = 0
    while done < int(sys.argv[2]):
        info = s.head("counter")
        cur = int(s.get("counter"))
        try:
            s.put_if_match("counter", str(cur + 1).encode(), info.etag)
            s.put(f"log/{sys.argv[3]}-{done:04d}", b"x" * 3000)
            done += 1
        except PreconditionFailed:
            pass
    s.delete_many([f"log/{sys.argv[3]}-{i:04d}" for i in range(0, done, 2)])
    print(done)
""")


def test_processes_compare_and_swap_on_one_file(tmp_path):
    """6 real processes increment one counter by compare-and-swap, write and delete rows: no
    increment lost, no error (no "database is locked") reaches any of them."""
    db = tmp_path / "p.db"
    with contextlib.closing(SqliteStore(db)) as s:
        s.put("counter", b"0")
    procs = [subprocess.Popen([sys.executable, "-c", _CAS_CHILD, str(db), "40", str(i)], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(6)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert all("locked" not in o[1] and "OperationalError" not in o[1] for o in outs)
    with contextlib.closing(SqliteStore(db)) as s:
        assert int(s.get("counter")) == 6 * 40
        assert len(list(s.list("log/"))) == 6 * 20
    with contextlib.closing(sqlite3.connect(db)) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


_SAVER_CHILD = textwrap.dedent("""
    import json, sys
    from snapstore import CheckpointManager
    from snapstore.errors import ConflictError
    db, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mgr = CheckpointManager("sqlite://" + db, gc_grace_period=30)
    msgs = [{"role": "user", "content": f"task of {who} " * 20}]
    acked, conflicts = [], 0
    for step in range(n):
        msgs = msgs + [{"role": "assistant", "content": f"{who} step {step} " * 30}]
        acked.append((f"own-{who}", mgr.save(f"own-{who}", msgs, step=step), len(msgs)))
        try:  # a run every process writes: conflicts are expected and must be ConflictError
            cp = mgr.latest("shared")
            base = cp.messages if cp else []
            acked.append(("shared", mgr.save("shared", base + [{"role": "tool", "content": f"{who}:{step}"}]), len(base) + 1))
        except ConflictError:
            conflicts += 1
    mgr.close()
    print(json.dumps({"acked": acked, "conflicts": conflicts}))
""")

_GC_CHILD = textwrap.dedent("""
    import os, sys, time
    from snapstore import CheckpointManager
    from snapstore.errors import RepositoryNotFound
    mgr = CheckpointManager("sqlite://" + sys.argv[1])
    runs = 0
    while not os.path.exists(sys.argv[2]) or runs == 0:  # until the writers are done
        try:
            mgr.gc(grace_period=30)
            runs += 1
        except RepositoryNotFound:
            time.sleep(0.05)
    print(runs)
""")


def test_processes_save_through_manager_beside_gc(tmp_path):
    """8 real processes save runs through CheckpointManager on one ``.db`` file while another
    process runs GC in a loop until they are done: every acknowledged save restores exactly,
    verify passes, and the only error any caller saw is ConflictError (counted, on the run they
    all write)."""
    db = tmp_path / "agents.db"
    stop = tmp_path / "writers-done"
    gc = subprocess.Popen([sys.executable, "-c", _GC_CHILD, str(db), str(stop)], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [subprocess.Popen([sys.executable, "-c", _SAVER_CHILD, str(db), str(i), "12"], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    stop.touch()
    gc_out = gc.communicate(timeout=300)
    assert gc.returncode == 0 and int(gc_out[0]) >= 1, gc_out[1]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    mgr = CheckpointManager(f"sqlite://{db}")
    acked = [a for r in results for a in r["acked"]]
    assert len([a for a in acked if a[0] != "shared"]) == 8 * 12
    for run, cid, n in acked:
        cp = mgr.get(run, cid)
        assert len(cp.messages) == n
    assert sum(1 for a in acked if a[0] == "shared") + sum(r["conflicts"] for r in results) == 8 * 12
    print("gc runs", int(gc_out[0]), "shared saves", sum(1 for a in acked if a[0] == "shared"),
          "conflicts", sum(r["conflicts"] for r in results))
    rep = mgr.verify(read_data=True)
    assert rep.ok, [str(e) for e in rep.errors]
    mgr.close()


# --- the whole manager path ------------------------------------------------------------------------

def test_manager_path_on_sqlite(tmp_path):
    db = tmp_path / "m.db"
    mgr = CheckpointManager(str(db))
    assert isinstance(mgr.store, SqliteStore)
    msgs = [{"role": "user", "content": "Fix the failing test."}]
    ids = []
    for step in range(1, 9):
        msgs = msgs + [{"role": "assistant", "content": f"tool call {step} " + "x" * 2000},
                       {"role": "tool", "content": f"result {step} " + os.urandom(3000).hex()}]
        ids.append(mgr.save("run-1", msgs, step=step, session_state={"cwd": "/repo", "step": step}))
    assert mgr.latest("run-1").messages == msgs and mgr.latest("run-1").id == ids[-1]
    assert [c.id for c in mgr.list("run-1")] == ids[::-1]
    fork = mgr.fork("run-1", ids[3], "run-2")
    assert mgr.get("run-2", fork.id).messages == mgr.get("run-1", ids[3]).messages
    assert mgr.rollback("run-1", ids[1]).id == ids[1]
    assert mgr.latest("run-1").id == ids[1]
    mgr.delete("run-2")
    mgr.prune(keep_last=1)
    mgr.store.compact()                           # the WAL into the file: measure the file alone
    before = os.path.getsize(db)
    rep = mgr.gc(grace_period=0)
    assert rep.reclaimed_bytes > 0
    assert os.path.getsize(db) < before          # GC gave the space back (compact hook)
    assert mgr.verify(read_data=True).ok
    assert mgr.runs() == ["run-1"] and len(mgr.list("run-1")) == 1
    mgr.close()
    again = CheckpointManager(f"sqlite://{db}")   # a new process would see the same
    assert again.latest("run-1").id == ids[1]
    again.close()


def test_a_plain_db_path_takes_options_and_names_a_file_in_the_way(tmp_path, monkeypatch):
    """What a new user typed: ``n.db?synchronous=normal`` opens the SQLite file with the option
    (not a directory of that name), a bad option is refused, and a file where a directory should
    be is one typed error naming it."""
    from snapstore.errors import InvalidInputError, RepositoryNotFound
    from snapstore.stores import open_store
    from snapstore.stores.sqlite import SqliteStore

    monkeypatch.chdir(tmp_path)
    st = open_store("n.db?synchronous=normal")
    assert isinstance(st, SqliteStore) and "synchronous=normal" in st.url
    st.close()
    with pytest.raises(InvalidInputError, match="bogus"):
        open_store("m.db?synchronous=bogus")
    assert not (tmp_path / "m.db?synchronous=bogus").exists() and not (tmp_path / "n.db?synchronous=normal").exists()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidInputError, match="not a directory: .*afile"):
        CheckpointManager(str(tmp_path / "afile" / "x.db")).save("r", [{"role": "user", "content": "x"}])
    # a location with packs but no config (an interrupted copy) says so
    half = SqliteStore(tmp_path / "half.db")
    half.put("packs/00/0000000000000000", b"x")
    with pytest.raises(RepositoryNotFound, match="interrupted"):
        CheckpointManager(half).stats()
    half.close()


def test_readers_of_ended_threads_are_reused(tmp_path):
    """A reading connection belongs to a thread only while it lives: 200 short-lived threads
    reading one after another (LangGraph's executors, parallel GETs) leave at most a few
    connections open, not one per thread (each held 3 descriptors: a long LangGraph run on a
    SQLite store ran out of them)."""
    store = SqliteStore(str(tmp_path / "s.db"))
    store.put("k", b"v")

    def read():
        assert store.get("k") == b"v"

    before = len(os.listdir("/proc/self/fd"))
    for _ in range(200):
        t = threading.Thread(target=read)
        t.start()
        t.join()
    after = len(os.listdir("/proc/self/fd"))
    assert after - before <= 6, f"{after - before} descriptors more after 200 threads read"
    # several threads at once still get a connection each, and all read
    ts = [threading.Thread(target=read) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    store.close()
