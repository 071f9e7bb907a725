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

from s3_fixtures import repo_clients
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
        gone = m1.prune(RUN, keep_last=2)
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
