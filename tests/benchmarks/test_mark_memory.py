"""benchmarks/mark_memory.py run small: it builds a repository, measures one partition's mark (live
checkpoints counted, a resident-set peak not below the baseline, tracemalloc lines), and the memory
projection of benchmarks/distributed_gc.py adds what it says it adds."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import mark_memory  # noqa: E402


def test_measure_counts_the_checkpoints_and_attributes_memory(tmp_path):
    cache = tmp_path / "r3.pickle"
    n = mark_memory.build(cache, 3, 4)
    assert n > 12 and mark_memory.build(cache, 3, 4) == n  # reused
    out = mark_memory.measure(str(cache), top=3, cache_mib=8)
    assert out["live_checkpoints"] == 12 and out["runs"] == 3
    assert out["peak_kib"] >= out["baseline_kib"] and len(out["top"]) == 3


def test_memory_projection_arithmetic():
    import distributed_gc
    text = distributed_gc.memory_projection([{"start_rss_mib_per_worker": 100}], 1000.0, 4, total=64 * 4 * 1000,
                                            workers=64)
    # 1,000 checkpoints per partition x 1,000 B + (100 + 256) MiB
    assert "1,000 checkpoints per partition" in text
    assert f"{(1000 * 1000 + 356 * 2**20) / 1000:,.0f} B per checkpoint" in text
