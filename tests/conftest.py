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


def use_format1_writes(monkeypatch) -> None:
    """Repositories created from here on have segments off (``seg_fanout=0``): every save's pack
    stays where its hints name it and GC repacks the per-save packs, as in a format-1 repository.
    For the tests of that machinery (forwarding map, repacking), which format-1 repositories still
    depend on; format 2's own paths are tested without it."""
    from snapstore.repo.repository import Repository
    orig = Repository.init.__func__

    def init(cls, store, exist_ok=False, **settings):
        settings.setdefault("seg_fanout", 0)
        return orig(cls, store, exist_ok, **settings)
    monkeypatch.setattr(Repository, "init", classmethod(init))


@pytest.fixture
def format1_writes(monkeypatch):
    """See :func:`use_format1_writes`."""
    use_format1_writes(monkeypatch)
