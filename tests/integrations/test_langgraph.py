"""SnapstoreSaver (snapstore.integrations.langgraph): LangGraph's official conformance suite on the
local store and on S3 (moto's HTTP server), real graphs (add_messages, DeltaChannel, interrupt and
resume, time travel), message round trips, storage per step, and the missing-extra error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

import boto3  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from tests.helpers.s3_fixtures import new_bucket_name  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import ConflictError, InvalidInputError  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, parse_run_id, run_id_for  # noqa: E402
from tests.helpers import paths

ROOT = str(paths.ROOT)


def _run_suite(name, make):
    @checkpointer_test(name=name)
    async def factory():
        saver = make()
        try:
            yield saver
        finally:
            saver.close()

    report = asyncio.run(validate(factory))
    report.print_report()
    for cap in ALL_CAPABILITIES:
        r = report.results[cap.value]
        assert r.detected, f"{name}: capability {cap.value} not detected"
        assert r.passed is True, f"{name}: {cap.value} failed: {r.failures}"
    assert report.conformance_level() == "FULL"
    return report


def test_conformance_local(tmp_path):
    n = iter(range(100))
    _run_suite("SnapstoreSaver (local)", lambda: SnapstoreSaver(str(tmp_path / f"repo{next(n)}")))


def _s3_saver(endpoint):
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return SnapstoreSaver(f"s3://{bucket}/lg", endpoint_url=endpoint, addressing_style="path")


def test_conformance_s3_http(moto_server):
    _run_suite("SnapstoreSaver (S3, moto HTTP)", lambda: _s3_saver(moto_server))


# ----------------------------------------------------------------------------------------------
# real graphs

class State(TypedDict):
    messages: Annotated[list, add_messages]
    turns: int


def _chat_graph(saver, interrupt_before=None):
    """A deterministic 'model' node answering each human message with a tool call, a tool node,
    and a final answer: three messages per turn."""
    def model(state):
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            return {"messages": [AIMessage(content="", tool_calls=[
                {"name": "search", "args": {"q": last.content, "n": 3}, "id": f"call-{len(state['messages'])}"}])]}
        return {"messages": [AIMessage(content=f"answer after {len(state['messages'])} messages")],
                "turns": state.get("turns", 0) + 1}

    def tool(state):
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(content=f"results for {call['args']['q']!r} ✓", tool_call_id=call["id"])]}

    def route(state):
        last = state["messages"][-1]
        return "tool" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tool", tool)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tool", END])
    g.add_edge("tool", "model")
    return g.compile(checkpointer=saver, interrupt_before=interrupt_before)


def test_graph_add_messages_resume_and_history(tmp_path):
    repo = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "chat-1"}}
    with SnapstoreSaver(repo) as saver:
        graph = _chat_graph(saver)
        for i in range(5):
            out = graph.invoke({"messages": [HumanMessage(content=f"question {i} é")]}, cfg)
        assert len(out["messages"]) == 20 and out["turns"] == 5
        history = list(graph.get_state_history(cfg))
    # a new saver (a new process would do the same) sees the same state and history
    with SnapstoreSaver(repo) as saver2:
        graph2 = _chat_graph(saver2)
        st = graph2.get_state(cfg)
        assert st.values["messages"] == out["messages"] and st.values["turns"] == 5
        assert [s.config["configurable"]["checkpoint_id"] for s in graph2.get_state_history(cfg)] == \
            [s.config["configurable"]["checkpoint_id"] for s in history]
        # time travel: branch from the state after the first turn and continue there
        first_turn = next(s for s in history if s.values.get("turns") == 1 and not s.next)
        out_b = graph2.invoke({"messages": [HumanMessage(content="other question")]}, first_turn.config)
        assert out_b["messages"][:4] == out["messages"][:4] and len(out_b["messages"]) == 8
        assert graph2.get_state(cfg).values["messages"] == out_b["messages"]
        # the original branch is still there
        old_head = history[0]
        assert graph2.get_state(old_head.config).values["messages"] == out["messages"]


def test_interrupt_and_resume_in_a_new_saver(tmp_path):
    repo = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "hitl"}}
    with SnapstoreSaver(repo) as saver:
        graph = _chat_graph(saver, interrupt_before=["tool"])
        graph.invoke({"messages": [HumanMessage(content="look it up")]}, cfg)
        st = graph.get_state(cfg)
        assert st.next == ("tool",)
    with SnapstoreSaver(repo) as saver2:
        graph2 = _chat_graph(saver2, interrupt_before=["tool"])
        assert graph2.get_state(cfg).next == ("tool",)
        out = graph2.invoke(None, cfg)
        assert [type(m).__name__ for m in out["messages"]] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
        assert graph2.get_state(cfg).next == ()


def _stored_bytes(saver):
    return saver.manager.stats()["stored_bytes"]


def test_storage_per_step_is_the_new_messages(tmp_path):
    """A step stores what is new: 20 turns of ~360-character messages cost about the same per turn
    at the end as at the start (SqliteSaver's cost per turn grows with the history)."""
    with SnapstoreSaver(str(tmp_path / "repo")) as saver:
        g = StateGraph(State)
        g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply {len(s['messages'])} " + "x y z " * 60)]})
        g.add_edge(START, "model")
        graph = g.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "t"}}
        sizes = []
        for i in range(20):
            graph.invoke({"messages": [HumanMessage(content=f"turn {i} " + "a b c " * 60)]}, cfg)
            sizes.append(_stored_bytes(saver))
        early = (sizes[9] - sizes[4]) / 5
        late = (sizes[19] - sizes[14]) / 5
        assert late < 2.5 * early + 2000, (early, late)
        assert graph.get_state(cfg).values["messages"][0].content.startswith("turn 0")


