"""Tests for the ``snapstore`` command line (snapstore.cli)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import data_cmds as cli_data, maint_cmds as cli_maint, output as cli_output
from snapstore.cli import cli, parse_duration
from snapstore.errors import InvalidInputError
from snapstore.importers import load_trajectory

from tests.helpers.shared_data import SHARED
from tests.helpers import paths

ROOT = paths.ROOT
EXAMPLE = ROOT / "examples" / "demo-run.json"
OPENHANDS = SHARED / "openhands-oas-gpt4o-critic.jsonl"
needs_openhands = pytest.mark.skipif(not OPENHANDS.is_file(), reason=f"shared trajectory {OPENHANDS} not found (set SNAPSTORE_SHARED_DATA)")


@pytest.fixture
def repo(tmp_path):
    return str(tmp_path / "repo")


def run(repo, *args, input=None, ok=True, env=None):
    """Invoke the CLI in-process; assert success unless ok=False."""
    result = CliRunner().invoke(cli, ["--repo", repo, *args], input=input, env=env, catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def import_json(repo, path, *args):
    r = run(repo, "import", str(path), "--json", *args)
    return json.loads(r.stdout)


def ids(repo, run_id):
    return [d["id"] for d in json.loads(run(repo, "list", run_id, "--json").stdout)]


def one_line_error(result, code=None, contains=""):
    assert result.exit_code != 0
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("snapstore: error: "), lines[0]
    assert contains in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


# ------------------------------------------------------------------------------------------------
# import / export

def test_import_then_export_equals_file(repo):
    s = import_json(repo, EXAMPLE)
    _, convs = load_trajectory(EXAMPLE)
    assert s["format"] == "openai" and s["conversations"] == 1
    assert s["saved"] == len(convs[0].checkpoints) == 10 and s["skipped"] == 0
    assert s["runs"] == [{"run": "demo-run", "checkpoints": 10, "saved": 10, "skipped": 0}]
    assert s["requests"]["PUT"] >= 10 and s["bytes_written"] > 0
    assert s["logical_bytes"] == sum(d["message_bytes"] for d in json.loads(run(repo, "list", "demo-run", "--json").stdout))

    out = run(repo, "export", "demo-run").stdout_bytes
    original = json.loads(EXAMPLE.read_bytes())
    exported = json.loads(out)  # stdout holds nothing but the JSON document
    assert exported == original
    assert json.dumps(exported, ensure_ascii=False) == json.dumps(original, ensure_ascii=False)  # key order
    assert out == json.dumps(original, ensure_ascii=False).encode("utf-8")
    assert 12345678901234567890123 in [m.get("extra", {}).get("parsed_quantity") for m in exported]


def test_import_summary_on_stderr(repo):
    r = run(repo, "import", str(EXAMPLE))
    assert r.stdout == ""
    err = r.stderr
    for word in ("conversations", "10 saved", "logical bytes", "bytes written", "requests", "PUT", "elapsed"):
        assert word in err, err
    r = run(repo, "import", str(EXAMPLE), "-q")
    assert r.stdout == "" and r.stderr == ""


def test_import_resume(repo):
    assert import_json(repo, EXAMPLE)["saved"] == 10
    again = import_json(repo, EXAMPLE)
    assert again["saved"] == 0 and again["skipped"] == 10
    assert again["requests"]["PUT"] == 0 and again["bytes_written"] == 0
    cps = ids(repo, "demo-run")  # newest first
    run(repo, "rollback", "demo-run", cps[6])  # back to checkpoint index 3
    assert len(ids(repo, "demo-run")) == 4
    resumed = import_json(repo, EXAMPLE)
    assert resumed["saved"] == 6 and resumed["skipped"] == 4
    listed = json.loads(run(repo, "list", "demo-run", "--json").stdout)
    assert [d["step"] for d in listed] == list(range(9, -1, -1))
    assert json.loads(run(repo, "export", "demo-run").stdout) == json.loads(EXAMPLE.read_bytes())


def test_import_refuses_foreign_run(repo, tmp_path):
    mgr = CheckpointManager(repo)
    mgr.save("demo-run", [{"role": "user", "content": "something else"}])
    mgr.close()
    r = run(repo, "import", str(EXAMPLE), ok=False)
    one_line_error(r, 1, "matches none")
    assert len(ids(repo, "demo-run")) == 1  # untouched
    assert import_json(repo, EXAMPLE, "--run", "other")["saved"] == 10


@needs_openhands
def test_import_multi_conversation(repo, tmp_path):
    f = tmp_path / "oh3.jsonl"
    with open(OPENHANDS, "rb") as src:
        f.write_bytes(b"".join(src.readline() for _ in range(3)))
    _, convs = load_trajectory(f)
    assert len(convs) == 3 and all(c.name for c in convs)
    s = import_json(repo, f, "--run", "oh")
    assert s["conversations"] == 3
    expected = sorted(f"oh/{c.name}" for c in convs)
    assert sorted(r["run"] for r in s["runs"]) == expected
    assert s["saved"] == sum(len(c.checkpoints) for c in convs)
    assert run(repo, "runs").stdout.splitlines() == expected
    for c in convs:
        assert json.loads(run(repo, "export", f"oh/{c.name}").stdout) == c.messages
    assert import_json(repo, f, "--run", "oh")["saved"] == 0
    # default prefix: the file's stem
    s = import_json(repo, f)
    assert sorted(r["run"] for r in s["runs"]) == sorted(f"oh3/{c.name}" for c in convs)


def test_import_bad_input(repo, tmp_path):
    one_line_error(run(repo, "import", str(tmp_path / "missing.json"), ok=False), 2, "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a trajectory"}')
    one_line_error(run(repo, "import", str(bad), ok=False), 2, "bad.json")
    bad.write_text("[1, 2")
    one_line_error(run(repo, "import", str(bad), ok=False), 2, "invalid JSON")
    r = run(repo, "import", str(EXAMPLE), "--format", "nope", ok=False)
    assert r.exit_code == 2


def test_export_checkpoint_and_output_file(repo, tmp_path):
    import_json(repo, EXAMPLE)
    _, convs = load_trajectory(EXAMPLE)
    cps = ids(repo, "demo-run")
    first = run(repo, "export", "demo-run", "--checkpoint", cps[-1])
    assert json.loads(first.stdout) == convs[0].checkpoints[0]
    out = tmp_path / "out.json"
    r = run(repo, "export", "demo-run", "-c", cps[-2], "-o", str(out))
    assert r.stdout == ""
    assert json.loads(out.read_bytes()) == convs[0].checkpoints[1]
    assert out.read_bytes() == json.dumps(convs[0].checkpoints[1], ensure_ascii=False).encode("utf-8")


def test_export_surrogates_and_big_ints(repo):
    msgs = [{"role": "user", "content": "lone \ud800 surrogate", "n": 10**40, "z": -(2**70)},
            {"role": "assistant", "content": "naïve café 東京 🚀", "f": 0.1}]
    with CheckpointManager(repo) as mgr:
        mgr.save("weird", msgs)
    r = run(repo, "export", "weird")
    back = json.loads(r.stdout_bytes.decode("ascii"))  # fell back to ensure_ascii=True
    assert back == msgs and back[0]["n"] == 10**40
    with CheckpointManager(repo) as mgr:
        mgr.save("nice", msgs[1:])
    assert run(repo, "export", "nice").stdout_bytes == json.dumps(msgs[1:], ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------------------------------------
# reading commands

def test_runs_list_show(repo):
    run(repo, "init")
    assert run(repo, "runs").stdout == ""  # empty repository
    import_json(repo, EXAMPLE)
    with CheckpointManager(repo) as mgr:
        mgr.save("b-run", [{"role": "user", "content": "hi"}], step=7, status="ok",
                 token_usage={"input_tokens": 12, "output_tokens": 3}, metadata={"k": "v"})
    assert run(repo, "runs").stdout == "b-run\ndemo-run\n"
    assert json.loads(run(repo, "runs", "--json").stdout) == ["b-run", "demo-run"]

    table = run(repo, "list", "demo-run").stdout.splitlines()
    assert table[0].split() == ["ID", "SEQ", "STEP", "CREATED", "(UTC)", "MESSAGES", "STATUS"]
    assert len(table) == 11
    row = table[1].split()
    assert row[1] == "9" and row[2] == "9" and row[3].endswith("Z") and row[4] == "22"
    assert len(run(repo, "list", "demo-run", "--limit", "3").stdout.splitlines()) == 4
    listed = json.loads(run(repo, "list", "demo-run", "--limit", "2", "--json").stdout)
    assert [d["seq"] for d in listed] == [9, 8]
    assert {"id", "seq", "step", "created_at", "message_count", "message_bytes", "status"} <= set(listed[0])

    show = json.loads(run(repo, "show", "b-run", "--json").stdout)
    assert show["step"] == 7 and show["status"] == "ok" and show["message_count"] == 1
    assert show["token_usage"] == {"input_tokens": 12, "output_tokens": 3}
    assert "messages" not in show
    text = run(repo, "show", "b-run").stdout
    assert "input_tokens=12" in text and "messages:" in text and "hi" not in text
    cp0 = listed[-1]["id"]
    shown = json.loads(run(repo, "show", "demo-run", cp0, "--json").stdout)
    assert shown["id"] == cp0 and shown["message_count"] == 21


def test_not_found_errors(repo, tmp_path):
    import_json(repo, EXAMPLE)
    for args in (["list", "nope"], ["show", "nope"], ["export", "nope"], ["delete", "nope", "--yes"]):
        one_line_error(run(repo, *args, ok=False), 1, "'nope'")
    for args in (["show", "demo-run", "bogus"], ["export", "demo-run", "-c", "bogus"],
                 ["rollback", "demo-run", "bogus"], ["fork", "demo-run", "bogus", "x"],
                 ["delete", "demo-run", "bogus"]):
        one_line_error(run(repo, *args, ok=False), 1, "bogus")


def test_bad_repo(tmp_path):
    f = tmp_path / "afile"
    f.write_text("not a directory")
    one_line_error(run(str(f), "runs", ok=False), 1, "not a directory")
    one_line_error(run(str(f), "import", str(EXAMPLE), ok=False), 1, "not a directory")
    # a directory without a repository: read commands do not create one
    one_line_error(run(str(tmp_path / "empty"), "runs", ok=False), 1, "snapstore init")
    assert not (tmp_path / "empty").exists()
    one_line_error(run("ftp://x/y", "runs", ok=False), 2, "ftp://")


def test_repo_from_environment(tmp_path):
    repo = str(tmp_path / "envrepo")
    r = CliRunner().invoke(cli, ["import", str(EXAMPLE), "-q"], env={"SNAPSTORE_URL": repo})
    assert r.exit_code == 0, r.stderr
    r = CliRunner().invoke(cli, ["runs"], env={"SNAPSTORE_URL": repo})
    assert r.stdout == "demo-run\n"


def test_init(repo):
    r = run(repo, "init", "--leaf-bits", "4", "--dict-bytes", "64K", "--level", "5")
    assert "initialized" in r.stdout
    with CheckpointManager(repo, create=False) as mgr:
        cfg = mgr.repo.config
        assert (cfg.leaf_bits, cfg.dict_bytes, cfg.level) == (4, 65536, 5)
    one_line_error(run(repo, "init", ok=False), 1, "already exists")
    assert run(repo, "init", "--leaf-bits", "99", ok=False).exit_code == 2
    assert run(repo, "init", "--dict-bytes", "lots", ok=False).exit_code == 2
    import_json(repo, EXAMPLE)  # import uses the existing repository and its settings


def test_version_and_help(repo):
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and r.stdout.startswith("snapstore ")
    r = CliRunner().invoke(cli, ["--help"])
    for cmd in ("init", "import", "runs", "list", "show", "export", "rollback", "fork", "delete", "prune",
                "gc", "stats", "verify"):
        assert cmd in r.stdout
    assert CliRunner().invoke(cli, ["nosuchcommand"]).exit_code == 2


# ------------------------------------------------------------------------------------------------
# changing runs

def test_rollback_fork_delete(repo, monkeypatch):
    import_json(repo, EXAMPLE)
    cps = ids(repo, "demo-run")
    r = run(repo, "rollback", "demo-run", cps[4])
    assert cps[4] in r.stdout and "seq 5" in r.stdout
    assert ids(repo, "demo-run") == cps[4:]

    r = run(repo, "fork", "demo-run", cps[5], "forked")  # seq 4: checkpoints[4] of the file
    assert "forked" in r.stdout
    f = json.loads(run(repo, "show", "forked", "--json").stdout)
    assert f["message_count"] == 12 and f["step"] == 4
    assert run(repo, "export", "forked").stdout == run(repo, "export", "demo-run", "-c", cps[5]).stdout
    one_line_error(run(repo, "fork", "demo-run", cps[5], "forked", ok=False), 1, "already exists")

    # one checkpoint: no confirmation needed
    run(repo, "delete", "demo-run", cps[-1])
    assert ids(repo, "demo-run") == cps[4:-1]

    # whole run: non-interactive stdin without --yes is refused
    one_line_error(run(repo, "delete", "forked", ok=False), 2, "--yes")
    assert "forked" in run(repo, "runs").stdout
    # interactive: asks; "n" keeps the run, "y" deletes it
    monkeypatch.setattr(cli_data, "stdin_interactive", lambda: True)
    r = run(repo, "delete", "forked", input="n\n")  # "no" exits cleanly (issue 13): status 0, no error line
    assert r.exit_code == 0 and "forked" in run(repo, "runs").stdout
    assert "not deleted: run forked is unchanged" in r.stderr and "error" not in r.stderr and r.stdout == ""
    r = run(repo, "delete", "forked", input="y\n")
    assert "Delete run 'forked'" in r.stderr and "deleted run forked" in r.stdout
    assert run(repo, "runs").stdout == "demo-run\n"
    run(repo, "delete", "demo-run", "--yes")
    assert run(repo, "runs").stdout == ""


def test_prune(repo, monkeypatch):
    import_json(repo, EXAMPLE)
    import_json(repo, EXAMPLE, "--run", "other")
    assert run(repo, "prune", ok=False).exit_code == 2  # no policy
    assert run(repo, "prune", "--older-than", "soon", ok=False).exit_code == 2
    assert run(repo, "prune", "--keep-daily", "-1", ok=False).exit_code == 2

    r = run(repo, "prune", "--keep-last", "3", "--run", "demo-run", "--dry-run")
    lines = r.stdout.splitlines()
    assert len(lines) == 12, r.stdout  # every checkpoint with its fate, the summary, the gc reminder
    assert all(l.startswith("would keep   demo-run ") and l.endswith(": keep-last 3") for l in lines[:3])
    assert all(l.startswith("would delete demo-run ") and l.endswith(": matched no keep rule") for l in lines[3:10])
    assert lines[10] == "would delete 7 checkpoint(s) from 1 run(s); would keep 3 (policy: keep-last 3)"
    assert "snapstore gc" in lines[11]
    assert len(ids(repo, "demo-run")) == 10
    quiet = run(repo, "prune", "--keep-last", "3", "--run", "demo-run", "--dry-run", "-q").stdout.splitlines()
    assert quiet == lines[10:]  # --quiet: only the summary and the gc reminder

    # recent checkpoints are kept by --older-than even when --keep-last would drop them
    r = run(repo, "prune", "--keep-last", "1", "--older-than", "1h")
    assert r.stdout == "nothing to prune: 20 checkpoint(s) kept (policy: keep-last 1, older-than 1h)\n"

    out = json.loads(run(repo, "prune", "--keep-last", "2", "--json").stdout)
    assert out["dry_run"] is False and len(out["pruned"]) == 16 and out["policy"] == {"keep_last": 2}
    assert {p["run_id"] for p in out["pruned"]} == {"demo-run", "other"}
    assert all(p["reasons"] == ["matched no keep rule"] == [p["reason"]] for p in out["pruned"])
    assert [(k["run_id"], k["seq"], k["reasons"]) for k in out["kept"]] == [
        ("demo-run", 9, ["keep-last 2"]), ("demo-run", 8, ["keep-last 2"]),
        ("other", 9, ["keep-last 2"]), ("other", 8, ["keep-last 2"])]
    assert "snapstore gc" in out["note"]
    assert len(ids(repo, "demo-run")) == 2 and len(ids(repo, "other")) == 2

    # a policy that deletes whole runs is refused off a terminal without --yes, and nothing goes
    before = (ids(repo, "demo-run"), ids(repo, "other"))
    for argv in (["--older-than", "0"], ["--older-than", "0", "--keep-last", "0"], ["--older-than", "0", "--run", "other"]):
        one_line_error(run(repo, "prune", *argv, ok=False), 2, "--yes")
        assert (ids(repo, "demo-run"), ids(repo, "other")) == before
    r = run(repo, "prune", "--older-than", "0", "--run", "other", "--dry-run")  # the plan says runs go
    assert "note: would delete every checkpoint of 1 run(s), so the run(s) would go too: other\n" in r.stdout
    r = run(repo, "prune", "--older-than", "0", "--json", ok=False)
    assert r.exit_code == 2 and "2 of 2 run(s) entirely (demo-run, other: 4 checkpoint(s)" in r.stderr
    # on a terminal it asks: "n" deletes nothing
    monkeypatch.setattr(cli_maint, "stdin_interactive", lambda: True)
    r = run(repo, "prune", "--older-than", "0", input="n\n", ok=False)
    assert r.exit_code == 1 and "This deletes 2 of 2 run(s) entirely" in r.stderr and "not pruned" in r.stderr
    assert (ids(repo, "demo-run"), ids(repo, "other")) == before
    monkeypatch.setattr(cli_maint, "stdin_interactive", lambda: False)
    r = run(repo, "prune", "--older-than", "0", "--run", "other", "--yes")
    assert r.stdout.splitlines()[-2] == "deleted 2 checkpoint(s) from 1 run(s); kept 0 (policy: older-than 0s)"
    assert r.stdout.count(": matched no keep rule\n") == 2 and "snapstore gc" in r.stdout.splitlines()[-1]
    assert run(repo, "runs").stdout == "demo-run\n"  # pruning every checkpoint deletes the run
    r = run(repo, "prune", "--keep-last", "1", "--run", "nope", ok=False)  # a typo is not "nothing to prune"
    assert r.exit_code == 1 and r.stderr == "snapstore: error: run 'nope' not found\n"


def _fates(out: dict) -> dict:
    """``{seq: (kept, reasons)}`` of one run's ``prune --json`` output."""
    d = {p["seq"]: (False, p["reasons"]) for p in out["pruned"]}
    d.update({k["seq"]: (True, k["reasons"]) for k in out["kept"]})
    return d


