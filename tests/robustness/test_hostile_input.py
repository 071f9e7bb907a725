"""Hostile input beyond crafted objects: bad settings, links out of a local repository, transport
errors from the S3 client, values too deep or too large, and the bounded decoders themselves.

Crafted repository objects under a memory limit are in ``test_crafted_repos.py``; hypothesis
properties of values and run ids in ``test_properties.py``.
"""

from __future__ import annotations

import os

import pytest
import urllib3.exceptions
import zstandard
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.errors import (IntegrityError, InvalidInputError, InvalidMessageError, ObjectNotFound,
                              PreconditionFailed, StoreError)
from snapstore.format.codec import MAX_DEPTH, check_depth, decode_json, loads_exact, zstd_decompress
from snapstore.format.manifest import MAX_MANIFEST_BODY
from snapstore.format.pack import T_CHUNK, T_NODE, Pack, PackBuilder
from snapstore.repo.repository import Repository
from snapstore.stores.local import LocalStore


def _files(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns)


# ------------------------------------------------------------------------------------------------
# settings

BAD_SETTINGS = [dict(max_items=0), dict(leaf_bits=0), dict(node_bits=13), dict(level=99), dict(level=0),
                dict(cdc_min=0), dict(cdc_avg=0), dict(cdc_max=0), dict(cdc_threshold=0),
                dict(cdc_min=1 << 20, cdc_avg=1 << 16), dict(cdc_max=1 << 30), dict(seg_fanout=1),
                dict(seg_fanout=65), dict(inline_state_max=-1), dict(dict_bytes=1 << 30), dict(level="3"),
                dict(level=3.0), dict(level=True)]


@pytest.mark.parametrize("settings", BAD_SETTINGS, ids=lambda s: ",".join(f"{k}={v!r}" for k, v in s.items()))
def test_out_of_range_settings_are_refused_on_create_and_nothing_is_written(tmp_path, settings):
    store = LocalStore(tmp_path / "repo")
    with pytest.raises(InvalidInputError) as exc:
        Repository.init(store, **settings)
    assert next(iter(settings)) in str(exc.value) or "cdc_min <= cdc_avg" in str(exc.value)
    assert not (tmp_path / "repo").exists() or _files(tmp_path / "repo") == []


def test_settings_at_the_ends_of_their_ranges_work(tmp_path):
    repo = Repository.init(LocalStore(tmp_path / "repo"), level=22, max_items=2, leaf_bits=1, node_bits=12,
                           cdc_min=64, cdc_avg=256, cdc_max=1024, cdc_threshold=64, inline_state_max=0,
                           dict_bytes=0, seg_fanout=64)
    repo.close()
    mgr = CheckpointManager(str(tmp_path / "repo"))
    msgs = [{"i": i, "text": "x" * (300 * i)} for i in range(12)]
    for n in range(1, len(msgs) + 1):
        mgr.save("r", msgs[:n], session_state={"n": n})
    again = CheckpointManager(str(tmp_path / "repo"))
    assert again.latest("r").messages == msgs and again.latest("r").session_state == {"n": 12}
    assert again.verify(read_data=True).ok


def test_cli_init_refuses_out_of_range_settings(tmp_path):
    r = CliRunner().invoke(cli, ["--repo", str(tmp_path / "repo"), "init", "--cdc-min", "0"])
    assert r.exit_code == 2 and "cdc_min" in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    assert not (tmp_path / "repo").exists() or _files(tmp_path / "repo") == []


# ------------------------------------------------------------------------------------------------
# values

def _deep(n, leaf):
    v = leaf
    for _ in range(n):
        v = [v]
    return v


@pytest.mark.parametrize("leaf", [2 ** 100, "\ud800", 1], ids=["big-int", "lone-surrogate", "int"])
def test_a_message_nested_1000_levels_is_refused_before_a_repository_is_created(tmp_path, leaf):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    with pytest.raises(InvalidMessageError, match=f"deeper than {MAX_DEPTH}"):
        mgr.save("r", [{"role": "tool", "content": _deep(1000, leaf)}])
    assert not (tmp_path / "repo").exists()
    with pytest.raises(InvalidMessageError):
        mgr.save("r", [{"ok": 1}], metadata=_deep(1000, leaf))
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("leaf", [2 ** 100, "\ud800", 1], ids=["big-int", "lone-surrogate", "int"])
def test_a_message_at_the_depth_limit_round_trips(tmp_path, leaf):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    msg = _deep(MAX_DEPTH, leaf)
    cid = mgr.save("r", [msg], session_state=_deep(MAX_DEPTH, leaf), metadata=_deep(MAX_DEPTH, leaf))
    cp = CheckpointManager(str(tmp_path / "repo")).get("r", cid)
    assert cp.messages == [msg] and cp.session_state == msg and cp.metadata == msg


