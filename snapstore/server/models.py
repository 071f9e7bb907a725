"""Request and response bodies of the HTTP API (pydantic models: they are the OpenAPI schema).

Field names are camelCase on the wire. Values the library takes as free JSON (step, tokenUsage,
metrics, metadata, sessionState, messages) are any JSON value. Times are ISO 8601 UTC strings.
"""

from __future__ import annotations

from datetime import timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..manager.facade import CheckpointSummary

__all__ = ["CURSOR_PATTERN", "DURATION_LIMIT", "DURATION_PATTERN", "ErrorBody", "ErrorResponse", "CheckpointOut", "CheckpointPage", "RunPage", "SaveRequest",
           "ForkRequest", "PruneRequest", "PruneResponse", "GCRequest", "GCResponse", "StatsResponse",
           "HealthResponse", "DiffOp", "DiffResponse", "MessagesResponse", "DeleteResponse", "summary_out"]

# strict: numbers are refused where booleans are expected (pydantic's lax mode takes 1 as true)
_Flag = Field(False, strict=True)

CURSOR_PATTERN = r"^[0-9]{1,20}$"
"""A cursor of a run's checkpoints: the decimal ``seq`` of the last one returned."""


def _integral(v):
    """A JSON number with no fraction (``3.0``) is the integer JSON Schema says it is; booleans,
    strings and ``3.5`` still fail the strict integer check."""
    return int(v) if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 63 else v


Count = Annotated[int, Field(ge=0, le=1_000_000_000, strict=True), BeforeValidator(_integral)]
_Count = Field(None)

DURATION_LIMIT = 86_400_000_000_000
"""Durations of retention rules are below this many seconds (1,000,000,000 days: a
``datetime.timedelta`` holds up to 999,999,999 days and 86,399.999999 s)."""

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?[smhdwySMHDWY])+)$"
"""Text durations: seconds (``"3600"``) or numbers with units s, m, h, d, w, y (``"1d12h"``),
ASCII digits, no blanks."""

Duration = (Annotated[float, Field(ge=0, lt=DURATION_LIMIT, allow_inf_nan=False, strict=True)]
            | Annotated[str, Field(pattern=DURATION_PATTERN)] | None)


class ErrorBody(BaseModel):
    """An error: ``code`` is stable (see docs/server.md), ``message`` is for people."""

    code: str = Field(description="stable machine-readable error code, e.g. checkpoint_not_found")
    message: str
    status: int = Field(description="the HTTP status")
    head: str | None = Field(None, description="head_mismatch only: the run's actual head (null: none)")
    runId: str | None = Field(None, description="run_not_found and checkpoint_not_found of a run-scoped "
                                                "request: the run id asked for")
    details: list[dict[str, Any]] | None = Field(None, description="invalid_request only: what was wrong where")


class ErrorResponse(BaseModel):
    """Every error response body."""

    error: ErrorBody


class CheckpointOut(BaseModel):
    """A checkpoint's metadata (no messages)."""

    id: str
    runId: str
    seq: int = Field(description="position in the run's log; pagination cursors are built from it")
    step: Any = None
    createdAt: str = Field(description="creation time, ISO 8601 UTC")
    parentId: str | None = None
    messageCount: int = Field(description="number of messages")
    messageBytes: int = Field(description="total JSON size of the messages in bytes")
    tokenUsage: Any = None
    metrics: Any = None
    agentId: Any = None
    status: Any = None
    metadata: Any = None


def summary_out(s: CheckpointSummary) -> CheckpointOut:
    """The wire form of a :class:`~snapstore.manager.facade.CheckpointSummary`."""
    return CheckpointOut(
        id=s.id, runId=s.run_id, seq=s.seq, step=s.step,
        createdAt=s.created_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        parentId=s.parent_id, messageCount=s.message_count, messageBytes=s.message_bytes,
        tokenUsage=s.token_usage, metrics=s.metrics, agentId=s.agent_id, status=s.status, metadata=s.metadata)


class CheckpointPage(BaseModel):
    """A page of a run's checkpoints, newest first."""

    runId: str
    checkpoints: list[CheckpointOut]
    nextCursor: str | None = Field(None, pattern=CURSOR_PATTERN,
                                   description="pass as cursor= for the next page; null on the last page")


class RunPage(BaseModel):
    """A page of run ids (sorted)."""

    runs: list[str]
    nextCursor: str | None = None


class SaveRequest(BaseModel):
    """A checkpoint to save: the full message list at this point of the run, plus its metadata."""

    model_config = ConfigDict(extra="forbid")
    messages: list[Any] = Field(description="the full message list (JSON values, usually chat messages)")
    step: Any = None
    tokenUsage: Any = None
    sessionState: Any = None
    metrics: Any = None
    agentId: Any = None
    status: Any = None
    metadata: Any = None
    checkpointId: str | None = Field(None, min_length=1, description="use this id (default: a generated one)")
    parentId: str | None = Field(None, min_length=1, description="branch from this checkpoint (default: the head)")
    expectHead: str | None = Field(None, description="save only if this is the run's head ('' = the run is empty); "
                                                     "else 409 head_mismatch")


