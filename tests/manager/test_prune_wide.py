"""A repository-wide prune (``prune(...)`` with no run) works on many runs at once
(:mod:`snapstore.manager.fanout`):

- On S3 (moto's HTTP server behind the latency benchmark's proxy, 20 ms a response): the same
  checkpoints go, in the same order, as pruning the runs one by one; requests stay bounded per
  run and the sequential round trips of 24 runs are those of a few runs, not of 24.
- The conflict contract holds: a run whose head this caller saw and another writer moved raises
  ConflictError (the first such run in run order) and keeps everything; a checkpoint saved
  by another writer between the listing and the deletion survives, on another run as on the
  same one; the views the prune gives its caller (a head it deleted) reach the caller.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import timedelta

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.format.manifest import FREE_AFTER
from snapstore.maintenance.copy import copy_repository
from snapstore.manager import fanout, summaries
from snapstore.stores import MemoryStore
from snapstore.stores.s3 import S3Store

from tests.helpers import paths
from tests.helpers.s3_fixtures import _http_store
from tests.manager.test_prune_summaries import age_bucket

RUNS, SAVES, KEEP = 24, 40, 5


def _bench():
    spec = importlib.util.spec_from_file_location("latency_bench_wide", paths.ROOT / "benchmarks" / "latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(runs: int = RUNS, saves: int = SAVES) -> MemoryStore:
    mem = MemoryStore()
    mgr = CheckpointManager(mem, compact_log=False)  # as on S3
    for r in range(runs):
        msgs = []
        for i in range(saves):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i}"}]
            mgr.save(f"run-{r:02d}", msgs, step=i)
    return mem


def test_repository_wide_prune_on_s3_is_the_sequential_one_in_fewer_round_trips(moto_server):
    bench = _bench()
    mem = build()
    seq_store, par_store = _http_store(moto_server, prefix="repo"), _http_store(moto_server, prefix="repo")
    for s in (seq_store, par_store):
        copy_repository(mem, s)
        age_bucket(s, FREE_AFTER + 3600)
    # the reference: the runs pruned one after another, each in the calling thread
    ref = CheckpointManager(seq_store)
    want = [s for r in ref.runs() for s in ref.prune(keep_last=KEEP, run_id=r)]
    assert len(want) == RUNS * (SAVES - KEEP)

    port = int(moto_server.rsplit(":", 1)[1])
    with bench.LatencyProxy(port, 0.02) as proxy:
        mgr = CheckpointManager(S3Store(par_store.bucket, "repo", endpoint_url=proxy.endpoint,
                                        region_name="us-east-1", addressing_style="path"))
        mgr.repo  # opened before the timing (config GET, versioning check)
        before = mgr.store.stats.snapshot()
        t0 = time.monotonic()
        got = mgr.prune(keep_last=KEEP)
        t1 = time.monotonic()
        proxy.settle()
        entries = proxy.entries(t0, t1)
        assert entries and not proxy.failures
        assert proxy.max_concurrent <= 128  # never more connections than the client's pool
        d = mgr.store.stats.since(before)
    assert [(s.run_id, s.id) for s in got] == [(s.run_id, s.id) for s in want]
    for r in ref.runs():
        assert [s.id for s in CheckpointManager(par_store).list(r)] == [s.id for s in ref.list(r)]
    assert not CheckpointManager(par_store).verify().errors
    # per run: LIST of positions, of log segments, of the newest key; GETs of 2 segments and
    # the 8 manifests no segment covers; the removal record; one DeleteObjects. Once: runs(),
    # the store-clock probe (PUT + DELETE).
    assert d.total() <= RUNS * 15 + 10, d
    assert d.counts["LIST"] <= RUNS * 3 + 4 and d.counts["DELETE"] <= RUNS + 1, d
    rt = bench.summarize(entries)["round_trips"]
    # one after another these runs take 8+ round trips each (about 200); here the 24 runs go
    # at once (width 32 on S3): the chain of one run plus runs() and the clock probe
    assert fanout.width(mgr.repo, RUNS) == RUNS
    assert rt <= 16, rt


def history(mgr, runs: int, saves: int = 6) -> dict:
    out = {}
    for r in range(runs):
        msgs = []
        for i in range(saves):
            msgs = msgs + [{"role": "user", "content": f"{r}/{i}"}]
            out[f"run-{r}"] = mgr.save(f"run-{r}", msgs)
    return out


def test_a_run_moved_since_the_caller_saw_it_conflicts_and_keeps_everything():
    store = MemoryStore()
    caller, other = CheckpointManager(store), CheckpointManager(store)
    heads = history(caller, 10)
    for r in heads:
        caller.latest(r)                   # this caller has seen every head
    late = other.save("run-3", [{"role": "user", "content": "late"}])  # another writer moves run-3
    late7 = other.save("run-7", [{"role": "user", "content": "late"}])
    with pytest.raises(ConflictError, match="run-3"):  # the first moved run in run order
        caller.prune(older_than=0)           # dooms every checkpoint, heads included
    fresh = CheckpointManager(store)
    assert fresh.latest("run-3").id == late and len(fresh.list("run-3")) == 7
    assert fresh.latest("run-7").id == late7 and len(fresh.list("run-7")) == 7
    for r in ("run-0", "run-1", "run-2"):  # runs before the failed one are pruned (deleted whole)
        assert fresh.list(r) == []
    assert not fresh.verify().errors


def test_the_head_moves_a_prune_makes_reach_its_caller_and_only_it():
    """prune(older_than=0) deletes every run (their heads go): the caller may save on each
    at once (its view was updated in its own context by the pool's outcomes); a thread that
    saw a head before the prune conflicts."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    history(mgr, 9)
    read, pruned, errors = threading.Event(), threading.Event(), []

    def other_caller():  # saw run-5's head before the prune, saves after it
        cp = mgr.latest("run-5")
        read.set()
        pruned.wait(60)
        try:
            mgr.save("run-5", cp.messages + [{"role": "user", "content": "stale"}])
        except ConflictError as e:
            errors.append(e)
    t = threading.Thread(target=other_caller)
    t.start()
    assert read.wait(60)
    assert len(mgr.prune(older_than=0)) == 9 * 6
    pruned.set()
    t.join()
    assert len(errors) == 1
    for r in range(9):
        cid = mgr.save(f"run-{r}", [{"role": "user", "content": "again"}])
        assert CheckpointManager(store).latest(f"run-{r}").id == cid


@pytest.mark.parametrize("target", ["run-4", "run-2"], ids=["same-run", "another-run"])
def test_a_save_between_a_runs_listing_and_its_deletion_survives(monkeypatch, target):
    """Another writer saves on ``target`` while run-4 is being listed: the new checkpoint is
    neither hidden nor deleted and stays its run's head (the pruner had no view of it: a
    prune that does not see the head as it listed decides again)."""
    store = MemoryStore()
    w, pruner = CheckpointManager(store), CheckpointManager(store)
    history(w, 8)
    orig = summaries.list_live
    late = {}

    def list_then_save(repo, rk):
        got = orig(repo, rk)
        if rk == repo.run_key("run-4") and "id" not in late:
            # a writer that never read the run saves on top of its head, whether or not the
            # prune got to it yet (the first writer's view of another run may be pruned: conflict)
            late["id"] = CheckpointManager(store).save(target, [{"role": "user", "content": "late"}])
        return got
    monkeypatch.setattr(summaries, "list_live", list_then_save)
    gone = pruner.prune(older_than=timedelta(0))
    assert late["id"] not in {s.id for s in gone}
    fresh = CheckpointManager(store)
    assert [s.id for s in fresh.list(target)] == [late["id"]]
    assert fresh.latest(target).messages == [{"role": "user", "content": "late"}]
    assert not fresh.verify(read_data=True).errors


def test_each_run_keeps_order_stops_after_an_error_and_carries_the_context():
    import contextvars

    var = contextvars.ContextVar("v", default="unset")
    var.set("caller")
    mgr = CheckpointManager(MemoryStore())  # max_concurrency 16: 4 at once
    mgr.save("x", [])
    repo = mgr.repo
    seen, lock = [], threading.Lock()

    def work(r):
        with lock:
            seen.append((r, var.get(), threading.current_thread() is not threading.main_thread()))
        var.set("changed")  # a task's change stays in its own copy
        # the runs after the failing one take longer, so the failure is seen while they run: how
        # many of them started is a matter of scheduling (the contract: a prefix, stopped early)
        time.sleep(0.01 if r <= "r05" else 0.06)
        if r == "r05":
            raise ValueError(r)
        return r.upper()
    runs = [f"r{i:02d}" for i in range(40)]
    out = fanout.each_run(repo, runs, work)
    assert var.get() == "caller"
    assert [o.run_id for o in out] == runs[:len(out)] and 6 <= len(out) <= 6 + 3 * fanout.width(repo, 40)
    assert [o.value for o in out[:5]] == [r.upper() for r in runs[:5]]
    assert isinstance(out[5].error, ValueError)
    assert all(v == "caller" and pooled for _r, v, pooled in seen)
    done = []
    ok = fanout.each_run(repo, runs, lambda r: r, on_done=lambda k, n: done.append((k, n)))
    assert [o.value for o in ok] == runs and done[-1] == (40, 40) and len(done) == 40
