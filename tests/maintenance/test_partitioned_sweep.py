"""The partitioned GC's sweep (snapstore/maintenance/partsweep.py): two-phase deletion judged at the
plan's store time, deletions as partitions, a driver SIGKILLed mid-sweep resumed by a re-run with
nothing live lost, one GC at a time, and the Dask executor on moto's HTTP server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.maintenance import partitions as P
from snapstore.maintenance import partsweep as S
from snapstore.maintenance.lock import acquire, release
from snapstore.maintenance.verify import verify
from snapstore.repo.repository import Repository
from snapstore.stores import LocalStore


def kill_driver_after_first_sweep(root: str, job: str, grace_period: float, pause: float) -> None:
    """Run ``partitioned_gc`` of ``root`` (4 partitions, one worker) in a child process whose
    partitions sleep ``pause`` seconds after sweeping, and SIGKILL it once the first partition's
    ``swept-*.json`` is in ``job``; asserts it died by that signal."""
    code = ("import time\n"
            "from snapstore.maintenance import partsweep as S\n"
            "real = S.sweep_partition\n"
            "def slow(plan, i):\n"
            f"    s = real(plan, i); time.sleep({pause!r}); return s\n"
            "S.sweep_partition = slow\n"
            f"S.partitioned_gc({root!r}, {job!r}, 4, workers=1, grace_period={grace_period!r})\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        while not (os.path.isdir(job) and any(f.startswith("swept-") and f.endswith(".json")
                                              for f in os.listdir(job))):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _fill(mgr, runs=10, dead=(1, 3, 4, 6, 8), varied=False):
    """Save ``runs`` runs of 3 checkpoints (``varied``: 3 to 5 by run), then delete the ``dead``
    ones; returns run id -> the live runs' message lists."""
    kept = {}
    for r in range(runs):
        msgs = []
        for i in range(3 + (r % 3 if varied else 0)):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i} " + "words " * 30}]
            mgr.save(f"run-{r:02d}", msgs, step=i)
        kept[f"run-{r:02d}"] = msgs
    for r in dead:
        mgr.delete(f"run-{r:02d}")
        del kept[f"run-{r:02d}"]
    return kept


def _packs(root):
    return {f for _, _, fs in os.walk(os.path.join(root, "packs")) for f in fs if not f.startswith(".")}


def _all_live_readable(root, kept):
    mgr = CheckpointManager(LocalStore(root))
    for run, msgs in kept.items():
        assert mgr.latest(run).messages == msgs
        for s in mgr.list(run):
            mgr.get(run, s.id)
    rep = verify(Repository.open(LocalStore(root), create=False))
    assert not rep.errors, rep.errors


def _unreferenced(root, job):
    rep = P.partitioned_mark(root, job, 2)
    return rep["candidate_ids"]


def test_two_phase_deletion_only_after_the_grace_period_and_only_the_unreferenced(tmp_path):
    root = str(tmp_path / "r")
    kept = _fill(CheckpointManager(LocalStore(root)))
    dead = _unreferenced(root, str(tmp_path / "dry"))
    assert dead
    before = _packs(root)
    time.sleep(0.6)  # every pack older than half the grace period
    second = S.partitioned_gc(root, str(tmp_path / "job"), 3, grace_period=1)
    assert second["sweep"]["new_candidates"] == len(dead) and second["deleted_packs"] == 0
    assert _packs(root) == before
    time.sleep(1.1)
    third = S.partitioned_gc(root, str(tmp_path / "job"), 3, grace_period=1)
    assert third["deleted_packs"] == len(dead) == third["sweep"]["delete_packs"]
    assert third["sweep"]["used_records"] and third["resumed"] is None
    assert len(_packs(root)) == len(before) - len(dead)
    assert third["requests"]["DELETE"] >= 1 and third["sweep_partitions_done"] == third["sweep_partitions"]
    _all_live_readable(root, kept)
    # the candidate records it used are gone: nothing left to delete
    again = S.partitioned_gc(root, str(tmp_path / "job"), 3, grace_period=1)
    assert again["deleted_packs"] == 0 and not again["sweep"]["used_records"]


