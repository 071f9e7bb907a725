"""Retention policies (restic ``forget`` semantics) and their application: ``snapstore.manager.retention.plan``,
``CheckpointManager.prune`` (per run, repository-wide, dry run), ``retention_plan`` reasons and
``max_checkpoints``.

Manager tests control checkpoint creation times by replacing ``datetime`` in the modules behind
``snapstore.manager.facade`` (:data:`CLOCK_MODULES`: checkpoints' ``created`` and prune's "now" come from them)."""

from __future__ import annotations

import json
import importlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, InvalidInputError
from snapstore.manager.retention import BUCKETS, Policy, parse_duration, plan
from snapstore.stores import MemoryStore

UTC = timezone.utc
T0 = datetime(2025, 6, 15, 12, 0, 0, tzinfo=UTC)  # a Sunday


@dataclass
class S:
    id: str
    created_at: datetime


def kept(decisions) -> list[str]:
    return [d.checkpoint.id for d in decisions if d.keep]


def series(times) -> list[S]:
    """Summaries newest first."""
    out = [S(f"c{i}", t) for i, t in enumerate(times)]
    return sorted(out, key=lambda s: s.created_at, reverse=True)


# ------------------------------------------------------------------------------------------------
# plan(): each rule


def test_keep_last():
    cps = series([T0 - timedelta(hours=i) for i in range(6)])
    ds = plan(cps, Policy.make(keep_last=2))
    assert kept(ds) == ["c0", "c1"]
    assert [d.checkpoint for d in ds] == cps  # one decision per checkpoint, in the given order
    assert all(d.reasons for d in ds)         # dropped ones say why too
    assert plan(cps, Policy.make(keep_last=10)) and kept(plan(cps, Policy.make(keep_last=10))) == [c.id for c in cps]


def test_keep_within_is_relative_to_the_newest_checkpoint():
    cps = series([T0 - timedelta(days=30) - timedelta(hours=i) for i in range(10)])
    ds = plan(cps, Policy.make(keep_within="3h"), now=T0)
    assert kept(ds) == ["c0", "c1", "c2", "c3"]
    ds = plan(cps, Policy.make(keep_within=timedelta(hours=3, minutes=30)), now=T0)
    assert kept(ds) == ["c0", "c1", "c2", "c3"]


def test_older_than_is_relative_to_now():
    cps = series([T0 - timedelta(hours=i) for i in range(10)])
    ds = plan(cps, Policy.make(older_than=3 * 3600 + 60), now=T0)
    assert kept(ds) == ["c0", "c1", "c2", "c3"]
    assert kept(plan(cps, Policy.make(older_than="1d"), now=T0 + timedelta(days=2))) == []


def test_restic_example_keep_daily_on_weekly_backups():
    """restic's documentation example: one backup every Sunday for 12 weeks, ``--keep-daily 4``
    keeps the last four Sundays."""
    cps = series([T0 - timedelta(weeks=i) for i in range(12)])
    assert kept(plan(cps, Policy.make(keep_daily=4))) == ["c0", "c1", "c2", "c3"]


def test_bucket_rules_keep_the_newest_of_each_recent_bucket():
    # several checkpoints a day for 10 days, the newest of day d at 20:00
    times = [T0.replace(hour=h) - timedelta(days=d) for d in range(10) for h in (8, 14, 20)]
    cps = series(times)
    ds = plan(cps, Policy.make(keep_daily=3))
    want = [c.id for c in cps if c.created_at.hour == 20 and (T0.date() - c.created_at.date()).days < 3]
    assert kept(ds) == want
    # hourly: every checkpoint is in its own hour
    assert kept(plan(cps, Policy.make(keep_hourly=5))) == [c.id for c in cps[:5]]


