"""Local read benchmark: a fresh process's ``latest()`` of the largest shared coding run: against ``json.load``, its steps, its phases.

Run (from the repository root)::

    python benchmarks/local_read.py                  # 15 trials of each side, medians, ratio
    python benchmarks/local_read.py --trials 31 --json out.json
    python benchmarks/local_read.py --profile        # plus where a fresh latest() spends its time
    python benchmarks/local_read.py --open [--compare ../other-checkout]   # the steps before the segments
    python benchmarks/local_read.py --phases [--floors] [--fixed-malloc] [--pyc] [--repo DIR]

All three modes read the same repository (``build``) in fresh child processes
(``python benchmarks/local_read.py --child SPEC``, ``benchmarks/_lib.py``'s runner).

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

``--open`` (default 31 trials) runs, per trial, one fresh child that runs the steps of
``reading.latest`` one after another and reads ``time.perf_counter`` (and the minor page faults)
between them, with nothing wrapped, so no timer sits inside a step: ``manager``
(``CheckpointManager(repo)``, no request); ``open`` (``mgr.state.exists()`` under the run's lock: the
config GET and parse, the hasher, the Repository object); ``newest record`` (``views.load_view``:
the LIST limit 1, the manifest GET and decode, resolving the head); ``before segments`` (the three
above); ``segments + messages`` (``repo.load_with_state``); ``checkpoint`` (``make_checkpoint``);
``total``. With ``--compare DIR`` (another checkout of snapstore, e.g. ``git worktree add ../base
<commit>``) each trial also runs one child on that checkout's snapstore, in alternating order, and
both columns are printed.

``--phases`` (default 21 trials) reads the run through the tree (``ArrayReader.read`` off):
the path a read takes when the segments' array blocks are not the checkpoint's list (a rewritten
or rolled-back run, data of an earlier version; docs/format.md §11). Each fresh child wraps the
phases' functions with a wall-clock and page-fault counter (phases nest): ``Pack.parse`` and
``parse_header`` (the segment packs' headers), ``SegmentIndex.add``, ``TreeReader.read_state``
and ``TreeReader.expand`` (the tree walk), and ``load_with_state rest`` (building the ListState);
medians over the children are what to compare before and after a change of a few hundred
microseconds. ``--fixed-malloc`` fixes glibc's malloc thresholds (``MALLOC_MMAP_THRESHOLD_`` 32
MiB, ``MALLOC_TRIM_THRESHOLD_`` 256 MiB): by default glibc raises its mmap threshold when an
mmapped block is freed, so an unrelated change moves a fresh ``latest()`` by about 120 page faults
(0.3 ms) either way; fixed, the counts repeat to within a fault or two. ``--pyc``: the children
import snapstore from bytecode (as above; the default of this mode compiles from source).
``--floors`` adds, in as many more children, the segment packs' headers parsed by
``format.pack.parse_header`` and the run's tree nodes decoded by ``decode_node`` against a loop
that only slices each item's id and builds its ``Ref`` (the bytes read before the clock).
``--repo DIR`` builds the repository there and keeps it, or reuses the one built there before
(pack ids are random: an A/B of two checkouts should read the same one).

Shares the machine with whatever else runs: on a busy 2-core machine single trials vary by 2-5x;
the medians of interleaved trials are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # _lib (this directory holds no snapstore: a child's checkout stays first)
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
RUN = "local-run"
TRIALS = {"read": 15, "open": 31, "phases": 21}
"""Default ``--trials`` of each mode."""


FLOOR_KEY = bytes(range(32))
"""Key of the floor child's keyed hash (any key: it stands for the repository's)."""
FLOOR_RUN = 48 << 10
"""Most bytes of consecutive messages the floor child parses in one call (the read path's
``ArrayReader.ARRAY_RUN``)."""


# ==================================================================================================
# the child


_faults = _lib.page_faults


def child_main(spec: dict) -> dict:
    """One fresh-process read (``spec["task"]``: ``snapstore``, ``json``, ``floor``, ``profile``,
    ``cprofile``; ``open`` for ``--open``; ``phases`` and ``floors`` for ``--phases``); its result."""
    clock, cpu = time.perf_counter, time.process_time
    task = spec["task"]
    if task in ("open", "phases", "floors"):
        # (the checkout to read with is first on PYTHONPATH: run_child's environment)
        return {"open": open_child, "phases": phases_child, "floors": floors_child}[task](spec)
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
    # wrap each phase's function with a wall-clock and page-fault counter (a fresh process, so
    # the wrapped read is as cold as the measured one)
    acc: dict = {}
    _wrap_phases([(modname, qual) for modname, qual, _ in PHASES], acc)
    f0, t0 = _faults(), time.perf_counter()
    cp = manager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, _faults() - f0
    phases = [{"phase": qual, "what": what, "calls": acc.get(qual, [0, 0, 0])[1],
               "wall_s": acc.get(qual, [0.0])[0], "faults": acc.get(qual, [0, 0, 0])[2]}
              for _, qual, what in PHASES]
    return {"count": len(cp.messages), "wall_s": total, "faults": faults, "phases": phases}


# ==================================================================================================
# the parent


def compile_checkout(pycache: str) -> None:
    """Compile this checkout's snapstore into the bytecode cache ``pycache`` (``_lib.compile_checkout``)."""
    _lib.compile_checkout(pycache)


