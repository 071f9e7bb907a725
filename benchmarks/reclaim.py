"""Reclaim benchmark: after retention, how close does GC bring a repository to a fresh one?

Run (from the repository root)::

    python benchmarks/reclaim.py                     # every file in ../shared/data/trajectories
    python benchmarks/reclaim.py --data DIR --json reclaim.json

Per trajectory file (``snapstore.importers.load_trajectory``), each conversation one run, on the
local store in a temp dir (fsync off: bytes are measured, not durability cost):

1. replay every checkpoint (one ``CheckpointManager.save`` per turn) -> ``replayed`` bytes;
2. ``prune(keep_last=1)`` (repository-wide) -> ``pruned`` bytes (retention deletes records only);
3. ``gc(grace_period=0)`` until a GC reclaims nothing (at most 4) -> ``after gc`` bytes, GC count
   and their time;
4. a **fresh** repository holding only the last checkpoint of each run (saved once) -> ``fresh``
   bytes; the ratio ``after gc / fresh`` (target: <= 1.5);
5. every checkpoint of the GC'd repository restores exactly (compared with the input as JSON);
6. ``delete`` every run and ``gc(grace_period=0)`` twice: the objects left (target: only
   ``config``).

Bytes are every object in the repository (``config`` included). Exit status 0 if every file meets
both targets and restores exactly, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
sys.path.insert(0, str(REPO_ROOT))

from snapstore import CheckpointManager  # noqa: E402
from snapstore.importers import load_trajectory  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "trajectories"


def stored(store: LocalStore) -> tuple[int, int]:
    """(bytes, objects) of every object in the store."""
    n = b = 0
    for info in store.list(""):
        n += 1
        b += info.size
    return b, n


def one_file(path: Path, work: Path) -> dict:
    _, convs = load_trajectory(path)
    convs = [c for c in convs if c.checkpoints]
    root = work / "repo"
    fresh_root = work / "fresh"
    for d in (root, fresh_root):
        shutil.rmtree(d, ignore_errors=True)
    store = LocalStore(str(root), fsync=False)
    res = {"file": path.name, "runs": len(convs), "checkpoints": sum(len(c.checkpoints) for c in convs)}
    with CheckpointManager(store) as m:
        for i, c in enumerate(convs):
            for cp in c.checkpoints:
                m.save(f"run-{i}", cp)
        res["replayed"] = stored(store)[0]
        m.prune(keep_last=1)
        res["pruned"] = stored(store)[0]
        t = time.perf_counter()
        gcs = 0
        for _ in range(4):
            rep = m.gc(grace_period=0)
            gcs += 1
            if rep.reclaimed_bytes <= 0 and not rep.repacked_packs:
                break
        res["gc_seconds"] = round(time.perf_counter() - t, 3)
        res["gcs"] = gcs
        res["after_gc"], res["after_gc_objects"] = stored(store)
    with CheckpointManager(LocalStore(str(fresh_root), fsync=False)) as f:
        for i, c in enumerate(convs):
            f.save(f"run-{i}", c.checkpoints[-1])
        res["fresh"], res["fresh_objects"] = stored(f.repo.store)
    res["ratio"] = round(res["after_gc"] / res["fresh"], 3)
    with CheckpointManager(LocalStore(str(root), fsync=False)) as r:
        ok = all(json.dumps(r.latest(f"run-{i}").messages) == json.dumps(c.checkpoints[-1])
                 for i, c in enumerate(convs))
        res["restores_exactly"] = ok and r.verify(read_data=True).ok
        for i in range(len(convs)):
            r.delete(f"run-{i}")
        for _ in range(2):
            r.gc(grace_period=0)
        res["left_after_delete_all"] = sorted(info.key for info in r.repo.store.list(""))
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(fresh_root, ignore_errors=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="directory of trajectory files")
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args(argv)
    files = sorted(p for p in args.data.iterdir() if p.is_file() and p.suffix != ".md") if args.data.is_dir() else []
    if not files:
        print(f"no trajectory files in {args.data}", file=sys.stderr)
        return 1
    print(f"snapstore {_lib.commit_label()}; python {platform.python_version()}; {len(files)} files from {args.data}")
    print(f"{'file':44} {'ckpts':>6} {'replayed':>10} {'pruned':>10} {'after gc':>10} {'fresh':>10} "
          f"{'ratio':>6} {'gcs':>4} {'gc s':>6}  restore  after delete-all+gc")
    results = []
    with tempfile.TemporaryDirectory(prefix="snapstore-reclaim-") as tmp:
        for p in files:
            r = one_file(p, Path(tmp))
            results.append(r)
            left = ",".join(r["left_after_delete_all"]) or "(nothing)"
            print(f"{r['file'][:44]:44} {r['checkpoints']:6d} {r['replayed']:10d} {r['pruned']:10d} "
                  f"{r['after_gc']:10d} {r['fresh']:10d} {r['ratio']:6.2f} {r['gcs']:4d} {r['gc_seconds']:6.2f}  "
                  f"{'exact' if r['restores_exactly'] else 'MISMATCH':7}  {left}", flush=True)
    ratios = [r["ratio"] for r in results]
    ok = all(r["ratio"] <= 1.5 and r["restores_exactly"] and r["left_after_delete_all"] == ["config"]
             for r in results)
    print(f"\nafter gc / fresh: median {statistics.median(ratios):.2f}, max {max(ratios):.2f} (target <= 1.5); "
          f"replayed -> after gc: {sum(r['replayed'] for r in results)} -> {sum(r['after_gc'] for r in results)} bytes; "
          f"{'PASS' if ok else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
