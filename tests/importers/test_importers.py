"""Tests for snapstore.importers: the shared real trajectories, hand-made inputs and bad input."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.shared_data import shared_data_dir

from snapstore.errors import InvalidInputError
from snapstore.importers import FORMATS, Conversation, default_run_id, load_trajectory, rebuild_record
from tests.helpers import paths

SHARED = shared_data_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None,
    reason="shared trajectories not found (expected ../shared/data/trajectories next to the project, "
    "or set SNAPSTORE_SHARED_DATA)",
)
EXAMPLE = paths.ROOT / "examples" / "demo-run.json"

_cache: dict = {}


def load(name: str):
    """load_trajectory on a shared file, memoised (the tests only read the result)."""
    if name not in _cache:
        _cache[name] = load_trajectory(SHARED / name)
    return _cache[name]


def raw(name: str):
    """The shared file parsed independently with plain json (JSON Lines -> list of records)."""
    key = ("raw", name)
    if key not in _cache:
        text = (SHARED / name).read_text(encoding="utf-8")
        if name.endswith(".jsonl"):
            _cache[key] = [json.loads(line) for line in text.split("\n") if line.strip()]
        else:
            _cache[key] = json.loads(text)
    return _cache[key]


def dumps(value) -> str:
    """Exact serialisation, key order included: equal strings means no field dropped or reordered."""
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def assert_growing_prefixes(conv: Conversation) -> None:
    cps = conv.checkpoints
    for earlier, later in zip(cps, cps[1:]):
        assert len(later) > len(earlier)
        assert later[: len(earlier)] == earlier


# Per shared file: (format, conversations, total checkpoints, messages in all final histories).
EXPECTED = {
    "sweagent-marshmallow1867-fcreplace.traj": ("sweagent", 1, 14, 28),
    "sweagent-pydicom1458-gpt4.traj": ("sweagent", 1, 12, 26),
    "sweagent-humanevalfix0.traj": ("sweagent", 1, 5, 11),
    "sweagent-ctf-babytimecapsule.traj": ("sweagent", 1, 9, 19),
    "minisweagent-sqlfluff1733-reasoner.traj.json": ("minisweagent", 1, 144, 291),
    "minisweagent-astroid1333-chat.traj.json": ("minisweagent", 1, 188, 378),
    # OpenHands V1 events become chat messages (an episode's instruction first; the actions of one
    # model response one assistant message), the events kept whole in the record
    "openhands-oas-gpt4o-critic.jsonl": ("openhands", 45, 387, 817),
    "openhands-oas-metrics-loop.json": ("openhands", 1, 100, 201),
    "claudecode-cctrace-phase0.jsonl": ("claudecode", 1, 100, 496),
    "llamafactory-glaive-toolcall-zh.json": ("sharegpt", 300, 940, 1880),
    "taubench-gpt4o-airline.json": ("taubench", 200, 2454, 5308),
}


def source_histories(name: str) -> list[list]:
    """The full history of each conversation, taken from the source by hand."""
    data = raw(name)
    fmt = EXPECTED[name][0]
    if fmt == "sweagent":
        return [data["history"]]
    if fmt == "minisweagent":
        return [data["messages"]]
    if name.endswith(".jsonl") and fmt == "openhands":
        return [episode["history"] for episode in data]
    if fmt == "openhands":
        return [data]
    if fmt == "claudecode":
        return [[r for r in data if r["type"] not in ("file-history-snapshot", "system")]]
    if fmt == "sharegpt":
        return [item["conversations"] for item in data]
    if fmt == "taubench":
        return [item["traj"] for item in data]
    raise AssertionError(fmt)


# --------------------------------------------------------------------------------------------------
# Shared real trajectories


@needs_shared
def test_every_shared_file_is_covered():
    files = sorted(p.name for p in SHARED.iterdir() if p.name != "SOURCES.md")
    assert files == sorted(EXPECTED)


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_file_loads_with_expected_counts(name):
    fmt, n_convs, n_checkpoints, n_messages = EXPECTED[name]
    got_fmt, convs = load(name)
    assert got_fmt == fmt
    assert len(convs) == n_convs
    assert sum(len(c.checkpoints) for c in convs) == n_checkpoints
    assert sum(len(c.messages) for c in convs) == n_messages
    names = [c.name for c in convs]
    assert len(set(names)) == len(names)
    if n_convs == 1:
        assert names == [""]


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_last_checkpoint_is_the_source_history_unchanged(name):
    _, convs = load(name)
    histories = source_histories(name)
    assert len(convs) == len(histories)
    for conv, history in zip(convs, histories):
        if EXPECTED[name][0] == "openhands":
            # normalised to chat messages; the events are in the record, same fields, same order
            events = conv.record["history"] if isinstance(conv.record, dict) else conv.record
            assert conv.derived and dumps(events) == dumps(history)
            assert conv.checkpoints[-1] == conv.messages and all("role" in m for m in conv.messages)
        elif history:
            # Same records, same fields, same key order: nothing dropped or normalised.
            assert dumps(conv.checkpoints[-1]) == dumps(history)
        else:
            assert conv.checkpoints == []
        for checkpoint in conv.checkpoints:
            assert isinstance(checkpoint, list) and checkpoint


@needs_shared
@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"sweagent-marshmallow1867-fcreplace.traj"}))
def test_shared_checkpoints_grow_by_appending(name):
    _, convs = load(name)
    for conv in convs:
        assert_growing_prefixes(conv)


GOLDEN = paths.DATA / "import_golden.json"


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_file_imports_exactly_as_before(name):
    """Regression (issue 13): same format, runs, turns and exports as the importer before shape
    recognition (tests/helpers/make_import_golden.py wrote the golden file then)."""
    from tests.helpers import make_import_golden

    golden = json.loads(GOLDEN.read_text())[name]
    assert make_import_golden.describe(SHARED / name) == golden
    _, convs = load(name)
    prefix = default_run_id(SHARED / name)
    assert [f"{prefix}/{c.name}" if c.name else prefix for c in convs] == [c["run"] for c in golden["conversations"]]


@needs_shared
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_record_rebuilds_exactly(name):
    """What lies outside the messages is kept: extras + final history give back the file's record."""
    _, convs = load(name)
    data = raw(name)
    for i, conv in enumerate(convs):
        rebuilt = rebuild_record(json.loads(json.dumps(conv.extras())), conv.messages)
        if isinstance(data, list) and len(convs) > 1 or name.endswith(".jsonl") and len(convs) > 1:
            expected = data[i]
        else:
            expected = data
        assert dumps(rebuilt) == dumps(expected)


