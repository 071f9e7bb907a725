"""Cross-run deduplication through shared objects (docs/format.md §29): a large message of a run's
first save is stored once per epoch in a pack whose id derives from its content id, listed as a
foreign segment by every run that uses it; GC ages it from its epoch's end."""

from __future__ import annotations

import copy
import json

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK, Pack
from snapstore.format.shared import EPOCH_SECONDS, SHARED_MIN, epoch_at, epoch_end, shared_epoch, shared_pack_id
from snapstore.maintenance import gc as gc_mod
from snapstore.maintenance.gc import gc
from snapstore.stores import MemoryStore

from tests.helpers.fake_clock import Clock
from tests.helpers.sealed_fixtures import sealed_store

G = 100.0

SYSTEM = {"role": "system", "content": "You are a careful agent. " + " ".join(f"rule {i}: be exact." for i in range(900)),
          "tools": [{"name": f"tool_{k}", "description": "does a thing " * 20} for k in range(10)]}


def run_msgs(r: int, turns: int) -> list:
    out = [SYSTEM, {"role": "user", "content": f"task {r}"}]
    for i in range(turns):
        out += [{"role": "assistant", "content": f"step {r}.{i}"}, {"role": "tool", "content": f"out {r}.{i}"}]
    return out


def shared_keys(store) -> list:
    return sorted(i.key for i in store.list(keys.PACKS) if shared_epoch(keys.pack_id_from_key(i.key)) is not None)


def save_run(m: CheckpointManager, r: int, turns: int = 3) -> list:
    msgs = run_msgs(r, turns)
    for n in range(4, len(msgs) + 1, 2):
        m.save(f"run-{r}", msgs[:n])
    return msgs


def test_three_runs_store_the_prompt_once_and_read_back_exactly():
    assert len(json.dumps(SYSTEM)) >= SHARED_MIN
    store = MemoryStore()
    m = CheckpointManager(store)
    want = {f"run-{r}": save_run(m, r) for r in range(3)}
    sk = shared_keys(store)
    assert len(sk) == 1
    pid = keys.pack_id_from_key(sk[0])
    assert pid == shared_pack_id(m.repo.hasher, m.repo.hasher.content_id(json.dumps(SYSTEM, separators=(",", ":")).encode()),
                                 epoch_at(m.repo.shared.wall()))
    # no run's own pack holds the prompt: every other pack is smaller than it
    cid = Pack.parse(sk[0], store.get(sk[0])).entries
    assert len(cid) == 1
    (etype, mid), = cid
    for i in store.list(keys.PACKS):
        if i.key != sk[0]:
            assert (T_CHUNK, mid) not in Pack.parse(i.key, store.get(i.key)).entries
    fresh = CheckpointManager(store)
    for run, msgs in want.items():
        assert fresh.latest(run).messages == msgs
        head = fresh.repo.head(fresh.repo.run_key(run))
        assert [s.pack for s in head.segment_list() if s.foreign] == [pid]
        for s in fresh.list(run):
            assert fresh.get(run, s.id).messages[0] == SYSTEM
    assert not fresh.verify(read_data=True).errors


def test_small_first_saves_make_the_same_requests_with_sharing_on_or_off():
    counts = []
    for enabled in (True, False):
        store = MemoryStore()
        m = CheckpointManager(store)
        m.repo.shared.enabled = enabled
        for r in range(3):
            m.save(f"r{r}", [{"role": "system", "content": "short prompt"}, {"role": "user", "content": f"t{r}"}])
        counts.append({k: v for k, v in store.stats.counts.items() if v})
        assert not shared_keys(store)
    assert counts[0] == counts[1]


def test_requests_a_shared_prompt_costs():
    """A run's first save reusing the shared prompt makes the requests of one storing it itself:
    in the process that confirmed it, no more; in a new process, one GET more (the first run of
    the epoch also PUTs it)."""
    store = MemoryStore()
    m = CheckpointManager(store)
    m.save("a", run_msgs(0, 1))

    def delta(mgr, run, share):
        mgr.repo.shared.enabled = share
        before = dict(store.stats.counts)
        mgr.save(run, run_msgs(int(run[1:]) if run[1:] else 9, 1))
        mgr.repo.shared.enabled = True
        return {k: v - before.get(k, 0) for k, v in store.stats.counts.items() if v - before.get(k, 0)}

    assert delta(m, "b1", True) == delta(m, "c2", False)
    m2 = CheckpointManager(store)
    m2.latest("a")
    with_share, without = delta(m2, "d3", True), delta(m2, "e4", False)
    assert with_share == {**without, "GET": without.get("GET", 0) + 1}
    assert len(shared_keys(store)) == 1


