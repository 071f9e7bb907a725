"""GC fetches no pack twice, also when it rewrites mostly dead tier packs (issue 8; docs/format.md
§21, "Copying while marking"; docs/design-notes.md §2.24). A rewritten segment's live entries are copied while mark has the pack cached,
right after its run is marked, instead of from a second fetch after mark.

The repositories here are small, so GC's pack cache is shrunk to what it is raised to anyway (six
times the largest run's segments: ``GC_CACHE_BYTES = 1``), as on a repository many times larger
than the cache: the packs of the first runs leave the cache while later runs are marked, which is
what made the copy after mark fetch them again. Each GET of a pack key is counted on a wrapped
store (a real directory, and S3 through moto's HTTP server)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import snapstore.maintenance.gc as sgc
from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK
from snapstore.maintenance.repack import SegmentRewrites
from snapstore.stores import LocalStore

from tests.helpers.repo_checks import assert_clean, build_runs, grown_msg as msg


def build(store, runs: int, saves: int = 9) -> dict:
    """``runs`` runs of ``saves`` saves (tier packs, fanout 4), then pruned to the newest
    checkpoint of each run: the states and nodes of the pruned checkpoints leave some tier packs
    more than a quarter dead, and GC rewrites those. Returns what must still restore."""
    return build_runs(store, runs, saves, keep_last=1)


def count_pack_gets(store) -> Counter:
    """Wrap ``store.get``: returns a Counter of GETs per pack key (whole or ranged)."""
    gets: Counter = Counter()
    lock = threading.Lock()
    orig = store.get

    def get(key, *a, **kw):
        if key.startswith(keys.PACKS):
            with lock:
                gets[key] += 1
        return orig(key, *a, **kw)
    store.get = get
    return gets


def pack_keys(store) -> set:
    return {i.key for i in store.list(keys.PACKS)}


@pytest.fixture
def small_gc_cache(monkeypatch):
    monkeypatch.setattr(sgc, "GC_CACHE_BYTES", 1)


def local(tmp_path):
    return LocalStore(str(tmp_path / "repo"))


@pytest.mark.usefixtures("small_gc_cache")
@pytest.mark.parametrize("kind,runs,grace", [("local", 24, 0.0), ("local", 24, 3600.0), ("s3-http", 12, 0.0)])
def test_a_gc_that_rewrites_tier_packs_fetches_each_pack_once(kind, runs, grace, tmp_path, store_factory):
    store = local(tmp_path) if kind == "local" else store_factory("s3-http")
    expect = build(store, runs)
    listed = pack_keys(store)
    # max_unused 0.1: every pruned run's tier packs qualify (at the default 0.25 how many do
    # varies with how the random pack ids and keyed ids compress: 2 of 12 runs' in one CI run)
    m = CheckpointManager(store)
    dry = m.gc(grace_period=grace, dry_run=True, max_unused=0.1)
    m = CheckpointManager(store)
    gets = count_pack_gets(store)
    rep = m.gc(grace_period=grace, max_unused=0.1)
    # the GC rewrote tier packs (segments of the runs' newest records) ...
    assert rep.repacked_packs >= runs and rep.new_packs >= 3, rep.as_dict()
    assert rep.segment_packs > 0
    # ... and read every pack it listed exactly once
    assert set(gets) == listed, (len(gets), len(listed))
    twice = {k: n for k, n in gets.items() if n > 1}
    assert not twice, twice
    assert rep.refetched_packs == 0
    # the dry run (which copies the same way, writing nothing) predicted it
    for f in ("repacked_packs", "new_packs", "repack_bytes_in", "repack_bytes_out", "added_forward"):
        assert getattr(dry, f) == getattr(rep, f), (f, dry.as_dict(), rep.as_dict())
    assert_clean(store, expect)
    if grace == 0:
        # nothing was left behind (a copy nobody names would be deleted by the next GC)
        again = CheckpointManager(store).gc(grace_period=0)
        assert sum(again.deleted.values()) == 0 and again.repacked_packs == 0, again.as_dict()


def _first_copy_target(monkeypatch, before_copy=None, after_copy=None):
    """Wrap :meth:`SegmentRewrites.on_run`: for the first mostly dead segment it would copy, call
    ``before_copy(rewrites, reach, pid)`` before it runs and ``after_copy(rewrites, reach, pid)``
    after. Returns a list that receives that pack's id."""
    chosen: list = []
    orig = SegmentRewrites.on_run

    def on_run(self, reach, pids):
        if not chosen:
            for pid in pids:
                u = reach.usage.get(pid)
                if u is not None and self.eligible(reach, pid) and 1 - u[0] / (u[1] or 1) > self.max_unused:
                    chosen.append(pid)
                    if before_copy:
                        before_copy(self, reach, pid)
                    break
        orig(self, reach, pids)
        if chosen and after_copy and chosen[0] in pids:
            after_copy(self, reach, chosen[0])
    monkeypatch.setattr(SegmentRewrites, "on_run", on_run)
    return chosen


