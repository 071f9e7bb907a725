"""Pending-writes objects (docs/langgraph-layout.md §4a): a put_writes is an object beside the
run's newest record, folded into the next checkpoint record and deleted; a write stored while
another saver puts is never missed. Real local stores, two savers (two managers) on one directory,
compared with LangGraph's InMemorySaver on the same calls, and a real process SIGKILLed while it
puts and writes."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import StoreError  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, run_id_for  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

IDS = ["1ef00000-0000-6000-8000-00000000000" + str(i) for i in range(6)]
RUN = run_id_for("t")


def _cp(i: int) -> dict:
    c = empty_checkpoint()
    c["id"] = IDS[i]
    c["channel_values"] = {"n": i}
    c["channel_versions"] = {"n": i + 1}
    return c


def _conf(cid: str | None = None) -> dict:
    c = {"thread_id": "t", "checkpoint_ns": ""}
    if cid:
        c["checkpoint_id"] = cid
    return {"configurable": c}


def _put(saver, i: int, parent: int | None):
    return saver.put(_conf(IDS[parent] if parent is not None else None), _cp(i),
                     {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})


class _NowSaver(SnapstoreSaver):
    DELETE_BATCH = 1  # folded objects deleted by the put that folds them


def _saver(root, cls=SnapstoreSaver) -> SnapstoreSaver:
    return cls(CheckpointManager(LocalStore(str(root), fsync=False)))


def _writes(saver, i):
    t = saver.get_tuple(_conf(IDS[i]))
    return None if t is None else sorted(t.pending_writes)


def _objects(saver) -> dict:
    """``{record id: number of objects beside it}`` over the run's records."""
    m = saver.manager
    got = m.outcomes_beside(RUN, [(s.id, s.seq) for s in m.list(RUN)])
    return {k: len(v) for k, v in got.items()}


def _all(saver) -> list:
    return [(t.config["configurable"]["checkpoint_id"], sorted(t.pending_writes)) for t in saver.list(_conf())]


def test_put_writes_is_an_object_folded_into_the_next_checkpoint_and_deleted(tmp_path):
    ours, mem = _saver(tmp_path / "repo", _NowSaver), InMemorySaver()
    for s in (ours, mem):
        _put(s, 0, None)
    records = len(ours.manager.list(RUN))
    for s in (ours, mem):
        s.put_writes(_conf(IDS[0]), [("x", "a"), ("y", 1)], "task-a")
        s.put_writes(_conf(IDS[0]), [("x", "a")], "task-a")  # stored already: nothing
    assert len(ours.manager.list(RUN)) == records, "a put_writes saves no record"
    assert sum(_objects(ours).values()) == 1
    fresh = _saver(tmp_path / "repo")
    assert _writes(fresh, 0) == _writes(mem, 0) == [("task-a", "x", "a"), ("task-a", "y", 1)]
    assert fresh.get_tuple(_conf()).pending_writes == mem.get_tuple(_conf()).pending_writes
    for s in (ours, mem):
        _put(s, 1, 0)
        s.put_writes(_conf(IDS[1]), [("x", "b")], "task-b")
    # C1's record carries C0's writes (fw) and the object beside C0 is gone; C1's is beside it
    objs = _objects(ours)
    assert list(objs.values()) == [1] and next(iter(objs)) == ours.manager.head(RUN).id
    c1 = ours.manager.latest(RUN)
    assert c1.metadata["fw"] == {IDS[0]: ["x", "y"]} and c1.session_state["fo"]
    fresh = _saver(tmp_path / "repo")
    for i in (0, 1):
        assert _writes(fresh, i) == _writes(mem, i), i
    assert _all(fresh) == _all(mem)
    ours.close()
    fresh.close()


