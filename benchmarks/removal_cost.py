"""Requests and time per operation that removes log records, on the local store (issue 20).

What the void records (docs/format.md §8d) and removal records (§8e) cost: a save (steady
state), a rollback five checkpoints back, a head delete, ``prune(keep_last=10)`` of a 200-save
run, a run delete, and a save with ``max_checkpoints=20``; medians of 3 trials, requests counted
by the store (every record here is younger than FREE_AFTER, so every removal voids: the worst
case). Compare with an earlier commit by running the same file against its package::

    python benchmarks/removal_cost.py
    git worktree add /tmp/old 2820bfc && PYTHONPATH=/tmp/old python benchmarks/removal_cost.py
"""

from __future__ import annotations

import statistics
import tempfile
import time

from snapstore import CheckpointManager
from snapstore.stores import LocalStore


def msgs(n):
    return [{"role": "user", "content": f"message {i} " * 20} for i in range(n)]


def count(store, fn):
    before = store.stats.snapshot()
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    return store.stats.since(before).total(), dt * 1000


def main() -> None:
    out: dict = {}
    for _ in range(3):
        st = LocalStore(tempfile.mkdtemp(), fsync=False)
        m = CheckpointManager(st)
        ids = [m.save("r", msgs(i + 1)) for i in range(200)]
        out.setdefault("save", []).append(count(st, lambda: m.save("r", msgs(201))))
        out.setdefault("rollback 5 back", []).append(count(st, lambda: m.rollback("r", ids[-5])))
        head = m.latest("r").id
        out.setdefault("delete head", []).append(count(st, lambda: m.delete("r", head)))
        out.setdefault("prune keep_last=10", []).append(count(st, lambda: m.prune(keep_last=10, run_id="r")))
        out.setdefault("delete run", []).append(count(st, lambda: m.delete("r")))
        m2 = CheckpointManager(st, max_checkpoints=20)
        for i in range(30):
            m2.save("q", msgs(i + 1))
        out.setdefault("save with max_checkpoints", []).append(count(st, lambda: m2.save("q", msgs(31))))
    for k, v in out.items():
        print(f"{k:28s} requests {statistics.median(x[0] for x in v):5.0f}   ms {statistics.median(x[1] for x in v):7.2f}")


if __name__ == "__main__":
    main()
