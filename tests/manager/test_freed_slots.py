"""A log position freed by a rollback, a delete or a prune is never taken again by a stale writer.

Issue 20 ("Nothing acknowledged is ever lost"): manager 1 saves a, b; manager 2 reads the head
(b); manager 1 saves c and then rolls back to a, deletes c, deletes the run or prunes; manager 2
saves on top of b. Before the fix the create-only write of manager 2 landed in the position
freed by the clean-up: ``save`` returned an id that ``latest()`` and ``list()`` never showed (or
showed in the middle of the run, below a newer head) and the next GC deleted it. Every case must
now raise ConflictError, on the local store and on S3 (moto's HTTP server), and leave the run as
manager 1 left it. The same holds for rollback and delete by the stale manager, and with
``expect_head=`` naming the checkpoint that was rolled back.
"""

from __future__ import annotations

import pytest

from tests.helpers.s3_fixtures import repo_clients
from snapstore import CheckpointManager
from snapstore.errors import CheckpointNotFound, ConflictError

RUN = "freed"
KINDS = ["local", "s3-http"]


def msg(who, i):
    return {"role": "assistant", "content": f"{who} {i}"}


@pytest.fixture
def repo(request, tmp_path, store_factory):
    return repo_clients(request, tmp_path, store_factory)


def _two(repo, kind, m2_sees_b=True):
    m1 = CheckpointManager(repo(kind))
    m2 = CheckpointManager(repo(kind))
    a = m1.save(RUN, [msg("a", 1)])
    if not m2_sees_b:
        assert m2.latest(RUN).id == a
    b = m1.save(RUN, [msg("a", 1), msg("b", 2)])
    if m2_sees_b:
        assert m2.latest(RUN).id == b
    return m1, m2, a, b


def _move(m1, how, a, b):
    """What manager 1 does behind manager 2's back; returns the head it leaves (None: no run)."""
    c = m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
    if how == "rollback":
        m1.rollback(RUN, a)
        return a
    if how == "delete-head":
        m1.delete(RUN, c)
        return b
    if how == "delete-run":
        m1.delete(RUN)
        return None
    if how == "prune":
        d = m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3), msg("d", 4)])
        e = m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3), msg("d", 4), msg("e", 5)])
        gone = [s.id for s in m1.prune(keep_last=2, run_id=RUN)]
        assert {a, b, c} <= set(gone) and d not in gone and e not in gone
        return e
    if how == "delete-middle":
        m1.delete(RUN, b)  # b is not the head: no record moves the head, the slot after a is freed
        return c
    raise AssertionError(how)


def _state(mgr):
    cp = mgr.latest(RUN)
    return (cp.id if cp else None), [s.id for s in mgr.list(RUN)] if cp else []


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["rollback", "delete-head", "delete-run", "prune", "delete-middle"])
def test_stale_save_into_a_freed_position_conflicts(repo, kind, how):
    # delete-middle: manager 2 last saw a; manager 1 saves b, c and deletes b (not the head)
    m1, m2, a, b = _two(repo, kind, m2_sees_b=how != "delete-middle")
    head = _move(m1, how, a, b)
    fresh = CheckpointManager(repo(kind))
    before = _state(fresh)
    with pytest.raises(ConflictError):
        m2.save(RUN, [msg("a", 1), msg("b", 2), msg("x", 3)])
    after = _state(CheckpointManager(repo(kind)))
    assert after == before
    assert before[0] == head
    # what manager 1 left survives two GCs; a save after reading the head again works
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert _state(CheckpointManager(repo(kind))) == before
    cp = m2.latest(RUN)
    new = m2.save(RUN, (cp.messages if cp else []) + [msg("y", 9)])
    assert CheckpointManager(repo(kind)).latest(RUN).id == new


@pytest.mark.parametrize("kind", KINDS)
def test_expect_head_naming_the_rolled_back_checkpoint_conflicts(repo, kind):
    m1, m2, a, b = _two(repo, kind)
    m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
    m1.rollback(RUN, a)
    with pytest.raises(ConflictError):
        m2.save(RUN, [msg("a", 1), msg("b", 2), msg("x", 3)], expect_head=b)
    assert CheckpointManager(repo(kind)).latest(RUN).id == a


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["rollback", "delete-run", "delete-head"])
def test_stale_rollback_or_delete_into_a_freed_position_conflicts(repo, kind, op):
    m1, m2, a, b = _two(repo, kind)
    m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
    m1.rollback(RUN, b)  # head b again, at a new position; the slot of c is freed
    m1.save(RUN, [msg("a", 1), msg("b", 2), msg("z", 3)])
    m1.rollback(RUN, a)
    expect = _state(CheckpointManager(repo(kind)))
    with pytest.raises((ConflictError, CheckpointNotFound)):
        if op == "rollback":
            m2.rollback(RUN, a)
        elif op == "delete-run":
            m2.delete(RUN)
        else:
            m2.delete(RUN, b)
    assert _state(CheckpointManager(repo(kind))) == expect