def test_fields_too_large_for_a_manifest_are_refused_and_nothing_is_stored(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    mgr.save("r", [{"m": 1}])
    before = _files(tmp_path / "repo")
    with pytest.raises(InvalidInputError, match="manifest holds at most"):
        mgr.save("r", [{"m": 1}, {"m": 2}], metadata={"blob": "x" * MAX_MANIFEST_BODY})
    assert _files(tmp_path / "repo") == before
    assert mgr.latest("r").messages == [{"m": 1}]


# ------------------------------------------------------------------------------------------------
# bounded decoders

def test_zstd_decompress_is_bounded_whatever_the_frame_claims():
    small = zstandard.ZstdCompressor(write_content_size=True).compress(b"a" * 1000)
    assert zstd_decompress("k", small, 1000) == b"a" * 1000
    with pytest.raises(IntegrityError, match="more than 999"):
        zstd_decompress("k", small, 999)
    with pytest.raises(IntegrityError, match="recorded"):
        zstd_decompress("k", small, 10_000, expected=999)
    with pytest.raises(IntegrityError, match="expected 1001"):
        zstd_decompress("k", small, 10_000, expected=1001)
    with pytest.raises(IntegrityError, match="claims"):
        zstd_decompress("k", small, 10_000, expected=1 << 40)
    # a frame whose header claims 1 TiB allocates nothing up front
    f = zstandard.ZstdCompressor(write_content_size=False).compress(b"{}")
    claim = f[:4] + bytes([0xC0 | (f[4] & 0x04)]) + f[5:6] + (1 << 40).to_bytes(8, "little") + f[6:]
    with pytest.raises(IntegrityError) as exc:
        zstd_decompress("runs/x/m/y", claim, 1 << 20)
    assert exc.value.key == "runs/x/m/y"
    # a frame that really inflates to 256 MiB stops at the limit
    cobj = zstandard.ZstdCompressor(level=1).compressobj()
    bomb = b"".join(cobj.compress(bytes(1 << 20)) for _ in range(256)) + cobj.flush()
    with pytest.raises(IntegrityError, match="more than 4194304"):
        zstd_decompress("k", bomb, 4 << 20)
    for bad in (b"", b"garbage!", small[: len(small) // 2]):
        with pytest.raises(IntegrityError):
            zstd_decompress("k", bad, 100, expected=1000)


def test_json_depth_check_is_iterative_and_ignores_brackets_in_strings():
    check_depth(b'["' + b"[" * 10_000 + b'"]', 2)
    check_depth(b'["\\"' + b"[" * 10_000 + b'"]', 2)
    with pytest.raises(ValueError, match="deeper than 3"):
        check_depth(b'[[[["x"]]]]', 3)
    check_depth(b'[[["x\\\\"]]]', 3)
    with pytest.raises(ValueError):
        loads_exact(b"[" * 100_000 + b"]" * 100_000)
    for raw, exact in ((b"[" * 100_000, True), (b"[" * 100_000, False), (b"\xff\xfe", False), (b"{", True)):
        with pytest.raises(IntegrityError) as exc:
            decode_json(raw, exact, "message 00 (hinted in packs/00/00)")
        assert "message 00" in str(exc.value)


def test_pack_blocks_split_past_the_block_limit_and_read_back():
    pb = PackBuilder(b"\x01" * 8)
    chunks = [os.urandom(300) for _ in range(10)]
    for i, c in enumerate(chunks):
        pb.add(T_CHUNK, bytes([i]) * 16, c)
    pb.add(T_NODE, b"\xee" * 16, b"node")
    data, _ = pb.build(block_max=1000)
    p = Pack.parse("packs/01/0101010101010101", data, b"\x01" * 8)
    assert len(p.blocks) == 5 and all(b.rawlen <= 1000 for b in p.blocks)
    for i, c in enumerate(chunks):
        assert p.entry_bytes(p.entries[(T_CHUNK, bytes([i]) * 16)]) == c
    pb = PackBuilder(b"\x01" * 8)
    pb.add(T_CHUNK, b"\x00" * 16, b"x" * 2000)
    with pytest.raises(InvalidInputError):
        pb.build(block_max=1000)


# ------------------------------------------------------------------------------------------------
# links in a local repository

def test_local_store_never_follows_links_out_of_its_root(tmp_path):
    root, outside = tmp_path / "repo", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"outside data")
    store = LocalStore(root)
    store.put("runs/a/m/0001", b"inside")
    # a linked file: reads refuse it, naming the key
    os.symlink(outside / "secret", root / "runs" / "a" / "m" / "0002")
    for op in (store.get, store.head):
        with pytest.raises(IntegrityError) as exc:
            op("runs/a/m/0002")
        assert exc.value.key == "runs/a/m/0002"
    # a linked directory: reads, writes and deletes refuse to go through it; listings skip it
    os.symlink(outside, root / "packs")
    with pytest.raises(IntegrityError):
        store.get("packs/secret")
    with pytest.raises(IntegrityError):
        store.head("packs/secret")
    with pytest.raises(StoreError, match="symbolic link"):
        store.put("packs/new", b"x")
    with pytest.raises(StoreError, match="symbolic link"):
        store.delete_many(["packs/secret"])
    with pytest.raises(StoreError, match="symbolic link"):
        store.put_if_match("packs/secret", b"x", "etag")
    assert [i.key for i in store.list("packs/")] == []
    assert "packs" not in list(store.list_dirs(""))
    assert sorted(os.listdir(outside)) == ["secret"] and (outside / "secret").read_bytes() == b"outside data"
    # a linked parent further up
    os.symlink(outside, root / "runs" / "b")
    with pytest.raises(IntegrityError):
        store.get("runs/b/secret")
    with pytest.raises(StoreError):
        store.put("runs/b/m/x", b"x")
    assert sorted(os.listdir(outside)) == ["secret"]
    # a linked file is listed (so reading it reports it); a linked directory is not entered
    assert [i.key for i in store.list("runs/")] == ["runs/a/m/0001", "runs/a/m/0002"]
    assert [i.key for i in store.list("runs/b/")] == []
    assert store.get("runs/a/m/0001") == b"inside"


def test_a_linked_root_is_the_users_choice(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    mgr = CheckpointManager(str(tmp_path / "link"))
    mgr.save("r", [{"m": 1}])
    assert CheckpointManager(str(tmp_path / "link")).latest("r").messages == [{"m": 1}]
    assert (real / "config").exists()


# ------------------------------------------------------------------------------------------------
# transport errors from the S3 client

@pytest.fixture
def s3():
    from tests.helpers.s3_fixtures import _inprocess_store

    store, mock = _inprocess_store()
    yield store
    store.close()
    mock.stop()


def _reset():
    return urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


def test_a_connection_reset_after_the_put_landed_is_resolved_by_reading_back(s3):
    real = s3._client.put_object
    calls = []

    def put_then_reset(**kw):
        calls.append(kw["Key"])
        real(**kw)
        raise _reset()

    s3._client.put_object = put_then_reset
    info = s3.put("packs/aa/aaaaaaaaaaaaaaaa", b"data")
    assert info.size == 4 and s3.get("packs/aa/aaaaaaaaaaaaaaaa") == b"data" and len(calls) == 1


@pytest.mark.parametrize("exc", [_reset, lambda: ConnectionResetError(104, "reset"),
                                 lambda: urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out")])
def test_transport_errors_surface_as_store_errors_naming_operation_and_key(s3, exc):
    def fail(**kw):
        raise exc()

    s3.put("runs/x/m/0", b"v")
    s3._client.put_object = fail
    with pytest.raises(StoreError) as e:
        s3.put("runs/x/m/1", b"v")
    assert "PutObject" in str(e.value) and "runs/x/m/1" in str(e.value)
    s3._client.get_object = fail
    with pytest.raises(StoreError) as e:
        s3.get("runs/x/m/0")
    assert "GetObject" in str(e.value) and "runs/x/m/0" in str(e.value)
    s3._client.list_objects_v2 = fail
    with pytest.raises(StoreError) as e:
        list(s3.list("runs/"))
    assert "ListObjectsV2" in str(e.value)
    s3._client.head_object = fail
    with pytest.raises(StoreError) as e:
        s3.head("runs/x/m/0")
    assert "HeadObject" in str(e.value) and "runs/x/m/0" in str(e.value)
    s3._client.delete_objects = fail
    with pytest.raises(StoreError) as e:
        s3.delete_many(["runs/x/m/0"])
    assert "DeleteObjects" in str(e.value)


def test_a_save_whose_connection_resets_raises_a_store_error_and_can_be_retried(s3):
    mgr = CheckpointManager(s3)
    mgr.save("r", [{"m": 1}])
    real = s3._client.put_object
    state = {"fail": True}

    def flaky(**kw):
        if state["fail"] and "/m/" in kw["Key"]:
            raise _reset()  # the manifest PUT never left: nothing published
        return real(**kw)

    s3._client.put_object = flaky
    with pytest.raises(StoreError, match="PutObject"):
        mgr.save("r", [{"m": 1}, {"m": 2}])
    state["fail"] = False
    mgr.save("r", [{"m": 1}, {"m": 2}])
    assert CheckpointManager(s3).latest("r").messages == [{"m": 1}, {"m": 2}]


def test_missing_objects_and_conflicts_keep_their_classes(s3):
    with pytest.raises(ObjectNotFound):
        s3.get("runs/none")
    s3.put("k", b"1")
    with pytest.raises(PreconditionFailed):
        s3.put("k", b"2")
