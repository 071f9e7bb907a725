"""The ASGI app: routes of the checkpoint service over :class:`snapstore.server.service.Service`.

Build it with :func:`create_app`; ``snapstore serve`` runs it with uvicorn. Routes (every one but
``/``, ``/ui/*``, ``/healthz`` and ``/openapi.json`` needs ``Authorization: Bearer <token>`` unless
the server runs without a token):

=====================================================  ==============================================
``GET /agents/{name}/checkpoints?runId=``               a run's checkpoints of agent ``name``, newest first
``POST /agents/{name}/rollback/{checkpointId}?runId=``  roll back (``expectHead`` optional)
``GET /runs``                                           run ids (limit/cursor)
``DELETE /runs/{runId}``                                delete a run
``GET|POST /runs/{runId}/checkpoints``                  list (limit/cursor) / save a checkpoint
``GET|DELETE /runs/{runId}/checkpoints/{id}``           one checkpoint's metadata / delete it
``GET /runs/{runId}/checkpoints/{id}/messages``         its messages and session state (streamed)
``POST /runs/{runId}/checkpoints/{id}/rollback|fork``   roll back to it / fork a new run from it
``GET /runs/{runId}/diff?from=&to=``                    how two checkpoints' messages differ
``POST /prune``, ``POST /gc``, ``GET /stats``           retention, garbage collection, statistics
``GET /healthz``, ``GET /metrics``                      liveness, Prometheus metrics
=====================================================  ==============================================

Path parameters are percent-encoded path segments (an id holding ``/`` is sent as ``%2F``).
"""

from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.middleware.cors import CORSMiddleware

from .. import __version__
from ..manager.facade import CheckpointManager
from .errors import ApiError, install_handlers
from .metrics import Metrics, MetricsMiddleware
from .middleware import BodyLimitMiddleware, RawPathMiddleware, SecurityHeadersMiddleware
from .routes import checkpoint_routes, public_routes, repository_routes
from .service import Service, message_json
from .settings import ServerSettings

__all__ = ["create_app", "JSONBytesResponse"]

DESCRIPTION = """\
snapstore's checkpoint service: list, save, read, roll back, fork and prune AI-agent checkpoints
stored in a content-addressed, deduplicated snapstore repository (local directory or S3).

Authentication: `Authorization: Bearer <token>` (the server's `$SNAPSTORE_TOKEN` or `--token-file`)
on every route except `/`, `/ui/*`, `/healthz` and `/openapi.json`. Errors are JSON
`{"error": {"code", "message", "status"}}` with a stable `code`. Path parameters are
percent-encoded path segments (an id holding `/` is sent as `%2F`). Conditional writes:
`expectHead` is the checkpoint id the caller believes is the run's head (`""`: the run has
none); another head gives 409 `head_mismatch` and changes nothing. A method a path does not
document gets 405 `method_not_allowed` with `Allow` naming the methods it has (HEAD is not
served). A body larger than the server's limit gets 413 on any route.
"""


class JSONBytesResponse(JSONResponse):
    """JSON rendered with orjson (key order kept), falling back to the standard library for
    integers beyond 64 bits and lone surrogates, which messages may hold."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return message_json(content)


def create_app(location: "str | CheckpointManager | None" = None, settings: ServerSettings | None = None,
               **manager_options) -> FastAPI:
    """Build the service's ASGI app.

    Args:
        location: a repository location (as ``CheckpointManager`` takes it) or a manager to serve
            (the caller keeps ownership: the app does not close it).
        settings: token, body limit, CORS origins (default: no token, 64 MiB, no CORS).
        **manager_options: for a manager the app opens itself (e.g. ``endpoint_url=``).
    Returns:
        A FastAPI app; its ``state.service`` is the :class:`~snapstore.server.service.Service`.
    """
    settings = settings or ServerSettings()
    owned = not isinstance(location, CheckpointManager)
    mgr = CheckpointManager(location, **manager_options) if owned else location
    service = Service(mgr)
    metrics = Metrics(mgr.store)

    @asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            if owned:
                mgr.close()

    app = FastAPI(title="snapstore", version=__version__, description=DESCRIPTION, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json", default_response_class=JSONBytesResponse, lifespan=lifespan)
    app.state.service = service
    app.state.settings = settings
    app.state.metrics = metrics
    install_handlers(app)

    bearer = HTTPBearer(auto_error=False, scheme_name="bearerToken",
                        description="the server's token ($SNAPSTORE_TOKEN or --token-file)")

    def require_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        token = settings.token
        if token is None:
            return
        challenge = {"WWW-Authenticate": 'Bearer realm="snapstore"'}
        if creds is None:
            raise ApiError(401, "missing_token", "this request needs an Authorization: Bearer <token> header",
                           challenge)
        if not hmac.compare_digest(creds.credentials.encode("utf-8", "surrogatepass"), token.encode("utf-8")):
            raise ApiError(401, "invalid_token", "the bearer token is not this server's token", challenge)

    app.include_router(checkpoint_routes(service), dependencies=[Depends(require_token)])
    app.include_router(repository_routes(service, metrics), dependencies=[Depends(require_token)])
    app.include_router(public_routes())

    # middleware, innermost first
    app.add_middleware(RawPathMiddleware)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"], allow_headers=["Authorization", "Content-Type"])
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
