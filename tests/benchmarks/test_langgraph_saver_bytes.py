"""benchmarks/langgraph_saver_bytes.py run small: 6 turns of the chat graph on a real SQLite file
and a real directory, the saver's bytes split by object, record and item kind beside the core
API's."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.graph")

from benchmarks import langgraph_saver_bytes as lsb  # noqa: E402


def test_chunk_kinds_are_told_from_the_items_json():
    assert lsb.chunk_kind(b'{"type": "ai", "data": {}}') == "message"
    assert lsb.chunk_kind(b'{"lgmeta": {"cp": {}}}') == "meta"
    assert lsb.chunk_kind(b'{"serde": "msgpack", "b64": ""}') == "serde"
    assert lsb.chunk_kind(b'{"lgw": ["t", "m", 1]}') == "write-marker"
    assert lsb.chunk_kind(b'{"lgs": ["s", 2]}') == "seed-marker"
    assert lsb.chunk_kind(b'[1, 2]') == "other"
    assert lsb.record_kind({"lg": "C", "md": {"source": "loop"}}) == "C-loop"
    assert lsb.record_kind({"lg": "W", "for": "x"}) == "W" and lsb.record_kind(None) == "core"


@pytest.mark.parametrize("store", ["sqlite", "dir"])
def test_breakdown_of_a_small_run_adds_up(store, capsys):
    got = lsb.main(["--turns", "6", "--store", store])
    saver, core = got["saver"], got["core"]
    for b in (saver, core):
        assert sum(b["objects"].values()) == b["total"] > 0
    # one invoke of the graph: an input checkpoint and two loop checkpoints; its two put_writes
    # are pending-writes objects folded into the next checkpoint record and deleted (layout
    # §4a): no writes record, and none left beside the newest record after the last put; the
    # input checkpoint and the one after __start__ are pending-checkpoint objects carried by
    # the node's record (§4b), except on the first turn (an empty run: three records)
    assert {k: n for k, (n, _) in saver["records"].items()} == {"C-input": 1, "C-loop": 2 + 5, "registry": 1}
    assert saver["objects"].get("writes-area", 0) == 0
    assert {k: n for k, (n, _) in core["records"].items()} == {"core": 6}
    # each message is stored once by both (12 messages), and the saver stores each turn's graph
    # input as a message item too (kind "d"): the human message as it was put, before
    # add_messages gave it an id, so a chunk of its own (up to 6 more). Under durability="async"
    # the input checkpoint is serialized on LangGraph's background thread, and add_messages sets
    # the id on the same HumanMessage object in place: when the put runs after that, the input
    # item is the id'd message's bytes and dedups with it (seen in CI: 17; 14 once put_writes
    # became a pending-writes object and LangGraph's background puts ran sooner). No serde item
    # holds an input.
    assert core["entries"]["chunk:message"][0] == 12
    assert 12 <= saver["entries"]["chunk:message"][0] <= 12 + 6
    assert "chunk:?" not in saver["entries"] and "chunk:?" not in core["entries"]
    assert saver["entries"].get("chunk:serde", [0])[0] <= 2  # the branch channel's None (and its write)
    assert saver["total"] > core["total"]
    out = capsys.readouterr().out
    assert "saver / core:" in out and "| C-loop |" in out
