"""S3 at the CheckpointManager level (moto): typed errors, pagination, versioning, request costs and
restore round trips.

* Bad credentials, a missing bucket, objects deleted behind snapstore's back (a pack, a manifest) and
  corrupted objects each raise a typed error (CredentialsError/AccessDenied, BucketNotFound,
  ObjectNotFound/CheckpointNotFound, IntegrityError) that names the bucket or the object key.
* Listing a run with more than 1,000 checkpoints pages through ListObjectsV2 correctly.
* A versioned bucket is detected and warned about.
* Steady-state saves cost at most 3 PUTs and no GET/HEAD/LIST; ``list(run, limit=k)`` costs O(k) GETs
  independent of the run's length.
* Restoring the latest checkpoint of a 10,000-message run takes at most (tree levels + 3) sequential
  round trips, with the packs of each round fetched in parallel; and stays bounded after gc repacks.

Tests that expose snapstore bugs (see their docstrings): test_versioned_bucket_warned_when_first_call_is_save
and test_restore_after_gc_repack_stays_bounded fail until snapstore is fixed;
test_verify_reports_a_corrupted_pack failed at commit f7518fb (fixed by tolerating IntegrityError in
``Repository.prefetch``).

Large runs are built cheaply: saved into a MemoryStore by the real write path, then copied object by
object into the moto bucket through moto's backend (the bytes are exactly what an S3 save writes).
"""

from __future__ import annotations

import importlib
import math
import random
import sys
import warnings

import boto3
import pytest

from snapstore import CheckpointManager, CheckpointNotFound
from snapstore.repo.repository import Repository
from snapstore.errors import (AccessDenied, BucketNotFound, CredentialsError, IntegrityError, NotFoundError,
                              ObjectNotFound)
from snapstore.format import keys
from snapstore.format.manifest import is_void
from snapstore.stores.memory import MemoryStore
from snapstore.stores.s3 import S3Store

from tests.helpers.s3_fixtures import _http_store, iam_user, new_bucket_name
from tests.helpers.fake_text import text as _text
from tests.helpers import paths

sys.path.insert(0, str(paths.ROOT))
from benchmarks.roundtrips import RoundTrips  # noqa: E402  (shared with benchmarks/s3.py)

PREFIX = "team/agents"

