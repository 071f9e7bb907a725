"""SnapstoreSession against the OpenAI Agents SDK's SQLiteSession: bytes, time and requests.

Run (from the repository root; needs ``snapstore[openai]``)::

    python benchmarks/openai_session.py                 # 300 turns, local store with fsync, and SQLite
    python benchmarks/openai_session.py --turns 1000 --max-checkpoints 0 --json out.json

A turn is what ``Runner.run`` does with a session: ``add_items([user message])`` then
``add_items([assistant message])``, each message ~360 characters of text (deterministic
pseudo-words). Printed per backend:

* stored bytes: SQLite: the database file plus its WAL after closing; snapstore: the sum of the
  repository's object sizes (``stats()``'s stored bytes are the same objects);
* mean time per ``add_items`` (ms) and for the last 10% of the turns (does it grow with the run?);
* ``get_items()`` of the whole session by a new session object on a new manager (ms; snapstore:
  the requests it made);
* snapstore requests per ``add_items`` (the store's own counters: PUT, GET, LIST, DELETE).

Every ``add_items`` is a checkpoint, so a session keeps one manifest per mutation; a second
snapstore row runs with ``CheckpointManager(max_checkpoints=16)`` (``--max-checkpoints``), which
deletes older checkpoints after each save (the head holds every item; an unknown outcome is then
looked for among the last 16 checkpoints only). Run ``gc()`` to reclaim what retention freed;
the bytes here are before any GC.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents import SQLiteSession  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.openai_agents import SnapstoreSession  # noqa: E402
from snapstore.stores import LocalStore  # noqa: E402

WORDS = ("agent tool call result file test error patch diff read write search model token cache "
         "request response python function value branch commit merge build run step state").split()


def text(rng: random.Random, n: int = 360) -> str:
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)[:n]


def turns(n: int):
    rng = random.Random(42)
    for i in range(n):
        yield ({"role": "user", "content": f"[{i}] " + text(rng)},
               {"role": "assistant", "content": [{"type": "output_text", "text": text(rng), "annotations": []}],
                "id": f"msg_{i:06d}", "type": "message", "status": "completed"})


async def drive(session, n: int) -> list[float]:
    times = []
    for user, assistant in turns(n):
        for it in (user, assistant):
            t = time.perf_counter()
            await session.add_items([it])
            times.append(time.perf_counter() - t)
    return times


def summary(times: list[float]) -> tuple[float, float]:
    tail = times[-max(1, len(times) // 10):]
    return 1000 * sum(times) / len(times), 1000 * sum(tail) / len(tail)


async def bench_sqlite(root: str, n: int) -> dict:
    path = os.path.join(root, "sessions.db")
    s = SQLiteSession("bench", path)
    times = await drive(s, n)
    s.close()
    size = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    t = time.perf_counter()
    s2 = SQLiteSession("bench", path)
    items = await s2.get_items()
    read_ms = 1000 * (time.perf_counter() - t)
    s2.close()
    assert len(items) == 2 * n
    mean, tail = summary(times)
    return {"backend": "SQLiteSession", "bytes": size, "add_ms": mean, "add_ms_last10pct": tail, "read_ms": read_ms}


async def bench_snapstore(root: str, n: int, fsync: bool, max_checkpoints: int | None) -> dict:
    repo = os.path.join(root, "repo")
    store = LocalStore(repo, fsync=fsync)
    s = SnapstoreSession("bench", CheckpointManager(store, max_checkpoints=max_checkpoints))
    times = await drive(s, n)
    counts = dict(store.stats.counts)
    size = 0
    for dirpath, _dirs, files in os.walk(repo):
        size += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files if ".locks" not in dirpath)
    t = time.perf_counter()
    store2 = LocalStore(repo, fsync=fsync)
    items = await SnapstoreSession("bench", CheckpointManager(store2)).get_items()
    read_ms = 1000 * (time.perf_counter() - t)
    assert len(items) == 2 * n
    mean, tail = summary(times)
    adds = 2 * n
    name = f"SnapstoreSession (local, fsync {'on' if fsync else 'off'}{', max_checkpoints=%d' % max_checkpoints if max_checkpoints else ''})"
    return {"backend": name, "bytes": size, "add_ms": mean,
            "add_ms_last10pct": tail, "read_ms": read_ms,
            "requests_per_add": {k: round(v / adds, 3) for k, v in sorted(counts.items()) if v},
            "read_requests": {k: v for k, v in sorted(store2.stats.counts.items()) if v}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--no-fsync", action="store_true", help="local store without fsync")
    ap.add_argument("--max-checkpoints", type=int, default=16,
                    help="also run SnapstoreSession with CheckpointManager(max_checkpoints=N) (0: not)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        rows = [asyncio.run(bench_sqlite(d, a.turns)),
                asyncio.run(bench_snapstore(os.path.join(d, "a"), a.turns, not a.no_fsync, None))]
        if a.max_checkpoints:
            rows.append(asyncio.run(bench_snapstore(os.path.join(d, "b"), a.turns, not a.no_fsync, a.max_checkpoints)))
    print(f"{a.turns} turns, {2 * a.turns} items of ~360 characters")
    print(f"{'backend':44} {'stored':>12} {'add ms':>8} {'last 10%':>9} {'fresh read ms':>14}")
    for r in rows:
        print(f"{r['backend']:44} {r['bytes']:>12,} {r['add_ms']:>8.2f} {r['add_ms_last10pct']:>9.2f} {r['read_ms']:>14.1f}")
        if "requests_per_add" in r:
            print(f"    requests per add_items: {r['requests_per_add']}; fresh get_items: {r['read_requests']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"turns": a.turns, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
