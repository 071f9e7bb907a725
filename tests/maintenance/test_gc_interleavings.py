"""Deterministic interleavings of writers, retention and garbage collection (docs/format.md §20-§21).

A writer's save has three steps that matter to GC: the dedup decision (``after_prepare``), the pack
write (``after_pack``) and the manifest publish (``before_publish`` runs just before it). GC has the
phases ``after_list``, ``after_mark``, ``after_repack``, ``before_sweep`` and ``after_sweep``. The
tests pause one side in a hook and run the other (a full GC, a prune, a fork, another writer) inside
it, with one fake clock driving both the store's object timestamps (``MemoryStore(clock=...)``) and
the managers' monotonic clock (``CheckpointManager(clock=...)``).

After every scenario: ``verify(read_data=True)`` has no errors and every checkpoint that a save
reported as saved, and that no completed retention operation deleted, restores exactly.

Tests that currently fail expose bugs; their docstrings say what goes wrong and why.
"""

from __future__ import annotations

import copy
import json

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, ObjectNotFound
from snapstore.format.manifest import FREE_AFTER
from snapstore.maintenance.forwarding import read_forward_map
from snapstore.maintenance.gc import LOCK_KEY, gc
from snapstore.stores.base import store_capabilities
from snapstore.stores import MemoryStore

from tests.helpers.fake_clock import Clock

G = 100.0  # the grace period used by GC and by the writers' re-check rule