def test_weekly_uses_iso_weeks_across_year_end():
    t_mon = datetime(2024, 12, 30, 9, tzinfo=UTC)   # ISO week 2025-W01 starts on Monday 2024-12-30
    t_wed = datetime(2025, 1, 1, 9, tzinfo=UTC)     # same ISO week
    t_sun = datetime(2024, 12, 29, 9, tzinfo=UTC)   # 2024-W52
    cps = series([t_mon, t_wed, t_sun])
    assert kept(plan(cps, Policy.make(keep_weekly=1))) == [cps[0].id]  # the Wednesday
    assert kept(plan(cps, Policy.make(keep_weekly=2))) == [cps[0].id, cps[2].id]
    # monthly/yearly split the same three differently
    assert kept(plan(cps, Policy.make(keep_monthly=1))) == [cps[0].id]
    assert kept(plan(cps, Policy.make(keep_yearly=2))) == [cps[0].id, cps[1].id]


def test_buckets_are_utc():
    cet = timezone(timedelta(hours=2))
    a = S("a", datetime(2025, 6, 16, 1, 0, tzinfo=cet))   # 2025-06-15 23:00 UTC
    b = S("b", datetime(2025, 6, 15, 22, 0, tzinfo=UTC))
    assert kept(plan([a, b], Policy.make(keep_daily=1))) == ["a"]


def test_a_checkpoint_kept_by_several_rules_lists_every_reason():
    cps = series([T0 - timedelta(hours=i) for i in range(30)])
    ds = plan(cps, Policy.make(keep_last=1, keep_within="1h", older_than="2h", keep_hourly=2, keep_daily=1,
                               keep_weekly=1, keep_monthly=1, keep_yearly=1), now=T0)
    newest = ds[0]
    assert newest.keep and len(newest.reasons) == 8, newest.reasons
    text = " ".join(newest.reasons)
    for word in ("last", "hourly", "daily", "weekly", "monthly", "yearly"):
        assert word in text
    assert len(ds[1].reasons) == 3, ds[1].reasons  # within 1h, newer than 2h, hourly 2/2
    assert not ds[-1].keep and ds[-1].reasons


def _reference(cps, rules: dict, now):
    """Independent restic-style reference: {id: set of rule names that keep it}."""
    out = {c.id: set() for c in cps}
    if rules.get("keep_last") is not None:
        for c in cps[:rules["keep_last"]]:
            out[c.id].add("keep_last")
    if rules.get("keep_within") is not None:
        for c in cps:
            if cps[0].created_at - c.created_at <= rules["keep_within"]:
                out[c.id].add("keep_within")
    if rules.get("older_than") is not None:
        for c in cps:
            if now - c.created_at <= rules["older_than"]:
                out[c.id].add("older_than")
    for name, key in BUCKETS.items():
        n = rules.get(f"keep_{name}")
        if not n:
            continue
        buckets: dict = {}
        for c in cps:  # newest first: the first seen is the newest of its bucket
            buckets.setdefault(key(c.created_at.astimezone(UTC)), c)
        for b in sorted(buckets, reverse=True)[:n]:
            out[buckets[b].id].add(name)
    return out


def test_plan_matches_a_reference_on_random_histories():
    rng = random.Random(1234)
    for trial in range(200):
        n = rng.randrange(0, 40)
        span = rng.choice([3600, 86400, 30 * 86400, 800 * 86400])
        cps = series([T0 - timedelta(seconds=rng.randrange(span)) for _ in range(n)])
        rules = {}
        for name in ("keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly"):
            if rng.random() < 0.4:
                rules[name] = rng.randrange(0, 6)
        if rng.random() < 0.3:
            rules["keep_within"] = timedelta(seconds=rng.randrange(span))
        if rng.random() < 0.3:
            rules["older_than"] = timedelta(seconds=rng.randrange(span))
        if not rules:
            rules["keep_last"] = 1
        if not any(rules.values()) and not {"keep_within", "older_than"} & set(rules):  # zero counts only: keeps nothing, refused (never a silent wipe)
            with pytest.raises(InvalidInputError, match="keeps no checkpoint"):
                Policy.make(**rules)
            continue
        ds = plan(cps, Policy.make(**rules), now=T0)
        ref = _reference(cps, rules, T0)
        for d in ds:
            assert d.keep == bool(ref[d.checkpoint.id]), (trial, rules, d)
            if d.keep:
                assert len(d.reasons) == len(ref[d.checkpoint.id]), (trial, rules, d.reasons)


