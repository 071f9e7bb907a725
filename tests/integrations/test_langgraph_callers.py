"""SnapstoreSaver acts as one caller per LangGraph thread whatever OS thread or asyncio task
calls it (issue 27): delete_thread, delete_for_runs, copy_thread and prune on the saver that
wrote the thread, after reads and writes from other threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402

from benchmarks import langgraph_writes as lw  # noqa: E402


def _conf(thread, cid=None):
    c = {"thread_id": thread, "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _put(saver, thread, i, parent=None, run_id="r1"):
    c = empty_checkpoint()
    c["id"] = f"1ef00000-0000-6000-8000-{i:012d}"
    c["channel_values"] = {"n": i}
    c["channel_versions"] = {"n": i + 1}
    return saver.put(_conf(thread, parent), c, {"source": "loop", "step": i, "parents": {}, "run_id": run_id},
                     {"n": i + 1})


def _in_thread(fn):
    out = {}

    def go():
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["e"] = e
    t = threading.Thread(target=go)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out.get("v")


def _written_elsewhere(saver, thread="t", n=3, run_id="r1"):
    """The issue's pattern: read the empty thread here, write it from another OS thread."""
    assert saver.get_tuple(_conf(thread)) is None

    def write():
        prev = None
        for i in range(n):
            prev = _put(saver, thread, i, prev and prev["configurable"]["checkpoint_id"], run_id)
            saver.put_writes(prev, [("x", i)], f"task{i}")
    _in_thread(write)
    assert saver.get_tuple(_conf(thread)) is not None


def test_delete_thread_after_a_put_from_another_thread(tmp_path):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        _written_elsewhere(s)
        s.delete_thread("t")
        assert s.get_tuple(_conf("t")) is None
        assert list(s.list(_conf("t"))) == []
        # and the thread can be written again afterwards, from here and from elsewhere
        _put(s, "t", 7)
        _in_thread(lambda: s.delete_thread("t"))
        assert s.get_tuple(_conf("t")) is None


def test_delete_for_runs_copy_and_prune_after_writes_from_another_thread(tmp_path):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        _written_elsewhere(s, "a", run_id="r1")
        _written_elsewhere(s, "b", run_id="r2")
        s.copy_thread("a", "c")
        assert [t.checkpoint["id"] for t in s.list(_conf("c"))] == [t.checkpoint["id"] for t in s.list(_conf("a"))]
        # write "c" from another thread, then prune it here
        _in_thread(lambda: _put(s, "c", 9, "1ef00000-0000-6000-8000-000000000002"))
        s.prune(["a", "c"])
        assert len(list(s.list(_conf("a")))) == 1 and len(list(s.list(_conf("c")))) == 1
        assert s.get_tuple(_conf("c")).checkpoint["channel_values"] == {"n": 9}
        s.delete_for_runs(["r2"])
        assert s.get_tuple(_conf("b")) is None
        assert s.get_tuple(_conf("a")) is not None


def test_async_methods_from_tasks(tmp_path):
    async def main(s):
        assert await s.aget_tuple(_conf("t")) is None
        await asyncio.gather(*(asyncio.to_thread(_put, s, f"u{i}", 0) for i in range(4)))
        await asyncio.to_thread(_put, s, "t", 0)
        await s.acopy_thread("t", "t2")
        await s.aprune(["t2"])
        await s.adelete_for_runs(["nothing"])
        await s.adelete_thread("t")
        await s.adelete_thread("t2")
        assert await s.aget_tuple(_conf("t")) is None and await s.aget_tuple(_conf("t2")) is None

    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        asyncio.run(main(s))


@pytest.mark.parametrize("durability", ["async", "sync", "exit"])
def test_delete_thread_after_a_graph_run(tmp_path, durability):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        calls = __import__("collections").Counter()
        graph = lw.build(s, 4, {3}, calls, 0.0)
        conf = {"configurable": {"thread_id": "g"}}
        # the loop reads the empty thread here and puts from LangGraph's executor threads
        graph.invoke({"results": []}, conf, durability=durability)
        s.delete_thread("g")
        assert s.get_tuple(conf) is None
        graph.invoke({"results": []}, conf, durability=durability)
        graph.invoke(lw.Command(resume="ok"), conf, durability=durability)
        s.copy_thread("g", "g2")
        s.prune(["g2"])
        s.delete_thread("g")
        s.delete_thread("g2")
        assert s.get_tuple(conf) is None and s.get_tuple({"configurable": {"thread_id": "g2"}}) is None
