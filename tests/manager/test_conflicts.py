"""Writers on one run never silently overwrite each other.

Two managers on one run (stale writer after another's save, delete, rollback; rollback, delete and
prune by a stale caller; ``expect_head=``), retry of a save whose reply was lost, and 8 real OS
processes racing to extend one run on a fsynced local store (by their views and by
``expect_head``). Callers sharing one manager: tests/manager/test_callers.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from snapstore import EMPTY_RUN, CheckpointManager
from snapstore.errors import CheckpointNotFound, ConflictError, RunNotFound, StoreError
from snapstore.stores import LocalStore
from tests.helpers import paths

ROOT = paths.ROOT
RUN = "shared-run"


def _mgr(root) -> CheckpointManager:
    return CheckpointManager(LocalStore(root, fsync=True))


def _manifests(root: Path) -> dict:
    """{path: bytes} of every manifest file (``runs/<run>/m/<seq>``)."""
    out = {}
    runs = root / "runs"
    if not runs.exists():
        return out
    for p in runs.rglob("*"):
        if p.is_file() and p.parent.name == "m":
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def msg(i, who="x"):
    return {"role": "assistant", "content": f"{who} {i}"}


# --- two managers --------------------------------------------------------------------------------

def test_stale_writer_gets_conflict_and_writes_no_manifest(tmp_path):
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1, "a")])
    cp = b.latest(RUN)
    assert cp.id == a1
    b2 = b.save(RUN, cp.messages + [msg(2, "b")])
    before = _manifests(root)

    with pytest.raises(ConflictError) as ei:
        a.save(RUN, [msg(1, "a"), msg(2, "a")])
    assert RUN in str(ei.value)
    assert _manifests(root) == before
    # still conflicted until the stale writer reads the head
    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1, "a"), msg(2, "a")])
    assert _manifests(root) == before

    fresh = _mgr(root)
    assert [s.id for s in fresh.list(RUN)] == [b2, a1]
    assert fresh.latest(RUN).messages == [msg(1, "a"), msg(2, "b")]

    head = a.latest(RUN)
    assert head.id == b2
    a3 = a.save(RUN, head.messages + [msg(3, "a")])
    fresh = _mgr(root)
    cp3 = fresh.get(RUN, a3)
    assert cp3.parent_id == b2 and cp3.messages == [msg(1, "a"), msg(2, "b"), msg(3, "a")]
    assert [s.id for s in fresh.list(RUN)] == [a3, b2, a1]
    # now B is the stale one
    with pytest.raises(ConflictError):
        b.save(RUN, cp3.messages[:2] + [msg(3, "b")])
    assert [s.id for s in _mgr(root).list(RUN)] == [a3, b2, a1]


def test_first_save_race_one_wins(tmp_path):
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    assert a.latest(RUN) is None and b.latest(RUN) is None
    a1 = a.save(RUN, [msg(1, "a")])
    with pytest.raises(ConflictError):
        b.save(RUN, [msg(1, "b")])
    assert [s.id for s in _mgr(root).list(RUN)] == [a1]
    assert _mgr(root).latest(RUN).messages == [msg(1, "a")]


def test_manager_that_has_not_seen_the_run_continues_it(tmp_path):
    root = tmp_path / "repo"
    a = _mgr(root)
    a1 = a.save(RUN, [msg(1)])
    a2 = a.save(RUN, [msg(1), msg(2)])
    c = _mgr(root)  # never read the run
    s0 = c.store.stats.snapshot()
    c3 = c.save(RUN, [msg(1), msg(2), msg(3)])
    d = c.store.stats.since(s0)
    assert d.counts["PUT"] <= 3
    cp = _mgr(root).get(RUN, c3)
    assert cp.parent_id == a2 and cp.seq == 2 and cp.messages == [msg(1), msg(2), msg(3)]
    c4 = c.save(RUN, [msg(1), msg(2), msg(3), msg(4)])
    assert _mgr(root).get(RUN, c4).parent_id == c3
    # A is now stale
    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1), msg(2), msg(9)])
    assert [s.id for s in _mgr(root).list(RUN)] == [c4, c3, a2, a1]


def test_stale_writer_after_run_deleted_does_not_revive_it(tmp_path):
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1)])
    a2 = a.save(RUN, [msg(1), msg(2)])
    assert b.latest(RUN).id == a2
    b.delete(RUN)
    assert RUN not in b.runs()

    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1), msg(2), msg(3)])
    fresh = _mgr(root)
    assert RUN not in fresh.runs()
    assert fresh.latest(RUN) is None
    assert fresh.list(RUN) == []
    for cid in (a1, a2):
        with pytest.raises(CheckpointNotFound):
            fresh.get(RUN, cid)
    with pytest.raises(RunNotFound):
        fresh.delete(RUN)

    # after reading the (empty) run, the stale writer starts a new run
    assert a.latest(RUN) is None
    n1 = a.save(RUN, [msg(10)])
    fresh = _mgr(root)
    assert fresh.runs() == [RUN]
    assert [s.id for s in fresh.list(RUN)] == [n1]
    cp = fresh.latest(RUN)
    assert cp.id == n1 and cp.parent_id is None and cp.messages == [msg(10)]
    for cid in (a1, a2):
        with pytest.raises(CheckpointNotFound):
            fresh.get(RUN, cid)


def test_deleter_starts_a_new_run(tmp_path):
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a.save(RUN, [msg(1)])
    b.delete(RUN)
    n1 = b.save(RUN, [msg(5)])
    fresh = _mgr(root)
    assert [s.id for s in fresh.list(RUN)] == [n1]
    assert fresh.latest(RUN).parent_id is None
    # the old writer is stale against the new run too
    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1), msg(2)])
    assert [s.id for s in _mgr(root).list(RUN)] == [n1]


def test_stale_writer_after_rollback_by_another_manager(tmp_path):
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1)])
    a2 = a.save(RUN, [msg(1), msg(2)])
    a3 = a.save(RUN, [msg(1), msg(2), msg(3)])
    back = b.rollback(RUN, a1)
    assert back.id == a1 and back.messages == [msg(1)]
    before = _manifests(root)
    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1), msg(2), msg(3), msg(4)])
    assert _manifests(root) == before
    fresh = _mgr(root)
    assert [s.id for s in fresh.list(RUN)] == [a1]
    for cid in (a2, a3):
        with pytest.raises(CheckpointNotFound):
            fresh.get(RUN, cid)
    head = a.latest(RUN)
    assert head.id == a1
    a4 = a.save(RUN, head.messages + [msg(4)])
    cp = _mgr(root).get(RUN, a4)
    assert cp.parent_id == a1 and cp.messages == [msg(1), msg(4)]
    assert [s.id for s in _mgr(root).list(RUN)] == [a4, a1]


def test_stale_writer_with_explicit_parent_branches(tmp_path):
    """``parent_id=`` is an explicit choice of parent: it is not a lost update, it succeeds."""
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1)])
    b.latest(RUN)
    b2 = b.save(RUN, [msg(1), msg(2, "b")])
    a3 = a.save(RUN, [msg(1), msg(2, "a")], parent_id=a1)
    fresh = _mgr(root)
    cp = fresh.latest(RUN)
    assert cp.id == a3 and cp.parent_id == a1 and cp.messages == [msg(1), msg(2, "a")]
    assert fresh.get(RUN, b2).messages == [msg(1), msg(2, "b")]


def test_stale_caller_cannot_roll_back_delete_or_prune_over_a_newer_save(tmp_path):
    """Rollback, delete and prune that move the head are conditional on what the caller saw: after
    another manager appended, they raise ConflictError and change nothing; with a fresh view they work."""
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1)])
    a2 = a.save(RUN, [msg(1), msg(2)])
    assert b.latest(RUN).id == a2
    b3 = b.save(RUN, [msg(1), msg(2), msg(3, "b")])
    before = _manifests(root)
    for op in (lambda: a.rollback(RUN, a1), lambda: a.delete(RUN), lambda: a.delete(RUN, b3),
               lambda: a.prune(older_than=0, run_id=RUN), lambda: a.prune(older_than=0)):
        with pytest.raises(ConflictError):
            op()
        assert _manifests(root) == before
    assert [s.id for s in _mgr(root).list(RUN)] == [b3, a2, a1]
    # deleting an older checkpoint does not move the head: allowed
    a.delete(RUN, a1)
    assert [s.id for s in _mgr(root).list(RUN)] == [b3, a2]
    # with a fresh view A's rollback works; now B is the stale one
    assert a.latest(RUN).id == b3
    assert a.rollback(RUN, a2).id == a2
    with pytest.raises(ConflictError):
        b.rollback(RUN, a2)
    with pytest.raises(ConflictError):
        b.save(RUN, [msg(1), msg(2), msg(3, "b"), msg(4, "b")])
    assert [s.id for s in _mgr(root).list(RUN)] == [a2]
    # a manager that never read the run acts on the head it reads
    c = _mgr(root)
    c.delete(RUN)
    assert _mgr(root).latest(RUN) is None


def test_expect_head_across_managers(tmp_path):
    """expect_head is a compare-and-swap on the head, whatever the manager saw: a manager whose
    cached head is older than the expected id reads the head and succeeds; a wrong id conflicts."""
    root = tmp_path / "repo"
    a, b = _mgr(root), _mgr(root)
    a1 = a.save(RUN, [msg(1)], expect_head=EMPTY_RUN)
    with pytest.raises(ConflictError):
        b.save(RUN, [msg(1, "b")], expect_head=EMPTY_RUN)
    b2 = b.save(RUN, [msg(1), msg(2, "b")], expect_head=a1)
    before = _manifests(root)
    with pytest.raises(ConflictError):
        a.save(RUN, [msg(1), msg(2, "a")], expect_head=a1)     # a1 is no longer the head
    assert _manifests(root) == before
    a3 = a.save(RUN, [msg(1), msg(2, "b"), msg(3, "a")], expect_head=b2)  # A's cache says a1: it reads
    assert _mgr(root).get(RUN, a3).parent_id == b2
    with pytest.raises(ConflictError):
        b.rollback(RUN, a1, expect_head=b2)
    with pytest.raises(ConflictError):
        b.delete(RUN, expect_head=b2)
    assert b.rollback(RUN, a1, expect_head=a3).id == a1
    with pytest.raises(ConflictError):
        a.delete(RUN, a1, expect_head=a3)
    a.delete(RUN, expect_head=a1)
    assert _mgr(root).latest(RUN) is None
    assert b.save(RUN, [msg(9)], expect_head=EMPTY_RUN)


# --- lost replies -------------------------------------------------------------------------------------

class LostReplyStore:
    """Wraps a store; the PUT of a chosen kind of key lands, then the call fails as if the reply
    was lost on the network."""

    def __init__(self, inner):
        self.inner = inner
        self.lose = None  # "manifest" | "pack" | "index" | None
        self.lost: list[str] = []

    @property
    def url(self):
        return self.inner.url

    @property
    def stats(self):
        return self.inner.stats

    def _kind(self, key):
        if key.startswith("packs/"):
            return "pack"
        if key.startswith("runs/") and "/m/" in key:
            return "manifest"
        if key.startswith("runs/") and "/c/" in key:
            return "index"
        return "other"

    def put(self, key, data):
        info = self.inner.put(key, data)
        if self.lose is not None and self._kind(key) == self.lose:
            self.lose = None
            self.lost.append(key)
            raise StoreError(f"connection reset while writing {key} (reply lost)")
        return info

    def put_if_match(self, key, data, etag):
        return self.inner.put_if_match(key, data, etag)

    def get(self, key, byte_range=None):
        return self.inner.get(key, byte_range)

    def head(self, key):
        return self.inner.head(key)

    def list(self, prefix, start_after=None, limit=None):
        return self.inner.list(prefix, start_after, limit)

    def list_dirs(self, prefix):
        return self.inner.list_dirs(prefix)

    def delete_many(self, keys):
        return self.inner.delete_many(keys)

    def close(self):
        self.inner.close()


@pytest.mark.parametrize("lose,custom_id", [
    ("manifest", False), ("manifest", True), ("pack", False), ("pack", True),
    ("index", True),  # generated ids need no index record
], ids=["manifest-generated-id", "manifest-custom-id", "pack-generated-id", "pack-custom-id", "index-custom-id"])
def test_retry_after_lost_reply_does_not_duplicate(tmp_path, lose, custom_id):
    root = tmp_path / "repo"
    store = LostReplyStore(LocalStore(root, fsync=True))
    mgr = CheckpointManager(store)
    c1 = mgr.save(RUN, [msg(1)], step=1)
    msgs = [msg(1), msg(2)]
    kwargs = dict(step=2, metadata={"k": "v"}, session_state={"s": 2})
    if custom_id:
        kwargs["checkpoint_id"] = "my-checkpoint-2"
    store.lose = lose
    with pytest.raises(StoreError):
        mgr.save(RUN, msgs, **kwargs)
    assert store.lost and store.lose is None
    c2 = mgr.save(RUN, msgs, **kwargs)  # the caller retries the same save
    if custom_id:
        assert c2 == "my-checkpoint-2"

    fresh = CheckpointManager(LocalStore(root, fsync=False))
    summaries = fresh.list(RUN)
    assert [s.id for s in summaries] == [c2, c1]
    assert [s.seq for s in summaries] == [1, 0]
    cp = fresh.latest(RUN)
    assert cp.id == c2 and cp.parent_id == c1 and cp.messages == msgs and cp.step == 2
    assert cp.session_state == {"s": 2} and cp.metadata == {"k": "v"}
    assert len(_manifests(root)) == 2
    # and the run goes on normally
    c3 = mgr.save(RUN, msgs + [msg(3)])
    assert CheckpointManager(LocalStore(root, fsync=False)).get(RUN, c3).parent_id == c2
    assert LocalStore(root).temp_files() == []


def test_lost_manifest_reply_then_someone_else_moves_on(tmp_path):
    """The manifest of a lost-reply save landed, another writer built on it: the retry is recognised
    as already done (it does not fail with a conflict and does not duplicate)."""
    root = tmp_path / "repo"
    store = LostReplyStore(LocalStore(root, fsync=False))
    a = CheckpointManager(store)
    a.save(RUN, [msg(1)])
    store.lose = "manifest"
    with pytest.raises(StoreError):
        a.save(RUN, [msg(1), msg(2)])
    landed = _mgr(root).latest(RUN)
    assert landed.messages == [msg(1), msg(2)]
    # retrying the same save: succeeds, returns the id that landed
    again = a.save(RUN, [msg(1), msg(2)])
    assert again == landed.id
    assert len(_mgr(root).list(RUN)) == 2


# --- 8 OS processes racing -----------------------------------------------------------------------------

_WORKER = textwrap.dedent("""
    import json, os, random, sys, time, traceback
    sys.path.insert(0, sys.argv[1])
    from snapstore import EMPTY_RUN, CheckpointManager
    from snapstore.errors import ConflictError
    from snapstore.stores import LocalStore
    root, me, go, n = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    cas = sys.argv[7] == "expect_head"
    mgr = CheckpointManager(LocalStore(root, fsync=True))
    rng = random.Random(me)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    saves, conflicts, attempts, errors = [], 0, 0, []
    deadline = time.time() + 90
    while len(saves) < n and time.time() < deadline:
        attempts += 1
        try:
            cp = mgr.latest(sys.argv[6])
            base = cp.messages if cp is not None else []
            m = {"writer": me, "k": len(saves), "attempt": attempts, "pad": "p" * rng.randint(0, 3000)}
            kw = {"expect_head": cp.id if cp is not None else EMPTY_RUN} if cas else {}
            cid = mgr.save(sys.argv[6], base + [m], step=len(base), **kw)
            saves.append({"id": cid, "count": len(base) + 1, "parent": cp.id if cp else None, "msg": m})
        except ConflictError:
            conflicts += 1
        except Exception:
            errors.append(traceback.format_exc())
            break
    print(json.dumps({"saves": saves, "conflicts": conflicts, "attempts": attempts, "errors": errors}), flush=True)
