"""The directory store journal's flock(2) fallback (snapstore/stores/walocks.py), forced on Linux by
removing the OFD lock constants from fcntl (here and, through a sitecustomize, in child
processes): a create-only and compare-and-swap race of real processes stays exact, the journal
header records the way, a process without OFD locks refuses a journal locked with them, and the
lock files are never taken for foreign content."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from snapstore.errors import StoreError
from snapstore.stores import LocalStore
from snapstore.stores import walocks
from snapstore.stores.batch import BatchPut
from snapstore.stores.localwal import NAME
from snapstore.stores.probe import find_foreign_content as foreign_file
from tests.helpers import paths
from tests.helpers.lockway import child_pythonpath, force_flock

_RACER = textwrap.dedent("""
    import fcntl, sys
    assert not hasattr(fcntl, "F_OFD_SETLKW")
    from snapstore.errors import PreconditionFailed
    from snapstore.stores import LocalStore
    root, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    st = LocalStore(root)
    won = bumps = 0
    for i in range(n):
        try:
            st.put(f"keys/k{i}", me.encode())
            won += 1
        except PreconditionFailed:
            pass
        while True:  # a counter incremented by compare-and-swap
            info = st.head("counter")
            v = int(st.get("counter"))
            try:
                st.put_if_match("counter", str(v + 1).encode(), info.etag)
                bumps += 1
                break
            except PreconditionFailed:
                continue
    st.close()
    print(won, bumps)
""")


def test_processes_race_create_only_and_compare_and_swap_exactly(tmp_path):
    root = tmp_path / "repo"
    st = LocalStore(root)
    st.put("counter", b"0")
    st.close()
    env = dict(os.environ, PYTHONPATH=child_pythonpath(paths.ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(root), f"p{i}", "40"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(4)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(tuple(map(int, out.split())))
    assert sum(w for w, _ in results) == 40  # every key created exactly once
    assert sum(b for _, b in results) == 160
    st = LocalStore(root)
    assert int(st.get("counter")) == 160  # no lost compare-and-swap
    owners = {st.get(f"keys/k{i}") for i in range(40)}
    assert owners <= {f"p{i}".encode() for i in range(4)}
    assert sorted(os.listdir(root / walocks.DIR))[:2] == ["append", "barrier"]
    assert foreign_file(st) is None or foreign_file(st) == "counter"  # the lock files are not foreign
    st.close()


def test_the_header_records_the_way_and_a_batch_is_one_record(tmp_path, monkeypatch):
    force_flock(monkeypatch)
    st = LocalStore(tmp_path / "r", settle_delay=None)
    st.write_batch([BatchPut("a/1", b"x"), BatchPut("b/2", b"y")], deletes=["c"])
    raw = (tmp_path / "r" / NAME).read_bytes()
    assert raw[36] == walocks.FLOCK
    from snapstore.stores.localwal import unsettled
    assert unsettled(tmp_path / "r") == [("P", "a/1"), ("P", "b/2"), ("D", "c")]
    st.close()
    assert not (tmp_path / "r" / NAME).exists()


def test_a_process_without_ofd_locks_refuses_a_journal_locked_with_them(tmp_path, monkeypatch):
    if not walocks.ofd_available():
        pytest.skip("no OFD locks on this platform")
    root = tmp_path / "r"
    ofd = LocalStore(root)
    ofd.put("a", b"1")  # the journal is open, header way "O"
    force_flock(monkeypatch)
    other = LocalStore(root)
    with pytest.raises(StoreError, match="open-file-description"):
        other.put("b", b"2")
    monkeypatch.undo()
    ofd.close()
    flock_after = LocalStore(root)  # once nobody uses it, the next opener picks its own way
    force_flock(monkeypatch)
    flock_after.put("b", b"2")
    assert (root / NAME).read_bytes()[36] == walocks.FLOCK
    flock_after.close()
