"""Run markers (docs/format.md §13): ``runs()`` from LIST pages alone, on a real local directory and
on S3 (moto's HTTP server), with the fallback to reading heads for what the markers cannot decide
(old layouts, in-flight or crashed liveness changes, rollback heads, ids too long for a key)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from snapstore import CheckpointManager
from snapstore.errors import StoreError
from snapstore.format import keys, runmark
from snapstore.stores.local import LocalStore

from tests.helpers.old_release import extract_release

PREVIOUS_COMMIT = "5969c76f4f991b2f6b0d13701cd01ed749d98f74"  # the release before run markers
MSG = [{"role": "user", "content": "hello"}]


def _marks(store) -> list[str]:
    return sorted(i.key for i in store.list(runmark.PREFIX))


def _runs_cost(store) -> tuple[list[str], dict]:
    """``runs()`` of a new manager and the requests it made (config GET included)."""
    fresh = CheckpointManager(store)
    before = store.stats.snapshot()
    got = fresh.runs()
    return got, store.stats.since(before).counts


@pytest.fixture
def local(tmp_path):
    return LocalStore(tmp_path / "repo", fsync=False)


@pytest.fixture(params=["local", "s3-http"])
def any_store(request, tmp_path):
    if request.param == "local":
        return LocalStore(tmp_path / "repo", fsync=False)
    return request.getfixturevalue("s3_http_store")


def test_runs_is_two_lists_and_no_get_per_run(any_store):
    mgr = CheckpointManager(any_store)
    ids = [f"run-{i:02d}" for i in range(30)] + ["A", "a", "../x", "é\ud800", "long " * 20]
    for r in ids:
        mgr.save(r, MSG)
        mgr.save(r, MSG + MSG)
    got, c = _runs_cost(any_store)
    assert got == sorted(ids)
    # LIST runs/ beside LIST runmarks/, and the config: nothing per run
    assert c["LIST"] == 2 and c["GET"] == 1 and c["HEAD"] == 0 and c["PUT"] == 0, c
    # one marker per run (its first checkpoint), none per later save
    assert len(_marks(any_store)) == len(ids)
    assert CheckpointManager(any_store).stats()["objects"]["runmarks"] == {"count": len(ids), "bytes": 0}


def test_deleted_and_recreated_runs(any_store):
    a, b = CheckpointManager(any_store), CheckpointManager(any_store)
    for r in ("keep", "gone", "back"):
        a.save(r, MSG)
    b.delete("gone")
    b.delete("back")
    got, c = _runs_cost(any_store)
    assert got == ["keep"]
    # each deleted run: one LIST (max-keys 1) confirms its tombstone is still the head; no GET
    assert c["LIST"] == 2 + 2 and c["GET"] == 1, c
    assert a.runs() == ["keep"]
    b.save("back", MSG)                  # a new life after the tombstone
    assert a.runs() == ["back", "keep"]
    got, c = _runs_cost(any_store)
    assert got == ["back", "keep"] and c["LIST"] == 2 + 1 and c["GET"] == 1, c
    # the recreate replaced the run's older markers by its own commit
    back = [k for k in _marks(any_store) if k.startswith(runmark.run_prefix(a.repo.run_key("back")))]
    assert len(back) == 1 and runmark.parse(back[0]).kind == "l" and runmark.parse(back[0]).seq == 2
    # deleted and recreated many times: markers stay bounded
    for _ in range(5):
        b.delete("back")
        b.save("back", MSG)
    assert len([k for k in _marks(any_store) if k.startswith(runmark.run_prefix(a.repo.run_key("back")))]) == 1
    assert CheckpointManager(any_store).runs() == ["back", "keep"]
    assert CheckpointManager(any_store).verify().ok


def test_long_ids_from_the_key_or_one_read(local):
    mgr = CheckpointManager(local)
    fits = "a fairly long run id, " * 4          # hashed run key; its base32 fits in the marker key
    too_long = "x" * 400                        # does not fit: read the head as before
    for r in (fits, too_long, "short"):
        mgr.save(r, MSG)
    assert mgr.repo.run_key(fits).startswith("h") and mgr.repo.run_key(too_long).startswith("h")
    got, c = _runs_cost(local)
    assert got == sorted([fits, too_long, "short"])
    assert c["LIST"] == 2 + 1 and c["GET"] == 1 + 1, c   # only the too-long id costs its head
    # a marker whose carried id does not hash to its run key is not believed
    rk = mgr.repo.run_key(fits)
    local.delete_many(_marks(local))
    bad = runmark.live_key(rk, 0, "an impostor id, " * 6)
    assert runmark.parse(bad).name.startswith("an impostor")
    local.put(bad.replace(rk, rk), b"")
    assert _runs_cost(local)[0] == sorted([fits, too_long, "short"])


def test_old_layout_falls_back_to_reading_heads(local):
    mgr = CheckpointManager(local)
    for r in ("r1", "r2", "r3"):
        mgr.save(r, MSG)
    mgr.delete("r2")
    local.delete_many(_marks(local))    # as a repository written before run markers
    got, c = _runs_cost(local)
    assert got == ["r1", "r3"]
    assert c["LIST"] == 2 + 3 and c["GET"] == 1 + 3, c   # a LIST and a GET per run, as before


def test_repository_of_the_previous_release(tmp_path):
    """A repository written by the release before run markers lists correctly; the runs this
    version deletes or creates get markers; GC removes the markers of runs it removes."""
    src = extract_release(PREVIOUS_COMMIT, tmp_path)
    root = tmp_path / "old"
    writer = ("import sys; from snapstore import CheckpointManager as M; m = M(sys.argv[1])\n"
              "for r in ('a', 'b', 'c', 'x' * 300): m.save(r, [{'role': 'user', 'content': r}])\n"
              "m.delete('b')\n")
    proc = subprocess.run([sys.executable, "-c", writer, str(root)], cwd=str(tmp_path), capture_output=True,
                          text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    store = LocalStore(root, fsync=False)
    assert _marks(store) == []
    got, c = _runs_cost(store)
    assert got == sorted(["a", "c", "x" * 300]) and c["GET"] == 1 + 4, c
    mgr = CheckpointManager(store)
    mgr.delete("a")
    mgr.save("b", MSG)
    mgr.save("new", MSG)
    assert CheckpointManager(store).runs() == sorted(["b", "c", "new", "x" * 300])
    mgr.gc(grace_period=0)
    mgr.gc(grace_period=0)
    assert not any(k.startswith(runmark.run_prefix(mgr.repo.run_key("a"))) for k in _marks(store))
    assert CheckpointManager(store).runs() == sorted(["b", "c", "new", "x" * 300])
    assert CheckpointManager(store).verify().ok


class _FailMarks:
    """Wraps a store; PUTs of run-marker keys matching ``pattern`` fail (a crash at that point:
    what came before is stored, that marker is not)."""

    def __init__(self, store, pattern):
        self._s, self.pattern = store, pattern

    def __getattr__(self, name):
        return getattr(self._s, name)

    def put(self, key, data):
        if key.startswith(runmark.PREFIX) and self.pattern in key:
            raise StoreError(f"injected failure writing {key}")
        return self._s.put(key, data)


def test_a_tombstone_without_its_commit_is_read_from_the_head(local):
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    mgr.save("s", MSG)
    crashing = CheckpointManager(_FailMarks(local, ".t."))   # the tombstone lands, its commit does not
    crashing.delete("r")
    assert any(".it." in k for k in _marks(local))          # the intent stays
    got, c = _runs_cost(local)
    assert got == ["s"] and c["GET"] == 1 + 1, c
    # the next liveness change of that run settles it again
    CheckpointManager(local).save("r", MSG)
    got, c = _runs_cost(local)
    assert got == ["r", "s"] and c["GET"] == 1, c


def test_an_intent_that_cannot_be_written_stops_the_delete(local):
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    with pytest.raises(StoreError):
        CheckpointManager(_FailMarks(local, ".it.")).delete("r")
    assert CheckpointManager(local).latest("r").messages == MSG
    assert CheckpointManager(local).runs() == ["r"]


def test_a_recreate_in_flight_or_crashed_is_read_from_the_head(local):
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    mgr.delete("r")
    CheckpointManager(_FailMarks(local, ".l")).save("r", MSG)  # landed; its commit failed
    got, c = _runs_cost(local)
    assert got == ["r"] and c["GET"] == 1 + 1, c
    # an intent in flight (written, record not yet published): the head decides
    local.put(runmark.intent_key(mgr.repo.run_key("q"), 1, "t", b"\1" * 8), b"")
    mgr.save("q", MSG)
    got, c = _runs_cost(local)
    assert got == ["q", "r"], got


def test_rollback_heads_are_read(local):
    mgr = CheckpointManager(local)
    first = mgr.save("r", MSG)
    mgr.save("r", MSG + MSG)
    mgr.rollback("r", first)
    got, c = _runs_cost(local)
    assert got == ["r"] and c["GET"] >= 2, c     # the rollback record and its target
    # its target vanishes (an interrupted delete): the run resolves to nothing and is not listed
    local.delete_many([keys.manifest_key(mgr.repo.run_key("r"), 0)])
    assert _runs_cost(local)[0] == []
    mgr2 = CheckpointManager(local)
    mgr2.save("r", MSG)                          # a checkpoint on the rollback: no marker decides
    got, c = _runs_cost(local)
    assert got == ["r"] and c["GET"] == 1, c


def test_stale_markers_of_an_earlier_life_never_hide_a_run(local):
    """GC removed a deleted run's whole log but (interrupted) not its markers; the id is saved
    again from position 0: the old tombstone commit does not match the head, so it is read."""
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    mgr.save("r", MSG)
    mgr.delete("r")
    stale = _marks(local)
    rk = mgr.repo.run_key("r")
    local.delete_many([i.key for i in local.list(keys.run_prefix(rk))])   # the log is gone
    mgr2 = CheckpointManager(local)
    mgr2.save("r", MSG)
    assert set(stale) <= set(_marks(local))
    assert CheckpointManager(local).runs() == ["r"]


def test_garbage_under_runmarks_is_ignored_and_reported(local):
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    rk = mgr.repo.run_key("r")
    for junk in ("runmarks/zz", f"runmarks/{rk}.0000000000000000.l", f"runmarks/{rk}.{'f' * 16}.q",
                 f"runmarks/{rk}.{'f' * 16}.t.e12", f"runmarks/{rk}.{'f' * 16}.l.nzz"):
        local.put(junk, b"")
    assert CheckpointManager(local).runs() == ["r"]
    rep = CheckpointManager(local).verify()
    assert rep.ok and sum(w.code == "unknown-object" and w.key.startswith("runmarks/") for w in rep.warnings) == 5


def test_gc_removes_markers_with_the_run(local):
    mgr = CheckpointManager(local)
    mgr.save("r", MSG)
    mgr.save("keep", MSG)
    mgr.delete("r")
    for _ in range(2):
        mgr.gc(grace_period=0)
    assert _marks(local) == [runmark.live_key(mgr.repo.run_key("keep"), 0)]
    assert CheckpointManager(local).runs() == ["keep"]
