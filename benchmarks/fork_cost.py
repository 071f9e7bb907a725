"""Fork cost benchmark: what ``fork`` adds to a repository at any history length (issue 26).

Run (from the repository root)::

    python benchmarks/fork_cost.py                          # 100, 1000, 10000 saves, local directory
    python benchmarks/fork_cost.py --store s3 --sizes 100,1000   # S3 on moto's HTTP server (127.0.0.1)
    python benchmarks/fork_cost.py --quick                  # 20 and 100 saves: a few seconds

Per size, a run of that many saves is written (every save appends an assistant tool call and a
tool result of about 1 KB each of seeded pseudo-random text) into a fresh repository; then the
run's head is forked, and so is its middle checkpoint. Measured per fork, from the store's own
request counters and listings: PUT requests and bytes PUT, objects and bytes the repository holds
afterwards minus before, requests of all kinds, wall time; and that a new manager restores the
fork exactly. Target: a fork adds at most 16 KB (bytes PUT and bytes stored) at 10,000 saves.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snapstore import CheckpointManager  # noqa: E402

TARGET = 16 * 1024
WORDS = [f"w{i}" for i in range(2000)]


def text(rng: random.Random, n: int) -> str:
    """About ``n`` characters of Zipf-like words."""
    out, size = [], 0
    while size < n:
        w = WORDS[min(len(WORDS) - 1, int(rng.paretovariate(1.1)) - 1)]
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def populate(mgr: CheckpointManager, run: str, saves: int, seed: int = 7) -> tuple[list, list]:
    """``saves`` saves of run ``run``; returns (final message list, checkpoint ids oldest first)."""
    rng = random.Random(seed)
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
    ids = []
    for i in range(saves):
        msgs = msgs + [{"role": "assistant", "content": f"call {i}: " + text(rng, 1000)},
                       {"role": "tool", "content": f"result {i}: " + text(rng, 1000)}]
        ids.append(mgr.save(run, msgs, step=i))
    return msgs, ids


def held(store) -> tuple[int, int]:
    """(objects, bytes) the store holds."""
    infos = list(store.list(""))
    return len(infos), sum(i.size for i in infos)


def measure_fork(open_store, mgr, run: str, cid: str, new_run: str, want: list) -> dict:
    """Fork ``run`` at ``cid`` into ``new_run`` and measure what that added."""
    store = mgr.store
    o0, b0 = held(store)
    s0 = store.stats.snapshot()
    t = time.monotonic()
    mgr.fork(run, cid, new_run)
    wall = time.monotonic() - t
    d = store.stats.since(s0)
    o1, b1 = held(store)
    exact = CheckpointManager(open_store()).latest(new_run).messages == want
    return {"puts": d.counts.get("PUT", 0), "bytes_put": d.bytes_up, "requests": d.total(),
            "objects_added": o1 - o0, "bytes_stored_added": b1 - b0, "wall_s": round(wall, 3),
            "restores_exactly": exact, "repo_bytes": b0}


def run_size(kind: str, saves: int, endpoint: str | None) -> dict:
    """One fresh repository of ``saves`` saves; both forks measured."""
    if kind == "local":
        root = tempfile.mkdtemp(prefix="fork-cost-")

        def open_store():
            from snapstore.stores import LocalStore
            return LocalStore(root)
    else:
        import boto3
        bucket = f"fork-cost-{saves}-{random.randrange(1 << 30):x}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)

        def open_store():
            from snapstore.stores.s3 import S3Store
            return S3Store(bucket, "bench", endpoint_url=endpoint, region_name="us-east-1")
    try:
        mgr = CheckpointManager(open_store())
        t = time.monotonic()
        msgs, ids = populate(mgr, "long", saves)
        populate_s = time.monotonic() - t
        head = measure_fork(open_store, mgr, "long", ids[-1], "fork-head", msgs)
        mid = saves // 2
        middle = measure_fork(open_store, mgr, "long", ids[mid], "fork-middle", msgs[:2 + 2 * (mid + 1)])
        return {"store": kind, "saves": saves, "populate_s": round(populate_s, 1), "fork_head": head,
                "fork_middle": middle}
    finally:
        if kind == "local":
            shutil.rmtree(root, ignore_errors=True)


def report(rows: list) -> str:
    lines = [f"{'store':6} {'saves':>6} {'fork of':7} {'PUTs':>4} {'bytes PUT':>9} {'objects+':>8} "
             f"{'bytes stored+':>13} {'requests':>8} {'wall s':>7} {'repo bytes':>11} exact target"]
    for r in rows:
        for which in ("fork_head", "fork_middle"):
            f = r[which]
            ok = f["bytes_put"] <= TARGET and f["bytes_stored_added"] <= TARGET
            lines.append(f"{r['store']:6} {r['saves']:>6} {which[5:]:7} {f['puts']:>4} {f['bytes_put']:>9} "
                         f"{f['objects_added']:>8} {f['bytes_stored_added']:>13} {f['requests']:>8} "
                         f"{f['wall_s']:>7} {f['repo_bytes']:>11} {str(f['restores_exactly']):5} "
                         f"{'PASS' if ok else 'FAIL'} (<= 16 KB)")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="comma-separated save counts")
    ap.add_argument("--store", choices=("local", "s3"), default="local")
    ap.add_argument("--quick", action="store_true", help="sizes 20,100")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    a = ap.parse_args(argv)
    sizes = [20, 100] if a.quick else [int(x) for x in a.sizes.split(",")]
    endpoint, server = None, None
    if a.store == "s3":
        import os
        from moto.server import ThreadedMotoServer
        for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            os.environ.setdefault(k, v)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
    try:
        rows = [run_size(a.store, n, endpoint) for n in sizes]
    finally:
        if server is not None:
            server.stop()
    print(report(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    ok = all(r[w]["bytes_put"] <= TARGET and r[w]["bytes_stored_added"] <= TARGET and r[w]["restores_exactly"]
             for r in rows for w in ("fork_head", "fork_middle"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