def turn(i: int, seed: int = 0, size: int = 300) -> list[dict]:
    rng = random.Random(seed * 100_003 + i)
    return [{"role": "assistant", "content": _text(rng, size // 3),
             "tool_calls": [{"id": f"call_{i}", "type": "function",
                             "function": {"name": "bash", "arguments": f'{{"cmd": "ls {i}"}}'}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": _text(rng, size)}]


def http_store(endpoint: str, prefix: str = PREFIX, **kw) -> S3Store:
    """A store on a fresh bucket of the moto HTTP server, under ``prefix``."""
    return _http_store(endpoint, prefix=prefix, **kw)


_SESSION = None


def same_place(store: S3Store) -> S3Store:
    """A new S3Store (own client and connection pool) on the bucket/prefix of ``store``.

    Clients come from one boto3 session: each new session re-parses botocore's service model
    (0.1-0.3 s). The client is closed at interpreter exit with the session.
    """
    global _SESSION
    if _SESSION is None:
        importlib.import_module("moto.core.models")  # moto's stubber must be registered before the session

        _SESSION = boto3.Session()
    from botocore.config import Config

    client = _SESSION.client("s3", endpoint_url=store.endpoint_url, region_name="us-east-1",
                             config=Config(s3={"addressing_style": "path"}))
    out = S3Store(store.bucket, store.prefix, client=client)
    out.endpoint_url = store.endpoint_url
    return out


def raw_key(store: S3Store, key: str) -> str:
    return f"{store.prefix}/{key}" if store.prefix else key


def copy_into(src: MemoryStore, dst: S3Store) -> int:
    """Copy every object of ``src`` under ``dst``'s bucket/prefix through moto's backend (fast)."""
    objects = list(src._objects.items())
    try:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        for k, (data, _, _) in objects:
            backend.put_object(dst.bucket, raw_key(dst, k), data)
    except (ImportError, KeyError, AttributeError, TypeError):  # moto internals moved: slow path
        for k, (data, _, _) in objects:
            dst._client.put_object(Bucket=dst.bucket, Key=raw_key(dst, k), Body=data)
    return len(objects)


@pytest.fixture
def store(moto_server):
    s = http_store(moto_server)
    try:
        yield s
    finally:
        s.close()


def saved_run(store: S3Store, n: int = 5, run: str = "r", **save_kw):
    """Save ``n`` checkpoints; return (manager, ids, message lists, pack ids in save order)."""
    mgr = CheckpointManager(same_place(store))
    packs = []
    mgr.hooks["after_pack"] = lambda pack_id, **_: packs.append(pack_id)
    msgs = [{"role": "system", "content": "You are an agent."}]
    ids, lists = [], []
    for i in range(n):
        msgs = msgs + turn(i)
        ids.append(mgr.save(run, msgs, step=i, **save_kw))
        lists.append(msgs)
    return mgr, ids, lists, packs


# --- typed errors ------------------------------------------------------------------------------------

def test_bad_credentials_and_access_denied(moto_server, monkeypatch):
    from moto.core.authorization import enable_iam_authentication

    owner = http_store(moto_server, prefix="team-a")
    _, ids, lists, _ = saved_run(owner, 2)
    key = iam_user(moto_server, owner.bucket, "team-a")
    url_a = f"s3://{owner.bucket}/team-a"
    url_b = f"s3://{owner.bucket}/team-b"
    for k in ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(k, raising=False)

    def as_user(key_id: str, secret: str):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)

    with enable_iam_authentication():
        # the policy's user works on its own prefix (so the failures below are about the credentials)
        as_user(key["AccessKeyId"], key["SecretAccessKey"])
        ok = CheckpointManager(url_a, endpoint_url=moto_server)
        assert ok.latest("r").messages == lists[-1]
        ok.save("r", lists[-1] + turn(9))
        # ... but is denied on another prefix of the bucket
        other = CheckpointManager(url_b, endpoint_url=moto_server)
        with pytest.raises(AccessDenied, match=f"{owner.bucket}/team-b/"):
            other.latest("r")
        with pytest.raises(AccessDenied, match=f"{owner.bucket}/team-b/"):
            other.save("r", lists[0])
        # unknown access key
        as_user("AKIAUNKNOWN000000000", "whatever")
        bad = CheckpointManager(url_a, endpoint_url=moto_server)
        with pytest.raises(CredentialsError, match="InvalidAccessKeyId") as ei:
            bad.latest("r")
        assert f"s3://{owner.bucket}/team-a/" in str(ei.value)
        with pytest.raises(CredentialsError, match=owner.bucket):
            bad.save("r", lists[0])
        with pytest.raises(CredentialsError, match=owner.bucket):
            bad.list("r")
        # right key, wrong secret
        as_user(key["AccessKeyId"], "not-the-secret")
        wrong = CheckpointManager(url_a, endpoint_url=moto_server)
        with pytest.raises(CredentialsError, match="SignatureDoesNotMatch") as ei:
            wrong.get("r", ids[0])
        assert owner.bucket in str(ei.value)
    # nothing was written by the refused managers
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    check = CheckpointManager(same_place(owner))
    assert len(check.list("r")) == 3 and check.verify().ok
    assert not list(owner._client.list_objects_v2(Bucket=owner.bucket, Prefix="team-b/").get("Contents") or [])


def test_missing_bucket(moto_server):
    missing = f"snapstore-missing-{new_bucket_name()}"
    mgr = CheckpointManager(f"s3://{missing}/p", endpoint_url=moto_server, region_name="us-east-1")
    for op in (lambda: mgr.save("r", [{"role": "user", "content": "hi"}]), lambda: mgr.latest("r"),
               lambda: mgr.list("r"), mgr.runs, lambda: mgr.get("r", "x"), lambda: mgr.stats(),
               lambda: mgr.verify()):
        with pytest.raises(BucketNotFound, match=missing):
            op()
    names = [b["Name"] for b in boto3.client("s3", endpoint_url=moto_server).list_buckets()["Buckets"]]
    assert missing not in names  # nothing created


def tier_packs(mgr: CheckpointManager, run: str = "r") -> list[bytes]:
    """The tier packs (format-2 segments of level >= 1) the run's newest record lists."""
    head = mgr.repo.head(mgr.repo.run_key(run))
    return [sg.pack for sg in head.segment_list() if sg.level >= 1]


def test_pack_deleted_behind_our_back(store):
    writer, ids, lists, packs = saved_run(store, 6)
    assert len(packs) == 6
    # format 2: saves 0-3 were merged into a tier pack (their own packs deleted); 4 and 5 keep theirs
    tiers = tier_packs(writer)
    assert len(tiers) == 1
    newest = keys.pack_key(packs[5])  # holds only what checkpoint 5 added
    store._client.delete_object(Bucket=store.bucket, Key=raw_key(store, newest))
    reader = CheckpointManager(same_place(store))
    with pytest.raises(ObjectNotFound) as ei:
        reader.latest("r")
    assert ei.value.key == newest and newest in str(ei.value)
    assert reader.get("r", ids[4]).messages == lists[4]  # checkpoints that do not need it still restore

    gone = keys.pack_key(tiers[0])  # holds the messages checkpoints 0-3 added
    store._client.delete_object(Bucket=store.bucket, Key=raw_key(store, gone))
    reader = CheckpointManager(same_place(store))
    with pytest.raises(ObjectNotFound, match=gone):
        reader.get("r", ids[3])
    rep = reader.verify(read_data=True)
    assert not rep.ok and any(p.key == gone and p.code.startswith("missing") for p in rep.errors), rep.errors
    assert any(p.key == newest and p.code.startswith("missing") for p in rep.errors), rep.errors


def test_manifest_deleted_behind_our_back(store):
    writer, ids, lists, _ = saved_run(store, 4)
    named = writer.save("r", lists[-1] + turn(20), checkpoint_id="named step")
    writer.save("r", lists[-1] + turn(20) + turn(21))
    rk = writer.repo.run_key("r")
    for seq in (1, 4):  # a generated id's manifest and a caller-supplied id's manifest
        store._client.delete_object(Bucket=store.bucket, Key=raw_key(store, keys.manifest_key(rk, seq)))

    reader = CheckpointManager(same_place(store))
    with pytest.raises(CheckpointNotFound) as ei:
        reader.get("r", ids[1])
    assert ids[1] in str(ei.value) and "'r'" in str(ei.value) and isinstance(ei.value, NotFoundError)
    with pytest.raises(CheckpointNotFound, match="named step"):
        reader.get("r", named)
    assert [s.seq for s in reader.list("r")] == [5, 3, 2, 0]
    assert reader.latest("r").seq == 5
    with pytest.raises(CheckpointNotFound, match=ids[1]):
        reader.rollback("r", ids[1])


def _flip(store: S3Store, key: str, at: int | None = None) -> None:
    raw = store._client.get_object(Bucket=store.bucket, Key=raw_key(store, key))["Body"].read()
    i = len(raw) // 2 if at is None else at
    bad = raw[:i] + bytes([raw[i] ^ 0x5A]) + raw[i + 1:]
    store._client.put_object(Bucket=store.bucket, Key=raw_key(store, key), Body=bad)


def test_corrupted_pack(store):
    writer, ids, lists, packs = saved_run(store, 5)
    bad = keys.pack_key(tier_packs(writer)[0])  # format 2: checkpoints 0-3's data, merged
    _flip(store, bad)
    reader = CheckpointManager(same_place(store))
    with pytest.raises(IntegrityError) as ei:
        reader.latest("r")
    assert ei.value.key == bad and bad in str(ei.value)
    with pytest.raises(IntegrityError, match=bad):
        CheckpointManager(same_place(store)).get("r", ids[2])
    rep = CheckpointManager(same_place(store)).verify(read_data=True)
    assert any(p.key == bad and p.code.startswith("corrupt") for p in rep.errors), rep.errors
    # a damaged per-save pack (checkpoint 4's): checkpoints that do not need it still restore
    writer, ids, lists, packs = saved_run(store, 5, run="r2")
    bad = keys.pack_key(packs[4])
    _flip(store, bad)
    reader = CheckpointManager(same_place(store))
    with pytest.raises(IntegrityError, match=bad):
        reader.latest("r2")
    assert reader.get("r2", ids[3]).messages == lists[3]


def test_verify_reports_a_corrupted_pack(store):
    """verify() must REPORT a corrupt pack (error naming its key), not raise.

    Regression test: at commit f7518fb this failed: check.mark() prefetches each state's packs with
    ``repo.prefetch``, which swallowed only ObjectNotFound, so the pack's IntegrityError escaped
    verify() instead of being recorded as a ``corrupt-*`` problem. (A deleted pack was reported
    fine: see test_pack_deleted_behind_our_back.) Segments off (format-1 writes): the tree's hints
    name the per-save packs directly; test_corrupted_pack covers a damaged format-2 segment.
    """
    Repository.init(same_place(store), seg_fanout=0)
    writer, ids, lists, packs = saved_run(store, 4)
    # corrupt a pack that the head's spine refers to directly but that does not hold the head's state
    # or upper entry (so reading the state succeeds and the corrupt pack is met by the prefetch)
    msgs = lists[-1]
    for i in range(4, 30):
        head = writer.state.views["r"].head
        spine = writer.repo.read_state(bytes.fromhex(head.state[0]), bytes.fromhex(head.state[1]))
        holders = {bytes.fromhex(h) for h in head.state[1:]} | ({spine.upper[1]} if spine.upper else set())
        targets = [r.pack for _, r in spine.top_down() if r.pack not in holders]
        if targets:
            break
        msgs = msgs + turn(i)
        writer.save("r", msgs)
    bad = keys.pack_key(targets[0])
    _flip(store, bad)
    rep = CheckpointManager(same_place(store)).verify(read_data=True)
    assert not rep.ok and any(p.key == bad and p.code.startswith("corrupt") for p in rep.errors), rep.errors


def test_corrupted_manifest(store):
    writer, ids, lists, _ = saved_run(store, 3)
    head_key = keys.manifest_key(writer.repo.run_key("r"), 2)
    _flip(store, head_key, at=30)
    reader = CheckpointManager(same_place(store))
    with pytest.raises(IntegrityError) as ei:
        reader.latest("r")
    assert ei.value.key == head_key and head_key in str(ei.value)
    with pytest.raises(IntegrityError, match=head_key):
        reader.get("r", ids[2])
    rep = reader.verify()
    assert any(p.key == head_key for p in rep.errors), rep.errors


# --- pagination --------------------------------------------------------------------------------------

def test_list_pages_past_1000_checkpoints(s3_inprocess_store):
    """ListObjectsV2 pages hold at most 1,000 keys: a run of 1,100 checkpoints lists completely.

    (``runs()`` over more than 1,000 runs is not tested here: it costs a LIST and a GET per run, about
    8 s for 1,050 runs even against in-process moto. ``list_dirs`` paging is covered by test_store_s3.)
    """
    dst = s3_inprocess_store
    mem = MemoryStore()
    builder = CheckpointManager(mem)
    msgs = [{"role": "system", "content": "s"}]
    ids = []
    for i in range(1_100):
        msgs = msgs + [{"role": "user", "content": f"m{i}"}]
        ids.append(builder.save("long", msgs, step=i))
    builder.save("other", [{"role": "user", "content": "x"}])
    copy_into(mem, dst)

    mgr = CheckpointManager(same_place(dst))
    mgr.repo
    before = mgr.store.stats.snapshot()
    got = mgr.list("long")
    d = mgr.store.stats.since(before)
    assert [s.id for s in got] == ids[::-1] and [s.step for s in got] == list(range(1_099, -1, -1))
    # format 2: two pages of manifest keys and one of log segments; the records come from the log
    # segments (copies of 16 and 256 records) and the 12 newest manifests
    assert d.counts["LIST"] == 3 and d.counts["GET"] <= 30, d
    assert [s.id for s in mgr.list("long", limit=3)] == ids[::-1][:3]
    assert mgr.get("long", ids[0]).messages == [{"role": "system", "content": "s"}, {"role": "user", "content": "m0"}]
    assert mgr.runs() == ["long", "other"]
    # deleting the run removes all 1,100 records: younger than FREE_AFTER, each becomes a void
    # record (docs/format.md §15) keeping its position taken; GC then deletes them (DeleteObjects
    # batches of <= 1,000)
    mgr.delete("long")
    assert mgr.latest("long") is None and mgr.list("long") == []
    left = list(dst.list(keys.manifests_prefix(mgr.repo.run_key("long"))))
    assert len(left) == 1_101 and sum(not is_void(i.size) for i in left) == 1  # the tombstone
    mgr.gc(grace_period=0)
    assert mgr.runs() == ["other"]


# --- versioning ----------------------------------------------------------------------------------------

def test_versioned_bucket_is_detected_and_warned_about(store, moto_server):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unversioned bucket: no warning
        plain = CheckpointManager(same_place(store))
        plain.save("r", [{"role": "user", "content": "hi"}])
        assert plain.versioned is False
    store._client.put_bucket_versioning(Bucket=store.bucket, VersioningConfiguration={"Status": "Enabled"})
    mgr = CheckpointManager(same_place(store))
    with pytest.warns(UserWarning, match="versioning") as rec:
        mgr.latest("r")
    assert mgr.versioned is True and store.bucket in str(rec[0].message)
    by_url = CheckpointManager(f"s3://{store.bucket}/{store.prefix}", endpoint_url=moto_server)
    with pytest.warns(UserWarning, match="versioning"):
        by_url.runs()
    assert by_url.versioned is True


def test_versioned_bucket_warned_when_first_call_is_save(store, moto_server):
    """A writer whose first call is save() on an existing repository must be warned too.

    Fails (snapstore bug): CheckpointManager.save() opens the repository itself
    (``self._repo = Repository.open(self.store, create=False)``) instead of through the ``repo``
    property, which is where the versioning check lives; so the check never runs for that manager:
    no warning and ``versioned`` stays False. (An agent process that only ever saves is the common case.)
    """
    CheckpointManager(same_place(store)).save("r", [{"role": "user", "content": "hi"}])
    store._client.put_bucket_versioning(Bucket=store.bucket, VersioningConfiguration={"Status": "Enabled"})
    writer = CheckpointManager(f"s3://{store.bucket}/{store.prefix}", endpoint_url=moto_server)
    with pytest.warns(UserWarning, match="versioning"):
        writer.save("r2", [{"role": "user", "content": "hi"}])
    assert writer.versioned is True


# --- request costs ---------------------------------------------------------------------------------------

def _wire_ops(store: S3Store) -> list:
    """Record the S3 operation of every HTTP request the store's client sends (independent of
    ``store.stats``, so uncounted requests would show)."""
    ops: list = []
    store._client.meta.events.register("before-send.s3", lambda event_name, **_: ops.append(event_name.split(".")[-1]))
    return ops


def test_steady_state_save_costs_at_most_3_puts_and_no_reads(store):
    mgr = CheckpointManager(same_place(store))
    ops = _wire_ops(mgr.store)
    msgs = [{"role": "system", "content": "You are an agent."}]
    deltas = []
    for i in range(20):
        msgs = msgs + turn(i)
        before = mgr.store.stats.snapshot()
        ops.clear()
        mgr.save("r", msgs, step=i, checkpoint_id=f"step-{i}" if i % 4 == 3 else None,
                 token_usage={"input_tokens": 1000 + i, "output_tokens": 50})
        deltas.append((i, mgr.store.stats.since(before), list(ops)))
    fanout = mgr.repo.config.seg_fanout
    for i, d, wire in deltas[1:]:  # saves 2..20
        merges = (i + 1) % fanout == 0  # this save completes a tier: it writes the tier pack, not its own
        supersedes = merges  # ... and deletes the packs it merged
        want = (3 if i % 4 == 3 else 2) + (1 if (i + 1) % 16 == 0 else 0)  # log segment
        assert d.counts["PUT"] == want, (i, d)
        # a save that merged checks the run's fork pin (one HEAD) before deleting what it merged
        # (docs/format.md §10); no other read
        assert d.counts["GET"] == d.counts["LIST"] == 0 and d.counts["HEAD"] == (1 if supersedes else 0), (i, d)
        assert d.counts["DELETE"] == (1 if supersedes else 0), (i, d)
        assert d.bytes_down == 0 and 0 < d.bytes_up, (i, d)
        if not merges:
            assert d.bytes_up < 4096, (i, d)
        assert sorted(wire) == sorted(["PutObject"] * d.counts["PUT"] + ["DeleteObjects"] * d.counts["DELETE"]
                                      + ["HeadObject"] * d.counts["HEAD"]), (i, wire)

    # a manager in another process resumes with latest(); from then on its saves cost the same
    other = CheckpointManager(same_place(store))
    ops = _wire_ops(other.store)
    msgs = other.latest("r").messages
    for i in range(20, 30):
        msgs = msgs + turn(i)
        before = other.store.stats.snapshot()
        ops.clear()
        other.save("r", msgs)
        d = other.store.stats.since(before)
        merges = (i + 1) % fanout == 0
        # a merging save PUTs its tier pack instead of its own pack (docs/format.md §18)
        assert d.counts["PUT"] == 2 + ((i + 1) % 16 == 0) and d.counts["GET"] == d.counts["LIST"] == 0, (i, d, ops)
        assert d.total() == d.counts["PUT"] + d.counts["DELETE"] + d.counts["HEAD"] and d.counts["DELETE"] == merges, (i, d, ops)
        assert d.counts["HEAD"] == merges, (i, d, ops)  # the fork pin check of a merging save
    assert CheckpointManager(same_place(store)).latest("r").messages == msgs


def _build_runs(lengths: dict[str, int]) -> MemoryStore:
    mem = MemoryStore()
    b = CheckpointManager(mem)
    for run, n in lengths.items():
        msgs = [{"role": "system", "content": "s"}]
        for i in range(n):
            msgs = msgs + turn(i, size=60)
            b.save(run, msgs, step=i)
    return mem


def test_list_limit_costs_o_k_gets(store):
    copy_into(_build_runs({"short": 30, "long": 200}), store)
    for k in (1, 3, 5, 10, 20, 28):
        got = {}
        for run in ("short", "long"):
            mgr = CheckpointManager(same_place(store))
            mgr.repo  # opening reads the config: not part of list()
            before = mgr.store.stats.snapshot()
            out = mgr.list(run, limit=k)
            d = mgr.store.stats.since(before)
            assert len(out) == k and [s.step for s in out] == list(range(
                {"short": 29, "long": 199}[run], {"short": 29, "long": 199}[run] - k, -1))
            assert d.counts["GET"] <= k + 8, (run, k, d)
            assert d.counts["LIST"] == 1 and d.counts["PUT"] == d.counts["HEAD"] == 0
            got[run] = d.counts["GET"]
        assert got["long"] == got["short"], (k, got)  # does not grow with the run


# --- restore round trips ------------------------------------------------------------------------------

def test_restore_of_10k_messages_takes_3_round_trips_from_its_segments(store):
    """Format 2: a fresh reader of a ~420-save run (no GC) makes one LIST, one manifest GET and
    one parallel wave of GETs of the run's segments (O(log n) packs), whatever the tree depth."""
    turns_per_save = 12  # 24 messages a save: ~420 saves and packs, so nodes and messages are spread
    mem = MemoryStore()
    b = CheckpointManager(mem)
    msgs = [{"role": "system", "content": "You are an agent."}]
    while len(msgs) < 10_000:
        i = len(msgs)
        msgs = (msgs + [m for j in range(turns_per_save) for m in turn(i + j, size=150)])[:10_000]
        b.save("big", msgs)
    copy_into(mem, store)
    saves = len(b.list("big"))
    n_packs = sum(1 for k in mem._objects if k.startswith("packs/"))
    assert saves >= 400 and n_packs <= 20  # format 2: the saves' packs were merged into tier packs

    rec = RoundTrips(same_place(store))
    mgr = CheckpointManager(rec)
    mgr.repo  # opening the repository (config GET, versioning check) is a one-off per process
    rec.watch(mgr.repo)
    rec.calls.clear()
    cp = mgr.latest("big")
    assert cp.message_count == 10_000 and cp.messages == msgs

    rounds = rec.rounds()
    ls = mgr.state.views["big"].list_state
    # a read from arrays reads no spine (the next save loads it): read it here, after the count
    depth = len((ls.spine or mgr.repo.read_state(*ls.state)).levels)
    kinds = [sorted({k for k, _ in r}) for r in rounds]
    assert depth >= 3, depth
    segs = mgr.state.views["big"].head_segs
    fanout = mgr.repo.config.seg_fanout
    assert len(segs) <= (fanout - 1) * (math.log(420, fanout) + 1), len(segs)
    assert len(rounds) == 3, [(k, len(r)) for k, r in zip(kinds, rounds)]
    assert kinds[0] == ["LIST"] and kinds[1] == ["GET"] and len(rounds[1]) == 1  # head: LIST + manifest
    gets = [key for _, kind, key in rec.calls if kind == "GET"]
    assert len(gets) == len(set(gets)) <= len(segs) + 2  # the manifest, the segments, the state's pack
    assert kinds[2] == ["GET"] and len(rounds[2]) >= len(segs)
    assert rec.max_in_flight >= 2, rec.max_in_flight  # one wave: several in flight at once


def test_restore_after_gc_repack_stays_bounded(s3_inprocess_store):
    """After gc() merges a run's small packs, restoring must stay cheap: every object fetched once,
    and a bounded number of round trips (at most 3 per restore step, i.e. 3 x (depth + 3)). Tree
    nodes keep their hints to the retired packs (docs/format.md §21); the reader meets one 404,
    loads ``gc/fwd-cache`` once and from then on fetches the new packs directly (before the cache
    and the gone-pack memory, every entry re-GET its retired pack: ~930 GETs in ~670 round trips).
    """
    store = s3_inprocess_store
    mem = MemoryStore()
    Repository.init(mem, seg_fanout=0)  # segments off: per-save packs, as a format-1 repository has
    b = CheckpointManager(mem)
    msgs = [{"role": "system", "content": "You are an agent."}]
    for i in range(200):
        msgs = msgs + turn(i, size=200)
        b.save("r", msgs)
    rep = b.gc(grace_period=0)
    assert rep.repacked_packs == 200 and rep.new_packs >= 1
    copy_into(mem, store)
    assert sum(1 for k in mem._objects if k.startswith("packs/")) == rep.new_packs

    rec = RoundTrips(same_place(store))
    mgr = CheckpointManager(rec)
    mgr.repo
    rec.watch(mgr.repo)
    rec.calls.clear()
    assert mgr.latest("r").messages == msgs
    gets = [key for _, kind, key in rec.calls if kind == "GET"]
    repeated = len(gets) - len(set(gets))
    rounds = len(rec.rounds())
    ls = mgr.state.views["r"].list_state  # a read from arrays reads no spine: read it after the count
    depth = len((ls.spine or mgr.repo.read_state(*ls.state)).levels)
    assert repeated == 0 and rounds <= 3 * (depth + 3), \
        f"{len(gets)} GETs ({repeated} repeated) in {rounds} round trips; tree depth {depth}"
