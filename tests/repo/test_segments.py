"""Format 2 segments (docs/format.md §10) and log segments (§12): the counter, what a fresh reader
fetches, readers and GC beside a writer that merges and deletes, hostile segment lists."""

from __future__ import annotations

import json
import math
import random
import threading
import time
import traceback

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError, InvalidInputError
from snapstore.format.logseg import decode_logseg, encode_logseg, encode_logseg_v2, logseg_key, parse_logseg_key
from snapstore.format.segs import MAX_SEGS, Seg, decode_segs, encode_segs, plan_append
from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore


def pid(i: int) -> bytes:
    return i.to_bytes(8, "big")


def test_counter_merges_like_base_fanout_digits():
    segs: list = []
    merges = 0
    for n in range(1, 300):
        plan = plan_append(segs, pid(n), 4)
        if plan.inputs:
            merges += 1
            # the inputs are the tail of the list plus the new pack, oldest first: one merged pack
            assert plan.inputs == (segs + [Seg(pid(n), 0)])[-len(plan.inputs):]
            segs = list(plan.segs)
            segs[plan.slot] = Seg(pid(10_000 + n), plan.level)
        else:
            segs = plan.segs
        # the levels are the base-4 digits of n: non-increasing, at most 3 of each
        levels = [s.level for s in segs]
        assert levels == sorted(levels, reverse=True)
        digits, m = [], n
        while m:
            digits.append(m % 4)
            m //= 4
        assert sorted(levels, reverse=True) == [lv for lv in range(len(digits) - 1, -1, -1) for _ in range(digits[lv])]
        assert len(segs) <= 3 * (math.log(n, 4) + 1)
    assert merges == sum(1 for n in range(1, 300) if n % 4 == 0)


def test_segment_list_encoding_round_trips_and_refuses_garbage():
    segs = [Seg(pid(1), 0), Seg(pid(2), 11), Seg(pid(3), 3, True), Seg(pid(4), 12, True)]
    assert decode_segs("k", encode_segs(segs)) == segs
    for bad in ["zz", "00" * 8, "00" * 8 + "?", 17, None, ("0" * 16 + "1") * (MAX_SEGS + 1)]:
        with pytest.raises(IntegrityError):
            decode_segs("k", bad)


def test_log_segment_encoding_bounds_and_keys():
    recs = [(16, 2, b"a" * 10), (17, 3, b"b"), (31, 2, b"")]
    data = encode_logseg(recs)
    assert data[4] == 3
    assert [(c.seq, c.version, c.data) for c in decode_logseg("k", data)] == recs
    old = [(16, b"x" * 10), (17, b"y")]  # version 2: whole manifest objects
    assert [(c.seq, c.version, c.data) for c in decode_logseg("k", encode_logseg_v2(old))] == [
        (16, None, b"x" * 10), (17, None, b"y")]
    for bad in ([(17, 2, b""), (16, 2, b"")], [(16, 0, b"")]):
        with pytest.raises(InvalidInputError):
            encode_logseg(bad)
    with pytest.raises(IntegrityError):
        decode_logseg("k", data[:-1])
    with pytest.raises(IntegrityError):
        decode_logseg("k", data[:6] + bytes([data[6] ^ 1]) + data[7:])
    key = logseg_key("bxyz", 255, 2)
    assert parse_logseg_key(key) == (255, 2)
    assert parse_logseg_key("runs/bxyz/l/ffffffffffffff01.2") is None  # position 254 ends no 256-range
    with pytest.raises(ValueError):
        logseg_key("bxyz", 254, 1)


def _msgs(n: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    out = [{"role": "system", "content": "You are an agent."}]
    for i in range(n):
        out.append({"role": "assistant", "content": f"step {i} " + " ".join(str(rng.random()) for _ in range(20))})
    return out


def test_a_long_run_lives_in_few_packs_and_restores_in_one_wave():
    store = MemoryStore()
    m = CheckpointManager(store)
    msgs = _msgs(600)
    for i in range(1, 601):
        m.save("r", msgs[:i + 1])
    head = m.repo.head(m.repo.run_key("r"))
    segs = head.segment_list()
    assert len(segs) <= 3 * (math.log(600, 4) + 1)
    packs = [k for k in store.raw() if k.startswith("packs/")]
    assert len(packs) == len(segs)  # every merged pack was deleted by its writer
    fresh = CheckpointManager(store)
    fresh.repo
    before = store.stats.snapshot()
    assert json.dumps(fresh.latest("r").messages) == json.dumps(msgs)
    d = store.stats.since(before)
    assert d.counts["LIST"] == 1 and d.counts["GET"] <= len(segs) + 1, d
    # listing the run reads log segments, not 600 manifests
    before = store.stats.snapshot()
    assert len(fresh.list("r")) == 600
    d = store.stats.since(before)
    assert d.counts["GET"] <= 600 / 16 + 20, d
    assert fresh.verify(read_data=True).ok


def test_old_checkpoints_read_through_the_newest_record():
    """An old checkpoint's own record names packs merged away since: get() reads the newest
    record's segments instead (and a manager whose view is stale reads it again)."""
    store = MemoryStore()
    w = CheckpointManager(store)
    msgs = _msgs(40)
    ids = [w.save("r", msgs[:i + 1]) for i in range(1, 41)]
    reader = CheckpointManager(store)
    assert json.dumps(reader.get("r", ids[3]).messages) == json.dumps(msgs[:5])
    for i in range(41, 60):  # the writer goes on merging and deleting
        msgs.append({"role": "tool", "content": f"more {i}"})
        w.save("r", list(msgs))
    assert json.dumps(reader.get("r", ids[10]).messages) == json.dumps(msgs[:12])
    assert json.dumps(reader.latest("r").messages) == json.dumps(msgs)


def test_gc_and_readers_beside_busy_writers(tmp_path):
    """Writers saving as fast as they can (each merging every 4 saves and deleting what it merged)
    while GC (grace 2 s) and a cold reader loop: no GC or reader error, nothing lost."""
    root = tmp_path / "repo"
    stop = time.monotonic() + 4.0
    errors: list = []
    final: dict = {}

    def writer(k):
        m = CheckpointManager(LocalStore(root, fsync=False), gc_grace_period=2.0)
        msgs = []
        i = 0
        while time.monotonic() < stop:
            msgs = msgs + [{"role": "tool", "content": f"w{k} m{i} " + "x" * (100 + 37 * (i % 50))}]
            try:
                m.save(f"run{k}", msgs)
            except Exception:  # noqa: BLE001 - reported below
                errors.append(("writer", traceback.format_exc()))
                return
            i += 1
            if i % 40 == 0:
                m.prune(keep_last=5, run_id=f"run{k}")
        final[f"run{k}"] = msgs

    CheckpointManager(LocalStore(root, fsync=False)).repo.close()  # created first: gc() of no repository raises
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    gc_runs = 0
    while time.monotonic() < stop:
        try:
            CheckpointManager(LocalStore(root, fsync=False)).gc(grace_period=2.0)
            gc_runs += 1
            cp = CheckpointManager(LocalStore(root, fsync=False)).latest("run0")
            assert cp is None or cp.messages[0]["content"].startswith("w0 m0 ")
        except Exception:  # noqa: BLE001
            errors.append(("gc/reader", traceback.format_exc()))
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert not errors, errors[0][1]
    assert gc_runs >= 3
    fresh = CheckpointManager(LocalStore(root, fsync=False))
    for run, msgs in final.items():
        assert json.dumps(fresh.latest(run).messages) == json.dumps(msgs)
    rep = fresh.verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]


