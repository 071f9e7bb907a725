"""Review of messages.a and the one-pass read from array blocks (docs/format.md §8, §11): cases
where a record said ``a`` = 1 while the arrays' first ``count`` items were not its list, or where
a run lost its read from arrays.

Real parts: a local store on a temp dir, fresh managers (cold caches) for every read.
"""

from __future__ import annotations

from test_arrays import RUN, _heads, _mgr, _msg, _reseal, passes, paths  # noqa: F401


def test_a_save_after_reading_an_emptied_head_says_the_arrays_do_not_hold_the_list(tmp_path, passes):
    """An emptied list (``save(run, [])``) leaves the arrays holding the old messages. A manager
    that read that head (latest) and then appends must not say ``a`` = 1: every read of that
    record (and of every later append) would parse the old messages and drop them on the digest."""
    mgr = _mgr(tmp_path)
    mgr.save(RUN, [_msg(0), _msg(1)], step=0)
    mgr.save(RUN, [], step=1)
    assert _heads(mgr, RUN)[-1].arrays == 0
    w = _mgr(tmp_path)
    assert w.latest(RUN).messages == []
    w.save(RUN, [_msg(100)], step=2)
    w.save(RUN, [_msg(100), _msg(101)], step=3)
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == [_msg(100), _msg(101)]
    assert passes == {"hash": 0, "parse": 0}, "a wasted parse of the old messages"
    assert [m.arrays for m in _heads(mgr, RUN)] == [1, 0, 0, 0]


def test_a_run_written_before_messages_a_and_continued_keeps_its_read_from_arrays(tmp_path, paths, passes):
    """A run whose records predate ``messages.a`` (their tag covers ``x`` alone) is read from its
    arrays (hash first). Continuing it with this version must not turn that off for good: the
    writer does not know whether the arrays hold the list, so it says nothing (``a`` absent, hash
    first), rather than ``a`` = 0 (straight to the tree on every later checkpoint of the run)."""
    mgr = _mgr(tmp_path)
    msgs = []
    for s in range(4):
        msgs = msgs + [_msg(s)]
        mgr.save(RUN, msgs, step=s)
    h = mgr.repo.hasher
    for m in _heads(mgr, RUN):
        _reseal(tmp_path, mgr, m, arrays=None, exact_tag=h.exact_tag(m.digest, m.exact))
    paths.update(tree=0, arrays=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert paths == {"tree": 0, "arrays": 1}  # as before this version
    for cold in (False, True):  # a writer that read the head, and one that did not
        w = _mgr(tmp_path)
        if not cold:
            w.latest(RUN)
        msgs = msgs + [_msg(100 + cold)]
        w.save(RUN, msgs, step=10 + cold)
        assert _heads(mgr, RUN)[-1].arrays != 0
        paths.update(tree=0, arrays=0)
        assert _mgr(tmp_path).latest(RUN).messages == msgs
        assert paths == {"tree": 0, "arrays": 1}
    assert _mgr(tmp_path).verify(read_data=True).ok
