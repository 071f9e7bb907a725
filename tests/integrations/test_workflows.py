"""The seed's workflow helpers (issue 10, deliverable 5): ResumableWorkflow, get_resume_point and
CheckpointedLoop (a checkpoint after every tool roundtrip). Local store on a temp dir and S3
through moto's HTTP server; a "restart" is a new manager on the same repository."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, InvalidInputError, InvalidMessageError
from snapstore.integrations.workflows import CheckpointedLoop, ResumableWorkflow, add_usage
from snapstore.stores import LocalStore
from tests.helpers import paths

ROOT = str(paths.ROOT)

@pytest.fixture(params=["local", "s3-http"])
def reopen(request, tmp_path, store_factory):
    """``reopen()`` -> a new manager on one repository (as a restarted process would open it)."""
    if request.param == "local":
        return lambda: CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    from tests.helpers.s3_fixtures import start_moto_server

    from snapstore.stores.s3 import S3Store
    bucket = store_factory("s3-http").bucket

    def make():
        s = S3Store(bucket, endpoint_url=start_moto_server(), region_name="us-east-1", addressing_style="path")
        request.addfinalizer(s.close)
        return CheckpointManager(s)
    return make


def test_resumable_workflow_resumes_after_a_crash(reopen):
    wf = ResumableWorkflow("wf-1", reopen())
    assert wf.try_resume() == 0 and not wf.is_resumed and wf.state is None
    for step in range(3):
        wf.checkpoint(step, agent_id="planner", status="running", state={"done": list(range(step + 1))},
                      metrics={"latency_s": 0.5 * step})
    # the process dies; a new one on another machine resumes
    mgr = reopen()
    wf2 = ResumableWorkflow("wf-1", mgr)
    assert wf2.try_resume() == 3 and wf2.is_resumed and wf2.last_step == 2
    assert wf2.state == {"done": [0, 1, 2]} and wf2.metrics == {"latency_s": 1.0}
    assert mgr.get_resume_point("wf-1") == (2, {"done": [0, 1, 2]}, {"latency_s": 1.0})
    step, cp = mgr.resume_point("wf-1")  # today's shape is kept
    assert step == 2 and cp.agent_id == "planner" and cp.status == "running"
    wf2.checkpoint(3, agent_id="planner", status="completed", state={"done": [0, 1, 2, 3]})
    assert reopen().get_resume_point("wf-1")[0] == 3
    # the first process, still alive, cannot overwrite what the second one saved
    with pytest.raises(ConflictError):
        wf.checkpoint(3, state={"stale": True})
    assert reopen().get_resume_point("nothing") is None


def test_resumable_workflow_bad_input(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    with pytest.raises(InvalidInputError):
        ResumableWorkflow("", mgr)
    with pytest.raises(InvalidInputError):
        ResumableWorkflow("w", "not a manager")
    wf = ResumableWorkflow("w", mgr)
    with pytest.raises(InvalidMessageError):
        wf.checkpoint(-1)
    with pytest.raises(InvalidMessageError):
        wf.checkpoint(0, metrics={"x": "slow"})
    assert mgr.latest("w") is None  # nothing stored


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_loop_saves_after_every_tool_roundtrip(reopen):
    mgr = reopen()
    loop = CheckpointedLoop(mgr, "agent-run", [{"role": "user", "content": "add 2 and 3, then double it"}],
                            session_state={"cwd": "/repo"}, agent_id="calc")
    assert loop.record({"role": "assistant", "content": None,
                        "tool_calls": [_call("c1", "add", {"a": 2, "b": 3}), _call("c2", "noop", {})]},
                       usage={"prompt_tokens": 100, "completion_tokens": 10,
                              "prompt_tokens_details": {"cached_tokens": 50}}) is None
    assert loop.record({"role": "tool", "tool_call_id": "c1", "content": "5"}) is None  # c2 still open
    with pytest.raises(InvalidInputError):
        loop.record({"role": "user", "content": "too early"})
    first = loop.record({"role": "tool", "tool_call_id": "c2", "content": ""})
    assert first is not None
    cp = reopen().latest("agent-run")
    assert cp.id == first and cp.step == 1 and len(cp.messages) == 4 and cp.agent_id == "calc"
    assert cp.token_usage == {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 50}}
    assert cp.session_state == {"cwd": "/repo"}
    loop.state = {"cwd": "/repo", "total": 5}
    loop.record({"role": "assistant", "content": None, "tool_calls": [_call("c3", "mul", {"a": 5, "b": 2})]},
                usage={"prompt_tokens": 130, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 100}})
    loop.record({"role": "tool", "tool_call_id": "c3", "content": "10"})
    cp = reopen().latest("agent-run")
    assert cp.step == 2 and cp.token_usage == {"prompt_tokens": 230, "completion_tokens": 18,
                                                "prompt_tokens_details": {"cached_tokens": 150}}
    assert cp.session_state == {"cwd": "/repo", "total": 5}
    assert [c.step for c in reopen().list("agent-run")] == [2, 1]  # one checkpoint per roundtrip
    with pytest.raises(InvalidInputError):
        loop.record({"role": "tool", "tool_call_id": "nope", "content": "x"})


class _ScriptedClient:
    """Stands in for ``client.chat.completions.create``: canned replies, records what it saw."""

    def __init__(self, replies):
        self.replies, self.seen = list(replies), []

    def __call__(self, messages):
        self.seen.append(len(messages))
        return self.replies.pop(0)


def _replies():
    return [({"role": "assistant", "content": None, "tool_calls": [_call("c1", "add", {"a": 2, "b": 3})]},
             {"prompt_tokens": 50, "completion_tokens": 5}),
            ({"role": "assistant", "content": None, "tool_calls": [_call("c2", "mul", {"a": 5, "b": 2})]},
             {"prompt_tokens": 70, "completion_tokens": 5}),
            ({"role": "assistant", "content": "10"}, {"prompt_tokens": 90, "completion_tokens": 2})]


TOOLS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}


def test_loop_run_and_resume_in_another_process(tmp_path):
    root = tmp_path / "repo"
    loop = CheckpointedLoop(CheckpointManager(LocalStore(root, fsync=False)), "r",
                            [{"role": "user", "content": "(2+3)*2?"}])
    client = _ScriptedClient(_replies()[:1])  # the model "crashes" after the first roundtrip
    with pytest.raises(IndexError):
        loop.run(client, TOOLS)
    # a new process resumes from the first roundtrip's checkpoint and finishes
    code = f"""