def test_a_write_stored_while_another_saver_puts_is_not_missed(tmp_path):
    # A stores writes beside C0 after B read C0's objects for C1's record but before B saved it:
    # A saw C0 still the head and returned, so the writes must be found (the window), and be
    # carried by the record after (C2), which deletes the object
    a, b, mem = _saver(tmp_path / "repo"), _saver(tmp_path / "repo", _NowSaver), InMemorySaver()
    _put(a, 0, None)
    _put(mem, 0, None)
    real_save = b.manager.save
    fired = []

    def save(*args, **kw):
        if not fired:
            fired.append(1)
            a.put_writes(_conf(IDS[0]), [("x", "late")], "task-a")   # for the parent
            a.put_writes(_conf(IDS[1]), [("x", "early")], "task-e")  # for the checkpoint being put
        return real_save(*args, **kw)

    b.manager.save = save
    _put(b, 1, 0)
    assert fired
    mem.put_writes(_conf(IDS[0]), [("x", "late")], "task-a")
    mem.put_writes(_conf(IDS[1]), [("x", "early")], "task-e")
    _put(mem, 1, 0)
    assert sum(_objects(b).values()) == 2, "not folded into C1: C1 was built before they were stored"
    for reader in (_saver(tmp_path / "repo"), a, b):
        assert _writes(reader, 0) == _writes(mem, 0) == [("task-a", "x", "late")]
        assert _writes(reader, 1) == _writes(mem, 1) == [("task-e", "x", "early")]
        assert reader.get_tuple(_conf()).pending_writes == [("task-e", "x", "early")]
        assert _all(reader) == _all(mem)
    _put(b, 2, 1)
    _put(mem, 2, 1)
    assert sum(_objects(b).values()) == 0, "folded into C2's record, then deleted"
    fresh = _saver(tmp_path / "repo")
    for i in (0, 1, 2):
        assert _writes(fresh, i) == _writes(mem, i), i
    assert _all(fresh) == _all(mem)


def test_a_writer_holding_a_moved_head_stores_beside_the_new_one(tmp_path):
    a, b, mem = _saver(tmp_path / "repo"), _saver(tmp_path / "repo"), InMemorySaver()
    for s in (a, mem):
        _put(s, 0, None)
    _put(b, 1, 0)  # a still holds C0 as the newest record
    _put(mem, 1, 0)
    for s in (a, mem):
        s.put_writes(_conf(IDS[1]), [("x", "w1")], "task-1")
    # A stored beside C0, saw C1 the head: its writes are read from C1's window, and not lost
    # when C1 is no longer the newest record
    for s in (b, mem):
        _put(s, 2, 1)
    for s in (a, mem):
        _put(s, 3, 2)
    fresh = _saver(tmp_path / "repo")
    for i in range(4):
        assert _writes(fresh, i) == _writes(mem, i), i
    assert _all(fresh) == _all(mem)


def test_deletions_wait_for_a_batch_or_close(tmp_path):
    ours, mem = _saver(tmp_path / "repo"), InMemorySaver()
    assert ours.DELETE_BATCH == 16
    _put(ours, 0, None)
    _put(mem, 0, None)
    for i in range(1, 10):  # two objects folded per put: 16 queued after the 8th
        for s in (ours, mem):
            s.put_writes(_conf(IDS[0] if i == 1 else f"1ef00000-0000-6000-8000-1{i - 1:011d}"),
                         [("x", i), ("y", -i)], f"task-{i}")
            s.put_writes(_conf(IDS[0] if i == 1 else f"1ef00000-0000-6000-8000-1{i - 1:011d}"),
                         [("z", i)], f"task-z{i}")
            c = _cp(0)
            c["id"] = f"1ef00000-0000-6000-8000-1{i:011d}"
            parent = IDS[0] if i == 1 else f"1ef00000-0000-6000-8000-1{i - 1:011d}"
            s.put(_conf(parent), c, {"source": "loop", "step": i, "parents": {}}, {"n": 1})
        waiting = sum(_objects(ours).values())
        assert waiting == (2 * i if i < 8 else 2 * (i - 8)), i
        fresh = _saver(tmp_path / "repo")
        assert _all(fresh) == _all(mem), i  # objects waiting to be deleted change no answer
    ours.close()
    assert sum(_objects(_saver(tmp_path / "repo")).values()) == 0, "close deletes the rest"


