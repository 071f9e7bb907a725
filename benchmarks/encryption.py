"""Encryption benchmark: the cost of client-side encryption (docs/format.md §27) on the shared runs.

Run (from the repository root)::

    python benchmarks/encryption.py                    # every shared trajectory, 3 restore trials
    python benchmarks/encryption.py --limit 2 --trials 5 --json out.json
    python benchmarks/encryption.py --fsync            # directory writes fsynced (the real default)

What it does, per shared trajectory file (``snapstore.importers.load_trajectory``; every
conversation with at least one turn a run, one ``save`` per turn, one warm manager per file), for two sides in fresh
directory repositories (``LocalStore``, fsync off unless ``--fsync``: CPU cost, not the disk's),
the sides interleaved file by file:

* ``plain``: ``CheckpointManager(LocalStore(dir))``;
* ``encrypted``: the same through ``SealedStore(LocalStore(dir), passphrase)`` (AES-256-GCM in
  64 KiB segments; scrypt n=2^15 for the one key slot).

Measured (``time.perf_counter``): every save's time (p50 and p95 pooled over all saves of all
files); restore: a fresh manager (new store object, nothing cached) reading the latest checkpoint
of every conversation of a file, median over ``--trials`` (the two sides' trials alternate; the
encrypted side's store is unlocked before the clock starts; the unlock, one scrypt, is reported
on its own); stored bytes: the sum of
the sizes of every file in the repository directory (the journal and lock files left out), with
the plain side's object count and its 0-byte objects, which say where the encrypted side's extra
bytes go (a fixed overhead per object) and what one 16-byte AEAD tag per object alone would cost.
Every restore is compared with the saved history; a difference stops the run (exit 1).
Targets (issue 24): save p50 and restore within 1.1x, stored bytes within 1.02x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import _lib  # noqa: E402

PASSPHRASE = "benchmark passphrase"


def _store(side: str, path: Path, fsync: bool):
    from snapstore.stores.crypt import SealedStore
    from snapstore.stores.local import LocalStore

    inner = LocalStore(path, fsync=fsync)
    return SealedStore(inner, PASSPHRASE) if side == "encrypted" else inner


def stored_bytes(path: Path) -> int:
    """Bytes of every object file under ``path`` (dot-named journal and lock files left out)."""
    return object_sizes(path)["bytes"]


def object_sizes(path: Path) -> dict:
    """``{"bytes", "objects", "empty"}`` of the object files under ``path`` (dot-named journal and
    lock files left out): total bytes, how many objects, how many of them 0 bytes (stubs, run
    markers, pins): where a per-object sealing overhead goes."""
    total = n = empty = 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if not f.startswith("."):
                size = os.path.getsize(os.path.join(root, f))
                total, n, empty = total + size, n + 1, empty + (size == 0)
    return {"bytes": total, "objects": n, "empty": empty}


def save_side(side: str, path: Path, convs: list, fsync: bool) -> list[float]:
    """Save ``convs`` (conversations) into a fresh repository at ``path`` as ``side``; returns
    the seconds each save took."""
    from snapstore import CheckpointManager

    mgr = CheckpointManager(_store(side, path, fsync))
    saves = []
    for i, conv in enumerate(convs):
        for step, cp in enumerate(conv.checkpoints):
            t = time.perf_counter()
            mgr.save(f"run-{i}", cp, step=step)
            saves.append(time.perf_counter() - t)
    mgr.close()
    return saves


def restore_side(side: str, path: Path, convs: list, fsync: bool) -> tuple[float, float]:
    """One restore trial: ``(seconds to read every conversation's latest checkpoint with a fresh
    manager, seconds the unlock took before that)``.

    Raises:
        AssertionError: a restored history differs from the saved one.
    """
    from snapstore import CheckpointManager

    store = _store(side, path, fsync)
    t = time.perf_counter()
    if side == "encrypted":
        store.content_key  # unlock: one scrypt
    unlock = time.perf_counter() - t
    t = time.perf_counter()
    fresh = CheckpointManager(store)
    got = [fresh.latest(f"run-{i}").messages for i in range(len(convs))]
    took = time.perf_counter() - t
    fresh.close()
    for conv, messages in zip(convs, got):
        assert messages == conv.checkpoints[-1], f"{side}: a restored history differs"
    return took, unlock


def measure(limit: int | None, trials: int, fsync: bool) -> dict | None:
    """Both sides on every shared file (at most ``limit`` files); None without the shared data."""
    from snapstore.importers import load_trajectory

    d = _lib.shared_dir()
    if d is None:
        return None
    files = [p for p in sorted(d.iterdir()) if p.is_file() and p.suffix != ".md"][:limit]
    out = {"files": {}, "fsync": fsync, "trials": trials}
    pooled = {"plain": [], "encrypted": []}
    with tempfile.TemporaryDirectory(prefix="snapstore-enc-bench-") as tmp:
        for n, f in enumerate(files):
            _fmt, convs = load_trajectory(f)
            convs = [c for c in convs if c.checkpoints]  # (a conversation without turns saves nothing)
            row = {"checkpoints": sum(len(c.checkpoints) for c in convs)}
            order = ("plain", "encrypted") if n % 2 == 0 else ("encrypted", "plain")
            paths = {side: Path(tmp) / f"{side}-{n}" for side in order}
            saves = {side: save_side(side, paths[side], convs, fsync) for side in order}
            trials_of = {side: [] for side in order}
            for _ in range(trials):  # the sides alternate, so that load beside hits both alike
                for side in order:
                    trials_of[side].append(restore_side(side, paths[side], convs, fsync))
            for side in order:
                pooled[side] += saves[side]
                row[side] = {"save_p50_ms": 1e3 * _lib.median(saves[side]),
                             "restore_ms": 1e3 * _lib.median(t for t, _ in trials_of[side]),
                             "unlock_ms": 1e3 * _lib.median(u for _, u in trials_of[side]) if side == "encrypted" else None,
                             **object_sizes(paths[side])}
                shutil.rmtree(paths[side])
            row["ratios"] = {k: _lib.ratio(row["encrypted"][m], row["plain"][m])
                             for k, m in (("save_p50", "save_p50_ms"), ("restore", "restore_ms"), ("bytes", "bytes"))}
            out["files"][f.name] = row
    out["pooled"] = {side: {"save_p50_ms": 1e3 * _lib.percentile(xs, 50), "save_p95_ms": 1e3 * _lib.percentile(xs, 95),
                            "saves": len(xs)} for side, xs in pooled.items()}
    tot = {side: sum(r[side]["bytes"] for r in out["files"].values()) for side in pooled}
    rest = {side: sum(r[side]["restore_ms"] for r in out["files"].values()) for side in pooled}
    objs = {k: sum(r["plain"][k] for r in out["files"].values()) for k in ("objects", "empty")}
    out["totals"] = {"bytes": tot, "restore_ms": rest, "plain_objects": objs,
                     "ratios": {"save_p50": _lib.ratio(out["pooled"]["encrypted"]["save_p50_ms"],
                                                       out["pooled"]["plain"]["save_p50_ms"]),
                                "restore": _lib.ratio(rest["encrypted"], rest["plain"]),
                                "bytes": _lib.ratio(tot["encrypted"], tot["plain"])}}
    return out


def report(r: dict) -> str:
    """The result as text: one line per file, then the pooled figures and the targets."""
    lines = [f"{'file':48} {'ckpts':>6} {'save p50 ms':>17} {'restore ms':>17} {'bytes':>21}",
             f"{'':48} {'':>6} {'plain':>8} {'enc':>8} {'plain':>8} {'enc':>8} {'plain':>10} {'enc':>10}"]
    for name, f in r["files"].items():
        p, e = f["plain"], f["encrypted"]
        lines.append(f"{name[:48]:48} {f['checkpoints']:>6} {p['save_p50_ms']:>8.2f} {e['save_p50_ms']:>8.2f} "
                     f"{p['restore_ms']:>8.1f} {e['restore_ms']:>8.1f} {p['bytes']:>10} {e['bytes']:>10}")
    t, po = r["totals"], r["pooled"]
    lines.append(f"all saves: p50 {po['plain']['save_p50_ms']:.2f} ms plain, {po['encrypted']['save_p50_ms']:.2f} ms "
                 f"encrypted; p95 {po['plain']['save_p95_ms']:.2f} / {po['encrypted']['save_p95_ms']:.2f} ms "
                 f"({po['plain']['saves']} saves each; fsync {'on' if r['fsync'] else 'off'})")
    lines.append(f"ratios encrypted/plain: save p50 {t['ratios']['save_p50']:.3f} (target <= 1.1), restore "
                 f"{t['ratios']['restore']:.3f} (<= 1.1), stored bytes {t['ratios']['bytes']:.4f} (<= 1.02)")
    o, pb = t["plain_objects"], t["bytes"]["plain"]
    lines.append(f"where the bytes go: {o['objects']} objects ({o['empty']} of 0 bytes), {pb / max(1, o['objects']):.0f} B "
                 f"an object on average; extra {t['bytes']['encrypted'] - pb} B = "
                 f"{(t['bytes']['encrypted'] - pb) / max(1, o['objects']):.1f} B an object; one 16-byte AEAD tag "
                 f"an object alone would be x{1 + 16 * o['objects'] / max(1, pb):.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--limit N`` files, ``--trials N`` restores, ``--fsync``, ``--json PATH``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="at most this many shared files")
    ap.add_argument("--trials", type=int, default=3, help="restores per file and side (median)")
    ap.add_argument("--fsync", action="store_true", help="fsync directory writes")
    ap.add_argument("--json", default=None, help="write the result here")
    a = ap.parse_args(argv)
    try:
        r = measure(a.limit, a.trials, a.fsync)
    except AssertionError as e:
        print(f"FAILED: {e}")
        return 1
    return _lib.emit(r, report, a.json)


if __name__ == "__main__":
    sys.exit(main())
