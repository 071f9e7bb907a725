"""A long-lived manager's memory is bounded (issue 26, item 6): its run views sit in an LRU with
an entry limit and a byte budget (snapstore/manager/runcache.py), the pack cache charges what a
pack can really hold, per-run locks go when nobody holds them; an evicted run costs a re-read of
its head, never correctness (a caller's conflict check still fires on it).

The bound the README states is measured here with tracemalloc on 10,000 small runs touched by
one manager on the memory store (the figures for the local directory and the SQLite file come
from benchmarks/manager_memory.py).
"""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, InvalidInputError
from snapstore.manager.runcache import RunCache, view_cost
from snapstore.manager.views import PendingSave, RunView
from snapstore.stores import LocalStore
from snapstore.stores.memory import MemoryStore


def small(i: int) -> list[dict]:
    return [{"role": "user", "content": f"task {i}"}, {"role": "assistant", "content": f"done {i}"}]


def rss() -> int:
    """This process's resident set in bytes (VmRSS)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_ten_thousand_runs_stay_under_the_bound(tmp_path):
    """10,000 small runs saved (every 50th read back) through one manager on a local directory
    (no fsync, to keep it a few seconds): once the budgets are full (by run 2,000), the next 8,000
    runs add no more than each run's caller view costs (what this thread saw of it, never
    forgotten: ~300 bytes) and allocator slack; without the bounds each run kept ~8 KB (64 MB
    over 8,000 runs). The views and the pack cache stay within their budgets."""
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False), run_cache_entries=1000,
                            run_cache_bytes=2 << 20, pack_cache_bytes=2 << 20)
    mid = None
    for i in range(10_000):
        mgr.save(f"run-{i}", small(i), step=1)
        if i % 50 == 0:
            assert mgr.latest(f"run-{i}").messages == small(i)
        if i == 1_999:
            gc.collect()
            mid = rss()
    gc.collect()
    grown = rss() - mid
    views = mgr.state.views
    assert len(views) <= 1000 and views.evictions >= 9_000 and views.nbytes <= 2 << 20
    assert mgr.repo.cache._bytes <= 2 << 20
    assert len(mgr.state._run_locks) < 10
    assert grown < 8_000 * 400 + (4 << 20), grown
    assert mgr.latest("run-0").messages == small(0)  # evicted long ago: read again from the store
    mgr.close()


def test_an_evicted_run_still_conflicts_and_rereads_its_head(tmp_path):
    """A caller whose run's view was evicted gets ConflictError when another manager saved since
    (the head is read again, never assumed), and continues from its own head otherwise, at the
    cost of one LIST and one GET."""
    mine = CheckpointManager(LocalStore(tmp_path / "r"), run_cache_entries=2)
    other = CheckpointManager(LocalStore(tmp_path / "r"))
    mine.save("a", small(0))
    other.latest("a")
    mine.save("b", small(1))
    mine.save("c", small(2))
    assert "a" not in mine.state.views  # evicted by b and c
    other.save("a", small(0) + small(9))
    with pytest.raises(ConflictError):
        mine.save("a", small(0) + small(3))
    cp = mine.latest("a")
    assert cp.messages == small(0) + small(9)
    mine.save("b", small(1) + small(4))
    mine.save("c", small(2) + small(4))
    assert "a" not in mine.state.views
    before = mine.store.stats.counts.copy()
    mine.save("a", cp.messages + small(5))
    after = mine.store.stats.counts
    assert after.get("LIST", 0) - before.get("LIST", 0) >= 1 and after.get("GET", 0) - before.get("GET", 0) >= 1
    assert other.latest("a").messages == small(0) + small(9) + small(5)
    mine.close()
    other.close()


def test_view_cost_counts_a_writer_state_and_bytes_evict():
    """A loaded writer state is charged per message and for its JSON; a byte budget evicts the
    least recently used view first; a view with a save of unknown outcome is pinned."""
    mgr = CheckpointManager(MemoryStore())
    big = [{"role": "tool", "content": "x" * 2000} for _ in range(50)]
    mgr.save("big", big)
    v = mgr.state.views.get("big")
    assert view_cost(v) >= 50 * 2000 and view_cost(RunView()) < 4096
    cache = RunCache(max_entries=10, max_bytes=view_cost(v) + 8192)
    cache["old"] = RunView()
    pinned = RunView()
    pinned.pending = PendingSave((), None, None, [], None)
    cache["pinned"] = pinned
    cache["big"] = v
    cache.get("old")  # "old" is now more recent than "pinned"
    cache["big2"] = v
    assert "pinned" in cache and "big" not in cache and "big2" in cache
    assert cache.nbytes <= cache.max_bytes + view_cost(pinned)
    cache.pop("big2")
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0


@pytest.mark.parametrize("bad", [{"run_cache_entries": 0}, {"run_cache_entries": "9"}, {"run_cache_bytes": -1},
                                 {"pack_cache_bytes": 1.5}, {"run_cache_entries": True}])
def test_bad_bounds_are_typed_errors(bad):
    with pytest.raises(InvalidInputError):
        CheckpointManager(MemoryStore(), **bad)


def test_run_locks_live_while_held():
    """A run's lock is one object while anyone holds it, and goes when nobody does."""
    mgr = CheckpointManager(MemoryStore())
    lk = mgr.state.run_lock("r")
    assert mgr.state.run_lock("r") is lk
    got = []
    with lk:
        t = threading.Thread(target=lambda: got.append(mgr.state.run_lock("r").acquire(timeout=0.05)))
        t.start()
        t.join()
    assert got == [False]  # the other thread got the same, held, lock
    del lk
    gc.collect()
    assert "r" not in mgr.state._run_locks
