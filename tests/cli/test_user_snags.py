"""What a new user ran into, through the real command line: ``runs`` keeps one run per line
whatever the ids hold, and ``gc`` on a repository with a damaged pack says how to get past it."""

from __future__ import annotations

import json
import os

import pytest

from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli


def test_runs_prints_one_line_per_run_whatever_the_id(tmp_path):
    repo = str(tmp_path / "r")
    mgr = CheckpointManager(repo)
    odd = ["plain", "line\nbreak", "tab\there", '"quoted', "naïve café"]
    for r in odd:
        mgr.save(r, [{"role": "user", "content": r}])
    out = CliRunner().invoke(cli, ["--repo", repo, "runs"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines) == len(odd)
    back = [json.loads(x) if x.startswith('"') else x for x in lines]
    assert sorted(back) == sorted(odd)
    assert "plain" in lines and "naïve café" in lines  # printable ids stay as they are


def test_gc_with_a_damaged_pack_says_what_to_do(tmp_path):
    repo = tmp_path / "r"
    mgr = CheckpointManager(str(repo))
    for i in range(3):
        mgr.save("a", [{"role": "user", "content": f"message {i} " * 40}])
    mgr.save("b", [{"role": "user", "content": "other run " * 40}])
    packs = sorted(p for p in (repo / "packs").rglob("*") if p.is_file())
    victim = packs[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(victim, 0o644)
    victim.write_bytes(bytes(data))
    r = CliRunner().invoke(cli, ["--repo", str(repo), "gc", "--grace-period", "0"])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.stderr, r.stderr
    err = r.stderr.strip().splitlines()[-1]  # (after the note on --grace-period 0)
    assert err.startswith("snapstore: error:"), r.stderr
    assert "gc deleted nothing" in err and "snapstore verify" in err, err
    assert sorted(p for p in (repo / "packs").rglob("*") if p.is_file()) == packs  # nothing deleted
    # verify names the damaged object once, with the runs that need it (by id, not by key)
    v = CliRunner().invoke(cli, ["--repo", str(repo), "verify"])
    assert v.exit_code == 1
    errors = [x for x in v.stdout.splitlines() if x.startswith("error:")]
    assert len(errors) == len(set(errors)) >= 1, v.stdout
    assert any("needed by run 'a'" in x or "needed by run 'b'" in x for x in errors), v.stdout


def test_import_names_the_conversations_it_could_not_store(tmp_path):
    """Trial snag: a file of 45 conversations, 2 of them with no messages, reported 'into 45 runs'
    and made 43 without a word. The report now counts the runs made and names every empty one (a
    later trial saw the second name cut off)."""
    items = [{"conversations": [{"from": "human", "value": f"hi {i}"}, {"from": "gpt", "value": "yo"}]
              if i % 3 else []} for i in range(9)]
    path = tmp_path / "sharegpt-with-empty-items.json"
    path.write_text(json.dumps(items))
    repo = str(tmp_path / "repo")
    r = CliRunner().invoke(cli, ["--repo", repo, "import", str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    runs = CheckpointManager(repo).runs()
    assert len(runs) == 6 and "into 6 runs" in r.stderr and "not stored" in r.stderr, r.stderr
    for i in (0, 3, 6):
        assert f"sharegpt-with-empty-items/{i:04d}" in r.stderr, r.stderr
    j = CliRunner().invoke(cli, ["--repo", repo, "import", str(path), "--json"], catch_exceptions=False)
    rep = json.loads(j.stdout)
    assert len(rep["empty"]) == rep["conversations"] - len(runs) == 3
