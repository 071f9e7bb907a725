"""Replaying from an earlier checkpoint, and resuming a failed step after get_state, in ONE process:
LangGraph changes the checkpoint dicts a saver hands it (``versions_seen`` in place), so the saver
must never hand out what it caches. A trial found both wrong without any error: the replay ran no
node, and the resume dropped a finished tool's result. Compared with LangGraph's InMemorySaver."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def chat_graph(saver):
    """A chat node that calls the ``add`` tool when asked to add, and a ToolNode (the trial's graph)."""
    def chat(state: Chat):
        msgs = state["messages"]
        last, n = msgs[-1], len(msgs)
        if isinstance(last, HumanMessage) and "add" in last.content:
            return {"messages": [AIMessage("", id=f"ai-{n}", tool_calls=[
                {"name": "add", "args": {"a": 2, "b": n}, "id": f"call-{n}"}])]}
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(f"result is {last.content}", id=f"ai-{n}")]}
        return {"messages": [AIMessage(f"you said: {last.content}", id=f"ai-{n}")]}
    g = StateGraph(Chat)
    g.add_node("chat", chat)
    g.add_node("tools", ToolNode([add]))
    g.add_edge(START, "chat")
    g.add_conditional_edges("chat", tools_condition)
    g.add_edge("tools", "chat")
    return g.compile(checkpointer=saver)


def replay(saver) -> tuple[int, list[str]]:
    g = chat_graph(saver)
    cfg = {"configurable": {"thread_id": "t"}}
    g.invoke({"messages": [HumanMessage("hi", id="h1")]}, cfg)
    saved = g.get_state(cfg).config
    g.invoke({"messages": [HumanMessage("please add", id="h2")]}, cfg)
    past = [h for h in g.get_state_history(cfg) if h.metadata["step"] == 1][0]
    assert past.config["configurable"]["checkpoint_id"] == saved["configurable"]["checkpoint_id"]
    g.invoke({"messages": [HumanMessage("branch", id="h3")]}, past.config)  # fork from the first turn's end
    st = g.get_state(cfg)
    return st.metadata["step"], [m.content for m in st.values["messages"]]


class Fan(TypedDict):
    log: Annotated[list, operator.add]


FAIL = {"audit": True}


def fan_graph(saver):
    def start(state: Fan):
        return {"log": ["start"]}

    def tool(state: Fan):
        return {"log": ["tool result"]}

    def audit(state: Fan):
        if FAIL["audit"]:
            raise RuntimeError("audit failed")
        return {"log": ["audited"]}

    def done(state: Fan):
        return {"log": ["done"]}
    g = StateGraph(Fan)
    for name, fn in (("start", start), ("tool", tool), ("audit", audit), ("done", done)):
        g.add_node(name, fn)
    g.add_edge(START, "start")
    g.add_edge("start", "tool")
    g.add_edge("start", "audit")
    g.add_edge(["tool", "audit"], "done")
    g.add_edge("done", END)
    return g.compile(checkpointer=saver)


def resume_after_get_state(saver) -> list[str]:
    g = fan_graph(saver)
    cfg = {"configurable": {"thread_id": "f"}}
    FAIL["audit"] = True
    with pytest.raises(RuntimeError, match="audit failed"):
        g.invoke({"log": []}, cfg)
    g.get_state(cfg)  # reading the state before resuming must change nothing
    FAIL["audit"] = False
    g.invoke(None, cfg)
    return sorted(g.get_state(cfg).values["log"])


def test_replay_from_an_earlier_checkpoint_in_the_same_process(tmp_path):
    want = replay(InMemorySaver())
    assert want[1] == ["hi", "you said: hi", "branch", "you said: branch"]
    with SnapstoreSaver(str(tmp_path / "repo")) as saver:
        assert replay(saver) == want


def test_resume_a_failed_step_after_get_state_keeps_the_finished_writes(tmp_path):
    want = resume_after_get_state(InMemorySaver())
    assert want == sorted(["start", "tool result", "audited", "done"])
    with SnapstoreSaver(str(tmp_path / "repo")) as saver:
        assert resume_after_get_state(saver) == want
