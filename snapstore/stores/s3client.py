"""Building :class:`~snapstore.stores.s3.S3Store`'s boto3 client and reading its options: the
botocore config (retries cut to fit a call deadline, pool size, timeouts), the ``Expect:
100-continue`` hook, and the ``s3://BUCKET/PREFIX?option=value`` URL form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import CredentialsError, InvalidInputError

#: Default HTTP connection pool size of a store-built client (= its ``max_concurrency``).
DEFAULT_MAX_POOL_CONNECTIONS = 128

URL_OPTIONS = {
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
"""Query options of an ``s3://`` URL -> the :class:`~snapstore.stores.s3.S3Store` argument each sets."""
_INT = {"max_attempts", "max_pool_connections", "multipart_threshold", "multipart_chunksize",
        "expect_continue_threshold"}
_FLOAT = {"connect_timeout", "read_timeout", "call_timeout"}

DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one store call (one ``get``, ``put``, ``head``, one LIST page...) may take at most,
botocore's retries included, by default (the ``call_timeout`` option)."""


def retry_sleep_bound(attempts: int) -> float:
    """The most seconds botocore's standard and adaptive retry modes sleep between ``attempts``
    attempts of one request (a random share of ``2^i`` seconds before retry ``i``, capped at 20)."""
    return float(sum(min(20, 2 ** i) for i in range(1, attempts)))


def attempts_within(call_timeout: float, connect_timeout: float, read_timeout: float, retries: int) -> int:
    """How many attempts in all (at least 1, at most ``retries + 1``) one request may make so that
    all of them, each waiting at most ``connect_timeout + read_timeout`` seconds, and the sleeps
    between them fit in ``call_timeout`` seconds."""
    n = max(1, retries + 1)
    while n > 1 and n * (connect_timeout + read_timeout) + retry_sleep_bound(n) > call_timeout:
        n -= 1
    return n


def expect_continue_hook(threshold: int):
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


@dataclass(frozen=True)
class ClientSettings:
    """What a store-built boto3 S3 client is made with (see :class:`~snapstore.stores.s3.S3Store`).

    Attributes:
        endpoint_url, region_name, profile_name: where and as whom (None: botocore's resolution).
        addressing_style: ``"path"``, ``"virtual"``, ``"auto"`` or None.
        total_attempts: attempts of one request in all (botocore's ``total_max_attempts``).
        retry_mode: botocore retry mode.
        max_pool_connections: HTTP connection pool size (>= 1).
        connect_timeout, read_timeout: seconds.
        expect_continue_threshold: bodies smaller than this many bytes go without ``Expect:
            100-continue``; 0 keeps botocore's behaviour.
    """

    endpoint_url: str | None
    region_name: str | None
    profile_name: str | None
    addressing_style: str | None
    total_attempts: int
    retry_mode: str
    max_pool_connections: int
    connect_timeout: float
    read_timeout: float
    expect_continue_threshold: int = 1 << 20


def make_client(settings: ClientSettings) -> Any:
    """A boto3 S3 client made with ``settings``.

    Raises:
        CredentialsError: the named profile does not exist.
        InvalidInputError: an option botocore refuses.
    """
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    try:
        session = boto3.Session(profile_name=settings.profile_name)
    except ProfileNotFound as e:
        raise CredentialsError(f"AWS profile not found: {settings.profile_name or e}") from e
    s3_cfg: dict[str, Any] = {}
    if settings.addressing_style and settings.addressing_style != "auto":
        s3_cfg["addressing_style"] = settings.addressing_style
    if settings.max_pool_connections < 1:
        raise InvalidInputError(f"max_pool_connections must be >= 1, not {settings.max_pool_connections!r}")
    try:
        config = Config(
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.total_attempts},
            max_pool_connections=settings.max_pool_connections,
            connect_timeout=settings.connect_timeout,
            read_timeout=settings.read_timeout,
            tcp_keepalive=True,
            user_agent_extra="snapstore",
            s3=s3_cfg or None,
        )
    except (BotoCoreError, ValueError, TypeError) as e:
        raise InvalidInputError(f"invalid S3 client option: {e}") from e
    kwargs: dict[str, Any] = {"config": config}
    if settings.endpoint_url:  # None lets botocore resolve AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL itself
        kwargs["endpoint_url"] = settings.endpoint_url
    if settings.region_name:
        kwargs["region_name"] = settings.region_name
    try:
        client = session.client("s3", **kwargs)
    except BotoCoreError as e:
        raise InvalidInputError(f"invalid S3 client option: {e}") from e
    except ValueError as e:
        raise InvalidInputError(f"invalid S3 client option: {e}") from e
    if settings.expect_continue_threshold > 0:
        # botocore's add_expect_header (before-call.s3) runs first; this client-local hook runs
        # just before signing (Expect is never a signed header), on every attempt.
        hook = expect_continue_hook(settings.expect_continue_threshold)
        for op in ("PutObject", "UploadPart"):
            client.meta.events.register(f"before-sign.s3.{op}", hook, unique_id=f"snapstore-expect-{op}")
    return client


def parse_url(url: str) -> tuple[str, str, dict[str, Any]]:
    """Read ``s3://BUCKET[/PREFIX][?option=value&...]`` (the options of :meth:`S3Store.from_url
    <snapstore.stores.s3.S3Store.from_url>`).

    Returns:
        ``(bucket, prefix, keyword arguments of S3Store)``; numbers converted, empty strings None.
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
        if name not in URL_OPTIONS:
            raise InvalidInputError(f"unknown S3 URL option {name!r} in {url!r}; "
                                    f"known: {', '.join(sorted(URL_OPTIONS))}")
        target = URL_OPTIONS[name]
        value: Any = values[-1]
        try:
            if target in _INT:
                value = int(value)
            elif target in _FLOAT:
                value = float(value)
        except ValueError:
            raise InvalidInputError(f"S3 URL option {name} must be a number, not {value!r}") from None
        kwargs[target] = (value or None) if isinstance(value, str) else value
    return bucket, unquote(parts.path), kwargs
