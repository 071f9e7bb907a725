"""The directory store's journal (snapstore/stores/localwal.py, docs/format.md §26): fsyncs per
save through the real CheckpointManager, simulated power cuts (what was written since the last
settle torn or lost, as unsynced page cache would be) replayed by the next opener, deletes never
undone by a replay, a writer process killed with SIGKILL mid-save, and no lock file or journal
left once a repository's runs are deleted and collected.

A power cut is simulated on real processes: a child process saves with the background settler
off (``settle_delay=None``) and ends with ``os._exit`` (no close, no atexit: the kernel drops its
locks as after a crash); the test then damages every file the journal's unsettled records name
(truncated to half, or removed; a deleted file put back, as a lost unlink) and opens the
repository again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from snapstore import CheckpointManager
from snapstore.importers import load_trajectory
from snapstore.stores import LocalStore
from snapstore.stores.localwal import NAME, unsettled
from tests.helpers import paths
from tests.helpers.lockway import child_pythonpath, force_flock
from tests.helpers.shared_data import SHARED

TRAJ = SHARED / "minisweagent-astroid1333-chat.traj.json"
pytestmark = pytest.mark.skipif(not TRAJ.is_file(), reason=f"shared trajectory {TRAJ} not found")


_WAY = {"flock": False}


@pytest.fixture(autouse=True, params=["ofd", "flock"])
def lock_way(request, monkeypatch):
    """Every test twice: with Linux OFD locks, and with the flock(2) lock files of platforms
    without them (the OFD constants removed from fcntl here and in child processes)."""
    _WAY["flock"] = request.param == "flock"
    if _WAY["flock"]:
        force_flock(monkeypatch)
    yield request.param
    _WAY["flock"] = False


def _pythonpath() -> str:
    return child_pythonpath(paths.ROOT) if _WAY["flock"] else str(paths.ROOT)


def _checkpoints(n: int) -> list:
    return load_trajectory(str(TRAJ))[1][0].checkpoints[:n]


def _run_child(script: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], input=stdin, capture_output=True,
                       text=True, env=env, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_save_costs_at_most_two_fsyncs_on_its_path(tmp_path, monkeypatch):
    """Every os.fsync / os.fdatasync during each save, on any thread but the background
    settler's, counted: a save writing one pack and one manifest costs 2; no save costs more
    than one per write it makes; the files are made durable by the settler meanwhile."""
    cps = _checkpoints(60)
    counts = {"path": 0, "settler": 0}
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def counted(real):
        def call(fd):
            counts["settler" if threading.current_thread().name == "snapstore-settler" else "path"] += 1
            return real(fd)
        return call
    mgr = CheckpointManager(str(tmp_path / "repo"))
    mgr.save("warm", cps[0])  # the repository's config and the journal exist
    monkeypatch.setattr(os, "fsync", counted(real_fsync))
    monkeypatch.setattr(os, "fdatasync", counted(real_fdatasync))
    per_save, writes = [], []
    for i, cp in enumerate(cps):
        before_stats, before = mgr.store.stats.snapshot(), counts["path"]
        mgr.save("r", cp, step=i)
        per_save.append(counts["path"] - before)
        d = mgr.store.stats.since(before_stats).counts
        writes.append(d["PUT"] + d["DELETE"])
    mgr.close()
    two_writes = [f for f, w in zip(per_save, writes) if w == 2]
    assert len(two_writes) >= len(cps) // 2 and max(two_writes) <= 2, (per_save, writes)
    assert all(f <= w for f, w in zip(per_save, writes)), (per_save, writes)
    assert sorted(per_save)[len(per_save) // 2] <= 2
    assert counts["settler"] > 0  # the files were synced, off the save's path
    assert not (tmp_path / "repo" / NAME).exists()  # settled and removed by the last user's close


_POWER_CUT_CHILD = r"""
import json, os, sys
from snapstore import CheckpointManager
from snapstore.importers import load_trajectory
from snapstore.stores import LocalStore
root, traj, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cps = load_trajectory(traj)[1][0].checkpoints[:n]
mgr = CheckpointManager(LocalStore(root, settle_delay=None))
ids = [mgr.save("r", cp, step=i) for i, cp in enumerate(cps)]
print(json.dumps(ids), flush=True)
os._exit(0)  # no close, no settle: the files written are unsynced page cache
"""


def _power_cut(root, snapshot=None) -> dict:
    """Damage what a power cut could take: every file an unsettled put wrote (alternately
    truncated to half its size and removed), every file an unsettled delete removed put back
    (from ``snapshot``, a copy of the durable state before it; garbage without one)."""
    done = {"torn": 0, "lost": 0, "undeleted": 0}
    recs = unsettled(root)
    assert recs, "nothing unsettled: the test would not test the replay"
    n_put = 0
    for kind, key in recs:
        p = os.path.join(root, *key.split("/"))
        if kind == "P" and os.path.isfile(p):
            n_put += 1
            if n_put % 2:
                os.unlink(p)
                done["lost"] += 1
            else:
                with open(p, "r+b") as f:
                    f.truncate(os.path.getsize(p) // 2)
                done["torn"] += 1
        elif kind == "D" and not os.path.exists(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
            old = os.path.join(snapshot, *key.split("/")) if snapshot else None
            if old and os.path.isfile(old):
                shutil.copyfile(old, p)
            else:
                with open(p, "wb") as f:
                    f.write(b"garbage from before the delete")
            done["undeleted"] += 1
    return done


def test_a_power_cut_after_saves_loses_no_acknowledged_checkpoint(tmp_path):
    root = str(tmp_path / "repo")
    cps = _checkpoints(40)
    ids = json.loads(_run_child(_POWER_CUT_CHILD, root, str(TRAJ), str(len(cps))))
    done = _power_cut(root)
    assert done["torn"] > 10 and done["lost"] > 10, done
    with CheckpointManager(root) as mgr:  # the opener replays before anything is read
        assert [s.id for s in mgr.list("r")] == ids[::-1]
        for cid, cp in zip(ids, cps):
            assert mgr.get("r", cid).messages == cp
        rep = mgr.verify(read_data=True)
        assert rep.ok, [str(e) for e in rep.errors]
    assert unsettled(root) == []


_DELETES_CHILD = r"""
import json, os, sys
from snapstore import CheckpointManager
from snapstore.importers import load_trajectory
from snapstore.stores import LocalStore
root, traj, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
cps = load_trajectory(traj)[1][0].checkpoints[:n]
store = LocalStore(root, settle_delay=None)
mgr = CheckpointManager(store)
ids = {run: [mgr.save(run, cp, step=i) for i, cp in enumerate(cps)] for run in ("a", "b", "c")}
store.settle()  # everything so far durable: the parent copies this state
print("settled", flush=True)
sys.stdin.readline()
mgr.rollback("a", ids["a"][9])
mgr.delete("b")
mgr.prune(keep_last=3, run_id="c")
kept = mgr.save("a", cps[11], step=11)
mgr.gc(grace_period=0)
print(json.dumps({"a": ids["a"][:10] + [kept], "c": ids["c"][-3:]}), flush=True)
os._exit(0)
"""


def test_a_replay_never_resurrects_what_rollback_delete_prune_and_gc_removed(tmp_path):
    root, snap = str(tmp_path / "repo"), str(tmp_path / "snapshot")
    cps = _checkpoints(24)
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    child = subprocess.Popen([sys.executable, "-c", _DELETES_CHILD, root, str(TRAJ), str(len(cps))],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout.readline().strip() == "settled", child.stderr.read()
    shutil.copytree(root, snap, ignore=shutil.ignore_patterns(NAME))
    out, err = child.communicate("go\n", timeout=120)
    assert child.returncode == 0, err
    live = json.loads(out)
    done = _power_cut(root, snapshot=snap)
    assert done["undeleted"] > 5, done  # packs, manifests and markers the deletes removed came back
    with CheckpointManager(root) as mgr:
        assert mgr.runs() == ["a", "c"]
        assert [s.id for s in mgr.list("a")] == live["a"][::-1]
        assert [s.id for s in mgr.list("c")] == live["c"][::-1]
        assert mgr.latest("a").messages == cps[11]
        rep = mgr.verify(read_data=True)
        assert rep.ok, [str(e) for e in rep.errors]
    removed = set()
    for dirpath, _, files in os.walk(snap):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), snap)
            if not os.path.exists(os.path.join(root, rel)):
                removed.add(rel)
    assert any(r.startswith("packs") for r in removed) and any("/m/" in r for r in removed), removed


_KILLED_WRITER = r"""
import sys
from snapstore import CheckpointManager
from snapstore.importers import load_trajectory
root, traj = sys.argv[1], sys.argv[2]
cps = load_trajectory(traj)[1][0].checkpoints
mgr = CheckpointManager(root)
i = 0
while True:
    cid = mgr.save("r", cps[i % len(cps)], step=i)
    print(i, cid, flush=True)
    i += 1
