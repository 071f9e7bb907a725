"""Forks as references (docs/format.md §10): a fork lists its source run's segments instead of a
copy, so it costs its record, its run marker and the source's pin, whatever the history's length;
the source pruned, rolled back or deleted and collected leaves the fork readable and verified; a
fork of a fork; copy and export carry forks. On a local directory and on S3 (moto's HTTP server),
on a real agent run where one is needed."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.format import keys
from snapstore.importers import load_trajectory
from snapstore.maintenance.copy import copy_repository

from tests.helpers.shared_data import SHARED

FORK_BUDGET = 16 * 1024
"""Bytes a fork may add, whatever its source's length (issue 26)."""

TRAJ = SHARED / "minisweagent-astroid1333-chat.traj.json"
needs_traj = pytest.mark.skipif(not TRAJ.is_file(), reason=f"shared trajectory {TRAJ} not found")


def msg(i: int) -> dict:
    return {"role": "assistant" if i % 2 else "user", "content": f"step {i}: " + "tool output " * 8}


def grow(mgr, run: str, msgs: list, n: int) -> tuple[list, list]:
    """Append ``n`` messages to ``msgs`` with one save each; returns (messages, checkpoint ids)."""
    ids = []
    for _ in range(n):
        msgs = msgs + [msg(len(msgs))]
        ids.append(mgr.save(run, msgs, step=len(msgs)))
    return msgs, ids


def objects(store) -> dict:
    return {i.key: i.size for i in store.list("")}


def fork_cost(store, mgr, run: str, cid: str, new_run: str):
    """Fork and measure: (checkpoint, bytes PUT, PUT count, {new key: size})."""
    before = objects(store)
    s0 = store.stats.snapshot()
    cp = mgr.fork(run, cid, new_run)
    d = store.stats.since(s0)
    after = objects(store)
    return cp, d.bytes_up, d.counts.get("PUT", 0), {k: v for k, v in after.items() if k not in before}


