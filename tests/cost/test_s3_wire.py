"""S3 requests as they are on the wire (moto's HTTP server behind a recording TCP proxy).

* Small PUTs (``put``, ``put_if_match``, a whole checkpoint save) carry no ``Expect: 100-continue``,
  so each costs one round trip; conditional writes still carry and honour ``If-None-Match: *`` /
  ``If-Match``.
* Bodies at or above ``expect_continue_threshold`` (1 MiB) and multipart parts keep the header;
  ``expect_continue_threshold=0`` restores botocore's behaviour.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import boto3
import pytest

from snapstore import CheckpointManager
from snapstore.errors import PreconditionFailed
from snapstore.stores.s3 import S3Store

from tests.helpers.s3_fixtures import _http_store
from tests.helpers.wire_proxy import RecordingProxy

MiB = 1024 * 1024


@pytest.fixture
def proxy(moto_server):
    parts = urlsplit(moto_server)
    p = RecordingProxy(parts.hostname, parts.port)
    try:
        yield p
    finally:
        p.close()


def wire_store(moto_server: str, proxy: RecordingProxy, **kw) -> S3Store:
    """A store on a fresh moto bucket whose requests go through ``proxy``."""
    base = _http_store(moto_server)  # creates the bucket
    base.close()
    return S3Store(base.bucket, endpoint_url=proxy.endpoint, region_name="us-east-1",
                   addressing_style="path", **kw)


def puts(proxy: RecordingProxy) -> list:
    return [r for r in proxy.requests() if r.method == "PUT"]


def test_small_puts_have_no_expect_and_conditions_still_hold(moto_server, proxy):
    store = wire_store(moto_server, proxy)
    try:
        info = store.put("a/small", b"x" * 100)
        with pytest.raises(PreconditionFailed):
            store.put("a/small", b"y")                              # create-only still refused
        new = store.put_if_match("a/small", b"z" * 200, info.etag)  # compare-and-swap succeeds
        with pytest.raises(PreconditionFailed):
            store.put_if_match("a/small", b"w", info.etag)          # stale ETag refused
        with pytest.raises(PreconditionFailed):
            store.put_if_match("a/small", b"w", None)               # "only if absent" refused
        store.put_if_match("a/other", b"v", None)                   # ... and honoured when absent
        assert store.get("a/small") == b"z" * 200 and store.get("a/other") == b"v"

        sent = puts(proxy)
        assert len(sent) == 6
        for r in sent:
            assert "expect" not in r.headers, r.headers
        conds = [(r.headers.get("if-none-match"), r.headers.get("if-match")) for r in sent]
        assert conds == [("*", None), ("*", None), (None, info.etag), (None, info.etag),
                         ("*", None), ("*", None)]
        assert [r.body_len for r in sent] == [100, 1, 200, 1, 1, 1]
        assert new.etag != info.etag
    finally:
        store.close()


def test_large_bodies_and_multipart_parts_keep_expect(moto_server, proxy):
    store = wire_store(moto_server, proxy, multipart_threshold=6 * MiB, multipart_chunksize=5 * MiB)
    try:
        store.put("big/just-below", b"a" * (MiB - 1))
        store.put("big/threshold", b"b" * MiB)
        data = bytes(range(256)) * (11 * MiB // 256)   # 11 MiB: parts of 5, 5 and 1 MiB
        store.put("big/multipart", data)
        assert store.get("big/multipart") == data
        with pytest.raises(PreconditionFailed):
            store.put("big/multipart", data)           # precondition on CompleteMultipartUpload

        by_path = {}
        for r in puts(proxy):
            by_path.setdefault(r.path.split("?")[0].rsplit("/", 1)[1], []).append(r)
        assert "expect" not in by_path["just-below"][0].headers
        assert by_path["threshold"][0].headers.get("expect") == "100-continue"
        parts = [r for r in by_path["multipart"] if "partNumber=" in r.path]
        assert len(parts) == 6 and all(r.body_len >= MiB for r in parts)
        assert all(r.headers.get("expect") == "100-continue" for r in parts)
    finally:
        store.close()


def test_threshold_zero_keeps_botocore_default(moto_server, proxy):
    store = wire_store(moto_server, proxy, expect_continue_threshold=0)
    try:
        store.put("k", b"x")
        assert puts(proxy)[0].headers.get("expect") == "100-continue"
    finally:
        store.close()


def test_threshold_from_url_and_validated(moto_server, proxy):
    base = _http_store(moto_server)
    base.close()
    store = S3Store.from_url(f"s3://{base.bucket}/p?endpoint_url={proxy.endpoint}&region=us-east-1"
                             f"&addressing_style=path&expect_continue_threshold=10")
    try:
        store.put("k1", b"x" * 9)
        store.put("k2", b"x" * 10)
        sent = puts(proxy)
        assert ["expect" in r.headers for r in sent] == [False, True]
    finally:
        store.close()
    from snapstore.errors import InvalidInputError
    with pytest.raises(InvalidInputError):
        S3Store("bucket", expect_continue_threshold=-1)


def test_checkpoint_save_sends_no_expect(moto_server, proxy):
    store = wire_store(moto_server, proxy)
    mgr = CheckpointManager(store)
    try:
        msgs = [{"role": "user", "content": "hi"}]
        for i in range(4):  # the 4th save merges a tier (format 2): measure a save that does not
            msgs = msgs + [{"role": "assistant", "content": f"step {i} " * 50}]
            mgr.save("run", msgs, step=i)
        proxy.clear()
        msgs = msgs + [{"role": "assistant", "content": "last"}]
        mgr.save("run", msgs, step=4)
        sent = proxy.requests()
        assert [r.method for r in sent] == ["PUT", "PUT"]   # pack + manifest, one round trip each
        assert all("expect" not in r.headers and r.headers.get("if-none-match") == "*" for r in sent)
        assert mgr.latest("run").messages == msgs
    finally:
        mgr.close()


# ---------------------------------------------------------------------------------------------
# connection pool


@pytest.mark.parametrize("pool", [None, 32])
def test_pool_holds_a_64_request_wave(moto_server, caplog, pool):
    """A restore-sized wave (64 GETs at once, each held 0.5 s by the proxy so that they overlap)
    fits the default pool (128): (nearly) all 64 are in flight together and urllib3 throws no connection
    away. The old default (32) overflowed: urllib3 discards connections ("Connection pool is
    full"), and on real S3 each discarded keep-alive connection costs a new TCP+TLS handshake.
    (moto closes every connection after one response, so reuse itself is not observable here.)"""
    parts = urlsplit(moto_server)
    slow = RecordingProxy(parts.hostname, parts.port, delay=0.5)
    store = wire_store(moto_server, slow, **({} if pool is None else {"max_pool_connections": pool}))
    moto = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    try:
        assert store.max_concurrency == (pool or 128) == store._client.meta.config.max_pool_connections
        keys = [f"packs/{i:02x}/{i:016x}" for i in range(64)]
        for k in keys:
            moto.put_object(Bucket=store.bucket, Key=k, Body=k.encode())
        caplog.set_level("WARNING", logger="urllib3.connectionpool")
        assert store.get_many(keys, max_workers=64) == {k: k.encode() for k in keys}
        assert slow.max_active > 40    # far more in flight than the old pool held (timing: not all 64)
        assert ("Connection pool is full" in caplog.text) == (pool == 32)
    finally:
        store.close()
        slow.close()
