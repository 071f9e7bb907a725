"""pytest fixtures and helpers for S3 (moto) and the other object stores.

Import into ``conftest.py`` with ``from s3_fixtures import *``.

Fixtures:
    moto_server: session-scoped moto HTTP server on 127.0.0.1 (random port); yields its endpoint URL.
        Sets dummy AWS credentials/region in the environment for the session.
    s3_inprocess_store: an :class:`S3Store` on a fresh bucket inside moto's in-process ``mock_aws``
        (under the key prefix ``repo``, so prefix handling is always exercised).
    s3_http_store: an :class:`S3Store` on a fresh bucket of the moto HTTP server (path-style, no prefix).
    store_factory: ``store_factory(kind)`` -> a store made by :func:`make_store`, closed at teardown.

Helpers:
    make_store(kind, tmp_path): a store of kind ``memory``, ``local``, ``s3`` or ``s3-http``.
    new_bucket_name(): a unique valid bucket name.
    seed_objects(store, keys): create empty objects fast through moto's backend.
    iam_user(endpoint, bucket, prefix) / client_with(endpoint, key_id, secret): an IAM user holding
        infra/aws/iam-policy.json, and an S3 client signing as it.

moto facts to keep in mind (moto 5.x):
    * The threaded server runs in this process and shares moto's global backends with ``mock_aws``.
      Entering or leaving ``mock_aws`` RESETS all moto state, including the HTTP server's buckets, so
      every fixture here creates its bucket per test, after any ``mock_aws`` has started.
    * IAM is only enforced while ``moto.core.authorization.enable_iam_authentication()`` is active (the
      in-process equivalent of starting the server with ``INITIAL_NO_AUTH_ACTION_COUNT=0``); it is
      process-wide, so it also applies to the HTTP server.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import uuid

import pytest

__all__ = ["moto_server", "s3_inprocess_store", "s3_http_store", "store_factory", "make_store",
           "new_bucket_name", "start_moto_server", "DUMMY_ENV", "STORE_KINDS"]
# (the star import in conftest.py takes only these; import the other helpers by name)

#: Dummy credentials/region for moto. Never real secrets.
DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}
#: Environment variables that could point boto3 at a real account or endpoint; cleared for tests.
_UNSET_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
STORE_KINDS = ("memory", "local", "sqlite", "s3", "s3-http")

_counter = itertools.count()
_server_lock = threading.Lock()
_server = None  # (ThreadedMotoServer, endpoint_url)


def new_bucket_name() -> str:
    """Return a unique, valid S3 bucket name."""
    return f"snapstore-test-{next(_counter)}-{uuid.uuid4().hex[:8]}"


def _dummy_env(mp: pytest.MonkeyPatch) -> None:
    for k, v in DUMMY_ENV.items():
        mp.setenv(k, v)
    for k in _UNSET_ENV:
        mp.delenv(k, raising=False)


_atomic_lock = threading.RLock()
_atomic_done = False


def make_moto_conditional_writes_atomic() -> None:
    """Make moto's conditional PUTs (If-None-Match / If-Match) atomic, as they are on S3.

    moto checks the condition and then stores the object in two steps without a lock, so two
    threads of one client can both win a create-only PUT of one key (seen once in CI: 11 winners
    for 10 keys). Real S3 serialises conditional writes per key. Serialising moto's PutObject and
    CompleteMultipartUpload handlers behind one process lock restores that guarantee and changes
    nothing else: the client side under test (headers sent, 412/409 mapped to PreconditionFailed,
    retries) still runs concurrently. Idempotent; call before any request.
    """
    global _atomic_done
    with _atomic_lock:
        if _atomic_done:
            return
        import functools

        from moto.s3.responses import S3Response

        for name in ("put_object", "_key_response_post"):
            original = getattr(S3Response, name)

            def serialised(self, *a, __original=original, **kw):
                with _atomic_lock:
                    return __original(self, *a, **kw)

            setattr(S3Response, name, functools.wraps(original)(serialised))
        _atomic_done = True


def start_moto_server() -> str:
    """Start (once per process) moto's threaded HTTP server on 127.0.0.1 and return its endpoint URL."""
    global _server
    with _server_lock:
        if _server is None:
            from moto.server import ThreadedMotoServer

            make_moto_conditional_writes_atomic()

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request access log
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            host, port = server.get_host_and_port()
            _server = (server, f"http://{host}:{port}")
        return _server[1]


