"""The SQLite store (``snapstore/stores/sqlite.py``) measured: large values in the file or beside
it, and save time at equal durability against the local directory store.

Run (from the repository root)::

    python benchmarks/sqlite_store.py --values            # 1-64 MiB values: BLOB in the file vs a file beside it
    python benchmarks/sqlite_store.py --saves             # save p50/p99 on a shared trajectory, sqlite vs local
    python benchmarks/sqlite_store.py --saves --traj PATH [--traj PATH2 ...] --json out.json

``--values``: for each size (1/16, 1/4, 1, 4, 16, 64 MiB; incompressible bytes, as a pack of compressed
blocks is) and ``--reps`` repetitions, on one file system (``--dir``, default the temp dir):

* *blob*: ``SqliteStore.put`` (synchronous=FULL: the commit fsyncs the WAL), then the WAL
  checkpoint that later copies the value into the main file (``PRAGMA wal_checkpoint``, timed
  apart: SQLite runs it at a later commit, so a writer pays it too, amortised);
* *beside*: the same store with every value a file beside the database (``beside_min=0``): write
  the file, fsync it and its directory, then commit the row naming it (synchronous=FULL).

Both report put (ms), put + checkpoint (ms), a whole read and a 64 KiB ranged read (ms, medians).

``--saves``: every checkpoint of one trajectory (default: the largest coding-agent conversation
of the shared trajectories) saved in order through ``CheckpointManager`` into a local directory
store with fsync (the default) and a SQLite file with synchronous=FULL (equal durability: each
save durable when it returns) and NORMAL. Reported: p50 and p99 save time (ms) per store, the
fsync/fdatasync calls per save on the save's path (Python's ``os.fsync``/``os.fdatasync`` on
every thread but the directory store's background settler, median and mean: the directory store;
SQLite syncs in C, uncounted) and the bytes on disk afterwards (``du``-style: allocated
blocks).
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._lib import counting_syncs, largest_coding_run, median, percentile  # noqa: E402

MiB = 1 << 20


def _disk_bytes(path: Path) -> int:
    """Allocated bytes (``st_blocks * 512``) of a file, or of every file below a directory."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _time_store(store, data: list, mib: float) -> dict:
    """Put each value of ``data`` into ``store`` and read it back whole and in a 64 KiB range;
    median milliseconds. ``put_plus_checkpoint_ms`` adds a WAL checkpoint after each put (the copy
    into the main file that SQLite otherwise runs at a later commit)."""
    store.put("config", b"{}")
    w = store._shared().writer
    put, ckpt, whole, ranged = [], [], [], []
    mid = int(mib * MiB) // 2
    for i, d in enumerate(data):
        t = time.perf_counter()
        store.put(f"packs/{i:04d}", d)
        put.append(time.perf_counter() - t)
        t = time.perf_counter()
        w.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        ckpt.append(time.perf_counter() - t)
    for i in range(len(data)):
        t = time.perf_counter()
        store.get(f"packs/{i:04d}")
        whole.append(time.perf_counter() - t)
        t = time.perf_counter()
        store.get(f"packs/{i:04d}", (mid, mid + 65536))
        ranged.append(time.perf_counter() - t)
    return {"put_ms": median(put) * 1e3, "put_plus_checkpoint_ms": median([a + b for a, b in zip(put, ckpt)]) * 1e3,
            "get_ms": median(whole) * 1e3, "ranged_64k_ms": median(ranged) * 1e3}


