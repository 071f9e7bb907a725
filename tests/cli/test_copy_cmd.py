"""``snapstore copy DEST`` (snapstore/cli/copy_cmd.py): a repository moved between a directory, a
SQLite file and S3 (moto's HTTP server) from the command line, and its one-line errors."""

from __future__ import annotations

import json
import socket

import boto3
import pytest

from snapstore import CheckpointManager
from snapstore.stores.local import LocalStore
from snapstore.stores.sqlite import SqliteStore

from tests.cli.test_cli import EXAMPLE, one_line_error, run
from tests.helpers.s3_fixtures import new_bucket_name


def keys_and_bytes(store) -> dict:
    return {o.key: store.get(o.key) for o in store.list("")}


@pytest.fixture
def src(tmp_path):
    repo = str(tmp_path / "src")
    run(repo, "import", str(EXAMPLE), "-q")
    return repo


def test_directory_to_db_and_back(src, tmp_path):
    db = str(tmp_path / "moved.db")
    r = run(src, "copy", db)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0].startswith("copied ") and lines[0].endswith(f"to sqlite://{db}") and lines[-1] == "verify: OK"
    assert keys_and_bytes(SqliteStore(db)) == keys_and_bytes(LocalStore(src))
    assert run(db, "runs").stdout == run(src, "runs").stdout
    again = run(src, "copy", db)
    assert "copied 0 objects" in again.stderr and "already there" in again.stderr

    back = str(tmp_path / "back")
    out = json.loads(run(db, "copy", back, "--json").stdout)
    assert out["verify"] == {"ok": True, "errors": [], "warnings": 0}
    assert out["copied"] == out["objects"] == len(keys_and_bytes(LocalStore(src))) and out["skipped"] == 0
    assert run(back, "export", run(src, "runs").stdout.split()[0]).stdout == \
        run(src, "export", run(src, "runs").stdout.split()[0]).stdout
    assert run(back, "copy", str(tmp_path / "q.db"), "-q").stderr == ""


def test_to_s3_over_moto_http(src, tmp_path, moto_server):
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/moved?endpoint_url={moto_server}&addressing_style=path&region=us-east-1"
    r = run(src, "copy", url)
    assert r.stderr.splitlines()[-1] == "verify: OK"
    assert run(url, "runs").stdout == run(src, "runs").stdout
    db = str(tmp_path / "from-s3.db")
    run(url, "copy", db)
    assert keys_and_bytes(SqliteStore(db)) == keys_and_bytes(LocalStore(src))


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_bad_destinations_are_one_line_errors(src, tmp_path, monkeypatch):
    one_line_error(run(src, "copy", src + "/", ok=False), 2, "same location")
    one_line_error(run(src, "copy", "", ok=False), 2, "DEST is empty")
    one_line_error(run(src, "copy", "ftp://host/x", ok=False), 2, "unsupported repository URL scheme")
    one_line_error(run(str(tmp_path / "none"), "copy", str(tmp_path / "d"), ok=False), 1, "no repository at")

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine")
    one_line_error(run(src, "copy", str(foreign), ok=False), 1, "thesis.tex")
    assert sorted(p.name for p in foreign.iterdir()) == ["thesis.tex"]

    other = str(tmp_path / "other.db")
    with CheckpointManager(other) as mgr:
        mgr.save("r", [{"role": "user", "content": "another repository"}])
    one_line_error(run(src, "copy", other, ok=False), 1, "holds another repository")

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = f"s3://bucket/prefix?endpoint_url=http://127.0.0.1:{_closed_port()}"
    one_line_error(run(src, "copy", url, ok=False), 1, "cannot reach the S3 endpoint")
