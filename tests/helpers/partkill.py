"""Partition tasks that get themselves killed once (tests of partitioned jobs, issue 25).

The test puts one of these in place of the real task (``partitions.mark_partition`` or
``partsweep.sweep_partition``, which the Dask executor pickles by reference, so worker processes
import this module and run it). Its first attempt at partition ``index`` does real work, then
writes ``killme-<phase>-<index>`` (its pid) in the job directory and sleeps until the test
SIGKILLs that process; every later attempt (the file exists) is the real task. The real tasks
are taken when this module is imported, before a test replaces them.
"""

from __future__ import annotations

import dataclasses
import os
import time

from snapstore.maintenance import partitions as P
from snapstore.maintenance import partsweep as S

_REAL_MARK = P.mark_partition
_REAL_SWEEP = S.sweep_partition
KILL_MARK_INDEX = 1
KILL_SWEEP_INDEX = 0


def _wait_to_be_killed(plan, phase: str, index: int) -> None:
    path = os.path.join(plan.job_dir, f"killme-{phase}-{index}")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(300)
    raise AssertionError("not killed")


def _first_attempt(plan, phase: str, index: int) -> bool:
    return not os.path.exists(os.path.join(plan.job_dir, f"killme-{phase}-{index}"))


def mark_then_die(plan, index: int) -> dict:
    """Partition ``KILL_MARK_INDEX``, first attempt: the whole mark (its result written to a
    scratch directory, not the job's), then killed before its result is in the job directory."""
    if index == KILL_MARK_INDEX and _first_attempt(plan, "mark", index):
        scratch = dataclasses.replace(plan, job_dir=plan.job_dir + f"-scratch-{os.getpid()}")
        os.makedirs(scratch.job_dir, exist_ok=True)
        _REAL_MARK(scratch, index)
        _wait_to_be_killed(plan, "mark", index)
    return _REAL_MARK(plan, index)


def sweep_then_die(plan, index: int) -> dict:
    """Sweep partition ``KILL_SWEEP_INDEX``, first attempt: half of its packs deleted, then killed
    before the partition is recorded as swept."""
    if index == KILL_SWEEP_INDEX and _first_attempt(plan, "sweep", index):
        import pyarrow.parquet as pq
        doomed = pq.read_table(os.path.join(plan.job_dir, f"sweep-{index:05d}.parquet")).column("key").to_pylist()
        P.open_plan(plan).store.delete_many(doomed[: max(1, len(doomed) // 2)])
        _wait_to_be_killed(plan, "sweep", index)
    return _REAL_SWEEP(plan, index)
