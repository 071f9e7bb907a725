"""benchmarks/manager_memory.py runs and reports a row per run count and store."""

from __future__ import annotations

import json

from benchmarks import manager_memory


def test_rows_per_count_and_store(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert manager_memory.main(["--runs", "20,40", "--stores", "dir,sqlite", "--saves", "2",
                                "--run-cache-entries", "16", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["store"], r["runs"]) for r in rows] == [("dir", 20), ("dir", 40), ("sqlite", 20), ("sqlite", 40)]
    assert all(r["views"] == 16 and r["rss_mb"] > 0 and r["view_mb"] is not None for r in rows)
    assert "40 runs" in capsys.readouterr().out
