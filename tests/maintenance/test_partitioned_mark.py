"""GC's mark as partitions (snapstore/maintenance/partitions.py): the union of the partitions'
live packs is what one-process GC marks, on the local executor and on a Dask LocalCluster against
moto's HTTP server; a failing partition is retried, and a resumed job reuses finished partitions."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.maintenance import partitions as P
from snapstore.maintenance.gc import GC_CACHE_BYTES, plan_gc
from snapstore.maintenance.gcreport import GCOptions
from snapstore.repo.repository import Repository
from snapstore.stores import LocalStore


def _fill(mgr, runs=12):
    for r in range(runs):
        msgs = []
        ids = []
        for i in range(4 + r % 3):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i} " + "words " * 30}]
            ids.append(mgr.save(f"run-{r:02d}", msgs, step=i))
        if r % 3 == 0:
            mgr.rollback(f"run-{r:02d}", ids[1])
        if r % 4 == 1:
            mgr.delete(f"run-{r:02d}")


def _one_process_live(repo):
    plan = plan_gc(repo, GCOptions(dry_run=True), repo.store_time(), GC_CACHE_BYTES)
    try:
        return set(plan.reach.packs), set(plan.packs)
    finally:
        plan.abandon()


def test_partitions_are_balanced_and_their_union_is_one_process_mark(tmp_path):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)))
    live, listed = _one_process_live(Repository.open(LocalStore(root), create=False))
    plan = P.plan_mark(root, str(tmp_path / "job"), 4)
    assert len(plan.partitions) == 4
    recs = [p.records for p in plan.partitions]
    assert max(recs) <= 2 * min(recs)
    rep = P.partitioned_mark(root, str(tmp_path / "job"), 4)
    assert rep["live"] == live
    assert rep["candidate_ids"] == listed - live and rep["candidates"] > 0
    assert rep["partitions_done"] == 4 and rep["requests"]["GET"] > 0
    # resumed: every partition's file is reused
    again = P.run_local(plan)
    assert all(s["resumed"] for s in again)


def test_a_failing_partition_is_retried_and_loses_nothing(tmp_path, monkeypatch):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=6)
    live, _ = _one_process_live(Repository.open(LocalStore(root), create=False))
    real, failed = P.mark_partition, []

    def flaky(plan, i):
        if i == 1 and not failed:
            failed.append(i)
            raise ConnectionError("worker lost mid-partition")
        return real(plan, i)
    monkeypatch.setattr(P, "mark_partition", flaky)
    rep = P.partitioned_mark(root, str(tmp_path / "job"), 3)
    assert failed == [1] and rep["live"] == live
    assert not [f for f in os.listdir(tmp_path / "job") if ".tmp" in f]


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(InvalidInputError):
        P.partitioned_mark(str(tmp_path), str(tmp_path / "j"), executor="ray")
    with pytest.raises(InvalidInputError):
        P.partitioned_mark(str(tmp_path), str(tmp_path / "j"), executor="dask")
    with pytest.raises(InvalidInputError):
        P.plan_mark(str(tmp_path), str(tmp_path / "j"), 0)


def test_dask_local_cluster_on_moto_http_gives_the_local_executors_result(tmp_path, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    from snapstore.maintenance.partitions import run_dask
    from snapstore.stores import open_store
    bucket = f"part-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": moto_server}
    _fill(CheckpointManager(open_store(url, **opts)), runs=8)
    live, _ = _one_process_live(Repository.open(open_store(url, **opts), create=False))
    local = P.partitioned_mark(url, str(tmp_path / "jl"), 3, store_options=opts)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        rep = P.partitioned_mark(url, str(tmp_path / "jd"), 3, executor="dask", scheduler=client, store_options=opts)
    assert rep["live"] == local["live"] == live
    assert rep["candidate_ids"] == local["candidate_ids"]


def test_cli_gc_plan_reports_and_deletes_only_after_the_grace_period(tmp_path):
    import json

    from click.testing import CliRunner

    from snapstore.cli import cli
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=6)
    live, listed = _one_process_live(Repository.open(LocalStore(root), create=False))
    job = str(tmp_path / "job")
    before = sorted(os.listdir(os.path.join(root, "packs")))
    r = CliRunner().invoke(cli, ["--repo", root, "gc", "--plan", job, "--partitions", "2"])
    assert r.exit_code == 0, r.output  # the default grace period (1 h): candidates, nothing deleted
    assert "deleted:" in r.output and "0 packs, 0 B" in r.output and "newly recorded as candidates" in r.output
    assert sorted(os.listdir(os.path.join(root, "packs"))) == before
    r = CliRunner().invoke(cli, ["--repo", root, "gc", "--plan", job, "--partitions", "2", "-n", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["partitions_done"] == 2 and d["live_packs"] == len(live) and d["candidates"] == len(listed - live)
    assert d["listed_packs"] == len(listed) and d["listing"] == "LIST"
    assert sorted(os.listdir(os.path.join(root, "packs"))) == before
    r = CliRunner().invoke(cli, ["--repo", root, "gc", "--plan", job, "--partitions", "2", "--grace-period", "0",
                                 "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["deleted_packs"] == len(listed - live) > 0 and d["requests"]["DELETE"] >= 1
    assert len([f for _, _, fs in os.walk(os.path.join(root, "packs")) for f in fs]) == len(live)


def test_a_driver_killed_mid_job_is_resumed_by_a_rerun_and_loses_nothing(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    root, job = str(tmp_path / "r"), str(tmp_path / "job")
    _fill(CheckpointManager(LocalStore(root)), runs=8)
    live, listed = _one_process_live(Repository.open(LocalStore(root), create=False))
    packs_before = sorted(os.listdir(os.path.join(root, "packs")))
    code = ("import sys, time\n"
            "from snapstore.maintenance import partitions as P\n"
            "real = P.mark_partition\n"
            "def slow(plan, i):\n"
            "    s = real(plan, i); time.sleep(30); return s\n"
            "P.mark_partition = slow\n"
            f"P.partitioned_mark({root!r}, {job!r}, 4, workers=1)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not (os.path.isdir(job) and any(f.endswith(".parquet") for f in os.listdir(job))):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = [f for f in os.listdir(job) if f.endswith(".parquet")]
    assert 1 <= len(done) < 4
    rep = P.partitioned_mark(root, job, 4)
    assert sum(s["resumed"] for s in rep["summaries"]) == len(done)
    assert rep["live"] == live and rep["candidate_ids"] == listed - live
    assert sorted(os.listdir(os.path.join(root, "packs"))) == packs_before


def test_a_rerun_after_a_finished_job_marks_the_repository_as_it_is_now(tmp_path, monkeypatch):
    """Trial snag: deleting a run, then re-running ``gc --plan`` in the same directory reported
    the finished job's old figures. Only an unfinished job resumes; the paths may be relative."""
    root = tmp_path / "r"
    mgr = CheckpointManager(LocalStore(str(root)))
    _fill(mgr, runs=6)
    monkeypatch.chdir(tmp_path)
    first = P.partitioned_mark("r", "job", 3)
    mgr.delete("run-02")
    live, listed = _one_process_live(Repository.open(LocalStore(str(root)), create=False))
    again = P.partitioned_mark("r", "job", 3)
    assert again["live"] == live and again["candidate_ids"] == listed - live
    assert again["live_checkpoints"] < first["live_checkpoints"]
    assert not any(s["resumed"] for s in again["summaries"])


