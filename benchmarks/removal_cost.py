"""Requests and time per operation that removes log records, on the local store (issue 20).

What the void records (docs/format.md §15) and removal records (§16) cost: a save (steady
state), a rollback five checkpoints back, a head delete, ``prune(keep_last=10)`` of a 200-save
run, a run delete, and a save with ``max_checkpoints=20``; medians of 3 trials, requests counted
by the store (every record here is younger than FREE_AFTER, so every removal voids: the worst
case). Compare with an earlier commit by running the same file against its package::

    python -m benchmarks.removal_cost                   # local store
    python -m benchmarks.removal_cost --s3 20           # S3 behind a 20 ms proxy
    git worktree add /tmp/old 2820bfc && (cd /tmp && PYTHONPATH=/tmp/old python /path/to/benchmarks/removal_cost.py --s3 20)

``--s3 DELAY_MS``: the same operations on S3 (moto's HTTP server behind the latency-injecting proxy
of ``benchmarks/latency.py``, which holds back every response DELAY_MS), counting the requests
and the sequential round trips (the longest chain of requests each starting after the previous
one ended) of each operation, one trial, a 100-save run.
"""

from __future__ import annotations

import argparse
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


def s3(delay_ms: float) -> None:
    import os

    from benchmarks.latency import LatencyProxy, new_bucket, sequential_round_trips, start_moto

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(k, v)
    server, port = start_moto()
    proxy = LatencyProxy(port, delay_ms / 1000).start()
    direct = f"http://127.0.0.1:{port}"
    via = f"http://127.0.0.1:{proxy.port}"
    try:
        bucket = new_bucket(direct, "removal")
        url = f"s3://{bucket}/bench"
        fill = CheckpointManager(url, endpoint_url=direct)
        ids = [fill.save("r", msgs(i + 1)) for i in range(100)]
        m = CheckpointManager(url, endpoint_url=via)
        m.latest("r")

        def one(name, fn):
            t0 = time.monotonic()
            fn()
            t1 = time.monotonic()
            got = proxy.entries(t0, t1)
            print(f"{name:24s} requests {len(got):5d}   round trips {sequential_round_trips((e['start'], e['end']) for e in got):4d}"
                  f"   s {t1 - t0:6.2f}")
        one("save", lambda: m.save("r", msgs(101)))
        one("rollback 5 back", lambda: m.rollback("r", ids[-5]))
        head = m.latest("r").id
        one("delete head", lambda: m.delete("r", head))
        one("prune keep_last=10", lambda: m.prune(keep_last=10, run_id="r"))
        one("delete run", lambda: m.delete("r"))
    finally:
        proxy.stop()
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--s3", type=float, metavar="DELAY_MS", help="on S3 behind the latency proxy")
    args = ap.parse_args()
    if args.s3 is not None:
        return s3(args.s3)
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