def test_the_driver_killed_mid_sweep_is_finished_by_a_rerun_and_loses_nothing(tmp_path):
    root, job = str(tmp_path / "r"), str(tmp_path / "job")
    kept = _fill(CheckpointManager(LocalStore(root)))
    dead = _unreferenced(root, str(tmp_path / "dry"))
    assert len(dead) >= 3
    time.sleep(0.6)
    S.partitioned_gc(root, str(tmp_path / "job0"), 4, grace_period=1)  # candidates
    time.sleep(1.1)
    before = _packs(root)
    kill_driver_after_first_sweep(root, job, grace_period=1, pause=30)
    names = os.listdir(job)
    parts = len([f for f in names if f.startswith("sweep-") and f.endswith(".parquet")])
    swept = [f for f in names if f.startswith("swept-")]
    assert os.path.exists(os.path.join(job, S.SWEEP_FILE)) and 1 == len(swept) < parts
    mid = _packs(root)
    assert len(before) - len(dead) < len(mid) < len(before)  # killed with part of the sweep done
    _all_live_readable(root, kept)  # nothing live lost, even mid-sweep
    rep = S.partitioned_gc(root, job, 4, grace_period=1)  # the lock of the killed driver is taken over
    assert rep["resumed"] == "sweep" and rep["sweep_partitions_done"] == parts
    assert len(_packs(root)) == len(before) - len(dead)
    _all_live_readable(root, kept)
    assert not list(LocalStore(root).list("gc/lock"))


def test_two_gcs_at_once_one_refuses_and_deletes_nothing(tmp_path):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)))
    repo = Repository.open(LocalStore(root), create=False)
    token = os.urandom(8).hex()
    acquire(repo, repo.store_time(), 300, token)
    try:
        before = _packs(root)
        with pytest.raises(ConflictError, match="another garbage collection"):
            S.partitioned_gc(root, str(tmp_path / "job"), 2, grace_period=0)
        assert _packs(root) == before
    finally:
        release(repo, token)


def test_progress_is_reported_per_partition(tmp_path):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=6, dead=(1, 2))
    seen = []
    rep = S.partitioned_gc(root, str(tmp_path / "job"), 3, grace_period=0,
                           progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert [s for s in seen if s[0] == "mark"] == [("mark", i, 3) for i in (1, 2, 3)]
    n = rep["sweep_partitions"]
    assert [s for s in seen if s[0] == "sweep"] == [("sweep", i, n) for i in range(1, n + 1)]
    assert rep["listed_packs"] >= rep["live_packs"] + rep["deleted_packs"] and rep["deleted_packs"] > 0


def test_dask_local_cluster_on_moto_http_sweeps_as_the_local_executor(tmp_path, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    from snapstore.stores import open_store

    def repo():
        bucket = f"psweep-{os.urandom(4).hex()}"
        boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
        url = f"s3://{bucket}/repo"
        mgr = CheckpointManager(open_store(url, endpoint_url=moto_server))
        kept = _fill(mgr, runs=6, dead=(1, 4))
        return url, mgr, kept
    opts = {"endpoint_url": moto_server}
    url_l, mgr_l, kept = repo()
    url_d, mgr_d, _ = repo()
    local = S.partitioned_gc(url_l, str(tmp_path / "jl"), 3, grace_period=0, store_options=opts)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        dask = S.partitioned_gc(url_d, str(tmp_path / "jd"), 3, executor="dask", scheduler=client,
                                grace_period=0, store_options=opts)
    assert dask["deleted_packs"] == local["deleted_packs"] > 0
    assert dask["live_packs"] == local["live_packs"]
    for mgr in (mgr_l, mgr_d):
        for run, msgs in kept.items():
            assert mgr.latest(run).messages == msgs
        assert not verify(mgr.repo).errors