def test_an_encrypted_repository_is_marked_with_the_keys_of_the_environment(tmp_path, monkeypatch):
    root = str(tmp_path / "r")
    mgr = CheckpointManager(root, passphrase="correct horse")
    _fill(mgr, runs=4)
    live, listed = _one_process_live(mgr.repo)
    monkeypatch.delenv("SNAPSTORE_PASSPHRASE", raising=False)
    with pytest.raises(Exception, match="encrypted"):
        P.partitioned_mark(root, str(tmp_path / "job0"), 2)
    monkeypatch.setenv("SNAPSTORE_PASSPHRASE", "correct horse")
    rep = P.partitioned_mark(root, str(tmp_path / "job"), 2)
    assert rep["live"] == live and rep["candidate_ids"] == listed - live


def test_cli_gc_refuses_options_that_do_not_apply(tmp_path):
    """Trial snags: ``gc --executor dask`` without ``--plan`` and ``gc --plan --grace-period 0``
    were accepted and did nothing; each is now one line, exit 2, nothing done."""
    from click.testing import CliRunner

    from snapstore.cli import cli

    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=3)
    for args, says in ((["gc", "--executor", "dask"], "--executor"),
                       (["gc", "--partitions", "3", "-n"], "--partitions"),
                       (["gc", "--plan", str(tmp_path / "j"), "-n", "--grace-period", "0"], "--grace-period")):
        r = CliRunner().invoke(cli, ["--repo", root, *args])
        assert r.exit_code == 2 and says in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "j").exists()


def test_each_partition_lists_only_its_key_range_and_the_ranges_cover_every_run(tmp_path):
    """A partition LISTs ``runs/`` from its range's start to its end, not the whole repository; the
    ranges of consecutive partitions meet, so a run created after planning is in exactly one."""
    from snapstore.maintenance.runs import list_run_range, list_runs
    root = str(tmp_path / "r")
    mgr = CheckpointManager(LocalStore(root))
    _fill(mgr, runs=12)
    plan = P.plan_mark(root, str(tmp_path / "job"), 4)
    mgr.save("run-late", [{"role": "user", "content": "after planning"}], step=0)
    mgr.save("zz-late", [{"role": "user", "content": "after planning, last"}], step=0)
    repo = Repository.open(LocalStore(root), create=False)
    whole = list_runs(repo)
    seen, per_part = [], []
    for i in range(len(plan.partitions)):
        part = list_run_range(repo, *P.owned_range(plan, i))
        per_part.append(len(part.infos))
        seen.extend(part.infos)
    assert sorted(seen) == sorted(whole.infos) and len(seen) == len(set(seen))
    assert max(per_part) < len(whole.infos)
