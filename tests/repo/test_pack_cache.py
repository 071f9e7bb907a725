"""A pack cache smaller than what one run's segments need (a large run, or the packs a GC rewrite
moved its entries into) must cost requests, never correctness: readers and GC's mark read an
evicted segment again instead of looking for its entries at their location hints (the per-save
packs a writer deletes once they are merged into tier packs)."""

from __future__ import annotations

import pytest

import snapstore.maintenance.gc as sgc
from snapstore import CheckpointManager
from snapstore.stores.memory import MemoryStore

from tests.helpers.repo_checks import assert_clean, build_runs


@pytest.fixture
def small_gc_cache(monkeypatch):
    monkeypatch.setattr(sgc, "GC_CACHE_BYTES", 1)


@pytest.mark.usefixtures("small_gc_cache")
@pytest.mark.parametrize("trial", range(10))
def test_gc_after_a_rewriting_gc_with_a_small_cache(trial):
    """GC rewrites most of the tier packs (max_unused 0.1); the next GC, whose cache cannot hold a
    run's segments with the packs their entries moved to, still marks and sweeps cleanly (it
    stopped with ObjectNotFound on a deleted per-save pack in about 1 run in 3)."""
    store = MemoryStore()
    expect = build_runs(store, 12, 9, keep_last=1)
    first = CheckpointManager(store).gc(grace_period=0, max_unused=0.1)
    assert first.repacked_packs >= 12
    again = CheckpointManager(store).gc(grace_period=0)
    assert again.repacked_packs == 0 and not again.corrupt_packs, again.as_dict()
    assert_clean(store, expect)


@pytest.mark.parametrize("trial", range(4))
def test_a_restore_whose_segments_outgrow_the_pack_cache(trial):
    """Every run restores exactly through a manager whose pack cache holds one pack at a time,
    after a GC moved the runs' entries into new packs."""
    store = MemoryStore()
    expect = build_runs(store, 12, 9, keep_last=1)
    CheckpointManager(store).gc(grace_period=0, max_unused=0.1)
    for (run, cid), msgs in expect.items():
        mgr = CheckpointManager(store)
        mgr.repo.cache.limit = 1  # every pack read evicts the one before
        assert mgr.latest(run).messages == msgs
        assert mgr.get(run, cid).messages == msgs