def test_prune_rule_combinations_and_reasons(repo):
    import_json(repo, EXAMPLE)  # 10 checkpoints created within a second or so

    def plan(*rules):
        out = json.loads(run(repo, "prune", "--run", "demo-run", "--dry-run", "--json", *rules).stdout)
        assert out["dry_run"] is True
        return _fates(out)

    # any rule keeps: --keep-within (relative to the run's newest) keeps all, --keep-last names 2 too
    f = plan("--keep-last", "2", "--keep-within", "1h")
    assert all(kept for kept, _ in f.values()) and len(f) == 10
    assert f[9][1][0] == "keep-last 2" and f[9][1][1].startswith("within ") and len(f[9][1]) == 2
    assert len(f[7][1]) == 1 and f[7][1][0].startswith("within ")
    # calendar buckets with N=1 keep exactly the newest; every rule that keeps it is named
    f = plan("--keep-last", "1", "--keep-daily", "1", "--keep-weekly", "1", "--keep-yearly", "1")
    assert f[9] == (True, ["keep-last 1", "daily 1/1", "weekly 1/1", "yearly 1/1"])
    assert all(f[s] == (False, ["matched no keep rule"]) for s in range(9))
    f = plan("--keep-hourly", "1", "--keep-monthly", "1")
    assert f[9] == (True, ["hourly 1/1", "monthly 1/1"]) and sum(k for k, _ in f.values()) == 1
    # --older-than keeps what is younger; a zero count keeps nothing
    f = plan("--older-than", "1d", "--keep-last", "0")
    assert all(kept and len(r) == 1 and r[0].startswith("newer than ") for kept, r in f.values())
    for rules in (("--keep-hourly", "0"), ("--keep-last", "0", "--keep-daily", "0")):
        # a policy of zero counts only keeps nothing: refused, dry run or not (a trial lost a repository)
        for dry in (("--dry-run",), ()):
            r = run(repo, "prune", *dry, *rules, ok=False)
            assert r.exit_code == 2 and "keeps no checkpoint" in r.stderr, r.stderr
        r = run(repo, "archive", *rules, ok=False)
        assert r.exit_code == 2 and "keeps no checkpoint" in r.stderr, r.stderr
    assert len(ids(repo, "demo-run")) == 10  # dry runs deleted nothing

    # the human dry run joins the reasons
    text = run(repo, "prune", "--keep-last", "1", "--keep-daily", "1", "--dry-run").stdout
    assert text.splitlines()[0].endswith(": keep-last 1; daily 1/1")
    assert "policy: keep-last 1, keep-daily 1" in text

    # for real: deleted checkpoints are shown with their reasons; the kept ones are reported in JSON
    r = run(repo, "prune", "--keep-last", "3", "--keep-monthly", "1", "--keep-within", "0s")
    lines = r.stdout.splitlines()
    assert len(lines) == 9 and all(l.startswith("deleted demo-run ") for l in lines[:7])
    assert lines[7] == ("deleted 7 checkpoint(s) from 1 run(s); kept 3 "
                        "(policy: keep-last 3, keep-within 0s, keep-monthly 1)")
    assert lines[8].startswith("note: ") and "snapstore gc" in lines[8]
    assert [d["seq"] for d in json.loads(run(repo, "list", "demo-run", "--json").stdout)] == [9, 8, 7]
    out = json.loads(run(repo, "prune", "--keep-last", "2", "--keep-monthly", "1", "--json").stdout)
    f = _fates(out)
    assert f == {9: (True, ["keep-last 2", "monthly 1/1"]), 8: (True, ["keep-last 2"]),
                 7: (False, ["matched no keep rule"])}
    assert ids(repo, "demo-run") == [k["id"] for k in out["kept"]]


