"""Checks shared by tests: a repository is clean and restores what was saved; a run's history."""

from __future__ import annotations

import json

from snapstore import CheckpointManager


def assert_clean(store, expect: dict) -> None:
    """verify(read_data) has no errors and every expected checkpoint restores exactly.
    ``expect``: ``{(run id, checkpoint id): message list}``."""
    clean = CheckpointManager(store)
    rep = clean.verify(read_data=True)
    assert not rep.errors, [str(e) for e in rep.errors]
    for (run, cid), messages in expect.items():
        assert json.dumps(clean.get(run, cid).messages) == json.dumps(messages)


def history_ids(mgr, run_id: str) -> list[str]:
    """Ids of ``run_id``'s final head and its parent chain, newest first (as ``mgr`` reads them)."""
    cp = mgr.latest(run_id)
    out = []
    while cp is not None:
        out.append(cp.id)
        cp = mgr.get(run_id, cp.parent_id) if cp.parent_id else None
    return out
