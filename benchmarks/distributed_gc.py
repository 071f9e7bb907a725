"""Partitioned GC mark (snapstore/maintenance/partitions.py) on a Dask LocalCluster of 1, 2 and 4
worker processes against moto's HTTP server behind a latency proxy: wall time, requests, peak RSS per
worker, and a projection to 1B live checkpoints.

Run (from the repository root, after ``pip install -e '.[test,bench]'``)::

    python benchmarks/distributed_gc.py                 # 2,000 runs x 100 checkpoints, 20 ms, 1/2/4 workers
    python benchmarks/distributed_gc.py --runs 200 --checkpoints 20 --workers 1,2 --repeat 2

How it is built: the repository is saved once through ``CheckpointManager`` into an in-memory
store and its objects pickled to ``--cache`` (reused by later invocations); moto's HTTP server runs
in a process of its own, the objects written straight into its backend (no HTTP), so the build
is not timed through S3. Each worker setting is a fresh job directory and a fresh LocalCluster,
``--partitions-per-worker`` (4) partitions per worker, one thread per worker process; every request
goes through ``tests/helpers/wire_proxy.RecordingProxy`` with ``delay`` = the latency (held once
per request a client sends in one piece). A partition LISTs only its own run-key range of
``runs/`` (``runs.list_run_range``), and ``packs/`` whole.

Projection (printed): per-worker throughput = live checkpoints / (wall seconds x workers); the time
for N workers on 1B checkpoints = 1e9 / (throughput x N). Assumptions: partitions stay balanced
(they are cut by listed log records); the throughput per worker is latency-bound and constant with
repository size (the work per run is the same; what grows with the repository is the ``packs/``
LIST every partition makes, 1 request per 1,000 packs: at 1B checkpoints in runs of 100 with ~4
packs per run that is 40M packs, 40,000 LIST pages per partition, about 13 minutes at 20 ms, so
at that size ``--inventory`` (benchmarks/gc_inventory.py) must replace it, and is NOT in the
projection); S3's request rates (5,500 GET/s per prefix) are not the bound; the measured 20 ms
stands for S3's real latency; the machine's cores are not the bound (here they are: see below).
Memory: the growth of a worker's resident set over the job (peak RSS minus RSS before the
first task) divided by the checkpoints of the largest partition, and as an upper bound the peak
RSS divided by them (it includes the interpreter, Dask and imports).

Measured 2026-12-04 (benchmark code of commit ba9bc8f with the proxy fix of 1bec326), 2 cores at
load 4-10 (other sessions running), ``python benchmarks/distributed_gc.py --runs 2000 --checkpoints 25``
(2,000 runs, 50,000 live checkpoints, 62,001 objects, 20 ms per request, one round)::

    workers  wall s  GET     LIST  peak RSS/worker  RSS growth per partition ckpt  ckpt/s/worker  h for 1e9 on 64
    1        155.6   28,005  123   207 MiB          12.0 KB (12,500 per partition)  321.2          13.5
    2        199.1   28,009  184   209 MiB          24.4 KB (6,250)                 125.6          34.6
    4        208.8   28,017  312   257 MiB          64.8 KB (3,125)                  59.9          72.5

NOT the issue's size: 200,000 checkpoints (2,000 runs x 100) were built (765 s, 222,001 objects)
and the run was stopped: moto's ListObjectsV2 costs O(objects in the bucket) per page (about 2 s a
page at 222,001 objects on this loaded machine: ~450 pages per worker setting), and the proxy
then leaked two descriptors per connection until accept() failed (fixed in 1bec326). 50,000 over
the same 2,000 runs is the largest that fit the time left.

What it shows: GETs stay flat with workers (14 per run: each partition reads only its runs' log
segments, records and packs); LISTs grow with partitions (each lists ``packs/`` whole, 8 pages,
besides its own key range of ``runs/``). No gain from more workers here: moto serves every
request from one Python process and the proxy runs in the driver's, on 2 shared cores, so more
worker processes only compete for the same CPU. Projection from the 1-worker rate (321
checkpoints/s): 1e9 on 64 workers in 13.5 h: the 6 h target is NOT met; it needs 723 checkpoints/s
per worker: 28,005 GETs x 20 ms in 155.6 s is about 3.6 requests in flight on average (driver
steps included); 723 checkpoints/s at 0.56 GETs per checkpoint needs about 8 in flight per worker.
Memory: 12.0 KB of RSS growth per checkpoint of a 12,500-checkpoint partition, 6x the 2 KB
target: NOT met at this size. The growth is mostly per-process (pack cache, clients, pyarrow):
it does not fall in proportion with smaller partitions (143 MiB at 12,500, 193 MiB at 3,125), so
this measurement cannot separate the per-checkpoint part; a run with larger partitions would.

Memory per checkpoint, measured apart (``python benchmarks/mark_memory.py --runs 320,1280
--checkpoints 25 --cache-mib 8 --top 14``, one process, no Dask, a MemoryStore, one run each):
with the benchmark of commit 3ceb061 the resident set of one partition's mark grew by 19.0 MiB at
8,000 live checkpoints and 43.2 MiB at 32,000, 1,056 B per added checkpoint (2,490 and 1,415 B
per checkpoint including the fixed part). What it held at the end of the mark (tracemalloc, per
checkpoint at 32,000): the strings of every record's ``state`` (266 B, decoded JSON) and the
``LogEntry`` of every record (131 B, and 58 B for its ``state`` tuple), the listed ``ObjectInfo``
of every run-log object (89 B), the parsed packs in the cache (bounded by its limit) and the
mark's sets of pack ids and tree nodes (under 100 B each). Commit c83e11f keeps a record's state
packed as bytes: 858 B per added checkpoint (17.7 MiB at 8,000, 37.3 MiB at 32,000; 2,319 and
1,224 B per checkpoint with the fixed part; 976 B traced per checkpoint at 32,000). So the 12.0 KB
above is the worker process's fixed cost spread over a small partition, not per-checkpoint state.
The projection printed at the end assumes: 858 B per checkpoint of a partition
(``--mark-bytes-per-ckpt``: constant with size, as between the two sizes measured; runs of 25
checkpoints: longer runs keep fewer whole records per checkpoint), one partition at a time per
worker thread, 4 partitions per worker (``--projected-partitions-per-worker``: 3.9M checkpoints
each at 1B on 64 workers), fixed costs of the measured start RSS plus the pack cache at its 256 MiB
limit. With a 150 MiB worker process at start: 3.5 GiB per worker, 967 B per checkpoint of its
partition, under the 2 KB target (a projection from ``memory_projection``, not measured at that
size).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

PREFIX = "repo"


def build(cache: Path, runs: int, checkpoints: int) -> int:
    """Build the repository once in memory (``runs`` runs of ``checkpoints`` saves, one assistant
    message appended per save) and pickle its objects (key -> bytes) to ``cache``; reused when
    it exists. Returns the number of objects."""
    if cache.exists():
        with open(cache, "rb") as f:
            return len(pickle.load(f))
    from snapstore import CheckpointManager
    from snapstore.stores import MemoryStore
    store = MemoryStore()
    mgr = CheckpointManager(store)
    t0 = time.perf_counter()
    for r in range(runs):
        msgs: list = []
        for i in range(checkpoints):
            msgs = msgs + [{"role": "assistant", "content": f"run {r} step {i} " + "tok " * 20}]
            mgr.save(f"run-{r:05d}", msgs, step=i)
        if r % 100 == 99:
            print(f"  built {r + 1} runs in {time.perf_counter() - t0:.0f} s", flush=True)
    objs = {info.key: store.get(info.key) for info in store.list("")}
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(objs, f, protocol=5)
    os.replace(tmp, cache)
    return len(objs)


def serve(cache: str, bucket: str) -> None:
    """``--serve``: moto's HTTP server in this process, the cached objects written straight into
    its backend (no HTTP), then its endpoint printed; serves until stdin closes."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from s3_fixtures import DUMMY_ENV, start_moto_server
    os.environ.update(DUMMY_ENV)
    endpoint = start_moto_server()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
    backend.create_bucket(bucket, "us-east-1")
    with open(cache, "rb") as f:
        objs = pickle.load(f)
    for k, v in objs.items():
        backend.put_object(bucket, f"{PREFIX}/{k}", v)
    print(json.dumps({"endpoint": endpoint, "objects": len(objs)}), flush=True)
    sys.stdin.read()


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _peak_kb() -> int:
    import resource
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def one_setting(url: str, opts: dict, workers: int, parts_per_worker: int) -> dict:
    """One partitioned mark on a fresh Dask LocalCluster of ``workers`` processes (one thread
    each); returns its figures."""
    from distributed import Client, LocalCluster

    from snapstore.maintenance.partitions import partitioned_mark
    with tempfile.TemporaryDirectory() as job, \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                         memory_limit=0) as cl, Client(cl) as client:
        base = client.run(_rss_kb)
        t = time.perf_counter()
        rep = partitioned_mark(url, job, parts_per_worker * workers, executor="dask", scheduler=client,
                               store_options=opts)
        wall = time.perf_counter() - t
        peak = client.run(_peak_kb)
    live = rep["live_checkpoints"]
    part_live = max(1, max(s["live_checkpoints"] for s in rep["summaries"]))
    peak_max, base_max = max(peak.values()), max(base.values())
    grown = max(peak[w] - base[w] for w in peak)
    per_worker = live / (wall * workers)
    return {"workers": workers, "partitions": len(rep["summaries"]), "wall_s": round(wall, 1),
            "live_checkpoints": live, "live_packs": rep["live_packs"], "requests": rep["requests"],
            "peak_rss_mib_per_worker": round(peak_max / 1024), "start_rss_mib_per_worker": round(base_max / 1024),
            "largest_partition_checkpoints": part_live,
            "grown_bytes_per_partition_ckpt": round(grown * 1024 / part_live),
            "peak_bytes_per_partition_ckpt": round(peak_max * 1024 / part_live),
            "ckpt_per_s_per_worker": round(per_worker, 1),
            "projected_hours_1e9_on_64": round(1e9 / (per_worker * 64) / 3600, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--checkpoints", type=int, default=100, help="checkpoints per run")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--partitions-per-worker", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the worker settings, interleaved")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "snapstore-bench-dgc"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--mark-bytes-per-ckpt", type=float, default=858.0,
                    help="the mark's memory per added live checkpoint, for the memory projection (default: "
                         "benchmarks/mark_memory.py's measurement, see the docstring)")
    ap.add_argument("--projected-partitions-per-worker", type=int, default=4,
                    help="partitions per worker assumed at 1B checkpoints on 64 workers (memory projection)")
    ap.add_argument("--serve", nargs=2, metavar=("CACHE", "BUCKET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    from s3_fixtures import DUMMY_ENV
    from wire_proxy import RecordingProxy
    os.environ.update(DUMMY_ENV)
    cache = Path(args.cache) / f"repo-{args.runs}x{args.checkpoints}.pickle"
    t0 = time.perf_counter()
    n = build(cache, args.runs, args.checkpoints)
    print(f"repository: {args.runs} runs x {args.checkpoints} checkpoints, {n} objects ({cache}), "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    bucket = f"dgc-{os.urandom(4).hex()}"
    t0 = time.perf_counter()
    srv = subprocess.Popen([sys.executable, __file__, "--serve", str(cache), bucket], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(srv.stdout.readline())
        print(f"moto server (own process) loaded {info['objects']} objects in {time.perf_counter() - t0:.0f} s",
              flush=True)
        host, port = info["endpoint"].rsplit("/", 1)[-1].split(":")
        proxy = RecordingProxy(host, int(port), delay=args.latency_ms / 1e3)
        opts = {"endpoint_url": f"http://127.0.0.1:{proxy.port}"}
        url = f"s3://{bucket}/{PREFIX}"
        results = []
        for _ in range(args.repeat):
            for w in (int(x) for x in args.workers.split(",")):
                res = one_setting(url, opts, w, args.partitions_per_worker)
                results.append(res)
                print(json.dumps(res), flush=True)
        proxy.close()
    finally:
        srv.stdin.close()
        srv.wait(timeout=60)
    by_w: dict = {}
    for r in results:
        by_w.setdefault(r["workers"], []).append(r)
    print("\nworkers  wall s (median)  GET  LIST  peak RSS/worker  ckpt/s/worker  h for 1e9 on 64  B/ckpt grown")
    for w, rs in sorted(by_w.items()):
        med = statistics.median(r["wall_s"] for r in rs)
        r = rs[0]
        print(f"{w:>7}  {med:>14.1f}  {r['requests'].get('GET', 0):>5}  {r['requests'].get('LIST', 0):>4}  "
              f"{r['peak_rss_mib_per_worker']:>11} MiB  {statistics.median(x['ckpt_per_s_per_worker'] for x in rs):>13.1f}"
              f"  {statistics.median(x['projected_hours_1e9_on_64'] for x in rs):>15.2f}  "
              f"{statistics.median(x['grown_bytes_per_partition_ckpt'] for x in rs):>11}")
    if results:
        print(memory_projection(results, args.mark_bytes_per_ckpt, args.projected_partitions_per_worker))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


CACHE_MIB = 256
"""The pack cache's limit (``snapstore.repo.packcache.DEFAULT_LIMIT``): a fixed cost per worker."""


def memory_projection(results: list, per_ckpt: float, parts_per_worker: int, total: float = 1e9,
                      workers: int = 64) -> str:
    """The memory of one worker's partition at ``total`` live checkpoints on ``workers`` workers:
    a partition of ``total / (workers x parts_per_worker)`` checkpoints (one partition at a time
    per worker thread) x ``per_ckpt`` bytes, plus the fixed costs: the worker process as measured
    before its first task (the largest start RSS here) and the pack cache at its limit."""
    part = total / (workers * parts_per_worker)
    start_mib = max(r["start_rss_mib_per_worker"] for r in results)
    fixed = (start_mib + CACHE_MIB) * 2**20
    mem = part * per_ckpt + fixed
    return (f"memory at {total:.0e} checkpoints on {workers} workers, {parts_per_worker} partitions per worker: "
            f"{part:,.0f} checkpoints per partition x {per_ckpt:,.0f} B + fixed {start_mib} MiB process + "
            f"{CACHE_MIB} MiB pack cache = {mem / 2**30:.1f} GiB per worker, {mem / part:,.0f} B per checkpoint "
            f"of its partition (target 2,048)")


if __name__ == "__main__":
    main()
