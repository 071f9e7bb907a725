"""benchmarks/_lib.py, the benchmarks' shared library: a real child process round trip, the commit
stamp of a real git checkout, percentiles and medians; and the benchmark modules import it rather
than each other (harness and report)."""

from __future__ import annotations

import ast
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT))

from benchmarks import _lib  # noqa: E402

CHILD = '''
import os, sys
sys.path.insert(0, {bench!r})
import _lib

def handle(spec):
    if spec.get("fail"):
        sys.exit("asked to fail")
    import snapstore
    return {{"twice": spec["n"] * 2, "path": os.environ["PYTHONPATH"].split(os.pathsep)[0],
            "extra": os.environ.get("BENCH_X"), "key": os.environ.get("AWS_ACCESS_KEY_ID"),
            "snapstore": os.path.dirname(os.path.dirname(snapstore.__file__))}}

if not _lib.child_entry(None, handle):
    print("parent side")
'''


def test_run_child_round_trips_a_spec_through_a_fresh_process(tmp_path, monkeypatch):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(bench=str(ROOT / "benchmarks")))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "real-looking")
    out = _lib.run_child(script, {"n": 21}, env=_lib.child_env(s3=True, extra={"BENCH_X": "1"}))
    assert out["twice"] == 42 and out["path"] == str(_lib.REPO_ROOT) and out["extra"] == "1"
    assert out["key"] == "testing" and Path(out["snapstore"]).resolve() == _lib.REPO_ROOT
    assert out["process_s"] > 0
    with pytest.raises(_lib.ChildFailed, match="asked to fail"):
        _lib.run_child(script, {"fail": True})
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "parent side"  # no --child: the caller goes on as the parent


def test_a_child_env_puts_the_named_checkout_first_and_a_bytecode_cache(tmp_path):
    env = _lib.child_env(tmp_path, pycache=str(tmp_path / "pyc"))
    assert env["PYTHONPATH"].split(":")[0] == str(tmp_path) and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "pyc")
    assert "PYTHONDONTWRITEBYTECODE" not in env


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_commit_stamp_names_head_and_changes_under_the_paths(tmp_path):
    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "snapstore").mkdir()
    (tmp_path / "snapstore" / "a.py").write_text("x = 1\n")
    (tmp_path / "other.txt").write_text("o\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert _lib.commit_stamp(tree=tmp_path) == (head, False)
    (tmp_path / "other.txt").write_text("changed\n")
    assert _lib.commit_stamp(tree=tmp_path) == (head, False)  # outside the paths
    (tmp_path / "snapstore" / "a.py").write_text("x = 2\n")
    assert _lib.commit_stamp(tree=tmp_path) == (head, True)
    assert _lib.commit_stamp(tree=tmp_path / "snapstore", full=True)[0].startswith(head)
    assert _lib.commit_stamp(tree=tmp_path.parent / "no-such-dir") == ("?", False)


def test_percentiles_medians_and_ratios():
    xs = [5, 1, 4, 2, 3]
    assert _lib.median(xs) == 3 and _lib.median_of([{"a": 1}, {"a": 3}], "a") == 2
    assert _lib.percentile(xs, 0) == 1 and _lib.percentile(xs, 50) == 3 and _lib.percentile(xs, 100) == 5
    assert _lib.percentile(range(101), 90) == 90 and _lib.percentile(range(11), 95) == 10
    assert math.isnan(_lib.median([])) and math.isnan(_lib.percentile([], 50)) and math.isnan(_lib.ratio(1, 0))
    assert _lib.ratio(3, 2) == 1.5
    a, b, c = _lib.quadratic_coefficients([1, 2, 3, 4], [2 * x * x + 3 * x + 1 for x in [1, 2, 3, 4]])
    assert (a, b, c) == pytest.approx((2, 3, 1))


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            names |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return names


def test_harness_and_report_do_not_import_each_other():
    bench = ROOT / "benchmarks"
    assert not {n for n in _imports(bench / "report.py") if n.endswith("harness")}
    assert "benchmarks.report" in _imports(bench / "harness.py")  # the one direction
