"""Listing archived runs, two checkouts side by side: what the hot catalogue costs a reader.

For each checkout given (``--trees A B ...``, default this one), a child process with that
checkout's ``snapstore`` on its path saves a workload into a fresh local repository, archives it
(GLACIER_IR, recorded) and GCs it twice, then times a fresh manager's ``list()`` of every run
(each record decoded from the bundle logs) ``--reps`` times. Children run interleaved, round by
round (A, B, A, B, ...), so machine load hits both alike; reported per checkout, as medians and
ratios to the first checkout: the wall and CPU (``process_time``) seconds of a listing, and the
CPU microseconds per record of decoding every record of the bundle logs into a Manifest (what a
listing pays per record, without its LISTs and GETs); and a fresh manager's ``latest()`` of the
run with most checkpoints (requests, bytes down, wall and CPU seconds): one archived checkpoint read.

Workloads: ``taubench`` (the shared ``taubench-gpt4o-airline.json``: 200 runs, 2,454
checkpoints) and ``long`` (one synthetic run of 2,454 checkpoints, a user and an assistant
message each, ``step`` and ``token_usage`` set).

    python benchmarks/archive_list.py [--trees DIR ...] [--rounds N] [--reps N] [--workload taubench|long]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LONG = 2454
"""Checkpoints of the ``long`` workload."""


def _child(tree: str, workload: str, reps: int) -> dict:
    sys.path.insert(0, tree)
    sys.path.insert(1, str(HERE))
    from snapstore import CheckpointManager
    from snapstore.stores.local import LocalStore
    with tempfile.TemporaryDirectory() as work:
        root = Path(work) / "r"
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        if workload == "long":
            msgs = []
            for i in range(LONG):
                msgs = msgs + [{"role": "user", "content": f"step {i}: go on"},
                               {"role": "assistant", "content": f"done {i}"}]
                mgr.save("long", msgs, step=i, token_usage={"input": 100 + i, "output": 20})
        else:
            import _lib
            from benchmarks import workloads as wl
            data = _lib.shared_dir()
            if data is None:
                raise SystemExit("no shared trajectories ($SNAPSTORE_SHARED_DATA)")
            w = [w for w in wl.trajectory_workloads(Path(data))[0] if "taubench" in w.name][0]
            for ri, r in enumerate(w.runs):
                for msgs in r.checkpoints:
                    mgr.save(f"{r.run_id}-{ri}", list(msgs))
        mgr.archive()
        mgr.gc(grace_period=0)
        mgr.gc(grace_period=0)
        times, cpu, records = [], [], 0
        for _ in range(reps):
            fresh = CheckpointManager(LocalStore(root, fsync=False))
            t0, c0 = time.perf_counter(), time.process_time()
            records = sum(len(fresh.list(run)) for run in fresh.runs())
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        # one archived checkpoint: a fresh manager's latest() of the run with most checkpoints
        big = max(CheckpointManager(LocalStore(root, fsync=False)).runs(),
                  key=lambda r: len(CheckpointManager(LocalStore(root, fsync=False)).list(r)))
        reads, read_cpu, gets, down = [], [], 0, 0
        for _ in range(reps):
            st = LocalStore(root, fsync=False)
            fresh = CheckpointManager(st)
            t0, c0 = time.perf_counter(), time.process_time()
            fresh.latest(big)
            reads.append(time.perf_counter() - t0)
            read_cpu.append(time.process_time() - c0)
            gets, down = st.stats.counts.get("GET", 0), st.stats.bytes_down
        # decoding alone: every bundle log's records into Manifests, CPU seconds
        from snapstore.format import keys
        from snapstore.format.logseg import decode_bundlelog
        store = LocalStore(root, fsync=False)
        blobs = [(i.key, store.get(i.key)) for i in store.list("archive/log/")]
        decode, n = [], 0
        for _ in range(reps):
            c0, n = time.process_time(), 0
            for k, d in blobs:
                for rk, copies in decode_bundlelog(k, d).items():
                    for c in copies:
                        c.manifest(keys.manifest_key(rk, c.seq))
                        n += 1
            decode.append(time.process_time() - c0)
        return {"tree": tree, "records": records, "times": times, "cpu": cpu, "decode": decode, "decoded": n,
                "read": reads, "read_cpu": read_cpu, "read_gets": gets, "read_bytes": down,
                "hot_left": sum(i.size for i in LocalStore(root).list("") if not i.key.startswith("archive/data/")
                                and i.key != "config")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs="*", default=[str(HERE.parent)], help="checkouts to compare (first: the base)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="listings per child")
    ap.add_argument("--workload", choices=("taubench", "long"), default="taubench")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(_child(a.child, a.workload, a.reps)))
        return 0
    got: dict = {t: [] for t in a.trees}
    cpu: dict = {t: [] for t in a.trees}
    dec: dict = {t: [] for t in a.trees}
    decoded: dict = {}
    rd: dict = {t: [] for t in a.trees}
    rdc: dict = {t: [] for t in a.trees}
    rreq: dict = {}
    recs: dict = {}
    left: dict = {}
    for _ in range(a.rounds):
        for t in a.trees:
            out = subprocess.run([sys.executable, __file__, "--child", str(Path(t).resolve()), "--workload", a.workload,
                                  "--reps", str(a.reps)], check=True, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).stdout
            r = json.loads(out.strip().splitlines()[-1])
            got[t] += r["times"]
            cpu[t] += r["cpu"]
            dec[t] += r["decode"]
            decoded[t] = r["decoded"]
            rd[t] += r["read"]
            rdc[t] += r["read_cpu"]
            rreq[t] = (r["read_gets"], r["read_bytes"])
            recs[t], left[t] = r["records"], r["hot_left"]
    base = statistics.median(got[a.trees[0]])
    base_cpu = statistics.median(cpu[a.trees[0]])
    base_dec = statistics.median(dec[a.trees[0]])
    print(f"archive_list: a fresh manager's list() of every archived run, workload {a.workload}, "
          f"{a.rounds} rounds x {a.reps} listings, interleaved (medians; wall and CPU seconds of the listing; "
          "CPU of decoding every bundle log record into a Manifest)")
    for t in a.trees:
        med, mc, md = statistics.median(got[t]), statistics.median(cpu[t]), statistics.median(dec[t])
        print(f"  {t:<40} {recs[t]:>5} records  wall {med * 1000:7.1f} ms x{med / base:4.2f}  "
              f"cpu {mc * 1000:7.1f} ms x{mc / base_cpu:4.2f}  decode {md / max(1, decoded[t]) * 1e6:5.1f} us/record "
              f"x{md / base_dec:4.2f}  hot bytes left {left[t]} ({left[t] / recs[t]:.0f} B/record)")
    b_rd, b_rdc = statistics.median(rd[a.trees[0]]), statistics.median(rdc[a.trees[0]])
    print("  one archived checkpoint: a fresh manager's latest() of the run with most checkpoints")
    for t in a.trees:
        m1, m2 = statistics.median(rd[t]), statistics.median(rdc[t])
        print(f"  {t:<40} {rreq[t][0]:>3} GET {rreq[t][1] / 1024:6.0f} KiB  wall {m1 * 1000:7.1f} ms x{m1 / b_rd:4.2f}  "
              f"cpu {m2 * 1000:7.1f} ms x{m2 / b_rdc:4.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
