"""The write half of :class:`~snapstore.stores.s3.S3Store`: conditional PutObject, multipart
uploads for large objects, telling our own write from another after a lost response, and the
incomplete multipart uploads a killed writer leaves (``leftovers``).

See :mod:`snapstore.stores.s3` for how the protocol maps onto S3.
"""

from __future__ import annotations

import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import InvalidInputError, ObjectNotFound, PreconditionFailed, StoreError
from .base import Leftover, ObjectInfo, check_key
from .s3errors import NOT_FOUND_CODES, error_parts, retry_attempts, transport_errors
from .s3requests import S3Requests, server_time

if TYPE_CHECKING:
    from .s3 import S3Store

#: Metadata key (``x-amz-meta-<this>``) holding the random id of the write that created an object.
WRITE_ID_METADATA = "snapstore-write-id"
_MAX_PARTS = 10_000


class S3Writes:
    """Writes and multipart uploads of one :class:`~snapstore.stores.s3.S3Store`.

    Args:
        store: the store; its public settings (``multipart_threshold``, ``multipart_chunksize``,
            ``conflict_retries``, ``conflict_backoff``, ``sse``, ``sse_kms_key_id``) are read at
            each write, and its ``get`` reads an object back to compare bytes.
        requests: the store's :class:`~snapstore.stores.s3requests.S3Requests`.
    """

    def __init__(self, store: "S3Store", requests: S3Requests):
        self._store = store
        self._requests = requests

    @property
    def _sse_params(self) -> dict[str, str]:
        """Server-side encryption parameters of a new object (PutObject, CreateMultipartUpload)."""
        out: dict[str, str] = {}
        if self._store.sse:
            out["ServerSideEncryption"] = self._store.sse
            if self._store.sse_kms_key_id:
                out["SSEKMSKeyId"] = self._store.sse_kms_key_id
        return out

    def write(self, key: str, data: bytes, etag: str | None, storage_class: str | None = None) -> ObjectInfo:
        """Write ``data`` at ``key``: create-only when ``etag`` is None, else only over the
        object whose ETag is ``etag`` (the semantics of :meth:`S3Store.put
        <snapstore.stores.s3.S3Store.put>` and ``put_if_match``, whose errors it raises).
        ``storage_class``: the new object's S3 storage class (None: the bucket's default).
        """
        check_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"data for {key} must be bytes, not {type(data).__name__}")
        data = bytes(data)
        cond = {"IfNoneMatch": "*"} if etag is None else {"IfMatch": etag}
        sse = dict(self._sse_params, **({"StorageClass": storage_class} if storage_class else {}))
        if len(data) > self._store.multipart_threshold:
            return self._write_multipart(key, data, cond, sse)
        from botocore.exceptions import ClientError

        write_id = uuid.uuid4().hex
        params = dict(Bucket=self._requests.bucket, Key=self._requests.full(key), Body=data,
                      Metadata={WRITE_ID_METADATA: write_id}, **cond, **sse)
        ambiguous = False
        for attempt in range(self._store.conflict_retries + 1):
            self._requests.count("PUT", up=len(data))
            try:
                resp = self._requests.client.put_object(**params)
            except ClientError as e:
                ambiguous = ambiguous or retry_attempts(e) > 0
                code, status, _ = error_parts(e)
                if status == 409 or code == "ConditionalRequestConflict":
                    if attempt < self._store.conflict_retries:
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
                raise self._requests.error(e, "PutObject", key) from e
            except transport_errors() as e:
                # botocore already retried; the request may or may not have been applied.
                return self._resolve_unknown(e, "PutObject", key, write_id, data)
            return ObjectInfo(key, len(data), resp.get("ETag", ""), server_time(resp))
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
            raise self._requests.error(exc, op, key) from exc  # nothing was sent
        try:
            info = self._own_write(key, write_id, data)
        except Exception as check:  # noqa: BLE001 - report the original failure
            raise StoreError(f"S3 {op} outcome unknown for {self._requests.where(key)}: {type(exc).__name__}: {exc} "
                             f"(read-back failed too: {type(check).__name__})") from exc
        if info is None:
            raise StoreError(f"S3 {op} failed for {self._requests.where(key)} (not applied: read-back found no "
                             f"write of ours): {type(exc).__name__}: {exc}") from exc
        return info

    def _own_write(self, key: str, write_id: str | set, data: bytes) -> ObjectInfo | None:
        """Return the object's info if the object at ``key`` was written by our write ``write_id``
        (or by any of a set of write ids: one per re-initiated multipart upload).

        Uses the write-id metadata; if the server dropped metadata entirely, compares the bytes.
        """
        ours = {write_id} if isinstance(write_id, str) else write_id
        from botocore.exceptions import ClientError

        self._requests.count("HEAD")
        try:
            resp = self._requests.client.head_object(Bucket=self._requests.bucket, Key=self._requests.full(key))
        except ClientError as e:
            code, status, _ = error_parts(e)
            if status == 404 or code in NOT_FOUND_CODES:
                return None
            raise self._requests.error(e, "HeadObject", key) from e
        except transport_errors() as e:
            raise self._requests.error(e, "HeadObject", key) from e
        meta = {k.lower(): v for k, v in (resp.get("Metadata") or {}).items()}
        info = ObjectInfo(key, int(resp.get("ContentLength", 0)), resp.get("ETag", ""),
                          resp["LastModified"].timestamp() if resp.get("LastModified") else server_time(resp))
        if WRITE_ID_METADATA in meta:
            return info if meta[WRITE_ID_METADATA] in ours else None
        if meta or info.size != len(data):
            return None
        try:
            return info if self._store.get(key) == data else None
        except ObjectNotFound:
            return None

    def _write_multipart(self, key: str, data: bytes, cond: dict, sse: dict | None = None) -> ObjectInfo:
        """Multipart upload of ``data`` with the precondition ``cond`` on CompleteMultipartUpload."""
        from botocore.exceptions import ClientError

        ambiguous = False
        write_ids: set[str] = set()
        for attempt in range(self._store.conflict_retries + 1):
            write_id = uuid.uuid4().hex
            write_ids.add(write_id)
            upload_id = self._requests.call("CreateMultipartUpload", key, self._requests.client.create_multipart_upload,
                                            Bucket=self._requests.bucket, Key=self._requests.full(key),
                                            Metadata={WRITE_ID_METADATA: write_id},
                                            **(self._sse_params if sse is None else sse))["UploadId"]
            self._requests.count("PUT")
            completed = False
            try:
                parts = self._upload_parts(key, upload_id, data)
                self._requests.count("PUT")
                try:
                    resp = self._requests.client.complete_multipart_upload(
                        Bucket=self._requests.bucket, Key=self._requests.full(key), UploadId=upload_id,
                        MultipartUpload={"Parts": parts}, **cond)
                except ClientError as e:
                    ambiguous = ambiguous or retry_attempts(e) > 0
                    code, status, _ = error_parts(e)
                    if status == 409 or code == "ConditionalRequestConflict":
                        if attempt < self._store.conflict_retries:
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
                    raise self._requests.error(e, "CompleteMultipartUpload", key) from e
                except transport_errors() as e:
                    info = self._resolve_unknown(e, "CompleteMultipartUpload", key, write_ids, data)
                    completed = True
                    return info
                completed = True
                return ObjectInfo(key, len(data), resp.get("ETag", ""), server_time(resp))
            finally:
                if not completed:
                    self._abort(key, upload_id)
        raise AssertionError("unreachable")  # pragma: no cover

    def _upload_parts(self, key: str, upload_id: str, data: bytes) -> list[dict]:
        size = max(self._store.multipart_chunksize, -(-len(data) // _MAX_PARTS))
        view = memoryview(data)
        ranges = [(n + 1, off, min(off + size, len(data))) for n, off in enumerate(range(0, len(data), size))]

        def one(part: tuple[int, int, int]) -> dict:
            number, start, end = part
            self._requests.count("PUT", up=end - start)
            resp = self._requests.call("UploadPart", key, self._requests.client.upload_part,
                                       Bucket=self._requests.bucket,
                                       Key=self._requests.full(key), UploadId=upload_id, PartNumber=number,
                                       Body=bytes(view[start:end]))
            return {"ETag": resp["ETag"], "PartNumber": number}

        with ThreadPoolExecutor(max_workers=min(8, len(ranges))) as pool:
            return list(pool.map(one, ranges))

    def _abort(self, key: str, upload_id: str) -> None:
        """Best-effort AbortMultipartUpload (a lifecycle rule cleans up what this misses)."""
        self._requests.count("DELETE")
        try:
            self._requests.client.abort_multipart_upload(Bucket=self._requests.bucket, Key=self._requests.full(key),
                                                         UploadId=upload_id)
        except Exception:  # noqa: BLE001 - e.g. NoSuchUpload after a 409; never mask the real error
            pass

    def leftovers(self) -> list[Leftover]:
        """Return the multipart uploads under the store's prefix that were initiated and never
        completed nor aborted (ListMultipartUploads, paginated): what a process killed in the
        middle of a large write leaves (S3 bills their parts until they are aborted). ``mtime`` is
        the upload's ``Initiated`` time (the store's clock); ``size`` is 0 (not listed).

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError.
        """
        out = []
        params: dict[str, Any] = {"Bucket": self._requests.bucket, "Prefix": self._requests.root}
        cut = len(self._requests.root)
        while True:
            self._requests.count("LIST")
            resp = self._requests.call("ListMultipartUploads", None, self._requests.client.list_multipart_uploads,
                                       **params)
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
            self._requests.count("DELETE")
            try:
                self._requests.call("AbortMultipartUpload", it.name, self._requests.client.abort_multipart_upload,
                                    Bucket=self._requests.bucket, Key=self._requests.full(it.name), UploadId=it.upload_id)
                n += 1
            except ObjectNotFound:
                pass  # NoSuchUpload: completed or aborted meanwhile
        return n

    def _backoff(self, attempt: int) -> None:
        """Sleep before conflict retry ``attempt`` (jittered, doubling from ``conflict_backoff``, at most 2 s)."""
        delay = min(2.0, self._store.conflict_backoff * (2 ** attempt))
        time.sleep(delay * (0.5 + random.random() / 2))

