"""``verify`` as partitions (snapstore/maintenance/partverify.py): the report is one-process
``verify``'s on the same repository (same errors, warnings and counts), clean or damaged (a
flipped byte in a pack, a deleted pack, a deleted manifest, an unknown object, unreferenced and
retired packs, a fork whose source is in another partition), on the local executor and on a Dask
LocalCluster against moto's HTTP server; an interrupted job resumes."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.maintenance import partverify as PV
from snapstore.maintenance.verify import verify
from snapstore.repo.repository import Repository
from snapstore.stores import LocalStore

pytest.importorskip("pyarrow")


def _fill(mgr, runs=10):
    """Runs of a few saves each; rollbacks, deletes, a fork of run 0 into a run in another
    partition, a GC with a grace period (retired packs, forwarding records)."""
    first = None
    for r in range(runs):
        msgs, ids = [], []
        for i in range(3 + r % 4):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i} " + "words " * 40 + str(r * 7919 + i)}]
            ids.append(mgr.save(f"run-{r:02d}", msgs, step=i, session_state={"r": r, "i": i, "pad": "v" * (r * 50)}))
        if r == 0:
            first = ids[1]
        if r % 3 == 1:
            mgr.rollback(f"run-{r:02d}", ids[1])
        if r % 5 == 2:
            mgr.delete(f"run-{r:02d}")
    mgr.fork("run-00", first, "zz-fork-of-run-00")
    mgr.gc(grace_period=3600)
    mgr.save("run-03", [{"role": "user", "content": "after gc " + "w " * 50}], step=99)


def _same(url, job, opts=None, **kw):
    one = verify(Repository.open(_store(url, opts), create=False), read_data=kw.get("read_data", False))
    got = PV.partitioned_verify(url, job, store_options=opts, **kw)
    rep = got["report"]
    assert PV.problems_of(rep) == PV.problems_of(one)
    assert rep.checked == one.checked
    return one, got


def _store(url, opts):
    from snapstore.stores import open_store
    return open_store(url, **(opts or {}))


def _flip(store, key):
    data = bytearray(store.get(key))
    data[len(data) // 2] ^= 0xFF
    store.delete_many([key])
    store.put(key, bytes(data))


def _damage(store):
    """A flipped byte in the largest live pack and in a pack no live checkpoint needs, a deleted
    live pack, a deleted manifest, an unknown object and an unreferenced pack."""
    from snapstore.maintenance.gc import GC_CACHE_BYTES, plan_gc
    from snapstore.maintenance.gcreport import GCOptions
    repo = Repository.open(store, create=False)
    plan = plan_gc(repo, GCOptions(dry_run=True), repo.store_time(), GC_CACHE_BYTES)
    try:
        live = {p.hex() for p in plan.reach.packs}
    finally:
        plan.abandon()
    packs = sorted(store.list("packs/"), key=lambda i: i.size)
    needed = [i.key for i in packs if i.key.rsplit("/", 1)[1] in live]
    other = [i.key for i in packs if i.key.rsplit("/", 1)[1] not in live]
    _flip(store, needed[-1])
    store.delete_many([needed[0]])
    if other:
        _flip(store, other[-1])
    manifests = [i.key for i in store.list("runs/") if "/m/" in i.key]
    store.delete_many([manifests[len(manifests) // 3]])
    store.put("runs/stray-notes.txt", b"not ours")
    store.put("packs/ff/" + "ff" * 8, b"junk that is no pack")


@pytest.mark.parametrize("partitions", [1, 3, 7])
def test_a_clean_repository_gets_the_one_process_report(tmp_path, partitions):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)))
    one, got = _same(root, str(tmp_path / "job"), partitions=partitions)
    assert one.ok and one.warnings  # retired packs wait for their grace period
    assert got["partitions"] == partitions and got["partitions_done"] == partitions
    assert sorted(f for f in os.listdir(tmp_path / "job") if f.startswith("verify-")) == \
        [f"verify-{i:05d}.parquet" for i in range(partitions)] + ["verify-done.json"]


@pytest.mark.parametrize("read_data", [False, True])
def test_a_damaged_repository_gets_the_same_findings(tmp_path, read_data):
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)))
    _damage(LocalStore(root))
    one, got = _same(root, str(tmp_path / "job"), partitions=4, read_data=read_data)
    assert not one.ok and {p.code for p in one.errors} & {"corrupt-object", "corrupt-pack", "missing-pack"}
    assert {"unknown-object", "unreferenced-pack"} <= {p.code for p in one.warnings}


def test_an_object_two_partitions_need_is_one_problem_naming_both_runs(tmp_path):
    """The fork (in another partition) needs its source's segment pack: a flipped byte there is
    one error naming both runs, as one-process verify reports it; every pack deleted: the same
    errors as one-process verify (which run a shared segment is named after included)."""
    root = str(tmp_path / "r")
    mgr = CheckpointManager(LocalStore(root))
    msgs = []
    for i in range(4):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "words " * 40}]
        ck = mgr.save("aa-source", msgs, step=i)
    mgr.fork("aa-source", ck, "zz-fork")
    mgr.save("mm-middle", [{"role": "user", "content": "x"}], step=0)
    store = LocalStore(root)
    _flip(store, max(store.list("packs/"), key=lambda i: i.size).key)
    one, got = _same(root, str(tmp_path / "job"), partitions=3)
    assert any("'aa-source'" in p.message and "'zz-fork'" in p.message for p in one.errors), \
        [str(p) for p in one.errors]
    for info in store.list("packs/"):
        store.delete_many([info.key])
    one, got = _same(root, str(tmp_path / "job"), partitions=3)
    assert len(one.errors) >= 2


def test_an_interrupted_job_resumes_and_a_finished_one_verifies_anew(tmp_path, monkeypatch):
    root, job = str(tmp_path / "r"), str(tmp_path / "job")
    mgr = CheckpointManager(LocalStore(root))
    _fill(mgr, runs=6)
    real, calls = PV.verify_partition, []

    def dies_on_2(plan, i, **kw):
        calls.append(i)
        if i == 2:
            raise KeyboardInterrupt("driver stopped")
        return real(plan, i, **kw)
    monkeypatch.setattr(PV, "verify_partition", dies_on_2)
    with pytest.raises(KeyboardInterrupt):
        PV.partitioned_verify(root, job, partitions=4, workers=1)
    monkeypatch.setattr(PV, "verify_partition", real)
    done = [f for f in os.listdir(job) if f.startswith("verify-") and f.endswith(".parquet")]
    assert 1 <= len(done) < 4
    one, got = _same(root, job, partitions=4)
    assert got["resumed"] == len(done)
    _damage(LocalStore(root))
    one, again = _same(root, job, partitions=4)
    assert again["resumed"] == 0 and not one.ok


def test_dask_local_cluster_on_moto_http_gives_the_one_process_report(tmp_path, moto_server):
    distributed = pytest.importorskip("distributed")
    import boto3
    bucket = f"pv-{os.urandom(4).hex()}"
    boto3.client("s3", endpoint_url=moto_server).create_bucket(Bucket=bucket)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": moto_server}
    _fill(CheckpointManager(_store(url, opts)), runs=8)
    _damage(_store(url, opts))
    local_one, local = _same(url, str(tmp_path / "jl"), opts, partitions=3)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        one, got = _same(url, str(tmp_path / "jd"), opts, partitions=3, executor="dask", scheduler=client)
    assert PV.problems_of(got["report"]) == PV.problems_of(local["report"]) and not one.ok
    assert got["requests"]["GET"] > 0 and got["requests"]["LIST"] > 0


def test_cli_verify_plan_prints_the_one_process_report(tmp_path):
    """``verify --plan DIR`` prints on stdout what ``verify`` prints and exits with its code; the
    job's figures go to stderr (``--json``: under ``partitioned``)."""
    import json

    from click.testing import CliRunner

    from snapstore.cli import cli
    root = str(tmp_path / "r")
    _fill(CheckpointManager(LocalStore(root)), runs=6)
    _damage(LocalStore(root))
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    one = runner.invoke(cli, ["--repo", root, "verify"])
    part = runner.invoke(cli, ["--repo", root, "verify", "--plan", str(tmp_path / "job"), "--partitions", "3"])
    assert one.exit_code == part.exit_code != 0, part.output
    assert sorted(part.stdout.splitlines()) == sorted(one.stdout.splitlines())
    assert "verify --plan: 3/3 partitions (local, 0 resumed)" in part.stderr
    j = runner.invoke(cli, ["--repo", root, "verify", "--json", "--plan", str(tmp_path / "job2"), "--partitions", "2"])
    d = json.loads(j.stdout)
    assert d["partitioned"]["partitions_done"] == 2 and not d["ok"]
    bad = runner.invoke(cli, ["--repo", root, "verify", "--partitions", "3"])
    assert bad.exit_code == 2 and "--plan" in bad.stderr + bad.stdout