@pytest.mark.parametrize("kind,short,long", [("local", 100, 1000), ("s3-http", 40, 300)])
def test_a_fork_costs_the_same_at_any_history_length(store_factory, kind, short, long):
    """A fork of a run of ``long`` saves adds what a fork of ``short`` saves adds: three small
    objects (its record, its run marker, the source's pin), no pack, well under 16 KB, and it reads
    back exactly from a new manager."""
    store = store_factory(kind)
    mgr = CheckpointManager(store)
    costs = {}
    for n in (short, long):
        msgs, ids = grow(mgr, f"run{n}", [], n)
        cp, up, puts, new = fork_cost(store, mgr, f"run{n}", ids[-1], f"fork{n}")
        assert cp.messages == msgs
        assert up <= FORK_BUDGET and sum(new.values()) <= FORK_BUDGET, (n, up, new)
        assert puts == 3 and len(new) == 3 and not [k for k in new if k.startswith("packs/")], new
        assert keys.pin_key(mgr.repo.run_key(f"run{n}")) in new
        costs[n] = up
        fresh = CheckpointManager(store)
        assert fresh.latest(f"fork{n}").messages == msgs
        # a fork of an older checkpoint costs the same
        _, up_old, _, _ = fork_cost(store, mgr, f"run{n}", ids[n // 2], f"old{n}")
        assert up_old <= FORK_BUDGET
        assert CheckpointManager(store).latest(f"old{n}").messages == msgs[:n // 2 + 1]
    # the record lists one segment per source segment (18 at most at 10,000 saves): a few bytes more
    assert costs[long] <= costs[short] + 256, costs
    assert CheckpointManager(store).verify(read_data=True).ok


@pytest.mark.parametrize("kind", ["local", "sqlite", "s3-http"])  # sqlite: saves at one commit (§18)
@pytest.mark.parametrize("how", ["prune", "rollback", "delete"])
def test_the_source_removed_and_collected_leaves_the_fork_readable(store_factory, kind, how):
    """The source keeps saving after the fork (its writer merges segments the fork lists: pinned, it
    leaves those packs to GC), then it is pruned, rolled back or deleted; GC reclaims what no live
    checkpoint needs, and the fork (of the head and of an older checkpoint) still reads exactly
    and verifies."""
    store = store_factory(kind)
    mgr = CheckpointManager(store)
    msgs, ids = grow(mgr, "src", [], 30)
    head = mgr.fork("src", ids[-1], "f-head")
    old = mgr.fork("src", ids[9], "f-old")
    msgs, more = grow(mgr, "src", msgs, 40)  # 40 more saves: merges into level-1 and level-2 tiers
    if how == "prune":
        mgr.prune(keep_last=1, run_id="src")
    elif how == "rollback":
        mgr.rollback("src", ids[0])
    else:
        mgr.delete("src")
    before = sum(objects(store).values())
    CheckpointManager(store).gc(grace_period=0)
    CheckpointManager(store).gc(grace_period=0)
    assert sum(objects(store).values()) < before  # the source's own data went
    fresh = CheckpointManager(store)
    assert fresh.latest("f-head").messages == head.messages == msgs[:30]
    assert fresh.latest("f-old").messages == old.messages == msgs[:10]
    rep = fresh.verify(read_data=True)
    assert rep.ok, [str(e) for e in rep.errors]
    # the forks go on, and once they are gone too, nothing of the data stays
    f = CheckpointManager(store)
    f.save("f-head", head.messages + [msg(1000)])
    assert CheckpointManager(store).latest("f-head").messages == msgs[:30] + [msg(1000)]
    for run in f.runs():
        f.delete(run)
    for _ in range(2):
        CheckpointManager(store).gc(grace_period=0)
    assert not [k for k in objects(store) if k.startswith("packs/")]


@needs_traj
def test_fork_of_a_fork_of_a_real_run_outlives_both_ancestors_and_is_copied_and_exported(tmp_path, store_factory):
    """A real agent run, a fork of it that continues, and a fork of that fork: both ancestors
    deleted and collected, the grandchild still restores exactly, verifies, and is carried by
    ``copy_repository`` (to a SQLite file and to S3) and by ``snapstore export``."""
    _fmt, convs = load_trajectory(str(TRAJ))
    lists = convs[0].checkpoints
    assert len(lists) >= 10
    root = tmp_path / "repo"
    mgr = CheckpointManager(str(root))
    ids = [mgr.save("agent", lst) for lst in lists]
    mid = len(lists) // 2
    child = mgr.fork("agent", ids[mid], "retry")
    extra = [{"role": "user", "content": "try another way"}, {"role": "assistant", "content": "ok"}]
    c2 = mgr.save("retry", child.messages + extra)
    grand = mgr.fork("retry", c2, "retry-2")
    assert grand.messages == lists[mid] + extra
    mgr.save("agent", lists[-1] + extra)  # the source goes on too
    mgr.delete("agent")
    mgr.delete("retry")
    for _ in range(2):
        CheckpointManager(str(root)).gc(grace_period=0)
    fresh = CheckpointManager(str(root))
    assert fresh.runs() == ["retry-2"]
    assert fresh.latest("retry-2").messages == lists[mid] + extra
    assert fresh.verify(read_data=True).ok
    for dst in (store_factory("sqlite"), store_factory("s3-http")):
        copy_repository(CheckpointManager(str(root)).store, dst)
        there = CheckpointManager(dst)
        assert there.latest("retry-2").messages == lists[mid] + extra
        assert there.verify(read_data=True).ok
    out = CliRunner().invoke(cli, ["--repo", str(root), "export", "retry-2"], catch_exceptions=False)
    assert out.exit_code == 0, out.stderr
    assert json.dumps(json.loads(out.stdout_bytes)) == json.dumps(lists[mid] + extra)
