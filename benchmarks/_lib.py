"""What the benchmark scripts share: the fresh-process child runner, the commit stamp, medians and
ratios, and repository builders from the shared trajectories.

Every benchmark that times something in a fresh process re-runs its own script with ``--child
SPEC`` (SPEC: a JSON object); the child prints its result as the last line of stdout, as JSON
(:func:`child_entry` does both sides' plumbing, :func:`run_child` starts one). Nothing here
imports snapstore at module level, so a script can import this module before it chooses which
checkout's snapstore its children import.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import contextlib
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

DUMMY_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
             "AWS_SECURITY_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}
"""Dummy AWS credentials for moto (nothing leaves the machine)."""
UNSET_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "SNAPSTORE_URL")
"""Variables removed from a child's environment so that no real account or store is reached."""

FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}
"""glibc malloc thresholds fixed (32 MiB mmap, 256 MiB trim) instead of self-adjusting: page-fault
counts of a fresh process then repeat to within a fault or two (``local_read.py --phases``)."""

CODING_FORMATS = ("sweagent", "minisweagent", "openhands", "claudecode")
"""Trajectory formats (``snapstore.importers.load_trajectory``) of coding-agent runs."""


class ChildFailed(RuntimeError):
    """A benchmark child process exited with a non-zero status (its stderr's tail in the message)."""


# ==================================================================================================
# fresh-process children


def child_env(tree: str | Path = REPO_ROOT, pycache: str | None = None, s3: bool = False,
              extra: dict | None = None) -> dict:
    """The environment of a child process.

    Args:
        tree: the checkout whose ``snapstore`` the child imports (put first on ``PYTHONPATH``).
        pycache: a private bytecode cache directory (``PYTHONPYCACHEPREFIX``): the child imports
            snapstore from bytecode there, as an installed package does; None: as the parent does.
        s3: set :data:`DUMMY_ENV` and remove :data:`UNSET_ENV` (children that talk to moto).
        extra: more variables to set.

    Returns:
        A new dict (the parent's ``os.environ`` is not changed).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if pycache is not None:
        env["PYTHONPYCACHEPREFIX"] = pycache
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    if s3:
        env.update(DUMMY_ENV)
        for k in UNSET_ENV:
            env.pop(k, None)
    if extra:
        env.update(extra)
    return env


def compile_checkout(pycache: str, tree: str | Path = REPO_ROOT) -> None:
    """Compile ``tree/snapstore`` into the bytecode cache directory ``pycache`` (used as
    ``PYTHONPYCACHEPREFIX``; the checkout itself is not written to).

    Raises:
        subprocess.CalledProcessError: compileall failed.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(tree) / "snapstore")],
                   env=child_env(tree, pycache), check=True, timeout=600, capture_output=True)