@pytest.mark.usefixtures("small_gc_cache")
def test_a_segment_that_left_the_cache_is_fetched_again_and_counted(tmp_path, monkeypatch):
    """Fallback: a mostly dead segment no longer cached when its run is marked is copied after
    mark from a second fetch, which ``refetched_packs`` counts; the result is the same."""
    store = local(tmp_path)
    expect = build(store, 24)
    m = CheckpointManager(store)
    chosen = _first_copy_target(monkeypatch, before_copy=lambda rw, reach, pid: rw.repo.cache.drop(pid))
    gets = count_pack_gets(store)
    rep = m.gc(grace_period=0)
    assert chosen
    assert gets[keys.pack_key(chosen[0])] == 2
    assert rep.refetched_packs == 1 == sum(n - 1 for n in gets.values())
    assert_clean(store, expect)
    again = CheckpointManager(store).gc(grace_period=0)
    assert sum(again.deleted.values()) == 0, again.as_dict()


@pytest.mark.usefixtures("small_gc_cache")
def test_a_copy_made_before_more_of_the_pack_was_needed_is_replaced(tmp_path, monkeypatch):
    """A segment copied when its run was marked, then needed more (another run's reference, here
    an extra need recorded after the copy): the copy is incomplete, so it is deleted (nothing ever
    named it) and the pack copied again after mark. The report counts the new packs that stay,
    and the GC after it finds nothing to delete."""
    store = local(tmp_path)
    expect = build(store, 24)
    before = pack_keys(store)
    m = CheckpointManager(store)
    stale: list = []

    def grow(rw, reach, pid):
        stale.extend(rw.copies[pid].moved)
        reach.packs[pid].add((T_CHUNK, b"\xee" * 16))  # an entry the pack does not hold: skipped by the copy

    chosen = _first_copy_target(monkeypatch, after_copy=grow)
    gets = count_pack_gets(store)
    rep = m.gc(grace_period=0)
    assert chosen and stale
    after = pack_keys(store)
    assert not {keys.pack_key(p) for p in stale} & after, "the incomplete copy was deleted"
    # every pack now in the store is old or one of the new packs the report counts
    assert len(after - before) == rep.new_packs
    assert rep.refetched_packs == sum(n - 1 for n in gets.values())
    assert_clean(store, expect)
    again = CheckpointManager(store).gc(grace_period=0)
    assert sum(again.deleted.values()) == 0, again.as_dict()


@pytest.mark.usefixtures("small_gc_cache")
def test_a_gc_that_fails_while_marking_deletes_the_copies_it_made(tmp_path, monkeypatch):
    """Mark fails after some segments were copied: GC stops before deleting anything, and the
    copies it wrote are removed again (nothing names them); the next GC does the work."""
    store = local(tmp_path)
    expect = build(store, 24)
    before = pack_keys(store)
    orig = SegmentRewrites.on_run
    calls = []

    def failing(self, reach, pids):
        orig(self, reach, pids)
        calls.append(1)
        if len(calls) == 16 and self.copies:
            raise RuntimeError("mark failed")
    monkeypatch.setattr(SegmentRewrites, "on_run", failing)
    with pytest.raises(RuntimeError, match="mark failed"):
        CheckpointManager(store).gc(grace_period=0)
    assert len(calls) == 16
    assert pack_keys(store) == before
    monkeypatch.setattr(SegmentRewrites, "on_run", orig)
    assert sgc.LOCK_KEY not in {i.key for i in store.list("gc/")}  # released on the way out
    rep = CheckpointManager(store).gc(grace_period=0)
    assert rep.repacked_packs > 0
    assert_clean(store, expect)


