"""SnapstoreSaver keeps every pending write in the orders LangGraph's durability modes produce
(issue 27): writes for a checkpoint that is not put yet, across puts of its ancestors, compared
with LangGraph's InMemorySaver on the same calls."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from snapstore.integrations.langgraph import SnapstoreSaver, run_id_for  # noqa: E402


def _cp(cid: str, n: int) -> dict:
    c = empty_checkpoint()
    c["id"] = cid
    c["channel_values"] = {"n": n}
    c["channel_versions"] = {"n": n + 1}
    return c


IDS = ["1ef00000-0000-6000-8000-00000000000" + str(i) for i in range(6)]


def _conf(thread: str, cid: str | None = None, ns: str = "") -> dict:
    c = {"thread_id": thread, "checkpoint_ns": ns}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _play(saver, steps, thread="t"):
    """Run ``steps``: ("put", i, parent) or ("w", i, task, [(channel, value)])."""
    for s in steps:
        if s[0] == "put":
            _, i, parent = s
            saver.put(_conf(thread, IDS[parent] if parent is not None else None), _cp(IDS[i], i),
                      {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})
        else:
            _, i, task, writes = s
            saver.put_writes(_conf(thread, IDS[i]), writes, task)


def _writes(saver, i, thread="t"):
    t = saver.get_tuple(_conf(thread, IDS[i]))
    return None if t is None else sorted(t.pending_writes)


def _latest(saver, thread="t"):
    t = saver.get_tuple(_conf(thread))
    return t.config["configurable"]["checkpoint_id"], sorted(t.pending_writes)


ISSUE_SEQUENCE = [
    ("put", 0, None), ("w", 0, "t0", [("x", 0)]),
    ("w", 2, "a", [("x", "a")]), ("w", 2, "b", [("x", "b")]),
    ("put", 1, 0),
    ("w", 2, "c", [("x", "c")]), ("w", 2, "d", [("x", "d")]),
    ("put", 2, 1),
]


def _compare(tmp_path, steps, ids=(0, 1, 2)):
    mem = InMemorySaver()
    _play(mem, steps)
    ours = SnapstoreSaver(str(tmp_path / "repo"))
    _play(ours, steps)
    fresh = SnapstoreSaver(str(tmp_path / "repo"))
    try:
        assert _latest(ours) == _latest(mem)
        assert _latest(fresh) == _latest(mem)
        for i in ids:
            assert _writes(ours, i) == _writes(mem, i), i
            assert _writes(fresh, i) == _writes(mem, i), i
        got = [(t.config["configurable"]["checkpoint_id"], sorted(t.pending_writes)) for t in fresh.list(_conf("t"))]
        want = [(t.config["configurable"]["checkpoint_id"], sorted(t.pending_writes)) for t in mem.list(_conf("t"))]
        assert got == want
    finally:
        ours.close()
        fresh.close()


def test_issue_sequence_keeps_writes_stored_before_the_parent(tmp_path):
    mem = InMemorySaver()
    _play(mem, ISSUE_SEQUENCE)
    assert [v for _t, _c, v in _writes(mem, 2)] == ["a", "b", "c", "d"]
    _compare(tmp_path, ISSUE_SEQUENCE)


def test_writes_for_two_checkpoints_to_come(tmp_path):
    # writes for C2 and for C3 before C1 is put (async durability with slow puts)
    steps = [("put", 0, None), ("w", 2, "a", [("x", "a")]), ("w", 3, "p", [("x", "p")]),
             ("w", 2, "b", [("x", "b")]), ("put", 1, 0), ("w", 3, "q", [("x", "q")]),
             ("put", 2, 1), ("w", 2, "c", [("x", "c")]), ("put", 3, 2), ("w", 3, "r", [("x", "r")])]
    _compare(tmp_path, steps, ids=(0, 1, 2, 3))


def test_late_writes_after_the_child_was_put(tmp_path):
    steps = [("put", 0, None), ("w", 0, "a", [("x", "a")]), ("put", 1, 0), ("w", 0, "b", [("x", "b")]),
             ("w", 2, "e", [("x", "e")]), ("w", 1, "c", [("x", "c")]), ("put", 2, 1), ("w", 1, "d", [("x", "d")])]
    _compare(tmp_path, steps)


class _OneSet(SnapstoreSaver):
    EARLY_SETS = 1  # the newest record carries the writes of one checkpoint to come only


def test_writes_not_carried_mark_the_checkpoint_and_readers_list_the_run(tmp_path):
    steps = [("put", 0, None), ("w", 2, "a", [("x", "a")]), ("w", 3, "p", [("x", "p")]),
             ("w", 2, "b", [("x", "b")]), ("w", 3, "q", [("x", "q")]), ("put", 1, 0),
             ("put", 2, 1), ("put", 3, 2)]
    mem = InMemorySaver()
    _play(mem, steps)
    ours = _OneSet(str(tmp_path / "repo"))
    _play(ours, steps)
    # C2's set was dropped from the carried ones when C3's arrived: C2's record says so
    run = run_id_for("t")
    recs = [s for s in ours.manager.list(run) if s.metadata.get("lg") == "C" and s.metadata["id"] == IDS[2]]
    assert ours.manager.get(run, recs[0].id).session_state.get("x") == 1
    fresh = SnapstoreSaver(str(tmp_path / "repo"))
    for i in (2, 3):
        assert _writes(fresh, i) == _writes(mem, i) == _writes(ours, i), i
    fresh.close()
    ours.close()


# --- through real graphs: agent -> 8 parallel Send branches, some interrupt ------------------

from benchmarks import langgraph_writes as lw  # noqa: E402  (the project root is on sys.path: tests/ is a package)

TRIALS = 12


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
@pytest.mark.parametrize("interrupting", [{7}, set(range(8))], ids=["one-interrupts", "all-interrupt"])
def test_send_branches_keep_writes_and_interrupts_like_in_memory(tmp_path, durability, interrupting):
    repo = str(tmp_path / "repo")
    got = lw.compare(lambda: SnapstoreSaver(repo), durability, TRIALS, 8, interrupting)
    assert got == {"trials": TRIALS, "missing": 0, "reruns": 0, "wrong": 0}


def test_the_graph_check_counts_a_saver_that_drops_early_writes(tmp_path):
    """The comparison above counts a saver that loses pending writes (the check can fail)."""

    class DropAll(InMemorySaver):
        def put_writes(self, config, writes, task_id, task_path=""):
            return

    got = lw.compare(DropAll, "sync", 2, 8, {7})
    assert got["missing"] == 2 and got["reruns"] == 2
