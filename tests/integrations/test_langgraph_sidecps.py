"""Pending-checkpoint objects (docs/langgraph-layout.md §4b): LangGraph's input checkpoint and the
one after ``__start__`` are objects beside the run's newest record, carried by the next record, so
a turn makes one record; every checkpoint and write reads back as InMemorySaver gives it, from the
saver that wrote it and from a fresh one, while the objects wait and once they are folded; a
process SIGKILLed between the puts of a turn loses no acknowledged put. Real local stores and a
real LangGraph graph."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, run_id_for  # noqa: E402
from tests.helpers.paths import ROOT  # noqa: E402

from benchmarks.lgraph import ChatDeltaState, ChatState  # noqa: E402


def _graph(saver, delta: bool):
    g = StateGraph(ChatDeltaState if delta else ChatState)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply {len(s['messages'])}")]})
    g.add_edge(START, "model")
    return g.compile(checkpointer=saver)


def _view(snapshots) -> list:
    """What a state history shows, less the ids (each saver's graph makes its own)."""
    return [([m.content for m in h.values.get("messages", [])], h.next, h.metadata.get("source"),
             h.metadata.get("step"), [(t.name, t.id is not None) for t in h.tasks]) for h in snapshots]


def _norm(v):
    """A value less its message ids (each saver's graph makes its own)."""
    if isinstance(v, BaseMessage):
        return (type(v).__name__, v.content)
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return repr(v)


def _tuples(saver, cfg) -> list:
    return [(t.metadata["source"], t.metadata["step"], sorted((w[1], repr(_norm(w[2]))) for w in t.pending_writes),
             sorted(t.checkpoint["channel_values"]))
            for t in saver.list(cfg)]


@pytest.mark.parametrize("delta", [True, False])
def test_a_turn_makes_one_record_and_reads_back_as_in_memory(tmp_path, delta):
    root = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "t"}}
    ours, mem = SnapstoreSaver(root), InMemorySaver()
    go, gm = _graph(ours, delta), _graph(mem, delta)
    for i in range(6):
        for g in (go, gm):
            g.invoke({"messages": [HumanMessage(content=f"q{i}")]}, cfg)
        if i == 0:
            first = len(ours.manager.list(run_id_for("t")))
    recs = ours.manager.list(run_id_for("t"))
    # the first turn (an empty run) saves its three checkpoints as records; each later turn one
    assert len(recs) == first + 5
    assert Counter(len(r.metadata.get("cx") or ()) for r in recs[:5]) == {2: 5}
    for reader in (ours, SnapstoreSaver(root)):
        rg = _graph(reader, delta)
        assert _view(rg.get_state_history(cfg)) == _view(gm.get_state_history(cfg))
        assert _tuples(reader, cfg) == _tuples(mem, cfg)
        # every checkpoint by id, and its DeltaChannel history
        for t in reader.list(cfg):
            got = reader.get_tuple(t.config)
            assert got.checkpoint == t.checkpoint and got.pending_writes == t.pending_writes
            if delta:
                h = reader.get_delta_channel_history(config=t.config, channels=["messages"])
                n = len(rg.get_state(t.config).values.get("messages", []))
                seed = h["messages"].get("seed")
                assert (len(seed.value) if seed is not None else 0) <= n
    # a replay from an intermediate (formerly pending) checkpoint and a fork from it
    mid = [h for h in go.get_state_history(cfg) if h.metadata.get("source") == "input"][2]
    mid_m = [h for h in gm.get_state_history(cfg) if h.metadata.get("source") == "input"][2]
    assert [m.content for m in go.invoke(None, mid.config)["messages"]] == \
        [m.content for m in gm.invoke(None, mid_m.config)["messages"]]
    assert _view(_graph(SnapstoreSaver(root), delta).get_state_history(cfg)) == _view(gm.get_state_history(cfg))
    ours.close()
    assert CheckpointManager(root).verify().ok


def test_the_latest_as_an_object_is_read_listed_and_folded_by_a_fresh_saver(tmp_path):
    root = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "t"}}
    ours, mem = SnapstoreSaver(root), InMemorySaver()
    go, gm = _graph(ours, True), _graph(mem, True)
    for g in (go, gm):
        g.invoke({"messages": [HumanMessage(content="q0")]}, cfg)
        g.invoke({"messages": [HumanMessage(content="q1")]}, cfg, interrupt_before=["model"])
    # the turn stopped before the node: its two checkpoints are objects only
    run = run_id_for("t")
    head = ours.manager.head(run)
    objs = ours.manager.outcomes(run, head.id)
    assert sum(1 for v in objs.values() if isinstance(v, dict) and v.get("lgpc") == 1) == 2
    fresh = SnapstoreSaver(root)
    fg = _graph(fresh, True)
    assert _view([fg.get_state(cfg)]) == _view([gm.get_state(cfg)])
    assert _view(fg.get_state_history(cfg)) == _view(gm.get_state_history(cfg))
    assert _tuples(fresh, cfg) == _tuples(mem, cfg)
    # the fresh saver resumes the turn: its record carries both
    for g in (fg, gm):
        g.invoke(None, cfg)
    assert len(ours.manager.latest(run).metadata["cx"]) == 2
    assert _view(_graph(SnapstoreSaver(root), True).get_state_history(cfg)) == _view(gm.get_state_history(cfg))


