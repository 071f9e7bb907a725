"""Compacted run logs (docs/format.md §14): manifests covered by a log segment become 0-byte stubs.

Readers equal to an uncompacted repository; the slot stays (a stale writer gets ConflictError); a
stub never recreates a pruned key; level-2 segments over stubs keep every copy; GC and verify on a
compacted repository; every store operation of a stubbing save faulted; S3 via moto; hostile stubs.
"""

from __future__ import annotations

import json

import pytest

from snapstore import CheckpointManager
from snapstore.errors import CompactedRecordError, ConflictError, SnapstoreError
from snapstore.format import keys
from snapstore.format.logseg import decode_logseg, encode_logseg, logseg_key
from snapstore.format.manifest import open_manifest
from snapstore.repo.log.stubs import prefetch, write_stubs
from snapstore.stores import LocalStore, MemoryStore

from tests.helpers.faulty_store import FaultyStore, clone


def msgs(n):
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "text " * 20} for i in range(n)]


def run(mgr, n, run_id="r", start=0):
    ids = []
    for i in range(start, start + n):
        ids.append(mgr.save(run_id, msgs(i + 1), step=i, metadata={"i": i}))
    return ids


def sizes(store, rk):
    return {keys.seq_from_manifest_key(i.key): i.size for i in store.list(keys.manifests_prefix(rk))}


def summary(cps):
    return [(c.step, c.message_count if hasattr(c, "message_count") else None) for c in cps]


def test_local_default_stubs_and_readers_equal_uncompacted(tmp_path):
    a = CheckpointManager(str(tmp_path / "a"))
    b = CheckpointManager(str(tmp_path / "b"), compact_log=False)
    assert a.compact_log is True and b.compact_log is False
    ia, ib = run(a, 50), run(b, 50)
    rk = a.repo.run_key("r")
    sa = sizes(a.store, rk)
    assert [s for s in range(50) if sa[s] == 0] == list(range(32))  # stubbed after saves 31 and 47
    assert all(v > 0 for v in sizes(b.store, rk).values())
    assert a.stats()["objects"]["manifests"]["stubs"] == 32
    fa, fb = CheckpointManager(str(tmp_path / "a")), CheckpointManager(str(tmp_path / "b"))
    assert [(c.step, c.metadata) for c in fa.list("r")] == [(c.step, c.metadata) for c in fb.list("r")]
    for i in (0, 7, 31, 32, 49):
        ga, gb = fa.get("r", ia[i]), fb.get("r", ib[i])
        assert json.dumps(ga.messages) == json.dumps(gb.messages) and ga.step == gb.step == i
    fork = fa.fork("r", ia[5], "f")  # fork from a stubbed checkpoint
    assert fork.messages == msgs(6)
    cp = fa.rollback("r", ia[10])  # rollback to a stubbed checkpoint
    assert cp.id == ia[10] and fa.latest("r").messages == msgs(11)
    fresh = CheckpointManager(str(tmp_path / "a"))
    assert fresh.latest("r").id == ia[10] and fresh.latest("r").messages == msgs(11)
    assert [c.step for c in fresh.list("r")] == list(range(10, -1, -1))
    assert fresh.verify(read_data=True).ok


def test_stale_writer_40_positions_old_gets_conflict():
    store = MemoryStore()
    a = CheckpointManager(store, compact_log=True)
    run(a, 1)
    b = CheckpointManager(store)
    assert b.latest("r").step == 0  # b's view: position 0
    run(a, 49, start=1)
    rk = a.repo.run_key("r")
    assert sizes(store, rk)[1] == 0  # the slot b aims at is a stub
    with pytest.raises(ConflictError):
        b.save("r", msgs(2), step=1)
    assert sizes(store, rk)[1] == 0 and len(sizes(store, rk)) == 50
    assert CheckpointManager(store).latest("r").step == 49


