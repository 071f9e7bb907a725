"""``benchmarks/archive.py`` (issue 23's Must show) on a tiny workload: every checkpoint read back
after archive and GC, bundles under the lower-bound target, the hot catalogue measured, the 1M
cost table consistent with the bill; and ``python -m benchmarks`` gives a snapstore-archived row."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchmarks import archive as bench, workloads as wl  # noqa: E402
from tests.benchmarks.test_harness import _tiny_data  # noqa: E402


def test_archive_benchmark_rows_and_cost_table(tmp_path):
    w = wl.shared_prompt(4, 3)
    row = bench.run_workload(w, tmp_path)
    assert row["exact"] and row["runs"] == 4 and row["checkpoints"] == 12 and row["bundles"] == 1
    assert row["bundle"] < row["hot"] and row["bundle"] <= 1.2 * row["lb"] + 1024 * row["runs"]
    assert row["hot_left"] >= row["logs_left"] + row["manifests_left"] + row["index_left"] > 0
    assert 0 < row["hot_left_per_ckpt"] < 1000 and row["objects_per_run"] < row["hot_objects_per_run"]
    table = {what: rest for what, *rest in bench.cost_table([row])}
    live, deep = table["live (every object in STANDARD)"], table["archived, DEEP_ARCHIVE"]
    # a month of 1M checkpoints costs less archived in Deep Archive than live, and its objects fall
    assert deep[0] < live[0] and deep[3] < live[3]
    # live: bytes per checkpoint x 1M at STANDARD's 0.023 $/GB-month
    assert abs(live[0] - row["hot"] / row["checkpoints"] * 1e6 / 2 ** 30 * 0.023) < 1e-6
    text = bench.report([row])
    assert "archived, GLACIER_IR" in text and "shared-prompt" in text


def test_python_m_benchmarks_has_an_archived_row(tmp_path):
    data = _tiny_data(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "--data", str(data), "--workloads", "traj:",
           "--systems", "snapstore-local,snapstore-archived", "--trials", "1", "--no-plots",
           "--out", str(out), "--report", str(out / "RESULTS.md")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by = {r["system"]: r for r in json.loads((out / "latest.json").read_text())}
    arch = by["snapstore-archived"]
    assert arch["status"] == "ok" and arch["restore_ok"] is True
    assert arch["stored_bytes"] < by["snapstore-local"]["stored_bytes"]
    assert "snapstore-archived" in (out / "RESULTS.md").read_text()
