"""Stored bytes, time per step and a fresh process's ``get_state`` of a LangGraph chat graph, for
SqliteSaver, langgraph-checkpoint-objectstorage and SnapstoreSaver, side by side in one run.

The graph: one deterministic "model" node (no network) answering each human message; every turn
adds two messages of about 360 characters (pseudo-random English-like words, seeded). The state's
``messages`` channel uses ``add_messages`` (the whole list in every checkpoint), or LangGraph's
beta ``DeltaChannel`` (snapshot every 100 updates). Each turn is one ``invoke`` with LangGraph's
default durability: 3 checkpoints (input, after ``__start__``, after ``model``) and 2
``put_writes`` per turn. Savers:

* ``sqlite``: ``SqliteSaver`` (langgraph-checkpoint-sqlite) on a file; bytes = the database file
  (after a WAL checkpoint) plus any ``-wal`` file.
* ``snapstore``: ``SnapstoreSaver`` on a local directory (fsync on, the default); bytes = the sum
  of the repository's file sizes, split by kind of object (``packs``, manifests ``m``, index
  records ``c``, log segments ``l``).
* ``snapstore-s3``: ``SnapstoreSaver`` on moto's HTTP server on 127.0.0.1; bytes = the sum of the
  object sizes, split the same way.
* ``snapstore-s3-compact``: the same with ``compact_log=True`` (compacted run logs, docs/format.md
  §14: the default on a local directory, off on S3, where it costs one PUT more per save).
* ``objectstorage``: ``ObjectStorageSaver`` (langgraph-checkpoint-objectstorage, its default
  ``compression='none'``) over boto3 on the same moto server (``benchmarks.lgraph.BotoFS``);
  bytes = the sum of the object sizes.

Measured per (channel, turns, saver):

* ``ms/turn``: wall time of ``invoke`` per turn, over the whole run, and over the first and the
  last 50 turns (``first50``, ``last50``): whether a step gets slower as the run grows.
* ``bytes``: as above.
* ``get_state``: ``graph.get_state(thread)`` in a FRESH process (``python`` of this interpreter;
  imports and the construction of the saver, which sends no request, are outside the timing), the
  message count checked. Local savers: median of 3 processes. S3 savers: one process straight to
  moto (``ms``), and one through ``benchmarks.latency.LatencyProxy`` adding ``--delay-ms`` to
  every response, whose log gives the requests by kind and the **sequential round trips**
  (``benchmarks.latency.summarize``) and the wall time behind that latency (``ms@delay``).

    python benchmarks/langgraph_storage.py                                   # 300 turns, both channels, every saver
    python benchmarks/langgraph_storage.py --turns 300,1000 --json out.json
    python benchmarks/langgraph_storage.py --turns 300 --channels delta --savers snapstore,snapstore-s3

``add_messages`` costs SqliteSaver and the objectstorage saver O(n^2) bytes (the whole list in
every checkpoint: 1,000 turns is over a GB); ``--quadratic-max-turns`` (default 300) skips those two
with ``add_messages`` above it, with a note in the table.

Needs ``pip install '.[langgraph,bench]'`` (langgraph, langgraph-checkpoint-sqlite,
langgraph-checkpoint-objectstorage, fsspec) and moto.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import _lib  # noqa: E402
from benchmarks.lgraph import CHAT_THREAD as THREAD, build_chat_graph as build, chat_turns, make_saver  # noqa: E402

SAVERS = ("sqlite", "objectstorage", "snapstore", "snapstore-s3", "snapstore-s3-compact")
S3_SAVERS = ("objectstorage", "snapstore-s3", "snapstore-s3-compact")
QUADRATIC = ("sqlite", "objectstorage")  # with add_messages: the whole list in every checkpoint
clock = time.monotonic  # the latency proxy's clock


def child_main(spec: dict) -> dict:
    """A fresh process: open the saver, then time ``get_state`` of the thread."""
    saver = make_saver(spec)
    graph = build(saver, spec["delta"])
    t0 = clock()
    st = graph.get_state({"configurable": {"thread_id": THREAD}})
    t1 = clock()
    return {"t0": t0, "t1": t1, "count": len(st.values.get("messages", []))}


def run_child(spec: dict) -> dict:
    """``get_state`` in a fresh ``langgraph_storage.py --child`` process (dummy AWS credentials); its result."""
    return _lib.run_child(os.path.abspath(__file__), spec, env=_lib.child_env(s3=True), timeout=3600)


class S3Env:
    """moto's HTTP server on 127.0.0.1 and a latency proxy in front of it (dummy credentials)."""

    def __init__(self, delay_s: float):
        import logging

        from moto.server import ThreadedMotoServer

        from benchmarks.latency import LatencyProxy

        os.environ.update(_lib.DUMMY_ENV)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.proxy = LatencyProxy(int(port), delay_s).start()

    def client(self):
        import boto3
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def new_bucket(self, tag: str) -> str:
        name = f"lgs-{tag}-{uuid.uuid4().hex[:8]}"
        self.client().create_bucket(Bucket=name)
        return name

    def objects(self, bucket: str):
        token = None
        while True:
            kw = {"Bucket": bucket}
            if token:
                kw["ContinuationToken"] = token
            r = self.client().list_objects_v2(**kw)
            for o in r.get("Contents", []):
                yield o["Key"], o["Size"]
            if not r.get("IsTruncated"):
                return
            token = r["NextContinuationToken"]

    def measure(self, spec: dict) -> dict:
        from benchmarks.latency import summarize

        out = run_child(dict(spec, endpoint=self.proxy.endpoint))
        res = summarize(self.proxy.entries(out["t0"], out["t1"]))
        return {"requests": res["requests"], "total": res["total"], "round_trips": res["round_trips"],
                "ms": 1000 * (out["t1"] - out["t0"]), "count": out["count"]}

    def stop(self):
        self.proxy.stop()
        self.server.stop()


