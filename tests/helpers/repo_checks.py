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


def grown_msg(tag: str, i: int, size: int = 300) -> dict:
    """Message ``i`` of a run tagged ``tag``: about ``size`` bytes of text."""
    return {"role": "user", "content": f"{tag}-{i} " + "words and more words " * (size // 21)}


def build_runs(store, runs: int, saves: int = 9, keep_last: int | None = None) -> dict:
    """``runs`` runs (``run-000``...) of ``saves`` saves each, one message more per save, then
    (``keep_last``) pruned to each run's newest checkpoints. Returns
    ``{(run id, newest checkpoint id): its message list}`` (what must still restore)."""
    m = CheckpointManager(store)
    expect = {}
    for r in range(runs):
        msgs: list = []
        for i in range(saves):
            msgs = msgs + [grown_msg(f"r{r}", i)]
            cid = m.save(f"run-{r:03d}", msgs, step=i)
        expect[(f"run-{r:03d}", cid)] = msgs
    if keep_last is not None:
        m.prune(keep_last=keep_last)
    m.close()
    return expect
