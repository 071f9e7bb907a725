"""A checkpoint delete decided from one wave of reads (snapstore/manager/rollback.py:
``read_newest``): the run's newest positions listed once, the newest records, the checkpoint and
the ``r`` marker read / written together, then the rollback record and the removal.

Each case checks what a delete must keep (docs/format.md §15-§16): the head moves to the newest
surviving checkpoint, the removed young positions stay taken as void records, a removal record
names them, nothing else is lost (``verify`` clean), a save on the new head is acknowledged; and
the cases the wave cannot settle (a chain of rollback records, a checkpoint older than the
listed page, a run that moves between the wave and the publish) take the slower path correctly.
"""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import CheckpointNotFound, ConflictError
from snapstore.format import keys
from snapstore.format.removals import removals_prefix
from snapstore.manager import rollback
from tests.helpers.s3_fixtures import repo_clients

RUN = "wave"


def msg(i):
    return {"role": "assistant", "content": f"m {i}"}


def msgs(n):
    return [msg(i) for i in range(n)]


@pytest.fixture
def repo(request, tmp_path, store_factory):
    return repo_clients(request, tmp_path, store_factory)


def saved(mgr, n, run=RUN):
    """Save ``n`` checkpoints (1..n messages); their ids, oldest first."""
    return [mgr.save(run, msgs(i + 1), step=i) for i in range(n)]


def assert_clean(mgr, run=RUN):
    rep = mgr.verify(read_data=True)
    assert rep.ok, rep.errors
    assert not [w for w in rep.warnings if w.code not in ("rollback-target-gone",)], rep.warnings


def spy_waves(monkeypatch):
    """Record what each ``read_newest`` returned (None: the wave did not settle it)."""
    seen = []
    real = rollback.read_newest

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.append(out)
        return out
    monkeypatch.setattr(rollback, "read_newest", spy)
    return seen


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_head_delete_twice_keeps_positions_and_records_the_removal(repo, kind, monkeypatch):
    waves = spy_waves(monkeypatch)
    ids = saved(CheckpointManager(repo(kind)), 6)
    store = repo(kind)
    mgr = CheckpointManager(store)  # fresh: never saw the run (no view: an unconditional delete)
    mgr.delete(RUN, ids[-1])
    CheckpointManager(repo(kind)).delete(RUN, ids[-2])  # the head is now a rollback record's target
    assert [w is not None for w in waves] == [True, True]  # both decided from the one wave
    fresh = CheckpointManager(repo(kind))
    assert fresh.latest(RUN).id == ids[-3]
    assert [c.id for c in fresh.list(RUN)] == ids[-3::-1]
    for gone in ids[-2:]:
        with pytest.raises(CheckpointNotFound):
            fresh.get(RUN, gone)
    rk = fresh.state.run_key(RUN)
    # the removed records were young: their positions stay taken (void records, §15) ...
    assert store.get(keys.manifest_key(rk, 5)) == b"\x00"
    assert store.get(keys.manifest_key(rk, 4)) == b"\x00"
    # ... and a removal record names them (§16)
    assert list(store.list(removals_prefix(rk)))
    assert_clean(fresh)
    assert RUN in fresh.runs()
    d = fresh.save(RUN, msgs(9))
    assert CheckpointManager(repo(kind)).latest(RUN).id == d


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_delete_by_a_caller_that_saw_the_run(repo, kind):
    mgr = CheckpointManager(repo(kind))
    ids = saved(mgr, 4)
    mgr.delete(RUN, ids[-1])  # conditional: the head is what this manager saved
    mgr.delete(RUN, ids[-2])  # the head (a rollback record's target) is what the first delete left
    other = CheckpointManager(repo(kind))
    assert other.latest(RUN).id == ids[-3]
    new = other.save(RUN, msgs(7))
    with pytest.raises(ConflictError):
        mgr.delete(RUN, new)  # moving the head needs this manager's view, stale now: nothing deleted
    fresh = CheckpointManager(repo(kind))
    assert [c.id for c in fresh.list(RUN)] == [new] + ids[-3::-1]
    assert_clean(fresh)


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_delete_of_a_middle_and_an_old_checkpoint(repo, kind, monkeypatch):
    waves = spy_waves(monkeypatch)
    ids = saved(CheckpointManager(repo(kind)), rollback.ROLLBACK_PAGE + 6)
    CheckpointManager(repo(kind)).delete(RUN, ids[-2])  # among the newest records read: no head move
    CheckpointManager(repo(kind)).delete(RUN, ids[1])  # below the listed page: removed all the same
    assert all(w is not None for w in waves)
    fresh = CheckpointManager(repo(kind))
    assert fresh.latest(RUN).id == ids[-1]
    want = [c for c in ids if c not in (ids[-2], ids[1])][::-1]
    assert [c.id for c in fresh.list(RUN)] == want
    for gone in (ids[-2], ids[1]):
        with pytest.raises(CheckpointNotFound):
            fresh.get(RUN, gone)
    assert RUN in fresh.runs()  # an r marker with no rollback record only makes runs() read the head
    assert_clean(fresh)
    d = fresh.save(RUN, msgs(200))
    assert CheckpointManager(repo(kind)).latest(RUN).id == d


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_a_chain_of_rollback_records_takes_the_slow_path(repo, kind, monkeypatch):
    mgr = CheckpointManager(repo(kind))
    ids = saved(mgr, 5)
    with monkeypatch.context() as mp:  # rollbacks that crashed before removing what they hide
        mp.setattr(rollback, "remove_range", lambda *a, **kw: [])
        for _ in range(rollback.HEAD_WAVE):  # rollback records one above the other, all to ids[2]
            CheckpointManager(repo(kind)).rollback(RUN, ids[2])
    waves = spy_waves(monkeypatch)
    CheckpointManager(repo(kind)).delete(RUN, ids[2])
    assert waves == [None]  # the newest records read did not reach a surviving checkpoint
    fresh = CheckpointManager(repo(kind))
    assert fresh.latest(RUN).id == ids[1]
    assert [c.id for c in fresh.list(RUN)] == [ids[1], ids[0]]
    assert_clean(fresh)


@pytest.mark.parametrize("kind", ["local", "s3-http"])
@pytest.mark.parametrize("saw", [False, True])
def test_a_save_between_the_wave_and_the_publish(repo, kind, saw, monkeypatch):
    """Another writer saves after the deleter read the run and before its rollback record: the
    deleter's create-only write at that position fails. A caller that saw the run gets
    ConflictError and nothing is deleted; one that did not decides again (the old head is now a
    middle checkpoint: removed, the new save stays the head). The save is never hidden."""
    writer = CheckpointManager(repo(kind))
    ids = saved(writer, 3)
    deleter = CheckpointManager(repo(kind))
    if saw:
        assert deleter.latest(RUN).id == ids[-1]
    real = rollback.read_newest
    landed = []

    def then_save(*a, **kw):
        out = real(*a, **kw)
        if not landed:
            landed.append(writer.save(RUN, msgs(3) + [msg(99)]))
        return out
    monkeypatch.setattr(rollback, "read_newest", then_save)
    if saw:
        with pytest.raises(ConflictError):
            deleter.delete(RUN, ids[-1])
        want = [landed[0]] + ids[::-1]
    else:
        deleter.delete(RUN, ids[-1])
        want = [landed[0]] + ids[-2::-1]
    fresh = CheckpointManager(repo(kind))
    assert fresh.latest(RUN).id == landed[0]
    assert fresh.get(RUN, landed[0]).messages == msgs(3) + [msg(99)]
    assert [c.id for c in fresh.list(RUN)] == want
    assert_clean(fresh)
