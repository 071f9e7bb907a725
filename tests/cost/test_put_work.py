"""The work of one save does not grow with the run when a list keeps a long prefix and rewrites a
short end (docs/format.md §18, marks): counted in messages encoded and tree appends, never in wall
time. First the core API (the rewind gives the same list digest and tree as a writer building the
list from nothing), then SnapstoreSaver in a real LangGraph chat graph, whose records have exactly
that shape (messages, then a few items that change each put)."""

from __future__ import annotations

import random
import statistics

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.tree import Spine
from snapstore.repo.prepare import SavePreparer


class Counts:
    """Messages the write path encodes and refs it appends to a tree, since the last :meth:`take`."""

    def __init__(self, monkeypatch):
        self.encoded = self.appended = 0
        enc, app = SavePreparer._encode_message, Spine.append

        def encode(prep, msg, path):
            self.encoded += 1
            return enc(prep, msg, path)

        def append(spine, ref, seal, hasher):
            self.appended += 1
            return app(spine, ref, seal, hasher)

        monkeypatch.setattr(SavePreparer, "_encode_message", encode)
        monkeypatch.setattr(Spine, "append", append)

    def take(self) -> tuple[int, int]:
        got = (self.encoded, self.appended)
        self.encoded = self.appended = 0
        return got


def _manifest(mgr: CheckpointManager, run: str, cid: str):
    s = mgr.summary(run, cid)
    return mgr.repo.read_manifest_key(keys.manifest_key(mgr.repo.run_key(run), s.seq))


def _leaves(mgr: CheckpointManager, m) -> list:
    """The stored tree's messages ``(id, size, flags)`` in list order, each node's count checked
    (node ids, and so the cuts above the leaves, name pack ids: they differ between writers)."""
    def expand(level, r):
        if level == 0:
            return [(r.id, r.size, r.flags)]
        lv, items = mgr.repo.read_node(r.id, r.pack)
        out = [x for it in items for x in expand(lv, it)]
        assert len(out) == r.count
        return out
    spine = mgr.repo.read_state(bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
    return [x for level, r in spine.top_down() for x in expand(level, r)]


def test_rewritten_end_costs_the_end_and_matches_a_fresh_build(tmp_path, monkeypatch):
    counts = Counts(monkeypatch)
    mgr = CheckpointManager(str(tmp_path / "warm"), fsync=False)
    fresh = CheckpointManager(str(tmp_path / "warm"), fsync=False)  # another writer (digests are keyed per repository)
    rng = random.Random(3)
    body: list = []   # grows: the messages every record keeps
    tail: list = []   # a few items that change each save (the LangGraph saver's meta and writes)
    per_save, saved = [], []
    for step in range(400):
        if step % 3 == 0:
            body = body + [{"role": "user", "content": f"m{step} " + "x" * rng.randrange(20, 400)}]
            tail = [{"meta": step, "v": rng.random()}]
        else:
            tail = tail + [{"w": step, "task": rng.randrange(10 ** 6)}]  # appended, as writes records are
        msgs = body + tail
        counts.take()
        cid = mgr.save("r", msgs, step=step)
        per_save.append(counts.take())
        if step % 40 == 39:  # the same list built from nothing by another writer: same digest, same tree
            other = fresh.save(f"f{step}", [dict(m) for m in msgs])
            a, b = _manifest(mgr, "r", cid), _manifest(fresh, f"f{step}", other)
            assert (a.digest, a.count, a.size, a.exact) == (b.digest, b.count, b.size, b.exact)
            assert _leaves(mgr, a) == _leaves(fresh, b)
            saved.append((cid, msgs))
    early = statistics.median(e for e, _ in per_save[30:90])
    late = statistics.median(e for e, _ in per_save[330:390])
    assert late <= early + 2, (early, late)  # encoded: the changed end (and 4 compared by value)
    early_t = statistics.median(t for _, t in per_save[30:90])
    late_t = statistics.median(t for _, t in per_save[330:390])
    assert late_t <= early_t + 64, (early_t, late_t)  # re-appended from the nearest mark: a few
    assert max(e for e, _ in per_save[330:390]) < 40  # 260+ messages in the list by then
    for cid, msgs_then in saved:  # read after the saves (a read replaces the writer's state: not timed here)
        assert mgr.get("r", cid).messages == msgs_then
    # a new manager (a cold writer) continues the run, and everything verifies
    mgr.close()
    cold = CheckpointManager(str(tmp_path / "warm"), fsync=False)
    cold.save("r", msgs + [{"role": "user", "content": "after"}])
    assert cold.latest("r").messages[-1] == {"role": "user", "content": "after"}
    assert cold.verify(read_data=True).ok


def test_mutated_kept_message_is_stored(tmp_path):
    """The rewind trusts identity only as far as the core always did: the last messages before the
    change are compared by value, so one replaced in place there is stored."""
    mgr = CheckpointManager(str(tmp_path / "r"), fsync=False)
    msgs = [{"i": i} for i in range(50)] + [{"meta": 0}]
    mgr.save("r", msgs)
    msgs = msgs[:50] + [{"meta": 1}]
    mgr.save("r", msgs)
    msgs[49]["i"] = "changed"  # mutated in place, then the end rewritten
    msgs = msgs[:50] + [{"meta": 2}]
    mgr.save("r", msgs)
    assert mgr.latest("r").messages[49] == {"i": "changed"}
    assert CheckpointManager(str(tmp_path / "r")).latest("r").messages == msgs


@pytest.mark.parametrize("delta", [True, False], ids=["DeltaChannel", "add_messages"])
def test_saver_put_work_flat_in_the_run(tmp_path, monkeypatch, delta):
    pytest.importorskip("langgraph.checkpoint.conformance")
    pytest.importorskip("fsspec")  # benchmarks.lgraph
    from benchmarks.lgraph import build_chat_graph, chat_turns
    from snapstore.integrations.langgraph import SnapstoreSaver

    counts = Counts(monkeypatch)
    saver = SnapstoreSaver(CheckpointManager(str(tmp_path / "repo"), fsync=False))
    per_call: list = []
    for name in ("put", "put_writes"):
        f = getattr(saver, name)

        def timed(*a, _f=f, **k):
            counts.take()
            try:
                return _f(*a, **k)
            finally:
                per_call.append(counts.take())
        setattr(saver, name, timed)
    graph = build_chat_graph(saver, delta)
    chat_turns(graph, 30)
    early = list(per_call[-50:])  # 10 turns: 5 calls each
    chat_turns(graph, 270, seed=2)
    late = list(per_call[-50:])
    n = len(graph.get_state({"configurable": {"thread_id": "bench"}}).values["messages"])
    assert n == 600
    # the 4th largest of 50 calls: the 2 puts of each turn (not the 3 small calls beside them),
    # leaving out the few calls that store a DeltaChannel snapshot (a full list, once per 50 turns)
    def top(calls, i):
        return sorted(c[i] for c in calls)[-4]
    assert top(late, 0) <= top(early, 0) + 8, (early, late)  # before the marks: 670 at turn 300, 89 at 30
    assert top(late, 1) <= top(early, 1) + 64, (early, late)
    assert top(late, 0) < 50