def test_parse_duration():
    assert parse_duration("3600") == timedelta(seconds=3600)
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("2w") == timedelta(weeks=2)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("1.5h") == timedelta(minutes=90)
    assert parse_duration("1h 30m") == parse_duration("90 m") == timedelta(minutes=90)
    assert parse_duration("1y") == timedelta(days=365) and parse_duration("0") == timedelta(0)
    for bad in ("", "h", "-5", "5x", "3 4", "1h-2m", "1e3", "9" * 400 + "w"):
        with pytest.raises(InvalidInputError):
            parse_duration(bad)


# ------------------------------------------------------------------------------------------------
# stats / verify: output formatting against the contract (fake results), then the real thing

FAKE_STATS = {"runs": 2, "checkpoints": 20, "logical_bytes": 93368, "stored_bytes": 20000, "ratio": 4.6684,
              "objects": {"packs": {"count": 20, "bytes": 15000}, "manifests": {"count": 20, "bytes": 4800},
                          "config": {"count": 1, "bytes": 200}},
              "requests": {"requests": {"PUT": 0, "GET": 3, "HEAD": 0, "LIST": 4, "DELETE": 0},
                           "bytes_up": 0, "bytes_down": 99}}


def test_stats_output_contract(repo, monkeypatch):
    import_json(repo, EXAMPLE)
    monkeypatch.setattr(CheckpointManager, "stats", lambda self: FAKE_STATS, raising=False)
    assert json.loads(run(repo, "stats", "--json").stdout) == FAKE_STATS
    text = run(repo, "stats").stdout
    assert "checkpoints:" in text and "91.2 KiB" in text and "4.67x" in text
    assert "packs" in text and "manifests" in text and "GET 3" in text


