"""``stats`` as partitions (snapstore/maintenance/partstats.py): the report is one-process
``stats``' on the same repository (runs, checkpoints, logical and stored bytes, ratio, objects by
category, leftovers; ``--cost``'s bill), on the local executor and on a Dask LocalCluster against
moto's HTTP server; only the requests are the job's own. An interrupted job resumes; a finished
one counts anew."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance import partstats as PS
from snapstore.maintenance.stats import stats
from snapstore.repo.repository import Repository
from snapstore.stores import LocalStore, open_store

pytest.importorskip("pyarrow")

FIGURES = ("runs", "checkpoints", "logical_bytes", "message_bytes", "session_state_bytes", "stored_bytes",
           "ratio", "objects", "leftovers")


def _fill(mgr, runs=10):
    """Runs of a few saves each (session states of several sizes), rollbacks, deletes, a fork, a
    GC with a grace period (retired packs, forwarding records, candidate records), a stray file
    inside and outside ``runs/``."""
    first = None
    for r in range(runs):
        msgs, ids = [], []
        for i in range(3 + r % 4):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i} " + "words " * 40 + str(r * 7919 + i)}]
            ids.append(mgr.save(f"run-{r:02d}", msgs, step=i, session_state={"r": r, "i": i, "pad": "v" * (r * 900)}))
        if r == 0:
            first = ids[1]
        if r % 3 == 1:
            mgr.rollback(f"run-{r:02d}", ids[1])
        if r % 5 == 2:
            mgr.delete(f"run-{r:02d}")
    mgr.fork("run-00", first, "zz-fork-of-run-00")
    mgr.gc(grace_period=3600)
    mgr.save("run-03", [{"role": "user", "content": "after gc " + "w " * 50}], step=99)


def _one(url, opts=None, **kw):
    return stats(Repository.open(open_store(url, **(opts or {})), create=False), **kw)


def _same(url, job, opts=None, **kw):
    one = _one(url, opts, **{k: v for k, v in kw.items() if k in ("cost", "prices")})
    got = PS.partitioned_stats(url, job, store_options=opts, **kw)
    rep = got["report"]
    assert {k: rep[k] for k in FIGURES} == {k: one[k] for k in FIGURES}
    return one, got


@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_the_report_is_one_process_stats(tmp_path, partitions):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)))
    LocalStore(root).put("runs/stray-notes.txt", b"not ours")
    LocalStore(root).put("zz-notes.txt", b"not ours either")
    one, got = _same(root, str(tmp_path / "job"), partitions=partitions)
    assert one["checkpoints"] > 20 and one["objects"]["packs"]["count"] > 5 and one["objects"]["other"]["count"] >= 2
    assert got["partitions"] == got["partitions_done"] == partitions
    files = sorted(f for f in os.listdir(tmp_path / "job") if f.startswith("stats-"))
    assert files == [f"stats-{i:05d}.parquet" for i in range(partitions)] + ["stats-done.json"]
    import pyarrow.parquet as pq
    rows = sum(pq.read_table(str(tmp_path / "job" / f)).num_rows for f in files if f.endswith(".parquet"))
    assert rows == one["runs"]
    assert got["report"]["requests"]["requests"]["LIST"] >= partitions + 2  # every partition and the driver listed


def test_cost_bill_is_the_same(tmp_path):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=5)
    one, got = _same(root, str(tmp_path / "job"), partitions=2, cost=True, prices={"gb_month": 0.5})
    b1, b2 = dict(one["bill"]), dict(got["report"]["bill"])
    assert b1 == b2 and got["report"]["cost"]["prices"]["gb_month"] == 0.5


def test_an_interrupted_job_resumes_and_a_finished_one_counts_anew(tmp_path, monkeypatch):
    root, job = str(tmp_path / "r"), str(tmp_path / "job")
    mgr = CheckpointManager(LocalStore(root))
    _fill(mgr, runs=6)
    real = PS.stats_partition

    def dies_on_2(plan, i):
        if i == 2:
            raise KeyboardInterrupt("driver stopped")
        return real(plan, i)
    monkeypatch.setattr(PS, "stats_partition", dies_on_2)
    with pytest.raises(KeyboardInterrupt):
        PS.partitioned_stats(root, job, partitions=4, workers=1)
    monkeypatch.setattr(PS, "stats_partition", real)
    done = [f for f in os.listdir(job) if f.startswith("stats-") and f.endswith(".parquet")]
    assert 1 <= len(done) < 4
    one, got = _same(root, job, partitions=4)
    assert got["resumed"] == len(done)
    mgr.save("run-new", [{"role": "user", "content": "one more"}], step=0)
    one2, again = _same(root, job, partitions=4)
    assert again["resumed"] == 0 and one2["checkpoints"] == one["checkpoints"] + 1


def test_dask_local_cluster_on_moto_http_gives_the_one_process_figures(tmp_path, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    bucket = f"ps-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": moto_server}
    _fill(CheckpointManager(open_store(url, **opts)), runs=8)
    one, local = _same(url, str(tmp_path / "jl"), opts, partitions=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        one2, got = _same(url, str(tmp_path / "jd"), opts, partitions=3, executor="dask", scheduler=client)
    assert {k: got["report"][k] for k in FIGURES} == {k: local["report"][k] for k in FIGURES}
    req = got["report"]["requests"]["requests"]
    assert req["GET"] > 0 and req["LIST"] >= 5


def test_cli_stats_plan_prints_the_one_process_figures(tmp_path):
    """``stats --plan DIR`` prints what ``stats`` prints but for the requests; ``--json`` holds the
    same figures and the job under ``partitioned``; the job's options need ``--plan``."""
    import json

    from click.testing import CliRunner

    from snapstore.cli import cli
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=6)
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    one = runner.invoke(cli, ["--repo", root, "stats"])
    part = runner.invoke(cli, ["--repo", root, "stats", "--plan", str(tmp_path / "job"), "--partitions", "3"])
    assert one.exit_code == part.exit_code == 0, part.output

    def steady(text):
        return [ln for ln in text.splitlines() if not ln.startswith(("requests", "cost estimate"))]
    assert steady(part.stdout) == steady(one.stdout)
    assert "stats --plan: 3/3 partitions (local, 0 resumed)" in part.stderr
    j1 = json.loads(runner.invoke(cli, ["--repo", root, "stats", "--json"]).stdout)
    j2 = json.loads(runner.invoke(cli, ["--repo", root, "stats", "--json", "--plan", str(tmp_path / "job2"),
                                        "--partitions", "2"]).stdout)
    assert {k: j2[k] for k in FIGURES} == {k: j1[k] for k in FIGURES}
    assert j2["partitioned"]["partitions_done"] == 2
    bad = runner.invoke(cli, ["--repo", root, "stats", "--partitions", "3"])
    assert bad.exit_code == 2 and "--plan" in bad.stderr + bad.stdout
