"""GC at scale (docs/format.md §21, "Copying while marking"; docs/design-notes.md §2.24): on format-2 writes, mark fetches every pack once,
fetches several runs' segments in one parallel wave (bounded by the store's ``max_concurrency``),
and GC's pack cache is bounded while it runs; the bookkeeping that replaces per-manifest and
per-entry objects (``LogEntry``, ``Needed``) gives the same answers as the objects it replaces."""

from __future__ import annotations

import threading
import time
from collections import Counter

from snapstore import CheckpointManager
from snapstore.maintenance.runs import LogEntry, read_all_runs, read_runs_slim
from snapstore.maintenance.mark import Needed
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK, Pack, PackBuilder
from snapstore.stores import LocalStore

from tests.helpers.repo_checks import assert_clean, build_runs


def build(store, runs: int = 24, saves: int = 9) -> dict:
    return build_runs(store, runs, saves)


class Recorder:
    """Counts GETs per key and the most GETs of packs in flight at once (each GET sleeps a little,
    so that GETs issued together overlap)."""

    def __init__(self, store, delay: float = 0.003):
        self.gets: Counter = Counter()
        self.inflight = self.max_inflight = 0
        lock = threading.Lock()
        orig = store.get

        def get(key, *a, **kw):
            with lock:
                self.gets[key] += 1
                if key.startswith(keys.PACKS):
                    self.inflight += 1
                    self.max_inflight = max(self.max_inflight, self.inflight)
            try:
                if key.startswith(keys.PACKS):
                    time.sleep(delay)
                return orig(key, *a, **kw)
            finally:
                if key.startswith(keys.PACKS):
                    with lock:
                        self.inflight -= 1
        store.get = get


def test_gc_fetches_each_pack_once_in_parallel_waves(tmp_path):
    store = LocalStore(str(tmp_path / "repo"))
    expect = build(store)
    packs = [i.key for i in store.list(keys.PACKS)]
    assert len(packs) >= 24 * 2  # tier packs and the newest per-save packs of every run
    m = CheckpointManager(store)
    rec = Recorder(store)
    rep = m.gc(grace_period=0, max_unused=1.0, small_pack_bytes=0)  # mark and sweep, no repack
    pack_gets = {k: n for k, n in rec.gets.items() if k.startswith(keys.PACKS)}
    assert set(pack_gets) == set(packs), "every live pack is read"
    assert max(pack_gets.values()) == 1, {k: n for k, n in pack_gets.items() if n > 1}
    # segments of several runs are fetched together (one run has about 3 segments)
    assert rec.max_inflight > 4, rec.max_inflight
    assert rep.live_checkpoints == 24 * 9
    assert m.repo.cache.limit == 256 << 20  # GC's smaller cache budget is restored afterwards
    assert_clean(store, expect)


def test_repacking_gc_fetches_each_pack_once_and_keeps_data(tmp_path):
    """A GC that rewrites mostly dead tier packs reads each once: a rewritten segment is copied
    while mark has it cached (tests/cost/test_gc_fetch_once.py does this with a cache far smaller than
    the repository)."""
    store = LocalStore(str(tmp_path / "repo"))
    expect = build(store)
    m = CheckpointManager(store)
    m.prune(keep_last=1)
    rec = Recorder(store, delay=0.0)
    rep = m.gc(grace_period=0)
    pack_gets = [n for k, n in rec.gets.items() if k.startswith(keys.PACKS)]
    assert rep.repacked_packs > 0 and rep.refetched_packs == 0
    assert pack_gets and max(pack_gets) == 1
    assert_clean(store, expect)


def test_slim_run_logs_classify_like_full_ones(tmp_path):
    store = LocalStore(str(tmp_path / "repo"))
    build(store, runs=5, saves=20)
    m = CheckpointManager(store)
    m.prune(keep_last=4, run_id="run-001")
    m.delete("run-002")
    m.repo  # open
    kbr: dict = {}
    for info in store.list(keys.RUNS):
        parts = info.key.split("/")
        if len(parts) == 4 and parts[2] == "m":
            kbr.setdefault(parts[1], []).append(info.key)
    full = read_all_runs(m.repo, kbr, light=True)
    slim = read_runs_slim(m.repo, kbr, batch_keys=7)  # several batches
    assert set(full) == set(slim)
    for rk, log in full.items():
        s = slim[rk]
        assert [x.seq for x in s.live] == [x.seq for x in log.live]
        assert s.hidden == log.hidden and s.head.seq == log.head.seq
        for seq, rec in s.manifests.items():
            orig = log.manifests[seq]
            assert (rec.kind, rec.run_id, rec.seq) == (orig.kind, orig.run_id, orig.seq)
            assert list(rec.state or ()) == list(orig.state or ())
            assert rec.session_state_ref == orig.session_state_ref
        assert any(isinstance(x, LogEntry) for x in s.manifests.values()) or len(s.manifests) <= 2


def test_needed_bitmap_round_trips_entries():
    b = PackBuilder(b"\x01" * 8)
    ids = [bytes([i]) * 16 for i in range(1, 40)]
    for i in ids:
        b.add(T_CHUNK, i, b"x" * 10)
    data, _ = b.build()
    pack = Pack.parse("packs/test", data, b"\x01" * 8)
    want = {(T_CHUNK, i) for i in ids[::3]}
    other = (T_CHUNK, b"\xff" * 16)  # not in the pack: kept as is
    n = Needed(pack, want | {other})
    assert len(n) == len(want) + 1
    assert n.entries(pack) == want | {other}
    n.add((T_CHUNK, ids[1]))
    assert n.entries(pack) == want | {other, (T_CHUNK, ids[1])}