def _stop_moto_server() -> None:
    global _server
    with _server_lock:
        if _server is not None:
            _server[0].stop()
            _server = None


def _http_store(endpoint: str, **kwargs):
    import boto3

    from snapstore.stores.s3 import S3Store

    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                 aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
                 aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
                 ).create_bucket(Bucket=bucket)
    kwargs.setdefault("region_name", "us-east-1")
    kwargs.setdefault("addressing_style", "path")
    return S3Store(bucket, endpoint_url=endpoint, **kwargs)


def _inprocess_store(prefix: str = "repo", **kwargs):
    """Start a ``mock_aws`` and return (store, mock); the caller stops the mock."""
    import boto3
    from moto import mock_aws

    make_moto_conditional_writes_atomic()

    from snapstore.stores.s3 import S3Store

    mock = mock_aws()
    mock.start()
    try:
        bucket = new_bucket_name()
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
        kwargs.setdefault("region_name", "us-east-1")
        store = S3Store(bucket, prefix, **kwargs)
    except BaseException:
        mock.stop()
        raise
    return store, mock


def make_store(kind: str, tmp_path, **kwargs):
    """Return a fresh, empty store of ``kind``.

    Args:
        kind: ``"memory"`` (MemoryStore), ``"local"`` (LocalStore under ``tmp_path/store``),
            ``"sqlite"`` (SqliteStore on ``tmp_path/store.db``), ``"s3"``
            (S3Store in moto's in-process ``mock_aws``, prefix ``repo``) or ``"s3-http"`` (S3Store on a
            fresh bucket of the process-wide moto HTTP server).
        tmp_path: a directory for the local store (pytest's ``tmp_path``).
        **kwargs: extra constructor arguments for the store.
    Close the store when done (``store_factory`` does it for you): for ``"s3"`` that also stops the
    ``mock_aws`` it started, which would otherwise stay active for later tests.
    Environment: sets dummy AWS credentials if none are set (for the S3 kinds).
    """
    if kind == "memory":
        from snapstore.stores.memory import MemoryStore

        return MemoryStore(**kwargs)
    if kind == "local":
        from snapstore.stores.local import LocalStore

        return LocalStore(os.path.join(os.fspath(tmp_path), "store"), **kwargs)
    if kind == "sqlite":
        from snapstore.stores.sqlite import SqliteStore

        os.makedirs(os.fspath(tmp_path), exist_ok=True)
        return SqliteStore(os.path.join(os.fspath(tmp_path), "store.db"), **kwargs)
    if kind in ("s3", "s3-http"):
        for k, v in DUMMY_ENV.items():
            os.environ.setdefault(k, v)
    if kind == "s3":
        store, mock = _inprocess_store(**kwargs)
        close = store.close
        stopped = []

        def close_and_stop() -> None:
            close()
            if not stopped:
                stopped.append(True)
                mock.stop()

        store.close = close_and_stop
        return store
    if kind == "s3-http":
        return _http_store(start_moto_server(), **kwargs)
    raise ValueError(f"unknown store kind {kind!r}; expected one of {STORE_KINDS}")


@pytest.fixture(scope="session")
def moto_server():
    """moto's HTTP server on 127.0.0.1 (random free port) for the session; yields the endpoint URL."""
    mp = pytest.MonkeyPatch()
    _dummy_env(mp)
    try:
        yield start_moto_server()
    finally:
        _stop_moto_server()
        mp.undo()


