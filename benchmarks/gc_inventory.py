"""Partitioned GC listing from an S3 Inventory vs LISTing ``packs/``: requests and wall time.

Run (from the repository root, after ``pip install -e '.[test,bench]'``)::

    python benchmarks/gc_inventory.py                  # 40 runs x 5 checkpoints, 20,000 extra packs, 8 partitions
    python benchmarks/gc_inventory.py --runs 100 --extra-packs 50000 --partitions 16 --latency-ms 20

A repository is built on moto's HTTP server (in this process) and ``--extra-packs`` empty
unreferenced objects are added under ``packs/`` (through moto's backend, fast) to stand for a
large repository's packs. Then ``partitioned_mark`` (``gc --plan DIR --dry-run``, local executor,
one thread per partition up to 4) runs twice through ``tests/helpers/wire_proxy.RecordingProxy``
with ``--latency-ms`` per request: once LISTing (every partition, and the driver, list the whole
``packs/``: 1 LIST page per 1,000 keys each), once from an S3 Inventory report (gzip CSV, the same
objects; the driver reads the manifest and its one data file, the partitions read the job's
``inventory.parquet``). Printed: wall seconds, requests by kind, packs listed.

Measured 2026-12-03 (script as of commit 6b2cb1d), 2 cores shared with other sessions,
``python benchmarks/gc_inventory.py --runs 20 --extra-packs 10000 --partitions 4`` (20 ms):

    listing    wall s  LIST  GET  packs listed  candidates
    LIST       154.7    83   109  10,040        10,012
    inventory   14.7    28   111  10,040        10,012

The same packs are listed and the same candidates found; the 55 LIST pages saved are the 4
partitions' and the driver's 11 pages each of ``packs/`` (the 28 left list the run log, ``fwd/``
and ``gc/``). The wall time is mostly moto listing 10,000 keys per page request, not the 20 ms
(moto's LIST is O(bucket) per page); on S3 each page would cost about the latency, so the saving
there is about 5 x 11 x 20 ms per 10,000 packs, more with more partitions. One moto-internal
KeyError (a clock probe deleted during a concurrent LIST) was logged by moto's server during
the LIST run and retried by the client; the results are unaffected.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))


def build(mgr, runs: int, checkpoints: int) -> None:
    """``runs`` runs of ``checkpoints`` saves (2 messages each); every third run deleted."""
    for r in range(runs):
        msgs = []
        for i in range(checkpoints):
            msgs = msgs + [{"role": "assistant", "content": f"run {r} step {i} " + "tok " * 60},
                           {"role": "tool", "content": f"result {r}.{i} " + "out " * 40}]
            mgr.save(f"run-{r:05d}", msgs, step=i)
        if r % 3 == 2:
            mgr.delete(f"run-{r:05d}")


def inventory(c, bucket: str, dest: str, created: float) -> str:
    """An S3 Inventory report (gzip CSV) of ``bucket`` as it is now, created at ``created``."""
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            w.writerow([bucket, o["Key"], o["Size"], o["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                        o["ETag"].strip('"')])
    data = gzip.compress(buf.getvalue().encode())
    c.put_object(Bucket=dest, Key="inv/data/part-0.csv.gz", Body=data)
    man = {"sourceBucket": bucket, "destinationBucket": f"arn:aws:s3:::{dest}", "version": "2016-11-30",
           "creationTimestamp": str(int(created * 1000)), "fileFormat": "CSV",
           "fileSchema": "Bucket, Key, Size, LastModifiedDate, ETag",
           "files": [{"key": "inv/data/part-0.csv.gz", "size": len(data), "MD5checksum": hashlib.md5(data).hexdigest()}]}
    c.put_object(Bucket=dest, Key="inv/manifest.json", Body=json.dumps(man).encode())
    return f"s3://{dest}/inv/manifest.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--extra-packs", type=int, default=20000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    import boto3
    from s3_fixtures import DUMMY_ENV, seed_objects, start_moto_server
    from wire_proxy import RecordingProxy

    from snapstore import CheckpointManager
    from snapstore.maintenance.partitions import partitioned_mark
    from snapstore.stores import open_store
    os.environ.update(DUMMY_ENV)
    endpoint = start_moto_server()
    host, port = endpoint.rsplit("/", 1)[-1].split(":")
    c = boto3.client("s3", endpoint_url=endpoint)
    bucket, dest = f"ginv-{os.urandom(4).hex()}", f"ginv-dst-{os.urandom(4).hex()}"
    c.create_bucket(Bucket=bucket)
    c.create_bucket(Bucket=dest)
    url = f"s3://{bucket}/repo"
    store = open_store(url, endpoint_url=endpoint)
    mgr = CheckpointManager(store)
    t0 = time.perf_counter()
    build(mgr, args.runs, args.checkpoints)
    seed_objects(store, [f"packs/{i % 256:02x}/{i:016x}" for i in range(args.extra_packs)])
    created = mgr.repo.store_time()
    man = inventory(c, bucket, dest, created)
    print(f"built {args.runs} runs, {args.extra_packs} extra packs in {time.perf_counter() - t0:.1f} s")
    proxy = RecordingProxy(host, int(port), delay=args.latency_ms / 1e3)
    opts = {"endpoint_url": f"http://127.0.0.1:{proxy.port}"}
    results = []
    for name, inv in (("LIST", None), ("inventory", man)):
        with tempfile.TemporaryDirectory() as job:
            t = time.perf_counter()
            rep = partitioned_mark(url, job, args.partitions, workers=min(4, args.partitions),
                                   store_options=opts, inventory=inv)
            wall = time.perf_counter() - t
        res = {"listing": name, "wall_s": round(wall, 2), "partitions": rep["partitions"],
               "listed_packs": rep["listed_packs"], "live_packs": rep["live_packs"],
               "candidates": rep["candidates"], "requests": {k: v for k, v in sorted(rep["requests"].items()) if v}}
        results.append(res)
        print(json.dumps(res))
    proxy.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
