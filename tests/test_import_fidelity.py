"""Imports that keep everything and a CLI without surprises (issue 20): integers of any size, duplicate
keys, truncated JSON, the size ratio, tau2-bench envelopes, OpenHands V0 events, explicit format
families, Ctrl-C during an import, ``snapstore diff`` and a finished ``CheckpointedLoop``."""

from __future__ import annotations

import contextlib
import json
import sys

import pytest
from click.testing import CliRunner

from shared_data import SHARED

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.errors import InvalidInputError
from snapstore.format.codec import dumps_exact, loads_exact
from snapstore.importers import load_trajectory

HUGE = 7 * 10**4999 + 123  # 5,000 digits: past Python's default 4,300-digit str limit


@pytest.fixture
def repo(tmp_path):
    return str(tmp_path / "repo")


def run(repo, *args, ok=True):
    result = CliRunner().invoke(cli, ["--repo", repo, *args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def one_line_error(result, code, *contains):
    assert result.exit_code == code, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("snapstore: error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    for text in contains:
        assert text in lines[0], lines[0]
    return lines[0]


@contextlib.contextmanager
def any_int_digits():
    """The test's own lift of the digit limit (to build and read expected texts)."""
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(saved)


def _huge_text() -> str:
    with any_int_digits():
        return str(HUGE)


# ------------------------------------------------------------------------------------------------
# integers of any size

def test_api_saves_and_restores_a_5000_digit_integer_everywhere(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"), create=True)
    mgr.save("run", [{"role": "user", "content": "n", "n": HUGE}], session_state={"n": HUGE, "pad": "x" * 9000},
             metadata={"n": HUGE}, metrics={"n": HUGE})
    again = CheckpointManager(str(tmp_path / "r"))
    cp = again.latest("run")
    assert cp.messages[0]["n"] == HUGE and cp.session_state["n"] == HUGE
    assert cp.metadata["n"] == HUGE and cp.metrics["n"] == HUGE
    assert sys.get_int_max_str_digits() == 4300  # the process-wide limit is back as it was


def test_exact_codec_round_trips_a_5000_digit_integer():
    data = dumps_exact({"n": HUGE, "m": -HUGE})
    assert loads_exact(data) == {"n": HUGE, "m": -HUGE}
    assert data.decode() == '{"n":%s,"m":-%s}' % (_huge_text(), _huge_text())


def test_import_and_export_a_5000_digit_integer(repo, tmp_path):
    text = _huge_text()
    path = tmp_path / "big.json"
    path.write_text('[{"role": "user", "content": "count", "n": %s}, {"role": "assistant", "content": "ok"}]' % text)
    _, convs = load_trajectory(path)
    assert convs[0].messages[0]["n"] == HUGE
    run(repo, "import", str(path), "-q")
    out = run(repo, "export", "big").stdout
    assert text in out
    with any_int_digits():
        assert json.loads(out)[0]["n"] == HUGE


# ------------------------------------------------------------------------------------------------
# bad JSON: duplicate keys, truncation

def test_duplicate_key_is_refused_naming_key_and_place(repo, tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "x": {"k": 1, "k": 2}}]')
    with pytest.raises(InvalidInputError, match=r"item 1: x: the object holds the key 'k' twice"):
        load_trajectory(path)
    one_line_error(run(repo, "import", str(path), ok=False), 2, "item 1: x", "'k' twice", "nothing was imported")


def test_duplicate_key_in_json_lines_names_the_line(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a"}]}\n'
                    '{"messages": [{"role": "user", "content": "a", "content": "b"}]}\n')
    with pytest.raises(InvalidInputError, match=r"line 2: messages\[0\]: the object holds the key 'content' twice"):
        load_trajectory(path)


def test_truncated_json_error_is_a_whole_sentence(repo, tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "unfinish')
    line = one_line_error(run(repo, "import", str(path), ok=False), 2, "Unterminated string starting there",
                          "line 1 column")
    assert not line.rstrip().endswith("starting at"), line
    assert "truncated" in line
    path.write_text('[{"role": "user", "content": "hi"}, {"role": "assistant"')
    one_line_error(run(repo, "import", str(path), ok=False), 2, "line 1 column", "truncated")


# ------------------------------------------------------------------------------------------------
# the size ratio

def test_tiny_import_says_larger_not_smaller(repo, tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text('[{"role": "user", "content": "hi"}]')
    err = run(repo, "import", str(path)).stderr
    assert "smaller" not in err and "x larger" in err, err
    ratio = float(err.split("x larger")[0].rsplit("(", 1)[1])
    assert ratio > 5


def test_real_import_still_says_smaller(repo):
    path = SHARED / "openhands-oas-metrics-loop.json"
    if not path.is_file():
        pytest.skip(f"shared trajectory {path} not found (set SNAPSTORE_SHARED_DATA)")
    err = run(repo, "import", str(path)).stderr
    assert "x smaller)" in err and "larger" not in err, err
