"""One behavioural suite for CheckpointManager, run against every real backend.

``mgr_factory`` is parametrised over ``local`` (LocalStore), ``sqlite`` (SqliteStore, one file), ``s3`` (S3Store in moto's in-process
``mock_aws``, key prefix ``repo``) and ``s3-http`` (S3Store on moto's HTTP server on 127.0.0.1, key
prefix ``agents/team-a``). Every call of the factory returns a NEW ``CheckpointManager`` on a NEW store
object pointing at the SAME location, so a second manager behaves like another process: it shares
nothing with the first but the store.

Covered: save/latest/get/list(limit)/runs, rollback, delete (one checkpoint, whole run), prune,
fork, resume_point, max_checkpoints, parent_id branching, caller-supplied checkpoint ids, exact round
trip of tricky JSON (unicode, big ints, floats, lone surrogates, a 300 KB CDC-chunked tool output),
conflicts between two managers (ConflictError, nothing overwritten), verify(read_data=True), stats,
gc(grace_period=0) after prune, and the URL route (``CheckpointManager("s3://...", endpoint_url=...)``).
"""

from __future__ import annotations

import importlib
import math
import json
import random

import pytest

from snapstore import Checkpoint, CheckpointManager, CheckpointNotFound, ConflictError
from snapstore.errors import RunNotFound
from snapstore.format.tree import FLAG_EXACT, FLAG_PIECES
from snapstore.stores.local import LocalStore
from snapstore.stores.s3 import S3Store
from snapstore.stores.sqlite import SqliteStore

from tests.helpers.s3_fixtures import _dummy_env, make_store, new_bucket_name
from tests.helpers.fake_text import WORDS as _WORDS
from tests.helpers.fake_text import text as _text

KINDS = ["local", "sqlite", "s3", "s3-http"]
HTTP_PREFIX = "agents/team-a"


# --- the fixture ------------------------------------------------------------------------------------

def _same_location(base):
    """A new store object on the location of ``base`` (its own client and connection pool; nothing
    snapstore-level is shared). S3 clients come from one boto3 session only because building a
    session re-parses botocore's service model (~0.3 s)."""
    if isinstance(base, LocalStore):
        return LocalStore(base.root, fsync=False)
    if isinstance(base, SqliteStore):
        return SqliteStore(base.path, fsync=False)
    if isinstance(base, S3Store):
        from botocore.config import Config

        client = _session().client("s3", endpoint_url=base.endpoint_url, region_name="us-east-1",
                                config=Config(s3={"addressing_style": base.addressing_style or "auto"}))
        return S3Store(base.bucket, base.prefix, client=client)
    raise TypeError(type(base))


def _url_of(base) -> tuple[str, dict]:
    """``(location, options)`` naming the location of ``base`` the way a user would."""
    if isinstance(base, LocalStore):
        return base.root, {"fsync": False}
    if isinstance(base, SqliteStore):
        return "sqlite://" + base.path, {"fsync": False}
    opts = {"region_name": "us-east-1"}
    if base.endpoint_url:
        opts["endpoint_url"] = base.endpoint_url
    return f"s3://{base.bucket}/{base.prefix}", opts


_SESSION = None


def _session():
    """One boto3 session for the module: building a session re-parses botocore's service model
    (0.1-0.3 s), clients from one session are cheap. Each store still gets its own client."""
    global _SESSION
    if _SESSION is None:
        import boto3
        importlib.import_module("moto.core.models")  # registers moto's stubber for sessions created after it

        _SESSION = boto3.Session()
    return _SESSION


def _s3_base(kind: str, request):
    """(store, stop) on a fresh bucket: moto in-process (prefix ``repo``) or moto HTTP (prefix
    ``agents/team-a``). The store's client comes from the module's session (see _session)."""
    from botocore.config import Config

    mock = None
    endpoint = None
    if kind == "s3":
        from moto import mock_aws

        mock = mock_aws()
        mock.start()
        prefix = "repo"
    else:
        endpoint = request.getfixturevalue("moto_server")
        prefix = HTTP_PREFIX
    client = _session().client("s3", endpoint_url=endpoint, region_name="us-east-1",
                               config=Config(s3={"addressing_style": "path"}))
    bucket = new_bucket_name()
    client.create_bucket(Bucket=bucket)
    store = S3Store(bucket, prefix, client=client)
    store.endpoint_url = endpoint
    store.addressing_style = "path"

    def stop():
        client.close()
        if mock is not None:
            mock.stop()
    return store, stop


