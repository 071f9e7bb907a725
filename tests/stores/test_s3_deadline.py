"""An S3 endpoint that accepts connections and never answers (issue 20): one API call gives up
within its time budget (``call_timeout``, default 60 s, botocore's retries included) with a
StoreError naming the endpoint and what it waited for; ``snapstore serve`` refuses to start."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import StoreError
from snapstore.stores.s3 import DEFAULT_CALL_TIMEOUT, S3Store, attempts_within
from tests.helpers import paths

ROOT = paths.ROOT


@pytest.fixture
def silent_endpoint():
    """``http://127.0.0.1:PORT``: accepts every connection, reads, never sends a byte."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.fixture(autouse=True)
def creds(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_default_bound_is_within_60_seconds():
    store = S3Store("bkt", endpoint_url="http://127.0.0.1:9", region_name="us-east-1")
    assert DEFAULT_CALL_TIMEOUT <= 60
    assert store.call_time_bound <= 60 and store.attempts >= 2, (store.call_time_bound, store.attempts)
    cfg = store._client.meta.config
    assert cfg.retries["total_max_attempts"] == store.attempts
    assert store.attempts * (cfg.connect_timeout + cfg.read_timeout) <= store.call_time_bound
    # the old defaults (60 s read timeout, 10 retries: 668 s measured) are cut to what fits
    assert attempts_within(60, 10, 60, 10) == 1
    assert attempts_within(60, 4, 12, 10) == 3


def test_one_api_call_gives_up_in_its_budget(silent_endpoint):
    url = f"s3://bkt/x?endpoint={silent_endpoint}&call_timeout=3&read_timeout=1&connect_timeout=1"
    mgr = CheckpointManager(url)
    t0 = time.monotonic()
    with pytest.raises(StoreError) as e:
        mgr.latest("r")
    took = time.monotonic() - t0
    mgr.close()
    assert took < 3 + 2, took
    msg = str(e.value)
    assert silent_endpoint in msg and "read_timeout" in msg and "sent no response" in msg, msg
    assert "\n" not in msg


def test_serve_refuses_an_unreachable_store(silent_endpoint, tmp_path):
    url = f"s3://bkt/x?endpoint={silent_endpoint}"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", url, "serve", "--no-auth", "--port", "0"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 30
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith("snapstore: error:") and "127.0.0.1" in r.stderr, r.stderr
    assert "serving" not in r.stderr
