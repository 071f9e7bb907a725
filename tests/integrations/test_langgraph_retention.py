"""The core's retention on LangGraph DeltaChannel threads (issue 27, item 2): every retention path
(``CheckpointManager.prune`` with keep_last / older_than / keep_within, ``max_checkpoints``, the
CLI's ``prune``, the service's ``POST /prune``) keeps what the kept checkpoints need (their
DeltaChannel delta chain back to the nearest snapshot, declared by the saver in each record's
``snapstore.needs`` metadata), so a fresh saver rebuilds every kept checkpoint's full state, and
says why it kept them ("needed by <id> (...)"). Real graphs on a local store in a temp dir."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.channels.delta")

from click.testing import CliRunner  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.cli import cli  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, run_id_for  # noqa: E402
from snapstore.manager import retention  # noqa: E402
from snapstore.manager.retention import Policy, plan  # noqa: E402

NEEDS_KEY = "snapstore.needs"  # the documented key (docs/format.md §21)

CFG = {"configurable": {"thread_id": "t"}}
RUN = run_id_for("t")


def _reducer(state, writes):
    for w in writes:
        state = add_messages(state, w)
    return state


def _graph(saver, every: int):
    S = TypedDict("S", {"messages": Annotated[list, DeltaChannel(_reducer, snapshot_frequency=every)]})
    g = StateGraph(S)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=f"reply {len(s['messages'])}")]})
    g.add_node("tool", lambda s: {"messages": [AIMessage(content=f"tool {len(s['messages'])}")]})
    g.add_edge(START, "model")
    g.add_edge("model", "tool")
    return g.compile(checkpointer=saver)


def _turns(repo, every, n, start=0, **opts):
    with SnapstoreSaver(repo, **opts) as s:
        g = _graph(s, every)
        for i in range(start, start + n):
            g.invoke({"messages": [HumanMessage(content=f"q{i}")]}, CFG)
        return {h.config["configurable"]["checkpoint_id"]: h.values.get("messages", [])
                for h in g.get_state_history(CFG)}


def _assert_full(repo, every, want, turns):
    """A fresh saver: the latest state holds every message, every kept checkpoint rebuilds
    exactly the state it had, and the next turn continues from the full state."""
    with SnapstoreSaver(repo) as s:
        g = _graph(s, every)
        assert len(g.get_state(CFG).values["messages"]) == 3 * turns
        kept = list(g.get_state_history(CFG))
        assert kept
        wrong = [(h.config["configurable"]["checkpoint_id"], len(want[h.config["configurable"]["checkpoint_id"]]),
                  len(h.values.get("messages", []))) for h in kept
                 if h.values.get("messages", []) != want[h.config["configurable"]["checkpoint_id"]]]
        assert not wrong, f"kept checkpoints rebuild truncated states (id, want, got): {wrong}"
        out = g.invoke({"messages": [HumanMessage(content="next")]}, CFG)
        assert len(out["messages"]) == 3 * turns + 3
        return len(kept)


@pytest.mark.parametrize("every", [4, 50], ids=["snapshot-every-4", "no-snapshot-yet"])
@pytest.mark.parametrize("keep_last", [10, 1])
def test_api_prune_keep_last_keeps_the_delta_chain(tmp_path, every, keep_last):
    repo = str(tmp_path / "repo")
    want = _turns(repo, every, 10)
    mgr = CheckpointManager(repo)
    plan_ = mgr.retention_plan(RUN, keep_last=keep_last)
    needed = [d for d in plan_ if d.keep and any(r.startswith("needed by ") for r in d.reasons)]
    assert needed, "nothing kept for the delta chain"
    assert all("DeltaChannel delta chain" in r for d in needed for r in d.reasons if r.startswith("needed by"))
    gone = mgr.prune(keep_last=keep_last)
    assert {s.id for s in gone} == {d.checkpoint.id for d in plan_ if not d.keep}
    if every == 4:
        assert gone, "a snapshot every 4 updates: the records before it can go"
    mgr.close()
    _assert_full(repo, every, want, 10)


@pytest.mark.parametrize("rule", ["older_than", "keep_within"])
def test_api_prune_by_age_keeps_the_delta_chain(tmp_path, rule):
    """Age by an injected wall clock (it was a 1.6 s sleep against a 1 s rule: a slow machine made
    the newest turns old too): the first 6 turns at T, the last 2 at T + 1 h, pruned at T + 1 h."""
    repo = str(tmp_path / "repo")
    t = [datetime(2026, 1, 1, tzinfo=timezone.utc)]
    clock = {"wall_clock": lambda: t[0]}
    _turns(repo, 4, 6, **clock)
    t[0] += timedelta(hours=1)
    want = _turns(repo, 4, 2, start=6, **clock)
    with CheckpointManager(repo, **clock) as mgr:
        assert {c.created_at for c in mgr.list(RUN)} == {t[0], t[0] - timedelta(hours=1)}
        gone = mgr.prune(run_id=RUN, **{rule: 60.0})
        assert gone  # the old turns before the snapshot go
        assert {c.created_at for c in gone} == {t[0] - timedelta(hours=1)}
    _assert_full(repo, 4, want, 8)


def test_max_checkpoints_keeps_the_delta_chain(tmp_path):
    repo = str(tmp_path / "repo")
    want = _turns(repo, 6, 10, max_checkpoints=4)
    with CheckpointManager(repo) as mgr:
        n = len(mgr.list(RUN))
        assert 4 < n < 70, n  # the chain is kept beyond max_checkpoints, older records went
    _assert_full(repo, 6, want, 10)


def test_cli_prune_keeps_the_delta_chain_and_says_why(tmp_path):
    repo = str(tmp_path / "repo")
    want = _turns(repo, 4, 10)
    r = CliRunner().invoke(cli, ["--repo", repo, "prune", "--keep-last", "1", "--dry-run", "--json"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    why = [k["reason"] for k in out["kept"]]
    assert any("needed by" in w and "DeltaChannel" in w for w in why), why
    r = CliRunner().invoke(cli, ["--repo", repo, "prune", "--keep-last", "1"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "deleted" in r.stdout
    # the plain output says why more was kept than the policy names (not only --dry-run)
    assert "matched no keep rule but are needed by a kept one" in r.stdout and "DeltaChannel" in r.stdout, r.stdout
    _assert_full(repo, 4, want, 10)
    r = CliRunner().invoke(cli, ["--repo", repo, "prune", "--older-than", "0", "--yes"], catch_exceptions=False)
    assert r.exit_code == 0, r.output  # nothing kept: nothing needed, the thread goes as asked


def test_service_prune_keeps_the_delta_chain(tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.helpers.server_fixtures import TOKEN, auth, running_server
    from snapstore.server import ServerSettings, create_app

    repo = str(tmp_path / "repo")
    want = _turns(repo, 4, 10)
    app = create_app(repo, ServerSettings(token=TOKEN))
    with running_server(app) as url, httpx.Client(base_url=url, headers=auth(), timeout=30) as c:
        r = c.post("/prune", json={"keepLast": 2})
        assert r.status_code == 200, r.text
        assert r.json()["deleted"]
        kept = r.json().get("keptAsNeeded")
        assert kept and any("needed by" in why for k in kept for why in k["reasons"]), kept
    _assert_full(repo, 4, want, 10)


def _summ(i, seq, md=None):
    from datetime import datetime, timezone

    from snapstore.manager.checkpoint import CheckpointSummary
    return CheckpointSummary(f"c{i}", "r", seq, None, None, None, None, None, md,
                             datetime(2026, 1, 1, tzinfo=timezone.utc), None, 0, 0)


def test_plan_honours_needs_transitively_and_malformed_keeps_more():
    assert getattr(retention, "NEEDS_KEY", None) == NEEDS_KEY
    # newest first: c5 needs from 3; c3 needs from 1 -> c4, c3, c2, c1 kept; c0 goes
    cps = [_summ(5, 5, {NEEDS_KEY: {"from": 3, "by": "x chain"}}), _summ(4, 4), _summ(3, 3, {NEEDS_KEY: {"from": 1}}),
           _summ(2, 2), _summ(1, 1), _summ(0, 0)]
    d = plan(cps, Policy.make(keep_last=1))
    assert [x.keep for x in d] == [True, True, True, True, True, False]
    assert d[1].reasons == ["needed by c5 (x chain)"]
    assert d[3].reasons == ["needed by c3 (declared dependency)"]
    bad = plan([_summ(2, 2, {NEEDS_KEY: "everything?"}), _summ(1, 1), _summ(0, 0)], Policy.make(keep_last=1))
    assert all(x.keep for x in bad) and "malformed" in bad[1].reasons[0]
    # a checkpoint no rule keeps needs nothing kept
    assert [x.keep for x in plan([_summ(1, 1), _summ(0, 0, {NEEDS_KEY: {"from": 0}})], Policy.make(keep_last=1))] \
        == [True, False]