class ForkRequest(BaseModel):
    """Where to fork to."""

    model_config = ConfigDict(extra="forbid")
    newRunId: str = Field(min_length=1)


PRUNE_RULES = ("keepLast", "olderThan", "keepWithin", "keepHourly", "keepDaily", "keepWeekly", "keepMonthly",
               "keepYearly")


class PruneRequest(BaseModel):
    """A retention policy (restic ``forget`` semantics: a checkpoint is kept if any rule keeps it).

    At least one rule must keep something: olderThan or keepWithin given (not null), or a count
    (keepLast, keepHourly ... keepYearly) of at least 1; a body of zero counts only would delete
    every checkpoint and is refused. Counts are integers from 0 to 1,000,000,000. Durations are seconds (0 up to, not
    including, 86,400,000,000,000) or text such as ``"7d"``, ``"12h"``, ``"1d12h"`` (units s, m,
    h, d, w, y); text past 999,999,999 days is refused with 422 ``invalid_input``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"required": [k], "properties": {k: {"not": {"type": "null"}}}} if k in ("olderThan", "keepWithin")
        else {"required": [k], "properties": {k: {"type": "integer", "minimum": 1}}} for k in PRUNE_RULES]})
    runId: str | None = Field(None, min_length=1, description="only this run (default: every run)")
    keepLast: Count | None = _Count
    olderThan: Duration = Field(None, description="delete checkpoints older than this")
    keepWithin: Duration = Field(None, description="keep checkpoints within this of the run's newest")
    keepHourly: Count | None = _Count
    keepDaily: Count | None = _Count
    keepWeekly: Count | None = _Count
    keepMonthly: Count | None = _Count
    keepYearly: Count | None = _Count
    dryRun: bool = _Flag

    @model_validator(mode="after")
    def _one_rule(self):
        if all(getattr(self, k) is None for k in PRUNE_RULES):
            raise ValueError("a retention policy needs at least one rule (keepLast, olderThan, keepDaily, ...)")
        return self


class KeptCheckpoint(BaseModel):
    """A checkpoint kept although no rule keeps it, and why."""

    checkpoint: CheckpointOut
    reasons: list[str] = Field(description='e.g. "needed by <id> (LangGraph checkpoint and DeltaChannel delta chain)"')


class PruneResponse(BaseModel):
    """What the policy deleted (with dryRun: would delete), and what it kept only because a kept
    checkpoint needs it (its ``snapstore.needs`` metadata: a LangGraph DeltaChannel delta chain)."""

    dryRun: bool
    deleted: list[CheckpointOut]
    keptAsNeeded: list[KeptCheckpoint] = []


class GCRequest(BaseModel):
    """Garbage-collection options."""

    model_config = ConfigDict(extra="forbid")
    gracePeriod: float | None = Field(None, ge=0, le=100 * 365 * 86400, allow_inf_nan=False, strict=True,
                                      description="seconds (default: the server's, 3600); 0 = reclaim at once "
                                                  "(the server holds its own writes back meanwhile)")
    dryRun: bool = _Flag


class GCResponse(BaseModel):
    """The collector's report (snapstore.maintenance.gc.GCReport.as_dict(): snake_case keys, bytes, seconds)."""

    report: dict[str, Any]


class StatsResponse(BaseModel):
    """Repository statistics (snapstore.maintenance.stats.stats: runs, checkpoints, logical_bytes, stored_bytes, ...)."""

    stats: dict[str, Any]


class HealthResponse(BaseModel):
    """Liveness: the server answers and its repository location was opened."""

    status: Literal["ok"]
    version: str


class DeleteResponse(BaseModel):
    """What was deleted."""

    runId: str
    checkpointId: str | None = Field(None, description="null: the whole run was deleted")


class DiffOp(BaseModel):
    """One step of turning the 'from' message list into the 'to' one (half-open index ranges)."""

    op: Literal["equal", "insert", "delete", "replace"]
    fromStart: int
    fromEnd: int
    toStart: int
    toEnd: int
    fromMessages: list[Any] | None = Field(None, description="the 'from' messages of the range (not for equal)")
    toMessages: list[Any] | None = Field(None, description="the 'to' messages of the range (not for equal)")


class DiffResponse(BaseModel):
    """How one checkpoint's messages differ from another's (exact JSON values compared)."""

    runId: str
    fromCheckpoint: CheckpointOut
    toCheckpoint: CheckpointOut
    ops: list[DiffOp]


class MessagesResponse(BaseModel):
    """A checkpoint's messages (a slice of them with offset/limit), streamed."""

    runId: str
    checkpointId: str
    total: int = Field(description="number of messages in the checkpoint")
    offset: int
    sessionState: Any = None
    messages: list[Any]
