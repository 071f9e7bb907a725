"""The routes of the checkpoint service (see :mod:`snapstore.server.app` for the table), on
:class:`fastapi.APIRouter` objects that :func:`~snapstore.server.app.create_app` mounts: the
checkpoint and repository routes behind the bearer token, the page and ``/healthz`` without.
"""

from __future__ import annotations

from contextlib import contextmanager
from importlib import resources

from fastapi import APIRouter, Body, Path, Query
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from .. import __version__
from ..errors import CheckpointNotFound, RunNotFound
from .errors import ApiError
from .metrics import Metrics
from .middleware import path_param
from .models import (CURSOR_PATTERN, CheckpointOut, CheckpointPage, DeleteResponse, DiffResponse, ErrorResponse,
                     ForkRequest, GCRequest, GCResponse, HealthResponse, KeptCheckpoint, MessagesResponse, PruneRequest,
                     PruneResponse, RunPage, SaveRequest, StatsResponse, summary_out)
from .service import Service, message_json

__all__ = ["PROMETHEUS_TEXT", "checkpoint_routes", "public_routes", "repository_routes"]

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def _errors(*statuses: int) -> dict:
    """The documented error responses ``statuses``; 413 is added to each (the body limit applies
    to whatever body any request sends)."""
    text = {401: "missing or wrong bearer token", 404: "no such run, checkpoint or route",
            409: "conflict: another writer changed the run, or expectHead is not the head",
            413: "request body too large (any request that sends one)",
            422: "invalid request or value (also a body that is not JSON, not UTF-8 or nested too deeply)",
            500: "damaged repository or bug", 503: "the storage backend failed"}
    out = {s: {"model": ErrorResponse, "description": text[s]} for s in sorted({*statuses, 413})}
    if 401 in out:
        out[401]["headers"] = {"WWW-Authenticate": {"description": 'Bearer realm="snapstore"', "required": True,
                                                    "schema": {"type": "string"}}}
    return out


_COMMON = (401, 404, 422, 500, 503)


def _ids(*pairs) -> list[str]:
    return [path_param(v, what) for v, what in pairs]


@contextmanager
def run_scoped(service: Service, run_id: str):
    """Around a request about run ``run_id``: a CheckpointNotFound of a run that has no live
    checkpoint at all becomes RunNotFound (``run_not_found``, 404), and both carry ``run_id``
    (the error body's ``runId``), so that every run-scoped endpoint names an unknown run alike."""
    try:
        yield
    except RunNotFound as e:
        e.run_id = run_id
        raise
    except CheckpointNotFound as e:
        if service.head(run_id) is None:
            err = RunNotFound(f"run {run_id!r} not found")
            err.run_id = run_id
            raise err from None
        e.run_id = run_id
        raise