def msg(tag: str, i: int, size: int = 120) -> dict:
    return {"role": "assistant" if i % 2 else "user", "content": f"{tag}-{i} " + "lorem ipsum " * (size // 12)}


_KIND = {"kind": "memory", "dir": None}


@pytest.fixture(autouse=True, params=["memory", "sqlite"])
def store_kind(request, tmp_path):
    """Every interleaving runs on a memory store and on a SQLite file (``World`` reads this)."""
    _KIND.update(kind=request.param, dir=tmp_path)
    yield request.param
    _KIND.update(kind="memory", dir=None)


def raw(store) -> dict:
    """``{key: bytes}`` of every object of ``store`` (any store kind)."""
    return {i.key: store.get(i.key) for i in store.list("")}


class World:
    """A repository (memory or one SQLite file: the ``store_kind`` fixture), a fake clock, and the
    checkpoints that must restore exactly."""

    def __init__(self, grace: float = G):
        self.clock = Clock()
        if _KIND["kind"] == "sqlite":
            from snapstore.stores.sqlite import SqliteStore
            self.store = SqliteStore(_KIND["dir"] / f"w{id(self):x}.db", fsync=False, clock=self.clock)
        else:
            self.store = MemoryStore(clock=self.clock)
        self.grace = grace
        self.expect: dict[tuple[str, str], list] = {}

    def mgr(self, **kw) -> CheckpointManager:
        return CheckpointManager(self.store, clock=self.clock, gc_grace_period=self.grace, **kw)

    def save(self, m: CheckpointManager, run: str, messages: list, **kw) -> str:
        cid = m.save(run, messages, **kw)
        self.expect[(run, cid)] = copy.deepcopy(messages)
        return cid

    def gone(self, run: str, cid: str | None = None) -> None:
        """A completed retention operation deleted ``cid`` (or the whole run)."""
        for k in [k for k in self.expect if k[0] == run and (cid is None or k[1] == cid)]:
            del self.expect[k]

    def gc(self, **kw):
        kw.setdefault("grace_period", self.grace)
        return gc(CheckpointManager(self.store).repo, **kw)

    def collect(self, times: int) -> None:
        """``times`` GCs, each 1.5 x G after the previous step (so candidates mature)."""
        for _ in range(times):
            self.clock.advance(1.5 * G)
            self.gc()

    def packs(self) -> set:
        return {k for k in raw(self.store) if k.startswith("packs/")}

    def forwarded(self) -> set:
        """Retired packs that have a forwarding record (as read by a new manager)."""
        return set(read_forward_map(CheckpointManager(self.store).repo).to)

    def check(self) -> None:
        clean = CheckpointManager(self.store)  # a new manager: no caches
        rep = clean.verify(read_data=True)
        assert not rep.errors, [str(e) for e in rep.errors]
        for (run, cid), messages in self.expect.items():
            live = [s.id for s in clean.list(run)]
            assert cid in live, f"checkpoint {cid} of run {run!r} was reported saved but is not live"
            got = clean.get(run, cid).messages
            assert json.dumps(got) == json.dumps(messages), f"checkpoint {cid} of {run!r} does not restore exactly"


def warm_writer(w: World, run: str = "r", n: int = 3, tag: str = "a"):
    """A writer that saved ``n`` checkpoints (warm: it holds the list state of its head)."""
    W = w.mgr()
    msgs: list = []
    ids = []
    for i in range(n):
        msgs = msgs + [msg(tag, i)]
        ids.append(w.save(W, run, msgs))
    return W, msgs, ids


# ------------------------------------------------------------------------------------------------
# 1. GC between a writer's dedup decision and its publish, while the parent is removed


@pytest.mark.parametrize("hook", ["after_prepare", "after_pack"])
@pytest.mark.parametrize("advance", [0.25, 0.75, 1.5], ids=["lt-half-grace", "gt-half-grace", "gt-grace"])
@pytest.mark.parametrize("how", ["delete-head", "prune-all", "delete-run"])
def test_parent_removed_and_collected_while_writer_in_flight(hook, advance, how):
    """The writer dedups against its parent; another manager removes the parent and GC runs (twice,
    ``advance`` x grace apart). The writer must get ConflictError, never publish a dangling reference."""
    w = World()
    W, msgs, ids = warm_writer(w)
    M = w.mgr()
    reports = []

    def interfere(**info):
        W.hooks.clear()
        if how == "delete-head":
            M.delete("r", ids[-1])
            w.gone("r", ids[-1])
        elif how == "prune-all":
            gone = M.prune(older_than=0, run_id="r")
            assert len(gone) == len(ids)
            w.gone("r")
        else:
            M.delete("r")
            w.gone("r")
        reports.append(w.gc())
        w.clock.advance(advance * G)
        reports.append(w.gc())
        # packs become deletion candidates only once older than grace/2, so one more GC a grace
        # period later is what can delete them
        w.clock.advance(advance * G)
        reports.append(w.gc())

    W.hooks[hook] = interfere
    packs_before = w.packs()
    with pytest.raises(ConflictError):
        W.save("r", msgs + [msg("a", 99)])
    if advance > 1:
        # the scenario is meaningful: the parent's own data really was deleted meanwhile
        assert sum(r.deleted.get("packs", 0) for r in reports) >= 1
        assert packs_before - w.packs()
    w.check()
    # the writer recovers: reload the head, save again, everything still restores
    cp = W.latest("r")
    base = cp.messages if cp else []
    w.save(W, "r", base + [msg("b", 1)])
    w.clock.advance(2 * G)
    w.gc()
    w.gc()
    w.check()


WRITER_STEPS = ["after_prepare", "after_pack", "before_publish"]
GC_PHASES = ["after_list", "after_mark", "after_repack", "before_sweep", "after_sweep"]
ACTIONS = ["none", "prune-keep-last", "delete-head", "fork-then-delete-run", "other-run-save"]


@pytest.mark.parametrize("advance", [0.0, 0.4])
@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("phase", GC_PHASES)
@pytest.mark.parametrize("step", WRITER_STEPS)
def test_writer_step_x_gc_phase(step, phase, action, advance):
    """Every writer step x every GC phase: the writer pauses at ``step`` and a GC runs; at ``phase``
    another manager acts on the writer's run and the clock moves by ``advance`` x grace (< grace/2,
    so a paused writer is still within the protocol). Older garbage (pruned checkpoints) has matured,
    so this GC really deletes. Afterwards the writer either published or got ConflictError, and
    every reported checkpoint restores exactly, now and after the GCs that follow."""
    w = World()
    W, msgs, ids = warm_writer(w, n=4)
    M = w.mgr()
    for cid in ids[:2]:
        w.gone("r", cid)
    assert len(M.prune(keep_last=2, run_id="r")) == 2
    w.gc()                   # old packs become candidates ...
    w.clock.advance(1.5 * G)  # ... and mature: the GC in the middle of the save deletes them
    W.latest("r")             # the writer re-reads its head (confirmed now)
    expect_conflict = action in ("delete-head", "fork-then-delete-run")
    fork_id = []

    def act(**info):
        if action == "prune-keep-last":
            gone = M.prune(keep_last=1, run_id="r")
            for s in gone:
                w.gone("r", s.id)
        elif action == "delete-head":
            M.delete("r", ids[-1])
            w.gone("r", ids[-1])
        elif action == "fork-then-delete-run":
            cp = M.fork("r", ids[-1], "f")
            w.expect[("f", cp.id)] = copy.deepcopy(msgs)
            fork_id.append(cp.id)
            M.delete("r")
            w.gone("r")
        elif action == "other-run-save":
            w.save(M, "o", [msg("o", 0), msg("o", 1)])
        w.clock.advance(advance * G)

    def paused(**info):
        W.hooks.clear()
        w.gc(hooks={phase: act})

    W.hooks[step] = paused
    new = msgs + [msg("a", 50)]
    if expect_conflict:
        with pytest.raises(ConflictError):
            W.save("r", new)
    else:
        w.save(W, "r", new)
    w.check()
    w.collect(times=2)
    w.check()


# ------------------------------------------------------------------------------------------------
# 2. Repacking packs a warm writer still holds hints to


@pytest.mark.usefixtures("format1_writes")
@pytest.mark.parametrize("grace", [0.0, G])
def test_repack_under_a_warm_writer(grace):
    """GC repacks (merges the small per-save packs) while a warm writer holds location hints into
    them; the writer saves again (new nodes and states keep naming the retired packs). Reads work
    through the forwarding records before and after the retired packs are deleted."""
    w = World(grace=grace)
    W, msgs, ids = warm_writer(w, n=6)
    retired = []
    rep = w.gc(hooks={"after_repack": lambda **kw: retired.extend(kw["retired"])})
    assert rep.repacked_packs >= 2 and retired, rep.as_dict()
    fwd = w.forwarded()
    assert fwd == set(retired)
    # the warm writer continues; its new checkpoints reuse hints to the retired packs
    msgs = msgs + [msg("a", 6)]
    w.save(W, "r", msgs)
    w.check()
    old = {f"packs/{p.hex()[:2]}/{p.hex()}" for p in retired}
    if grace:
        assert old <= w.packs()          # retired packs wait: candidates at the next GC ...
        w.clock.advance(1.5 * G)
        w.gc()
        w.clock.advance(1.5 * G)         # ... deleted a grace period after that
        w.gc()
    assert not (old & w.packs())         # retired packs are gone now
    assert fwd <= w.forwarded()          # ... but their forwarding records are still needed
    w.check()
    msgs = msgs + [msg("a", 7)]
    w.save(W, "r", msgs)                 # still hinting at packs that no longer exist
    w.check()
    w.collect(times=2)
    w.check()


@pytest.mark.parametrize("grace", [0.0, G])
def test_forwarding_chains_stay_readable_after_many_gc_cycles(grace):
    """BUG: a save + GC cycle repeated ~10 times makes the repository unreadable.

    Every GC merges the small packs again, including the pack the previous GC produced, so the
    forwarding records form a chain P0 -> Q1 -> Q2 -> ... that grows by one per GC: hints are never
    rewritten and the old nodes (naming P0) stay in every later checkpoint. ``Repository.locate``
    and ``Reach.home`` stop following forwarding records after 8 hops, so after the 9th GC the
    live data (which still exists, in the newest pack) is reported missing: restores fail with
    ObjectNotFound, verify reports errors and GC itself stops ("live pack ... is missing")."""
    w = World(grace=grace)
    W, msgs, ids = warm_writer(w, n=2)
    for i in range(12):
        msgs = msgs + [msg("a", 10 + i)]
        w.save(W, "r", msgs)
        w.clock.advance(1.5 * G)
        w.gc()
        w.check()


# ------------------------------------------------------------------------------------------------
# 3./4. In-flight packs and candidates that are referenced again


def _pack_key(pack_id: bytes) -> str:
    return f"packs/{pack_id.hex()[:2]}/{pack_id.hex()}"


@pytest.mark.parametrize("hook,advance", [("after_pack", 0.0), ("after_pack", 0.4), ("after_pack", 0.9),
                                          ("before_publish", 0.0), ("before_publish", 0.4)])
def test_in_flight_pack_survives_gc(hook, advance):
    """The writer's pack is written but its manifest not yet published while GC runs (twice,
    ``advance`` x grace apart, grace > 0): the pack is a candidate at most, never deleted; the publish
    then succeeds and the checkpoint restores. (A pause after the re-check, ``before_publish``, is
    only allowed within grace/2, so larger advances are tested at ``after_pack`` only.)"""
    w = World()
    W, msgs, ids = warm_writer(w)
    seen = {}

    def paused(**info):
        W.hooks.clear()
        # the pack in flight: the one written (a merging save writes its tier pack instead of its
        # own, docs/format.md §18), the record's newest segment
        m = info.get("manifest")
        pid = seen.setdefault("pack", info.get("pack_id") or (m.segment_list()[-1].pack if m.segment_list()
                                                             else m.state[1]))
        pid = pid if isinstance(pid, bytes) else bytes.fromhex(pid)
        cands = []
        w.gc(hooks={"before_sweep": lambda **kw: cands.append(kw["candidates"])})
        # GC1: unreferenced but younger than grace/2, so at most a candidate ...
        w.clock.advance(advance * G)
        w.gc()
        if store_capabilities(w.store).atomic_batch:
            # a SQLite file writes the pack with its manifest at one commit: it is never in flight
            assert _pack_key(pid) not in w.packs()
        else:
            assert _pack_key(pid) in w.packs()  # ... but is not deleted

    W.hooks[hook] = paused
    msgs = msgs + [msg("a", 9)]
    w.save(W, "r", msgs)
    w.check()
    w.clock.advance(1.5 * G)
    w.gc()                                 # GC after the grace period: the pack is referenced now
    w.check()


@pytest.mark.usefixtures("format1_writes")
def test_candidate_referenced_again_is_not_deleted_by_the_next_gc():
    """Two GCs: GC1 runs while a save's pack is in flight (GC1 must not make it a deletion candidate
    yet: it is younger than grace/2); the writer publishes; GC2, after the grace period, must not
    delete it. The same writer then saves on top of it (dedup against that data) and GC3 must keep
    that too."""
    w = World()
    W, msgs, ids = warm_writer(w)
    gc1, cands = [], []
    W.hooks["after_pack"] = lambda **info: (
        W.hooks.clear(), gc1.append(info["pack_id"]),
        w.gc(hooks={"before_sweep": lambda **kw: cands.extend(kw["candidates"])}))
    msgs = msgs + [msg("a", 5)]
    w.save(W, "r", msgs)
    pid = gc1[0]
    assert pid.hex() not in cands
    w.clock.advance(1.5 * G)
    w.gc()
    # still there, or (repacked by GC2 as a small pack) forwarded to where its entries live now
    assert _pack_key(pid) in w.packs() or pid in w.forwarded()
    w.check()
    msgs = msgs + [msg("a", 6)]
    w.save(W, "r", msgs)
    w.clock.advance(1.5 * G)
    w.gc()
    w.check()


def test_in_flight_pack_of_a_writer_stalled_longer_than_grace():
    """BUG: a writer that stalls more than the grace period after writing its pack publishes a
    manifest whose pack GC has deleted.

    GC1 records the unreferenced (in-flight) pack as a candidate; GC2, a grace period later, deletes
    it (candidate matured, pack older than grace). The writer then re-checks: it only compares the
    run's head with the one it knows (unchanged), and publishes. The re-check, which exists exactly
    for writers paused longer than grace/2, does not protect the writer's own new pack (it should
    re-write or re-confirm the pack when more than grace/2 passed since the pack was written)."""
    w = World()
    W, msgs, ids = warm_writer(w)
    M = w.mgr()

    def stall(**info):
        W.hooks.clear()
        w.clock.advance(0.6 * G)
        M.gc()
        w.clock.advance(1.1 * G)
        M.gc()

    W.hooks["after_pack"] = stall
    msgs = msgs + [msg("a", 9)]
    try:
        w.save(W, "r", msgs)
    except ConflictError:
        pass  # refusing to publish would be fine too
    w.check()


def test_candidate_from_in_flight_time_must_not_age_for_a_later_reference():
    """BUG: a pack's candidate record, written while the pack was in flight, keeps ageing after the
    pack became referenced, so a later writer that (correctly) confirmed its parent after that GC
    can still lose the data.

    T1: GC1 sees W1's pack X written but not published: X is recorded as a candidate.
    W1 publishes N (references X), then branches so N is no longer the head.
    T1 + 0.6 G: W2 reads N and branches from it (``parent_id=N``), deduping against X.
    Another manager deletes N; at T1 + G + 1 GC2 finds X unreferenced, its candidate record (from
    T1) matured: X is deleted. W2 publishes 0.4 G + 1 < G/2 after confirming its parent: no
    re-check is due, and its checkpoint references a deleted pack. §21's argument ("any GC that
    first found the parent's data unreferenced did so after t") does not hold: GC1 found it before.
    A GC that sees a candidate referenced again must drop it from the candidates (and a candidate
    must only be deleted if it stayed unreferenced for the whole grace period)."""
    w = World()
    W1, W2, M = w.mgr(), w.mgr(), w.mgr()
    A, X = msg("a", 0), msg("x", 1, size=400)
    c0 = w.save(W1, "r", [A])
    W1.hooks["after_pack"] = lambda **info: (W1.hooks.clear(), M.gc())
    n = w.save(W1, "r", [A, X])
    w.save(W1, "r", [A, msg("b", 2)], parent_id=c0)
    w.clock.advance(0.6 * G)

    def prune_and_collect(**info):
        W2.hooks.clear()
        M.delete("r", n)
        w.gone("r", n)
        w.clock.advance(0.4 * G + 1)
        M.gc()

    W2.hooks["after_prepare"] = prune_and_collect
    try:
        w.save(W2, "r", [A, X, msg("c", 3)], parent_id=n)
    except ConflictError:
        pass
    w.check()


# ------------------------------------------------------------------------------------------------
# explicit parents (branching) and stale writers


def test_branching_writer_whose_parent_is_pruned_and_collected():
    """BUG: ``save(parent_id=X)`` with X not the head publishes a dangling reference if X is pruned
    and collected while the save is in flight.

    The writer's GC re-check (snapstore/manager/save.py, ``save_once``) re-reads the run's *head* and compares its
    sequence number; but the parent is X, not the head. Deleting a non-head checkpoint publishes no
    log record, so the head is unchanged and the re-check passes although X (and, two GCs later,
    X's unique data) is gone. The re-check must confirm the explicit parent itself."""
    w = World()
    W, M = w.mgr(), w.mgr()
    A, B = msg("a", 0), msg("b", 1, size=400)
    c1 = w.save(W, "r", [A])
    c2 = w.save(W, "r", [A, B])
    w.save(W, "r", [A, msg("c", 2)], parent_id=c1)  # c2 is live but no longer the head

    def prune_and_collect(**info):
        W.hooks.clear()
        M.delete("r", c2)
        w.gone("r", c2)
        M.gc()
        w.clock.advance(G + 1)
        M.gc()

    W.hooks["after_prepare"] = prune_and_collect
    try:
        w.save(W, "r", [A, B, msg("d", 3)], parent_id=c2)
    except ConflictError:
        pass  # the correct outcome
    w.check()


def test_stale_writer_after_gc_removed_tombstone_and_run_was_recreated():
    """BUG (data loss): the re-check compares only sequence numbers, so it is fooled when the run
    was deleted, GC removed the tombstone (allowed once it is older than grace) and a new run with
    the same id reached the same sequence number.

    The writer (paused > 2 grace before its re-check) publishes at the next position on top of the
    *new* run, with references to the old run's data that GC has deleted. The re-check should
    compare the head's identity (write id / checkpoint id), not only its position."""
    w = World()
    W, msgs, ids = warm_writer(w, n=2)

    def delete_collect_recreate(**info):
        W.hooks.clear()
        M = w.mgr()
        M.delete("r")
        w.gone("r")
        w.clock.advance(G + 1)
        M.gc()            # the tombstone is older than grace: removed; old packs become candidates
        w.clock.advance(G + 1)
        M.gc()            # old packs deleted
        N = w.mgr()
        w.save(N, "r", [msg("n", 0)])
        w.save(N, "r", [msg("n", 0), msg("n", 1)])  # the new run is at the same position

    W.hooks["after_prepare"] = delete_collect_recreate
    try:
        w.save(W, "r", msgs + [msg("a", 9)])
    except ConflictError:
        pass  # the correct outcome
    w.check()


@pytest.mark.parametrize("how", ["rollback", "delete-run"])
def test_stale_writer_conflicts_after_gc_removed_the_log_record_it_would_collide_with(how):
    """BUG: GC frees sequence numbers, so a stale writer's save succeeds instead of conflicting.

    §20: "Sequence numbers are never reused: rollback and deletion publish new records, so a stale
    writer's create-only write collides with them." GC deletes a rollback record (or a tombstone)
    as soon as it is not the head and hides nothing any more, with no grace period. Here another
    manager rolls back (or deletes the run) and saves; GC runs; the stale writer (within grace/2 of
    its last confirmation, so no re-check) then publishes at the freed position: its save returns
    successfully although the run moved on twice, and its checkpoint is not the head (``latest``
    returns the other writer's). With ``delete-run`` a checkpoint of the deleted run is revived in
    the middle of the new run's history."""
    w = World()
    W, msgs, ids = warm_writer(w, n=2)
    M = w.mgr()
    if how == "rollback":
        M.rollback("r", ids[0])
        w.gone("r", ids[1])
        w.save(M, "r", msgs[:1] + [msg("m", 1)])
    else:
        M.delete("r")
        w.gone("r")
        w.save(M, "r", [msg("m", 0)])
    w.gc()
    with pytest.raises(ConflictError):
        cid = W.save("r", msgs + [msg("a", 9)])
        w.expect[("r", cid)] = msgs + [msg("a", 9)]
    w.check()


@pytest.mark.parametrize("advance", [0.0, 0.75, 3.0])
def test_run_deleted_by_another_manager_while_a_stale_writer_holds_it(advance):
    """Another manager deletes the run the writer holds; GC runs (removing the tombstone once it
    is older than grace). The stale writer gets ConflictError (collision with the tombstone, or its
    re-check finds the run gone); after ``latest()`` it starts a new run with the same id."""
    w = World()
    W, msgs, ids = warm_writer(w)
    M = w.mgr()
    M.delete("r")
    w.gone("r")
    w.gc()
    # void records (the run's young records, docs/format.md §15) wait FREE_AFTER as well
    w.clock.advance(advance * G + (FREE_AFTER if advance > 2 else 0))
    w.gc()
    if advance > 2:
        assert not [k for k in raw(w.store) if k.startswith("runs/")]  # tombstone collected too
    with pytest.raises(ConflictError):
        W.save("r", msgs + [msg("a", 9)])
    w.check()
    assert W.latest("r") is None
    w.save(W, "r", [msg("n", 0)])
    w.save(W, "r", [msg("n", 0), msg("n", 1)])
    w.clock.advance(1.5 * G)
    w.gc()
    w.check()
    assert [s.seq for s in W.list("r")][-1] >= 0


# ------------------------------------------------------------------------------------------------
# 5. rollback + GC + fork sharing data


@pytest.mark.parametrize("grace", [0.0, G])
def test_rollback_gc_fork_share_data(grace):
    """Data shared by a fork and a rolled-back branch stays while anything references it, and goes
    once nothing does."""
    w = World(grace=grace)
    W, msgs, ids = warm_writer(w, n=4, tag="a")
    F = w.mgr()
    fk = F.fork("r", ids[2], "f")
    w.expect[("f", fk.id)] = copy.deepcopy(msgs[:3])
    W.rollback("r", ids[1])
    w.gone("r", ids[2])
    w.gone("r", ids[3])
    for _ in range(2):
        w.clock.advance(1.5 * G)
        w.gc()
    w.check()
    # both sides continue
    w.save(W, "r", msgs[:2] + [msg("r", 2)])
    fm = fk.messages + [msg("f", 3)]
    w.save(F, "f", fm)
    for _ in range(2):
        w.clock.advance(1.5 * G)
        w.gc()
    w.check()
    size_before = sum(len(v) for v in raw(w.store).values())
    F.delete("f")
    w.gone("f")
    for _ in range(3):
        w.clock.advance(1.5 * G)
        w.gc()
    w.check()
    assert sum(len(v) for v in raw(w.store).values()) < size_before
    W.delete("r")
    w.gone("r")
    for _ in range(3):
        w.clock.advance(max(1.5 * G, FREE_AFTER))  # void records wait FREE_AFTER (§15)
        w.gc()
    # left: the config and the source run's fork pin (an empty object that stays, §10)
    assert sorted(raw(w.store)) == ["config", f"runs/{W.repo.run_key('r')}/f/forked"]
    assert raw(w.store)[f"runs/{W.repo.run_key('r')}/f/forked"] == b""


@pytest.mark.parametrize("phase", GC_PHASES)
def test_fork_and_rollback_during_gc(phase):
    """Inside a GC phase, another manager forks a checkpoint and rolls the source run back past it;
    the fork's manifest is newer than GC's listing. Nothing the fork needs may be deleted, by this
    GC or the ones after the grace period."""
    w = World()
    W, msgs, ids = warm_writer(w, n=4)
    w.clock.advance(2 * G)  # every pack is older than grace
    M = w.mgr()

    def act(**info):
        cp = M.fork("r", ids[2], "f")
        w.expect[("f", cp.id)] = copy.deepcopy(msgs[:3])
        M.rollback("r", ids[1])
        w.gone("r", ids[2])
        w.gone("r", ids[3])

    w.gc(hooks={phase: act})
    w.check()
    for _ in range(2):
        w.clock.advance(1.5 * G)
        w.gc()
        w.check()


def test_fork_racing_with_prune_leaves_gc_stuck():
    """BUG: a fork that lands after GC listed the repository, from a checkpoint that is pruned
    meanwhile, makes every later GC fail, and verify report an error.

    GC1 does not see the fork and sees its source (the run's first checkpoint) deleted: the source's
    state entry is dead, but its pack is still partly live (the first message), so GC1 repacks it
    without the state entry and retires it. The fork needs that state entry: GC2 finds it in none of
    the forward packs and stops ("live entry ... of retired pack ... not found; GC stopped"), and so
    does every GC after it; ``verify`` reports ``missing-entry``. (The data is still readable while
    the retired pack exists.) GC should keep (un-retire) a retired pack that a live reference still
    needs instead of failing."""
    w = World()
    W, msgs, ids = warm_writer(w, n=4)
    w.clock.advance(2 * G)
    M = w.mgr()

    def act(**info):
        cp = M.fork("r", ids[0], "f")
        w.expect[("f", cp.id)] = copy.deepcopy(msgs[:1])
        M.delete("r", ids[0])
        w.gone("r", ids[0])

    w.gc(hooks={"after_list": act})
    w.clock.advance(1.5 * G)
    stuck = None
    try:
        w.gc()
    except ObjectNotFound as e:  # "live entry ... of retired pack ... not found; GC stopped"
        stuck = e
    w.check()
    assert stuck is None, str(stuck)


# ------------------------------------------------------------------------------------------------
# 5b. forks as references: the fork lists the source's segments; the source's writer keeps merging


SOURCE_STEPS = ["after_prepare", "after_pack", "before_publish", "before_merged_delete"]


@pytest.mark.parametrize("how", ["prune", "rollback", "delete-run"])
@pytest.mark.parametrize("step", SOURCE_STEPS)
def test_fork_inside_a_source_save_then_source_removed_and_collected(step, how):
    """Another manager forks the source run's head while the source's writer is inside a save that
    merges segments (at each step, including between its publish and the deletion of the packs it
    merged); the writer keeps saving (more merges), then the source is pruned, rolled back or
    deleted, and GC runs until everything unreachable is gone. The fork reads exactly throughout."""
    w = World()
    W, msgs, ids = warm_writer(w, n=15)  # 15 saves: the 16th completes a tier (fanout 4)
    M = w.mgr()
    forks = []

    def act(**info):
        W.hooks.clear()
        cp = M.fork("r", M.latest("r").id, "f")
        forks.append(cp)
        w.expect[("f", cp.id)] = copy.deepcopy(cp.messages)

    W.hooks[step] = act
    msgs = msgs + [msg("a", 15)]
    ids.append(w.save(W, "r", msgs))
    assert forks, "the save merged nothing: the hook never ran"
    for i in range(16, 40):  # more merges on the pinned source, cascading into level-2 tiers
        msgs = msgs + [msg("a", i)]
        ids.append(w.save(W, "r", msgs))
    w.check()
    if how == "prune":
        W.prune(keep_last=1, run_id="r")
        for c in ids[:-1]:
            w.gone("r", c)
    elif how == "rollback":
        W.rollback("r", ids[0])
        for c in ids[1:]:
            w.gone("r", c)
    else:
        W.delete("r")
        w.gone("r")
    for _ in range(3):
        w.clock.advance(max(1.5 * G, FREE_AFTER))
        w.gc()
        w.check()
    # the fork continues on its own, and a fork of the fork too
    F = w.mgr()
    fm = F.latest("f").messages + [msg("f", 1)]
    w.save(F, "f", fm)
    ff = F.fork("f", F.latest("f").id, "ff")
    w.expect[("ff", ff.id)] = copy.deepcopy(fm)
    F.delete("f")
    w.gone("f")
    for _ in range(3):
        w.clock.advance(max(1.5 * G, FREE_AFTER))
        w.gc()
    w.check()


def test_unpinned_source_writer_would_break_the_fork(monkeypatch):
    """The pin is what keeps a fork readable: a source writer that deletes the packs it merges
    whatever the pin says (as a writer of an earlier release does) leaves the fork listing packs
    that are gone, and the fork's restore fails (verify reports it)."""
    from snapstore.repo import pins
    from snapstore.repo.log import onecommit
    monkeypatch.setattr(pins, "may_delete_merged", lambda store, rk, known: (True, False))
    publish = onecommit.publish_with_data  # at one commit (SQLite): the batch's pin check left out
    monkeypatch.setattr(onecommit, "publish_with_data", lambda *a, **k: publish(*a, **{**k, "deletes_unless": None}))
    w = World()
    W, msgs, ids = warm_writer(w, n=15)
    cp = w.mgr().fork("r", ids[-1], "f")
    for i in range(15, 40):
        msgs = msgs + [msg("a", i)]
        W.save("r", msgs)
    errors = CheckpointManager(w.store).verify(read_data=True).errors
    assert errors and all("missing-pack" in str(e) and "run 'f'" in str(e) for e in errors)
    with pytest.raises(ObjectNotFound):
        CheckpointManager(w.store).latest("f")  # a new manager (verify's cached packs would serve it)
    assert cp.messages == msgs[:15]


@pytest.mark.parametrize("phase", GC_PHASES)
def test_fork_inside_gc_then_source_merges_and_is_deleted(phase):
    """Inside each GC phase another manager forks the source's head; the source's writer then saves
    (merging segments the fork lists) and deletes its run. That GC and the later ones keep what
    the fork needs and nothing else of the source."""
    w = World()
    W, msgs, ids = warm_writer(w, n=14)
    w.clock.advance(2 * G)  # every pack is older than the grace period
    M = w.mgr()

    def act(**info):
        cp = M.fork("r", ids[-1], "f")
        w.expect[("f", cp.id)] = copy.deepcopy(msgs)

    w.gc(hooks={phase: act})
    w.check()
    more = list(msgs)
    for i in range(14, 30):
        more = more + [msg("a", i)]
        W.save("r", more)
    W.delete("r")
    w.gone("r")
    for _ in range(3):
        w.clock.advance(max(1.5 * G, FREE_AFTER))
        w.gc()
        w.check()


# ------------------------------------------------------------------------------------------------
# 6. the GC lock


def test_second_concurrent_gc_gets_conflict_error():
    w = World()
    warm_writer(w)
    errors = []

    def second(**info):
        try:
            w.gc()
        except ConflictError as e:
            errors.append(e)

    for phase in GC_PHASES:
        w.gc(hooks={phase: second})
        assert len(errors) == GC_PHASES.index(phase) + 1, phase
        assert LOCK_KEY not in raw(w.store)   # released at the end of GC1
    # dry runs take no lock and are allowed concurrently
    w.gc(hooks={"after_mark": lambda **kw: w.gc(dry_run=True)})
    w.check()


def test_stale_gc_lock_is_taken_over():
    w = World()
    warm_writer(w)
    w.store.put(LOCK_KEY, b'{"host": "crashed", "pid": 1}')
    with pytest.raises(ConflictError):
        w.gc()
    w.clock.advance(1000)
    with pytest.raises(ConflictError):
        w.gc(lock_timeout=1800)
    w.clock.advance(1000)                # the lock is now older than lock_timeout
    w.gc(lock_timeout=1800)
    assert LOCK_KEY not in raw(w.store)
    w.check()


# ------------------------------------------------------------------------------------------------
# GC reads a run's manifests while its writer saves and prunes


class _FirstManifestGet:
    """Runs ``action`` inside the first GET of a manifest key (then never again). The GC using it
    reads with one thread, so no other manifest is read before the action has finished."""

    def __init__(self, store: MemoryStore, prefix: str, action):
        self.store, self.prefix, self.action = store, prefix, action
        self.fired = False
        self.real_get = store.get
        store.get = self.get

    def get(self, key, *a, **kw):
        if key.startswith(self.prefix) and not self.fired:
            self.fired = True
            self.action()
        return self.real_get(key, *a, **kw)

    def remove(self):
        self.store.get = self.real_get


@pytest.mark.usefixtures("format1_writes")
def test_run_pruned_and_extended_while_gc_reads_its_manifests():
    """GC lists the run log, then the run's writer saves a new checkpoint and prunes every older one,
    then GC reads the listed manifests: they are gone, and the new one was not listed, so the run
    looks empty to this GC. A pack shared with another live run is then mostly dead and is repacked
    without the run's entries. The new checkpoint (an in-flight write from GC's view) still reaches
    those entries through the forwarding records of the packs it names; repacking must not point
    those records away from the retired pack that holds them (only its deletion, after a grace
    period and a new mark, may)."""
    w = World(G)
    A, a_msgs, _ = warm_writer(w, "a", n=6, tag="a")
    _, b_msgs, _ = warm_writer(w, "b", n=6, tag="b")
    w.clock.advance(G)
    w.gc()  # the per-save packs of both runs are merged into one pack, with forwarding records
    for _ in range(2):  # the per-save packs become candidates, then are deleted
        w.clock.advance(G + 1)
        w.gc()
    assert len(w.packs()) == 1
    w.clock.advance(G)

    def writer_moves_on():
        a_new = a_msgs + [msg("a", 99)]
        w.save(A, "a", a_new)
        for s in A.prune(keep_last=1, run_id="a"):
            w.gone("a", s.id)
        w.clock.advance(1)
    trigger = _FirstManifestGet(w.store, "runs/", writer_moves_on)
    repo = CheckpointManager(w.store).repo
    repo.cache.max_workers = 1  # one reader thread: the first manifest GET runs the writer to completion
    gc(repo, grace_period=G)
    trigger.remove()
    assert trigger.fired
    w.check()
    for _ in range(4):  # later GCs see the new checkpoint; retired packs are deleted on schedule
        w.clock.advance(G + 1)
        w.gc()
        w.check()