def _group(key: str) -> str:
    """Kind of a snapstore object from its key: packs, m (manifests), c (index records), l (log
    segments), or the first segment of the key."""
    parts = key.split("/")
    if parts[0] == "runs" and len(parts) > 2:
        return parts[2]
    return parts[0]


def stored(kind: str, saver, spec: dict, env: S3Env | None) -> dict:
    """``{"bytes", "objects", "by_kind": {group: bytes}}`` of what the saver stored."""
    if kind == "sqlite":
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        saver.conn.commit()
        p = spec["path"]
        b = os.path.getsize(p) + (os.path.getsize(p + "-wal") if os.path.exists(p + "-wal") else 0)
        return {"bytes": b, "objects": 1, "by_kind": {}}
    if kind == "snapstore":
        items = []
        for dirpath, _dirs, files in os.walk(spec["path"]):
            for f in files:
                full = os.path.join(dirpath, f)
                items.append((os.path.relpath(full, spec["path"]), os.lstat(full).st_size))
    else:
        items = list(env.objects(spec["bucket"]))
        if kind.startswith("snapstore-s3"):
            items = [(k.partition("/")[2], s) for k, s in items]  # below the repository prefix
    by: dict = {}
    for k, s in items:
        g = "objects" if kind == "objectstorage" else _group(k)
        by[g] = by.get(g, 0) + s
    return {"bytes": sum(s for _, s in items), "objects": len(items), "by_kind": dict(sorted(by.items()))}


def run(kind: str, turns: int, delta: bool, work: str, env: S3Env | None, trials: int) -> dict:
    tag = f"{'delta' if delta else 'add'}-{turns}"
    spec = {"kind": kind, "delta": delta}
    if kind == "sqlite":
        spec["path"] = os.path.join(work, f"sqlite-{tag}.db")
    elif kind == "snapstore":
        spec["path"] = os.path.join(work, f"snapstore-{tag}")
    else:
        spec["bucket"] = env.new_bucket(kind.split("-")[0][:5])
        spec["endpoint"] = env.endpoint
        if kind.startswith("snapstore-s3"):
            spec["path"] = f"s3://{spec['bucket']}/repo"
    saver = make_saver(spec)
    graph = build(saver, delta)
    times = chat_turns(graph, turns)
    cfg = {"configurable": {"thread_id": THREAD}}
    size = stored(kind, saver, spec, env)
    n = len(graph.get_state(cfg).values["messages"])
    assert n == 2 * turns, (kind, n)
    row = {"saver": kind, "channel": "DeltaChannel" if delta else "add_messages", "turns": turns,
           "stored_bytes": size["bytes"], "objects": size["objects"], "by_kind": size["by_kind"],
           "ms_per_turn": round(1000 * sum(times) / turns, 2),
           "ms_per_turn_first50": round(1000 * statistics.mean(times[:50]), 2),
           "ms_per_turn_last50": round(1000 * statistics.mean(times[-50:]), 2)}
    if kind in S3_SAVERS:
        direct = [run_child(spec) for _ in range(trials)]
        assert all(d["count"] == 2 * turns for d in direct), direct
        row["get_state_ms"] = round(1000 * statistics.median(d["t1"] - d["t0"] for d in direct), 1)
        via = env.measure(spec)
        assert via["count"] == 2 * turns, via
        row.update(get_state_requests=via["requests"], get_state_total=via["total"],
                   get_state_round_trips=via["round_trips"], get_state_ms_at_delay=round(via["ms"], 1))
    else:
        got = [run_child(spec) for _ in range(trials)]
        assert all(d["count"] == 2 * turns for d in got), got
        row["get_state_ms"] = round(1000 * statistics.median(d["t1"] - d["t0"] for d in got), 1)
    if kind == "sqlite":
        saver.conn.close()
    elif kind.startswith("snapstore"):
        saver.close()
    return row


