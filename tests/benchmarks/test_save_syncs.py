"""benchmarks/save_syncs.py run small: 48 saves on a real directory and a real SQLite file (the
saves at positions 31 and 47 write a level-1 segment and stubs on the directory)."""

from __future__ import annotations

from benchmarks import save_syncs


def test_save_syncs_counts_and_checks_a_small_run(tmp_path, capsys):
    res = save_syncs.main(["--saves", "48", "--dir", str(tmp_path)])
    local, sql = res["local_fsyncs"], res["sqlite_commits"]
    assert local["saves"] == sql["saves"] == 48
    assert local["max"] == 2 and local["worst"] == [31, 47]  # publish + (segment, stubs) batch
    assert sql["max"] == 1  # no stubs on SQLite: the level-1 segment is in the save's commit
    assert local["segments"] == sql["segments"] == {1: 3}
    assert local["listed"] and sql["listed"] and local["verify_ok"] and sql["verify_ok"]
    assert "local_fsyncs" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())  # the temporary repositories are removed
