"""``snapstore export --bundle`` / ``import --bundle`` and ``snapstore unarchive`` as a user runs them:
real trajectories moved local -> S3 (moto's HTTP server) -> SQLite file exactly; a truncated file
is one error line and creates nothing; an existing run is refused; unarchive after archive and GC."""

from __future__ import annotations

import json

import boto3
from tests.cli.test_cli import EXAMPLE, one_line_error, run
from tests.helpers.s3_fixtures import new_bucket_name


def _all(repo) -> dict:
    out = {}
    for r in json.loads(run(repo, "runs", "--json").stdout):
        out[r] = (run(repo, "list", r, "--json").stdout,
                  [run(repo, "export", r, "-c", s["id"]).stdout_bytes
                   for s in json.loads(run(repo, "list", r, "--json").stdout)])
    return out


def test_bundle_round_trip_local_s3_sqlite(tmp_path, moto_server):
    local = str(tmp_path / "local")
    run(local, "import", str(EXAMPLE), "--run", "demo")
    run(local, "import", str(EXAMPLE), "--run", "other")
    cps = [s["id"] for s in json.loads(run(local, "list", "demo", "--json").stdout)]
    run(local, "rollback", "demo", cps[2])
    run(local, "fork", "demo", cps[3], "demo-fork")
    before = _all(local)
    runs = sorted(before)
    one = tmp_path / "one.snap"
    r = run(local, "export", "--bundle", *runs, "-o", str(one))
    assert f"to {one}" in r.stderr and one.is_file()
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    s3 = f"s3://{bucket}/agents?endpoint_url={moto_server}&addressing_style=path&region=us-east-1"

    def s3run(*args, ok=True):
        return run(s3, *args, ok=ok)
    assert "imported" in s3run("import", "--bundle", str(one)).stderr
    one_line_error(s3run("import", "--bundle", str(one), ok=False), code=1, contains="already has run")
    skipped = s3run("import", "--bundle", str(one), "--existing", "skip", "--json")
    assert sorted(json.loads(skipped.stdout)["skipped"]) == runs
    two = tmp_path / "two.snap"
    s3run("export", "--bundle", *runs, "-o", str(two))
    db = str(tmp_path / "agents.db")
    run(db, "import", "--bundle", str(two))
    assert _all(db) == before
    assert run(db, "verify", "--read-data").exit_code == 0


def test_bad_bundle_and_bad_options(tmp_path):
    src = str(tmp_path / "src")
    run(src, "import", str(EXAMPLE), "--run", "demo")
    path = tmp_path / "demo.snap"
    run(src, "export", "--bundle", "demo", "-o", str(path))
    cut = tmp_path / "cut.snap"
    cut.write_bytes(path.read_bytes()[:-20])
    dst = tmp_path / "dst"
    one_line_error(run(str(dst), "import", "--bundle", str(cut), ok=False), contains="truncated")
    assert not dst.exists()  # not even a repository was created
    one_line_error(run(src, "export", "--bundle", "demo", ok=False), code=2, contains="-o FILE")
    one_line_error(run(src, "export", "demo", "demo", ok=False), code=2, contains="--bundle")
    one_line_error(run(src, "export", "--bundle", "nope", "-o", str(tmp_path / "n.snap"), ok=False), contains="nope")
    one_line_error(run(src, "import", "--bundle", str(path), "--run", "x", ok=False), code=2, contains="--run")


def test_unarchive_command(tmp_path):
    repo = str(tmp_path / "repo")
    run(repo, "import", str(EXAMPLE), "--run", "demo")
    before = run(repo, "export", "demo").stdout_bytes
    run(repo, "archive", "demo")
    run(repo, "gc", "--grace-period", "0")
    run(repo, "gc", "--grace-period", "0")
    r = json.loads(run(repo, "unarchive", "demo", "--json").stdout)
    assert r["runs"] == ["demo"] and len(r["packs"]) == 1 and len(r["released"]) == 1
    run(repo, "gc", "--grace-period", "0")
    run(repo, "gc", "--grace-period", "0")
    assert run(repo, "export", "demo").stdout_bytes == before
    assert not list((tmp_path / "repo").rglob("archive/data/*/*/*"))  # the bundle went to GC
    assert "not archived" in run(repo, "unarchive", "demo").stdout
    assert run(repo, "verify", "--read-data").exit_code == 0


