"""``gc(dry_run=True)`` predicts the real GC on format-2 writes (docs/format.md §10, §12, §21): runs
whose data lives in tier packs and whose logs live in log segments, then pruned, rolled back and
deleted, so that the GC deletes manifests, log segments and packs, and rewrites mostly-dead tier
packs. The dry run changes nothing and reports what the real run then does, category by category."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.stores import LocalStore, MemoryStore

from tests.helpers.fake_clock import Clock
from tests.helpers.repo_checks import assert_clean

G = 100.0


def msg(tag: str, i: int, size: int = 300) -> dict:
    return {"role": "user", "content": f"{tag}-{i} " + "words and more words " * (size // 21)}


def build(store, clock=None, **kw) -> tuple[CheckpointManager, dict]:
    """Three runs of 40 saves (tier packs and log segments), each save with a 4 KB session state
    that changes whole every save (so pruned checkpoints leave tier packs mostly dead); then run
    ``a`` pruned to its last 3, run ``b`` rolled back to its 10th checkpoint and saved on, run
    ``c`` deleted. Returns ``(manager, {(run, checkpoint id): messages})`` of what must survive."""
    m = CheckpointManager(store, clock=clock, **kw)
    ids: dict = {}
    hist: dict = {}
    for run in ("a", "b", "c"):
        msgs: list = []
        for i in range(40):
            msgs = msgs + [msg(run, i)]
            state = {"scratch": os.urandom(2048).hex(), "turn": i}
            cid = m.save(run, msgs, session_state=state)
            ids.setdefault(run, []).append(cid)
            hist[(run, cid)] = msgs
    m.prune(keep_last=3, run_id="a")
    m.rollback("b", ids["b"][9])
    msgs = hist[("b", ids["b"][9])]
    for i in range(3):
        msgs = msgs + [msg("b2", i)]
        cid = m.save("b", msgs)
        hist[("b", cid)] = msgs
    m.delete("c")
    expect = {k: v for k, v in hist.items() if k[0] != "c"}
    live = {(run, c.id) for run in ("a", "b") for c in m.list(run)}
    return m, {k: v for k, v in expect.items() if k in live}


def snapshot(store) -> dict:
    return {i.key: (i.size, i.etag) for i in store.list("")}


def compare(dry, real) -> None:
    nz = lambda d: {k: v for k, v in d.items() if v}  # noqa: E731
    assert dry.dry_run and not real.dry_run
    assert nz(dry.deleted) == nz(real.deleted), (dict(dry.deleted), dict(real.deleted))
    for f in ("live_checkpoints", "live_packs", "segment_packs", "repacked_packs", "new_packs", "repack_bytes_in",
              "repack_bytes_out", "added_forward", "redirected_forward", "removed_forward", "forward_writes",
              "written_objects", "reclaimed_objects", "pending_candidates", "leftovers_removed"):
        assert getattr(dry, f) == getattr(real, f), (f, getattr(dry, f), getattr(real, f))
    # forwarding-map shards and the candidate record hold new pack ids and times: a few bytes each
    slack = 8 * (real.forward_writes + 2) + 64
    assert abs(dry.reclaimed_bytes - real.reclaimed_bytes) <= slack, (dry.as_dict(), real.as_dict())


def test_dry_run_predicts_gc_on_format2_local(tmp_path):
    """Local store on a real directory, grace period 0: one GC deletes and rewrites everything."""
    store = LocalStore(str(tmp_path / "repo"))
    m, expect = build(store)
    assert any(i.key.split("/")[2:3] == ["l"] for i in store.list("runs/")), "no log segments written"
    before = snapshot(store)
    dry = m.gc(grace_period=0, dry_run=True)
    assert snapshot(store) == before
    real = m.gc(grace_period=0)
    compare(dry, real)
    # the repository had garbage of every format-2 kind, so the comparison above is not vacuous
    for cat in ("packs", "manifests", "log"):
        assert real.deleted.get(cat, 0) > 0, dict(real.deleted)
    assert real.segment_packs > 0 and real.repacked_packs > 0 and real.new_packs > 0
    assert real.reclaimed_bytes > 0
    assert_clean(store, expect)
    # nothing left to do: a dry run now predicts an empty GC, and the GC is empty
    dry2 = CheckpointManager(store).gc(grace_period=0, dry_run=True)
    real2 = CheckpointManager(store).gc(grace_period=0)
    compare(dry2, real2)
    assert sum(real2.deleted.values()) == 0 and real2.repacked_packs == 0


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_dry_run_predicts_each_gc_of_the_grace_period_protocol(steps):
    """Two-phase deletion with a grace period on a controlled clock: before every GC of the
    protocol (candidates recorded, then deleted a grace period later), a dry run predicts it."""
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = build(store, clock=clock, gc_grace_period=G)
    clock.advance(2 * G)
    seen = 0
    for _ in range(steps):
        before = store.raw()
        dry = m.gc(grace_period=G, dry_run=True)
        assert store.raw() == before
        real = m.gc(grace_period=G)
        compare(dry, real)
        seen += sum(real.deleted.values()) + real.repacked_packs + real.pending_candidates
        clock.advance(2 * G)
    assert seen > 0
    assert_clean(store, expect)
