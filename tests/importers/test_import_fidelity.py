"""Imports that keep everything and a CLI without surprises (issue 20): integers of any size, duplicate
keys, truncated JSON, the size ratio, tau2-bench envelopes, OpenHands V0 events, explicit format
families, Ctrl-C during an import, ``snapstore diff`` and a finished ``CheckpointedLoop``."""

from __future__ import annotations

import contextlib
import json
import sys

import pytest
from click.testing import CliRunner

from tests.helpers.shared_data import SHARED

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.errors import InvalidInputError
from snapstore.format.codec import dumps_exact, loads_exact
from snapstore.importers import load_trajectory
from tests.helpers import paths

HUGE = 7 * 10**4999 + 123  # 5,000 digits: past Python's default 4,300-digit str limit


@pytest.fixture
def repo(tmp_path):
    return str(tmp_path / "repo")


def run(repo, *args, ok=True):
    result = CliRunner().invoke(cli, ["--repo", repo, *args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def one_line_error(result, code, *contains):
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("snapstore: error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    for text in contains:
        assert text in lines[0], lines[0]
    return lines[0]


@contextlib.contextmanager
def any_int_digits():
    """The test's own lift of the digit limit (to build and read expected texts)."""
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(saved)


def _huge_text() -> str:
    with any_int_digits():
        return str(HUGE)


# ------------------------------------------------------------------------------------------------
# integers of any size

def test_api_saves_and_restores_a_5000_digit_integer_everywhere(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"), create=True)
    mgr.save("run", [{"role": "user", "content": "n", "n": HUGE}], session_state={"n": HUGE, "pad": "x" * 9000},
             metadata={"n": HUGE}, metrics={"n": HUGE})
    again = CheckpointManager(str(tmp_path / "r"))
    cp = again.latest("run")
    assert cp.messages[0]["n"] == HUGE and cp.session_state["n"] == HUGE
    assert cp.metadata["n"] == HUGE and cp.metrics["n"] == HUGE
    assert sys.get_int_max_str_digits() == 4300  # the process-wide limit is back as it was


def test_exact_codec_round_trips_a_5000_digit_integer():
    data = dumps_exact({"n": HUGE, "m": -HUGE})
    assert loads_exact(data) == {"n": HUGE, "m": -HUGE}
    assert data.decode() == '{"n":%s,"m":-%s}' % (_huge_text(), _huge_text())


def test_import_and_export_a_5000_digit_integer(repo, tmp_path):
    text = _huge_text()
    path = tmp_path / "big.json"
    path.write_text('[{"role": "user", "content": "count", "n": %s}, {"role": "assistant", "content": "ok"}]' % text)
    _, convs = load_trajectory(path)
    assert convs[0].messages[0]["n"] == HUGE
    run(repo, "import", str(path), "-q")
    out = run(repo, "export", "big").stdout
    assert text in out
    with any_int_digits():
        assert json.loads(out)[0]["n"] == HUGE


# ------------------------------------------------------------------------------------------------
# bad JSON: duplicate keys, truncation

def test_duplicate_key_is_refused_naming_key_and_place(repo, tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "x": {"k": 1, "k": 2}}]')
    with pytest.raises(InvalidInputError, match=r"item 1: x: the object holds the key 'k' twice"):
        load_trajectory(path)
    one_line_error(run(repo, "import", str(path), ok=False), 2, "item 1: x", "'k' twice", "nothing was imported")


def test_duplicate_key_in_json_lines_names_the_line(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a"}]}\n'
                    '{"messages": [{"role": "user", "content": "a", "content": "b"}]}\n')
    with pytest.raises(InvalidInputError, match=r"line 2: messages\[0\]: the object holds the key 'content' twice"):
        load_trajectory(path)


def test_truncated_json_error_is_a_whole_sentence(repo, tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "unfinish')
    line = one_line_error(run(repo, "import", str(path), ok=False), 2, "Unterminated string starting there",
                          "line 1 column")
    assert not line.rstrip().endswith("starting at"), line
    assert "truncated" in line
    path.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant"')
    one_line_error(run(repo, "import", str(path), ok=False), 2, "line 1 column", "truncated")


# ------------------------------------------------------------------------------------------------
# the size ratio

def test_tiny_import_says_larger_not_smaller(repo, tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text('[{"role": "user", "content": "hi"}]')
    err = run(repo, "import", str(path)).stderr
    assert "smaller" not in err and "x larger" in err, err
    ratio = float(err.split("x larger")[0].rsplit("(", 1)[1])
    assert ratio > 5


def test_real_import_still_says_smaller(repo):
    path = SHARED / "openhands-oas-metrics-loop.json"
    if not path.is_file():
        pytest.skip(f"shared trajectory {path} not found (set SNAPSTORE_SHARED_DATA)")
    err = run(repo, "import", str(path)).stderr
    assert "x smaller)" in err and "larger" not in err, err


# ------------------------------------------------------------------------------------------------
# tau2-bench results: the file's info and tasks come back
#
# The shared set has no tau2-bench or OpenHands V0 file (SOURCES.md: tau-bench v1 and OpenHands V1
# only), so these files are built here in the real formats: tau2-bench's ``Results`` object
# (``data/tau2/results`` of sierra-research/tau2-bench) and OpenHands V0's event stream
# (``trajectory`` export / ``history`` of V0 evaluation output).

def tau2_results(n: int = 3) -> dict:
    """A tau2-bench results object with ``n`` simulations (one per task)."""
    sims = []
    for i in range(n):
        sims.append({
            "id": f"9f1c-{i}", "task_id": str(i), "timestamp": "2025-10-31T07:16:27", "duration": 12.5,
            "termination_reason": "user_stop", "agent_cost": 0.1, "user_cost": 0.01,
            "reward_info": {"reward": 1.0, "db_check": {"db_match": True, "db_reward": 1.0}},
            "messages": [
                {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None, "turn_idx": 0},
                {"role": "user", "content": f"I want to exchange order #W{i}.", "tool_calls": None, "turn_idx": 1},
                {"role": "assistant", "content": None, "turn_idx": 2, "tool_calls": [
                    {"id": f"toolu_{i}", "name": "get_order_details", "arguments": {"order_id": f"#W{i}"},
                     "requestor": "assistant"}]},
                {"id": f"toolu_{i}", "role": "tool", "content": "{\"status\": \"delivered\"}", "requestor": "assistant",
                 "error": False, "turn_idx": 3},
                {"role": "assistant", "content": "It can be exchanged.", "tool_calls": None, "turn_idx": 4},
                {"role": "user", "content": "###STOP###", "turn_idx": 5}],
            "trial": 0, "seed": 300})
    return {"timestamp": "2025-10-31T07:16:27.854362",
            "info": {"git_commit": "8d005b0", "num_trials": 1, "max_steps": 200,
                     "agent_info": {"implementation": "llm_agent", "llm": "claude-sonnet-4-5"},
                     "environment_info": {"domain_name": "retail", "policy": "# Retail agent policy\n" * 50}},
            "tasks": [{"id": str(i), "user_scenario": {"instructions": {"reason_for_call": f"exchange #W{i} " * 40}},
                       "evaluation_criteria": {"actions": [{"action_id": f"{i}_0", "name": "get_order_details",
                                                            "arguments": {"order_id": f"#W{i}"}}]}}
                      for i in range(n)],
            "simulations": sims}


def test_tau2_import_keeps_info_and_tasks(repo, tmp_path):
    doc = tau2_results()
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps(doc, indent=2))
    fmt, convs = load_trajectory(path)
    assert fmt == "taubench" and [c.name for c in convs] == ["task0-trial0", "task1-trial0", "task2-trial0"]
    assert convs[1].messages == doc["simulations"][1]["messages"]
    err = run(repo, "import", str(path)).stderr
    assert "info" in err and "tasks" in err, err  # the summary names what was kept
    for i in range(3):
        record = json.loads(run(repo, "export", f"tau2/task{i}-trial0", "--record").stdout)
        assert list(record) == ["timestamp", "info", "tasks", "simulations"]
        assert record["info"] == doc["info"] and record["tasks"] == doc["tasks"]
        assert record["timestamp"] == doc["timestamp"]
        assert record["simulations"] == [doc["simulations"][i]]
    dry = run(repo, "import", str(path), "-n").stdout
    assert "info, tasks" in dry


def test_tau2_whole_file_rebuilds_from_the_records(repo, tmp_path):
    doc = tau2_results(4)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    run(repo, "import", str(path), "-q")
    records = [json.loads(run(repo, "export", f"t/task{i}-trial0", "--record").stdout) for i in range(4)]
    rebuilt = dict(records[0], simulations=[r["simulations"][0] for r in records])
    assert json.dumps(rebuilt) == json.dumps(doc)


def test_explicit_taubench_accepts_tau2_and_tau_bench(tmp_path):
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps(tau2_results(2)))
    fmt, convs = load_trajectory(path, format="taubench")
    assert fmt == "taubench" and len(convs) == 2
    v1 = SHARED / "taubench-gpt4o-airline.json"
    if v1.is_file():
        assert len(load_trajectory(v1, format="taubench")[1]) == 200


def test_records_inside_an_object_keep_the_fields_around_them(tmp_path):
    """The shape reader too: ``{"meta": ..., "results": [{"messages": [...]}, ...]}`` keeps ``meta``."""
    from snapstore.importers import rebuild_record

    doc = {"meta": {"model": "m", "notes": "x" * 100},
           "results": [{"id": f"r{i}", "conversation": {"messages": [{"role": "user", "content": "q"},
                                                                        {"role": "assistant", "content": str(i)}]}}
                       for i in range(2)]}
    path = tmp_path / "nested.json"
    path.write_text(json.dumps(doc))
    _, convs = load_trajectory(path)
    record = rebuild_record(json.loads(json.dumps(convs[1].extras())), convs[1].messages)
    assert record == {"meta": doc["meta"], "results": [doc["results"][1]]}
    assert convs[1].where == "results[1]: conversation.messages"


# ------------------------------------------------------------------------------------------------
# OpenHands V0 event streams: chat messages stored, events kept

def _v0_response(rid: str, content: str, calls: list) -> dict:
    return {"id": rid, "model": "claude-3-7-sonnet", "object": "chat.completion",
            "choices": [{"finish_reason": "tool_calls", "index": 0, "message": {
                "content": content, "role": "assistant", "function_call": None,
                "tool_calls": [{"index": k, "function": {"arguments": json.dumps(a), "name": n}, "id": cid,
                                "type": "function"} for k, (cid, n, a) in enumerate(calls)]}}],
            "usage": {"completion_tokens": 10, "prompt_tokens": 100, "total_tokens": 110}}


def openhands_v0_events() -> list:
    """An OpenHands V0 event stream: system prompt, user task, recall, state changes, one model
    response with two tool calls (two actions, two observations), a null observation, finish."""
    r1 = _v0_response("chatcmpl-1", "Let me look.", [("toolu_1", "execute_bash", {"command": "ls"}),
                                                      ("toolu_2", "str_replace_editor", {"command": "view",
                                                                                         "path": "/w/a.py"})])
    r2 = _v0_response("chatcmpl-2", "Done.", [("toolu_3", "finish", {"message": "All done"})])

    def meta(cid, fn, r, n):
        return {"function_name": fn, "tool_call_id": cid, "model_response": r, "total_calls_in_response": n}

    state = {"observation": "agent_state_changed", "content": "", "source": "environment", "message": ""}
    return [
        {"id": 0, "source": "agent", "message": "You are OpenHands agent", "action": "system",
         "args": {"content": "You are OpenHands agent", "tools": [], "agent_class": "CodeActAgent"}},
        {"id": 1, "source": "user", "message": "Fix the bug in a.py", "action": "message",
         "args": {"content": "Fix the bug in a.py", "image_urls": None, "wait_for_response": False}},
        {"id": 2, "source": "user", "message": "Retrieving content", "action": "recall",
         "args": {"recall_type": "workspace_context", "query": "Fix the bug in a.py"}},
        dict(state, id=3, extras={"agent_state": "running", "reason": ""}),
        {"id": 4, "source": "environment", "message": "Added workspace context", "cause": 2, "observation": "recall",
         "content": "Added workspace context", "extras": {"recall_type": "workspace_context"}},
        {"id": 5, "source": "agent", "message": "Running command: ls", "action": "run",
         "tool_call_metadata": meta("toolu_1", "execute_bash", r1, 2),
         "args": {"command": "ls", "is_input": False, "thought": "Let me look."}},
        {"id": 6, "source": "agent", "message": "Reading file: /w/a.py", "action": "read",
         "tool_call_metadata": meta("toolu_2", "str_replace_editor", r1, 2), "args": {"path": "/w/a.py", "thought": ""}},
        {"id": 7, "source": "agent", "message": "Command `ls` executed", "cause": 5, "observation": "run",
         "tool_call_metadata": meta("toolu_1", "execute_bash", r1, 2), "content": "a.py\n",
         "extras": {"command": "ls", "metadata": {"exit_code": 0}}},
        {"id": 8, "source": "agent", "message": "I read the file /w/a.py.", "cause": 6, "observation": "read",
         "tool_call_metadata": meta("toolu_2", "str_replace_editor", r1, 2), "content": "print(1)\n",
         "extras": {"path": "/w/a.py"}},
        {"id": 9, "source": "environment", "message": "No observation", "cause": 8, "observation": "null",
         "content": "", "extras": {}},
        {"id": 10, "source": "agent", "message": "All done", "action": "finish",
         "tool_call_metadata": meta("toolu_3", "finish", r2, 1),
         "args": {"final_thought": "All done", "task_completed": "true", "thought": "Done."}},
        dict(state, id=11, extras={"agent_state": "finished", "reason": ""}),
    ]


def test_openhands_v0_stores_chat_messages_and_keeps_events(repo, tmp_path):
    events = openhands_v0_events()
    path = tmp_path / "oh-v0.json"
    path.write_text(json.dumps(events, indent=1))
    for fmt in (None, "openhands"):  # detected, and named explicitly
        name, convs = load_trajectory(path, format=fmt)
        assert name == "openhands"
        msgs = convs[0].messages
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant"]
        r1 = events[5]["tool_call_metadata"]["model_response"]["choices"][0]["message"]
        assert msgs[2] == r1  # the model response's assistant message, once for its two actions
        assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_1", "name": "execute_bash", "content": "a.py\n"}
        assert msgs[4]["tool_call_id"] == "toolu_2"
        assert [len(c) for c in convs[0].checkpoints] == [5, 6]
    run(repo, "import", str(path), "-q")
    assert json.loads(run(repo, "export", "oh-v0").stdout) == msgs
    assert json.dumps(json.loads(run(repo, "export", "oh-v0", "--record").stdout)) == json.dumps(events)


def test_openhands_v0_episode_lines(repo, tmp_path):
    """V0 evaluation output (JSON Lines of episodes whose ``history`` is V0 events) is normalised too."""
    events = openhands_v0_events()
    path = tmp_path / "output.jsonl"
    lines = [{"instance_id": f"repo__x-{i}", "instruction": "Fix the bug", "history": events,
              "metrics": {"accumulated_cost": 0.5}} for i in range(2)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fmt, convs = load_trajectory(path, format="openhands")
    assert fmt == "openhands" and [c.name for c in convs] == ["repo__x-0", "repo__x-1"]
    assert [m["role"] for m in convs[0].messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    run(repo, "import", str(path), "-q")
    assert json.loads(run(repo, "export", "output/repo__x-1", "--record").stdout) == lines[1]


def test_explicit_events_format_still_stores_raw_events(tmp_path):
    path = tmp_path / "oh-v0.json"
    path.write_text(json.dumps(openhands_v0_events()))
    fmt, convs = load_trajectory(path, format="events")
    assert fmt == "events" and convs[0].messages == openhands_v0_events()


def test_explicit_openhands_on_the_shared_v1_files():
    for name in ("openhands-oas-metrics-loop.json", "openhands-oas-gpt4o-critic.jsonl"):
        path = SHARED / name
        if not path.is_file():
            pytest.skip(f"shared trajectory {path} not found (set SNAPSTORE_SHARED_DATA)")
        assert load_trajectory(path, format="openhands")[1][0].messages == load_trajectory(path)[1][0].messages


# ------------------------------------------------------------------------------------------------
# Ctrl-C during an import

def test_ctrl_c_during_import_says_what_was_saved_and_a_rerun_resumes(tmp_path):
    import os
    import signal
    import subprocess
    import time

    items = [{"messages": [m for t in range(8) for m in ({"role": "user", "content": f"q{i}.{t} " * 30},
                                                            {"role": "assistant", "content": f"a{i}.{t} " * 30})]}
             for i in range(150)]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    repo = tmp_path / "repo"
    root = paths.ROOT
    env = dict(os.environ, PYTHONPATH=str(root))
    cmd = [sys.executable, "-m", "snapstore", "--repo", str(repo), "import", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some checkpoints are saved
        if repo.is_dir() and sum(len(files) for _, _, files in os.walk(repo)) > 40:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    err = err.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted:" in err and "checkpoints saved" in err and "again to resume" in err, err
    saved = int(err.split("interrupted: ")[1].split(" checkpoint")[0])
    assert 0 < saved < 150 * 8
    again = subprocess.run(cmd + ["--json"], capture_output=True, env=env, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr.decode()
    summary = json.loads(again.stdout)
    assert summary["skipped"] >= saved and summary["saved"] + summary["skipped"] == 150 * 8
    mgr = CheckpointManager(str(repo))
    assert mgr.latest("many/0149").messages == items[149]["messages"]


# ------------------------------------------------------------------------------------------------
# snapstore diff

def test_diff_command_shows_what_changed_between_checkpoints(repo):
    from snapstore.server.service import Service

    mgr = CheckpointManager(repo, create=True)
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    a = mgr.save("r", base)
    b = mgr.save("r", [base[0], {"role": "assistant", "content": "hello!"}, {"role": "user", "content": "bye"}])
    out = run(repo, "diff", "r", a, b).stdout
    assert f"{a} (2 messages) -> {b} (3 messages)" in out
    assert "= 1 message equal" in out
    assert '- FROM [1] {"role": "assistant", "content": "hello"}' in out
    assert '+ TO [1] {"role": "assistant", "content": "hello!"}' in out and '+ TO [2]' in out
    assert "2 messages only in TO (+), 1 message only in FROM (-)" in out
    assert run(repo, "diff", "r", a).stdout == out  # TO defaults to the latest
    d = json.loads(run(repo, "diff", "r", a, b, "--json").stdout)
    assert d["ops"] == Service(mgr).diff("r", a, b)["ops"]  # the service's own computation
    assert "identical message lists" in run(repo, "diff", "r", b, b).stdout
    one_line_error(run(repo, "diff", "r", "nope", ok=False), 1, "'nope'")
    one_line_error(run(repo, "diff", "nope", a, ok=False), 1, "not found")
