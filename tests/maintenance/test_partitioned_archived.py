"""Partitioned GC and verify on a repository with archived runs (thin bundle logs, docs/format.md
§28): a run archived, one continued on top of its bundle, a fork of an archived run, a deleted run.
The partitioned GC loses nothing (every checkpoint reads back the same, verify --read-data is
clean) and the partitioned verify gives one-process verify's report, before and after it."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance import partverify as PV
from snapstore.maintenance.partsweep import partitioned_gc

pytest.importorskip("pyarrow")


def _fill(root: str) -> None:
    m = CheckpointManager(root)
    for r in range(6):
        msgs = []
        for i in range(8):
            msgs = msgs + [{"role": "user", "content": f"run {r} msg {i} " + "w" * 300}]
            m.save(f"run-{r}", msgs, step=i)
    m.archive(["run-0", "run-1", "run-2"])
    m.save("run-1", msgs + [{"role": "user", "content": "on top of the bundle"}])
    m.fork("run-0", m.list("run-0")[3].id, "fork-of-0")
    m.delete("run-4")


def _reads(root: str) -> dict:
    m = CheckpointManager(root)
    return {r: [(s.id, m.get(r, s.id).messages) for s in m.list(r)] for r in m.runs()}


def _same_verify(root: str, job: str) -> None:
    one = CheckpointManager(root).verify(read_data=True)
    got = PV.partitioned_verify(root, job, partitions=3, read_data=True)["report"]
    assert PV.problems_of(got) == PV.problems_of(one) and got.checked == one.checked
    assert not one.errors, one.errors


def test_partitioned_gc_and_verify_of_archived_runs(tmp_path):
    root = str(tmp_path / "repo")
    _fill(root)
    before = _reads(root)
    assert sorted(before) == ["fork-of-0", "run-0", "run-1", "run-2", "run-3", "run-5"]
    _same_verify(root, str(tmp_path / "v1"))
    partitioned_gc(root, str(tmp_path / "gc"), partitions=3, grace_period=0)
    assert _reads(root) == before
    _same_verify(root, str(tmp_path / "v2"))
    CheckpointManager(root).gc(grace_period=0)  # one-process GC after it: still nothing lost
    assert _reads(root) == before
    _same_verify(root, str(tmp_path / "v3"))
