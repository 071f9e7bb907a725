"""Bulk import as partitions (snapstore/importers/plan.py, ``import --plan DIR FILE...``): the
repository ends with the same runs and checkpoints (messages, steps, import records, one per turn)
as one-process imports of the same shared trajectory files, on the local executor and on a Dask
LocalCluster against moto's HTTP server; a job whose process is SIGKILLed mid-partition and run
again neither duplicates nor loses a checkpoint; a bad file is reported and the others imported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.importers import plan as IP
from snapstore.importers.replay import load_for_import, replay
from snapstore.stores import LocalStore

pytest.importorskip("pyarrow")

FILES = ["sweagent-humanevalfix0.traj", "llamafactory-glaive-toolcall-zh.json", "sweagent-ctf-babytimecapsule.traj",
         "openhands-oas-metrics-loop.json", "sweagent-pydicom1458-gpt4.traj",
         "sweagent-marshmallow1867-fcreplace.traj"]
"""Shared trajectories of several formats (one multi-conversation file of 4.7 MB among them, second,
so that a kill after the first partition lands mid-way)."""


def _paths(shared_dir, names=FILES):
    return [str(shared_dir / n) for n in names]


def _one_process(mgr, paths):
    for p in paths:
        replay(mgr, load_for_import(p))


def _contents(mgr) -> dict:
    """run id -> every live checkpoint, oldest first, as (seq, step, messages, session state, message count)."""
    out = {}
    for run in sorted(mgr.runs()):
        rr = mgr.read_run(run)
        out[run] = [(s.seq, s.step, json.dumps(c.messages), json.dumps(c.session_state), s.message_count)
                    for s in reversed(rr.summaries) for c in [rr.get(s.id)]]
    return out


def test_local_executor_gives_the_runs_of_one_process_imports(tmp_path, shared_dir):
    paths = _paths(shared_dir)
    one = CheckpointManager(str(tmp_path / "one"))
    _one_process(one, paths)
    root = str(tmp_path / "part")
    CheckpointManager(root).repo  # the repository exists (the CLI creates it before the job)
    got = IP.partitioned_import(root, str(tmp_path / "job"), paths, partitions=3, workers=2)
    want = _contents(one)
    assert _contents(CheckpointManager(root)) == want
    assert got["partitions"] == got["partitions_done"] == 3 and not got["errors"]
    assert got["saved"] == sum(len(v) for v in want.values()) and got["skipped"] == 0
    assert sorted(r["run"] for r in got["runs"] if r["checkpoints"]) == sorted(want)
    assert len(want) > len(paths)  # the multi-conversation file gave many runs
    import pyarrow.parquet as pq
    assert sum(pq.read_table(str(tmp_path / "job" / f"import-{i:05d}.parquet")).num_rows for i in range(3)) \
        == len(got["runs"])
    again = IP.partitioned_import(root, str(tmp_path / "job"), paths, partitions=3)  # a finished job runs anew
    assert again["saved"] == 0 and again["skipped"] == got["saved"] and again["resumed"] == 0
    assert _contents(CheckpointManager(root)) == want


def test_a_killed_job_run_again_neither_duplicates_nor_loses(tmp_path, shared_dir):
    paths = _paths(shared_dir)
    root, job = str(tmp_path / "part"), str(tmp_path / "job")
    CheckpointManager(root).repo
    code = ("import sys; from snapstore.importers.plan import partitioned_import; "
            "partitioned_import(sys.argv[1], sys.argv[2], sys.argv[3:], partitions=len(sys.argv[3:]), workers=1)")
    proc = subprocess.Popen([sys.executable, "-c", code, root, job, *paths], env={**os.environ, "PYTHONPATH": os.getcwd()})
    first = os.path.join(job, "import-00000.parquet")
    deadline = time.monotonic() + 120
    while not os.path.exists(first) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # into the second partition's saves (the 4.7 MB file)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not os.path.exists(os.path.join(job, IP.DONE_FILE)), "the job finished before it was killed"
    partial = _contents(CheckpointManager(root))
    one = CheckpointManager(str(tmp_path / "one"))
    _one_process(one, paths)
    want = _contents(one)
    assert 0 < sum(len(v) for v in partial.values()) < sum(len(v) for v in want.values())
    got = IP.partitioned_import(root, job, paths, partitions=len(paths), workers=2)
    assert got["resumed"] >= 1 and got["skipped"] > 0
    assert _contents(CheckpointManager(root)) == want


def test_a_bad_file_is_reported_and_the_others_imported(tmp_path, shared_dir):
    bad = tmp_path / "broken.json"
    bad.write_text('{"messages": [{"role": "user", "content": "x"}')
    paths = _paths(shared_dir, FILES[:1]) + [str(bad)] + _paths(shared_dir, FILES[2:3])
    root = str(tmp_path / "part")
    CheckpointManager(root).repo
    got = IP.partitioned_import(root, str(tmp_path / "job"), paths, partitions=2)
    assert [e["file"] for e in got["errors"]] == [str(bad)] and "InvalidInputError" in got["errors"][0]["error"]
    assert sorted(CheckpointManager(root).runs()) == ["sweagent-ctf-babytimecapsule", "sweagent-humanevalfix0"]
    twin = tmp_path / "d" / FILES[0]
    twin.parent.mkdir()
    twin.write_bytes((shared_dir / FILES[0]).read_bytes())
    with pytest.raises(InvalidInputError, match="both be imported as run"):
        IP.partitioned_import(root, str(tmp_path / "job2"), _paths(shared_dir, FILES[:1]) + [str(twin)])
    with pytest.raises(InvalidInputError, match="no such file"):
        IP.partitioned_import(root, str(tmp_path / "job3"), [str(tmp_path / "missing.json")])


def test_dask_local_cluster_on_moto_http_gives_the_same_runs(tmp_path, shared_dir, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    names = [FILES[0], FILES[2], FILES[4], FILES[5]]
    paths = _paths(shared_dir, names)
    bucket = f"pi-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": moto_server}
    CheckpointManager(url, **opts).repo
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        got = IP.partitioned_import(url, str(tmp_path / "jd"), paths, partitions=3, executor="dask",
                                    scheduler=client, store_options=opts)
    one = CheckpointManager(LocalStore(str(tmp_path / "one")))
    _one_process(one, paths)
    assert _contents(CheckpointManager(url, **opts)) == _contents(one)
    assert got["partitions_done"] == 3 and got["requests"]["PUT"] > 0


def test_cli_import_plan(tmp_path, shared_dir):
    """``import --plan DIR FILE...`` creates the repository, imports every file as partitions and
    prints the totals (``--json``: the job's report); several files without ``--plan`` and
    ``--plan`` with ``--bundle`` or ``--dry-run`` are refused."""
    from click.testing import CliRunner

    from snapstore.cli import cli
    paths = _paths(shared_dir, [FILES[0], FILES[2], FILES[4]])
    root = str(tmp_path / "r")
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    r = runner.invoke(cli, ["--repo", root, "import", "--plan", str(tmp_path / "job"), "--partitions", "2", *paths])
    assert r.exit_code == 0, r.stderr
    assert "import --plan: 2/2 partitions (local, 0 resumed)" in r.stderr and "3 files" in r.stderr
    one = CheckpointManager(str(tmp_path / "one"))
    _one_process(one, paths)
    assert _contents(CheckpointManager(root)) == _contents(one)
    j = runner.invoke(cli, ["--repo", root, "import", "--json", "--plan", str(tmp_path / "job2"), *paths])
    d = json.loads(j.stdout)
    assert d["saved"] == 0 and d["skipped"] == sum(len(v) for v in _contents(one).values())
    for args in (paths[:2], ["--plan", str(tmp_path / "j3"), "--dry-run", *paths],
                 ["--plan", str(tmp_path / "j4"), "--bundle", *paths], ["--partitions", "2", paths[0]]):
        bad = runner.invoke(cli, ["--repo", root, "import", *args])
        assert bad.exit_code == 2, (args, bad.stderr)
