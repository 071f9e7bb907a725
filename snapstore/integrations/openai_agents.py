"""An OpenAI Agents SDK session on snapstore: :class:`SnapstoreSession`.

Layer 5 (a surface over :class:`snapstore.manager.facade.CheckpointManager`); needs the extra
``snapstore[openai]`` (``openai-agents`` 0.24).

Mapping (docs: README "OpenAI Agents SDK"):

* One snapstore **run** per ``(session_id, branch)``, named ``openai-agents:["<session id>","<branch>"]``
  (JSON, so any session id or branch name is safe); the default branch is ``"main"``.
* The run's head checkpoint holds the session's whole item list (the SDK's
  ``TResponseInputItem`` dicts, one item per chunk). Every mutation (``add_items``, ``pop_item``,
  ``clear_session``) is one compare-and-swap on the head: it takes the head this object wrote
  last (else it reads the head), builds the new list and saves it with ``expect_head=<that head>``
  (``EMPTY_RUN`` for an empty session); a :class:`~snapstore.errors.ConflictError` (another
  caller, on this machine or another, changed the session meanwhile) makes it read the head and
  retry. So a batch is added whole or not at all, no item is popped twice, and none is lost.
  Snapstore stores only what is new in each save: an ``add_items`` after this object's own last
  mutation costs its new items and 2 PUTs, no read; a pop a small manifest. Each mutation's
  metadata carries ``{"oa": "add"|"pop", "op": <random id>}``.
* A mutation whose reply was lost (:class:`~snapstore.errors.StoreError`: a timeout, a dropped
  connection) is retried as the very same save: the manager reuses the first attempt's manifest
  (same log position and write id), and a create-only refusal that reads back its own write id is a
  success, so the retry lands the batch at most once. If the store stays down the error
  propagates and the session remembers that mutation: the next ``add_items`` with an equal batch,
  or the next ``pop_item``, first resolves it (it lands once, or is found in the run's checkpoints
  after the head it was built on by its op id, or is known not to have landed), so a caller
  retrying after an unknown outcome gets no duplicate and loses no popped item. Any other
  mutation drops the remembered one (the caller took its error as final). Limits: the memory is
  per object (a new process cannot settle another's unknown outcome), and a mutation whose
  checkpoint was deleted since (``clear_session``, retention) counts as not landed.
* Compaction (the SDK's ``OpenAIResponsesCompactionSession`` over this session): the session
  implements the SDK's hooks ``_get_compaction_snapshot`` (automatic compaction: the newest
  items and a ``replace_suffix`` that swaps the compacted suffix for the summary as one
  compare-and-swap save, retried on a moved head while the stored suffix is still the one
  compacted, and refused, returning False, when it changed: an item added meanwhile survives
  and the compaction is skipped) and ``_atomic_replace_items`` (manual ``run_compaction()``: the
  whole history replaced in one save, never a clear then an add). Without them the SDK cleared
  the session and added the summary, losing what another caller added in between.
* Branches: :meth:`SnapstoreSession.create_branch` forks the current branch's head with
  :meth:`CheckpointManager.fork` (the new run shares the message tree; one PUT of about the
  compressed size of the history and one manifest, whatever the number of items), optionally cut
  back to its first ``keep_items`` items; :meth:`switch_to_branch`, :meth:`list_branches` and
  :meth:`delete_branch` complete the set (like the SDK's ``AdvancedSQLiteSession``).
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import threading
import time
from typing import Any

from ..errors import ConflictError, InvalidInputError, MissingDependencyError, StoreError

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
    try:
        from agents.memory.session import _CompactionSnapshot
    except ImportError:  # an SDK without the compaction snapshot hook
        _CompactionSnapshot = None
except ImportError as e:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError(
        f"snapstore.integrations.openai_agents needs openai-agents ({e.name or e} is not installed): "
        "pip install 'snapstore[openai]'") from e

from ..manager.facade import EMPTY_RUN
from ..format.codec import validate
from .managers import manager_for
from .runids import pair_run_id, parse_pair_run_id

__all__ = ["SnapstoreSession", "RUN_PREFIX", "run_id_for", "parse_run_id"]

RUN_PREFIX = "openai-agents:"
"""Prefix of the snapstore run ids this session writes."""

MAIN = "main"


def run_id_for(session_id: str, branch: str = MAIN) -> str:
    """The snapstore run id of a session's branch: ``openai-agents:["session","branch"]``."""
    return pair_run_id(RUN_PREFIX, session_id, branch, ensure_ascii=False)


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """Inverse of :func:`run_id_for`: ``(session_id, branch)``, or None for other runs."""
    return parse_pair_run_id(RUN_PREFIX, run_id)


