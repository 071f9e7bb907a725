"""One LangGraph thread's reads as the repository grows (issue 27): ``list(config, limit=1)``
(with and without ``checkpoint_ns``) and ``get_tuple`` of one thread, in a repository of 10,
1,000 and 10,000 threads, on a local directory, by a fresh SnapstoreSaver (as a new process
would). Prints CPU ms per call (median of ``--reps``) and the store requests per call
(``RequestStats``), then the time of ``list(None)`` (every thread) per checkpoint.

    python -m benchmarks.langgraph_threads                      # 10,1000,10000 threads
    python -m benchmarks.langgraph_threads --threads 10,1000 --turns 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from langgraph.checkpoint.base import empty_checkpoint


def _put(saver, thread: str, turns: int) -> None:
    parent = None
    for i in range(turns):
        c = empty_checkpoint()
        c["id"] = f"1ef00000-0000-6000-8000-{i:012d}"
        c["channel_values"] = {"n": i, "messages": f"turn {i} of {thread}"}
        c["channel_versions"] = {"n": i + 1, "messages": i + 1}
        conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent:
            conf["configurable"]["checkpoint_id"] = parent
        saver.put(conf, c, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})
        saver.put_writes({"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": c["id"]}},
                         [("n", i)], f"task{i}")
        parent = c["id"]


def _measure(saver, fn, reps: int) -> tuple[float, dict]:
    stats = saver.manager.store.stats
    before = stats.snapshot()
    cpu = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        cpu.append((time.process_time() - t) * 1000)
    req = stats.since(before)
    return statistics.median(cpu), {k: v / reps for k, v in req.counts.items() if v}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="10,1000,10000")
    ap.add_argument("--turns", type=int, default=2, help="checkpoints per thread")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--list-all", action="store_true", help="also time list(None) over every thread")
    args = ap.parse_args(argv)
    from snapstore.integrations.langgraph import SnapstoreSaver

    repo = os.path.join(args.dir or tempfile.mkdtemp(prefix="lgthreads-"), "repo")
    writer = SnapstoreSaver(repo)
    made = 0
    probe = "thread-000003"
    for n in (int(x) for x in args.threads.split(",")):
        t0 = time.perf_counter()
        while made < n:
            _put(writer, f"thread-{made:06d}", args.turns)
            made += 1
        build_s = time.perf_counter() - t0
        fresh = SnapstoreSaver(repo)
        rows = [
            ("list(thread, limit=1)", lambda: list(fresh.list({"configurable": {"thread_id": probe}}, limit=1))),
            ("list(thread, ns='', limit=1)",
             lambda: list(fresh.list({"configurable": {"thread_id": probe, "checkpoint_ns": ""}}, limit=1))),
            ("get_tuple(thread)", lambda: fresh.get_tuple({"configurable": {"thread_id": probe}})),
        ]
        for name, fn in rows:
            assert fn(), name
            ms, req = _measure(fresh, fn, args.reps)
            print(f"threads={n:6d} {name:30} {ms:7.2f} ms CPU  requests/call {req}")
        if args.list_all:
            t = time.perf_counter()
            k = sum(1 for _ in SnapstoreSaver(repo).list(None))
            dt = time.perf_counter() - t
            print(f"threads={n:6d} list(None): {k} checkpoints in {dt:.2f} s ({dt / k * 1000:.2f} ms each)")
        print(f"threads={n:6d} (built in {build_s:.1f} s)", flush=True)
        fresh.close()
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