def _delta_reducer(state, writes):
    for w in writes:
        state = add_messages(state, w)
    return state


class DState(TypedDict):
    messages: Annotated[list, DeltaChannel(_delta_reducer, snapshot_frequency=4)]


def test_delta_channel_graph_and_history(tmp_path):
    repo = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "d"}}
    with SnapstoreSaver(repo) as saver:
        g = StateGraph(DState)
        g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply to {len(s['messages'])}")]})
        g.add_edge(START, "model")
        graph = g.compile(checkpointer=saver)
        for i in range(10):
            out = graph.invoke({"messages": [HumanMessage(content=f"q{i}")]}, cfg)
        assert len(out["messages"]) == 20
        latest = saver.get_tuple(cfg)
        hist = saver.get_delta_channel_history(config=latest.config, channels=["messages"])
        assert hist["messages"]["writes"], "the walk found no writes"
        default = super(SnapstoreSaver, saver).get_delta_channel_history(config=latest.config, channels=["messages"])
        assert hist["messages"]["writes"] == default["messages"]["writes"]
        assert ("seed" in hist["messages"]) == ("seed" in default["messages"])
        if "seed" in hist["messages"]:
            assert hist["messages"]["seed"] == default["messages"]["seed"]
        # prune keeps the chain back to the snapshot: the state still rebuilds
        saver.prune(["d"], strategy="keep_latest")
        assert len(list(saver.list(cfg))) >= 1
    with SnapstoreSaver(repo) as saver2:
        g2 = StateGraph(DState)
        g2.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply to {len(s['messages'])}")]})
        g2.add_edge(START, "model")
        graph2 = g2.compile(checkpointer=saver2)
        assert graph2.get_state(cfg).values["messages"] == out["messages"]
        # copy_thread: the copy rebuilds the same state, the source is untouched
        saver2.copy_thread("d", "d-copy")
        assert graph2.get_state({"configurable": {"thread_id": "d-copy"}}).values["messages"] == out["messages"]
        assert graph2.get_state(cfg).values["messages"] == out["messages"]
        with pytest.raises(ConflictError):
            saver2.copy_thread("d", "d-copy")


