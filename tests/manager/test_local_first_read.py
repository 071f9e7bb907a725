"""A fresh manager's first read on a store whose reads cost no round trip (a directory, a SQLite
file) starts no thread (``latest``; ``list`` sends no early listing): the early listing beside the config GET (snapstore/manager/firstread.py)
is only for stores with round trips, where it saves one. The reads still see what was saved."""

from __future__ import annotations

import threading

import pytest

from snapstore import CheckpointManager
from snapstore.manager import firstread
from snapstore.stores.memory import MemoryStore


@pytest.fixture
def started(monkeypatch):
    """Names of the threads started meanwhile (the real Thread.start still runs)."""
    names: list[str] = []
    real = threading.Thread.start

    def start(self):
        names.append(self.name)
        return real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    return names


@pytest.mark.parametrize("where", ["repo", "repo.db"])
def test_first_latest_on_a_local_store_starts_no_thread(tmp_path, started, where):
    loc = str(tmp_path / where)
    with CheckpointManager(loc) as mgr:
        for i in range(3):
            mgr.save("run-1", [{"role": "user", "content": f"m{j}"} for j in range(i + 1)], step=i)
    started.clear()
    with CheckpointManager(loc) as fresh:
        cp = fresh.latest("run-1")
        assert cp.step == 2 and [m["content"] for m in cp.messages] == ["m0", "m1", "m2"]
    assert started == []
    with CheckpointManager(loc) as fresh:
        assert [s.step for s in fresh.list("run-1", limit=2)] == [2, 1]
    assert "snapstore-first-list" not in started


def test_a_store_with_round_trips_still_lists_early(started):
    store = MemoryStore()  # declares no inline_reads: the early listing goes beside the config GET
    with CheckpointManager(store) as mgr:
        mgr.save("run-1", [{"role": "user", "content": "hi"}], step=0)
    fresh = CheckpointManager(store)
    assert firstread.early_listing(fresh, "run-1", 1) is not None
    started.clear()
    assert fresh.latest("run-1").step == 0
    assert "snapstore-first-list" in started


def test_a_bad_run_id_is_refused_before_anything_is_read(tmp_path):
    from snapstore.errors import InvalidRunIdError

    fresh = CheckpointManager(str(tmp_path / "repo.db"))
    with pytest.raises(InvalidRunIdError):
        firstread.early_listing(fresh, "", 1)
