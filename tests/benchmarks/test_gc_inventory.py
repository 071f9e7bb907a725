"""benchmarks/gc_inventory.py runs small: the inventory listing lists the same packs with fewer LISTs."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import paths


def test_gc_inventory_benchmark_runs_small(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(paths.ROOT / "benchmarks" / "gc_inventory.py"), "--runs", "3",
                        "--checkpoints", "2", "--extra-packs", "1200", "--partitions", "2", "--latency-ms", "0",
                        "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    by = {x["listing"]: x for x in json.loads(out.read_text())}
    assert by["LIST"]["listed_packs"] == by["inventory"]["listed_packs"] > 1200
    assert by["LIST"]["candidates"] == by["inventory"]["candidates"]
    # 2 partitions and the driver each list 2 pages of packs/ without the inventory
    assert by["LIST"]["requests"]["LIST"] - by["inventory"]["requests"]["LIST"] >= 6
