"""A long-lived manager's memory as it touches more and more runs (issue 26, item 6).

Run (from the repository root)::

    python benchmarks/manager_memory.py                              # 1,000 / 10,000 / 100,000 small runs, dir and sqlite
    python benchmarks/manager_memory.py --runs 1000,10000 --stores dir
    python benchmarks/manager_memory.py --traj PATH --runs 25,50,100 # runs that are copies of a real trajectory
    python benchmarks/manager_memory.py --trace                      # Python allocations too (tracemalloc; slower)

One :class:`~snapstore.CheckpointManager` on a fresh local directory store (``dir``) or SQLite file
(``sqlite``) touches runs one after another, the way a service or a worker sees them: each run is
saved (``--saves`` times: a small run is 2 messages, then one more message per save; with
``--traj``, prefixes of that trajectory's messages, a fresh copy of the objects for each run) and
read back once with ``latest()``. After each count of ``--runs`` (cumulative) it prints:

* ``rss_mb``: the process's resident set (``VmRSS``), after ``gc.collect()``;
* ``traced_mb``: with ``--trace``, Python allocations still held (tracemalloc, started before the
  manager), else blank;
* ``views`` / ``view_mb``: run views the manager keeps and their estimated size, and
  ``pack_mb``: the pack cache's charge (bytes it counts against its budget); blank for a
  snapstore without bounded caches;
* ``s``: seconds so far.

The bound the README states is checked by ``tests/manager/test_memory_bound.py`` (10,000 small runs).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from snapstore import CheckpointManager  # noqa: E402


def rss_bytes() -> int:
    """The process's resident set size in bytes (``VmRSS`` of ``/proc/self/status``; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def small_messages(i: int, saves: int) -> list[list[dict]]:
    """The message lists of small run ``i``: 2 messages, then one more per save (``saves`` lists)."""
    base = [{"role": "user", "content": f"task {i}: fix the failing test"},
            {"role": "assistant", "content": f"looking at run {i}"}]
    return [base + [{"role": "tool", "content": f"result {i}.{k}"} for k in range(s)] for s in range(saves)]


def traj_messages(path: str) -> list:
    """The final message list of a trajectory file's largest conversation (snapstore's importers)."""
    from snapstore.importers import load_trajectory  # noqa: PLC0415
    _, convs = load_trajectory(Path(path))
    return max((c.messages for c in convs), key=lambda m: len(json.dumps(m)))


def touch(mgr, run: str, lists: list[list]) -> None:
    """Save each of ``lists`` into ``run`` in order, then read the run back with ``latest()``."""
    for step, msgs in enumerate(lists):
        mgr.save(run, msgs, step=step)
    cp = mgr.latest(run)
    assert cp is not None and cp.messages == lists[-1]


def measure(store: str, counts: list[int], saves: int, traj: list | None, trace: bool, **mgr_options) -> list[dict]:
    """Touch ``max(counts)`` runs with one manager on a fresh ``store`` (``"dir"`` or ``"sqlite"``);
    a row after each count of ``counts``: ``{"store", "runs", "rss_mb", "traced_mb", "views",
    "view_mb", "pack_mb", "s"}`` (MB = 10^6 bytes)."""
    tmp = tempfile.mkdtemp(prefix="snapstore-mem-")
    url = f"{tmp}/repo" if store == "dir" else f"{tmp}/repo.db"
    if trace:
        tracemalloc.start()
    mgr = CheckpointManager(url, **mgr_options)
    rows, t0, done = [], time.perf_counter(), 0
    try:
        for n in sorted(counts):
            for i in range(done, n):
                if traj is None:
                    lists = small_messages(i, saves)
                else:
                    cut = [max(1, len(traj) * (k + 1) // saves) for k in range(saves)]
                    own = copy.deepcopy(traj)  # each run's messages are new objects, as in a service
                    lists = [own[:c] for c in cut]
                touch(mgr, f"run-{i}", lists)
            done = n
            gc.collect()
            views = mgr.state.views
            cache = mgr.repo.cache
            rows.append({"store": store, "runs": n, "rss_mb": round(rss_bytes() / 1e6, 1),
                         "traced_mb": round(tracemalloc.get_traced_memory()[0] / 1e6, 1) if trace else None,
                         "views": len(views),
                         "view_mb": round(views.nbytes / 1e6, 1) if hasattr(views, "nbytes") else None,
                         "pack_mb": round(cache._bytes / 1e6, 1),
                         "s": round(time.perf_counter() - t0, 1)})
            print(_line(rows[-1]), flush=True)
    finally:
        mgr.close()
        if trace:
            tracemalloc.stop()
    return rows


def _line(r: dict) -> str:
    cell = lambda v: "" if v is None else str(v)  # noqa: E731
    return (f"{r['store']:7} {r['runs']:>8} runs  rss {cell(r['rss_mb']):>7} MB  traced {cell(r['traced_mb']):>7} MB  "
            f"views {r['views']:>7} ({cell(r['view_mb'])} MB)  packs {cell(r['pack_mb'])} MB  {r['s']} s")


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring. Returns the exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="1000,10000,100000", help="cumulative run counts, comma-separated")
    ap.add_argument("--stores", default="dir,sqlite", help="comma-separated: dir, sqlite")
    ap.add_argument("--saves", type=int, default=1, help="saves per run (default 1)")
    ap.add_argument("--traj", help="runs are copies of this trajectory's messages (default: small runs)")
    ap.add_argument("--trace", action="store_true", help="also trace Python allocations (tracemalloc)")
    ap.add_argument("--run-cache-entries", type=int, help="CheckpointManager(run_cache_entries=...)")
    ap.add_argument("--run-cache-bytes", type=int, help="CheckpointManager(run_cache_bytes=...)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args(argv)
    counts = [int(x) for x in a.runs.split(",") if x]
    traj = traj_messages(a.traj) if a.traj else None
    opts = {k: v for k, v in (("run_cache_entries", a.run_cache_entries), ("run_cache_bytes", a.run_cache_bytes))
            if v is not None}
    rows = []
    for store in a.stores.split(","):
        rows += measure(store, counts, max(1, a.saves), traj, a.trace, **opts)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