"""


def test_a_writer_killed_mid_save_leaves_a_repository_another_process_reads(tmp_path):
    root = str(tmp_path / "repo")
    env = dict(os.environ, PYTHONPATH=_pythonpath())
    child = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, root, str(TRAJ)], stdout=subprocess.PIPE,
                             text=True, env=env)
    acked = []
    deadline = time.monotonic() + 60
    while len(acked) < 30 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if line:
            acked.append(line.split()[1])
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    acked += [line.split()[1] for line in child.stdout.read().splitlines() if len(line.split()) == 2]
    assert len(acked) >= 30
    out = _run_child(r"""
        import json, sys
        from snapstore import CheckpointManager
        with CheckpointManager(sys.argv[1]) as mgr:
            ids = [s.id for s in mgr.list("r")]
            mgr.latest("r")
            print(json.dumps({"ids": ids, "ok": mgr.verify(read_data=True).ok}))
    """, root)
    got = json.loads(out)
    assert got["ok"]
    assert set(acked) <= set(got["ids"])
    assert not os.path.exists(os.path.join(root, NAME))  # replayed, settled and removed by that reader


def test_no_lock_file_nor_journal_left_after_runs_are_deleted_and_collected(tmp_path):
    root = tmp_path / "repo"
    cps = _checkpoints(20)
    (root / ".locks").mkdir(parents=True)
    for i in range(5):  # an older release's striped lock files
        (root / ".locks" / f"{i:02x}").touch()
    with CheckpointManager(str(root)) as mgr:
        for run in ("x", "y"):
            for i, cp in enumerate(cps):
                mgr.save(run, cp, step=i)
        assert (root / NAME).is_file()  # while open: the journal holds the locks
        for run in mgr.runs():
            mgr.delete(run)
        for _ in range(2):
            mgr.gc(grace_period=0)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    if _WAY["flock"]:  # without OFD locks the lock files stay (empty; 258 at most)
        locks = [f for f in files if f.startswith(".wal-locks/")]
        assert locks and len(locks) <= 258 and all((root / f).stat().st_size == 0 for f in locks)
        files = [f for f in files if f not in locks]
    assert files == ["config"], files


def test_two_stores_of_one_process_and_a_thread_race_keep_create_only_exact(tmp_path):
    """Create-only claims through two stores on one root (separate journal descriptors) and
    many threads: each key is won exactly once."""
    a, b = LocalStore(tmp_path / "r"), LocalStore(tmp_path / "r")
    wins: list[tuple[str, int]] = []
    lock = threading.Lock()

    def claim(store, who):
        for k in range(40):
            try:
                store.put(f"runs/x/m/{k:04d}", f"{who}".encode())
                with lock:
                    wins.append((f"runs/x/m/{k:04d}", who))
            except Exception as e:  # noqa: BLE001 - only PreconditionFailed is expected
                assert type(e).__name__ == "PreconditionFailed", e
    threads = [threading.Thread(target=claim, args=(s, i)) for i, s in enumerate([a, b, a, b, a, b])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(k for k, _ in wins) == [f"runs/x/m/{k:04d}" for k in range(40)]
    for k, who in wins:
        assert a.get(k) == f"{who}".encode()
    a.close()
    assert (tmp_path / "r" / NAME).exists()  # b still uses it
    b.close()
    assert not (tmp_path / "r" / NAME).exists()


def test_a_process_that_never_closes_its_manager_leaves_no_journal(tmp_path):
    """The snapstore command and scripts that exit without close(): the journal is settled and
    removed at interpreter exit (atexit), not left for the next opener to replay."""
    root = str(tmp_path / "repo")
    _run_child(r"""
        import sys
        from snapstore import CheckpointManager
        mgr = CheckpointManager(sys.argv[1])
        for i in range(5):
            mgr.save("r", [{"role": "user", "content": f"step {i}"}], step=i)
    """, root)
    left = sorted(os.listdir(root))
    assert left == ([".wal-locks"] if _WAY["flock"] else []) + ["config", "packs", "runmarks", "runs"]


def test_a_crafted_journal_naming_keys_outside_the_root_is_ignored(tmp_path):
    from snapstore.stores.localwal import HEADER_SIZE, PUT, _header, encode_record

    root = tmp_path / "repo"
    first = LocalStore(root)
    first.put("config", b"{}")
    first.close()
    rec = encode_record(1, PUT, "../escaped", b"x") + encode_record(1, PUT, "packs/ab/abcd", b"pack")
    (root / NAME).write_bytes(_header(1, HEADER_SIZE, HEADER_SIZE + len(rec)) + rec)
    store = LocalStore(root)
    assert store.get("packs/ab/abcd") == b"pack"  # replayed before the read
    assert not (tmp_path / "escaped").exists()
    store.close()