def run_child(spec: dict, timeout: float = 600, pycache: str | None = None, tree: Path = REPO_ROOT,
              fixed_malloc: bool = False) -> dict:
    """Run ``spec`` in a fresh ``local_read.py --child`` process importing the snapstore of the
    checkout ``tree`` (from the bytecode cache ``pycache`` if given; with glibc's malloc thresholds
    fixed if ``fixed_malloc``); its JSON result plus ``process_s`` (spawn to exit, seconds).

    Raises:
        _lib.ChildFailed: the child failed.
    """
    env = _lib.child_env(tree, pycache, extra=_lib.FIXED_MALLOC if fixed_malloc else None)
    return _lib.run_child(Path(__file__).resolve(), spec, env=env, cwd=tree, timeout=timeout)


def build(tmp: str) -> dict | None:
    """Save the largest shared coding run into ``tmp/repo`` and its final history into
    ``tmp/final.json``; return what was built, or None without the shared trajectories."""
    sys.path.insert(0, str(REPO_ROOT))
    found = _lib.largest_coding_run()
    if found is None:
        return None
    from snapstore import CheckpointManager

    path, fmt, checkpoints, final = found
    repo, jpath = os.path.join(tmp, "repo"), os.path.join(tmp, "final.json")
    _lib.save_run(repo, RUN, checkpoints)
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


_med = _lib.median_of


def measure(trials: int = TRIALS["read"], profile: bool = False, source: bool = False) -> dict | None:
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


# ==================================================================================================
# --open: the steps of a fresh latest() before the segment packs, per checkout

OPEN_STEPS = ["manager", "open", "newest record", "before segments", "segments + messages", "checkpoint", "total"]


def open_child(spec: dict) -> dict:
    """One fresh-process read, timed between the steps of ``reading.latest`` (nothing wrapped, so
    no timer sits inside a step): ``{"count", "steps": {step: [wall s, page faults]}, "snapstore":
    the checkout it imported}``."""
    import snapstore
    from snapstore import CheckpointManager
    from snapstore.manager import views
    from snapstore.manager.read import make_checkpoint

    faults, clock = _faults, time.perf_counter
    run = spec["run"]
    f0, t0 = faults(), clock()
    mgr = CheckpointManager(spec["repo"])
    t1, f1 = clock(), faults()
    with mgr.state.run_lock(run):
        mgr.state.exists()
        t2, f2 = clock(), faults()
        v = views.load_view(mgr, run)
        t3, f3 = clock(), faults()
        msgs, _ = mgr.repo.load_with_state(v.head, v.head_segs)
        t4, f4 = clock(), faults()
        cp = make_checkpoint(mgr.repo, v.head, msgs)
        t5, f5 = clock(), faults()
    steps = {"manager": [t1 - t0, f1 - f0], "open": [t2 - t1, f2 - f1], "newest record": [t3 - t2, f3 - f2],
             "before segments": [t3 - t0, f3 - f0], "segments + messages": [t4 - t3, f4 - f3],
             "checkpoint": [t5 - t4, f5 - f4], "total": [t5 - t0, f5 - f0]}
    return {"count": len(cp.messages), "steps": steps, "snapstore": os.path.dirname(os.path.dirname(snapstore.__file__))}


