"""S3 backend: :class:`S3Store`, an :class:`~snapstore.stores.base.ObjectStore` on any S3-compatible service.

Works with AWS S3, MinIO, Cloudflare R2, Ceph RGW and moto: anything that implements conditional
writes (``If-None-Match: *`` and ``If-Match: <etag>`` on PutObject and CompleteMultipartUpload).

How the protocol maps onto S3:

* ``put`` -> PutObject with ``If-None-Match: *`` (create-only); ``put_if_match`` -> PutObject with
  ``If-Match: <etag>`` (or ``If-None-Match: *`` when ``etag`` is None). A 412 becomes
  :class:`~snapstore.errors.PreconditionFailed`; for ``put_if_match`` a 404 (the object to replace is
  gone) does too. A 409 ``ConditionalRequestConflict`` (a concurrent conditional write raced ours) is
  retried a bounded number of times with jittered exponential backoff, then becomes
  PreconditionFailed.
* Lost responses: botocore retries a PutObject whose response was lost (read timeout, connection
  reset). If the first attempt had in fact landed, the retry sees 412. Every write stamps a random
  write id in ``x-amz-meta-snapstore-write-id``; a 412 after any retried/ambiguous attempt is resolved
  by a HEAD: if the object carries our write id the write is ours and ``put`` succeeds.
* Objects larger than ``multipart_threshold`` (64 MiB) go up as a multipart upload whose
  CompleteMultipartUpload carries the same precondition; a failed upload is aborted. On 409 the
  whole upload is re-initiated (as AWS documents).
* ``Expect: 100-continue``: botocore adds it to every PutObject/UploadPart, which costs a round trip
  (the body waits for the server's ``100 Continue``). The client this store builds drops it from
  bodies smaller than ``expect_continue_threshold`` (1 MiB) with a ``before-sign`` hook on that
  client only, so a save is one round trip per PUT; larger bodies and multipart parts keep it (the
  server can refuse them before the body is sent).
* ``list`` -> ListObjectsV2, ``MaxKeys`` capped at 1,000 by this client (moto accepts more; AWS does
  not); ``limit=1`` is one request with ``MaxKeys=1``. ``list_dirs`` -> ListObjectsV2 with
  ``Delimiter="/"``. ``delete_many`` -> DeleteObjects in quiet mode, at most 1,000 keys a request.

Configuration follows the standard AWS chain through :class:`boto3.Session`: ``AWS_PROFILE``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_REGION``/
``AWS_DEFAULT_REGION``, shared config/credentials files, instance/container roles, and
``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` (read by botocore when no ``endpoint_url`` is given),
``AWS_REQUEST_CHECKSUM_CALCULATION`` (set ``when_required`` for older S3-compatible servers that reject
the CRC32 checksums boto3 >= 1.36 sends by default).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from ..errors import (
    AccessDenied,
    BucketNotFound,
    CredentialsError,
    InvalidInputError,
    ObjectNotFound,
    ObjectTooLarge,
    PreconditionFailed,
    StoreError,
)
from .base import Leftover, ObjectInfo, RequestStats, check_key, check_range, check_whole_read, slice_range

__all__ = ["S3Store", "WRITE_ID_METADATA", "MAX_KEYS_PER_PAGE", "MAX_KEYS_PER_DELETE",
           "DEFAULT_MAX_POOL_CONNECTIONS"]

#: Metadata key (``x-amz-meta-<this>``) holding the random id of the write that created an object.
WRITE_ID_METADATA = "snapstore-write-id"
#: ListObjectsV2 returns at most this many keys a page on AWS; enforced client-side.
MAX_KEYS_PER_PAGE = 1000
#: DeleteObjects accepts at most this many keys on AWS; enforced client-side.
MAX_KEYS_PER_DELETE = 1000
#: Default HTTP connection pool size of a store-built client (= its ``max_concurrency``).
DEFAULT_MAX_POOL_CONNECTIONS = 128

_MiB = 1024 * 1024
_MAX_PARTS = 10_000
_MIN_PART = 5 * _MiB

_CREDENTIAL_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
    "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId", "UnrecognizedClientException",
    "AuthorizationHeaderMalformed", "MissingSecurityHeader", "InvalidSecurity",
}
_ACCESS_CODES = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidObjectState"}
_NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
_URL_OPTIONS = {
    "endpoint_url": "endpoint_url", "endpoint": "endpoint_url",
    "region": "region_name", "region_name": "region_name",
    "profile": "profile_name", "profile_name": "profile_name",
    "addressing_style": "addressing_style",
    "sse": "sse", "sse_kms_key_id": "sse_kms_key_id",
    "max_attempts": "max_attempts", "retry_mode": "retry_mode",
    "max_pool_connections": "max_pool_connections",
    "multipart_threshold": "multipart_threshold", "multipart_chunksize": "multipart_chunksize",
    "connect_timeout": "connect_timeout", "read_timeout": "read_timeout",
    "expect_continue_threshold": "expect_continue_threshold",
    "call_timeout": "call_timeout",
}
_INT_OPTIONS = {"max_attempts", "max_pool_connections", "multipart_threshold", "multipart_chunksize",
                "expect_continue_threshold"}
_FLOAT_OPTIONS = {"connect_timeout", "read_timeout", "call_timeout"}

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one store call (one ``get``, ``put``, ``head``, one LIST page...) may take at most,
botocore's retries included, by default (the ``call_timeout`` option)."""


def _retry_sleep_bound(attempts: int) -> float:
    """The most seconds botocore's standard and adaptive retry modes sleep between ``attempts``
    attempts of one request (a random share of ``2^i`` seconds before retry ``i``, capped at 20)."""
    return float(sum(min(20, 2 ** i) for i in range(1, attempts)))


