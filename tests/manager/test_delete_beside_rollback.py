"""A delete (or prune) of a checkpoint that a concurrent rollback makes the head.

Manager 2 decides that ``b`` is a middle checkpoint of the run (the head is ``c``) and removes it;
between its decision and the removal, manager 1 rolls back to ``b``. Both are acknowledged. The
outcome is the one where the rollback came first and the delete removed the checkpoint it made
the head: the run's head is the newest live checkpoint below ``b`` (docs/format.md §11: a rollback
record whose target is gone resolves to it). Nothing else is lost, ``verify`` reports no error
(the ledger load test hit this interleaving in CI: verify called it a missing checkpoint), and a
save continuing manager 1's view of the head is acknowledged and restorable.
"""

from __future__ import annotations

import pytest

from tests.helpers.s3_fixtures import repo_clients
from snapstore import CheckpointManager
from snapstore.errors import CheckpointNotFound

RUN = "beside"


def msg(i):
    return {"role": "assistant", "content": f"m {i}"}


@pytest.fixture
def repo(request, tmp_path, store_factory):
    return repo_clients(request, tmp_path, store_factory)


@pytest.mark.parametrize("kind", ["local", "s3-http"])
@pytest.mark.parametrize("how", ["delete-middle", "prune"])
def test_a_rollback_to_a_checkpoint_being_deleted(repo, kind, how, monkeypatch):
    m1 = CheckpointManager(repo(kind))
    m2 = CheckpointManager(repo(kind))
    a = m1.save(RUN, [msg(1)])
    b = m1.save(RUN, [msg(1), msg(2)])
    c = m1.save(RUN, [msg(1), msg(2), msg(3)])
    assert m2.latest(RUN).id == c
    removal = m2.repo.remove_records
    fired = []

    def rollback_first(rk, entries, *args, **kw):
        if not fired and any(cid == b for _, cid in entries):
            fired.append(m1.rollback(RUN, b).id)  # lands between manager 2's decision and its removal
        return removal(rk, entries, *args, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(m2.repo, "remove_records", rollback_first)
        if how == "delete-middle":
            m2.delete(RUN, b)
        else:
            gone = [s.id for s in m2.prune(keep_last=1, run_id=RUN)]
            assert b in gone and c not in gone
    assert fired == [b]
    below = [a] if how == "delete-middle" else []  # the prune (keep_last=1 on [c, b, a]) removed a too

    fresh = CheckpointManager(repo(kind))
    head = fresh.latest(RUN)
    assert (head.id if head is not None else None) == (below[0] if below else None)
    assert [s.id for s in fresh.list(RUN)] == below
    with pytest.raises(CheckpointNotFound):
        fresh.get(RUN, b)
    rep = fresh.verify(read_data=True)
    assert rep.ok, rep.errors
    assert [w.code for w in rep.warnings] == ["rollback-target-gone"], rep.warnings
    # manager 1 continues what it saw (b's messages): acknowledged, restorable, the head
    d = m1.save(RUN, [msg(1), msg(2), msg(4)])
    for _ in range(2):
        fresh.gc(grace_period=0)
    after = CheckpointManager(repo(kind))
    assert after.latest(RUN).id == d
    assert after.get(RUN, d).messages == [msg(1), msg(2), msg(4)]
    if below:
        assert after.get(RUN, a).messages == [msg(1)]
    assert [s.id for s in after.list(RUN)] == [d] + below
    rep = after.verify(read_data=True)
    assert rep.ok, rep.errors
