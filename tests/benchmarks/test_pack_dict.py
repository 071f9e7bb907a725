"""benchmarks/pack_dict.py: a save's array compressed against the run's earlier arrays is counted
with the dictionary, and the arrays are the appended messages' exact JSON."""

from __future__ import annotations

import json
import os

from benchmarks import pack_dict


def test_arrays_are_the_appended_messages_and_rewrites_are_skipped():
    a, b, c = {"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "tool", "content": "z"}
    arrays = pack_dict.arrays_of([[a], [a, b, c], [c]])  # the third rewrites the list: skipped
    assert [json.loads(x) for x in arrays] == [[a], [b, c]]


def test_a_repeated_array_costs_less_with_the_dictionary():
    text = os.urandom(3000).hex().encode()  # incompressible alone
    runs = [[b"[" + text + b"]", b"[" + text + b"]"]]
    r = pack_dict.measure(runs, [16])
    assert r["saves"] == 2 and r["raw"] == 2 * (len(text) + 2)
    # the second array is the first again: against a dictionary of it, a few dozen bytes
    assert r["dict 16 KiB"] < r["alone 3"] * 0.6
    assert r["alone 3"] > 0.9 * len(text)  # hex of random bytes: about half each, both counted


def test_main_prints_a_row_per_workload(capsys):
    assert pack_dict.main(["--saves", "30", "--no-shared", "--dict-kib", "4"]) == 0
    out = capsys.readouterr().out
    assert "latency.py, 30 saves" in out and "dict 4 KiB" in out