def test_policy_validation_and_durations():
    with pytest.raises(InvalidInputError):
        Policy.make()
    with pytest.raises(InvalidInputError):
        Policy.make(keep_forever=1)
    with pytest.raises(InvalidInputError, match=r"keeps no checkpoint \(keep_last=0, keep_daily=0"):
        Policy.make(keep_last=0, keep_daily=0)
    assert Policy.make(keep_last=0, keep_within=3600).keep_last == 0  # another rule keeps
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(InvalidInputError):
            Policy.make(keep_last=bad)
    for bad in (-5, "7x", "d", [1], "1d 2h"):
        with pytest.raises(InvalidInputError):
            Policy.make(keep_within=bad)
    assert parse_duration("90s") == 90 and parse_duration("1d12h") == 36 * 3600
    assert parse_duration("2w") == 14 * 86400 and parse_duration("3600") == 3600
    assert Policy.make(older_than="30m").older_than == timedelta(minutes=30)


# ------------------------------------------------------------------------------------------------
# the manager: prune, retention_plan, max_checkpoints


CLOCK_MODULES = ("manager.state", "manager.save", "manager.rollback", "manager.retention", "manager.fork")
"""The modules under ``snapstore`` whose ``datetime.now`` stamps the manager's records (rollback and
tombstone records; ``manager.state``'s default wall clock: saves, forks and prune's "now")."""


class FakeDatetime(datetime):
    """``datetime`` whose ``now()`` is controlled by the test."""

    current = T0

    @classmethod
    def now(cls, tz=None):
        t = cls.current
        return t if tz is None else t.astimezone(tz)


@pytest.fixture
def clock(monkeypatch):
    for name in CLOCK_MODULES:
        mod = importlib.import_module("snapstore." + name)
        assert mod.datetime is datetime, name
        monkeypatch.setattr(mod, "datetime", FakeDatetime)
    FakeDatetime.current = T0

    class Ctl:
        def set(self, t):
            FakeDatetime.current = t

        def advance(self, **kw):
            FakeDatetime.current = FakeDatetime.current + timedelta(**kw)
    return Ctl()


def m(tag, i):
    return {"role": "assistant", "content": f"{tag} {i} " + "text " * 30}


def history(mgr, run, times, clock, tag=None):
    """Save one checkpoint per time (appending a message each); return {id: messages}."""
    out = {}
    msgs = []
    for i, t in enumerate(times):
        clock.set(t)
        msgs = msgs + [m(tag or run, i)]
        out[mgr.save(run, msgs)] = msgs
    return out


def check_restores(store, run, expected: dict) -> None:
    clean = CheckpointManager(store)
    assert not clean.verify(read_data=True).errors
    assert sorted(s.id for s in clean.list(run)) == sorted(expected)
    for cid, msgs in expected.items():
        assert json.dumps(clean.get(run, cid).messages) == json.dumps(msgs)


def test_created_times_are_controlled(clock):
    mgr = CheckpointManager(MemoryStore())
    clock.set(T0 - timedelta(days=3))
    cid = mgr.save("r", [m("a", 0)])
    assert mgr.get("r", cid).created_at == T0 - timedelta(days=3)


def test_prune_per_run_and_repository_wide(clock):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    a = history(mgr, "a", [T0 - timedelta(hours=10 - i) for i in range(6)], clock)
    b = history(mgr, "b", [T0 - timedelta(hours=10 - i) for i in range(4)], clock)
    clock.set(T0)
    gone = mgr.prune(keep_last=2, run_id="a")
    a_ids = list(a)
    assert sorted(s.id for s in gone) == sorted(a_ids[:4])
    assert all(s.run_id == "a" for s in gone)
    check_restores(store, "a", {k: a[k] for k in a_ids[4:]})
    check_restores(store, "b", b)                   # the other run is untouched
    gone = mgr.prune(keep_last=1)                   # every run
    assert sorted((s.run_id, s.id) for s in gone) == sorted([("a", a_ids[4])] + [("b", k) for k in list(b)[:3]])
    check_restores(store, "a", {a_ids[5]: a[a_ids[5]]})
    check_restores(store, "b", {list(b)[3]: b[list(b)[3]]})
    assert mgr.prune(keep_last=1) == []


