"""A LangGraph checkpointer on snapstore: :class:`SnapstoreSaver`.

Layer 5 (a surface over :class:`snapstore.api.CheckpointManager`); needs the extra
``snapstore[langgraph]`` (``langgraph-checkpoint`` 4.3 and ``langchain-core``).

Mapping (docs: README "LangGraph"):

* One snapstore **run** per ``(thread_id, checkpoint_ns)``, named
  ``langgraph:["<thread_id>","<checkpoint_ns>"]`` (JSON, so any thread id or namespace is safe).
* A LangGraph checkpoint is one snapstore checkpoint whose id is the LangGraph checkpoint id
  (caller-supplied ids kept). Its **message list** holds the messages of every message-list
  channel value (a non-empty list of LangChain messages, or a DeltaChannel ``_DeltaSnapshot`` of
  one), one message per chunk as LangChain's ``message_to_dict`` JSON, followed by the other
  channel values, each as one item of the saver's serde output (base64; values over 64 KiB are
  split by content-defined chunking like any large message). The skeleton (id, ts, versions,
  versions_seen...) goes through the serde into the session state. The snapstore ``metadata``
  field holds what listing needs without reading data: ``{"lg": "c", "id", "parent", "chs",
  "md"}`` (``md``: LangGraph's metadata; ``mdb`` instead when it is not exact JSON).
* Each ``put_writes`` call is one more snapstore checkpoint of the run (a generated id, metadata
  ``{"lg": "w", "for": <checkpoint id>, "task", "path", "chs"}``). Its message list is the leading
  messages of the run's newest record followed by the messages the writes carry, so the next
  checkpoint, whose message channel now ends with those messages, is an append to it: every
  message is stored once, whether the graph uses ``add_messages`` (the whole list in every
  checkpoint) or ``DeltaChannel`` (only the writes carry new messages). Non-message write values
  go through the serde into the record's session state.
* Every save branches from the run's newest record (``CheckpointManager.save(parent_id=...)``), so
  time travel (a put whose parent is an old checkpoint) and new roots are plain saves; the
  LangGraph parent is kept in the metadata. Two processes writing one thread both succeed, the
  later put being the newer checkpoint (as LangGraph's SQL savers do).
* "Latest" (``get_tuple`` without ``checkpoint_id``) is the checkpoint put last; ``list`` orders
  by checkpoint id, newest first. LangGraph's ids grow with time, so the two agree for graphs.
"""

from __future__ import annotations

import asyncio
import base64
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import (CheckpointNotFound, ConflictError, IntegrityError, InvalidInputError, InvalidMessageError,
                      MissingDependencyError, RunNotFound, SnapstoreError)

try:
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                           CheckpointMetadata, CheckpointTuple, DeltaChannelHistory, PendingWrite,
                                           get_checkpoint_id, get_checkpoint_metadata, writes_sort_key)
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.types import _DeltaSnapshot
except ImportError as e:  # pragma: no cover - exercised in a subprocess test
    raise MissingDependencyError(
        f"snapstore.integrations.langgraph needs langgraph-checkpoint and langchain-core "
        f"({e.name or e} is not installed): pip install 'snapstore[langgraph]'") from e

from ..api import CheckpointManager
from ..format.codec import validate
from .runids import pair_run_id, parse_pair_run_id

__all__ = ["SnapstoreSaver", "RUN_PREFIX", "run_id_for", "parse_run_id"]

RUN_PREFIX = "langgraph:"
"""Prefix of the snapstore run ids this saver writes (other runs in the repository are ignored)."""


def run_id_for(thread_id: str, checkpoint_ns: str = "") -> str:
    """The snapstore run id of a LangGraph thread's namespace: ``langgraph:["thread","ns"]``."""
    return pair_run_id(RUN_PREFIX, str(thread_id), str(checkpoint_ns))


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """Inverse of :func:`run_id_for`: ``(thread_id, checkpoint_ns)``, or None for other runs."""
    return parse_pair_run_id(RUN_PREFIX, run_id)


@dataclass
class _Head:
    """What the saver knows of a run's newest record."""

    id: str | None = None          # snapstore checkpoint id (None: empty run)
    items: list | None = None      # its message list (None: not loaded)
    nlead: int = 0                 # how many leading items are messages