def attempts_within(call_timeout: float, connect_timeout: float, read_timeout: float, retries: int) -> int:
    """How many attempts in all (at least 1, at most ``retries + 1``) one request may make so that
    all of them, each waiting at most ``connect_timeout + read_timeout`` seconds, and the sleeps
    between them fit in ``call_timeout`` seconds."""
    n = max(1, retries + 1)
    while n > 1 and n * (connect_timeout + read_timeout) + _retry_sleep_bound(n) > call_timeout:
        n -= 1
    return n


def _expect_continue_hook(threshold: int):
    """A botocore ``before-sign`` handler that removes ``Expect: 100-continue`` from requests whose
    body is smaller than ``threshold`` bytes (bodies of unknown length keep it)."""
    from botocore.utils import determine_content_length

    def drop_expect(request: Any, **_: Any) -> None:
        headers = request.headers
        if "Expect" not in headers:
            return
        body = request.body
        if body is None:
            size = 0
        elif isinstance(body, (bytes, bytearray, memoryview)):
            size = len(body)
        else:
            try:
                size = determine_content_length(body)
            except Exception:  # noqa: BLE001 - an odd body: keep botocore's default
                size = None
        if size is not None and size < threshold:
            del headers["Expect"]

    return drop_expect


_TRANSPORT: tuple | None = None


def _transport() -> tuple:
    """Exception classes a request can fail with without an S3 error response: botocore's own,
    and what urllib3, http.client and the socket layer raise when botocore does not wrap them
    (e.g. ``urllib3.exceptions.ProtocolError`` on a connection reset). Each is mapped to a
    :mod:`snapstore.errors` class naming the operation and key (see :meth:`S3Store._error`)."""
    global _TRANSPORT
    if _TRANSPORT is None:
        import http.client

        import urllib3.exceptions
        from botocore.exceptions import BotoCoreError
        _TRANSPORT = (BotoCoreError, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)
    return _TRANSPORT


def _error_parts(exc: Exception) -> tuple[str, int, str]:
    """(error code, HTTP status, message) of a botocore ClientError."""
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error") or {}
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
    return str(err.get("Code") or status or ""), int(status), str(err.get("Message") or "").strip()


def _retry_attempts(exc_or_resp: Any) -> int:
    """How many times botocore retried the call internally (0 if unknown)."""
    resp = exc_or_resp if isinstance(exc_or_resp, dict) else (getattr(exc_or_resp, "response", None) or {})
    return int((resp.get("ResponseMetadata") or {}).get("RetryAttempts") or 0)


