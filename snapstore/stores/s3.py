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

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator
from urllib.parse import urlencode

from ..errors import (
    AccessDenied,
    InvalidInputError,
    ObjectNotFound,
    ObjectTooLarge,
    StoreError,
)
from .base import (Leftover, ObjectInfo, RequestStats, StoreCapabilities, check_key, check_range, check_whole_read,
                   slice_range)
from .s3client import (DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_POOL_CONNECTIONS, ClientSettings, attempts_within, make_client,
                       parse_url, retry_sleep_bound)
from .s3errors import error_parts, transport_errors
from .s3requests import S3Requests, server_time
from .s3writes import WRITE_ID_METADATA, S3Writes

__all__ = ["S3Store", "WRITE_ID_METADATA", "MAX_KEYS_PER_PAGE", "MAX_KEYS_PER_DELETE",
           "DEFAULT_MAX_POOL_CONNECTIONS"]

#: ListObjectsV2 returns at most this many keys a page on AWS; enforced client-side.
MAX_KEYS_PER_PAGE = 1000
#: DeleteObjects accepts at most this many keys on AWS; enforced client-side.
MAX_KEYS_PER_DELETE = 1000

_MiB = 1024 * 1024


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
                                + retry_sleep_bound(self.attempts))
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
            self._client = make_client(ClientSettings(
                endpoint_url=endpoint_url, region_name=region_name, profile_name=profile_name,
                addressing_style=addressing_style, total_attempts=self.attempts, retry_mode=retry_mode,
                max_pool_connections=int(max_pool_connections), connect_timeout=float(connect_timeout),
                read_timeout=float(read_timeout), expect_continue_threshold=int(expect_continue_threshold)))
            self._owns_client = True
        #: What this store is (:class:`~snapstore.stores.base.StoreCapabilities`): as many
        #: requests in flight as the connection pool holds; incomplete multipart uploads as
        #: leftovers; a bucket whose versioning can be checked.
        self.capabilities = StoreCapabilities(max_concurrency=self._max_concurrency, leftovers=True, versioning=True)
        self._requests = S3Requests(self._client, bucket, self._root, self.stats, endpoint_url, self._waits)
        self._writes = S3Writes(self, self._requests)

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
        bucket, prefix, kwargs = parse_url(url)
        kwargs.update(options)
        return cls(bucket, prefix, **kwargs)

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

    def _waits(self, which: str) -> str:
        """What a timed-out call waited for, e.g. ``12 s (read_timeout) x 3 attempts``."""
        secs = getattr(self, which, None)
        n = getattr(self, "attempts", None)
        if secs is None or n is None:  # a caller-supplied client: its own settings
            return f"the client's {which}"
        return f"{secs:g} s ({which}) x {n} attempt{'s' if n != 1 else ''} (call_timeout {self.call_timeout:g} s)"

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
        return self._writes.write(key, data, None)

    def put_with_storage_class(self, key: str, data: bytes, storage_class: str) -> ObjectInfo:
        """:meth:`put` (create-only) with the new object in S3 storage class ``storage_class``
        (e.g. ``GLACIER_IR``; an archive bundle, docs/format.md §28). Raises as :meth:`put`."""
        return self._writes.write(key, data, None, storage_class)

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
        return self._writes.write(key, data, etag)

    def get_outside(self, bucket: str, key: str) -> bytes:
        """Return the whole object ``key`` of ``bucket``, outside this repository's prefix (an S3
        Inventory report's ``manifest.json`` or data file, which S3 writes under its own prefix or
        into another bucket), with this store's client and credentials. Counted as a GET.

        Args:
            bucket: the bucket name; key: the full object key (not under this store's prefix).
        Returns:
            The object's bytes.
        Raises:
            ObjectNotFound: no such key or bucket.
            StoreError: the request failed (access denied, transport); the message names the object.
        """
        from botocore.exceptions import ClientError

        try:
            data = self._client.get_object(Bucket=bucket, Key=key)["Body"].read()
            self._requests.count("GET", down=len(data))
            return data
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchKey", "404", "NoSuchBucket"):
                raise ObjectNotFound(key, f"s3://{bucket}/{key} not found") from None
            raise StoreError(f"reading s3://{bucket}/{key}: {e}") from None
        except transport_errors() as e:
            raise StoreError(f"reading s3://{bucket}/{key}: {e}") from None

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
            ClientError, ConnectionClosedError, IncompleteReadError, ReadTimeoutError,
            ResponseStreamingError,
        )

        check_key(key)
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._requests.full(key)}
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
            self._requests.count("GET")
            try:
                resp = self._client.get_object(**params)
            except ClientError as e:
                code, status, _ = error_parts(e)
                if byte_range is not None and (status == 416 or code == "InvalidRange"):
                    return b""
                raise self._requests.error(e, "GetObject", key) from e
            except transport_errors() as e:
                raise self._requests.error(e, "GetObject", key) from e
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
                raise self._requests.error(e, "GetObject", key) from e
            except Exception as e:  # urllib3 protocol errors surface unwrapped
                if again:
                    continue
                raise StoreError(f"S3 GetObject failed reading {self._requests.where(key)}: "
                                 f"{type(e).__name__}: {e}") from e
            finally:
                body.close()
            self._requests.count_down(len(data))
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

    def _head_object(self, key: str) -> dict:
        """One counted HeadObject of ``key``: botocore's response dict. Raises as :meth:`head`."""
        check_key(key)
        self._requests.count("HEAD")
        return self._requests.call("HeadObject", key, self._client.head_object, Bucket=self.bucket,
                                   Key=self._requests.full(key))

    def head(self, key: str) -> ObjectInfo:
        """Return the object's :class:`ObjectInfo` (size in bytes, ETag, server mtime in epoch seconds).

        Raises:
            ObjectNotFound: no such key. (S3 answers a HEAD on a missing bucket with a bare 404 too;
                use :meth:`check_bucket` to tell them apart.)
            AccessDenied, CredentialsError, StoreError: the request failed.
        """
        resp = self._head_object(key)
        mtime = resp["LastModified"].timestamp() if resp.get("LastModified") else server_time(resp)
        return ObjectInfo(key, int(resp.get("ContentLength", 0)), resp.get("ETag", ""), mtime)

    def request_restore(self, key: str, days: int, tier: str = "Standard") -> str:
        """Ask S3 to restore ``key`` (a ``GLACIER``/``DEEP_ARCHIVE`` object) for ``days`` days at
        retrieval tier ``tier`` (``Bulk``, ``Standard``, ``Expedited``); RestoreObject.

        Returns:
            ``"requested"`` (202), ``"restored"`` (200: already restored; its expiry extended) or
            ``"restoring"`` (409 RestoreAlreadyInProgress).
        Raises:
            ObjectNotFound, StoreError: the request failed.
        """
        from botocore.exceptions import ClientError

        check_key(key)
        self._requests.count("PUT")
        try:
            resp = self._client.restore_object(Bucket=self.bucket, Key=self._requests.full(key),
                                               RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": tier}})
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "RestoreAlreadyInProgress":
                return "restoring"
            raise self._requests.error(e, "RestoreObject", key) from e
        return "restored" if resp.get("ResponseMetadata", {}).get("HTTPStatusCode") == 200 else "requested"

    def storage_class_of(self, key: str) -> str:
        """The storage class S3 holds ``key`` in (one HEAD; S3 leaves the header out for STANDARD).

        Raises:
            ObjectNotFound, StoreError: as :meth:`head`.
        """
        resp = self._head_object(key)
        return resp.get("StorageClass") or "STANDARD"

    def restore_state(self, key: str) -> str:
        """Whether ``key`` can be read in place (one HEAD): ``"readable"`` (a class read in place),
        ``"restored"`` (a ``GLACIER``/``DEEP_ARCHIVE`` object with a finished restore),
        ``"restoring"`` (a restore in progress) or ``"archived"`` (not restored).

        Raises:
            ObjectNotFound, StoreError: as :meth:`head`.
        """
        resp = self._head_object(key)
        if resp.get("StorageClass") not in ("GLACIER", "DEEP_ARCHIVE"):
            return "readable"
        restore = resp.get("Restore") or ""
        if 'ongoing-request="false"' in restore:
            return "restored"
        return "restoring" if 'ongoing-request="true"' in restore else "archived"

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
            self._requests.count("LIST")
            resp = self._requests.call("ListObjectsV2", None, self._client.list_objects_v2, **params)
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
        return self._writes.leftovers()

    def remove_leftovers(self, items: Iterable[Leftover]) -> int:
        """Abort the given multipart uploads (from :meth:`leftovers`); return how many were aborted
        (one already gone, NoSuchUpload, is skipped).

        Raises:
            InvalidInputError: an item without an upload id.
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        return self._writes.remove_leftovers(items)

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
            self._requests.count("LIST")
            resp = self._requests.call("ListObjectsV2", None, self._client.list_objects_v2, **params)
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
        self._requests.count("DELETE")
        resp = self._requests.call("DeleteObjects", None, self._client.delete_objects, Bucket=self.bucket,
                                   Delete={"Objects": [{"Key": self._requests.full(k)} for k in keys], "Quiet": True})
        errors = [e for e in resp.get("Errors") or () if e.get("Code") not in ("NoSuchKey",)]
        if not errors:
            return
        cut = len(self._root)
        first = errors[0]
        key = str(first.get("Key", ""))[cut:]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        if all(e.get("Code") == "AccessDenied" for e in errors):
            raise AccessDenied(f"S3 access denied: DeleteObjects {self._requests.where(key)}{more}")
        raise StoreError(f"S3 DeleteObjects failed for {self._requests.where(key)}: {first.get('Code')}: "
                         f"{first.get('Message', '')}{more}")

    # bucket-level ------------------------------------------------------------------------------
    def check_bucket(self) -> None:
        """Check that the bucket exists and the prefix can be listed (one LIST with ``MaxKeys=1``).

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        self._requests.count("LIST")
        self._requests.call("ListObjectsV2", None, self._client.list_objects_v2, Bucket=self.bucket,
                            Prefix=self._root, MaxKeys=1)

    def check_versioning(self) -> bool:
        """Return True if bucket versioning is ``Enabled``.

        On a versioned bucket deletes only add delete markers: storage is reclaimed only by a
        noncurrent-version expiration lifecycle rule (see ``infra/aws/README.md``). ``Suspended``
        returns False (new writes are not versioned, but old versions remain).

        Raises:
            BucketNotFound, AccessDenied (needs ``s3:GetBucketVersioning``), CredentialsError, StoreError.
        """
        resp = self._requests.call("GetBucketVersioning", None, self._client.get_bucket_versioning, Bucket=self.bucket)
        return resp.get("Status") == "Enabled"

    def close(self) -> None:
        """Close the HTTP connection pool (only if this store created the client)."""
        if self._owns_client:
            close = getattr(self._client, "close", None)
            if close is not None:
                close()
