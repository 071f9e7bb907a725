"""Shared by the benchmarks that run snapstore in child processes (gc.py, load_test.py): a frozen
copy of the package to measure, so edits in the working tree during a long run do not leak in."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def snapshot_package(dest: Path, code: str = "head") -> tuple[Path, str]:
    """Copy the snapstore package to ``dest/snapstore``; return ``(dest, description)``.

    ``code="head"`` (or any git revision): the package as committed there (``git archive``,
    read-only), so edits in progress in the working tree are not measured; ``"worktree"``: the
    working tree as it is now.
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    rev = "HEAD" if code == "head" else code
    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD" if code == "worktree" else rev],
                            capture_output=True, text=True).stdout.strip()
    if code != "worktree":
        arch = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", commit, "snapstore"], capture_output=True,
                              check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
        desc = f"commit {commit[:10]} ({rev}, committed code)"
    else:
        shutil.copytree(REPO_ROOT / "snapstore", dest / "snapstore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "snapstore"],
                               capture_output=True, text=True).stdout.strip()
        desc = f"working tree at {commit[:10]}" + (" (with uncommitted changes)" if dirty else "")
    h = hashlib.sha256()
    for f in sorted((dest / "snapstore").rglob("*.py")):
        h.update(str(f.relative_to(dest)).encode() + b"\0" + f.read_bytes())
    return dest, f"{desc}, package sha256 {h.hexdigest()[:12]}"
