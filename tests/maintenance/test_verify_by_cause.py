"""``verify`` reports one problem per cause.

A run's small per-save packs are merged into segment packs (docs/format.md §18); the checkpoints
still name the merged-away packs, whose entries readers find in the segment. When that one segment
pack is corrupt or gone, verify used to report every merged-away pack as well (one flipped byte:
34 errors, half of them ``missing-pack`` of packs that were merged away on purpose). Now the
damaged segment is the one error, naming how many of the packs it replaced live checkpoints need.
"""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager

KINDS = pytest.mark.parametrize("kind", ["local", "sqlite", "s3-http"])


def _run(store, n=40):
    m = CheckpointManager(store)
    msgs = []
    for i in range(n):
        msgs = msgs + [{"role": "assistant", "content": f"step {i} " + "x" * 300 + f"{i * 7919}"}]
        m.save("r1", msgs, step=i)
    assert m.verify(read_data=True).ok
    return m, msgs


def _largest_pack(store):
    infos = [i for i in store.list("packs/")]
    return max(infos, key=lambda i: i.size).key


@KINDS
def test_a_corrupt_segment_pack_is_one_error(store_factory, kind):
    store = store_factory(kind)
    m, msgs = _run(store)
    key = _largest_pack(store)
    data = bytearray(store.get(key))
    data[len(data) // 2] ^= 1
    store.delete_many([key])
    store.put(key, bytes(data))
    for read_data in (False, True):
        rep = CheckpointManager(store).verify(read_data=read_data)
        assert not rep.ok
        assert [p.key for p in rep.errors] == [key], [str(p) for p in rep.errors]
        assert "merged into it" in rep.errors[0].message or kind != "local", rep.errors[0].message
        assert "r1" in rep.errors[0].message


@KINDS
def test_a_deleted_segment_pack_is_one_error(store_factory, kind):
    store = store_factory(kind)
    m, msgs = _run(store)
    key = _largest_pack(store)
    store.delete_many([key])
    rep = CheckpointManager(store).verify(read_data=True)
    assert not rep.ok
    assert [(p.code, p.key) for p in rep.errors] == [("missing-pack", key)], [str(p) for p in rep.errors]


def test_a_corrupt_log_segment_holding_the_only_copies_is_one_error(tmp_path):
    """Trial snag: one flipped byte in a log segment of a local repository (whose covered manifests
    are 0-byte stubs, docs/format.md §14) gave 16 ``compacted-record-without-copy`` errors and a
    warning saying listing reads the manifests instead. Now: the segment, once, as an error."""
    from snapstore.stores import LocalStore

    store = LocalStore(str(tmp_path / "repo"))
    m, _ = _run(store)
    segs = [i for i in store.list("runs/") if "/l/" in i.key]
    assert segs, "a log segment was written"
    key = max(i.key for i in segs)  # the oldest segment (positions 0-15): its manifests are stubs by now
    data = bytearray(store.get(key))
    data[len(data) // 2] ^= 1
    store.delete_many([key])
    store.put(key, bytes(data))
    rep = CheckpointManager(LocalStore(str(tmp_path / "repo"))).verify()
    assert [(p.code, p.key) for p in rep.errors] == [("corrupt-logseg", key)], [str(p) for p in rep.errors]
    assert "positions" in rep.errors[0].message and "'r1'" in rep.errors[0].message
    assert not [w for w in rep.warnings if w.key == key]
