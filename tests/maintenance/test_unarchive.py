"""Unarchive (docs/format.md §28): archived runs copied back into hot packs, the catalogue switched,
the bundle left to GC; reads, saves and GC afterwards; a real SIGKILL after each step loses
nothing; an unrestored DEEP_ARCHIVE bundle on moto's HTTP server is the typed ColdObjectError."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ColdObjectError, RunNotFound
from snapstore.stores.local import LocalStore
from tests.maintenance.test_archive import archived, bundles, fill, packs, snapshot

STEPS = ("after_pack_put", "after_readback", "after_switch", "after_record")


def test_unarchive_then_read_save_gc(tmp_path):
    root = tmp_path / "r"
    m, before = archived(root)
    rep = CheckpointManager(LocalStore(root)).unarchive(["long", "small-0"])
    assert rep.runs == ["long", "small-0"] and len(rep.packs) == 2 and not rep.released
    f = CheckpointManager(LocalStore(root))
    assert snapshot(f) == before
    assert not f.verify(read_data=True).errors
    f.gc(grace_period=0)
    f.gc(grace_period=0)
    g = CheckpointManager(LocalStore(root))
    assert snapshot(g) == before and sorted(packs(g.store)) == sorted(rep.packs)
    g.save("long", g.latest("long").messages + [{"role": "user", "content": "back at it"}], step=99)
    g.gc(grace_period=0)
    assert CheckpointManager(LocalStore(root)).latest("long").step == 99
    assert CheckpointManager(LocalStore(root)).unarchive(["long"]).skipped == {"long": "not archived"}
    rest = CheckpointManager(LocalStore(root)).unarchive(["small-1", "small-2", "rolled", "pruned"])
    assert rest.released == bundles(m.store)  # the bundle serves no run: GC's
    g.gc(grace_period=0)
    g.gc(grace_period=0)
    h = CheckpointManager(LocalStore(root))
    assert bundles(h.store) == []
    after = snapshot(h)
    assert {k: v for k, v in after.items() if k != "long"} == {k: v for k, v in before.items() if k != "long"}
    v = h.verify(read_data=True)
    assert not v.errors and "unindexed-bundle" not in {w.code for w in v.warnings}
    with pytest.raises(RunNotFound):
        h.unarchive(["nope"])


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from snapstore import CheckpointManager
    from snapstore.stores.local import LocalStore
    step = sys.argv[2]
    m = CheckpointManager(LocalStore(sys.argv[1]))
    m.unarchive(["long", "small-1"], hooks={step: lambda **kw: os.kill(os.getpid(), signal.SIGKILL)})
    print("not killed")
""")


@pytest.mark.parametrize("step", STEPS)
def test_sigkill_after_each_step_loses_nothing(step, tmp_path):
    """A real process SIGKILLed after each step of unarchive: every checkpoint reads back the same
    and verify has no error, then and after GCs; unarchiving again finishes the job."""
    root = tmp_path / "r"
    _m, before = archived(root)
    p = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(root), step], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)
    fresh = CheckpointManager(LocalStore(root))
    assert snapshot(fresh) == before
    assert not fresh.verify(read_data=True).errors
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert snapshot(CheckpointManager(LocalStore(root))) == before
    rep = CheckpointManager(LocalStore(root)).unarchive(["long", "small-1"])
    assert set(rep.runs) | set(rep.skipped) == {"long", "small-1"}
    assert "long" in rep.runs or step == "after_record"
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    last = CheckpointManager(LocalStore(root))
    assert snapshot(last) == before
    assert not last.verify(read_data=True).errors


def test_unrestored_deep_archive_is_the_typed_error(store_factory):
    store = store_factory("s3-http")
    m = CheckpointManager(store)
    fill(m)
    before = snapshot(m)
    m.archive(["long"], storage_class="DEEP_ARCHIVE")
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    n = len(packs(store))
    with pytest.raises(ColdObjectError, match="snapstore restore long"):
        CheckpointManager(store).unarchive(["long"])
    assert len(packs(store)) == n  # nothing written
    assert sorted(CheckpointManager(store).runs()) == sorted(before)
    # on moto, a restore makes it readable: then unarchive brings it back hot
    assert m.restore(["long"], days=2, wait=True, poll_s=0.1, timeout_s=10).done
    rep = CheckpointManager(store).unarchive(["long"])
    assert rep.runs == ["long"] and rep.released
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    f = CheckpointManager(store)
    assert snapshot(f) == before
    assert not f.verify().errors


def test_the_unarchiving_manager_goes_on_from_the_head_it_wrote(tmp_path):
    # its rollback record moved the head (to the same checkpoint): the same manager's delete,
    # rollback and save were refused as if another writer had moved it ("last saw X but the head is X")
    m = CheckpointManager(str(tmp_path / "r"))
    msgs = []
    for i in range(5):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        ids = m.save("run", msgs)
    first = m.list("run")[-1].id
    assert m.archived("run") == []
    m.archive(["run"])
    where = m.archived("run")  # a trial found nothing telling an archived run from a hot one
    assert [(w["checkpoints"], w["storage_class"]) for w in where] == [(5, "GLACIER_IR")], where
    assert where[0]["bundle"].startswith("archive/") and m.archived("other") == []
    assert m.unarchive(["run"]).runs == ["run"]
    assert m.archived("run") == []
    msgs = msgs + [{"role": "user", "content": "after"}]
    m.save("run", msgs)
    assert m.latest("run").messages == msgs
    m.archive(["run"])
    m.unarchive(["run"])
    assert m.rollback("run", first).id == first
    m.archive(["run"])
    m.unarchive(["run"])
    m.delete("run")
    assert m.runs() == [] and ids


def test_runs_long_marks_archived_runs_in_text_and_json(tmp_path):
    # a trial found `runs --json` gave no way to tell an archived run from a hot one
    from click.testing import CliRunner
    from snapstore.cli import cli

    repo = str(tmp_path / "r")
    m = CheckpointManager(repo)
    for run in ("cold", "hot"):
        m.save(run, [{"role": "user", "content": run}])
        m.save(run, [{"role": "user", "content": run}, {"role": "assistant", "content": "ok"}])
    m.archive(["cold"])
    assert m.archived_runs() == {"cold": m.archived("cold"), "hot": []}

    def run(*argv):
        r = CliRunner().invoke(cli, ["--repo", repo, "runs", *argv], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout
    assert run() == "cold\nhot\n" and json.loads(run("--json")) == ["cold", "hot"]  # unchanged
    lines = run("--long").splitlines()
    assert lines[0].split() == ["RUN", "ARCHIVED"]
    assert lines[1].split() == ["cold", "GLACIER_IR"] and lines[2].split() == ["hot", "-"]
    got = json.loads(run("--long", "--json"))
    assert [g["run_id"] for g in got] == ["cold", "hot"] and got[1]["archived"] == []
    assert [(b["storage_class"], b["checkpoints"]) for b in got[0]["archived"]] == [("GLACIER_IR", 2)]
    assert got[0]["archived"][0]["bundle"].startswith("archive/")
