"""CheckpointManager.head(), summary() and list(before_seq=): what the HTTP service's conditional
writes and cursor pagination are built on (local store on a temp dir)."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import CheckpointNotFound, InvalidInputError, InvalidRunIdError


def test_head_summary_and_paged_listing(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    assert mgr.head("run") is None  # no repository yet: nothing created
    assert not (tmp_path / "r").exists()
    msgs, ids = [], []
    for i in range(40):
        msgs = msgs + [{"role": "assistant", "content": f"m{i}"}]
        ids.append(mgr.save("run", msgs, step=i, agent_id="a"))
    h = mgr.head("run")
    assert h.id == ids[-1] and h.message_count == 40 and h.step == 39 and not hasattr(h, "messages")
    s = mgr.summary("run", ids[3])
    assert (s.id, s.seq, s.step, s.message_count, s.agent_id) == (ids[3], 3, 3, 4, "a")
    with pytest.raises(CheckpointNotFound):
        mgr.summary("run", "nope")
    with pytest.raises(CheckpointNotFound):
        mgr.summary("other", ids[3])
    with pytest.raises(InvalidRunIdError):
        mgr.head("")
    # pages of 7 (lazy scan) and of 33 (bulk read) both walk every checkpoint once, newest first
    for size in (7, 33):
        seen, before = [], None
        while True:
            page = mgr.list("run", limit=size, before_seq=before)
            if not page:
                break
            seen += [p.id for p in page]
            before = page[-1].seq
        assert seen == ids[::-1]
    assert [p.id for p in mgr.list("run", before_seq=2)] == [ids[1], ids[0]]
    with pytest.raises(InvalidInputError):
        mgr.list("run", before_seq=-1)
    # after a rollback the head is the target (a rollback record resolved), summaries of the
    # rolled-back checkpoints are gone; after deleting the run there is no head
    mgr.rollback("run", ids[10])
    assert mgr.head("run").id == ids[10]
    with pytest.raises(CheckpointNotFound):
        mgr.summary("run", ids[11])
    assert [p.id for p in mgr.list("run", limit=3, before_seq=10)] == [ids[9], ids[8], ids[7]]
    mgr.delete("run")
    assert mgr.head("run") is None