def test_a_job_directory_serves_one_repository_and_no_key_is_not_corruption(tmp_path, monkeypatch):
    """A trial found ``verify --plan`` reusing a finished job directory of another repository
    silently (``gc --plan`` refused it, its message saying "(inventory None)"), and exiting 1
    (verify's "corrupt objects") on an encrypted repository without the key."""
    from click.testing import CliRunner

    from snapstore.cli import cli
    from snapstore.errors import InvalidInputError
    a, b, job = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "job")
    for root in (a, b):
        CheckpointManager(LocalStore(root)).save("run", [{"role": "user", "content": root}])
    assert PV.partitioned_verify(a, job, partitions=2)["report"].ok  # finished: its files stay in job
    for url in (b, "s3://elsewhere/x"):
        with pytest.raises(InvalidInputError, match="holds a job for another repository") as e:
            PV.partitioned_verify(url, job, partitions=2)
        assert "inventory" not in str(e.value)
    assert PV.partitioned_verify(a, job, partitions=2)["report"].ok  # its own repository: a new verify
    runner = CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()
    r = runner.invoke(cli, ["--repo", b, "verify", "--plan", job])
    assert r.exit_code == 2 and "another repository" in r.stderr, r.output
    r = runner.invoke(cli, ["--repo", b, "gc", "--plan", job])
    assert r.exit_code != 0 and "another repository" in r.stderr and "inventory None" not in r.stderr, r.output

    enc = str(tmp_path / "enc")
    monkeypatch.setenv("SNAPSTORE_PASSPHRASE", "a passphrase of some length")
    CheckpointManager(enc).save("run", [{"role": "user", "content": "secret"}])
    monkeypatch.delenv("SNAPSTORE_PASSPHRASE")
    assert runner.invoke(cli, ["--repo", enc, "verify"]).exit_code == 4  # structure only: PARTIAL
    r = runner.invoke(cli, ["--repo", enc, "verify", "--plan", str(tmp_path / "job-enc")])
    assert r.exit_code == 3 and "encrypted" in r.stderr and "plain 'snapstore verify'" in r.stderr, r.output
    r = runner.invoke(cli, ["--repo", str(tmp_path / "none"), "verify", "--plan", str(tmp_path / "job-none")])
    assert r.exit_code == 3, r.output  # no repository: 3, as plain verify
