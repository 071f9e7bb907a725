"""The checkpoint API: :class:`CheckpointManager`, :class:`Checkpoint`, :class:`CheckpointSummary`.

Layer 4. Conflict rules, rollback, deletion and retention on top of :mod:`snapstore.repository`.

Conflicts (docs/format.md §12): each calling context (thread or asyncio task, see
:mod:`snapstore.callers`) remembers, per run, the last checkpoint it saved or read and the run's
newest log record at that moment. ``save`` takes the head as parent and claims the next sequence
number with a create-only write. If another writer claimed it first, or the head is no longer what
this caller saw, ``save`` raises :class:`~snapstore.errors.ConflictError` and writes no manifest;
``rollback``, ``delete`` and retention that move the head are conditional the same way, and
``expect_head=`` is an explicit compare-and-swap on the head. Sequence numbers are never reused:
rollback and deletion publish new log records. The manager's per-run :class:`_RunView` (the newest
head it knows and caches keyed by content) is shared by its callers.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone

from . import callers
from .callers import Seen
from .errors import (CheckpointNotFound, ConflictError, InvalidInputError, NotFoundError, ObjectNotFound, PreconditionFailed,
                     RepositoryNotFound, RunNotFound, SnapstoreError)
from .format import keys
from .format.codec import validate
from .format.fields import validate_fields
from .format.ids import check_checkpoint_id, check_run_id, new_checkpoint_id, new_write_id
from .format.manifest import KIND_CHECKPOINT, KIND_ROLLBACK, KIND_TOMBSTONE, Manifest, check_record_size
from .compaction import FORK_LEVEL, fork_copy, plan_save
from .format.segs import Seg
from .repository import ListState, Repository
from .runlog import list_logsegs, list_positions, read_records, write_logsegs
from .stores import open_store
from .stores.base import ObjectStore


class _PackIdCollision(Exception):
    """A new pack's random id is taken by a different pack (vanishingly rare): pick another."""


class _Stale(Exception):
    """A save paused longer than half the GC grace period after writing its pack: build it again."""


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
    def _from(cls, m: Manifest) -> "CheckpointSummary":
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


@dataclass
class _RunView:
    """A manager's knowledge of one run, shared by all its callers (what each caller last saw is
    per calling context: :mod:`snapstore.callers`)."""

    head_seq: int | None = None       # newest log position known (None: run has no records)
    head_write_id: str | None = None  # write id of that newest record (identifies it across deletions)
    head_segs: list | None = None     # segment list of that newest record (format 2; [] if none)
    head: Manifest | None = None      # the effective head checkpoint (None: empty or deleted run)
    list_state: ListState | None = None  # writer state for ``head``'s message list
    live: list | None = None          # [(seq, checkpoint id)] oldest first, when known
    pending: tuple | None = None      # (fingerprint, Manifest, tier, superseded, prepared save) of a save whose outcome is unknown
    log_cache: dict | None = None     # seq -> manifest bytes of recent records this manager published
    loaded: bool = False              # head_seq/head are from a read or our own save
    confirmed_at: float = 0.0         # monotonic time the head (our parent) was last seen to exist


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
explicit expectation: the caller's own view of the run applies (docs/format.md §12)."""


def _expect(expect_head) -> tuple | None:
    """Normalise an ``expect_head`` argument: None (no expectation) or ``(checkpoint id | None,)``
    (None inside: the run must be empty).

    Raises:
        InvalidInputError / InvalidCheckpointIdError: anything but None, EMPTY_RUN or a checkpoint id.
    """
    if expect_head is None:
        return None
    if expect_head is EMPTY_RUN:
        return (None,)
    if not isinstance(expect_head, str):
        raise InvalidInputError(f"expect_head must be a checkpoint id (str), EMPTY_RUN or None, got "
                                f"{type(expect_head).__name__}")
    check_checkpoint_id(expect_head)
    return (expect_head,)


def _live_records(seqs, got: dict, state: dict):
    """Walk log positions ``seqs`` (newest first) with their records ``got``: yield
    ``(seq, checkpoint Manifest, False)`` for each live checkpoint, and a last ``(seq, record,
    True)`` at a tombstone. Positions hidden by a rollback record are skipped: ``state["skip"]``
    (None, or the lowest rollback target seen) carries that over between calls."""
    for s in seqs:
        skip = state.get("skip")
        if skip is not None and s > skip:
            continue
        m = got.get(s)
        if m is None:
            continue
        if m.kind == KIND_TOMBSTONE:
            yield s, m, True
            return
        if m.kind == KIND_ROLLBACK:
            t = int(m.target["seq"])
            state["skip"] = t if skip is None else min(skip, t)
            continue
        yield s, m, False


def _carried_segs(newest: Manifest | None) -> list | None:
    """The segment list a new log record inherits from the run's newest record (None: none)."""
    if newest is None or newest.kind == KIND_TOMBSTONE:
        return None
    return newest.segment_list()


