"""Fresh-process restore of a small run: snapstore (directory and SQLite file) against LangGraph's SqliteSaver.

Run (from the repository root; needs the ``bench`` extra for langgraph-checkpoint-sqlite)::

    python benchmarks/small_restore.py                         # 15 trials, every small shared run
    python benchmarks/small_restore.py --trials 31 --json out.json
    python benchmarks/small_restore.py --code main --code worktree   # two snapstore versions side by side
    python benchmarks/small_restore.py --profile               # where a fresh latest() spends its time

Issue 22 item 4: opening a repository and reading the latest checkpoint of a small run in a fresh
process must cost at most SqliteSaver's ``get_tuple`` on the same run (imports not timed).

Setup (the parent, with the snapstore of this checkout): each small run (the first conversation of
each shared trajectory whose final history is at most :data:`SMALL_BYTES` of compact JSON and
that has at least 3 checkpoints) is saved one checkpoint per turn into a directory repository
(``CheckpointManager(dir)``, fsync on), a SQLite-file repository (``CheckpointManager(path.db)``),
and a LangGraph ``SqliteSaver`` database through the real replay graph of ``benchmarks/lgraph.py``
(``add_messages``, one ``invoke`` per turn: LangChain messages carrying exactly the run's dicts).

Measured, per trial and workload, one fresh child process per side (``python
benchmarks/small_restore.py --child SPEC``), in an order rotated every trial. Each child imports
everything its side needs first (snapstore with its SQLite store module, which ``open_store``
otherwise imports on first use; or langgraph, langchain-core and sqlite3), collects the imports'
garbage (``gc.collect()``: see :func:`settle`; without it a full collection of LangGraph's import
heap fell inside ``get_tuple`` on 4 of 6 runs, 100-200 ms) and then times, with
``time.perf_counter``, only the following (a module imported inside the timed part stops the run):

* ``snapstore-dir`` / ``snapstore-sqlite``: ``CheckpointManager(location).latest(run)``: opening
  the repository (the manager, the store, the config read and parsed, the repository objects),
  reading the run's newest record, its packs and every message, the ``Checkpoint`` built;
* ``sqlitesaver``: ``SqliteSaver(sqlite3.connect(path)).get_tuple(config)``: the connection and
  the saver made, its ``setup()`` (which ``get_tuple`` runs first in a fresh process: a
  ``PRAGMA journal_mode=WAL`` and ``CREATE TABLE IF NOT EXISTS`` script, whose time varies with
  the disk), the newest checkpoint's row and its writes read and deserialised (LangChain message
  objects);
* ``sqlitesaver-read``: the same ``get_tuple`` with the connection, the saver and ``setup()``
  made before the clock: the stricter peer (its read alone).

After the clock stops the child checks what it read against the run's final history (the
LangChain messages turned back into dicts) and reports the wall time, the CPU time and the minor
page faults of the read. Reported: per workload and side the median over ``--trials`` trials,
and snapstore's median over SqliteSaver's (the target: at most 1 on every workload). With
several ``--code`` versions (``main``, any git revision, ``worktree``: ``_lib.snapshot_package``)
each snapstore side runs once per version, in the same rotation; every version reads the same
repositories. Children import snapstore from bytecode compiled into a private cache (as an
installed package does; nothing is written into the checkout).

``--profile`` runs, per workload and store, one more child that times the steps of a fresh
``latest()`` one after another (``CheckpointManager``; ``open``: the store and the config read,
the Repository; ``newest record``: the run's head; ``messages``; ``checkpoint``), and one child
under ``cProfile`` (the functions with the most own time).

Shares the machine with whatever else runs: single trials vary by 2x or more on a busy 2-core
machine; compare the medians of interleaved trials.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
RUN = "small-run"
SMALL_BYTES = 128 << 10
"""A run is small when its final history is at most this many bytes of compact JSON."""
SIDES = ("snapstore-dir", "snapstore-sqlite", "sqlitesaver", "sqlitesaver-read")


# ==================================================================================================
# the child


def child_main(spec: dict) -> dict:
    """One fresh-process restore (``spec["side"]``); ``{"wall_s", "cpu_s", "faults", "count"}``."""
    clock, cpu, faults = time.perf_counter, time.process_time, _lib.page_faults
    side = spec["side"]
    faults()  # (imports what it reads with, before any clock)
    with open(spec["expect"], encoding="utf-8") as f:
        expect = json.load(f)
    if side in ("sqlitesaver", "sqlitesaver-read"):
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        import lgraph

        config = {"configurable": {"thread_id": spec["thread"]}}
        mods = set(sys.modules)
        if side == "sqlitesaver-read":  # the connection, the saver and its setup() before the clock
            saver = SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
            saver.setup()
        settle()
        f0, c0, t0 = faults(), cpu(), clock()
        if side == "sqlitesaver":
            saver = SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
        tup = saver.get_tuple(config)
        t1, c1, f1 = clock(), cpu(), faults()
        got = [lgraph.from_lc(m) for m in tup.checkpoint["channel_values"]["messages"]]
    else:
        from snapstore import CheckpointManager
        from snapstore.stores import sqlite  # noqa: F401  (open_store imports it on first use)

        if spec.get("profile") == "steps":
            return steps_child(spec, expect)
        if spec.get("profile") == "cprofile":
            import cProfile
            import io
            import pstats

            prof = cProfile.Profile()
            settle()
            prof.enable()
            cp = CheckpointManager(spec["location"]).latest(RUN)
            prof.disable()
            assert cp.messages == expect
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(22)
            return {"profile": out.getvalue()}
        mods = set(sys.modules)
        settle()
        f0, c0, t0 = faults(), cpu(), clock()
        cp = CheckpointManager(spec["location"]).latest(RUN)
        t1, c1, f1 = clock(), cpu(), faults()
        got = cp.messages
    if json.dumps(got) != json.dumps(expect):
        raise AssertionError(f"{side}: the restored history differs from the run's")
    # modules the timed read imported (imports are not to be timed: the parent refuses any)
    late = sorted(set(sys.modules) - mods)
    return {"wall_s": t1 - t0, "cpu_s": c1 - c0, "faults": f1 - f0, "count": len(got), "imported": late}


def settle() -> None:
    """Collect the garbage of the imports before the clock (every side, every child).

    LangGraph, LangChain and pydantic leave ~10^5 container objects: without this, the collector's
    first full (generation 2) pass over them fell inside ``get_tuple`` on 4 of the 6 small runs
    (which ones depends on how many objects the child made before: the run's expected history)
    and cost 60-200 ms of the 100-200 ms then measured. That is the cost of the imports, not of
    the read. After ``gc.collect()`` the import heap is old and the next full pass is far off."""
    gc.collect()


def steps_child(spec: dict, expect: list) -> dict:
    """The steps of a fresh ``latest()`` timed one after another (``--profile``), in ms."""
    from snapstore import CheckpointManager
    from snapstore.manager import read, views
    from snapstore.manager.checkpoint import Checkpoint  # noqa: F401  (imported before the clock)

    clock = time.perf_counter
    settle()
    t = [clock()]
    mgr = CheckpointManager(spec["location"])
    t.append(clock())
    with mgr.state.run_lock(RUN):
        mgr.state.exists()
    t.append(clock())
    v = views.load_view(mgr, RUN)
    t.append(clock())
    cp = mgr.latest(RUN)  # the head is known now: what is left is the read of the messages
    t.append(clock())
    assert cp.messages == expect and v.head is not None and read is not None
    names = ["manager", "open", "newest record", "messages + checkpoint"]
    return {"steps_ms": {n: (b - a) * 1e3 for n, a, b in zip(names, t, t[1:])}, "total_ms": (t[-1] - t[0]) * 1e3}


# ==================================================================================================
# the parent


def small_runs(limit: int | None = None) -> list[tuple[str, list]]:
    """``[(name, checkpoints)]`` of the small shared runs (see the module docstring)."""
    from snapstore.importers import load_trajectory

    d = _lib.shared_dir()
    if d is None:
        raise SystemExit("the shared trajectories are not there (../shared/data/trajectories or $SNAPSTORE_SHARED_DATA)")
    out = []
    for path in sorted(d.iterdir()):
        if not path.is_file() or path.suffix == ".md":
            continue
        try:
            _, convs = load_trajectory(path)
        except Exception:  # noqa: BLE001  (not a trajectory)
            continue
        cps = convs[0].checkpoints if convs else []
        if len(cps) >= 3 and len(json.dumps(cps[-1], separators=(",", ":"))) <= SMALL_BYTES:
            out.append((path.name.split(".")[0], cps))
    return out[:limit] if limit else out


def build(work: Path, name: str, cps: list) -> dict:
    """Save ``cps`` into the three stores under ``work/name``; the children's specs' common part."""
    from types import SimpleNamespace

    from langgraph.checkpoint.sqlite import SqliteSaver

    import lgraph
    from snapstore import CheckpointManager

    base = work / name
    base.mkdir(parents=True)
    for loc in (base / "repo", base / "repo.db"):
        mgr = CheckpointManager(str(loc))
        for i, msgs in enumerate(cps):
            mgr.save(RUN, msgs, step=i)
        mgr.close()
    deltas, prev = [], []
    for msgs in cps:
        same = msgs[:len(prev)] == prev
        deltas.append(("append", msgs[len(prev):]) if same else ("rewrite", msgs))
        prev = msgs
    import sqlite3

    conn = sqlite3.connect(base / "lg.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    feed = lgraph.Feed()
    app = lgraph.build_graph(False, saver, feed)
    feed.updates["t"] = lgraph.turn_updates(SimpleNamespace(checkpoints=cps, states=None), deltas)
    for i in range(len(cps)):
        app.invoke({"turn": i}, {"configurable": {"thread_id": "t"}}, durability="exit")
    conn.close()
    (base / "expect.json").write_text(json.dumps(cps[-1]))
    return {"dir": str(base / "repo"), "db": str(base / "repo.db"), "lg": str(base / "lg.db"),
            "expect": str(base / "expect.json"), "checkpoints": len(cps),
            "bytes": len(json.dumps(cps[-1], separators=(",", ":")))}


def spec_of(side: str, w: dict) -> dict:
    if side.startswith("sqlitesaver"):
        return {"side": side, "path": w["lg"], "thread": "t", "expect": w["expect"]}
    return {"side": side, "location": w["dir"] if side == "snapstore-dir" else w["db"], "expect": w["expect"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--code", action="append", help="snapstore version(s) the children import: main, a git "
                    "revision, or worktree (default: worktree); repeat to compare")
    ap.add_argument("--limit", type=int, default=None, help="at most this many workloads")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    codes = args.code or ["worktree"]
    work = Path(tempfile.mkdtemp(prefix="small-restore-"))
    try:
        envs = {}
        for code in codes:
            tree, desc = _lib.snapshot_package(work / "code" / code.replace("/", "_"), code)
            pyc = str(work / "pyc" / code.replace("/", "_"))
            _lib.compile_checkout(pyc, tree)
            env = _lib.child_env(tree, pyc)
            env["PYTHONPATH"] += os.pathsep + str(HERE)  # lgraph, _lib
            envs[code] = (env, desc)
        lg_env = dict(envs[codes[0]][0])
        workloads = {}
        for name, cps in small_runs(args.limit):
            workloads[name] = build(work / "data", name, cps)
        columns = [(s, c) for s in SIDES[:2] for c in codes] + [(s, codes[0]) for s in SIDES[2:]]
        rows = {(n, s, c): [] for n in workloads for s, c in columns}
        for trial in range(args.trials):
            for name, w in workloads.items():
                k = (trial + len(name)) % len(columns)
                for side, code in columns[k:] + columns[:k]:
                    env = lg_env if side.startswith("sqlitesaver") else envs[code][0]
                    got = _lib.run_child(__file__, spec_of(side, w), env=env)
                    if got["imported"]:
                        raise SystemExit(f"{side}@{code} imported {got['imported']} inside the timed read")
                    rows[(name, side, code)].append(got)
            print(f"trial {trial + 1}/{args.trials} done", file=sys.stderr, flush=True)
        result = {"trials": args.trials, "codes": {c: envs[c][1] for c in codes}, "workloads": {}}
        for name, w in workloads.items():
            lg = _lib.median_of(rows[(name, "sqlitesaver", codes[0])], "wall_s") * 1e3
            lgr = _lib.median_of(rows[(name, "sqlitesaver-read", codes[0])], "wall_s") * 1e3
            ent = {"checkpoints": w["checkpoints"], "bytes": w["bytes"], "sqlitesaver_ms": lg,
                   "sqlitesaver_read_ms": lgr, "sides": {}}
            for side, code in columns[:-2]:
                rs = rows[(name, side, code)]
                ms = _lib.median_of(rs, "wall_s") * 1e3
                ent["sides"][f"{side}@{code}"] = {"ms": ms, "cpu_ms": _lib.median_of(rs, "cpu_s") * 1e3,
                                                  "faults": _lib.median_of(rs, "faults"), "vs_sqlitesaver": ms / lg,
                                                  "vs_sqlitesaver_read": ms / lgr}
            result["workloads"][name] = ent
        if args.profile:
            result["profile"] = {}
            for name, w in workloads.items():
                for side in SIDES[:2]:
                    for code in codes:
                        sp = dict(spec_of(side, w), profile="steps")
                        steps = [_lib.run_child(__file__, sp, env=envs[code][0]) for _ in range(max(5, args.trials // 3))]
                        med = {k: _lib.median(s["steps_ms"][k] for s in steps) for k in steps[0]["steps_ms"]}
                        cpr = _lib.run_child(__file__, dict(spec_of(side, w), profile="cprofile"), env=envs[code][0])
                        result["profile"][f"{name} {side}@{code}"] = {"steps_ms": med, "cprofile": cpr["profile"]}
        return _lib.emit(result, report, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(r: dict) -> str:
    lines = [f"fresh-process restore of small runs, medians of {r['trials']} trials (ms; ratio: over SqliteSaver)"]
    for c, d in r["codes"].items():
        lines.append(f"  snapstore {c}: {d}")
    first = next(iter(r["workloads"].values()))
    heads = list(first["sides"])
    lines.append(f"{'workload':<30}{'cps':>4}{'KiB':>5}{'saver':>8}{'s.read':>8}" + "".join(f"{h:>28}" for h in heads))
    for name, e in r["workloads"].items():
        cells = "".join(f"{s['ms']:>12.2f} ({s['vs_sqlitesaver']:.2f}x/{s['vs_sqlitesaver_read']:.2f}x)"
                        for s in e["sides"].values())
        lines.append(f"{name[:29]:<30}{e['checkpoints']:>4}{e['bytes'] / 1024:>5.0f}{e['sqlitesaver_ms']:>8.2f}"
                     f"{e['sqlitesaver_read_ms']:>8.2f}{cells}")
    lines.append("(x/y: over SqliteSaver(...).get_tuple (saver) / over get_tuple alone, setup() before the clock (s.read))")
    for key in ("vs_sqlitesaver", "vs_sqlitesaver_read"):
        worst = {h: max(e["sides"][h][key] for e in r["workloads"].values()) for h in heads}
        lines.append(f"worst {key}: " + ", ".join(f"{h} {v:.2f}x" for h, v in worst.items()))
    for k, p in (r.get("profile") or {}).items():
        lines.append(f"\n{k}: " + ", ".join(f"{n} {v:.2f}" for n, v in p["steps_ms"].items()) + " ms")
        lines.append(p["cprofile"])
    return "\n".join(lines)


if __name__ == "__main__":
    if not _lib.child_entry(None, child_main):
        sys.exit(main())