def test_deleting_one_run_keeps_the_other_runs_prompt():
    store = MemoryStore()
    m = CheckpointManager(store)
    a, b = save_run(m, 0), save_run(m, 1)
    m.delete("run-0")
    gc(CheckpointManager(store).repo, grace_period=0)
    assert len(shared_keys(store)) == 1
    fresh = CheckpointManager(store)
    assert fresh.latest("run-1").messages == b
    assert not fresh.verify(read_data=True).errors
    fresh.delete("run-1")
    gc(CheckpointManager(store).repo, grace_period=0)
    assert shared_keys(store) == []


def test_verify_reports_a_missing_shared_object():
    store = MemoryStore()
    m = CheckpointManager(store)
    save_run(m, 0)
    save_run(m, 1)
    sk = shared_keys(store)
    store.delete_many(sk)
    rep = CheckpointManager(store).verify()
    assert rep.errors
    assert any(sk[0] in str(e) for e in rep.errors), [str(e) for e in rep.errors]


def test_a_clashing_object_under_the_shared_id_is_not_reused():
    """Another pack under the id (a clash of the id's 4 hash bytes, or a forgery): the save stores
    the prompt in its own pack instead."""
    store = MemoryStore()
    m = CheckpointManager(store)
    raw = json.dumps(SYSTEM, separators=(",", ":")).encode()
    pid = shared_pack_id(m.repo.hasher, m.repo.hasher.content_id(raw), epoch_at(m.repo.shared.wall()))
    from snapstore.format.pack import PackBuilder
    pb = PackBuilder(pid)
    other = b'{"role":"system","content":"something else"}'
    pb.add(T_CHUNK, m.repo.hasher.content_id(other), other)
    store.put(keys.pack_key(pid), pb.build()[0])
    msgs = save_run(m, 0)
    assert CheckpointManager(store).latest("run-0").messages == msgs
    head = m.repo.head(m.repo.run_key("run-0"))
    assert not [s for s in head.segment_list() if s.foreign]


def test_encrypted_repositories_share_within_themselves_only():
    """Keyed ids: the same prompt gets another shared id in each repository, none derivable
    without the repository's content key; inside one, runs share it; the object is sealed."""
    ids = []
    for pw in ("one", "two"):
        inner = MemoryStore()
        m = CheckpointManager(sealed_store(inner, pw))
        want = [save_run(m, r) for r in range(2)]
        sk = shared_keys(inner)
        assert len(sk) == 1
        ids.append(sk[0])
        assert b"rule 1: be exact" not in inner.get(sk[0])  # sealed: no plaintext
        fresh = CheckpointManager(sealed_store(inner, pw))
        assert [fresh.latest(f"run-{r}").messages for r in range(2)] == want
        assert not fresh.verify(read_data=True).errors
    assert ids[0] != ids[1]
    import blake3
    plain = blake3.blake3(json.dumps(SYSTEM, separators=(",", ":")).encode()).digest()
    assert all(plain[:4].hex() not in k for k in ids)


def test_s3_shares_and_runs_without_a_prompt_cost_the_same(s3_http_store):
    m = CheckpointManager(s3_http_store)
    want = [save_run(m, r) for r in range(3)]
    assert len(shared_keys(s3_http_store)) == 1
    fresh = CheckpointManager(s3_http_store)
    assert [fresh.latest(f"run-{r}").messages for r in range(3)] == want
    assert not fresh.verify(read_data=True).errors


# ------------------------------------------------------------------------------------------------
# GC beside a writer reusing a shared object (fake clock for the store, the managers and the epoch)


class World:
    def __init__(self):
        self.clock = Clock()
        self.store = MemoryStore(clock=self.clock)
        self.expect: dict = {}

    def mgr(self) -> CheckpointManager:
        m = CheckpointManager(self.store, clock=self.clock, gc_grace_period=G)
        m.repo.shared.wall = self.clock
        m.repo.shared.clock = self.clock
        return m

    def save(self, m, run, msgs):
        cid = m.save(run, msgs)
        self.expect[(run, cid)] = copy.deepcopy(msgs)
        return cid

    def gc(self):
        return gc(CheckpointManager(self.store).repo, grace_period=G)

    def check(self):
        clean = CheckpointManager(self.store)
        rep = clean.verify(read_data=True)
        assert not rep.errors, [str(e) for e in rep.errors]
        for (run, cid), msgs in self.expect.items():
            assert clean.get(run, cid).messages == msgs


