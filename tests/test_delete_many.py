"""CheckpointManager.delete_many: several checkpoints of one run in one call."""

from snapstore import CheckpointManager


def test_delete_many_head_middle_unknown_and_all(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    ids = [mgr.save("r", [{"n": i}], checkpoint_id=f"c{i}" if i % 2 else None) for i in range(6)]
    assert mgr.delete_many("r", []) == []
    # the head and a middle one, plus an id the run does not have
    gone = mgr.delete_many("r", [ids[5], ids[2], "nope"])
    assert set(gone) == {ids[5], ids[2]}
    assert [c.id for c in mgr.list("r")] == [ids[4], ids[3], ids[1], ids[0]]
    assert mgr.latest("r").messages == [{"n": 4}]
    # a new manager sees the same, and saving continues from the moved head
    other = CheckpointManager(str(tmp_path / "repo"))
    assert other.latest("r").id == ids[4]
    nid = other.save("r", [{"n": 4}, {"n": 6}])
    assert other.delete_many("r", [c.id for c in other.list("r")]) and other.latest("r") is None
    assert "r" not in other.runs() and nid
    assert CheckpointManager(str(tmp_path / "empty"), create=True).delete_many("x", ["a"]) == []
