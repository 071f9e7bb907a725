"""Kills during a partitioned GC (snapstore/maintenance/partitions.py, partsweep.py), with real
processes: a Dask worker process SIGKILLed in the middle of a mark partition and of a sweep
partition (after deleting half of its packs), and the driver SIGKILLed mid-sweep. Each job is
finished (by the cluster's retry, or by a re-run of the driver) with nothing live lost and exactly
the packs deleted that an uninterrupted local-executor GC of a copy of the repository deletes."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance import partitions as P
from snapstore.maintenance import partsweep as S
from snapstore.stores import LocalStore
from tests.helpers import partkill
from tests.maintenance.test_partitioned_sweep import _all_live_readable, _packs, kill_driver_after_first_sweep
from tests.maintenance.test_partitioned_sweep import _fill as _sweep_fill

pytest.importorskip("pyarrow")


def _fill(mgr):
    return _sweep_fill(mgr, varied=True)


def _twins(tmp_path):
    """The repository and an exact copy, GC'd by the local executor without interruption."""
    root, twin = str(tmp_path / "r"), str(tmp_path / "twin")
    kept = _fill(CheckpointManager(LocalStore(root)))
    shutil.copytree(root, twin)
    local = S.partitioned_gc(twin, str(tmp_path / "job-local"), 4, grace_period=0)
    assert local["deleted_packs"] > 0
    return root, twin, kept, local


class _Killer(threading.Thread):
    """SIGKILLs each process that announces itself in ``job_dir`` (``killme-*``), once."""

    def __init__(self, job_dir):
        super().__init__(daemon=True)
        self.job_dir, self.killed, self.stop = job_dir, {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for name in os.listdir(self.job_dir) if os.path.isdir(self.job_dir) else ():
                if name.startswith("killme-") and not name.endswith(".tmp") and name not in self.killed:
                    with open(os.path.join(self.job_dir, name)) as f:
                        pid = int(f.read())
                    os.kill(pid, signal.SIGKILL)
                    self.killed[name] = pid
            time.sleep(0.05)


def test_a_worker_killed_mid_mark_and_mid_sweep_loses_nothing_and_deletes_what_local_does(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    root, twin, kept, local = _twins(tmp_path)
    job = str(tmp_path / "job")
    monkeypatch.setattr(P, "mark_partition", partkill.mark_then_die)
    monkeypatch.setattr(S, "sweep_partition", partkill.sweep_then_die)
    killer = _Killer(job)
    killer.start()
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            rep = S.partitioned_gc(root, job, 4, executor="dask", scheduler=client, grace_period=0)
    finally:
        killer.stop.set()
        killer.join()
    assert sorted(killer.killed) == [f"killme-mark-{partkill.KILL_MARK_INDEX}",
                                     f"killme-sweep-{partkill.KILL_SWEEP_INDEX}"]
    assert not [f for f in os.listdir(job) if ".tmp" in f]
    assert rep["live_packs"] == local["live_packs"] and rep["candidates"] == local["candidates"]
    assert _packs(root) == _packs(twin)  # the same packs deleted as the local executor's
    _all_live_readable(root, kept)


def test_the_driver_killed_mid_sweep_then_rerun_deletes_what_local_does(tmp_path):
    root, twin, kept, local = _twins(tmp_path)
    job = str(tmp_path / "job")
    before = _packs(root)
    kill_driver_after_first_sweep(root, job, grace_period=0, pause=60)
    mid = _packs(root)
    assert _packs(twin) < mid < before  # killed with part of the sweep done
    _all_live_readable(root, kept)  # nothing live lost, even mid-sweep
    rep = S.partitioned_gc(root, job, 4, grace_period=0)
    assert rep["resumed"] == "sweep" and rep["deleted_packs"] == local["deleted_packs"]
    assert _packs(root) == _packs(twin)
    _all_live_readable(root, kept)
