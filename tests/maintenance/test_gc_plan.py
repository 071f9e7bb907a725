"""GC in plan/execute shape (snapstore/maintenance/gc.py, as restic's prune): ``plan_gc`` lists,
marks and selects; ``GCPlan.execute`` repacks and sweeps; a dry run is a plan that is estimated, not
executed. The estimate changes nothing and predicts what executing the same plan deletes."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.maintenance.gc import GC_CACHE_BYTES, gc, plan_gc
from snapstore.maintenance.gcreport import GCOptions
from snapstore.stores import LocalStore


def _repo_with_garbage(root):
    mgr = CheckpointManager(LocalStore(str(root)))
    msgs: list = []
    ids = []
    for i in range(30):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "some words " * 40}]
        ids.append(mgr.save("keep", msgs, step=i, session_state={"turn": i}))
    mgr.rollback("keep", ids[9])
    for i in range(5):
        mgr.save("drop", msgs[:i + 1], step=i)
    mgr.delete("drop")
    return mgr, ids[:10]


def _snapshot(store) -> dict:
    return {i.key: store.get(i.key) for i in store.list("")}


def _plan(repo, **kw):
    opts = GCOptions(**kw)
    return plan_gc(repo, opts, repo.store_time(), GC_CACHE_BYTES)


def test_a_dry_run_plan_is_estimated_not_executed_and_predicts_the_real_run(tmp_path):
    mgr, kept = _repo_with_garbage(tmp_path / "r")
    before = _snapshot(mgr.store)
    plan = _plan(mgr.repo, grace_period=0, dry_run=True)
    assert plan.rep.live_checkpoints == 10 and plan.reach.packs
    estimate = plan.estimate()
    assert _snapshot(mgr.store) == before  # nothing written, nothing deleted
    with pytest.raises(InvalidInputError):
        plan.execute()
    assert estimate.deleted["manifests"] > 0 and estimate.deleted["packs"] > 0
    assert gc(mgr.repo, grace_period=0, dry_run=True).as_dict()["deleted"] == dict(estimate.deleted)
    real = gc(mgr.repo, grace_period=0)
    assert dict(real.deleted) == dict(estimate.deleted)
    # equal but for gc/fwd-cache, which a dry run sizes with invented ETags (a few bytes either way)
    assert abs(real.reclaimed_bytes - estimate.reclaimed_bytes) <= 64
    assert real.new_packs == estimate.new_packs and real.repacked_packs == estimate.repacked_packs
    assert [s.id for s in mgr.list("keep")] == kept[::-1] and "drop" not in mgr.runs()
    assert mgr.verify(read_data=True).ok


def test_executing_a_plan_sweeps_what_it_planned(tmp_path):
    mgr, kept = _repo_with_garbage(tmp_path / "r")
    plan = _plan(mgr.repo, grace_period=0)
    rep = plan.execute()
    assert rep.deleted["manifests"] > 0
    left = {i.key for i in mgr.store.list("")}
    assert not any(k.startswith("runs/") and "drop" in k for k in left)
    assert [s.id for s in mgr.list("keep")] == kept[::-1]
    again = gc(mgr.repo, grace_period=0)  # nothing left to collect
    assert sum(again.deleted.values()) == 0
    assert mgr.verify(read_data=True).ok
