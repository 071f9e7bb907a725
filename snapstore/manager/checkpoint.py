"""The checkpoint values the API hands out: :class:`CheckpointSummary`, :class:`Checkpoint`, and
:data:`EMPTY_RUN` (the ``expect_head`` value for a run without a live checkpoint).

Layer 4, below everything else in it: plain values built from a manifest (:mod:`snapstore.format.manifest`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..format.manifest import Manifest

@dataclass(frozen=True)
class CheckpointSummary:
    """A checkpoint's metadata without its messages (what :meth:`CheckpointManager.list` returns).

    Attributes:
        id: checkpoint id. run_id: the run. seq: position in the run's log.
        step, token_usage, metrics, agent_id, status, metadata: as passed to ``save`` (or None).
        created_at: creation time, timezone-aware UTC. parent_id: the parent checkpoint id or None.
        message_count: number of messages. message_bytes: their total JSON size in bytes.
    """

    id: str
    run_id: str
    seq: int
    step: object
    token_usage: object
    metrics: object
    agent_id: object
    status: object
    metadata: object
    created_at: datetime
    parent_id: str | None
    message_count: int
    message_bytes: int

    @classmethod
    def from_manifest(cls, m: Manifest) -> "CheckpointSummary":
        """The summary of checkpoint record ``m`` (a :class:`~snapstore.format.manifest.Manifest` of kind
        checkpoint); nothing is read."""
        f = m.fields
        return cls(m.checkpoint_id, m.run_id, m.seq, f.get("step"), f.get("token_usage"), f.get("metrics"),
                   f.get("agent_id"), f.get("status"), f.get("metadata"), m.created, m.parent_id, m.count, m.size)


@dataclass(frozen=True)
class Checkpoint(CheckpointSummary):
    """A restored checkpoint: the summary fields plus ``messages`` (list) and ``session_state``.

    ``messages`` equals what ``save`` was given (JSON values; tuples come back as lists).
    """

    messages: list = None
    session_state: object = None




class _EmptyRun:
    """Type of :data:`EMPTY_RUN` (a singleton)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY_RUN"

    def __reduce__(self):
        return "EMPTY_RUN"


EMPTY_RUN = _EmptyRun()
"""``expect_head=EMPTY_RUN``: the compare-and-swap expects the run to have no live checkpoint
(never saved, deleted, or every checkpoint deleted). ``expect_head=None`` (the default) means no
explicit expectation: the caller's own view of the run applies (docs/format.md §20)."""


def make_checkpoint(repo, m: Manifest, messages: list) -> Checkpoint:
    """The :class:`Checkpoint` of checkpoint manifest ``m`` with its restored ``messages``; its
    session state is read from ``repo`` (a :class:`~snapstore.repo.repository.Repository`; inline,
    or the chunks it names)."""
    f = m.fields
    return Checkpoint(m.checkpoint_id, m.run_id, m.seq, f.get("step"), f.get("token_usage"), f.get("metrics"),
                      f.get("agent_id"), f.get("status"), f.get("metadata"), m.created, m.parent_id, m.count,
                      m.size, messages, repo.load_session_state(m))