def test_export_bundle_all_runs_whatever_their_ids(tmp_path):
    from click.testing import CliRunner

    from snapstore import CheckpointManager
    from snapstore.cli import cli

    src, dst, f = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "all.snap")
    with CheckpointManager(src) as m:
        for r in ("my run", "x/y", "plain"):
            m.save(r, [{"role": "user", "content": r}])
    run = CliRunner()
    out = run.invoke(cli, ["--repo", src, "export", "--bundle", "--all", "-o", f])
    assert out.exit_code == 0, out.output
    assert run.invoke(cli, ["--repo", dst, "import", "--bundle", f]).exit_code == 0
    with CheckpointManager(dst) as m:
        assert sorted(m.runs()) == ["my run", "plain", "x/y"]
    bad = run.invoke(cli, ["--repo", src, "export", "--all", "plain", "--bundle", "-o", f])
    assert bad.exit_code == 2 and "not both" in bad.output


def test_bundle_progress_off_a_terminal_is_one_line_per_phase(tmp_path, monkeypatch):
    # a trial's import --bundle of 546 runs wrote 480 progress lines to a log file (one per run)
    from snapstore.cli import output

    src, dst, snap = str(tmp_path / "src"), str(tmp_path / "dst"), tmp_path / "all.snap"
    for i in range(4):
        run(src, "import", str(EXAMPLE), "--run", f"r{i}")
    clock = iter(range(0, 10**6, 7))  # 7 s between updates: past the 5 s quiet start at once
    monkeypatch.setattr(output.time, "monotonic", lambda: float(next(clock)))
    r = run(src, "export", "--bundle", "--all", "-o", str(snap))
    lines = [line for line in r.stderr.splitlines() if line.startswith("export --bundle:")]
    assert len(lines) == 1, r.stderr
    r = run(dst, "import", "--bundle", str(snap))
    lines = [line for line in r.stderr.splitlines() if line.startswith("import --bundle:")]
    assert len(lines) == 1, r.stderr
    assert json.loads(run(dst, "runs", "--json").stdout) == ["r0", "r1", "r2", "r3"]


def test_export_output_links_fifos_and_existing_files(tmp_path):
    """A trial's ``export --bundle RUN -o /dev/full`` said it wrote the bundle and left /dev/full a
    regular file; a FIFO and a symbolic link were replaced too. Now a link is written through (it
    stays a link), a FIFO is written in place (it stays a FIFO, its reader gets the bytes), a file
    that fails to take the bytes is one error line, and replacing an existing file is said."""
    import os
    import threading

    repo = str(tmp_path / "r")
    run(repo, "import", str(EXAMPLE), "--run", "demo")
    first = tmp_path / "a.snap"
    r = run(repo, "export", "--bundle", "demo", "-o", str(first))
    assert "replaced" not in r.stderr
    r = run(repo, "export", "--bundle", "demo", "-o", str(first))
    assert "replaced the file that was there" in r.stderr
    link = tmp_path / "link.snap"
    os.symlink(first, link)
    r = run(repo, "export", "--bundle", "demo", "-o", str(link))
    assert link.is_symlink() and os.readlink(link) == str(first) and f"replaced {first}" in r.stderr
    for args in (("export", "--bundle", "demo"), ("export", "demo")):
        fifo = tmp_path / f"pipe-{len(args)}"
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        run(repo, *args, "-o", str(fifo))
        reader.join(10)
        assert os.path.exists(fifo) and not os.path.isfile(fifo), "the FIFO was replaced by a file"
        if "--bundle" in args:  # (a bundle records when it was made: a whole one, not the same bytes)
            assert got and got[0][:8] == b"SNAPBNDL" and got[0].endswith(b"SNAPBEND")
            assert abs(len(got[0]) - first.stat().st_size) < 64
        else:
            assert got and got[0] == run(repo, "export", "demo").stdout_bytes
    if os.path.exists("/dev/full"):
        before = os.stat("/dev/full")
        r = run(repo, "export", "--bundle", "demo", "-o", "/dev/full", ok=False)
        after = os.stat("/dev/full")
        assert (after.st_mode, after.st_rdev) == (before.st_mode, before.st_rdev)  # still the device
        one_line_error(r, 1, "cannot write /dev/full")