def _kb(b) -> str:
    return f"{b / 1000:,.0f} KB" if b < 10 ** 6 else f"{b / 10 ** 6:,.2f} MB"


def table(rows: list, delay_ms: float) -> str:
    head = ("| channel | turns | saver | stored | of which | ms/turn (all / first 50 / last 50) | fresh get_state "
            f"| requests (round trips), ms at +{delay_ms:g} ms |\n|---|---|---|---|---|---|---|---|")
    out = [head]
    for r in rows:
        if "skipped" in r:
            out.append(f"| {r['channel']} | {r['turns']} | {r['saver']} | skipped: {r['skipped']} | | | | |")
            continue
        parts = ", ".join(f"{k} {_kb(v)}" for k, v in r["by_kind"].items() if r["saver"].startswith("snapstore"))
        s3 = ""
        if "get_state_total" in r:
            reqs = " ".join(f"{v} {k}" for k, v in r["get_state_requests"].items())
            s3 = f"{r['get_state_total']} ({r['get_state_round_trips']}): {reqs}; {r['get_state_ms_at_delay']} ms"
        out.append(f"| {r['channel']} | {r['turns']} | {r['saver']} | {_kb(r['stored_bytes'])} | {parts} "
                   f"| {r['ms_per_turn']} / {r['ms_per_turn_first50']} / {r['ms_per_turn_last50']} "
                   f"| {r['get_state_ms']} ms | {s3} |")
    return "\n".join(out)


def main() -> None:
    if _lib.child_entry(None, child_main):
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", default="300", help="comma-separated run lengths, e.g. 300,1000")
    ap.add_argument("--channels", default="add,delta", help="comma-separated: add (add_messages), delta (DeltaChannel)")
    ap.add_argument("--savers", default=",".join(SAVERS), help=f"comma-separated, of {', '.join(SAVERS)}")
    ap.add_argument("--delay-ms", type=float, default=20.0, help="latency the proxy adds to each S3 response")
    ap.add_argument("--trials", type=int, default=3, help="fresh processes per get_state timing (median)")
    ap.add_argument("--quadratic-max-turns", type=int, default=300,
                    help="skip sqlite and objectstorage with add_messages above this many turns (O(n^2) bytes)")
    ap.add_argument("--no-fsync", action="store_true", help="local snapstore without fsync (what the fsyncs cost)")
    ap.add_argument("--json", help="also write the rows to this file")
    a = ap.parse_args()
    if a.no_fsync:
        os.environ["BENCH_FSYNC"] = "0"
    savers = [s for s in a.savers.split(",") if s]
    bad = set(savers) - set(SAVERS)
    if bad:
        ap.error(f"unknown savers {sorted(bad)}")
    env = S3Env(a.delay_ms / 1000) if set(savers) & set(S3_SAVERS) else None
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for ch in a.channels.split(","):
                for turns in (int(t) for t in a.turns.split(",")):
                    for kind in savers:
                        delta = ch == "delta"
                        if not delta and kind in QUADRATIC and turns > a.quadratic_max_turns:
                            row = {"saver": kind, "channel": "add_messages", "turns": turns,
                                   "skipped": f"O(n^2) bytes above --quadratic-max-turns {a.quadratic_max_turns}"}
                        else:
                            row = run(kind, turns, delta, work, env, a.trials)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        if env is not None:
            env.stop()
    print(table(rows, a.delay_ms))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
