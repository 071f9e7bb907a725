"""A job directory serves one repository, for every partitioned job (trial 9b).

``verify --plan`` refused a finished job directory of another repository, but ``gc --plan -n``,
``stats --plan``, ``archive --plan`` and ``import --plan`` replaced it silently (their results for
the first repository gone). And ``import --plan`` with two files named as one run created the
repository before it refused them.
"""
from __future__ import annotations

import os
import shutil

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.stores import LocalStore

DEMO = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "demo-run.json")

JOBS = [
    ("gc", ["gc", "--plan", "{job}", "-n"], "plan.json"),
    ("gc-sweep", ["gc", "--plan", "{job}"], "plan.json"),
    ("stats", ["stats", "--plan", "{job}"], "plan.json"),
    ("verify", ["verify", "--plan", "{job}"], "plan.json"),
    ("archive", ["archive", "--plan", "{job}", "--finished-before", "2100-01-01"], "archive-plan.json"),
    ("import", ["import", "--plan", "{job}", DEMO], "import-plan.json"),
]


def _runner():
    return CliRunner(mix_stderr=False) if "mix_stderr" in CliRunner.__init__.__code__.co_varnames else CliRunner()


@pytest.mark.parametrize("name,args,plan_file", JOBS, ids=[j[0] for j in JOBS])
def test_a_finished_job_of_another_repository_is_refused_and_kept(tmp_path, name, args, plan_file):
    a, b, job = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "job")
    for root in (a, b):
        CheckpointManager(LocalStore(root)).save("run", [{"role": "user", "content": root}])
    argv = [x.format(job=job) for x in args]
    runner = _runner()
    first = runner.invoke(cli, ["--repo", a, *argv])
    assert first.exit_code == 0, first.output
    before = {n: open(os.path.join(job, n), "rb").read() for n in sorted(os.listdir(job))}
    assert plan_file in before
    other = runner.invoke(cli, ["--repo", b, *argv])
    assert other.exit_code == 2, other.output
    assert "holds a job for another repository" in other.stderr and a in other.stderr, other.stderr
    assert {n: open(os.path.join(job, n), "rb").read() for n in sorted(os.listdir(job))} == before
    again = runner.invoke(cli, ["--repo", a, *argv])  # its own repository: a new job
    assert again.exit_code == 0, again.output


def test_import_plan_refuses_two_files_of_one_run_before_creating_the_repository(tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(DEMO, other / "demo-run.json")
    repo, job = str(tmp_path / "new"), str(tmp_path / "job")
    r = _runner().invoke(cli, ["--repo", repo, "import", "--plan", job, DEMO, str(other / "demo-run.json")])
    assert r.exit_code == 2 and "would both be imported as run 'demo-run'" in r.stderr, r.output
    assert not os.path.exists(repo)
    assert not os.path.exists(job) or not os.listdir(job)
