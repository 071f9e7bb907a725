"""The side-by-side benchmark harness (``python -m benchmarks``) on a tiny workload: it must keep
writing every required key, restore exactly, and say why a system it cannot run was skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import paths

ROOT = paths.ROOT
sys.path.insert(0, str(ROOT))

from benchmarks import harness, report, workloads as wl  # noqa: E402
from benchmarks.peers import JsonFiles, LangGraphDelta, S3Env, SnapstoreLocal, SqliteRows  # noqa: E402


def _tiny_data(tmp_path: Path) -> Path:
    """One OpenAI-chat trajectory of 6 turns, written as a file the importers read."""
    d = tmp_path / "data"
    d.mkdir()
    msgs = [{"role": "system", "content": "You are a coding agent. " * 20},
            {"role": "user", "content": "Fix the failing test in src/app.py, é→ü"}]
    for i in range(6):
        msgs.append({"role": "assistant", "content": f"step {i}: run the tests " * 5,
                     "tool_calls": [{"id": f"c{i}", "type": "function",
                                     "function": {"name": "bash", "arguments": json.dumps({"cmd": f"pytest -k t{i}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"FAILED test_{i} " * 40})
    (d / "tiny-run.json").write_text(json.dumps(msgs, ensure_ascii=False))
    return d


def test_harness_writes_every_required_key(tmp_path):
    data = _tiny_data(tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks", "--quick", "--data", str(data), "--workloads", "traj:",
           "--systems", "snapstore-local,json-files,snapstore-saver,snapstore-sqlite",
           "--out", str(out), "--report", str(out / "RESULTS.md")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads((out / "latest.json").read_text())
    assert {r["system"] for r in records} == {"snapstore-local", "json-files", "snapstore-saver", "snapstore-sqlite"}
    for r in records:
        assert set(harness.RECORD_KEYS) <= set(r), set(harness.RECORD_KEYS) - set(r)
        assert r["workload"] == "traj:tiny-run.json"
        assert r["lower_bound_bytes"] > 0 and r["durability"]
        if r["status"] == "skipped":
            assert r["note"]  # says why
            continue
        assert r["status"] == "ok", r
        assert r["restore_ok"] is True
        assert r["checkpoints"] == 6
        assert r["stored_bytes"] > 0 and r["objects"] > 0 and r["disk_bytes"] >= r["stored_bytes"] // 2
        assert 0 < r["save_p50_ms"] <= r["save_p99_ms"] and r["restore_ms"] > 0 and r["total_s"] > 0
        assert r["resume_round_trips"] is None  # local systems only here
    by = {r["system"]: r for r in records}
    # whole history per checkpoint stores more than snapstore on 6 growing checkpoints
    assert by["json-files"]["stored_bytes"] > by["snapstore-local"]["stored_bytes"]
    assert by["json-files"]["requests"] == {"files written": 6}
    # the SQLite file: one file once the store closed (the WAL checkpointed into it), same restore
    assert by["snapstore-sqlite"]["objects"] == 1 and by["snapstore-sqlite"]["restore_ok"] is True
    text = (out / "RESULTS.md").read_text()
    assert "python -m benchmarks" in text and "## Targets" in text and "## Where snapstore loses" in text
    assert "traj:tiny-run.json" in text and "$/month" in text
    assert "snapstore-sqlite: save p50 at most DeltaChannel's" in text  # issue 22's targets: measured or "not measured"
    again = out / "again.md"
    assert harness.main(["--report-only", "--no-plots", "--out", str(out), "--report", str(again)]) == 0
    assert "nothing re-measured" in again.read_text() and "traj:tiny-run.json" in again.read_text()
    assert harness.main(["--report-only", "--out", str(tmp_path / "none"), "--report", str(again)]) == 2
    try:
        import matplotlib  # noqa: F401  (the bench extra)
    except ImportError:
        assert "matplotlib not installed" in text
    else:
        assert list(out.glob("bytes-*.png")) and list(out.glob("latency-*.png"))


def test_deltas_and_lower_bound():
    a = {"role": "user", "content": "x"}
    b = {"role": "assistant", "content": "y"}
    run = wl.Run("r", [[a], [a, b], [b]])
    assert wl.deltas(run) == [("append", [a]), ("append", [b]), ("rewrite", [b])]
    assert wl.message_lb([run]) > 0
    msgs = [a, b, dict(a), dict(b)]
    lazy = wl.Run("p", wl.Prefixes(msgs, [1, 2, 4]))
    assert list(lazy.checkpoints) == [msgs[:1], msgs[:2], msgs] and lazy.checkpoints[1:][0] == msgs[:2]
    assert wl.deltas(lazy) == wl.deltas(wl.Run("q", [msgs[:1], msgs[:2], msgs]))
    assert wl.message_lb([lazy]) == wl.message_lb([wl.Run("q", [msgs[:1], msgs[:2], msgs])])


def test_langchain_messages_round_trip_exactly():
    lgraph = pytest.importorskip("benchmarks.lgraph")
    for m in ({"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
              {"content": "no role", "role": "user", "extra": 1},
              {"role": "exit", "content": [{"type": "text", "text": "t"}], "info": {"k": [1, 2]}},
              {"role": "tool", "tool_call_id": "c", "content": "out \ud800"},
              {"role": "system"}):
        back = lgraph.from_lc(lgraph.to_lc(m, "0"))
        assert back == m and list(back) == list(m)


def test_systems_in_process(tmp_path):
    """Four local systems on one tiny workload, through the same calls the harness makes."""
    runs = [wl.Run("r1", [[{"role": "user", "content": "a" * 300}],
                          [{"role": "user", "content": "a" * 300}, {"role": "assistant", "content": "b" * 300}]])]
    w = wl.Workload("t:x", "traj", runs, wl.message_lb(runs), "test")
    env = S3Env(0.0)
    args = type("A", (), {})()
    cfg = dict(harness.QUICK, trials=1, samples=2)
    recs = [harness.run_system(cls(env), w, args, cfg, tmp_path, env) for cls in (SnapstoreLocal, JsonFiles, SqliteRows)]
    if LangGraphDelta(env).unavailable() is None:
        recs.append(harness.run_system(LangGraphDelta(env), w, args, cfg, tmp_path, env))
    assert all(r["status"] == "ok" and r["restore_ok"] for r in recs), recs
    assert all(r["checkpoints"] == 2 for r in recs)
    assert recs[1]["stored_bytes"] == sum(len(json.dumps({"messages": cp}, ensure_ascii=False).encode())
                                          for cp in runs[0].checkpoints)
    rows = report.cost_table([dict(r, workload="traj:x") for r in recs])
    assert {c["system"] for c in rows} >= {"snapstore-local", "json-files", "sqlite-rows"}
    assert all(c["storage_usd_month"] > 0 for c in rows)


def test_quadratic_fit_extrapolates():
    xs = [1, 2, 3, 4, 5]
    ys = [3 * x * x + 2 * x + 7 for x in xs]
    assert harness.fit_quadratic(xs, ys, [10, 1000]) == {"10": 327, "1000": 3_002_007}
    assert harness.fit_quadratic(xs[:2], ys[:2], [10]) == {}
