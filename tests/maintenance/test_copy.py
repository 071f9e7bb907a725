"""copy_repository (snapstore/maintenance/copy.py): a repository copied exactly between stores, on
real imported trajectories; interrupted (an exception mid-copy, a SIGKILLed process) and resumed;
what it refuses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError, RepositoryError, RepositoryNotFound
from snapstore.format import keys
from snapstore.importers import load_trajectory
from snapstore.maintenance.copy import CopyConflict, copy_repository, same_location
from snapstore.stores import open_store
from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore
from snapstore.stores.sqlite import SqliteStore

from tests.helpers import paths
from tests.helpers.shared_data import SHARED

MARSHMALLOW = SHARED / "sweagent-marshmallow1867-fcreplace.traj"
HUMANEVAL = SHARED / "sweagent-humanevalfix0.traj"
TAUBENCH = SHARED / "taubench-gpt4o-airline.json"
needs_shared = pytest.mark.skipif(not MARSHMALLOW.is_file(), reason=f"shared trajectory {MARSHMALLOW} not found")


def import_into(location, path, conversations=None, **options):
    """Save each conversation of trajectory ``path`` into ``location``, one checkpoint per turn
    (the first ``conversations`` only); returns the run ids."""
    _, convs = load_trajectory(str(path))
    runs = []
    with CheckpointManager(location, **options) as mgr:
        for conv in convs[:conversations]:
            run = path.name.split(".")[0] + (f"/{conv.name}" if conv.name else "")
            for i, msgs in enumerate(conv.checkpoints):
                mgr.save(run, msgs, step=i)
            runs.append(run)
    return runs


def objects(store) -> dict:
    """Every key of ``store`` and its bytes."""
    return {o.key: store.get(o.key) for o in store.list("")}


def latest_of(store) -> dict:
    mgr = CheckpointManager(store, create=False)
    try:
        return {r: (mgr.latest(r).id, mgr.latest(r).messages) for r in mgr.runs()}
    finally:
        mgr.close()


def verified(store) -> None:
    mgr = CheckpointManager(store, create=False)
    try:
        report = mgr.verify(read_data=True)
    finally:
        mgr.close()
    assert report.ok, report.errors


def source_repo(tmp_path):
    """A directory repository of two real runs, one with a checkpoint deleted and a rollback."""
    src = str(tmp_path / "src")
    runs = import_into(src, MARSHMALLOW, fsync=False) + import_into(src, HUMANEVAL, fsync=False)
    with CheckpointManager(src, fsync=False) as mgr:
        cps = mgr.list(runs[0])
        mgr.rollback(runs[0], cps[len(cps) // 2].id)
        mgr.delete(runs[1], mgr.list(runs[1])[-1].id)
    return src


@needs_shared
def test_directory_to_sqlite_file_and_back_is_exact(tmp_path):
    src = LocalStore(source_repo(tmp_path))
    db = SqliteStore(tmp_path / "copy.db")
    back = LocalStore(tmp_path / "back")
    want = objects(src)
    assert any(k.startswith("packs/") for k in want) and keys.CONFIG in want

    r1 = copy_repository(src, db)
    assert (r1.objects, r1.copied, r1.skipped) == (len(want), len(want), 0)
    assert r1.bytes_copied == sum(map(len, want.values()))
    r2 = copy_repository(db, back)
    assert objects(db) == want and objects(back) == want  # byte for byte, both ways
    for s in (db, back):
        verified(s)
        assert latest_of(s) == latest_of(src)
    again = copy_repository(src, db)  # a repeated copy writes nothing
    assert (again.copied, again.skipped, again.bytes_copied) == (0, len(want), 0)
    assert r2.copied == len(want)


@needs_shared
def test_to_s3_and_back_over_moto_http(tmp_path, s3_http_store):
    src = LocalStore(source_repo(tmp_path))
    want = objects(src)
    copy_repository(src, s3_http_store)
    assert objects(s3_http_store) == want
    verified(s3_http_store)
    db = SqliteStore(tmp_path / "from-s3.db")
    copy_repository(s3_http_store, db)
    assert objects(db) == want
    assert latest_of(db) == latest_of(src) == latest_of(s3_http_store)


@needs_shared
def test_memory_source_and_a_new_save_brought_over(tmp_path):
    mem = MemoryStore()
    run = import_into(mem, HUMANEVAL)[0]
    db = SqliteStore(tmp_path / "m.db")
    copy_repository(mem, db)
    with CheckpointManager(mem) as mgr:  # the source gains a save; copying again adds it
        mgr.save(run, mgr.latest(run).messages + [{"role": "user", "content": "one more"}])
    r = copy_repository(mem, db)
    assert r.copied >= 2 and r.skipped > 0
    assert objects(db) == objects(mem)
    assert latest_of(db) == latest_of(mem)


@needs_shared
def test_interrupted_copy_is_no_repository_and_a_rerun_resumes(tmp_path):
    src = LocalStore(source_repo(tmp_path))
    dst = LocalStore(tmp_path / "dst")
    seen = []

    def stop_in_logs(phase, done, total):
        seen.append(phase)
        if phase == "logs":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_repository(src, dst, progress=stop_in_logs)
    assert seen[0] == "packs" and "config" not in seen
    part = objects(dst)
    assert part and keys.CONFIG not in part
    assert all(src.get(k) == v for k, v in part.items())
    with pytest.raises(RepositoryNotFound):  # half a copy is not a repository
        CheckpointManager(dst, create=False).repo
    r = copy_repository(src, dst)
    assert r.skipped >= len([k for k in part if not k.startswith("runs/")])
    assert r.copied + r.skipped == r.objects == len(objects(src))
    assert objects(dst) == objects(src)
    verified(dst)


def test_refusals(tmp_path):
    mem = MemoryStore()
    with CheckpointManager(mem) as mgr:
        mgr.save("r", [{"role": "user", "content": "hi"}])
    a = LocalStore(tmp_path / "a")
    copy_repository(mem, a)

    with pytest.raises(InvalidInputError, match="same location"):
        copy_repository(a, LocalStore(str(tmp_path / "a") + "/"))
    os.symlink(tmp_path / "a", tmp_path / "link")
    assert same_location(a, LocalStore(tmp_path / "link"))
    assert not same_location(mem, MemoryStore())
    db = SqliteStore(tmp_path / "x.db")
    with pytest.raises(InvalidInputError, match="same location"):
        copy_repository(db, open_store(f"sqlite://{tmp_path}/x.db"))
    with pytest.raises(RepositoryNotFound, match="no repository"):
        copy_repository(db, MemoryStore())

    other = LocalStore(tmp_path / "other")
    with CheckpointManager(other) as mgr:
        mgr.save("r", [{"role": "user", "content": "hi"}])
    with pytest.raises(RepositoryError, match="another repository"):
        copy_repository(mem, other)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "Notes.TXT").write_text("mine")
    with pytest.raises(RepositoryError, match="Notes.TXT"):
        copy_repository(mem, LocalStore(foreign))
    assert os.listdir(foreign) == ["Notes.TXT"]  # nothing written

    extra = MemoryStore()
    extra.put("runs/zz/m/0000000000000001", b"not ours")
    with pytest.raises(CopyConflict, match="runs/zz/m/0000000000000001") as e:
        copy_repository(mem, extra)
    assert e.value.key == "runs/zz/m/0000000000000001"

    changed = MemoryStore()
    pack = next(o.key for o in mem.list("packs/"))
    changed.put(pack, mem.get(pack)[:-1] + b"\0")
    with pytest.raises(CopyConflict, match=pack):
        copy_repository(mem, changed)
    assert keys.CONFIG not in objects(changed)


def test_gc_transients_left_out(tmp_path):
    mem = MemoryStore()
    with CheckpointManager(mem) as mgr:
        mgr.save("r", [{"role": "user", "content": "hi"}])
    mem.put(keys.GC_LOCK, b"{}")
    r = copy_repository(mem, (dst := MemoryStore()))
    assert r.left_out == [keys.GC_LOCK]
    assert keys.GC_LOCK not in objects(dst) and keys.CONFIG in objects(dst)


@needs_shared
def test_sigkilled_copy_then_rerun_completes(tmp_path):
    src = str(tmp_path / "src.db")
    import_into(src, TAUBENCH, conversations=40, fsync=False)
    total = len(objects(SqliteStore(src)))
    dst = tmp_path / "dst"
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "snapstore", "--repo", src, "copy", str(dst), "--no-verify"],
                            env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            packs = dst / "packs"
            if packs.is_dir() and (dst / "runs").is_dir():  # past the packs, into the records
                break
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    store = LocalStore(dst)
    part = objects(store)
    assert keys.CONFIG not in part and 0 < len(part) < total
    with pytest.raises(RepositoryNotFound):
        CheckpointManager(store, create=False).repo
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", src, "copy", str(dst)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "verify: OK" in r.stderr and "already there" in r.stderr
    assert objects(store) == objects(SqliteStore(src))
    verified(store)
    assert latest_of(store) == latest_of(SqliteStore(src))