@pytest.mark.usefixtures("small_gc_cache")
@pytest.mark.parametrize("copied", ["during-mark", "after-mark"])
def test_a_writer_merging_a_rewritten_segment_away_during_gc(copied, tmp_path, monkeypatch):
    """After mark, the run's writer saves on and its tiered compaction merges a segment GC is
    rewriting into a new tier pack and deletes it (grace period: a writer may). Copied during mark,
    the rewrite goes ahead and its forwarding record leads to a copy nothing needs; copied after
    mark (the fallback, here because the pack left the cache), the vanished segment is skipped.
    Either way the GC completes, and everything restores, then and after the GCs that follow."""
    store = local(tmp_path)
    expect = build(store, 24)
    m = CheckpointManager(store)
    drop = (lambda rw, reach, pid: rw.repo.cache.drop(pid)) if copied == "after-mark" else None
    chosen = _first_copy_target(monkeypatch, before_copy=drop)
    writer = CheckpointManager(store)

    def merge_it_away(**info):
        key = keys.pack_key(chosen[0])
        run = next(r for r in {k[0] for k in expect}
                   if any(sg.pack == chosen[0] for sg in writer.repo.head(writer.repo.run_key(r)).segment_list()))
        (cid_run, cid), = [k for k in expect if k[0] == run]
        msgs = list(expect.pop((cid_run, cid)))
        for i in range(64):
            msgs = msgs + [msg(f"w-{run}", i)]
            cid = writer.save(run, msgs)
            if key not in pack_keys(store):
                break
        assert key not in pack_keys(store), "the writer's compaction did not merge the segment"
        expect[(run, cid)] = msgs

    rep = m.gc(hooks={"after_mark": merge_it_away})
    assert chosen
    assert rep.repacked_packs >= 2
    assert_clean(store, expect)
    for _ in range(2):
        CheckpointManager(store).gc(grace_period=0)
    assert_clean(store, expect)


@pytest.mark.usefixtures("small_gc_cache")
def test_a_copy_that_fails_halfway_leaves_no_pack_behind(tmp_path, monkeypatch):
    """An entry that cannot be read while a segment is copied during mark (here one read fails
    once, after the copy closed some new packs: ``target_pack_bytes`` is tiny) abandons that copy:
    the packs it closed are deleted, the pack is copied again after mark, and the report counts
    only the new packs that stay."""
    from snapstore.errors import IntegrityError
    from snapstore.repo.entries import EntryReader
    store = local(tmp_path)
    expect = build(store, 24)
    before = pack_keys(store)
    orig = EntryReader.read_entry_in
    state = {"reads": 0, "failed": False}

    def flaky(self, pack, etype, eid, ctx, verify=True):
        if chosen and pack.id == chosen[0] and not state["failed"]:
            state["reads"] += 1
            if state["reads"] == 3:
                state["failed"] = True
                raise IntegrityError(pack.key, "injected: entry unreadable once")
        return orig(self, pack, etype, eid, ctx, verify)
    chosen = _first_copy_target(monkeypatch)
    monkeypatch.setattr(EntryReader, "read_entry_in", flaky)
    rep = CheckpointManager(store).gc(grace_period=0, target_pack_bytes=200)
    assert state["failed"], "the injected failure did not happen during a copy"
    after = pack_keys(store)
    assert len(after - before) == rep.new_packs
    assert_clean(store, expect)
    again = CheckpointManager(store).gc(grace_period=0, target_pack_bytes=200)
    assert sum(again.deleted.values()) == 0, again.as_dict()