def bench_values(base: Path, sizes_mib: list[float], reps: int) -> dict:
    """Time values stored as BLOBs in the file (``SqliteStore(beside_min=None)``) against files
    beside it (``beside_min=0``), both synchronous=FULL; returns ``{size_mib: {"blob": {...},
    "beside": {...}}}`` of median milliseconds."""
    from snapstore.stores.sqlite import SqliteStore

    out = {}
    for mib in sizes_mib:
        data = [os.urandom(int(mib * MiB)) for _ in range(reps)]
        work = Path(tempfile.mkdtemp(dir=base))
        try:
            r = {}
            for name, beside_min in (("blob", None), ("beside", 0)):
                s = SqliteStore(work / f"{name}.db", beside_min=beside_min)
                try:
                    r[name] = _time_store(s, data, mib)
                finally:
                    s.close()
            out[mib] = r
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def bench_saves(base: Path, checkpoints: list) -> dict:
    """Save ``checkpoints`` (message lists) in order into each store; per store the p50/p99 save
    time (ms) and the allocated bytes afterwards."""
    from snapstore import CheckpointManager

    targets = {"local-fsync": lambda w: str(w / "repo"),
               "sqlite-full": lambda w: f"sqlite://{w}/repo.db",
               "sqlite-normal": lambda w: f"sqlite://{w}/repo.db?synchronous=normal"}
    out = {}
    for name, loc in targets.items():
        work = Path(tempfile.mkdtemp(dir=base))
        try:
            mgr = CheckpointManager(loc(work))
            times, syncs = [], []
            with counting_syncs() as calls:
                for i, cp in enumerate(checkpoints):
                    before = calls[0]
                    t = time.perf_counter()
                    mgr.save("r", cp, step=i)
                    times.append(time.perf_counter() - t)
                    syncs.append(calls[0] - before)
            if hasattr(mgr.store, "compact"):
                mgr.store.compact()  # the WAL into the file, so that the file holds everything
            mgr.close()
            out[name] = {"saves": len(times), "p50_ms": percentile(times, 50) * 1e3,
                         "p99_ms": percentile(times, 99) * 1e3, "fsyncs_p50": median(syncs),
                         "fsyncs_mean": sum(syncs) / len(syncs), "fsyncs_p99": percentile(syncs, 99),
                         "fsyncs_max": max(syncs),
                         "disk_bytes": _disk_bytes(work / ("repo" if name == "local-fsync" else "repo.db"))}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv=None) -> int:
    """Parse ``argv``, run the chosen measurements, print them (and write ``--json``); exit status 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--values", action="store_true", help="large values: BLOB in the file vs files beside it")
    ap.add_argument("--saves", action="store_true", help="save p50/p99 at equal durability: sqlite vs local directory")
    ap.add_argument("--sizes", default="0.0625,0.25,1,4,16,64", help="value sizes in MiB (comma-separated)")
    ap.add_argument("--reps", type=int, default=5, help="values per size")
    ap.add_argument("--traj", action="append", help="trajectory file for --saves, its first conversation; repeat "
                    "it to measure several in one run (default: the largest shared coding run)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the stores are made (one file system)")
    ap.add_argument("--json", help="write the results to this file")
    a = ap.parse_args(argv)
    if not (a.values or a.saves):
        a.values = a.saves = True
    res: dict = {}
    base = Path(a.dir)
    if a.values:
        res["values"] = bench_values(base, [float(x) for x in a.sizes.split(",")], a.reps)
        print("value MiB | blob put | blob put+ckpt | beside put | blob get | beside get | blob 64K | beside 64K  (ms, medians)")
        for mib, r in res["values"].items():
            b, f = r["blob"], r["beside"]
            print(f"{mib:9g} | {b['put_ms']:8.1f} | {b['put_plus_checkpoint_ms']:13.1f} | {f['put_ms']:10.1f} | "
                  f"{b['get_ms']:8.1f} | {f['get_ms']:10.1f} | {b['ranged_64k_ms']:8.3f} | {f['ranged_64k_ms']:10.3f}")
    if a.saves:
        runs = []
        if a.traj:
            from snapstore.importers import load_trajectory

            for t in a.traj:
                fmt, convs = load_trajectory(t)
                runs.append((f"{Path(t).name} ({fmt})", convs[0].checkpoints))
        else:
            found = largest_coding_run()
            if found is None:
                print("--saves skipped: shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
            else:
                runs.append((f"{found[0].name} ({found[1]})", found[2]))
        for label, cps in runs:  # one after another in this process: the same machine load for each
            r = {"trajectory": label, "stores": bench_saves(base, cps)}
            res.setdefault("saves", []).append(r)
            print(f"saves of {label}: {len(cps)} checkpoints")
            for name, m in r["stores"].items():
                syncs = (f"fsyncs/save p50 {m['fsyncs_p50']:g} mean {m['fsyncs_mean']:.2f} "
                         f"p99 {m['fsyncs_p99']:g} max {m['fsyncs_max']:g}" if name == "local-fsync"
                         else "fsyncs/save (in SQLite's C code, not counted)")
                print(f"  {name:14} p50 {m['p50_ms']:6.2f} ms  p99 {m['p99_ms']:6.2f} ms  {syncs}  "
                      f"disk {m['disk_bytes'] / 1024:8.0f} KiB")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
