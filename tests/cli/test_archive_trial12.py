"""Rough edges of ``snapstore archive`` and its neighbours a new user found (trial 12), through the
real command line: a line per skipped run, ``archive --dry-run`` choosing what the real run
chooses and writing nothing, plain ``verify`` saying it read no bundle, ``stats --cost`` sizes
that do not round to zero, a large run in a bundle of its own, ``gc``'s summary naming what each
number counts, ``prune --keep-last 0`` refused with what to use instead."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from snapstore import CheckpointManager
from tests.cli.test_cli import EXAMPLE, one_line_error, run


def _listing(root: Path) -> list[tuple[str, str]]:
    """Every file under ``root`` with the digest of its bytes, in path order."""
    return sorted((str(p.relative_to(root)), hashlib.sha256(p.read_bytes()).hexdigest())
                  for p in root.rglob("*") if p.is_file())


def _repo_with_runs(tmp_path) -> str:
    repo = str(tmp_path / "repo")
    run(repo, "import", str(EXAMPLE), "--run", "demo")
    mgr = CheckpointManager(repo)
    for i in range(3):
        mgr.save(f"small-{i}", [{"role": "user", "content": f"small run {i} " * 20}])
    return repo


def test_archive_prints_a_line_per_skipped_run_and_counts_them(tmp_path):
    repo = _repo_with_runs(tmp_path)
    run(repo, "archive", "small-0")
    out = run(repo, "archive", "--finished-before", "2000-01-01").stdout
    lines = out.splitlines()
    assert lines[0].split(":", 1)[1].strip() == "0 runs, 0 checkpoints; 4 runs skipped", out
    skipped = [x.split(":", 1)[1].strip() for x in lines if x.startswith("skipped:")]
    assert len(skipped) == 4 and skipped[0] == "demo (still active: its newest checkpoint (" + \
        skipped[0].split("(", 2)[2], out
    assert "small-0 (already archived)" in skipped, out
    out = run(repo, "archive").stdout
    assert "3 runs, " in out.splitlines()[0] and "; 1 run skipped" in out.splitlines()[0], out
    assert [x for x in out.splitlines() if x.startswith("skipped:")] == \
        ["skipped:             small-0 (already archived)"], out


def test_archive_dry_run_selects_what_the_real_run_archives_and_writes_nothing(tmp_path):
    repo = _repo_with_runs(tmp_path)
    run(repo, "archive", "small-1")
    before = _listing(tmp_path / "repo")
    dry = json.loads(run(repo, "archive", "-n", "--storage-class", "STANDARD_IA", "--expire-after", "400",
                         "--json").stdout)
    text = run(repo, "archive", "--dry-run", "--storage-class", "STANDARD_IA", "--expire-after", "400").stdout
    assert _listing(tmp_path / "repo") == before  # byte-identical: nothing written, nothing removed
    assert text.startswith("dry run: nothing was written\n") and "skipped:" in text and "small-1" in text
    assert dry["dry_run"] is True and dry["storage_class"] == "STANDARD_IA" and dry["skipped"] == {
        "small-1": "already archived"}
    assert all(b["key"].startswith("archive/data/default/") and b["key"].endswith("/<id>") for b in dry["bundles"])
    assert dry["raw_bytes"] > 0 and dry["hot_bytes"] > 0 and len(dry["bundles"]) == 1
    real = json.loads(run(repo, "archive", "--storage-class", "STANDARD_IA", "--expire-after", "400",
                          "--json").stdout)
    assert sorted(real["runs"]) == sorted(dry["runs"]) == ["demo", "small-0", "small-2"]
    assert real["skipped"] == dry["skipped"] and real["checkpoints"] == dry["checkpoints"]
    assert len(real["bundles"]) == len(dry["bundles"])
    assert [k.rsplit("/", 1)[0] for k in real["bundles"]] == [k["key"].rsplit("/", 1)[0] for k in dry["bundles"]]
    assert real["bytes_before"] == dry["hot_bytes"]


def test_archive_dry_run_with_a_policy_prunes_nothing(tmp_path):
    repo = _repo_with_runs(tmp_path)
    n = len(json.loads(run(repo, "list", "demo", "--json").stdout))
    before = _listing(tmp_path / "repo")
    dry = json.loads(run(repo, "archive", "demo", "-n", "--keep-last", "1", "--json").stdout)
    assert _listing(tmp_path / "repo") == before
    assert len(dry["pruned"]) == n - 1 and dry["checkpoints"] == 1 and dry["runs"] == ["demo"]
    assert len(json.loads(run(repo, "list", "demo", "--json").stdout)) == n


def test_plain_verify_says_it_read_no_bundle_and_what_does(tmp_path):
    repo = _repo_with_runs(tmp_path)
    assert "bundle" not in run(repo, "verify").stdout  # nothing archived: no note
    run(repo, "archive", "demo")
    run(repo, "archive", "--bundle-min", "1")  # the three small runs, a bundle each
    out = run(repo, "verify").stdout
    notes = [x for x in out.splitlines() if x.startswith("note:")]
    assert notes == ["note: 4 archive bundles not read (only their size checked against the index record); "
                     "'snapstore verify --read-data' reads and checks them"], out
    assert out.splitlines()[-1].startswith("OK: ")
    assert json.loads(run(repo, "verify", "--json").stdout)["bundles_not_read"] == 4
    deep = run(repo, "verify", "--read-data")
    assert "note:" not in deep.stdout and json.loads(run(repo, "verify", "--read-data", "--json").stdout)[
        "bundles_not_read"] == 0


def test_stats_cost_of_a_small_repository_shows_its_sizes_and_costs(tmp_path):
    repo = str(tmp_path / "repo")
    CheckpointManager(repo).save("t", [{"role": "user", "content": "hi"}])
    run(repo, "archive", "t")
    out = run(repo, "stats", "--cost").stdout
    line = next(x for x in out.splitlines() if x.startswith("restore once:"))
    assert "0.0000 GB" not in out and " B retrieved)" in line, line
    size = int(line.rsplit("standard tier, ", 1)[1].split(" B retrieved")[0])
    assert size == json.loads(run(repo, "stats", "--cost", "--json").stdout)["bill"]["classes"]["GLACIER_IR"]["bytes"]
    assert "$0 " not in out.replace("DELETE $0 per", "")  # no cost printed as zero: each is above it


def test_usd_never_rounds_a_cost_to_zero():
    from snapstore.cli.output import usd
    assert usd(0) == "$0" and usd(1.5) == "$1.50" and usd(0.00022) == "$0.00022"
    assert usd(3.2e-12) == "$3.2e-12" and usd(2.7e-8) == "$0.000000027"


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _summary(out: str) -> str:
    return next(x for x in out.splitlines() if x.startswith("summary:")).split(":", 1)[1].strip()


def test_gc_summary_says_what_each_count_counts(tmp_path):
    repo = _repo_with_runs(tmp_path)
    run(repo, "archive", "small-0")
    first = run(repo, "gc")
    d = json.loads(run(repo, "gc", "--json").stdout)
    assert d["pending_candidates"] >= 1
    waiting = d["pending_candidates"] + d["pending_objects"] + d["pending_bundles"]
    want = (f"0 objects deleted now; {_n(d['live_packs'], 'pack')} kept (live checkpoints use them); "
            f"{_n(waiting, 'object')} no longer needed but kept until the grace period (1h) has passed "
            "(a later gc deletes them)")
    assert _summary(first.stdout) == want, first.stdout
    dry = run(repo, "gc", "-n", "--grace-period", "0").stdout
    assert _summary(dry).startswith(f"{_n(d['pending_candidates'], 'object')} would be deleted now; "), dry
    out = run(repo, "gc", "--grace-period", "0").stdout
    assert _summary(out).startswith(f"{_n(d['pending_candidates'], 'object')} deleted now; ") and \
        _summary(out).endswith("; nothing waiting for the grace period (0s)"), out


def test_prune_keep_last_0_is_refused_naming_delete(tmp_path):
    repo = _repo_with_runs(tmp_path)
    n = len(json.loads(run(repo, "list", "demo", "--json").stdout))
    for dry in ((), ("-n",)):
        r = run(repo, "prune", "--keep-last", "0", *dry, ok=False)
        one_line_error(r, code=2, contains="keeps no checkpoint")
        assert "snapstore delete RUN --yes" in r.stderr and "at least 1" in r.stderr, r.stderr
    assert len(json.loads(run(repo, "list", "demo", "--json").stdout)) == n
