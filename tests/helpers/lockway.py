"""Forcing the directory store journal's flock(2) fallback (snapstore/stores/walocks.py) on Linux:
the OFD lock constants removed from ``fcntl`` in this process, and for child processes a
``sitecustomize`` on their PYTHONPATH that removes them before snapstore is imported."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

NOOFD = Path(__file__).parent / "noofd"


def force_flock(monkeypatch) -> None:
    """Remove ``F_OFD_SETLK``/``F_OFD_SETLKW`` from fcntl for this test (restored after it)."""
    for name in ("F_OFD_SETLK", "F_OFD_SETLKW", "F_OFD_GETLK"):
        if hasattr(fcntl, name):
            monkeypatch.delattr(fcntl, name)


def child_pythonpath(root: str | os.PathLike) -> str:
    """A PYTHONPATH for a child process that imports snapstore from ``root`` with no OFD locks."""
    return os.pathsep.join([str(NOOFD), str(root)])