def test_hostile_segment_list_in_a_manifest_is_a_typed_error():
    store = MemoryStore()
    m = CheckpointManager(store)
    m.save("r", _msgs(3))
    m.repo.head(m.repo.run_key("r"))
    from snapstore.format import keys
    from snapstore.format.manifest import Manifest
    key = keys.manifest_key(m.repo.run_key("r"), 0)
    man = Manifest.from_bytes(key, store.raw()[key])
    man.segs = None
    man.segs_text = None
    body = man.to_bytes()
    # a record whose list is not a valid segment string is refused naming the object
    from snapstore.format.codec import dumps_exact, loads_exact, seal_envelope
    from snapstore.format.manifest import MANIFEST_MAGIC, open_manifest
    version, raw = open_manifest(key, body)
    d = loads_exact(raw)
    d["segs"] = "not hex at all"
    # version 4: the envelope stored, the body "codec 0 | JSON" (docs/format.md §11)
    store.corrupt(key, seal_envelope(MANIFEST_MAGIC, version, b"\0" + dumps_exact(d), compress=False))
    with pytest.raises(IntegrityError) as ei:
        CheckpointManager(store).latest("r")
    assert key in str(ei.value) and "segment list" in str(ei.value)


def test_a_rewritten_segment_that_still_exists_is_read_itself():
    """GC rewrote a tier pack (its live entries into a new pack, a forwarding record to it) and
    the old one waits out the grace period; a checkpoint written since needs an entry the rewrite
    dropped. A reader whose forwarding hints are loaded must still read the old pack (regression:
    it went to the rewrite only, and the load test's cold reads failed with a missing pack)."""
    import os
    from snapstore.format import keys
    from snapstore.format.forward import encode_forward_cache
    from snapstore.format.pack import T_CHUNK, Pack, PackBuilder
    store = MemoryStore()
    m = CheckpointManager(store)
    msgs = _msgs(8)
    for i in range(1, 9):
        m.save("r", msgs[:i + 1])
    tier = next(sg.pack for sg in m.repo.head(m.repo.run_key("r")).segment_list() if sg.level >= 1)
    old = Pack.parse("t", store.raw()[keys.pack_key(tier)])
    # the "rewrite": everything but the chunks (as if they had been dead when GC marked)
    new_id = os.urandom(8)
    pb = PackBuilder(new_id)
    for (etype, eid), e in old.entries.items():
        if etype != T_CHUNK:
            pb.add(etype, eid, old.entry_bytes(e))
    store.put(keys.pack_key(new_id), pb.build()[0])
    store.put(keys.FWD_CACHE, encode_forward_cache({tier: ('"x"', [new_id], 0.0)}))
    reader = CheckpointManager(store)
    assert reader.repo.forward_hints() == {tier: [new_id]}  # hints loaded, as after a first miss
    assert json.dumps(reader.latest("r").messages) == json.dumps(msgs)


def test_covered_lower_level_log_segments_are_deleted():
    """Once the level-2 segment of positions 0..255 is written, the 16 level-1 segments it covers
    are gone (each record is copied once, not up to three more times), and list() still reads the
    whole log from the segments."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    msgs = []
    ids = []
    for i in range(256 + 32):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        ids.append(mgr.save("r", msgs))
    rk = mgr.repo.run_key("r")
    segs = sorted(parse_logseg_key(i.key) for i in store.list(f"runs/{rk}/l/"))
    assert segs == [(255, 2), (271, 1), (287, 1)], segs
    fresh = CheckpointManager(store)
    before = store.stats.counts.get("GET", 0)
    assert [c.id for c in fresh.list("r")] == ids[::-1]
    assert store.stats.counts.get("GET", 0) - before <= 8  # config, 3 log segments, no manifest per position