class CheckpointManager:
    """Save, restore, list, roll back, fork and prune agent checkpoints.

    Args:
        location: a directory path (the local store), ``s3://BUCKET/PREFIX`` (S3), ``memory://``,
            or an :class:`~snapstore.stores.base.ObjectStore`. None: ``$SNAPSTORE_URL`` if set, else
            ``./.snapstore``.
        max_checkpoints: keep at most this many checkpoints per run; older ones are deleted after
            each save (None: unlimited).
        create: create the repository on first use if the location is empty (default True).
        gc_grace_period: the garbage collector's grace period in seconds (GC safety): a writer
            that has not confirmed its parent checkpoint within half of it re-reads the run's head
            before publishing (at most one extra read per half grace period). It must not exceed
            the grace period GC runs with (both default to 3600).
        clock: monotonic clock for that rule (tests); default ``time.monotonic``.
        **store_options: passed to the store (e.g. ``endpoint_url=`` for S3, ``fsync=`` for local).
    Raises:
        RepositoryError: the location holds no repository and ``create`` is False.
        UnsupportedFormatError: the repository was written by a newer snapstore.

    A manager may be shared by threads and asyncio tasks: each calling context has its own view
    of each run (what it last saved or read), so callers sharing a manager get the same
    :class:`~snapstore.errors.ConflictError` as separate managers would (docs/format.md §12).
    ``close()`` (and leaving a ``with`` block) closes the store only if the manager opened it
    (``location`` was a path, URL or None); a store object passed in stays open.
    """

    def __init__(self, location: "str | ObjectStore | None" = None, *, max_checkpoints: int | None = None,
                 create: bool = True, gc_grace_period: float = 3600.0, clock=None, **store_options):
        if max_checkpoints is not None and (not isinstance(max_checkpoints, int) or max_checkpoints < 1):
            raise InvalidInputError(f"max_checkpoints must be a positive integer, got {max_checkpoints!r}")
        self._owns_store = location is None or isinstance(location, (str, os.PathLike))
        self.store = open_store(location, **store_options)
        self.max_checkpoints = max_checkpoints
        self._create = create
        self._repo: Repository | None = None
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.RLock] = {}
        self._views: dict[str, _RunView] = {}
        self.versioned = False
        if not isinstance(gc_grace_period, (int, float)) or gc_grace_period < 0:
            raise InvalidInputError(f"gc_grace_period must be a non-negative number of seconds, got {gc_grace_period!r}")
        self.gc_grace_period = float(gc_grace_period)
        self._clock = clock or time.monotonic
        self.hooks: dict = {}  # test hooks: name -> callable(**info), see _hook()

    # ------------------------------------------------------------------------------------------
    @property
    def repo(self) -> Repository:
        """The underlying :class:`~snapstore.repository.Repository`, opened on first use (and created
        if the location is empty and the manager was made with ``create=True``)."""
        return self._open(self._create)

    def _open(self, create: bool) -> Repository:
        if self._repo is None:
            with self._lock:
                if self._repo is None:
                    repo = Repository.open(self.store, create=create)
                    check = getattr(self.store, "check_versioning", None)
                    if check is not None:
                        try:
                            self.versioned = bool(check())
                        except SnapstoreError:
                            self.versioned = False
                        if self.versioned:
                            warnings.warn(
                                f"bucket versioning is enabled for {self.store.url}: deletes only add delete markers, "
                                "so garbage collection reclaims nothing without a noncurrent-version expiration "
                                "rule (see infra/aws/README.md)", stacklevel=4)
                    self._repo = repo
        return self._repo

    def _exists(self) -> bool:
        """True if the location holds a repository (reads never create one)."""
        try:
            self._open(False)
            return True
        except RepositoryNotFound:
            return False

    def close(self) -> None:
        """Release the manager's resources: its thread pool, and the store if the manager opened
        it itself (a store object passed as ``location`` is left open for its owner)."""
        if self._repo is not None:
            self._repo.close(close_store=self._owns_store)
        elif self._owns_store:
            self.store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _hook(self, name: str, **info) -> None:
        fn = self.hooks.get(name)
        if fn is not None:
            fn(**info)

    def _run_lock(self, run_id: str) -> threading.RLock:
        check_run_id(run_id)
        with self._lock:
            lk = self._run_locks.get(run_id)
            if lk is None:
                lk = self._run_locks[run_id] = threading.RLock()
            return lk

    def _rk(self, run_id: str) -> str:
        return self.repo.run_key(check_run_id(run_id))

    # ------------------------------------------------------------------------------------------
    # reading the log

    def _resolve(self, rk: str, newest: Manifest | None) -> Manifest | None:
        """Effective head checkpoint for a newest log record."""
        if newest is None or newest.kind == KIND_TOMBSTONE:
            return None
        if newest.kind == KIND_CHECKPOINT:
            return newest
        tseq = int(newest.target["seq"])
        try:
            t = self.repo.read_manifest_key(keys.manifest_key(rk, tseq))
            if t.kind == KIND_CHECKPOINT:
                return t
        except ObjectNotFound:
            pass
        for s, cid, m in self._scan(rk, below=tseq + 1):
            return m
        return None

    def _load_view(self, run_id: str) -> _RunView:
        """Read the run's newest record (LIST limit 1 + GET) into a fresh view."""
        rk = self._rk(run_id)
        newest = self.repo.head(rk)
        v = self._views.get(run_id) or _RunView()
        v.head_seq = newest.seq if newest else None
        v.head_write_id = newest.write_id if newest else None
        v.head_segs = newest.segment_list() if newest is not None and newest.kind != KIND_TOMBSTONE else []
        head = self._resolve(rk, newest)
        if v.head is None or head is None or v.head.checkpoint_id != head.checkpoint_id or v.head.seq != head.seq:
            v.list_state = None
            v.live = None
        v.head = head
        v.confirmed_at = self._clock()
        v.loaded = True
        self._views[run_id] = v
        return v

    def _view(self, run_id: str) -> _RunView:
        v = self._views.get(run_id)
        if v is None or not v.loaded:
            v = self._load_view(run_id)
        return v

    def _scan(self, rk: str, below: int | None = None):
        """Yield ``(seq, checkpoint id, Manifest)`` of live checkpoints, newest first.

        Skips positions hidden by rollback records and stops at a tombstone. GETs manifests in
        parallel batches as it goes, so the first k results cost about k reads.
        """
        seqs = self.repo.manifest_seqs(rk)
        if below is not None:
            seqs = [s for s in seqs if s < below]
        state: dict = {"skip": None}  # positions in (target, rollback) are hidden
        i = 0
        batch = 4
        while i < len(seqs):
            chunk = [s for s in seqs[i:i + batch]]
            i += len(chunk)
            batch = min(batch * 2, 64)
            todo = [s for s in chunk if state["skip"] is None or s <= state["skip"]]
            got = self._read_many(rk, todo)
            for s, m, end in _live_records(chunk, got, state):
                if end:
                    return
                yield s, m.checkpoint_id, m

    def _scan_bulk(self, rk: str):
        """Like :meth:`_scan`, for the whole log at once: the positions are listed (LIST pages in
        parallel) beside the run's log segments, then everything is read in one parallel wave
        (docs/format.md §8a), so a run of n checkpoints costs O(n / 1000 + log n) requests in a
        few round trips instead of n GETs."""
        repo = self.repo
        pool = repo._pool_get()
        f_segs = pool.submit(list_logsegs, repo, rk)
        seqs = list_positions(repo, rk)
        got = read_records(repo, rk, seqs, f_segs.result())
        for s, m, end in _live_records(seqs, got, {"skip": None}):
            if end:
                return
            yield s, m.checkpoint_id, m

    BULK_LIST_MIN = 32
    """``list(limit=...)`` above this (or no limit) reads the log in bulk (:meth:`_scan_bulk`)."""

    def _read_many(self, rk: str, seqs: list[int]) -> dict[int, Manifest]:
        def one(s):
            try:
                return s, self.repo.read_manifest_key(keys.manifest_key(rk, s))
            except ObjectNotFound:
                return s, None
        if len(seqs) <= 1:
            return dict(one(s) for s in seqs)
        return dict(self.repo._pool_get().map(one, seqs))

    def _checkpoint(self, m: Manifest, messages: list) -> Checkpoint:
        f = m.fields
        return Checkpoint(m.checkpoint_id, m.run_id, m.seq, f.get("step"), f.get("token_usage"), f.get("metrics"),
                          f.get("agent_id"), f.get("status"), f.get("metadata"), m.created, m.parent_id, m.count,
                          m.size, messages, self.repo.load_session_state(m))

    # ------------------------------------------------------------------------------------------
    # save

    def save(self, run_id: str, messages: list, *, step=None, token_usage=None, session_state=None,
             metrics=None, agent_id=None, status=None, metadata=None, checkpoint_id: str | None = None,
             parent_id: str | None = None, expect_head=None) -> str:
        """Save a checkpoint of ``run_id`` holding ``messages``; return its checkpoint id.

        Only what is new since the parent is stored: one pack object (new message chunks, tree
        nodes), one index record and one manifest, i.e. at most 3 PUTs.

        Args:
            run_id: any non-empty string.
            messages: the full message list at this checkpoint (JSON values, usually dicts).
                Messages kept from the previous save are recognised by object identity (and the
                last few by value); do not mutate a saved message object in place and pass it
                again expecting the change to be stored: pass a new object.
            step: roundtrip/step number: a non-negative int.
            token_usage, metrics: objects of numbers (values int/float, None, or nested objects of
                those; see :func:`snapstore.format.fields.validate_fields`).
            metadata: a JSON value (normally a dict).
            session_state: JSON value; large states are stored as deduplicated chunks.
            agent_id: a JSON value (normally a string). status: a string.
            checkpoint_id: use this id instead of a generated, time-sortable one.
            parent_id: branch from this checkpoint of the run instead of the head (time travel);
                the new checkpoint becomes the run's head.
            expect_head: compare-and-swap for callers that track the head themselves: a checkpoint
                id (save only if it is the run's head) or :data:`EMPTY_RUN` (save only if the run
                has no live checkpoint). The caller's own view is then not consulted. None (the
                default): the calling context's view applies: if it saved or read the run, the
                head must still be what it last saw; if it never did, the save continues from the
                head (as a new manager's first save would).
        Returns:
            The checkpoint id (str).
        Raises:
            InvalidRunIdError / InvalidCheckpointIdError: bad ids.
            InvalidMessageError: a value is not exact JSON (NaN, set, bytes, non-str key...), or
                a field has the wrong type (``step`` not a non-negative int, ``token_usage`` /
                ``metrics`` not objects of numbers, ``status`` not a string); nothing is stored.
            ConflictError: another writer (another thread or task on this manager, another
                manager, process or machine) changed the run since this caller last saw it, the
                head is not ``expect_head``, or a live checkpoint with ``checkpoint_id`` exists;
                nothing was overwritten.
            CheckpointNotFound: ``parent_id`` does not exist.
            StoreError: the store failed (retrying the same save later is safe).

        Requests (steady state): 1 pack PUT + 1 manifest PUT. A calling context that has not read
        the run makes no extra request when this manager already knows the run's head (another
        context read or saved it); otherwise it reads the head first (1 LIST + 1 GET, plus the
        segments of the head to dedup against), as a new manager does.
        """
        check_run_id(run_id)
        exp = _expect(expect_head)
        if checkpoint_id is not None:
            check_checkpoint_id(checkpoint_id)
        if parent_id is not None:
            check_checkpoint_id(parent_id)
        if not isinstance(messages, (list, tuple)):
            raise InvalidInputError(f"messages must be a list, got {type(messages).__name__}")
        validate_fields(step=step, token_usage=token_usage, metrics=metrics, status=status)
        fields = {"step": step, "token_usage": token_usage, "metrics": metrics, "agent_id": agent_id,
                  "status": status, "metadata": metadata}
        for k, v in fields.items():
            validate(v, k)
        check_record_size(fields)
        if self._repo is None:
            # the first write into an empty location must not create the repository for bad input
            try:
                self._open(False)
            except RepositoryNotFound:
                for i, msg in enumerate(messages):
                    validate(msg, f"messages[{i}]")
                validate(session_state, "session_state")
        with self._run_lock(run_id):
            seen = callers.seen(self, run_id)
            v0 = self._views.get(run_id)
            cached = v0 is not None and v0.loaded  # built on a head this manager knew before the call
            stale = 0
            for attempt in range(self.SAVE_ATTEMPTS):
                try:
                    return self._save_once(run_id, messages, fields, session_state, checkpoint_id, parent_id,
                                           exp, seen, late_ok=stale >= self.STALE_REBUILDS)
                except _Stale:
                    stale += 1
                    continue  # build again with a new pack (fresh view if the run changed)
                except _PackIdCollision:
                    v = self._views.get(run_id)
                    if v is not None:
                        v.pending = None  # that pack id belongs to another pack: no attempt of ours used it
                    continue  # build again (new pack id)
                except PreconditionFailed:
                    # the run moved after the head this save was built on. A save with an explicit
                    # parent or expected head decides again on the new head; a caller without a
                    # view of the run continues from it if the head it used was this manager's
                    # cached one (a new manager would have read the newer head)
                    if (parent_id is None and exp is None and not cached) or attempt == self.SAVE_ATTEMPTS - 1:
                        raise ConflictError(
                            f"run {run_id!r} changed: another writer saved, rolled back or deleted checkpoints "
                            "after the head this save continues (its log position is taken); call latest() and "
                            "retry, or fork() the run") from None
                    self._load_view(run_id)
                    cached = False
        raise ConflictError(f"run {run_id!r}: gave up saving after {self.SAVE_ATTEMPTS} attempts (each was built "
                            "again because its pack id was taken or it paused longer than half the GC grace period)")

    SAVE_ATTEMPTS = 8
    """Times ``save`` builds a checkpoint again (pack id taken, paused past half the GC grace
    period, or, with ``parent_id``/``expect_head``, the run moved) before giving up."""

    STALE_REBUILDS = 2
    """A save that paused longer than half the GC grace period after writing its pack is built
    again at most this many times; after that the grace period is shorter than a save takes here
    and the save publishes anyway, with a RuntimeWarning (a GC with that grace period must not run
    beside this writer)."""

    def _conflict_if_moved(self, run_id: str, v: "_RunView", exp: tuple | None, seen: Seen | None) -> None:
        """Raise ConflictError unless the head in ``v`` is what ``exp`` (an explicit expected head) or,
        without one, ``seen`` (the calling context's view; None: no view, nothing to check) says."""
        head_id = v.head.checkpoint_id if v.head else None
        if exp is not None:
            if head_id != exp[0]:
                want = "no checkpoint (EMPTY_RUN)" if exp[0] is None else repr(exp[0])
                raise ConflictError(f"run {run_id!r}: expected head {want} but the head is {head_id!r}; "
                                    "read the head again and retry")
        elif seen is not None and not seen.matches(head_id, v.head_seq, v.head_write_id):
            why = ("it read that checkpoint by id" if not seen.at_head else
                   "another writer saved, rolled back or deleted since")
            raise ConflictError(
                f"run {run_id!r}: this caller last saw checkpoint {seen.checkpoint_id!r} but the head is {head_id!r} "
                f"({why}); call latest() to continue from the head, or pass parent_id= to branch")

    def _saw(self, run_id: str, checkpoint_id: str | None, seq: int | None, write_id: str | None) -> None:
        """Record in the calling context that it saw ``checkpoint_id`` as the head at log record
        ``(seq, write_id)``."""
        callers.set_seen(self, run_id, Seen(checkpoint_id, seq, write_id))

    def _saw_view(self, run_id: str, v: "_RunView") -> None:
        self._saw(run_id, v.head.checkpoint_id if v.head else None, v.head_seq, v.head_write_id)

    def _save_once(self, run_id, messages, fields, session_state, checkpoint_id, parent_id, exp=None,
                   seen=None, late_ok=False) -> str:
        t_start = self._clock()
        repo = self.repo
        rk = repo.run_key(run_id)
        v = self._view(run_id)
        if exp is not None and (v.head.checkpoint_id if v.head else None) != exp[0]:
            v = self._load_view(run_id)  # the cached head may be older than the caller's knowledge
        self._conflict_if_moved(run_id, v, exp, seen if parent_id is None else None)
        if parent_id is not None:
            if v.head is not None and v.head.checkpoint_id == parent_id:
                pm = v.head
                ls = v.list_state
            else:
                pm = repo.find_checkpoint(rk, parent_id)
                ls = None
        else:
            pm = v.head
            ls = v.list_state
        if ls is None and pm is not None:
            repo.prefetch_segments(v.head_segs or pm.segment_list())
            ls = repo.list_state(pm)
        prep = repo.prepare_save(ls, messages, session_state, session_state is not None,
                                 pm.session_state_ref if pm else None, pm.session_state_tree if pm else None)
        ss_id = prep.session_state_tree.id.hex() if prep.session_state_tree else None
        fingerprint = (prep.state.digest_hex(), prep.state.count, repr(fields), checkpoint_id, parent_id,
                       ss_id, repr(prep.session_state_inline), pm.checkpoint_id if pm else None)
        seq = 0 if v.head_seq is None else v.head_seq + 1
        if v.pending is not None and v.pending[0] == fingerprint and v.pending[1].seq == seq:
            # retry of an unknown outcome: the same write id, and the same pack (id and bytes) the
            # first attempt may have written and its manifest names: the segment list, the state
            # hints and the pack all stay the first attempt's (a new pack id here left the landed
            # manifest's segments without the pack the writer's later hints name)
            m, tier, superseded, prep = v.pending[1], v.pending[2], v.pending[3], v.pending[4]
        else:
            if prep.pack_id is not None:
                repo.remember_pack(prep.pack_id, prep.pack_bytes, prep.raw_blocks)
            m = Manifest(kind=KIND_CHECKPOINT, run_id=run_id, seq=seq, write_id=new_write_id(),
                         created=datetime.now(timezone.utc), checkpoint_id=checkpoint_id or new_checkpoint_id(seq),
                         parent_id=pm.checkpoint_id if pm else None, fields=fields)
            # format 2: the run's segment list, merging a tier when this save completes one
            m.segs, tier, superseded = plan_save(repo, v.head_segs or [], prep.pack_id, prep.state.ids or ())
            if tier is not None:
                repo.remember_pack(*tier)
        m.session_state = prep.session_state_inline
        m.session_state_ref = prep.session_state_ref
        m.session_state_tree = prep.session_state_tree
        m.has_session_state = prep.has_session_state
        m.count, m.size = prep.state.count, prep.state.size
        m.digest = prep.state.digest_hex()
        m.state = None
        if prep.state.state:
            m.state = [prep.state.state[0].hex(), prep.state.state[1].hex()]
            up = prep.state.spine.upper
            if up is not None and up[1] != prep.state.state[1]:
                m.state.append(up[1].hex())  # prefetch hint: the upper entry's pack
        v.pending = (fingerprint, m, tier, superseded, prep)
        self._hook("after_prepare", run_id=run_id, seq=seq, prepared=prep)
        # index record first (a refused duplicate id writes nothing), then data, then the manifest
        indexed = repo.write_index(rk, m.checkpoint_id, seq, m.write_id)
        wrote_pack = False

        def undo() -> None:
            # a definite conflict: nothing references our index record or pack, remove them
            v.pending = None
            v.loaded = False
            junk = [keys.index_key(rk, repo.checkpoint_key(m.checkpoint_id))] if indexed else []
            if wrote_pack:
                junk.append(keys.pack_key(prep.pack_id))
            if tier is not None:
                junk.append(keys.pack_key(tier[0]))
            if junk:
                try:
                    repo.store.delete_many(junk)
                except SnapstoreError:
                    pass  # left for GC
        t_pack = self._clock()
        # the tier pack (if this save completes a tier) is written beside the save's own pack
        tier_put = repo._pool_get().submit(self._put_pack, repo, tier[0], tier[1]) if tier is not None else None
        try:
            if prep.pack_bytes is not None:
                self._put_pack(repo, prep.pack_id, prep.pack_bytes)
                wrote_pack = True
        finally:
            if tier_put is not None:
                tier_put.result()
        self._hook("after_pack", run_id=run_id, seq=seq, pack_id=prep.pack_id)
        half = self.gc_grace_period / 2
        if self._clock() - v.confirmed_at > half or (parent_id is not None and self._clock() - t_start > half):
            # GC safety: our parent (and so the data we dedup against) must still exist, and the
            # run must be the one we know (same newest record, not a re-created run)
            newest = repo.head(rk)
            same = (newest.write_id if newest else None) == v.head_write_id and \
                (newest.seq if newest else None) == v.head_seq
            landed = newest is not None and newest.seq == seq and newest.write_id == m.write_id
            if landed:
                same = True  # an earlier attempt of this very save landed (its reply was lost): publish reads it back
            elif same and pm is not None and parent_id is not None:
                try:
                    same = repo.read_manifest_key(keys.manifest_key(rk, pm.seq)).write_id == pm.write_id
                except ObjectNotFound:
                    same = False
            if not same:
                undo()
                raise ConflictError(f"run {run_id!r} changed since this manager last saw it "
                                    "(re-checked before publishing); call latest() and retry")
            v.confirmed_at = self._clock()
        # With a grace period of 0 the caller asserts that GC never runs beside an active writer,
        # so no pack can turn into a deletion candidate while this save is in flight: the rule
        # below does not apply (with it, every save was "stale": any time elapsed is > 0).
        if self.gc_grace_period > 0 and self._clock() - t_pack > half:
            if not late_ok:
                # our pack may already be a GC deletion candidate: build the save again
                undo()
                raise _Stale()
            if not self.__dict__.get("_warned_grace"):
                self._warned_grace = True
                warnings.warn(f"gc_grace_period={self.gc_grace_period:g} s is shorter than twice the time a save "
                              f"takes here ({self._clock() - t_pack:.3g} s from pack to publish): saves publish "
                              "anyway, and a GC with that grace period must not run beside this writer",
                              RuntimeWarning, stacklevel=4)
        self._hook("before_publish", run_id=run_id, seq=seq, manifest=m)
        try:
            data = repo.publish(rk, m)
        except PreconditionFailed:
            undo()
            if parent_id is not None or exp is not None or seen is None:
                raise  # the caller's save loop decides: move to the new head and retry, or conflict
            raise ConflictError(f"run {run_id!r} changed: another writer saved, rolled back or deleted "
                                f"checkpoints after the one this save continues (log position {seq} is "
                                "taken); call latest() and retry, or fork() the run") from None
        v.pending = None
        v.head_seq = seq
        v.head_write_id = m.write_id
        v.head_segs = m.segs
        v.head = m
        self._after_publish(rk, v, seq, data)
        if superseded:
            # the packs merged into the tier pack: the new record's segments hold their entries
            # (a reader or GC that meets a ref hinting at one finds the entry there); a failed
            # delete is left for GC (no newest record lists them)
            try:
                repo.store.delete_many([keys.pack_key(p) for p in superseded])
            except SnapstoreError:
                pass
        v.confirmed_at = self._clock()
        self._saw(run_id, m.checkpoint_id, seq, m.write_id)
        v.list_state = prep.state
        if v.live is not None:
            v.live.append((seq, m.checkpoint_id))
        if self.max_checkpoints is not None:
            self._enforce_max(run_id, rk, v)
        return m.checkpoint_id

    READ_RETRIES = 5
    """Reads of a checkpoint that find a segment gone (merged and deleted by the run's writer
    meanwhile) re-read the run's newest record and try again, at most this many times in all."""

    LOG_CACHE = 256
    """Recent log records (their bytes) a manager keeps per run to write log segments."""

    def _after_publish(self, rk: str, v: "_RunView | None", seq: int, data: bytes) -> None:
        """Remember a record just published and write the log segments that end at it (format 2,
        docs/format.md §8a; best effort, a failure costs listing speed only)."""
        cache = None
        if v is not None:
            if v.log_cache is None:
                v.log_cache = {}
            cache = v.log_cache
            cache[seq] = data
            if len(cache) > self.LOG_CACHE:
                for s in sorted(cache)[:len(cache) - self.LOG_CACHE]:
                    del cache[s]
        if (seq + 1) % 16 == 0:
            try:
                write_logsegs(self.repo, rk, seq, cache or {seq: data})
            except SnapstoreError:
                pass

    @staticmethod
    def _put_pack(repo: Repository, pack_id: bytes, data: bytes) -> None:
        """Write a pack create-only; an existing identical object is our own earlier attempt.

        Raises:
            _PackIdCollision: another pack has that id (the save is built again with a new id).
        """
        pkey = keys.pack_key(pack_id)
        try:
            repo.store.put(pkey, data)
        except PreconditionFailed:
            if repo.store.get(pkey) != data:
                raise _PackIdCollision(pkey) from None

    def _live(self, rk: str, v: _RunView) -> list:
        if v.live is None:
            v.live = [(s, c) for s, c, _ in self._scan_bulk(rk)][::-1]
        return v.live

    def _enforce_max(self, run_id: str, rk: str, v: _RunView) -> None:
        """Delete the oldest checkpoints beyond ``max_checkpoints`` (best effort: the save already
        succeeded; a failure here leaves extra checkpoints for the next save or prune).

        Conditional on the save just made: only while the run's newest live checkpoint is that
        save (``v.head``); if another writer moved the head meanwhile (a rollback may be making an
        old checkpoint the head again), nothing is deleted and the next save or prune decides."""
        try:
            if len(self._live(rk, v)) <= self.max_checkpoints:
                return
            v.live = None  # another manager may have deleted some: count afresh before deleting
            live = self._live(rk, v)
            excess = len(live) - self.max_checkpoints
            if excess > 0 and v.head is not None and live[-1] == (v.head.seq, v.head.checkpoint_id):
                self.repo.delete_checkpoint_objects(rk, live[:excess])
                del live[:excess]
        except SnapstoreError as e:
            v.live = None
            warnings.warn(f"run {run_id!r}: could not apply max_checkpoints: {e}", stacklevel=4)

    # ------------------------------------------------------------------------------------------
    # read

    def latest(self, run_id: str) -> Checkpoint | None:
        """Return the run's newest checkpoint (after any rollback), or None if the run is empty/deleted.

        Costs one LIST (limit 1) and one GET to find it, then the reads of its message tree.
        """
        with self._run_lock(run_id):
            if not self._exists():
                # nothing there yet: remember that this manager saw the run empty
                self._views[run_id] = _RunView(head_seq=None, head=None, loaded=True, confirmed_at=self._clock())
                self._saw(run_id, None, None, None)
                return None
            v = self._load_view(run_id)
            if v.head is None:
                self._saw_view(run_id, v)
                return None
            for attempt in range(self.READ_RETRIES):
                try:
                    msgs, ls = self.repo.load_with_state(v.head, v.head_segs)
                    break
                except NotFoundError:
                    # the run's writer merged the segments we read into a new tier pack and
                    # deleted them: read the newest record again (a busy writer may do it again)
                    if attempt == self.READ_RETRIES - 1:
                        raise
                    v = self._load_view(run_id)
                    if v.head is None:
                        self._saw_view(run_id, v)
                        return None
            v.list_state = ls
            self._saw_view(run_id, v)
            return self._checkpoint(v.head, msgs)

    def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """Return checkpoint ``checkpoint_id`` of ``run_id``.

        Raises:
            CheckpointNotFound: no such checkpoint in the run.
        """
        check_checkpoint_id(checkpoint_id)
        with self._run_lock(run_id):
            if not self._exists():
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
            rk = self._rk(run_id)
            # format 2: the run's newest record lists the segments holding every checkpoint's
            # entries (an older record's list may name packs merged away since): read it beside
            f_view = None
            v = self._views.get(run_id)
            if v is None or not v.loaded:
                f_view = self.repo._pool_get().submit(self._load_view, run_id)
            try:
                m = self.repo.find_checkpoint(rk, checkpoint_id)
            except CheckpointNotFound:
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
            finally:
                if f_view is not None:
                    f_view.result()
            v = self._views.get(run_id)
            segs = v.head_segs if v is not None and v.head_segs else None
            for attempt in range(self.READ_RETRIES):
                try:
                    msgs, ls = self.repo.load_with_state(m, segs)
                    break
                except NotFoundError:
                    if attempt == self.READ_RETRIES - 1:
                        raise
                    segs = self._load_view(run_id).head_segs or None
            v = self._views.get(run_id)
            if v is not None and v.loaded and v.head is not None and v.head.checkpoint_id == m.checkpoint_id:
                v.list_state = ls
                self._saw_view(run_id, v)  # the caller read the head: it may continue from it
            else:
                # an older checkpoint: a save needs parent_id=; what the caller saw of the head stays
                prev = callers.seen(self, run_id)
                callers.set_seen(self, run_id, Seen(m.checkpoint_id, prev.seq if prev else None,
                                                    prev.write_id if prev else None, at_head=False,
                                                    known=prev is not None and prev.known))
            return self._checkpoint(m, msgs)

    def head(self, run_id: str) -> CheckpointSummary | None:
        """Return the run's head checkpoint's metadata (its newest live checkpoint, after any
        rollback), or None for an empty, deleted or unknown run. One LIST (limit 1) and one GET
        (a rollback record also reads its target); messages are not read.

        Raises:
            InvalidRunIdError: a bad run id.
        """
        check_run_id(run_id)
        if not self._exists():
            return None
        rk = self._rk(run_id)
        m = self._resolve(rk, self.repo.head(rk))
        return None if m is None else CheckpointSummary._from(m)

    def summary(self, run_id: str, checkpoint_id: str) -> CheckpointSummary:
        """Return checkpoint ``checkpoint_id``'s metadata without reading its messages (its
        manifest only: one or two GETs).

        Raises:
            InvalidRunIdError / InvalidCheckpointIdError: bad ids.
            CheckpointNotFound: no such live checkpoint in the run.
        """
        check_run_id(run_id)
        check_checkpoint_id(checkpoint_id)
        if not self._exists():
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        try:
            return CheckpointSummary._from(self.repo.find_checkpoint(self._rk(run_id), checkpoint_id))
        except CheckpointNotFound:
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None

    def list(self, run_id: str, limit: int | None = None, *, metadata: dict | None = None,
             before_seq: int | None = None) -> list[CheckpointSummary]:
        """Return summaries of the run's live checkpoints, newest first.

        Args:
            run_id: the run.
            limit: at most this many (reads about ``limit`` manifests, not the whole run).
            metadata: only checkpoints whose metadata holds all these key/value pairs.
            before_seq: only checkpoints whose log position (``seq``) is below this: the cursor
                of a paged listing (pass the last page's smallest ``seq``).
        Returns:
            A list of :class:`CheckpointSummary` (empty for an unknown run).
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"limit must be a non-negative integer, got {limit!r}")
        if before_seq is not None and (not isinstance(before_seq, int) or before_seq < 0):
            raise InvalidInputError(f"before_seq must be a non-negative integer, got {before_seq!r}")
        out = []
        check_run_id(run_id)
        if limit == 0 or not self._exists():
            return out
        rk = self._rk(run_id)
        if limit is not None and limit <= self.BULK_LIST_MIN:
            scan = self._scan(rk, below=before_seq)
        else:
            scan = (x for x in self._scan_bulk(rk) if before_seq is None or x[0] < before_seq)
        for s, cid, m in scan:
            if metadata:
                md = m.fields.get("metadata")
                if not isinstance(md, dict) or any(k not in md or md[k] != val for k, val in metadata.items()):
                    continue
            out.append(CheckpointSummary._from(m))
            if limit is not None and len(out) >= limit:
                break
        return out

    def runs(self) -> list[str]:
        """Return the ids of runs that have at least one live checkpoint, sorted.

        A run whose newest log record is a tombstone (deleted), or a rollback record that resolves
        to no checkpoint, is not listed. Never creates a repository (none there: ``[]``).

        Requests: one LIST of ``runs/`` (per 1,000 runs), then for each run one LIST (max-keys 1:
        the key of its newest record) and one GET of that record (a rollback also reads its
        target), run by :meth:`_live_run_ids` with ``store.max_concurrency`` requests in flight (S3:
        128). The GET cannot be skipped: only the record's content says whether it is a
        checkpoint, a rollback or a tombstone (the key segment gives at most the run id). On a
        manager that has not opened the repository yet, the LISTs overlap reading its config (the
        GETs wait for it). A repeat call on the same manager GETs only rollback heads (see
        :meth:`_live_run_ids`). Measured against moto's HTTP server with 1 s added per request
        (``tests/test_runs_round_trips.py``, 204 run directories, 200 listed): 6 sequential round
        trips and 415 requests on a new manager (config GET and versioning check included), 5 and
        212 on a repeat call.

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError: a request failed.
            IntegrityError: a run's newest record is corrupt.
        """
        opened = None  # a new manager: find out whether a repository exists beside the listing
        if self._repo is None:
            from concurrent.futures import ThreadPoolExecutor

            ex = ThreadPoolExecutor(1, thread_name_prefix="snapstore-open")
            opened = ex.submit(self._exists)
            ex.shutdown(wait=False)
        try:
            rks = list(self.store.list_dirs(keys.RUNS))
        except Exception:
            if opened is not None and not opened.result():
                return []  # no repository: what the listing said does not matter
            raise
        got = self._live_run_ids(rks, opened)
        if opened is not None and not opened.result():
            return []
        return sorted(got)

    def _live_run_ids(self, rks: list[str], opened=None) -> list[str]:
        """The run ids of the run keys ``rks`` whose head is a live checkpoint (in no order).

        Each run costs a LIST (max-keys 1) and, as soon as that returns, a GET of the newest
        record, queued behind the remaining LISTs on one pool of ``store.max_concurrency``
        threads, so n runs take about ``2n / max_concurrency`` sequential round trips. A ``b`` key
        segment is decoded to the run id; an ``h`` (hashed) one takes it from the manifest
        (``read_manifest_key`` checks that they agree). ``opened``: a future of :meth:`_exists`
        still running; GETs wait for it and are skipped when it is False.

        The GET is skipped when this manager already read the same head object: what a
        checkpoint or tombstone record at a key says cannot change while its ETag (from the LIST)
        stays the same, so the answer is remembered per run as ``(key, ETag, run id or None)``.
        Rollback heads are always read and resolved again (their target may have gone since).

        Raises:
            StoreError (and subclasses), IntegrityError: as :meth:`runs`.
        """
        from concurrent.futures import ThreadPoolExecutor

        from .format.ids import decode_name_key
        from .stores.base import max_concurrency

        if not rks:
            return []
        store = self.store
        seen = self.__dict__.setdefault("_runs_seen", {})  # run key -> (head key, ETag, run id | None)

        def run_id(rk: str, m: Manifest) -> str:
            if rk.startswith("b"):
                try:
                    return decode_name_key(rk)
                except (ValueError, UnicodeDecodeError):  # not a name segment (binascii.Error)
                    pass
            return m.run_id

        def read_head(rk: str, key: str, etag: str) -> str | None:
            if opened is not None and not opened.result():
                return None
            repo = self.repo  # open by now
            try:
                newest = repo.read_manifest_key(key)
            except ObjectNotFound:
                newest = repo.head(rk)  # removed between LIST and GET: look again
                etag = None             # (not the object listed: nothing to remember)
            if newest is None:
                return None
            if newest.kind == KIND_ROLLBACK:
                return None if self._resolve(rk, newest) is None else run_id(rk, newest)
            got = None if newest.kind == KIND_TOMBSTONE else run_id(rk, newest)
            if etag:
                seen[rk] = (key, etag, got)
            return got

        class _Known:  # a head answered from ``seen``: a done "future"
            def __init__(self, value):
                self.value = value

            def result(self):
                return self.value

        lock = threading.Lock()
        futures: list = []

        def find_head(rk: str) -> None:
            for info in store.list(keys.manifests_prefix(rk), limit=1):
                known = seen.get(rk)
                if known is not None and known[:2] == (info.key, info.etag) and info.etag and opened is None:
                    fut = _Known(known[2])
                else:
                    fut = pool.submit(read_head, rk, info.key, info.etag)
                with lock:
                    futures.append(fut)

        pool = ThreadPoolExecutor(min(len(rks), max_concurrency(store)), thread_name_prefix="snapstore-runs")
        try:
            with lock:
                futures.extend(pool.submit(find_head, rk) for rk in rks)
            out, i = [], 0
            while True:  # each LIST's future is waited for before the GET future it adds
                with lock:
                    if i >= len(futures):
                        return out
                    fut = futures[i]
                i += 1
                got = fut.result()
                if got is not None:
                    out.append(got)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def resume_point(self, run_id: str) -> tuple[object, Checkpoint] | None:
        """Return ``(step, checkpoint)`` to resume the run from, or None if it has no checkpoint.

        ``step`` is the step saved with the latest checkpoint, or its sequence number if none was saved.
        """
        cp = self.latest(run_id)
        if cp is None:
            return None
        return (cp.step if cp.step is not None else cp.seq), cp

    def get_resume_point(self, run_id: str) -> tuple[object, object, object] | None:
        """Return ``(step, session_state, metrics)`` of the run's latest checkpoint, or None if the
        run has no checkpoint (the seed's shape; :meth:`resume_point` gives the whole checkpoint).

        ``step`` is as in :meth:`resume_point` (the saved step, else the log position); the state
        and metrics are what that checkpoint was saved with (None if none).
        """
        rp = self.resume_point(run_id)
        if rp is None:
            return None
        step, cp = rp
        return step, cp.session_state, cp.metrics

    # ------------------------------------------------------------------------------------------
    # log changes

    def _append_record(self, run_id: str, rk: str, make) -> Manifest:
        """Publish a rollback/tombstone record at the next free position (fresh head; retries)."""
        for _ in range(16):
            newest = self.repo.head(rk)
            seq = 0 if newest is None else newest.seq + 1
            m = make(seq, newest)
            try:
                data = self.repo.publish(rk, m)
                self._after_publish(rk, self._views.get(m.run_id), seq, data)
                return m
            except PreconditionFailed:
                continue
        raise ConflictError(f"run {run_id!r} is changing too fast; gave up publishing a log record")

    def _head_check(self, run_id: str, rk: str, exp: tuple | None, seen: Seen | None, what: str):
        """A check of the run's newest record against the caller's expectation, for operations that
        move the head: ``check(newest)`` raises ConflictError unless the head ``newest`` resolves to
        is ``exp`` (explicit ``expect_head``) or, without one, what ``seen`` (the calling context's
        view) recorded. None when there is nothing to check (no expectation, no view)."""
        if exp is None and (seen is None or not seen.known):
            return None

        def check(newest: Manifest | None) -> None:
            head = self._resolve(rk, newest)
            hid = head.checkpoint_id if head else None
            if exp is not None:
                if hid != exp[0]:
                    want = "no checkpoint (EMPTY_RUN)" if exp[0] is None else repr(exp[0])
                    raise ConflictError(f"run {run_id!r}: {what} expected head {want} but the head is {hid!r}; "
                                        "read the head again and retry")
            elif not seen.same_record(newest.seq if newest else None, newest.write_id if newest else None):
                raise ConflictError(
                    f"run {run_id!r}: {what} refused: this caller last saw checkpoint {seen.checkpoint_id!r} but the "
                    f"head is {hid!r} (another writer saved, rolled back or deleted since); call latest() and decide "
                    "again")
        return check

    def _publish_record(self, run_id: str, rk: str, newest: Manifest | None, m: Manifest, what: str) -> Manifest:
        """Publish a rollback/tombstone record ``m`` at exactly the position after ``newest`` (the
        head a conditional operation checked). Raises ConflictError if the run moved meanwhile."""
        try:
            data = self.repo.publish(rk, m)
        except PreconditionFailed:
            raise ConflictError(f"run {run_id!r} changed while checking it for {what} (another writer saved, "
                                "rolled back or deleted); read the head again and retry") from None
        self._after_publish(rk, self._views.get(run_id), m.seq, data)
        return m

    def rollback(self, run_id: str, checkpoint_id: str, *, expect_head=None) -> Checkpoint:
        """Make ``checkpoint_id`` the run's head again; later checkpoints are deleted.

        A rollback record is published at the position after the head (so stale writers conflict),
        then the later manifests and their index records are removed. The rollback is conditional
        like a save: if the calling context saved or read the run, the head must still be what it
        last saw; ``expect_head`` (a checkpoint id, or :data:`EMPTY_RUN`) is an explicit
        compare-and-swap instead. A caller that never saw the run rolls back whatever the head is
        when it reads it.

        Returns:
            The checkpoint rolled back to (the caller's view is now that head).
        Raises:
            CheckpointNotFound: no such checkpoint in the run.
            ConflictError: the head is not what the caller saw / not ``expect_head``, or the run
                moved while rolling back; nothing was changed.
        """
        check_checkpoint_id(checkpoint_id)
        exp = _expect(expect_head)
        with self._run_lock(run_id):
            if not self._exists():
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
            rk = self._rk(run_id)
            check = self._head_check(run_id, rk, exp, callers.seen(self, run_id), "rollback")
            newest = self.repo.head(rk)
            if check is not None:
                check(newest)
            try:
                target = self.repo.find_checkpoint(rk, checkpoint_id)
            except CheckpointNotFound:
                if check is not None:
                    check(self.repo.head(rk))  # gone because the run moved: that is the conflict
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None

            def make(seq, _n):
                return Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id=new_write_id(),
                                created=datetime.now(timezone.utc), target={"seq": target.seq, "id": checkpoint_id},
                                segs=_carried_segs(_n))
            rec = newest
            if not (newest is not None and newest.kind == KIND_CHECKPOINT and newest.seq == target.seq):
                if check is not None:
                    rec = self._publish_record(run_id, rk, newest, make(newest.seq + 1, newest), "rollback")
                else:
                    rec = self._append_record(run_id, rk, make)
                self._remove_range(rk, target.seq, rec.seq)
            v = self._load_view(run_id)
            msgs, ls = self.repo.load_with_state(target, v.head_segs)
            v.list_state = ls
            self._saw(run_id, checkpoint_id, rec.seq, rec.write_id)
            v.live = None
            return self._checkpoint(target, msgs)

    def _remove_range(self, rk: str, low: int, high: int) -> list:
        """Delete every manifest with low < seq < high (and index records). Returns removed (seq, id)."""
        seqs = [s for s in self.repo.manifest_seqs(rk) if low < s < high]
        got = self._read_many(rk, seqs)
        entries = [(s, m.checkpoint_id if (m and m.kind == KIND_CHECKPOINT) else None) for s, m in got.items()]
        self.repo.delete_checkpoint_objects(rk, entries)
        return entries

    def delete(self, run_id: str, checkpoint_id: str | None = None, *, expect_head=None) -> None:
        """Delete one checkpoint, or (``checkpoint_id=None``) the whole run.

        Deleting the head checkpoint moves the head back to the previous live checkpoint (a
        rollback record). Deleting a run publishes a tombstone first, so a writer still holding
        the old head cannot revive it; a later save to the same run id starts a new, empty run.

        What moves the head (deleting the run, or its head checkpoint) is conditional like a
        save: if the calling context saved or read the run, the head must still be what it last
        saw. ``expect_head`` (a checkpoint id, or :data:`EMPTY_RUN`) is an explicit
        compare-and-swap, checked whatever is deleted. Deleting an older checkpoint does not move
        the head and needs no view.

        Raises:
            RunNotFound: deleting a run with no live checkpoint.
            CheckpointNotFound: no such checkpoint.
            ConflictError: the head is not what the caller saw / not ``expect_head``, or the run
                moved while deleting its head; nothing was deleted.
        """
        exp = _expect(expect_head)
        with self._run_lock(run_id):
            if checkpoint_id is not None:
                check_checkpoint_id(checkpoint_id)
            if not self._exists():
                if checkpoint_id is None:
                    raise RunNotFound(f"run {run_id!r} not found")
                raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
            rk = self._rk(run_id)
            check = self._head_check(run_id, rk, exp, callers.seen(self, run_id), "delete")
            if checkpoint_id is None:
                newest = self.repo.head(rk)
                if newest is None or self._resolve(rk, newest) is None:
                    if exp is not None and check is not None:
                        check(newest)
                    raise RunNotFound(f"run {run_id!r} not found")
                if check is not None:
                    check(newest)
                tomb = self._delete_run(run_id, rk, newest if check is not None else None)
                self._views.pop(run_id, None)
                self._saw(run_id, None, tomb.seq, tomb.write_id)
            else:
                check_checkpoint_id(checkpoint_id)
                if exp is not None:
                    check(self.repo.head(rk))  # explicit compare-and-swap: whatever is deleted
                try:
                    m = self.repo.find_checkpoint(rk, checkpoint_id)
                except CheckpointNotFound:
                    raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
                rec = self._delete_checkpoints(run_id, rk, [(m.seq, checkpoint_id)], check)
                self._views.pop(run_id, None)
                if rec is not None:
                    self._saw_record(run_id, rk, rec)

    def delete_many(self, run_id: str, checkpoint_ids, *, expect_head=None) -> list[str]:
        """Delete several checkpoints of one run at once (one scan of the run's log).

        Ids that name no live checkpoint are skipped. Deleting the head moves the head back to the
        newest surviving checkpoint (one rollback record); deleting every checkpoint deletes the run.
        Conditional like :meth:`delete`: moving the head needs the head the calling context last
        saw (if it saw the run), and ``expect_head`` (a checkpoint id or :data:`EMPTY_RUN`) is an
        explicit compare-and-swap checked whatever is deleted.

        Args:
            run_id: the run.
            checkpoint_ids: iterable of checkpoint ids (str).
        Returns:
            The ids deleted (the run's order, newest first).
        Raises:
            ConflictError: the head is not what the caller saw / not ``expect_head``, or the run
                moved while deleting its head; nothing was deleted then.
        """
        exp = _expect(expect_head)
        wanted = {check_checkpoint_id(c) for c in checkpoint_ids}
        with self._run_lock(run_id):
            if not wanted or not self._exists():
                return []
            rk = self._rk(run_id)
            check = self._head_check(run_id, rk, exp, callers.seen(self, run_id), "delete")
            if exp is not None:
                check(self.repo.head(rk))
            doomed = [(s, c) for s, c, _ in self._scan_bulk(rk) if c in wanted]
            if doomed:
                rec = self._delete_checkpoints(run_id, rk, doomed, check)
                self._views.pop(run_id, None)
                if rec is not None:
                    self._saw_record(run_id, rk, rec)
            return [c for _, c in doomed]

    def _saw_record(self, run_id: str, rk: str, rec: Manifest) -> None:
        """The calling context moved the head with record ``rec``: its view is now that head."""
        head = self._resolve(rk, rec)
        self._saw(run_id, head.checkpoint_id if head else None, rec.seq, rec.write_id)

    def _delete_run(self, run_id: str, rk: str, newest: Manifest | None = None) -> Manifest:
        """Publish a tombstone (at exactly the position after ``newest`` when given: conditional;
        else at the next free one), then remove the run's older records. Returns the tombstone."""
        def make(seq, _n):
            return Manifest(kind=KIND_TOMBSTONE, run_id=run_id, seq=seq, write_id=new_write_id(),
                            created=datetime.now(timezone.utc))
        if newest is not None:
            tomb = self._publish_record(run_id, rk, newest, make(newest.seq + 1, newest), "delete")
        else:
            tomb = self._append_record(run_id, rk, make)
        self.repo.store.delete_many(i.key for i in self.repo.store.list(keys.index_prefix(rk)))
        self.repo.store.delete_many(keys.manifest_key(rk, s) for s in self.repo.manifest_seqs(rk) if s < tomb.seq)
        return tomb

    def _delete_checkpoints(self, run_id: str, rk: str, doomed: list, check=None) -> Manifest | None:
        """Delete live checkpoints ``[(seq, id)]``; if the head is among them, move the head first.

        The record that moves the head is published at exactly the position after the head the
        decision was based on, so a checkpoint saved concurrently is never hidden by it. With
        ``check`` (see :meth:`_head_check`) the head must pass it before it is moved, and a run
        that moves meanwhile raises ConflictError; without, the decision is made again.

        Returns:
            The record that moved the head, or None if the head did not move.
        """
        doomed_seqs = {s for s, _ in doomed}
        moved = None
        for _ in range(16):
            newest = self.repo.head(rk)
            live = [(s, c) for s, c, _ in self._scan(rk)]
            if newest is None or not live or live[0][0] not in doomed_seqs:
                break
            if check is not None:
                check(newest)
            survivors = [(s, c) for s, c in live if s not in doomed_seqs]
            seq = newest.seq + 1
            if survivors:
                ts, tc = survivors[0]
                rec = Manifest(kind=KIND_ROLLBACK, run_id=run_id, seq=seq, write_id=new_write_id(),
                               created=datetime.now(timezone.utc), target={"seq": ts, "id": tc},
                               segs=_carried_segs(newest))
            else:
                ts = -1
                rec = Manifest(kind=KIND_TOMBSTONE, run_id=run_id, seq=seq, write_id=new_write_id(),
                               created=datetime.now(timezone.utc))
            try:
                data = self.repo.publish(rk, rec)
            except PreconditionFailed:
                if check is not None:
                    raise ConflictError(f"run {run_id!r} changed while deleting its head checkpoint; read the "
                                        "head again and retry") from None
                continue  # the run moved on: decide again
            self._after_publish(rk, None, rec.seq, data)
            moved = rec
            # everything between the new head and the record is now hidden: remove it (incl. doomed)
            done = {s for s, _ in self._remove_range(rk, ts, rec.seq)}
            if not survivors:
                self.repo.store.delete_many(i.key for i in self.repo.store.list(keys.index_prefix(rk)))
            doomed = [(s, c) for s, c in doomed if s not in done]
            break
        else:
            raise ConflictError(f"run {run_id!r} is changing too fast; gave up deleting")
        self.repo.delete_checkpoint_objects(rk, doomed)
        return moved

    def retention_plan(self, run_id: str | None = None, **policy) -> list:
        """Decide, without deleting, which live checkpoints a retention policy keeps and why.

        Args:
            run_id: only this run (default: every run).
            **policy: rules of :class:`snapstore.retention.Policy` (``keep_last``, ``keep_within``,
                ``older_than``, ``keep_hourly`` ... ``keep_yearly``); durations as seconds,
                ``timedelta`` or text like ``"7d"``.
        Returns:
            :class:`snapstore.retention.Decision` objects (``checkpoint`` is a CheckpointSummary,
            ``keep``, ``reasons``), per run newest first.
        Raises:
            InvalidInputError: no rule or a bad value.
        """
        from .retention import Policy, plan
        pol = Policy.make(**policy)
        now = datetime.now(timezone.utc)
        if not self._exists():
            return []
        runs = [run_id] if run_id is not None else self.runs()
        out = []
        for r in runs:
            rk = self._rk(r)
            out.extend(plan([CheckpointSummary._from(m) for _, _, m in self._scan(rk)], pol, now))
        return out

    def prune(self, older_than=None, keep_last: int | None = None, run_id: str | None = None, *,
              keep_within=None, keep_hourly: int | None = None, keep_daily: int | None = None,
              keep_weekly: int | None = None, keep_monthly: int | None = None, keep_yearly: int | None = None,
              dry_run: bool = False) -> list[CheckpointSummary]:
        """Apply a retention policy; delete the checkpoints (manifests) it does not keep.

        A checkpoint is kept if any rule keeps it (restic ``forget`` semantics, see
        :mod:`snapstore.retention`): among the ``keep_last`` newest of its run, created less than
        ``older_than`` ago, within ``keep_within`` of the run's newest, or the newest of one of the
        last N hours/days/weeks/months/years. Deleting every checkpoint of a run deletes the run.
        Only manifests are deleted; unused data is reclaimed by :meth:`gc`.

        Args:
            older_than: seconds, ``timedelta`` or text (``"7d"``): checkpoints older than this go.
            keep_last: always keep this many newest checkpoints per run.
            run_id: only this run (default: every run).
            keep_within, keep_hourly, keep_daily, keep_weekly, keep_monthly, keep_yearly: more rules.
            dry_run: report what would go, delete nothing.
        Moving a run's head (when the policy deletes its newest checkpoint) is conditional like a
        save: if the calling context saved or read that run, the head must still be what it last
        saw, else ConflictError (runs handled before stay pruned). Deleting older checkpoints
        does not move the head and needs no view.

        Returns:
            Summaries of the deleted (with ``dry_run``: deletable) checkpoints.
        Raises:
            InvalidInputError: no rule given, or a bad value.
            ConflictError: a run's head moved since this caller saw it (see above).
        """
        policy = dict(older_than=older_than, keep_last=keep_last, keep_within=keep_within, keep_hourly=keep_hourly,
                      keep_daily=keep_daily, keep_weekly=keep_weekly, keep_monthly=keep_monthly,
                      keep_yearly=keep_yearly)
        from .retention import Policy, plan
        pol = Policy.make(**policy)
        now = datetime.now(timezone.utc)
        if not self._exists():
            return []
        runs = [run_id] if run_id is not None else self.runs()
        gone: list[CheckpointSummary] = []
        for r in runs:
            with self._run_lock(r):
                rk = self._rk(r)
                live = [m for _, _, m in self._scan(rk)]
                decisions = plan([CheckpointSummary._from(m) for m in live], pol, now)
                doomed = [m for m, d in zip(live, decisions) if not d.keep]
                if not doomed:
                    continue
                if not dry_run:
                    # deleting the head is conditional on the caller's view of the run (if any)
                    check = self._head_check(r, rk, None, callers.seen(self, r), "prune")
                    rec = self._delete_checkpoints(r, rk, [(m.seq, m.checkpoint_id) for m in doomed], check)
                    self._views.pop(r, None)
                    if rec is not None and check is not None:
                        self._saw_record(r, rk, rec)
                gone.extend(CheckpointSummary._from(m) for m in doomed)
        return gone

    def fork(self, run_id: str, checkpoint_id: str, new_run_id: str) -> Checkpoint:
        """Start run ``new_run_id`` at checkpoint ``checkpoint_id`` of ``run_id``.

        The new run's first checkpoint shares the source's message tree; it gets a new checkpoint
        id and records its origin. Format 2: the entries that checkpoint needs are copied into one
        pack of the new run (one PUT, about the compressed size of the history), so the fork never
        depends on the source run's packs, which the source's writer merges and deletes.

        Returns:
            The new run's first checkpoint.
        Raises:
            CheckpointNotFound: no such source checkpoint.
            ConflictError: ``new_run_id`` already has live checkpoints.
        """
        check_run_id(new_run_id)
        check_checkpoint_id(checkpoint_id)
        check_run_id(run_id)
        if not self._exists():
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        rk = self._rk(run_id)
        try:
            src = self.repo.find_checkpoint(rk, checkpoint_id)
        except CheckpointNotFound:
            raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
        # the source run's newest record lists the segments that hold its checkpoints' entries;
        # the fork gets its own copy of what its first checkpoint needs (one pack), so that it
        # never depends on another run's segments
        src_segs = _carried_segs(self.repo.head(rk)) or src.segment_list()
        self.repo.prefetch_segments(src_segs)
        copy = None
        if self.repo.config.seg_fanout and (src.state or src.session_state_ref or src.session_state_tree):
            copy = fork_copy(self.repo, src)
        with self._run_lock(new_run_id):
            nrk = self._rk(new_run_id)
            newest = self.repo.head(nrk)
            if newest is not None and self._resolve(nrk, newest) is not None:
                raise ConflictError(f"run {new_run_id!r} already exists")
            seq = 0 if newest is None else newest.seq + 1
            m = Manifest(kind=KIND_CHECKPOINT, run_id=new_run_id, seq=seq, write_id=new_write_id(),
                         created=datetime.now(timezone.utc), checkpoint_id=new_checkpoint_id(seq), parent_id=None,
                         fields=dict(src.fields), session_state=src.session_state,
                         session_state_ref=src.session_state_ref, session_state_tree=src.session_state_tree,
                         has_session_state=src.has_session_state,
                         count=src.count, size=src.size, digest=src.digest, state=src.state,
                         origin={"run": run_id, "id": checkpoint_id},
                         segs=([Seg(copy[0], FORK_LEVEL)] if copy else []) if self.repo.config.seg_fanout else None)
            self.repo.write_index(nrk, m.checkpoint_id, seq, m.write_id)
            if copy is not None:
                self._put_pack(self.repo, copy[0], copy[1])
                self.repo.remember_pack(*copy)
            try:
                data = self.repo.publish(nrk, m)
            except PreconditionFailed:
                if copy is not None:
                    try:
                        self.repo.store.delete_many([keys.pack_key(copy[0])])
                    except SnapstoreError:
                        pass  # left for GC
                raise ConflictError(f"run {new_run_id!r} changed while forking") from None
            self._after_publish(nrk, None, seq, data)
            self._views.pop(new_run_id, None)
            v = self._load_view(new_run_id)
            msgs, ls = self.repo.load_with_state(m, v.head_segs)
            v.list_state = ls
            self._saw(new_run_id, m.checkpoint_id, seq, m.write_id)
            return self._checkpoint(m, msgs)

    # ------------------------------------------------------------------------------------------
    # whole-repository operations

    def verify(self, read_data: bool = False, progress=None):
        """Check the repository; return a :class:`snapstore.check.VerifyReport`.

        Every object a live checkpoint reaches must exist and parse (pack checksums, node ids);
        with ``read_data`` every message chunk is decompressed and hashed too. Crash leftovers
        (unreferenced packs, temp files, hidden manifests) are reported as warnings.

        Args:
            read_data: also read and hash every chunk.
            progress: optional callable ``progress(phase: str, done: int, total: int)``.
        Raises:
            RepositoryNotFound: the location holds no repository (a read never creates one).
        """
        from .check import verify
        return verify(self._open(False), read_data=read_data, progress=progress)

    def gc(self, grace_period: float | None = None, dry_run: bool = False, progress=None, **options):
        """Garbage-collect: reclaim what no live checkpoint needs; repack small and mostly-dead packs.

        Args:
            grace_period: seconds an unreferenced object must stay unreferenced before deletion
                (default: this manager's ``gc_grace_period``). 0 asserts no other writer is active;
                then everything unreachable is reclaimed within two calls.
            dry_run: report only.
            progress: optional ``progress(phase, done, total)``.
            **options: see :func:`snapstore.gc.gc` (``max_unused``, ``small_pack_bytes``, ...).
        Returns:
            :class:`snapstore.gc.GCReport`.
        Raises:
            ConflictError: another GC is running.
            RepositoryNotFound: the location holds no repository.
        """
        from .gc import gc
        g = self.gc_grace_period if grace_period is None else grace_period
        rep = gc(self._open(False), grace_period=g, dry_run=dry_run, progress=progress, **options)
        if not dry_run:
            self._views.clear()
        return rep

    def stats(self, prices: dict | None = None) -> dict:
        """Return repository statistics (see :func:`snapstore.check.stats`): runs, checkpoints,
        logical_bytes, stored_bytes, ratio, objects by category, this process's requests and an
        estimated cost at S3 Standard list prices (override with ``prices``).

        Raises:
            RepositoryNotFound: the location holds no repository (a read never creates one)."""
        from .check import stats
        return stats(self._open(False), prices)