def checkpoint_routes(service: Service) -> APIRouter:
    """The routes of agents, runs and checkpoints (``/agents/...``, ``/runs...``) over ``service``.

    Returns:
        An :class:`~fastapi.APIRouter` without dependencies (the app adds the token check).
    """
    api = APIRouter()
    run_q = Query(alias="runId", min_length=1, description="the run id")
    expect_q = Query(None, alias="expectHead", description="only if this checkpoint id is the run's head "
                                                           "('' = the run has no checkpoint); else 409")

    cursor_q = Query(None, pattern=CURSOR_PATTERN, description="nextCursor of the previous page")

    # ---- agent-scoped routes: a run's checkpoints and its rollback addressed through the agent
    # (``agent_id``) that wrote them; the service's first two routes, kept as they were
    @api.get("/agents/{name}/checkpoints", response_model=CheckpointPage, responses=_errors(*_COMMON),
             tags=["agents"], summary="A run's checkpoints of one agent, newest first")
    def agent_checkpoints(name: str = Path(description="the checkpoints' agent id"), run_id: str = run_q,
                          limit: int = Query(50, ge=1, le=Service.LIST_MAX),
                          cursor: str | None = cursor_q):
        (name,) = _ids((name, "agent name"))
        with run_scoped(service, run_id):
            page = service.checkpoints(run_id, limit, cursor, agent_id=name)
        return CheckpointPage(runId=run_id, checkpoints=[summary_out(s) for s in page.items],
                              nextCursor=page.next_cursor)

    @api.post("/agents/{name}/rollback/{checkpointId}", response_model=CheckpointOut,
              responses=_errors(*_COMMON, 409), tags=["agents"],
              summary="Roll a run back to one of the agent's checkpoints (later checkpoints deleted)")
    def agent_rollback(name: str, checkpointId: str, run_id: str = run_q, expect_head: str | None = expect_q):
        name, cid = _ids((name, "agent name"), (checkpointId, "checkpoint id"))
        with run_scoped(service, run_id):
            return summary_out(service.rollback(run_id, cid, expect_head=expect_head, agent_id=name))

    # ---- runs and checkpoints -------------------------------------------------------------
    @api.get("/runs", response_model=RunPage, responses=_errors(401, 422, 500, 503), tags=["runs"],
             summary="Run ids with a live checkpoint, sorted")
    def list_runs(limit: int = Query(100, ge=1, le=Service.LIST_MAX),
                  cursor: str | None = Query(None, description="nextCursor of the previous page (any text: "
                                                                        "the runs after it)")):
        page = service.runs(limit, cursor)
        return RunPage(runs=page.items, nextCursor=page.next_cursor)

    @api.delete("/runs/{runId}", response_model=DeleteResponse, responses=_errors(*_COMMON, 409), tags=["runs"],
                summary="Delete a run (a later save to the same id starts a new run)")
    def delete_run(runId: str, expect_head: str | None = expect_q):
        (rid,) = _ids((runId, "run id"))
        with run_scoped(service, rid):
            service.delete(rid, None, expect_head=expect_head)
        return DeleteResponse(runId=rid, checkpointId=None)

    @api.get("/runs/{runId}/checkpoints", response_model=CheckpointPage, responses=_errors(*_COMMON),
             tags=["checkpoints"], summary="A run's checkpoints, newest first")
    def list_checkpoints(runId: str, limit: int = Query(50, ge=1, le=Service.LIST_MAX),
                         cursor: str | None = cursor_q):
        (rid,) = _ids((runId, "run id"))
        with run_scoped(service, rid):
            page = service.checkpoints(rid, limit, cursor)
        return CheckpointPage(runId=rid, checkpoints=[summary_out(s) for s in page.items], nextCursor=page.next_cursor)

    @api.post("/runs/{runId}/checkpoints", response_model=CheckpointOut, status_code=201,
              responses=_errors(*_COMMON, 409, 413), tags=["checkpoints"],
              summary="Save a checkpoint (the full message list; only what is new is stored)")
    def save_checkpoint(runId: str, body: SaveRequest):
        (rid,) = _ids((runId, "run id"))
        s = service.save(rid, body.messages, expect_head=body.expectHead, parent_id=body.parentId,
                         checkpoint_id=body.checkpointId, step=body.step, token_usage=body.tokenUsage,
                         session_state=body.sessionState, metrics=body.metrics, agent_id=body.agentId,
                         status=body.status, metadata=body.metadata)
        return summary_out(s)

    @api.get("/runs/{runId}/checkpoints/{checkpointId}", response_model=CheckpointOut, responses=_errors(*_COMMON),
             tags=["checkpoints"], summary="One checkpoint's metadata")
    def get_checkpoint(runId: str, checkpointId: str):
        rid, cid = _ids((runId, "run id"), (checkpointId, "checkpoint id"))
        with run_scoped(service, rid):
            return summary_out(service.summary(rid, cid))

    @api.get("/runs/{runId}/checkpoints/{checkpointId}/messages", response_model=None,
             responses={200: {"model": MessagesResponse, "description": "the messages (streamed)"},
                        **_errors(*_COMMON)},
             tags=["checkpoints"], summary="A checkpoint's messages and session state, streamed")
    def get_messages(runId: str, checkpointId: str, offset: int = Query(0, ge=0, le=1 << 40),
                     limit: int | None = Query(None, ge=1, le=1 << 40, description="at most this many messages")):
        rid, cid = _ids((runId, "run id"), (checkpointId, "checkpoint id"))
        with run_scoped(service, rid):
            cp = service.checkpoint(rid, cid)
        msgs = cp.messages
        end = len(msgs) if limit is None else min(len(msgs), offset + limit)

        def body():
            head = message_json({"runId": rid, "checkpointId": cid, "total": len(msgs), "offset": offset,
                                 "sessionState": cp.session_state})
            buf = bytearray(head[:-1] + b',"messages":[')
            for i in range(offset, end):
                if i > offset:
                    buf += b","
                buf += message_json(msgs[i])
                if len(buf) >= 1 << 16:
                    yield bytes(buf)
                    buf.clear()
            buf += b"]}"
            yield bytes(buf)

        return StreamingResponse(body(), media_type="application/json")

    @api.delete("/runs/{runId}/checkpoints/{checkpointId}", response_model=DeleteResponse,
                responses=_errors(*_COMMON, 409), tags=["checkpoints"], summary="Delete one checkpoint")
    def delete_checkpoint(runId: str, checkpointId: str, expect_head: str | None = expect_q):
        rid, cid = _ids((runId, "run id"), (checkpointId, "checkpoint id"))
        with run_scoped(service, rid):
            service.delete(rid, cid, expect_head=expect_head)
        return DeleteResponse(runId=rid, checkpointId=cid)

    @api.post("/runs/{runId}/checkpoints/{checkpointId}/rollback", response_model=CheckpointOut,
              responses=_errors(*_COMMON, 409), tags=["checkpoints"],
              summary="Make this checkpoint the head again (later checkpoints deleted)")
    def rollback(runId: str, checkpointId: str, expect_head: str | None = expect_q):
        rid, cid = _ids((runId, "run id"), (checkpointId, "checkpoint id"))
        with run_scoped(service, rid):
            return summary_out(service.rollback(rid, cid, expect_head=expect_head))

    @api.post("/runs/{runId}/checkpoints/{checkpointId}/fork", response_model=CheckpointOut, status_code=201,
              responses=_errors(*_COMMON, 409, 413), tags=["checkpoints"],
              summary="Start a new run at this checkpoint")
    def fork(runId: str, checkpointId: str, body: ForkRequest):
        rid, cid = _ids((runId, "run id"), (checkpointId, "checkpoint id"))
        with run_scoped(service, rid):
            return summary_out(service.fork(rid, cid, body.newRunId))

    @api.get("/runs/{runId}/diff", response_model=DiffResponse, responses=_errors(*_COMMON), tags=["checkpoints"],
             summary="How one checkpoint's messages differ from another's")
    def diff(runId: str, from_id: str = Query(alias="from", min_length=1), to_id: str = Query(alias="to", min_length=1)):
        (rid,) = _ids((runId, "run id"))
        with run_scoped(service, rid):
            d = service.diff(rid, from_id, to_id)
        return {"runId": rid, "fromCheckpoint": summary_out(d["from"]).model_dump(),
                "toCheckpoint": summary_out(d["to"]).model_dump(), "ops": d["ops"]}

    return api


