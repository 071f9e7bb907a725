"""Exact round trip: real trajectories replayed checkpoint by checkpoint, and hand-made edge cases.

What ``save`` took, ``get`` returns from a fresh manager (no shared cache): equal JSON values, the same
``json.dumps`` string (key order), the same Python types (bool vs int vs float), unicode and lone
surrogates kept, huge ints and extreme floats exact, very large tool outputs, large session states.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import json
import math
import os
import random
import re
from pathlib import Path

import pytest

from tests.helpers.shared_data import shared_data_dir

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError, InvalidMessageError
from snapstore.importers import load_trajectory
from snapstore.stores import LocalStore, MemoryStore


# --- shared trajectories ---------------------------------------------------------------------------

SHARED = shared_data_dir()
TRAJECTORY_FILES = sorted(p.name for p in SHARED.iterdir()
                          if p.is_file() and p.suffix.lower() != ".md") if SHARED else []


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def types_of(value):
    """A structure mirroring ``value`` with every leaf replaced by its exact type name."""
    if isinstance(value, dict):
        return {k: types_of(v) for k, v in value.items()}
    if isinstance(value, list):
        return [types_of(v) for v in value]
    return type(value).__name__


def assert_exact(got, want):
    """Equal, identical JSON text (key order), identical leaf types; tuples compare as lists."""
    want = json.loads(json.dumps(want)) if _has_tuples(want) else want
    assert got == want
    assert dumps(got) == dumps(want)
    assert types_of(got) == types_of(want)
    _assert_float_signs(got, want)


def _has_tuples(v) -> bool:
    if isinstance(v, tuple):
        return True
    if isinstance(v, dict):
        return any(_has_tuples(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_tuples(x) for x in v)
    return False


def _assert_float_signs(got, want):
    if isinstance(want, float):
        assert math.copysign(1.0, got) == math.copysign(1.0, want)
    elif isinstance(want, dict):
        for k in want:
            _assert_float_signs(got[k], want[k])
    elif isinstance(want, list):
        for a, b in zip(got, want):
            _assert_float_signs(a, b)


@pytest.mark.skipif(SHARED is None, reason="shared trajectories not found (../shared/data/trajectories or "
                                           "$SNAPSTORE_SHARED_DATA)")
@pytest.mark.parametrize("name", TRAJECTORY_FILES or ["<none>"])
def test_shared_trajectory_replays_exactly(name, tmp_path):
    """One run per conversation, one save per checkpoint; every checkpoint restores exactly from a
    fresh manager on the same directory."""
    fmt, conversations = load_trajectory(SHARED / name)
    assert conversations
    # the importer shares record objects between checkpoints: keep a private deep copy of what we
    # expect, so that nothing done by save/get to the objects can make the comparison vacuous
    expected_text = {}
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    saved: dict[str, list[str]] = {}
    for ci, conv in enumerate(conversations):
        run = f"{name}#{conv.name or ci}"
        assert run not in saved
        ids = []
        for cp in conv.checkpoints:
            ids.append(mgr.save(run, cp, step=len(ids)))
        saved[run] = ids
        expected_text[run] = [dumps(cp) for cp in conv.checkpoints]
    mgr.close()

    fresh = CheckpointManager(LocalStore(root, fsync=False))
    assert fresh.runs() == sorted(r for r in saved if saved[r])
    total = 0
    for ci, conv in enumerate(conversations):
        run = f"{name}#{conv.name or ci}"
        ids = saved[run]
        for k, (cid, cp) in enumerate(zip(ids, conv.checkpoints)):
            got = fresh.get(run, cid)
            assert got.id == cid and got.run_id == run and got.step == k
            assert got.message_count == len(cp)
            assert got.messages == cp, (run, k)
            assert dumps(got.messages) == expected_text[run][k], (run, k)
            total += 1
        if ids:
            latest = fresh.latest(run)
            assert latest.id == ids[-1]
            assert dumps(latest.messages) == expected_text[run][-1]
            assert [s.id for s in fresh.list(run)] == ids[::-1]
    assert total == sum(len(c.checkpoints) for c in conversations)
    fresh.close()


# --- edge-case values --------------------------------------------------------------------------------

UNICODE = {
    "emoji": "😀👍🏽👨‍👩‍👧‍👦🏳️‍🌈",
    "cjk": "東京都 中文 日本語 한국어",
    "combining": "e\u0301 a\u0308 \u1e9b\u0323 Z\u0351\u036b\u0343",
    "rtl": "שלום עולם مرحبا بالعالم \u202eevil\u202c",
    "nfc_vs_nfd": ["\u00e9", "e\u0301"],
    "controls": "\x00\x01\t\n\r\x1f\x7f\u2028\u2029",
    "bom": "\ufeffbom",
    "astral": "\U0001F600\U00010000\U0010FFFF",
    "escapes": "quote\" backslash\\ slash/ </script>",
}

NUMBERS = {
    "big": 2**64,
    "neg_big": -2**100,
    "ten30": 10**30,
    "u64max": 2**64 - 1,
    "i64min": -2**63,
    "i64max": 2**63 - 1,
    "just_below_i64min": -2**63 - 1,
    "zero": 0,
    "floats": [0.1, -0.0, 0.0, 1e308, -1e308, 5e-324, 1.5e-10, 2.5, 1e16, 123456789.123456789,
               1.7976931348623157e308, 2.2250738585072014e-308],
    "int_like_float": 1.0,
    "bools": [True, False],
    "ints_not_bools": [1, 0],
    "none": None,
}

EMPTIES = {"empty_str": "", "empty_list": [], "empty_dict": {}, "nested_empty": [[], {}, [[]], {"": {}}],
           "empty_key": {"": ""}}

TOOL_CALLS = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": [{"type": "text", "text": "weather?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps({"city": "東京", "units": ["c", "f"]})}},
        {"id": "call_2", "type": "function",
         "function": {"name": "nested", "arguments": {"a": {"b": {"c": [1, {"d": [True, None, 1.0]}]}}}}},
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": ""},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "ok"}]},
    {"z_last": 1, "a_first": 2, "m": {"y": 1, "b": 2, "x": 3}},  # key order kept, not sorted
]

SURROGATES = {"lone_high": "\ud800", "lone_low_inside": "a\udfffb", "low_then_high": "\udc00\ud800",
              "\ud801key": "surrogate in a key"}


def _deep(n):
    v = "leaf"
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


CASES = {
    "unicode": UNICODE,
    "numbers": NUMBERS,
    "empties": EMPTIES,
    "tool_calls": TOOL_CALLS,
    "surrogates": SURROGATES,
    "mixed": {"big": 10**30, "s": "\ud800", "f": -0.0, "b": True, "i": 1, "x": 1.0, "e": ""},
    "deep": _deep(200),
    "top_level_scalars": ["just a string", 7, 2**70, -0.0, True, None, "", 1.5e-10],
}


def _messages_for(value):
    """A message list exercising ``value`` in several positions."""
    return [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": value},
        {"role": "tool", "payload": value, "list": [value, value]},
    ]


@pytest.fixture
def repo_dir(tmp_path):
    return tmp_path / "repo"


def _fresh(path) -> CheckpointManager:
    return CheckpointManager(LocalStore(path, fsync=False))


@pytest.mark.parametrize("case", sorted(CASES))
def test_messages_round_trip_exactly(case, repo_dir):
    value = CASES[case]
    msgs = _messages_for(value)
    expected = copy.deepcopy(msgs)
    text = json.dumps(msgs)
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=True))
    cid = mgr.save("run", msgs)
    assert json.dumps(msgs) == text  # the caller's objects are not modified
    # same manager (cached list state) and a fresh one (reads the bytes)
    for m in (mgr, _fresh(repo_dir)):
        got = m.get("run", cid)
        assert_exact(got.messages, expected)
        assert json.dumps(got.messages) == text
        assert_exact(m.latest("run").messages, expected)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fields_round_trip_exactly(case, repo_dir):
    """session_state, token_usage, metrics, metadata, step, agent_id, status keep the same values."""
    value = CASES[case]
    fields = dict(
        session_state={"state": value, "list": [value]},
        token_usage={"input": 10**30, "output": 1, "detail": {"cached": 2**70, "ratio": 0.25, "none": None}},
        metrics={"latency": 0.1, "big": -(10**40)},  # objects of numbers (issue 13); any value goes in metadata
        metadata={"k": value, "tags": ["a", "b"]},
        step=2**64,
        agent_id="agent-東京-\ud800",
        status="running 😀",
    )
    expected = copy.deepcopy(fields)
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    cid = mgr.save("run", [{"role": "user", "content": "x"}], **fields)
    fresh = _fresh(repo_dir)
    for m in (mgr, fresh):
        cp = m.get("run", cid)
        for k, want in expected.items():
            assert_exact(getattr(cp, k), want)
        summ = m.list("run")[0]
        for k in ("token_usage", "metrics", "metadata", "step", "agent_id", "status"):
            assert_exact(getattr(summ, k), expected[k])


@pytest.mark.parametrize("field", ["session_state", "token_usage", "metrics", "metadata"])
@pytest.mark.parametrize("value", [
    {}, [], "", 0, False, True, 1, 1.0, -0.0, 2**64, -2**100, 10**30, 5e-324, 1e308, "\ud800", "a\udfffb",
    None, [True, 1, 1.0, 0, False, 0.0], {"b": 1, "a": 2},
], ids=lambda v: type(v).__name__ + ":" + repr(v)[:20])
def test_field_values_keep_type(field, value, repo_dir):
    mgr = CheckpointManager(MemoryStore())
    if field in ("token_usage", "metrics"):  # objects of numbers (issue 13): the value goes inside one
        if type(value) in (int, float):
            value = {"v": value, "nested": {"w": value}}
        elif value is not None and not isinstance(value, dict):
            for bad in (value, {"v": value}):
                with pytest.raises(InvalidMessageError, match=field):
                    mgr.save("run", [], **{field: bad})
            assert mgr.runs() == []
            return
    cid = mgr.save("run", [], **{field: value})
    got = getattr(mgr.get("run", cid), field)
    if value is None:
        assert got is None
    else:
        assert_exact(got, value)


def test_bools_ints_floats_keep_types(repo_dir):
    msgs = [{"t": True, "f": False, "one": 1, "zero": 0, "onef": 1.0, "zerof": 0.0, "nz": -0.0,
             "list": [True, 1, 1.0, False, 0, 0.0]}]
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    cid = mgr.save("r", msgs, session_state={"flag": True, "n": 1, "x": 1.0})
    got = _fresh(repo_dir).get("r", cid)
    m = got.messages[0]
    assert m["t"] is True and m["f"] is False
    assert type(m["one"]) is int and m["one"] == 1
    assert type(m["zero"]) is int
    assert type(m["onef"]) is float and m["onef"] == 1.0
    assert type(m["zerof"]) is float
    assert type(m["nz"]) is float and math.copysign(1.0, m["nz"]) == -1.0
    assert [type(x) for x in m["list"]] == [bool, int, float, bool, int, float]
    ss = got.session_state
    assert ss["flag"] is True and type(ss["n"]) is int and type(ss["x"]) is float


def test_big_ints_and_extreme_floats(repo_dir):
    vals = [2**64, -2**100, 10**30, 2**64 - 1, -2**63, 2**1000, -(10**400)]
    floats = [0.1, -0.0, 1e308, 5e-324, 1.5e-10, 2**53 + 0.0, float(2**63)]
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    cid = mgr.save("r", [{"ints": vals}, {"floats": floats}, vals, floats])
    got = _fresh(repo_dir).get("r", cid).messages
    assert got[0]["ints"] == vals and all(type(x) is int for x in got[0]["ints"])
    assert got[2] == vals
    for a, b in zip(got[1]["floats"], floats):
        assert type(a) is float and a == b and math.copysign(1, a) == math.copysign(1, b)
    assert json.dumps(got) == json.dumps([{"ints": vals}, {"floats": floats}, vals, floats])


def test_lone_surrogates_kept(repo_dir):
    msgs = [{"content": "\ud800"}, {"content": "a\udfffb"}, "\udc00", {"\ud83d": "key"}, "😀", "\udc00\ud83d"]
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    cid = mgr.save("r", msgs)
    got = _fresh(repo_dir).get("r", cid).messages
    assert got == msgs
    assert got[0]["content"] == "\ud800" and len(got[0]["content"]) == 1
    assert got[1]["content"] == "a\udfffb"
    assert got[5] == "\udc00\ud83d" and len(got[5]) == 2
    assert json.dumps(got) == json.dumps(msgs)


@pytest.mark.parametrize("where", ["message", "session_state", "metadata"])
def test_adjacent_surrogate_code_points_stay_two_code_points(where, repo_dir):
    """A Python str may hold a high and a low surrogate as two separate code points (e.g. text decoded
    with ``surrogatepass``). It must come back as the same two code points, not merged into one
    astral character: ``"\\ud83d\\ude00"`` (len 2) is a different string from ``"😀"`` (len 1)."""
    s = "x\ud83d\ude00y"
    assert len(s) == 4 and s != "x😀y"
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    if where == "message":
        cid = mgr.save("r", [{"content": s}])
        got = _fresh(repo_dir).get("r", cid).messages[0]["content"]
    elif where == "session_state":
        cid = mgr.save("r", [], session_state={"content": s})
        got = _fresh(repo_dir).get("r", cid).session_state["content"]
    else:
        cid = mgr.save("r", [], metadata={"content": s})
        got = _fresh(repo_dir).get("r", cid).metadata["content"]
    assert len(got) == 4 and got == s, ascii(got)


def test_tuples_come_back_as_lists(repo_dir):
    msgs = ({"role": "user", "content": ("a", ("b", 1))}, ("x", 2))
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    cid = mgr.save("r", msgs, session_state=(1, (2, 3)), metadata={"t": (1, 2)})
    got = _fresh(repo_dir).get("r", cid)
    assert got.messages == [{"role": "user", "content": ["a", ["b", 1]]}, ["x", 2]]
    assert type(got.messages) is list and type(got.messages[1]) is list
    assert type(got.messages[0]["content"][1]) is list
    assert got.session_state == [1, [2, 3]] and type(got.session_state[1]) is list
    assert got.metadata == {"t": [1, 2]}


def test_empty_message_list_round_trips(repo_dir):
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    c0 = mgr.save("r", [])
    c1 = mgr.save("r", [{"role": "user", "content": ""}])
    c2 = mgr.save("r", [])
    f = _fresh(repo_dir)
    assert f.get("r", c0).messages == []
    assert f.get("r", c1).messages == [{"role": "user", "content": ""}]
    assert f.get("r", c2).messages == [] and f.get("r", c2).message_count == 0
    assert f.latest("r").messages == []


def _random_text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(5000)]
    out = []
    size = 0
    while size < n:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) + f" {rng.getrandbits(48):x}\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:n]


FIVE_MB = 5 * 1024 * 1024


def test_five_mb_tool_output_round_trips_and_edit_dedups(repo_dir):
    text = _random_text(FIVE_MB, 1)
    msgs = [{"role": "user", "content": "cat big.log"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "sh", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": text}]
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    s0 = mgr.store.stats.snapshot()
    c1 = mgr.save("r", msgs)
    first = mgr.store.stats.since(s0).bytes_up
    assert first > 0

    # the same output, edited in the middle (a few bytes changed), in a new message list
    mid = len(text) // 2
    edited = text[:mid] + "<<EDITED HERE>>" + text[mid + 10:]
    msgs2 = msgs + [{"role": "user", "content": "again"},
                    {"role": "assistant", "tool_calls": [{"id": "c2", "function": {"name": "sh", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "c2", "content": edited}]
    s1 = mgr.store.stats.snapshot()
    c2 = mgr.save("r", msgs2)
    second = mgr.store.stats.since(s1).bytes_up
    # content-defined chunking: only the pieces around the edit are new
    assert second < FIVE_MB // 10, second
    assert second < first / 5, (first, second)

    f = _fresh(repo_dir)
    got1 = f.get("r", c1).messages
    assert got1[2]["content"] == text
    assert dumps(got1) == dumps(msgs)
    got2 = f.get("r", c2).messages
    assert got2[5]["content"] == edited
    assert dumps(got2) == dumps(msgs2)


@pytest.mark.parametrize("size", [5000, 70_000, 300_000])
def test_large_session_state_round_trips(size, repo_dir):
    rng = random.Random(size)
    state = {"memory": _random_text(size, size), "numbers": [rng.random() for _ in range(50)],
             "big": 2**80, "s": "\ud800", "flags": [True, 1, 1.0], "nested": {"z": 1, "a": [{"b": ""}]}}
    assert len(json.dumps(state)) > size
    expected = copy.deepcopy(state)
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    c1 = mgr.save("r", [{"role": "user", "content": "hi"}], session_state=state)
    # an unchanged large state is not stored again
    s = mgr.store.stats.snapshot()
    c2 = mgr.save("r", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                  session_state=copy.deepcopy(state))
    assert mgr.store.stats.since(s).bytes_up < 4096
    state3 = dict(state, memory=state["memory"] + " more")
    c3 = mgr.save("r", [{"role": "user", "content": "hi"}], session_state=state3)
    f = _fresh(repo_dir)
    for cid, want in ((c1, expected), (c2, expected), (c3, state3)):
        got = f.get("r", cid).session_state
        assert_exact(got, want)


def test_session_state_absent_vs_present(repo_dir):
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    c1 = mgr.save("r", [1], session_state={})
    c2 = mgr.save("r", [1, 2])
    c3 = mgr.save("r", [1, 2, 3], session_state=[])
    f = _fresh(repo_dir)
    assert f.get("r", c1).session_state == {} and type(f.get("r", c1).session_state) is dict
    assert f.get("r", c2).session_state is None
    assert f.get("r", c3).session_state == []


def test_many_checkpoints_with_edits_and_truncation(repo_dir):
    """Lists that are not appends (edited history, truncated history) restore exactly."""
    rng = random.Random(7)
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    msgs: list = []
    saved = []
    for i in range(120):
        r = rng.random()
        if r < 0.6 or not msgs:
            msgs = msgs + [{"role": rng.choice(["user", "assistant", "tool"]), "content": f"m{i} " * rng.randint(1, 50),
                            "i": i}]
        elif r < 0.75:
            j = rng.randrange(len(msgs))
            msgs = msgs[:j] + [{"edited": i, "content": "e" * rng.randint(0, 300)}] + msgs[j + 1:]
        elif r < 0.85:
            msgs = msgs[:rng.randrange(len(msgs) + 1)]
        else:
            msgs = list(msgs)  # same content, new list object
        saved.append((mgr.save("r", msgs), dumps(msgs)))
    f = _fresh(repo_dir)
    for cid, text in saved:
        assert dumps(f.get("r", cid).messages) == text
    assert len(f.list("r")) == len(saved)


def test_mutating_a_new_object_is_stored(repo_dir):
    """Passing a *new* message object with changed content stores the change (documented contract)."""
    mgr = CheckpointManager(LocalStore(repo_dir, fsync=False))
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    mgr.save("r", msgs)
    msgs2 = [msgs[0], {"role": "assistant", "content": "B"}, {"role": "user", "content": "c"}]
    cid = mgr.save("r", msgs2)
    assert _fresh(repo_dir).get("r", cid).messages == msgs2


# --- values that are not JSON: refused with a typed error, nothing stored ---------------------------


@dataclasses.dataclass
class _DC:
    a: int = 1


class _Custom:
    pass


BAD_VALUES = {
    "set": {1, 2},
    "frozenset": frozenset(["a"]),
    "bytes": b"abc",
    "bytearray": bytearray(b"abc"),
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "int_key": {1: "x"},
    "none_key": {None: "x"},
    "tuple_key": {(1, 2): "x"},
    "float_key": {1.5: "x"},
    "datetime": _dt.datetime(2024, 1, 1, tzinfo=_dt.timezone.utc),
    "date": _dt.date(2024, 1, 1),
    "custom_object": _Custom(),
    "dataclass": _DC(),
    "complex": 1j,
    "nested_nan": {"ok": [1, 2, {"deeper": [float("nan")]}]},
}


def snapshot_dir(root: Path) -> dict:
    """Every file below ``root`` (temp and lock files included) with its bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _bad_call(target: str, bad):
    """kwargs for save() putting ``bad`` in ``target``, and the text the error must contain."""
    good = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}]
    if target == "messages":
        msgs = good + [{"role": "tool", "content": [{"type": "text", "x": bad}]}]
        return dict(messages=msgs), "messages[2]"
    if target == "message_itself":
        return dict(messages=good + [bad]), "messages[2]"
    return dict(messages=good, **{target: {"k": [bad]}}), target