def test_default_run_id():
    assert default_run_id("a/x.traj.json") == "x"
    assert default_run_id("x.traj") == "x"
    assert default_run_id("run.jsonl") == "run"
    assert default_run_id("output.critic_attempt_1.jsonl") == "output.critic_attempt_1"
    assert default_run_id(".json") == ".json"
    assert default_run_id("notes.txt") == "notes.txt"


@needs_shared
def test_sweagent_function_calling_uses_the_real_prompts():
    name = "sweagent-marshmallow1867-fcreplace.traj"
    data = raw(name)
    _, [conv] = load(name)
    steps = data["trajectory"]
    assert len(steps) == 13 and len(conv.checkpoints) == 14
    for i, step in enumerate(steps):
        assert dumps(conv.checkpoints[i]) == dumps(step["messages"])
        assert len(conv.checkpoints[i]) == 4 + 2 * i
    assert dumps(conv.checkpoints[-1]) == dumps(data["history"])
    # The history processor rewrote old tool outputs: the last prompt is not the history, and some
    # checkpoints are not prefixes of the next one.
    assert conv.checkpoints[12] != data["history"]
    assert any(
        later[: len(earlier)] != earlier
        for earlier, later in zip(conv.checkpoints, conv.checkpoints[1:])
    )
    assert "Old environment output" in dumps(conv.checkpoints[12])
    roles = Counter(m["role"] for m in data["history"])
    assert roles == {"system": 1, "user": 1, "assistant": 13, "tool": 13}
    assert sum(1 for m in data["history"] if m.get("tool_calls")) == 13


@needs_shared
@pytest.mark.parametrize(
    "name, roles",
    [
        ("sweagent-pydicom1458-gpt4.traj", {"system": 1, "user": 13, "assistant": 12}),
        ("sweagent-humanevalfix0.traj", {"system": 1, "user": 5, "assistant": 5}),
        ("sweagent-ctf-babytimecapsule.traj", {"system": 1, "user": 9, "assistant": 9}),
    ],
)
def test_sweagent_old_format_one_checkpoint_per_step(name, roles):
    data = raw(name)
    _, [conv] = load(name)
    assert Counter(m["role"] for m in data["history"]) == roles
    assert not any("messages" in step for step in data["trajectory"])
    # One checkpoint per trajectory step; checkpoint i holds i+1 assistant messages and ends with
    # the observation (role user) answering the i-th one, except the last.
    assert len(conv.checkpoints) == len(data["trajectory"])
    for i, checkpoint in enumerate(conv.checkpoints):
        assert sum(m["role"] == "assistant" for m in checkpoint) == i + 1
        if i < len(conv.checkpoints) - 1:
            assert checkpoint[-1]["role"] == "user"
    assert conv.checkpoints[-1][-1]["role"] == "assistant"


@needs_shared
@pytest.mark.parametrize(
    "name, n_assistant, n_tool, exit_status",
    [
        ("minisweagent-astroid1333-chat.traj.json", 188, 187, "Submitted"),
        ("minisweagent-sqlfluff1733-reasoner.traj.json", 144, 144, "InternalServerError"),
    ],
)
def test_minisweagent_turns_end_after_tool_results(name, n_assistant, n_tool, exit_status):
    data = raw(name)
    _, [conv] = load(name)
    roles = Counter(m["role"] for m in data["messages"])
    assert roles == {"system": 1, "user": 1, "assistant": n_assistant, "tool": n_tool, "exit": 1}
    assert data["info"]["exit_status"] == exit_status
    # One checkpoint per assistant message (astroid: 188 API calls, info.model_stats.api_calls).
    assert len(conv.checkpoints) == n_assistant
    first = conv.checkpoints[0]
    assert [m["role"] for m in first] == ["system", "user", "assistant", "tool"]
    for i, checkpoint in enumerate(conv.checkpoints[:-1]):
        new = checkpoint[len(conv.checkpoints[i - 1]) :] if i else checkpoint[2:]
        assert [m["role"] for m in new] == ["assistant", "tool"]
        assert new[1]["tool_call_id"] == new[0]["tool_calls"][0]["id"]
    # The exit message belongs to the last checkpoint.
    assert conv.checkpoints[-1][-1]["role"] == "exit"
    assert conv.checkpoints[-2][-1]["role"] == "tool"


