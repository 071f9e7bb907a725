"""Manifests of envelope version 4 (docs/format.md §11): the body compressed with the version-4
dictionary (codec 3), and a record of a run whose key segment is inline names its run by an
8-hex-digit digest (``rd``) instead of the full run id; the run id is the one its key names, and
the digest ties the record to it. Records of versions 1-3 still read.
"""

from __future__ import annotations

import json

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys
from snapstore.format.codec import dumps_exact, seal_envelope
from snapstore.format.ids import name_from_key, run_digest
from snapstore.format.manifest import (MANIFEST_DICT_V1, MANIFEST_MAGIC, MANIFEST_VERSION_ARRAYS,
                                       MANIFEST_VERSION_COMPACT, Manifest, open_manifest)
from snapstore.format.config import FORMAT_VERSION
from snapstore.stores.memory import MemoryStore

RUN = 'langgraph:["3f0c2a9e-7d1b-4c55-9e0a-2b6f1d8c4a77", ""]'  # a LangGraph thread's run id


def _save(mgr, run, n=3):
    msgs = []
    for i in range(n):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        mgr.save(run, msgs, step=i)
    return msgs


def _body(store, rk, seq):
    return open_manifest("m", store.raw()[keys.manifest_key(rk, seq)])


def test_a_record_of_an_inline_run_key_names_its_run_by_digest_and_reads_back():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    _save(mgr, RUN)
    rk = mgr.repo.run_key(RUN)
    assert name_from_key(rk) == RUN
    version, body = _body(store, rk, 2)
    d = json.loads(body)
    assert version == MANIFEST_VERSION_ARRAYS and "run" not in d and d["rd"] == run_digest(RUN)
    # the same record with the full run id, as version 2 wrote it: larger, and still read
    full = dict(kind=d.pop("kind"), run=RUN, **{k: v for k, v in d.items() if k != "rd"})
    old = seal_envelope(MANIFEST_MAGIC, FORMAT_VERSION, dumps_exact(full), MANIFEST_DICT_V1)
    new = store.raw()[keys.manifest_key(rk, 2)]
    print(f"manifest with run id {len(old)} B, compact {len(new)} B")
    assert len(new) < len(old)
    assert Manifest.from_bytes(keys.manifest_key(rk, 2), old) == Manifest.from_bytes(keys.manifest_key(rk, 2), new)
    fresh = CheckpointManager(store)
    assert fresh.latest(RUN).step == 2 and fresh.latest(RUN).run_id == RUN
    assert [c.step for c in fresh.list(RUN)] == [2, 1, 0]
    assert RUN in fresh.runs()


def test_a_compact_record_under_another_runs_key_is_corrupt():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    _save(mgr, "a")
    _save(mgr, "b", 1)
    ka, kb = mgr.repo.run_key("a"), mgr.repo.run_key("b")
    store.put(keys.manifest_key(kb, 1), store.raw()[keys.manifest_key(ka, 1)])  # a's record at b's next position
    with pytest.raises(IntegrityError, match=keys.manifest_key(kb, 1)):
        CheckpointManager(store).latest("b")
    assert any(p.key == keys.manifest_key(kb, 1) for p in CheckpointManager(store).verify().errors)


def test_a_compact_record_needs_a_run_key_and_the_right_digest():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    _save(mgr, "a", 1)
    data = store.raw()[keys.manifest_key(mgr.repo.run_key("a"), 0)]
    with pytest.raises(IntegrityError, match="digest only"):
        Manifest.from_bytes("somewhere", data)
    with pytest.raises(IntegrityError, match="another run"):
        Manifest.from_bytes("somewhere", data, run_id="b")
    assert Manifest.from_bytes("somewhere", data, run_id="a").run_id == "a"
    # rd is only valid in version 4, and not beside run
    v, body = open_manifest("m", data)
    d = json.loads(body)
    for version, bad in ((FORMAT_VERSION, d), (v, dict(d, run="a"))):
        raw = dumps_exact(bad)
        obj = (seal_envelope(MANIFEST_MAGIC, version, raw, MANIFEST_DICT_V1) if version < 4
               else seal_envelope(MANIFEST_MAGIC, version, b"\0" + raw, compress=False))
        with pytest.raises(IntegrityError):
            Manifest.from_bytes(keys.manifest_key(mgr.repo.run_key("a"), 0), obj)


def test_a_run_id_too_long_for_its_key_keeps_the_full_id():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    long_run = "thread-" + "x" * 200
    _save(mgr, long_run, 2)
    rk = mgr.repo.run_key(long_run)
    assert rk.startswith("h") and name_from_key(rk) is None
    version, body = _body(store, rk, 1)
    assert version == MANIFEST_VERSION_ARRAYS and json.loads(body)["run"] == long_run and "rd" not in json.loads(body)
    fresh = CheckpointManager(store)
    assert fresh.latest(long_run).step == 1 and long_run in fresh.runs()


