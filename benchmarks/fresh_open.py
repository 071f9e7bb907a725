"""Fresh-process cost of what ``latest()`` does before it reads the segment packs: the manager,
opening the repository, finding the run's newest record, and building the Checkpoint.

Run (from the repository root)::

    python benchmarks/fresh_open.py                 # 21 fresh children, medians per phase
    python benchmarks/fresh_open.py --trials 41 --json out.json

Setup: the same repository as ``benchmarks/local_read.py`` (the largest shared coding run, one
checkpoint per turn, saved into a temporary local repository: ``local_read.build``).

Measured: per trial, one fresh child process (``python benchmarks/fresh_open.py --child SPEC``
with this interpreter and this checkout's snapstore). Every module is imported before the clock
starts; the child then runs ``CheckpointManager(repo).latest(run)`` once with each phase's
function wrapped by a wall-clock (``time.perf_counter``) and page-fault (``getrusage``) counter,
as ``local_read.py --profile`` does. Phases (nested ones count in both):

* ``CheckpointManager()``: the manager (its store object; no request);
* ``Repository.open``: the config GET and parse, the hasher and the Repository object;
* ``load_view``: the LIST (limit 1) of the run's manifests, the manifest GET, envelope, zstd with
  the manifest dictionary, decode into a Manifest, resolving the head;
* ``LogRecords.head`` and ``Manifest.from_bytes``: the LIST + GET, and the decode alone;
* ``make_checkpoint``: the Checkpoint built after the read (session state included);
* ``before segments``: everything in ``latest()`` before ``load_with_state`` starts (the sum this
  benchmark is about), and ``latest()`` itself.

Figures are medians over ``--trials`` children (a busy 2-core machine makes single trials vary).
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
import local_read  # noqa: E402  (the same repository and child plumbing)

TRIALS = 21
PHASES = [
    ("snapstore.api", "CheckpointManager.__init__", "CheckpointManager() (store object, no request)"),
    ("snapstore.repository", "Repository.open", "config GET + parse, hasher, Repository"),
    ("snapstore.views", "load_view", "LIST limit 1 + manifest GET + decode + resolve"),
    ("snapstore.logrecords", "LogRecords.head", "  LIST limit 1 + manifest GET + decode"),
    ("snapstore.format.manifest", "Manifest.from_bytes", "  envelope + zstd (dictionary) + decode"),
    ("snapstore.reading", "make_checkpoint", "the Checkpoint (session state included)"),
]


def _faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child_main(spec: dict) -> dict:
    """One fresh-process ``latest()`` with the phases wrapped; per phase (wall s, faults, calls)."""
    import importlib

    sys.path.insert(0, str(local_read.REPO_ROOT))
    from snapstore import CheckpointManager
    from snapstore.repository import Repository

    acc: dict = {}
    mark: dict = {}

    def wrap(modname, qual):
        mod = importlib.import_module(modname)
        owner_name, _, name = qual.rpartition(".")
        owner = getattr(mod, owner_name) if owner_name else mod
        fn = owner.__dict__[name] if owner_name else getattr(mod, name)
        is_cm = isinstance(fn, classmethod)
        inner = fn.__func__ if is_cm else fn

        def timed(*a, **k):
            f0, t0 = _faults(), time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                rec = acc.setdefault(qual, [0.0, 0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += _faults() - f0
        setattr(owner, name, classmethod(timed) if is_cm else timed)
        if name == "make_checkpoint":  # imported by name in reading
            import snapstore.checkpoint as ck

            ck.make_checkpoint = timed

    for modname, qual, _ in PHASES:
        wrap(modname, qual)
    real_lws = Repository.load_with_state

    def lws(self, *a, **k):  # the boundary: segment packs start here
        mark.setdefault("segments_at", time.perf_counter())
        mark.setdefault("segments_faults", _faults())
        return real_lws(self, *a, **k)
    Repository.load_with_state = lws
    f0, t0 = _faults(), time.perf_counter()
    cp = CheckpointManager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, _faults() - f0
    out = {q: acc.get(q, [0.0, 0, 0]) for _, q, _ in PHASES}
    out["before segments"] = [mark["segments_at"] - t0, 1, mark["segments_faults"] - f0]
    out["latest()"] = [total, 1, faults]
    return {"count": len(cp.messages), "phases": out}


def measure(trials: int = TRIALS) -> dict | None:
    """Build the repository, run ``trials`` fresh children; medians per phase (seconds, faults),
    or None without the shared trajectories."""
    with tempfile.TemporaryDirectory(prefix="fresh-open-") as tmp:
        info = local_read.build(tmp)
        if info is None:
            return None
        rows = []
        for _ in range(trials):
            proc = local_read.subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child",
                 json.dumps({"repo": info["repo"], "run": local_read.RUN})],
                cwd=str(local_read.REPO_ROOT), env=local_read._child_env(), capture_output=True, text=True,
                timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            if out["count"] != info["messages"]:
                raise AssertionError("latest() returned the wrong history")
            rows.append(out["phases"])
    names = list(rows[0])
    med = {n: {"wall_s": statistics.median(r[n][0] for r in rows), "calls": rows[0][n][1],
               "faults": statistics.median(r[n][2] for r in rows)} for n in names}
    return {"file": info["file"], "checkpoints": info["checkpoints"], "messages": info["messages"],
            "trials": trials, "phases": med}


def report(r: dict) -> str:
    """The result as text."""
    what = {q: w for _, q, w in PHASES}
    what["before segments"] = "everything in latest() before the segment packs"
    what["latest()"] = "the whole read"
    lines = [f"fresh-process open: {r['file']}, {r['checkpoints']} checkpoints, {r['messages']} messages; "
             f"medians of {r['trials']} fresh children (phases nest):"]
    for n, p in r["phases"].items():
        lines.append(f"  {p['wall_s'] * 1e3:7.3f} ms {p['faults']:6.0f} flt {p['calls']:3d}x  {n:28s} {what.get(n, '')}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=TRIALS, help=f"fresh children (default {TRIALS})")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child_main(json.loads(args.child))))
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