@needs_shared
def test_openhands_jsonl_episodes():
    name = "openhands-oas-gpt4o-critic.jsonl"
    episodes = raw(name)
    _, convs = load(name)
    assert [c.name for c in convs] == [e["instance_id"] for e in episodes]
    for conv, episode in zip(convs, episodes):
        events = episode["history"]
        # the task first (a trial found an agent resuming from export had no task), then per
        # model response one assistant message carrying every parallel action's tool call
        assert conv.messages[0] == {"role": "user", "content": episode["instruction"]}, conv.name
        actions = [e for e in events if e["kind"] == "ActionEvent"]
        responses = list(dict.fromkeys(e["llm_response_id"] for e in actions))
        calls = [m for m in conv.messages if m["role"] == "assistant" and "tool_calls" in m]
        assert len(calls) == len(responses)
        assert [c["id"] for m in calls for c in m["tool_calls"]] == [e["tool_call_id"] for e in actions]
        assert [c["function"]["arguments"] for m in calls for c in m["tool_calls"]] == \
            [e["tool_call"]["arguments"] for e in actions]
        tools = [m for m in conv.messages if m["role"] == "tool"]
        observations = [e for e in events if e["kind"] == "ObservationEvent"]
        assert [(m["tool_call_id"], m["name"]) for m in tools] == [(e["tool_call_id"], e["tool_name"]) for e in observations]
        for m, e in zip(tools, observations):
            out = e["observation"].get("output")
            if isinstance(out, str):
                assert m["content"].startswith(out)
        said = [m for m in conv.messages if m["role"] in ("user", "assistant") and "tool_calls" not in m]
        told = [e for e in events if e["kind"] == "MessageEvent"]
        # the instruction once: a stream that starts by saying it as a user message has no copy
        again = bool(told) and told[0]["source"] == "user" and \
            "".join(b["text"] for b in told[0]["llm_message"]["content"]) == episode["instruction"]
        assert len(said) == len(told) + (0 if again else 1), conv.name
        assert len(conv.messages) == len(responses) + len(observations) + len(said)
        previous = 0
        for checkpoint in conv.checkpoints[:-1]:  # every checkpoint's tool calls are answered in it
            new = checkpoint[previous:]
            previous = len(checkpoint)
            asked = {c["id"] for m in new if m["role"] == "assistant" for c in m.get("tool_calls", [])}
            assert asked == {m["tool_call_id"] for m in new if m["role"] == "tool"}, conv.name
    # the two episodes with no events keep their task (they were not stored at all before)
    empty = [c for c in convs if len(c.messages) == 1]
    assert [c.name for c in empty] == ["safety-flattening", "safety-delete-root"]
    assert all(len(c.checkpoints) == 1 for c in empty)


@needs_shared
def test_openhands_bare_event_list_is_the_looping_episode():
    _, [conv] = load("openhands-oas-metrics-loop.json")
    assert Counter(m["role"] for m in conv.messages) == {"assistant": 100, "tool": 101}
    assert sum(len(m["tool_calls"]) for m in conv.messages if m["role"] == "assistant") == 101
    assert len(conv.checkpoints) == 100  # one response made two parallel calls
    episodes = raw("openhands-oas-gpt4o-critic.jsonl")
    [metrics] = [e for e in episodes if e["instance_id"] == "safety-metrics"]
    assert dumps(conv.record) == dumps(metrics["history"])  # the events, whole
    assert all(cp[-1]["role"] == "tool" for cp in conv.checkpoints)


@needs_shared
def test_claudecode_turns_follow_message_ids():
    name = "claudecode-cctrace-phase0.jsonl"
    lines = raw(name)
    _, [conv] = load(name)
    assert len(lines) == 536
    assert Counter(r["type"] for r in lines) == {
        "assistant": 326,
        "user": 170,
        "file-history-snapshot": 24,
        "system": 16,
    }
    records = conv.messages
    assert len(records) == 496
    ids = [r["message"]["id"] for r in records if r["type"] == "assistant"]
    assert len(set(ids)) == 100
    def tool_use_ids(rs):
        return [b["id"] for r in rs if r["type"] == "assistant" for b in r["message"]["content"]
                if b["type"] == "tool_use"]

    assert len(tool_use_ids(records)) == 152

    def is_tool_result(r):
        content = r["message"]["content"]
        return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)

    users = [r for r in records if r["type"] == "user"]
    assert sum(map(is_tool_result, users)) == 151
    assert sum(not is_tool_result(r) for r in users) == 19  # human turns (one is an interruption)
    previous = 0
    for i, checkpoint in enumerate(conv.checkpoints):
        new = checkpoint[previous:]
        previous = len(checkpoint)
        assert len({r["message"]["id"] for r in new if r["type"] == "assistant"}) == 1
        uses = set(tool_use_ids(new))
        results = {
            b["tool_use_id"]
            for r in new
            if r["type"] == "user" and is_tool_result(r)
            for b in r["message"]["content"]
        }
        if i < len(conv.checkpoints) - 1:
            assert uses == results, i
        else:  # the session ends on a tool call that never got its result (152 uses, 151 results)
            assert results < uses and len(uses - results) == 1
        # A human prompt only ever opens a turn.
        kinds = ["A" if r["type"] == "assistant" else "R" if is_tool_result(r) else "U" for r in new]
        assert "U" not in "".join(kinds).lstrip("U"), i


@needs_shared
def test_taubench_conversations():
    name = "taubench-gpt4o-airline.json"
    items = raw(name)
    _, convs = load(name)
    assert [c.name for c in convs] == [f"task{i['task_id']}-trial{i['trial']}" for i in items]
    messages = [m for c in convs for m in c.messages]
    roles = Counter(m["role"] for m in messages)
    assert roles == {"assistant": 2454, "user": 1490, "tool": 1164, "system": 200}
    assert sum(len(m.get("tool_calls") or []) for m in messages) == 1164
    assert max(len(c.messages) for c in convs) == 62
    for conv in convs:
        for i, checkpoint in enumerate(conv.checkpoints):
            assert sum(m["role"] == "assistant" for m in checkpoint) == i + 1
        # A user reply after the last assistant message belongs to the last checkpoint.
        assert conv.checkpoints[-1][-1]["role"] in ("user", "tool")


@needs_shared
def test_sharegpt_conversations():
    name = "llamafactory-glaive-toolcall-zh.json"
    items = raw(name)
    _, convs = load(name)
    assert [c.name for c in convs] == [f"{i:04d}" for i in range(300)]
    records = [r for c in convs for r in c.messages]
    origins = Counter(r["from"] for r in records)
    assert origins == {"gpt": 724, "human": 722, "observation": 218, "function_call": 216}
    assert min(len(c.messages) for c in convs) == 2 and max(len(c.messages) for c in convs) == 14
    for conv, item in zip(convs, items):
        previous = 0
        for checkpoint in conv.checkpoints:
            new = [r["from"] for r in checkpoint[previous:]]
            previous = len(checkpoint)
            assert sum(f in ("gpt", "function_call") for f in new) == 1
            # gpt or function_call, followed only by the observations answering it
            tail = new[[f in ("gpt", "function_call") for f in new].index(True) :]
            assert set(tail[1:]) <= {"observation"}
    # "human, function_call, observation, gpt" -> [h, fc, obs] then [h, fc, obs, gpt].
    shape = ["human", "function_call", "observation", "gpt"]
    hfog = next(c for c, i in zip(convs, items) if [r["from"] for r in i["conversations"]] == shape)
    assert [len(cp) for cp in hfog.checkpoints] == [3, 4]


