"""The GC lock: a killed GC does not block the next one, a live one does, a lost lock stops a GC.

Issue 20: a SIGKILLed GC blocked every GC for 30 minutes with no way to take the lock over (122
of 146 GC attempts refused in one kill run). Now a lock names its process (host, boot, pid and
start time): one whose process is gone on this machine is taken over at once; a running GC
refreshes its lock, so one killed elsewhere goes stale after ``LOCK_TIMEOUT`` (300 s) without a
refresh; ``gc --break-lock`` removes it; and a GC whose lock was taken over deletes nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, PreconditionFailed
from snapstore.maintenance.gc import LOCK_KEY, LOCK_TIMEOUT
from snapstore.stores import LocalStore
from tests.helpers import paths

ROOT = paths.ROOT


def _repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    for i in range(3):
        m.save("r", [{"role": "user", "content": f"m{j}"} for j in range(i + 1)])
    m.prune(keep_last=1, run_id="r")
    return root


def _hanging_gc(root) -> subprocess.Popen:
    """A real process running GC on ``root`` that prints "marked" after its mark phase and then
    hangs (120 s) holding the GC lock; the caller kills it."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from snapstore import CheckpointManager
        from snapstore.stores import LocalStore
        m = CheckpointManager(LocalStore({str(root)!r}))
        def hang(**_):
            print("marked", flush=True)
            time.sleep(120)
        m.gc(grace_period=0, hooks={{"after_mark": hang}})
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_a_gc_killed_on_this_machine_is_taken_over_at_once(tmp_path):
    root = _repo(tmp_path)
    p = _hanging_gc(root)
    try:
        assert p.stdout.readline().strip() == "marked"
        mgr = CheckpointManager(LocalStore(root))
        with pytest.raises(ConflictError, match="another garbage collection is running"):
            mgr.gc(grace_period=0)  # alive: refused, and the error says how to break it
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert (root / LOCK_KEY).exists()  # the killed GC left its lock
    t = time.monotonic()
    rep = CheckpointManager(LocalStore(root)).gc(grace_period=0)
    assert time.monotonic() - t < 10 and rep.deleted["manifests"] >= 1
    assert not (root / LOCK_KEY).exists()
    assert CheckpointManager(LocalStore(root)).latest("r").messages[-1] == {"role": "user", "content": "m2"}


def test_a_gc_killed_and_not_yet_reaped_is_taken_over_at_once(tmp_path):
    """A GC SIGKILLed whose parent has not waited for it yet is a zombie: its pid and start time
    still show in /proc, but it holds nothing and never refreshes its lock (it used to count as
    alive, so every GC was refused for LOCK_TIMEOUT)."""
    root = _repo(tmp_path)
    p = _hanging_gc(root)
    try:
        assert p.stdout.readline().strip() == "marked"
        os.kill(p.pid, signal.SIGKILL)  # not waited for: a zombie until p.wait() below
        for _ in range(200):
            if Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the killed process did not become a zombie")
        assert (root / LOCK_KEY).exists()  # the killed GC left its lock
        t = time.monotonic()
        rep = CheckpointManager(LocalStore(root)).gc(grace_period=0)
        assert time.monotonic() - t < 10 and rep.deleted["manifests"] >= 1
        assert not (root / LOCK_KEY).exists()
        assert p.poll() is None or p.returncode == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=30)


def test_a_lock_of_another_machine_blocks_until_stale_or_broken(tmp_path):
    root = _repo(tmp_path)
    store = LocalStore(root)
    store.put(LOCK_KEY, json.dumps({"host": "elsewhere", "pid": 1, "token": "t", "boot": "b"}).encode())
    mgr = CheckpointManager(store)
    with pytest.raises(ConflictError) as ei:
        mgr.gc(grace_period=0)
    assert "elsewhere" in str(ei.value) and "--break-lock" in str(ei.value)
    old = time.time() - LOCK_TIMEOUT - 5
    os.utime(root / LOCK_KEY, (old, old))  # not refreshed for longer than LOCK_TIMEOUT: stale
    mgr.gc(grace_period=0)
    store.put(LOCK_KEY, json.dumps({"host": "elsewhere", "pid": 1, "token": "t"}).encode())
    mgr.gc(grace_period=0, break_lock=True)
    assert not (root / LOCK_KEY).exists()


def test_cli_break_lock(tmp_path):
    root = _repo(tmp_path)
    LocalStore(root).put(LOCK_KEY, json.dumps({"host": "elsewhere", "pid": 1, "token": "t"}).encode())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(root), "gc", "--grace-period", "0"],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "--break-lock" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(root), "gc", "--grace-period", "0",
                        "--break-lock"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert not (root / LOCK_KEY).exists()


def test_a_running_gc_refreshes_its_lock_and_stops_if_it_loses_it(tmp_path):
    root = _repo(tmp_path)
    store = LocalStore(root)
    before = {p.relative_to(root) for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts and p.name != ".wal"}
    seen = {}

    def slow(**_):
        m0 = os.stat(root / LOCK_KEY).st_mtime
        time.sleep(0.6)  # three refresh intervals of a 1 s lock_timeout
        seen["refreshed"] = os.stat(root / LOCK_KEY).st_mtime > m0
        # another GC takes the lock over (as if this one had looked stale)
        for _ in range(50):  # (the GC's own refresh may win a round)
            try:
                store.put_if_match(LOCK_KEY, json.dumps({"host": "elsewhere", "pid": 1, "token": "other"}).encode(),
                                   store.head(LOCK_KEY).etag)
                break
            except PreconditionFailed:
                continue

    with pytest.raises(ConflictError, match="lost its lock"):
        CheckpointManager(store).gc(grace_period=0, lock_timeout=1.0, hooks={"after_mark": slow})
    assert seen["refreshed"]
    after = {p.relative_to(root) for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts and p.name != ".wal"}
    assert before <= after  # it deleted nothing


def test_cli_prune_of_an_unknown_run_is_an_error(tmp_path):
    root = _repo(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(root), "prune", "--run", "nope",
                        "--keep-last", "1"], capture_output=True, text=True, env=env)
    assert r.returncode == 1 and r.stderr.strip() == "snapstore: error: run 'nope' not found", r.stderr
