"""Where the shared agent trajectories are: ``$SNAPSTORE_SHARED_DATA`` (the trajectories directory,
or a directory holding ``trajectories/`` or ``data/trajectories/``), else ``../shared/data/trajectories``
beside the project. Tests that need them skip when neither exists."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "trajectories"


def shared_data_dir() -> Path | None:
    """The shared trajectories directory, or None."""
    env = os.environ.get("SNAPSTORE_SHARED_DATA")
    if env:
        for path in (Path(env), Path(env) / "trajectories", Path(env) / "data" / "trajectories"):
            if path.is_dir() and any(p.is_file() and p.suffix != ".md" for p in path.iterdir()):
                return path
    return DEFAULT if DEFAULT.is_dir() else None


SHARED = shared_data_dir() or DEFAULT
"""The directory to read from (the default location when there is none, so paths still name the
file that is missing in skip messages)."""
