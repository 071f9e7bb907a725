"""A saver serving many threads keeps what it holds per thread for its ``RUN_CACHE`` threads used
last (issue 26, item 6): an evicted thread's next call reads its newest record again and sees
everything, including what another saver wrote meanwhile."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from typing import Annotated, TypedDict  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


class State(TypedDict):
    messages: Annotated[list, add_messages]


class SmallSaver(SnapstoreSaver):
    RUN_CACHE = 8


def _graph(saver):
    b = StateGraph(State)
    b.add_node("echo", lambda s: {"messages": [("ai", "you said: " + s["messages"][-1].content)]})
    b.add_edge(START, "echo")
    return b.compile(checkpointer=saver)


def test_many_threads_stay_bounded_and_evicted_threads_read_again(tmp_path):
    saver = SmallSaver(CheckpointManager(LocalStore(tmp_path / "r", fsync=False), run_cache_entries=16))
    other = SnapstoreSaver(CheckpointManager(LocalStore(tmp_path / "r", fsync=False)))
    g, g2 = _graph(saver), _graph(other)
    cfg = lambda t: {"configurable": {"thread_id": t}}  # noqa: E731
    for t in range(40):
        g.invoke({"messages": [("user", f"hi {t}")]}, cfg(f"t{t}"))
    st = saver.state
    assert len(st.heads) <= 8 and len(st.enc) <= 8 and len(st.put_ids) <= 8 and len(st._used) <= 8
    assert len(saver.manager.state.views) <= 16
    assert len(st._run_locks) < 8  # nobody holds them: they went
    # t0 was evicted long ago; another saver adds a turn to it; ours sees it and continues
    g2.invoke({"messages": [("user", "again 0")]}, cfg("t0"))
    msgs = g.get_state(cfg("t0")).values["messages"]
    assert [m.content for m in msgs] == ["hi 0", "you said: hi 0", "again 0", "you said: again 0"]
    g.invoke({"messages": [("user", "third")]}, cfg("t0"))
    msgs = g2.get_state(cfg("t0")).values["messages"]
    assert [m.content for m in msgs][-2:] == ["third", "you said: third"] and len(msgs) == 6
    assert len(list(other.list(cfg("t0")))) == len(list(saver.list(cfg("t0"))))
