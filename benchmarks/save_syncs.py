"""Syncs per save over a long synthetic run: fsyncs on the directory store, commits on SQLite.

Run (from the repository root)::

    python benchmarks/save_syncs.py                 # 5,000 saves on each store
    python benchmarks/save_syncs.py --saves 600 --json out.json

One run of ``--saves`` checkpoints is saved through ``CheckpointManager``: checkpoint ``i`` holds
the messages of checkpoint ``i - 1`` plus two new ones of about 100 bytes each (an assistant turn
and a tool result; the caller appends to one list, as an agent does). The run crosses the positions
that end level-1, level-2 and (past 4,096 saves) level-3 log segments (docs/format.md §12).

Counted per save:

* ``local``: ``os.fsync`` / ``os.fdatasync`` calls on every thread but the directory store's
  background settler (``snapstore-settler``), as ``tests/stores/test_local_wal.py`` counts them:
  what a save waits for.
* ``sqlite``: the store's ``commits`` counter (one WAL commit each, one fsync with
  ``synchronous=FULL``; SQLite's own fsyncs are made in C and are not visible to Python).

Printed: max, p99 and mean per store, the positions (0-based log sequence numbers) of the saves
that cost the most, and what a fresh manager finds afterwards: the run's log segments per level,
whether it lists every checkpoint, and ``verify()``'s verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._lib import counting_syncs, percentile  # noqa: E402


def _turn(i: int) -> list[dict]:
    """The two messages turn ``i`` adds (distinct contents, about 100 bytes each)."""
    return [{"role": "assistant", "content": f"step {i}: calling the tool with argument {i * 7919 % 10007}"},
            {"role": "tool", "content": f"result {i}: " + "ok " * (i % 13 + 5)}]


def run_local(root: str, saves: int) -> list[int]:
    """Save ``saves`` checkpoints into a directory store at ``root``; return the fsyncs of each."""
    from snapstore import CheckpointManager

    mgr = CheckpointManager(root)
    mgr.save("warm", [{"role": "user", "content": "warm"}])  # config and journal exist
    messages = [{"role": "user", "content": "Fix the failing test."}]
    out = []
    try:
        with counting_syncs() as calls:
            for i in range(saves):
                messages = messages + _turn(i)
                before = calls[0]
                mgr.save("r", messages, step=i)
                out.append(calls[0] - before)
    finally:
        mgr.close()
    return out


def run_sqlite(path: str, saves: int) -> list[int]:
    """Save ``saves`` checkpoints into a SQLite file at ``path``; return the commits of each."""
    from snapstore import CheckpointManager

    mgr = CheckpointManager(f"sqlite://{path}")
    mgr.save("warm", [{"role": "user", "content": "warm"}])
    store = mgr.store
    messages = [{"role": "user", "content": "Fix the failing test."}]
    out = []
    try:
        for i in range(saves):
            messages = messages + _turn(i)
            before = store.commits
            mgr.save("r", messages, step=i)
            out.append(store.commits - before)
    finally:
        mgr.close()
    return out


def check(loc: str, saves: int) -> dict:
    """What a fresh manager on ``loc`` finds after the run: ``{"segments": {level: count},
    "listed": bool (every step, newest first), "verify_ok": bool}``."""
    from snapstore import CheckpointManager
    from snapstore.format.logseg import logseg_prefix, parse_logseg_key

    mgr = CheckpointManager(loc)
    try:
        rk = mgr.repo.run_key("r")
        levels: dict[int, int] = {}
        for info in mgr.store.list(logseg_prefix(rk)):
            p = parse_logseg_key(info.key)
            if p is not None:
                levels[p[1]] = levels.get(p[1], 0) + 1
        listed = [c.step for c in mgr.list("r")] == list(range(saves - 1, -1, -1))
        return {"segments": dict(sorted(levels.items())), "listed": listed, "verify_ok": mgr.verify().ok}
    finally:
        mgr.close()


def summary(counts: list[int]) -> dict:
    """``{"saves", "max", "p99", "mean", "worst": [positions costing max]}`` of per-save counts."""
    top = max(counts)
    return {"saves": len(counts), "max": top, "p99": percentile(counts, 99), "mean": sum(counts) / len(counts),
            "worst": [i for i, c in enumerate(counts) if c == top][:8]}


def main(argv=None) -> dict:
    """Run both stores and print (and optionally write as JSON) their summaries."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--saves", type=int, default=5000)
    ap.add_argument("--dir", default=None, help="where the temporary repositories go")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(dir=a.dir)
    try:
        root, db = os.path.join(work, "repo"), os.path.join(work, "repo.db")
        res = {"local_fsyncs": {**summary(run_local(root, a.saves)), **check(root, a.saves)},
               "sqlite_commits": {**summary(run_sqlite(db, a.saves)), **check(f"sqlite://{db}", a.saves)}}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name, s in res.items():
        print(f"{name:15s} saves={s['saves']} max={s['max']} p99={s['p99']} mean={s['mean']:.3f} "
              f"worst positions={s['worst']} segments={s['segments']} listed={s['listed']} verify_ok={s['verify_ok']}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
