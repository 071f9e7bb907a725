"""CheckpointManager behaviour: save/latest/get/list/runs, head/summary and paged listing, rollback,
delete and delete_many, prune, resume_point, fork, max_checkpoints, time travel with parent_id, metadata filters, ids, timestamps, thread safety."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from snapstore.stores.base import store_capabilities
from snapstore import Checkpoint, CheckpointManager, CheckpointNotFound, CheckpointSummary, ConflictError
from snapstore.errors import InvalidInputError, InvalidRunIdError, RunNotFound
from snapstore.stores import LocalStore, MemoryStore


@pytest.fixture
def root(tmp_path):
    return tmp_path / "repo"


def mk(root, **kw) -> CheckpointManager:
    return CheckpointManager(LocalStore(root, fsync=False), **kw)


def m(i):
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}"}


def msgs(n):
    return [m(i) for i in range(n)]


def ids(mgr, run, **kw):
    return [s.id for s in mgr.list(run, **kw)]


# --- save / latest / get / list / runs --------------------------------------------------------------

def test_save_latest_get_basics(root):
    mgr = mk(root)
    assert mgr.latest("r") is None
    before = datetime.now(timezone.utc)
    c1 = mgr.save("r", msgs(1), step=1, token_usage={"in": 5, "out": 2}, metrics={"t": 0.5}, agent_id="ag",
                  status="running", metadata={"k": "v"}, session_state={"s": [1]})
    after = datetime.now(timezone.utc)
    assert isinstance(c1, str) and c1
    fresh = mk(root)
    cp = fresh.latest("r")
    assert isinstance(cp, Checkpoint) and isinstance(cp, CheckpointSummary)
    assert cp.id == c1 and cp.run_id == "r" and cp.seq == 0 and cp.parent_id is None
    assert cp.messages == msgs(1) and cp.step == 1 and cp.token_usage == {"in": 5, "out": 2}
    assert cp.metrics == {"t": 0.5} and cp.agent_id == "ag" and cp.status == "running"
    assert cp.metadata == {"k": "v"} and cp.session_state == {"s": [1]}
    assert cp.message_count == 1
    assert cp.message_bytes == len(b'{"role":"assistant","content":"message 0"}')
    # created_at: timezone-aware UTC, the time of the save
    assert cp.created_at.tzinfo is not None and cp.created_at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= cp.created_at <= after + timedelta(seconds=1)
    assert fresh.get("r", c1) == cp
    # unset optional fields come back as None
    c2 = mgr.save("r", msgs(2))
    cp2 = mk(root).get("r", c2)
    assert (cp2.step, cp2.token_usage, cp2.metrics, cp2.agent_id, cp2.status, cp2.metadata, cp2.session_state) == \
        (None,) * 7
    assert cp2.parent_id == c1 and cp2.seq == 1


def test_list_newest_first_and_limit(root):
    mgr = mk(root)
    saved = [mgr.save("r", msgs(i + 1), step=i) for i in range(12)]
    fresh = mk(root)
    summaries = fresh.list("r")
    assert [s.id for s in summaries] == saved[::-1]
    assert all(isinstance(s, CheckpointSummary) and not isinstance(s, Checkpoint) for s in summaries)
    assert [s.message_count for s in summaries] == list(range(12, 0, -1))
    assert [s.step for s in summaries] == list(range(11, -1, -1))
    assert ids(fresh, "r", limit=3) == saved[::-1][:3]
    assert ids(fresh, "r", limit=1) == [saved[-1]]
    assert ids(fresh, "r", limit=100) == saved[::-1]
    assert fresh.list("r", limit=0) == []
    for bad in (-1, 1.5, "3"):
        with pytest.raises(InvalidInputError):
            fresh.list("r", limit=bad)
    assert fresh.list("nope") == []


def test_list_limit_reads_about_limit_manifests(root):
    mgr = mk(root)
    for i in range(60):
        mgr.save("r", msgs(i + 1))
    fresh = mk(root)
    fresh.repo  # open (reads config)
    s0 = fresh.store.stats.snapshot()
    assert len(fresh.list("r", limit=2)) == 2
    assert fresh.store.stats.since(s0).counts["GET"] <= 8


def test_runs_lists_live_runs_sorted(root):
    mgr = mk(root)
    assert mgr.runs() == []
    for r in ("b", "a", "c", "B"):
        mgr.save(r, [r])
    assert mk(root).runs() == ["B", "a", "b", "c"]
    mgr.delete("b")
    assert mk(root).runs() == ["B", "a", "c"]


def test_save_costs_at_most_three_puts(root):
    """Pack, index record (caller-supplied ids only), manifest; format 2 adds the tier pack on a
    save that completes a tier (one in ``seg_fanout``) and a log segment on one save in 16."""
    mgr = mk(root)
    mgr.save("r", msgs(3))
    fanout = mgr.repo.config.seg_fanout
    puts = []
    for n in range(4, 40):
        s = mgr.store.stats.snapshot()
        before = len(mgr.state.views["r"].head_segs or [])
        mgr.save("r", msgs(n), metadata={"n": n})
        seq = mgr.state.views["r"].head_seq
        merged = len(mgr.state.views["r"].head_segs) <= before  # a tier pack replaced some segments
        extra = int(merged) + int((seq + 1) % 16 == 0)
        if mgr.compact_log and (seq + 1) % 16 == 0 and seq >= 31:
            extra += 16  # the 16 stubs of the range before the last (docs/format.md §14)
        got = mgr.store.stats.since(s).counts["PUT"]
        # at one commit (docs/format.md §18) a save whose tier merges its own pack writes no pack
        one_commit_merge = merged and store_capabilities(mgr.store).atomic_batch
        assert got == 2 + extra or (one_commit_merge and got == 1 + extra), (n, got, extra)
        puts.append(got)
    assert sorted(puts)[len(puts) // 2] == 2 and puts.count(2) >= len(puts) * (fanout - 2) / fanout
    s = mgr.store.stats.snapshot()
    mgr.save("r", msgs(40), checkpoint_id=f"custom-{40}")
    assert mgr.store.stats.since(s).counts["PUT"] <= 3 + 2


def test_get_unknown_checkpoint(root):
    mgr = mk(root)
    c = mgr.save("r", [1])
    with pytest.raises(CheckpointNotFound) as ei:
        mgr.get("r", "nope")
    assert "nope" in str(ei.value)
    with pytest.raises(CheckpointNotFound):
        mgr.get("other-run", c)


def test_generated_ids_sort_by_creation_time(root):
    mgr = mk(root)
    created = []
    for i in range(40):
        created.append(mgr.save(f"run{i % 3}", msgs(i // 3 + 1)))
    assert sorted(created) == created
    assert len(set(created)) == len(created)
    fresh = mk(root)
    cps = [fresh.get(f"run{i % 3}", c) for i, c in enumerate(created)]
    times = [cp.created_at for cp in cps]
    assert times == sorted(times)
    for run in ("run0", "run1", "run2"):
        listed = ids(fresh, run)
        assert listed == sorted(listed, reverse=True)


# --- rollback ------------------------------------------------------------------------------------------

def test_rollback_removes_later_checkpoints(root):
    mgr = mk(root)
    saved = [mgr.save("r", msgs(i + 1)) for i in range(5)]
    back = mgr.rollback("r", saved[1])
    assert isinstance(back, Checkpoint) and back.id == saved[1] and back.messages == msgs(2)
    for mgr_ in (mgr, mk(root)):
        for gone in saved[2:]:
            with pytest.raises(CheckpointNotFound):
                mgr_.get("r", gone)
        assert ids(mgr_, "r") == saved[1::-1]
        assert mgr_.latest("r").id == saved[1]
        assert mgr_.resume_point("r")[1].id == saved[1]
    # the next save continues from the rolled-back-to checkpoint, at a new sequence number
    nxt = mgr.save("r", msgs(2) + [m(99)])
    cp = mk(root).get("r", nxt)
    assert cp.parent_id == saved[1] and cp.messages == msgs(2) + [m(99)]
    assert cp.seq > 4  # sequence numbers are never reused
    assert ids(mk(root), "r") == [nxt, saved[1], saved[0]]


def test_rollback_from_another_manager_then_save_there(root):
    a = mk(root)
    saved = [a.save("r", msgs(i + 1)) for i in range(4)]
    b = mk(root)
    b.rollback("r", saved[0])
    c = b.save("r", [m(0), m(50)])
    assert mk(root).get("r", c).parent_id == saved[0]
    assert ids(mk(root), "r") == [c, saved[0]]


def test_rollback_to_head_is_harmless(root):
    mgr = mk(root)
    a = mgr.save("r", [1])
    b = mgr.save("r", [1, 2])
    assert mgr.rollback("r", b).id == b
    assert ids(mk(root), "r") == [b, a]
    c = mgr.save("r", [1, 2, 3])
    assert mk(root).get("r", c).parent_id == b


def test_rollback_twice_and_to_unknown(root):
    mgr = mk(root)
    s = [mgr.save("r", msgs(i + 1)) for i in range(6)]
    mgr.rollback("r", s[4])
    mgr.rollback("r", s[2])
    assert ids(mk(root), "r") == s[2::-1]
    with pytest.raises(CheckpointNotFound):
        mgr.rollback("r", s[4])
    with pytest.raises(CheckpointNotFound):
        mgr.rollback("r", "unknown")
    x = mgr.save("r", msgs(3) + [m(7)])
    y = mgr.save("r", msgs(3) + [m(7), m(8)])
    mgr.rollback("r", x)
    assert ids(mk(root), "r") == [x] + s[2::-1]
    with pytest.raises(CheckpointNotFound):
        mk(root).get("r", y)


# --- delete --------------------------------------------------------------------------------------------

def test_delete_non_head_checkpoint(root):
    mgr = mk(root)
    s = [mgr.save("r", msgs(i + 1)) for i in range(4)]
    mgr.delete("r", s[1])
    fresh = mk(root)
    with pytest.raises(CheckpointNotFound):
        fresh.get("r", s[1])
    assert ids(fresh, "r") == [s[3], s[2], s[0]]
    assert fresh.latest("r").id == s[3]
    assert fresh.get("r", s[2]).messages == msgs(3)  # later checkpoints unaffected
    nxt = mgr.save("r", msgs(5))
    assert mk(root).get("r", nxt).parent_id == s[3]
    with pytest.raises(CheckpointNotFound):
        mgr.delete("r", s[1])


def test_delete_head_checkpoint_moves_head_back(root):
    mgr = mk(root)
    s = [mgr.save("r", msgs(i + 1)) for i in range(3)]
    other = mk(root)
    assert other.latest("r").id == s[2]
    mgr.delete("r", s[2])
    fresh = mk(root)
    assert fresh.latest("r").id == s[1]
    assert ids(fresh, "r") == [s[1], s[0]]
    with pytest.raises(CheckpointNotFound):
        fresh.get("r", s[2])
    # a manager that had seen the deleted head is stale
    with pytest.raises(ConflictError):
        other.save("r", msgs(4))
    nxt = mgr.save("r", msgs(2) + [m(42)])
    cp = mk(root).get("r", nxt)
    assert cp.parent_id == s[1] and cp.messages == msgs(2) + [m(42)]


def test_delete_only_checkpoint_deletes_run(root):
    mgr = mk(root)
    c = mgr.save("r", [1])
    mgr.save("keep", [2])
    mgr.delete("r", c)
    fresh = mk(root)
    assert fresh.runs() == ["keep"]
    assert fresh.latest("r") is None and fresh.list("r") == []


def test_delete_run(root):
    mgr = mk(root)
    s = [mgr.save("r", msgs(i + 1)) for i in range(3)]
    other = mgr.save("other", [1])
    mgr.delete("r")
    fresh = mk(root)
    assert fresh.runs() == ["other"]
    assert fresh.latest("r") is None and fresh.list("r") == [] and fresh.resume_point("r") is None
    for c in s:
        with pytest.raises(CheckpointNotFound):
            fresh.get("r", c)
    with pytest.raises(RunNotFound):
        fresh.delete("r")
    with pytest.raises(RunNotFound):
        fresh.delete("never-existed")
    assert fresh.get("other", other).messages == [1]
    n = mgr.save("r", [9])
    assert ids(mk(root), "r") == [n]
    assert mk(root).latest("r").parent_id is None


# --- prune ---------------------------------------------------------------------------------------------

def test_prune_keep_last(root):
    mgr = mk(root)
    a = [mgr.save("a", msgs(i + 1)) for i in range(5)]
    b = [mgr.save("b", msgs(i + 1)) for i in range(2)]
    gone = mgr.prune(keep_last=2)
    assert sorted(g.id for g in gone) == sorted(a[:3])
    assert all(isinstance(g, CheckpointSummary) for g in gone)
    assert {g.run_id for g in gone} == {"a"}
    fresh = mk(root)
    assert ids(fresh, "a") == a[:2:-1]
    assert ids(fresh, "b") == b[::-1]
    for c in a[:3]:
        with pytest.raises(CheckpointNotFound):
            fresh.get("a", c)
    assert fresh.latest("a").id == a[-1]
    # the writer continues normally after a prune that kept its head
    nxt = mgr.save("a", msgs(6))
    assert mk(root).get("a", nxt).parent_id == a[-1]


def test_prune_older_than(root):
    mgr = mk(root)
    old = [mgr.save("r", msgs(i + 1)) for i in range(3)]
    old_other = mgr.save("o", [1])
    time.sleep(1.5)  # margins: the old ones are >= 1.5 s old, the new ones must be < 1.0 s old at prune
    new = [mgr.save("r", msgs(i + 4)) for i in range(2)]
    # dry run: reports, deletes nothing
    would = mgr.prune(older_than=1.0, dry_run=True)
    assert sorted(g.id for g in would) == sorted(old + [old_other])
    assert ids(mk(root), "r") == (old + new)[::-1]
    gone = mgr.prune(older_than=timedelta(seconds=1.0), run_id="r")
    assert sorted(g.id for g in gone) == sorted(old)
    fresh = mk(root)
    assert ids(fresh, "r") == new[::-1]
    assert fresh.runs() == ["o", "r"]
    # every checkpoint of "o" is older: pruning them deletes the run
    gone = mgr.prune(older_than=1.0)
    assert [g.id for g in gone] == [old_other]
    assert mk(root).runs() == ["r"]


def test_prune_older_than_with_keep_last(root):
    mgr = mk(root)
    s = [mgr.save("r", msgs(i + 1)) for i in range(4)]
    time.sleep(0.4)
    gone = mgr.prune(older_than=0.2, keep_last=2)
    assert sorted(g.id for g in gone) == sorted(s[:2])
    assert ids(mk(root), "r") == [s[3], s[2]]
    assert mgr.prune(older_than=0.2, keep_last=2) == []


def test_prune_arguments(root):
    mgr = mk(root)
    mgr.save("r", [1])
    with pytest.raises(InvalidInputError):
        mgr.prune()
    for bad in (dict(keep_last=-1), dict(keep_last=1.5), dict(older_than=-5), dict(older_than=[1])):
        with pytest.raises(InvalidInputError):
            mgr.prune(**bad)
    assert len(mk(root).list("r")) == 1


# --- resume_point / fork -------------------------------------------------------------------------------

def test_resume_point(root):
    mgr = mk(root)
    assert mgr.resume_point("r") is None
    mgr.save("r", msgs(1), step=7)
    c = mgr.save("r", msgs(2), step=8)
    step, cp = mk(root).resume_point("r")
    assert step == 8 and cp.id == c and cp.messages == msgs(2)
    c3 = mgr.save("r", msgs(3))  # no step saved: the sequence number
    step, cp = mk(root).resume_point("r")
    assert step == 2 and cp.id == c3


def _files(root):
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_fork_shares_data(root):
    mgr = mk(root)
    big = [{"role": "tool", "content": f"output {i} " * 2000} for i in range(5)]
    s = [mgr.save("src", big[:i + 1], metadata={"i": i}, session_state={"i": i}) for i in range(5)]
    files_before = _files(root)
    st = mgr.store.stats.snapshot()
    cp = mgr.fork("src", s[2], "dst")
    d = mgr.store.stats.since(st)
    files_after = _files(root)
    new = {k: v for k, v in files_after.items() if k not in files_before}
    # format 2: one manifest listing the source's segments (no copy of the data), the new run's
    # live marker (an empty object, §13: runs() lists it from the listing) and the source run's
    # fork pin (an empty object, §10: the source's writer keeps the packs it merges)
    assert len(new) == 3, new
    man = [k for k in new if "/m/" in k]
    assert len(man) == 1 and not [k for k in new if k.startswith("packs/")], new
    assert [k for k in new if k.startswith("runmarks/")] == [f"runmarks/{mgr.repo.run_key('dst')}.{'f' * 16}.l"]
    assert [k for k in new if "/f/" in k] == [f"runs/{mgr.repo.run_key('src')}/f/forked"]
    assert d.counts["PUT"] == 3 and d.bytes_up == sum(new.values())
    assert new[man[0]] < 1024, new
    assert {k: v for k, v in files_after.items() if k in files_before} == files_before

    assert cp.run_id == "dst" and cp.messages == big[:3] and cp.id not in s
    fresh = mk(root)
    f = fresh.latest("dst")
    assert f.messages == big[:3] and f.id == cp.id
    assert f.session_state == {"i": 2} and f.metadata == {"i": 2}
    assert ids(fresh, "dst") == [cp.id]
    assert sorted(fresh.runs()) == ["dst", "src"]
    # the fork continues on its own; the source is untouched
    n = mgr.save("dst", big[:3] + [m(1)])
    assert mk(root).get("dst", n).parent_id == cp.id
    assert ids(mk(root), "src") == s[::-1]
    assert mk(root).latest("src").messages == big
    # forking onto a live run is refused
    with pytest.raises(ConflictError):
        mgr.fork("src", s[0], "dst")
    with pytest.raises(CheckpointNotFound):
        mgr.fork("src", "unknown", "dst2")


def test_fork_survives_deleting_the_source(root):
    mgr = mk(root)
    s = [mgr.save("src", msgs(i + 1)) for i in range(3)]
    mgr.fork("src", s[1], "dst")
    mgr.delete("src")
    assert mk(root).latest("dst").messages == msgs(2)


# --- max_checkpoints -----------------------------------------------------------------------------------

def test_max_checkpoints_keeps_n(root):
    mgr = mk(root, max_checkpoints=3)
    s = [mgr.save("r", msgs(i + 1)) for i in range(10)]
    for mgr_ in (mgr, mk(root)):
        assert ids(mgr_, "r") == s[:6:-1]
        for c in s[:7]:
            with pytest.raises(CheckpointNotFound):
                mgr_.get("r", c)
        assert mgr_.latest("r").messages == msgs(10)
    # another manager with the limit, continuing the run
    other = mk(root, max_checkpoints=3)
    other.latest("r")
    s11 = other.save("r", msgs(11))
    assert ids(mk(root), "r") == [s11, s[9], s[8]]
    with pytest.raises(InvalidInputError):
        CheckpointManager(MemoryStore(), max_checkpoints=0)
    with pytest.raises(InvalidInputError):
        CheckpointManager(MemoryStore(), max_checkpoints=-2)


def test_max_checkpoints_one(root):
    mgr = mk(root, max_checkpoints=1)
    for i in range(5):
        c = mgr.save("r", msgs(i + 1))
        assert ids(mk(root), "r") == [c]
        assert mk(root).latest("r").messages == msgs(i + 1)


# --- time travel with parent_id ------------------------------------------------------------------------

def test_save_with_parent_id_branches(root):
    mgr = mk(root)
    a = mgr.save("r", msgs(1))
    b = mgr.save("r", msgs(2))
    c = mgr.save("r", msgs(3))
    alt = [m(0), {"role": "user", "content": "a different path"}]
    d = mgr.save("r", alt, parent_id=a)
    fresh = mk(root)
    head = fresh.latest("r")
    assert head.id == d and head.parent_id == a and head.messages == alt
    assert head.seq > 2
    # the earlier checkpoints are still there
    assert fresh.get("r", b).messages == msgs(2) and fresh.get("r", c).messages == msgs(3)
    # the next plain save continues from the new head
    e = mgr.save("r", alt + [m(5)])
    assert mk(root).get("r", e).parent_id == d
    # branching from a checkpoint of a fresh manager
    f = mk(root).save("r", msgs(3) + [m(9)], parent_id=c)
    cp = mk(root).latest("r")
    assert cp.id == f and cp.parent_id == c and cp.messages == msgs(3) + [m(9)]
    with pytest.raises(CheckpointNotFound):
        mgr.save("r", [1], parent_id="unknown")


def test_get_of_older_checkpoint_then_save_needs_parent(root):
    """A manager remembers the last checkpoint it saved *or read*; after reading an older one, a plain
    save would silently drop the later history, so it conflicts; ``parent_id`` makes it explicit."""
    mgr = mk(root)
    a = mgr.save("r", msgs(1))
    b = mgr.save("r", msgs(2))
    assert mgr.get("r", a).messages == msgs(1)
    with pytest.raises(ConflictError):
        mgr.save("r", msgs(1) + [m(7)])
    c = mgr.save("r", msgs(1) + [m(7)], parent_id=a)
    assert mk(root).latest("r").id == c
    assert mk(root).get("r", b).messages == msgs(2)


# --- metadata filter -----------------------------------------------------------------------------------

def test_list_metadata_filter(root):
    mgr = mk(root)
    s = []
    for i in range(10):
        s.append(mgr.save("r", msgs(i + 1), metadata={"parity": i % 2, "tag": "x" if i < 5 else "y", "i": i}))
    mgr.save("r", msgs(11))  # no metadata
    mgr.save("r", msgs(12), metadata=["not", "a", "dict"])
    fresh = mk(root)
    assert ids(fresh, "r", metadata={"parity": 0}) == [s[i] for i in (8, 6, 4, 2, 0)]
    assert ids(fresh, "r", metadata={"parity": 1, "tag": "y"}) == [s[9], s[7], s[5]]
    assert ids(fresh, "r", metadata={"parity": 0}, limit=2) == [s[8], s[6]]
    assert ids(fresh, "r", metadata={"tag": "z"}) == []
    assert ids(fresh, "r", metadata={"missing": None}) == []
    assert ids(fresh, "r", metadata={"i": 3}) == [s[3]]
    # types matter: 0 is not "0"
    assert ids(fresh, "r", metadata={"parity": "0"}) == []
    assert len(fresh.list("r", metadata={})) == 12


# --- thread safety -------------------------------------------------------------------------------------

def test_threads_saving_to_different_runs(root):
    mgr = CheckpointManager(LocalStore(root, fsync=True))
    n_threads, per = 8, 12
    results: dict = {}
    errors = []
    barrier = threading.Barrier(n_threads)

    def work(t):
        try:
            barrier.wait()
            run = f"thread-{t}"
            out = []
            cur: list = []
            for i in range(per):
                cur = cur + [{"thread": t, "i": i, "pad": "z" * (i * 37 % 500)}]
                out.append((mgr.save(run, cur, step=i), list(cur)))
                if i % 4 == 3:
                    assert mgr.latest(run).messages == cur
            results[t] = out
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    fresh = mk(root)
    assert fresh.runs() == sorted(f"thread-{t}" for t in range(n_threads))
    for t, out in results.items():
        run = f"thread-{t}"
        assert ids(fresh, run) == [c for c, _ in out][::-1]
        for k, (c, expected) in enumerate(out):
            cp = fresh.get(run, c)
            assert cp.messages == expected and cp.seq == k
            assert cp.parent_id == (out[k - 1][0] if k else None)
    assert LocalStore(root).temp_files() == []


def test_threads_saving_to_one_run_through_one_manager(root):
    """Threads sharing one manager are separate callers (issue 9): a thread whose read is stale
    gets ConflictError and retries; every save that returned an id is in the final head, every
    save gets its own sequence position, the parent chain is linear, and each checkpoint holds
    what its caller passed. (tests/manager/test_callers.py races harder, on S3 too.)"""
    from snapstore.errors import ConflictError
    mgr = CheckpointManager(LocalStore(root, fsync=True))
    n_threads, per = 4, 10
    saved = []
    errors = []
    conflicts = []
    lock = threading.Lock()
    barrier = threading.Barrier(n_threads)

    def work(t):
        try:
            barrier.wait()
            i = 0
            while i < per:
                cp = mgr.latest("shared")
                base = cp.messages if cp else []
                new = base + [{"thread": t, "i": i}]
                try:
                    c = mgr.save("shared", new)
                except ConflictError:
                    with lock:
                        conflicts.append(t)
                    continue
                with lock:
                    saved.append((c, new))
                i += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert len(saved) == n_threads * per
    fresh = mk(root)
    summaries = fresh.list("shared")[::-1]
    assert len(summaries) == len(saved)
    assert [s.seq for s in summaries] == list(range(len(saved)))
    assert {s.id for s in summaries} == {c for c, _ in saved}
    for k, s in enumerate(summaries):
        assert s.parent_id == (summaries[k - 1].id if k else None)
    for c, expected in saved:
        assert fresh.get("shared", c).messages == expected
    head = fresh.latest("shared").messages
    assert sorted((m["thread"], m["i"]) for m in head) == sorted((t, i) for t in range(n_threads) for i in range(per))


def test_manager_context_manager_and_close(root):
    with mk(root) as mgr:
        c = mgr.save("r", [1])
    assert mk(root).get("r", c).messages == [1]


def test_create_false_on_empty_location(root):
    from snapstore.errors import RepositoryError
    mgr = CheckpointManager(LocalStore(root), create=False)
    with pytest.raises(RepositoryError):
        mgr.save("r", [1])
    assert not root.exists() or list(root.rglob("*")) == []


# --- head / summary / paged listing (what the service's conditional writes and cursors use) -------------

def test_head_summary_and_paged_listing(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    assert mgr.head("run") is None  # no repository yet: nothing created
    assert not (tmp_path / "r").exists()
    msgs, ids = [], []
    for i in range(40):
        msgs = msgs + [{"role": "assistant", "content": f"m{i}"}]
        ids.append(mgr.save("run", msgs, step=i, agent_id="a"))
    h = mgr.head("run")
    assert h.id == ids[-1] and h.message_count == 40 and h.step == 39 and not hasattr(h, "messages")
    s = mgr.summary("run", ids[3])
    assert (s.id, s.seq, s.step, s.message_count, s.agent_id) == (ids[3], 3, 3, 4, "a")
    with pytest.raises(CheckpointNotFound):
        mgr.summary("run", "nope")
    with pytest.raises(CheckpointNotFound):
        mgr.summary("other", ids[3])
    with pytest.raises(InvalidRunIdError):
        mgr.head("")
    # pages of 7 (lazy scan) and of 33 (bulk read) both walk every checkpoint once, newest first
    for size in (7, 33):
        seen, before = [], None
        while True:
            page = mgr.list("run", limit=size, before_seq=before)
            if not page:
                break
            seen += [p.id for p in page]
            before = page[-1].seq
        assert seen == ids[::-1]
    assert [p.id for p in mgr.list("run", before_seq=2)] == [ids[1], ids[0]]
    with pytest.raises(InvalidInputError):
        mgr.list("run", before_seq=-1)
    # after a rollback the head is the target (a rollback record resolved), summaries of the
    # rolled-back checkpoints are gone; after deleting the run there is no head
    mgr.rollback("run", ids[10])
    assert mgr.head("run").id == ids[10]
    with pytest.raises(CheckpointNotFound):
        mgr.summary("run", ids[11])
    assert [p.id for p in mgr.list("run", limit=3, before_seq=10)] == [ids[9], ids[8], ids[7]]
    mgr.delete("run")
    assert mgr.head("run") is None


# --- delete_many: several checkpoints of one run in one call ---------------------------------------

def test_delete_many_head_middle_unknown_and_all(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    ids = [mgr.save("r", [{"n": i}], checkpoint_id=f"c{i}" if i % 2 else None) for i in range(6)]
    assert mgr.delete_many("r", []) == []
    # the head and a middle one, plus an id the run does not have
    gone = mgr.delete_many("r", [ids[5], ids[2], "nope"])
    assert set(gone) == {ids[5], ids[2]}
    assert [c.id for c in mgr.list("r")] == [ids[4], ids[3], ids[1], ids[0]]
    assert mgr.latest("r").messages == [{"n": 4}]
    # a new manager sees the same, and saving continues from the moved head
    other = CheckpointManager(str(tmp_path / "repo"))
    assert other.latest("r").id == ids[4]
    nid = other.save("r", [{"n": 4}, {"n": 6}])
    assert other.delete_many("r", [c.id for c in other.list("r")]) and other.latest("r") is None
    assert "r" not in other.runs() and nid
    assert CheckpointManager(str(tmp_path / "empty"), create=True).delete_many("x", ["a"]) == []
