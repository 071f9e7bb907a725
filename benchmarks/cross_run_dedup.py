"""Cross-run dedup benchmark: the shared-prompt workload's stored bytes against its lower bound, with
shared objects (docs/format.md §29) on and off (issue 23, item 4).

Run (from the repository root)::

    python benchmarks/cross_run_dedup.py                 # shared-prompt:100 (100 runs x 5 checkpoints)
    python benchmarks/cross_run_dedup.py --runs 20       # smaller

The workload is ``benchmarks/workloads.py``'s ``shared-prompt:<runs>``: every run starts with the
same 21.5 kB system prompt and tool schema, then a task and 5 checkpoints of 2 messages of its
own; LB is zstd-19 of every run's final history in one frame (the prompt counted once). Each mode
replays it into a fresh local directory (``LocalStore``, fsync on, as ``snapstore-local`` in
``python -m benchmarks``), closes the manager (the directory store's journal ``.wal`` is settled
and removed at close: it is not data the repository keeps), and sums the sizes of the files left,
by kind: shared packs (``packs/ff/``), the runs' tier packs and per-save packs (by their level in
the runs' newest records), manifests, log segments, run markers and the rest. Three modes:
``off`` (``repo.shared.enabled = False``: every run stores the prompt in its own pack, as before
shared objects), ``shared`` (shared objects, but ``repo.shared.dictionaries = False``: the runs'
own packs compressed alone, as before shared dictionaries) and ``on`` (both, the default). It also counts the store's requests per mode and checks that a new
manager restores every run's latest checkpoint exactly. Target: ``on`` at most 2x LB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import workloads as wl  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

TARGET_X_LB = 2.0


KINDS = ("shared packs", "tier packs", "per-save packs", "manifests", "log segments", "run markers", "other")


def _kind(rel: str, levels: dict) -> str:
    """The kind of the file at ``rel`` (a path in the repository directory); ``levels``: pack id
    (hex) -> segment level in the runs' newest records (0 per-save pack, >= 1 tier pack)."""
    parts = rel.split("/")
    if parts[0] == "packs":
        if parts[1] == "ff":
            return "shared packs"
        return "tier packs" if levels.get(parts[-1], 0) >= 1 else "per-save packs"
    if parts[0] == "runs":
        return "manifests" if len(parts) > 2 and parts[2] == "m" else "log segments"
    if parts[0] == "runmarks":
        return "run markers"
    return "other"


MODES = {"off": (False, False), "shared": (True, False), "on": (True, True)}
"""Mode -> (shared objects on, shared dictionaries on)."""


def replay(w, mode: str) -> dict:
    """Replay workload ``w`` into a fresh directory in ``mode`` (:data:`MODES`). Returns a row."""
    share, dicts = MODES[mode]
    root = Path(tempfile.mkdtemp(prefix="snapstore-xrun-"))
    try:
        store = LocalStore(root / "repo", fsync=True)
        mgr = CheckpointManager(store)
        mgr.repo.shared.enabled = share
        mgr.repo.shared.dictionaries = dicts
        t0 = time.perf_counter()
        for run in w.runs:
            for cp in run.checkpoints:
                mgr.save(run.run_id, list(cp))
        wall = time.perf_counter() - t0
        requests = {k: v for k, v in store.stats.counts.items() if v}
        mgr.close()
        store.close()  # the last user of the journal settles and removes it
        fresh = CheckpointManager(LocalStore(root / "repo"))
        exact = all(fresh.latest(r.run_id).messages == list(r.checkpoints[-1]) for r in w.runs)
        levels = {}
        for r in w.runs:
            head = fresh.repo.head(fresh.repo.run_key(r.run_id))
            for sg in head.segment_list() or ():
                levels[sg.pack.hex()] = sg.level
        fresh.close()
        by: dict = {}
        objects: dict = {}
        for dirpath, _dirs, names in os.walk(root / "repo"):
            for n in names:
                p = Path(dirpath) / n
                k = _kind(str(p.relative_to(root / "repo")), levels)
                by[k] = by.get(k, 0) + p.stat().st_size
                objects[k] = objects.get(k, 0) + 1
        total = sum(by.values())
        return {"mode": mode, "stored_bytes": total, "x_lb": total / w.lb_bytes,
                "by_kind": by, "objects_by_kind": objects, "objects": sum(objects.values()), "requests": requests,
                "save_s": round(wall, 3), "restores_exactly": exact}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100, help="runs of the shared-prompt workload")
    ap.add_argument("--turns", type=int, default=5, help="checkpoints per run")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    a = ap.parse_args(argv)
    w = wl.shared_prompt(a.runs, a.turns)
    rows = [replay(w, mode) for mode in MODES]
    print(f"{w.name}: {w.description}; LB {w.lb_bytes / 1e3:,.1f} kB ({w.lb_def})")
    print(f"{'mode':<7} {'stored kB':>10} {'x LB':>6} {'objects':>8} {'GET':>5} {'PUT':>5} {'save s':>7} exact")
    for r in rows:
        print(f"{r['mode']:<7} {r['stored_bytes'] / 1e3:>10,.1f} {r['x_lb']:>6.2f} {r['objects']:>8} "
              f"{r['requests'].get('GET', 0):>5} {r['requests'].get('PUT', 0):>5} {r['save_s']:>7} {r['restores_exactly']}")
    print(f"\nby kind, kB (objects); per run: / {len(w.runs)}")
    print(f"{'kind':<15} " + " ".join(f"{r['mode']:>17}" for r in rows))
    for k in KINDS:
        cells = [f"{r['by_kind'].get(k, 0) / 1e3:>9,.1f} ({r['objects_by_kind'].get(k, 0):>4})" for r in rows]
        print(f"{k:<15} " + " ".join(f"{c:>17}" for c in cells))
    on = rows[-1]
    print(f"target: shared objects on at most {TARGET_X_LB}x LB: {'met' if on['x_lb'] <= TARGET_X_LB else 'NOT met'} "
          f"({on['x_lb']:.2f}x)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["restores_exactly"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