@pytest.mark.parametrize("kind", KINDS)
def test_rolled_back_checkpoint_is_gone_for_get(repo, kind):
    m1, m2, a, b = _two(repo, kind)
    c = m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
    m1.rollback(RUN, a)
    for mgr in (m1, CheckpointManager(repo(kind))):
        with pytest.raises(CheckpointNotFound):
            mgr.get(RUN, c)
        with pytest.raises(CheckpointNotFound):
            mgr.get(RUN, b)
        assert [s.id for s in mgr.list(RUN)] == [a]


# --- by the clock: old records are deleted, young ones voided; old views are read again --------

from tests.helpers.fake_clock import Clock  # noqa: E402
from snapstore.format import keys  # noqa: E402
from snapstore.format.manifest import FREE_AFTER, VIEW_TTL, is_void  # noqa: E402
from snapstore.stores.memory import MemoryStore  # noqa: E402


def _objects(store, rk):
    return {keys.seq_from_manifest_key(i.key): i.size for i in store.list(keys.manifests_prefix(rk))}


def test_old_records_are_deleted_and_young_ones_voided():
    clock = Clock()
    store = MemoryStore(clock=clock)
    m = CheckpointManager(store, clock=clock)
    ids = [m.save(RUN, [msg("a", i) for i in range(k + 1)]) for k in range(4)]
    clock.advance(FREE_AFTER + 1)
    ids += [m.save(RUN, [msg("a", i) for i in range(k + 1)]) for k in range(4, 7)]
    gone = {s.id for s in m.prune(keep_last=1, run_id=RUN)}
    assert gone == set(ids[:-1])
    rk = m.repo.run_key(RUN)
    objs = _objects(store, rk)
    assert not any(s in objs for s in range(4))  # older than FREE_AFTER: positions freed
    assert all(is_void(objs[s]) for s in (4, 5)) and not is_void(objs[6])  # young: kept taken
    assert [s.id for s in CheckpointManager(store).list(RUN)] == [ids[-1]]
    for cid in ids[:-1]:
        with pytest.raises(CheckpointNotFound):
            CheckpointManager(store).get(RUN, cid)
    # GC (grace 0: no other writer) removes the void records; the run is intact
    m.gc(grace_period=0)
    assert set(_objects(store, rk)) == {6}
    assert CheckpointManager(store).latest(RUN).id == ids[-1]


def test_gc_keeps_void_records_younger_than_free_after_whatever_its_grace():
    clock = Clock()
    store = MemoryStore(clock=clock)
    m = CheckpointManager(store, clock=clock)
    for k in range(3):
        m.save(RUN, [msg("a", i) for i in range(k + 1)])
    m.prune(keep_last=1, run_id=RUN)
    rk = m.repo.run_key(RUN)
    clock.advance(120)
    m.gc(grace_period=60)  # a short grace period: writers still re-read only after VIEW_TTL
    assert sum(is_void(s) for s in _objects(store, rk).values()) == 2
    clock.advance(FREE_AFTER)
    m.gc(grace_period=60)
    assert list(_objects(store, rk)) == [2]


def _clocked_two():
    """:func:`_two` on a MemoryStore whose timestamps and managers' time are one fake clock."""
    clock = Clock()
    store = MemoryStore(clock=clock)
    m1, m2 = CheckpointManager(store, clock=clock), CheckpointManager(store, clock=clock)
    a = m1.save(RUN, [msg("a", 1)])
    b = m1.save(RUN, [msg("a", 1), msg("b", 2)])
    assert m2.latest(RUN).id == b
    return clock, store, m1, m2, a, b


def test_a_writer_whose_view_is_older_than_view_ttl_reads_the_head_again():
    clock, store, m1, m2, a, b = _clocked_two()
    m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
    clock.advance(FREE_AFTER + 1)
    m1.rollback(RUN, a)  # b and c are old: deleted, their positions freed
    rk = m1.repo.run_key(RUN)
    assert 1 not in _objects(store, rk) and 2 not in _objects(store, rk)
    assert VIEW_TTL < m2.gc_grace_period / 2  # the grace period alone would not re-read
    with pytest.raises(ConflictError):
        m2.save(RUN, [msg("a", 1), msg("b", 2), msg("x", 3)])
    assert [s.id for s in CheckpointManager(store).list(RUN)] == [a]


def test_a_save_slower_than_view_ttl_checks_after_publishing():
    clock, store, m1, m2, a, b = _clocked_two()

    def behind_its_back(**_):
        m2.hooks.clear()
        m1.save(RUN, [msg("a", 1), msg("b", 2), msg("c", 3)])
        clock.advance(FREE_AFTER + 1)
        m1.rollback(RUN, a)  # frees the position m2 is about to write

    m2.hooks["before_publish"] = behind_its_back
    with pytest.raises(ConflictError):
        m2.save(RUN, [msg("a", 1), msg("b", 2), msg("x", 3)])
    fresh = CheckpointManager(store)
    assert fresh.latest(RUN).id == a and [s.id for s in fresh.list(RUN)] == [a]
    rk = m1.repo.run_key(RUN)
    assert is_void(_objects(store, rk)[2])  # the slow save's record, made void
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    assert CheckpointManager(store).latest(RUN).messages == [msg("a", 1)]
