"""One LangGraph thread's reads as the repository grows, and listing every thread (issue 27,
item 3).

Flat-cost table: ``list(config, limit=1)`` (with and without ``checkpoint_ns``) and
``get_tuple`` of one thread, in a repository of 10, 1,000 and 10,000 threads, by a fresh
SnapstoreSaver (as a new process would; ``get_tuple (new saver)`` opens a new one per call, the
other rows reuse one after its first call): CPU ms per call (median of ``--reps``) and the store
requests per call by kind (``RequestStats``). Then ``list(None)`` (every thread) by a fresh
saver: wall and CPU seconds and requests (``--list-all``).

The repository is built by a saver with ``fsync=False`` (a local directory; only the build is
faster, the reads are those of any local repository): each thread gets ``--turns`` checkpoints,
each followed by one ``put_writes`` (two records per turn, plus the thread's namespace registry).
``--s3``: the same on moto's HTTP server on 127.0.0.1 (in this process; dummy credentials;
request counts carry over to S3, times do not).

    python -m benchmarks.langgraph_threads                                   # 10,1000,10000 threads, local
    python -m benchmarks.langgraph_threads --threads 1500 --turns 13 --list-all --reps 5
    python -m benchmarks.langgraph_threads --s3 --threads 10,1000 --reps 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from langgraph.checkpoint.base import empty_checkpoint

KINDS = ("GET", "PUT", "LIST", "HEAD", "DELETE")


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


def _measure(stats, fn, reps: int) -> tuple[float, dict]:
    """``(median CPU ms per call, {kind: requests per call})`` of ``reps`` calls of ``fn``."""
    before = stats.snapshot()
    cpu = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        cpu.append((time.process_time() - t) * 1000)
    req = stats.since(before)
    return statistics.median(cpu), {k: req.counts[k] / reps for k in KINDS if req.counts.get(k)}


class _Env:
    """Where the repository lives: a local directory, or a bucket on moto's HTTP server."""

    def __init__(self, s3: bool, directory: str | None):
        self.s3 = s3
        self.server = None
        if s3:
            import logging
            import uuid

            import boto3
            from moto.server import ThreadedMotoServer

            from benchmarks.latency import DUMMY_ENV

            os.environ.update(DUMMY_ENV)
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self.server.start()
            host, port = self.server.get_host_and_port()
            self.endpoint = f"http://{host}:{port}"
            bucket = f"lgthreads-{uuid.uuid4().hex[:8]}"
            boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
            self.url = f"s3://{bucket}/repo"
        else:
            self.url = os.path.join(directory or tempfile.mkdtemp(prefix="lgthreads-"), "repo")

    def saver(self, build: bool = False):
        from snapstore.integrations.langgraph import SnapstoreSaver

        if self.s3:
            return SnapstoreSaver(self.url, endpoint_url=self.endpoint, region_name="us-east-1",
                                  addressing_style="path")
        return SnapstoreSaver(self.url, fsync=False) if build else SnapstoreSaver(self.url)

    def close(self):
        if self.server is not None:
            self.server.stop()


def _fmt(req: dict) -> str:
    return " ".join(f"{k} {v:g}" for k, v in req.items()) or "-"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="10,1000,10000", help="repository sizes (threads), ascending")
    ap.add_argument("--turns", type=int, default=2, help="checkpoints per thread")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--dir", default=None, help="local: build the repository below this directory")
    ap.add_argument("--s3", action="store_true", help="on moto's HTTP server instead of a local directory")
    ap.add_argument("--list-all", action="store_true", help="also time list(None) over every thread")
    args = ap.parse_args(argv)

    env = _Env(args.s3, args.dir)
    writer = env.saver(build=True)
    made = 0
    probe = "thread-000003"
    table = []  # (threads, row, cpu ms, requests)
    try:
        for n in (int(x) for x in args.threads.split(",")):
            t0 = time.perf_counter()
            while made < n:
                _put(writer, f"thread-{made:06d}", args.turns)
                made += 1
            print(f"threads={n:6d} built in {time.perf_counter() - t0:.1f} s ({env.url})", flush=True)
            fresh = env.saver()
            one = {"configurable": {"thread_id": probe}}
            rows = [
                ("list(thread, limit=1)", fresh, lambda: list(fresh.list(one, limit=1))),
                ("list(thread, ns='', limit=1)", fresh,
                 lambda: list(fresh.list({"configurable": {"thread_id": probe, "checkpoint_ns": ""}}, limit=1))),
                ("get_tuple(thread)", fresh, lambda: fresh.get_tuple(one)),
                ("get_tuple (new saver)", None, None),
            ]
            for name, s, fn in rows:
                if s is not None:
                    assert fn(), name
                    ms, req = _measure(s.manager.store.stats, fn, args.reps)
                else:
                    # a new saver per call (a new process): its store's requests, its CPU
                    cpu, reqs = [], {}
                    for _ in range(args.reps):
                        sv = env.saver()
                        b = sv.manager.store.stats.snapshot()
                        t = time.process_time()
                        assert sv.get_tuple(one)
                        cpu.append((time.process_time() - t) * 1000)
                        for k, v in sv.manager.store.stats.since(b).counts.items():
                            if v:
                                reqs[k] = reqs.get(k, 0) + v / args.reps
                        sv.close()
                    ms, req = statistics.median(cpu), {k: reqs[k] for k in KINDS if k in reqs}
                table.append((n, name, ms, req))
                print(f"threads={n:6d} {name:30} {ms:7.2f} ms CPU  requests/call {_fmt(req)}", flush=True)
            if args.list_all:
                s = env.saver()
                b = s.manager.store.stats.snapshot()
                t, c = time.perf_counter(), time.process_time()
                k = sum(1 for _ in s.list(None))
                dt, dc = time.perf_counter() - t, time.process_time() - c
                req = s.manager.store.stats.since(b).counts
                print(f"threads={n:6d} list(None): {k} checkpoints in {dt:.2f} s wall, {dc:.2f} s CPU "
                      f"({dt / max(k, 1) * 1000:.2f} ms each); requests {_fmt({x: req[x] for x in KINDS if req.get(x)})}",
                      flush=True)
                s.close()
            fresh.close()
    finally:
        writer.close()
        env.close()
    print("\n| threads | call | CPU ms | requests per call |\n|---|---|---|---|")
    for n, name, ms, req in table:
        print(f"| {n:,} | {name} | {ms:.2f} | {_fmt(req)} |")
    names = {name for _n, name, _ms, _r in table if name != "get_tuple (new saver)"}
    flat = all(len({str(r) for n, nm, _ms, r in table if nm == name}) == 1 for name in names)
    print(f"\nrequests per call the same at every size: {'yes' if flat else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
