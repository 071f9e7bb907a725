"""ASGI middleware of the service: raw-path routing, request body limit, security headers.

Pure ASGI (no buffering of bodies), so each adds a few microseconds per request.
"""

from __future__ import annotations

import json
from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException

from ..errors import InvalidInputError

__all__ = ["RawPathMiddleware", "BodyLimitMiddleware", "SecurityHeadersMiddleware", "path_param"]


class RawPathMiddleware:
    """Route on the path as sent (still percent-encoded), so that an id holding ``/`` (``%2F``),
    which the library allows, stays one path segment. Handlers decode their path parameters
    with :func:`path_param`. The scope is changed in place, so that outer middleware sees the
    route the router matched (``scope["route"]``)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw:
                scope["path"] = raw.decode("latin-1")
        await self.app(scope, receive, send)


def path_param(value: str, what: str) -> str:
    """Decode one percent-encoded path segment (UTF-8).

    Raises:
        InvalidInputError: not UTF-8 (names ``what``).
    """
    try:
        return unquote_to_bytes(value.encode("latin-1")).decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise InvalidInputError(f"{what} is not percent-encoded UTF-8: {value[:100]!r}") from None


def _json_error(status: int, code: str, message: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "status": status}}).encode()


class BodyTooLarge(HTTPException):
    """A request body passed the limit while it was being read (an HTTPException, so that the
    framework's body parsing passes it on and the JSON error handler answers 413)."""

    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body larger than {max_bytes} bytes")


class BodyLimitMiddleware:
    """Refuse request bodies larger than ``max_bytes`` with 413 ``body_too_large``: at once when
    ``Content-Length`` says so, else as soon as the streamed body passes the limit (memory stays
    bounded by the limit)."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send) -> None:
        body = _json_error(413, "body_too_large", f"request body larger than {self.max_bytes} bytes")
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    n = -1
                if n > self.max_bytes:
                    return await self._refuse(send)
        seen = 0
        started = False

        async def counted_receive():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return msg

        async def watched_send(msg):
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
            await send(msg)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)


class SecurityHeadersMiddleware:
    """Add ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer`` and
    ``X-Frame-Options: DENY`` to every response, and a Content-Security-Policy that allows only
    the app's own scripts, styles and API (no inline scripts, nothing from the network)."""

    CSP = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
           b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(msg):
            if msg["type"] == "http.response.start":
                headers = list(msg.get("headers", ()))
                headers += [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                            (b"x-frame-options", b"DENY"), (b"content-security-policy", self.CSP)]
                msg = dict(msg)
                msg["headers"] = headers
            await send(msg)

        await self.app(scope, receive, with_headers)
