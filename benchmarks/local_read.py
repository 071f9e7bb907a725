"""Local read benchmark: ``latest()`` of the largest shared coding run against ``json.load``, both in fresh processes.

Run (from the repository root)::

    python benchmarks/local_read.py                  # 15 trials of each side, medians, ratio
    python benchmarks/local_read.py --trials 31 --json out.json
    python benchmarks/local_read.py --profile        # plus where a fresh latest() spends its time

Setup: the coding-agent conversation with the largest final history (compact JSON bytes) among the
shared trajectories (``../shared/data/trajectories`` or ``$SNAPSTORE_SHARED_DATA``; SWE-agent,
mini-swe-agent, OpenHands and Claude Code files) is saved into a temporary local repository, one
checkpoint per turn (``snapstore.importers.load_trajectory`` + ``CheckpointManager.save``, as
``snapstore import`` does), and its final history is written to one JSON file (``json.dump``).

Measured: per trial, two fresh child processes (``python benchmarks/local_read.py --child SPEC`` of
this interpreter, importing the snapstore of this checkout), in alternating order:

* ``snapstore``: ``CheckpointManager(repo).latest(run)`` -- opening the repository (its config
  read), the LIST of the run's newest manifest, the manifest, its segment packs, every message
  (from the segments' array blocks, docs/format.md §11: the run only appended), and the
  Checkpoint built;
* ``json.load``: ``open(file)`` + ``json.load`` of the final history;
* ``floor``: the final history as one zstd frame of its compact JSON, read, decompressed and
  hashed with keyed blake3 in one call each, and parsed by orjson in runs of consecutive messages
  of at most 48 KiB (as the read path parses; one call for the whole list is slower here, its
  parser buffers being fresh pages): no layout that compresses and verifies the list can read
  it for less, so it says how much of the gap to ``json.load`` is snapstore's;
* ``fixed``: ``latest()`` of a run of one save of two short messages, in a repository of its own:
  what opening a repository and reading a checkpoint costs a fresh process before the list's
  size counts (the config, the LIST and manifest, one pack, the code's first run).

Both sides are timed the same way, inside the child around the read only (``time.perf_counter``):
every module either side needs is imported before the clock starts (snapstore and its
dependencies on one side, ``json`` on the other), interpreter start is outside. Each child also
reports the CPU time of the read (``time.process_time``, all threads), its minor page faults
(``getrusage``; fresh memory costs about 2 us per 4 KiB page on this machine kind) and, for
snapstore, how long ``import snapstore`` took. The parent reports beside them the whole child's
wall time (spawn to exit: interpreter start, imports, read, the result check). Figures are medians
over ``--trials`` trials; the ratio is snapstore's median read wall time over json.load's, the
target is a ratio of at most 1. The result is checked: the restored list must equal the file's.

``--profile`` adds two more fresh children: one reports wall time and page faults per phase of the
read (each phase's function wrapped with a timer; nested phases count in both), the other runs
the read under ``cProfile`` (the 25 functions with the most own time).

The children import snapstore from bytecode, as an installed package does: the checkout is first
compiled into a private cache (``PYTHONPYCACHEPREFIX`` in the temporary directory; nothing is
written into the checkout). Compiling from source in each child instead (``--source``; what a
checkout run with ``PYTHONDONTWRITEBYTECODE`` does) leaves the compiler's freed memory for the
read to reuse, which hides about 500 page faults (~1 ms) of a real fresh process.

Shares the machine with whatever else runs: on a busy 2-core machine single trials vary by 2-5x;
the medians of interleaved trials are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
RUN = "local-run"
TRIALS = 15
CODING_FORMATS = ("sweagent", "minisweagent", "openhands", "claudecode")


FLOOR_KEY = bytes(range(32))
"""Key of the floor child's keyed hash (any key: it stands for the repository's)."""
FLOOR_RUN = 48 << 10
"""Most bytes of consecutive messages the floor child parses in one call (the read path's
``ArrayReader.ARRAY_RUN``)."""


def largest_coding_run() -> tuple[Path, str, list, list] | None:
    """(file, format, checkpoints, final history) of the coding-agent conversation with the largest
    final history (compact JSON bytes) among the shared trajectories, or None without them."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    sys.path.insert(0, str(REPO_ROOT))
    from shared_data import shared_data_dir

    from snapstore.importers import load_trajectory

    d = shared_data_dir()
    if d is None:
        return None
    best = None
    for path in sorted(d.iterdir()):
        if not path.is_file() or path.suffix == ".md":
            continue
        try:
            fmt, convs = load_trajectory(path)
        except Exception:  # noqa: BLE001  (not a trajectory)
            continue
        if fmt not in CODING_FORMATS:
            continue
        for c in convs:
            size = len(json.dumps(c.messages, separators=(",", ":")))
            if best is None or size > best[0]:
                best = (size, path, fmt, c)
    if best is None:
        return None
    _, path, fmt, conv = best
    return path, fmt + (f" ({conv.name})" if conv.name else ""), conv.checkpoints, conv.messages