@pytest.mark.parametrize("target", ["messages", "message_itself", "session_state", "metadata", "token_usage",
                                    "metrics", "step", "agent_id", "status"])
@pytest.mark.parametrize("bad", sorted(BAD_VALUES))
def test_non_json_refused_and_nothing_stored(target, bad, tmp_path):
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    first = [{"role": "user", "content": "valid"}]
    c0 = mgr.save("run", first, session_state={"s": 1}, metadata={"m": 1})
    before = snapshot_dir(root)
    stats = mgr.store.stats.snapshot()

    kwargs, where = _bad_call(target, BAD_VALUES[bad])
    msgs = kwargs.pop("messages")
    with pytest.raises(InvalidMessageError) as ei:
        mgr.save("run", msgs, **kwargs)
    err = ei.value
    assert isinstance(err, InvalidInputError) and isinstance(err, ValueError)
    assert where in str(err), str(err)
    assert "\n" not in str(err)

    # nothing stored: same files, same bytes, no PUT or DELETE request
    assert snapshot_dir(root) == before
    d = mgr.store.stats.since(stats)
    assert d.counts["PUT"] == 0 and d.counts["DELETE"] == 0 and d.bytes_up == 0

    # the valid checkpoint is unchanged, for this manager and a fresh one
    for m in (mgr, _fresh(root)):
        cp = m.latest("run")
        assert cp.id == c0 and cp.messages == first and cp.session_state == {"s": 1} and cp.metadata == {"m": 1}
        assert [s.id for s in m.list("run")] == [c0]
    # and the manager continues normally: the next save's parent is the valid checkpoint
    c1 = mgr.save("run", first + [{"role": "assistant", "content": "next"}])
    assert _fresh(root).get("run", c1).parent_id == c0


