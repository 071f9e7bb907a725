"""benchmarks/write_amp.py on a real directory and SQLite file: every byte PUT and stored is given a
kind, the kinds add up to what the store holds, and tier packs are told from per-save packs."""

from __future__ import annotations

import os

import pytest

from benchmarks import write_amp


@pytest.mark.parametrize("kind", ["dir", "sqlite"])
def test_breakdown_adds_up(kind):
    r = write_amp.measure(kind, 40, None)
    put, stored = r["put"], r["stored"]
    assert r["put_bytes"] == sum(v[1] for v in put.values()) and r["stored_bytes"] == sum(v[1] for v in stored.values())
    # 40 saves at fanout 4: 30 per-save packs (a merging save writes its tier pack only), 10 tier
    # merges (L1 every 4th save, L2 folded in every 16th), manifests, 16 stubs on a directory (after save 31; SQLite keeps full manifests), 2 level-1 log segments
    assert put["pack L0"][0] == 30 and put["tier L1"][0] + put["tier L2"][0] == 10
    assert put["manifest"][0] == 40 and stored["stub"][0] == (16 if kind == "dir" else 0) and put["logseg L1"][0] == 2
    assert stored["pack L0"][0] + sum(stored[f"tier L{i}"][0] for i in range(1, 10)) == r["segments"]
    assert r["amp"] > 1 and r["objects"] == sum(v[0] for v in stored.values())


def test_key_kinds():
    k = write_amp.key_kind
    assert k("packs/ab/ab01", 10, {}) == "pack L0" and k("packs/ab/ab01", 10, {"packs/ab/ab01": 12}) == "tier L9"
    assert [k("runs/bX/m/00ff", n, {}) for n in (0, 1, 300)] == ["stub", "void", "manifest"]
    assert k("runs/bX/l/ffff.2", 5, {}) == "logseg L2" and k("runmarks/x", 0, {}) == "marker"
    assert k("config", 300, {}) == k("runs/bX/x/1.2", 9, {}) == "other"
    assert os.path.basename(write_amp.__file__) == "write_amp.py"


def test_covered_manifests_are_those_a_log_segment_holds():
    # SQLite keeps full manifests: 40 saves write level-1 log segments ending at 15 and 31, so
    # positions 0-31 are covered and 32-39 (the unfinished range) are not
    r = write_amp.measure("sqlite", 40, None)
    n_ret, b_ret = r["retired"]
    assert n_ret == 32 and 0 < b_ret < r["stored"]["manifest"][1]
    assert r["amp_retired"] == r["put_bytes"] / (r["stored_bytes"] - b_ret) > r["amp"]
    assert 1 < r["amp_floor_retired"] < r["amp_retired"]


def test_covered_manifests_ignores_other_runs_segments_and_stubs():
    from snapstore.format.keys import manifest_key
    from snapstore.format.logseg import logseg_key
    from snapstore.stores.base import ObjectInfo

    def info(key, size):
        return ObjectInfo(key=key, size=size, etag="e", mtime=0.0)
    listed = [info(manifest_key("bA", 3), 300), info(manifest_key("bA", 20), 300), info(manifest_key("bA", 5), 0),
              info(manifest_key("bB", 4), 250), info(logseg_key("bA", 15, 1), 900)]
    assert write_amp.covered_manifests(listed, {}) == [1, 300]