def test_stub_racing_with_prune_never_recreates_a_key():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=False)
    run(mgr, 48)
    rk = mgr.repo.run_key("r")
    started = prefetch(mgr.repo, rk, 47)
    started[0].result(), started[1].result()  # the LIST of the range is taken: then 20 is pruned
    store.delete_many([keys.manifest_key(rk, 20)])
    done = write_stubs(mgr.repo, rk, 47, {}, started)
    assert done == [s for s in range(16, 32) if s != 20]
    assert 20 not in sizes(store, rk)
    assert [c.step for c in CheckpointManager(store).list("r")] == [s for s in range(47, -1, -1) if s != 20]


def test_level2_segment_over_stubs_keeps_every_copy():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=True)
    mgr.LOG_CACHE = 16  # the level-2 writer must take the stubs' copies from the level-1 segments
    run(mgr, 256)
    rk = mgr.repo.run_key("r")
    assert sum(1 for v in sizes(store, rk).values() if v == 0) == 240  # 0..239: the newest 16 stay full
    copies = decode_logseg("k", store.get(logseg_key(rk, 255, 2)))
    assert [c.seq for c in copies] == list(range(256))
    assert not [i for i in store.list(f"runs/{rk}/l/") if i.key.endswith(".1")]  # lower ones deleted
    fresh = CheckpointManager(store)
    assert [c.step for c in fresh.list("r")] == list(range(255, -1, -1))
    assert fresh.get("r", fresh.list("r")[-1].id).messages == msgs(1)
    assert fresh.verify(read_data=True).ok


def test_level2_writer_keeps_lower_segments_when_a_copy_is_missing():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=True)
    mgr.LOG_CACHE = 16
    run(mgr, 250)
    rk = mgr.repo.run_key("r")
    store.delete_many([logseg_key(rk, 31, 1)])  # stubs 16..31 lose their only copy
    run(mgr, 6, start=250)
    left = sorted(i.key for i in store.list(f"runs/{rk}/l/") if i.key.endswith(".1"))
    assert len(left) == 15  # kept: the level-2 segment could not take positions 16..31
    rep = CheckpointManager(store).verify()
    assert sorted({p.code for p in rep.errors}) == ["compacted-record-without-copy"]
    assert len([p for p in rep.errors if p.code == "compacted-record-without-copy"]) == 16


def test_gc_and_verify_on_compacted_repository_after_prune():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=True)
    run(mgr, 70)
    run(mgr, 40, run_id="s")
    assert mgr.verify(read_data=True).ok
    assert mgr.gc(grace_period=0).reclaimed_bytes >= 0
    assert CheckpointManager(store).verify(read_data=True).ok
    mgr.prune(keep_last=5, run_id="r")
    mgr.gc(grace_period=0)
    fresh = CheckpointManager(store)
    rep = fresh.verify(read_data=True)
    assert rep.ok, rep.errors
    assert [c.step for c in fresh.list("r")] == [69, 68, 67, 66, 65]
    assert [c.step for c in fresh.list("s")][-1] == 0
    assert fresh.get("s", fresh.list("s")[-1].id).messages == msgs(1)
    rk = fresh.repo.run_key("r")
    assert not list(store.list(f"runs/{rk}/l/ffffffffffffffef"))  # positions 0..15 gone: segment gone


def test_every_store_operation_of_a_stubbing_save_faulted():
    base = MemoryStore()
    mgr = CheckpointManager(base, compact_log=True)
    ids = run(mgr, 47)
    probe = FaultyStore(clone(base))
    pm = CheckpointManager(probe, compact_log=True)
    pm.latest("r")
    probe.arm(None)
    pm.save("r", msgs(48), step=47)
    n = probe.count
    assert any(op.startswith("put_if_match") for op in probe.ops)  # the save stubs 16..31
    for mode in ("crash", "once", "lost"):
        for k in range(1, n + 1):
            fs = FaultyStore(clone(base))
            m = CheckpointManager(fs, compact_log=True)
            m.latest("r")
            fs.arm(k, mode)
            saved = None
            try:
                saved = m.save("r", msgs(48), step=47)
            except SnapstoreError:
                pass
            fs.disarm()
            clean = CheckpointManager(fs.inner)
            rep = clean.verify()
            assert not rep.errors, (mode, k, rep.errors)
            for i in (0, 20, 31, 46):
                assert clean.get("r", ids[i]).messages == msgs(i + 1), (mode, k, i)
            if saved is not None:
                assert clean.get("r", saved).messages == msgs(48), (mode, k)