def _problem(code, key, message):
    return SimpleNamespace(code=code, key=key, message=message)


@pytest.mark.parametrize("codes, expected", [
    ([], 0), (["corrupt-pack"], 1), (["missing-pack"], 2), (["bad-config"], 3),
    (["bad-config", "missing-pack"], 2), (["missing-manifest", "corrupt-pack", "other"], 1),
])
def test_verify_exit_codes_contract(repo, monkeypatch, codes, expected):
    import_json(repo, EXAMPLE)
    calls = []

    def fake_verify(self, read_data=False):
        calls.append(read_data)
        return SimpleNamespace(errors=[_problem(c, f"key/{c}", f"{c} happened") for c in codes],
                               warnings=[_problem("stray-temp", "packs/.tmp-1", "leftover temp file")],
                               checked={"packs": 10, "manifests": 10})
    monkeypatch.setattr(CheckpointManager, "verify", fake_verify, raising=False)
    r = run(repo, "verify", "--read-data", ok=False)
    assert r.exit_code == expected and calls == [True]
    assert "stray-temp" in r.stdout and ("OK" if not codes else "FAILED") in r.stdout.splitlines()[-1]
    for c in codes:
        assert f"error: {c}: key/{c}" in r.stdout
    r = run(repo, "verify", "--json", ok=False)
    assert r.exit_code == expected and calls[-1] is False
    d = json.loads(r.stdout)
    assert d["ok"] is (not codes) and [e["code"] for e in d["errors"]] == codes and len(d["warnings"]) == 1


def test_stats_real(repo):
    import_json(repo, EXAMPLE)
    d = json.loads(run(repo, "stats", "--json").stdout)
    assert d["runs"] == 1 and d["checkpoints"] == 10
    listed = json.loads(run(repo, "list", "demo-run", "--json").stdout)
    assert d["message_bytes"] == sum(x["message_bytes"] for x in listed)
    # the import keeps the file's record in the last checkpoint's session state, counted too
    assert d["logical_bytes"] == d["message_bytes"] + d["session_state_bytes"] and d["session_state_bytes"] > 0
    assert d["stored_bytes"] > 0 and d["ratio"] > 1
    assert "packs" in d["objects"]
    assert "logical" in run(repo, "stats").stdout


