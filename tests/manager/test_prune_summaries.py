"""Retention decided from the run log's copies (:mod:`snapstore.manager.summaries`): ``prune`` and
``retention_plan`` list a run once through its log segments instead of a GET per manifest.

- Same decisions as the per-manifest path (every manifest read by
  :func:`snapstore.manager.history.scan`, what prune did before): same checkpoints kept and
  removed, same "needed by" notes, on every rule, on a log with rollback-hidden positions,
  deleted checkpoints, compacted records and declared dependencies.
- Requests on S3 (moto's HTTP server): ``prune(keep_last=100)`` on a 1,000-checkpoint run whose
  records are older than ``FREE_AFTER`` costs at most 3 per 100 checkpoints plus a constant;
  records younger than that cost one void PUT each (docs/format.md §15), and nothing more.
- A checkpoint saved between prune's listing and its deletion survives and stays the head.
"""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.manifest import FREE_AFTER, is_void
from snapstore.maintenance.copy import copy_repository
from snapstore.manager import history, summaries
from snapstore.manager.checkpoint import CheckpointSummary
from snapstore.manager import retention
from snapstore.manager.retention import NEEDS_KEY, Policy, plan
from snapstore.stores import MemoryStore

from tests.helpers.s3_fixtures import _http_store
from tests.manager.test_retention import CLOCK_MODULES, FakeDatetime, T0, clock  # noqa: F401 (fixture)

UTC = timezone.utc
RUN = "r"


def msg(i: int) -> dict:
    return {"role": "assistant", "content": f"turn {i} " + "words " * 20}


def old_plan(mgr, run: str, **policy) -> list:
    """The decisions as prune made them before: every live manifest read (one GET each)."""
    rk = mgr.repo.run_key(run)
    live = [CheckpointSummary.from_manifest(m) for _s, _c, m in history.scan(mgr.repo, rk)]
    return plan(live, Policy.make(**policy), FakeDatetime.now(UTC))


def build(clock) -> MemoryStore:
    """A run of 70 saves over ~25 days at irregular gaps, with declared dependencies (every 7th
    checkpoint needs the 3 before it), a rollback that hides 4 positions, 2 deleted older
    checkpoints, and compacted records (stubs whose copies only a log segment holds)."""
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=True)
    t = T0 - timedelta(days=25)
    msgs, ids = [], []
    for i in range(70):
        t += timedelta(hours=(i * 7) % 23 + 1, minutes=i % 13)
        clock.set(t)
        msgs = msgs + [msg(i)]
        md = {NEEDS_KEY: {"from": max(0, i - 3), "by": f"chain {i}"}} if i % 7 == 6 else {}
        ids.append(mgr.save(RUN, msgs, step=i, status="done" if i % 5 == 0 else "running", metadata=md))
        if i == 40:
            mgr.rollback(RUN, ids[36])  # hides ids[37..40]
            msgs = msgs[:37]
    mgr.delete(RUN, ids[10])
    mgr.delete(RUN, ids[22])
    clock.set(t + timedelta(hours=5))
    return store