@dataclass
class _Rec:
    """One record of a run, from its summary (no data read)."""

    sid: str        # snapstore checkpoint id
    seq: int
    md: dict        # the snapstore metadata field (the "lg" dict)

    @property
    def kind(self) -> str | None:
        k = self.md.get("lg")
        if k == "c" and self.md.get("id") != self.sid:
            return None  # a fork's base record (copy_thread): a data carrier, not a checkpoint
        return k


@dataclass
class _RunIndex:
    """A run's records grouped: checkpoints by LangGraph id, writes by the checkpoint they are for."""

    recs: list = field(default_factory=list)       # newest first
    cps: dict = field(default_factory=dict)        # checkpoint id -> _Rec
    writes: dict = field(default_factory=dict)     # checkpoint id -> [_Rec] oldest first
    listed: int = 0                                # summaries listed (ours or not)

    @classmethod
    def of(cls, summaries) -> "_RunIndex":
        ix = cls()
        summaries = list(summaries)
        ix.listed = len(summaries)
        for s in summaries:
            md = s.metadata
            if not isinstance(md, dict) or md.get("lg") not in ("c", "w"):
                continue
            r = _Rec(s.id, s.seq, md)
            ix.recs.append(r)
            if r.kind == "c":
                ix.cps.setdefault(md["id"], r)
            elif r.kind == "w":
                ix.writes.setdefault(md.get("for"), []).insert(0, r)
        return ix

    def latest(self) -> _Rec | None:
        for r in self.recs:
            if r.kind == "c":
                return r
        return None


def _target(config, what: str, need_id: bool = False) -> tuple[dict, str, str]:
    """``(configurable, thread_id, checkpoint_ns)`` of a config; InvalidInputError naming the
    method when it has no ``configurable.thread_id`` (or no ``checkpoint_id`` when needed)."""
    c = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(c, dict) or c.get("thread_id") in (None, ""):
        raise InvalidInputError(f"SnapstoreSaver.{what}: config needs configurable.thread_id, got {config!r}")
    if need_id and not c.get("checkpoint_id"):
        raise InvalidInputError(f"SnapstoreSaver.{what}: config needs configurable.checkpoint_id, got {config!r}")
    ns = c.get("checkpoint_ns") or ""
    if not isinstance(ns, str):
        raise InvalidInputError(f"SnapstoreSaver.{what}: checkpoint_ns must be a string, got {ns!r}")
    return c, str(c["thread_id"]), ns


def _msg_list(v) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(isinstance(m, BaseMessage) for m in v)


class SnapstoreSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer storing checkpoints in a snapstore repository (local or S3).

    Args:
        location: what :class:`~snapstore.api.CheckpointManager` takes (a directory, an
            ``s3://bucket/prefix`` URL, ``memory://``, an ObjectStore, None for
            ``$SNAPSTORE_URL``), or a ``CheckpointManager`` to use (not closed by :meth:`close`).
        serde: LangGraph serializer for non-message channel values and writes (default: the
            saver default, ``JsonPlusSerializer``).
        **manager_options: passed to ``CheckpointManager`` (e.g. ``endpoint_url=`` for S3).
    Raises:
        MissingDependencyError: langgraph-checkpoint is not installed (on import).
        InvalidInputError: ``manager_options`` given together with a manager.

    Sync and async methods (the async ones run the sync ones in a worker thread). Requests: a
    ``put`` is one snapstore save (about 3 PUTs: pack, index record, manifest); a ``put_writes``
    one save (2 PUTs); ``get_tuple`` lists the run's newest records (a LIST and a few GETs, more
    for an old checkpoint: every record after it is listed) and reads the checkpoint and its
    writes records. ``list``, ``prune``, ``copy_thread`` and the history walk read a run's whole
    log through its log segments (``CheckpointManager.list``). ``delete_for_runs`` and listing
    without a thread, which have no thread to start from, list every LangGraph run.
    """

    def __init__(self, location: Any = None, *, serde: SerializerProtocol | None = None, **manager_options):
        super().__init__(serde=serde)
        if isinstance(location, CheckpointManager):
            if manager_options:
                raise InvalidInputError("SnapstoreSaver: options are for a manager it opens, not one passed in")
            self.manager = location
            self._own = False
        else:
            self.manager = CheckpointManager(location, **manager_options)
            self._own = True
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.RLock] = {}
        self._heads: dict[str, _Head] = {}
        self._enc: dict[str, dict] = {}          # run -> id(message) -> (message, item)
        self._seen: dict[tuple, set] = {}        # (run, checkpoint id) -> {(task, idx)} written here
        self._records: OrderedDict = OrderedDict()  # (run, snapstore id, seq) -> (messages, session state)

    RECORD_CACHE = 1024
    """Records (their stored message items and session state) kept in memory, least recently
    used first out. Records never change and their ids are never reused, so a cached one is
    right as long as a listing still shows it; DeltaChannel walks re-read the same ones."""

    def _record(self, run: str, sid: str, seq: int) -> tuple[list, Any]:
        """``(message items, session state)`` of record ``sid`` at log position ``seq``."""
        key = (run, sid, seq)  # a position is never reused: a re-put id gets a new key
        with self._lock:
            hit = self._records.get(key)
            if hit is not None:
                self._records.move_to_end(key)
                return hit
        cp = self.manager.get(run, sid)
        got = (cp.messages, cp.session_state)
        with self._lock:
            self._records[key] = got
            while len(self._records) > self.RECORD_CACHE:
                self._records.popitem(last=False)
        return got

    # ------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the manager if this saver opened it."""
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

    def _rlock(self, run: str) -> threading.RLock:
        with self._lock:
            lk = self._run_locks.get(run)
            if lk is None:
                lk = self._run_locks[run] = threading.RLock()
            return lk

    def _forget(self, run: str) -> None:
        with self._lock:
            self._heads.pop(run, None)
            self._enc.pop(run, None)
            for k in [k for k in self._seen if k[0] == run]:
                del self._seen[k]

    # ------------------------------------------------------------------------------------------
    # encoding

    def _blob(self, value) -> dict:
        t, b = self.serde.dumps_typed(value)
        return {"serde": t, "b64": base64.b64encode(b).decode("ascii")}

    def _unblob(self, item: dict):
        return self.serde.loads_typed((item["serde"], base64.b64decode(item["b64"])))

    def _enc_msg(self, m, cache: dict) -> dict:
        hit = cache.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        item = None
        try:
            d = message_to_dict(m)
            validate(d, "message")
            back = messages_from_dict([d])[0]
            if type(back) is type(m) and back == m:
                item = d
        except (InvalidMessageError, Exception):  # not exact JSON, or does not round-trip: serde
            item = None
        if item is None:
            item = self._blob(m)
        cache[id(m)] = (m, item)
        return item

    def _dec_item(self, item):
        if isinstance(item, dict) and "serde" in item and "b64" in item:
            return self._unblob(item)
        return messages_from_dict([item])[0]

    def _encode_checkpoint(self, run: str, checkpoint: Checkpoint) -> tuple[list, dict, list]:
        values = checkpoint.get("channel_values") or {}
        old = self._enc.get(run) or {}
        cache: dict = {}
        items: list = []
        layout: list = []
        blobs = []
        for ch in sorted(values):
            v = values[ch]
            if _msg_list(v):
                kind, msgs = "m", v
            elif isinstance(v, _DeltaSnapshot) and _msg_list(v.value):
                kind, msgs = "s", v.value
            else:
                blobs.append(ch)
                continue
            layout.append([ch, kind, len(items), len(msgs)])
            for m in msgs:
                hit = cache.get(id(m)) or old.get(id(m))
                if hit is not None and hit[0] is m:
                    cache[id(m)] = hit
                    items.append(hit[1])
                else:
                    items.append(self._enc_msg(m, cache))
        nlead = len(items)
        for ch in blobs:
            layout.append([ch, "b", len(items), 1])
            items.append(self._blob(values[ch]))
        skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        state = {"cp": self._json_or_blob(skeleton), "layout": layout, "nlead": nlead}
        with self._lock:
            self._enc[run] = cache
        return items, state, sorted(values)

    def _json_or_blob(self, value) -> dict:
        """``{"json": value}`` when ``value`` is exact JSON that comes back equal (compresses far
        better in a manifest than serde bytes in base64), else a serde blob."""
        try:
            validate(value, "value")
            if orjson.loads(orjson.dumps(value)) == value:
                return {"json": value}
        except (InvalidMessageError, TypeError, ValueError):
            pass
        return self._blob(value)

    def _unjson(self, item: dict):
        return item["json"] if "json" in item else self._unblob(item)

    def _decode_checkpoint(self, items: list, st: dict, checkpoint_id: str, run: str = "?") -> Checkpoint:
        """The LangGraph checkpoint of a stored record (IntegrityError if it is not one)."""
        try:
            return self._decode_checkpoint_raw(items, st, checkpoint_id)
        except SnapstoreError:
            raise
        except Exception as e:
            raise IntegrityError(f"run {run!r} checkpoint {checkpoint_id!r}",
                                 f"not a valid LangGraph checkpoint record: {type(e).__name__}: {e}") from e

    def _decode_checkpoint_raw(self, items: list, st: dict, checkpoint_id: str) -> Checkpoint:
        skeleton = self._unjson(st["cp"])
        values: dict = {}
        for ch, kind, start, count in st["layout"]:
            if kind == "b":
                values[ch] = self._unblob(items[start])
            else:
                msgs = [self._dec_item(i) for i in items[start:start + count]]
                if len(msgs) != count:
                    raise ValueError(f"channel {ch!r}: {count} messages expected at {start}, found {len(msgs)}")
                values[ch] = _DeltaSnapshot(msgs) if kind == "s" else msgs
        out = dict(skeleton)
        out["id"] = checkpoint_id
        out["channel_values"] = values
        return out

    def _md_field(self, md: dict) -> dict:
        try:
            validate(md, "metadata")
            return {"md": md}
        except InvalidMessageError:
            return {"mdb": self._blob(md)}

    def _md_of(self, rec: _Rec) -> dict:
        if "md" in rec.md:
            return rec.md["md"]
        if "mdb" in rec.md:
            return self._unblob(rec.md["mdb"])
        return {}

    # ------------------------------------------------------------------------------------------
    # reading a run

    def _index(self, run: str, limit: int | None = None) -> _RunIndex:
        return _RunIndex.of(self.manager.list(run, limit=limit))

    def _window(self, run: str, checkpoint_id: str | None) -> tuple[_RunIndex, _Rec | None]:
        """The run's newest records down to (and past) the wanted checkpoint: enough to find it
        and every writes record for it (those follow it; a few may precede it, up to the
        checkpoint before it)."""
        limit = 4
        while True:
            ix = self._index(run, limit)
            exhausted = ix.listed < limit
            target = ix.cps.get(checkpoint_id) if checkpoint_id else ix.latest()
            if target is not None:
                older = any(r.kind == "c" and r.seq < target.seq for r in ix.recs)
                if older or exhausted:
                    return ix, target
            elif exhausted:
                return ix, None
            limit *= 4

    def _writes_of(self, run: str, recs: list) -> list[PendingWrite]:
        """Pending writes of one checkpoint from its writes records (oldest first), deduplicated
        per (task, index) (first kept; special negative indexes: last kept), in
        ``writes_sort_key`` order."""
        got: dict = {}
        for r in recs:
            items, st = self._record(run, r.sid, r.seq)
            try:
                off = st["off"]
                task, path = r.md.get("task", ""), r.md.get("path", "")
                for ch, idx, kind, start, count in st["w"]:
                    if kind == "b":
                        value = self._unblob(st["blobs"][start])
                    else:
                        msgs = [self._dec_item(i) for i in items[off + start:off + start + count]]
                        if len(msgs) != count:
                            raise ValueError(f"{count} messages expected at {off + start}, found {len(msgs)}")
                        value = msgs[0] if kind == "m1" else msgs
                    key = (task, idx)
                    if key in got and idx >= 0:
                        continue
                    got[key] = (path, task, ch, value, idx)
            except SnapstoreError:
                raise
            except Exception as e:
                raise IntegrityError(f"run {run!r} record {r.sid!r} (log position {r.seq})",
                                     f"not a valid LangGraph writes record: {type(e).__name__}: {e}") from e
        rows = sorted(got.values(), key=lambda x: writes_sort_key(x[0], x[1], x[4]))
        return [(t, ch, v) for _p, t, ch, v, _i in rows]

    def _tuple(self, run: str, thread_id: str, ns: str, rec: _Rec, wrecs: list) -> CheckpointTuple:
        items, st = self._record(run, rec.sid, rec.seq)
        parent = rec.md.get("parent")
        conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": rec.md["id"]}}
        return CheckpointTuple(
            config=conf,
            checkpoint=self._decode_checkpoint(items, st, rec.md["id"], run),
            metadata=self._md_of(rec),
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=self._writes_of(run, wrecs),
        )

    def _runs(self, thread_id: str | None = None) -> list[tuple[str, str, str]]:
        """``(run, thread_id, ns)`` of this saver's live runs (of one thread, or all)."""
        out = []
        for r in self.manager.runs():
            p = parse_run_id(r)
            if p is not None and (thread_id is None or p[0] == str(thread_id)):
                out.append((r, p[0], p[1]))
        return out

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint ``config`` names (``checkpoint_id``), or the thread's latest in
        ``checkpoint_ns`` (default ``""``), with its pending writes; None if there is none."""
        c, thread_id, ns = _target(config, "get_tuple")
        run = run_id_for(thread_id, ns)
        cid = get_checkpoint_id(config)
        with self._rlock(run):
            ix, target = self._window(run, cid)
            if target is None:
                return None
            try:
                return self._tuple(run, thread_id, ns, target, ix.writes.get(target.md["id"], []))
            except CheckpointNotFound:
                return None  # deleted meanwhile

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
            c, thread_id, _ns = _target(config, "list")
            ns = c.get("checkpoint_ns")
            runs = [(run_id_for(thread_id, ns), thread_id, ns)] if ns is not None else self._runs(thread_id)
            only = get_checkpoint_id(config)
        else:
            runs = self._runs()
            only = None
        before_id = get_checkpoint_id(before) if before else None
        rows = []
        for run, thread_id, ns in runs:
            ix = self._index(run)
            for cid, rec in ix.cps.items():
                if only and cid != only:
                    continue
                if before_id and cid >= before_id:
                    continue
                if filter:
                    md = self._md_of(rec)
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                rows.append((cid, run, thread_id, ns, rec, ix.writes.get(cid, [])))
        rows.sort(key=lambda r: r[0], reverse=True)
        if limit is not None:
            rows = rows[:limit]
        for cid, run, thread_id, ns, rec, wrecs in rows:
            try:
                yield self._tuple(run, thread_id, ns, rec, wrecs)
            except CheckpointNotFound:
                continue

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: writes

    def _head(self, run: str, items: bool) -> _Head:
        h = self._heads.get(run)
        if h is not None and (h.items is not None or not items):
            return h
        got = self.manager.head(run)  # one LIST (limit 1) and one GET, not a listing of the log
        if got is None:
            h = _Head(None, [], 0)
        else:
            h = _Head(got.id, None, 0)
            if items:
                msgs, st = self._record(run, got.id, got.seq)
                st = st if isinstance(st, dict) else {}
                h.items = msgs
                h.nlead = int(st.get("nlead", 0))
        self._heads[run] = h
        return h

    def _save(self, run: str, items: list, nlead: int, **kw) -> str:
        """Save a record branching from the run's newest one; on a stale head, look again once."""
        for attempt in (0, 1):
            head = self._head(run, False)
            try:
                sid = self.manager.save(run, items, parent_id=head.id, **kw)
                break
            except CheckpointNotFound:
                if attempt:
                    raise
                self._forget(run)  # our head was deleted by another process
        self._heads[run] = _Head(sid, items, nlead)
        return sid

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (its full ``channel_values``) as a child of ``config``'s checkpoint.

        Returns:
            ``{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}`` of the stored one.
        Raises:
            StoreError: the store failed (nothing visible was half-written).
        """
        c, thread_id, ns = _target(config, "put")
        run = run_id_for(thread_id, ns)
        cid = checkpoint["id"]
        md = get_checkpoint_metadata(config, metadata)
        with self._rlock(run):
            items, state, chs = self._encode_checkpoint(run, checkpoint)
            field_md = {"lg": "c", "id": cid, "parent": c.get("checkpoint_id"), "chs": chs, **self._md_field(md)}
            # LangGraph numbers the input checkpoint -1; snapstore's step is a non-negative int (the
            # exact value stays in the metadata)
            step = md.get("step") if isinstance(md.get("step"), int) and md.get("step") >= 0 else None
            kw = dict(step=step, metadata=field_md, session_state=state, checkpoint_id=cid)
            try:
                self._save(run, items, state["nlead"], **kw)
            except ConflictError:
                # the same checkpoint id put again (LangGraph savers replace it): replace it
                if not self.manager.delete_many(run, [cid]):
                    raise
                self._forget(run)
                self._save(run, items, state["nlead"], **kw)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes for ``config``'s checkpoint (idempotent per task and index).

        Messages written (a message, or a non-empty list of messages) are stored one per chunk;
        other values through the serde. Writes may be stored before their checkpoint is.
        """
        c, thread_id, ns = _target(config, "put_writes", need_id=True)
        cid = c["checkpoint_id"]
        run = run_id_for(thread_id, ns)
        with self._rlock(run):
            seen = self._seen.setdefault((run, cid), set())
            todo = []
            for idx, (ch, v) in enumerate(writes):
                widx = WRITES_IDX_MAP.get(ch, idx)
                if widx >= 0 and (task_id, widx) in seen:
                    continue
                todo.append((widx, ch, v))
            if not todo:
                return
            head = self._head(run, True)
            base = list(head.items[:head.nlead])
            cache = self._enc.setdefault(run, {})
            msg_items: list = []
            blobs: list = []
            desc = []
            for widx, ch, v in todo:
                if isinstance(v, BaseMessage):
                    desc.append([ch, widx, "m1", len(msg_items), 1])
                    msg_items.append(self._enc_msg(v, cache))
                elif _msg_list(v):
                    desc.append([ch, widx, "ml", len(msg_items), len(v)])
                    msg_items.extend(self._enc_msg(m, cache) for m in v)
                else:
                    desc.append([ch, widx, "b", len(blobs), 1])
                    blobs.append(self._blob(v))
            state = {"off": len(base), "w": desc, "blobs": blobs}
            field_md = {"lg": "w", "for": cid, "task": task_id, "path": task_path,
                        "chs": sorted({ch for _, ch, _ in todo})}
            items = base + msg_items
            self._save(run, items, len(items), metadata=field_md, session_state=state)
            seen.update((task_id, w) for w, _, _ in todo if w >= 0)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace (a tombstone per
        namespace run; ``gc()`` reclaims the data). A missing thread is no error."""
        for run, _t, _ns in self._runs(thread_id):
            with self._rlock(run):
                try:
                    self.manager.delete(run)
                except RunNotFound:
                    pass
                self._forget(run)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes, in every thread (lists every LangGraph run of the repository)."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for run, _t, _ns in self._runs():
            with self._rlock(run):
                ix = self._index(run)
                doomed = []
                for cid, rec in ix.cps.items():
                    if self._md_of(rec).get("run_id") in wanted:
                        doomed.append(rec.sid)
                        doomed.extend(w.sid for w in ix.writes.get(cid, []))
                if doomed:
                    self.manager.delete_many(run, doomed)
                    self._forget(run)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread (all namespaces) to an empty thread.

        Nothing is stored twice: the target's first record is a fork
        (:meth:`CheckpointManager.fork`, one pack holding what the source's newest checkpoint
        needs); every record is then saved again in the source's order, each deduplicated
        against the fork, so it costs a manifest (and a small tree edge). The whole chain is
        copied, so DeltaChannel state rebuilds on the target; the fork's base record is deleted.

        Raises:
            ConflictError: the target thread already has checkpoints in a namespace being copied.
        """
        for run, _t, ns in self._runs(source_thread_id):
            dst = run_id_for(target_thread_id, ns)
            with self._rlock(dst):
                if self.manager.list(dst, limit=1):
                    raise ConflictError(f"copy_thread: thread {target_thread_id!r} already has checkpoints "
                                        f"in namespace {ns!r}")
                ix = self._index(run)
                if not ix.recs:
                    continue
                base = None
                latest = ix.latest()
                if latest is not None:
                    base = self.manager.fork(run, latest.sid, dst).id
                self._forget(dst)
                for r in reversed(ix.recs):
                    cp = self.manager.get(run, r.sid)
                    st = cp.session_state if isinstance(cp.session_state, dict) else {}
                    nlead = len(cp.messages) if r.kind == "w" else int(st.get("nlead", 0))
                    self._save(dst, cp.messages, nlead, step=cp.step, metadata=cp.metadata,
                               session_state=cp.session_state,
                               checkpoint_id=r.sid if r.kind == "c" else None)
                if base is not None:
                    self.manager.delete_many(dst, [base])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads: ``"keep_latest"`` keeps each namespace's latest checkpoint and its
        writes, and, for DeltaChannel channels (named in the latest's metadata
        ``counters_since_delta_snapshot``), every ancestor (and its writes) back to the nearest
        one storing that channel's value (a ``_DeltaSnapshot``), so the kept state rebuilds;
        ``"delete"`` deletes the threads. Only manifests go; ``gc()`` reclaims the data.

        Raises:
            InvalidInputError: an unknown strategy.
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(f"prune: strategy must be 'keep_latest' or 'delete', got {strategy!r}")
        for t in thread_ids:
            if strategy == "delete":
                self.delete_thread(t)
                continue
            for run, _t, _ns in self._runs(t):
                with self._rlock(run):
                    ix = self._index(run)
                    latest = ix.latest()
                    if latest is None:
                        continue
                    keep = {latest.sid}
                    keep.update(w.sid for w in ix.writes.get(latest.md["id"], []))
                    md = self._md_of(latest)
                    delta = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
                    remaining = set(delta or ()) - set(latest.md.get("chs") or ())
                    cur = latest.md.get("parent")
                    while cur and remaining:
                        a = ix.cps.get(cur)
                        if a is None:
                            break
                        keep.add(a.sid)
                        keep.update(w.sid for w in ix.writes.get(cur, []))
                        remaining -= set(a.md.get("chs") or ())
                        cur = a.md.get("parent")
                    doomed = [r.sid for r in ix.recs if r.sid not in keep]
                    if doomed:
                        self.manager.delete_many(run, doomed)
                        self._forget(run)

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Walk the parent chain of ``config``'s checkpoint once for all ``channels``: per
        channel, the on-path writes oldest first and the ``seed`` (the value stored at the nearest
        ancestor holding one; omitted if none). One listing of the run; only the ancestors and
        writes records that hold a wanted channel are read."""
        if not channels:
            return {}
        c, thread_id, ns = _target(config, "get_delta_channel_history")
        run = run_id_for(thread_id, ns)
        cid = get_checkpoint_id(config)
        limit = 64
        while True:
            # the newest records of the run, more of them until the walk ends inside the window
            # (a DeltaChannel snapshot is at most snapshot_frequency updates back)
            ix = self._index(run, limit)
            exhausted = ix.listed < limit
            out = self._delta_walk(run, ix, cid, channels, exhausted)
            if out is not None:
                return out
            limit *= 4

    def _delta_walk(self, run: str, ix: _RunIndex, cid: str | None, channels: Sequence[str],
                    complete: bool) -> dict | None:
        """The history walk over the records ``ix`` holds; None if it needs older records
        (``complete``: ``ix`` is the whole run, a missing ancestor ends the walk)."""
        target = ix.cps.get(cid) if cid else ix.latest()
        if target is None and not complete:
            return None
        remaining = set(channels)
        blocks: list[dict] = []   # per ancestor, newest ancestor first: ch -> [writes]
        seeds: dict = {}
        cur = target.md.get("parent") if target is not None else None
        while cur and remaining:
            a = ix.cps.get(cur)
            if a is None:
                if not complete:
                    return None
                break
            wrecs = [w for w in ix.writes.get(cur, []) if remaining & set(w.md.get("chs") or ())]
            block: dict = {}
            if wrecs:
                for w in self._writes_of(run, ix.writes.get(cur, [])):
                    if w[1] in remaining:
                        block.setdefault(w[1], []).append(w)
            blocks.append(block)
            here = remaining & set(a.md.get("chs") or ())
            if here:
                values = self._decode_checkpoint(*self._record(run, a.sid, a.seq), cur, run)["channel_values"]
                for ch in here:
                    seeds[ch] = values[ch]
                remaining -= here
            cur = a.md.get("parent")
        out: dict = {}
        for ch in channels:
            ws: list = []
            for block in reversed(blocks):
                ws.extend(block.get(ch, []))
            entry: DeltaChannelHistory = {"writes": ws}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            out[ch] = entry
        return out

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

    # ------------------------------------------------------------------------------------------
    # async: the sync methods in a worker thread

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list` (the page is read in a worker thread, then yielded)."""
        rows = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for r in rows:
            yield r

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        """Async :meth:`put`."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        """Async :meth:`put_writes`."""
        return await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        return await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        return await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        return await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        return await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Async :meth:`get_delta_channel_history`."""
        return await asyncio.to_thread(self.get_delta_channel_history, config=config, channels=channels)
