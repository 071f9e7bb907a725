"""The segment fanout of new repositories (16, docs/format.md §5, §10 *Fanout*) beside the fanout 4
of repositories created by earlier releases: the counter's digits, restores, GC, and the tier bytes
a run PUTs (fewer levels, fewer rewrites)."""

from __future__ import annotations

import json

import pytest

from benchmarks.latency import prelude, turn
from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.codec import seal_envelope
from snapstore.format.config import CONFIG_MAGIC, NEW_SEG_FANOUT, RepoConfig
from snapstore.errors import InvalidInputError
from snapstore.format.segs import MAX_OPEN_SEGS, Seg, plan_append, plan_append_bounded, plan_append_policy
from snapstore.repo.repository import Repository
from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore
from tests.helpers.repo_checks import assert_clean, grown_msg



def _digits(n: int, base: int) -> list[int]:
    out = []
    while n:
        out.append(n % base)
        n //= base
    return out


def test_a_new_repository_gets_fanout_4_a_chosen_16_is_kept_and_an_old_config_reads_as_4():
    store = MemoryStore()
    m = CheckpointManager(store)
    m.save("r", [{"role": "user", "content": "hi"}])
    assert NEW_SEG_FANOUT == 4  # 16 stores more bytes for short runs (config.NEW_SEG_FANOUT)
    cfg = RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG))
    assert cfg.seg_fanout == 4
    # a config that does not say (format 1; earlier releases always wrote it) reads as 4
    d = {"format": "snapstore", "version": 2, "repo_id": cfg.repo_id, "key": cfg.key.hex(),
         "created": "2026-01-01T00:00:00.000000Z"}
    old = RepoConfig.from_bytes(keys.CONFIG, seal_envelope(CONFIG_MAGIC, 2, json.dumps(d).encode()))
    assert old.seg_fanout == 4
    # a chosen fanout is kept
    sixteen = MemoryStore()
    Repository.init(sixteen, seg_fanout=16)
    assert RepoConfig.from_bytes(keys.CONFIG, sixteen.get(keys.CONFIG)).seg_fanout == 16


def test_the_counter_in_base_16_lists_the_digit_sum_and_stays_under_the_cap():
    segs: list = []
    merges = 0
    for n in range(1, 5000):
        plan = plan_append(segs, n.to_bytes(8, "big"), 16)
        if plan.inputs:
            merges += 1
            segs = list(plan.segs)
            segs[plan.slot] = Seg((10 ** 6 + n).to_bytes(8, "big"), plan.level)
        else:
            segs = plan.segs
        levels = [s.level for s in segs]
        d = _digits(n, 16)
        assert sorted(levels, reverse=True) == [lv for lv in range(len(d) - 1, -1, -1) for _ in range(d[lv])]
        assert len(segs) <= 46 < MAX_OPEN_SEGS
    assert merges == 4999 // 16


def test_a_run_at_fanout_16_restores_every_checkpoint_and_survives_prune_and_gc(tmp_path):
    store = LocalStore(str(tmp_path / "repo"), fsync=False)
    Repository.init(store, seg_fanout=16)
    m = CheckpointManager(store)
    msgs, expect = [], {}
    for i in range(300):
        msgs = msgs + [grown_msg("f", i, 200)]
        cp = m.save("r", msgs, step=i)
        if i % 37 == 0 or i == 299:
            expect[("r", cp)] = list(msgs)
    segs = m.repo.head(m.repo.run_key("r")).segment_list()
    assert sorted((s.level for s in segs), reverse=True) == [2] + [1] * 2 + [0] * 12  # 300 = 0x12c
    assert_clean(store, expect)
    m.prune(keep_last=5, run_id="r")
    m.gc(grace_period=0)
    fresh = CheckpointManager(LocalStore(str(tmp_path / "repo"), fsync=False))
    assert json.dumps(fresh.latest("r").messages) == json.dumps(msgs)
    assert len(fresh.list("r")) == 5
    assert not fresh.verify(read_data=True).errors


def _tier_bytes(fanout: int, saves: int) -> int:
    """Bytes of tier packs PUT by one run of ``saves`` saves in a repository of ``fanout``."""
    store = MemoryStore()
    Repository.init(store, seg_fanout=fanout)
    m = CheckpointManager(store)
    put = []
    orig = store.put

    def counting_put(key, data, *a, **kw):
        put.append((key, len(data)))
        return orig(key, data, *a, **kw)
    store.put = counting_put
    msgs = prelude()
    for i in range(saves):
        msgs = msgs + turn(7, i)  # 1-2 KB messages of seeded text, as benchmarks/write_amp.py saves
        m.save("r", msgs, step=i)
    live = {keys.pack_key(s.pack) for s in m.repo.head(m.repo.run_key("r")).segment_list()}
    total = sum(n for k, n in put if k.startswith("packs/"))
    assert live  # every listed segment was PUT
    return total