def test_objects_left_after_a_failed_deletion_are_not_folded_twice(tmp_path, monkeypatch):
    ours, mem = _saver(tmp_path / "repo", _NowSaver), InMemorySaver()
    for s in (ours, mem):
        _put(s, 0, None)
        # a special channel's writes keep the last one stored: a fold twice would reorder them
        s.put_writes(_conf(IDS[0]), [("__error__", "first")], "task-a")
        s.put_writes(_conf(IDS[0]), [("__error__", "second")], "task-a")

    def fail(*a, **k):
        raise StoreError("deletion failed")

    monkeypatch.setattr(ours.manager, "delete_outcomes", fail)
    for s in (ours, mem):
        _put(s, 1, 0)
    assert sum(_objects(ours).values()) == 2, "left beside C0"
    fresh = _saver(tmp_path / "repo")
    for i in (0, 1):
        assert _writes(fresh, i) == _writes(mem, i), i
    assert _writes(fresh, 0) == [("task-a", "__error__", "second")]
    assert _all(fresh) == _all(mem)
    # C1's record names them (fo): C2, built on C1's window, does not carry them again
    assert sorted(ours.manager.latest(RUN).session_state["fo"]) == sorted(
        next(iter(ours.manager.outcomes_beside(RUN, [(ours.manager.list(RUN)[-1].id, ours.manager.list(RUN)[-1].seq)]).values())))
    for s in (ours, mem):
        _put(s, 2, 1)
    assert IDS[0] not in (ours.manager.latest(RUN).metadata.get("fw") or {})
    fresh = _saver(tmp_path / "repo")
    for i in (0, 1, 2):
        assert _writes(fresh, i) == _writes(mem, i), i


CHILD = r"""
import sys
from langgraph.checkpoint.base import empty_checkpoint
from snapstore.integrations.langgraph import SnapstoreSaver
root, start = sys.argv[1], int(sys.argv[2])
s = SnapstoreSaver(root)
conf = lambda cid=None: {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": cid} if cid else {})}}
ids = lambda i: f"1ef00000-0000-6000-8000-{i:012d}"
i = start
while True:
    c = empty_checkpoint()
    c["id"] = ids(i)
    c["channel_values"] = {"n": i}
    c["channel_versions"] = {"n": i + 1}
    s.put(conf(ids(i - 1) if i else None), c, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})
    print("put", i, flush=True)
    s.put_writes(conf(ids(i)), [("x", i), ("__error__", f"e{i}")], f"task-{i}")
    print("w", i, flush=True)
    i += 1
"""


def test_sigkill_keeps_every_acknowledged_put_and_put_writes(tmp_path):
    import random
    import subprocess
    import sys
    import time

    from snapstore import CheckpointManager as CM

    root = str(tmp_path / "repo")
    rng = random.Random(7)
    acked_put, acked_w = set(), set()
    start = 0
    for _round in range(3):
        p = subprocess.Popen([sys.executable, "-c", CHILD, root, str(start)], stdout=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(1.0, 2.5))
        p.kill()
        out, _ = p.communicate()
        for line in out.splitlines():
            kind, n = line.split()
            (acked_put if kind == "put" else acked_w).add(int(n))
        fresh = SnapstoreSaver(root)
        for i in sorted(acked_put):
            t = fresh.get_tuple({"configurable": {"thread_id": "t", "checkpoint_id": f"1ef00000-0000-6000-8000-{i:012d}"}})
            assert t is not None, i
            if i in acked_w:
                assert ("task-" + str(i), "x", i) in t.pending_writes, i
                assert ("task-" + str(i), "__error__", f"e{i}") in t.pending_writes, i
        latest = fresh.get_tuple({"configurable": {"thread_id": "t"}})
        start = latest.checkpoint["channel_values"]["n"] + 1
        fresh.close()
        assert CM(root).verify().ok
    assert len(acked_w) >= 3
