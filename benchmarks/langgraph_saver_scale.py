"""SnapstoreSaver against SqliteSaver at 100, 1,000 and 3,000 turns: per-step time of ``put`` +
``put_writes``, per invoke, fresh-process ``get_tuple``/``get_state``, and bytes against the core API.

The graph is ``benchmarks.lgraph.build_chat_graph`` (one deterministic model node; two messages of
360 characters per turn), its ``messages`` channel a ``DeltaChannel`` (``--channel add``:
``add_messages``). Each turn is one ``invoke`` at ``--durability`` (LangGraph's default
``async``; or ``exit``, ``sync``). Savers:

* ``sqlite``: LangGraph's ``SqliteSaver`` on a file (with DeltaChannel: "DeltaChannel + SqliteSaver").
* ``snapstore-sqlite``: ``SnapstoreSaver`` on a snapstore SQLite file (``PATH.db``).
* ``snapstore-dir``: ``SnapstoreSaver`` on a snapstore directory (fsync on, the default).

Printed per (turns, saver), over the run's last 100 turns (the step at that length, not the
average of the run): ``step`` p50/p99 of each ``put`` and ``put_writes`` call (ms), ``invoke``
p50/p99 (ms, which includes LangGraph's own DeltaChannel replay, the same for every saver); the
same over the first 100 turns; a fresh process's ``get_tuple`` and ``graph.get_state`` of the
thread (median of ``--trials`` processes; imports and opening the saver not timed); stored bytes
(SQLite: the file after a WAL checkpoint; directory: its files), and for the snapstore savers the
bytes of ``core``: the same messages (``message_to_dict``) saved with ``CheckpointManager.save``,
one checkpoint per turn, on the same kind of store. ``flat`` is the step p50 at this length over
the step p50 of the 100-turn run.

    python benchmarks/langgraph_saver_scale.py                               # 100,1000,3000 turns
    python benchmarks/langgraph_saver_scale.py --turns 100,1000 --savers snapstore-sqlite,sqlite
    python benchmarks/langgraph_saver_scale.py --durability exit --json out.json
    python benchmarks/langgraph_saver_scale.py --turns 1000 --savers snapstore-sqlite --profile 25

``--profile N`` also prints cProfile's N costliest functions (cumulative) over the ``put`` and
``put_writes`` calls of the last 100 turns of each run (where the per-step time goes).

Needs ``pip install '.[langgraph,bench]' langgraph-checkpoint-sqlite``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import _lib  # noqa: E402
from benchmarks.lgraph import CHAT_THREAD, build_chat_graph, chat_text  # noqa: E402

SAVERS = ("sqlite", "snapstore-sqlite", "snapstore-dir")
WINDOW = 100


def open_saver(spec: dict):
    """The saver ``spec`` names (``{"kind", "path"}``)."""
    if spec["kind"] == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        return SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
    from snapstore.integrations.langgraph import SnapstoreSaver
    return SnapstoreSaver(spec["path"])


def child_main(spec: dict) -> dict:
    """A fresh process: open the saver, time ``get_tuple`` and then (another saver) ``get_state``."""
    cfg = {"configurable": {"thread_id": CHAT_THREAD}}
    saver = open_saver(spec)
    t0 = time.perf_counter()
    tup = saver.get_tuple(cfg)
    t1 = time.perf_counter()
    saver2 = open_saver(spec)
    graph = build_chat_graph(saver2, spec["delta"])
    t2 = time.perf_counter()
    st = graph.get_state(cfg)
    t3 = time.perf_counter()
    return {"get_tuple_ms": 1000 * (t1 - t0), "get_state_ms": 1000 * (t3 - t2), "found": tup is not None,
            "count": len(st.values.get("messages", []))}


def _pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 3)


def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def core_bytes(kind: str, work: str, messages: list) -> int:
    """Bytes the core API stores for the same messages: one ``CheckpointManager.save`` per turn
    (two messages each) on a fresh store of ``kind``."""
    from langchain_core.messages import message_to_dict

    from snapstore import CheckpointManager

    path = os.path.join(work, "core.db" if kind == "snapstore-sqlite" else "core")
    dicts = [message_to_dict(m) for m in messages]
    with CheckpointManager(path) as mgr:
        for i in range(2, len(dicts) + 1, 2):
            mgr.save("core", dicts[:i], step=i // 2)
    if kind == "snapstore-sqlite":
        con = sqlite3.connect(path)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    return _size(path)


def run(kind: str, turns: int, delta: bool, durability: str, work: str, trials: int, profile: int = 0) -> dict:
    from langchain_core.messages import HumanMessage
    import random

    path = os.path.join(work, f"{kind}-{turns}" + (".db" if kind in ("sqlite", "snapstore-sqlite") else ""))
    spec = {"kind": kind, "path": path, "delta": delta}
    saver = open_saver(spec)
    steps: list = []  # (turn, seconds) of each put / put_writes
    turn = [0]
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
    for name in ("put", "put_writes"):
        f = getattr(saver, name)

        def timed(*a, _f=f, **k):
            on = prof is not None and turn[0] >= turns - WINDOW
            t = time.perf_counter()
            if on:
                prof.enable()
            try:
                return _f(*a, **k)
            finally:
                if on:
                    prof.disable()
                steps.append((turn[0], time.perf_counter() - t))
        setattr(saver, name, timed)
    graph = build_chat_graph(saver, delta)
    rng = random.Random(1)
    cfg = {"configurable": {"thread_id": CHAT_THREAD}}
    invokes = []
    for i in range(turns):
        turn[0] = i
        t = time.perf_counter()
        graph.invoke({"messages": [HumanMessage(content=chat_text(rng))]}, cfg, durability=durability)
        invokes.append(time.perf_counter() - t)
    if prof is not None:
        import io
        import pstats
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(profile)
        print(f"# profile: {kind}, {turns} turns, put + put_writes of the last {WINDOW} turns", file=sys.stderr)
        print(out.getvalue(), file=sys.stderr, flush=True)
    messages = graph.get_state(cfg).values["messages"]
    assert len(messages) == 2 * turns, (kind, len(messages))
    if kind == "sqlite":
        saver.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        saver.conn.commit()
        saver.conn.close()
    else:
        saver.close()
        if kind == "snapstore-sqlite":
            con = sqlite3.connect(path)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
    last = [s for t, s in steps if t >= turns - WINDOW]
    first = [s for t, s in steps if t < WINDOW]
    got = [_lib.run_child(os.path.abspath(__file__), spec, env=_lib.child_env(), timeout=3600) for _ in range(trials)]
    assert all(g["found"] and g["count"] == 2 * turns for g in got), got
    row = {"saver": kind, "turns": turns, "channel": "DeltaChannel" if delta else "add_messages",
           "durability": durability,
           "step_p50_ms": _pct(last, 0.5), "step_p99_ms": _pct(last, 0.99),
           "step_first_p50_ms": _pct(first, 0.5), "step_first_p99_ms": _pct(first, 0.99),
           "invoke_p50_ms": _pct(invokes[-WINDOW:], 0.5), "invoke_p99_ms": _pct(invokes[-WINDOW:], 0.99),
           "invoke_first_p50_ms": _pct(invokes[:WINDOW], 0.5),
           "get_tuple_ms": round(statistics.median(g["get_tuple_ms"] for g in got), 2),
           "get_state_ms": round(statistics.median(g["get_state_ms"] for g in got), 2),
           "stored_bytes": _size(path)}
    if kind != "sqlite":
        core_dir = os.path.join(work, f"core-{kind}-{turns}")
        os.makedirs(core_dir)
        row["core_bytes"] = core_bytes(kind, core_dir, messages)
        row["bytes_vs_core"] = round(row["stored_bytes"] / row["core_bytes"], 3)
    return row


def table(rows: list) -> str:
    out = ["| turns | saver | step p50 / p99 ms (last 100 turns) | first 100 | flat | invoke p50 / p99 ms "
           "| fresh get_tuple / get_state ms | stored | vs core |", "|---|---|---|---|---|---|---|---|---|"]
    base = {r["saver"]: r["step_p50_ms"] for r in rows if r["turns"] == min(x["turns"] for x in rows)}
    for r in rows:
        flat = f"{r['step_p50_ms'] / base[r['saver']]:.2f}x" if base.get(r["saver"]) else ""
        out.append(f"| {r['turns']} | {r['saver']} | {r['step_p50_ms']} / {r['step_p99_ms']} "
                   f"| {r['step_first_p50_ms']} / {r['step_first_p99_ms']} | {flat} "
                   f"| {r['invoke_p50_ms']} / {r['invoke_p99_ms']} | {r['get_tuple_ms']} / {r['get_state_ms']} "
                   f"| {r['stored_bytes'] / 1e6:.2f} MB | {r.get('bytes_vs_core', '')} |")
    return "\n".join(out)


def main() -> None:
    if _lib.child_entry(None, child_main):
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", default="100,1000,3000", help="comma-separated run lengths")
    ap.add_argument("--savers", default=",".join(SAVERS), help=f"comma-separated, of {', '.join(SAVERS)}")
    ap.add_argument("--channel", choices=("delta", "add"), default="delta")
    ap.add_argument("--durability", choices=("async", "exit", "sync"), default="async")
    ap.add_argument("--trials", type=int, default=3, help="fresh processes per read timing (median)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="print cProfile's N costliest functions over the last 100 turns' put/put_writes")
    a = ap.parse_args()
    savers = [s for s in a.savers.split(",") if s]
    if set(savers) - set(SAVERS):
        ap.error(f"unknown savers {sorted(set(savers) - set(SAVERS))}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for turns in (int(t) for t in a.turns.split(",")):
            for kind in savers:
                row = run(kind, turns, a.channel == "delta", a.durability, work, a.trials, a.profile)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
