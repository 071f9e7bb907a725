"""snapstore's checkpoint service: a small, safe HTTP API and a browsing page over
:class:`~snapstore.manager.facade.CheckpointManager` (the ``server`` extra: FastAPI + uvicorn).

Start it with ``snapstore serve`` or::

    from snapstore.server import ServerSettings, create_app, serve
    serve("agent-checkpoints", host="127.0.0.1", port=8080, settings=ServerSettings(token="..."))

Modules: :mod:`.app` (routes), :mod:`.service` (operations over the manager), :mod:`.models`
(request/response bodies = the OpenAPI schema), :mod:`.errors` (JSON errors with stable codes),
:mod:`.middleware` (raw-path routing, body limit, security headers), :mod:`.metrics`
(Prometheus), :mod:`.settings` (token rules), :mod:`.openapi` (the committed OpenAPI document).
"""

from __future__ import annotations

from .settings import ServerSettings, is_loopback, resolve_token

__all__ = ["create_app", "serve", "ServerSettings", "is_loopback", "resolve_token"]


def create_app(*args, **kwargs):
    """See :func:`snapstore.server.app.create_app` (imported lazily: FastAPI is an extra)."""
    from .app import create_app as make
    return make(*args, **kwargs)


def serve(location=None, host: str = "127.0.0.1", port: int = 8080, settings: ServerSettings | None = None,
          log_level: str = "info", **manager_options) -> None:
    """Serve the repository at ``location`` over HTTP with uvicorn until interrupted.

    Args:
        location: repository location (``CheckpointManager``'s first argument).
        host, port: where to listen (port 0: a free port).
        settings: token, body limit, CORS (default: no token; the caller checks the token rules
            with :func:`resolve_token`).
        log_level: uvicorn's log level.
        **manager_options: passed to ``CheckpointManager``.
    """
    import uvicorn

    app = create_app(location, settings, **manager_options)
    uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False, proxy_headers=False)
