"""One LangGraph thread's reads cost what the thread holds, not what the repository holds
(issue 27): requests of ``list(config, limit=1)`` and ``get_tuple`` do not grow with the number
of threads; a thread's namespaces come from its registry run (``langgraph-ns:["thread"]``),
threads written before registries are still found."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, ns_run_id_for, run_id_for  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


class SmallPages(LocalStore):
    """A local store whose LIST pages hold 4 keys (S3's hold 1,000): request counts then show a
    listing that grows with the repository at test sizes."""

    PAGE = 4

    def list(self, prefix, start_after=None, limit=None):
        got = list(super().list(prefix, start_after, limit))
        extra = max(0, math.ceil(len(got) / self.PAGE) - 1)
        if extra:
            self._count("LIST", n=extra)
        return iter(got)

    def list_dirs(self, prefix):
        got = list(super().list_dirs(prefix))
        extra = max(0, math.ceil(len(got) / self.PAGE) - 1)
        if extra:
            self._count("LIST", n=extra)
        return iter(got)


def _put(saver, thread, i=0, ns="", parent=None):
    c = empty_checkpoint()
    c["id"] = f"1ef00000-0000-6000-8000-{i:012d}"
    c["channel_values"] = {"n": i}
    conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if parent:
        conf["configurable"]["checkpoint_id"] = parent
    return saver.put(conf, c, {"source": "loop", "step": i, "parents": {}}, {})


def _requests(saver, fn) -> int:
    before = saver.manager.store.stats.snapshot()
    fn()
    return saver.manager.store.stats.since(before).total()


def _costs(root):
    s = SnapstoreSaver(CheckpointManager(SmallPages(str(root), fsync=False)))
    t = {"configurable": {"thread_id": "t1"}}
    return {
        "list": _requests(s, lambda: list(s.list(t, limit=1))),
        "list_ns": _requests(s, lambda: list(s.list({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
                                                    limit=1))),
        "get_tuple": _requests(s, lambda: s.get_tuple(t)),
    }


def test_one_threads_list_and_get_tuple_requests_do_not_grow_with_threads(tmp_path):
    root = tmp_path / "repo"
    w = SnapstoreSaver(CheckpointManager(SmallPages(str(root), fsync=False)))
    for k in range(3):
        _put(w, f"t{k}")
    _put(w, "t1", 1, parent="1ef00000-0000-6000-8000-000000000000")
    small = _costs(root)
    for k in range(3, 40):
        _put(w, f"t{k}")
    big = _costs(root)
    assert big == small, (small, big)
    # the check can fail: listing every run grows with the threads
    m = w.manager
    assert _requests(w, m.runs) > _requests(w, lambda: None) + 5


def test_namespaces_of_a_thread_listed_deleted_and_copied(tmp_path):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        root = _put(s, "t", 0)
        _put(s, "t", 1, ns="child:1")
        _put(s, "t", 2, ns="child:2")
        _put(s, "other", 0, ns="child:1")
        got = sorted((x.config["configurable"]["checkpoint_ns"], x.checkpoint["id"][-1])
                     for x in s.list({"configurable": {"thread_id": "t"}}))
        assert got == [("", "0"), ("child:1", "1"), ("child:2", "2")]
        s.copy_thread("t", "t2")
        assert len(list(s.list({"configurable": {"thread_id": "t2"}}))) == 3
        s.prune(["t2"])
        s.delete_thread("t")
        assert list(s.list({"configurable": {"thread_id": "t"}})) == []
        assert s.manager.list(ns_run_id_for("t")) == []  # the registry goes last
        assert s.manager.latest(ns_run_id_for("t2")).session_state == {"lgns": ["", "child:1", "child:2"]}
        assert len(list(s.list({"configurable": {"thread_id": "t2"}}))) == 3
        assert len(list(s.list({"configurable": {"thread_id": "other"}}))) == 1
        # list(None) lists every thread, never the registries
        assert sorted(x.config["configurable"]["thread_id"] for x in s.list(None)) == ["other", "t2", "t2", "t2"]
        assert root


def test_a_thread_written_before_registries_is_still_found_and_seeded(tmp_path):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        p = _put(s, "old", 0)
        _put(s, "old", 1, ns="sub:1")
        _put(s, "bare", 0, ns="sub:9")
        for t in ("old", "bare"):  # as an earlier version left them: no registry
            s.manager.delete(ns_run_id_for(t))
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        assert len(list(s.list({"configurable": {"thread_id": "old"}}))) == 2  # found by listing every run
        _put(s, "old", 2, ns="sub:2", parent=None)  # the registry is created, seeded with sub:1 and ""
        assert sorted(x.config["configurable"]["checkpoint_ns"] for x in s.list({"configurable": {"thread_id": "old"}})) \
            == ["", "sub:1", "sub:2"]
        assert len(list(s.list({"configurable": {"thread_id": "bare"}}))) == 1
        s.delete_thread("old")
        s.delete_thread("bare")
        assert s.manager.runs() == []
        assert p and run_id_for("old")


def test_retention_of_the_registry_keeps_every_namespace(tmp_path):
    with SnapstoreSaver(str(tmp_path / "repo")) as s:
        for k in range(5):
            _put(s, "t", k, ns=f"sub:{k}" if k else "")
        s.manager.prune(keep_last=1)  # the core's retention over every run, the registry's too
        assert sorted(x.config["configurable"]["checkpoint_ns"] for x in s.list({"configurable": {"thread_id": "t"}})) \
            == ["", "sub:1", "sub:2", "sub:3", "sub:4"]
