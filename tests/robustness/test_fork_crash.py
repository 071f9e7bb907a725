"""Crash consistency of forks as references (docs/format.md §10): every store operation of a fork
fails in turn (crash, transient, lost reply), and so does every operation of a save on the
forked source that merges segments the fork lists (the pin check and the merged packs kept).
After each fault: verify is clean and every checkpoint saved restores exactly; re-running
completes; the source then keeps saving (more merges) and GC runs, and the fork still restores.
The harness is :func:`tests.robustness.test_crash.run_with_faults`."""

from __future__ import annotations

import json

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.stores import MemoryStore

from tests.helpers.faulty_store import FaultyStore, clone
from tests.robustness.test_crash import MODES, assert_consistent, msg, op_manager, run_with_faults


def _base(n: int = 15):
    """Run ``a`` with ``n`` saves (15: the next save completes a tier, fanout 4)."""
    store = MemoryStore()
    m = CheckpointManager(store)
    msgs, ids, expect = [], [], {}
    for i in range(n):
        msgs = msgs + [msg("a", i)]
        ids.append(m.save("a", msgs))
        expect[("a", ids[-1])] = msgs
    return store, msgs, ids, expect


def _ctx(base, expect):
    store = clone(base)
    fs = FaultyStore(store)
    return {"store": store, "faulty": fs, "mgr": CheckpointManager(fs), "expect": dict(expect)}


def _source_goes_on_and_gc(ctx, msgs, fork_messages):
    """The source saves 20 more times (merging what the fork lists), is deleted, GC collects: the
    fork still restores exactly and verify is clean."""
    m = CheckpointManager(ctx["store"])
    m.latest("a")
    for i in range(20):
        msgs = msgs + [msg("a", 100 + i)]
        m.save("a", msgs)
    m.delete("a")
    for _ in range(2):
        CheckpointManager(ctx["store"]).gc(grace_period=0)
    clean = CheckpointManager(ctx["store"])
    assert json.dumps(clean.latest("f").messages) == json.dumps(fork_messages)
    rep = clean.verify(read_data=True)
    assert not rep.errors, [str(e) for e in rep.errors]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which", ["head", "older"])
def test_fork_with_faults(mode, which):
    base, msgs, ids, expect = _base()
    at = -1 if which == "head" else 6
    want = msgs[:len(msgs) if at == -1 else at + 1]

    def build():
        return _ctx(base, expect)

    def op(ctx):
        return ctx["mgr"].fork("a", ids[at], "f")

    def rerun(ctx, error):
        m = op_manager(ctx, error)
        try:
            m.fork("a", ids[at], "f")
        except ConflictError:  # a lost reply: the fork landed (it is then complete and exact)
            assert json.dumps(CheckpointManager(ctx["store"]).latest("f").messages) == json.dumps(want)

    def post(ctx):
        clean = CheckpointManager(ctx["store"])
        assert json.dumps(clean.latest("f").messages) == json.dumps(want)
        assert_consistent(ctx["store"], ctx["expect"])
        _source_goes_on_and_gc(ctx, msgs, want)

    run_with_faults(build, op, rerun, post, mode)


@pytest.mark.parametrize("mode", MODES)
def test_merging_save_on_a_forked_source_with_faults(mode):
    """The save that merges the segments a fork lists fails at each of its store operations
    (the tier pack, the record, the pin check, the deletion it then skips)."""
    store, msgs, ids, expect = _base()
    fork = CheckpointManager(store).fork("a", ids[-1], "f")
    expect[("f", fork.id)] = fork.messages
    nxt = msgs + [msg("a", 15)]

    def build():
        ctx = _ctx(store, expect)
        ctx["mgr"].latest("a")
        ctx["maybe"] = {}
        return ctx

    def op(ctx):
        cid = ctx["mgr"].save("a", nxt)
        ctx["expect"][("a", cid)] = nxt
        return cid

    def rerun(ctx, error):
        m = op_manager(ctx, error)
        try:
            cid = m.save("a", nxt)
        except ConflictError:  # the first attempt landed and a new manager does not know it
            cid = CheckpointManager(ctx["store"]).latest("a").id
        ctx["expect"][("a", cid)] = nxt

    def post(ctx):
        assert_consistent(ctx["store"], ctx["expect"])
        _source_goes_on_and_gc(ctx, nxt, fork.messages)

    run_with_faults(build, op, rerun, post, mode)
