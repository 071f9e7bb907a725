"""GC's slim log records (maintenance/runs.py LogEntry) keep a record's ``state`` packed as bytes
and give back exactly the manifest's strings; a state that is not lowercase hex is kept as it is;
a slim log marks the same packs as the whole one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from snapstore.maintenance.runs import LogEntry


def _m(state):
    return SimpleNamespace(kind="checkpoint", seq=7, target=None, session_state_ref=None,
                           session_state_tree=None, run_id="r", state=state)


@pytest.mark.parametrize("state", [["58d4b0823b5b2a317505cca97bbb9bff", "3a941e66f15faeb4"],
                                   ["e4fdf923daec1c0462b7b68b1e412c35", "384e6e6d7d74a0e6", "b0c708c0028ebb38"],
                                   ["ABCD", "12"], ["abc"], ["ab", "", "cd"], None, []])
def test_state_round_trips(state):
    e = LogEntry(_m(state), "r")
    assert e.state == (tuple(state) if state else None)


def test_a_slim_record_holds_under_200_bytes():
    """2,000 records of distinct states, slimmed and the records dropped (as GC's read does): what
    the entries keep (traced) stays under 200 bytes each; with the state kept as the record's two
    strings in a tuple it was about 330."""
    import gc
    import os
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ms = [_m([os.urandom(16).hex(), os.urandom(8).hex()]) for _ in range(2000)]
    want = tuple(ms[5].state)
    kept = [LogEntry(m, "r") for m in ms]
    del ms
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used / len(kept) < 200, used / len(kept)
    assert kept[5].state == want
