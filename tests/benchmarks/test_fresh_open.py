"""benchmarks/fresh_open.py runs end to end: the steps of a fresh-process latest() timed at their
boundaries, one trial per checkout (skipped without the shared data)."""

from __future__ import annotations

import shutil
import sys

import pytest
from tests.helpers import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT))
from benchmarks import fresh_open  # noqa: E402
from tests.helpers.shared_data import shared_data_dir  # noqa: E402


@pytest.mark.skipif(shared_data_dir() is None, reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
def test_fresh_open_times_the_steps_of_latest_against_another_checkout(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(ROOT / "snapstore", other / "snapstore", ignore=shutil.ignore_patterns("__pycache__"))
    r = fresh_open.measure(trials=1, compare=str(other))
    assert r["messages"] > 100 and r["trials"] == 1 and len(r["trees"]) == 2
    for tree in r["trees"]:
        st = {k: v["wall_s"] for k, v in r["steps"][tree].items()}
        assert all(v > 0 for v in st.values())
        assert st["before segments"] == pytest.approx(st["manager"] + st["open"] + st["newest record"], rel=0.05)
        assert st["total"] >= st["before segments"] + st["segments + messages"]
    text = fresh_open.report(r)
    assert "before segments" in text and "other" in text
    with pytest.raises(ValueError, match="this checkout"):
        fresh_open.measure(trials=1, compare=str(ROOT))
    with pytest.raises(ValueError, match="no snapstore"):
        fresh_open.measure(trials=1, compare=str(tmp_path))