def run_child(script: str | Path, spec: dict, *, env: dict | None = None, cwd: str | Path = REPO_ROOT,
              timeout: float = 600) -> dict:
    """Run ``python SCRIPT --child JSON(spec)`` in a fresh process and return its result.

    Args:
        script: the benchmark script (its ``main`` must hand ``--child`` to :func:`child_entry`).
        spec: what the child does (JSON-serialisable).
        env: the child's environment (default: :func:`child_env` of this checkout).
        cwd: the child's working directory.
        timeout: seconds before the child is killed.

    Returns:
        The JSON object the child printed last, plus ``process_s``: the child's wall time, spawn to
        exit (interpreter start and imports included), in seconds.

    Raises:
        ChildFailed: the child exited with a non-zero status.
        subprocess.TimeoutExpired: it ran longer than ``timeout``.
    """
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), "--child", json.dumps(spec)], cwd=str(cwd),
                          env=child_env() if env is None else env, capture_output=True, text=True, timeout=timeout)
    process_s = time.perf_counter() - t0
    if proc.returncode != 0:
        what = spec.get("task", "") if isinstance(spec, dict) else ""
        raise ChildFailed(f"child {Path(script).name} {what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if isinstance(out, dict):
        out["process_s"] = process_s
    return out


def child_entry(argv: list[str] | None, handler: Callable[[dict], object]) -> bool:
    """The child side of :func:`run_child`: if ``argv`` (default ``sys.argv[1:]``) is ``--child
    SPEC``, print ``json.dumps(handler(json.loads(SPEC)))`` and return True; else return False
    (the caller goes on as the parent)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--child":
        print(json.dumps(handler(json.loads(argv[1]))))
        return True
    return False


def page_faults() -> int:
    """Minor page faults of this process so far (``getrusage``)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# ==================================================================================================
# the commit stamp


def commit_stamp(paths: Iterable[str] = ("snapstore",), tree: str | Path = REPO_ROOT, full: bool = False) -> tuple[str, bool]:
    """``(commit, dirty)`` of the checkout ``tree``: its HEAD (short hash, or the full one with
    ``full``; ``"?"`` without git) and whether ``git status`` lists changes under ``paths``."""
    try:
        rev = subprocess.run(["git", "-C", str(tree), "rev-parse", *([] if full else ["--short"]), "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--", *paths],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return rev or "?", dirty
    except (OSError, subprocess.SubprocessError):
        return "?", False


def commit_label(paths: Iterable[str] = ("snapstore",)) -> str:
    """:func:`commit_stamp` as one string: ``"abc1234"`` or ``"abc1234 (+ uncommitted changes in
    snapstore/)"``."""
    paths = tuple(paths)
    rev, dirty = commit_stamp(paths)
    return rev + (f" (+ uncommitted changes in {', '.join(p.rstrip('/') + '/' for p in paths)})" if dirty else "")


def snapshot_package(dest: Path, code: str = "head") -> tuple[Path, str]:
    """Copy the snapstore package to ``dest/snapstore`` (``dest`` emptied first), so that edits in
    the working tree during a long run do not leak into the children that import it.

    Args:
        dest: the directory to put on the children's ``PYTHONPATH``.
        code: ``"head"`` or any git revision: the package as committed there (``git archive``);
            ``"worktree"``: the working tree as it is now.

    Returns:
        ``(dest, description)``: the description names the commit and the package's sha256.

    Raises:
        subprocess.CalledProcessError: ``git archive`` of ``code`` failed (an unknown revision).
    """
    import hashlib
    import shutil

    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    rev = "HEAD" if code in ("head", "worktree") else code
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", rev], capture_output=True, text=True).stdout.strip()
    if code != "worktree":
        arch = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", commit, "snapstore"], capture_output=True,
                              check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
        desc = f"commit {commit[:10]} ({rev}, committed code)"
    else:
        shutil.copytree(REPO_ROOT / "snapstore", dest / "snapstore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        desc = f"working tree at {commit[:10]}" + (" (with uncommitted changes)" if commit_stamp()[1] else "")
    h = hashlib.sha256()
    for f in sorted((dest / "snapstore").rglob("*.py")):
        h.update(str(f.relative_to(dest)).encode() + b"\0" + f.read_bytes())
    return dest, f"{desc}, package sha256 {h.hexdigest()[:12]}"


# ==================================================================================================
# medians and ratios


def median(xs: Iterable[float]) -> float:
    """The median of ``xs`` (NaN when empty, so a report of a skipped side still prints)."""
    xs = list(xs)
    return statistics.median(xs) if xs else math.nan


def median_of(rows: Iterable[dict], key: str) -> float:
    """The median of ``row[key]`` over ``rows`` (dicts; NaN when empty)."""
    return median(r[key] for r in rows)


def percentile(xs: Iterable[float], p: float) -> float:
    """The ``p``-th percentile (``p`` in percent, 0-100) of ``xs``: the sorted value at index
    ``round(p / 100 * (n - 1))`` (NaN when empty)."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else math.nan


def ratio(a: float, b: float) -> float:
    """``a / b``, or NaN when ``b`` is 0 (a side too fast to time)."""
    return a / b if b else math.nan


def quadratic_coefficients(xs: list, ys: list) -> tuple[float, float, float]:
    """``(a, b, c)`` of the least-squares fit ``a*x^2 + b*x + c`` through the points ``(xs, ys)``
    (``(0, 0, mean)`` when the system is singular). Solved from the normal equations, so the
    harness needs no numpy."""
    # scale x to [0, 1] for a well-conditioned 3x3 system, then undo the scaling
    m = float(max(abs(x) for x in xs)) or 1.0
    u = [x / m for x in xs]
    s = [sum(v ** k for v in u) for k in range(5)]
    t = [sum(y * v ** k for v, y in zip(u, ys)) for k in range(3)]
    A = [[s[4], s[3], s[2], t[2]], [s[3], s[2], s[1], t[1]], [s[2], s[1], s[0], t[0]]]
    for i in range(3):  # Gauss-Jordan with partial pivoting
        p = max(range(i, 3), key=lambda r: abs(A[r][i]))
        A[i], A[p] = A[p], A[i]
        if A[i][i] == 0:
            return (0.0, 0.0, sum(ys) / len(ys))
        for r in range(3):
            if r != i:
                f = A[r][i] / A[i][i]
                A[r] = [a - f * b for a, b in zip(A[r], A[i])]
    a, b, c = (A[i][3] / A[i][i] for i in range(3))
    return (a / (m * m), b / m, c)


def emit(r: dict | None, report_fn: Callable[[dict], str], json_path: str | None) -> int:
    """Print a benchmark's result (``report_fn(r)``), or that the shared trajectories are missing
    (``r`` None), and write ``r`` as JSON to ``json_path`` if given; the exit status (0)."""
    if r is None:
        print("skipped: shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
        return 0
    print(report_fn(r))
    if json_path:
        Path(json_path).write_text(json.dumps(r, indent=2))
    return 0


# ==================================================================================================
# repositories from the shared trajectories


def shared_dir() -> Path | None:
    """The shared trajectories directory (``../shared/data/trajectories`` beside the checkout, or
    ``$SNAPSTORE_SHARED_DATA``), or None without it (``tests/helpers/shared_data.py`` decides)."""
    sys.path.insert(0, str(REPO_ROOT))
    from tests.helpers.shared_data import shared_data_dir

    return shared_data_dir()


def largest_coding_run() -> tuple[Path, str, list, list] | None:
    """``(file, format, checkpoints, final history)`` of the coding-agent conversation with the
    largest final history (compact JSON bytes) among the shared trajectories (formats
    :data:`CODING_FORMATS`), or None without them. ``checkpoints``: the message list of each turn."""
    from snapstore.importers import load_trajectory

    d = shared_dir()
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


def save_run(repo: str, run: str, checkpoints: list) -> None:
    """Save ``checkpoints`` (message lists) into the local repository directory ``repo`` as run
    ``run``, one checkpoint per list with ``step`` its index (as ``snapstore import`` does)."""
    from snapstore import CheckpointManager

    mgr = CheckpointManager(repo)
    try:
        for i, cp in enumerate(checkpoints):
            mgr.save(run, cp, step=i)
    finally:
        mgr.close()


@contextlib.contextmanager
def counting_syncs():
    """Count every ``os.fsync`` and ``os.fdatasync`` call made while the block runs, except those
    of the directory store's settler thread (``snapstore-settler``: its syncs are off the save's
    path, docs/format.md §26). Yields a one-element list holding the count so far; the real
    functions are put back on exit."""
    calls = [0]
    real = (os.fsync, os.fdatasync)

    def counting(fn):
        def call(fd):
            if threading.current_thread().name != "snapstore-settler":
                calls[0] += 1
            return fn(fd)
        return call
    os.fsync, os.fdatasync = counting(real[0]), counting(real[1])
    try:
        yield calls
    finally:
        os.fsync, os.fdatasync = real
