"""What the ledger load test (benchmarks/ledger_load.py) found on main, reduced to deterministic cases.

Found in the ledger workload at d7f3d4d (4 processes, 2 shared runs, 150 operations each; about
one save in 150 to 300): a save raised ``StoreError: cannot write .../runmarks/<run>.<seq>.il.<nonce>:
No such file or directory`` instead of ``ConflictError``. Nothing was lost (the save was not
acknowledged and nothing of it was published), but the conflict contract (docs/format.md §20: the
loser of a race gets ConflictError) is broken and a caller that retries only on ConflictError
stops with a store error.

Cause: a save after a tombstone writes an *intent* run marker (``runmarks.before_publish``);
``LocalStore.put`` links the file, fsyncs the directory, then ``os.stat``s the key to return its
ObjectInfo. A writer that won the same position meanwhile deletes the run's older intents
(``runmarks.after_publish``), including the loser's, between the link and the stat: the stat
fails and ``put`` reported a failed write for an object it did create. Fixed: ``put`` reads the
object's inode through its own temporary name before removing it.
"""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.stores.local import LocalStore

RUN = "revived"


def test_save_losing_a_revival_race_gets_conflict_not_store_error(tmp_path, monkeypatch):
    """Two managers both saw the run deleted; A's intent marker is created, then, before A's
    ``put`` returns, B revives the run (its save deletes the older intents). A must get
    ConflictError (B took the position); B's checkpoint is the head."""
    root = tmp_path / "repo"
    a = CheckpointManager(LocalStore(root, fsync=True))
    b = CheckpointManager(LocalStore(root, fsync=True))
    a.save(RUN, [{"role": "user", "content": "first"}])
    a.delete(RUN)
    assert a.latest(RUN) is None and b.latest(RUN) is None  # both views: the run is deleted
    store_a = a.store
    real = store_a.put
    state = {"won": None}

    def put(key, data):
        info = real(key, data)
        if key.startswith("runmarks/") and state["won"] is None:
            # A's intent marker is in place; its put has not returned: B saves now (real files)
            state["won"] = "pending"
            state["won"] = b.save(RUN, [{"role": "user", "content": "B"}])
        return info

    monkeypatch.setattr(store_a, "put", put)
    with pytest.raises(ConflictError):
        a.save(RUN, [{"role": "user", "content": "A"}])
    monkeypatch.setattr(store_a, "put", real)
    assert state["won"] not in (None, "pending")
    assert CheckpointManager(LocalStore(root, fsync=True)).latest(RUN).id == state["won"]


def test_local_put_of_an_object_deleted_at_once_by_another_writer_succeeds(tmp_path, monkeypatch):
    """The store-level half: ``put`` created the object (its link succeeded) and another writer's
    delete removed it before ``put`` returned. The create happened, so ``put`` must not report
    a failed write."""
    store = LocalStore(tmp_path / "s", fsync=True)
    store.put("runmarks/x", b"")  # the directory exists
    real = os.link
    fired = []

    def link(src, dst, *a, **k):
        real(src, dst, *a, **k)
        if dst.endswith(os.path.join("runmarks", "y")) and not fired:
            fired.append(dst)
            # another writer's cleanup (its own store object), between the link and the stat
            LocalStore(tmp_path / "s", fsync=True).delete_many(["runmarks/y"])

    monkeypatch.setattr(os, "link", link)
    store.put("runmarks/y", b"")
    monkeypatch.setattr(os, "link", real)
    assert fired  # the delete did land between them
