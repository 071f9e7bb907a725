"""Shared pytest fixtures. S3 fixtures (moto in-process and moto's HTTP server) live in s3_fixtures.py."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from s3_fixtures import *  # noqa: E402,F401,F403


def shared_data_dir() -> Path | None:
    """The shared trajectories directory (``../shared/data/trajectories``) or ``$SNAPSTORE_SHARED_DATA``."""
    env = os.environ.get("SNAPSTORE_SHARED_DATA")
    if env and Path(env).is_dir():
        return Path(env)
    p = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "trajectories"
    return p if p.is_dir() else None


@pytest.fixture
def shared_dir():
    d = shared_data_dir()
    if d is None:
        pytest.skip("shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
    return d