def test_verify_real(repo):
    import_json(repo, EXAMPLE)
    r = run(repo, "verify", "--read-data")
    assert "OK" in r.stdout
    d = json.loads(run(repo, "verify", "--json").stdout)
    assert d["ok"] is True and d["errors"] == []
    # corrupt a pack: verify --read-data must fail with exit code 1 (corrupt)
    packs = sorted(p for p in Path(repo, "packs").rglob("*") if p.is_file())
    data = bytearray(packs[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    os.chmod(packs[0], 0o644)
    packs[0].write_bytes(bytes(data))
    assert run(repo, "verify", "--read-data", ok=False).exit_code == 1
    # remove a pack: missing object -> exit code 2 (or 1 if the corrupt one is still reported)
    packs[1].unlink()
    assert run(repo, "verify", ok=False).exit_code in (1, 2)
    packs[0].unlink()
    assert run(repo, "verify", ok=False).exit_code == 2


def test_verify_quiet_counts_warnings_by_kind(repo):
    """After a gc with a grace period the repacked packs wait (one warning each): -q counts them.
    (Per-save packs are repacked by GC when segments are off, as in a format-1 repository.)"""
    from snapstore.repo.repository import Repository
    from snapstore.stores import LocalStore
    Repository.init(LocalStore(repo), seg_fanout=0)
    import_json(repo, EXAMPLE)
    run(repo, "gc")
    listed = run(repo, "verify").stdout.splitlines()
    quiet = run(repo, "verify", "-q").stdout.splitlines()
    # past 3 of one kind and message, one line counts the rest (a trial saw 16 lines of one cause)
    n = int(listed[-1].split("; 0 error(s), ")[1].split()[0])
    assert n > 4 and sum(l.startswith("warning: retired-pack: packs/") for l in listed) == 3
    assert listed[3] == f"warning: retired-pack: {n - 3} more object(s) with the same warning (--json lists each)"
    assert len(listed) == 5 and quiet == [f"warning: retired-pack: {n}", listed[-1]]
    assert len(json.loads(run(repo, "verify", "--json").stdout)["warnings"]) == n


def test_stats_prices_and_requests(repo):
    import_json(repo, EXAMPLE)
    text = run(repo, "stats").stdout
    assert "requests:" in text and "LIST" in text and "made by this command" in text
    assert "cost estimate:" in text and "/month to store" in text
    prices = [l for l in text.splitlines() if l.startswith("prices:")]
    assert len(prices) == 1 and "$0.023/GB-month" in prices[0] and "PUT/LIST $0.005" in prices[0]
    assert "GET/HEAD $0.0004, DELETE $0 per 1,000 requests" in prices[0] and "S3 Standard" in prices[0]

    args = ("--price-gb-month", "0.5", "--price-put", "10", "--price-get", "1")
    d = json.loads(run(repo, "stats", "--json", *args).stdout)
    p = d["cost"]["prices"]
    assert (p["gb_month"], p["PUT"], p["LIST"], p["GET"], p["HEAD"]) == (0.5, 0.01, 0.01, 0.001, 0.001)
    assert d["cost"]["storage_per_month"] == pytest.approx(d["stored_bytes"] / 1e9 * 0.5)
    req = d["requests"]["requests"]
    assert req["GET"] + req["LIST"] > 0 and req["PUT"] == 0  # this process's requests: reading only
    expected = 0.01 * (req["PUT"] + req["LIST"]) + 0.001 * (req["GET"] + req["HEAD"])
    assert d["cost"]["requests"] == pytest.approx(expected)
    text = run(repo, "stats", *args).stdout
    assert "$0.5/GB-month" in text and "PUT/LIST $10, GET/HEAD $1" in text and "with the prices given" in text
    assert run(repo, "stats", "--price-put", "-1", ok=False).exit_code == 2
    assert run(repo, "stats", "--price-get", "cheap", ok=False).exit_code == 2


def test_import_request_cost_only_for_s3(repo, s3_inprocess_store):
    local = import_json(repo, EXAMPLE)
    assert local["request_cost_usd"] is None
    assert "request cost" not in run(repo, "import", str(EXAMPLE), "--run", "again").stderr

    url = s3_inprocess_store.url  # s3://BUCKET/repo?region=...
    d = import_json(url, EXAMPLE)
    req = d["requests"]
    assert d["saved"] == 10 and req["PUT"] >= 10 and d["bytes_written"] > 0
    expected = (req["PUT"] + req["LIST"]) * 0.005 / 1000 + (req["GET"] + req["HEAD"]) * 0.0004 / 1000
    assert d["request_cost_usd"] == pytest.approx(expected) and d["request_cost_usd"] > 0
    err = run(url, "import", str(EXAMPLE), "--run", "again").stderr
    line = [l for l in err.splitlines() if "request cost" in l]
    assert len(line) == 1 and "~$0.0" in line[0] and "PUT/LIST $0.005" in line[0] and "S3 Standard" in line[0]


# ------------------------------------------------------------------------------------------------
# gc

def _files(repo) -> dict:
    """Every object file of a local repository with its size and mtime (not the store's own
    write-ahead journal ``.wal`` and its lock files: bookkeeping, not objects, docs/format.md §26)."""
    root = Path(repo)
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
            if p.is_file() and not p.relative_to(root).parts[0].startswith(".wal")}


def _stored(repo) -> int:
    return json.loads(run(repo, "stats", "--json").stdout)["stored_bytes"]


def test_gc_after_prune_reclaims(repo):
    import_json(repo, EXAMPLE)
    with CheckpointManager(repo) as mgr:  # a run with data of its own (nothing shared with demo-run)
        for i in range(3):
            mgr.save("scratch", [{"role": "user", "content": os.urandom(6000).hex()},
                                 {"role": "user", "content": str(i)}])
    full = _stored(repo)

    # nothing to collect yet (the default grace period keeps the fresh packs): no deletion
    d = json.loads(run(repo, "gc", "--json").stdout)
    assert d["dry_run"] is False and d["grace_period"] == 3600 and d["deleted"].get("packs", 0) == 0
    assert _stored(repo) >= full  # repacking the small packs added a pack; the old ones are pending

    r = run(repo, "prune", "--older-than", "0", "--run", "scratch", "--yes")
    assert "deleted 3 checkpoint(s)" in r.stdout and "snapstore gc" in r.stdout
    pruned = _stored(repo)

    # dry run: a report, no change
    before = _files(repo)
    r = run(repo, "gc", "--dry-run", "--grace-period", "0")
    assert r.stdout.startswith("dry run: nothing was changed\n") and "would reclaim:" in r.stdout
    assert "no other process" in r.stderr and len(r.stderr.splitlines()) == 1
    d = json.loads(run(repo, "gc", "--dry-run", "--grace-period", "0", "--json").stdout)
    assert d["dry_run"] is True and d["deleted"]["packs"] >= 3 and d["reclaimed_bytes"] > 12000
    assert _files(repo) == before

    # default grace period: the scratch run's packs only become candidates
    d = json.loads(run(repo, "gc", "--json").stdout)
    assert d["pending_candidates"] >= 3 and d["deleted"].get("packs", 0) == 0
    assert "pending:" in run(repo, "gc", "--dry-run").stdout

    # --grace-period 0: reclaimed now
    r = run(repo, "gc", "--grace-period", "0s")
    assert r.stderr.startswith("snapstore: note: --grace-period 0 assumes no other process")
    assert r.stderr.count("\n") == 1
    out = dict(l.split(":", 1) for l in r.stdout.splitlines())
    assert "packs" in out["deleted"] and "bytes" in out["reclaimed"] and "pending" not in out
    after = _stored(repo)
    assert after < pruned - 12000 and after < full
    assert json.loads(run(repo, "gc", "--grace-period", "0", "--json").stdout)["reclaimed_bytes"] == 0  # idempotent
    assert json.loads(run(repo, "export", "demo-run").stdout) == json.loads(EXAMPLE.read_bytes())
    assert json.loads(run(repo, "verify", "--json").stdout)["errors"] == []


def test_gc_lock_conflict(repo):
    import_json(repo, EXAMPLE)
    with CheckpointManager(repo) as mgr:
        mgr.repo.store.put("gc/lock", b'{"host": "elsewhere", "pid": 1}')
    one_line_error(run(repo, "gc", ok=False), 1, "another garbage collection is running")
    one_line_error(run(repo, "gc", "--json", ok=False), 1, "another garbage collection is running")
    assert json.loads(run(repo, "gc", "--dry-run", "--json").stdout)["dry_run"] is True  # takes no lock


def test_gc_options_and_output_contract(repo, monkeypatch):
    from snapstore.maintenance.gc import GCReport

    import_json(repo, EXAMPLE)
    calls = []

    def fake_gc(self, grace_period=None, dry_run=False, progress=None, **options):
        calls.append(dict(grace_period=grace_period, dry_run=dry_run, **options))
        progress("repack", 1, 2)
        rep = GCReport(dry_run=dry_run, grace_period=self.gc_grace_period if grace_period is None else grace_period,
                       live_checkpoints=10, live_packs=12, deleted_bytes=3000, written_bytes=5000, written_objects=3,
                       repacked_packs=5, new_packs=1, repack_bytes_in=4096, repack_bytes_out=4900,
                       pending_candidates=5, added_forward=5, redirected_forward=2, forward_writes=4, elapsed=0.25)
        rep.deleted["manifests"] += 2
        return rep
    monkeypatch.setattr(CheckpointManager, "gc", fake_gc)

    r = run(repo, "gc")
    assert calls[-1] == {"grace_period": None, "dry_run": False} and r.stderr == ""
    rows = dict((k, v.strip()) for k, v in (l.split(":", 1) for l in r.stdout.splitlines()))
    assert rows["summary"] == ("2 objects deleted now; 12 packs kept (live checkpoints use them); 5 objects no "
                               "longer needed but kept until the grace period (1h) has passed (a later gc deletes them)")
    assert rows["live"] == "10 checkpoints using 12 hot packs"
    assert rows["deleted"] == "2 objects, 2.9 KiB (2 manifests)"
    assert rows["repacked"] == "5 packs (4.0 KiB) into 1 new pack (4.8 KiB)"
    assert rows["forwarding"] == "5 records added, 2 records redirected (4 map shards written)"
    assert rows["reclaimed"].startswith("none yet: 2.0 KiB (2000 bytes) more stored until the repacked packs")
    assert rows["reclaimed"].endswith("; 1 object more (new packs, forwarding-map shards and gc state)")
    assert rows["pending"].startswith("5 unreferenced packs not deleted yet: they wait for the grace period (1h)")

    d = json.loads(run(repo, "gc", "--grace-period", "1h30m", "--max-unused", "0.5", "--dry-run", "--json").stdout)
    assert calls[-1] == {"grace_period": 5400.0, "dry_run": True, "max_unused": 0.5}
    assert d["dry_run"] is True and d["grace_period"] == 5400 and d["reclaimed_bytes"] == -2000
    assert d["deleted"] == {"manifests": 2} and d["new_packs"] == 1 and d["pending_candidates"] == 5
    r = run(repo, "gc", "--dry-run", "--grace-period", "0")
    assert calls[-1]["grace_period"] == 0 and "would repack:" in r.stdout and "would delete:" in r.stdout
    rows = dict((k, v.strip()) for k, v in (l.split(":", 1) for l in r.stdout.splitlines()[1:]))
    assert rows["would repack"] == "5 packs (4.0 KiB) into 1 new pack (4.8 KiB)"  # built, not written
    assert rows["forwarding"] == "5 records added, 2 records redirected (4 map shards would be written)"
    assert r.stderr.startswith("snapstore: note: --grace-period 0 assumes") and r.stderr.count("\n") == 1
    r = run(repo, "gc", "--grace-period", "10m")  # shorter than the writers' default: a note too
    assert calls[-1]["grace_period"] == 600 and "gc_grace_period=600 or less" in r.stderr
    assert r.stderr.count("\n") == 1 and run(repo, "gc", "--grace-period", "2h").stderr == ""

    for bad in (["--grace-period", "soon"], ["--grace-period", "-1"], ["--max-unused", "1.5"]):
        assert run(repo, "gc", *bad, ok=False).exit_code == 2
    n = len(calls)

    # progress: one updating line on a terminal's stderr, cleared at the end; stdout untouched
    orig = cli_output.Progress.__init__

    def tty_init(self, enabled):
        orig(self, enabled)
        self.tty = enabled
    monkeypatch.setattr(cli_output.Progress, "__init__", tty_init)
    r = run(repo, "gc", "--json")
    assert len(calls) == n + 1 and "gc repack: 1/2" in r.stderr and r.stderr.endswith("\r\x1b[K")
    assert json.loads(r.stdout)["live_packs"] == 12


# ------------------------------------------------------------------------------------------------
# the real entry point in a subprocess

def test_subprocess_entry_point(tmp_path):
    repo = str(tmp_path / "repo")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SNAPSTORE_URL", None)
    base = [sys.executable, "-c", "from snapstore.cli import main; main()", "--repo", repo]

    p = subprocess.run(base + ["import", str(EXAMPLE)], capture_output=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"" and b"10 saved" in p.stderr

    p = subprocess.run(base + ["export", "demo-run"], capture_output=True, env=env, timeout=60)
    assert p.returncode == 0 and p.stderr == b""
    assert json.loads(p.stdout) == json.loads(EXAMPLE.read_bytes())
    assert p.stdout == json.dumps(json.loads(EXAMPLE.read_bytes()), ensure_ascii=False).encode("utf-8")

    p = subprocess.run(base + ["show", "no-such-run"], capture_output=True, env=env, timeout=60)
    assert p.returncode == 1 and p.stdout == b""
    assert p.stderr.decode().strip() == "snapstore: error: run 'no-such-run' not found"

    p = subprocess.run(base + ["delete", "demo-run"], capture_output=True, env=env, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and b"--yes" in p.stderr and b"Traceback" not in p.stderr

    p = subprocess.run([sys.executable, "-m", "snapstore.cli", "--repo", repo, "runs"], capture_output=True,
                       env=env, timeout=60)
    assert p.returncode == 0 and p.stdout == b"demo-run\n"


def test_keyboard_interrupt_exits_130_quietly(repo, monkeypatch):
    def interrupted(self, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(CheckpointManager, "save", interrupted)
    r = run(repo, "import", str(EXAMPLE), ok=False)
    assert r.exit_code == 130 and r.stdout == "" and "Traceback" not in r.stderr and "error" not in r.stderr


# ------------------------------------------------------------------------------------------------
# issue 13: import of any shape, and a CLI that never surprises

def _tree(path) -> dict:
    """Every file under ``path`` with its bytes (a repository's exact state)."""
    p = Path(path)
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()} if p.exists() else {}


def _nested_results(tmp_path) -> tuple[Path, dict]:
    chat = [{"role": "user", "content": "refund please"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                                  "function": {"name": "refund", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Refunded."}]
    data = {"suite": "support", "results": [
        {"id": "case-a", "reward": 1.0, "tools": [{"name": "refund"}], "episode": {"messages": chat}},
        {"id": "case-b", "reward": 0.0, "tools": [], "episode": {"messages": chat[:2]}},
    ]}
    path = tmp_path / "bench.results.json"
    path.write_text(json.dumps(data))
    return path, data


def test_import_dry_run_writes_nothing(repo, tmp_path):
    path, _ = _nested_results(tmp_path)
    for flag in ("--dry-run", "-n"):
        r = run(repo, "import", str(path), flag)
        assert not Path(repo).exists()
        assert r.stdout.startswith("dry run: nothing was written\n")
        assert "format messages, 2 conversations, 3 checkpoints (one per turn), 6 messages" in r.stdout
        rows = r.stdout.splitlines()[3:]
        assert rows[0].split()[:5] == ["bench.results/case-a", "results[0]:", "episode.messages", "2", "4"]
        assert "id, reward, tools, episode" in rows[0]
    d = json.loads(run(repo, "import", str(path), "-n", "--json").stdout)
    assert d["dry_run"] and d["format"] == "messages" and d["checkpoints"] == 3
    assert [(x["run"], x["where"], x["checkpoints"]) for x in d["runs"]] == [
        ("bench.results/case-a", "results[0]: episode.messages", 2), ("bench.results/case-b", "results[1]: episode.messages", 1)]
    assert not Path(repo).exists()


def test_import_nested_records_and_export_record(repo, tmp_path):
    path, data = _nested_results(tmp_path)
    s = import_json(repo, path)
    assert s["format"] == "messages" and [r["run"] for r in s["runs"]] == ["bench.results/case-a", "bench.results/case-b"]
    assert len(ids(repo, "bench.results/case-a")) == 2
    for i, run_id in enumerate(("bench.results/case-a", "bench.results/case-b")):
        rec = run(repo, "export", run_id, "--record").stdout
        # the file narrowed to this record: what is around the records comes back too (issue 20)
        assert rec == json.dumps(dict(data, results=[data["results"][i]]), ensure_ascii=False)
        assert json.loads(run(repo, "export", run_id).stdout) == data["results"][i]["episode"]["messages"]
    state = CheckpointManager(repo).latest("bench.results/case-a").session_state["import"]
    assert state["file"] == "bench.results.json" and state["where"] == "results[0]: episode.messages"
    own = state["record"]["results"][0]
    assert own["tools"] == [{"name": "refund"}] and own["episode"] == {"messages": None}
    # an earlier checkpoint holds no record: a clear error
    first = ids(repo, "bench.results/case-a")[-1]
    one_line_error(run(repo, "export", "bench.results/case-a", "-c", first, "--record", ok=False), 1, "no imported record")
    # the same via --messages-path, written to a file
    out = tmp_path / "rec.json"
    import_json(repo, path, "--run", "mp", "--messages-path", "results[].episode.messages")
    run(repo, "export", "mp/case-b", "--record", "-o", str(out))
    assert json.loads(out.read_bytes()) == dict(data, results=[data["results"][1]])


def test_import_jsonl_record_comes_back_as_jsonl(repo, tmp_path):
    events = [{"id": 0, "source": "user", "action": "message", "args": {"content": "go"}},
              {"id": 1, "source": "environment", "observation": "agent_state_changed", "extras": {}},
              {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"}, "llm_response_id": "r1"},
              {"id": 3, "source": "agent", "observation": "run", "content": "x", "cause": 2},
              {"id": 4, "source": "agent", "action": "finish", "args": {}, "llm_response_id": "r2"}]
    path = tmp_path / "events.jsonl"
    text = "".join(json.dumps(e) + "\n" for e in events)
    path.write_text(text)
    s = import_json(repo, path)
    assert s["format"] == "events" and s["runs"] == [{"run": "events", "checkpoints": 2, "saved": 2, "skipped": 0}]
    assert run(repo, "export", "events", "--record").stdout == text


def test_import_of_an_invalid_file_leaves_the_repository_as_it_was(repo, tmp_path):
    import_json(repo, EXAMPLE)
    before = _tree(repo)
    lines = [json.dumps({"instance_id": f"ep{i}", "history": [{"role": "user", "content": "q"},
                                                             {"role": "assistant", "content": "a"}]})
             for i in range(40)]
    lines.insert(31, '{"instance_id": "ep-bad", "history": [{"role": "user", "content": "q"}], "metrics": {"cost": 1e400}}')
    bad = tmp_path / "episodes.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = run(repo, "import", str(bad), ok=False)
    one_line_error(r, 2, f"{bad}: line 32: metrics.cost: the number 1e400 is too large")
    assert _tree(repo) == before
    # a new location is not even created
    r = run(str(tmp_path / "new"), "import", str(bad), ok=False)
    assert r.exit_code == 2 and not (tmp_path / "new").exists()


def test_import_run_id_drops_trajectory_suffixes(repo, tmp_path):
    path = tmp_path / "sqlfluff-1733.traj.json"
    path.write_text(EXAMPLE.read_text())
    s = import_json(repo, path)
    assert s["runs"][0]["run"] == "sqlfluff-1733"
    assert run(repo, "runs").stdout == "sqlfluff-1733\n"


def test_n_means_dry_run_in_every_command():
    seen = []
    for name, command in cli.commands.items():
        for param in command.params:
            if "-n" in getattr(param, "opts", []) + getattr(param, "secondary_opts", []):
                assert param.name == "dry_run", (name, param.name)
                seen.append(name)
    assert sorted(seen) == ["archive", "gc", "import", "prune"]


def test_list_limit_has_no_short_n(repo):
    import_json(repo, EXAMPLE)
    assert len(json.loads(run(repo, "list", "demo-run", "--limit", "3", "--json").stdout)) == 3
    r = run(repo, "list", "demo-run", "-n", "3", ok=False)
    assert r.exit_code == 2 and "-n" in r.stderr


def test_prune_shows_progress_on_a_terminal(repo, monkeypatch):
    import_json(repo, EXAMPLE)
    import_json(repo, EXAMPLE, "--run", "second")
    orig = cli_output.Progress.__init__

    def tty_init(self, enabled):
        orig(self, enabled)
        self.tty = enabled
    monkeypatch.setattr(cli_output.Progress, "__init__", tty_init)
    r = run(repo, "prune", "--keep-last", "3")
    # the first update is drawn at once, later ones at most every 0.1 s; the line is cleared at the end
    assert r.stderr.startswith("\r\x1b[Kprune: listing runs") and r.stderr.endswith("\r\x1b[K")
    assert "deleted 14 checkpoint(s) from 2 run(s)" in r.stdout
    assert len(ids(repo, "demo-run")) == 3 and len(ids(repo, "second")) == 3


def test_slow_commands_show_an_activity_line_on_a_terminal(repo, monkeypatch):
    import_json(repo, EXAMPLE)
    monkeypatch.setattr(cli_output, "stderr_tty", lambda: True)
    monkeypatch.setattr(cli_output.Activity, "delay", 0.2)
    orig = CheckpointManager.runs

    def slow_runs(self):
        time.sleep(1.0)
        return orig(self)
    monkeypatch.setattr(CheckpointManager, "runs", slow_runs)
    r = run(repo, "runs")
    assert "\r\x1b[Ksnapstore runs: working... " in r.stderr and r.stderr.endswith("\r\x1b[K")
    assert r.stdout == "demo-run\n"
    # a fast command shows nothing
    monkeypatch.setattr(cli_output.Activity, "delay", 1.0)
    assert run(repo, "list", "demo-run").stderr == ""


def test_prune_progress_in_a_real_terminal(tmp_path):
    """prune under a pseudo-terminal (stderr a real tty): the progress line is drawn and cleared."""
    import pty

    repo = str(tmp_path / "repo")
    import_json(repo, EXAMPLE)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SNAPSTORE_URL", None)
    leader, follower = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "snapstore", "--repo", repo, "prune", "--keep-last", "2"],
                           stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL, env=env, timeout=60)
        os.close(follower)
        follower = None
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert p.returncode == 0 and b"deleted 8 checkpoint(s)" in p.stdout
    assert b"prune: listing runs" in seen and seen.endswith(b"\r\x1b[K")


def test_python_api_read_operations_refuse_a_missing_repository(tmp_path):
    from snapstore.errors import RepositoryNotFound

    missing = tmp_path / "nope"
    mgr = CheckpointManager(str(missing))
    for op in (lambda: mgr.verify(), lambda: mgr.stats(), lambda: mgr.gc(grace_period=0)):
        with pytest.raises(RepositoryNotFound):
            op()
    assert not missing.exists()
    one_line_error(run(str(missing), "verify", ok=False), 3, "snapstore init")  # verify: 1 is corruption
    assert not missing.exists()


def test_empty_repo_option_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for args in (["runs"], ["import", str(EXAMPLE)], ["init"]):
        one_line_error(run("", *args, ok=False), 2, "--repo is empty")
        one_line_error(run("  ", *args, ok=False), 2, "--repo is empty")
    assert list(tmp_path.iterdir()) == []


def test_init_and_import_refuse_a_non_empty_directory(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine")
    for args in (["init"], ["import", str(EXAMPLE)]):
        one_line_error(run(str(project), *args, ok=False), 2, "is not empty and holds no snapstore repository")
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt"]
    run(str(project), "import", str(EXAMPLE), "--allow-nonempty", "-q")
    assert run(str(project), "runs").stdout == "demo-run\n"
    assert (project / "notes.txt").read_text() == "mine"
    other = tmp_path / "other"
    other.mkdir()
    (other / ".hidden").write_text("x")
    one_line_error(run(str(other), "init", ok=False), 2, "'.hidden'")
    run(str(other), "init", "--allow-nonempty")
    # snapstore's own leftovers of an import killed before its config was written do not count
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / ".tmp-0123456789abcdef").write_bytes(b"partial config")
    run(str(crashed), "import", str(EXAMPLE), "-q")
    assert run(str(crashed), "runs").stdout == "demo-run\n"
    # an empty directory, or one that holds a repository, is fine
    (tmp_path / "empty").mkdir()
    run(str(tmp_path / "empty"), "init")
    run(str(tmp_path / "empty"), "import", str(EXAMPLE), "-q")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("server", ["refused", "silent"])
def test_unreachable_s3_endpoint_fails_fast_with_one_line(repo, server, monkeypatch):
    import socket

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    listener = None
    if server == "silent":  # accepts connections (the kernel does) and never answers
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
    else:
        port = _closed_port()
    url = f"s3://bucket/prefix?endpoint_url=http://127.0.0.1:{port}"
    try:
        commands = [["runs"], ["import", str(EXAMPLE)], ["verify"]] if server == "refused" else [["runs"]]
        for args in commands:  # (a silent server costs the 3 s read timeout each time: one command)
            t0 = time.monotonic()
            r = run(url, *args, ok=False)
            elapsed = time.monotonic() - t0
            assert elapsed < 8, (args, elapsed)  # the 3 s read timeout once, not the 60 s call deadline
            # verify's 1 is "corrupt objects": a store it cannot reach is its 3 ("other errors")
            one_line_error(r, 3 if args == ["verify"] else 1, "gave up after")
            assert ("cannot reach the S3 endpoint" if server == "refused" else "timed out") in r.stderr
    finally:
        if listener is not None:
            listener.close()


def test_save_validates_field_types(tmp_path):
    from snapstore.errors import InvalidMessageError

    repo = tmp_path / "r"
    mgr = CheckpointManager(str(repo))
    msgs = [{"role": "user", "content": "x"}]
    for kwargs, fragment in [
        ({"step": -1}, "step must be a non-negative integer"), ({"step": 1.5}, "step"), ({"step": "3"}, "step"),
        ({"step": True}, "step"), ({"token_usage": [1, 2]}, "token_usage must be an object of numbers"),
        ({"token_usage": {"input": "12"}}, "token_usage['input'] must be a number"),
        ({"token_usage": {"input": True}}, "must be a number"),
        ({"metrics": {"nested": {"bad": [1]}}}, "metrics['nested']['bad'] must be a number"),
        ({"metrics": 3}, "metrics must be an object"), ({"status": 7}, "status must be a string"),
        ({"status": {"state": "ok"}}, "status"),
    ]:
        with pytest.raises(InvalidMessageError, match=re.escape(fragment)):
            mgr.save("r", msgs, **kwargs)
    assert not repo.exists()  # nothing stored, not even a repository
    cid = mgr.save("r", msgs, step=0, status="ok", token_usage={"input": 10**30, "details": {"cached": 2, "x": None}},
                   metrics={"latency_s": 0.25})
    assert mgr.get("r", cid).token_usage == {"input": 10**30, "details": {"cached": 2, "x": None}}


def test_gc_dry_run_is_as_precise_as_the_readme_says(repo):
    """README: gc --dry-run reports what the real run deletes, writes and reclaims, bytes to within a
    few dozen (the new objects' ids and ETags are chosen when written)."""
    import_json(repo, EXAMPLE)
    with CheckpointManager(repo) as mgr:
        for k in range(30):
            mgr.save("other", [{"role": "user", "content": f"x{j} " * 50} for j in range(k + 1)], step=k)
    run(repo, "prune", "--keep-last", "2")
    for grace in ("0", "1h"):
        dry = json.loads(run(repo, "gc", "-n", "--grace-period", grace, "--json").stdout)
        real = json.loads(run(repo, "gc", "--grace-period", grace, "--json").stdout)
        for key in ("deleted", "live_checkpoints", "live_packs", "repacked_packs", "new_packs", "reclaimed_objects",
                    "pending_candidates", "added_forward", "removed_forward", "redirected_forward"):
            assert dry.get(key) == real.get(key), (grace, key)
        for key in ("reclaimed_bytes", "deleted_bytes", "written_bytes"):
            assert abs(dry[key] - real[key]) <= 48, (grace, key, dry[key], real[key])
    assert "few dozen" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(not (SHARED / "sweagent-pydicom1458-gpt4.traj").is_file(), reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
@pytest.mark.parametrize("name", ["sweagent-pydicom1458-gpt4.traj", "sweagent-marshmallow1867-fcreplace.traj"])
def test_shared_file_cli_import_exports_as_before(repo, name):
    """Regression through the CLI: the runs, turns and every checkpoint's export of a shared file are
    the golden ones (tests/data/import_golden.json, made before issue 13's changes)."""
    import hashlib

    golden = json.loads((ROOT / "tests" / "data" / "import_golden.json").read_text())[name]
    s = import_json(repo, SHARED / name)
    assert s["format"] == golden["format"]
    [conv] = golden["conversations"]
    assert [r["run"] for r in s["runs"]] == [conv["run"]]
    cps = ids(repo, conv["run"])[::-1]  # oldest first
    exports = [run(repo, "export", conv["run"], "-c", c).stdout for c in cps]
    assert [len(json.loads(e)) for e in exports] == conv["lengths"]
    digests = "".join(hashlib.sha256(json.dumps(json.loads(e), ensure_ascii=False).encode()).hexdigest()
                      for e in exports)
    assert hashlib.sha256(digests.encode()).hexdigest() == conv["sha256"]


def test_gc_says_what_waits_for_the_grace_period(repo):
    """After a prune, the log segments covering the pruned records are no longer needed but younger
    than the grace period: gc (and gc -n) says so, with the count the grace-0 run then deletes."""
    with CheckpointManager(repo) as mgr:
        for k in range(40):
            mgr.save("r", [{"role": "user", "content": f"m{j}"} for j in range(k + 1)], step=k)
    run(repo, "prune", "--keep-last", "2")
    dry = json.loads(run(repo, "gc", "-n", "--json").stdout)
    real = json.loads(run(repo, "gc", "--json").stdout)
    assert real["deleted"].get("log", 0) == 0 and real["pending_objects"] > 0
    for key in ("pending_objects", "pending_bytes", "pending_kinds"):
        assert dry[key] == real[key], key
    text = run(repo, "gc").stdout
    assert "waiting:" in text and f"{real['pending_kinds']['log']} log segment" in text and "grace period (1h)" in text
    assert f"kept:       {real['live_packs']} pack" in text and "more than 25% of it is dead" in text
    now = json.loads(run(repo, "gc", "--grace-period", "0", "--json").stdout)
    assert now["deleted"].get("log", 0) == real["pending_kinds"]["log"] and now["pending_objects"] == 0
    assert "waiting:" not in run(repo, "gc").stdout


def test_stats_counts_the_compacted_stubs(repo):
    """On a local directory the run log is compacted: `stats` shows how many manifests are 0-byte
    stubs (their records live in log segments), the same number as its JSON."""
    with CheckpointManager(repo) as mgr:
        for k in range(40):
            mgr.save("r", [{"role": "user", "content": f"m{j}"} for j in range(k + 1)], step=k)
    st = json.loads(run(repo, "stats", "--json").stdout)
    stubs = st["objects"]["manifests"]["stubs"]
    assert 0 < stubs < st["objects"]["manifests"]["count"]
    row = [ln for ln in run(repo, "stats").stdout.splitlines() if "of them stubs" in ln]
    assert len(row) == 1 and row[0].split()[3] == str(stubs), row


def test_stats_reads_the_run_log_from_its_log_segments(repo):
    """`stats` reads the records that log segments cover from the segments (a GET per segment, not per
    manifest) and reports the same figures as reading every manifest."""
    from snapstore.maintenance.runs import read_all_runs

    with CheckpointManager(repo, compact_log=False) as mgr:
        for k in range(300):
            mgr.save("r", [{"role": "user", "content": f"m{j}"} for j in range(k + 1)], step=k,
                     session_state={"k": k})
    st = json.loads(run(repo, "stats", "--json").stdout)
    assert st["checkpoints"] == 300 and st["requests"]["requests"]["GET"] < 300 // 4, st["requests"]
    whole = CheckpointManager(repo)
    logs = read_all_runs(whole.repo)  # every manifest, one GET each
    live = [m for log in logs.values() for m in log.live]
    assert st["message_bytes"] == sum(m.size for m in live) and len(live) == 300
    assert whole.store.stats.counts["GET"] >= 300


def test_list_pages_with_before(repo):
    import_json(repo, EXAMPLE)  # 10 checkpoints, seq 0..9
    seen, before = [], None
    while True:
        args = ["list", "demo-run", "--limit", "3", "--json"] + ([] if before is None else ["--before", str(before)])
        page = json.loads(run(repo, *args).stdout)
        if not page:
            break
        seen += [p["seq"] for p in page]
        before = page[-1]["seq"]
    assert seen == list(range(9, -1, -1))
    r = run(repo, "list", "demo-run", "--limit", "3", "--before", "7")
    assert [line.split()[1] for line in r.stdout.splitlines()[1:]] == ["6", "5", "4"]
    assert r.stderr.endswith(f"next page: snapstore --repo {repo} list demo-run --limit 3 --before 4\n"), r.stderr
    r = run(repo, "list", "demo-run", "--before", "0")  # past the end of a run that exists: empty, not an error
    assert r.exit_code == 0 and r.stdout == "" and "no checkpoint below seq 0" in r.stderr
    assert run(repo, "list", "nope", "--before", "3", ok=False).exit_code == 1
    assert run(repo, "list", "demo-run", "--before", "-1", ok=False).exit_code == 2


def test_verify_counts_many_errors_of_one_cause_on_one_line():
    # a trial saw 26 identical corrupt-manifest lines (every manifest under a key the config lacked)
    from snapstore.cli.maint_cmds import SAME_ERROR_SHOWN, _error_lines
    from snapstore.maintenance.verify import Problem
    same = [Problem("corrupt-manifest", f"runs/r/m/{i}", f"corrupt object runs/r/m/{i}: sealed under key 99a9eada")
            for i in range(26)]
    other = Problem("missing-pack", "packs/ab/cd", "referenced but not in the store")
    lines = _error_lines(same[:2] + [other] + same[2:])
    assert lines[:SAME_ERROR_SHOWN] == [f"error: corrupt-manifest: runs/r/m/{i}: sealed under key 99a9eada\n"
                                        for i in range(SAME_ERROR_SHOWN)]
    assert lines[SAME_ERROR_SHOWN] == (f"error: corrupt-manifest: {26 - SAME_ERROR_SHOWN} more object(s) with the "
                                       "same error (--json lists each)\n")
    assert lines[-1] == "error: missing-pack: packs/ab/cd: referenced but not in the store\n" and len(lines) == 5
    assert len(_error_lines(same[:SAME_ERROR_SHOWN])) == SAME_ERROR_SHOWN  # few: each on its line


def test_verify_of_no_repository_is_not_taken_for_corruption(tmp_path):
    # exit 1 is verify's "corrupt objects"; a location with nothing to verify is 3 ("other errors")
    r = run(str(tmp_path / "nothing"), "verify", ok=False)
    assert r.exit_code == 3 and "no snapstore repository at" in r.stderr, (r.exit_code, r.stderr)
    # nor is a file that is not a repository at all (a trial: "not a SQLite database" exited 1)
    bad = tmp_path / "bad.db"
    bad.write_text("hello\n")
    r = run(str(bad), "verify", ok=False)
    assert r.exit_code == 3 and "not a SQLite database" in r.stderr, (r.exit_code, r.stderr)
    (tmp_path / "dir.db").mkdir()
    r = run(str(tmp_path / "dir.db"), "verify", ok=False)
    assert r.exit_code == 3, (r.exit_code, r.stderr)
