"""``list(limit=10)``, a cursor page, a rollback 5 back, a head delete and ``latest()`` on S3 cost
the same on a long run as on a short one (issue 26 items 1 and 5).

Two runs, of ``SHORT`` and ``LONG`` saves (``LONG`` above one LIST page of 1,000 keys: before
these reads listed the log page by page, one sequential LIST per 1,000 positions), in a bucket
of moto's HTTP server (its own process) behind ``benchmarks/latency.py``'s proxy, which holds
every response ``DELAY`` seconds and logs each request (method, target, start, end). Each
operation runs on a NEW manager (repository not opened yet: its config GET and the bucket
versioning check are counted); requests are counted by kind and key group from the proxy's log,
and round trips are the longest chain of requests each starting after the previous one ended.
"""

from __future__ import annotations

import importlib.util
from urllib.parse import urlsplit

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance.copy import copy_repository
from snapstore.stores.memory import MemoryStore
from snapstore.stores.s3 import S3Store

from tests.cost.test_runs_round_trips import moto_process  # noqa: F401 - the fixture
from tests.helpers import paths
from tests.helpers.s3_fixtures import _http_store

SHORT, LONG = 40, 1_100
DELAY = 0.2  # long enough that a wave of a dozen requests on a busy 2-core machine overlaps


def _bench():
    spec = importlib.util.spec_from_file_location("latency_bench_bounded", paths.ROOT / "benchmarks" / "latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _bench()


@pytest.fixture(scope="module")
def bucket(moto_process):  # noqa: F811
    """One bucket with runs ``short`` and ``long``: saved into a memory store as on S3 (no
    compacted records), then copied into the bucket object by object (fast), straight to moto."""
    mem = MemoryStore()
    mgr = CheckpointManager(mem, compact_log=False)
    for run, n in (("short", SHORT), ("long", LONG)):
        msgs = [{"role": "system", "content": "You are a coding agent."}]
        for i in range(n):
            msgs = msgs + [{"role": "assistant", "content": f"step {i} of {run}: " + "tool call " * 20},
                           {"role": "tool", "content": f"result {i} " + "output line\n" * 30}]
            mgr.save(run, msgs, step=i)
    mgr.close()
    store = _http_store(moto_process)
    copy_repository(mem, store)
    store.close()
    return store.bucket, moto_process


@pytest.fixture
def proxy(bench, moto_process):  # noqa: F811
    port = urlsplit(moto_process).port
    px = bench.LatencyProxy(port, DELAY).start()
    try:
        yield px
    finally:
        px.stop()


def measured(bench, proxy, bucket, op):
    """Run ``op(mgr)`` on a new manager behind the proxy: ``(result, {kind group: n}, round trips)``."""
    store = S3Store(bucket[0], endpoint_url=proxy.endpoint, region_name="us-east-1", addressing_style="path")
    mgr = CheckpointManager(store)
    try:
        t0 = bench.clock()
        out = op(mgr)
        t1 = bench.clock()
    finally:
        mgr.close()
        store.close()
    entries = proxy.entries(t0, t1)
    s = bench.summarize(entries)
    TIMELINES[len(TIMELINES)] = [(round(e["start"] - t0, 3), round(e["end"] - t0, 3), e["method"], e["target"][-60:])
                                 for e in sorted(entries, key=lambda e: e["start"])]
    return out, s["by_key_group"], s["round_trips"]


TIMELINES: dict = {}  # what each measurement sent, for a failure's message


def without_packs(groups: dict) -> dict:
    """Request counts by kind and key group, pack GETs left out (how many packs hold a run's
    data depends on its length: the tiers, docs/format.md §10)."""
    return {k: v for k, v in groups.items() if k != "GET packs"}


TRIALS = 3
"""Reads are measured this many times each (a new manager every time): their request counts must
all be equal, and the fewest round trips is taken (a busy machine may start a request of a
parallel wave after another one ended, which the chain then counts)."""


def test_bounded_reads_and_rollback_cost_the_same_on_a_long_run(bench, proxy, bucket):
    got = {}
    for run, n in (("short", SHORT), ("long", LONG)):
        def reads(op, check):
            trials = []
            for _ in range(TRIALS):
                out, groups, rt = measured(bench, proxy, bucket, op)
                check(out)
                trials.append((groups, rt))
            assert all(g == trials[0][0] for g, _ in trials), trials  # the same requests every time
            return trials[0][0], min(rt for _, rt in trials)

        got[run] = {"latest": reads(lambda m: m.latest(run), lambda cp: cp.step == n - 1 or pytest.fail(cp.step))}
        got[run]["list"] = reads(lambda m: m.list(run, limit=10),
                                 lambda page: [c.step for c in page] == list(range(n - 1, n - 11, -1)) or pytest.fail())
        with CheckpointManager(_plain(bucket)) as plain:
            cursor = plain.list(run, limit=10)[-1].seq
        got[run]["cursor"] = reads(lambda m: m.list(run, limit=10, before_seq=cursor),
                                   lambda page: [c.step for c in page] == list(range(n - 11, n - 21, -1)) or pytest.fail())
    for run, n in (("short", SHORT), ("long", LONG)):  # after every read: a rollback changes the head
        with CheckpointManager(_plain(bucket)) as plain:
            target = plain.list(run, limit=6)[5]
        cp, rb_g, rb_rt = measured(bench, proxy, bucket, lambda m: m.rollback(run, target.id))
        assert cp.id == target.id and cp.step == n - 6
        got[run]["rollback"] = (rb_g, rb_rt)
        with CheckpointManager(_plain(bucket)) as plain:  # the run really went back 5
            assert plain.head(run).id == target.id
            assert [c.step for c in plain.list(run, limit=3)] == [n - 6, n - 7, n - 8]
        with CheckpointManager(_plain(bucket)) as plain:
            head = plain.head(run)
        _, del_g, del_rt = measured(bench, proxy, bucket, lambda m: m.delete(run, head.id))
        got[run]["head delete"] = (del_g, del_rt)
        with CheckpointManager(_plain(bucket)) as plain:  # the head moved back to the one before
            assert plain.head(run).step == n - 7
    print()
    for op in ("latest", "list", "cursor", "rollback", "head delete"):
        print(f"{op}: short {got['short'][op]}  long {got['long'][op]}")
    for op in ("latest", "list", "cursor", "rollback", "head delete"):
        (sg, _), (lg, _) = got["short"][op], got["long"][op]
        assert without_packs(sg) == without_packs(lg), (op, sg, lg)
    # round trips, at both lengths: a new manager's config GET and versioning check go beside
    # the run's first LIST (firstread); a cursor's LIST needs no early listing... it follows them.
    # A head delete: that LIST; the newest records' GETs beside the r marker; the rollback
    # record; the removal record beside the clock probe; the void records (rollback.delete)
    bounds = {"latest": 3, "list": 2, "cursor": 3, "rollback": 5, "head delete": 5}
    for op, most in bounds.items():
        for run in ("short", "long"):
            assert got[run][op][1] <= most + (op in ("rollback", "head delete")), (op, run, got[run][op], TIMELINES)
    assert "GET packs" not in got["long"]["list"][0]
    assert got["long"]["latest"][0]["LIST runs"] == 1 and got["long"]["list"][0]["LIST runs"] == 1


def _plain(bucket):
    """A store straight to moto (no proxy): set-up and checks outside the measured windows."""
    return S3Store(bucket[0], endpoint_url=bucket[1], region_name="us-east-1", addressing_style="path")
