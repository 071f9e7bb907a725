"""Shared pytest fixtures. S3 fixtures (moto in-process and moto's HTTP server) live in s3_fixtures.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from s3_fixtures import *  # noqa: E402,F401,F403
from shared_data import shared_data_dir  # noqa: E402


@pytest.fixture
def shared_dir():
    d = shared_data_dir()
    if d is None:
        pytest.skip("shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
    return d
