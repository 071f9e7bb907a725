"""Archive size benchmark: the shared agent trajectories saved hot, archived, then GC'd.

For each trajectory file (``../shared/data/trajectories`` or ``$SNAPSTORE_SHARED_DATA``), every
conversation is saved checkpoint by checkpoint into a fresh local repository (one run each), then
``archive()`` (GLACIER_IR, recorded) and ``gc(grace_period=0)`` twice. Reported per file:

* **hot**: every object's bytes before archiving (config left out), and objects per run;
* **bundle**: the archive bundles' bytes; **hot left**: the bytes of everything else left (manifests
  and their stubs, log segments and archive logs, run markers, the bundle index record), per
  archived checkpoint, and split: **logs** (``runs/*/l/``), **manif** (``runs/*/m/``), **index**
  (``archive/index/``); ``--no-catalogue`` skips archive's hot-catalogue step (docs/format.md §28),
  leaving the run logs as they were, for the figure before it;
* **LB**: the lower bound, zstd -19 of each conversation's final history (distinct messages if a
  conversation rewrote its history; ``benchmarks/storage.py``'s ``conversation_lb``);
* objects per run after archiving, the time to archive, and a cold ``latest()`` of the largest run
  (fresh manager; GETs and bytes down) hot before archiving and from the bundle after GC.

Every archived checkpoint is read back and compared with what was saved (exit 1 on a mismatch).

    python benchmarks/archive_size.py [--data DIR] [--json OUT] [--level N] [--ldm] [--window-log N] [--no-catalogue]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402
from storage import _Enc, conversation_lb  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.importers import load_trajectory  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


def _objects(store) -> list:
    return [i for i in store.list("") if i.key != "config"]


def _cold_latest(root: Path, run: str) -> tuple:
    """A fresh manager's ``latest(run)``: (checkpoint, seconds, GETs, bytes down)."""
    store = LocalStore(root, fsync=False)
    fresh = CheckpointManager(store)
    t0 = time.perf_counter()
    cp = fresh.latest(run)
    return cp, time.perf_counter() - t0, store.stats.counts.get("GET", 0), store.stats.bytes_down


def run_file(path: Path, workdir: Path) -> dict:
    _fmt, convs = load_trajectory(path)
    enc = _Enc()
    root = workdir / (path.name + ".repo")
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    lb = ckpts = 0
    saved = {}
    for ci, conv in enumerate(convs):
        if not conv.checkpoints:
            continue
        run = f"{conv.name or 'run'}-{ci}"
        saved[run] = [(mgr.save(run, cp), cp) for cp in conv.checkpoints]
        ckpts += len(conv.checkpoints)
        lb += conversation_lb(conv.checkpoints, enc)[0]
    hot = _objects(mgr.store)
    big = max(saved, key=lambda r: len(saved[r]))
    hot_read = _cold_latest(root, big)
    t0 = time.perf_counter()
    rep = mgr.archive()
    t_archive = time.perf_counter() - t0
    mgr.gc(grace_period=0)
    mgr.gc(grace_period=0)
    after = _objects(mgr.store)
    bundle = sum(i.size for i in after if i.key.startswith("archive/data/"))
    left = sum(i.size for i in after if not i.key.startswith("archive/data/"))
    split = {part: sum(i.size for i in after if i.key.startswith("runs/") and i.key.split("/")[2] == part)
             for part in ("l", "m")}
    index = sum(i.size for i in after if i.key.startswith("archive/index/"))
    # a cold read of the largest run's latest checkpoint, from the bundle
    cp, t_read, gets, down = _cold_latest(root, big)
    ok = cp.messages == saved[big][-1][1]
    check = CheckpointManager(LocalStore(root, fsync=False))
    for run, pairs in saved.items():
        for cid, msgs in pairs:
            ok = ok and check.get(run, cid).messages == msgs
    ok = ok and check.verify(read_data=True).ok
    runs = len(saved)
    return {"file": path.name, "runs": runs, "checkpoints": ckpts, "lb": lb,
            "hot": sum(i.size for i in hot), "hot_objects_per_run": len(hot) / runs,
            "bundle": bundle, "bundles": len(rep.bundles), "hot_left": left,
            "hot_left_per_ckpt": left / ckpts, "logs_left": split["l"], "manifests_left": split["m"],
            "index_left": index, "objects_per_run": len(after) / runs,
            "archive_s": t_archive, "read_s": t_read, "read_gets": gets, "read_bytes": down,
            "hot_read_s": hot_read[1], "hot_read_gets": hot_read[2], "hot_read_bytes": hot_read[3], "exact": ok}


