"""An earlier release of the package, for tests that read what it wrote (or that it reads what we write)."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def extract_release(commit: str, base: Path) -> Path:
    """Extract ``snapstore/`` as of ``commit`` (``git archive``) below ``base``; return the directory
    to put on ``PYTHONPATH``. Skips the test when that commit is not in the clone (shallow clone)."""
    try:
        tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "snapstore"],
                             capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"git archive of {commit} not available (shallow clone?)")
    src = base / "src"
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(src, filter="data") if sys.version_info >= (3, 12) else t.extractall(src)
    return src
