"""Tool outcomes (docs/format.md §25): record/read/replay/conflict on a local directory and on
moto's HTTP server, bad input, GC's grace period, run deletion, rollback, verify, the workflow
helpers, and a real-process SIGKILL campaign on CheckpointedLoop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from snapstore import CheckpointManager
from snapstore.errors import (CheckpointNotFound, ConflictError, IntegrityError, InvalidCheckpointIdError,
                              InvalidInputError, InvalidMessageError, InvalidRunIdError)
from snapstore.format import outcomes as fo
from snapstore.format.ids import b32_lower
from snapstore.integrations.workflows import CheckpointedLoop, ResumableWorkflow
from snapstore.stores import MemoryStore

from tests.helpers.fake_clock import Clock

from tests.helpers.paths import ROOT
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["local", "s3-http"])
def mgr(request, store_factory):
    m = CheckpointManager(store_factory(request.param))
    yield m
    m.close()


def outcome_keys(store) -> list[str]:
    return [i.key for i in store.list("runs/") if fo.parse_outcome_key(i.key)]


def test_record_read_replay_conflict(mgr):
    assert mgr.outcomes("r", None) == {}  # no repository yet: nothing, and nothing created
    assert mgr.record_outcome("r", None, "call-1", {"ok": True}) is True
    assert mgr.record_outcome("r", None, "call-1", {"ok": True}) is False  # a replay: no-op
    with pytest.raises(ConflictError):
        mgr.record_outcome("r", None, "call-1", {"ok": False})
    cid = mgr.save("r", MSG)
    with pytest.raises(ConflictError):  # None means "before the first checkpoint"
        mgr.outcomes("r", None)
    results = {"a": "text", "b": 2**80, "c": ["\ud800", 1.5, None], "d" * 300: {"nested": [1, {"x": []}]}}
    for k, v in results.items():
        assert mgr.record_outcome("r", cid, k, v) is True
    assert mgr.outcomes("r", cid) == results
    assert CheckpointManager(mgr.store).outcomes("r", cid) == results  # a fresh process reads them
    cid2 = mgr.save("r", MSG + [{"role": "assistant", "content": "x"}])
    assert mgr.outcomes("r", cid2) == {}
    assert mgr.outcomes("r", cid) == results  # an older live checkpoint keeps its outcomes
    assert mgr.verify().ok


def test_outcomes_beside_several_checkpoints_and_deleted(mgr):
    a = mgr.save("r", MSG)
    b = mgr.save("r", MSG + [{"role": "assistant", "content": "x"}])
    mgr.save("other", MSG)
    mgr.record_outcome("r", a, "c1", {"n": 1})
    mgr.record_outcome("r", a, "c2", [2])
    mgr.record_outcome("r", b, "d" * 300, "long call id: a hashed key")
    mgr.record_outcome("other", mgr.head("other").id, "c1", "another run's")
    pairs = [(s.id, s.seq) for s in mgr.list("r")]
    want = {a: {"c1": {"n": 1}, "c2": [2]}, b: {"d" * 300: "long call id: a hashed key"}}
    assert mgr.outcomes_beside("r", pairs) == want
    assert CheckpointManager(mgr.store).outcomes_beside("r", pairs[:1]) == {b: want[b]}  # only those asked
    assert mgr.outcomes_beside("r", []) == {} and mgr.outcomes_beside("nobody", pairs) == {}
    assert mgr.delete_outcomes("r", [(a, "c1"), (a, "never-recorded")]) == 2
    assert mgr.outcomes("r", a) == {"c2": [2]}
    assert mgr.delete_outcomes("r", [(b, "d" * 300), (a, "c2")]) == 2  # beside two checkpoints, one batch
    assert mgr.outcomes("r", b) == {} and mgr.outcomes("r", a) == {}
    assert mgr.outcomes("other", mgr.head("other").id) == {"c1": "another run's"}
    assert mgr.record_outcome("r", a, "c1", {"n": 3}) is True  # deleted: as if never recorded
    with pytest.raises(InvalidRunIdError):
        mgr.outcomes_beside("", pairs)
    with pytest.raises(InvalidCheckpointIdError):
        mgr.delete_outcomes("r", [("", "c1")])
    with pytest.raises(InvalidInputError):
        mgr.delete_outcomes("r", [(a, "")])
    assert mgr.verify().ok


def test_bad_input(mgr):
    cid = mgr.save("r", MSG)
    with pytest.raises(InvalidInputError):
        mgr.record_outcome("r", cid, "", 1)
    with pytest.raises(InvalidInputError):
        mgr.record_outcome("r", cid, 7, 1)
    with pytest.raises(InvalidInputError):
        mgr.record_outcome("r", cid, "x" * 5000, 1)
    with pytest.raises(InvalidMessageError):
        mgr.record_outcome("r", cid, "c", float("nan"))
    with pytest.raises(InvalidMessageError):
        mgr.record_outcome("r", cid, "c", object())
    with pytest.raises(InvalidInputError):
        mgr.record_outcome("r", cid, "c", "x" * (fo.BODY_MAX + 1))
    with pytest.raises(InvalidRunIdError):
        mgr.record_outcome("", cid, "c", 1)
    with pytest.raises(InvalidCheckpointIdError):
        mgr.outcomes("r", "")
    with pytest.raises(CheckpointNotFound):
        mgr.record_outcome("r", "no-such", "c", 1)
    with pytest.raises(CheckpointNotFound):
        mgr.outcomes("other-run", cid)
    assert outcome_keys(mgr.store) == []  # nothing was stored


def test_rollback_and_run_delete_make_outcomes_unreachable(mgr):
    mgr.record_outcome("r", None, "first", 0)
    c1 = mgr.save("r", MSG, checkpoint_id="step-1")
    c2 = mgr.save("r", MSG + MSG, checkpoint_id="step-2")
    mgr.record_outcome("r", c2, "t", "old")
    mgr.rollback("r", c1)
    with pytest.raises(CheckpointNotFound):
        mgr.outcomes("r", c2)
    # the same caller-chosen id saved again is another checkpoint: it does not see the old outcome
    assert mgr.save("r", MSG + MSG, checkpoint_id="step-2") == "step-2"
    assert mgr.outcomes("r", "step-2") == {}
    mgr.record_outcome("r", "step-2", "t", "new")  # no conflict with the unreachable one
    assert mgr.outcomes("r", "step-2") == {"t": "new"}
    mgr.delete("r")
    with pytest.raises(CheckpointNotFound):
        mgr.outcomes("r", "step-2")
    assert mgr.outcomes("r", None) == {}  # a new run of the same id starts clean ("first" is gone)
    mgr.record_outcome("r", None, "first", 1)  # no conflict either
    assert mgr.outcomes("r", None) == {"first": 1}
    rep = mgr.verify()
    assert rep.ok
    assert sum(p.code == "orphaned-outcome" for p in rep.warnings) == 3
    assert "r" not in mgr.runs()  # outcomes alone do not make a run


def test_gc_waits_for_the_grace_period():
    clock = Clock()
    store = MemoryStore(clock=clock)
    m = CheckpointManager(store, clock=clock)
    c1 = m.save("r", MSG)
    c2 = m.save("r", MSG + MSG)
    m.record_outcome("r", c1, "keep", 1)
    m.record_outcome("r", c2, "drop", 2)
    m.rollback("r", c1)
    rep = m.gc(grace_period=100)
    assert rep.deleted.get("outcomes", 0) == 0 and rep.pending_kinds["outcomes"] == 1
    clock.advance(101)
    rep = m.gc(grace_period=100)
    assert rep.deleted["outcomes"] == 1
    assert [k.rsplit("/", 1)[1] for k in outcome_keys(store)] == ["b" + b32_lower(b"keep")]  # "keep"
    assert m.outcomes("r", c1) == {"keep": 1}
    # a deleted run: its lone tombstone stays until its outcomes are gone (its generation)
    m.record_outcome("r", c1, "more", 3)
    m.delete("r")
    m.record_outcome("r", None, "pre", 4)
    clock.advance(1000)
    rep = m.gc(grace_period=100)
    assert rep.deleted["outcomes"] == 2  # c1's two; "pre" belongs to the run's current generation
    assert m.outcomes("r", None) == {"pre": 4}
    m.save("r", MSG)
    clock.advance(1000)
    m.gc(grace_period=100)
    assert outcome_keys(store) == []
    assert m.verify().ok


def test_gc_grace_zero_and_s3(mgr):
    c1 = mgr.save("r", MSG)
    mgr.record_outcome("r", c1, "x", 1)
    mgr.delete("r")
    rep = mgr.gc(grace_period=0)
    assert rep.deleted["outcomes"] == 1
    assert outcome_keys(mgr.store) == []
    assert list(mgr.store.list("runs/")) == []  # the tombstone went too, after them


def test_corrupt_outcomes_are_typed_errors(mgr):
    cid = mgr.save("r", MSG)
    mgr.record_outcome("r", cid, "good", 1)
    mgr.record_outcome("r", cid, "bad", 2)
    key = next(k for k in outcome_keys(mgr.store) if k.endswith("/b" + b32_lower(b"bad")))
    mgr.store.delete_many([key])
    mgr.store.put(key, b"SNOC garbage")
    with pytest.raises(IntegrityError) as e:
        mgr.outcomes("r", cid)
    assert key in str(e.value)
    # a valid object of another call under this call's key
    mgr.store.delete_many([key])
    mgr.store.put(key, fo.encode_outcome("good", 2))
    with pytest.raises(IntegrityError):
        mgr.outcomes("r", cid)
    rep = mgr.verify()
    assert not rep.ok and [p.code for p in rep.errors] == ["corrupt-outcome"] and rep.errors[0].key == key


def test_format_decoder_refuses_bad_shapes():
    k = "runs/bx/w/n0000000000000000/bmm"
    good = fo.encode_outcome("c", {"a": 1})
    assert fo.decode_outcome(k, good, "bmm") == ("c", {"a": 1})
    from snapstore.format import codec
    for body in (b"[]", b'{"call": "c"}', b'{"call": "", "result": 1}', b'{"call": "c", "result": 1, "x": 2}',
                 b"not json", b"[" * 300 + b"]" * 300):
        with pytest.raises(IntegrityError):
            fo.decode_outcome(k, codec.seal_envelope(fo.MAGIC, 1, body))
    with pytest.raises(IntegrityError):
        fo.decode_outcome(k, codec.seal_envelope(fo.MAGIC, 2, b'{"call": "c", "result": 1}'))
    with pytest.raises(IntegrityError):  # a zstd bomb past the body limit stops at the limit
        import zstandard
        bomb = zstandard.ZstdCompressor().compress(b" " * (fo.BODY_MAX + 10))
        fo.decode_outcome(k, codec._ENV_HEADER.pack(fo.MAGIC, 1, 1, __import__("blake3").blake3(
            fo.MAGIC + bytes([1, 1]) + bomb).digest(16)) + bomb)
    assert fo.parse_outcome_key("runs/bx/w/c0000000000000001.bmm/bmm") == ("bx", "c0000000000000001.bmm", "bmm")
    for bad in ("runs/bx/w/x/bmm", "runs/bx/w/n00/bmm", "runs/bx/w/c0000000000000001/bmm", "runs/bx/m/c/d"):
        assert fo.parse_outcome_key(bad) is None


# ---------------------------------------------------------------------------------------------
# workflow helpers


def _model(n_roundtrips: int):
    calls = []

    def complete(messages):
        calls.append(len(messages))
        k = sum(1 for m in messages if m.get("role") == "assistant")
        if k >= n_roundtrips:
            return {"role": "assistant", "content": "done"}, None
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}-{j}", "type": "function", "function": {"name": "act", "arguments": json.dumps({"j": j})}}
            for j in range(2)]}, {"prompt_tokens": 1}
    return complete, calls


def test_checkpointed_loop_skips_recorded_calls(mgr):
    complete, model_calls = _model(3)
    ran = []

    class Crash(Exception):
        pass

    def act(j):
        ran.append(j)
        if len(ran) == 4:  # second roundtrip, second call: it ran, then the process "dies"
            mgr.record_outcome("r", loop.last_checkpoint_id, "c1-1", "out-1")  # recorded, as run() does
            raise Crash
        return f"out-{j}"

    loop = CheckpointedLoop(mgr, "r", MSG)
    with pytest.raises(Crash):
        loop.run(complete, {"act": act})
    assert len(ran) == 4 and len(model_calls) == 2
    # a new process resumes from checkpoint 1: the model's message and both calls are recorded
    loop2 = CheckpointedLoop(CheckpointManager(mgr.store), "r", MSG)
    assert loop2.resume()
    ran2 = []
    final = loop2.run(complete, {"act": lambda j: ran2.append(j) or f"out-{j}"})
    assert final["content"] == "done"
    assert ran2 == [0, 1]  # only the third roundtrip's calls ran; c1-0 and c1-1 were not run again
    # the model ran for roundtrips 1, 2 before the crash, then for roundtrip 3 and the final
    # answer: its roundtrip-2 message came from the recorded outcome, not from a second call
    assert len(model_calls) == 4
    cp = mgr.latest("r")
    assert [m["tool_call_id"] for m in cp.messages if m.get("role") == "tool"] == \
        ["c0-0", "c0-1", "c1-0", "c1-1", "c2-0", "c2-1"]


def test_resumable_workflow_call(mgr):
    effects = []
    wf = ResumableWorkflow("wf", mgr)
    assert wf.try_resume() == 0
    assert wf.call("send", lambda: effects.append("send") or {"sent": 1}) == {"sent": 1}
    # crash before the checkpoint: a new process runs the step again, the call is not repeated
    wf2 = ResumableWorkflow("wf", CheckpointManager(mgr.store))
    assert wf2.try_resume() == 0
    assert wf2.call("send", lambda: effects.append("again")) == {"sent": 1}
    wf2.checkpoint(0, state={"s": 1})
    assert wf2.call("send", lambda: effects.append("step1") or 2) == 2  # a new step: runs again
    wf3 = ResumableWorkflow("wf", CheckpointManager(mgr.store))
    assert wf3.try_resume() == 1
    assert wf3.call("send", lambda: effects.append("x")) == 2
    assert effects == ["send", "step1"]


# ---------------------------------------------------------------------------------------------
# SIGKILL campaign


def test_sigkill_campaign_runs_no_recorded_call_twice(tmp_path):
    sys.path.insert(0, str(ROOT))
    try:
        from benchmarks.outcome_kills import campaign
    finally:
        sys.path.remove(str(ROOT))
    out = campaign(kills=15, roundtrips=100, calls=2, seed=1, max_delay=0.3, workdir=str(tmp_path))
    # each restart resumes where the last left off, so on a fast (or idle) machine the work left
    # can finish before the last kills land; most of the 15 must have hit a running loop
    assert out["kills"] >= 8, out
    assert out["twice_recorded"] == 0, out
    assert out["calls"] == 200 and out["final_ok"] and out["verify_ok"], out
