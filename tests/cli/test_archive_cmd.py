"""``snapstore archive`` and ``snapstore restore`` as a user runs them: a real trajectory archived,
GC'd, exported exactly; on moto's HTTP server in DEEP_ARCHIVE: the read error names the restore
command, restore makes the run readable."""

from __future__ import annotations

import json
import shlex

import boto3
from tests.cli.test_cli import EXAMPLE, OPENHANDS, one_line_error, run
from tests.helpers.s3_fixtures import new_bucket_name


def test_archive_gc_export_is_exact(tmp_path):
    repo = str(tmp_path / "repo")
    run(repo, "import", str(EXAMPLE), "--run", "demo")
    if OPENHANDS.is_file():
        run(repo, "import", str(OPENHANDS))
    before = tmp_path / "before.json"
    run(repo, "export", "demo", "-o", str(before))
    r = json.loads(run(repo, "archive", "demo", "--finished-before", "2000-01-01", "--json").stdout)
    assert r["runs"] == [] and r["skipped"]["demo"].startswith("still active: its newest checkpoint (")
    one_line_error(run(repo, "archive", "no-such-run", ok=False), contains="no-such-run")
    assert "archived" not in json.loads(run(repo, "show", "demo", "--json").stdout)
    r = json.loads(run(repo, "archive", "--storage-class", "STANDARD_IA", "--json").stdout)
    assert "demo" in r["runs"] and len(r["bundles"]) == 1 and r["storage_class"] == "STANDARD_IA"
    shown = json.loads(run(repo, "show", "demo", "--json").stdout)["archived"]  # show says it is archived
    assert shown["readable"] and [b["bundle"] for b in shown["bundles"]] == r["bundles"], shown
    assert "(STANDARD_IA)" in run(repo, "show", "demo").stdout.split("archived:")[1]
    run(repo, "gc", "--grace-period", "0")
    run(repo, "gc", "--grace-period", "0")
    after = tmp_path / "after.json"
    run(repo, "export", "demo", "-o", str(after))
    assert before.read_bytes() == after.read_bytes()
    assert run(repo, "verify", "--read-data").exit_code == 0
    assert not [p for p in (tmp_path / "repo" / "packs").rglob("*") if p.is_file()]  # hot copy reclaimed


def test_deep_archive_read_error_then_restore(tmp_path, moto_server):
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/r?endpoint_url={moto_server}&addressing_style=path&region=us-east-1"
    run(url, "import", str(EXAMPLE), "--run", "demo")
    before = tmp_path / "before.json"
    run(url, "export", "demo", "-o", str(before))
    run(url, "archive", "demo", "--storage-class", "DEEP_ARCHIVE")
    run(url, "gc", "--grace-period", "0")
    run(url, "gc", "--grace-period", "0")
    assert "demo" in run(url, "runs").stdout  # listing reads no cold object
    # show and prune --run answer from the hot summaries, and show says the data is cold
    shown = run(url, "show", "demo").stdout
    assert "archived" in shown and f"snapstore --repo {shlex.quote(url)} restore demo" in shown and "messages" in shown, shown
    d = json.loads(run(url, "show", "demo", "--json").stdout)
    assert d["archived"]["readable"] is False and d["message_count"] > 0
    assert run(url, "prune", "--keep-last", "100", "--run", "demo", "-n").exit_code == 0
    one_line_error(run(url, "export", "demo", "-o", str(tmp_path / "x.json"), ok=False),
                   contains=f"snapstore --repo {shlex.quote(url)} restore demo")
    r = json.loads(run(url, "restore", "demo", "--tier", "bulk", "--days", "1", "--json", ok=False).stdout)
    assert set(r["bundles"].values()) <= {"requested", "restored"}
    r = json.loads(run(url, "restore", "demo", "--json").stdout)
    assert r["done"] is True
    after = tmp_path / "after.json"
    run(url, "export", "demo", "-o", str(after))
    assert before.read_bytes() == after.read_bytes()


def test_gc_holds_a_dead_deep_archive_bundle_until_forced(tmp_path, moto_server):
    """A user deletes an archived run whose bundle is in DEEP_ARCHIVE: gc keeps the bundle for
    the class's 180 days and says what deleting it now would cost; gc --force deletes it and says
    what it cost."""
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/r?endpoint_url={moto_server}&addressing_style=path&region=us-east-1"
    run(url, "import", str(EXAMPLE), "--run", "demo")
    run(url, "archive", "demo", "--storage-class", "DEEP_ARCHIVE")
    run(url, "gc", "--grace-period", "0")
    run(url, "delete", "demo", "--yes")
    out = run(url, "gc", "--grace-period", "0").stdout
    print(out)
    assert "1 dead archive bundle kept for the storage class's minimum duration (180.0 days left" in out
    assert "would cost $" in out and "snapstore gc --force" in out
    r = json.loads(run(url, "gc", "--grace-period", "0", "--json").stdout)
    assert len(r["held_bundles"]) == 1 and r["held_bundles"][0]["class"] == "DEEP_ARCHIVE" and r["held_fee"] > 0
    out = run(url, "gc", "--grace-period", "0", "--force").stdout
    print(out)
    assert "early-deletion fee for the bundles --force deleted" in out and "1 archive bundle" in out
    r = json.loads(run(url, "gc", "--grace-period", "0", "--json").stdout)
    assert r["held_bundles"] == [] and r["deleted"].get("bundles", 0) == 0
    assert run(url, "verify").exit_code == 0
