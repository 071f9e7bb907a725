"""Archive selection (docs/format.md §28, "Selecting runs"): by a retention policy (the runs
selected are pruned to what it keeps first, then archived whole) and by idle time; on a local
directory, a SQLite file and moto's HTTP server, and from the command line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.stores.local import LocalStore
from tests.cli.test_cli import run as cli
from tests.maintenance.test_archive import fill, packs, snapshot
from tests.manager.test_retention import FakeDatetime, clock  # noqa: F401 - the fixture


@pytest.mark.parametrize("kind", ["local", "sqlite", "s3-http"])
def test_keep_last_prunes_then_archives_exactly_what_prune_keeps(kind, store_factory):
    """archive(keep={"keep_last": 2}) deletes what prune(keep_last=2) would delete (the same
    ids), archives the rest, and after GC every kept checkpoint reads exactly as before."""
    store = store_factory(kind)
    m = CheckpointManager(store)
    fill(m)
    expect = {s.id for s in m.prune(keep_last=2, dry_run=True)}
    before = snapshot(m)
    rep = m.archive(keep={"keep_last": 2})
    assert set(rep.pruned) == expect and len(expect) > 0
    assert sorted(rep.runs) == sorted(before) and rep.checkpoints == sum(min(2, len(v[0])) for v in before.values())
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    assert packs(store) == []  # every run archived whole: no hot pack left
    kept = {run: ([c for c in v[0] if c[0] not in expect], v[1], [c for c in v[2] if c[0] not in expect])
            for run, v in before.items()}
    assert snapshot(CheckpointManager(store)) == kept
    assert CheckpointManager(store).verify(read_data=True).ok


def test_idle_selects_runs_whose_newest_checkpoint_is_old_and_keep_prunes_only_those(tmp_path, clock):  # noqa: F811
    """A run last saved 40 days ago is idle for idle="30d", one saved now is not: only the idle
    one is pruned by the policy and archived; the other is left as it was."""
    m = CheckpointManager(LocalStore(tmp_path / "r"))
    now = datetime.now(timezone.utc)
    FakeDatetime.current = now - timedelta(days=40)
    for i in range(4):
        m.save("old", [{"role": "user", "content": f"old {i}"}], step=i)
    FakeDatetime.current = now
    for i in range(3):
        m.save("new", [{"role": "user", "content": f"new {i}"}], step=i)
    new_before = [s.id for s in m.list("new")]
    old_head = m.latest("old").id
    rep = m.archive(idle="30d", keep={"keep_last": 1})
    assert rep.runs == ["old"] and len(rep.pruned) == 3
    assert list(rep.skipped) == ["new"] and "is not older than the cutoff" in rep.skipped["new"]
    assert [s.id for s in m.list("old")] == [old_head] and [s.id for s in m.list("new")] == new_before
    none = m.archive(idle="60d", keep={"keep_last": 1})  # nothing that idle: nothing pruned or archived
    assert none.runs == [] and none.pruned == [] and [s.id for s in m.list("new")] == new_before


def test_bad_policy_or_idle_time_deletes_nothing(tmp_path):
    m = CheckpointManager(LocalStore(tmp_path / "r"))
    fill(m)
    before = snapshot(m)
    with pytest.raises(InvalidInputError, match="unknown retention rule"):
        m.archive(keep={"keep_lots": 2})
    with pytest.raises(InvalidInputError):
        m.archive(keep={})
    with pytest.raises(InvalidInputError, match="duration"):
        m.archive(idle="soon")
    with pytest.raises(InvalidInputError):
        m.archive(keep={"keep_last": -1})
    assert snapshot(m) == before and not list(m.store.list("archive/"))


def test_cli_archive_keep_last_and_idle(tmp_path):
    repo = str(tmp_path / "repo")
    m = CheckpointManager(LocalStore(tmp_path / "repo"))
    fill(m)
    m.close()
    r = json.loads(cli(repo, "archive", "--idle", "1d", "--keep-last", "1", "--json").stdout)
    assert r["runs"] == [] and r["pruned"] == []  # saved just now: nothing idle
    out = cli(repo, "archive", "long", "--keep-last", "1").stdout
    assert "pruned first:        29 checkpoints the policy does not keep" in out, out
    assert len(CheckpointManager(LocalStore(tmp_path / "repo")).list("long")) == 1


@pytest.mark.parametrize("kind", ["local", "sqlite"])
def test_cold_class_on_a_store_that_only_records_it(kind, store_factory):
    """DEEP_ARCHIVE on a directory or SQLite file (the class is only recorded): the bundle is read
    back and checked like any other (it was refused: a local ETag is no MD5), and a policy
    archive round-trips."""
    store = store_factory(kind)
    m = CheckpointManager(store)
    fill(m)
    expect = {s.id for s in m.prune(keep_last=2, dry_run=True)}
    before = snapshot(m)
    rep = m.archive(storage_class="DEEP_ARCHIVE", keep={"keep_last": 2})
    assert set(rep.pruned) == expect and len(rep.bundles) == 1
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    kept = {run: ([c for c in v[0] if c[0] not in expect], v[1], [c for c in v[2] if c[0] not in expect])
            for run, v in before.items()}
    f = CheckpointManager(store)
    assert snapshot(f) == kept and packs(store) == [] and f.verify(read_data=True).ok
