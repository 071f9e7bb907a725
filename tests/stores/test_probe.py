"""snapstore.stores.probe: the checks a command makes on a location before it uses it (the S3
reachability probe, and "does this location hold files that are not a repository"), on real
stores: a local directory, memory, and an S3 bucket of moto's HTTP server."""

from __future__ import annotations

import os
import socket
import time

import pytest

from snapstore.errors import StoreError
from snapstore.repo.repository import Repository
from snapstore.stores.probe import find_foreign_content, probe_store


@pytest.mark.parametrize("kind", ["local", "memory", "s3-http"])
def test_foreign_content_is_found_and_a_repository_is_not(kind, store_factory):
    store = store_factory(kind)
    assert find_foreign_content(store) is None  # empty (a local directory that does not exist yet)
    store.put("notes.txt", b"mine")
    assert find_foreign_content(store) == "notes.txt"
    Repository.init(store, exist_ok=True)  # a repository beside other files is not foreign
    assert find_foreign_content(store) is None


def test_an_interrupted_inits_leftovers_are_not_foreign(store_factory):
    store = store_factory("local")
    root = store.root
    os.makedirs(os.path.join(root, ".locks"))
    with open(os.path.join(root, ".tmp-0123456789abcdef"), "wb") as f:
        f.write(b"partial config")
    assert find_foreign_content(store) is None
    with open(os.path.join(root, ".hidden"), "wb") as f:
        f.write(b"x")
    assert find_foreign_content(store) == ".hidden"


def test_probe_passes_a_reachable_bucket_and_ignores_other_locations(moto_server, store_factory, tmp_path):
    store = store_factory("s3-http")
    probe_store(f"s3://{store.bucket}?endpoint_url={moto_server}&addressing_style=path")  # no config yet: fine
    Repository.init(store)
    probe_store(f"s3://{store.bucket}?endpoint_url={moto_server}&addressing_style=path")
    probe_store(str(tmp_path / "nowhere"))  # not S3: not probed, nothing created
    probe_store("memory://")
    assert not (tmp_path / "nowhere").exists()


def test_probe_of_a_refused_endpoint_fails_fast(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(StoreError, match="gave up after"):
        probe_store(f"s3://bucket/prefix?endpoint_url=http://127.0.0.1:{port}")
    assert time.monotonic() - t0 < 5
