"""benchmarks/local_read.py runs end to end in its three modes (one trial each; skipped without the
shared data): the read against json.load (both sides in fresh processes, the restore checked
against the file, medians and the ratio), ``--open`` (the steps of a fresh latest() timed at their
boundaries, per checkout) and ``--phases`` (every phase timed, the floors, the fixed-malloc and
bytecode options, a kept repository reused)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from tests.helpers import paths

ROOT = paths.ROOT
sys.path.insert(0, str(paths.ROOT))
from benchmarks import local_read  # noqa: E402
from tests.helpers.shared_data import shared_data_dir  # noqa: E402

needs_data = pytest.mark.skipif(shared_data_dir() is None,
                                reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")


@needs_data
def test_local_read_benchmark_measures_both_sides_the_same_way():
    r = local_read.measure(trials=1)
    assert r["messages"] > 100 and r["checkpoints"] > 10  # the largest shared coding run
    for side in ("latest", "json_load"):
        assert 0 < r[f"{side}_s"] < r[f"{side}_process_s"]  # the read is timed inside the process
        assert r[f"{side}_cpu_s"] > 0 and r[f"{side}_faults"] > 0
    assert r["ratio"] == pytest.approx(r["latest_s"] / r["json_load_s"])
    assert 0 < r["fixed_s"] < r["latest_s"] and 0 < r["floor_s"]  # the one-save run; the floor
    text = local_read.report(r)
    assert "latest()" in text and "json.load" in text and r["verdict"] in text and "fixed:" in text


@needs_data
def test_open_mode_times_the_steps_of_latest_against_another_checkout(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ROOT / "snapstore", other / "snapstore", ignore=shutil.ignore_patterns("__pycache__"))
    r = local_read.measure_open(trials=1, compare=str(other))
    assert r["messages"] > 100 and r["trials"] == 1 and len(r["trees"]) == 2
    for tree in r["trees"]:
        st = {k: v["wall_s"] for k, v in r["steps"][tree].items()}
        assert all(v > 0 for v in st.values())
        assert st["before segments"] == pytest.approx(st["manager"] + st["open"] + st["newest record"], rel=0.05)
        assert st["total"] >= st["before segments"] + st["segments + messages"]
    text = local_read.report_open(r)
    assert "before segments" in text and "other" in text
    with pytest.raises(ValueError, match="this checkout"):
        local_read.measure_open(trials=1, compare=str(ROOT))
    with pytest.raises(ValueError, match="no snapstore"):
        local_read.measure_open(trials=1, compare=str(tmp_path))


@needs_data
def test_phases_mode_times_every_phase_in_fresh_children_and_reuses_a_kept_repository(tmp_path):
    keep = tmp_path / "ab"
    r = local_read.measure_phases(trials=1, floors=True, fixed_malloc=True, repo=str(keep))
    assert r["messages"] > 100 and r["fixed_malloc"]
    ph = r["phases"]
    assert ph["Pack.parse"]["calls"] == r["packs"] and ph["parse_header"]["calls"] >= r["packs"]
    assert ph["TreeReader.expand"]["calls"] == 1 and 0 < ph["TreeReader.expand"]["wall_s"] < r["total_s"]
    assert 0 < ph["parse_header"]["wall_s"] <= ph["Pack.parse"]["wall_s"]  # nested in it
    f = r["floors"]
    assert f["entries"] > 100 and f["items"] >= r["messages"] and f["nodes"] > 1
    assert 0 < f["header_s"] and 0 < f["nodes_s"] and 0 < f["refs_only_s"]
    info = json.loads((keep / "info.json").read_text())
    again = local_read.measure_phases(trials=1, repo=str(keep), pyc=True)  # the same repository, not a new one
    assert again["packs"] == info["packs"] == r["packs"] and again["pyc"]
    local_read.compile_checkout(str(tmp_path / "pycache"))  # into the private cache it names
    assert list((tmp_path / "pycache").rglob("trees.cpython-*.pyc"))
    text = local_read.report_phases(again)
    assert "TreeReader.expand" in text and "load_with_state rest" in text


def test_options_of_one_mode_are_refused_in_another():
    """The command line keeps each mode's options to it (no data needed: refused before building)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "local_read.py"), "--floors"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--phases" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "local_read.py"), "--open", "--phases"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr
