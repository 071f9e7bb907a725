"""The requests of one :class:`~snapstore.stores.s3.S3Store`: one boto3 client on one bucket and
key prefix, each request counted in the store's :class:`~snapstore.stores.base.RequestStats` and
each failure translated into one :mod:`snapstore.errors` class (:func:`~snapstore.stores.s3errors.translate_error`).
"""

from __future__ import annotations

import email.utils
import threading
import time
from typing import Any, Callable

from .base import RequestStats
from .s3errors import transport_errors, translate_error


def server_time(resp: dict) -> float:
    """The response's ``Date`` header (the store's clock) as epoch seconds; local time if absent."""
    date = ((resp.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}).get("date")
    if date:
        try:
            return email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError):
            pass
    return time.time()


class S3Requests:
    """How a store's S3 requests are made, counted and reported.

    Args:
        client: the boto3 S3 client (:attr:`client`).
        bucket: the bucket name (:attr:`bucket`).
        root: the key prefix with its trailing ``/``, or "" (:attr:`root`).
        stats: the store's request counts, updated under one lock.
        endpoint_url: the endpoint the store was given (None: botocore's resolution), named in
            errors when the client does not say.
        waits: ``waits("read_timeout")`` says what a timed-out call waited for (in errors).
    """

    def __init__(self, client: Any, bucket: str, root: str, stats: RequestStats, endpoint_url: str | None,
                 waits: Callable[[str], str]):
        self.client = client
        self.bucket = bucket
        self.root = root
        self.stats = stats
        self._endpoint_url = endpoint_url
        self._waits = waits
        self._lock = threading.Lock()

    def full(self, key: str) -> str:
        """The bucket key of store key ``key`` (the prefix prepended)."""
        return self.root + key

    def where(self, key: str | None = None) -> str:
        """``s3://bucket/prefix/key`` (or of the prefix alone), for messages."""
        return f"s3://{self.bucket}/{self.root}{key}" if key is not None else f"s3://{self.bucket}/{self.root}"

    def count(self, kind: str, up: int = 0, down: int = 0) -> None:
        """Count one request of ``kind`` (``PUT``, ``GET``...) moving ``up``/``down`` payload bytes."""
        with self._lock:
            self.stats.counts[kind] = self.stats.counts.get(kind, 0) + 1
            self.stats.bytes_up += up
            self.stats.bytes_down += down

    def count_down(self, nbytes: int) -> None:
        """Count ``nbytes`` more payload bytes received (a body read after its request was counted)."""
        with self._lock:
            self.stats.bytes_down += nbytes

    def endpoint(self) -> str:
        """The endpoint URL the client talks to (for error messages)."""
        url = getattr(getattr(self.client, "meta", None), "endpoint_url", None)
        return str(url or self._endpoint_url or "(AWS default)")

    def error(self, exc: Exception, op: str, key: str | None = None) -> Exception:
        """The snapstore error for botocore exception ``exc`` of operation ``op`` on ``key``
        (:func:`~snapstore.stores.s3errors.translate_error`)."""
        return translate_error(exc, op, key, where=self.where(key), bucket=self.bucket, endpoint=self.endpoint(),
                               waits=self._waits)

    def call(self, op: str, key: str | None, fn: Callable[..., Any], **params: Any) -> Any:
        """Return ``fn(**params)`` (a client method of operation ``op``), raising its failure as
        :meth:`error` translates it."""
        from botocore.exceptions import ClientError

        try:
            return fn(**params)
        except (ClientError, *transport_errors()) as e:
            raise self.error(e, op, key) from e
