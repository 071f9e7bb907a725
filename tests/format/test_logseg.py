"""Log segments of version 3 (docs/format.md §12): the covered records' bodies in one zstd frame.

Shows: a level-1 segment costs a fraction of its 16 manifests; segments of version 2 (whole
manifest objects, written by earlier versions) are still read by list(), GC and verify, also mixed
with version 3 in one run and merged into a version-3 level-2 segment; every copy is checked
(position, run, and in verify every field), and a wrong or corrupt copy falls back to the
manifest itself.
"""

from __future__ import annotations

import json

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.logseg import (LOG_VERSION, decode_logseg, encode_logseg, encode_logseg_v2, logseg_key,
                                     parse_logseg_key)
from snapstore.format.manifest import Manifest, open_manifest
from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore


def _run(store, n: int, run: str = "r") -> tuple[CheckpointManager, list[str]]:
    mgr = CheckpointManager(store)
    msgs, ids = [], []
    for i in range(n):
        msgs = msgs + [{"role": "user", "content": f"message {i} " + "x" * (i % 7)}]
        ids.append(mgr.save(run, msgs, step=i, token_usage={"input_tokens": 100 + i, "output_tokens": 7},
                            status="running", metadata={"task": "fix"}))
    return mgr, ids


def _segments(store, rk: str) -> list[tuple[int, int]]:
    return sorted(p for p in (parse_logseg_key(i.key) for i in store.list(f"runs/{rk}/l/")) if p)


def _to_v2(store, rk: str) -> None:
    """Rewrite every log segment of the run in the version-2 layout (whole manifest objects), as
    a writer before version 3 left them."""
    for hi, level in _segments(store, rk):
        k = logseg_key(rk, hi, level)
        recs = [(c.seq, store.get(keys.manifest_key(rk, c.seq))) for c in decode_logseg(k, store.get(k))]
        store.delete_many([k])
        store.put(k, encode_logseg_v2(recs))


def test_a_level1_segment_costs_a_fraction_of_its_manifests():
    store = MemoryStore()
    mgr, _ = _run(store, 32)
    rk = mgr.repo.run_key("r")
    raw = store.raw()
    k = logseg_key(rk, 15, 1)
    assert raw[k][4] == LOG_VERSION == 3
    manifests = sum(len(raw[keys.manifest_key(rk, s)]) for s in range(16))
    v2 = len(encode_logseg_v2([(s, raw[keys.manifest_key(rk, s)]) for s in range(16)]))
    print(f"16 manifests {manifests} B, version-2 segment {v2} B, version-3 segment {len(raw[k])} B")
    assert v2 > 0.9 * manifests  # sealed manifests do not compress again
    assert len(raw[k]) < 0.5 * manifests


def test_version2_segments_still_read_by_list_gc_and_verify():
    store = MemoryStore()
    mgr, ids = _run(store, 48)
    rk = mgr.repo.run_key("r")
    _to_v2(store, rk)
    assert all(store.raw()[logseg_key(rk, hi, lv)][4] == 2 for hi, lv in _segments(store, rk))
    fresh = CheckpointManager(store)
    before = store.stats.counts.get("GET", 0)
    listed = fresh.list("r")
    assert [c.id for c in listed] == ids[::-1]
    assert [c.step for c in listed] == list(range(47, -1, -1))
    assert store.stats.counts.get("GET", 0) - before <= 6  # config, head, 3 segments: no manifest each
    rep = fresh.verify()
    assert rep.ok and not [w for w in rep.warnings if w.code == "corrupt-logseg"], rep.warnings
    g = fresh.gc(grace_period=0)
    assert g.reclaimed_bytes >= 0
    assert json.dumps(fresh.latest("r").messages) == json.dumps(mgr.latest("r").messages)


def test_mixed_versions_merge_into_a_version3_level2_segment(tmp_path):
    store = LocalStore(str(tmp_path / "repo"))
    mgr, ids = _run(store, 128)
    rk = mgr.repo.run_key("r")
    _to_v2(store, rk)  # an older writer wrote the first 128 positions' segments
    msgs = mgr.latest("r").messages
    for i in range(128, 256):  # this version writes the rest; position 255 merges all 16
        msgs = msgs + [{"role": "user", "content": f"message {i}"}]
        ids.append(mgr.save("r", msgs, step=i))
    assert _segments(store, rk) == [(255, 2)]
    data = store.get(logseg_key(rk, 255, 2))
    assert data[4] == 3
    copies = decode_logseg("k", data)
    assert [c.seq for c in copies] == list(range(256))
    for c in copies:  # each copy equals the manifest at its position, field by field
        assert c.manifest("k", run_id="r") == mgr.repo.read_manifest_key(keys.manifest_key(rk, c.seq))  # stubs too (§14)
    fresh = CheckpointManager(store)
    assert [c.id for c in fresh.list("r")] == ids[::-1]
    assert fresh.verify().ok


def _replace_copy(store, rk: str, seq: int, edit) -> None:
    """Re-encode the level-1 segment holding ``seq`` with that copy's JSON body changed by ``edit``."""
    hi = seq | 15
    k = logseg_key(rk, hi, 1)
    recs = []
    for c in decode_logseg(k, store.raw()[k]):
        v, body = c.record(k)
        if c.seq == seq:
            d = json.loads(body)
            edit(d)
            body = json.dumps(d, separators=(",", ":")).encode()
        recs.append((c.seq, v, body))
    store.delete_many([k])
    store.put(k, encode_logseg(recs))


def test_a_misplaced_or_corrupt_copy_falls_back_to_the_manifest():
    store = MemoryStore()
    mgr, ids = _run(store, 32)
    rk = mgr.repo.run_key("r")
    _replace_copy(store, rk, 3, lambda d: d.update(seq=4, step=99))  # another position
    _replace_copy(store, rk, 5, lambda d: d.update(run="other", step=98))  # another run
    _replace_copy(store, rk, 7, lambda d: d.pop("messages"))        # not a valid manifest
    fresh = CheckpointManager(store)
    listed = fresh.list("r")
    assert [c.id for c in listed] == ids[::-1]
    assert [c.step for c in listed] == list(range(31, -1, -1))


def test_verify_warns_about_a_copy_that_differs_in_any_field():
    store = MemoryStore()
    mgr, _ = _run(store, 16)
    rk = mgr.repo.run_key("r")
    _replace_copy(store, rk, 9, lambda d: d.update(step=999))  # right run and position, wrong content
    rep = CheckpointManager(store).verify()
    warned = [w for w in rep.warnings if w.code == "corrupt-logseg"]
    assert warned and "position 9" in warned[0].message, rep.warnings


def test_a_corrupt_segment_object_is_skipped_by_list():
    store = MemoryStore()
    mgr, ids = _run(store, 16)
    rk = mgr.repo.run_key("r")
    k = logseg_key(rk, 15, 1)
    data = bytearray(store.raw()[k])
    data[-3] ^= 0xFF
    store.delete_many([k])
    store.put(k, bytes(data))
    fresh = CheckpointManager(store)
    assert [c.id for c in fresh.list("r")] == ids[::-1]
    assert any(w.code == "corrupt-logseg" for w in fresh.verify().warnings)


def test_open_manifest_and_from_body_agree_with_from_bytes():
    store = MemoryStore()
    mgr, _ = _run(store, 2)
    rk = mgr.repo.run_key("r")
    obj = store.raw()[keys.manifest_key(rk, 1)]
    v, body = open_manifest("m", obj)
    assert Manifest.from_body("m", v, body, run_id="r") == Manifest.from_bytes("m", obj, run_id="r")
