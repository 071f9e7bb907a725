"""HTTP errors: every error response is JSON ``{"error": {"code", "message", "status", ...}}``
with a stable ``code``, and never a stack trace.

Codes (status): ``missing_token``, ``invalid_token`` (401); ``not_found``, ``run_not_found``,
``checkpoint_not_found`` (404); ``method_not_allowed`` (405); ``conflict``, ``head_mismatch``
(409); ``body_too_large`` (413); ``invalid_request`` (422: the request does not fit the OpenAPI
schema), ``invalid_input``, ``invalid_message``, ``invalid_run_id``, ``invalid_checkpoint_id``
(422: the library refused a value; a body the framework cannot read, not UTF-8 or nested too
deeply, is ``invalid_request`` too); ``bad_request`` (400: not answered by the service's routes); ``integrity_error``,
``unsupported_format``, ``repository_error``, ``internal_error`` (500); ``store_error``,
``access_denied``, ``bucket_not_found``, ``credentials_error`` (503: the storage backend failed).
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from .. import errors as E
from .service import HeadMismatch

__all__ = ["ApiError", "allowed_methods", "error_response", "install_handlers", "library_error_status"]

log = logging.getLogger("snapstore.server")

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "body_too_large", 415: "unsupported_media_type",
               422: "invalid_request", 500: "internal_error"}

# most specific first
_LIBRARY = [
    (HeadMismatch, 409, "head_mismatch"),
    (E.InvalidMessageError, 422, "invalid_message"),
    (E.InvalidRunIdError, 422, "invalid_run_id"),
    (E.InvalidCheckpointIdError, 422, "invalid_checkpoint_id"),
    (E.InvalidInputError, 422, "invalid_input"),
    (E.RunNotFound, 404, "run_not_found"),
    (E.CheckpointNotFound, 404, "checkpoint_not_found"),
    (E.ObjectNotFound, 500, "integrity_error"),  # a referenced object is missing: damaged repository
    (E.NotFoundError, 404, "not_found"),
    (E.ConflictError, 409, "conflict"),
    (E.IntegrityError, 500, "integrity_error"),
    (E.UnsupportedFormatError, 500, "unsupported_format"),
    (E.RepositoryError, 500, "repository_error"),
    (E.AccessDenied, 503, "access_denied"),
    (E.BucketNotFound, 503, "bucket_not_found"),
    (E.CredentialsError, 503, "credentials_error"),
    (E.StoreError, 503, "store_error"),
]


class ApiError(Exception):
    """An error the API answers with ``status`` and ``code`` (``extra``: more fields of the body)."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None, **extra):
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.extra = status, code, message, headers, extra


def error_response(status: int, code: str, message: str, headers: dict | None = None, **extra) -> JSONResponse:
    """The JSON error response."""
    body = {"code": code, "message": message, "status": status}
    body.update({k: v for k, v in extra.items()})
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def library_error_status(exc: E.SnapstoreError) -> tuple[int, str]:
    """(HTTP status, code) for a library error."""
    for cls, status, code in _LIBRARY:
        if isinstance(exc, cls):
            return status, code
    return 500, "internal_error"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: every method some route answers on the request's path.

    The router stops at the first route whose path matches, so the framework's own header names
    only that route's methods (``GET`` for a path that also has ``DELETE``); here each method is
    tried against every route (the app's own matching, whatever the routers' nesting)."""
    from starlette.routing import Match

    routes = getattr(request.app, "routes", ())
    ok = [m for m in _METHODS
          if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]
    return ", ".join(ok)


def _clean_details(errors) -> list[dict]:
    out = []
    for e in errors[:20]:
        out.append({"loc": [str(x) for x in e.get("loc", ())], "message": str(e.get("msg", ""))[:500],
                    "type": str(e.get("type", ""))})
    return out


def install_handlers(app) -> None:
    """Register the JSON error handlers on a FastAPI ``app``."""
    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers, **exc.extra)

    @app.exception_handler(E.SnapstoreError)
    async def _library(request: Request, exc: E.SnapstoreError):
        status, code = library_error_status(exc)
        extra = {}
        if isinstance(exc, HeadMismatch):
            extra["head"] = exc.head
        run_id = getattr(exc, "run_id", None)  # set by the run-scoped routes (routes.run_scoped)
        if isinstance(exc, (E.RunNotFound, E.CheckpointNotFound)) and isinstance(run_id, str):
            extra["runId"] = run_id
        if status >= 500:
            log.error("%s %s: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
        return error_response(status, code, str(exc) or type(exc).__name__, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        details = _clean_details(exc.errors())
        first = details[0] if details else {"loc": [], "message": "invalid request"}
        where = ".".join(first["loc"])
        message = f"{where}: {first['message']}" if where else first["message"]
        kinds = {d.get("type") for d in details}
        if kinds & {"json_invalid"}:  # loc ["body", 28]: 28 is a character offset, not a field
            pos = first["loc"][1] if len(first["loc"]) > 1 else None
            message = f"the request body is not valid JSON ({first['message']}" + \
                (f" at character {pos})" if pos is not None else ")")
        ctype = request.headers.get("content-type", "")
        if first["loc"][:1] == ["body"] and "json" not in ctype.lower() and request.method in ("POST", "PUT", "PATCH"):
            message += f" (the body is read as JSON: send it with Content-Type: application/json; got {ctype or 'none'})"
        return error_response(422, "invalid_request", message, details=details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 400 and isinstance(exc.__cause__, (ValueError, RecursionError)):
            # the framework could not parse the body: like malformed JSON, 422
            if isinstance(exc.__cause__, RecursionError):
                message = "the request body is JSON nested too deeply to read"
            else:
                message = "the request body is not JSON text in UTF-8"
            return error_response(422, "invalid_request", message,
                                  details=[{"loc": ["body"], "message": str(exc.__cause__)[:500], "type": "json_invalid"}])
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": allowed_methods(request)}
        code = _HTTP_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return error_response(exc.status_code, code, message, headers)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.exception("%s %s: unexpected error", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error (see the server log)")
