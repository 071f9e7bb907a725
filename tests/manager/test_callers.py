"""One conflict contract for every caller (issue 9): threads and asyncio tasks sharing one
CheckpointManager get the ConflictError separate managers would; ``expect_head=`` is an explicit
compare-and-swap; rollback, delete and prune that move the head are conditional on the caller's
view; what the check costs in requests. (Grace period 0 and closing: tests/manager/test_grace_and_close.py.)

Races run on the local store (atomic create-only writes) and on S3 through moto's HTTP server.
Inside one manager the saves of one run are serialised by the manager, so moto's non-atomic
conditional writes do not matter there; where two managers race on S3, their create-only PUTs are
serialised in the client (what real S3 guarantees and moto does not, see DESIGN.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from tests.helpers.repo_checks import history_ids as _history
from tests.helpers.s3_fixtures import repo_clients, serialise_creates

from snapstore import EMPTY_RUN, CheckpointManager
from snapstore.manager import callers
from snapstore.errors import CheckpointNotFound, ConflictError, InvalidInputError
from snapstore.stores import LocalStore

RUN = "shared"
KINDS = ["local", "s3-http"]


def msg(who, i):
    return {"role": "assistant", "content": f"{who} {i}"}


@pytest.fixture
def repo(request, tmp_path, store_factory):
    """``repo(kind)`` -> a new store on one fresh repository of that kind (:func:`s3_fixtures.repo_clients`)."""
    return repo_clients(request, tmp_path, store_factory)


def _in_context(fn, *args, **kwargs):
    """Run ``fn`` in a copy of the current context (a separate caller, like a new thread)."""
    return contextvars.Context().run(fn, *args, **kwargs)


# --- two callers on one manager --------------------------------------------------------------

def test_two_latest_then_two_saves_second_conflicts(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    c0 = mgr.save(RUN, [msg("u", 0)])
    ctx_a, ctx_b = contextvars.Context(), contextvars.Context()
    a = ctx_a.run(mgr.latest, RUN)
    b = ctx_b.run(mgr.latest, RUN)
    assert a.id == b.id == c0
    a1 = ctx_a.run(mgr.save, RUN, a.messages + [msg("a", 1)])
    with pytest.raises(ConflictError):
        ctx_b.run(mgr.save, RUN, b.messages + [msg("b", 1)])
    head = CheckpointManager(LocalStore(tmp_path / "repo")).latest(RUN)
    assert head.id == a1 and head.messages == [msg("u", 0), msg("a", 1)]
    # B reads again and continues; A is now the stale one
    b = ctx_b.run(mgr.latest, RUN)
    b2 = ctx_b.run(mgr.save, RUN, b.messages + [msg("b", 2)])
    with pytest.raises(ConflictError):
        ctx_a.run(mgr.save, RUN, a.messages + [msg("a", 1), msg("a", 2)])
    assert _history(CheckpointManager(LocalStore(tmp_path / "repo")), RUN) == [b2, a1, c0]


def test_two_threads_latest_then_save_second_conflicts(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    mgr.save(RUN, [msg("u", 0)])
    read = threading.Barrier(2)
    results = {}

    def work(name):
        cp = mgr.latest(RUN)
        read.wait()
        if name == "b":
            done_a.wait()
        try:
            results[name] = mgr.save(RUN, cp.messages + [msg(name, 1)])
        except ConflictError as e:
            results[name] = e
        if name == "a":
            done_a.set()
    done_a = threading.Event()
    ts = [threading.Thread(target=work, args=(n,)) for n in "ab"]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert isinstance(results["a"], str) and isinstance(results["b"], ConflictError)
    assert mgr.latest(RUN).messages == [msg("u", 0), msg("a", 1)]


def test_same_caller_continues_its_own_saves(tmp_path):
    """One caller saving again and again is not a conflict (its view follows its own saves)."""
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    msgs = []
    for i in range(5):
        msgs = msgs + [msg("me", i)]
        mgr.save(RUN, msgs)
    assert mgr.latest(RUN).messages == msgs


def test_rollback_after_another_caller_appended_conflicts(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    c1 = mgr.save(RUN, [msg("u", 1)])
    c2 = mgr.save(RUN, [msg("u", 1), msg("u", 2)])
    ctx = contextvars.Context()
    assert ctx.run(mgr.latest, RUN).id == c2
    c3 = mgr.save(RUN, [msg("u", 1), msg("u", 2), msg("u", 3)])  # another caller appends
    with pytest.raises(ConflictError):
        ctx.run(mgr.rollback, RUN, c1)
    reader = CheckpointManager(LocalStore(tmp_path / "repo"))
    assert reader.latest(RUN).id == c3 and [s.id for s in reader.list(RUN)] == [c3, c2, c1]
    # with its view refreshed the rollback works
    assert ctx.run(mgr.latest, RUN).id == c3
    back = ctx.run(mgr.rollback, RUN, c1)
    assert back.id == c1 and back.messages == [msg("u", 1)]
    assert [s.id for s in CheckpointManager(LocalStore(tmp_path / "repo")).list(RUN)] == [c1]
    # ... and the caller continues from the rolled-back head; the other caller is now stale
    c4 = ctx.run(mgr.save, RUN, back.messages + [msg("r", 4)])
    with pytest.raises(ConflictError):
        mgr.save(RUN, [msg("u", 1), msg("u", 2), msg("u", 3), msg("u", 4)])
    assert _history(CheckpointManager(LocalStore(tmp_path / "repo")), RUN) == [c4, c1]


def test_delete_and_prune_moving_the_head_are_conditional(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    c1 = mgr.save(RUN, [msg("u", 1)])
    c2 = mgr.save(RUN, [msg("u", 1), msg("u", 2)])
    ctx = contextvars.Context()
    ctx.run(mgr.latest, RUN)
    c3 = mgr.save(RUN, [msg("u", 1), msg("u", 2), msg("u", 3)])
    for op in (lambda: mgr.delete(RUN), lambda: mgr.delete(RUN, c3), lambda: mgr.prune(older_than=0, run_id=RUN)):
        with pytest.raises(ConflictError):
            ctx.run(op)
    assert [s.id for s in mgr.list(RUN)] == [c3, c2, c1]
    # deleting an older checkpoint does not move the head: no view needed
    ctx.run(mgr.delete, RUN, c1)
    assert [s.id for s in mgr.list(RUN)] == [c3, c2]
    # a fresh view: the head delete works and the caller's view follows it
    ctx.run(mgr.latest, RUN)
    ctx.run(mgr.delete, RUN, c3)
    assert mgr.latest(RUN).id == c2
    c4 = ctx.run(mgr.save, RUN, [msg("u", 1), msg("u", 2), msg("d", 4)])
    assert mgr.latest(RUN).id == c4
    ctx.run(mgr.delete, RUN)
    assert mgr.latest(RUN) is None


def test_fresh_caller_continues_the_head(tmp_path):
    """A context that never read the run saves on top of the head, as a new manager would."""
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    c1 = mgr.save(RUN, [msg("u", 1)])
    c2 = _in_context(mgr.save, RUN, [msg("u", 1), msg("f", 2)])
    cp = mgr.get(RUN, c2)
    assert cp.parent_id == c1
    # ... also when another manager moved the run after this manager's cached head
    other = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    other.latest(RUN)
    c3 = other.save(RUN, [msg("u", 1), msg("f", 2), msg("o", 3)])
    c4 = _in_context(mgr.save, RUN, [msg("u", 1), msg("f", 2), msg("o", 3), msg("f", 4)])
    assert mgr.get(RUN, c4).parent_id == c3


def test_asyncio_child_tasks_are_separate_callers(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    mgr.save(RUN, [msg("u", 0)])

    async def main():
        cp = mgr.latest(RUN)  # the parent task read the head; its children inherit that view

        async def child(name):
            await asyncio.sleep(0)
            try:
                return mgr.save(RUN, cp.messages + [msg(name, 1)])
            except ConflictError as e:
                return e
        return await asyncio.gather(child("a"), child("b"))
    a, b = asyncio.run(main())
    assert isinstance(a, str) and isinstance(b, ConflictError)


def test_asyncio_to_thread_keeps_the_tasks_view(tmp_path):
    """A task calling the manager through asyncio.to_thread is one caller (after own_view())."""
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    mgr.save(RUN, [msg("u", 0)])
    gate = asyncio.Event

    async def main():
        read = gate()
        count = [0]

        async def task(name):
            callers.own_view()
            cp = await asyncio.to_thread(mgr.latest, RUN)
            count[0] += 1
            if count[0] == 2:
                read.set()
            await read.wait()
            try:
                return await asyncio.to_thread(mgr.save, RUN, cp.messages + [msg(name, 1)])
            except ConflictError as e:
                return e
        return await asyncio.gather(task("a"), task("b"))
    res = asyncio.run(main())
    assert sorted(type(r).__name__ for r in res) == ["ConflictError", "str"]


# --- races: N threads / N asyncio tasks on one manager ----------------------------------------

def _race_threads(mgr, n, rounds, *, use_expect, rollback_every=0):
    """n threads, each ``rounds`` times: read the head, then save one more message (or, every
    ``rollback_every``-th round of odd threads, roll back to the head's parent). Returns
    (saves: {id: (parent id, msg)}, rollbacks: [(head seen, target)], conflicts)."""
    saves, rollbacks, errors = {}, [], []
    conflicts = [0]
    lock = threading.Lock()
    start = threading.Barrier(n)

    def work(t):
        try:
            start.wait()
            for r in range(rounds):
                cp = mgr.latest(RUN)
                kw = {"expect_head": cp.id} if use_expect else {}
                try:
                    if rollback_every and t % 2 and r % rollback_every == 0 and cp.parent_id:
                        mgr.rollback(RUN, cp.parent_id, **kw)
                        with lock:
                            rollbacks.append((cp.id, cp.parent_id))
                    else:
                        m = msg(f"t{t}", r)
                        cid = mgr.save(RUN, cp.messages + [m], **kw)
                        with lock:
                            saves[cid] = (cp.id, m)
                except ConflictError:
                    with lock:
                        conflicts[0] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(120)
    assert not errors, errors
    return saves, rollbacks, conflicts[0]


def _check_no_lost_update(reader, c0, saves, rollbacks):
    """Every save that returned an id is in the final head's history, unless a rollback made by a
    caller that had seen it (its view's history held it) removed it."""
    parent = {c: p for c, (p, _) in saves.items()}

    def chain(c):
        out = []
        while c is not None:
            out.append(c)
            c = parent.get(c)
        return out
    final = _history(reader, RUN)
    assert final[-1] == c0
    assert final[:-1] == [c for c in chain(final[0]) if c != c0]  # the head's history = its callers' chain
    head = reader.latest(RUN)
    assert head.messages[1:] == [saves[c][1] for c in reversed(final[:-1])]
    lost = [c for c in saves if c not in set(final)]
    for c in lost:
        assert any(c in chain(seen) and c not in chain(target) for seen, target in rollbacks), \
            f"save {c} returned an id but is not in the head's history and no rollback by a caller that saw it removed it"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("use_expect", [False, True], ids=["view", "expect_head"])
def test_threads_race_read_then_save(repo, kind, use_expect):
    mgr = CheckpointManager(repo(kind))
    c0 = mgr.save(RUN, [msg("u", 0)])
    n, rounds = (8, 6) if kind == "local" else (4, 3)
    saves, rollbacks, conflicts = _race_threads(mgr, n, rounds, use_expect=use_expect)
    assert len(saves) + conflicts == n * rounds and saves
    _check_no_lost_update(CheckpointManager(repo(kind)), c0, saves, rollbacks)
    assert len(_history(CheckpointManager(repo(kind)), RUN)) == len(saves) + 1  # nothing lost, nothing hidden


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("use_expect", [False, True], ids=["view", "expect_head"])
def test_threads_race_read_then_save_or_rollback(repo, kind, use_expect):
    mgr = CheckpointManager(repo(kind))
    c0 = mgr.save(RUN, [msg("u", 0)])
    n, rounds = (8, 6) if kind == "local" else (4, 3)
    saves, rollbacks, conflicts = _race_threads(mgr, n, rounds, use_expect=use_expect, rollback_every=2)
    assert len(saves) + len(rollbacks) + conflicts == n * rounds
    _check_no_lost_update(CheckpointManager(repo(kind)), c0, saves, rollbacks)


def test_threads_in_lockstep_one_save_per_round(tmp_path):
    """Deterministic: every thread reads the same head, then all save: exactly one wins a round."""
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    mgr.save(RUN, [msg("u", 0)])
    n, rounds = 6, 4
    read, saved = threading.Barrier(n), threading.Barrier(n)
    wins = [0] * rounds
    lock = threading.Lock()
    errors = []

    def work(t):
        try:
            for r in range(rounds):
                cp = mgr.latest(RUN)
                read.wait()
                try:
                    mgr.save(RUN, cp.messages + [msg(f"t{t}", r)])
                    with lock:
                        wins[r] += 1
                except ConflictError:
                    pass
                saved.wait()
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(60)
    assert not errors and wins == [1] * rounds
    assert len(mgr.latest(RUN).messages) == rounds + 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["direct", "to_thread", "expect_head"])
def test_asyncio_tasks_race_read_then_save_or_rollback(repo, kind, mode):
    mgr = CheckpointManager(repo(kind))
    c0 = mgr.save(RUN, [msg("u", 0)])
    n, rounds = (8, 4) if kind == "local" else (6, 3)
    saves, rollbacks = {}, []
    conflicts = [0]

    async def call(fn, *a, **k):
        if mode == "direct":
            return fn(*a, **k)
        return await asyncio.to_thread(fn, *a, **k)

    async def task(t):
        callers.own_view()
        for r in range(rounds):
            cp = await call(mgr.latest, RUN)
            await asyncio.sleep(0)  # let the other tasks read the same head
            kw = {"expect_head": cp.id} if mode == "expect_head" else {}
            try:
                if t % 2 and r % 2 == 0 and cp.parent_id:
                    await call(mgr.rollback, RUN, cp.parent_id, **kw)
                    rollbacks.append((cp.id, cp.parent_id))
                else:
                    m = msg(f"t{t}", r)
                    saves[await call(mgr.save, RUN, cp.messages + [m], **kw)] = (cp.id, m)
            except ConflictError:
                conflicts[0] += 1

    async def main():
        await asyncio.gather(*(task(t) for t in range(n)))
    asyncio.run(main())
    assert len(saves) + len(rollbacks) + conflicts[0] == n * rounds
    assert conflicts[0] > 0 or mode != "direct"  # direct calls interleave at every sleep(0)
    _check_no_lost_update(CheckpointManager(repo(kind)), c0, saves, rollbacks)


# --- expect_head -------------------------------------------------------------------------------

def test_expect_head_compare_and_swap(tmp_path):
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    with pytest.raises(ConflictError):
        mgr.save(RUN, [msg("u", 1)], expect_head="01a0000000000000aaaa-0")
    c1 = mgr.save(RUN, [msg("u", 1)], expect_head=EMPTY_RUN)
    with pytest.raises(ConflictError):
        mgr.save(RUN, [msg("u", 9)], expect_head=EMPTY_RUN)
    c2 = mgr.save(RUN, [msg("u", 1), msg("u", 2)], expect_head=c1)
    with pytest.raises(ConflictError):
        mgr.save(RUN, [msg("u", 1), msg("x", 2)], expect_head=c1)
    # expect_head overrides the caller's view: a stale view with the right expectation saves
    other = CheckpointManager(LocalStore(root, fsync=False))
    c3 = other.save(RUN, [msg("u", 1), msg("u", 2), msg("o", 3)])
    with pytest.raises(ConflictError):
        mgr.save(RUN, [msg("u", 1), msg("u", 2), msg("m", 3)])           # its view is c2
    c4 = mgr.save(RUN, [msg("u", 1), msg("u", 2), msg("o", 3), msg("m", 4)], expect_head=c3)
    assert mgr.get(RUN, c4).parent_id == c3
    # rollback and delete
    with pytest.raises(ConflictError):
        mgr.rollback(RUN, c1, expect_head=c3)
    with pytest.raises(ConflictError):
        mgr.delete(RUN, c2, expect_head=c3)     # checked even when the head does not move
    assert mgr.rollback(RUN, c2, expect_head=c4).id == c2
    with pytest.raises(ConflictError):
        mgr.delete(RUN, expect_head=c4)
    mgr.delete(RUN, c1, expect_head=c2)
    mgr.delete(RUN, expect_head=c2)
    assert mgr.latest(RUN) is None
    n1 = mgr.save(RUN, [msg("n", 1)], expect_head=EMPTY_RUN)
    assert [s.id for s in mgr.list(RUN)] == [n1]
    for bad in (3, b"x", "", ["a"]):
        with pytest.raises(InvalidInputError):
            mgr.save(RUN, [msg("n", 1)], expect_head=bad)
    with pytest.raises(CheckpointNotFound):
        mgr.rollback(RUN, c1, expect_head=n1)


def test_expect_head_without_a_view_is_the_only_check(tmp_path):
    """Callers that track heads themselves (read through another manager, or stored the id):
    without expect_head such saves would continue from the head and drop each other's messages."""
    root = tmp_path / "repo"
    writer = CheckpointManager(LocalStore(root, fsync=False))
    reader = CheckpointManager(LocalStore(root, fsync=False))
    c0 = writer.save(RUN, [msg("u", 0)])
    a = reader.latest(RUN)
    b = reader.latest(RUN)
    _in_context(writer.save, RUN, a.messages + [msg("a", 1)], expect_head=a.id)
    with pytest.raises(ConflictError):
        _in_context(writer.save, RUN, b.messages + [msg("b", 1)], expect_head=b.id)
    assert reader.latest(RUN).messages == [msg("u", 0), msg("a", 1)]
    assert _history(reader, RUN)[-1] == c0


def _pop(mgr, popped, lock):
    """Pop the last item of the run's list with a compare-and-swap; retry on ConflictError."""
    while True:
        cp = mgr.latest(RUN)
        if cp is None or not cp.messages:
            return
        try:
            mgr.save(RUN, cp.messages[:-1], expect_head=cp.id)
        except ConflictError:
            continue
        with lock:
            popped.append(cp.messages[-1]["i"])


@pytest.mark.parametrize("kind", KINDS)
def test_pop_never_returns_an_item_twice(repo, kind):
    """A pop built on expect_head, by threads sharing one manager and by threads on two managers
    (as two machines would): every item is popped exactly once."""
    first = repo(kind)
    seed = CheckpointManager(first)
    items = 40 if kind == "local" else 12
    seed.save(RUN, [{"i": i} for i in range(items)])
    second = repo(kind)
    if kind != "local":
        serialise_creates(first, second)
    managers = [CheckpointManager(first), CheckpointManager(second)]
    popped, lock = [], threading.Lock()
    ts = [threading.Thread(target=_pop, args=(managers[t % 2], popped, lock)) for t in range(6 if kind == "local" else 4)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(120)
    assert sorted(popped) == list(range(items)), popped
    assert CheckpointManager(repo(kind)).latest(RUN).messages == []


# --- requests --------------------------------------------------------------------------------------

def test_save_requests_fresh_context_vs_established(tmp_path):
    """What the conflict check costs: an established caller's save and a fresh caller's first save
    on a manager that knows the head are both 2 PUTs and nothing else; a new manager's first save
    reads the head (LIST + GET) and the head's segments first."""
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    msgs = [msg("u", 0)]
    for i in range(1, 5):  # seq 0..3 (seq 3 completes a tier and merges; 4, 5, 6 do not)
        msgs = msgs + [msg("u", i)]
        mgr.save(RUN, msgs)

    def cost(fn):
        s0 = mgr.store.stats.snapshot()
        fn()
        return {k: v for k, v in mgr.store.stats.since(s0).counts.items() if v}
    msgs = msgs + [msg("e", 6)]
    established = cost(lambda: mgr.save(RUN, msgs))
    msgs = msgs + [msg("f", 7)]
    fresh_ctx = cost(lambda: _in_context(mgr.save, RUN, msgs))
    assert established == {"PUT": 2} and fresh_ctx == {"PUT": 2}, (established, fresh_ctx)
    new = CheckpointManager(LocalStore(root, fsync=False))
    s0 = new.store.stats.snapshot()
    _in_context(new.save, RUN, msgs + [msg("n", 8)])
    d = {k: v for k, v in new.store.stats.since(s0).counts.items() if v}
    assert d["PUT"] == 2 and d["LIST"] == 1 and d["GET"] >= 2, d  # config, head manifest, segments