def test_delete_for_runs_and_prune_with_objects_waiting(tmp_path):
    root = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "t"}}
    ours, mem = SnapstoreSaver(root), InMemorySaver()
    go, gm = _graph(ours, True), _graph(mem, True)
    rid = [str(uuid.uuid4()) for _ in range(4)]
    for g in (go, gm):
        g.invoke({"messages": [HumanMessage(content="q0")]}, {**cfg, "metadata": {"run_id": rid[0]}})
        g.invoke({"messages": [HumanMessage(content="q1")]}, {**cfg, "metadata": {"run_id": rid[1]}})
        g.invoke({"messages": [HumanMessage(content="q2")]}, {**cfg, "metadata": {"run_id": rid[2]}}, interrupt_before=["model"])
    runs = [h.metadata["run_id"] for h in gm.get_state_history(cfg)]
    last = runs[0]
    assert len(set(runs)) == 3
    gone: set = set()

    def expected():  # InMemorySaver has no delete_for_runs: its listing less the runs deleted
        return [t for t, h in zip(_tuples(mem, cfg), mem.list(cfg)) if h.metadata.get("run_id") not in gone]

    ours.delete_for_runs([last])  # the run whose checkpoints are objects only
    gone.add(last)
    assert _tuples(SnapstoreSaver(root), cfg) == _tuples(ours, cfg) == expected()
    middle = [r for r in dict.fromkeys(runs) if r != last][0]
    ours.delete_for_runs([middle])  # checkpoints carried by a record (cx) with its own
    gone.add(middle)
    assert _tuples(SnapstoreSaver(root), cfg) == expected()
    assert len(expected()) == 3
    # the latest two as objects again; prune keeps the latest only (no DeltaChannel chain
    # to keep: a new input holds the messages)
    go.invoke({"messages": [HumanMessage(content="q3")]}, {**cfg, "metadata": {"run_id": rid[3]}},
              interrupt_before=["model"])
    latest = ours.get_tuple(cfg)
    ours.prune(["t"])
    fresh = SnapstoreSaver(root)
    assert fresh.get_tuple(cfg).checkpoint == latest.checkpoint
    assert fresh.get_tuple(cfg).pending_writes == latest.pending_writes
    assert latest.config["configurable"]["checkpoint_id"] in [t.config["configurable"]["checkpoint_id"]
                                                              for t in fresh.list(cfg)]
    assert CheckpointManager(root).verify().ok


CHILD = r"""
import sys
from langgraph.checkpoint.base import empty_checkpoint
from snapstore.integrations.langgraph import SnapstoreSaver
root, start = sys.argv[1], int(sys.argv[2])
s = SnapstoreSaver(root)
conf = lambda cid=None: {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": cid} if cid else {})}}
ids = lambda i: f"1ef00000-0000-6000-8000-{i:012d}"
i = start
while True:
    # a turn as LangGraph puts it: the input checkpoint, the one after __start__, the node's
    for src in ("input", "loop", "loop"):
        c = empty_checkpoint()
        c["id"] = ids(i)
        c["channel_values"] = {"n": i}
        c["channel_versions"] = {"n": i + 1}
        s.put(conf(ids(i - 1) if i else None), c, {"source": src, "step": i, "parents": {}, "run_id": f"r{i // 3}"},
              {"n": i + 1})
        print("put", i, flush=True)
        s.put_writes(conf(ids(i)), [("x", i)], f"task-{i}")
        print("w", i, flush=True)
        i += 1
"""


def test_sigkill_between_the_puts_of_a_turn_keeps_every_acknowledged_one(tmp_path):
    root = str(tmp_path / "repo")
    rng = random.Random(11)
    acked_put, acked_w = set(), set()
    start = 0
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for _round in range(4):
        p = subprocess.Popen([sys.executable, "-c", CHILD, root, str(start)], stdout=subprocess.PIPE, text=True,
                             env=env)
        time.sleep(rng.uniform(1.5, 3.0))
        p.kill()
        out, _ = p.communicate()
        for line in out.splitlines():
            kind, n = line.split()
            (acked_put if kind == "put" else acked_w).add(int(n))
        fresh = SnapstoreSaver(root)
        listed = {t.config["configurable"]["checkpoint_id"]: t for t in fresh.list({"configurable": {"thread_id": "t"}})}
        for i in sorted(acked_put):
            cid = f"1ef00000-0000-6000-8000-{i:012d}"
            t = fresh.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": cid}})
            assert t is not None and t.checkpoint["channel_values"] == {"n": i}, i
            assert cid in listed, i
            if i in acked_w:
                assert (f"task-{i}", "x", i) in t.pending_writes, i
                assert (f"task-{i}", "x", i) in listed[cid].pending_writes, i
        latest = fresh.get_tuple({"configurable": {"thread_id": "t"}})
        assert latest is not None or not acked_put  # (a put may be stored, killed before it said so)
        if latest is not None:  # (a child killed while still importing put nothing)
            start = latest.checkpoint["channel_values"]["n"] + 1
            start += (-start) % 3  # the next turn starts with an input checkpoint
        fresh.close()
        assert CheckpointManager(root).verify().ok
    assert len(acked_put) >= 6
    records = CheckpointManager(root).list(run_id_for("t"))
    assert any(r.metadata.get("cx") for r in records), "some turns were carried by one record"