# ==================================================================================================
# the child


def _faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child_main(spec: dict) -> dict:
    """One fresh-process read (``spec["task"]``: ``snapstore``, ``json``, ``floor`` or ``profile``)."""
    clock, cpu = time.perf_counter, time.process_time
    task = spec["task"]
    if task == "floor":
        import blake3
        import orjson
        import zstandard

        dctx = zstandard.ZstdDecompressor()
        with open(spec["floor"] + ".runs", encoding="utf-8") as f:
            runs = json.load(f)
        f0, c0, t0 = _faults(), cpu(), clock()
        with open(spec["floor"], "rb") as f:
            raw = dctx.decompress(f.read())
        blake3.blake3(raw, key=FLOOR_KEY).digest(16)
        mv, msgs = memoryview(raw), []
        for s, e in runs:
            msgs.extend(orjson.loads(b"".join((b"[", mv[s:e], b"]"))))
        t1, c1, f1 = clock(), cpu(), _faults()
        return {"wall_s": t1 - t0, "cpu_s": c1 - c0, "faults": f1 - f0, "count": len(msgs)}
    if task == "json":
        f0, c0, t0 = _faults(), cpu(), clock()
        with open(spec["json"], encoding="utf-8") as f:
            msgs = json.load(f)
        t1, c1, f1 = clock(), cpu(), _faults()
        return {"wall_s": t1 - t0, "cpu_s": c1 - c0, "faults": f1 - f0, "count": len(msgs)}
    i0 = clock()
    sys.path.insert(0, str(REPO_ROOT))
    from snapstore import CheckpointManager

    import_s = clock() - i0
    if task == "profile":
        return _profile(spec, CheckpointManager)
    if task == "cprofile":
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        cp = CheckpointManager(spec["repo"]).latest(spec["run"])
        pr.disable()
        out = io.StringIO()
        pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25)
        return {"count": len(cp.messages), "cprofile": out.getvalue()}
    f0, c0, t0 = _faults(), cpu(), clock()
    cp = CheckpointManager(spec["repo"]).latest(spec["run"])
    t1, c1, f1 = clock(), cpu(), _faults()
    same = None
    if spec["json"] is not None:
        with open(spec["json"], encoding="utf-8") as f:
            same = json.load(f) == cp.messages
    return {"wall_s": t1 - t0, "cpu_s": c1 - c0, "faults": f1 - f0, "count": len(cp.messages), "same": same,
            "import_s": import_s}