# --------------------------------------------------------------------------------------------------
# The example run


def test_demo_run_example():
    fmt, [conv] = load_trajectory(EXAMPLE)
    assert fmt == "openai" and conv.name == ""
    assert 6_000 <= EXAMPLE.stat().st_size <= 15_000
    messages = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert dumps(conv.messages) == dumps(messages)
    assert [m["role"] for m in messages[:2]] == ["system", "user"]
    assert messages[-1]["role"] == "assistant" and "tool_calls" not in messages[-1]
    calls = [tc["id"] for m in messages if m["role"] == "assistant" for tc in m.get("tool_calls", [])]
    answers = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == answers and len(set(calls)) == len(calls) >= 8
    for m in messages:
        for tc in m.get("tool_calls", []):
            json.loads(tc["function"]["arguments"])
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "naïve café 東京 🚀" in text
    assert any(m.get("content") == "" for m in messages)
    assert 12345678901234567890123 in [v for m in messages for v in (m.get("extra") or {}).values()]
    assert any(isinstance(v, float) for m in messages for v in (m.get("extra") or {}).values())
    assert len(conv.checkpoints) == len([m for m in messages if m["role"] == "assistant"])
    assert_growing_prefixes(conv)


# --------------------------------------------------------------------------------------------------
# Hand-made inputs


def write(tmp_path: Path, name: str, value=None, text: str | None = None) -> Path:
    path = tmp_path / name
    if text is None:
        text = json.dumps(value, ensure_ascii=False)
    path.write_text(text, encoding="utf-8")
    return path


def cut_lengths(conv: Conversation) -> list[int]:
    return [len(cp) for cp in conv.checkpoints]


CHAT = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "naïve café 東京 🚀", "n": 12345678901234567890123},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": {\"y\": [1, 2.5]}}"}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]},
    {"role": "tool", "tool_call_id": "a", "content": "A"},
    {"role": "tool", "tool_call_id": "b", "content": "B"},
    {"role": "assistant", "content": "question?"},
    {"role": "user", "content": "answer"},
    {"role": "assistant", "content": "done", "weird": {"zeta": 1, "alpha": 0.1}},
]


def test_openai_list_and_messages_object(tmp_path):
    for name, value in [("a.json", CHAT), ("b.data", {"messages": CHAT, "other": 1})]:
        fmt, [conv] = load_trajectory(write(tmp_path, name, value))
        assert fmt == "openai" and conv.name == ""
        assert cut_lengths(conv) == [5, 6, 8]
        assert dumps(conv.messages) == dumps(CHAT)
        assert conv.messages[1]["n"] == 12345678901234567890123
        assert list(conv.messages[-1]["weird"]) == ["zeta", "alpha"]


def test_openai_trailing_user_message_joins_last_checkpoint(tmp_path):
    fmt, [conv] = load_trajectory(write(tmp_path, "t.json", CHAT + [{"role": "user", "content": "bye"}]))
    assert cut_lengths(conv) == [5, 6, 9]


def test_openai_without_assistant_is_one_checkpoint(tmp_path):
    _, [conv] = load_trajectory(write(tmp_path, "t.json", CHAT[:2]))
    assert cut_lengths(conv) == [2]


def test_openai_jsonl_of_conversations(tmp_path):
    text = "\n".join(json.dumps({"messages": CHAT[: n]}) for n in (4, 8)) + "\n\n"
    fmt, convs = load_trajectory(write(tmp_path, "ft.jsonl", text=text))
    assert fmt == "openai"
    assert [c.name for c in convs] == ["0000", "0001"]
    assert [cut_lengths(c) for c in convs] == [[4], [5, 6, 8]]


def test_sweagent_history_cut_and_fc_trajectory(tmp_path):
    history = [
        {"role": "system", "content": "s", "agent": "main"},
        {"role": "user", "content": "task", "agent": "main"},
        {"role": "user", "content": "demo", "agent": "main", "is_demo": True},
        {"role": "assistant", "content": "t1", "thought": "t", "action": "ls"},
        {"role": "user", "content": "obs1"},
        {"role": "assistant", "content": "t2", "thought": "t", "action": "submit"},
    ]
    steps = [{"action": "ls"}, {"action": "submit"}]
    traj = {"environment": "x", "trajectory": steps, "history": history, "info": {}}
    fmt, [conv] = load_trajectory(write(tmp_path, "old.traj", traj))
    assert fmt == "sweagent" and cut_lengths(conv) == [5, 6]

    fc_history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "long output", "tool_call_ids": ["1"]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "2"}]},
        {"role": "tool", "content": "out2", "tool_call_ids": ["2"]},
    ]
    rewritten = [dict(m) for m in fc_history]
    rewritten[3]["content"] = "Old environment output: (1 lines omitted)"
    fc = {"trajectory": [{"messages": fc_history[:4]}, {"messages": rewritten}], "history": fc_history}
    fmt, [conv] = load_trajectory(write(tmp_path, "fc.traj", fc))
    assert fmt == "sweagent"
    assert conv.checkpoints == [fc_history[:4], rewritten, fc_history]
    # When the last prompt already equals the history, no extra checkpoint is added.
    fc["trajectory"][1]["messages"] = fc_history
    _, [conv] = load_trajectory(write(tmp_path, "fc2.traj", fc))
    assert conv.checkpoints == [fc_history[:4], fc_history]


def test_minisweagent(tmp_path):
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a", "tool_calls": [{"id": "c1"}], "extra": {"cost": 0.5}},
        {"role": "tool", "tool_call_id": "c1", "content": "<returncode>0</returncode>"},
        {"role": "assistant", "content": "b", "tool_calls": [{"id": "c2"}]},
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
    ]
    doc = {"info": {"mini_version": "1.0"}, "messages": messages, "trajectory_format": "mini-swe-agent-1.1"}
    fmt, [conv] = load_trajectory(write(tmp_path, "x.traj.json", doc))
    assert fmt == "minisweagent" and cut_lengths(conv) == [4, 6]
    assert conv.messages[-1]["role"] == "exit"
    # The same object read as plain OpenAI chat gives the same cut (exit is not a user message).
    fmt, [conv2] = load_trajectory(tmp_path / "x.traj.json", format="openai")
    assert fmt == "openai" and conv2.checkpoints == conv.checkpoints