def repository_routes(service: Service, metrics: Metrics) -> APIRouter:
    """The whole-repository routes (``/prune``, ``/gc``, ``/stats``) over ``service`` and
    ``/metrics`` rendering ``metrics``.

    Returns:
        An :class:`~fastapi.APIRouter` without dependencies (the app adds the token check).
    """
    api = APIRouter()

    @api.post("/prune", response_model=PruneResponse, responses=_errors(*_COMMON, 409, 413), tags=["repository"],
              summary="Apply a retention policy (deletes checkpoints; gc reclaims the space)")
    def prune(body: PruneRequest):
        needed: list = []
        def run_prune():
            return service.prune(run_id=body.runId, dry_run=body.dryRun, needed=needed, keep_last=body.keepLast,
                                 older_than=body.olderThan, keep_within=body.keepWithin, keep_hourly=body.keepHourly,
                                 keep_daily=body.keepDaily, keep_weekly=body.keepWeekly, keep_monthly=body.keepMonthly,
                                 keep_yearly=body.keepYearly)
        if body.runId is None:
            gone = run_prune()
        else:
            with run_scoped(service, body.runId):
                gone = run_prune()
        return PruneResponse(dryRun=body.dryRun, deleted=[summary_out(s) for s in gone],
                             keptAsNeeded=[KeptCheckpoint(checkpoint=summary_out(d.checkpoint), reasons=d.reasons)
                                           for d in needed])

    @api.post("/gc", response_model=GCResponse, responses=_errors(401, 409, 413, 422, 500, 503), tags=["repository"],
              summary="Garbage-collect: reclaim what no live checkpoint needs")
    def gc(body: GCRequest | None = Body(None)):
        body = body or GCRequest()
        return GCResponse(report=service.gc(grace_period=body.gracePeriod, dry_run=body.dryRun))

    @api.get("/stats", response_model=StatsResponse, responses=_errors(401, 500, 503), tags=["repository"],
             summary="Repository statistics (lists the whole repository)")
    def stats():
        return StatsResponse(stats=service.stats())

    @api.get("/metrics", response_class=Response, tags=["operations"], summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition format"}, **_errors(401)})
    def get_metrics():
        return Response(metrics.render(), media_type=PROMETHEUS_TEXT)

    return api


def public_routes() -> APIRouter:
    """The routes without a token: ``/healthz`` and the page (``/`` and its ``/ui/<name>`` assets,
    read once from the package's ``page`` folder).

    Returns:
        An :class:`~fastapi.APIRouter`.
    """
    app = APIRouter()

    @app.get("/healthz", response_model=HealthResponse, responses=_errors(), tags=["operations"], summary="Liveness")
    def healthz():
        return HealthResponse(status="ok", version=__version__)

    page = resources.files("snapstore.server") / "page"
    assets = {name: (page / name).read_bytes() for name in ("index.html", "app.js", "app.css")}
    types = {"js": "text/javascript; charset=utf-8", "css": "text/css; charset=utf-8"}

    @app.get("/", include_in_schema=False)
    def index():
        return HTMLResponse(assets["index.html"], headers={"Cache-Control": "no-cache"})

    @app.get("/ui/{name}", include_in_schema=False)
    def asset(name: str):
        data = assets.get(name)
        if data is None or name == "index.html":
            raise ApiError(404, "not_found", f"no asset {name!r}")
        return Response(data, media_type=types[name.rsplit(".", 1)[1]], headers={"Cache-Control": "no-cache"})

    return app