POLICIES = [
    dict(keep_last=5),
    dict(keep_last=0, keep_within="3d"),
    dict(older_than="2d"),
    dict(keep_daily=4),
    dict(keep_hourly=6),
    dict(keep_weekly=2),
    dict(keep_monthly=1, keep_yearly=1),
    dict(keep_last=2, keep_daily=3, keep_weekly=2),
    dict(keep_within="12h", older_than="1d"),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_prune_decides_as_the_per_manifest_path(clock, policy):
    src = build(clock)
    base = CheckpointManager(src)
    want = old_plan(base, RUN, **policy)
    assert any(not d.keep for d in want)
    assert base.list(RUN) and len(base.list(RUN)) == len(want) == 70 - 4 - 2
    # the plan surface decides the same
    got_plan = base.retention_plan(RUN, **policy)
    assert [(d.checkpoint, d.keep, d.reasons, d.needed_by) for d in got_plan] == \
        [(d.checkpoint, d.keep, d.reasons, d.needed_by) for d in want]
    # prune on a copy: the same checkpoints go, the same "needed by" notes come back
    dst = MemoryStore()
    copy_repository(src, dst)
    mgr = CheckpointManager(dst)
    before = dst.stats.snapshot()
    needed: list = []
    gone = retention.prune(mgr, run_id=RUN, needed=needed, **policy)  # the service's and CLI's entry
    d = dst.stats.since(before)
    assert [s.id for s in gone] == [x.checkpoint.id for x in want if not x.keep]
    assert [(x.checkpoint.id, x.needed_by, x.reasons) for x in needed] == \
        [(x.checkpoint.id, x.needed_by, x.reasons) for x in want if x.keep and x.needed_by]
    assert [s.id for s in CheckpointManager(dst).list(RUN)] == [x.checkpoint.id for x in want if x.keep]
    assert not CheckpointManager(dst).verify().errors
    # from the log segments' copies: far fewer GETs than live manifests (the old path: 2 per
    # checkpoint); the newest up to 15 and the head are read as manifests
    assert d.counts["GET"] <= 24, d


def test_prune_keeps_a_checkpoint_saved_between_its_listing_and_its_deletion(clock, monkeypatch):
    """prune(older_than=0) dooms every listed checkpoint, the head included; another writer saves
    after the listing: the new checkpoint is not hidden or deleted, and stays the head."""
    store = MemoryStore()
    w, pruner = CheckpointManager(store), CheckpointManager(store)
    msgs = []
    for i in range(20):
        clock.set(T0 - timedelta(hours=30 - i))
        msgs = msgs + [msg(i)]
        w.save(RUN, msgs)
    clock.set(T0)
    orig = summaries.list_live
    late = {}

    def list_then_save(repo, rk):
        got = orig(repo, rk)
        if "id" not in late:
            late["id"] = w.save(RUN, msgs + [msg(99)])
        return got
    monkeypatch.setattr(summaries, "list_live", list_then_save)
    gone = pruner.prune(older_than=timedelta(hours=1), run_id=RUN)
    assert len(gone) == 20 and late["id"] not in {s.id for s in gone}
    fresh = CheckpointManager(store)
    assert [s.id for s in fresh.list(RUN)] == [late["id"]]
    assert fresh.latest(RUN).messages == msgs + [msg(99)]
    assert not fresh.verify(read_data=True).errors


# --- requests on S3 ----------------------------------------------------------------------------------


def age_bucket(store, seconds: float) -> int:
    """Move the LastModified of every object in ``store``'s bucket ``seconds`` back (moto's
    backend, in this process: the HTTP server's), as a run saved over hours would have them."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    bucket = s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[store.bucket]
    n = 0
    for key in bucket.keys.values():
        key.last_modified -= timedelta(seconds=seconds)
        n += 1
    return n


def s3_run(endpoint: str, n: int):
    """A run of ``n`` saves built in memory and copied into a fresh bucket of moto's HTTP server
    (copy_repository: the real write path of the store); its checkpoint ids, oldest first."""
    mem = MemoryStore()
    b = CheckpointManager(mem)
    msgs, ids = [], []
    for i in range(n):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        ids.append(b.save(RUN, msgs, step=i))
    s3 = _http_store(endpoint, prefix="repo")
    copy_repository(mem, s3)
    return s3, ids


@pytest.mark.parametrize("aged", [True, False], ids=["records-older-than-FREE_AFTER", "young-records"])
def test_prune_keep_last_100_of_1000_on_s3_requests(moto_server, aged):
    s3, ids = s3_run(moto_server, 1000)
    if aged:
        age_bucket(s3, FREE_AFTER + 3600)
    mgr = CheckpointManager(s3)
    mgr.repo
    before = s3.stats.snapshot()
    gone = mgr.prune(keep_last=100, run_id=RUN)
    d = s3.stats.since(before)
    assert sorted(s.id for s in gone) == sorted(ids[:900])
    doomed = 900
    if aged:
        # LIST: 1 + 1 pages of positions, 1 of log segments, 1 head, 1 over the doomed range;
        # GET: log segments (4 of 256, 3 of 16), the newest 8 manifests, the head; DELETE: 1 batch
        assert d.total() <= 3 * 10 + 10, d
        assert d.counts["DELETE"] <= 2, d
    else:
        # each young record becomes a void record (a conditional PUT each, §15); nothing else grows
        assert doomed <= d.counts["PUT"] <= doomed + 3 and d.total() - d.counts["PUT"] <= 3 * 10 + 10, d
    rk = mgr.repo.run_key(RUN)
    left = [i for i in s3.list(keys.manifests_prefix(rk)) if not is_void(i.size)]
    assert len(left) == 100
    fresh = CheckpointManager(s3)
    assert [s.id for s in fresh.list(RUN)] == ids[:899:-1]
    assert fresh.latest(RUN).id == ids[-1]
    assert not fresh.verify().errors


def test_max_checkpoints_on_s3_reads_no_manifest_per_checkpoint(moto_server):
    """``max_checkpoints`` decides from the same bulk listing: one save beyond the limit on a
    1,000-checkpoint run deletes the 901 oldest in a bounded number of requests."""
    s3, ids = s3_run(moto_server, 1000)
    age_bucket(s3, FREE_AFTER + 3600)
    mgr = CheckpointManager(s3, max_checkpoints=100)
    cp = mgr.latest(RUN)
    before = s3.stats.snapshot()
    new = mgr.save(RUN, cp.messages + [{"role": "user", "content": "one more"}], step=1000)
    d = s3.stats.since(before)
    assert [s.id for s in CheckpointManager(s3).list(RUN)] == [new] + ids[:900:-1]
    assert d.total() <= 3 * 10 + 40, d