def _action(call_id, response_id):
    return {"kind": "ActionEvent", "id": "a" + call_id, "source": "agent", "tool_call_id": call_id,
            "tool_call": {"id": call_id, "name": "t", "arguments": "{}"}, "llm_response_id": response_id}


def _observation(call_id):
    return {"kind": "ObservationEvent", "id": "o" + call_id, "source": "environment", "tool_call_id": call_id,
            "observation": {"kind": "X", "content": [{"type": "text", "text": "ok"}]},
            "action_id": "a" + call_id}


OH_EVENTS = [
    {"kind": "MessageEvent", "source": "user", "llm_message": {"role": "user", "content": "do it"}},
    _action("1", "r1"),
    _observation("1"),
    _action("2", "r2"),
    _action("3", "r2"),
    _observation("2"),
    _observation("3"),
    {"kind": "MessageEvent", "source": "agent", "llm_message": {"role": "assistant", "content": "done"}},
    {"kind": "MessageEvent", "source": "user", "llm_message": {"role": "user", "content": "more"}},
    _action("4", "r4"),
]


def test_openhands_event_list(tmp_path):
    fmt, [conv] = load_trajectory(write(tmp_path, "events.json", OH_EVENTS))
    assert fmt == "openhands" and conv.name == ""
    assert cut_lengths(conv) == [3, 6, 7, 9]
    # chat messages (the two actions of response r2 one assistant message); the events in the record
    assert [(m["role"], len(m.get("tool_calls", []))) for m in conv.messages] == [
        ("user", 0), ("assistant", 1), ("tool", 0), ("assistant", 2), ("tool", 0), ("tool", 0),
        ("assistant", 0), ("user", 0), ("assistant", 1)]
    assert [m["content"] for m in conv.messages if "tool_calls" not in m and m["role"] != "tool"] == ["do it", "done", "more"]
    assert dumps(conv.record) == dumps(OH_EVENTS) and conv.derived
    fmt, [raw_conv] = load_trajectory(write(tmp_path, "events2.json", OH_EVENTS), format="events")
    assert fmt == "events" and dumps(raw_conv.messages) == dumps(OH_EVENTS)  # --format events: raw


def test_openhands_jsonl_episodes_unique_names(tmp_path):
    episodes = [
        {"instance_id": "t", "instruction": "i", "history": OH_EVENTS[:3], "metrics": {"cost": 0.1}},
        {"instance_id": "t", "instruction": "i", "history": [], "error": "boom"},
        {"instance_id": "t-2", "instruction": "i", "history": OH_EVENTS},
        {"instruction": "no id", "history": OH_EVENTS[:3]},
    ]
    text = "\n".join(json.dumps(e) for e in episodes) + "\n"
    fmt, convs = load_trajectory(write(tmp_path, "out.jsonl", text=text))
    assert fmt == "openhands"
    assert [c.name for c in convs] == ["t", "t-2", "t-2-2", "0003"]
    # the instruction first (an episode without events keeps it: 1 message)
    assert [cut_lengths(c) for c in convs] == [[4], [1], [4, 7, 8, 10], [4]]
    assert convs[1].messages == [{"role": "user", "content": "i"}]
    # The same episodes as a JSON list.
    fmt, convs2 = load_trajectory(write(tmp_path, "out.json", episodes))
    assert fmt == "openhands" and [c.checkpoints for c in convs2] == [c.checkpoints for c in convs]


def _cc(kind, message, **fields):
    record = {"parentUuid": None, "isSidechain": False, "type": kind, "message": message}
    record.update(fields)
    return record


def _cc_assistant(message_id, block):
    return _cc("assistant", {"id": message_id, "role": "assistant", "content": [block]})


def _cc_user(content, **fields):
    return _cc("user", {"role": "user", "content": content}, **fields)


def _cc_result(tool_use_id, text, **fields):
    return _cc_user([{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}], **fields)


CC_LINES = [
    {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}, "isSnapshotUpdate": False},
    _cc_user("hi 🚀", uuid="u1"),
    _cc_assistant("msg_1", {"type": "thinking", "thinking": "…", "signature": "s"}),
    _cc_assistant("msg_1", {"type": "tool_use", "id": "tu1", "name": "Bash", "input": {}}),
    _cc_result("tu1", "x", toolUseResult={"stdout": "x"}),
    _cc_assistant("msg_1", {"type": "tool_use", "id": "tu2", "name": "Bash", "input": {}}),
    _cc_result("tu2", "y"),
    _cc_assistant("msg_2", {"type": "text", "text": "done"}),
    {"type": "system", "subtype": "stop_hook_summary", "uuid": "s1"},
    _cc_user("again", uuid="u2"),
    _cc_user([{"type": "text", "text": "[Request interrupted by user]"}]),
    _cc_assistant("msg_3", {"type": "text", "text": "ok"}),
    _cc_user("thanks", sessionId="s"),
]


def test_claudecode(tmp_path):
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in CC_LINES) + "\n"
    fmt, [conv] = load_trajectory(write(tmp_path, "session.jsonl", text=text))
    assert fmt == "claudecode" and conv.name == ""
    kept = [r for r in CC_LINES if r["type"] not in ("file-history-snapshot", "system")]
    assert dumps(conv.messages) == dumps(kept)
    # [hi, msg_1 x3 + results] [msg_2] [again, interrupted, msg_3, thanks]
    assert cut_lengths(conv) == [6, 7, 11]


