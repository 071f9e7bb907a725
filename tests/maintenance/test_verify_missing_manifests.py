"""A manifest deleted outside snapstore is reported by ``verify``; a removal snapstore made is not.

Issue 20: deleting a manifest object (a disk error, an operator's mistake, a bad lifecycle rule)
was never reported: a non-head one silently lost that checkpoint, a deleted head silently moved
the head back, and ``verify --read-data`` reported 0 errors. Every removal of log records now
writes a removal record first (docs/format.md §16), so a gap in a run's log that none names is a
``missing-manifest`` error. Retention, rollback, delete and GC (young records voided, old ones
deleted) leave no such error.
"""

from __future__ import annotations

import pytest

from tests.helpers.fake_clock import Clock
from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.manifest import FREE_AFTER
from snapstore.stores import LocalStore
from snapstore.stores.memory import MemoryStore
from tests.helpers import paths

RUN = "r"


def msgs(n):
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def _codes(rep):
    return [p.code for p in rep.errors], [p.code for p in rep.warnings]


def test_a_deleted_middle_manifest_is_an_error(tmp_path):
    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    ids = [m.save(RUN, msgs(i + 1)) for i in range(6)]
    assert m.verify(read_data=True).ok
    key = keys.manifest_key(m.repo.run_key(RUN), 2)
    (root / key).unlink()  # an operator's mistake
    rep = CheckpointManager(LocalStore(root)).verify(read_data=True)
    assert not rep.ok
    miss = [p for p in rep.errors if p.code == "missing-manifest"]
    assert len(miss) == 1 and miss[0].key == key and "outside snapstore" in miss[0].message
    assert [s.id for s in CheckpointManager(LocalStore(root)).list(RUN)] == [i for i in ids[::-1] if i != ids[2]]


def test_a_deleted_head_covered_by_a_log_segment_is_an_error(tmp_path):
    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root), compact_log=False)
    for i in range(16):  # position 15 ends a log segment: its copy outlives the manifest
        m.save(RUN, msgs(i + 1))
    key = keys.manifest_key(m.repo.run_key(RUN), 15)
    (root / key).unlink()
    rep = CheckpointManager(LocalStore(root)).verify()
    miss = [p for p in rep.errors if p.code == "missing-manifest"]
    assert [p.key for p in miss] == [key] and "newest manifest was deleted" in miss[0].message


@pytest.mark.parametrize("age", [0, FREE_AFTER + 1])
def test_removals_made_by_snapstore_leave_verify_clean(age):
    clock = Clock()
    store = MemoryStore(clock=clock)
    m = CheckpointManager(store, clock=clock)
    for i in range(40):
        m.save(RUN, msgs(i + 1))
    a = m.save("other", msgs(1))
    for i in range(3):
        m.save("other", msgs(i + 2))
    clock.advance(age)  # 0: young records become void records; older: deleted
    m.prune(keep_last=5, run_id=RUN)
    m.rollback("other", a)
    head = m.latest(RUN).id
    m.delete(RUN, m.list(RUN)[2].id)  # a middle checkpoint
    m.save("gone", msgs(3))
    m.delete("gone")
    errors, warnings = _codes(m.verify(read_data=True))
    assert errors == [] and set(warnings) <= {"unreferenced-pack"}  # (GC reclaims those)
    for _ in range(2):
        clock.advance(FREE_AFTER + 1)
        m.gc(grace_period=0)
        errors, warnings = _codes(m.verify(read_data=True))
        assert errors == [] and "unaccounted-gap" not in warnings
    assert m.latest(RUN).id == head and m.latest("other").id == a
    assert m.runs() == ["other", RUN]


def test_removal_records_are_merged_and_go_with_their_run(tmp_path):
    store = LocalStore(tmp_path / "repo")
    m = CheckpointManager(store)
    for i in range(30):
        m.save(RUN, msgs(i + 1))
        if i % 2:
            m.prune(keep_last=3, run_id=RUN)
    rk = m.repo.run_key(RUN)
    n = len(list(store.list(f"runs/{rk}/x/")))
    assert n > 8
    m.gc(grace_period=0)
    assert len(list(store.list(f"runs/{rk}/x/"))) == 1
    assert m.verify().ok
    m.delete(RUN)
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    assert list(store.list(f"runs/{rk}/")) == []
    assert m.latest(RUN) is None
    m.save(RUN, msgs(1))  # a new life starts at position 0, with no old removal record
    assert m.verify().ok


def test_an_older_repository_is_not_judged_by_its_gaps(tmp_path):
    """A repository created before removal records (config ``removals`` absent) has gaps its
    earlier writers left without a record: verify cannot tell them from losses and reports none."""
    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    for i in range(4):
        m.save(RUN, msgs(i + 1))
    (root / keys.manifest_key(m.repo.run_key(RUN), 1)).unlink()
    assert [p.code for p in m.verify().errors] == ["missing-manifest"]
    m.repo.config.removals = 0  # as a repository created before removal records reads
    errors, warnings = _codes(m.verify())
    assert errors == [] and warnings == []


def test_stray_names_at_absurd_positions_give_typed_errors_fast(tmp_path):
    """3,000 manifest names whose positions decode near 2^64 made ``list`` fail with MemoryError
    (a range built over the gap) and ``gc``/``stats`` abort: now each is a stray name, a typed
    IntegrityError naming it, in well under a second."""
    import time

    from snapstore.errors import IntegrityError

    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    for i in range(3):
        m.save(RUN, msgs(i + 1))
    d = root / "runs" / m.repo.run_key(RUN) / "m"
    for i in range(1, 3001):
        (d / f"{i:016x}").write_bytes(b"x" * 40)
    t = time.monotonic()
    assert CheckpointManager(LocalStore(root)).stats()["checkpoints"] == 3  # counts what it can read
    assert time.monotonic() - t < 5
    for op in (lambda f: f.list(RUN), lambda f: f.latest(RUN), lambda f: f.gc(grace_period=0)):
        t = time.monotonic()
        with pytest.raises(IntegrityError, match=f"runs/{m.repo.run_key(RUN)}/m/0000000000000"):
            op(CheckpointManager(LocalStore(root)))
        assert time.monotonic() - t < 5
    rep = CheckpointManager(LocalStore(root)).verify()
    assert not rep.ok and all(p.key.startswith(f"runs/{m.repo.run_key(RUN)}/m/0000000000000") for p in rep.errors)


def test_accept_missing_records_the_loss_and_verify_passes_again(tmp_path):
    import os
    import subprocess
    import sys

    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    for i in range(6):
        m.save(RUN, msgs(i + 1))
    key = keys.manifest_key(m.repo.run_key(RUN), 3)
    (root / key).unlink()
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT))
    cmd = [sys.executable, "-m", "snapstore", "--repo", str(root), "verify"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode != 0 and f"missing-manifest: {key}" in r.stdout + r.stderr
    assert "run 'r'" in r.stdout + r.stderr and "--accept-missing" in r.stdout + r.stderr
    r = subprocess.run(cmd + ["--accept-missing"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "accepted-missing" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "missing-manifest" not in r.stdout + r.stderr
