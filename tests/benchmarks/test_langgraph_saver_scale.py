"""benchmarks/langgraph_saver_scale.py run small: 3 turns of the chat graph on a real snapstore
SQLite file, timed and profiled, read back in a real fresh process."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.graph")

from benchmarks import langgraph_saver_scale as lss  # noqa: E402


def test_profile_names_where_a_step_goes(tmp_path, capsys):
    row = lss.run("snapstore-sqlite", 3, True, "async", str(tmp_path), 1, profile=30)
    assert row["turns"] == 3 and row["step_p50_ms"] > 0 and row["stored_bytes"] > row["core_bytes"] > 0
    err = capsys.readouterr().err
    assert "# profile: snapstore-sqlite, 3 turns" in err
    assert "put_record" in err
    assert "manager/save.py" in err  # the snapstore save is inside what was profiled


def test_no_profile_unless_asked(tmp_path, capsys):
    lss.run("snapstore-sqlite", 2, True, "async", str(tmp_path), 1)
    assert "# profile" not in capsys.readouterr().err