import json
from snapstore import CheckpointManager
from snapstore.stores import LocalStore
from snapstore.integrations.workflows import CheckpointedLoop
loop = CheckpointedLoop(CheckpointManager(LocalStore({str(root)!r}, fsync=False)), "r")
assert loop.resume() and loop.roundtrip == 1
replies = json.loads({json.dumps(json.dumps(_replies()[1:]))})
final = loop.run(lambda m: (lambda r: (r[0], r[1]))(replies.pop(0)), {{"add": lambda a, b: a + b, "mul": lambda a, b: a * b}})
print(json.dumps([final, loop.roundtrip, loop.token_usage]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    final, roundtrip, usage = json.loads(out.stdout)
    assert final == {"role": "assistant", "content": "10"} and roundtrip == 2
    assert usage == {"prompt_tokens": 210, "completion_tokens": 12}
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    cp = mgr.latest("r")
    assert cp.status == "completed" and cp.step == 2 and len(cp.messages) == 6
    assert [m.get("content") for m in cp.messages if m["role"] == "tool"] == ["5", "10"]
    assert [(c.step, c.status) for c in mgr.list("r")] == [(2, "completed"), (2, "running"), (1, "running")]


def test_loop_run_accepts_openai_sdk_objects(tmp_path):
    pytest.importorskip("openai")
    from openai.types.chat import ChatCompletion

    def completion(msg, usage):
        return ChatCompletion.model_validate({
            "id": "x", "object": "chat.completion", "created": 0, "model": "fake",
            "choices": [{"index": 0, "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop",
                         "message": msg}],
            "usage": dict(usage, total_tokens=usage["prompt_tokens"] + usage["completion_tokens"])})
    replies = [completion(*r) for r in _replies()]
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    loop = CheckpointedLoop(mgr, "sdk", [{"role": "user", "content": "(2+3)*2?"}])
    final = loop.run(lambda m: replies.pop(0), TOOLS)
    assert final["content"] == "10" and len(loop.checkpoint_ids) == 3
    assert mgr.latest("sdk").token_usage["total_tokens"] == 222


def test_loop_run_bad_tools(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "r", fsync=False))
    loop = CheckpointedLoop(mgr, "bad", [{"role": "user", "content": "?"}])
    with pytest.raises(InvalidInputError, match="unknown tool"):
        loop.run(_ScriptedClient([({"role": "assistant", "tool_calls": [_call("c1", "rm", {})]}, None)]), TOOLS)
    loop = CheckpointedLoop(mgr, "loop", [{"role": "user", "content": "?"}])
    endless = _ScriptedClient([({"role": "assistant", "tool_calls": [_call(f"c{i}", "add", {"a": 1, "b": i})]}, None)
                               for i in range(5)])
    with pytest.raises(InvalidInputError, match="more than 3"):
        loop.run(endless, TOOLS, max_roundtrips=3)
    assert mgr.latest("loop").step == 3
    with pytest.raises(InvalidMessageError):
        add_usage({}, {"prompt_tokens": "many"})
    assert add_usage({"a": 1}, {"a": 2, "b": None, "c": {"d": 1}}) == {"a": 3, "c": {"d": 1}}


def test_readme_example_runs(tmp_path):
    import re
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("\n## Workflow helpers\n", 1)[1].split("\n## ", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(re.findall(r"```python\n(.*?)```", section, flags=re.S)[0])
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines() == ["(2, {'done': 2}, {'latency_s': 0.4})",
                                               "1 {'prompt_tokens': 40, 'completion_tokens': 9} 3"]


def test_loop_run_again_on_a_finished_loop_adds_no_second_answer(tmp_path):
    """Issue 20: running a finished loop again (same object, or resumed in a new process) returns
    the final answer without calling the model or saving another checkpoint."""
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    loop = CheckpointedLoop(mgr, "r", [{"role": "user", "content": "(2+3)*2?"}])
    assert loop.run(_ScriptedClient(_replies()), TOOLS) == {"role": "assistant", "content": "10"}
    before = [c.id for c in mgr.list("r")]
    again = _ScriptedClient([({"role": "assistant", "content": "10 (again)"}, None)])
    assert loop.run(again, TOOLS) == {"role": "assistant", "content": "10"}
    resumed = CheckpointedLoop(CheckpointManager(LocalStore(root, fsync=False)), "r")
    assert resumed.resume()
    assert resumed.run(again, TOOLS) == {"role": "assistant", "content": "10"}
    assert again.seen == [] and [c.id for c in mgr.list("r")] == before
    cp = mgr.latest("r")
    assert [m["role"] for m in cp.messages].count("assistant") == 3 and cp.messages[-1]["content"] == "10"
    # a new user message continues the conversation: the model is called again
    resumed.record({"role": "user", "content": "and times 3?"})
    assert resumed.run(_ScriptedClient([({"role": "assistant", "content": "30"}, None)]), TOOLS)["content"] == "30"
    assert mgr.latest("r").messages[-2:] == [{"role": "user", "content": "and times 3?"},
                                             {"role": "assistant", "content": "30"}]