def measure_open(trials: int = TRIALS["open"], compare: str | None = None) -> dict | None:
    """``--open``: build the repository, run ``trials`` fresh children (and as many on ``compare``,
    another checkout, interleaved); medians per step (seconds, page faults) per checkout, or None
    without the shared trajectories.

    Raises:
        AssertionError: a child returned another number of messages than the run has, or imported
            another checkout's snapstore.
        ValueError: ``compare`` is this checkout or holds no snapstore.
    """
    trees = [REPO_ROOT] + ([Path(compare).resolve()] if compare else [])
    if len(set(trees)) != len(trees):
        raise ValueError(f"--compare {compare} is this checkout")
    if compare and not (trees[1] / "snapstore" / "__init__.py").is_file():
        raise ValueError(f"--compare {compare}: no snapstore checkout there")
    with tempfile.TemporaryDirectory(prefix="local-read-open-") as tmp:
        info = build(tmp)
        if info is None:
            return None
        spec = {"task": "open", "repo": info["repo"], "run": RUN}
        rows: dict = {str(t): [] for t in trees}
        for i in range(trials):
            for t in (trees if i % 2 == 0 else trees[::-1]):
                out = run_child(spec, tree=t)
                if out["count"] != info["messages"]:
                    raise AssertionError("latest() returned the wrong history")
                if Path(out["snapstore"]).resolve() != t:
                    raise AssertionError(f"the child for {t} imported the snapstore of {out['snapstore']}")
                rows[str(t)].append(out["steps"])
    med = {t: {s: {"wall_s": _lib.median(r[s][0] for r in rs), "faults": _lib.median(r[s][1] for r in rs)}
               for s in OPEN_STEPS} for t, rs in rows.items()}
    return {"mode": "open", "file": info["file"], "checkpoints": info["checkpoints"], "messages": info["messages"],
            "trials": trials, "trees": [str(t) for t in trees], "steps": med}


def report_open(r: dict) -> str:
    """The ``--open`` result as text."""
    trees = r["trees"]
    lines = [f"fresh-process latest(): {r['file']}, {r['checkpoints']} checkpoints, {r['messages']} messages; "
             f"medians of {r['trials']} fresh children" + (" per checkout, interleaved" if len(trees) > 1 else ""),
             f"  {'step':22s}" + "".join(f"{('this checkout' if i == 0 else os.path.basename(t.rstrip('/'))):>24s}"
                                       for i, t in enumerate(trees))]
    for s in OPEN_STEPS:
        lines.append(f"  {s:22s}" + "".join(f"{r['steps'][t][s]['wall_s'] * 1e3:11.3f} ms {r['steps'][t][s]['faults']:6.0f} flt"
                                            for t in trees))
    return "\n".join(lines)


# ==================================================================================================
# --phases: per-phase medians of a fresh latest() through the tree

WALK_PHASES = [
    ("snapstore.repo.locate", "Locator.prefetch_segments"),
    ("snapstore.format.pack", "Pack.parse"),
    ("snapstore.format.pack", "parse_header"),
    ("snapstore.repo.locate", "SegmentIndex.add"),
    ("snapstore.repo.trees", "TreeReader.read_state"),
    ("snapstore.repo.trees", "TreeReader.expand"),
    ("snapstore.repo.trees", "TreeReader.read_list"),
    ("snapstore.repo.trees", "TreeReader.load_with_state"),
]


