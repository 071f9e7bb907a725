"""The forwarding map (snapstore/maintenance/forwarding.py, docs/format.md §21): at most 16 shard objects
however many packs are retired, per-pack records of the older layout still read and migrated,
corrupt or concurrently changed shards stop GC without deleting anything."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, IntegrityError, ObjectNotFound
from snapstore.format import keys
from snapstore.format.forward import decode_forward_shard, encode_forward, encode_forward_shard
from snapstore.maintenance.forwarding import read_forward_map
from snapstore.maintenance.gc import FWD_CACHE_KEY
from snapstore.stores import LocalStore, MemoryStore

from tests.helpers.fake_clock import Clock
from tests.helpers.repo_checks import assert_clean

G = 100.0



# the forwarding map serves GC's repacking of per-save packs: format-1 writes (see conftest)
pytestmark = pytest.mark.usefixtures("format1_writes")

def msg(tag, i, size=300):
    return {"role": "user", "content": f"{tag}-{i} " + "words and more words " * (size // 21)}


def many_runs(store, runs=30, per_run=12, **kw):
    """``runs`` runs of ``per_run`` checkpoints each: one small pack per save."""
    m = CheckpointManager(store, **kw)
    expect = {}
    for r in range(runs):
        msgs = []
        for i in range(per_run):
            msgs = msgs + [msg(f"r{r}", i)]
            expect[(f"run{r}", m.save(f"run{r}", msgs))] = msgs
    return m, expect


def fwd_objects(store) -> list[str]:
    return sorted(k for k in store.raw() if k.startswith("fwd/"))


def change_every_shard(store) -> None:
    """Another writer of the map (there must be none): add a record (of no pack) to all 16 shards,
    creating the missing ones, so that any shard write GC planned finds a different ETag."""
    for h in "0123456789abcdef":
        k = f"fwd/{h}"
        try:
            info = store.head(k)
            shard = decode_forward_shard(k, store.get(k), h)
        except ObjectNotFound:
            info, shard = None, {}
        shard[bytes.fromhex(h + "0" * 15)] = ([], 0.0)
        store.put_if_match(k, encode_forward_shard(shard), info.etag if info else None)


def test_the_map_has_at_most_16_objects_however_many_packs_are_retired():
    store = MemoryStore()
    m, expect = many_runs(store)
    packs_before = sum(k.startswith("packs/") for k in store.raw())
    rep = m.gc(grace_period=0)
    fmap = read_forward_map(m.repo)
    # the per-save packs are repacked; the runs' tier packs (format-2 copies) are just deleted
    assert rep.repacked_packs == packs_before - rep.segment_packs == 360
    assert len(fmap.to) == 360          # every per-save pack is named by a live hint: a record each
    objs = fwd_objects(store)
    assert len(objs) == 16 and all(len(k) == len("fwd/0") for k in objs)
    # objects the GC wrote: the new packs, the shards and the hint cache
    assert rep.written_objects == rep.new_packs + len(objs) + 1
    assert set(objs) == {keys.fwd_shard_key(p) for p in fmap.to}
    for k in objs:  # each shard holds exactly the records of its prefix
        shard = decode_forward_shard(k, store.raw()[k], k[4:])
        assert shard and all(p.hex()[0] == k[4:] for p in shard)
    assert_clean(store, expect)
    # a reader that meets a retired pack reads one shard and learns every record in it
    r = CheckpointManager(store).repo
    some = sorted(fmap.to)[0]
    assert r.forward(some, fresh=True) == fmap.to[some]
    same_shard = [p for p in fmap.to if p.hex()[0] == some.hex()[0]]
    assert all(r.forwarding.known(p) == fmap.to[p] for p in same_shard)


def test_records_in_the_older_per_pack_layout_are_read_and_migrated_by_gc(tmp_path):
    """A repository whose forwarding records are one object each (``fwd/<16 hex>``, the layout
    before the map): readers and verify follow them, and the next GC moves them into shards."""
    store = LocalStore(tmp_path / "repo")
    m, expect = many_runs(store, runs=4, per_run=10)
    m.prune(keep_last=4)
    expect = {k: v for k, v in expect.items() if k[1] in {s.id for r in range(4) for s in m.list(f"run{r}")}}
    m.gc(grace_period=0)
    fmap = read_forward_map(m.repo)
    assert fmap.to
    # rewrite it into the older layout: one record per retired pack, no shards, no hint cache
    for pid, to in fmap.to.items():
        store.put(keys.fwd_key(pid), encode_forward(to))
    store.delete_many(list(fmap.shards) + [FWD_CACHE_KEY])
    assert all(len(k) == len("fwd/") + 16 for k in (i.key for i in store.list("fwd/")))
    assert_clean(store, expect)  # a new reader finds every entry through the per-pack records
    rep = CheckpointManager(store).verify()
    assert not [w for w in rep.warnings if w.code == "unknown-object"]

    before = {i.key: i.etag for i in store.list("")}
    dry = CheckpointManager(store).gc(grace_period=0, dry_run=True)
    assert {i.key: i.etag for i in store.list("")} == before   # a dry run changes nothing
    rep = CheckpointManager(store).gc(grace_period=0)
    assert dry.deleted["forward"] == rep.deleted["forward"]    # ... and predicts the migration
    keys_now = [i.key for i in store.list("fwd/")]
    assert keys_now and all(len(k) == len("fwd/0") for k in keys_now)    # only shards now
    assert rep.deleted["forward"] >= len(fmap.to)                          # the per-pack records
    assert read_forward_map(CheckpointManager(store).repo).to == fmap.to
    assert_clean(store, expect)


def test_a_corrupt_shard_is_reported_by_verify_and_stops_gc_before_it_deletes_anything():
    store = MemoryStore()
    m, expect = many_runs(store, runs=3, per_run=6)
    m.gc(grace_period=0)
    m.delete("run0")
    expect = {k: v for k, v in expect.items() if k[0] != "run0"}
    k = fwd_objects(store)[0]
    data = bytearray(store.raw()[k])
    data[-3] ^= 0xFF
    store.put_if_match(k, bytes(data), store.head(k).etag)
    rep = CheckpointManager(store).verify()
    assert [p.key for p in rep.errors if p.code == "corrupt-forward"] == [k]
    before = dict(store.raw())
    with pytest.raises(IntegrityError):
        CheckpointManager(store).gc(grace_period=0)
    after = {kk: v for kk, v in store.raw().items() if kk != "gc/lock"}
    assert after == before  # nothing deleted or rewritten (the lock is released or stale)


def test_a_shard_changed_under_gc_stops_it_and_a_rerun_completes():
    """Only GC writes shards, under ``gc/lock``; if a shard's ETag changed anyway (another GC took
    over a lock it thought stale), the conditional write fails, GC stops before deleting any pack,
    and the next GC completes."""
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = many_runs(store, runs=3, per_run=6, clock=clock)
    m.gc(grace_period=0)
    m.delete("run1")
    expect = {k: v for k, v in expect.items() if k[0] != "run1"}
    for r in (0, 2):  # more saves: new per-save packs to repack, records to add to the shards
        cps = CheckpointManager(store, clock=clock)
        msgs = cps.latest(f"run{r}").messages + [msg(f"x{r}", 0)]
        expect[(f"run{r}", cps.save(f"run{r}", msgs))] = msgs
    packs_before = {k for k in store.raw() if k.startswith("packs/")}

    from snapstore.maintenance.gc import gc
    with pytest.raises(ConflictError, match="forwarding-map shard"):
        gc(CheckpointManager(store).repo, grace_period=0, hooks={"after_mark": lambda **_: change_every_shard(store)})
    assert packs_before <= {k for k in store.raw() if k.startswith("packs/")}  # nothing deleted
    assert_clean(store, expect)
    clock.advance(3600)
    rep = CheckpointManager(store).gc(grace_period=0)
    assert rep.deleted["packs"] > 0
    assert_clean(store, expect)


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_shards_are_rewritten_conditionally_on_each_backend(kind, store_factory):
    """On the local store and on S3 (moto's HTTP server): a GC that deletes an earlier repack's
    output splices the records naming it, rewriting their shards (If-Match on their ETag); a map
    changed behind GC's back makes its conditional writes fail, GC stops with ConflictError, and
    the next GC completes."""
    from snapstore.maintenance.gc import gc
    store = store_factory(kind)
    m, expect = many_runs(store, runs=4, per_run=5)
    m.gc(grace_period=0)          # the 20 per-save packs merged into one pack P, 20 records -> P
    before = {i.key: i.etag for i in store.list("fwd/")}
    for r in (0, 1):
        m.delete(f"run{r}")
        expect = {k: v for k, v in expect.items() if k[0] != f"run{r}"}
    rep = m.gc(grace_period=0)    # P is half dead: repacked and deleted, the records naming it spliced
    assert rep.redirected_forward == 10 and rep.removed_forward == 10, rep.as_dict()
    after = {i.key: i.etag for i in store.list("fwd/")}
    fmap = read_forward_map(CheckpointManager(store).repo)
    assert len(fmap.to) == 10 and set(after) == {keys.fwd_shard_key(p) for p in fmap.to}
    assert all(after[k] != before[k] for k in after)  # every shard left was rewritten
    assert_clean(store, expect)

    for r in (2, 3):
        msgs = m.latest(f"run{r}").messages + [msg(f"z{r}", 0)]
        expect[(f"run{r}", m.save(f"run{r}", msgs))] = msgs

    with pytest.raises(ConflictError, match="forwarding-map shard"):
        gc(CheckpointManager(store).repo, grace_period=0, hooks={"after_mark": lambda **_: change_every_shard(store)})
    assert_clean(store, expect)
    CheckpointManager(store).gc(grace_period=0, lock_timeout=0)
    assert_clean(store, expect)


def test_verify_calls_packs_retired_by_a_repack_retired_not_unreferenced():
    """With a grace period, repacked packs stay until a later GC: verify warns about them as
    ``retired-pack`` (expected after every GC), not as leftovers of a crash."""
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = many_runs(store, runs=2, per_run=4, clock=clock, gc_grace_period=G)
    rep = m.gc()
    assert rep.repacked_packs == 8
    warnings = CheckpointManager(store).verify().warnings
    assert sorted(w.code for w in warnings) == ["retired-pack"] * 8, [str(w) for w in warnings]
    for _ in range(2):
        clock.advance(2 * G)
        m.gc()
    assert not CheckpointManager(store).verify().warnings
    assert_clean(store, expect)