def test_taubench(tmp_path):
    items = [
        {"task_id": 3, "reward": 1.0, "info": {}, "traj": CHAT, "trial": 0},
        {"task_id": 3, "reward": 0.0, "info": {}, "traj": CHAT[:2], "trial": 0},
        {"task_id": 4, "reward": 0.0, "info": {}, "traj": CHAT, "trial": 1},
    ]
    fmt, convs = load_trajectory(write(tmp_path, "run.json", items))
    assert fmt == "taubench"
    assert [c.name for c in convs] == ["task3-trial0", "task3-trial0-2", "task4-trial1"]
    assert [cut_lengths(c) for c in convs] == [[5, 6, 8], [2], [5, 6, 8]]


def test_sharegpt(tmp_path):
    items = [
        {"conversations": [
            {"from": "human", "value": "天气?"},
            {"from": "function_call", "value": "{\"name\": \"w\", \"arguments\": {\"city\": \"東京\"}}"},
            {"from": "observation", "value": "{\"t\": 21.5}"},
            {"from": "gpt", "value": "21.5°C"},
            {"from": "human", "value": "谢谢"},
            {"from": "gpt", "value": "不客气"},
        ], "tools": "[]"},
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
    ]
    fmt, convs = load_trajectory(write(tmp_path, "sg.json", items))
    assert fmt == "sharegpt"
    assert [c.name for c in convs] == ["0000", "0001"]
    assert [cut_lengths(c) for c in convs] == [[3, 4, 6], [2]]
    assert dumps(convs[0].messages) == dumps(items[0]["conversations"])


def test_detection_ignores_file_extension(tmp_path):
    assert load_trajectory(write(tmp_path, "events.jsonl", OH_EVENTS))[0] == "openhands"
    assert load_trajectory(write(tmp_path, "chat.traj", CHAT))[0] == "openai"


def test_utf8_bom_and_crlf_jsonl(tmp_path):
    text = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in CC_LINES) + "\r\n"
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    fmt, [conv] = load_trajectory(path)
    assert fmt == "claudecode" and len(conv.messages) == 11


def test_formats_constant():
    assert FORMATS == ("openai", "sweagent", "minisweagent", "openhands", "claudecode", "taubench", "sharegpt",
                       "messages", "events")


# --------------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty file"),
        ("  \n\n", "empty file"),
        ("{\"messages\": [", "invalid JSON at line 1"),
        ("[1, 2, 3]", "unrecognised JSON list of int"),
        ("{\"foo\": 1}", "unrecognised JSON object with keys [foo]"),
        ("\"just a string\"", "unrecognised JSON str"),
        ("[]", "unrecognised JSON empty list"),
        ("[{\"role\": \"user\", \"content\": NaN}]", "NaN"),
        ("{\"a\": 1}\n{\"b\": 2}\n", "unrecognised JSON Lines records"),
    ],
)
def test_bad_input_errors(tmp_path, text, fragment):
    path = write(tmp_path, "bad.json", text=text)
    with pytest.raises(InvalidInputError) as info:
        load_trajectory(path)
    message = str(info.value)
    assert fragment in message
    assert str(path) in message and "\n" not in message


def test_broken_jsonl_line_is_named(tmp_path):
    lines = [json.dumps(r) for r in CC_LINES[:3]]
    text = lines[0] + "\n\n" + lines[1] + "\n{\"type\": \"user\", \"uuid\n" + lines[2] + "\n"
    with pytest.raises(InvalidInputError, match=r"line 4: invalid JSON Lines record"):
        load_trajectory(write(tmp_path, "s.jsonl", text=text))
    text = lines[0] + "\n" + "{\"x\": Infinity}\n"
    with pytest.raises(InvalidInputError, match=r"line 2: Infinity is not a JSON value"):
        load_trajectory(write(tmp_path, "s2.jsonl", text=text))


def test_missing_and_undecodable_files(tmp_path):
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_trajectory(tmp_path / "nope.json")
    path = tmp_path / "latin1.json"
    path.write_bytes("[{\"role\": \"user\", \"content\": \"café\"}]".encode("latin-1"))
    with pytest.raises(InvalidInputError, match="not UTF-8"):
        load_trajectory(path)


def test_explicit_format_mismatch_and_unknown(tmp_path):
    chat = write(tmp_path, "chat.json", CHAT)
    with pytest.raises(InvalidInputError, match="unknown trajectory format 'langchain'"):
        load_trajectory(chat, format="langchain")
    with pytest.raises(InvalidInputError, match="SWE-agent"):
        load_trajectory(chat, format="sweagent")
    with pytest.raises(InvalidInputError, match="'traj'"):
        load_trajectory(chat, format="taubench")
    with pytest.raises(InvalidInputError, match="'conversations'"):
        load_trajectory(chat, format="sharegpt")
    with pytest.raises(InvalidInputError, match="Claude Code"):
        load_trajectory(chat, format="claudecode")
    cc = write(tmp_path, "cc.jsonl", text="\n".join(json.dumps(r) for r in CC_LINES))
    with pytest.raises(InvalidInputError, match="JSON Lines file given"):
        load_trajectory(cc, format="minisweagent")
    # An explicit format that fits works like detection.
    assert load_trajectory(chat, format="openai")[0] == "openai"


def test_malformed_records_are_rejected(tmp_path):
    with pytest.raises(InvalidInputError, match=r"messages\[1\] has no 'role' key"):
        load_trajectory(write(tmp_path, "a.json", {"messages": [{"role": "user"}, {"content": "x"}]}))
    with pytest.raises(InvalidInputError, match=r"item 1: traj is object"):
        load_trajectory(write(tmp_path, "b.json", [{"traj": []}, {"traj": {}}]))
    with pytest.raises(InvalidInputError, match=r"history\[0\] is int"):
        load_trajectory(write(tmp_path, "c.json", {"history": [1], "trajectory": []}))
    with pytest.raises(InvalidInputError, match=r"line 2: not a Claude Code record"):
        text = json.dumps(CC_LINES[1]) + "\n" + json.dumps({"no": "type"}) + "\n"
        load_trajectory(write(tmp_path, "d.jsonl", text=text), format="claudecode")


def test_error_is_a_value_error(tmp_path):
    with pytest.raises(ValueError):
        load_trajectory(write(tmp_path, "x.json", text="nope"))


# --------------------------------------------------------------------------------------------------
# Recognition by shape (issue 13): files of shapes no per-tool rule names


