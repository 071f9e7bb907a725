"""A save on a SQLite file is one transaction (one WAL commit, one fsync with synchronous=FULL),
through the real CheckpointManager, with the conflict contract of the ordered writes.

Commits are counted by the store (``SqliteStore.commits``) and, independently, by SQLite's trace of
the statements its writing connection runs. Conflicts: two managers on one file (one of them in
another process), a stale writer after a save, a rollback, a delete and a prune; four real processes
appending to one run. Nothing acknowledged is lost and a refused save leaves no object behind."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.importers import load_trajectory
from snapstore.stores.sqlite import SqliteStore

from tests.helpers import paths
from tests.helpers.shared_data import SHARED

TRAJS = ["sweagent-marshmallow1867-fcreplace.traj", "minisweagent-astroid1333-chat.traj.json",
         "openhands-oas-metrics-loop.json"]
"""14, 188 and 100 checkpoints: tier merges every few saves, log segments every 16th (the long two)."""


def checkpoints(name: str) -> list[list]:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"shared trajectory {path} not found (set SNAPSTORE_SHARED_DATA)")
    return load_trajectory(path)[1][0].checkpoints


def commits_per_save(store: SqliteStore, cps: list[list], run: str = "r") -> tuple[list[int], list[int]]:
    """Save every checkpoint of ``cps``; per save, (the store's commit count, the COMMITs SQLite traced)."""
    mgr = CheckpointManager(store)
    mgr.save("warm-up", [{"role": "user", "content": "x"}])  # creates the repository (its config)
    sql: list = []
    store._shared().writer.set_trace_callback(lambda s: sql.append(s.strip().upper()))
    own, traced = [], []
    for i, msgs in enumerate(cps):
        c0, t0 = store.commits, sql.count("COMMIT")
        mgr.save(run, msgs, step=i, token_usage={"input_tokens": i})
        own.append(store.commits - c0)
        traced.append(sql.count("COMMIT") - t0)
    store._shared().writer.set_trace_callback(None)
    return own, traced


@pytest.mark.parametrize("traj", TRAJS)
def test_every_save_of_a_real_run_is_one_commit(traj, tmp_path):
    cps = checkpoints(traj)
    store = SqliteStore(tmp_path / "r.db")  # synchronous=FULL: each commit one WAL fsync
    own, traced = commits_per_save(store, cps)
    assert own == [1] * len(cps), own
    assert traced == own
    cp = CheckpointManager(SqliteStore(tmp_path / "r.db")).latest("r")
    assert json.dumps(cp.messages) == json.dumps(cps[-1])
    rep = CheckpointManager(store).verify(read_data=True)
    assert rep.ok and not rep.warnings, [str(x) for x in rep.errors + rep.warnings]
    store.close()


def test_the_ordered_writes_took_two_or_more(tmp_path):
    """The same run on a store that declares no atomic batch (the fallback path) commits each
    write on its own: at least 2 per save, more on tier and log-segment saves (a tier save writes its tier pack in
    place of its own pack, docs/format.md §18)."""
    cps = checkpoints(TRAJS[0])
    store = SqliteStore(tmp_path / "r.db")
    store.capabilities = dataclasses.replace(store.capabilities, atomic_batch=False)
    own, traced = commits_per_save(store, cps)
    assert min(own) >= 2 and max(own) >= 3 and traced == own
    store.close()


def packs(store) -> set:
    return {i.key for i in store.list("packs/")}


def test_stale_writers_get_conflicts_and_write_nothing(tmp_path):
    db = tmp_path / "r.db"
    A, B = CheckpointManager(SqliteStore(db)), CheckpointManager(SqliteStore(db))
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(40)]
    kept = {}

    def save(mgr, n):
        cid = mgr.save("r", msgs[:n])
        kept[cid] = msgs[:n]
        return cid

    c = [save(A, n) for n in range(1, 6)]
    assert B.latest("r").id == c[-1]
    stale = [
        ("save", lambda: save(A, 6)),
        ("rollback", lambda: A.rollback("r", c[2])),
        ("delete", lambda: A.delete("r", A.latest("r").id)),
        ("prune", lambda: A.prune(older_than=0, run_id="r")),  # every checkpoint, the head too
    ]
    for what, change in stale:
        A.latest("r")
        head = B.latest("r")  # B knows the head ...
        change()              # ... then A (which knew it too) moves it
        for cid in list(kept):
            if cid not in {s.id for s in A.list("r")}:
                del kept[cid]  # deleted by a completed rollback/delete/prune
        before = packs(B.repo.store)
        with pytest.raises(ConflictError):
            B.save("r", head.messages + [{"role": "assistant", "content": f"stale after {what}"}])
        assert packs(B.repo.store) == before, f"a refused save after {what} left a pack"
        B.latest("r")  # B reads again (the caller's contract) and goes on
        cid = save(B, 7 + len(kept))
        assert B.latest("r").id == cid
    fresh = CheckpointManager(SqliteStore(db))
    for cid, m in kept.items():
        assert fresh.get("r", cid).messages == m
    assert fresh.verify(read_data=True).ok


def _child(db: str, tag: str, n: int) -> str:
    return textwrap.dedent(f"""
        import json, sys
        from snapstore import CheckpointManager
        from snapstore.errors import ConflictError
        mgr = CheckpointManager({db!r})
        done = conflicts = 0
        while done < {n}:
            cp = mgr.latest("shared")
            msgs = (cp.messages if cp else []) + [{{"role": "user", "content": "{tag}-%d" % done}}]
            try:
                cid = mgr.save("shared", msgs)
            except ConflictError:
                conflicts += 1
                continue
            print(json.dumps([cid, len(msgs), msgs[-1]["content"]]), flush=True)
            done += 1
        print(json.dumps(["conflicts", conflicts]), flush=True)
    """)


def test_four_processes_append_to_one_run(tmp_path):
    """Four real processes append to one run on one file, each reading the head after a conflict:
    every acknowledged save is a live checkpoint holding what was acknowledged, the run is one
    chain (one checkpoint per length), and only ConflictError reached the callers."""
    db = str(tmp_path / "r.db")
    CheckpointManager(db).save("other", [{"role": "user", "content": "x"}])  # the repository exists
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", _child(db, f"p{i}", 12)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(4)]
    acked = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        lines = [json.loads(x) for x in out.splitlines()]
        assert lines[-1][0] == "conflicts"
        acked += lines[:-1]
    assert len(acked) == 48
    mgr = CheckpointManager(db)
    live = {s.id: s for s in mgr.list("shared")}
    assert sorted(s.message_count for s in live.values()) == list(range(1, 49))
    last = mgr.latest("shared").messages
    for cid, n, content in acked:
        assert cid in live and live[cid].message_count == n
        assert last[n - 1]["content"] == content
    assert mgr.verify(read_data=True).ok
