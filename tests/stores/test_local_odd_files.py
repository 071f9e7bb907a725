"""Odd files in a local repository (issue 20): symbolic links or FIFOs at the journal ``.wal``, FIFOs, sockets and
sparse files at keys, and packs too large to read whole (read in ranges, checksum streamed).

The crafted-repository cases (``tests/robustness/test_crafted_repos.py``) run the whole library and CLI on
such repositories under a memory limit; these tests pin the store and read-path behaviour.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError, ObjectNotFound, ObjectTooLarge, StoreError
from snapstore.stores import LocalStore, MemoryStore
from snapstore.stores import base


def test_symlinked_journal_is_not_followed(tmp_path):
    """The journal (which also holds every lock) is a link out of the root: a write refuses with
    StoreError and creates nothing outside; the object is unchanged."""
    root, outside = tmp_path / "repo", tmp_path / "outside"
    outside.mkdir()
    info = LocalStore(root, fsync=False).put("runs/x/c/k", b"one")
    (root / ".wal").unlink(missing_ok=True)
    (root / ".wal").symlink_to(outside / "planted")
    store = LocalStore(root, fsync=False)
    with pytest.raises(StoreError, match="journal") as e:
        store.put_if_match("runs/x/c/k", b"two", info.etag)
    assert "symbolic link" in str(e.value)
    assert list(outside.iterdir()) == []
    with pytest.raises(StoreError, match="symbolic link"):
        store.get("runs/x/c/k")  # a read replays first: it refuses the link as well


def test_fifo_journal_is_refused_without_blocking(tmp_path):
    root = tmp_path / "repo"
    info = LocalStore(root, fsync=False).put("runs/x/c/k", b"one")
    (root / ".wal").unlink(missing_ok=True)
    os.mkfifo(root / ".wal")
    with pytest.raises(StoreError, match="not a regular file"):
        LocalStore(root, fsync=False).put_if_match("runs/x/c/k", b"two", info.etag)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_non_regular_file_at_a_key_is_corrupt_not_opened(tmp_path, kind):
    root = tmp_path / "r"
    store = LocalStore(root, fsync=False)
    store.put("runs/a/m/ffffffffffffffff", b"x")
    p = root / "runs" / "a" / "m" / "fffffffffffffffe"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        old = os.getcwd()
        os.chdir(p.parent)  # AF_UNIX paths are short: bind relative to the directory
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind(p.name)
        finally:
            os.chdir(old)
    done = {}

    def read():
        try:
            store.get("runs/a/m/fffffffffffffffe")
        except Exception as e:  # noqa: BLE001 - examined below
            done["err"] = e

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), f"reading a {kind} blocked"
    assert isinstance(done["err"], IntegrityError) and "runs/a/m/fffffffffffffffe" in str(done["err"])
    with pytest.raises(IntegrityError, match="not a regular file"):
        store.head("runs/a/m/fffffffffffffffe")
    (root / "runs" / "a" / "d").mkdir()
    with pytest.raises(ObjectNotFound):  # a directory is still no object
        store.get("runs/a/d")


def test_sparse_file_whole_read_refused_ranged_read_works(tmp_path):
    root = tmp_path / "r"
    store = LocalStore(root, fsync=False)
    store.put("runs/a/m/ffffffffffffffff", b"x")
    store.put("packs/00/0000000000000001", b"y")
    for key, size in (("runs/a/m/ffffffffffffffff", 2 << 30), ("packs/00/0000000000000001", 100 << 30)):
        with open(root / key, "r+b") as f:
            f.truncate(size)
        with pytest.raises(ObjectTooLarge) as e:
            store.get(key)
        assert e.value.key == key and e.value.size == size and e.value.limit < size
        assert key in str(e.value) and isinstance(e.value, IntegrityError)
        assert store.get(key, (-10, None)) == bytes(10)  # a ranged read of the huge file works
        assert store.get(key, (size - 4, size + 9)) == bytes(4)
    assert store.stats.bytes_down == 28


def test_limits_by_kind():
    assert base.whole_read_limit("runs/x/m/ffffffffffffffff")[0] < 17 << 20
    assert base.whole_read_limit("config")[0] < 2 << 20
    assert base.whole_read_limit("runs/x/c/k")[0] < 1 << 20
    assert base.whole_read_limit("packs/ab/ab00000000000000")[0] == base.PACK_WHOLE_READ_MAX
    mem = MemoryStore()
    mem.put("runs/x/c/k", bytes(200 << 10))
    with pytest.raises(ObjectTooLarge, match="an index record"):
        mem.get("runs/x/c/k")
    assert len(mem.get("runs/x/c/k", (0, 5))) == 5


def _repo(root):
    mgr = CheckpointManager(str(root))
    msgs = []
    for i in range(12):
        msgs = msgs + [{"role": "user", "content": f"message {i} " * 200}]
        mgr.save("r", msgs, session_state={"i": i, "blob": "s" * 3000})
    mgr.close()


def test_packs_too_large_to_read_whole_are_verified_in_ranges(tmp_path, monkeypatch):
    """With the whole-read limit of packs below every pack's size, verify and GC read each pack
    in byte ranges with its checksum streamed: a sound repository verifies clean, GC keeps every
    checkpoint, and a flipped byte in a pack's middle (where no restore reads) is found."""
    root = tmp_path / "repo"
    _repo(root)
    monkeypatch.setattr(base, "PACK_WHOLE_READ_MAX", 64)
    monkeypatch.setattr("snapstore.format.rangedpack.STREAM_STEP", 1000)
    mgr = CheckpointManager(str(root), create=False)
    rep = mgr.verify(read_data=True)
    assert not rep.errors, rep.errors
    want = [c.id for c in mgr.list("r")]
    mgr.gc(grace_period=0)
    assert [c.id for c in mgr.list("r")] == want
    assert mgr.latest("r").messages[-1]["content"].startswith("message 11")
    assert not mgr.verify(read_data=True).errors
    mgr.close()
    packs = sorted((p for p in (root / "packs").rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    p = packs[0]
    data = bytearray(p.read_bytes())
    data[len(data) // 3] ^= 0xFF
    p.write_bytes(bytes(data))
    mgr = CheckpointManager(str(root), create=False)
    rep = mgr.verify(read_data=True)
    assert any(p.name in str(x) for x in rep.errors), rep.errors
    mgr.close()
