"""SnapstoreSaver's read cost: the latest checkpoint, its pending writes and its DeltaChannel
history come from the run's newest record (a fresh process lists nothing and walks nothing), the
requests per graph step do not grow with the run, and the answers equal LangGraph's own walk."""

from __future__ import annotations

import threading
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402
from snapstore.integrations.langgraph import history as lg_history  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


class CountingStore(LocalStore):
    """A local store counting requests by kind (GET, LIST pages, PUT, DELETE)."""

    def __init__(self, root):
        super().__init__(root, fsync=False)
        self.counts: dict = {}
        self._lk = threading.Lock()

    def _n(self, kind):
        with self._lk:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def get(self, key, byte_range=None):
        self._n("GET")
        return super().get(key, byte_range)

    def list(self, prefix, start_after=None, limit=None):
        self._n("LIST")
        return super().list(prefix, start_after, limit)

    def put(self, key, data):
        self._n("PUT")
        return super().put(key, data)

    def take(self) -> dict:
        with self._lk:
            out, self.counts = self.counts, {}
        return out


def _reducer(state, writes):
    for w in writes:
        state = add_messages(state, w)
    return state


class Plain(TypedDict):
    messages: Annotated[list, add_messages]


class Delta(TypedDict):
    messages: Annotated[list, DeltaChannel(_reducer, snapshot_frequency=30)]


def _graph(saver, delta):
    g = StateGraph(Delta if delta else Plain)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply {len(s['messages'])} " + "w " * 150)]})
    g.add_edge(START, "model")
    return g.compile(checkpointer=saver)


CFG = {"configurable": {"thread_id": "t"}}


@pytest.mark.parametrize("delta", [False, True], ids=["add_messages", "DeltaChannel"])
def test_fresh_get_state_reads_the_newest_record_only(tmp_path, delta, monkeypatch):
    store = CountingStore(tmp_path / "repo")
    with SnapstoreSaver(CheckpointManager(store)) as saver:
        graph = _graph(saver, delta)
        for i in range(40):  # past a DeltaChannel snapshot (every 30 updates, 2 per turn)
            out = graph.invoke({"messages": [HumanMessage(content=f"q{i} " + "v " * 150)]}, CFG)
    store.take()
    fresh = SnapstoreSaver(CheckpointManager(store))
    walked = []
    monkeypatch.setattr(lg_history, "delta_walk", lambda *a, **k: walked.append(a))  # any walk would show here
    fresh.state.window = lambda *a, **k: walked.append(a)
    st = _graph(fresh, delta).get_state(CFG)
    got = store.take()
    print("fresh get_state requests:", got)
    assert st.values["messages"] == out["messages"]
    assert not walked, "the run was listed or walked"
    # LIST of the newest manifest, GET it, one wave of the packs it lists (segments), and one LIST
    # of the run's writes area (the pending-writes objects beside it, layout §4a); no listing of records
    assert got.get("LIST", 0) == 2, got
    assert got.get("GET", 0) <= 20, got
    if delta:
        tup = fresh.get_tuple(CFG)
        ours = fresh.get_delta_channel_history(config=tup.config, channels=["messages"])
        theirs = super(SnapstoreSaver, SnapstoreSaver(CheckpointManager(store))).get_delta_channel_history(
            config=tup.config, channels=["messages"])
        assert ours["messages"]["writes"] == theirs["messages"]["writes"]
        assert ours["messages"]["seed"] == theirs["messages"]["seed"]
        assert len(ours["messages"]["writes"]) >= 2


@pytest.mark.parametrize("delta", [False, True], ids=["add_messages", "DeltaChannel"])
def test_requests_per_step_stay_flat(tmp_path, delta):
    """The requests of one graph step (get_tuple, history, puts) at turn 40 are those of turn 5."""
    store = CountingStore(tmp_path / "repo")
    with SnapstoreSaver(CheckpointManager(store)) as saver:
        graph = _graph(saver, delta)
        per_turn = []
        for i in range(45):
            store.take()
            graph.invoke({"messages": [HumanMessage(content=f"q{i}")]}, CFG)
            got = store.take()
            per_turn.append(got.get("GET", 0) + got.get("LIST", 0))
    early, late = max(per_turn[3:8]), max(per_turn[38:43])
    print("reads per step:", per_turn)
    assert late <= early + 2, per_turn


def test_late_writes_for_an_earlier_checkpoint_make_readers_walk(tmp_path):
    """Writes stored for a checkpoint after its child was put (as LangGraph's async durability
    may do) are in the child's history: the saver notices and walks instead of using the
    history the child carries."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    saver = SnapstoreSaver(str(tmp_path / "repo"))
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    md = {"counters_since_delta_snapshot": {"msgs": [0, 1]}}
    c1 = saver.put(root, generate_checkpoint(channel_values={}, channel_versions={}), generate_metadata(**md), {})
    c2 = saver.put(c1, generate_checkpoint(channel_values={}, channel_versions={}), generate_metadata(**md), {})
    saver.put_writes(c1, [("msgs", [HumanMessage(content="late", id="m1")])], "task-1")
    hist = saver.get_delta_channel_history(config=c2, channels=["msgs"])
    assert hist["msgs"]["writes"] == [("task-1", "msgs", [HumanMessage(content="late", id="m1")])]
    assert "seed" not in hist["msgs"]
    c3 = saver.put(c2, generate_checkpoint(channel_values={}, channel_versions={}), generate_metadata(**md), {})
    for s in (saver, SnapstoreSaver(str(tmp_path / "repo"))):
        hist = s.get_delta_channel_history(config=c3, channels=["msgs"])
        assert hist["msgs"]["writes"] == [("task-1", "msgs", [HumanMessage(content="late", id="m1")])]
