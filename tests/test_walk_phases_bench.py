"""benchmarks/walk_phases.py runs end to end: fresh children, every phase timed, the floors and the
fixed-malloc and bytecode modes reported, a kept repository reused (one trial; skipped without the shared data)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from benchmarks import walk_phases  # noqa: E402
from shared_data import shared_data_dir  # noqa: E402


@pytest.mark.skipif(shared_data_dir() is None, reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
def test_walk_phases_times_every_phase_in_fresh_children_and_reuses_a_kept_repository(tmp_path):
    keep = tmp_path / "ab"
    r = walk_phases.measure(trials=1, floors=True, fixed_malloc=True, repo=str(keep))
    assert r["messages"] > 100 and r["fixed_malloc"]
    ph = r["phases"]
    assert ph["Pack.parse"]["calls"] == r["packs"] and ph["_parse_header"]["calls"] >= r["packs"]
    assert ph["TreeReader.expand"]["calls"] == 1 and 0 < ph["TreeReader.expand"]["wall_s"] < r["total_s"]
    assert 0 < ph["_parse_header"]["wall_s"] <= ph["Pack.parse"]["wall_s"]  # nested in it
    f = r["floors"]
    assert f["entries"] > 100 and f["items"] >= r["messages"] and f["nodes"] > 1
    assert 0 < f["header_ints_s"] and 0 < f["refs_only_s"]
    info = json.loads((keep / "info.json").read_text())
    again = walk_phases.measure(trials=1, repo=str(keep), pyc=True)  # the same repository, not a new one
    assert again["packs"] == info["packs"] == r["packs"] and again["pyc"]
    walk_phases.local_read.compile_checkout(str(tmp_path / "pycache"))  # into the private cache it names
    assert list((tmp_path / "pycache").rglob("trees.cpython-*.pyc"))
    text = walk_phases.report(again)
    assert "TreeReader.expand" in text and "load_with_state rest" in text
