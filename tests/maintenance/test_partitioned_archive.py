"""Archive as partitions (snapstore/maintenance/partarchive.py): the driver chooses the runs, each
partition writes its runs' bundles; every run the one-process archive archives is archived, with
the same checkpoints served, and after GC (grace 0, twice) every reader sees exactly what it saw
before; an interrupted job resumes and archives nothing twice; a Dask LocalCluster against moto's
HTTP server gives the same."""

from __future__ import annotations

import os
import shutil

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance import partarchive as PA
from snapstore.stores import open_store
from snapstore.stores.local import LocalStore
from tests.maintenance.test_archive import bundles, fill, packs, snapshot

pytest.importorskip("pyarrow")


def _served(m) -> dict:
    return {run: sum(d["checkpoints"] for d in m.archived(run)) for run in sorted(m.runs())}


@pytest.mark.parametrize("partitions", [1, 3])
def test_the_runs_of_one_process_archive_each_partition_its_bundles(tmp_path, partitions):
    root = str(tmp_path / "r")
    m = CheckpointManager(LocalStore(root))
    fill(m)
    shutil.copytree(root, tmp_path / "one")
    one = CheckpointManager(LocalStore(str(tmp_path / "one")))
    want_rep = one.archive()
    before = snapshot(m)
    got = PA.partitioned_archive(root, str(tmp_path / "job"), partitions=partitions)
    assert sorted(got["runs"]) == sorted(want_rep.runs) and got["checkpoints"] == want_rep.checkpoints
    assert got["partitions"] == got["partitions_done"] == min(partitions, len(want_rep.runs))
    assert len(got["bundles"]) == len(bundles(m.store)) >= partitions
    fresh = CheckpointManager(LocalStore(root))
    assert _served(fresh) == _served(one)
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert packs(fresh.store) == []  # every run reads through its partition's bundle
    assert snapshot(CheckpointManager(LocalStore(root))) == before
    assert CheckpointManager(LocalStore(root)).verify(read_data=True).ok


def test_an_interrupted_job_resumes_and_archives_nothing_twice(tmp_path, monkeypatch):
    root, job = str(tmp_path / "r"), str(tmp_path / "job")
    m = CheckpointManager(LocalStore(root))
    fill(m)
    before = snapshot(m)
    real = PA.archive_partition

    def dies_on_1(plan, i):
        if i == 1:
            raise KeyboardInterrupt("driver stopped")
        return real(plan, i)
    monkeypatch.setattr(PA, "archive_partition", dies_on_1)
    with pytest.raises(KeyboardInterrupt):
        PA.partitioned_archive(root, job, partitions=3, workers=1)
    monkeypatch.setattr(PA, "archive_partition", real)
    first = len(bundles(m.store))
    assert first >= 1
    got = PA.partitioned_archive(root, job, partitions=3)
    assert got["resumed"] >= 1 and len(bundles(m.store)) == len(got["bundles"])
    again = PA.partitioned_archive(root, job, partitions=3)  # a finished job chooses anew: nothing left
    assert again["runs"] == [] and set(again["skipped"].values()) <= {"already archived", "no live checkpoint"}
    assert len(bundles(m.store)) == len(got["bundles"])
    fresh = CheckpointManager(LocalStore(root))
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert snapshot(CheckpointManager(LocalStore(root))) == before


def test_dask_local_cluster_on_moto_http(tmp_path, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    bucket = f"pa-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": moto_server}
    m = CheckpointManager(open_store(url, **opts))
    fill(m)
    before = snapshot(m)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        got = PA.partitioned_archive(url, str(tmp_path / "jd"), partitions=2, executor="dask", scheduler=client,
                                     store_options=opts, storage_class="STANDARD_IA")
    assert got["partitions_done"] == 2 and sorted(got["runs"]) == sorted(before)
    fresh = CheckpointManager(open_store(url, **opts))
    assert all(_served(fresh)[r] for r in got["runs"])
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert snapshot(CheckpointManager(open_store(url, **opts))) == before
    assert got["requests"]["PUT"] > 0


def test_cli_archive_plan(tmp_path):
    """``archive --plan DIR`` archives the runs ``archive`` would, printing its report (the job's
    figures on stderr; ``--json`` under ``partitioned``); --keep-* and the job's options without
    --plan are refused."""
    import json

    from click.testing import CliRunner

    from snapstore.cli import cli
    root = str(tmp_path / "r")
    m = CheckpointManager(LocalStore(root))
    fill(m)
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    bad = runner.invoke(cli, ["--repo", root, "archive", "--plan", str(tmp_path / "j0"), "--keep-last", "2"])
    assert bad.exit_code == 2 and "--keep" in bad.stderr
    bad = runner.invoke(cli, ["--repo", root, "archive", "--partitions", "2"])
    assert bad.exit_code == 2 and "--plan" in bad.stderr
    r = runner.invoke(cli, ["--repo", root, "archive", "--json", "--plan", str(tmp_path / "job"), "--partitions", "2",
                            "long", "small-0", "small-1"])
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert sorted(d["runs"]) == ["long", "small-0", "small-1"] and d["partitioned"]["partitions_done"] == 2
    assert "archive --plan: 2/2 partitions (local, 0 resumed)" in r.stderr
    r = runner.invoke(cli, ["--repo", root, "archive", "--plan", str(tmp_path / "job2")])
    assert r.exit_code == 0 and "archived:" in r.stdout and "small-0 (already archived)" in r.stdout