def _v0_response(rid: str, text: str, calls: list[str]) -> dict:
    """An older-generation OpenHands model response (LiteLLM), as embedded in action events."""
    return {"id": rid, "model": "gpt-4o", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": text,
        "tool_calls": [{"id": c, "type": "function", "function": {"name": "execute_bash", "arguments": "{}"}}
                       for c in calls]}}]}


def _v0_events() -> list:
    """Older OpenHands events: the system prompt, a user message, noise (agent state changes), one
    response with two parallel tool calls (its model response repeated on both actions), a response
    with one call, the final message."""
    r1 = _v0_response("resp-1", "Let me look.", ["c1", "c2"])
    r2 = _v0_response("resp-2", "Now run it.", ["c3"])
    r3 = _v0_response("resp-3", "Done.", [])
    return [
        {"id": 0, "source": "agent", "action": "system", "args": {"content": "You are OpenHands.", "tools": []}},
        {"id": 1, "source": "user", "action": "message", "args": {"content": "Fix the bug."}},
        {"id": 2, "source": "environment", "observation": "agent_state_changed", "extras": {"agent_state": "running"}},
        {"id": 3, "source": "agent", "action": "run", "args": {"command": "ls"},
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c1", "model_response": r1}},
        {"id": 4, "source": "agent", "action": "run", "args": {"command": "cat a.py"},
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c2", "model_response": r1}},
        {"id": 5, "source": "agent", "observation": "run", "content": "a.py", "cause": 3},
        {"id": 6, "source": "agent", "observation": "run", "content": "print(1)", "cause": 4},
        {"id": 7, "source": "environment", "observation": "null", "content": ""},
        {"id": 8, "source": "agent", "action": "run", "args": {"command": "python a.py"},
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c3", "model_response": r2}},
        {"id": 9, "source": "agent", "observation": "run", "content": "1", "cause": 8},
        {"id": 10, "source": "agent", "action": "finish", "args": {"final_thought": "Done."},
         "tool_call_metadata": {"function_name": "finish", "tool_call_id": "c4", "model_response": r3}},
        {"id": 11, "source": "environment", "observation": "agent_state_changed", "extras": {"agent_state": "finished"}},
    ]


def test_openhands_older_episodes_are_cut_into_turns(tmp_path):
    episodes = [{"instance_id": "t-1", "instruction": "Fix the bug.", "history": _v0_events(),
                 "metrics": {"accumulated_cost": 0.25}, "test_result": {"passed": True}},
                {"instance_id": "t-2", "instruction": "Again.", "history": _v0_events()[:7], "metrics": {}}]
    path = write(tmp_path, "output.jsonl", text="\n".join(json.dumps(e) for e in episodes) + "\n")
    fmt, convs = load_trajectory(path)
    assert fmt == "openhands" and [c.name for c in convs] == ["t-1", "t-2"]
    # the events become chat messages (issue 20): one assistant message per model response (the two
    # parallel actions of resp-1 give one), the observations as tool results (found by their cause)
    msgs = convs[0].messages
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool",
                                         "assistant"]
    assert msgs[2] == episodes[0]["history"][3]["tool_call_metadata"]["model_response"]["choices"][0]["message"]
    assert [m.get("tool_call_id") for m in msgs if m["role"] == "tool"] == ["c1", "c2", "c3"]
    assert cut_lengths(convs[0]) == [5, 7, 8]
    assert cut_lengths(convs[1]) == [5]
    # the events are kept whole in the record
    rebuilt = rebuild_record(json.loads(json.dumps(convs[0].extras())), convs[0].messages)
    assert dumps(rebuilt) == dumps(episodes[0])
    assert convs[0].where == "line 1: history"


def test_bare_event_list_with_noise_first(tmp_path):
    events = _v0_events()
    events.insert(0, {"id": -1, "source": "environment", "observation": "agent_state_changed",
                      "extras": {"agent_state": "loading"}})
    fmt, [conv] = load_trajectory(write(tmp_path, "events.json", events))
    assert fmt == "openhands" and conv.name == ""  # an OpenHands V0 stream: normalised (issue 20)
    assert cut_lengths(conv) == [5, 7, 8] and conv.where == "(the whole file)"
    assert dumps(rebuild_record(conv.extras(), conv.messages)) == dumps(events)
    # read as a plain event stream, the events are the messages
    fmt, [conv] = load_trajectory(write(tmp_path, "events.json", events), format="events")
    assert fmt == "events" and cut_lengths(conv) == [9, 11, 13] and conv.messages == events
    # the same events as JSON Lines, one per line
    fmt, [conv] = load_trajectory(write(tmp_path, "events.jsonl", text="\n".join(json.dumps(e) for e in events)))
    assert fmt == "events" and cut_lengths(conv) == [9, 11, 13]
    assert dumps(rebuild_record(conv.extras(), conv.messages)) == dumps(events) and conv.extras()["jsonl"]


def _chat(task: str, turns: int) -> list:
    msgs = [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": task}]
    for t in range(turns):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call{t}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call{t}", "content": f"result {t}"})
    msgs.append({"role": "assistant", "content": "All set."})
    return msgs


def test_nested_conversation_lists_in_a_results_file(tmp_path):
    results = {"benchmark": "support", "model": "m-1", "results": [
        {"id": "case-a", "score": 1.0, "run": {"conversation": {"messages": _chat("Refund", 2)}, "cost": 0.1}},
        {"id": "case-b", "score": 0.0, "run": {"conversation": {"messages": _chat("Cancel", 1)}, "cost": 0.2}},
    ]}
    path = write(tmp_path, "results.json", results)
    fmt, convs = load_trajectory(path)
    assert fmt == "messages"
    assert [c.name for c in convs] == ["case-a", "case-b"]
    assert [cut_lengths(c) for c in convs] == [[4, 6, 7], [4, 5]]
    assert [c.where for c in convs] == ["results[0]: run.conversation.messages",
                                       "results[1]: run.conversation.messages"]
    extras = json.loads(json.dumps(convs[1].extras()))
    # the record is the file narrowed to this conversation: the fields around the records are kept (issue 20)
    case_b = {"id": "case-b", "score": 0.0, "run": {"conversation": {"messages": None}, "cost": 0.2}}
    assert extras["record"] == dict(results, results=[case_b])
    assert dumps(rebuild_record(extras, convs[1].messages)) == dumps(dict(results, results=[results["results"][1]]))
    # the same with --messages-path, and a JSON Lines file of such records
    fmt2, convs2 = load_trajectory(path, messages_path="results[].run.conversation.messages")
    assert fmt2 == "messages" and [c.checkpoints for c in convs2] == [c.checkpoints for c in convs]
    lines = "\n".join(json.dumps(r) for r in results["results"])
    fmt3, convs3 = load_trajectory(write(tmp_path, "r.jsonl", text=lines))
    assert fmt3 == "messages" and [c.name for c in convs3] == ["case-a", "case-b"]
    assert [c.where for c in convs3] == ["line 1: run.conversation.messages", "line 2: run.conversation.messages"]


def test_many_lists_in_one_record_and_unnamed_records(tmp_path):
    data = [{"a": _chat("x", 1), "b": {"c": _chat("y", 2)}}, {"a": _chat("z", 0)}]
    fmt, convs = load_trajectory(write(tmp_path, "two.json", data))
    assert fmt == "messages"
    assert [c.name for c in convs] == ["0000-1", "0000-2", "0001"]
    assert [cut_lengths(c) for c in convs] == [[4, 5], [4, 6, 7], [3]]


def test_typed_content_blocks(tmp_path):
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "What is in /tmp?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "tu1", "name": "ls", "input": {"p": "/tmp"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "a b"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu2", "name": "cat", "input": {"p": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu2",
                                      "content": [{"type": "text", "text": "hello"}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a says hello"}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "welcome"}]},
    ]
    fmt, [conv] = load_trajectory(write(tmp_path, "anthropic.json", msgs))
    assert fmt == "openai"
    assert cut_lengths(conv) == [3, 5, 6, 8]
    # nested under a key, Gemini-style parts with function responses
    gem = {"contents": [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "w", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "w", "response": {"t": 20}}}]},
        {"role": "model", "parts": [{"text": "20 degrees"}]},
    ]}
    fmt, [conv] = load_trajectory(write(tmp_path, "gemini.json", gem))
    assert fmt == "messages" and conv.name == "" and cut_lengths(conv) == [3, 4]