def _wrap_phases(phases: list, acc: dict) -> None:
    """Wrap each ``(module, "Class.method" or "function")`` of ``phases`` with a wall-clock and
    page-fault counter adding ``[seconds, calls, faults]`` into ``acc[qualname]``."""
    import importlib

    for modname, qual in phases:
        mod = importlib.import_module(modname)
        owner, name = (mod, qual) if "." not in qual else (getattr(mod, qual.split(".")[0]), qual.split(".")[1])
        fn = getattr(owner, name)

        def timed(*a, _fn=fn, _q=qual, **k):
            f0, t0 = _faults(), time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                rec = acc.setdefault(_q, [0.0, 0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += _faults() - f0
        setattr(owner, name, timed)  # parse_header: pack.py looks its module attribute up per call
        if modname == "snapstore.repo.liststate" and name == "json_digest":  # imported by name elsewhere
            import snapstore.repo.prepare as prep
            import snapstore.repo.trees as trees
            prep.json_digest = trees.json_digest = timed


def phases_child(spec: dict) -> dict:
    """One fresh-process ``latest()`` through the tree (array blocks off) with :data:`WALK_PHASES`
    wrapped; seconds, calls and faults per phase."""
    from snapstore import CheckpointManager
    from snapstore.repo.arrays import ArrayReader
    from snapstore.repo.locate import Locator
    from snapstore.repo.locate import SegmentIndex
    from snapstore.repo.trees import TreeReader

    ArrayReader.read = lambda self, m, segs: None  # the tree path (module docstring)
    acc: dict = {}
    _wrap_phases(WALK_PHASES, acc)
    f0, t0 = _faults(), time.perf_counter()
    cp = CheckpointManager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, _faults() - f0
    out = {"count": len(cp.messages), "wall_s": total, "faults": faults}
    for _, qual in WALK_PHASES:
        w, n, fl = acc.get(qual, [0.0, 0, 0])
        out[qual] = {"wall_s": w, "calls": n, "faults": fl}
    lw = out["TreeReader.load_with_state"]["wall_s"]
    rest = lw - sum(out[q]["wall_s"] for q in ("Locator.prefetch_segments", "TreeReader.read_state",
                                                "TreeReader.expand", "TreeReader.read_list"))
    out["load_with_state rest"] = {"wall_s": rest, "calls": 1, "faults": 0}
    return out


def floors_child(spec: dict) -> dict:
    """Fresh-process costs of the pack-header and node decoders (``format.pack.parse_header``,
    ``format.tree.decode_node``), and of building the nodes' ``Ref`` objects alone."""
    from snapstore import CheckpointManager
    from snapstore.manager import views
    from snapstore.format import pack as P
    from snapstore.format.tree import Ref, decode_node
    from snapstore.repo.arrays import ArrayReader
    from snapstore.repo.locate import Locator
    from snapstore.repo.locate import SegmentIndex
    from snapstore.repo.trees import TreeReader

    ArrayReader.read = lambda self, m, segs: None  # the tree path: the run's nodes are read
    datas = [p.read_bytes() for p in sorted(Path(spec["repo"], "packs").rglob("*")) if p.is_file()]
    bounds = []  # each pack's header [start, end), as Pack.parse finds it from the trailer
    for d in datas:
        hlen = P.TRAILER.unpack_from(d, len(d) - P.TRAILER.size)[0]
        bounds.append((len(d) - P.TRAILER_BYTES - hlen, len(d) - P.TRAILER_BYTES))
    clock = time.perf_counter
    t0 = clock()
    for d, (a, b) in zip(datas, bounds):
        P.parse_header("k", d, a, b, a)
    t1 = clock()
    # the run's nodes, as bytes (read with a throwaway manager, before the clock)
    mgr = CheckpointManager(spec["repo"])
    m = views.load_view(mgr, spec["run"]).head
    ls = mgr.repo.load_with_state(m)[1]
    raws = [mgr.repo.read_entry(P.T_NODE, nid, pk) for nid, pk in ls.nodes.items()]
    nitems = sum(len(decode_node(r)[1]) for r in raws)
    mgr.repo.trees.forget_nodes()
    ids = b"".join(r[-20 * 8:] for r in raws) * 4
    pk = bytes(8)
    new = tuple.__new__
    t3 = clock()
    for r in raws:
        decode_node(r)
    t4 = clock()
    out = [None] * nitems
    for i in range(nitems):
        out[i] = new(Ref, (ids[i * 16:i * 16 + 16], 1000, 1, 0, pk))
    t5 = clock()
    nent = sum(len(P.parse_header("k", d, a, b, a)[1]) for d, (a, b) in zip(datas, bounds))
    return {"entries": nent, "header_s": t1 - t0, "nodes": len(raws), "items": nitems, "nodes_s": t4 - t3,
            "refs_only_s": t5 - t4}


def measure_phases(trials: int = TRIALS["phases"], floors: bool = False, fixed_malloc: bool = False,
                   repo: str | None = None, pyc: bool = False) -> dict | None:
    """``--phases``: build the repository, run ``trials`` fresh children; medians per phase (or
    None without the shared trajectories).

    Args:
        trials: fresh children.
        floors: also the medians of :func:`floors_child` (as many more children).
        fixed_malloc: the children run with ``_lib.FIXED_MALLOC``.
        repo: a directory to build the repository in and keep (or to reuse, if built there before:
            pack ids are random, so an A/B of two checkouts should read the same one).
        pyc: the children import snapstore from bytecode compiled first (:func:`compile_checkout`).

    Raises:
        AssertionError: a child returned another number of messages than the run has.
    """
    fl = []
    with tempfile.TemporaryDirectory(prefix="local-read-phases-") as tmp:
        pycache = None
        if pyc:
            pycache = str(Path(tmp, "pycache"))
            compile_checkout(pycache)
        if repo is not None and Path(repo, "info.json").exists():
            info = json.loads(Path(repo, "info.json").read_text())
        else:
            if repo is not None:
                Path(repo).mkdir(parents=True, exist_ok=True)
            info = build(repo or tmp)
            if info is None:
                return None
            if repo is not None:
                Path(repo, "info.json").write_text(json.dumps(info))
        spec = {"task": "phases", "repo": info["repo"], "run": RUN}
        rows = []
        for _ in range(trials):
            rows.append(run_child(spec, pycache=pycache, fixed_malloc=fixed_malloc))
            if floors:
                fl.append(run_child(dict(spec, task="floors"), pycache=pycache, fixed_malloc=fixed_malloc))
    for r in rows:
        if r["count"] != info["messages"]:
            raise AssertionError("latest() returned the wrong number of messages")
    names = [q for _, q in WALK_PHASES] + ["load_with_state rest"]
    res = {"mode": "phases", "trials": trials, "fixed_malloc": fixed_malloc, "pyc": pyc, "messages": info["messages"],
           "packs": info["packs"], "total_s": _lib.median_of(rows, "wall_s"),
           "faults": _lib.median_of(rows, "faults"), "phases": {}}
    for q in names:
        res["phases"][q] = {"wall_s": _lib.median(r[q]["wall_s"] for r in rows), "calls": rows[0][q]["calls"],
                            "faults": _lib.median(r[q]["faults"] for r in rows)}
    if fl:
        res["floors"] = {k: (_lib.median_of(fl, k) if k.endswith("_s") else fl[0][k]) for k in fl[0]
                         if k != "process_s"}
    return res


def report_phases(r: dict) -> str:
    """The ``--phases`` result as text."""
    lines = [f"fresh latest() through the tree, {r['messages']} messages, {r['packs']} packs; medians of "
             f"{r['trials']} children{' (malloc thresholds fixed)' if r.get('fixed_malloc') else ''}"
             f"{' (snapstore from bytecode)' if r.get('pyc') else ''} (phases nest): total {r['total_s'] * 1e3:.2f} ms, "
             f"{r['faults']:.0f} page faults"]
    for q, p in r["phases"].items():
        lines.append(f"  {p['wall_s'] * 1e3:7.3f} ms {p['faults']:6.0f} flt {p['calls']:4d}x  {q}")
    f = r.get("floors")
    if f:
        ms = 1e3
        lines.append(f"  floors (fresh children, medians): {f['entries']} header entries: parse_header "
                     f"{f['header_s'] * ms:.3f} ms; {f['nodes']} nodes, {f['items']} items: decode_node "
                     f"{f['nodes_s'] * ms:.3f} ms, slicing ids and building Refs alone {f['refs_only_s'] * ms:.3f} ms")
    return "\n".join(lines)


# ==================================================================================================
# the command line


def main(argv=None) -> int:
    """``python benchmarks/local_read.py [--open | --phases] [options]``; the exit status."""
    if _lib.child_entry(argv, child_main):
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--open", action="store_true",
                      help="the steps of a fresh latest() before the segment packs (with --compare: per checkout)")
    mode.add_argument("--phases", action="store_true", help="per-phase medians of a fresh latest() through the tree")
    ap.add_argument("--trials", type=int, help="fresh children / interleaved trials (default: "
                    + ", ".join(f"{k} {v}" for k, v in TRIALS.items()) + ")")
    ap.add_argument("--json", help="write the results here")
    g = ap.add_argument_group("the read against json.load (default mode)")
    g.add_argument("--profile", action="store_true", help="also profile one fresh latest() (phases and cProfile)")
    g.add_argument("--source", action="store_true",
                   help="children compile snapstore from source (default: from bytecode, as installed)")
    g = ap.add_argument_group("--open")
    g.add_argument("--compare", help="another snapstore checkout to run interleaved children on")
    g = ap.add_argument_group("--phases")
    g.add_argument("--fixed-malloc", action="store_true", help="children with glibc's malloc thresholds fixed")
    g.add_argument("--pyc", action="store_true", help="children import snapstore from bytecode (as installed)")
    g.add_argument("--floors", action="store_true", help="also the decoders against their allocations alone")
    g.add_argument("--repo", help="build the repository here and keep it, or reuse the one built here before")
    args = ap.parse_args(argv)
    if args.open:
        return _lib.emit(measure_open(args.trials or TRIALS["open"], args.compare), report_open, args.json)
    if args.phases:
        r = measure_phases(args.trials or TRIALS["phases"], args.floors, args.fixed_malloc, args.repo, args.pyc)
        return _lib.emit(r, report_phases, args.json)
    if args.compare or args.fixed_malloc or args.pyc or args.floors or args.repo:
        ap.error("--compare belongs to --open; --fixed-malloc, --pyc, --floors and --repo to --phases")
    return _lib.emit(measure(args.trials or TRIALS["read"], args.profile, args.source), report, args.json)


if __name__ == "__main__":
    sys.exit(main())