def test_fanout_16_puts_fewer_pack_bytes_than_fanout_4():
    # 512 saves: fanout 4 merges at 4, 16, 64 and 256 saves (4 rewrites of each entry), fanout 16
    # at 16 and 256 (2): its packs PUT (per-save and tier packs) must be clearly fewer bytes
    four, sixteen = _tier_bytes(4, 512), _tier_bytes(16, 512)
    assert sixteen < 0.8 * four, (sixteen, four)  # measured: 0.75 (per-save packs included)


def _bounded(n: int, limit: int, segs=None):
    """``n`` appends by :func:`plan_append_bounded`; yields the list after each, with per
    segment the most times any of its entries was rewritten."""
    segs = list(segs or [])
    rewrites = {s.pack: 0 for s in segs}
    for i in range(1, n + 1):
        p = i.to_bytes(8, "big")
        plan = plan_append_bounded(segs, p, limit)
        rewrites[p] = 0
        segs = list(plan.segs)
        if plan.inputs:
            merged = (10 ** 9 + i).to_bytes(8, "big")
            rewrites[merged] = 1 + max(rewrites[s.pack] for s in plan.inputs)
            segs[plan.slot] = Seg(merged, plan.level)
        yield segs, rewrites


def test_bounded_lists_keep_the_limit_and_rewrite_each_entry_at_most_level_times():
    last = None
    for segs, rewrites in _bounded(10_000, 46):
        assert len(segs) <= 46
        levels = [s.level for s in segs]
        assert levels == sorted(levels, reverse=True)
        assert all(rewrites[s.pack] <= s.level for s in segs)
        last = segs
    # 10,000 saves in at most 46 segments with each entry rewritten at most twice (the counter of
    # fanout 16 rewrites entries up to 3 times by then, fanout 4 up to 6)
    assert max(s.level for s in last) == 2


def test_bounded_lists_never_merge_foreign_segments_below_the_cap():
    foreign = [Seg((7000 + i).to_bytes(8, "big"), 3, True) for i in range(40)]
    for segs, _ in _bounded(500, 8, foreign):
        assert segs[:40] == foreign and len(segs) <= 48
    plan = plan_append_bounded([Seg(i.to_bytes(8, "big"), 1, True) for i in range(MAX_OPEN_SEGS)], b"n" * 8, 8)
    assert plan.segs == [Seg(b"", 2)] and len(plan.inputs) == MAX_OPEN_SEGS + 1  # past the cap: one own copy
    with pytest.raises(InvalidInputError):
        plan_append_bounded([], b"n" * 8, 3)


def test_seg_limit_is_a_checked_setting_and_a_run_under_it_restores(tmp_path):
    for bad in (1, 3, 97, -1):
        with pytest.raises(InvalidInputError):
            Repository.init(MemoryStore(), seg_limit=bad)
    store = LocalStore(str(tmp_path / "repo"), fsync=False)
    Repository.init(store, seg_limit=6)
    m = CheckpointManager(store)
    msgs, expect = [], {}
    for i in range(60):
        msgs = msgs + [grown_msg("b", i, 200)]
        expect[("r", m.save("r", msgs, step=i))] = list(msgs)
    assert len(m.repo.head(m.repo.run_key("r")).segment_list()) <= 6
    assert_clean(store, expect)
    assert CheckpointManager(MemoryStore()).repo.config.seg_limit == 0  # the counter by default


def _policy(n: int, fanout: int, limit: int, start: int):
    """``n`` appends by :func:`plan_append_policy`; yields ``(i, list, rewrites)`` as :func:`_bounded`."""
    segs: list = []
    rewrites: dict = {}
    for i in range(1, n + 1):
        p = i.to_bytes(8, "big")
        plan = plan_append_policy(segs, p, fanout, limit, start)
        rewrites[p] = 0
        segs = list(plan.segs)
        if plan.inputs:
            merged = (10 ** 9 + i).to_bytes(8, "big")
            rewrites[merged] = 1 + max(rewrites[s.pack] for s in plan.inputs)
            segs[plan.slot] = Seg(merged, plan.level)
        yield i, segs, rewrites


