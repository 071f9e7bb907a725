"""S3 benchmark: requests, bytes and time per save, and restore time, against moto's HTTP server.

Run (from the repository root)::

    python benchmarks/s3.py                          # runs of 100, 1,000 and 10,000 messages
    python benchmarks/s3.py --sizes 100,1000 --trials 5 --gc-max 0 --json out.json

What it does: starts moto's ``ThreadedMotoServer`` on 127.0.0.1 (random port, dummy credentials) and,
for each run length, creates a fresh bucket and saves a run through
``CheckpointManager("s3://BUCKET/bench", endpoint_url=...)`` the way an agent does: checkpoint 0 holds
a system prompt and a task (~2 KB each), every later checkpoint adds one turn of 2 messages (an
assistant tool call and its tool result, ~1-2 KB each, realistic text from
``benchmarks/save_cost.py``'s generator). The caller appends to one list and passes it to every save.

Reported per run length:

* requests per save by kind (PUT/GET/HEAD/LIST/DELETE): median and max over the steady state (every
  save after the first, by the warm manager that made the previous save), from ``store.stats`` deltas;
* bytes uploaded per save (median, max) and save latency (median, p95);
* restore: a fresh ``CheckpointManager`` (new process state: new client, no cache) calling
  ``latest()``: median wall time over ``--trials`` (the repository open -- config GET and versioning
  check -- is timed separately), GETs per restore, and the number of sequential round trips (each
  parallel batch of GETs counts once; see ``RoundTrips``) against the tree depth;
* for runs of at most ``--gc-max`` messages (default 1,000): one more restore after
  ``gc(grace_period=0)`` merged the run's small packs into one. It is SLOWER than before gc: hints
  still name the retired packs, and ``Repository.get_pack`` re-GETs a missing pack (404) for every
  entry before following the cached forwarding record (about one sequential GET per message; see
  tests/stores/test_s3_manager.py::test_restore_after_gc_repack_stays_bounded). The "distinct" count shows
  how many different keys those GETs asked for;
* the estimated monthly storage cost and the request cost of writing the run, from
  ``mgr.stats()["cost"]`` (S3 Standard list prices, us-east-1).

moto on loopback is NOT real S3: a request costs a few milliseconds of CPU in this process (moto
shares the GIL with the client), not 10-50 ms of network and service latency, and there is no
throttling. Request counts, bytes and round-trip counts carry over to S3; times do not. A rough S3
estimate of a restore is ``round trips x latency + GETs / 16 x latency`` (16 = the repository's
parallel GETs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(HERE))

import _lib  # noqa: E402

os.environ.update(_lib.DUMMY_ENV)
for _k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(_k, None)

from roundtrips import RoundTrips  # noqa: E402  (sequential round trips of a restore)
from save_cost import make_history  # noqa: E402  (the realistic message generator)

from snapstore import CheckpointManager  # noqa: E402

RUN = "bench-run"
KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")


def start_server() -> tuple[object, str]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def new_bucket(endpoint: str) -> str:
    import boto3

    name = f"snapstore-bench-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def restore(url: str, endpoint: str, expect: list) -> dict:
    """One cold restore: fresh manager, open the repository, latest(); times and request counts."""
    t0 = time.perf_counter()
    mgr = CheckpointManager(url, endpoint_url=endpoint)
    mgr.repo  # config GET + versioning check
    t1 = time.perf_counter()
    before = mgr.store.stats.snapshot()
    cp = mgr.latest(RUN)
    t2 = time.perf_counter()
    d = mgr.store.stats.since(before)
    assert cp.messages == expect, "restore differs from what was saved"
    mgr.close()
    return {"open_s": t1 - t0, "latest_s": t2 - t1, "gets": d.counts["GET"], "lists": d.counts["LIST"],
            "bytes_down": d.bytes_down}


def round_trips(url: str, endpoint: str) -> dict:
    from snapstore.stores.s3 import S3Store

    rec = RoundTrips(S3Store.from_url(url, endpoint_url=endpoint))
    mgr = CheckpointManager(rec)
    mgr.repo
    rec.watch(mgr.repo)
    rec.calls.clear()
    t0 = time.perf_counter()
    cp = mgr.latest(RUN)
    dt = time.perf_counter() - t0
    rounds = rec.rounds()
    ls = mgr.state.views[RUN].list_state
    # a read from arrays reads no spine (the next save loads it): read it here, after the count
    depth = len((ls.spine or mgr.repo.read_state(*ls.state)).levels)
    gets = [key for _, kind, key in rec.calls if kind == "GET"]
    mgr.close()
    return {"round_trips": len(rounds), "depth": depth, "bound": depth + 3, "max_in_flight": rec.max_in_flight,
            "round_sizes": [len(r) for r in rounds], "messages": cp.message_count, "latest_s": dt,
            "gets": len(gets), "distinct_gets": len(set(gets))}


def bench(n_messages: int, endpoint: str, trials: int, do_gc: bool) -> dict:
    turns_needed = max(0, (n_messages - 2) // 2)
    prelude, turns = make_history(turns_needed)
    bucket = new_bucket(endpoint)
    url = f"s3://{bucket}/bench"
    mgr = CheckpointManager(url, endpoint_url=endpoint)
    msgs = list(prelude)
    per_save = []
    t_all = time.perf_counter()
    for k in range(turns_needed + 1):
        if k:
            msgs = msgs + turns[k - 1]
        before = mgr.store.stats.snapshot()
        t0 = time.perf_counter()
        mgr.save(RUN, msgs, step=k, token_usage={"input_tokens": 1000 * k, "output_tokens": 120})
        dt = time.perf_counter() - t0
        d = mgr.store.stats.since(before)
        per_save.append((dt, d))
    build_s = time.perf_counter() - t_all
    steady = per_save[1:] or per_save
    req = {kind: (statistics.median(d.counts[kind] for _, d in steady), max(d.counts[kind] for _, d in steady))
           for kind in KINDS}
    up = [d.bytes_up for _, d in steady]
    lat = [dt * 1000 for dt, _ in steady]
    st = mgr.stats()
    write_requests = {kind: sum(d.counts[kind] for _, d in per_save) for kind in KINDS}
    from snapstore.maintenance.stats import estimate_cost

    write_cost = estimate_cost(0, write_requests)["requests"]
    mgr.close()

    restores = [restore(url, endpoint, msgs) for _ in range(trials)]
    rt = round_trips(url, endpoint)
    out = {
        "messages": len(msgs), "saves": len(per_save), "build_s": build_s,
        "requests_per_save": {k: {"median": m, "max": x} for k, (m, x) in req.items()},
        "bytes_up_per_save": {"median": statistics.median(up), "max": max(up)},
        "save_ms": {"median": statistics.median(lat), "p95": _lib.percentile(lat, 95)},
        "restore": {"latest_s_median": statistics.median(r["latest_s"] for r in restores),
                    "open_s_median": statistics.median(r["open_s"] for r in restores),
                    "gets": restores[0]["gets"], "bytes_down": restores[0]["bytes_down"], "trials": trials},
        "round_trips": rt,
        "stored_bytes": st["stored_bytes"], "logical_bytes": st["logical_bytes"], "ratio": st["ratio"],
        "packs": st["objects"].get("packs", {}).get("count", 0),
        "cost": {"storage_per_month_usd": st["cost"]["storage_per_month"], "write_requests_usd": write_cost},
    }
    if do_gc:
        g = CheckpointManager(url, endpoint_url=endpoint)
        t0 = time.perf_counter()
        rep = g.gc(grace_period=0)
        gc_s = time.perf_counter() - t0
        packs_after = g.stats()["objects"].get("packs", {}).get("count", 0)
        g.close()
        rt_after = round_trips(url, endpoint)  # one restore (slow after gc: see the module docstring)
        out["after_gc"] = {"gc_s": gc_s, "repacked": rep.repacked_packs, "packs": packs_after,
                           "latest_s": rt_after["latest_s"], "gets": rt_after["gets"],
                           "distinct_gets": rt_after["distinct_gets"], "round_trips": rt_after["round_trips"]}
    return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def print_table(results: list, endpoint: str) -> None:
    print()
    print(f"snapstore on S3 (moto ThreadedMotoServer at {endpoint}, in this process)")
    print("NOTE: moto on loopback is not real S3 latency: times below are client + moto CPU, not network and")
    print("service latency. Request counts, bytes and round trips carry over to S3; times do not.")
    print()
    cols = [("messages", lambda r: f"{r['messages']:,}"),
            ("saves", lambda r: f"{r['saves']:,}"),
            ("PUT/save", lambda r: "{median:g} (max {max})".format(**r["requests_per_save"]["PUT"])),
            ("GET/save", lambda r: "{median:g} (max {max})".format(**r["requests_per_save"]["GET"])),
            ("HEAD/save", lambda r: "{median:g} (max {max})".format(**r["requests_per_save"]["HEAD"])),
            ("LIST/save", lambda r: "{median:g} (max {max})".format(**r["requests_per_save"]["LIST"])),
            ("DELETE/save", lambda r: "{median:g} (max {max})".format(**r["requests_per_save"]["DELETE"])),
            ("bytes up/save", lambda r: f"{fmt_bytes(r['bytes_up_per_save']['median'])} (max "
                                        f"{fmt_bytes(r['bytes_up_per_save']['max'])})"),
            ("save latency", lambda r: f"{r['save_ms']['median']:.1f} ms (p95 {r['save_ms']['p95']:.1f})"),
            ("restore latest()", lambda r: f"{r['restore']['latest_s_median'] * 1000:.0f} ms "
                                           f"(+{r['restore']['open_s_median'] * 1000:.0f} ms open)"),
            ("restore GETs", lambda r: f"{r['restore']['gets']:,} ({fmt_bytes(r['restore']['bytes_down'])})"),
            ("round trips", lambda r: f"{r['round_trips']['round_trips']} (depth {r['round_trips']['depth']}"
                                      f" + 3 = {r['round_trips']['bound']}; max {r['round_trips']['max_in_flight']}"
                                      " in flight)"),
            ("stored / logical", lambda r: f"{fmt_bytes(r['stored_bytes'])} / {fmt_bytes(r['logical_bytes'])} "
                                           f"(x{r['ratio']:.0f})"),
            ("packs", lambda r: f"{r['packs']:,}"),
            ("storage $/month", lambda r: f"${r['cost']['storage_per_month_usd']:.6f}"),
            ("write requests $", lambda r: f"${r['cost']['write_requests_usd']:.4f}")]
    if any("after_gc" in r for r in results):
        cols += [("after gc: packs", lambda r: f"{r['after_gc']['packs']:,} (gc {r['after_gc']['gc_s']:.1f} s)"
                  if "after_gc" in r else "(skipped)"),
                 ("after gc: restore", lambda r: f"{r['after_gc']['latest_s'] * 1000:.0f} ms, "
                  f"{r['after_gc']['round_trips']:,} round trips" if "after_gc" in r else "(skipped)"),
                 ("after gc: GETs", lambda r: f"{r['after_gc']['gets']:,} ({r['after_gc']['distinct_gets']:,} distinct)"
                  if "after_gc" in r else "(skipped)")]
    w0 = max(len(c) for c, _ in cols)
    cells = [[f(r) for r in results] for _, f in cols]
    widths = [max(len(cells[i][j]) for i in range(len(cols))) for j in range(len(results))]
    for (name, _), row in zip(cols, cells):
        print(f"{name:<{w0}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(row, widths)))
    print()
    print("Requests per save: steady state (saves 2..N by the warm manager), median (max).")
    print("Restore: fresh CheckpointManager, latest(); median of the trials. Round trips: sequential")
    print("batches of requests (LIST head, GET manifest, GET state, one batch per tree level, GET data).")
    print("Costs: mgr.stats()['cost'] at S3 Standard us-east-1 list prices; storage of the run per month,")
    print("and the PUT/GET/LIST requests the saves made.")
    for r in results:
        rt_s = 0.03 * (r["round_trips"]["round_trips"] + r["restore"]["gets"] / 16)
        print(f"  {r['messages']:>6,} messages: on S3 at ~30 ms/request and 16 parallel GETs a restore would take "
              f"roughly {rt_s:.1f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100,1000,10000", help="run lengths in messages (comma separated)")
    ap.add_argument("--trials", type=int, default=3, help="restores per run length (median reported)")
    ap.add_argument("--gc-max", type=int, default=1000,
                    help="also gc(grace_period=0) and restore once more for runs of at most this many messages "
                         "(default 1000; 0: never). Restores after gc are slow, see the module docstring")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    server, endpoint = start_server()
    results = []
    try:
        for n in sizes:
            t0 = time.perf_counter()
            print(f"run of {n:,} messages ...", end=" ", flush=True)
            results.append(bench(n, endpoint, args.trials, n <= args.gc_max))
            print(f"{time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        server.stop()
    print_table(results, endpoint)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
