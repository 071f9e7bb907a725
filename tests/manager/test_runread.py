"""``CheckpointManager.read_run``: many checkpoints of one run read after one listing, with no
manifest GET per checkpoint, the same data as ``get``, still right after the run's writer merged
and GC deleted the segments it listed, and without changing what the caller saw. Real local
stores in temp dirs."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import CheckpointNotFound, ConflictError, InvalidCheckpointIdError
from snapstore.stores import LocalStore


def _msgs(n: int) -> list:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "text " * (i % 7)}
            for i in range(n)]


def _run(mgr, run: str, n: int) -> list[str]:
    return [mgr.save(run, _msgs(2 * i + 1), step=i, session_state={"i": i, "pad": "x" * (5000 if i % 3 else 10)})
            for i in range(n)]


def test_every_checkpoint_as_get_returns_it_without_a_get_per_checkpoint(tmp_path):
    with CheckpointManager(str(tmp_path / "r"), fsync=False) as w:
        ids = _run(w, "a", 30)
        _run(w, "b", 3)
    mgr = CheckpointManager(LocalStore(str(tmp_path / "r"), fsync=False))
    st = mgr.store.stats
    b0 = st.snapshot()
    listed = mgr.list("a")
    list_cost = st.since(b0).total()
    b1 = st.snapshot()
    rd = mgr.read_run("a")
    assert [s.id for s in rd.summaries] == [s.id for s in listed] == ids[::-1]
    got = {i: rd.get(i) for i in ids}
    cost = st.since(b1).total()
    # one listing plus the run's segment packs, not a manifest GET per checkpoint
    assert cost < list_cost + 10 < len(ids), (cost, list_cost)
    fresh = CheckpointManager(str(tmp_path / "r"))
    for i in ids:
        want = fresh.get("a", i)
        assert (got[i].id, got[i].seq, got[i].step, got[i].messages, got[i].session_state) == \
            (want.id, want.seq, want.step, want.messages, want.session_state)
    with pytest.raises(CheckpointNotFound):
        rd.get("no-such-id")
    with pytest.raises(InvalidCheckpointIdError):
        rd.get("")
    assert mgr.read_run("never-saved").summaries == []
    assert CheckpointManager(str(tmp_path / "none"), create=False).read_run("a").summaries == []


def test_a_reader_survives_its_segments_merged_and_deleted(tmp_path):
    root = str(tmp_path / "r")
    w = CheckpointManager(root, fsync=False)
    ids = _run(w, "a", 5)
    rd = CheckpointManager(root).read_run("a")  # lists the run now; reads later
    segs_then = {s.pack for s in rd._segs}
    _run(w, "a", 60)  # tiers merge: the per-save packs the listing named are merged away
    w.gc(grace_period=0)
    now = {s.pack for s in w.read_run("a")._segs}
    assert segs_then - now, "the test needs the listed segments gone"
    for i in ids:
        assert rd.get(i).messages == w.get("a", i).messages


def test_reading_through_a_reader_leaves_the_callers_view(tmp_path):
    root = str(tmp_path / "r")
    a = CheckpointManager(root)
    a.save("r", _msgs(1))
    a.latest("r")
    other = CheckpointManager(root)
    other.latest("r")
    newest = other.save("r", _msgs(3))
    rd = a.read_run("r")
    assert rd.get(newest).messages == _msgs(3)
    with pytest.raises(ConflictError):  # reading through the reader did not make a continue from it
        a.save("r", _msgs(5))
    a.get("r", newest)  # the head read by id: the caller may continue from it
    a.save("r", _msgs(5))