def test_langchain_messages_round_trip_equal(tmp_path):
    msgs = [
        HumanMessage(content="héllo 🌍 \ud800 lone surrogate and \udfff", id="h1"),
        AIMessage(content="", tool_calls=[{"name": "calc", "args": {"x": 2 ** 70, "y": [1.5, None, "ü"]}, "id": "c1"}],
                  usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}, id="a1"),
        ToolMessage(content="42", tool_call_id="c1", name="calc", artifact={"raw": [1, 2]}),
        AIMessage(content=[{"type": "text", "text": "blocks"}], additional_kwargs={"k": {"nested": True}}),
        HumanMessage(content="bytes inside", additional_kwargs={"blob": b"\x00\x01"}),  # not JSON: serde
    ]
    with SnapstoreSaver(str(tmp_path / "repo")) as saver:
        from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
        cp = generate_checkpoint(channel_values={"messages": msgs, "other": {"a": [1, 2], "when": datetime(2026, 1, 2, tzinfo=timezone.utc)}},
                                 channel_versions={"messages": 1, "other": 1})
        cfg = saver.put({"configurable": {"thread_id": "rt", "checkpoint_ns": ""}}, cp, generate_metadata(), {})
        saver.put_writes(cfg, [("messages", msgs[1]), ("messages", msgs[2:4]), ("x", {"v": 1})], "task-1")
    with SnapstoreSaver(str(tmp_path / "repo")) as saver2:
        tup = saver2.get_tuple(cfg)
        back = tup.checkpoint["channel_values"]["messages"]
        assert back == msgs and [type(m) for m in back] == [type(m) for m in msgs]
        assert tup.checkpoint["channel_values"]["other"] == {"a": [1, 2], "when": datetime(2026, 1, 2, tzinfo=timezone.utc)}
        assert tup.pending_writes == [("task-1", "messages", msgs[1]), ("task-1", "messages", msgs[2:4]),
                                      ("task-1", "x", {"v": 1})]
        # messages are stored as JSON chunks (one per message), not as one serialized blob
        rec = next(s for s in saver2.manager.list(run_id_for("rt"))
                   if s.metadata["lg"] == "C" and s.metadata["id"] == tup.config["configurable"]["checkpoint_id"])
        raw = saver2.manager.get(run_id_for("rt"), rec.id).messages
        assert raw[0]["type"] == "human" and raw[1]["data"]["tool_calls"][0]["args"]["x"] == 2 ** 70
        assert "serde" in raw[4]