def test_version4_manifests_are_a_third_smaller_and_older_versions_still_read():
    """A LangGraph-shaped record (the two records SnapstoreSaver writes per step) and a
    CheckpointManager checkpoint: the version-2 encoding (full run id, MANIFEST_DICT_V1) against
    version 4, and the version-2 object still decodes to the same record."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    msgs = []
    for i in range(20):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        mgr.save(RUN, msgs, step=i, metadata={"lg": "c", "id": f"1f1ed985-c814-60ce-8382-7772f67eb{i:03d}",
                                               "parent": f"1f1ed985-c80a-6540-8381-fac0c6b85{i:03d}",
                                               "chs": ["messages"], "md": {"source": "loop", "step": i, "parents": {}}},
                 session_state={"cp": {"json": {"v": 4, "ts": "2026-12-01T15:03:26.798241+00:00",
                                                "channel_versions": {"__start__": i, "messages": i + 1,
                                                                     "branch:to:model": i + 1},
                                                "versions_seen": {"__input__": {}, "__start__": {"__start__": i},
                                                                  "model": {"branch:to:model": i}},
                                                "updated_channels": ["messages"]}},
                                "layout": [["messages", "s", 0, i]], "nlead": i})
        mgr.save("plain", msgs, step=i, token_usage={"input_tokens": 1000 + i, "output_tokens": 80},
                 agent_id="coder", status="running", metrics={"latency_s": 1.5})
    for run in (RUN, "plain"):
        rk = mgr.repo.run_key(run)
        old = new = 0
        for seq in range(20):
            key = keys.manifest_key(rk, seq)
            obj = store.raw()[key]
            version, body = open_manifest(key, obj)
            d = json.loads(body)
            full = dict(kind=d.pop("kind"), run=run, **{k: v for k, v in d.items() if k != "rd"})
            v2 = seal_envelope(MANIFEST_MAGIC, FORMAT_VERSION, dumps_exact(full), MANIFEST_DICT_V1)
            assert Manifest.from_bytes(key, v2) == Manifest.from_bytes(key, obj)
            old += len(v2)
            new += len(obj)
        print(f"{run[:10]}: version 2 {old / 20:.0f} B per manifest, version 4 {new / 20:.0f} B")
        assert new < (0.75 if run == RUN else 0.95) * old


def test_version6_saver_records_use_the_v3_dictionary_and_a_version5_reader_refuses_them(monkeypatch):
    """A record of SnapstoreSaver's layout v2 (metadata starting with "lg") is body codec 4
    (MANIFEST_DICT_V3) at envelope version 6, smaller than the same body with codec 3 (V2); a
    CheckpointManager checkpoint stays version 5 (codec 3); both read back. Codec 4 in a version-5
    envelope is corrupt, and a reader that knows only version 5 refuses a version-6 record as
    newer (UnsupportedFormatError), not as damage."""
    import zstandard

    from snapstore.errors import UnsupportedFormatError
    from snapstore.format import manifest as mf
    store = MemoryStore()
    mgr = CheckpointManager(store)
    msgs = []
    for i in range(12):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        mgr.save(RUN, msgs, metadata={"lg": "W", "for": f"1f1ef374-6508-6134-8000-bd2cd502d{i:03d}", "chs": ["messages"],
                                      "cpos": i, "snapstore.needs": {"from": 0, "by": "LangGraph checkpoint and DeltaChannel delta chain"},
                                      "cfrom": 0},
                 session_state={"v": 2, "cf": f"1f1ef374-64dc-67a9-bfff-0631cd455{i:03d}",
                                "c": {"v": 2, "k": 1, "layout": [["__start__", "d", i, 2]], "meta": i + 2,
                                      "hist": {"messages": [0, i]}}, "cn": i + 3,
                                "w": [[f"01044fd3-473e-bdd6-5b17-80d066af0{i:03d}", "~__pregel_pull, __start__", "messages",
                                       0, "m", i + 3, 1]]})
        mgr.save("plain", msgs, step=i, token_usage={"input_tokens": 1000 + i, "output_tokens": 80})
    saver_v3 = saver_v2 = 0
    for seq in range(12):
        key = keys.manifest_key(mgr.repo.run_key(RUN), seq)
        obj = store.raw()[key]
        assert obj[4] == mf.MANIFEST_VERSION_DICT3 and obj[6 + 16] == 4, (obj[4], obj[22])
        version, body = open_manifest(key, obj)
        assert version == mf.MANIFEST_VERSION_DICT3
        with_v2 = zstandard.ZstdCompressor(level=19, dict_data=mf._ZD2, write_checksum=False,
                                           write_dict_id=False).compress(body)
        saver_v3 += len(obj) - 23
        saver_v2 += len(with_v2)
        # the same body in a version-5 envelope with codec 4: corrupt, named
        bad = seal_envelope(MANIFEST_MAGIC, MANIFEST_VERSION_ARRAYS, obj[22:], compress=False)
        with pytest.raises(IntegrityError, match="codec 4"):
            Manifest.from_bytes(key, bad, run_id=RUN)
        pkey = keys.manifest_key(mgr.repo.run_key("plain"), seq)
        assert store.raw()[pkey][4] == MANIFEST_VERSION_ARRAYS
    print(f"saver-shaped records: {saver_v3 / 12:.0f} B with MANIFEST_DICT_V3, {saver_v2 / 12:.0f} B with V2")
    assert saver_v3 < 0.8 * saver_v2
    fresh = CheckpointManager(store)
    assert len(fresh.list(RUN)) == 12 and fresh.latest(RUN).metadata["cpos"] == 11
    assert fresh.latest("plain").step == 11
    monkeypatch.setattr(mf, "MANIFEST_VERSION_MAX", mf.MANIFEST_VERSION_ARRAYS)
    key = keys.manifest_key(mgr.repo.run_key(RUN), 11)
    with pytest.raises(UnsupportedFormatError, match="newer"):
        Manifest.from_bytes(key, store.raw()[key], run_id=RUN)
    Manifest.from_bytes(keys.manifest_key(mgr.repo.run_key("plain"), 11),
                        store.raw()[keys.manifest_key(mgr.repo.run_key("plain"), 11)])
