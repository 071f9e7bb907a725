"""Retention of LangGraph DeltaChannel threads written by earlier releases (issue 27, items 2-3):
their records declare no ``snapstore.needs``, yet a checkpoint that does not hold its
DeltaChannel value rebuilds it from its ancestors. ``CheckpointManager.prune``, the CLI's
``prune`` and ``saver.prune`` must never leave such a thread with a truncated state: the core
keeps every older checkpoint of it (and says why), the saver keeps exactly the chain. Both
record layouts of earlier releases (``"lg": "c"`` before 09de06c, ``"lg": "C"`` before
f743224), written by those releases themselves (``git archive``) in a subprocess. A thread of an
earlier release without DeltaChannel is still pruned as asked."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("langgraph.channels.delta")

from click.testing import CliRunner  # noqa: E402

from tests.helpers.old_release import extract_release  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.cli import cli  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, run_id_for  # noqa: E402

RELEASES = {"layout-1": "8dc261bd2aafc4026c218431c6dbe82e3d4ec002",   # 09de06c^: "lg": "c"/"w" records
            "layout-2": "9bf1139ca654b84967240a4e547362ce32ef83bf"}   # f743224^: "lg": "C"/"W", no needs
TURNS = 6
CFG = {"configurable": {"thread_id": "t"}}

GRAPH = textwrap.dedent('''
    from typing import Annotated, TypedDict
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.channels.delta import DeltaChannel
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages

    def _reducer(state, writes):
        for w in writes:
            state = add_messages(state, w)
        return state

    def graph(saver, delta=True):
        ch = DeltaChannel(_reducer, snapshot_frequency=4) if delta else add_messages
        S = TypedDict("S", {"messages": Annotated[list, ch]})
        g = StateGraph(S)
        g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply {len(s['messages'])}")]})
        g.add_node("tool", lambda s: {"messages": [AIMessage(content=f"tool {len(s['messages'])}")]})
        g.add_edge(START, "model")
        g.add_edge("model", "tool")
        return g.compile(checkpointer=saver)
''')
exec(GRAPH)  # the same graph here, for the reads with this release

WRITE = GRAPH + textwrap.dedent('''
    import json, sys
    import snapstore
    from snapstore.integrations.langgraph import SnapstoreSaver
    assert snapstore.__file__.startswith(sys.argv[3]), snapstore.__file__
    CFG = {"configurable": {"thread_id": "t"}}
    with SnapstoreSaver(sys.argv[1]) as s:
        g = graph(s, sys.argv[2] == "delta")
        for i in range(%d):
            g.invoke({"messages": [HumanMessage(content=f"q{i}")]}, CFG)
        print(json.dumps({h.config["configurable"]["checkpoint_id"]: [m.content for m in h.values.get("messages", [])]
                          for h in g.get_state_history(CFG)}))
''' % TURNS)


@pytest.fixture(scope="module", params=sorted(RELEASES))
def old_thread(request, tmp_path_factory):
    """``(repo written by that release, {checkpoint id: message contents}, kind)`` per kind."""
    base = tmp_path_factory.mktemp(request.param)
    src = extract_release(RELEASES[request.param], base)
    out = {}
    for kind in ("delta", "plain"):
        repo = base / f"repo-{kind}"
        p = subprocess.run([sys.executable, "-c", WRITE, str(repo), kind, str(src)], cwd=str(base),
                           env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        out[kind] = (repo, json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def _copy(old_thread, kind, tmp_path):
    repo, want = old_thread[kind]
    dst = tmp_path / "repo"
    shutil.copytree(repo, dst)
    return str(dst), want


def _assert_full(repo, want, delta=True):
    """A fresh saver of this release: the latest state holds every message, every checkpoint
    still listed rebuilds exactly the state the earlier release had, and the next turn continues
    from the full state."""
    with SnapstoreSaver(repo) as s:
        g = graph(s, delta)
        assert len(g.get_state(CFG).values["messages"]) == 3 * TURNS
        kept = list(g.get_state_history(CFG))
        wrong = [(h.config["configurable"]["checkpoint_id"], len(want[h.config["configurable"]["checkpoint_id"]]),
                  len(h.values.get("messages", []))) for h in kept
                 if [m.content for m in h.values.get("messages", [])] != want[h.config["configurable"]["checkpoint_id"]]]
        assert not wrong, f"kept checkpoints rebuild truncated states (id, want, got): {wrong}"
        out = g.invoke({"messages": [HumanMessage(content="next")]}, CFG)
        assert len(out["messages"]) == 3 * TURNS + 3
        return len(kept)


@pytest.mark.parametrize("keep_last", [1, 10])
def test_core_prune_keeps_an_old_delta_thread_whole_and_says_why(old_thread, tmp_path, keep_last):
    repo, want = _copy(old_thread, "delta", tmp_path)
    mgr = CheckpointManager(repo)
    run = run_id_for("t")
    before = len(mgr.list(run))
    plan = mgr.retention_plan(run, keep_last=keep_last)
    needed = [d for d in plan if d.keep and not any(r.startswith("keep-last") for r in d.reasons)]
    assert needed and all(any("earlier release" in r and "SnapstoreSaver.prune" in r for r in d.reasons)
                          for d in needed), [d.reasons for d in plan[:3]]
    assert mgr.prune(keep_last=keep_last) == []
    assert len(mgr.list(run)) == before
    mgr.close()
    _assert_full(repo, want)


def test_cli_prune_of_an_old_delta_thread_keeps_it_and_says_why(old_thread, tmp_path):
    repo, want = _copy(old_thread, "delta", tmp_path)
    r = CliRunner().invoke(cli, ["--repo", repo, "prune", "--keep-last", "1", "--dry-run", "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    why = [k["reason"] for k in json.loads(r.stdout)["kept"]]
    assert any("earlier release" in w for w in why), why
    r = CliRunner().invoke(cli, ["--repo", repo, "prune", "--keep-last", "1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    _assert_full(repo, want)


def test_saver_prune_of_an_old_delta_thread_keeps_the_chain(old_thread, tmp_path):
    repo, want = _copy(old_thread, "delta", tmp_path)
    with SnapstoreSaver(repo) as s:
        before = len(s.manager.list(run_id_for("t")))
        s.prune(["t"])
        after = len(s.manager.list(run_id_for("t")))
    assert 1 < after < before  # records went, the chain back to the snapshot stayed
    _assert_full(repo, want)


def test_an_old_thread_without_delta_channels_is_still_pruned(old_thread, tmp_path):
    repo, want = _copy(old_thread, "plain", tmp_path)
    with CheckpointManager(repo) as mgr:
        gone = mgr.prune(keep_last=2)
        assert gone and len(mgr.list(run_id_for("t"))) == 2
    with SnapstoreSaver(repo) as s:
        g = graph(s, False)
        assert len(g.get_state(CFG).values["messages"]) == 3 * TURNS