def _old_unreferenced_prompt(w: World) -> None:
    """Run ``a`` stores the prompt early in an epoch and is deleted; GC runs at times where an
    ordinary pack of that age would be a candidate and then deleted."""
    start = epoch_end(epoch_at(w.clock())) - EPOCH_SECONDS
    w.clock.t = start + 10
    A = w.mgr()
    A.save("a", run_msgs(0, 1))
    A.delete("a")
    w.clock.t = epoch_end(epoch_at(start)) - 3 * G
    w.gc()                      # the prompt is unreferenced and older than G/2: an ordinary pack
    w.clock.advance(1.5 * G)    # would now be a candidate, and deleted by the next GC


@pytest.mark.parametrize("step", ["after_prepare", "after_pack", "before_publish"])
def test_gc_beside_a_writer_reusing_an_old_shared_object(step):
    """Writer ``b`` (a new process: it reads the shared pack, finds it, reuses it) pauses at
    ``step`` while GCs run with the clock moving less than G/4 (within the protocol). Ordinary
    two-phase rules alone would delete the prompt under it (see the next test); aged from its
    epoch's end it stays, and every checkpoint restores exactly, also after later GCs."""
    w = World()
    _old_unreferenced_prompt(w)
    B = w.mgr()
    ran = []

    def interfere(**info):
        B.hooks.clear()
        ran.append(w.gc())
        w.clock.advance(0.2 * G)
        ran.append(w.gc())

    B.hooks[step] = interfere
    w.save(B, "b", run_msgs(1, 1))
    assert ran
    assert len(shared_keys(w.store)) == 1
    w.check()
    for _ in range(3):
        w.clock.advance(1.5 * G)
        w.gc()
    w.check()


def test_without_the_epoch_rule_gc_deletes_a_reused_shared_object(monkeypatch):
    """The control: GC aging shared packs like any other deletes the prompt a writer reused while
    it was a candidate (the reuse happens after the candidate record, the publish after GC's mark).
    This is what the rule in docs/format.md §29 is for; the test above fails without it."""
    monkeypatch.setattr(gc_mod, "effective_mtime", lambda pid, mtime, now: mtime)
    w = World()
    _old_unreferenced_prompt(w)
    B = w.mgr()

    def interfere(**info):
        B.hooks.clear()
        w.gc()

    B.hooks["before_publish"] = interfere
    w.save(B, "b", run_msgs(1, 1))
    assert shared_keys(w.store) == []  # deleted under the published reference
    with pytest.raises(AssertionError):
        w.check()


def test_a_save_paused_past_its_epoch_is_built_again_in_the_next_one():
    """A writer that reused epoch e's shared pack and pauses past e's end plus G/4 builds the
    save again: its record names the next epoch's shared pack (written then)."""
    w = World()
    w.clock.t = epoch_end(epoch_at(w.clock())) - 10
    B = w.mgr()

    def pause(**info):
        B.hooks.clear()
        w.clock.advance(0.4 * G)  # past the epoch's end + G/4, within G/2 of the pack

    B.hooks["after_pack"] = pause
    w.save(B, "b", run_msgs(1, 1))
    head = B.repo.head(B.repo.run_key("b"))
    foreign = [s.pack for s in head.segment_list() if s.foreign]
    assert len(foreign) == 1 and shared_epoch(foreign[0]) == epoch_at(w.clock())
    w.check()


def test_gc_ages_a_shared_pack_from_its_epochs_end_only():
    from snapstore.format.shared import effective_mtime
    e = epoch_at(1_750_000_000.0)
    pid = bytes([0xFF]) + e.to_bytes(3, "big") + b"abcd"
    assert effective_mtime(pid, 1_750_000_000.0, 1_750_000_100.0) == epoch_end(e)
    assert effective_mtime(pid, epoch_end(e) + 5, epoch_end(e) + 9) == epoch_end(e) + 5
    future = bytes([0xFF]) + (e + 1000).to_bytes(3, "big") + b"abcd"  # a random id shaped so
    assert effective_mtime(future, 5.0, 1_750_000_000.0) == 5.0
    assert effective_mtime(b"\x01" * 8, 5.0, 1_750_000_000.0) == 5.0


def test_stats_counts_the_shared_objects():
    """Trial snag: stats showed no sign of cross-run dedup; the shared objects are now counted."""
    store = MemoryStore()
    m = CheckpointManager(store)
    prompt = {"role": "system", "content": "shared prompt " + "tool schema words " * 700}
    for r in range(3):
        m.save(f"run-{r}", [prompt, {"role": "user", "content": f"task {r}"}])
    packs = m.stats()["objects"]["packs"]
    assert packs["shared"] == 1 and 0 < packs["shared_bytes"] < len(prompt["content"])