def test_s3_moto_compact_log(s3_inprocess_store):
    mgr = CheckpointManager(s3_inprocess_store, compact_log=True)
    assert CheckpointManager(s3_inprocess_store).compact_log is False  # default off on S3
    ids = run(mgr, 48)
    rk = mgr.repo.run_key("r")
    assert [s for s, v in sizes(s3_inprocess_store, rk).items() if v == 0] == list(range(31, -1, -1))
    fresh = CheckpointManager(s3_inprocess_store)
    assert [c.step for c in fresh.list("r")] == list(range(47, -1, -1))
    assert fresh.get("r", ids[3]).messages == msgs(4)
    assert fresh.verify(read_data=True).ok


def test_hostile_zero_byte_manifest_without_copy():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=False)
    ids = run(mgr, 10)  # no log segment yet
    rk = mgr.repo.run_key("r")
    key = keys.manifest_key(rk, 4)
    store.put_if_match(key, b"", store.head(key).etag)
    fresh = CheckpointManager(store)
    with pytest.raises(CompactedRecordError) as e:
        fresh.get("r", ids[4])
    assert e.value.key == key and "compacted record without a copy" in str(e.value)
    with pytest.raises(CompactedRecordError):
        fresh.list("r")
    rep = fresh.verify()
    assert [(p.code, p.key) for p in rep.errors] == [("compacted-record-without-copy", key)]


def test_hostile_stub_whose_copy_is_of_another_position():
    store = MemoryStore()
    mgr = CheckpointManager(store, compact_log=False)
    ids = run(mgr, 16)
    rk = mgr.repo.run_key("r")
    recs = {s: open_manifest("m", store.get(keys.manifest_key(rk, s))) for s in range(16)}
    recs[3] = recs[4]  # position 3's copy is the record of position 4
    seg = logseg_key(rk, 15, 1)
    store.delete_many([seg])
    store.put(seg, encode_logseg([(s, v, b) for s, (v, b) in sorted(recs.items())], 1))
    key = keys.manifest_key(rk, 3)
    store.put_if_match(key, b"", store.head(key).etag)
    fresh = CheckpointManager(store)
    with pytest.raises(CompactedRecordError) as e:
        fresh.get("r", ids[3])
    assert e.value.key == key and "position 4" in str(e.value)
    assert fresh.get("r", ids[5]).messages == msgs(6)
    assert "compacted-record-without-copy" in {p.code for p in fresh.verify().errors}


def test_cli_no_compact_log_writes_full_manifests(tmp_path):
    from click.testing import CliRunner

    from snapstore.cli import cli

    src = tmp_path / "run.json"
    src.write_text(json.dumps({"messages": msgs(100)}))
    for flag, repo in (("--no-compact-log", tmp_path / "full"), ("--compact-log", tmp_path / "stubbed")):
        r = CliRunner().invoke(cli, ["--repo", str(repo), flag, "import", str(src), "--run", "r", "-q"],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output
    full, stubbed = LocalStore(str(tmp_path / "full")), LocalStore(str(tmp_path / "stubbed"))
    rk = CheckpointManager(full).repo.run_key("r")
    n = len(sizes(full, rk))
    assert n >= 32 and all(v > 0 for v in sizes(full, rk).values())
    assert any(v == 0 for v in sizes(stubbed, rk).values())
    assert ([c.step for c in CheckpointManager(full).list("r")] == [c.step for c in CheckpointManager(stubbed).list("r")])
