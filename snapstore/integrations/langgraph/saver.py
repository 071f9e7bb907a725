"""The LangGraph checkpointer: :class:`SnapstoreSaver`, thin, delegating to the package's modules.

Each method checks its config (:func:`.ids.target`), names the run, and hands over to the module
that holds the concept: :mod:`.reads` (``get_tuple``, ``list``), :mod:`.checkpoints` (``put``),
:mod:`.writes` (``put_writes``), :mod:`.history` (``get_delta_channel_history``), :mod:`.threads`
(delete, copy, prune), :mod:`.aio` (the async methods). What the saver holds of each run is one
:class:`.state.SaverState`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from . import checkpoints, history, reads, sidewrites, threads
from ..managers import manager_for
from .aio import AsyncMethods
from .deps import (BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple,
                   DeltaChannelHistory, RunnableConfig, SerializerProtocol, get_checkpoint_id,
                   get_checkpoint_metadata)
from .ids import run_id_for, target
from .registry import runs
from .state import SaverState
from .values import ValueCodec


class SnapstoreSaver(AsyncMethods, BaseCheckpointSaver[str]):
    """LangGraph checkpointer storing checkpoints in a snapstore repository (local or S3).

    Args:
        location: what :class:`~snapstore.manager.facade.CheckpointManager` takes (a directory, an
            ``s3://bucket/prefix`` URL, ``memory://``, an ObjectStore, None for
            ``$SNAPSTORE_URL``), or a ``CheckpointManager`` to use (not closed by :meth:`close`).
        serde: LangGraph serializer for non-message channel values and writes (default: the
            saver default, ``JsonPlusSerializer``), or a name: ``"safe"`` for
            :class:`snapstore.integrations.serde.SafeSerializer` (exact values, no module paths
            in stored data; docs/langgraph-serde.md), ``"jsonplus"``.
        **manager_options: passed to ``CheckpointManager`` (e.g. ``endpoint_url=`` for S3).
    Raises:
        MissingDependencyError: langgraph-checkpoint is not installed (on import).
        InvalidInputError: ``manager_options`` given together with a manager, or an unknown
            ``serde`` name.

    Sync and async methods (the async ones run the sync ones in a worker thread). Requests: a
    ``put`` is one snapstore save (2 PUTs: pack, manifest) plus one LIST of the run's writes
    area (a GET per pending object folded in; one batch delete per ``DELETE_BATCH``
    objects folded), or, for LangGraph's input checkpoint and the one right after it, one PUT
    of a pending-checkpoint object and a LIST (limit 1) of the head (docs/langgraph-layout.md
    §4b); a ``put_writes`` is one
    PUT of a pending-writes object (docs/langgraph-layout.md §4a) and one LIST (limit 1) of
    the run's head (a writes record, one save, on an empty run);
    ``get_tuple`` of the latest checkpoint (and its DeltaChannel history) reads the run's newest
    record: 1 LIST + 1 GET when this saver holds it already, else LIST, GET and one parallel wave
    of its packs. An older checkpoint lists the run's newest records down to it. ``list``,
    ``prune``, ``copy_thread`` and the history walk (records of the earlier layout, or a stale
    history) read a run's whole log through its log segments (``CheckpointManager.list``); a
    thread's namespaces come from its registry run (one listing of it), so nothing of a thread
    costs what the rest of the repository holds. ``delete_for_runs`` and listing without a
    thread, which have no thread to start from, list every LangGraph run once. ``list`` reads
    each run it lists through one ``CheckpointManager.read_run`` (no manifest GET per record; the
    run's segments fetched once), so listing every thread is linear in what they hold. The
    first record of a namespace costs one save more (its registry record).
    """

    PUT_IDS = 256
    """Checkpoint ids put lately, per run, that a writes record arriving later is recognised
    by as late (see :meth:`put_writes`)."""

    RECORD_CACHE = 1024
    """Records (their stored message items and session state) kept in memory, least recently
    used first out. Records never change and their ids are never reused, so a cached one is
    right as long as a listing still shows it; DeltaChannel walks re-read the same ones."""

    DECODED_CACHE = 200_000
    """Stored message items kept decoded (the message object made from each), so a step's
    ``get_tuple`` on the record this saver holds decodes only the new messages and the next
    ``put`` recognises the messages by identity instead of encoding them again."""

    EARLY_SETS = 64
    """Checkpoints not put yet whose writes the run's newest record carries at most (the oldest
    set beyond goes; its checkpoint's put then marks itself incomplete, ``"x"``, if this saver
    wrote them, so readers list the run)."""

    SAVE_ATTEMPTS = 8
    """Times a put or put_writes is built again on the run's new newest record after another
    writer (another saver, process or machine) moved it, before ConflictError is raised."""

    RUN_CACHE = 1024
    """Threads (runs) whose newest record, encoding cache and recent put ids the saver keeps; the
    least recently used beyond go (their next call reads the newest record again, 1 LIST + 1 GET
    and its packs), so a saver serving any number of threads stays bounded."""

    HEAD_FRESH_S = 1.0
    """A DeltaChannel history read within this many seconds of reading the run's newest record
    (``get_state`` reads the checkpoint, then its history) uses that record without asking the
    store again: it is the answer as of that read."""

    DELETE_BATCH = 16
    """Pending-writes objects folded into saved records that are deleted together, in one batch
    (one commit), per run; the rest on :meth:`close` (docs/langgraph-layout.md §4a)."""

    CP_OBJECTS = 2
    """Checkpoints put as pending-checkpoint objects beside one record at most (LangGraph's
    input checkpoint and the one after ``__start__``, docs/langgraph-layout.md §4b); 0 puts
    every checkpoint as a record."""

    def __init__(self, location: Any = None, *, serde: SerializerProtocol | str | None = None, **manager_options):
        if isinstance(serde, str):
            from ..serde import serde_named
            serde = serde_named(serde)
        super().__init__(serde=serde)
        self.manager, self._own = manager_for("SnapstoreSaver", location, manager_options)
        self.state = SaverState(self.manager, ValueCodec(self.serde, self.DECODED_CACHE), self)
        """What the saver holds of each run (the tunables above are read from the class here)."""

    @property
    def serde(self) -> SerializerProtocol:
        """The LangGraph serializer of what is not a message (``BaseCheckpointSaver.serde``)."""
        return self.__dict__.get("_serde", BaseCheckpointSaver.serde)

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # a new serializer (BaseCheckpointSaver.with_allowlist sets it on a shallow clone): the
        # state is shared, the values are encoded with the new one
        self.__dict__["_serde"] = value
        st = self.__dict__.get("state")
        if st is not None:
            self.state = st.with_codec(ValueCodec(value, self.DECODED_CACHE))

    def close(self) -> None:
        """Delete the folded pending-writes objects still queued (``DELETE_BATCH``), and close
        the manager if this saver opened it."""
        try:
            sidewrites.flush_deletes(self.state)
        finally:
            if self._own:
                self.manager.close()

    def __enter__(self) -> "SnapstoreSaver":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    async def __aenter__(self) -> "SnapstoreSaver":
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint ``config`` names (``checkpoint_id``), or the thread's latest in
        ``checkpoint_ns`` (default ``""``), with its pending writes; None if there is none.

        The latest (and a ``checkpoint_id`` naming it) comes from the run's newest record alone,
        which carries the latest checkpoint and its writes: one LIST (limit 1) and one GET when
        this saver holds that record already, else LIST, GET and one parallel wave of packs.
        Other checkpoints: the newest records are listed down to the one wanted.

        Raises:
            InvalidInputError: no ``configurable.thread_id``.
            IntegrityError: a record read is not a valid LangGraph record.
        """
        _c, thread_id, ns = target(config, "get_tuple")
        return reads.get_tuple(self.state, run_id_for(thread_id, ns), thread_id, ns, get_checkpoint_id(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Yield checkpoints newest first (descending checkpoint id).

        Args:
            config: ``{"configurable": {"thread_id", "checkpoint_ns"?, "checkpoint_id"?}}``; no
                ``checkpoint_ns``: every namespace of the thread; None: every thread.
            filter: metadata key/value pairs that must all be equal.
            before: only checkpoints with a smaller id than this config's ``checkpoint_id``.
            limit: at most this many.
        """
        if limit is not None and limit <= 0:
            return
        if config is not None:
            c, thread_id, _ns = target(config, "list")
            ns = c.get("checkpoint_ns")
            found = [(run_id_for(thread_id, ns), thread_id, ns)] if ns is not None else runs(self.state, thread_id)
            only = get_checkpoint_id(config)
        else:
            found = runs(self.state)
            only = None
        before_id = get_checkpoint_id(before) if before else None
        yield from reads.list_tuples(self.state, found, only, filter, before_id, limit)

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Per channel, the on-path writes oldest first and the ``seed`` (the value stored at the
        nearest ancestor holding one; omitted if none) of ``config``'s checkpoint (default: the
        latest).

        A checkpoint this saver put on top of its parent's newest record carries the answer (its
        history section), so the latest checkpoint's history costs no request beyond reading the
        latest record. Otherwise the parent chain is walked once for all ``channels`` over one
        listing of the run; only the ancestors and writes records that hold a wanted channel are
        read."""
        if not channels:
            return {}
        _c, thread_id, ns = target(config, "get_delta_channel_history")
        return history.delta_channel_history(self.state, run_id_for(thread_id, ns), get_checkpoint_id(config),
                                             channels)

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: writes

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (its full ``channel_values``) as a child of ``config``'s checkpoint.

        LangGraph's input checkpoint (metadata ``source`` ``"input"``) and the checkpoint put
        right after it on it are pending-checkpoint objects (docs/langgraph-layout.md §4b: one
        LIST of the run's writes area, 1 PUT, then a LIST (limit 1) of the head to confirm it
        did not move), carried by the next record; any other put is one snapstore save (a pack
        and a manifest: 2 PUTs) plus that LIST and a GET per pending object it folds. A
        checkpoint id put again replaces the earlier put of it (the newest of an id is the
        checkpoint).

        Returns:
            ``{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}`` of the stored one.
        Raises:
            StoreError: the store failed (nothing visible was half-written).
            ConflictError: other writers kept moving the thread (``SAVE_ATTEMPTS`` times).
        """
        c, thread_id, ns = target(config, "put")
        run = run_id_for(thread_id, ns)
        md = get_checkpoint_metadata(config, metadata)
        with self.state.rlock(run):
            checkpoints.put_checkpoint(self.state, run, checkpoint, md, c.get("checkpoint_id"))
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes for ``config``'s checkpoint (idempotent per task and index).

        Messages written (a message, or a non-empty list of messages) are encoded as items
        (message JSON), other values through the serde. Writes may be stored before their
        checkpoint is. One pending-writes object beside the run's newest record (a tool
        outcome: 1 PUT, then a LIST of the head to confirm it did not move), folded into the
        next checkpoint record, which deletes it (docs/langgraph-layout.md §4a); on an empty
        run one writes record (a snapstore save). The latest checkpoint is always read from
        the newest record and the objects beside it and its parent.

        Raises:
            InvalidInputError: no ``configurable.thread_id`` or ``checkpoint_id``.
            ConflictError: other writers kept moving the thread (``SAVE_ATTEMPTS`` times).
        """
        c, thread_id, ns = target(config, "put_writes", need_id=True)
        run = run_id_for(thread_id, ns)
        with self.state.rlock(run):
            sidewrites.put_writes(self.state, run, c["checkpoint_id"], writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace (a tombstone per
        namespace run; ``gc()`` reclaims the data). A missing thread is no error."""
        threads.delete_thread(self.state, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes, in every thread (lists every LangGraph run of the repository)."""
        threads.delete_for_runs(self.state, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread (all namespaces) to an empty thread.

        Nothing is stored twice: the target's first record is a fork
        (:meth:`CheckpointManager.fork`, a record listing the source's packs: no data
        copied); every record is then saved again in the source's order, each deduplicated
        against the fork, so it costs a manifest (and a small tree edge). The whole chain is
        copied, so DeltaChannel state rebuilds on the target; the fork's base record is deleted.

        Raises:
            ConflictError: the target thread already has checkpoints in a namespace being copied.
        """
        threads.copy_thread(self.state, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint and its
        writes, and, for DeltaChannel channels (named in the latest's metadata
        ``counters_since_delta_snapshot``), every ancestor (and its writes) back to the nearest
        one storing that channel's value (a ``_DeltaSnapshot``), so the kept state rebuilds;
        ``"delete"`` deletes the threads. Only manifests go; ``gc()`` reclaims the data.

        Raises:
            InvalidInputError: an unknown strategy.
        """
        threads.prune(self.state, thread_ids, strategy, self.delete_thread)

    def get_next_version(self, current: str | int | None, channel: None) -> str | int:
        """Next channel version: an int counter (``current + 1``; 1 for a new channel).

        Values are stored whole with each checkpoint, not keyed by version, so versions need not
        be unique across branches (LangGraph's SQL savers add a random part for that); small
        ints keep every manifest small. A thread that already holds string versions (written
        by another saver) keeps LangGraph's ``"<32-digit counter>.<16-digit random>"`` form,
        so versions of one thread always compare.
        """
        if current is None:
            return 1
        if isinstance(current, int):
            return current + 1
        return f"{int(str(current).split('.')[0]) + 1:032}.{random.random():016}"
