"""A merging save's own pack, merged at once into its tier pack, is never written (docs/format.md
§18), with ordered writes too (S3, memory) as at one commit: every save PUTs one pack (the
merging ones only the tier pack), and readers, forks, verify and GC see the same checkpoints."""

from __future__ import annotations

import json

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys


def msgs(n):
    return [{"role": "assistant" if i % 2 else "user", "content": f"message {i} " + "words and more " * 30}
            for i in range(n)]


@pytest.mark.parametrize("kind", ["memory", "s3", "s3-http"])
def test_merging_save_writes_only_its_tier_pack(store_factory, kind):
    store = store_factory(kind)
    mgr = CheckpointManager(store)
    rk = None
    ids, pack_puts = [], []
    for i in range(40):
        before = store.stats.snapshot()
        ids.append(mgr.save("r", msgs(2 * i + 2), step=i))
        rk = rk or mgr.repo.run_key("r")
        d = store.stats.since(before)
        # PUTs: pack (or tier pack) + manifest, + the config and run marker of the first save, + a log segment
        # at positions ending a 16-range; the merging saves (every 4th) write no pack of their own
        extra = 2 * (i == 0) + ((i + 1) % 16 == 0)  # the config and the run marker; a log segment
        pack_puts.append(d.counts["PUT"] - 1 - extra)
    assert pack_puts == [1] * 40, pack_puts
    segs = mgr.repo.head(rk).segment_list()
    packs = {k for k in (o.key for o in store.list(keys.PACKS))}
    assert packs == {keys.pack_key(s.pack) for s in segs}  # nothing else was written or left
    fresh = CheckpointManager(store)
    for i in (0, 3, 4, 15, 39):
        assert json.dumps(fresh.get("r", ids[i]).messages) == json.dumps(msgs(2 * i + 2))
    fork = fresh.fork("r", ids[39], "f")
    assert fresh.latest("f").messages == msgs(80) == fork.messages
    rep = fresh.verify(read_data=True)
    assert rep.ok, rep
    fresh.gc(grace_period=0)
    again = CheckpointManager(store)
    assert again.latest("r").messages == msgs(80) and again.latest("f").messages == msgs(80)
    assert json.dumps(again.get("r", ids[7]).messages) == json.dumps(msgs(16))
    assert again.verify(read_data=True).ok