@pytest.mark.parametrize("bad", ["set", "nan", "int_key", "datetime"])
def test_non_json_refused_on_memory_store(bad):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    mgr.save("run", [{"a": 1}])
    before = store.raw()
    for target in ("messages", "session_state", "metadata", "token_usage"):
        kwargs, where = _bad_call(target, BAD_VALUES[bad])
        msgs = kwargs.pop("messages")
        with pytest.raises(InvalidMessageError, match=re.escape(where)):
            mgr.save("run", msgs, **kwargs)
    assert store.raw() == before


@pytest.mark.parametrize("target", ["messages", "session_state", "metadata"])
def test_non_json_first_save_into_empty_dir_stores_nothing(target, tmp_path):
    """A refused save is refused before anything is written, even the repository's config."""
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    kwargs, where = _bad_call(target, {1, 2})
    msgs = kwargs.pop("messages")
    with pytest.raises(InvalidMessageError):
        mgr.save("run", msgs, **kwargs)
    assert not root.exists() or snapshot_dir(root) == {}, sorted(snapshot_dir(root))


def test_messages_must_be_a_list(tmp_path):
    mgr = CheckpointManager(MemoryStore())
    for bad in ({"role": "user"}, "text", None, 5, b"x"):
        with pytest.raises(InvalidInputError):
            mgr.save("run", bad)
    assert mgr.store.raw() == {}
    assert mgr.latest("run") is None