def test_graph_input_is_stored_as_message_items(tmp_path):
    """A graph input {"messages": [...]} (the input checkpoint's __start__ value) is kind "d": a
    header item and the messages as message items, not one serde blob; it comes back equal, of the
    same types, in a fresh saver; other dicts stay serde; a damaged header is IntegrityError."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    from snapstore.errors import IntegrityError
    repo = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "gi"}}
    with SnapstoreSaver(repo) as saver:
        g = StateGraph(DState)
        g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply to {len(s['messages'])}")]})
        g.add_edge(START, "model")
        graph = g.compile(checkpointer=saver)
        for i in range(3):
            out = graph.invoke({"messages": [HumanMessage(content=f"q{i} \u00e9")]}, cfg)
        inputs = [h for h in graph.get_state_history(cfg) if h.metadata.get("source") == "input"]
    assert len(inputs) == 3
    with SnapstoreSaver(repo) as saver2:
        run = run_id_for("gi")
        # the input checkpoints, in records of their own or carried by the next record (§4b)
        recs = [r for r in saver2.state.index(run).cps.values() if r.md.get("md", {}).get("source") == "input"]
        assert len(recs) == 3
        assert any(r.md.get("cxc") for r in recs)  # folded into the record after them
        for r in recs:
            items, st = saver2.state.cp_record(run, r)
            row = next(x for x in st["layout"] if x[0] == "__start__")
            assert row[1] == "d"
            its = items[row[2]:row[2] + row[3]]
            assert its[0] == {"lgd": [["messages", "m", 1]]} and its[1]["type"] == "human"
            assert not any("serde" in i for i in its)
        for h in inputs:
            tup = saver2.get_tuple(h.config)
            start = tup.checkpoint["channel_values"]["__start__"]
            assert type(start) is dict and list(start) == ["messages"]
            assert [type(m) for m in start["messages"]] == [HumanMessage]
            assert start["messages"][0].content in {f"q{i} \u00e9" for i in range(3)}
        # other dicts (a value that is not all messages, a dict subclass) stay one serde item
        base = {"configurable": {"thread_id": "gi2", "checkpoint_ns": ""}}
        mixed = {"messages": [HumanMessage(content="a")], "n": 1}
        c2 = saver2.put(base, generate_checkpoint(channel_values={"x": mixed, "y": {"m": HumanMessage(content="b", id="i")}},
                                                  channel_versions={"x": 1, "y": 1}), generate_metadata(), {})
        back = saver2.get_tuple(c2).checkpoint["channel_values"]
        assert back["x"] == mixed and back["y"] == {"m": HumanMessage(content="b", id="i")}
        kinds = {row[0]: row[1] for row in saver2.manager.get(run_id_for("gi2"), saver2.manager.list(run_id_for("gi2"))[0].id)
                 .session_state["layout"]}
        assert kinds == {"x": "b", "y": "d"}
    # a "d" value whose header does not describe its items: IntegrityError naming the record
    with SnapstoreSaver(str(tmp_path / "bad")) as saver3:
        run = run_id_for("t")
        for its, lay in (([{"lgd": [["messages", "m", 2]]}, {"type": "human", "data": {"content": "x", "type": "human"}}], 2),
                         ([{"not": "a header"}, {"type": "human", "data": {"content": "x", "type": "human"}}], 2)):
            saver3.manager.save(run, its + [{"lgmeta": {"cp": {"json": {"v": 4}}, "parent": None, "md": {}}}],
                                metadata={"lg": "C", "id": "x1", "parent": None, "chs": ["__start__"], "md": {}},
                                session_state={"v": 2, "k": 1, "layout": [["__start__", "d", 0, lay]], "meta": lay})
            with pytest.raises(IntegrityError, match="x1"):
                saver3.get_tuple({"configurable": {"thread_id": "t"}})


def test_a_thread_written_the_earlier_way_reads_and_continues(tmp_path, monkeypatch):
    """Records written as before the message-dict kind and the v3 manifest dictionary (graph
    inputs as serde items, manifests version 5 codec 3) and then continued by this writer: a fresh
    saver reads every checkpoint of the mixed run, its inputs and its state."""
    from snapstore.format import manifest as mf
    from snapstore.integrations.langgraph import values as lg_values
    repo = str(tmp_path / "repo")
    cfg = {"configurable": {"thread_id": "old"}}

    def graph_on(saver):
        g = StateGraph(DState)
        g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply to {len(s['messages'])}")]})
        g.add_edge(START, "model")
        return g.compile(checkpointer=saver)

    with monkeypatch.context() as m:
        m.setattr(lg_values, "is_message_dict", lambda v: False)
        m.setattr(mf, "_SAVER_MARK", b"\0never")
        with SnapstoreSaver(repo) as saver:
            g = graph_on(saver)
            for i in range(3):
                g.invoke({"messages": [HumanMessage(content=f"q{i}")]}, cfg)
    with SnapstoreSaver(repo) as saver:
        g = graph_on(saver)
        for i in range(3, 5):
            out = g.invoke({"messages": [HumanMessage(content=f"q{i}")]}, cfg)
        run = run_id_for("old")
        # input checkpoints in records of their own, or carried by the next record (§4b)
        ix = saver.state.index(run)
        kinds = [next(x[1] for x in saver.state.cp_record(run, ix.cps[c])[1]["layout"] if x[0] == "__start__")
                 for c in sorted(ix.cps) if ix.cps[c].md["md"].get("source") == "input"]
        assert kinds == ["b", "b", "b", "d", "d"]
        from snapstore.format import keys
        versions = {saver.manager.store.get(keys.manifest_key(saver.manager.repo.run_key(run), seq))[4]
                    for seq in range(len(saver.manager.list(run)))} - {None}
        assert versions == {mf.MANIFEST_VERSION_ARRAYS, mf.MANIFEST_VERSION_DICT3}
    with SnapstoreSaver(repo) as fresh:
        g = graph_on(fresh)
        assert g.get_state(cfg).values["messages"] == out["messages"]
        hist = list(g.get_state_history(cfg))
        assert sum(1 for h in hist if h.metadata.get("source") == "input") == 5
        for h in hist:
            if h.metadata.get("source") == "input":
                start = fresh.get_tuple(h.config).checkpoint["channel_values"]["__start__"]
                assert type(start) is dict and isinstance(start["messages"][0], HumanMessage)


def test_run_ids_and_bad_input(tmp_path):
    assert parse_run_id(run_id_for("a/../b", "child:1|x")) == ("a/../b", "child:1|x")
    assert parse_run_id("other-run") is None
    mgr = CheckpointManager(str(tmp_path / "repo"))
    mgr.save("not-langgraph", [{"role": "user", "content": "x"}])
    saver = SnapstoreSaver(mgr)
    assert list(saver.list(None)) == []  # runs that are not the saver's are ignored
    with pytest.raises(InvalidInputError):
        SnapstoreSaver(mgr, endpoint_url="http://x")
    with pytest.raises(InvalidInputError):
        saver.prune(["t"], strategy="everything")
    saver.close()
    assert mgr.list("not-langgraph")  # a passed-in manager is not closed


def test_integrations_import_without_langgraph_names_the_extra(tmp_path):
    """With langgraph unimportable, ``snapstore.integrations`` imports and using the saver raises
    MissingDependencyError naming ``snapstore[langgraph]``."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('langgraph', 'langchain_core'):\n"
        "            raise ImportError(name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import snapstore.integrations as i\n"
        "from snapstore.errors import MissingDependencyError\n"
        "try:\n"
        "    i.SnapstoreSaver\n"
        "except MissingDependencyError as e:\n"
        "    assert 'snapstore[langgraph]' in str(e), e\n"
        "    print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


