"""The checkpoint API: :class:`CheckpointManager`, :class:`Checkpoint`, :class:`CheckpointSummary`.

Layer 4, the facade. :class:`CheckpointManager` holds its settings (store, ``max_checkpoints``,
GC grace period, ``compact_log``), its state (``state``, a :class:`~snapstore.manager.state.ManagerState`:
the repository opened on first use, per-run locks and views, the clock, test hooks) and its public
methods; each delegates to the module that owns the concept, below it:

- :mod:`snapstore.manager.checkpoint`: the values handed out (``Checkpoint``, ``CheckpointSummary``,
  ``EMPTY_RUN``);
- :mod:`snapstore.manager.history`: a run's log read as live checkpoints (rollback records, tombstones);
- :mod:`snapstore.manager.views`: the manager's run views and the conflict contract;
- :mod:`snapstore.manager.state`: what a manager holds (``ManagerState``);
- :mod:`snapstore.manager.publish`: publishing a log record and the log segments after it;
- :mod:`snapstore.manager.save`: save (prepare, pack, publish, retry after a lost reply, tier hand-off);
- :mod:`snapstore.manager.read`: latest, get, head, summary, list, runs, resume points;
- :mod:`snapstore.manager.runread`: read_run (many checkpoints of one run after one listing);
- :mod:`snapstore.manager.rollback`: rollback, delete, delete_many;
- :mod:`snapstore.manager.retention`: prune, retention_plan, ``max_checkpoints``;
- :mod:`snapstore.manager.fork`: fork;
- :mod:`snapstore.manager.outcomes`: record_outcome, outcomes (tool outcomes, the writes area).

Conflicts (docs/format.md §20): each calling context (thread or asyncio task, see
:mod:`snapstore.manager.callers`) remembers, per run, the last checkpoint it saved or read and the run's
newest log record at that moment. ``save`` takes the head as parent and claims the next sequence
number with a create-only write. If another writer claimed it first, or the head is no longer what
this caller saw, ``save`` raises :class:`~snapstore.errors.ConflictError` and writes no manifest;
``rollback``, ``delete`` and retention that move the head are conditional the same way, and
``expect_head=`` is an explicit compare-and-swap on the head. Sequence numbers are never reused:
rollback and deletion publish new log records. The manager's per-run
:class:`~snapstore.manager.views.RunView` (the newest head it knows and caches keyed by content) is shared
by its callers.
"""

from __future__ import annotations

import os
import time

from . import fork, outcomes, publish, read, retention, rollback, runcache, runread, save
from ..repo.log import stubs
from .checkpoint import EMPTY_RUN, Checkpoint, CheckpointSummary
from .state import ManagerState
from ..errors import EncryptionError, InvalidInputError
from ..format.ids import check_run_id
from ..repo.packcache import DEFAULT_LIMIT as PACK_CACHE_BYTES
from ..repo.repository import Repository
from ..stores import open_store
from ..stores import crypt
from ..stores.base import ObjectStore, store_capabilities