def _server_time(resp: dict) -> float:
    """The response's ``Date`` header (the store's clock) as epoch seconds; local time if absent."""
    date = ((resp.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
    if date:
        try:
            return email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


class S3Store:
    """An :class:`~snapstore.stores.base.ObjectStore` on an S3 bucket (optionally under a key prefix).

    Keys map to ``<prefix>/<key>`` in the bucket (just ``<key>`` when the prefix is empty). Thread-safe:
    one boto3 client is shared by all threads; ``stats`` is updated under a lock.

    Args:
        bucket: bucket name.
        prefix: key prefix inside the bucket (``"team/agents"``); leading/trailing ``/`` are ignored.
        endpoint_url: S3 endpoint (``http://127.0.0.1:9000`` for MinIO/moto); default: botocore's
            resolution (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, config file, then AWS).
        region_name: AWS region; default from the AWS config chain (``AWS_REGION`` etc.).
        profile_name: shared-config profile; default ``AWS_PROFILE`` / ``default``.
        addressing_style: ``"path"`` (MinIO, Ceph, moto), ``"virtual"`` or None (botocore decides).
        sse: server-side encryption for new objects: ``"AES256"`` (SSE-S3) or ``"aws:kms"`` (SSE-KMS);
            None: the bucket default.
        sse_kms_key_id: KMS key id/ARN with ``sse="aws:kms"`` (None: the AWS-managed ``aws/s3`` key).
        max_attempts: how many times botocore may retry a request after the first attempt
            (transient errors, throttling, timeouts; not 409/412), as botocore's
            ``retries["max_attempts"]``; fewer when ``call_timeout`` leaves no time for them.
        retry_mode: botocore retry mode: ``"standard"``, ``"adaptive"`` or ``"legacy"``.
        max_pool_connections: HTTP connection pool size: how many requests can be in flight at
            once without opening throw-away connections; also :attr:`max_concurrency`. The default
            (128) lets a restore fetch a tree level of ~64 packs in one wave and
            ``CheckpointManager.runs()`` read 200 run heads (a LIST and a GET each) in 4 waves.
        client: a ready boto3 S3 client to use instead of building one (endpoint/region/profile/
            retry options are then ignored; the caller keeps ownership: ``close`` does not close it).
        multipart_threshold: objects strictly larger than this many bytes use multipart upload.
        multipart_chunksize: part size in bytes for multipart uploads (raised automatically so an
            object never needs more than 10,000 parts; AWS requires >= 5 MiB except the last part).
        connect_timeout: seconds to wait for a TCP/TLS connection (default 4).
        read_timeout: seconds to wait for a response on an open connection, and between two
            reads of its body (default 12).
        call_timeout: seconds one call of this store (one request, botocore's retries included)
            may wait in all (default :data:`DEFAULT_CALL_TIMEOUT`, 60): the attempts are cut to
            as many as fit (:attr:`attempts`; each waits at most ``connect_timeout +
            read_timeout``), and a call that still finds no answer raises StoreError naming the
            endpoint and what it waited for. :attr:`call_time_bound` is the resulting worst case.
        conflict_retries: how many times a 409 ConditionalRequestConflict is retried before
            PreconditionFailed is raised.
        conflict_backoff: base delay in seconds between 409 retries (doubled each time, jittered,
            capped at 2 s).
        expect_continue_threshold: PutObject/UploadPart bodies smaller than this many bytes are
            sent without ``Expect: 100-continue`` (saving a round trip each); larger ones keep it.
            0 keeps botocore's behaviour (always sent). Only applies to a client this store builds.
    Raises:
        InvalidInputError: bad option values (empty bucket, unknown ``sse``/``addressing_style``).
        CredentialsError: the named profile does not exist.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        profile_name: str | None = None,
        addressing_style: str | None = None,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
        max_attempts: int = 10,
        retry_mode: str = "standard",
        max_pool_connections: int = DEFAULT_MAX_POOL_CONNECTIONS,
        client: Any = None,
        multipart_threshold: int = 64 * _MiB,
        multipart_chunksize: int = 16 * _MiB,
        connect_timeout: float = 4.0,
        read_timeout: float = 12.0,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        conflict_retries: int = 5,
        conflict_backoff: float = 0.05,
        expect_continue_threshold: int = _MiB,
    ):
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise InvalidInputError(f"invalid S3 bucket name: {bucket!r}")
        if addressing_style not in (None, "path", "virtual", "auto"):
            raise InvalidInputError(f"addressing_style must be 'path', 'virtual' or None, not {addressing_style!r}")
        if sse not in (None, "AES256", "aws:kms", "aws:kms:dsse"):
            raise InvalidInputError(f"sse must be 'AES256' or 'aws:kms', not {sse!r}")
        if sse_kms_key_id and sse not in ("aws:kms", "aws:kms:dsse"):
            raise InvalidInputError("sse_kms_key_id requires sse='aws:kms'")
        if int(max_attempts) < 0:
            raise InvalidInputError(f"max_attempts must be >= 0, not {max_attempts!r}")
        for name, v in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout),
                        ("call_timeout", call_timeout)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
                raise InvalidInputError(f"{name} must be a number of seconds in (0, 3600], not {v!r}")
        self.connect_timeout, self.read_timeout = float(connect_timeout), float(read_timeout)
        self.call_timeout = float(call_timeout)
        #: Attempts of one request in all (botocore's ``total_max_attempts``): the first and at
        #: most ``max_attempts`` retries, as many as fit ``call_timeout``.
        self.attempts = attempts_within(self.call_timeout, self.connect_timeout, self.read_timeout, int(max_attempts))
        #: Worst-case seconds one call waits without an answer (all attempts and the sleeps
        #: between them); at most ``call_timeout`` unless one attempt alone is longer.
        self.call_time_bound = (self.attempts * (self.connect_timeout + self.read_timeout)
                                + _retry_sleep_bound(self.attempts))
        if int(multipart_threshold) < 1 or int(multipart_chunksize) < 1:
            raise InvalidInputError("multipart_threshold and multipart_chunksize must be positive")
        if int(expect_continue_threshold) < 0:
            raise InvalidInputError(f"expect_continue_threshold must be >= 0, not {expect_continue_threshold!r}")

        self.bucket = bucket
        self.prefix = "/".join(seg for seg in str(prefix or "").split("/") if seg)
        self._root = self.prefix + "/" if self.prefix else ""
        self.endpoint_url = endpoint_url
        self.region_name = region_name
        self.profile_name = profile_name
        self.addressing_style = addressing_style
        self.sse = sse
        self.sse_kms_key_id = sse_kms_key_id
        self.multipart_threshold = int(multipart_threshold)
        self.multipart_chunksize = int(multipart_chunksize)
        self.conflict_retries = max(0, int(conflict_retries))
        self.conflict_backoff = float(conflict_backoff)
        self.stats = RequestStats()
        self._lock = threading.Lock()

        query = {k: v for k, v in (("endpoint_url", endpoint_url), ("region", region_name),
                                   ("addressing_style", addressing_style), ("sse", sse),
                                   ("sse_kms_key_id", sse_kms_key_id), ("profile", profile_name)) if v}
        self.url = f"s3://{bucket}/{self.prefix}" + (f"?{urlencode(query)}" if query else "")

        if int(max_pool_connections) < 1:
            raise InvalidInputError(f"max_pool_connections must be >= 1, not {max_pool_connections!r}")
        if client is not None:
            self._client = client
            self._owns_client = False
            pool = getattr(getattr(getattr(client, "meta", None), "config", None), "max_pool_connections", None)
            self._max_concurrency = int(pool) if isinstance(pool, int) and pool > 0 else 10  # botocore's default
        else:
            self._max_concurrency = int(max_pool_connections)
            self._client = self._make_client(
                endpoint_url=endpoint_url, region_name=region_name, profile_name=profile_name,
                addressing_style=addressing_style, total_attempts=self.attempts, retry_mode=retry_mode,
                max_pool_connections=int(max_pool_connections), connect_timeout=float(connect_timeout),
                read_timeout=float(read_timeout), expect_continue_threshold=int(expect_continue_threshold))
            self._owns_client = True
        self._sse_params: dict[str, str] = {}
        if sse:
            self._sse_params["ServerSideEncryption"] = sse
            if sse_kms_key_id:
                self._sse_params["SSEKMSKeyId"] = sse_kms_key_id

    # construction ------------------------------------------------------------------------------
    @staticmethod
    def _make_client(*, endpoint_url, region_name, profile_name, addressing_style, total_attempts,
                     retry_mode, max_pool_connections, connect_timeout, read_timeout,
                     expect_continue_threshold=_MiB):
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ProfileNotFound

        try:
            session = boto3.Session(profile_name=profile_name)
        except ProfileNotFound as e:
            raise CredentialsError(f"AWS profile not found: {profile_name or e}") from e
        s3_cfg: dict[str, Any] = {}
        if addressing_style and addressing_style != "auto":
            s3_cfg["addressing_style"] = addressing_style
        if max_pool_connections < 1:
            raise InvalidInputError(f"max_pool_connections must be >= 1, not {max_pool_connections!r}")
        try:
            config = Config(
                retries={"mode": retry_mode, "total_max_attempts": total_attempts},
                max_pool_connections=max_pool_connections,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                tcp_keepalive=True,
                user_agent_extra="snapstore",
                s3=s3_cfg or None,
            )
        except (BotoCoreError, ValueError, TypeError) as e:
            raise InvalidInputError(f"invalid S3 client option: {e}") from e
        kwargs: dict[str, Any] = {"config": config}
        if endpoint_url:  # None lets botocore resolve AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL itself
            kwargs["endpoint_url"] = endpoint_url
        if region_name:
            kwargs["region_name"] = region_name
        try:
            client = session.client("s3", **kwargs)
        except BotoCoreError as e:
            raise InvalidInputError(f"invalid S3 client option: {e}") from e
        except ValueError as e:
            raise InvalidInputError(f"invalid S3 client option: {e}") from e
        if expect_continue_threshold > 0:
            # botocore's add_expect_header (before-call.s3) runs first; this client-local hook runs
            # just before signing (Expect is never a signed header), on every attempt.
            hook = _expect_continue_hook(expect_continue_threshold)
            for op in ("PutObject", "UploadPart"):
                client.meta.events.register(f"before-sign.s3.{op}", hook, unique_id=f"snapstore-expect-{op}")
        return client

    @classmethod
    def from_url(cls, url: str, **options: Any) -> "S3Store":
        """Build a store from ``s3://BUCKET[/PREFIX][?option=value&...]``.

        Query options (all optional): ``endpoint_url`` (or ``endpoint``), ``region``, ``profile``,
        ``addressing_style`` (``path``/``virtual``), ``sse`` (``AES256``/``aws:kms``),
        ``sse_kms_key_id``, ``max_attempts``, ``retry_mode``, ``max_pool_connections``,
        ``multipart_threshold``, ``multipart_chunksize``, ``expect_continue_threshold`` (bytes), ``connect_timeout``,
        ``read_timeout``, ``call_timeout`` (seconds). Keyword ``options`` (constructor arguments)
        override the query.

        Raises:
            InvalidInputError: not an ``s3://`` URL, no bucket, or an unknown/invalid option.
        """
        if not isinstance(url, str) or not url.startswith("s3://"):
            raise InvalidInputError(f"not an s3:// URL: {url!r}")
        parts = urlsplit(url)
        bucket = parts.netloc
        if not bucket:
            raise InvalidInputError(f"S3 URL names no bucket: {url!r}")
        kwargs: dict[str, Any] = {}
        for name, values in parse_qs(parts.query, keep_blank_values=True).items():
            if name not in _URL_OPTIONS:
                raise InvalidInputError(f"unknown S3 URL option {name!r} in {url!r}; "
                                        f"known: {', '.join(sorted(_URL_OPTIONS))}")
            target = _URL_OPTIONS[name]
            value: Any = values[-1]
            try:
                if target in _INT_OPTIONS:
                    value = int(value)
                elif target in _FLOAT_OPTIONS:
                    value = float(value)
            except ValueError:
                raise InvalidInputError(f"S3 URL option {name} must be a number, not {value!r}") from None
            kwargs[target] = (value or None) if isinstance(value, str) else value
        kwargs.update(options)
        return cls(bucket, unquote(parts.path), **kwargs)

    @property
    def max_concurrency(self) -> int:
        """How many requests this store serves in parallel without waiting or opening throw-away
        connections: the client's HTTP connection pool size (``max_pool_connections``, default
        128; botocore's own default, 10, for a caller-supplied client without one). Callers size
        their thread pools with it (a count of requests, not bytes)."""
        return self._max_concurrency

    # helpers -----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    def __enter__(self) -> "S3Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _full(self, key: str) -> str:
        return self._root + key

    def _where(self, key: str | None = None) -> str:
        return f"s3://{self.bucket}/{self._root}{key}" if key is not None else f"s3://{self.bucket}/{self._root}"

    def _count(self, kind: str, up: int = 0, down: int = 0) -> None:
        with self._lock:
            self.stats.counts[kind] = self.stats.counts.get(kind, 0) + 1
            self.stats.bytes_up += up
            self.stats.bytes_down += down

    def _error(self, exc: Exception, op: str, key: str | None = None) -> Exception:
        """Translate a botocore exception into one snapstore error with a one-line message."""
        from botocore.exceptions import (
            ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
            NoRegionError, PartialCredentialsError, ProfileNotFound, ReadTimeoutError,
        )

        where = self._where(key)
        if isinstance(exc, ClientError):
            code, status, msg = _error_parts(exc)
            detail = f"{code} (HTTP {status})" + (f": {msg}" if msg else "")
            if code == "NoSuchBucket":
                return BucketNotFound(f"S3 bucket not found: {self.bucket} ({op} {where})")
            if code in _CREDENTIAL_CODES:
                return CredentialsError(f"S3 rejected the credentials for {op} {where}: {detail}")
            if code in _ACCESS_CODES or status == 403:
                extra = " (HEAD responses carry no error code: the credentials may also be invalid)" \
                    if op == "HeadObject" else ""
                return AccessDenied(f"S3 access denied: {op} {where}{extra}")
            if key is not None and (code in _NOT_FOUND_CODES or status == 404):
                return ObjectNotFound(key, f"object not found: {key} ({where})")
            if status == 412 or code == "PreconditionFailed":
                return PreconditionFailed(key or where)
            return StoreError(f"S3 {op} failed for {where}: {detail}")
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError, ProfileNotFound)):
            return CredentialsError(f"no usable AWS credentials for {op} {where}: {exc}")
        if isinstance(exc, NoRegionError):
            return StoreError(f"no AWS region configured for {op} {where}: set AWS_REGION or region=")
        if isinstance(exc, ConnectTimeoutError):
            return StoreError(f"cannot reach the S3 endpoint for {op} {where}: no connection to {self._endpoint()} "
                              f"within {self._waits('connect_timeout')}: {exc}")
        if isinstance(exc, EndpointConnectionError):
            return StoreError(f"cannot reach the S3 endpoint for {op} {where} ({self._endpoint()}): {exc}")
        if isinstance(exc, ReadTimeoutError):
            return StoreError(f"S3 {op} timed out for {where}: the endpoint {self._endpoint()} accepted the "
                              f"connection but sent no response within {self._waits('read_timeout')}: {exc}")
        return StoreError(f"S3 {op} failed for {where}: {type(exc).__name__}: {exc}")

    def _endpoint(self) -> str:
        """The endpoint URL the client talks to (for error messages)."""
        url = getattr(getattr(self._client, "meta", None), "endpoint_url", None)
        return str(url or self.endpoint_url or "(AWS default)")

    def _waits(self, which: str) -> str:
        """What a timed-out call waited for, e.g. ``12 s (read_timeout) x 3 attempts``."""
        secs = getattr(self, which, None)
        n = getattr(self, "attempts", None)
        if secs is None or n is None:  # a caller-supplied client: its own settings
            return f"the client's {which}"
        return f"{secs:g} s ({which}) x {n} attempt{'s' if n != 1 else ''} (call_timeout {self.call_timeout:g} s)"

    def _call(self, op: str, key: str | None, fn, **params):
        """Call ``fn(**params)``, translating botocore errors (see :meth:`_error`)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**params)
        except (ClientError, *_transport()) as e:
            raise self._error(e, op, key) from e

    def _backoff(self, attempt: int) -> None:
        delay = min(2.0, self.conflict_backoff * (2 ** attempt))
        time.sleep(delay * (0.5 + random.random() / 2))

    # writes ------------------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key`` holding ``data``; fail if it exists (PutObject with ``If-None-Match: *``).

        Args:
            key: object key (see :func:`~snapstore.stores.base.check_key`).
            data: the bytes (``bytes``, ``bytearray`` or ``memoryview``).
        Returns:
            ObjectInfo with the new ETag; ``mtime`` is the server's ``Date`` header.
        Raises:
            PreconditionFailed: the key exists (or a 409 conflict persisted through all retries).
            AccessDenied, BucketNotFound, CredentialsError: as named.
            StoreError: any other failure, including a write whose outcome stayed unknown.
        """
        return self._write(key, data, None)

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Replace ``key`` only if its current ETag is ``etag`` (``None``: only if absent).

        Args:
            key: object key.
            data: the new bytes.
            etag: the ETag from :meth:`head`/:meth:`put` (quoted, as S3 returns it), or None.
        Raises:
            PreconditionFailed: the object changed, is missing (``etag`` given) or exists (``None``).
            StoreError (and subclasses): as for :meth:`put`.
        """
        return self._write(key, data, etag)

    def _write(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        check_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"data for {key} must be bytes, not {type(data).__name__}")
        data = bytes(data)
        cond = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        if len(data) > self.multipart_threshold:
            return self._write_multipart(key, data, cond)
        from botocore.exceptions import BotoCoreError, ClientError

        write_id = uuid.uuid4().hex
        params = dict(Bucket=self.bucket, Key=self._full(key), Body=data,
                      Metadata={WRITE_ID_METADATA: write_id}, **cond, **self._sse_params)
        ambiguous = False
        for attempt in range(self.conflict_retries + 1):
            self._count("PUT", up=len(data))
            try:
                resp = self._client.put_object(**params)
            except ClientError as e:
                ambiguous = ambiguous or _retry_attempts(e) > 0
                code, status, _ = _error_parts(e)
                if status == 409 or code == "ConditionalRequestConflict":
                    if attempt < self.conflict_retries:
                        self._backoff(attempt)
                        continue
                    raise PreconditionFailed(
                        key, f"precondition failed: concurrent conflicting writes to {key} "
                             f"(409 ConditionalRequestConflict {attempt + 1} times)") from e
                if status == 412 or code == "PreconditionFailed" or (
                        etag is not None and status == 404 and code == "NoSuchKey"):
                    if ambiguous:
                        info = self._own_write(key, write_id, data)
                        if info is not None:
                            return info
                    raise PreconditionFailed(key) from e
                raise self._error(e, "PutObject", key) from e
            except _transport() as e:
                # botocore already retried; the request may or may not have been applied.
                return self._resolve_unknown(e, "PutObject", key, write_id, data)
            return ObjectInfo(key, len(data), resp.get("ETag", ""), _server_time(resp))
        raise AssertionError("unreachable")  # pragma: no cover

    def _resolve_unknown(self, exc: Exception, op: str, key: str, write_id: str | set,
                         data: bytes) -> ObjectInfo:
        """After a write failed without any response (botocore's retries exhausted on network errors).

        An earlier attempt may have been applied even if the last one never left this machine, so the
        object is read back: our ObjectInfo if our write landed; otherwise raises the mapped error,
        saying whether the write is known not to have landed or its outcome is unknown.
        """
        from botocore.exceptions import (
            NoCredentialsError, NoRegionError, ParamValidationError, PartialCredentialsError,
        )

        if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError, ParamValidationError)):
            raise self._error(exc, op, key) from exc  # nothing was sent
        try:
            info = self._own_write(key, write_id, data)
        except Exception as check:  # noqa: BLE001 - report the original failure
            raise StoreError(f"S3 {op} outcome unknown for {self._where(key)}: {type(exc).__name__}: {exc} "
                             f"(read-back failed too: {type(check).__name__})") from exc
        if info is None:
            raise StoreError(f"S3 {op} failed for {self._where(key)} (not applied: read-back found no "
                             f"write of ours): {type(exc).__name__}: {exc}") from exc
        return info

    def _own_write(self, key: str, write_id: str | set, data: bytes) -> ObjectInfo | None:
        """Return the object's info if the object at ``key`` was written by our write ``write_id``
        (or by any of a set of write ids: one per re-initiated multipart upload).

        Uses the write-id metadata; if the server dropped metadata entirely, compares the bytes.
        """
        ours = {write_id} if isinstance(write_id, str) else write_id
        from botocore.exceptions import BotoCoreError, ClientError

        self._count("HEAD")
        try:
            resp = self._client.head_object(Bucket=self.bucket, Key=self._full(key))
        except ClientError as e:
            code, status, _ = _error_parts(e)
            if status == 404 or code in _NOT_FOUND_CODES:
                return None
            raise self._error(e, "HeadObject", key) from e
        except _transport() as e:
            raise self._error(e, "HeadObject", key) from e
        meta = {k.lower(): v for k, v in (resp.get("Metadata") or {}).items()}
        info = ObjectInfo(key, int(resp.get("ContentLength", 0)), resp.get("ETag", ""),
                          resp["LastModified"].timestamp() if resp.get("LastModified") else _server_time(resp))
        if WRITE_ID_METADATA in meta:
            return info if meta[WRITE_ID_METADATA] in ours else None
        if meta or info.size != len(data):
            return None
        try:
            return info if self.get(key) == data else None
        except ObjectNotFound:
            return None

    def _write_multipart(self, key: str, data: bytes, cond: dict) -> ObjectInfo:
        """Multipart upload of ``data`` with the precondition ``cond`` on CompleteMultipartUpload."""
        from botocore.exceptions import BotoCoreError, ClientError

        ambiguous = False
        write_ids: set[str] = set()
        for attempt in range(self.conflict_retries + 1):
            write_id = uuid.uuid4().hex
            write_ids.add(write_id)
            upload_id = self._call("CreateMultipartUpload", key, self._client.create_multipart_upload,
                                   Bucket=self.bucket, Key=self._full(key),
                                   Metadata={WRITE_ID_METADATA: write_id}, **self._sse_params)["UploadId"]
            self._count("PUT")
            completed = False
            try:
                parts = self._upload_parts(key, upload_id, data)
                self._count("PUT")
                try:
                    resp = self._client.complete_multipart_upload(
                        Bucket=self.bucket, Key=self._full(key), UploadId=upload_id,
                        MultipartUpload={"Parts": parts}, **cond)
                except ClientError as e:
                    ambiguous = ambiguous or _retry_attempts(e) > 0
                    code, status, _ = _error_parts(e)
                    if status == 409 or code == "ConditionalRequestConflict":
                        if attempt < self.conflict_retries:
                            self._backoff(attempt)
                            continue  # AWS: re-initiate the upload after a 409
                        raise PreconditionFailed(
                            key, f"precondition failed: concurrent conflicting writes to {key} "
                                 f"(409 ConditionalRequestConflict {attempt + 1} times)") from e
                    if status == 412 or code == "PreconditionFailed" or (
                            "IfMatch" in cond and status == 404 and code == "NoSuchKey"):
                        if ambiguous:
                            info = self._own_write(key, write_ids, data)
                            if info is not None:
                                completed = True
                                return info
                        raise PreconditionFailed(key) from e
                    if ambiguous and code == "NoSuchUpload":
                        info = self._own_write(key, write_ids, data)
                        if info is not None:
                            completed = True
                            return info
                    raise self._error(e, "CompleteMultipartUpload", key) from e
                except _transport() as e:
                    info = self._resolve_unknown(e, "CompleteMultipartUpload", key, write_ids, data)
                    completed = True
                    return info
                completed = True
                return ObjectInfo(key, len(data), resp.get("ETag", ""), _server_time(resp))
            finally:
                if not completed:
                    self._abort(key, upload_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _upload_parts(self, key: str, upload_id: str, data: bytes) -> list[dict]:
        size = max(self.multipart_chunksize, -(-len(data) // _MAX_PARTS))
        view = memoryview(data)
        ranges = [(n + 1, off, min(off + size, len(data))) for n, off in enumerate(range(0, len(data), size))]

        def one(part: tuple[int, int, int]) -> dict:
            number, start, end = part
            self._count("PUT", up=end - start)
            resp = self._call("UploadPart", key, self._client.upload_part, Bucket=self.bucket,
                              Key=self._full(key), UploadId=upload_id, PartNumber=number,
                              Body=bytes(view[start:end]))
            return {"ETag": resp["ETag"], "PartNumber": number}

        with ThreadPoolExecutor(max_workers=min(8, len(ranges))) as pool:
            return list(pool.map(one, ranges))

    def _abort(self, key: str, upload_id: str) -> None:
        """Best-effort AbortMultipartUpload (a lifecycle rule cleans up what this misses)."""
        self._count("DELETE")
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=self._full(key), UploadId=upload_id)
        except Exception:  # noqa: BLE001 - e.g. NoSuchUpload after a 409; never mask the real error
            pass

    # reads -------------------------------------------------------------------------------------
    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """Return the object's bytes, or a range of them (one GetObject with a ``Range`` header).

        ``(start, end)`` is sent as ``Range: bytes=start-(end-1)``, ``(start, None)`` as
        ``bytes=start-`` and the suffix ``(-n, None)`` as ``bytes=-n`` (the last ``n`` bytes, the
        whole object when it is shorter). Like slicing, a range past the end of the object is
        truncated (``b""`` when ``start`` is at or past the end). A server that ignores ``Range``
        and sends everything is sliced here.

        Raises:
            ObjectNotFound: no such key.
            InvalidInputError: a malformed range (see :func:`~snapstore.stores.base.check_range`).
            ObjectTooLarge: a whole read of an object larger than its kind may be (its
                ``Content-Length``, before the body is read; see
                :func:`~snapstore.stores.base.whole_read_limit`).
            StoreError (and subclasses): the request failed.
        """
        from botocore.exceptions import (
            BotoCoreError, ClientError, ConnectionClosedError, IncompleteReadError, ReadTimeoutError,
            ResponseStreamingError,
        )

        check_key(key)
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._full(key)}
        want: int | None = None
        byte_range = check_range(key, byte_range)
        if byte_range is not None:
            start, end = byte_range
            if start == end:
                self.head(key)
                return b""
            if end is not None:
                params["Range"] = f"bytes={start}-{end - 1}"
                want = end - start
            elif start < 0:
                params["Range"] = f"bytes={start}"
                want = -start
            else:
                params["Range"] = f"bytes={start}-"
        body_errors = (IncompleteReadError, ReadTimeoutError, ResponseStreamingError, ConnectionClosedError)
        t0 = time.monotonic()
        for attempt in range(3):
            # a cut-short body is asked for again only while a whole new request still fits the
            # call's time budget (call_timeout)
            again = attempt < 2 and time.monotonic() - t0 + self.call_time_bound <= self.call_timeout
            self._count("GET")
            try:
                resp = self._client.get_object(**params)
            except ClientError as e:
                code, status, _ = _error_parts(e)
                if byte_range is not None and (status == 416 or code == "InvalidRange"):
                    return b""
                raise self._error(e, "GetObject", key) from e
            except _transport() as e:
                raise self._error(e, "GetObject", key) from e
            body = resp["Body"]
            if byte_range is None:
                try:  # before the body is read: a whole read of more than its kind allows
                    check_whole_read(key, int(resp.get("ContentLength") or 0))
                except ObjectTooLarge:
                    body.close()
                    raise
            try:
                data = body.read()
            except body_errors as e:
                if again:
                    continue  # the response was cut short: ask again
                raise self._error(e, "GetObject", key) from e
            except Exception as e:  # urllib3 protocol errors surface unwrapped
                if again:
                    continue
                raise StoreError(f"S3 GetObject failed reading {self._where(key)}: {type(e).__name__}: {e}") from e
            finally:
                body.close()
            with self._lock:
                self.stats.bytes_down += len(data)
            if byte_range is not None and "ContentRange" not in resp and (want is None or len(data) > want):
                data = slice_range(data, byte_range)  # the server ignored Range and sent everything
            return data
        raise AssertionError("unreachable")  # pragma: no cover

    def get_many(self, keys: Iterable[str], max_workers: int | None = None) -> dict[str, bytes]:
        """Fetch many whole objects concurrently.

        Args:
            keys: the keys (duplicates fetched once).
            max_workers: at most this many requests in flight; None: :attr:`max_concurrency` (more
                than the connection pool only opens throw-away connections).
        Returns:
            ``{key: bytes}`` for every key.
        Raises:
            ObjectNotFound: one of the keys is missing (remaining fetches are cancelled).
            StoreError (and subclasses): a request failed.
        """
        unique = list(dict.fromkeys(keys))
        if not unique:
            return {}
        if max_workers is None:
            max_workers = self.max_concurrency
        if len(unique) == 1 or max_workers <= 1:
            return {k: self.get(k) for k in unique}
        pool = ThreadPoolExecutor(max_workers=min(int(max_workers), len(unique)),
                                  thread_name_prefix="snapstore-s3-get")
        try:
            futures = [(k, pool.submit(self.get, k)) for k in unique]
            return {k: f.result() for k, f in futures}
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def head(self, key: str) -> ObjectInfo:
        """Return the object's :class:`ObjectInfo` (size in bytes, ETag, server mtime in epoch seconds).

        Raises:
            ObjectNotFound: no such key. (S3 answers a HEAD on a missing bucket with a bare 404 too;
                use :meth:`check_bucket` to tell them apart.)
            AccessDenied, CredentialsError, StoreError: the request failed.
        """
        check_key(key)
        self._count("HEAD")
        resp = self._call("HeadObject", key, self._client.head_object, Bucket=self.bucket, Key=self._full(key))
        mtime = resp["LastModified"].timestamp() if resp.get("LastModified") else _server_time(resp)
        return ObjectInfo(key, int(resp.get("ContentLength", 0)), resp.get("ETag", ""), mtime)

    def list(self, prefix: str = "", start_after: str | None = None,
             limit: int | None = None) -> Iterator[ObjectInfo]:
        """Yield objects whose key starts with ``prefix``, in lexicographic (byte) order.

        One ListObjectsV2 request per page of at most 1,000 keys (``MaxKeys`` never exceeds 1,000 or
        the number of keys still wanted, so ``limit=1`` is one request with ``MaxKeys=1``).

        Args:
            prefix: key prefix relative to the store (``""`` for everything).
            start_after: only keys strictly greater than this (relative key).
            limit: stop after this many objects (None: all).
        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError: on iteration.
        """
        if limit is not None and limit <= 0:
            return
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root + (prefix or "")}
        if start_after is not None:
            params["StartAfter"] = self._root + start_after
        remaining = limit
        cut = len(self._root)
        while True:
            params["MaxKeys"] = MAX_KEYS_PER_PAGE if remaining is None else min(MAX_KEYS_PER_PAGE, remaining)
            self._count("LIST")
            resp = self._call("ListObjectsV2", None, self._client.list_objects_v2, **params)
            for obj in resp.get("Contents") or ():
                yield ObjectInfo(obj["Key"][cut:], int(obj.get("Size", 0)), obj.get("ETag", ""),
                                 obj["LastModified"].timestamp())
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return
            params["ContinuationToken"] = token

    def leftovers(self) -> list[Leftover]:
        """Return the multipart uploads under the store's prefix that were initiated and never
        completed nor aborted (ListMultipartUploads, paginated): what a process killed in the
        middle of a large write leaves (S3 bills their parts until they are aborted). ``mtime`` is
        the upload's ``Initiated`` time (the store's clock); ``size`` is 0 (not listed).

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        out = []
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self._root}
        cut = len(self._root)
        while True:
            self._count("LIST")
            resp = self._call("ListMultipartUploads", None, self._client.list_multipart_uploads, **params)
            for u in resp.get("Uploads") or ():
                out.append(Leftover(u["Key"][cut:], 0, u["Initiated"].timestamp(), u["UploadId"]))
            if not resp.get("IsTruncated"):
                return out
            params["KeyMarker"] = resp.get("NextKeyMarker", "")
            params["UploadIdMarker"] = resp.get("NextUploadIdMarker", "")

    def remove_leftovers(self, items: Iterable[Leftover]) -> int:
        """Abort the given multipart uploads (from :meth:`leftovers`); return how many were aborted
        (one already gone, NoSuchUpload, is skipped).

        Raises:
            InvalidInputError: an item without an upload id.
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        n = 0
        for it in items:
            if not it.upload_id:
                raise InvalidInputError(f"not a multipart upload: {it.name!r}")
            self._count("DELETE")
            try:
                self._call("AbortMultipartUpload", it.name, self._client.abort_multipart_upload,
                           Bucket=self.bucket, Key=self._full(it.name), UploadId=it.upload_id)
                n += 1
            except ObjectNotFound:
                pass  # NoSuchUpload: completed or aborted meanwhile
        return n

    def list_dirs(self, prefix: str = "") -> Iterator[str]:
        """Yield the distinct next path segments below ``prefix``, sorted (ListObjectsV2, Delimiter "/").

        Args:
            prefix: a relative key prefix ending in ``/`` (``"runs/"``), or ``""`` for the top level; a
                missing trailing ``/`` is added.
        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError: on iteration.
        """
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        full = self._root + prefix
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full, "Delimiter": "/",
                                  "MaxKeys": MAX_KEYS_PER_PAGE}
        while True:
            self._count("LIST")
            resp = self._call("ListObjectsV2", None, self._client.list_objects_v2, **params)
            for cp in resp.get("CommonPrefixes") or ():
                seg = cp["Prefix"][len(full):]
                if seg.endswith("/"):
                    seg = seg[:-1]
                if seg:
                    yield seg
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return
            params["ContinuationToken"] = token

    # deletes -----------------------------------------------------------------------------------
    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete ``keys`` with DeleteObjects (quiet mode), at most 1,000 keys per request.

        Keys that do not exist are ignored. On a versioned bucket this only adds delete markers (see
        :meth:`check_versioning`).

        Raises:
            AccessDenied: the server refused to delete some key (the message names it).
            StoreError: another per-key error or a failed request (the message names the key).
        """
        batch: list[str] = []
        for key in keys:
            batch.append(check_key(key))
            if len(batch) == MAX_KEYS_PER_DELETE:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)

    def _delete_batch(self, keys: list[str]) -> None:
        keys = list(dict.fromkeys(keys))
        self._count("DELETE")
        resp = self._call("DeleteObjects", None, self._client.delete_objects, Bucket=self.bucket,
                          Delete={"Objects": [{"Key": self._full(k)} for k in keys], "Quiet": True})
        errors = [e for e in resp.get("Errors") or () if e.get("Code") not in ("NoSuchKey",)]
        if not errors:
            return
        cut = len(self._root)
        first = errors[0]
        key = str(first.get("Key", ""))[cut:]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        if all(e.get("Code") == "AccessDenied" for e in errors):
            raise AccessDenied(f"S3 access denied: DeleteObjects {self._where(key)}{more}")
        raise StoreError(f"S3 DeleteObjects failed for {self._where(key)}: {first.get('Code')}: "
                         f"{first.get('Message', '')}{more}")

    # bucket-level ------------------------------------------------------------------------------
    def check_bucket(self) -> None:
        """Check that the bucket exists and the prefix can be listed (one LIST with ``MaxKeys=1``).

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        self._count("LIST")
        self._call("ListObjectsV2", None, self._client.list_objects_v2, Bucket=self.bucket,
                   Prefix=self._root, MaxKeys=1)

    def check_versioning(self) -> bool:
        """Return True if bucket versioning is ``Enabled``.

        On a versioned bucket deletes only add delete markers: storage is reclaimed only by a
        noncurrent-version expiration lifecycle rule (see ``infra/aws/README.md``). ``Suspended``
        returns False (new writes are not versioned, but old versions remain).

        Raises:
            BucketNotFound, AccessDenied (needs ``s3:GetBucketVersioning``), CredentialsError, StoreError.
        """
        resp = self._call("GetBucketVersioning", None, self._client.get_bucket_versioning, Bucket=self.bucket)
        return resp.get("Status") == "Enabled"

    def close(self) -> None:
        """Close the HTTP connection pool (only if this store created the client)."""
        if self._owns_client:
            close = getattr(self._client, "close", None)
            if close is not None:
                close()
