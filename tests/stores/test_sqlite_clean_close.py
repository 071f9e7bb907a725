"""A SQLite store closes cleanly (trial 12): after a command or a manager ends, just the ``.db``
is left beside the database, its WAL checkpointed and the ``-wal``/``-shm`` files removed, as the
``sqlite3`` shell leaves it, also after commands that only read (read-only connections cannot
checkpoint: the store's close does it under the writers' flock) and for a manager its caller never
closed (closed at exit). Another process holding the file open keeps its files, and no data is
lost either way."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

from snapstore import CheckpointManager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(db: str, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "snapstore", "--repo", db, *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


def _beside(tmp_path) -> list[str]:
    return sorted(f for f in os.listdir(tmp_path) if f.startswith("s.db"))


def test_every_command_leaves_just_the_db(tmp_path):
    db = str(tmp_path / "s.db")
    with CheckpointManager(db) as mgr:
        for i in range(3):
            mgr.save("run", [{"role": "user", "content": f"turn {j}"} for j in range(i + 1)])
    assert _beside(tmp_path) == ["s.db"]
    for args in (("runs",), ("list", "run"), ("show", "run"), ("stats",), ("verify",), ("export", "run")):
        _cli(f"sqlite://{db}", *args)
        assert _beside(tmp_path) == ["s.db"], args  # the read-only commands left -wal and -shm
    _cli(db, "archive", "run")
    _cli(db, "gc")
    assert _beside(tmp_path) == ["s.db"]
    assert sorted(d["message_count"] for d in json.loads(_cli(db, "list", "run", "--json").stdout)) == [1, 2, 3]


def test_a_manager_never_closed_is_closed_at_exit(tmp_path):
    db = str(tmp_path / "s.db")
    with CheckpointManager(db) as mgr:
        mgr.save("run", [{"role": "user", "content": "hello"}])
    code = ("import sys\nfrom snapstore import CheckpointManager\nm = CheckpointManager(sys.argv[1])\n"
            "print(m.latest('run').messages[0]['content'])\n{}")
    for tail in ("", "m.save('run', [{'role': 'user', 'content': 'again'}])"):
        p = subprocess.run([sys.executable, "-c", code.format(tail), db], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
        assert p.returncode == 0 and p.stdout.strip() == "hello", p.stderr
        assert _beside(tmp_path) == ["s.db"], tail
    with CheckpointManager(db) as mgr:
        assert mgr.latest("run").messages[0]["content"] == "again"  # the write was checkpointed, not lost


def test_another_process_holding_the_file_keeps_its_wal(tmp_path):
    db = str(tmp_path / "s.db")
    with CheckpointManager(db) as mgr:
        mgr.save("run", [{"role": "user", "content": "hello"}])
    other = sqlite3.connect(db)  # another holder of the file (here: this test process)
    try:
        other.execute("SELECT count(*) FROM snapstore_objects").fetchall()
        _cli(db, "runs")
        _cli(db, "import", os.path.join(ROOT, "examples", "demo-run.json"), "--run", "demo")
        assert "s.db-wal" in _beside(tmp_path)  # not the last connection: SQLite keeps the WAL
        assert other.execute("SELECT count(*) FROM snapstore_objects").fetchall()[0][0] > 0
    finally:
        other.close()
    assert sorted(_cli(db, "runs").stdout.split()) == ["demo", "run"]
    assert _beside(tmp_path) == ["s.db"]
