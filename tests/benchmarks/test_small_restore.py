"""benchmarks/small_restore.py runs end to end (one trial, one workload; skipped without the shared
data or without langgraph-checkpoint-sqlite): every side timed in a fresh child with no import
inside the clock, the restored history checked, medians and ratios reported; a child whose
restore differs from the run fails."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import paths
from tests.helpers.shared_data import shared_data_dir

sys.path.insert(0, str(paths.ROOT / "benchmarks"))
pytest.importorskip("langgraph.checkpoint.sqlite", reason="needs the bench extra (langgraph-checkpoint-sqlite)")
import small_restore  # noqa: E402

needs_data = pytest.mark.skipif(shared_data_dir() is None,
                                reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")


@needs_data
def test_one_trial_of_one_workload(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert small_restore.main(["--trials", "1", "--limit", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    (name, w), = r["workloads"].items()
    assert w["checkpoints"] >= 3 and 0 < w["bytes"] <= small_restore.SMALL_BYTES
    assert w["sqlitesaver_ms"] > 0 and w["sqlitesaver_read_ms"] > 0
    assert set(w["sides"]) == {"snapstore-dir@worktree", "snapstore-sqlite@worktree"}
    for s in w["sides"].values():
        assert s["ms"] > 0 and s["cpu_ms"] > 0
        assert s["vs_sqlitesaver"] == pytest.approx(s["ms"] / w["sqlitesaver_ms"])
    text = capsys.readouterr().out
    assert name[:20] in text and "worst vs_sqlitesaver:" in text and "worst vs_sqlitesaver_read:" in text


@needs_data
def test_a_child_whose_restore_differs_fails(tmp_path):
    name, cps = small_restore.small_runs(1)[0]
    w = small_restore.build(tmp_path, name, cps)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(cps[-1][:-1]))
    for side in small_restore.SIDES:
        spec = dict(small_restore.spec_of(side, w), expect=str(wrong))
        with pytest.raises(AssertionError, match="differs"):
            small_restore.child_main(spec)
        got = small_restore.child_main(small_restore.spec_of(side, w))
        assert got["count"] == len(cps[-1]) and got["wall_s"] > 0