def _check_name(what: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{what} must be a non-empty string, got {value!r}")
    return value


class SnapstoreSession:
    """OpenAI Agents SDK ``Session`` storing its items in a snapstore repository.

    Args:
        session_id: the SDK session id (non-empty string).
        location: what :class:`CheckpointManager` takes (a directory, ``s3://BUCKET/PREFIX``,
            ``memory://``, an object store, or None for ``$SNAPSTORE_URL`` / ``./.snapstore``), or a
            :class:`CheckpointManager` to share (then no ``manager_options``).
        branch: the branch to read and write (default ``"main"``).
        session_settings: :class:`agents.SessionSettings` or a dict (``{"limit": N}``: the default
            ``limit`` of :meth:`get_items`).
        **manager_options: passed to the manager this session opens (``endpoint_url=``,
            ``fsync=``, ``max_checkpoints=``...).
    Raises:
        InvalidInputError: an empty session id or branch, or options given with a manager.
        MissingDependencyError: ``openai-agents`` is not installed (at import).

    It implements the SDK's ``agents.memory.Session`` protocol (``isinstance(s, Session)`` holds;
    the SDK asks third-party sessions to implement the protocol rather than subclass
    ``SessionABC``). All methods are coroutines; the store's blocking calls run in worker threads
    (``asyncio.to_thread``). Several sessions (objects, processes, machines) may use one session
    id at once: every mutation is a compare-and-swap on the branch's head (module docstring).
    """

    session_settings: SessionSettings | None = None

    MAX_ATTEMPTS = 64
    """Compare-and-swap attempts of one mutation before it gives up with ConflictError (each
    attempt lost to another writer's mutation, so the session keeps moving)."""

    LOST_REPLY_RETRIES = 4
    """Times a save that failed with StoreError is re-sent as the same save (the outcome was
    unknown) before the error propagates; waits 0.05, 0.1, 0.2... s between them."""

    def __init__(self, session_id: str, location: Any = None, *, branch: str = MAIN,
                 session_settings: SessionSettings | dict | None = None, **manager_options):
        self.session_id = _check_name("session_id", session_id)
        self._branch = _check_name("branch", branch)
        self.session_settings = (coerce_session_settings(session_settings) if session_settings is not None
                                 else SessionSettings())
        self.manager, self._own = manager_for("SnapstoreSession", location, manager_options)
        self._lock = threading.Lock()
        self._pending: dict | None = None  # a mutation whose outcome is unknown (see module docstring)
        self._heads: dict[str, tuple] = {}  # run -> (checkpoint id, items) this object last saved
        self._compaction_base = None  # (run, head id, items) a compaction read last (the SDK's hook)

    # -------------------------------------------------------------------------------------------
    @property
    def current_branch(self) -> str:
        """The branch this session reads and writes."""
        return self._branch

    @property
    def run_id(self) -> str:
        """The snapstore run id of the current branch."""
        return run_id_for(self.session_id, self._branch)

    def close(self) -> None:
        """Close the manager if this session opened it (a manager passed in stays open)."""
        if self._own:
            self.manager.close()

    # -------------------------------------------------------------------------------------------
    # the Session protocol

    async def get_items(self, limit: int | None = None) -> list:
        """Return the session's items, oldest first.

        Args:
            limit: at most this many of the newest items (None: ``session_settings.limit``, and
                if that is None too, all items); 0: none; a negative limit: all (as SQLiteSession).
        Returns:
            A list of item dicts (equal to what was added; a new list each call).
        Cost: one LIST + one GET for the head, then the reads of its items (the whole list).
        """
        n = resolve_session_limit(limit, self.session_settings)
        if n is not None and not isinstance(n, int):
            raise InvalidInputError(f"limit must be an integer or None, got {n!r}")
        items = await asyncio.to_thread(self._items, self.run_id)
        if n is None or n < 0:
            return items
        return items[-n:] if n else []

    async def add_items(self, items: list) -> None:
        """Append ``items`` to the session as one atomic batch (all or none, in order).

        Args:
            items: a list of JSON-serialisable item dicts (``TResponseInputItem``).
        Raises:
            InvalidMessageError: an item is not exact JSON (nothing is stored).
            ConflictError: lost the compare-and-swap :attr:`MAX_ATTEMPTS` times in a row.
            StoreError: the store failed and stayed failing; the outcome is unknown and
                remembered: calling ``add_items`` again with an equal batch adds it at most once.
        """
        if not isinstance(items, (list, tuple)):
            raise InvalidInputError(f"items must be a list, got {type(items).__name__}")
        if not items:
            return
        for i, it in enumerate(items):
            validate(it, f"items[{i}]")  # before copying: a bad item is a typed error, nothing stored
        await asyncio.to_thread(self._add, self.run_id, list(items))

    async def pop_item(self) -> Any:
        """Remove and return the newest item, or None if the session is empty.

        Never returns an item twice, across sessions on other machines: the removal is a
        compare-and-swap on the head the item was read from. A pop whose outcome was unknown
        (StoreError) is resolved by the next ``pop_item`` of this object: if it had removed its
        item, that item is returned then.
        """
        return await asyncio.to_thread(self._pop, self.run_id)

    async def clear_session(self) -> None:
        """Remove every item of the current branch (deletes the branch's run: a tombstone, so
        ``gc()`` can reclaim its data; the next ``add_items`` starts an empty session)."""
        await asyncio.to_thread(self._clear, self.run_id)

    # -------------------------------------------------------------------------------------------
    # the SDK's compaction hooks (OpenAIResponsesCompactionSession looks them up on the session)

    async def _get_compaction_snapshot(self, limit: int, *, prune_prefix=None):
        """The SDK's compaction snapshot hook: the newest ``limit`` items of the current branch
        and an atomic ``replace_suffix(start, output) -> bool``.

        Args:
            limit: at most this many of the newest items (positive int).
            prune_prefix: optional ``item -> bool``: leading items of the history kept before the
                suffix that it approves are dropped with the replacement (the SDK's expiry).
        Returns:
            ``_CompactionSnapshot(items, complete, replace_suffix)`` (``complete``: ``items`` is
            the whole history), or None when the SDK has no such type. ``replace_suffix(start,
            output)`` replaces ``items[start:]`` by ``output`` in one compare-and-swap save: True
            once saved; False (nothing changed) if those items are no longer the newest of the
            branch (another caller added, popped or cleared meanwhile) or ``start`` leaves none.
        """
        if _CompactionSnapshot is None:
            return None
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise InvalidInputError(f"limit must be a positive integer, got {limit!r}")
        run = self.run_id
        base, items = await asyncio.to_thread(self._head_fresh, run)
        window = copy.deepcopy(items[-limit:])
        complete = len(items) <= limit

        async def replace_suffix(start: int, output: list) -> bool:
            expected = window[start:]
            if not expected:
                return False
            for i, it in enumerate(output):
                validate(it, f"output[{i}]")
            return await asyncio.to_thread(self._replace_suffix, run, expected, copy.deepcopy(list(output)),
                                           prune_prefix)

        return _CompactionSnapshot(copy.deepcopy(window), complete, replace_suffix)

    async def _read_compaction_items(self, limit: int | None = None) -> tuple[list, bool]:
        """The SDK's compaction read hook: ``(the newest limit items, complete)`` (None: all),
        read from the store. The history read is remembered per branch as the compaction's
        input, so :meth:`_atomic_replace_items` replaces only those items."""
        run = self.run_id
        base, items = await asyncio.to_thread(self._head_fresh, run)
        self._compaction_base = (run, base, copy.deepcopy(items))
        window = items if limit is None or limit < 0 else items[-limit:] if limit else []
        return copy.deepcopy(window), len(window) == len(items)

    async def _atomic_replace_items(self, items: list) -> bool:
        """The SDK's whole-history replacement hook (manual ``run_compaction()``): in one
        compare-and-swap save, the history the compaction read (:meth:`_read_compaction_items`)
        becomes ``items``, and what other callers added after that read follows them, so no
        reader sees a cleared session and no item added during the compaction is lost.

        Returns:
            True (saved).
        Raises:
            InvalidMessageError: an item is not exact JSON (nothing changed).
            ConflictError: the history the compaction read is no longer the start of the
                branch (another caller popped or cleared meanwhile): nothing changed.
            StoreError: as :meth:`add_items`.
        """
        if not isinstance(items, (list, tuple)):
            raise InvalidInputError(f"items must be a list, got {type(items).__name__}")
        for i, it in enumerate(items):
            validate(it, f"items[{i}]")
        mine = copy.deepcopy(list(items))
        run = self.run_id
        read = getattr(self, "_compaction_base", None)
        self._compaction_base = None
        seen = read[2] if read is not None and read[0] == run else None

        def build(cur):
            if seen is None:
                return mine, True
            if cur[:len(seen)] != seen:
                raise ConflictError(f"session {self.session_id!r}: the history changed during compaction "
                                    "(an item was popped or the session cleared); it was left as it is")
            return mine + cur[len(seen):], True

        await asyncio.to_thread(self._mutate, run, "replace", build, mine)
        return True

    # -------------------------------------------------------------------------------------------
    # branches

    async def create_branch(self, branch: str, *, from_branch: str | None = None, keep_items: int | None = None,
                            switch: bool = True) -> str:
        """Start branch ``branch`` from the head of ``from_branch`` (default: the current branch).

        The new branch shares the source's items (:meth:`CheckpointManager.fork`: one manifest
        listing the source's packs and two empty objects, whatever the number of items); later writes to
        either branch do not affect the other.

        Args:
            branch: the new branch's name (non-empty; must not exist).
            from_branch: the branch to start from (it must have items).
            keep_items: keep only the first ``keep_items`` items (non-negative int; None: all),
                e.g. to retry from an earlier turn.
            switch: make the new branch the current one (default True).
        Returns:
            ``branch``.
        Raises:
            InvalidInputError: bad names or ``keep_items``; ``from_branch`` has no items.
            ConflictError: ``branch`` already exists.
        """
        _check_name("branch", branch)
        src = _check_name("from_branch", from_branch) if from_branch is not None else self._branch
        if keep_items is not None and (not isinstance(keep_items, int) or isinstance(keep_items, bool)
                                       or keep_items < 0):
            raise InvalidInputError(f"keep_items must be a non-negative integer or None, got {keep_items!r}")
        await asyncio.to_thread(self._fork, run_id_for(self.session_id, src), run_id_for(self.session_id, branch),
                                keep_items)
        if switch:
            self._branch = branch
        return branch

    async def switch_to_branch(self, branch: str) -> None:
        """Make ``branch`` the current branch. Raises InvalidInputError if it has no items."""
        _check_name("branch", branch)
        head = await asyncio.to_thread(self.manager.head, run_id_for(self.session_id, branch))
        if head is None and branch != MAIN:
            raise InvalidInputError(f"session {self.session_id!r} has no branch {branch!r}")
        self._branch = branch

    async def list_branches(self) -> list[dict]:
        """Return the session's branches that hold items: ``[{"branch_id", "message_count",
        "is_current", "created_at"}]`` sorted by name (``created_at``: the head's save time, UTC).

        Cost: :meth:`CheckpointManager.runs` (one LIST and GET per run of the repository) and one
        head read per branch.
        """
        def run():
            out = []
            for r in self.manager.runs():
                p = parse_run_id(r)
                if p is None or p[0] != self.session_id:
                    continue
                h = self.manager.head(r)
                if h is None:
                    continue
                out.append({"branch_id": p[1], "message_count": h.message_count, "is_current": p[1] == self._branch,
                            "created_at": h.created_at})
            return sorted(out, key=lambda b: b["branch_id"])
        return await asyncio.to_thread(run)

    async def delete_branch(self, branch: str, *, force: bool = False) -> None:
        """Delete ``branch`` (its run; ``gc()`` reclaims what only it used).

        Raises:
            InvalidInputError: ``branch`` is ``"main"``, or the current branch without ``force``
                (with ``force`` the session switches to ``"main"`` first).
        """
        _check_name("branch", branch)
        if branch == MAIN:
            raise InvalidInputError("cannot delete the 'main' branch (clear_session() empties it)")
        if branch == self._branch:
            if not force:
                raise InvalidInputError(f"cannot delete the current branch {branch!r} without force=True")
            self._branch = MAIN
        await asyncio.to_thread(self._clear, run_id_for(self.session_id, branch))

    # -------------------------------------------------------------------------------------------
    # blocking parts (run in worker threads)

    def _items(self, run: str) -> list:
        cp = self.manager.latest(run)
        return [] if cp is None else list(cp.messages)

    def _save(self, run: str, messages: list, base: str | None, op: dict) -> str:
        """One compare-and-swap save on head ``base`` (a checkpoint id; None: the run must be
        empty); a StoreError is retried as the same save (lost reply). Returns the new
        checkpoint id. Raises ConflictError only when the save is known not to have landed."""
        kw = {"expect_head": base if base is not None else EMPTY_RUN, "metadata": op}
        unknown = False
        for i in range(self.LOST_REPLY_RETRIES + 1):
            try:
                return self.manager.save(run, messages, **kw)
            except ConflictError:
                if unknown:
                    landed = self._landed(run, op["op"], base)
                    if landed is not None:
                        return landed  # an earlier attempt landed, then the session moved on
                raise
            except StoreError:
                if i == self.LOST_REPLY_RETRIES:
                    raise
                unknown = True
                time.sleep(0.05 * 2 ** i)
        raise AssertionError("unreachable")  # pragma: no cover

    PAGE = 32

    def _landed(self, run: str, op_id: str, base: str | None) -> str | None:
        """The id of the live checkpoint carrying mutation ``op_id`` saved on top of checkpoint
        ``base``, or None (reads the run's listing newest first, back to ``base``)."""
        before = None
        while True:
            page = self.manager.list(run, limit=self.PAGE, before_seq=before)
            for s in page:
                if s.id == base:
                    return None
                if isinstance(s.metadata, dict) and s.metadata.get("op") == op_id:
                    return s.id
            if len(page) < self.PAGE:
                return None
            before = page[-1].seq

    def _resolve_pending(self, run: str, kind: str, items: list | None) -> tuple[bool, Any]:
        """Settle a remembered mutation of unknown outcome. Returns ``(done, result)``: done when
        this call's own work is that mutation and it has now landed once."""
        p = self._pending
        if p is None or p["run"] != run:
            return False, None
        self._pending = None
        self._heads.pop(run, None)
        if not (p["kind"] == kind and (kind == "pop" or p["items"] == items)):
            return False, None  # a different mutation: the caller took the error as final
        try:
            self.manager.save(run, p["messages"], expect_head=p["base"] if p["base"] is not None else EMPTY_RUN,
                              metadata=p["op"])
        except ConflictError:
            if self._landed(run, p["op"]["op"], p["base"]) is None:
                return False, None  # it never landed: do this call's work afresh
        return True, p["result"]

    def _head(self, run: str) -> tuple[str | None, list]:
        """``(head checkpoint id or None, its items)``: what this object last wrote (the
        compare-and-swap checks it is still the head), else read."""
        h = self._heads.get(run)
        if h is not None:
            return h
        cp = self.manager.latest(run)
        return (None, []) if cp is None else (cp.id, cp.messages)

    def _mutate(self, run: str, kind: str, build, items: list | None = None):
        """Compare-and-swap loop: ``build(items_now) -> (new items or None for no change, result)``."""
        with self._lock:
            done, result = self._resolve_pending(run, kind, items)
            if done:
                return result
            op = {"oa": kind, "op": secrets.token_hex(8)}
            for _ in range(self.MAX_ATTEMPTS):
                base, cur = self._head(run)
                new, result = build(cur)
                if new is None:
                    if run in self._heads:  # an empty cached head: make sure it is still empty
                        self._heads.pop(run)
                        continue
                    return result
                try:
                    cid = self._save(run, new, base, op)
                except ConflictError:
                    self._heads.pop(run, None)
                    continue  # another caller moved the head: read it again
                except StoreError:
                    self._heads.pop(run, None)
                    self._pending = {"run": run, "kind": kind, "items": items, "messages": new, "op": op,
                                     "base": base, "result": result}
                    raise
                self._heads[run] = (cid, new)
                return result
            raise ConflictError(f"session {self.session_id!r}: gave up after {self.MAX_ATTEMPTS} compare-and-swap "
                                "attempts (other writers kept changing it)")

    def _head_fresh(self, run: str) -> tuple[str | None, list]:
        """The branch's head as stored now (not this object's cached view)."""
        with self._lock:
            self._heads.pop(run, None)
            return self._head(run)

    def _replace_suffix(self, run: str, expected: list, output: list, prune_prefix) -> bool:
        """Replace the newest items, if they are still ``expected``, by ``output`` (one
        compare-and-swap save, retried on a moved head while the suffix is unchanged)."""
        n = len(expected)

        def build(cur):
            if len(cur) < n or cur[len(cur) - n:] != expected:
                return None, False  # the suffix changed: keep everything, skip the compaction
            keep = cur[:len(cur) - n]
            if prune_prefix is not None:
                i = 0
                while i < len(keep) and prune_prefix(keep[i]):
                    i += 1
                keep = keep[i:]
            return keep + output, True

        return bool(self._mutate(run, "replace", build, output))

    def _add(self, run: str, items: list) -> None:
        mine = copy.deepcopy(items)  # the caller may change its dicts later; the cached head must not
        self._mutate(run, "add", lambda cur: (cur + mine, None), items)

    def _pop(self, run: str):
        return self._mutate(run, "pop", lambda cur: (cur[:-1], cur[-1]) if cur else (None, None))

    def _clear(self, run: str) -> None:
        with self._lock:
            if self._pending is not None and self._pending["run"] == run:
                self._pending = None
            self._heads.pop(run, None)
            for _ in range(self.MAX_ATTEMPTS):
                head = self.manager.head(run)
                if head is None:
                    return
                try:
                    self.manager.delete(run, expect_head=head.id)
                    return
                except ConflictError:
                    continue
            raise ConflictError(f"session {self.session_id!r}: gave up clearing after {self.MAX_ATTEMPTS} attempts")

    def _fork(self, src: str, dst: str, keep: int | None) -> None:
        head = self.manager.latest(src)
        if head is None:
            raise InvalidInputError(f"branch {parse_run_id(src)[1]!r} of session {self.session_id!r} has no items "
                                    "to branch from")
        if self.manager.head(dst) is not None:
            raise ConflictError(f"session {self.session_id!r} already has a branch {parse_run_id(dst)[1]!r}")
        cp = self.manager.fork(src, head.id, dst)
        if keep is not None and keep < len(cp.messages):
            self._save(dst, cp.messages[:keep], cp.id, {"oa": "branch", "op": secrets.token_hex(8)})
