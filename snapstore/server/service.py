"""The operations the HTTP service offers, over one shared :class:`~snapstore.manager.facade.CheckpointManager`.

Layer 5 (a surface). No HTTP here: :mod:`snapstore.server.app` maps these calls to routes and
their errors to responses. What this module adds to the manager:

* **Conditional writes for stateless callers.** An HTTP client keeps no manager of its own, so
  a save, rollback or delete may carry ``expect_head``: the checkpoint id the caller believes is
  the run's head ("" = the run must have no live checkpoint). It is passed to the manager's own
  compare-and-swap (``expect_head=``, :data:`snapstore.EMPTY_RUN` for ""), so it holds against
  writers in other processes and machines too; a refusal because the head is another becomes
  :class:`HeadMismatch` (a :class:`~snapstore.errors.ConflictError` naming the actual head).
  Each request is its own calling context (the framework runs it in a worker thread with a
  copied context), so without ``expect_head`` a save continues from the run's head, as a new
  manager's would, and never trips over what another client last saw.
* **Cursor pagination** of a run's checkpoints (the cursor is the last returned ``seq``).
* **Exclusive GC**: a GC whose grace period is shorter than the manager's own waits until no
  write of this server is in flight and holds writes back while it runs (``gc(grace_period=0)``
  asserts no other writer is active; the server makes that true for its own writers).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from ..manager import retention
from ..manager.facade import EMPTY_RUN, Checkpoint, CheckpointManager, CheckpointSummary
from ..errors import CheckpointNotFound, ConflictError, InvalidInputError, RunNotFound
from ..format.codec import any_int_digits
from ..format.ids import check_checkpoint_id, check_run_id

__all__ = ["Service", "HeadMismatch", "Page", "message_json"]


class HeadMismatch(ConflictError):
    """The run's head is not the one the caller expected (``expect_head``); nothing was written.

    Attributes:
        run_id: the run. expected: the id the caller gave ("" = no head). head: the actual head id
            (None: the run has no live checkpoint).
    """

    def __init__(self, run_id: str, expected: str, head: str | None):
        want = repr(expected) if expected else "no checkpoint"
        super().__init__(f"run {run_id!r}: expected head {want}, but the head is {head!r}; "
                         "read the run again and retry")
        self.run_id, self.expected, self.head = run_id, expected, head


@dataclass(frozen=True)
class Page:
    """One page of a listing: ``items`` and the cursor of the next page (None: last page)."""

    items: list
    next_cursor: str | None


class _WriteGate:
    """Many concurrent writers, or one exclusive holder (a short-grace GC). Writer-preferring:
    a waiting exclusive holder keeps new writers out, so it cannot starve."""

    def __init__(self):
        self._cond = threading.Condition()
        self._writers = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self):
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._writers += 1
        try:
            yield
        finally:
            with self._cond:
                self._writers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._writers:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


def message_json(value) -> bytes:
    """Compact JSON bytes of one JSON value as the library returns it (key order kept).

    Integers beyond 64 bits and lone surrogates, which orjson refuses, go through the standard
    library (surrogates as ``\\udXXX`` escapes, still valid JSON)."""
    import orjson
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        with any_int_digits():
            return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


def parse_cursor(cursor: str | None) -> int | None:
    """The ``seq`` a cursor names (None: first page).

    Raises:
        InvalidInputError: not a cursor this service issued (a decimal number).
    """
    if cursor is None:
        return None
    if not (isinstance(cursor, str) and cursor.isascii() and cursor.isdigit() and len(cursor) <= 20):
        raise InvalidInputError(f"invalid cursor {cursor!r} (pass back the nextCursor of the previous page)")
    return int(cursor)


class Service:
    """The service's operations over ``manager`` (shared by every request thread).

    Args:
        manager: the checkpoint manager (opened on the repository the server serves).
    """

    LIST_MAX = 1000
    """Largest ``limit`` of one listing page."""

    def __init__(self, manager: CheckpointManager):
        self.manager = manager
        self._gate = _WriteGate()

    # ------------------------------------------------------------------------------------------
    @contextmanager
    def _writing(self, run_id: str):
        check_run_id(run_id)
        with self._gate.shared():
            yield

    def _conditional(self, run_id: str, expect_head: str | None, fn):
        """Call ``fn(expect)`` with the manager's form of ``expect_head``; a ConflictError while
        the head is not the expected one becomes :class:`HeadMismatch`."""
        if expect_head is None:
            return fn(None)
        if expect_head != "":
            check_checkpoint_id(expect_head)
        try:
            return fn(EMPTY_RUN if expect_head == "" else expect_head)
        except ConflictError:
            head = self.head(run_id)
            head_id = head.id if head is not None else None
            if (head_id or "") != expect_head:
                raise HeadMismatch(run_id, expect_head, head_id) from None
            raise

    def head(self, run_id: str) -> CheckpointSummary | None:
        """The run's head checkpoint (newest live one), or None for an empty, deleted or unknown run."""
        return self.manager.head(run_id)

    # ------------------------------------------------------------------------------------------
    # reading

    def runs(self, limit: int = 100, cursor: str | None = None) -> Page:
        """Run ids with a live checkpoint, sorted; the cursor is the last id of the previous page."""
        _check_limit(limit)
        ids = self.manager.runs()
        if cursor is not None:
            ids = [r for r in ids if r > cursor]
        items = ids[:limit]
        return Page(items, items[-1] if len(ids) > limit else None)

    def checkpoints(self, run_id: str, limit: int = 50, cursor: str | None = None,
                    agent_id: str | None = None) -> Page:
        """A page of the run's live checkpoints, newest first (only ``agent_id``'s if given).

        Raises:
            RunNotFound: the run has no live checkpoint (first page only).
            InvalidInputError: a bad limit or cursor.
        """
        _check_limit(limit)
        check_run_id(run_id)
        before = parse_cursor(cursor)
        mgr = self.manager
        out: list[CheckpointSummary] = []
        page = mgr.list(run_id, limit=limit + 1, before_seq=before)
        if not page and before is None:
            raise RunNotFound(f"run {run_id!r} not found")
        out = [s for s in page if agent_id is None or s.agent_id == agent_id]
        if len(page) == limit + 1 and len(out) < limit + 1:
            # the agent filter dropped some: read the rest of the log in bulk (few requests)
            rest = mgr.list(run_id, before_seq=page[-1].seq)
            out += [s for s in rest if s.agent_id == agent_id]
        items = out[:limit]
        return Page(items, str(items[-1].seq) if len(out) > limit else None)

    def summary(self, run_id: str, checkpoint_id: str, agent_id: str | None = None) -> CheckpointSummary:
        """One checkpoint's metadata (its manifest only).

        Raises:
            CheckpointNotFound: no such checkpoint (or it is not ``agent_id``'s).
        """
        s = self.manager.summary(run_id, checkpoint_id)
        if agent_id is not None and s.agent_id != agent_id:
            raise CheckpointNotFound(f"agent {agent_id!r} has no checkpoint {checkpoint_id!r} in run {run_id!r}")
        return s

    def checkpoint(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """One whole checkpoint (messages and session state). Raises CheckpointNotFound."""
        return self.manager.get(run_id, checkpoint_id)

    def diff(self, run_id: str, from_id: str, to_id: str) -> dict:
        """How checkpoint ``to_id``'s message list differs from ``from_id``'s (same run).

        Messages are compared as exact JSON values (key order included). Returns ``{"from":
        summary, "to": summary, "ops": [...]}`` where each op is ``{"op": "equal" | "insert" |
        "delete" | "replace", "fromStart", "fromEnd", "toStart", "toEnd"}`` (half-open index
        ranges) and, except for ``equal``, ``"fromMessages"`` / ``"toMessages"``: the messages of
        those ranges.

        Raises:
            CheckpointNotFound: either checkpoint is missing.
        """
        a = self.manager.get(run_id, from_id)
        b = self.manager.get(run_id, to_id)

        def keys(msgs):
            return [hashlib.blake2b(message_json(m), digest_size=16).digest() for m in msgs]

        sm = difflib.SequenceMatcher(None, keys(a.messages), keys(b.messages), autojunk=False)
        ops = []
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            op = {"op": tag, "fromStart": i1, "fromEnd": i2, "toStart": j1, "toEnd": j2}
            if tag != "equal":
                op["fromMessages"] = a.messages[i1:i2]
                op["toMessages"] = b.messages[j1:j2]
            ops.append(op)
        return {"from": a, "to": b, "ops": ops}

    # ------------------------------------------------------------------------------------------
    # writing

    def save(self, run_id: str, messages: list, *, expect_head: str | None = None, parent_id: str | None = None,
             checkpoint_id: str | None = None, **fields) -> CheckpointSummary:
        """Save a checkpoint; ``fields`` are ``save``'s keyword arguments (step, token_usage, ...).

        The new checkpoint's parent is ``parent_id`` if given, else the run's head (two clients
        both saving after the same head both succeed, one after the other, unless they pass
        ``expect_head``).

        Raises:
            HeadMismatch: ``expect_head`` is not the head; nothing stored.
            ConflictError: a live checkpoint has ``checkpoint_id``, or the run kept changing.
            CheckpointNotFound: ``parent_id`` does not exist.
            InvalidInputError: bad ids or values (nothing stored).
        """
        mgr = self.manager
        with self._writing(run_id):
            cid = self._conditional(run_id, expect_head, lambda exp: mgr.save(
                run_id, messages, checkpoint_id=checkpoint_id, parent_id=parent_id, expect_head=exp, **fields))
            return mgr.summary(run_id, cid)

    def rollback(self, run_id: str, checkpoint_id: str, *, expect_head: str | None = None,
                 agent_id: str | None = None) -> CheckpointSummary:
        """Make ``checkpoint_id`` the head again (later checkpoints deleted).

        Raises:
            CheckpointNotFound: no such checkpoint (or not ``agent_id``'s).
            HeadMismatch: ``expect_head`` is not the head; nothing changed.
        """
        check_run_id(run_id)
        check_checkpoint_id(checkpoint_id)
        with self._writing(run_id):
            if agent_id is not None:
                self.summary(run_id, checkpoint_id, agent_id)
            cp = self._conditional(run_id, expect_head,
                                   lambda exp: self.manager.rollback(run_id, checkpoint_id, expect_head=exp))
            return _summary_of(cp)

    def delete(self, run_id: str, checkpoint_id: str | None = None, *, expect_head: str | None = None) -> None:
        """Delete one checkpoint, or (``checkpoint_id=None``) the whole run.

        Raises:
            CheckpointNotFound / RunNotFound: nothing to delete.
            HeadMismatch: ``expect_head`` is not the head; nothing deleted.
        """
        check_run_id(run_id)
        if checkpoint_id is not None:
            check_checkpoint_id(checkpoint_id)
        with self._writing(run_id):
            self._conditional(run_id, expect_head,
                              lambda exp: self.manager.delete(run_id, checkpoint_id, expect_head=exp))

    def fork(self, run_id: str, checkpoint_id: str, new_run_id: str) -> CheckpointSummary:
        """Start run ``new_run_id`` at the checkpoint. Raises CheckpointNotFound, ConflictError
        (``new_run_id`` has live checkpoints)."""
        check_run_id(new_run_id)
        with self._writing(new_run_id):
            return _summary_of(self.manager.fork(run_id, checkpoint_id, new_run_id))

    def prune(self, run_id: str | None = None, dry_run: bool = False, needed: list | None = None,
              **policy) -> list[CheckpointSummary]:
        """Apply a retention policy (``CheckpointManager.prune``'s rules); returns what went (or,
        with ``dry_run``, would go). ``needed``: a list to which the decisions
        (:class:`snapstore.manager.retention.Decision`) of checkpoints kept only because a kept one needs
        them (a LangGraph DeltaChannel delta chain) are appended.

        Raises:
            RunNotFound: ``run_id`` is given and has no live checkpoint (a typo must not look like
                "nothing to prune", as in the CLI).
        """
        if run_id is not None:
            check_run_id(run_id)
            if self.manager.head(run_id) is None:
                raise RunNotFound(f"run {run_id!r} not found")
        with self._gate.shared():
            return retention.prune(self.manager, run_id=run_id, dry_run=dry_run, needed=needed, **policy)

    def gc(self, grace_period: float | None = None, dry_run: bool = False) -> dict:
        """Run the garbage collector; returns its report (``GCReport.as_dict()``).

        A grace period shorter than the manager's ``gc_grace_period`` runs with this server's
        writes held back (none in flight).

        Raises:
            ConflictError: another GC is running.
        """
        mgr = self.manager
        short = grace_period is not None and grace_period < mgr.gc_grace_period and not dry_run
        if short:
            with self._gate.exclusive():
                return mgr.gc(grace_period=grace_period, dry_run=dry_run).as_dict()
        return mgr.gc(grace_period=grace_period, dry_run=dry_run).as_dict()

    def stats(self) -> dict:
        """Repository statistics (``CheckpointManager.stats``): lists the whole repository."""
        return self.manager.stats()


def _summary_of(cp: CheckpointSummary) -> CheckpointSummary:
    return CheckpointSummary(cp.id, cp.run_id, cp.seq, cp.step, cp.token_usage, cp.metrics, cp.agent_id,
                             cp.status, cp.metadata, cp.created_at, cp.parent_id, cp.message_count,
                             cp.message_bytes)


def _check_limit(limit) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= Service.LIST_MAX:
        raise InvalidInputError(f"limit must be an integer from 1 to {Service.LIST_MAX}, got {limit!r}")
