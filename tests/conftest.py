"""Shared pytest fixtures. S3 fixtures (moto in-process and moto's HTTP server) live in
tests/helpers/s3_fixtures.py; every helper lives in tests/helpers/."""

import pytest

from tests.helpers.format1 import use_format1_writes
from tests.helpers.s3_fixtures import *  # noqa: F401,F403
from tests.helpers.shared_data import shared_data_dir


@pytest.fixture(autouse=True)
def _fanout_of_earlier_releases(request, monkeypatch):
    """Repositories a test creates get ``seg_fanout`` 4, the default of earlier releases and the
    fanout of the repositories they created, which this version keeps reading and writing: the
    suite's counts of merges, tier packs and GC rewrites were written for it. Tests marked
    ``new_fanout`` (tests/repo/test_fanout.py) create repositories with this version's default
    (:data:`snapstore.format.config.NEW_SEG_FANOUT`); so do child processes."""
    if request.node.get_closest_marker("new_fanout") is None:
        monkeypatch.setattr("snapstore.repo.repository.NEW_SEG_FANOUT", 4)


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