@pytest.fixture(params=KINDS)
def mgr_factory(request, tmp_path, monkeypatch):
    """``mgr_factory(via_url=False, **manager_options)`` -> a new CheckpointManager on the shared location.

    Attributes: ``kind`` (the parameter), ``base`` (the first store, used for raw access).
    """
    kind = request.param
    if kind == "s3-http":
        # start the session's server first: its own environment changes must outlive this test's monkeypatch
        request.getfixturevalue("moto_server")
    _dummy_env(monkeypatch)
    if kind in ("local", "sqlite"):
        base, stop = make_store(kind, tmp_path, fsync=False), (lambda: None)
    else:
        base, stop = _s3_base(kind, request)
    made: list[CheckpointManager] = []

    def factory(via_url: bool = False, **options) -> CheckpointManager:
        if via_url:
            loc, store_opts = _url_of(base)
            mgr = CheckpointManager(loc, **store_opts, **options)
        else:
            mgr = CheckpointManager(_same_location(base), **options)
        made.append(mgr)
        return mgr

    factory.kind = kind
    factory.base = base
    try:
        yield factory
    finally:
        for mgr in reversed(made):
            mgr.close()
            client = getattr(mgr.store, "_client", None)
            if client is not None and not mgr.store._owns_client:
                client.close()
        base.close()
        stop()  # for "s3": stops the mock_aws


# --- messages ---------------------------------------------------------------------------------------

