"""Replays of an older head in an encrypted repository (docs/format.md §27 "Replays"), on a local
directory and on S3 (moto's HTTP server): an older record put at the newest key does not
authenticate; newest records deleted, or an older sealed record of the same position (an earlier
life of the run) put back, are refused with HeadReplayed for a caller that saw the newer head,
while a run that honestly went back (deleted, collected, saved again later) reads; plain
repositories are not judged."""

from __future__ import annotations

import dataclasses

import pytest

from snapstore import CheckpointManager
from snapstore.errors import HeadReplayed, IntegrityError
from snapstore.manager import callers
from tests.helpers.sealed_fixtures import manifest_keys, put_raw, sealed_store

KINDS = ["local", "s3-http"]


def sealed(inner):
    return sealed_store(inner, "correct horse")


def msgs(n, tag="a"):
    return [{"role": "user", "content": f"{tag} turn {i}"} for i in range(n)]


@pytest.mark.parametrize("kind", KINDS)
def test_an_older_record_at_the_newest_key_does_not_authenticate(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(sealed(inner))
    mgr.save("r", msgs(1))
    old = inner.get(manifest_keys(inner)[0])
    mgr.save("r", msgs(2))
    newest = manifest_keys(inner)[0]
    put_raw(inner, newest, old)
    for reader in (mgr, CheckpointManager(sealed(inner))):
        with pytest.raises(IntegrityError, match=newest):
            reader.latest("r")


@pytest.mark.parametrize("kind", KINDS)
def test_deleted_newest_records_are_refused_for_a_caller_that_saw_them(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(sealed(inner))
    ids = [mgr.save("r", msgs(i + 1)) for i in range(3)]
    assert mgr.latest("r").id == ids[2]
    inner.delete_many(manifest_keys(inner)[:2])  # the attacker deletes the two newest records
    with pytest.raises(HeadReplayed, match="went back") as e:
        mgr.latest("r")
    assert (e.value.seen_seq, e.value.found_seq) == (2, 0)
    with pytest.raises(HeadReplayed):
        mgr.head("r")
    with pytest.raises(HeadReplayed):
        mgr.latest("r")  # still refused: the caller's view stays
    # a reader that never saw the newer head cannot tell (documented): it reads the older one
    assert CheckpointManager(sealed(inner)).latest("r").id == ids[0]
    # the caller's next save goes on from the head it saw, above the deleted positions
    nxt = mgr.save("r", msgs(4))
    cp = CheckpointManager(sealed(inner)).latest("r")
    assert (cp.id, cp.parent_id, cp.messages) == (nxt, ids[2], msgs(4))


def _earlier_life(inner):
    """A run saved twice (positions 0, 1), deleted and collected whole; returns the key, sealed
    bytes and checkpoint id of its record at position 1."""
    mgr = CheckpointManager(sealed(inner))
    mgr.save("r", msgs(1, "old"))
    old_id = mgr.save("r", msgs(2, "old"))
    key1 = manifest_keys(inner)[0]
    old = inner.get(key1)
    mgr.delete("r")
    mgr.gc(grace_period=0)
    assert manifest_keys(inner) == []  # positions restart at 0
    return key1, old, old_id


@pytest.mark.parametrize("kind", KINDS)
def test_an_earlier_lifes_record_put_back_at_its_position_is_refused(kind, store_factory):
    inner = store_factory(kind)
    key1, old, old_id = _earlier_life(inner)
    mgr = CheckpointManager(sealed(inner))
    mgr.save("r", msgs(1, "new"))
    new_id = mgr.save("r", msgs(2, "new"))
    assert manifest_keys(inner)[0] == key1
    put_raw(inner, key1, old)  # authenticates: sealed by this repository under this key
    with pytest.raises(HeadReplayed, match="same position") as e:
        mgr.latest("r")
    assert (e.value.seen_seq, e.value.found_seq) == (1, 1)
    with pytest.raises(HeadReplayed):
        mgr.head("r")
    # a fresh reader cannot tell: it takes the old record for the head (its data went with GC)
    assert CheckpointManager(sealed(inner)).head("r").id == old_id


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_deleted_collected_and_saved_again_later_reads(kind, store_factory):
    inner = store_factory(kind)
    a = CheckpointManager(sealed(inner))
    for i in range(3):
        a.save("r", msgs(i + 1, "old"))
    # A saw position 2 ten minutes ago; since then B deleted the run, GC collected it, B saved again
    seen = callers.seen(a, "r")
    callers.set_seen(a, "r", dataclasses.replace(seen, wall=seen.wall - 600))
    b = CheckpointManager(sealed(inner))
    b.delete("r")
    b.gc(grace_period=0)
    new = CheckpointManager(sealed(inner)).save("r", msgs(1, "new"))
    cp = a.latest("r")  # position 0 < 2, but created after A's view: an honest new life
    assert (cp.id, cp.messages) == (new, msgs(1, "new"))
    # a caller that saw the run deleted (no live checkpoint) is not judged: GC may collect it whole
    for i in range(2):
        a.save("r", msgs(i + 2, "new"))
    a.delete("r")
    assert a.latest("r") is None
    b.gc(grace_period=0)
    again = CheckpointManager(sealed(inner)).save("r", msgs(1, "third"))
    assert a.latest("r").id == again  # at once, within the clock margin


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_repository_is_not_judged(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(inner)
    ids = [mgr.save("r", msgs(i + 1)) for i in range(2)]
    inner.delete_many(manifest_keys(inner)[:1])
    assert mgr.latest("r").id == ids[0]