def test_prune_dry_run_reports_and_deletes_nothing(clock):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    a = history(mgr, "a", [T0 - timedelta(days=9 - i) for i in range(10)], clock)
    clock.set(T0)
    before = store.raw()
    would = mgr.prune(older_than="3d", dry_run=True)
    assert store.raw() == before
    assert [s.id for s in would] == [s.id for s in mgr.list("a")][4:]  # newest first, older than 3 days
    gone = mgr.prune(older_than="3d")
    assert [s.id for s in gone] == [s.id for s in would]
    check_restores(store, "a", {k: a[k] for k in list(a)[6:]})


def test_retention_plan_reasons(clock):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    times = [T0 - timedelta(days=d, hours=h) for d in range(9, -1, -1) for h in (6, 0)]
    history(mgr, "a", times, clock)
    history(mgr, "b", times[-3:], clock)
    clock.set(T0)
    before = store.raw()
    ds = mgr.retention_plan("a", keep_last=1, keep_daily=3, keep_within="1d")
    assert store.raw() == before
    assert [d.checkpoint.id for d in ds] == [s.id for s in mgr.list("a")]
    newest = ds[0]
    assert newest.keep and len(newest.reasons) == 3, newest.reasons
    assert [d.keep for d in ds[:6]] == [True, True, True, False, True, False]
    assert not any(d.keep for d in ds[6:])
    all_runs = mgr.retention_plan(keep_last=1)
    assert {d.checkpoint.run_id for d in all_runs} == {"a", "b"}
    assert sum(d.keep for d in all_runs) == 2
    # prune with the same policy deletes exactly the ones the plan drops
    gone = mgr.prune(run_id="a", keep_last=1, keep_daily=3, keep_within="1d")
    assert sorted(s.id for s in gone) == sorted(d.checkpoint.id for d in ds if not d.keep)


def test_prune_bucket_rules_through_the_manager(clock):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    times = [T0 - timedelta(weeks=w, days=d) for w in range(8, -1, -1) for d in (3, 0)]
    a = history(mgr, "a", times, clock)
    clock.set(T0)
    ref = _reference(mgr.list("a"), {"keep_weekly": 3, "keep_monthly": 3}, T0)
    want = [cid for cid, why in ref.items() if why]
    gone = mgr.prune(keep_weekly=3, keep_monthly=3)
    live = [s.id for s in mgr.list("a")]
    assert live == want and 3 <= len(live) <= 6
    assert sorted(s.id for s in gone) == sorted(cid for cid, why in ref.items() if not why)
    check_restores(store, "a", {cid: a[cid] for cid in live})


def test_prune_deleting_every_checkpoint_deletes_the_run(clock):
    store = MemoryStore()
    w = CheckpointManager(store)                       # a writer holding the run
    a = history(w, "a", [T0 - timedelta(days=5 - i) for i in range(3)], clock)
    history(w, "keep", [T0], clock)
    clock.set(T0 + timedelta(days=1))
    mgr = CheckpointManager(store)
    gone = mgr.prune(older_than="1d")
    assert sorted(s.id for s in gone) == sorted(a)
    assert mgr.runs() == ["keep"]
    assert mgr.latest("a") is None and mgr.list("a") == []
    with pytest.raises(ConflictError):                  # the stale writer cannot revive it
        w.save("a", list(a.values())[-1] + [m("a", 9)])
    assert w.latest("a") is None
    w.save("a", [m("new", 0)])                          # a new, empty run
    assert [len(s.id) > 0 for s in mgr.list("a")] == [True]
    assert not CheckpointManager(store).verify(read_data=True).errors
    for _ in range(2):
        mgr.gc(grace_period=0)
    assert not CheckpointManager(store).verify(read_data=True).errors