def test_bounded_after_a_level_is_the_counter_until_then_and_bounded_after():
    counter: list = []
    for i, segs, rewrites in _policy(10_000, 4, 46, 4):
        if i < 256:  # no level-4 segment yet: exactly the counter's list
            counter = plan_append(counter, i.to_bytes(8, "big"), 4).segs
            counter = [Seg((10 ** 9 + i).to_bytes(8, "big"), s.level) if s.pack == b"" else s for s in counter]
            assert [s.level for s in segs] == [s.level for s in counter]
        assert len(segs) <= 46
        levels = [s.level for s in segs]
        assert levels == sorted(levels, reverse=True)
        assert all(rewrites[s.pack] <= s.level for s in segs)
    # at 10,000 saves: the first 256 saves' entries were rewritten 4 times (the counter), every later
    # one at most twice (the counter of fanout 4 rewrites entries up to 6 times by then)
    assert segs[0].level == rewrites[segs[0].pack] == 4
    assert max(rewrites[s.pack] for s in segs[1:]) <= 2


def test_bounded_after_a_level_is_a_checked_setting_and_plain_bounded_or_counter_otherwise():
    for bad in ({"seg_from": 2}, {"seg_from": 4, "seg_limit": 12}, {"seg_from": 36, "seg_limit": 96},
                {"seg_from": 2, "seg_limit": 8, "seg_fanout": 8}):
        with pytest.raises(InvalidInputError):
            Repository.init(MemoryStore(), **bad)
    assert Repository.init(MemoryStore(), seg_from=4, seg_limit=13).config.seg_from == 4
    segs = [Seg(i.to_bytes(8, "big"), 0) for i in range(3)]
    assert plan_append_policy(segs, b"n" * 8, 4, 0, 0) == plan_append(segs, b"n" * 8, 4)
    assert plan_append_policy(segs, b"n" * 8, 4, 46, 0) == plan_append_bounded(segs, b"n" * 8, 46)
    assert plan_append_policy(segs, b"n" * 8, 4, 46, 1) == plan_append(segs, b"n" * 8, 4)  # no level 1 yet
    top = [Seg(b"f" * 8, 5, True)] + segs  # a foreign segment of level 5 does not end the counter
    assert plan_append_policy(top, b"n" * 8, 4, 46, 4) == plan_append(top, b"n" * 8, 4)


def test_a_run_bounded_after_a_level_restores_every_checkpoint(tmp_path):
    store = LocalStore(str(tmp_path / "repo"), fsync=False)
    Repository.init(store, seg_limit=8, seg_from=2)
    m = CheckpointManager(store)
    msgs, expect = [], {}
    for i in range(120):
        msgs = msgs + [grown_msg("c", i, 200)]
        expect[("r", m.save("r", msgs, step=i))] = list(msgs)
    segs = m.repo.head(m.repo.run_key("r")).segment_list()
    assert len(segs) <= 8 and max(s.level for s in segs) >= 2
    assert_clean(store, expect)


def test_s3_run_bounded_after_level_4_restores_forks_and_survives_prune_and_gc(s3_inprocess_store):
    # seg_limit 46, seg_from 4 on S3: 300 saves pass the first level-4 segment (256), then bounded
    # lists; a fork of the head and saves on it, then prune, GC and verify of both runs
    store = s3_inprocess_store
    Repository.init(store, seg_limit=46, seg_from=4)
    m = CheckpointManager(store)
    assert (m.repo.config.seg_limit, m.repo.config.seg_from) == (46, 4)
    msgs, expect = [], {}
    for i in range(300):
        msgs = msgs + [grown_msg("s", i, 120)]
        cp = m.save("r", msgs, step=i)
        if i % 41 == 0 or i == 299:
            expect[("r", cp)] = list(msgs)
    segs = m.repo.head(m.repo.run_key("r")).segment_list()
    assert segs[0].level == 4 and 4 < len(segs) <= 46  # 256 saves merged by the counter, then appended
    fork = m.fork("r", cp, "f")
    fmsgs = list(msgs)
    for i in range(20):
        fmsgs = fmsgs + [grown_msg("t", i, 120)]
        fcp = m.save("f", fmsgs, step=1000 + i)
    expect[("f", fcp)] = list(fmsgs)
    expect[("f", fork.id)] = list(msgs)
    assert_clean(store, expect)
    m.prune(keep_last=5, run_id="r")
    m.gc(grace_period=0)
    fresh = CheckpointManager(store)
    assert json.dumps(fresh.latest("r").messages) == json.dumps(msgs)
    assert json.dumps(fresh.latest("f").messages) == json.dumps(fmsgs)
    assert len(fresh.list("r")) == 5
    assert not fresh.verify(read_data=True).errors
