"""Stored bytes and time per step of a LangGraph chat graph: SnapstoreSaver against SqliteSaver.

The graph: one deterministic "model" node (no network) answering each human message; every turn
adds two messages of about 360 characters (pseudo-random English-like words, seeded). The state's
``messages`` channel uses ``add_messages`` (the whole list in every checkpoint), or with
``--delta`` LangGraph's beta ``DeltaChannel`` (snapshot every 100 updates). Savers:

* ``sqlite``: ``SqliteSaver`` (langgraph-checkpoint-sqlite) on a file; bytes = the database file
  (after a WAL checkpoint) plus any ``-wal`` file.
* ``snapstore``: ``SnapstoreSaver`` on a local directory (fsync on, the default); bytes = the sum
  of the repository's object sizes (``CheckpointManager.stats()["stored_bytes"]``), and ``du``.
* ``snapstore-s3``: ``SnapstoreSaver`` on moto's HTTP server on 127.0.0.1 (no added latency);
  bytes = the sum of the object sizes.

Then ``get_state`` of the thread is timed in a fresh process for each.

    python benchmarks/langgraph_storage.py --turns 300            # add_messages
    python benchmarks/langgraph_storage.py --turns 300 --delta    # DeltaChannel
    python benchmarks/langgraph_storage.py --turns 300 --savers snapstore-s3
    python benchmarks/langgraph_storage.py --turns 300 --savers snapstore --no-fsync

Needs ``pip install '.[langgraph,bench]'`` (langgraph, langgraph-checkpoint-sqlite).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from typing import Annotated, TypedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.channels.delta import DeltaChannel  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

WORDS = ("the agent tool call result file test error patch function value returns line module import "
         "config repository branch commit review change build output input request response status "
         "check update data model token user system message context state step plan fix run").split()


def text(rng: random.Random, n: int = 360) -> str:
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS) if rng.random() > 0.08 else str(rng.randrange(10 ** 6))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def _delta_reducer(state, writes):
    for w in writes:
        state = add_messages(state, w)
    return state


class State(TypedDict):
    messages: Annotated[list, add_messages]


class DState(TypedDict):
    messages: Annotated[list, DeltaChannel(_delta_reducer, snapshot_frequency=100)]


def build(saver, delta: bool):
    g = StateGraph(DState if delta else State)
    rng = random.Random(7)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=text(rng))]})
    g.add_edge(START, "model")
    return g.compile(checkpointer=saver)


def make_saver(kind: str, path: str):
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        return SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    from snapstore.integrations.langgraph import SnapstoreSaver
    if kind == "snapstore-s3":
        return SnapstoreSaver(path, endpoint_url=os.environ["BENCH_S3_ENDPOINT"], addressing_style="path")
    return SnapstoreSaver(path, fsync=os.environ.get("BENCH_FSYNC", "1") == "1")


def start_moto() -> str:
    """moto's HTTP server on 127.0.0.1 (a bucket ``bench``); sets dummy credentials."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ[k] = v
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    os.environ["BENCH_S3_ENDPOINT"] = endpoint
    return endpoint


def stored_bytes(kind: str, saver, path: str) -> dict:
    if kind == "sqlite":
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        saver.conn.commit()
        b = os.path.getsize(path) + (os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0)
        return {"bytes": b, "disk": b}
    st = saver.manager.stats()
    if kind == "snapstore-s3":
        return {"bytes": st["stored_bytes"], "disk": None}
    du = int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])
    return {"bytes": st["stored_bytes"], "disk": du}


def fresh_get_state(kind: str, path: str, delta: bool) -> float:
    code = (f"import sys, time; sys.path.insert(0, {ROOT!r}); sys.argv=['x'];"
            f"import benchmarks.langgraph_storage as b; s=b.make_saver({kind!r}, {path!r}); g=b.build(s, {delta!r});"
            "t=time.perf_counter(); st=g.get_state({'configurable': {'thread_id': 'bench'}});"
            "print(time.perf_counter()-t, len(st.values['messages']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    secs, n = out.stdout.split()
    return float(secs), int(n)


def run(kind: str, turns: int, delta: bool, work: str) -> dict:
    path = os.path.join(work, f"{kind}{'-delta' if delta else ''}" + (".db" if kind == "sqlite" else ""))
    if kind == "snapstore-s3":
        path = f"s3://bench/{'delta' if delta else 'add'}-{turns}"
    saver = make_saver(kind, path)
    graph = build(saver, delta)
    rng = random.Random(1)
    cfg = {"configurable": {"thread_id": "bench"}}
    t0 = time.perf_counter()
    for i in range(turns):
        graph.invoke({"messages": [HumanMessage(content=text(rng))]}, cfg)
    secs = time.perf_counter() - t0
    size = stored_bytes(kind, saver, path)
    n = len(graph.get_state(cfg).values["messages"])
    get_s, n2 = fresh_get_state(kind, path, delta)
    assert n == n2 == 2 * turns, (n, n2)
    return {"saver": kind, "channel": "DeltaChannel" if delta else "add_messages", "turns": turns,
            "stored_bytes": size["bytes"], "disk_bytes": size["disk"], "ms_per_turn": round(1000 * secs / turns, 2),
            "fresh_get_state_ms": round(1000 * get_s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--delta", action="store_true", help="messages as a DeltaChannel (beta)")
    ap.add_argument("--no-fsync", action="store_true", help="local snapstore without fsync (what the fsyncs cost)")
    ap.add_argument("--savers", default="sqlite,snapstore",
                    help="comma-separated: sqlite, snapstore (local directory), snapstore-s3 (moto's HTTP server)")
    a = ap.parse_args()
    if a.no_fsync:
        os.environ["BENCH_FSYNC"] = "0"
    if "snapstore-s3" in a.savers:
        start_moto()
    with tempfile.TemporaryDirectory() as work:
        for kind in a.savers.split(","):
            print(json.dumps(run(kind, a.turns, a.delta, work)), flush=True)


if __name__ == "__main__":
    main()
