"""``CheckpointManager.runs()`` on S3: requests and sequential round trips, measured.

200 listed runs (plain ids, hashed long ids, runs rolled back to a live checkpoint) beside runs
that must not be listed (deleted: tombstone head; a rollback whose target is gone and nothing
older is left), in a bucket of moto's HTTP server behind a proxy that holds every request
``LATENCY`` seconds (so that what runs in parallel visibly overlaps). Every request the store makes
is timed in the test; "sequential round trips" is the longest chain of requests each starting
after the previous one ended.

moto runs in its own process here: in this process (``ThreadedMotoServer``) its CPU time (several
ms a request) is serialised with the client's by the GIL, so 400 "parallel" requests would queue
for seconds and timing would show chains that are only CPU contention.

Run markers (docs/format.md §13) decide most runs from one LIST of ``runmarks/`` beside the LIST
of ``runs/``; what they leave open (a deleted run: one LIST confirming its tombstone; a rollback
head: one LIST and one GET, as before markers) ``runs()`` issues ``store.max_concurrency`` (128)
at a time. ``tests/repo/test_runmarks.py`` covers the cases; this file times them.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.stores.s3 import S3Store

from tests.helpers.s3_fixtures import _http_store
from tests.helpers.wire_proxy import RecordingProxy

LATENCY = 1.0
N_PLAIN, N_HASHED, N_ROLLED = 192, 6, 2          # 200 listed
N_DELETED, N_EMPTY_ROLLBACK = 3, 1                # 4 run directories not listed


def build_repo(mem) -> tuple[object, list[str]]:
    """The repository (saved through the real write path into ``mem``, the bucket itself: a copy
    would change the ETags that tombstone markers name) and the runs it lists."""
    mgr = CheckpointManager(mem)
    listed = []
    for i in range(N_PLAIN):
        run = f"run-{i:03d}"
        for step in range(1 + i % 3):
            mgr.save(run, [{"role": "user", "content": f"{run} {step}"}] * (step + 1), step=step)
        listed.append(run)
    for i in range(N_HASHED):
        run = f"a very long run id that does not fit in a key segment, number {i} " + "x" * 40
        mgr.save(run, [{"role": "user", "content": "hi"}])
        listed.append(run)
    def rolled_back(run):  # two checkpoints, then back to the first
        first = mgr.save(run, [{"role": "user", "content": "a"}])
        mgr.save(run, [{"role": "user", "content": "b"}])
        mgr.rollback(run, first)

    for i in range(N_ROLLED):
        rolled_back(f"rolled-{i}")
        listed.append(f"rolled-{i}")
    for i in range(N_DELETED):
        run = f"deleted-{i}"
        mgr.save(run, [{"role": "user", "content": "gone"}])
        mgr.delete(run)
    for i in range(N_EMPTY_ROLLBACK):
        run = f"empty-rollback-{i}"
        rolled_back(run)
        # an interrupted delete of the target: the rollback now resolves to nothing
        mem.delete_many([keys.manifest_key(mgr.repo.run_key(run), 0)])
    assert sum(i.key.startswith("runs/h") for i in mem.list("runs/") if "/m/" in i.key) == N_HASHED
    return mem, sorted(listed)


class Timed:
    """Record (start, end, kind) of every request ``store`` makes (GET, HEAD, LIST pages, bucket
    versioning), wrapping the store's methods and its client's ListObjectsV2."""

    def __init__(self, store: S3Store):
        self.calls: list[tuple[float, float, str]] = []
        self._lock = threading.Lock()
        for name, kind in (("get", "GET"), ("head", "HEAD"), ("put", "PUT")):
            setattr(store, name, self._wrap(getattr(store, name), kind))
        client = store._client
        client.list_objects_v2 = self._wrap(client.list_objects_v2, "LIST")
        client.get_bucket_versioning = self._wrap(client.get_bucket_versioning, "VERSIONING")

    def _wrap(self, fn, kind):
        def timed(*a, **kw):
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                t1 = time.monotonic()
                with self._lock:
                    self.calls.append((t0, t1, kind))
        return timed

    def take(self) -> list[tuple[float, float, str]]:
        with self._lock:
            out, self.calls = self.calls, []
        return out


def chain(calls: list[tuple[float, float, str]]) -> int:
    """Length of the longest chain of requests each starting after the previous one ended."""
    calls = sorted(calls, key=lambda c: c[1])
    best: list[int] = []
    for i, (start, _, _) in enumerate(calls):
        best.append(1 + max((best[j] for j in range(i) if calls[j][1] <= start), default=0))
    return max(best, default=0)


def counts(calls) -> dict:
    out: dict = {}
    for _, _, kind in calls:
        out[kind] = out.get(kind, 0) + 1
    return out


@pytest.fixture(scope="module")
def moto_process(moto_server):
    """moto's server in a child process on 127.0.0.1 (free port); yields its endpoint URL.
    (``moto_server`` only sets the dummy credentials.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.skip("could not start moto's server in a child process")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def repo_bucket(moto_process):
    store = _http_store(moto_process)
    _, listed = build_repo(store)
    store.close()
    return store.bucket, listed


@pytest.fixture
def slow_store(moto_process, repo_bucket):
    parts = urlsplit(moto_process)
    proxy = RecordingProxy(parts.hostname, parts.port, delay=LATENCY)
    store = S3Store(repo_bucket[0], endpoint_url=proxy.endpoint, region_name="us-east-1",
                    addressing_style="path")
    try:
        yield store
    finally:
        store.close()
        proxy.close()


def test_runs_200_in_few_round_trips(slow_store, repo_bucket):
    _, listed = repo_bucket
    assert len(listed) == 200
    timed = Timed(slow_store)
    mgr = CheckpointManager(slow_store)

    t0 = time.monotonic()
    assert mgr.runs() == listed                       # cold: the manager opens the repository too
    cold_s, cold = time.monotonic() - t0, timed.take()
    t0 = time.monotonic()
    assert mgr.runs() == listed                       # warm
    warm_s, warm = time.monotonic() - t0, timed.take()
    fresh = CheckpointManager(slow_store)
    t0 = time.monotonic()
    assert fresh.runs() == listed                     # a second cold manager: reads every head again
    again_s, again = time.monotonic() - t0, timed.take()

    n_dirs = 200 + N_DELETED + N_EMPTY_ROLLBACK
    print(f"\nruns() (latency {LATENCY} s) new manager: {counts(cold)} chain {chain(cold)} in {cold_s:.2f} s; "
          f"again: {counts(warm)} chain {chain(warm)} in {warm_s:.2f} s; "
          f"another new manager: {counts(again)} chain {chain(again)} in {again_s:.2f} s")
    # new manager: the config GET and the versioning check (overlapping the LISTs), 1 LIST of
    # runs/ beside 1 LIST of runmarks/ (§13); nothing for the 198 runs whose markers say live;
    # one LIST per deleted run (its tombstone commit checked against the head); the rollback
    # heads read as before: a LIST and a GET each, their targets (2 live, 1 missing, whose
    # fallback scan is one more LIST)
    rolled = N_ROLLED + N_EMPTY_ROLLBACK
    c = counts(cold)
    assert c["LIST"] == 2 + N_DELETED + rolled + N_EMPTY_ROLLBACK, c
    assert c["GET"] == 1 + 2 * rolled and c["VERSIONING"] == 1, c
    assert chain(cold) <= 6
    assert counts(again) == c and chain(again) <= 6
    # the same manager again: the same, without the config (rollback heads are always re-read)
    c = counts(warm)
    assert c["LIST"] == 2 + N_DELETED + rolled + N_EMPTY_ROLLBACK
    assert c["GET"] == 2 * rolled
    assert chain(warm) <= 5


def test_runs_sees_changes_behind_the_remembered_heads(s3_http_store):
    """What ``runs()`` remembers is keyed by the head's key and ETag: a run deleted, a run saved
    anew, a new run and a rollback to nothing, all by another manager, show at once."""
    a, b = CheckpointManager(s3_http_store), CheckpointManager(s3_http_store)
    assert a.runs() == []
    for run in ("r1", "r2", "x" * 80):
        b.save(run, [{"role": "user", "content": run}])
    first = b.save("r3", [{"role": "user", "content": "a"}])
    b.save("r3", [{"role": "user", "content": "b"}])
    assert a.runs() == sorted(["r1", "r2", "r3", "x" * 80])
    b.delete("r1")
    b.delete("x" * 80)
    b.save("r4", [{"role": "user", "content": "new"}])
    b.rollback("r3", first)
    assert a.runs() == ["r2", "r3", "r4"]
    b.save("r1", [{"role": "user", "content": "again"}])
    # the rollback's target disappears (an interrupted delete): r3 resolves to nothing
    s3_http_store.delete_many([keys.manifest_key(b.repo.run_key("r3"), 0)])
    assert a.runs() == ["r1", "r2", "r4"]
    assert CheckpointManager(s3_http_store).runs() == ["r1", "r2", "r4"]
