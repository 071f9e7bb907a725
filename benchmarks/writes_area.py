"""Should the LangGraph saver's pending writes live in the writes area (docs/format.md §25)?
``python -m benchmarks.writes_area --trials 20``.

Times, through :func:`benchmarks.langgraph_writes.compare` (8 parallel ``Send`` branches, one
interrupting, ``durability="async"``, a local repository), the p50 of ``SnapstoreSaver.put_writes``
and ``get_tuple`` as they are (writes carried in the run's newest record), beside the p50 of what
the writes-area form would cost on the same machine: one ``record_outcome`` per write and one
``outcomes()`` read of 8 writes per ``get_tuple`` (on top of reading the checkpoint record).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from benchmarks import langgraph_writes as lw


def measure(trials: int, base: str) -> dict:
    """The p50s (milliseconds) and the trial counts; see the module docstring."""
    from snapstore import CheckpointManager
    from snapstore.integrations.langgraph import SnapstoreSaver

    times: dict = {"put_writes": [], "get_tuple": []}

    class Timed(SnapstoreSaver):
        def put_writes(self, *a, **k):
            t = time.perf_counter()
            try:
                return super().put_writes(*a, **k)
            finally:
                times["put_writes"].append(time.perf_counter() - t)

        def get_tuple(self, *a, **k):
            t = time.perf_counter()
            try:
                return super().get_tuple(*a, **k)
            finally:
                times["get_tuple"].append(time.perf_counter() - t)

    counts = lw.compare(lambda: Timed(os.path.join(base, "saver")), "async", trials, 8, {7})
    mgr = CheckpointManager(os.path.join(base, "outcomes"))
    rec, rd = [], []
    for t_ in range(trials):
        cid = mgr.save(f"t{t_}", [{"role": "user", "content": "x"}])
        for i in range(8):
            t = time.perf_counter()
            mgr.record_outcome(f"t{t_}", cid, f"task{i}:0", {"results": [f"r{i}"]})
            rec.append(time.perf_counter() - t)
        t = time.perf_counter()
        mgr.outcomes(f"t{t_}", cid)
        rd.append(time.perf_counter() - t)
    ms = lambda v: round(statistics.median(v) * 1e3, 2)  # noqa: E731
    return {**counts, "put_writes_p50_ms": ms(times["put_writes"]), "get_tuple_p50_ms": ms(times["get_tuple"]),
            "record_outcome_p50_ms": ms(rec), "outcomes_read_8_p50_ms": ms(rd)}


def main(argv=None) -> None:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    a = ap.parse_args(argv)
    print(measure(a.trials, tempfile.mkdtemp(prefix="writes-area-")))


if __name__ == "__main__":
    main()
