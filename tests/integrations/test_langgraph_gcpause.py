"""Reading the latest checkpoint runs no cyclic garbage collection (gcpause.py), and the
collector's state is as the caller left it."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402

from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402
from snapstore.integrations.langgraph.gcpause import paused_gc  # noqa: E402


def test_paused_gc_restores_the_callers_state():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's choice kept
    finally:
        gc.enable()
    with pytest.raises(KeyError):
        with paused_gc():
            raise KeyError("x")
    assert gc.isenabled()


def test_get_tuple_of_a_large_checkpoint_runs_no_collection(tmp_path):
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_metadata
    msgs = [(HumanMessage if i % 2 else AIMessage)(content=f"message {i}", id=f"m{i}") for i in range(3000)]
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with SnapstoreSaver(str(tmp_path / "r")) as saver:
        saver.put(cfg, generate_checkpoint(channel_values={"messages": msgs}, channel_versions={"messages": 1}),
                  generate_metadata(), {})
    runs = []

    def cb(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    gc.callbacks.append(cb)
    try:
        with SnapstoreSaver(str(tmp_path / "r")) as fresh:
            runs.clear()
            tup = fresh.get_tuple(cfg)
            during = list(runs)
            junk = [[] for _ in range(5000)]  # after it, the collector runs again
            del junk
    finally:
        gc.callbacks.remove(cb)
    assert tup.checkpoint["channel_values"]["messages"] == msgs
    assert len(during) <= 1 and runs, (during, runs)  # at most one, before the read starts