""")


@pytest.mark.parametrize("mode", ["view", "expect_head"])
def test_eight_processes_race_on_one_run(tmp_path, mode):
    root = tmp_path / "repo"
    CheckpointManager(LocalStore(root, fsync=True)).repo  # create the repository up front
    go = tmp_path / "go"
    n_proc, per = 8, (15 if mode == "view" else 6)
    names = [f"w{i}" for i in range(n_proc)]
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(ROOT), str(root), name, str(go), str(per), RUN, mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in names]
    try:
        for p in procs:
            line = p.stdout.readline().strip()
            assert line == "ready", p.stderr.read()
        go.write_text("go")
        results = {}
        for name, p in zip(names, procs):
            out, err = p.communicate(timeout=150)
            assert p.returncode == 0, err
            results[name] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    errors = {n: r["errors"] for n, r in results.items() if r["errors"]}
    assert not errors, errors
    for name, r in results.items():
        assert len(r["saves"]) == per, (name, r["attempts"])
    total_saves = sum(len(r["saves"]) for r in results.values())
    total_conflicts = sum(r["conflicts"] for r in results.values())
    assert total_conflicts > 0

    fresh = CheckpointManager(LocalStore(root, fsync=False))
    summaries = fresh.list(RUN)[::-1]  # oldest first
    assert len(summaries) == total_saves == n_proc * per
    assert [s.seq for s in summaries] == list(range(total_saves))  # exactly one checkpoint per position
    by_id = {s.id: s for s in summaries}
    assert len(by_id) == total_saves
    reported = {s["id"]: (name, s) for name, r in results.items() for s in r["saves"]}
    assert set(reported) == set(by_id)

    prev = None
    for s in summaries:
        cp = fresh.get(RUN, s.id)
        assert cp.message_count == s.seq + 1 == len(cp.messages)
        name, rep = reported[s.id]
        # the checkpoint holds exactly what its writer saved: its parent's list plus its own message
        assert cp.messages[-1] == rep["msg"] and cp.messages[-1]["writer"] == name
        assert rep["parent"] == (prev.id if prev else None)
        assert cp.parent_id == (prev.id if prev else None)
        if prev is not None:
            assert cp.messages[:-1] == prev.messages
        prev = cp
    assert fresh.latest(RUN).id == summaries[-1].id
    # each writer's own saves appear in its own order
    for name, r in results.items():
        seqs = [by_id[s["id"]].seq for s in r["saves"]]
        assert seqs == sorted(seqs)
    assert LocalStore(root).temp_files() == []