def test_writes_idempotent_across_savers_and_before_checkpoint(tmp_path):
    repo = str(tmp_path / "repo")
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    s1 = SnapstoreSaver(repo)
    cp = generate_checkpoint()
    cfg = {"configurable": {"thread_id": "w", "checkpoint_ns": "", "checkpoint_id": cp["id"]}}
    # writes for a checkpoint that is stored only afterwards
    s1.put_writes(cfg, [("ch", "early")], "t0")
    root = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
    s1.put(root, cp, generate_metadata(), {})
    s1.put_writes(cfg, [("ch", "v1"), ("ch2", "v2")], "t1")
    s2 = SnapstoreSaver(repo)  # another process retrying the same writes: no duplicates
    s2.put_writes(cfg, [("ch", "v1"), ("ch2", "v2")], "t1")
    tup = s2.get_tuple(cfg)
    assert sorted(tup.pending_writes) == [("t0", "ch", "early"), ("t1", "ch", "v1"), ("t1", "ch2", "v2")]
    assert s2.get_tuple({"configurable": {"thread_id": "w", "checkpoint_ns": "", "checkpoint_id": str(uuid.uuid4())}}) is None


def test_example_resume_in_another_process_from_s3(moto_server):
    """examples/langgraph_resume.py: process 1 runs to the interrupt, process 2 resumes from S3."""
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    script = os.path.join(ROOT, "examples", "langgraph_resume.py")
    env = dict(os.environ)
    outs = []
    for phase in ("start", "resume"):
        p = subprocess.run([sys.executable, script, phase, "--url", f"s3://{bucket}/lg", "--endpoint-url", moto_server],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        outs.append(__import__("json").loads(p.stdout.strip().splitlines()[-1]))
    assert outs[0]["next"] == ["refund"] and [m[0] for m in outs[0]["messages"]] == ["HumanMessage", "AIMessage"]
    assert outs[1]["next"] == []
    assert outs[1]["messages"][-1] == ["AIMessage", "Done: refunded 25 EUR on A-1001"]


def test_readme_langgraph_example_runs(tmp_path, monkeypatch, capsys):
    import re
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "SnapstoreSaver" in b)
    import runpy
    (tmp_path / "readme_example.py").write_text(block)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(tmp_path / "readme_example.py"), run_name="readme_example")  # a module while it runs
    assert capsys.readouterr().out.strip() == "you said: hi"
    assert (tmp_path / "agent-checkpoints" / "config").is_file()


