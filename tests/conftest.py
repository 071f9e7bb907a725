"""Shared pytest fixtures. S3 fixtures (moto in-process and moto's HTTP server) live in
tests/helpers/s3_fixtures.py; every helper lives in tests/helpers/."""

import pytest

from tests.helpers.format1 import use_format1_writes
from tests.helpers.s3_fixtures import *  # noqa: F401,F403
from tests.helpers.shared_data import shared_data_dir


@pytest.fixture
def shared_dir():
    d = shared_data_dir()
    if d is None:
        pytest.skip("shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
    return d


@pytest.fixture
def format1_writes(monkeypatch):
    """See :func:`use_format1_writes`."""
    use_format1_writes(monkeypatch)