__all__ = ["EMPTY_RUN", "Checkpoint", "CheckpointManager", "CheckpointSummary"]


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
        wall_clock: a callable returning the time now as an aware UTC ``datetime``: when saves
            and forks say their checkpoints were created, and the "now" of ``prune`` and
            ``retention_plan`` (tests); default ``datetime.now(timezone.utc)``.
        compact_log: replace manifests covered by a log segment with 0-byte stubs (compacted
            records, docs/format.md §14): the writer of every 16th record stubs the 16 records
            before the newest 16. None (default): True on a local directory (a manifest costs a
            4 KiB disk block), False elsewhere (on S3 the 16 extra PUTs per 16 saves cost more than
            the bytes they save). Readers always read stubs, whatever this says. :meth:`archive`
            stubs the archived runs' manifests after writing their bundle log when this is True.
        run_cache_entries: most runs whose view (head, writer state, recent records) the
            manager keeps (default 4096; :mod:`snapstore.manager.runcache`). The least recently
            used go first; an evicted run costs a re-read of its head at its next operation.
        run_cache_bytes: budget of those views' estimated sizes in bytes (default 64 MiB).
        pack_cache_bytes: budget of the parsed-pack cache in bytes (default 256 MiB), counting
            each pack's compressed bytes, its blocks uncompressed and its entry table.
        passphrase: client-side encryption (docs/format.md §27): the passphrase that opens a key
            slot of an encrypted repository, or creates one when the location is empty (a
            non-empty str). None (default): ``$SNAPSTORE_PASSPHRASE`` if set, else no encryption.
            A passphrase for an unencrypted repository, or none for an encrypted one, raises
            :class:`~snapstore.errors.EncryptionError` at first use; a wrong one
            :class:`~snapstore.errors.WrongPassphrase`.
        kms_key_id: client-side encryption with the data key wrapped by AWS KMS (§27 "KMS
            slots"): a KMS key id, ARN or alias (str; credentials, region and endpoint from the
            environment as boto3 finds them, e.g. ``AWS_ENDPOINT_URL_KMS``), or a
            :class:`~snapstore.stores.kms.KmsKey`. It opens the repository's KMS slot for that
            key (no passphrase needed), or makes one when the location is empty; with a
            passphrase too, KMS is tried first. None (default): ``$SNAPSTORE_KMS_KEY`` if set.
        **store_options: passed to the store (e.g. ``endpoint_url=`` for S3, ``fsync=`` for local).
    Raises:
        RepositoryError: the location holds no repository and ``create`` is False.
        UnsupportedFormatError: the repository was written by a newer snapstore.
        InvalidInputError: a cache bound that is not a non-negative integer (entries: positive).

    Memory: a manager holds at most about ``pack_cache_bytes + run_cache_bytes`` plus a few MB
    however many runs it touches, and ~300 bytes per run for each live calling context that saved
    or read it (what a caller saw is never forgotten: its conflict checks compare it); see the
    README ("Memory") and ``benchmarks/manager_memory.py``.

    A manager may be shared by threads and asyncio tasks: each calling context has its own view
    of each run (what it last saved or read), so callers sharing a manager get the same
    :class:`~snapstore.errors.ConflictError` as separate managers would (docs/format.md §20).
    ``close()`` (and leaving a ``with`` block) closes the store only if the manager opened it
    (``location`` was a path, URL or None); a store object passed in stays open.
    """

    # class constants (instances may override them); above the methods, so that ``save`` here is
    # the module snapstore.manager.save, not the method
    SAVE_ATTEMPTS = save.SAVE_ATTEMPTS
    """Times ``save`` builds a checkpoint again (pack id taken, paused past half the GC grace
    period, or, with ``parent_id``/``expect_head``, the run moved) before giving up."""

    STALE_REBUILDS = save.STALE_REBUILDS
    """A save that paused longer than half the GC grace period after writing its pack is built
    again at most this many times (see :data:`snapstore.manager.save.STALE_REBUILDS`)."""

    READ_RETRIES = read.READ_RETRIES
    """Reads of a checkpoint that find a segment gone (merged and deleted by the run's writer
    meanwhile) re-read the run's newest record and try again, at most this many times in all."""

    BULK_LIST_MIN = read.BULK_LIST_MIN
    """``list(limit=...)`` above this (or no limit) reads the log in bulk
    (:func:`snapstore.manager.history.scan_bulk`)."""

    LOG_CACHE = publish.LOG_CACHE
    """Recent log records (their bytes) a manager keeps per run to write log segments."""

    def __init__(self, location: "str | ObjectStore | None" = None, *, max_checkpoints: int | None = None,
                 create: bool = True, gc_grace_period: float = 3600.0, clock=None, wall_clock=None,
                 compact_log: bool | None = None, run_cache_entries: int = runcache.DEFAULT_ENTRIES,
                 run_cache_bytes: int = runcache.DEFAULT_BYTES, pack_cache_bytes: int = PACK_CACHE_BYTES,
                 passphrase: str | None = None, kms_key_id=None, **store_options):
        if max_checkpoints is not None and (not isinstance(max_checkpoints, int) or max_checkpoints < 1):
            raise InvalidInputError(f"max_checkpoints must be a positive integer, got {max_checkpoints!r}")
        if not isinstance(gc_grace_period, (int, float)) or gc_grace_period < 0:
            raise InvalidInputError(f"gc_grace_period must be a non-negative number of seconds, got {gc_grace_period!r}")
        if isinstance(pack_cache_bytes, bool) or not isinstance(pack_cache_bytes, int) or pack_cache_bytes < 0:
            raise InvalidInputError(f"pack_cache_bytes must be a non-negative integer (bytes), got {pack_cache_bytes!r}")
        views = runcache.RunCache(run_cache_entries, run_cache_bytes)
        self.store = open_store(location, **store_options)
        passphrase, kms_key_id = crypt.keys_from_env(passphrase, kms_key_id)
        self.store = crypt.sealed_if_keyed(self.store, passphrase, kms_key_id)  # client-side encryption (format.md §27)
        self.state = ManagerState(store=self.store, create=create,
                                  owns_store=location is None or isinstance(location, (str, os.PathLike)),
                                  clock=clock or time.monotonic, wall_clock=wall_clock, views=views, pack_cache_bytes=pack_cache_bytes)
        """What the manager holds besides its settings (:class:`~snapstore.manager.state.ManagerState`:
        the repository, per-run locks and views, the clock, test hooks); what its operation modules
        use."""
        self.max_checkpoints = max_checkpoints
        self.gc_grace_period = float(gc_grace_period)
        self.compact_log = stubs.default_compact_log(self.store) if compact_log is None else bool(compact_log)

    # ------------------------------------------------------------------------------------------
    @property
    def repo(self) -> Repository:
        """The underlying :class:`~snapstore.repo.repository.Repository`, opened on first use (and created
        if the location is empty and the manager was made with ``create=True``)."""
        return self.state.repository(self.state.create)

    @property
    def hooks(self) -> dict:
        """Test hooks, name -> ``callable(**info)``, called at fixed points of a save
        (``after_prepare``, ``after_pack``, ``before_publish``; :meth:`ManagerState.hook
        <snapstore.manager.state.ManagerState.hook>`). Mutate the dict; it is ``state.hooks``."""
        return self.state.hooks

    @property
    def versioned(self) -> bool:
        """True if the bucket has versioning enabled (known once the repository is opened; a
        warning is given then)."""
        return self.state.versioned

    def close(self) -> None:
        """Release the manager's resources: its thread pool, and the store if the manager opened
        it itself (a store object passed as ``location`` is left open for its owner)."""
        self.state.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------------------------------
    # save (snapstore.manager.save)

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
        return save.save(self, run_id, messages, step=step, token_usage=token_usage,
                           session_state=session_state, metrics=metrics, agent_id=agent_id, status=status,
                           metadata=metadata, checkpoint_id=checkpoint_id, parent_id=parent_id,
                           expect_head=expect_head)

    # ------------------------------------------------------------------------------------------
    # read (snapstore.manager.read)

    def latest(self, run_id: str) -> Checkpoint | None:
        """Return the run's newest checkpoint (after any rollback), or None if the run is empty/deleted.

        Costs one LIST (limit 1) and one GET to find it, then the reads of its message tree.
        """
        return read.latest(self, run_id)

    def get(self, run_id: str, checkpoint_id: str) -> Checkpoint:
        """Return checkpoint ``checkpoint_id`` of ``run_id``.

        Raises:
            CheckpointNotFound: no such checkpoint in the run.
        """
        return read.get(self, run_id, checkpoint_id)

    def head(self, run_id: str) -> CheckpointSummary | None:
        """Return the run's head checkpoint's metadata (its newest live checkpoint, after any
        rollback), or None for an empty, deleted or unknown run. One LIST (limit 1) and one GET
        (a rollback record also reads its target); messages are not read.

        Raises:
            InvalidRunIdError: a bad run id.
        """
        return read.head(self, run_id)

    def summary(self, run_id: str, checkpoint_id: str) -> CheckpointSummary:
        """Return checkpoint ``checkpoint_id``'s metadata without reading its messages (its
        manifest only: one or two GETs).

        Raises:
            InvalidRunIdError / InvalidCheckpointIdError: bad ids.
            CheckpointNotFound: no such live checkpoint in the run.
        """
        return read.summary(self, run_id, checkpoint_id)

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
        return read.list_checkpoints(self, run_id, limit, metadata=metadata, before_seq=before_seq)

    def read_run(self, run_id: str) -> "runread.RunReader":
        """List the run's live checkpoints once and read any of them without listing again: a
        :class:`~snapstore.manager.runread.RunReader` (``.summaries`` newest first, as :meth:`list`;
        ``.get(checkpoint_id)`` a :class:`Checkpoint`, as :meth:`get`, without its manifest
        GET, from the segments of the run's newest record fetched once). For reading most of a
        run; it does not change what the caller saw of the run.

        Raises:
            InvalidRunIdError: a bad run id. StoreError / IntegrityError: as :meth:`list`.
        """
        return runread.RunReader(self, run_id)

    def runs(self) -> list[str]:
        """Return the ids of runs that have at least one live checkpoint, sorted.

        A run whose newest log record is a tombstone (deleted), or a rollback record that resolves
        to no checkpoint, is not listed. Never creates a repository (none there: ``[]``).

        Requests (docs/format.md §13, :mod:`snapstore.repo.log.runmarks`): one LIST of ``runs/`` beside
        one LIST of ``runmarks/`` (each per 1,000 keys; on a new manager beside reading the
        config). A run whose run markers say live costs nothing more (its id comes from its key,
        or for a hashed long id from its marker's key); a run whose newest marker is a tombstone
        costs one LIST (max-keys 1) confirming that tombstone is still the head; the others (no
        markers: written before them; a rollback head; a liveness change in flight) are read as
        before by :func:`snapstore.manager.read.runs_from_heads` (a LIST and a GET each).
        ``tests/cost/test_runs_round_trips.py`` measures it against moto's HTTP server with 1 s added
        per request.

        Raises:
            BucketNotFound, AccessDenied, CredentialsError, StoreError: a request failed.
            IntegrityError: a run's newest record is corrupt.
        """
        return read.runs(self)

    def resume_point(self, run_id: str) -> tuple[object, Checkpoint] | None:
        """Return ``(step, checkpoint)`` to resume the run from, or None if it has no checkpoint.

        ``step`` is the step saved with the latest checkpoint, or its sequence number if none was saved.
        """
        return read.resume_point(self, run_id)

    def get_resume_point(self, run_id: str) -> tuple[object, object, object] | None:
        """Return ``(step, session_state, metrics)`` of the run's latest checkpoint, or None if the
        run has no checkpoint (a tuple, for callers that unpack it; :meth:`resume_point` gives the whole checkpoint).

        ``step`` is as in :meth:`resume_point` (the saved step, else the log position); the state
        and metrics are what that checkpoint was saved with (None if none).
        """
        return read.get_resume_point(self, run_id)

    # ------------------------------------------------------------------------------------------
    # log changes (snapstore.manager.rollback), retention (snapstore.manager.retention), fork (snapstore.manager.fork)

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
        return rollback.rollback(self, run_id, checkpoint_id, expect_head=expect_head)

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
        return rollback.delete(self, run_id, checkpoint_id, expect_head=expect_head)

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
        return rollback.delete_many(self, run_id, checkpoint_ids, expect_head=expect_head)

    def retention_plan(self, run_id: str | None = None, **policy) -> list:
        """Decide, without deleting, which live checkpoints a retention policy keeps and why.

        Args:
            run_id: only this run (default: every run).
            **policy: rules of :class:`snapstore.manager.retention.Policy` (``keep_last``, ``keep_within``,
                ``older_than``, ``keep_hourly`` ... ``keep_yearly``); durations as seconds,
                ``timedelta`` or text like ``"7d"``.
        Returns:
            :class:`snapstore.manager.retention.Decision` objects (``checkpoint`` is a CheckpointSummary,
            ``keep``, ``reasons``), per run newest first.
        Raises:
            InvalidInputError: no rule or a bad value.
        """
        return retention.retention_plan(self, run_id, **policy)

    def prune(self, older_than=None, keep_last: int | None = None, run_id: str | None = None, *,
              keep_within=None, keep_hourly: int | None = None, keep_daily: int | None = None,
              keep_weekly: int | None = None, keep_monthly: int | None = None, keep_yearly: int | None = None,
              dry_run: bool = False) -> list[CheckpointSummary]:
        """Apply a retention policy; delete the checkpoints (manifests) it does not keep.

        A checkpoint is kept if any rule keeps it (restic ``forget`` semantics, see
        :mod:`snapstore.manager.retention`): among the ``keep_last`` newest of its run, created less than
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
        saw, else ConflictError: the first such run's, in run order (runs before it, and those
        pruned beside it, stay pruned). Deleting older checkpoints does not move the head and
        needs no view. With no ``run_id`` the runs are pruned several at once (a quarter of the
        store's ``max_concurrency``: 32 on S3, 4 on a directory), each listed once, acting as
        the calling context; the result is in run order, as if one after another.

        Returns:
            Summaries of the deleted (with ``dry_run``: deletable) checkpoints.
        Raises:
            InvalidInputError: no rule given, or a bad value.
            ConflictError: a run's head moved since this caller saw it (see above).
        """
        return retention.prune(self, older_than, keep_last, run_id, keep_within=keep_within,
                               keep_hourly=keep_hourly, keep_daily=keep_daily, keep_weekly=keep_weekly,
                               keep_monthly=keep_monthly, keep_yearly=keep_yearly, dry_run=dry_run)

    def fork(self, run_id: str, checkpoint_id: str, new_run_id: str) -> Checkpoint:
        """Start run ``new_run_id`` at checkpoint ``checkpoint_id`` of ``run_id``.

        The new run's first checkpoint shares the source's message tree; it gets a new checkpoint
        id and records its origin. Format 2: it stores no data; its record lists the source run's
        segments (docs/format.md §10), so a fork costs 3 small PUTs (its record, its run marker,
        the source's pin) whatever the history's length. The pin makes the source's writer leave
        the packs it merges to GC, which keeps what the fork lists: the fork stays readable after
        the source is pruned, rolled back or deleted.

        Returns:
            The new run's first checkpoint.
        Raises:
            CheckpointNotFound: no such source checkpoint.
            ConflictError: ``new_run_id`` already has live checkpoints.
        """
        return fork.fork(self, run_id, checkpoint_id, new_run_id)

    def record_outcome(self, run_id: str, checkpoint_id: str | None, call_id: str, result) -> bool:
        """Record tool call ``call_id``'s result beside the checkpoint it started from, so that a
        resumed agent can skip the call (docs/format.md §25). One create-only PUT (plus the
        checkpoint's liveness check: one or two GETs; for None one LIST and one GET).

        Args:
            run_id: the run.
            checkpoint_id: the live checkpoint the call started from (the run's head when the
                agent resumed or last saved), or None before the run's first checkpoint.
            call_id: the tool call's id (non-empty string of at most 4,096 UTF-8 bytes), e.g.
                an OpenAI ``tool_call.id``.
            result: the call's result, any JSON value (its encoding at most 4 MiB).
        Returns:
            True if this call stored it, False if the same result was already recorded (a replay).
        Raises:
            InvalidInputError: a bad call id or a result too large. InvalidMessageError: a
                result that is not JSON. InvalidRunIdError / InvalidCheckpointIdError: bad ids.
            CheckpointNotFound: no such live checkpoint (rolled back, deleted, run deleted).
            ConflictError: another result is already recorded for this call, or
                ``checkpoint_id`` is None while the run has a live checkpoint.
        """
        return outcomes.record_outcome(self, run_id, checkpoint_id, call_id, result)

    def outcomes(self, run_id: str, checkpoint_id: str | None) -> dict:
        """Every tool outcome recorded beside one checkpoint: ``{call id: result}`` (what
        :meth:`record_outcome` stored; ``{}`` when none). One LIST and the GETs in parallel,
        plus the liveness check (run beside the LIST for a generated checkpoint id).

        Args:
            run_id: the run. checkpoint_id: a live checkpoint, or None (before the first one).
        Raises:
            InvalidRunIdError / InvalidCheckpointIdError: bad ids.
            CheckpointNotFound: no such live checkpoint: its outcomes are unreachable.
            ConflictError: ``checkpoint_id`` is None while the run has a live checkpoint.
            IntegrityError: an outcome object is corrupt (names its key).
        """
        return outcomes.read_outcomes(self, run_id, checkpoint_id)

    def outcomes_beside(self, run_id: str, checkpoints, skip=()) -> dict:
        """The tool outcomes beside several checkpoints the caller knows to be live (from a
        listing it just made): one LIST of the run's writes area and the GETs in parallel, no
        liveness check (docs/format.md §25).

        Args:
            run_id: the run. checkpoints: ``(checkpoint id, log position)`` pairs (a
                ``CheckpointSummary``'s ``id`` and ``seq``). skip: call ids not to read (the
                caller holds them, or has them elsewhere).
        Returns:
            ``{checkpoint id: {call id: result}}`` for those with outcomes (less ``skip``).
        Raises:
            InvalidRunIdError / InvalidCheckpointIdError: bad ids. IntegrityError: an outcome
                object is corrupt (names its key).
        """
        return outcomes.outcomes_beside(self, run_id, checkpoints, skip)

    def delete_outcomes(self, run_id: str, pairs) -> int:
        """Delete tool outcomes recorded beside live checkpoints of one run (docs/format.md §25),
        e.g. once what they record is stored in a later checkpoint: one batch delete of their
        keys (plus a lookup of a checkpoint's position unless its id is generated); an outcome
        not recorded is no error.

        Args:
            run_id: the run.
            pairs: an iterable of ``(checkpoint id, call id)`` (as :meth:`record_outcome`
                takes them).
        Returns:
            The number of keys asked to be deleted (none for a checkpoint gone whose id is not
            generated: its outcomes are unreachable already, and GC deletes them).
        Raises:
            InvalidRunIdError / InvalidCheckpointIdError / InvalidInputError: bad ids.
        """
        return outcomes.delete_outcomes(self, run_id, pairs)

    # ------------------------------------------------------------------------------------------
    # whole-repository operations

    def verify(self, read_data: bool = False, progress=None, *, accept_missing: bool = False):
        """Check the repository; return a :class:`snapstore.maintenance.verify.VerifyReport`.

        Every object a live checkpoint reaches must exist and parse (pack checksums, node ids);
        with ``read_data`` every message chunk is decompressed and hashed too. Crash leftovers
        (unreferenced packs, temp files, hidden manifests) are reported as warnings.

        Args:
            read_data: also read and hash every chunk.
            progress: optional callable ``progress(phase: str, done: int, total: int)``.
            accept_missing: manifests deleted outside snapstore (``missing-manifest`` errors below
                a run's newest record, docs/format.md §16) are put on record as removed: their
                checkpoints are lost, and they are reported as ``accepted-missing`` warnings.
        An encrypted repository opened without its passphrase is checked for its structure only
        (:func:`snapstore.maintenance.sealedcheck.verify_structure`: sizes, trailers, key names,
        log positions; a ``not-decrypted`` warning says what was not checked; ``read_data`` and
        ``accept_missing`` need the key).

        Raises:
            RepositoryNotFound: the location holds no repository (a read never creates one).
            EncryptionError: ``accept_missing`` on an encrypted repository without its passphrase.
        """
        from ..maintenance import sealedcheck
        from ..maintenance.verify import verify
        if not crypt.is_sealed(self.store):
            cfg = sealedcheck.encrypted_config(self.store)
            if cfg is not None:
                if accept_missing:
                    raise EncryptionError("verify --accept-missing writes a removal record: give the repository's "
                                          "passphrase ($SNAPSTORE_PASSPHRASE) or KMS key ($SNAPSTORE_KMS_KEY)")
                return sealedcheck.verify_structure(self.store, cfg, progress)
        return verify(self.state.repository(False), read_data=read_data, progress=progress, accept_missing=accept_missing)

    def gc(self, grace_period: float | None = None, dry_run: bool = False, progress=None, *,
           break_lock: bool = False, **options):
        """Garbage-collect: reclaim what no live checkpoint needs; repack small and mostly-dead packs.

        Args:
            grace_period: seconds an unreferenced object must stay unreferenced before deletion
                (default: this manager's ``gc_grace_period``). 0 asserts no other writer is active;
                then everything unreachable is reclaimed within two calls.
            dry_run: report only.
            progress: optional ``progress(phase, done, total)``.
            break_lock: first remove the GC lock whoever holds it (a GC killed on another machine
                leaves one that goes stale only after ``lock_timeout``, 300 s without a refresh; one
                killed on this machine is taken over at once). Only when no GC is running.
            **options: see :func:`snapstore.maintenance.gc.gc` (``max_unused``, ``small_pack_bytes``, ``lock_timeout``, ...).
        Returns:
            :class:`snapstore.maintenance.gc.GCReport`.
        Raises:
            ConflictError: another GC is running.
            RepositoryNotFound: the location holds no repository.
        """
        from ..maintenance.gc import break_lock as _break, gc
        g = self.gc_grace_period if grace_period is None else grace_period
        if break_lock and not dry_run:
            _break(self.state.repository(False))
        rep = gc(self.state.repository(False), grace_period=g, dry_run=dry_run, progress=progress, **options)
        if not dry_run:
            self.state.views.clear()
        return rep

    def archive(self, run_ids=None, finished_before=None, storage_class: str = "GLACIER_IR", *,
                retention_class: str = "default", expire_after_days: int | None = None, hooks: dict | None = None,
                progress=None, idle=None, keep: dict | None = None, dry_run: bool = False,
                bundle_min: int | None = None):
        """Archive runs into immutable, hard-compressed bundles (docs/format.md §28).

        Copies every entry the runs' live checkpoints need into one bundle per large run (small
        runs grouped), reads it back, then publishes its hot index record; the hot packs become
        garbage for :meth:`gc` (after its grace period). Listing, summaries and retention keep
        working from hot objects; ``get``/``latest`` read the bundle (byte ranges) once GC has
        reclaimed the hot copy.

        Args:
            run_ids: run ids to archive (a list; one string is taken as one id); None: every run.
            finished_before: only runs whose newest checkpoint was created before this datetime.
            storage_class: ``STANDARD_IA``, ``GLACIER_IR`` (default), ``GLACIER``, ``DEEP_ARCHIVE``,
                ``INTELLIGENT_TIERING`` or ``STANDARD`` (S3: the object's class; elsewhere recorded).
            retention_class / expire_after_days: the key grouping ``archive/data/<class>/<YYYY-MM>/``.
            hooks / progress: see :func:`snapstore.maintenance.archive.archive`.
            idle: only runs whose newest checkpoint is older than this (seconds, ``timedelta`` or
                text such as ``"30d"``; by checkpoints' ``created`` times, as retention): the same
                as ``finished_before=now - idle`` (the earlier of the two when both are given).
            keep: a retention policy (keyword arguments of :meth:`prune`, e.g.
                ``{"keep_last": 5, "keep_daily": 7}``): the runs selected are first pruned to the
                checkpoints it keeps (the others are deleted, as ``prune`` deletes them, and
                listed in the report's ``pruned``), then archived; None: every live checkpoint.
            dry_run: write nothing; return what would be archived (the same selection, mark and
                grouping; with ``keep``, the checkpoints it would prune, nothing pruned).
            bundle_min: raw bytes (uncompressed, after dedup) at which a run gets a bundle of its
                own; None: 16 MiB (:data:`snapstore.maintenance.archive.BUNDLE_MIN`).
        Returns:
            :class:`snapstore.maintenance.archive.ArchiveReport` (runs, bundles, bytes before/after);
            with ``dry_run`` a :class:`snapstore.maintenance.archive.ArchiveDryRun`.
        Raises:
            InvalidInputError: a bad storage class, retention class, day count, idle time or policy.
            ConflictError: pruning moved a head this caller saw move meanwhile (see :meth:`prune`).
            RunNotFound: a named run has no checkpoint.
            RepositoryNotFound: the location holds no repository.
        """
        from datetime import datetime, timedelta, timezone

        from ..maintenance.archive import ArchiveReport, archive, archive_dry_run, select_runs
        from .retention import Policy
        if isinstance(run_ids, str):
            run_ids = [run_ids]
        if finished_before is not None and finished_before.tzinfo is None:
            finished_before = finished_before.replace(tzinfo=timezone.utc)
        if idle is not None:
            secs = Policy.make(older_than=idle).older_than.total_seconds()
            cutoff = datetime.now(timezone.utc) - timedelta(seconds=secs)
            finished_before = cutoff if finished_before is None else min(finished_before, cutoff)
        pruned, skipped = [], {}
        if keep is not None:
            if not isinstance(keep, dict) or not keep:
                raise InvalidInputError("keep must be a non-empty dict of retention rules (keep_last=..., ...)")
            Policy.make(**keep)  # a bad rule fails before anything is deleted
            repo = self.state.repository(False)
            chosen, skipped = select_runs(repo, run_ids, finished_before)
            if not chosen and not dry_run:
                return ArchiveReport(skipped=skipped, storage_class=storage_class)
            for r in chosen:
                pruned += [s.id for s in self.prune(run_id=r, dry_run=dry_run, **keep)]
            run_ids = chosen
        if dry_run:
            got = archive_dry_run(self.state.repository(False), run_ids, finished_before, storage_class,
                                  retention_class, expire_after_days, bundle_min)
            if keep is not None:
                got.checkpoints -= len(pruned)
            got.pruned = pruned
            got.skipped.update(skipped)
            return got
        rep = archive(self.state.repository(False), run_ids, finished_before, storage_class,
                      retention_class, expire_after_days, hooks, progress, grace_period=self.gc_grace_period,
                      stub=self.compact_log, bundle_min=bundle_min)
        rep.pruned = pruned
        rep.skipped.update(skipped)  # runs the selection left out (before the prune)
        return rep

    def restore(self, run_ids, tier: str = "standard", days: int = 7, *, wait: bool = False,
                poll_s: float = 60.0, timeout_s: float | None = None):
        """Make archived runs in ``GLACIER``/``DEEP_ARCHIVE`` readable: issue S3 restore requests
        for their bundles and report each bundle's state (docs/format.md §28).

        Args:
            run_ids: run ids (a list; one string is one id).
            tier: ``bulk``, ``standard`` or ``expedited``.
            days: days the restored copies stay readable.
            wait / poll_s / timeout_s: poll every ``poll_s`` seconds until all are readable.
        Returns:
            :class:`snapstore.maintenance.restore.RestoreReport` (``bundles``: key -> state, ``done``).
        Raises:
            InvalidInputError: a bad tier or day count. RunNotFound: a run is not archived.
        """
        from ..maintenance.restore import restore
        if isinstance(run_ids, str):
            run_ids = [run_ids]
        rep = restore(self.state.repository(False), list(run_ids), tier, days, wait, poll_s, timeout_s)
        return rep

    def export_bundle(self, run_ids, path: str, *, progress=None):
        """Write runs to a portable bundle file (docs/format.md §30): every live checkpoint of each
        run (id, log position, parent, fork origin, creation time, summary fields, messages,
        session state, tool outcomes), readable by :meth:`import_bundle` of any repository on any
        backend. The file is written beside ``path`` and renamed into place when complete (a
        symbolic link is written through; a FIFO or device is written in place, never replaced:
        :mod:`snapstore.manager.outfile`); it holds plaintext, also from an encrypted repository.

        Args:
            run_ids: run ids (a list; one string is one id), written in this order.
            path: the file to write (replaced when it exists).
            progress: optional ``progress(run_id, done, total)``.
        Returns:
            :class:`snapstore.manager.portable.ExportReport` (runs, checkpoints, bytes).
        Raises:
            InvalidInputError: no run, or one named twice. RunNotFound: a run has no live checkpoint.
            ColdObjectError: a run is archived in a class that needs ``restore`` first.
            OSError: the file cannot be written.
        """
        from .portable import export_bundle
        if isinstance(run_ids, str):
            run_ids = [run_ids]
        from .outfile import output_file
        with output_file(path, fsync=True) as f:  # beside and renamed; a FIFO or device in place
            rep = export_bundle(self, list(run_ids), f, progress)
        return rep

    def import_bundle(self, path: str, *, existing: str = "fail", progress=None):
        """Import every run of a portable bundle file (:meth:`export_bundle`), exactly: each
        checkpoint at its own log position with its own id, parent, origin, time, fields,
        messages, session state and tool outcomes. The whole file is checked first: a damaged or
        truncated one raises IntegrityError and nothing is written.

        Args:
            path: the bundle file.
            existing: a run this repository already has: ``"fail"`` (ConflictError, nothing
                written), ``"skip"`` (left as it is) or ``"resume"`` (finish an interrupted import).
            progress: optional ``progress(run_id, done, total)``.
        Returns:
            :class:`snapstore.manager.portable.ImportReport`.
        Raises:
            IntegrityError / UnsupportedFormatError: a damaged, truncated or newer file.
            ConflictError: see ``existing``. InvalidInputError: a bad ``existing``.
            StoreError: a write failed (import again with ``existing="resume"``).
        """
        from .portable import import_bundle
        return import_bundle(self, path, existing, progress)

    def unarchive(self, run_ids, *, hooks: dict | None = None):
        """Bring archived runs back hot (the reverse of :meth:`archive`, docs/format.md §28):
        the entries their live checkpoints need are copied from the bundles into a new hot pack,
        read back, named by a new newest record of each run, and then the catalogue is switched
        (the bundles' index records stop serving the runs); a bundle that serves nothing more is
        left to :meth:`gc`. A kill at any moment loses nothing.

        Args:
            run_ids: run ids (a list; one string is one id).
            hooks: test hooks (:func:`snapstore.manager.unarchive.unarchive`).
        Returns:
            :class:`snapstore.manager.unarchive.UnarchiveReport`.
        Raises:
            RunNotFound: a run has no live checkpoint. ColdObjectError: a bundle is in
                ``GLACIER``/``DEEP_ARCHIVE`` and not restored (names the ``snapstore restore`` command).
            ConflictError: a run changed meanwhile, or the copy took longer than half the GC grace
                period (nothing switched: unarchive again).
        """
        from .unarchive import unarchive
        if isinstance(run_ids, str):
            run_ids = [run_ids]
        return unarchive(self, list(run_ids), hooks)

    def archived(self, run_id: str) -> list[dict]:
        """Where the run's checkpoints are archived: one dict per bundle that serves any of its
        log positions, ``{"bundle": object key, "storage_class": str, "checkpoints": number of
        its log positions served, "created": ISO-8601 UTC time the bundle was written}``, oldest
        bundle first; ``[]`` for a run that is not archived (or unknown). Reads the hot bundle
        index records only (one LIST and a GET per record; never a cold object).

        Raises:
            InvalidRunIdError: a bad run id. IntegrityError: a corrupt index record.
            StoreError: the store failed.
        """
        check_run_id(run_id)
        return self.archived_runs([run_id])[run_id]

    def archived_runs(self, run_ids: list[str] | None = None) -> dict[str, list[dict]]:
        """:meth:`archived` of many runs at once: run id -> its list (``[]`` if not archived), for
        ``run_ids`` (default: :meth:`runs`). Reads the hot bundle index records once (one LIST
        and a GET per record), whatever the number of runs; never a cold object.

        Raises:
            InvalidRunIdError: a bad run id. IntegrityError: a corrupt index record.
            StoreError: the store failed.
        """
        runs = self.runs() if run_ids is None else list(run_ids)
        for r in runs:
            check_run_id(r)
        bundles = list(self.repo.bundles.load().values()) if runs else []
        out: dict[str, list[dict]] = {}
        for r in runs:
            rk = self.repo.run_key(r)
            got = [{"bundle": ix.key, "storage_class": ix.storage_class, "checkpoints": len(ix.served(rk)),
                    "created": ix.created} for ix in bundles if ix.served(rk)]
            out[r] = sorted(got, key=lambda d: (d["created"], d["bundle"]))
        return out

    def stats(self, prices: dict | None = None, *, cost: bool = False, class_prices: dict | None = None,
              tier: str = "standard") -> dict:
        """Return repository statistics (see :func:`snapstore.maintenance.stats.stats`): runs, checkpoints,
        logical_bytes, stored_bytes, ratio, objects by category, this process's requests and an
        estimated cost at S3 Standard list prices (override with ``prices``). With ``cost``, also
        ``bill``: storage per class (bundles in theirs), $/month, the early-deletion charge still
        owed, transition and restore estimates (:func:`snapstore.maintenance.bill.bill`; prices
        overridden by ``class_prices``, restores at ``tier``).

        Raises:
            RepositoryNotFound: the location holds no repository (a read never creates one).
            InvalidInputError: a bad tier or price override."""
        from ..maintenance.stats import stats
        return stats(self.state.repository(False), prices, cost, class_prices, tier)

