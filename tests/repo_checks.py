"""Checks shared by the GC tests: a repository is clean and restores what was saved."""

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