PHASES = [
    ("snapstore.repo.repository", "Repository.open", "open the repository (config GET + parse)"),
    ("snapstore.manager.views", "load_view", "newest record: LIST limit 1 + manifest GET + decode"),
    ("snapstore.repo.locate", "Locator.prefetch_segments", "segment packs: GET (thread pool) + parse"),
    ("snapstore.format.pack", "Pack.parse", "pack checksum (blake3 of the pack) + header"),
    ("snapstore.repo.arrays", "ArrayReader.read", "the list from the segments' array blocks"),
    ("snapstore.repo.arrays", "ArrayReader._plan", "  its items, runs and holes (holes' messages read)"),
    ("snapstore.repo.arrays", "ArrayReader._pass", "  a pass: blocks decompressed, list hashed (and parsed)"),
    ("snapstore.repo.trees", "TreeReader.read_state", "the list's spine (state + upper entry)"),
    ("snapstore.repo.trees", "TreeReader.expand", "tree walk: every node read, verified, decoded"),
    ("snapstore.repo.trees", "TreeReader.read_list", "every message: sliced, list digest, JSON decode"),
    ("snapstore.repo.trees", "TreeReader._list_raws", "  slicing chunks out of their blocks"),
    ("snapstore.format.pack", "Pack.raw_block", "block decompression (zstd)"),
    ("snapstore.repo.liststate", "json_digest", "list digest (keyed blake3 of the list's JSON)"),
    ("snapstore.manager.read", "make_checkpoint", "the Checkpoint (session state included)"),
]


def _profile(spec: dict, manager) -> dict:
    import importlib

    # wrap each phase's function with a wall-clock and page-fault counter (a fresh process, so
    # the wrapped read is as cold as the measured one)
    acc: dict = {}

    def wrap(modname, qual):
        mod = importlib.import_module(modname)
        owner, name = (mod, qual) if "." not in qual else (getattr(mod, qual.split(".")[0]), qual.split(".")[1])
        fn = getattr(owner, name)

        def timed(*a, **k):
            f0, t0 = _faults(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                rec = acc.setdefault(qual, [0.0, 0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += _faults() - f0
        setattr(owner, name, timed)
        if modname == "snapstore.repo.liststate" and name == "json_digest":  # imported by name elsewhere
            import snapstore.repo.prepare as prep
            import snapstore.repo.trees as trees
            prep.json_digest = trees.json_digest = timed

    for modname, qual, _ in PHASES:
        wrap(modname, qual)
    f0, t0 = _faults(), time.perf_counter()
    cp = manager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, _faults() - f0
    phases = [{"phase": qual, "what": what, "calls": acc.get(qual, [0, 0, 0])[1],
               "wall_s": acc.get(qual, [0.0])[0], "faults": acc.get(qual, [0, 0, 0])[2]}
              for _, qual, what in PHASES]
    return {"count": len(cp.messages), "wall_s": total, "faults": faults, "phases": phases}


# ==================================================================================================
# the parent


def _child_env(pycache: str | None = None) -> dict:
    """The children's environment: this checkout first on the path; with ``pycache``, bytecode
    read from (and written to) that private cache directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = pycache
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_checkout(pycache: str) -> None:
    """Compile this checkout's snapstore into the bytecode cache ``pycache`` (a directory used as
    ``PYTHONPYCACHEPREFIX``; the checkout itself is not written to)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO_ROOT / "snapstore")],
                   env=_child_env(pycache), check=True, timeout=600, capture_output=True)


