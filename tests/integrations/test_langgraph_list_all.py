"""``SnapstoreSaver.list`` over every thread (issue 27, item 3): linear in the threads, each run
listed once and its records read from its segments (no manifest GET per checkpoint), and the
same answers as LangGraph's InMemorySaver for the same calls (``filter``, ``before``, ``limit``;
newest first within each thread's namespace). Request counts, not timings; a real local store
in a temp dir."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver, parse_run_id  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


def _thread(savers, thread: str, turns: int, ns: str = "", base: int = 0) -> None:
    """``turns`` checkpoints (each with one pending write) of one namespace, into every saver."""
    parent = None
    for i in range(turns):
        c = empty_checkpoint()
        c["id"] = f"1ef00000-0000-6000-8000-{base + i:012d}"
        c["channel_values"] = {"n": i, "who": f"{thread}/{ns}"}
        c["channel_versions"] = {"n": i + 1, "who": 1}
        md = {"source": "loop" if i else "input", "step": i, "parents": {}, "tag": i % 3}
        for s in savers:
            conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            if parent:
                conf["configurable"]["checkpoint_id"] = parent
            got = s.put(conf, c, md, {"n": i + 1, **({"who": 1} if i == 0 else {})})
            s.put_writes(got, [("n", i * 10), ("who", thread)], f"task-{i}")
        parent = c["id"]


def _key(t):
    c = t.config["configurable"]
    return (c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"], t.checkpoint["channel_values"],
            {k: v for k, v in t.metadata.items()}, [tuple(w) for w in t.pending_writes],
            (t.parent_config or {}).get("configurable", {}).get("checkpoint_id"))


def _per_namespace(tuples) -> dict:
    out: dict = {}
    for t in tuples:
        k = _key(t)
        out.setdefault(k[:2], []).append(k)
    return out


def test_list_answers_as_inmemorysaver(tmp_path):
    mem = InMemorySaver()
    ours = SnapstoreSaver(str(tmp_path / "repo"))
    for k in range(4):
        _thread([mem, ours], f"t{k}", 3 + k, base=100 * k)
    _thread([mem, ours], "t1", 2, ns="sub:1", base=50)
    calls = [
        (None, {}),
        (None, {"filter": {"tag": 1}}),
        (None, {"filter": {"source": "input"}}),
        (None, {"before": {"configurable": {"checkpoint_id": "1ef00000-0000-6000-8000-000000000202"}}}),
        ({"configurable": {"thread_id": "t1"}}, {}),
        ({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}, {}),
        ({"configurable": {"thread_id": "t1", "checkpoint_ns": "sub:1"}}, {}),
        ({"configurable": {"thread_id": "t3"}}, {"limit": 2}),
        ({"configurable": {"thread_id": "t3", "checkpoint_ns": ""}},
         {"before": {"configurable": {"checkpoint_id": "1ef00000-0000-6000-8000-000000000304"}}, "limit": 2}),
        ({"configurable": {"thread_id": "t2", "checkpoint_id": "1ef00000-0000-6000-8000-000000000201"}}, {}),
        ({"configurable": {"thread_id": "nobody"}}, {}),
    ]
    for config, kw in calls:
        want, got = list(mem.list(config, **kw)), list(ours.list(config, **kw))
        assert _per_namespace(got) == _per_namespace(want), (config, kw)
        ids = [t.config["configurable"]["checkpoint_id"] for t in got]
        assert ids == sorted(ids, reverse=True), "newest first"
    # limit over every thread: the newest checkpoints (by id), as the SQL savers order them
    every = [_key(t) for t in ours.list(None)]
    assert [_key(t) for t in ours.list(None, limit=5)] == every[:5]
    assert len(every) == sum(3 + k for k in range(4)) + 2
    ours.close()


def _cost(root) -> dict:
    """Requests of ``list(None)`` on a fresh saver, and what listing each of its runs costs."""
    s = SnapstoreSaver(CheckpointManager(LocalStore(str(root), fsync=False)))
    st = s.manager.store.stats
    b = st.snapshot()
    n = sum(1 for _ in s.list(None))
    total = st.since(b).total()
    probe = SnapstoreSaver(CheckpointManager(LocalStore(str(root), fsync=False)))
    b = probe.manager.store.stats.snapshot()
    runs = [r for r in probe.manager.runs() if parse_run_id(r)]
    listing = probe.manager.store.stats.since(b).total()
    segs = 0
    for r in runs:
        b = probe.manager.store.stats.snapshot()
        rd = probe.manager.read_run(r)
        listing += probe.manager.store.stats.since(b).total()
        segs += len(rd._segs or ())
    return {"checkpoints": n, "requests": total, "runs": len(runs), "listing": listing, "segs": segs}


def test_list_all_requests_grow_linearly_and_read_no_manifest_per_checkpoint(tmp_path):
    root = tmp_path / "repo"
    w = SnapstoreSaver(CheckpointManager(LocalStore(str(root), fsync=False)))
    costs = []
    made = 0
    for n in (3, 6, 9):
        while made < n:
            _thread([w], f"t{made:03d}", 6)
            made += 1
        costs.append(_cost(root))
    a, b, c = costs
    assert [x["checkpoints"] for x in costs] == [18, 36, 54]
    # the same cost per thread at 3, 6 and 9 threads: linear, nothing lists the repository per thread
    assert c["requests"] - b["requests"] == b["requests"] - a["requests"], costs
    for x in costs:
        # the runs listed once each (and runs()) plus their segment packs: records are read from
        # the segments, not one manifest GET (or more) per checkpoint record as before; per run
        # also one LIST of its writes area and a GET of each pending-writes object in the newest
        # record's window (layout §4a): the one its last put_writes left beside the newest record,
        # and the one beside its parent that the newest record folded and the writer (not closed,
        # deleting in batches of DELETE_BATCH) has not deleted yet
        assert x["requests"] <= x["listing"] + x["segs"] + 3 * x["runs"], x