def report(rows: list) -> str:
    out = ["archive size (shared trajectories): bytes hot vs archived vs LB (zstd -19 of each final history)",
           f"{'file':<44} {'runs':>4} {'ckpts':>5} {'hot':>9} {'bundle':>8} {'LB':>8} {'hot/LB':>6} "
           f"{'bun/LB':>6} {'left/ck':>7} {'obj/run':>8} {'arch s':>6} {'cold latest: hot -> archived':>30}"]
    for r in rows:
        out.append(f"{r['file'][:44]:<44} {r['runs']:>4} {r['checkpoints']:>5} {r['hot']:>9} {r['bundle']:>8} "
                   f"{r['lb']:>8} {r['hot'] / r['lb']:>6.2f} {r['bundle'] / r['lb']:>6.2f} "
                   f"{r['hot_left_per_ckpt']:>7.0f} {r['hot_objects_per_run']:>4.0f}->{r['objects_per_run']:<3.0f} "
                   f"{r['archive_s']:>6.2f} {r['hot_read_gets']:>3} GET {r['hot_read_bytes'] / 1024:>4.0f}K -> "
                   f"{r['read_gets']:>3} GET {r['read_bytes'] / 1024:>4.0f}K {r['read_s'] * 1000:>4.0f}ms"
                   + ("" if r["exact"] else "  MISMATCH"))
    tot = {k: sum(r[k] for r in rows) for k in ("hot", "bundle", "lb", "hot_left", "checkpoints", "logs_left",
                                                 "manifests_left", "index_left", "runs")}
    out.append(f"total: hot {tot['hot']} B = {tot['hot'] / tot['lb']:.2f}x LB; bundles {tot['bundle']} B = "
               f"{tot['bundle'] / tot['lb']:.2f}x LB; hot bytes left {tot['hot_left']} B = "
               f"{tot['hot_left'] / tot['checkpoints']:.0f} B per archived checkpoint (logs "
               f"{tot['logs_left'] / tot['checkpoints']:.0f}, manifests {tot['manifests_left'] / tot['checkpoints']:.0f}, "
               f"index {tot['index_left'] / tot['checkpoints']:.0f}); bundles <= 1.2x LB + 1 KB per run: "
               f"{tot['bundle']} <= {1.2 * tot['lb'] + 1024 * tot['runs']:.0f}: "
               f"{'yes' if tot['bundle'] <= 1.2 * tot['lb'] + 1024 * tot['runs'] else 'no'}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="trajectories directory")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--level", type=int, default=None, help="zstd level of bundle blocks (default: archive's, 19)")
    ap.add_argument("--ldm", action="store_true", help="long-range matching in bundle blocks (enable_ldm)")
    ap.add_argument("--window-log", type=int, default=None, help="zstd window_log of bundle blocks")
    ap.add_argument("--no-catalogue", action="store_true",
                    help="skip archive's hot-catalogue step (run logs left as they were: the figure before it)")
    a = ap.parse_args(argv)
    from snapstore.maintenance import archive as archive_mod
    if a.level is not None:
        archive_mod.BUNDLE_LEVEL = a.level
    params = {**({"enable_ldm": 1} if a.ldm else {}), **({"window_log": a.window_log} if a.window_log else {})}
    archive_mod.BUNDLE_ZSTD_PARAMS = params or None
    if a.no_catalogue:
        from snapstore.maintenance.archcat import CompactResult
        archive_mod.compact_run_log = lambda *args, **kw: CompactResult(why="--no-catalogue")
    data = a.data or _lib.shared_dir()
    if data is None:
        print("no shared trajectories found (../shared/data/trajectories or $SNAPSTORE_SHARED_DATA)")
        return 2
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for path in sorted(p for p in Path(data).iterdir() if p.is_file() and p.suffix != ".md"):
            rows.append(run_file(path, Path(work)))
    print(report(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
