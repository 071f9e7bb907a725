"""Fresh-process cost of what ``latest()`` does before it reads the segment packs: the manager,
opening the repository and finding the run's newest record; beside it, the rest of the read.

Run (from the repository root)::

    python benchmarks/fresh_open.py                          # 31 fresh children, medians per step
    python benchmarks/fresh_open.py --compare ../other-checkout --json out.json

Setup: the same repository as ``benchmarks/local_read.py`` (the largest shared coding run, one
checkpoint per turn, saved into a temporary local repository: ``local_read.build``).

Measured: per trial, one fresh child process (this interpreter; ``import snapstore`` and every
module done before the clock). The child runs the steps of ``reading.latest`` one after another
and reads ``time.perf_counter`` (and the minor page faults, ``getrusage``) between them, with
nothing wrapped, so no timer sits inside a step:

* ``manager``: ``CheckpointManager(repo)`` (its store object; no request);
* ``open``: ``mgr.state.exists()`` under the run's lock: the config GET and parse, the hasher, the
  Repository object (``Repository.open``);
* ``newest record``: ``views.load_view``: the LIST (limit 1) of the run's manifests, the manifest
  GET, envelope, zstd with the manifest dictionary, decode into a Manifest, resolving the head;
* ``before segments``: the three above (what this benchmark is about);
* ``segments + messages``: ``repo.load_with_state`` (segment packs, tree walk, every message);
* ``checkpoint``: ``make_checkpoint`` (the Checkpoint, session state included);
* ``total``: all of it.

With ``--compare DIR`` (another checkout of snapstore, e.g. ``git worktree add ../base
<commit>``), each trial also runs one child on that checkout's snapstore, in alternating order,
and both columns are printed. Figures are medians over ``--trials`` trials (a busy 2-core machine
makes single trials vary by 2x).
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
sys.path.insert(0, str(HERE))
import local_read  # noqa: E402  (the same repository)

TRIALS = 31
STEPS = ["manager", "open", "newest record", "before segments", "segments + messages", "checkpoint", "total"]


def child_main(spec: dict) -> dict:
    """One fresh-process read, timed between its steps: ``{step: [wall s, page faults]}``."""
    import resource

    from snapstore import CheckpointManager
    from snapstore.manager import views
    from snapstore.manager.read import make_checkpoint

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    clock = time.perf_counter
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
    import snapstore

    return {"count": len(cp.messages), "steps": steps, "snapstore": os.path.dirname(os.path.dirname(snapstore.__file__))}


def _child(tree: Path, spec: dict) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          cwd=str(tree), env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(trials: int = TRIALS, compare: str | None = None) -> dict | None:
    """Build the repository, run ``trials`` fresh children (and as many on ``compare``, another
    checkout, interleaved); medians per step (seconds, page faults) per checkout, or None without
    the shared trajectories.

    Raises:
        AssertionError: a child returned another number of messages than the run has.
        ValueError: ``compare`` is this checkout or holds no snapstore.
    """
    trees = [local_read.REPO_ROOT] + ([Path(compare).resolve()] if compare else [])
    if len(set(trees)) != len(trees):
        raise ValueError(f"--compare {compare} is this checkout")
    if compare and not (trees[1] / "snapstore" / "__init__.py").is_file():
        raise ValueError(f"--compare {compare}: no snapstore checkout there")
    with tempfile.TemporaryDirectory(prefix="fresh-open-") as tmp:
        info = local_read.build(tmp)
        if info is None:
            return None
        spec = {"repo": info["repo"], "run": local_read.RUN}
        rows: dict = {str(t): [] for t in trees}
        for i in range(trials):
            for t in (trees if i % 2 == 0 else trees[::-1]):
                out = _child(t, spec)
                if out["count"] != info["messages"]:
                    raise AssertionError("latest() returned the wrong history")
                if Path(out["snapstore"]).resolve() != t:
                    raise AssertionError(f"the child for {t} imported the snapstore of {out['snapstore']}")
                rows[str(t)].append(out["steps"])
    med = {t: {s: {"wall_s": statistics.median(r[s][0] for r in rs), "faults": statistics.median(r[s][1] for r in rs)}
               for s in STEPS} for t, rs in rows.items()}
    return {"file": info["file"], "checkpoints": info["checkpoints"], "messages": info["messages"],
            "trials": trials, "trees": [str(t) for t in trees], "steps": med}


def report(r: dict) -> str:
    """The result as text."""
    trees = r["trees"]
    lines = [f"fresh-process latest(): {r['file']}, {r['checkpoints']} checkpoints, {r['messages']} messages; "
             f"medians of {r['trials']} fresh children" + (" per checkout, interleaved" if len(trees) > 1 else ""),
             f"  {'step':22s}" + "".join(f"{('this checkout' if i == 0 else os.path.basename(t.rstrip('/'))):>24s}"
                                       for i, t in enumerate(trees))]
    for s in STEPS:
        lines.append(f"  {s:22s}" + "".join(f"{r['steps'][t][s]['wall_s'] * 1e3:11.3f} ms {r['steps'][t][s]['faults']:6.0f} flt"
                                            for t in trees))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=TRIALS, help=f"fresh children (default {TRIALS})")
    ap.add_argument("--compare", help="another snapstore checkout to run interleaved children on")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_main(json.loads(args.child))))
        return 0
    return local_read.emit(measure(args.trials, args.compare), report, args.json)


if __name__ == "__main__":
    sys.exit(main())
