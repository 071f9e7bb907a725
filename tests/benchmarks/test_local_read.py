"""benchmarks/local_read.py runs end to end: both sides in fresh processes, the restore checked
against the file, medians and the ratio reported (one trial; skipped without the shared data)."""

from __future__ import annotations

import sys

import pytest
from tests.helpers import paths

sys.path.insert(0, str(paths.ROOT))
from benchmarks import local_read  # noqa: E402
from tests.helpers.shared_data import shared_data_dir  # noqa: E402


@pytest.mark.skipif(shared_data_dir() is None, reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
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