def test_prune_can_delete_the_head_when_created_times_are_out_of_order(clock):
    """A head older than another checkpoint (a writer's clock went back): prune deletes it and the
    run's head moves to the newest survivor."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    a = history(mgr, "a", [T0, T0 - timedelta(days=5), T0 - timedelta(days=6)], clock)
    ids = list(a)
    clock.set(T0 + timedelta(hours=1))
    gone = mgr.prune(older_than="1d")
    assert sorted(s.id for s in gone) == sorted(ids[1:])
    assert mgr.latest("a").id == ids[0]
    check_restores(store, "a", {ids[0]: a[ids[0]]})
    mgr.save("a", a[ids[0]] + [m("a", 10)])


def test_max_checkpoints_at_save(clock):
    store = MemoryStore()
    mgr = CheckpointManager(store, max_checkpoints=3)
    msgs = []
    saved = {}
    for i in range(7):
        msgs = msgs + [m("a", i)]
        saved[mgr.save("a", msgs)] = msgs
    ids = list(saved)
    check_restores(store, "a", {k: saved[k] for k in ids[-3:]})
    for _ in range(2):
        mgr.gc(grace_period=0)
    check_restores(store, "a", {k: saved[k] for k in ids[-3:]})
    with pytest.raises(InvalidInputError):
        CheckpointManager(store, max_checkpoints=0)


def test_max_checkpoints_after_another_manager_deleted_one():
    """BUG: ``max_checkpoints`` deletes a checkpoint it should keep when another manager deleted
    one meanwhile.

    ``retention.enforce_max`` counts the run's live checkpoints from the manager's cached ``v.live`` list,
    which does not learn about deletions by other managers (deleting a non-head checkpoint publishes
    no log record). With max 3: live [c0, c1, c2], another manager deletes c1, this manager saves
    c3: the cache says [c0, c1, c2, c3], so c0 is deleted and only 2 checkpoints remain."""
    store = MemoryStore()
    w = CheckpointManager(store, max_checkpoints=3)
    msgs, ids = [], []
    for i in range(3):
        msgs = msgs + [m("a", i)]
        ids.append(w.save("a", msgs))
    CheckpointManager(store).delete("a", ids[1])
    msgs = msgs + [m("a", 3)]
    ids.append(w.save("a", msgs))
    assert [s.id for s in CheckpointManager(store).list("a")] == [ids[3], ids[2], ids[0]]


def test_deleting_the_head_does_not_delete_a_checkpoint_saved_concurrently():
    """BUG: ``delete(run, head)`` racing with another writer's save deletes that writer's new
    checkpoint too, although only the old head was asked for.

    ``records.delete_checkpoints`` decides from a scan that the head (c1) is doomed and the head must move
    back to c0, then ``_append_record`` publishes the rollback record (target c0) at whatever
    position is next *now*. If a writer appended c2 (parent c1) in between, the record hides c2 as
    well: a checkpoint reported saved disappears (and GC then deletes its data). The record should
    only be published if the head is still the one the decision was made on (otherwise re-plan).
    (Here the writer's save is run at the start of ``_append_record``: the moment between the scan
    and the record.)"""
    store = MemoryStore()
    w, mgr = CheckpointManager(store), CheckpointManager(store)
    a = [m("a", 0)]
    b = a + [m("a", 1)]
    w.save("r", a)
    c1 = w.save("r", b)
    saved = {}
    orig = mgr.repo.publish

    def racing(*args, **kw):
        if "c2" not in saved:  # the writer's save lands between the decision and the record
            saved["c2"] = w.save("r", b + [m("a", 2)])
        return orig(*args, **kw)
    mgr.repo.publish = racing
    try:
        mgr.delete("r", c1)
    except ConflictError:
        pass  # refusing the delete (the head moved) would be fine too
    live = [s.id for s in CheckpointManager(store).list("r")]
    assert saved["c2"] in live and c1 not in live, live
