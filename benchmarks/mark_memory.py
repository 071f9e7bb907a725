"""Memory of GC's mark per live checkpoint, at two repository sizes (the 2 KB-per-checkpoint target
of issue 25): the resident-set growth of one partition's mark, and what holds it.

Run (from the repository root)::

    python benchmarks/mark_memory.py                       # 320 and 1,280 runs of 25 checkpoints
    python benchmarks/mark_memory.py --runs 100,400 --checkpoints 25 --top 15

How: each size's repository is built once through ``CheckpointManager`` into an in-memory store
(one assistant message appended per save, as ``benchmarks/distributed_gc.py`` builds it) and its
objects pickled to ``--cache``. Each measurement is a fresh process that loads the objects into a
``MemoryStore`` (no network: the store's bytes are resident before the baseline), collects garbage,
reads its resident set (``/proc/self/statm``) as the baseline, then runs exactly what a mark
partition runs (:func:`snapstore.maintenance.partitions.mark_partition`'s steps: ``GCPlan`` with
a dry run, ``list_repository``, ``mark``) over every run, while a thread samples the resident set
every 5 ms. Reported: the peak sample minus the baseline, divided by the live checkpoints; and
the slope between the two sizes (the growth per added checkpoint). The pack cache is a fixed cost
bounded by its limit (256 MiB by default), which a small repository does not reach: ``--cache-mib``
bounds it, so that the per-checkpoint state is measured apart from it. With ``--top N`` a second process per size runs the same
mark under ``tracemalloc`` and prints the N source lines holding the most memory when the mark
ends (what per-checkpoint state the mark keeps).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(cache: Path, runs: int, checkpoints: int) -> int:
    """Build ``runs`` runs of ``checkpoints`` saves in memory and pickle the objects to ``cache``
    (reused when it exists); returns the number of objects."""
    if cache.exists():
        with open(cache, "rb") as f:
            return len(pickle.load(f))
    from snapstore import CheckpointManager
    from snapstore.stores import MemoryStore
    store = MemoryStore()
    mgr = CheckpointManager(store)
    for r in range(runs):
        msgs: list = []
        for i in range(checkpoints):
            msgs = msgs + [{"role": "assistant", "content": f"run {r} step {i} " + "tok " * 20}]
            mgr.save(f"run-{r:05d}", msgs, step=i)
    objs = {info.key: store.get(info.key) for info in store.list("")}
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.with_suffix(".tmp"), "wb") as f:
        pickle.dump(objs, f, protocol=5)
    os.replace(cache.with_suffix(".tmp"), cache)
    return len(objs)


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def measure(cache: str, top: int, cache_mib: int = 0) -> dict:
    """In this process: load, baseline, mark every run (as one partition), peak; see the module."""
    import gc
    import threading

    from snapstore.maintenance.gc import GCPlan
    from snapstore.maintenance.gcreport import GCOptions
    from snapstore.repo.repository import Repository
    from snapstore.stores import MemoryStore

    with open(cache, "rb") as f:
        objs = pickle.load(f)
    store = MemoryStore()
    for k, v in objs.items():
        store.put(k, v)
    del objs
    repo = Repository.open(store, create=False)
    if cache_mib:
        repo.cache.limit = cache_mib << 20  # the pack cache: a fixed cost, bounded by its limit
    gc.collect()
    if top:
        import tracemalloc
        tracemalloc.start(1)
    base = _rss_kb()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.wait(0.005):
            peak[0] = max(peak[0], _rss_kb())
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    g = GCPlan(repo, GCOptions(dry_run=True), repo.store_time(), repo.cache.limit)
    g.run_range = (None, "\U0010ffff")
    g.list_repository()
    g.mark()
    secs = time.perf_counter() - t0
    peak[0] = max(peak[0], _rss_kb())
    stop.set()
    th.join()
    live = sum(len(x.live) for x in g.logs.values())
    out = {"live_checkpoints": live, "runs": len(g.logs), "live_packs": len(g.reach.packs),
           "listed_objects": len(g.infos), "baseline_kib": base, "peak_kib": peak[0],
           "grown_bytes_per_ckpt": round((peak[0] - base) * 1024 / max(1, live)), "seconds": round(secs, 2)}
    if top:
        snap = tracemalloc.take_snapshot()
        out["top"] = [(str(s.traceback[0]), s.size) for s in snap.statistics("lineno")[:top]]
        out["traced_total"] = sum(s.size for s in snap.statistics("filename"))
    g.abandon()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="320,1280", help="two run counts (comma-separated)")
    ap.add_argument("--checkpoints", type=int, default=25, help="checkpoints per run")
    ap.add_argument("--cache", default=str(Path(os.environ.get("TMPDIR", "/tmp")) / "snapstore-bench-markmem"))
    ap.add_argument("--top", type=int, default=0, help="also attribute memory with tracemalloc (N lines)")
    ap.add_argument("--cache-mib", type=int, default=0,
                    help="pack cache limit of the mark (MiB); 0: the repository's default (256 MiB)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure, a.top, a.cache_mib)))
        return
    sizes = [int(x) for x in a.runs.split(",")]
    rows = []
    for runs in sizes:
        cache = Path(a.cache) / f"r{runs}-c{a.checkpoints}.pickle"
        n = build(cache, runs, a.checkpoints)
        args = [sys.executable, __file__, "--measure", str(cache), "--cache-mib", str(a.cache_mib)]
        row = json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
        row["objects"] = n
        if a.top:
            row["traced"] = json.loads(subprocess.run(args + ["--top", str(a.top)], check=True, capture_output=True,
                                                      text=True).stdout)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "traced"}), flush=True)
    if len(rows) >= 2:
        a0, b0 = rows[0], rows[-1]
        slope = (b0["peak_kib"] - b0["baseline_kib"] - (a0["peak_kib"] - a0["baseline_kib"])) * 1024 / max(
            1, b0["live_checkpoints"] - a0["live_checkpoints"])
        print(json.dumps({"growth_per_added_ckpt_bytes": round(slope)}))
    for row in rows:
        if "traced" in row:
            t = row["traced"]
            print(f"\ntracemalloc at the end of the mark, {row['live_checkpoints']} checkpoints "
                  f"({t['traced_total'] / max(1, row['live_checkpoints']):.0f} B traced per checkpoint):")
            for where, size in t["top"]:
                print(f"  {size / max(1, row['live_checkpoints']):8.0f} B/ckpt  {size:>12,}  {where}")


if __name__ == "__main__":
    main()
