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
