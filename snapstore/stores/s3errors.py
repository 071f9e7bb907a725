"""How :class:`~snapstore.stores.s3.S3Store` turns botocore's exceptions into :mod:`snapstore.errors`
classes: the S3 error codes of each kind, the transport exceptions a request can fail with, and
:func:`translate_error`, which names the operation, the object and the endpoint in one line.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import AccessDenied, BucketNotFound, CredentialsError, ObjectNotFound, PreconditionFailed, StoreError

CREDENTIAL_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException",
    "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId", "UnrecognizedClientException",
    "AuthorizationHeaderMalformed", "MissingSecurityHeader", "InvalidSecurity",
}
ACCESS_CODES = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidObjectState"}
NOT_FOUND_CODES = {"NoSuchKey", "404", "NotFound"}
"""S3 error codes of each kind: rejected credentials (:class:`~snapstore.errors.CredentialsError`),
refused access (:class:`~snapstore.errors.AccessDenied`), a missing object."""


_TRANSPORT: tuple | None = None


def transport_errors() -> tuple:
    """Exception classes a request can fail with without an S3 error response: botocore's own,
    and what urllib3, http.client and the socket layer raise when botocore does not wrap them
    (e.g. ``urllib3.exceptions.ProtocolError`` on a connection reset). Each is mapped to a
    :mod:`snapstore.errors` class naming the operation and key (see :func:`translate_error`)."""
    global _TRANSPORT
    if _TRANSPORT is None:
        import http.client

        import urllib3.exceptions
        from botocore.exceptions import BotoCoreError
        _TRANSPORT = (BotoCoreError, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)
    return _TRANSPORT


def error_parts(exc: Exception) -> tuple[str, int, str]:
    """(error code, HTTP status, message) of a botocore ClientError."""
    resp = getattr(exc, "response", None) or {}
    err = resp.get("Error") or {}
    status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
    return str(err.get("Code") or status or ""), int(status), str(err.get("Message") or "").strip()


def retry_attempts(exc_or_resp: Any) -> int:
    """How many times botocore retried the call internally (0 if unknown)."""
    resp = exc_or_resp if isinstance(exc_or_resp, dict) else (getattr(exc_or_resp, "response", None) or {})
    return int((resp.get("ResponseMetadata") or {}).get("RetryAttempts") or 0)


def translate_error(exc: Exception, op: str, key: str | None, *, where: str, bucket: str, endpoint: str,
                    waits: Callable[[str], str]) -> Exception:
    """Translate a botocore exception into one snapstore error with a one-line message.

    Args:
        exc: what botocore (or the transport below it) raised.
        op: the S3 operation (``"PutObject"``, ``"HeadObject"``...), named in the message.
        key: the object key, or None for bucket-level calls.
        where: the ``s3://bucket/prefix/key`` the call was about.
        bucket: the bucket name.
        endpoint: the endpoint URL the client talks to.
        waits: ``waits("read_timeout")`` says what a timed-out call waited for (e.g. ``12 s
            (read_timeout) x 3 attempts (call_timeout 60 s)``).
    Returns:
        The error to raise: BucketNotFound, CredentialsError, AccessDenied, ObjectNotFound,
        PreconditionFailed or StoreError.
    """
    from botocore.exceptions import (
        ClientError, ConnectTimeoutError, EndpointConnectionError, NoCredentialsError,
        NoRegionError, PartialCredentialsError, ProfileNotFound, ReadTimeoutError,
    )

    if isinstance(exc, ClientError):
        code, status, msg = error_parts(exc)
        detail = f"{code} (HTTP {status})" + (f": {msg}" if msg else "")
        if code == "NoSuchBucket":
            return BucketNotFound(f"S3 bucket not found: {bucket} ({op} {where})")
        if code in CREDENTIAL_CODES:
            return CredentialsError(f"S3 rejected the credentials for {op} {where}: {detail}")
        if code in ACCESS_CODES or status == 403:
            extra = " (HEAD responses carry no error code: the credentials may also be invalid)" \
                if op == "HeadObject" else ""
            return AccessDenied(f"S3 access denied: {op} {where}{extra}")
        if key is not None and (code in NOT_FOUND_CODES or status == 404):
            return ObjectNotFound(key, f"object not found: {key} ({where})")
        if status == 412 or code == "PreconditionFailed":
            return PreconditionFailed(key or where)
        return StoreError(f"S3 {op} failed for {where}: {detail}")
    if isinstance(exc, (NoCredentialsError, PartialCredentialsError, ProfileNotFound)):
        return CredentialsError(f"no usable AWS credentials for {op} {where}: {exc}")
    if isinstance(exc, NoRegionError):
        return StoreError(f"no AWS region configured for {op} {where}: set AWS_REGION or region=")
    if isinstance(exc, ConnectTimeoutError):
        return StoreError(f"cannot reach the S3 endpoint for {op} {where}: no connection to {endpoint} "
                          f"within {waits('connect_timeout')}: {exc}")
    if isinstance(exc, EndpointConnectionError):
        return StoreError(f"cannot reach the S3 endpoint for {op} {where} ({endpoint}): {exc}")
    if isinstance(exc, ReadTimeoutError):
        return StoreError(f"S3 {op} timed out for {where}: the endpoint {endpoint} accepted the "
                          f"connection but sent no response within {waits('read_timeout')}: {exc}")
    return StoreError(f"S3 {op} failed for {where}: {type(exc).__name__}: {exc}")
