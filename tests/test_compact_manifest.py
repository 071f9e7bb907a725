"""Compact manifests (envelope version 4, docs/format.md §8): a record of a run whose key segment is
inline names its run by an 8-hex-digit digest (``rd``) instead of the full run id; the run id is
the one its key names, and the digest ties the record to it.
"""

from __future__ import annotations

import json

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys
from snapstore.format.codec import dumps_exact, seal_envelope
from snapstore.format.ids import name_from_key, run_digest
from snapstore.format.manifest import (FORMAT_VERSION, MANIFEST_DICT_V1, MANIFEST_MAGIC, MANIFEST_VERSION_COMPACT,
                                       Manifest, open_manifest)
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
    assert version == MANIFEST_VERSION_COMPACT and "run" not in d and d["rd"] == run_digest(RUN)
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
        obj = seal_envelope(MANIFEST_MAGIC, version, dumps_exact(bad), MANIFEST_DICT_V1)
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
    assert version == FORMAT_VERSION and json.loads(body)["run"] == long_run
    fresh = CheckpointManager(store)
    assert fresh.latest(long_run).step == 1 and long_run in fresh.runs()