def turn(i: int, seed: int = 0) -> list[dict]:
    """One agent turn: an assistant tool call and its tool result (~300-600 bytes of JSON)."""
    rng = random.Random(seed * 100_003 + i)
    return [
        {"role": "assistant", "content": _text(rng, 120),
         "tool_calls": [{"id": f"call_{seed}_{i}", "type": "function",
                         "function": {"name": "bash", "arguments": f'{{"cmd": "pytest -k case_{i}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{seed}_{i}", "content": _text(rng, 300)},
    ]


def history(n_turns: int, seed: int = 0) -> list[dict]:
    msgs = [{"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": f"Fix the failing test #{seed}."}]
    for i in range(n_turns):
        msgs += turn(i, seed)
    return msgs


def same(a, b) -> bool:
    """Exact equality: types, dict key order, -0.0, surrogates (repr shows all of them)."""
    return repr(a) == repr(b)


def save_turns(mgr: CheckpointManager, run: str, n: int, seed: int = 0, **fields) -> tuple[list[str], list]:
    """Save ``n`` checkpoints of a growing run (one turn each); return (ids, the message list of each)."""
    msgs = history(0, seed)
    ids, lists = [], []
    for i in range(n):
        msgs = msgs + turn(i, seed)
        ids.append(mgr.save(run, msgs, step=i, **fields))
        lists.append(msgs)
    return ids, lists


# --- save / latest / get / list / runs --------------------------------------------------------------

def test_save_latest_get_list_runs(mgr_factory):
    a = mgr_factory()
    assert a.latest("r1") is None and a.list("r1") == [] and a.runs() == []
    ids, lists = save_turns(a, "r1", 6, token_usage={"input_tokens": 1200, "output_tokens": 80},
                            metadata={"task": "fix-bug"}, agent_id="coder", status="running")
    a.save("r2", history(1, seed=2), session_state={"cwd": "/repo", "env": {"X": "1"}}, metrics={"latency_s": 1.25})
    odd = "ünï/../Run A"  # any non-empty string is a run id
    a.save(odd, history(0, seed=3))

    b = mgr_factory()
    cp = b.latest("r1")
    assert isinstance(cp, Checkpoint)
    assert cp.id == ids[-1] and cp.run_id == "r1" and cp.seq == 5 and cp.step == 5
    assert same(cp.messages, lists[-1]) and cp.message_count == len(lists[-1])
    assert cp.token_usage == {"input_tokens": 1200, "output_tokens": 80} and cp.metadata == {"task": "fix-bug"}
    assert cp.agent_id == "coder" and cp.status == "running" and cp.parent_id == ids[-2]
    for cid, msgs in zip(ids, lists):
        got = b.get("r1", cid)
        assert got.id == cid and same(got.messages, msgs)
    r2 = b.latest("r2")
    assert r2.session_state == {"cwd": "/repo", "env": {"X": "1"}} and r2.metrics == {"latency_s": 1.25}
    assert same(b.latest(odd).messages, history(0, seed=3))

    summaries = b.list("r1")
    assert [s.id for s in summaries] == ids[::-1]
    assert [s.message_count for s in summaries] == [len(x) for x in lists[::-1]]
    assert [s.id for s in b.list("r1", limit=2)] == ids[::-1][:2]
    assert [s.id for s in b.list("r1", limit=1)] == [ids[-1]]
    assert b.list("r1", limit=0) == [] and b.list("nope") == []
    assert b.runs() == sorted(["r1", "r2", odd])
    with pytest.raises(CheckpointNotFound, match="no-such-id"):
        b.get("r1", "no-such-id")
    assert b.latest("never-saved") is None


# --- rollback and delete ----------------------------------------------------------------------------

def test_rollback(mgr_factory):
    a = mgr_factory()
    ids, lists = save_turns(a, "r", 5)
    stale = mgr_factory()
    assert stale.latest("r").id == ids[-1]

    cp = a.rollback("r", ids[1])
    assert cp.id == ids[1] and same(cp.messages, lists[1])
    fresh = mgr_factory()
    assert fresh.latest("r").id == ids[1]
    assert [s.id for s in fresh.list("r")] == [ids[1], ids[0]]
    for gone in ids[2:]:
        with pytest.raises(CheckpointNotFound):
            fresh.get("r", gone)
    # the rolling-back manager continues from the rollback target
    new = a.save("r", lists[1] + turn(99))
    assert fresh.get("r", new).parent_id == ids[1]
    # a writer that still holds the old head cannot resurrect it
    with pytest.raises(ConflictError):
        stale.save("r", lists[-1] + turn(100))
    assert mgr_factory().latest("r").id == new
    with pytest.raises(CheckpointNotFound):
        a.rollback("r", ids[3])


def test_delete_one_and_run(mgr_factory):
    a = mgr_factory()
    ids, lists = save_turns(a, "r", 4)
    a.save("other", history(1, seed=9))

    a.delete("r", ids[1])  # a middle checkpoint
    b = mgr_factory()
    assert [s.id for s in b.list("r")] == [ids[3], ids[2], ids[0]]
    with pytest.raises(CheckpointNotFound):
        b.get("r", ids[1])
    assert same(b.get("r", ids[2]).messages, lists[2])  # its successors are intact

    a.delete("r", ids[3])  # the head: the head moves back
    b = mgr_factory()
    assert b.latest("r").id == ids[2]
    assert [s.id for s in b.list("r")] == [ids[2], ids[0]]
    with pytest.raises(CheckpointNotFound):
        a.delete("r", ids[3])

    a.delete("r")  # the whole run
    b = mgr_factory()
    assert b.latest("r") is None and b.list("r") == [] and b.runs() == ["other"]
    with pytest.raises(RunNotFound):
        b.delete("r")
    # a later save under the same run id starts a new, empty run
    again = b.save("r", history(0, seed=5))
    cp = mgr_factory().latest("r")
    assert cp.id == again and cp.parent_id is None and [s.id for s in b.list("r")] == [again]
    assert same(mgr_factory().latest("other").messages, history(1, seed=9))


# --- prune, gc, verify, stats -----------------------------------------------------------------------

def test_prune_gc_verify_stats(mgr_factory):
    a = mgr_factory()
    ids, lists = save_turns(a, "r", 6)
    # the agent compacts its context: the new list shares nothing with the old one
    compacted = [{"role": "system", "content": "summary of the work so far: " + _text(random.Random(7), 400)}]
    last = a.save("r", compacted)
    keep_ids, keep_lists = save_turns(a, "keep", 3, seed=4)

    b = mgr_factory()
    st = b.stats()
    assert st["runs"] == 2 and st["checkpoints"] == 10
    assert st["logical_bytes"] == sum(s.message_bytes for r in ("r", "keep") for s in b.list(r))
    assert st["stored_bytes"] > 0 and st["ratio"] > 0
    assert st["objects"]["packs"]["count"] >= 1 and st["objects"]["manifests"]["count"] == 10
    assert st["cost"]["storage_per_month"] > 0 and "requests" in st

    rep = b.verify(read_data=True)
    assert rep.ok and not rep.warnings, [str(p) for p in rep.errors + rep.warnings]
    assert rep.checked["checkpoints"] == 10

    gone = b.prune(keep_last=1, run_id="r")
    assert sorted(s.id for s in gone) == sorted(ids)
    assert [s.id for s in b.list("r")] == [last]
    stored_before = b.stats()["stored_bytes"]
    first = b.gc(grace_period=0)
    second = b.gc(grace_period=0)
    reclaimed = first.reclaimed_bytes + second.reclaimed_bytes
    assert reclaimed > 0 and first.deleted.get("packs", 0) + second.deleted.get("packs", 0) >= 1
    after = mgr_factory()
    st2 = after.stats()
    assert st2["stored_bytes"] < stored_before and st2["checkpoints"] == 4
    rep = after.verify(read_data=True)
    assert rep.ok and not rep.warnings, [str(p) for p in rep.errors + rep.warnings]
    # what is live still restores exactly
    assert same(after.latest("r").messages, compacted)
    for cid, msgs in zip(keep_ids, keep_lists):
        assert same(after.get("keep", cid).messages, msgs)
    # and both runs continue
    after.save("r", compacted + turn(1))
    after.save("keep", keep_lists[-1] + turn(50, seed=4))


# --- fork and resume_point --------------------------------------------------------------------------

def test_fork_and_resume_point(mgr_factory):
    a = mgr_factory()
    assert a.resume_point("r") is None
    ids, lists = save_turns(a, "r", 4)
    step, cp = mgr_factory().resume_point("r")
    assert step == 3 and cp.id == ids[-1] and same(cp.messages, lists[-1])

    before = a.store.stats.snapshot()
    forked = a.fork("r", ids[1], "r-retry")
    d = a.store.stats.since(before)
    # format 2: the manifest (listing the source's segments, no copy of the data), the new run's
    # live marker (§13) and the source run's fork pin (§10), both empty objects
    assert d.counts["PUT"] == 3, d
    assert d.bytes_up < 1024, d
    assert forked.run_id == "r-retry" and forked.id != ids[1] and same(forked.messages, lists[1])

    b = mgr_factory()
    assert b.runs() == ["r", "r-retry"]
    step, cp = b.resume_point("r-retry")
    assert cp.id == forked.id and step == 1 and same(cp.messages, lists[1])
    nxt = b.save("r-retry", lists[1] + turn(7, seed=1), step=2)
    c = mgr_factory()
    assert c.latest("r-retry").id == nxt and c.latest("r").id == ids[-1]  # the source is untouched
    assert same(c.latest("r").messages, lists[-1])
    # the source run goes on (its writer merges its packs and, pinned, leaves them to GC): the fork
    # is unaffected
    msgs = lists[-1]
    for i in range(20):
        msgs = msgs + turn(100 + i)
        a.save("r", msgs)
    assert same(mgr_factory().get("r-retry", forked.id).messages, lists[1])
    assert same(mgr_factory().latest("r").messages, msgs)
    with pytest.raises(ConflictError):
        c.fork("r", ids[0], "r-retry")  # onto a live run
    with pytest.raises(CheckpointNotFound):
        c.fork("r", "no-such", "r-3")


# --- max_checkpoints --------------------------------------------------------------------------------

def test_max_checkpoints(mgr_factory):
    a = mgr_factory(max_checkpoints=3)
    ids, lists = save_turns(a, "r", 7)
    b = mgr_factory()
    assert [s.id for s in b.list("r")] == ids[::-1][:3]
    for old in ids[:4]:
        with pytest.raises(CheckpointNotFound):
            b.get("r", old)
    assert same(b.latest("r").messages, lists[-1])
    assert b.verify(read_data=True).ok


# --- parent_id branching and caller-supplied ids ----------------------------------------------------

def test_parent_id_branching_and_caller_ids(mgr_factory):
    a = mgr_factory()
    base = history(1)
    plan = a.save("r", base, checkpoint_id="plan")
    act1 = a.save("r", base + turn(1), checkpoint_id="act-1")
    act2 = a.save("r", base + turn(1) + turn(2), checkpoint_id="étape/2 ✓")
    long_id = "x" * 300
    assert (plan, act1, act2) == ("plan", "act-1", "étape/2 ✓")

    alt = a.save("r", base + turn(9), parent_id="plan", checkpoint_id=long_id)  # time travel
    assert alt == long_id
    b = mgr_factory()
    head = b.latest("r")
    assert head.id == long_id and head.parent_id == "plan" and same(head.messages, base + turn(9))
    assert [s.id for s in b.list("r")] == [long_id, act2, act1, plan]
    assert same(b.get("r", act2).messages, base + turn(1) + turn(2))  # the other branch stays
    assert b.get("r", "plan").parent_id is None and b.get("r", "act-1").parent_id == "plan"

    # a live id cannot be reused, by this manager or another
    with pytest.raises(ConflictError):
        a.save("r", base + turn(9) + turn(10), checkpoint_id="plan")
    with pytest.raises(ConflictError):
        b.save("r", base + turn(9) + turn(10), checkpoint_id="act-1")
    assert [s.id for s in mgr_factory().list("r")] == [long_id, act2, act1, plan]
    # branching again from the older branch
    c = mgr_factory()
    nxt = c.save("r", base + turn(1) + turn(2) + turn(3), parent_id=act2)
    assert mgr_factory().latest("r").id == nxt and mgr_factory().get("r", nxt).parent_id == act2
    with pytest.raises(CheckpointNotFound):
        c.save("r", base, parent_id="nope")
    # a deleted caller-supplied id can be reused
    c.delete("r", act1)
    again = c.save("r", base + turn(1) + turn(2) + turn(3) + turn(4), checkpoint_id="act-1")
    assert mgr_factory().get("r", "act-1").id == again and mgr_factory().get("r", again).parent_id == nxt


# --- exact JSON ------------------------------------------------------------------------------------

def _big_tool_output(nbytes: int = 300_000) -> str:
    rng = random.Random(42)
    lines = []
    n = 0
    while n < nbytes:
        line = f"{rng.randrange(10**6):>7} | tests/test_{rng.choice(_WORDS)}.py::{_text(rng, 60)} " \
               f"{rng.choice(['PASSED', 'FAILED', 'ERROR'])} [{rng.random():.3f}s]"
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)


TRICKY = [
    {"role": "user", "content": "héllo wörld — 你好 — مرحبا — 🙂🚀 — e\u0301 — \u0000 nul \t tab \n nl \"q\" \\ bs"},
    {"b": 1, "a": 2, "": "empty key", "nested": {"z": [], "y": {}, "x": [None, True, False]}},
    {"ints": [0, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**64) - 1, 10**40, -(10**100)]},
    {"floats": [0.1, -0.0, 1e-300, 5e-324, 1.7976931348623157e308, 2.5, 1e16, 123456789.123456789, 1.0]},
    {"surrogates": ["\ud800", "a\udfffb", "\udbff\udc00x", "\ud83d"], "\udc80key": "lone surrogate key"},
    {"role": "tool", "content": "x" * 70_000},  # just above the CDC threshold
]


def test_exact_round_trip_tricky_json(mgr_factory):
    a = mgr_factory()
    big = _big_tool_output()
    assert len(big) >= 300_000
    msgs = TRICKY + [{"role": "tool", "tool_call_id": "call_1", "content": big}]
    c1 = a.save("r", msgs, session_state={"big": 2**70, "s": "\udead", "f": -0.0},
                metadata={"ünï": "✓", "n": 10**30}, step=2**64)
    # the next save edits the big output near its end: only the changed CDC piece is new
    big2 = big[:-200] + "EDITED" + big[-200:]
    msgs2 = msgs + [{"role": "tool", "tool_call_id": "call_2", "content": big2}]
    before = a.store.stats.snapshot()
    c2 = a.save("r", msgs2)
    up = a.store.stats.since(before).bytes_up
    assert up < 100_000, up  # a 300 KB message, stored again, costs about one CDC piece (<= 256 KB raw)

    b = mgr_factory()
    cp = b.latest("r")
    assert cp.id == c2 and same(cp.messages, msgs2)
    one = b.get("r", c1)
    assert same(one.messages, msgs)
    assert same(one.session_state, {"big": 2**70, "s": "\udead", "f": -0.0})
    assert same(one.metadata, {"ünï": "✓", "n": 10**30}) and one.step == 2**64
    assert math.copysign(1.0, one.messages[3]["floats"][1]) == -1.0
    assert type(one.messages[3]["floats"][-1]) is float and type(one.messages[2]["ints"][0]) is int

    # the big outputs really were CDC-chunked (PIECES refs), and big ints/surrogates stored EXACT
    refs = b.state.views["r"].list_state.refs
    assert refs is not None and len(refs) == len(msgs2)
    assert refs[-1].flags & FLAG_PIECES and refs[len(msgs) - 1].flags & FLAG_PIECES
    assert refs[5].flags & FLAG_PIECES
    assert refs[2].flags & FLAG_EXACT and refs[4].flags & FLAG_EXACT
    assert not refs[0].flags & (FLAG_PIECES | FLAG_EXACT)
    rep = b.verify(read_data=True)
    assert rep.ok and not rep.warnings, [str(p) for p in rep.errors + rep.warnings]


# --- conflicts between two managers -----------------------------------------------------------------

def test_conflicts_between_two_managers(mgr_factory):
    a = mgr_factory()
    b = mgr_factory()
    base = history(1)
    c0 = a.save("r", base)
    assert b.latest("r").id == c0
    c1 = b.save("r", base + turn(1, seed=1))  # b moves on
    with pytest.raises(ConflictError, match="latest"):
        a.save("r", base + turn(1, seed=2))  # a is stale: refused, nothing written over b's work
    fresh = mgr_factory()
    head = fresh.latest("r")
    assert head.id == c1 and same(head.messages, base + turn(1, seed=1))
    assert [s.id for s in fresh.list("r")] == [c1, c0]
    # reload and continue
    assert a.latest("r").id == c1
    c2 = a.save("r", base + turn(1, seed=1) + turn(2, seed=2))
    assert mgr_factory().latest("r").parent_id == c1 and mgr_factory().latest("r").id == c2

    # two writers starting the same new run: exactly one wins
    assert a.latest("new") is None and b.latest("new") is None
    w = b.save("new", history(0, seed=1))
    with pytest.raises(ConflictError):
        a.save("new", history(0, seed=2))
    assert same(mgr_factory().latest("new").messages, history(0, seed=1))
    assert [s.id for s in mgr_factory().list("new")] == [w]

    # both save the same caller-supplied id on different runs: fine; on the same run: conflict
    a.latest("new")
    a.save("new", history(1, seed=1), checkpoint_id="final")
    b.latest("new")
    with pytest.raises(ConflictError):
        b.save("new", history(2, seed=1), checkpoint_id="final")
    assert same(mgr_factory().get("new", "final").messages, history(1, seed=1))
    d = mgr_factory()
    head = d.latest("r")
    assert d.save("r", head.messages + turn(3, seed=3), checkpoint_id="final") == "final"  # another run: fine


# --- the URL route ----------------------------------------------------------------------------------

def test_url_route(mgr_factory):
    """``CheckpointManager("s3://bucket/prefix", endpoint_url=...)`` (or a directory path) is the same
    repository as the store object."""
    by_url = mgr_factory(via_url=True)
    if mgr_factory.kind == "sqlite":
        assert isinstance(by_url.store, SqliteStore) and by_url.store.path == mgr_factory.base.path
    elif mgr_factory.kind != "local":
        assert isinstance(by_url.store, S3Store) and by_url.store.bucket == mgr_factory.base.bucket
        assert by_url.store.prefix == mgr_factory.base.prefix
    ids, lists = save_turns(by_url, "via-url", 3)
    by_store = mgr_factory()
    assert same(by_store.latest("via-url").messages, lists[-1])
    c = by_store.save("via-url", lists[-1] + turn(5))
    assert mgr_factory(via_url=True).latest("via-url").id == c
    if mgr_factory.kind == "s3-http":
        # the objects really are under the prefix in the bucket
        raw = mgr_factory.base._client.list_objects_v2(Bucket=mgr_factory.base.bucket)
        assert raw["KeyCount"] > 0 and all(o["Key"].startswith(HTTP_PREFIX + "/") for o in raw["Contents"])
