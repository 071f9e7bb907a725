"""`snapstore serve` on an encrypted repository (docs/format.md §27), as a real process with
``$SNAPSTORE_PASSPHRASE``: saves and reads over HTTP, nothing stored in the clear, and the data
read back by a manager with the passphrase; a wrong or missing passphrase is one line and exit 1
before the service listens."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from snapstore import CheckpointManager  # noqa: E402
from snapstore.stores import LocalStore  # noqa: E402
from tests.helpers import paths  # noqa: E402
from tests.helpers.server_fixtures import TOKEN, auth, wait_healthy  # noqa: E402

MARKER = "IBEX-CANARY-0442"
PW = "service passphrase"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmd(repo: Path, *args, passphrase=None):
    env = {k: v for k, v in os.environ.items() if k not in ("SNAPSTORE_TOKEN", "SNAPSTORE_PASSPHRASE")}
    env["SNAPSTORE_TOKEN"] = TOKEN
    if passphrase is not None:
        env["SNAPSTORE_PASSPHRASE"] = passphrase
    return [sys.executable, "-m", "snapstore", "--repo", str(repo), *args], dict(cwd=paths.ROOT, env=env)


def test_serve_an_encrypted_repository(tmp_path):
    repo = tmp_path / "repo"
    cmd, kw = _cmd(repo, "init", "--encrypt", passphrase=PW)
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw).returncode == 0
    port = _port()
    cmd, kw = _cmd(repo, "serve", "--port", str(port), "--log-level", "warning", passphrase=PW)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    msgs = [{"role": "user", "content": f"{MARKER} question"}, {"role": "assistant", "content": f"{MARKER} answer"}]
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, 60)
        r = httpx.post(url + "/runs/secret/checkpoints", headers=auth(), json={"messages": msgs}, timeout=30)
        assert r.status_code == 201, r.text
        cid = r.json()["id"]
        got = httpx.get(url + f"/runs/secret/checkpoints/{cid}/messages", headers=auth(), timeout=30)
        assert got.status_code == 200 and got.json()["messages"] == msgs
    finally:
        proc.terminate()
        proc.wait(20)
    store = LocalStore(str(repo))
    raw = {i.key: store.get(i.key) for i in store.list("")}
    store.close()
    assert len(raw) > 3 and not [k for k, v in raw.items() if MARKER.encode() in v]
    assert CheckpointManager(str(repo), passphrase=PW).latest("secret").messages == msgs
    for pw, needle in (("not it", "wrong passphrase"), (None, "is encrypted")):
        cmd, kw = _cmd(repo, "serve", "--port", str(_port()), passphrase=pw)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
        assert p.returncode == 1 and needle in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