@pytest.fixture
def s3_inprocess_store(monkeypatch):
    """An S3Store (prefix ``repo``) on a fresh bucket in moto's in-process ``mock_aws``."""
    _dummy_env(monkeypatch)
    store, mock = _inprocess_store()
    try:
        yield store
    finally:
        store.close()
        mock.stop()


@pytest.fixture
def s3_http_store(moto_server, monkeypatch):
    """An S3Store (path-style, no prefix) on a fresh bucket of the moto HTTP server."""
    _dummy_env(monkeypatch)
    store = _http_store(moto_server)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def store_factory(tmp_path, monkeypatch):
    """``store_factory(kind, **kwargs)`` -> :func:`make_store` result; every store is closed at teardown."""
    _dummy_env(monkeypatch)
    made = []

    def factory(kind: str, **kwargs):
        store = make_store(kind, tmp_path / f"s{len(made)}", **kwargs)
        made.append(store)
        return store

    try:
        yield factory
    finally:
        for store in reversed(made):
            store.close()


def repo_clients(request, tmp_path, store_factory):
    """For a test's ``repo`` fixture: ``open_one(kind)`` -> a new store object on one repository of
    that kind (``"local"``: a directory under ``tmp_path``; ``"s3-http"``: one bucket of moto's HTTP
    server). Each call is another client of the same repository, as another machine would have."""
    made = {}

    def open_one(kind):
        if kind == "local":
            from snapstore.stores import LocalStore
            return LocalStore(tmp_path / "repo", fsync=False)
        from snapstore.stores.s3 import S3Store
        if "bucket" not in made:
            first = store_factory("s3-http")
            made["bucket"] = first.bucket
            return first
        s = S3Store(made["bucket"], endpoint_url=start_moto_server(), region_name="us-east-1", addressing_style="path")
        request.addfinalizer(s.close)
        return s
    return open_one


def serialise_creates(*stores):
    """moto's create-only PUTs are not atomic under concurrent requests: serialise them (real S3
    is atomic) so that two managers racing on moto test snapstore, not moto."""
    lock = threading.Lock()
    for s in stores:
        put = s.put

        def locked(key, data, _put=put):
            with lock:
                return _put(key, data)
        s.put = locked


def seed_objects(store, keys) -> None:
    """Create empty objects ``keys`` (store keys, below the store's prefix) in an S3Store's bucket
    through moto's backend, without one PutObject request each (for tests of listing and deleting
    thousands of keys; PutObject itself is tested in the store contract). ``store``: an S3Store on
    moto (in process or the HTTP server of this process)."""
    def raw(k):
        return f"{store.prefix}/{k}" if store.prefix else k
    try:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        for k in keys:
            backend.put_object(store.bucket, raw(k), b"")
    except (ImportError, KeyError, AttributeError, TypeError):  # moto internals moved: slow path
        for k in keys:
            store._client.put_object(Bucket=store.bucket, Key=raw(k), Body=b"")


def iam_user(endpoint: str, bucket: str, prefix: str) -> dict:
    """Create an IAM user (on moto at ``endpoint``) holding ``infra/aws/iam-policy.json`` for
    ``bucket``/``prefix``; returns its access key (``AccessKeyId``, ``SecretAccessKey``, ...)."""
    import boto3

    from tests.helpers.paths import ROOT

    policy = (ROOT / "infra/aws/iam-policy.json").read_text()
    policy = policy.replace("YOUR-BUCKET", bucket).replace("YOUR-PREFIX", prefix)
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1")
    user = f"snapstore-{new_bucket_name()}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="snapstore", PolicyDocument=policy)
    return iam.create_access_key(UserName=user)["AccessKey"]


def client_with(endpoint: str, key_id: str, secret: str):
    """A boto3 S3 client for ``endpoint`` (us-east-1) signing with the given access key."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key_id, aws_secret_access_key=secret)