def run_child(spec: dict, timeout: float = 600, pycache: str | None = None) -> dict:
    """Run ``spec`` in a fresh child process (importing snapstore from the bytecode cache
    ``pycache`` if given); its JSON result plus ``process_s`` (spawn to exit)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          cwd=str(REPO_ROOT), env=_child_env(pycache), capture_output=True, text=True,
                          timeout=timeout)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec['task']} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = process_s
    return out


def build(tmp: str) -> dict | None:
    """Save the largest shared coding run into ``tmp/repo`` and its final history into
    ``tmp/final.json``; return what was built, or None without the shared trajectories."""
    found = largest_coding_run()
    if found is None:
        return None
    from snapstore import CheckpointManager

    path, fmt, checkpoints, final = found
    repo, jpath = os.path.join(tmp, "repo"), os.path.join(tmp, "final.json")
    mgr = CheckpointManager(repo)
    for i, cp in enumerate(checkpoints):
        mgr.save(RUN, cp, step=i)
    mgr.close()
    with open(jpath, "w", encoding="utf-8") as f:
        json.dump(final, f)
    import orjson
    import zstandard

    floor = os.path.join(tmp, "final.json.zst")
    with open(floor, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=3).compress(orjson.dumps(final)))
    runs, pos = [], 1  # the floor's runs: [start, end) of consecutive messages, at most 48 KiB
    for msg in final:
        end = pos + len(orjson.dumps(msg))
        if runs and end - runs[-1][0] <= FLOOR_RUN:
            runs[-1][1] = end
        else:
            runs.append([pos, end])
        pos = end + 1
    with open(floor + ".runs", "w", encoding="utf-8") as f:
        json.dump(runs, f)
    tiny = CheckpointManager(os.path.join(tmp, "tiny"))
    tiny.save(RUN, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], step=0)
    tiny.close()
    packs = [p for p in Path(repo, "packs").rglob("*") if p.is_file()]
    return {"file": path.name, "format": fmt, "checkpoints": len(checkpoints), "messages": len(final),
            "json_bytes": os.path.getsize(jpath), "repo": repo, "json": jpath, "floor": floor,
            "tiny": os.path.join(tmp, "tiny"),
            "floor_bytes": os.path.getsize(floor),
            "packs": len(packs), "pack_bytes": sum(p.stat().st_size for p in packs)}


def _med(rows: list, key: str) -> float:
    return statistics.median(r[key] for r in rows)


def measure(trials: int = TRIALS, profile: bool = False, source: bool = False) -> dict | None:
    """Build the repository and the file, run ``trials`` interleaved pairs of fresh children; the
    medians (seconds, faults) and the ratio, or None without the shared trajectories.
    ``source``: the children compile snapstore from source instead of reading bytecode.

    Raises:
        AssertionError: a restored list differs from the file's.
    """
    with tempfile.TemporaryDirectory(prefix="local-read-") as tmp:
        info = build(tmp)
        if info is None:
            return None
        pycache = None
        if not source:
            pycache = os.path.join(tmp, "pycache")
            compile_checkout(pycache)
        snap, js, fl = [], [], []
        spec = {"repo": info["repo"], "run": RUN, "json": info["json"], "floor": info["floor"]}
        tasks = ("snapstore", "json", "floor", "fixed")
        fx: list = []
        for i in range(trials):
            for task in tasks[i % 4:] + tasks[:i % 4]:  # each task first, second, ... in turn
                t = dict(spec, task="snapstore", repo=info["tiny"], json=None) if task == "fixed" else dict(spec, task=task)
                out = run_child(t, pycache=pycache)
                if task == "fixed":
                    if out["count"] != 2:
                        raise AssertionError("latest() of the one-save run is not its two messages")
                elif out["count"] != info["messages"] or (task == "snapstore" and not out["same"]):
                    raise AssertionError("latest() differs from the final history")
                {"snapstore": snap, "json": js, "floor": fl, "fixed": fx}[task].append(out)
        prof = None
        if profile:
            prof = run_child(dict(spec, task="profile"), pycache=pycache)
            prof["cprofile"] = run_child(dict(spec, task="cprofile"), pycache=pycache)["cprofile"]
    res = dict(info)
    for k in ("repo", "json", "floor", "tiny"):
        res.pop(k)
    res.update(op="local latest", trials=trials, bytecode=not source,
               latest_s=_med(snap, "wall_s"), json_load_s=_med(js, "wall_s"),
               latest_cpu_s=_med(snap, "cpu_s"), json_load_cpu_s=_med(js, "cpu_s"),
               latest_faults=_med(snap, "faults"), json_load_faults=_med(js, "faults"),
               latest_process_s=_med(snap, "process_s"), json_load_process_s=_med(js, "process_s"),
               import_s=_med(snap, "import_s"), floor_s=_med(fl, "wall_s"), floor_faults=_med(fl, "faults"),
               fixed_s=_med(fx, "wall_s"), fixed_faults=_med(fx, "faults"),
               latest_s_all=[r["wall_s"] for r in snap], json_load_s_all=[r["wall_s"] for r in js])
    res["ratio"] = res["latest_s"] / res["json_load_s"]
    res["cpu_ratio"] = res["latest_cpu_s"] / res["json_load_cpu_s"]
    res["floor_ratio"] = res["floor_s"] / res["json_load_s"]
    res["fixed_ratio"] = res["fixed_s"] / res["json_load_s"]
    res["verdict"] = "PASS" if res["ratio"] <= 1 else "FAIL"
    if prof is not None:
        res["profile"] = prof
    return res


def report(r: dict) -> str:
    """The result as text (what ``main`` prints)."""
    ms = 1000
    lines = [f"local: {r['file']} [{r['format']}], {r['checkpoints']:,} checkpoints, {r['messages']:,} messages, "
             f"final history {r['json_bytes'] / 1e6:.2f} MB JSON; repository: {r['packs']} packs, "
             f"{r['pack_bytes'] / 1e6:.2f} MB",
             f"  fresh process, read only (imports done, snapstore from "
             f"{'bytecode' if r.get('bytecode', True) else 'source'}), medians of {r['trials']} interleaved trials:",
             f"    latest():  {r['latest_s'] * ms:6.1f} ms wall  {r['latest_cpu_s'] * ms:6.1f} ms CPU  "
             f"{r['latest_faults']:6.0f} page faults",
             f"    json.load: {r['json_load_s'] * ms:6.1f} ms wall  {r['json_load_cpu_s'] * ms:6.1f} ms CPU  "
             f"{r['json_load_faults']:6.0f} page faults",
             f"    ratio {r['ratio']:.2f}x wall, {r['cpu_ratio']:.2f}x CPU   target <= 1x: {r['verdict']}",
             f"    floor: {r['floor_s'] * ms:6.1f} ms wall ({r['floor_ratio']:.2f}x json.load, {r['floor_faults']:.0f} page "
             f"faults): the list as one zstd frame ({r['floor_bytes'] / 1e6:.2f} MB), decompressed and keyed-hashed "
             "in one call each, parsed in runs of up to 48 KiB (what any compressed, verified layout costs at least)",
             f"    fixed: {r['fixed_s'] * ms:6.1f} ms wall ({r['fixed_ratio']:.2f}x json.load, {r['fixed_faults']:.0f} page "
             "faults): latest() of a one-save run of two short messages (opening a repository and reading a "
             "checkpoint, before the list's size counts)",
             f"  whole child process (interpreter start + imports + read + check): latest() "
             f"{r['latest_process_s'] * ms:.0f} ms, json.load {r['json_load_process_s'] * ms:.0f} ms; "
             f"import snapstore {r['import_s'] * ms:.0f} ms"]
    prof = r.get("profile")
    if prof:
        lines.append(f"  profile (one more fresh process: {prof['wall_s'] * ms:.1f} ms, {prof['faults']} page faults; "
                     "phases nest):")
        for p in prof["phases"]:
            lines.append(f"    {p['wall_s'] * ms:7.2f} ms {p['faults']:6d} flt {p['calls']:5d}x  "
                         f"{p['phase']:32s} {p['what']}")
        lines.append("  cProfile of a read in another fresh process (its own overhead included):")
        lines.extend("    " + ln for ln in prof["cprofile"].strip().splitlines())
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=TRIALS, help=f"interleaved pairs of fresh processes (default {TRIALS})")
    ap.add_argument("--profile", action="store_true", help="also profile one fresh latest() (phases and cProfile)")
    ap.add_argument("--source", action="store_true",
                    help="children compile snapstore from source (default: from bytecode, as installed)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_main(json.loads(args.child))))
        return 0
    return emit(measure(args.trials, args.profile, args.source), report, args.json)


def emit(r: dict | None, report_fn, json_path: str | None) -> int:
    """Print a local benchmark's result (``report_fn(r)``), or that the shared trajectories are
    missing (``r`` None), and write it as JSON to ``json_path`` if given; the exit status (0).
    Shared by ``local_read.py``, ``fresh_open.py`` and ``walk_phases.py``."""
    if r is None:
        print("skipped: shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
        return 0
    print(report_fn(r))
    if json_path:
        Path(json_path).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