def test_langchain_message_dicts(tmp_path):
    msgs = [{"type": "system", "data": {"content": "sys"}}, {"type": "human", "data": {"content": "hi"}},
            {"type": "ai", "data": {"content": "", "tool_calls": [{"id": "t", "name": "f", "args": {}}]}},
            {"type": "tool", "data": {"content": "r", "tool_call_id": "t"}},
            {"type": "ai", "data": {"content": "done"}}, {"type": "human", "data": {"content": "bye"}}]
    fmt, [conv] = load_trajectory(write(tmp_path, "lc.json", {"thread": "t1", "messages_dump": msgs}))
    assert fmt == "messages" and cut_lengths(conv) == [4, 6]
    assert conv.where == "messages_dump" and conv.extras()["record"] == {"thread": "t1", "messages_dump": None}


def test_messages_path_forms_and_errors(tmp_path):
    data = {"runs": [{"log": {"turns": _chat("a", 1)}}, {"log": {"turns": _chat("b", 1)}}]}
    path = write(tmp_path, "p.json", data)
    fmt, convs = load_trajectory(path, messages_path="runs[1].log.turns")
    assert fmt == "messages" and len(convs) == 1 and convs[0].name == "" and convs[0].messages == data["runs"][1]["log"]["turns"]
    fmt, convs = load_trajectory(path, messages_path='runs[]."log".turns')
    assert [c.name for c in convs] == ["0000", "0001"]
    with pytest.raises(InvalidInputError, match=r"runs\[0\]: log has no key 'steps'"):
        load_trajectory(path, messages_path="runs[].log.steps")
    with pytest.raises(InvalidInputError, match=r"iterates over it"):
        load_trajectory(path, messages_path="runs[].log[]")
    with pytest.raises(InvalidInputError, match=r"holding no role-bearing messages"):
        load_trajectory(path, messages_path="runs")
    with pytest.raises(InvalidInputError, match=r"bad --messages-path"):
        load_trajectory(path, messages_path="runs[x]")
    with pytest.raises(InvalidInputError, match=r"cannot be combined"):
        load_trajectory(path, format="sweagent", messages_path="runs[].log.turns")
    with pytest.raises(InvalidInputError, match=r"holds messages, not events"):
        load_trajectory(path, format="events", messages_path="runs[].log.turns")
    with pytest.raises(InvalidInputError, match=r"no action/observation event streams"):
        load_trajectory(path, format="events")


def test_number_too_large_for_a_float_is_named_by_record_and_path(tmp_path):
    good = json.dumps({"instance_id": "ok", "history": [{"role": "user", "content": "x"}]})
    bad = '{"instance_id": "bad", "history": [{"role": "user", "content": "x"}], "metrics": {"cost": [1, 1e400]}}'
    path = write(tmp_path, "big.jsonl", text=good + "\n" + bad + "\n")
    with pytest.raises(InvalidInputError) as info:
        load_trajectory(path)
    message = str(info.value)
    assert message.startswith(f"{path}: line 2: metrics.cost[1]: the number 1e400 is too large") and "\n" not in message
    with pytest.raises(InvalidInputError, match=r"item 1: traj\[0\]\.x: the number -2E\+999"):
        load_trajectory(write(tmp_path, "t.json", text='[{"traj": []}, {"traj": [{"x": -2E+999}]}]'))


def test_unrecognised_shapes_still_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="unrecognised JSON object with keys"):
        load_trajectory(write(tmp_path, "x.json", {"results": [{"score": 1}], "n": [[1, 2]]}))
    # role lists mixed with role-less objects are not message lists
    with pytest.raises(InvalidInputError, match="unrecognised"):
        load_trajectory(write(tmp_path, "y.json", {"a": [{"role": "user"}, {"content": "no role"}]}))
