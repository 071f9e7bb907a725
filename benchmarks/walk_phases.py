"""Per-phase medians of a fresh ``latest()``: pack headers, segment index, tree walk, ListState.

Run (from the repository root)::

    python benchmarks/walk_phases.py                 # 21 fresh children, medians per phase
    python benchmarks/walk_phases.py --trials 41 --json out.json

Setup: the same repository as ``benchmarks/local_read.py`` (the largest shared coding run saved
one checkpoint per turn into a temporary local repository).

Measured: per trial, one fresh child process (``--child``, imports done before the clock) runs
``CheckpointManager(repo).latest(run)`` with each phase's function wrapped by a wall-clock and
page-fault counter (phases nest: a wrapped function called inside another counts in both). The
phases are those of the restore before and after the messages are sliced: ``Pack.parse`` and
``_parse_header`` (the four segment packs' headers), ``ReadPath._index_pack`` (the segment index),
``ReadPath.read_state`` and ``ReadPath.expand`` (the tree walk), and what ``load_with_state`` does
besides fetching, walking and reading the list (``load_with_state rest``: building the
ListState). ``local_read.py --profile`` profiles a single child; this one reports medians over
``--trials`` children, which is what to compare before and after a change of a few hundred
microseconds on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import local_read  # noqa: E402  (the repository and the child runner)

PHASES = [
    ("snapstore.readpath", "ReadPath.prefetch_segments"),
    ("snapstore.format.pack", "Pack.parse"),
    ("snapstore.format.pack", "_parse_header"),
    ("snapstore.readpath", "ReadPath._index_pack"),
    ("snapstore.readpath", "ReadPath.read_state"),
    ("snapstore.readpath", "ReadPath.expand"),
    ("snapstore.readpath", "ReadPath.read_list"),
    ("snapstore.readpath", "ReadPath.load_with_state"),
]


def child(spec: dict) -> dict:
    """One fresh-process ``latest()`` with the phases wrapped; seconds and faults per phase."""
    import importlib

    sys.path.insert(0, str(local_read.REPO_ROOT))
    from snapstore import CheckpointManager

    acc: dict = {}
    for modname, qual in PHASES:
        mod = importlib.import_module(modname)
        owner, name = (mod, qual) if "." not in qual else (getattr(mod, qual.split(".")[0]), qual.split(".")[1])
        fn = getattr(owner, name)

        def timed(*a, _fn=fn, _q=qual, **k):
            f0, t0 = local_read._faults(), time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                rec = acc.setdefault(_q, [0.0, 0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += local_read._faults() - f0
        setattr(owner, name, timed)  # _parse_header: pack.py looks its module attribute up per call
    f0, t0 = local_read._faults(), time.perf_counter()
    cp = CheckpointManager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, local_read._faults() - f0
    out = {"count": len(cp.messages), "wall_s": total, "faults": faults}
    for _, qual in PHASES:
        w, n, fl = acc.get(qual, [0.0, 0, 0])
        out[qual] = {"wall_s": w, "calls": n, "faults": fl}
    lw = out["ReadPath.load_with_state"]["wall_s"]
    rest = lw - sum(out[q]["wall_s"] for q in ("ReadPath.prefetch_segments", "ReadPath.read_state",
                                                "ReadPath.expand", "ReadPath.read_list"))
    out["load_with_state rest"] = {"wall_s": rest, "calls": 1, "faults": 0}
    return out


def run_child(spec: dict) -> dict:
    import subprocess

    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          cwd=str(local_read.REPO_ROOT), env=local_read._child_env(), capture_output=True,
                          text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(trials: int) -> dict | None:
    """Build the repository, run ``trials`` fresh children; medians per phase (or None without
    the shared trajectories)."""
    with tempfile.TemporaryDirectory(prefix="walk-phases-") as tmp:
        info = local_read.build(tmp)
        if info is None:
            return None
        spec = {"repo": info["repo"], "run": local_read.RUN}
        rows = [run_child(spec) for _ in range(trials)]
    for r in rows:
        if r["count"] != info["messages"]:
            raise AssertionError("latest() returned the wrong number of messages")
    names = [q for _, q in PHASES] + ["load_with_state rest"]
    res = {"trials": trials, "messages": info["messages"], "packs": info["packs"],
           "total_s": statistics.median(r["wall_s"] for r in rows),
           "faults": statistics.median(r["faults"] for r in rows), "phases": {}}
    for q in names:
        res["phases"][q] = {"wall_s": statistics.median(r[q]["wall_s"] for r in rows),
                            "calls": rows[0][q]["calls"],
                            "faults": statistics.median(r[q]["faults"] for r in rows)}
    return res


def report(r: dict) -> str:
    lines = [f"fresh latest(), {r['messages']} messages, {r['packs']} packs; medians of {r['trials']} children "
             f"(phases nest): total {r['total_s'] * 1e3:.2f} ms, {r['faults']:.0f} page faults"]
    for q, p in r["phases"].items():
        lines.append(f"  {p['wall_s'] * 1e3:7.3f} ms {p['faults']:6.0f} flt {p['calls']:4d}x  {q}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=21, help="fresh children (default 21)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    r = measure(args.trials)
    if r is None:
        print("skipped: shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
        return 0
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