def test_two_savers_on_one_thread_both_keep_their_puts(tmp_path):
    """Two savers (two managers, as two processes) putting on one thread: nothing is lost or
    overwritten; the later put is the latest."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    repo = str(tmp_path / "repo")
    s1, s2 = SnapstoreSaver(repo), SnapstoreSaver(repo)
    root = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
    c1 = s1.put(root, generate_checkpoint(channel_values={"v": 1}, channel_versions={"v": 1}), generate_metadata(step=0), {})
    c2 = s2.put(c1, generate_checkpoint(channel_values={"v": 2}, channel_versions={"v": 2}), generate_metadata(step=1), {})
    c3 = s1.put(c1, generate_checkpoint(channel_values={"v": 3}, channel_versions={"v": 2}), generate_metadata(step=1), {})
    s2.put_writes(c2, [("ch", "from s2")], "t2")
    s1.put_writes(c3, [("ch", "from s1")], "t1")
    for s in (s1, s2, SnapstoreSaver(repo)):
        assert s.get_tuple(root).checkpoint["channel_values"] == {"v": 3}
        got = {t.config["configurable"]["checkpoint_id"]: t for t in s.list(root)}
        assert set(got) == {c["configurable"]["checkpoint_id"] for c in (c1, c2, c3)}
        assert got[c2["configurable"]["checkpoint_id"]].pending_writes == [("t2", "ch", "from s2")]
        assert got[c3["configurable"]["checkpoint_id"]].parent_config["configurable"]["checkpoint_id"] == \
            c1["configurable"]["checkpoint_id"]


def test_bad_configs_and_damaged_records_raise_typed_errors(tmp_path):
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    from snapstore.errors import IntegrityError
    saver = SnapstoreSaver(str(tmp_path / "repo"))
    for bad in ({}, {"configurable": {}}, {"configurable": {"thread_id": ""}}, None):
        with pytest.raises(InvalidInputError, match="thread_id"):
            saver.get_tuple(bad)
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("ch", 1)], "task")
    with pytest.raises(InvalidInputError, match="checkpoint_ns"):
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": 3}}, generate_checkpoint(), generate_metadata(), {})
    # a record that claims to be a LangGraph checkpoint but is not one: IntegrityError naming it
    run = run_id_for("t")
    saver.manager.save(run, [{"not": "a message"}], metadata={"lg": "c", "id": "bogus", "parent": None, "chs": []},
                       session_state={"cp": {"json": {}}, "layout": [["messages", "m", 0, 1]], "nlead": 1},
                       checkpoint_id="bogus")
    with pytest.raises(IntegrityError, match="bogus"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})


def test_with_allowlist_clone_encodes_with_its_serializer_and_shares_the_saver(tmp_path):
    """``BaseCheckpointSaver.with_allowlist`` makes a shallow clone with another serializer: the
    clone's values go through that serializer, and the clone sees what the saver holds."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    saver = SnapstoreSaver(str(tmp_path / "repo"), serde=JsonPlusSerializer(allowed_msgpack_modules=[("a", "B")]))
    clone = saver.with_allowlist([("collections", "OrderedDict")])
    assert clone is not saver and clone.serde is not saver.serde
    assert clone.state.codec.serde is clone.serde and saver.state.codec.serde is saver.serde
    cp = generate_checkpoint()
    cp["channel_values"] = {"v": {"x": 1}}
    cfg = clone.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, cp, generate_metadata(), {})
    assert saver.get_tuple(cfg).checkpoint["channel_values"] == {"v": {"x": 1}}
    assert clone.state.heads is saver.state.heads  # one saver's state: the clone's put is the saver's newest
    saver.close()
