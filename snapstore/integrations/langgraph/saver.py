"""A LangGraph checkpointer on snapstore: :class:`SnapstoreSaver`.

Layer 5 (a surface over :class:`snapstore.manager.facade.CheckpointManager`); needs the extra
``snapstore[langgraph]`` (``langgraph-checkpoint`` 4.3 and ``langchain-core``).

Mapping (docs: README "LangGraph"; the persisted record layout, normative, is
``docs/langgraph-layout.md``; section numbers below are of that page):

* One snapstore **run** per ``(thread_id, checkpoint_ns)``, ``langgraph:["<thread_id>", "<ns>"]``,
  and a **namespace registry** run per thread, ``langgraph-ns:["<thread_id>"]`` (layout §1).
* Every ``put`` is one *checkpoint record* (``"lg": "C"``) and every ``put_writes`` one *writes
  record* (``"lg": "W"``), each a snapstore checkpoint with a generated id whose message list
  holds the messages (one per chunk, as ``message_to_dict`` JSON) and the serde items, whose
  session state holds the layout (positions) and whose metadata holds what listing needs
  (layout §2-§4). Records of the earlier layout (``"lg": "c"``/``"w"``) are still read (§7).
* The run's **newest record** always carries the latest checkpoint with its pending writes and
  DeltaChannel history sections (§4, §5), so a fresh ``get_state`` reads one record and a step's
  cost does not grow with the run.
* Every record is saved on top of the run's newest record as a compare-and-swap on it
  (``expect_head``) and built again when another writer moved the run. Time travel and new
  roots are plain saves; two processes writing one thread both succeed, the later put being the
  newer checkpoint (as LangGraph's SQL savers do).
* "Latest" (``get_tuple`` without ``checkpoint_id``) is the checkpoint put last; ``list`` orders
  by checkpoint id, newest first. LangGraph's ids grow with time, so the two agree for graphs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..errors import (CheckpointNotFound, ConflictError, IntegrityError, InvalidInputError, InvalidMessageError,
                      MissingDependencyError, RunNotFound, SnapstoreError, UnsupportedValueError)

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

from ..manager.facade import EMPTY_RUN
from ..manager.retention import NEEDS_KEY
from ..format.codec import validate
from ..format.ids import seq_hint
from .managers import manager_for
from .runids import pair_run_id, parse_pair_run_id

__all__ = ["SnapstoreSaver", "RUN_PREFIX", "NS_PREFIX", "run_id_for", "ns_run_id_for", "parse_run_id"]

DELTA_CHAIN = "LangGraph checkpoint and DeltaChannel delta chain"
"""The ``by`` of the saver's ``snapstore.needs`` metadata (retention's ``needed by <id> (...)``)."""

RUN_PREFIX = "langgraph:"
"""Prefix of the snapstore run ids this saver writes (other runs in the repository are ignored)."""


def run_id_for(thread_id: str, checkpoint_ns: str = "") -> str:
    """The snapstore run id of a LangGraph thread's namespace: ``langgraph:["thread","ns"]``."""
    return pair_run_id(RUN_PREFIX, str(thread_id), str(checkpoint_ns))


NS_PREFIX = "langgraph-ns:"
"""Prefix of the run that lists a thread's namespaces (``langgraph-ns:["<thread_id>"]``)."""


def ns_run_id_for(thread_id: str) -> str:
    """The snapstore run id of a thread's namespace registry: ``langgraph-ns:["thread"]``."""
    return NS_PREFIX + json.dumps([str(thread_id)])


def parse_run_id(run_id: str) -> tuple[str, str] | None:
    """Inverse of :func:`run_id_for`: ``(thread_id, checkpoint_ns)``, or None for other runs."""
    return parse_pair_run_id(RUN_PREFIX, run_id)


@dataclass
class _Head:
    """What the saver knows of a run's newest record."""

    id: str | None = None          # snapstore checkpoint id (None: empty run)
    items: list | None = None      # its message list (None: not loaded)
    st: Any = None                 # its session state
    md: dict | None = None         # its snapstore metadata field
    seq: int | None = None         # its log position
    read_at: float = field(default_factory=time.monotonic)  # when it was read or written


@dataclass
class _Rec:
    """One record of a run, from its summary (no data read)."""

    sid: str        # snapstore checkpoint id
    seq: int
    md: dict        # the snapstore metadata field (the "lg" dict)

    @property
    def kind(self) -> str | None:
        k = self.md.get("lg")
        if k == "C":
            return "c"
        if k == "W":
            return "w"
        if k == "c" and self.md.get("id") != self.sid:
            return None  # a format-1 fork's base record (copy_thread): a data carrier, not a checkpoint
        return k


_KINDS = ("c", "w", "C", "W")


@dataclass
class _RunIndex:
    """A run's records grouped: checkpoints by LangGraph id, writes by the checkpoint they are for."""

    recs: list = field(default_factory=list)       # newest first
    head: str | None = None                        # the run's head (newest live checkpoint, any kind)
    cps: dict = field(default_factory=dict)        # checkpoint id -> _Rec (the newest record of that id)
    writes: dict = field(default_factory=dict)     # checkpoint id -> [_Rec] oldest first
    listed: int = 0                                # summaries listed (ours or not)

    @classmethod
    def of(cls, summaries) -> "_RunIndex":
        ix = cls()
        summaries = list(summaries)
        ix.listed = len(summaries)
        ix.head = summaries[0].id if summaries else None
        for s in summaries:
            md = s.metadata
            if not isinstance(md, dict) or md.get("lg") not in _KINDS:
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

    def all_of(self, checkpoint_id: str) -> list:
        """Every record of LangGraph checkpoint ``checkpoint_id``: each put of it and its writes."""
        return [r for r in self.recs if (r.kind == "c" and r.md.get("id") == checkpoint_id)
                or (r.kind == "w" and r.md.get("for") == checkpoint_id)]


class _NothingToWrite(Exception):
    """Every write of a put_writes call is stored already."""


def _seq_of(sid: str) -> int | None:
    return seq_hint(sid)


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
    ``put`` and a ``put_writes`` are one snapstore save each (2 PUTs: pack, manifest);
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

    def __init__(self, location: Any = None, *, serde: SerializerProtocol | str | None = None, **manager_options):
        if isinstance(serde, str):
            from .serde import serde_named
            serde = serde_named(serde)
        super().__init__(serde=serde)
        self.manager, self._own = manager_for("SnapstoreSaver", location, manager_options)
        self._lock = threading.Lock()
        self._run_locks: dict[str, threading.RLock] = {}
        self._heads: dict[str, _Head] = {}
        self._enc: dict[str, dict] = {}          # run -> id(message) -> (message, item, message id)
        self._seen: dict[tuple, set] = {}        # (run, checkpoint id) -> {(task, idx)} written here
        self._records: OrderedDict = OrderedDict()  # (run, snapstore id, seq) -> (messages, session state)
        self._put_ids: dict[str, dict] = {}     # run -> checkpoint ids this saver put lately (oldest first)
        self._dec: dict = {}                     # id(stored item) -> (item, message, its id)
        self._rev: dict = {}                     # id(message) -> (message, stored item, its id)

    PUT_IDS = 256
    """Checkpoint ids put lately, per run, that a writes record arriving later is recognised
    by as late (see :meth:`put_writes`)."""

    RECORD_CACHE = 1024
    """Records (their stored message items and session state) kept in memory, least recently
    used first out. Records never change and their ids are never reused, so a cached one is
    right as long as a listing still shows it; DeltaChannel walks re-read the same ones."""

    def _record(self, run: str, sid: str, seq: int, reader=None) -> tuple[list, Any]:
        """``(message items, session state)`` of record ``sid`` at log position ``seq``; read
        through ``reader`` (a ``RunReader`` of the run: no manifest GET, the run's segments
        fetched once) when given, else with ``CheckpointManager.get``."""
        key = (run, sid, seq)  # a position is never reused: a re-put id gets a new key
        with self._lock:
            hit = self._records.get(key)
            if hit is not None:
                self._records.move_to_end(key)
                return hit
        cp = reader.get(sid) if reader is not None else self.manager.get(run, sid)
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

    def _blob(self, value, where: str = "") -> dict:
        try:
            t, b = self.serde.dumps_typed(value)
        except UnsupportedValueError as e:  # SafeSerializer: name the channel too
            raise (e.within(where) if where else e) from None
        return {"serde": t, "b64": base64.b64encode(b).decode("ascii")}

    def _unblob(self, item: dict):
        return self.serde.loads_typed((item["serde"], base64.b64decode(item["b64"])))

    def _enc_msg(self, m, cache: dict, where: str = "") -> dict:
        hit = cache.get(id(m)) or self._rev.get(id(m))
        if hit is not None and hit[0] is m and hit[2] == m.id:
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
            item = self._blob(m, where)
        # the id is kept beside: add_messages gives a message written without one an id in place
        cache[id(m)] = (m, item, m.id)
        return item

    DECODED_CACHE = 200_000
    """Stored message items kept decoded (the message object made from each), so a step's
    ``get_tuple`` on the record this saver holds decodes only the new messages and the next
    ``put`` recognises the messages by identity instead of encoding them again."""

    def _dec_item(self, item):
        if isinstance(item, dict) and "serde" in item and "b64" in item:
            return self._unblob(item)
        hit = self._dec.get(id(item))
        if hit is not None and hit[0] is item and hit[1].id == hit[2]:
            return hit[1]
        m = messages_from_dict([item])[0]
        if len(self._dec) >= self.DECODED_CACHE:
            self._dec.clear()
            self._rev.clear()
        self._dec[id(item)] = (item, m, m.id)
        self._rev[id(m)] = (m, item, m.id)
        return m

    def _enc_value(self, v, cache: dict, old: dict | None = None, where: str = "") -> tuple[str, list]:
        """``(kind, items)`` of a channel or write value: ``m1`` one message, ``m`` a non-empty
        message list, ``s`` a DeltaChannel snapshot of one, ``b`` anything else (one serde item).
        ``where`` (e.g. ``"channel 'v'"``) prefixes the path of an UnsupportedValueError."""
        if isinstance(v, BaseMessage):
            return "m1", [self._enc_msg(v, cache, where)]
        if _msg_list(v):
            kind, msgs = "m", v
        elif isinstance(v, _DeltaSnapshot) and _msg_list(v.value):
            kind, msgs = "s", v.value
        else:
            return "b", [self._blob(v, where)]
        items = []
        for i, m in enumerate(msgs):
            hit = cache.get(id(m)) or (old.get(id(m)) if old else None) or self._rev.get(id(m))
            if hit is not None and hit[0] is m and hit[2] == m.id:
                cache[id(m)] = hit
                items.append(hit[1])
            else:
                items.append(self._enc_msg(m, cache, f"{where} [{i}]" if where else ""))
        return kind, items

    def _dec_value(self, kind: str, items: list):
        if kind == "b":
            if len(items) != 1:
                raise ValueError(f"a serde value takes 1 item, found {len(items)}")
            return self._unblob(items[0])
        msgs = [self._dec_item(i) for i in items]
        if kind == "m1":
            if len(msgs) != 1:
                raise ValueError(f"a message takes 1 item, found {len(msgs)}")
            return msgs[0]
        if not msgs:
            raise ValueError("an empty message list")
        return _DeltaSnapshot(msgs) if kind == "s" else msgs

    def _encode_checkpoint(self, run: str, checkpoint: Checkpoint, md: dict, parent: str | None,
                           head: _Head) -> tuple[list, dict, list]:
        """``(items, session state, channels)`` of a checkpoint record (format ``v`` 2).

        Items: the message-list channel values (one item per message), then for each DeltaChannel
        channel the checkpoint does not hold (named in the metadata's
        ``counters_since_delta_snapshot``) its history section (what
        :meth:`get_delta_channel_history` returns for this checkpoint: the seed and the on-path
        writes, each after a small marker item), then the other channel values (one serde item
        each), then one *meta* item: the checkpoint without its values (versions, ts...), its
        LangGraph metadata and parent. Every item is a chunk of the pack, so what repeats from
        record to record (messages, markers) is stored once and the rest compresses with the
        run's other records when packs are merged; the manifest keeps only the small layout.
        """
        values = checkpoint.get("channel_values") or {}
        old = self._enc.get(run) or {}
        cache: dict = {}
        items: list = []
        layout: list = []
        blobs = []
        for ch in sorted(values):
            kind, its = self._enc_value(values[ch], cache, old, f"channel {ch!r}")
            if kind == "b":
                blobs.append((ch, its))
                continue
            layout.append([ch, kind, len(items), len(its)])
            items.extend(its)
        hist = {}
        for ch, sec in sorted((self._history_for(head, parent, values, md) or {}).items()):
            hist[ch] = [len(items), len(sec)]
            items.extend(sec)
        for ch, its in blobs:
            layout.append([ch, "b", len(items), 1])
            items.extend(its)
        skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        meta = {"cp": self._json_or_blob(skeleton, "the checkpoint's versions"), "parent": parent,
                **self._md_field(md)}
        # "k": this record carries every write set its newest record held (the records of
        # earlier releases did not carry those stored before the parent was put: readers list
        # the run for them)
        state = {"v": 2, "k": 1, "layout": layout, "meta": len(items)}
        items.append({"lgmeta": meta})
        if hist:
            state["hist"] = hist
        # writes stored before their checkpoint (LangGraph's async durability puts a task's
        # writes before the checkpoint they are for, even before its parent is put): the newest
        # record carries every such set; this record takes its own and carries the others on
        cid = checkpoint["id"]
        sets = self._early_sets(head, run)
        own = sets.pop(cid, None)
        again = self._covers(head, cid)  # a checkpoint id put again: its writes so far
        mine = list(again["rows"]) if again is not None and again["base"] == "c" else []
        try:
            if own:
                mine.extend(self._rows(head.items, own))
            others = {k: self._rows(head.items, d) for k, d in sets.items()}
        except (KeyError, TypeError, ValueError):
            others = {}  # a damaged newest record: what it carries is not used (see "x")
        if mine:
            state["w"] = self._append_rows(items, mine)
        if not self._seen.get((run, cid), set()) <= {(r[0], r[3]) for r in mine}:
            state["x"] = 1  # this saver stored writes for it that the newest record does not carry
        if others:
            state["eo"] = {k: self._append_rows(items, rows) for k, rows in others.items()}
        with self._lock:
            self._enc[run] = cache
        return items, state, sorted(values)

    EARLY_SETS = 64
    """Checkpoints not put yet whose writes the run's newest record carries at most (the oldest
    set beyond goes; its checkpoint's put then marks itself incomplete, ``"x"``, if this saver
    wrote them, so readers list the run)."""

    @staticmethod
    def _append_rows(items: list, rows: list) -> list:
        """Append the items of writes ``rows`` to ``items``; return their descriptors."""
        desc = []
        for task, path, ch, idx, kind, its in rows:
            desc.append([task, path, ch, idx, kind, len(items), len(its)])
            items.extend(its)
        return desc

    def _early_sets(self, head: _Head | None, run: str, latest: str | None = None) -> dict:
        """The writes the run's newest record ``head`` carries for checkpoints not put yet:
        ``{checkpoint id: descriptors into head.items}`` (oldest set first: the ``eo`` sets, then
        a writes record's own set, ``ef``/``e``). Sets of checkpoints this saver has put since,
        or (``latest``: the latest checkpoint's id) with an id below the latest's, are no longer
        early and are left out; at most :attr:`EARLY_SETS`, the newest."""
        if head is None or head.id is None or head.items is None or not isinstance(head.st, dict):
            return {}
        st, md = head.st, head.md or {}
        if st.get("v") != 2:
            return {}
        out: dict = {}
        eo = st.get("eo")
        if isinstance(eo, dict):
            out.update((k, list(v)) for k, v in eo.items() if isinstance(k, str) and isinstance(v, list))
        if md.get("lg") == "W" and isinstance(st.get("ef"), str) and isinstance(st.get("e"), list):
            out.pop(st["ef"], None)
            out[st["ef"]] = list(st["e"])
        put = self._put_ids.get(run, ())
        for k in list(out):
            if not out[k] or k in put or (latest is not None and k < latest):
                del out[k]
        while len(out) > self.EARLY_SETS:
            del out[next(iter(out))]
        return out

    def _covers(self, head: _Head | None, checkpoint_id: str) -> dict | None:
        """What the run's newest record ``head`` holds of checkpoint ``checkpoint_id``: ``{"base":
        "c" or None, "items": the checkpoint's items, "cst": its state, "pre": true when writes
        for it may exist that the record does not carry, "rows": its writes so far (oldest first),
        "wdesc": their descriptors, "stale": true when writes for an earlier checkpoint landed
        after this one was put, so its history section may miss them}``, or None when it is not
        about it.

        ``base == "c"``: ``head`` carries the checkpoint and all its writes so far: it is the
        checkpoint's record (which also carries the writes stored before it), or a writes record
        (which carries the run's latest checkpoint, ``cf``, with its writes, plus the writes
        stored so far for the checkpoint to come, ``ef``: LangGraph's default async durability
        may store a task's writes before the checkpoint they are for). So the latest checkpoint
        and its writes are one record, and so is the parent of a new checkpoint with its writes.
        ``base is None``: ``head`` carries writes stored before ``checkpoint_id`` was put."""
        if head is None or head.id is None or head.items is None or not isinstance(head.st, dict):
            return None
        md, st = head.md or {}, head.st
        if st.get("v") != 2:
            return None
        try:
            if md.get("lg") == "C" and md.get("id") == checkpoint_id:
                wd = list(st.get("w", ()))
                return {"base": "c", "items": head.items[:st["meta"] + 1],
                        "cst": {k: v for k, v in st.items() if k not in ("w", "eo")},
                        "pre": st.get("x") or not st.get("k"),
                        "rows": self._rows(head.items, wd), "wdesc": wd, "stale": False}
            if md.get("lg") == "W" and st.get("cf") == checkpoint_id:
                wd = list(st["w"])
                return {"base": "c", "items": head.items[:st["cn"]], "cst": st["c"],
                        "pre": st.get("x") or not st["c"].get("k"),
                        "rows": self._rows(head.items, wd), "wdesc": wd, "stale": st.get("h")}
            if md.get("lg") == "W" and st.get("ef") == checkpoint_id:
                wd = list(st["e"])
            elif checkpoint_id in (st.get("eo") or {}):
                wd = list(st["eo"][checkpoint_id])
            else:
                return None
            return {"base": None, "items": None, "cst": None, "pre": None,
                    "rows": self._rows(head.items, wd), "wdesc": wd, "stale": None}
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None
        return None

    def _head_view(self, head: _Head | None) -> tuple[str, dict] | None:
        """``(checkpoint id, view)`` of the checkpoint the run's newest record carries whole
        (the latest checkpoint, :meth:`_covers` with ``base == "c"``), or None."""
        if head is None or head.id is None or not isinstance(head.st, dict):
            return None
        md, st = head.md or {}, head.st
        cid = md.get("id") if md.get("lg") == "C" else st.get("cf") if md.get("lg") == "W" else None
        if not isinstance(cid, str):
            return None
        view = self._covers(head, cid)
        return (cid, view) if view is not None and view["base"] == "c" else None

    @staticmethod
    def _rows(items: list, desc: list) -> list:
        """The writes ``desc`` describes: ``(task, path, channel, idx, kind, items)``, oldest
        first (each descriptor ``[task, path, channel, idx, kind, start, count]`` names
        ``items[start:start + count]``)."""
        out = []
        for task, path, ch, idx, kind, start, count in desc:
            its = items[start:start + count]
            if len(its) != count:
                raise ValueError(f"{count} items expected at {start}, found {len(its)}")
            out.append((task, path, ch, idx, kind, its))
        return out

    def _rows_v1(self, items: list, st: dict, md: dict) -> list:
        off = st["off"]
        task, path = md.get("task", ""), md.get("path", "")
        out = []
        for ch, idx, kind, start, count in st["w"]:
            if kind == "b":
                its = [st["blobs"][start]]
            else:
                its = items[off + start:off + start + count]
                if len(its) != count:
                    raise ValueError(f"{count} messages expected at {off + start}, found {len(its)}")
            out.append((task, path, ch, idx, "m" if kind == "ml" else kind, its))
        return out

    @staticmethod
    def _dedup(rows: list) -> list:
        """One checkpoint's writes, deduplicated per (task, index) (first kept; special negative
        indexes: last kept), in ``writes_sort_key`` order."""
        got: dict = {}
        for row in rows:
            task, path, _ch, idx, _k, _its = row
            key = (task, idx)
            if key in got and idx >= 0:
                continue
            got[key] = row
        return sorted(got.values(), key=lambda r: writes_sort_key(r[1], r[0], r[3]))

    def _pending(self, rows: list) -> list[PendingWrite]:
        return [(task, ch, self._dec_value(kind, its)) for task, _p, ch, _i, kind, its in self._dedup(rows)]

    def _history_for(self, head: _Head, parent: str | None, values: dict, md: dict) -> dict | None:
        """Per DeltaChannel channel that the new checkpoint does not hold: its history section
        (items), computed from the parent's record as the run's newest record ``head`` carries
        it. Channels whose parent history is unknown here are left out (readers then walk)."""
        counters = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
        need = [ch for ch in (counters if isinstance(counters, dict) else ()) if ch not in values]
        if not need:
            return None
        if parent is None:
            return {ch: [] for ch in need}
        view = self._covers(head, parent)
        if view is None or view["base"] != "c" or view["pre"] or view["stale"]:
            return None
        items, cst = view["items"], view["cst"]
        lay = {row[0]: row for row in cst["layout"]}
        phist = cst.get("hist") or {}
        pmeta = items[cst["meta"]]["lgmeta"]
        pending = self._dedup(view["rows"])
        out = {}
        for ch in need:
            ws = []
            for task, _p, c, _i, kind, its in pending:
                if c == ch:
                    ws.append({"lgw": [task, kind, len(its)]})
                    ws.extend(its)
            if ch in lay:
                _c, kind, start, count = lay[ch]
                out[ch] = [{"lgs": [kind, count]}] + items[start:start + count] + ws
            elif ch in phist:
                start, count = phist[ch]
                out[ch] = items[start:start + count] + ws
            elif pmeta.get("parent") is None:
                out[ch] = ws
        return out

    def _parse_hist(self, items: list, start: int, count: int, ch: str) -> DeltaChannelHistory:
        sec = items[start:start + count]
        if len(sec) != count:
            raise ValueError(f"history section of {count} items at {start}, found {len(sec)}")
        out: DeltaChannelHistory = {"writes": []}
        i = 0
        while i < len(sec):
            mark = sec[i]
            if "lgs" in mark and i == 0:
                kind, n = mark["lgs"]
                out["seed"] = self._dec_value(kind, sec[i + 1:i + 1 + n])
            else:
                task, kind, n = mark["lgw"]
                out["writes"].append((task, ch, self._dec_value(kind, sec[i + 1:i + 1 + n])))
            if i + 1 + n > len(sec):
                raise ValueError("history section truncated")
            i += 1 + n
        return out

    def _json_or_blob(self, value, where: str = "") -> dict:
        """``{"json": value}`` when ``value`` is exact JSON that comes back equal (compresses far
        better than serde bytes in base64), else a serde blob."""
        try:
            validate(value, "value")
            if orjson.loads(orjson.dumps(value)) == value:
                return {"json": value}
        except (InvalidMessageError, TypeError, ValueError):
            pass
        return self._blob(value, where)

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
        if st.get("v") == 2:
            skeleton = self._unjson(items[st["meta"]]["lgmeta"]["cp"])
        else:
            skeleton = self._unjson(st["cp"])
        values: dict = {}
        for ch, kind, start, count in st["layout"]:
            its = items[start:start + count]
            if len(its) != count:
                raise ValueError(f"channel {ch!r}: {count} items expected at {start}, found {len(its)}")
            values[ch] = self._dec_value("m" if kind == "m" else kind, its)
        out = dict(skeleton)
        out["id"] = checkpoint_id
        out["channel_values"] = values
        return out

    def _md_field(self, md: dict) -> dict:
        try:
            validate(md, "metadata")
            return {"md": md}
        except InvalidMessageError:
            return {"mdb": self._blob(md, "checkpoint metadata")}

    def _md_of(self, rec: _Rec) -> dict:
        return self._md_from(rec.md)

    def _md_from(self, d: dict) -> dict:
        if "md" in d:
            return d["md"]
        if "mdb" in d:
            return self._unblob(d["mdb"])
        return {}

    # ------------------------------------------------------------------------------------------
    # reading a run

    def _index(self, run: str, limit: int | None = None) -> _RunIndex:
        return _RunIndex.of(self.manager.list(run, limit=limit))

    def _window(self, run: str, checkpoint_id: str | None) -> tuple[_RunIndex, _Rec | None]:
        """The run's newest records down to (and past) the wanted checkpoint: enough to find it
        and every writes record stored after it (the writes stored before it are carried by
        its record, unless it is marked ``"x"``: then :meth:`get_tuple` lists the whole run)."""
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

    def _rec_rows(self, run: str, r: _Rec, reader=None) -> list:
        items, st = self._record(run, r.sid, r.seq, reader)
        try:
            if isinstance(st, dict) and st.get("v") == 2:
                for_ = r.md.get("for")
                if st.get("cf") == for_:
                    return self._rows(items, st["w"])
                if st.get("ef") == for_:
                    return self._rows(items, st["e"])
                return []
            return self._rows_v1(items, st, r.md)
        except SnapstoreError:
            raise
        except Exception as e:
            raise IntegrityError(f"run {run!r} record {r.sid!r} (log position {r.seq})",
                                 f"not a valid LangGraph writes record: {type(e).__name__}: {e}") from e

    def _writes_of(self, run: str, recs: list, own: list = (), reader=None) -> list[PendingWrite]:
        """Pending writes of one checkpoint from its writes records (oldest first) and ``own``
        (the rows its checkpoint record carries). A format-2 writes record carries every write
        stored before it for its checkpoint (on that chain), so only the newest of each chain is
        read."""
        rows: list = list(own)
        for r in self._chain_heads(recs):
            rows.extend(self._rec_rows(run, r, reader))
        try:
            return self._pending(rows)
        except SnapstoreError:
            raise
        except Exception as e:
            raise IntegrityError(f"run {run!r} writes of {recs[0].md.get('for') if recs else '?'!r}",
                                 f"not valid LangGraph writes: {type(e).__name__}: {e}") from e

    @staticmethod
    def _chain_heads(recs: list) -> list:
        """Of one checkpoint's writes records (oldest first), those to read: every format-1
        record, and of format-2 records each one not carried by the next (``md["acc"]``: the position of the
        record it was built on, whose writes it carries)."""
        carried = {r.md.get("acc") for r in recs if r.md.get("lg") == "W" and isinstance(r.md.get("acc"), int)}
        return [r for r in recs if r.seq not in carried]

    def _own_rows(self, run: str, rec: _Rec, items: list, st) -> list:
        """The writes a format-2 checkpoint record carries for its checkpoint (those stored
        before it was put, and, for an id put again, those of the earlier put)."""
        if rec.md.get("lg") != "C" or not isinstance(st, dict) or st.get("v") != 2 or not st.get("w"):
            return []
        try:
            return self._rows(items, st["w"])
        except Exception as e:
            raise IntegrityError(f"run {run!r} record {rec.sid!r} (log position {rec.seq})",
                                 f"not a valid LangGraph checkpoint record: {type(e).__name__}: {e}") from e

    def _complete(self, run: str, rec: _Rec) -> bool:
        """True if checkpoint record ``rec`` carries every write stored for its checkpoint before
        it (so the records after it hold the rest): a format-2 record not marked ``"x"``."""
        _items, st = self._record(run, rec.sid, rec.seq)
        return (rec.md.get("lg") == "C" and isinstance(st, dict) and st.get("v") == 2 and st.get("k") == 1
                and not st.get("x"))

    def _tuple(self, run: str, thread_id: str, ns: str, rec: _Rec, wrecs: list, reader=None) -> CheckpointTuple:
        items, st = self._record(run, rec.sid, rec.seq, reader)
        own = self._own_rows(run, rec, items, st)
        parent = rec.md.get("parent")
        conf = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": rec.md["id"]}}
        return CheckpointTuple(
            config=conf,
            checkpoint=self._decode_checkpoint(items, st, rec.md["id"], run),
            metadata=self._md_of(rec),
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=self._writes_of(run, wrecs, own, reader),
        )

    def _fresh_head(self, run: str) -> _Head:
        """The run's newest record as stored now: one LIST (limit 1) and one GET when this saver
        already holds it, else the record read whole (``CheckpointManager.latest``: LIST, GET,
        one parallel wave of its packs)."""
        h = self._heads.get(run)
        if h is not None and h.items is not None:
            got = self.manager.head(run)
            if got is None:
                h = _Head(None, [], None, {}, None)
                self._heads[run] = h
                return h
            if got.id == h.id and got.seq == h.seq:
                return h
        return self._load_head(run)

    def _load_head(self, run: str) -> _Head:
        cp = self.manager.latest(run)
        if cp is None:
            h = _Head(None, [], None, {}, None)
        else:
            h = _Head(cp.id, cp.messages, cp.session_state, cp.metadata if isinstance(cp.metadata, dict) else {},
                      cp.seq)
            with self._lock:
                self._records[(run, cp.id, cp.seq)] = (cp.messages, cp.session_state)
        self._heads[run] = h
        return h

    def _latest_from_head(self, run: str, thread_id: str, ns: str, h: _Head) -> CheckpointTuple | None:
        """The latest checkpoint with its pending writes from the run's newest record alone (plus
        the record of writes stored before their checkpoint, if any), or None when that record
        does not carry the latest checkpoint (an older saver's record, writes for another
        checkpoint): then the run is listed."""
        hv = self._head_view(h)
        if hv is None:
            return None
        cid, view = hv
        if view["pre"]:
            return None
        try:
            rows = view["rows"]
            meta = view["items"][view["cst"]["meta"]]["lgmeta"]
            checkpoint = self._decode_checkpoint(view["items"], view["cst"], cid, run)
            pending = self._pending(rows)
            metadata = self._md_from(meta)
        except SnapstoreError:
            raise
        except Exception as e:
            raise IntegrityError(f"run {run!r} record {h.id!r} (log position {h.seq})",
                                 f"not a valid LangGraph record: {type(e).__name__}: {e}") from e
        parent = meta.get("parent")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=checkpoint, metadata=metadata,
            parent_config=({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}}
                           if parent else None),
            pending_writes=pending)

    def _registry(self, thread_id: str) -> tuple[str | None, set[str]] | None:
        """``(head id, namespaces)`` of the thread's registry run as its newest record holds
        them (each record holds them all, so retention that keeps only the newest records of a
        run loses none), or None when the thread has no registry (a thread written before
        registries, or none at all)."""
        cp = self.manager.latest(ns_run_id_for(thread_id))
        if cp is None:
            return None
        st = cp.session_state
        got = st.get("lgns") if isinstance(st, dict) else None
        if not isinstance(got, list) or not all(isinstance(x, str) for x in got):
            raise IntegrityError(f"run {ns_run_id_for(thread_id)!r} record {cp.id!r}",
                                 "not a LangGraph namespace registry record (session state needs \"lgns\": [str])")
        return cp.id, set(got)

    def _namespaces(self, thread_id: str) -> set[str] | None:
        """The namespaces the thread's registry lists (every namespace a saver of this version
        created in it), or None without a registry. Reads the registry's newest record: costs
        what the thread holds, not what the repository holds."""
        reg = self._registry(thread_id)
        return None if reg is None else reg[1]

    def _register(self, run: str) -> None:
        """Make sure the thread's registry lists ``run``'s namespace before its first record is
        saved (so a crash cannot leave a namespace that listing the thread misses). Each
        registry record holds every namespace of the thread (session state ``{"lgns": [...]}``;
        metadata ``{"lgns": count}``). A new registry also registers the namespaces the thread
        already has (written before registries), found by listing every run once, unless
        ``run`` is the root namespace of a thread whose root run is empty. One read of the
        registry's newest record when registered already; a save (2 PUTs) more when not."""
        p = parse_run_id(run)
        if p is None:
            return
        thread_id, ns = p
        reg = ns_run_id_for(thread_id)
        for attempt in range(self.SAVE_ATTEMPTS):
            got = self._registry(thread_id)
            head, have = got if got is not None else (None, set())
            if ns in have:
                return
            add = have | {ns}
            if got is None and (ns != "" or self.manager.head(run_id_for(thread_id, "")) is not None):
                # a new registry: the thread's namespaces of an earlier version are registered too
                add.update(n for _r, _t, n in self._scan_runs(thread_id))
            try:
                self.manager.save(reg, [], metadata={"lgns": len(add)}, session_state={"lgns": sorted(add)},
                                  parent_id=head, expect_head=head or EMPTY_RUN)
                return
            except (ConflictError, CheckpointNotFound):
                if attempt == self.SAVE_ATTEMPTS - 1:
                    raise

    def _runs(self, thread_id: str | None = None) -> list[tuple[str, str, str]]:
        """``(run, thread_id, ns)`` of this saver's runs: of one thread (the namespaces its
        registry lists, some possibly empty; without a registry every live run of the
        repository is listed), or every live run."""
        if thread_id is not None:
            nss = self._namespaces(str(thread_id))
            if nss is not None:
                return [(run_id_for(str(thread_id), n), str(thread_id), n) for n in sorted(nss)]
        return self._scan_runs(thread_id)

    def _scan_runs(self, thread_id: str | None = None) -> list[tuple[str, str, str]]:
        """``(run, thread_id, ns)`` of this saver's live runs (of one thread, or all), from a
        listing of every run of the repository."""
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
        ``checkpoint_ns`` (default ``""``), with its pending writes; None if there is none.

        The latest (and a ``checkpoint_id`` naming it) comes from the run's newest record alone,
        which carries the latest checkpoint and its writes: one LIST (limit 1) and one GET when
        this saver holds that record already, else LIST, GET and one parallel wave of packs.
        Other checkpoints: the newest records are listed down to the one wanted."""
        c, thread_id, ns = _target(config, "get_tuple")
        run = run_id_for(thread_id, ns)
        cid = get_checkpoint_id(config)
        with self._rlock(run):
            h = self._fresh_head(run)
            if h.id is None:
                return None
            tup = self._latest_from_head(run, thread_id, ns, h)
            if tup is not None and (cid is None or cid == tup.config["configurable"]["checkpoint_id"]):
                return tup
            ix, target = self._window(run, cid)
            if target is None:
                return None
            try:
                if not self._complete(run, target):
                    # writes for it may precede it by any number of records (async durability,
                    # an older layout): the whole run's
                    ix = self._index(run)
                    target = ix.cps.get(target.md["id"])
                    if target is None:
                        return None
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
            rd = self.manager.read_run(run)  # one listing; each record's data without its manifest GET
            ix = _RunIndex.of(rd.summaries)
            for cid, rec in ix.cps.items():
                if only and cid != only:
                    continue
                if before_id and cid >= before_id:
                    continue
                if filter:
                    md = self._md_of(rec)
                    if not all(md.get(k) == v for k, v in filter.items()):
                        continue
                rows.append((cid, run, thread_id, ns, rec, ix.writes.get(cid, []), rd))
        rows.sort(key=lambda r: r[0], reverse=True)
        if limit is not None:
            rows = rows[:limit]
        for cid, run, thread_id, ns, rec, wrecs, rd in rows:
            try:
                yield self._tuple(run, thread_id, ns, rec, wrecs, rd)
            except CheckpointNotFound:
                continue

    # ------------------------------------------------------------------------------------------
    # BaseCheckpointSaver: writes

    def _head(self, run: str, items: bool = True) -> _Head:
        h = self._heads.get(run)
        if h is not None and h.items is not None:
            return h
        return self._load_head(run)

    SAVE_ATTEMPTS = 8
    """Times a put or put_writes is built again on the run's new newest record after another
    writer (another saver, process or machine) moved it, before ConflictError is raised."""

    def _put_record(self, run: str, build) -> str:
        """Save the record ``build(head)`` returns (``(items, session state, metadata field,
        step)``) on top of the run's newest record, as a compare-and-swap on it: a record is built
        from what the newest one carries, so if another writer saved meanwhile it is built again
        on the new one."""
        for attempt in range(self.SAVE_ATTEMPTS):
            head = self._head(run)
            items, state, field_md, step = build(head)
            if head.id is None:
                self._register(run)  # a new (or deleted) run: listed in the thread's registry first
            try:
                sid = self.manager.save(run, items, parent_id=head.id, step=step, metadata=field_md,
                                        session_state=state, expect_head=head.id or EMPTY_RUN)
            except (ConflictError, CheckpointNotFound):
                if attempt == self.SAVE_ATTEMPTS - 1:
                    raise
                self._forget(run)  # another writer moved the run: build again on its newest record
                continue
            seq = _seq_of(sid)
            self._heads[run] = _Head(sid, items, state, field_md, seq)
            with self._lock:
                self._records[(run, sid, seq)] = (items, state)
            return sid
        raise AssertionError("unreachable")

    def _record_of(self, run: str, head: _Head, checkpoint_id: str) -> dict | None:
        """Where checkpoint ``checkpoint_id``'s record is and what retention must keep with it:
        ``{"pos": its log position, "from": its own ``NEEDS_KEY`` position or None, "held": the
        channels it holds, "root": it has no parent, "x": it may miss writes stored before it}``,
        from the run's newest record ``head`` when that carries it, else from one listing of
        the run (a put whose parent is an older checkpoint: time travel); None if not found."""
        md, st = head.md or {}, head.st if isinstance(head.st, dict) else {}
        try:
            if md.get("lg") == "C" and md.get("id") == checkpoint_id and st.get("v") == 2 and head.seq is not None:
                n = md.get(NEEDS_KEY)
                return {"pos": head.seq, "from": n.get("from") if isinstance(n, dict) else None,
                        "held": set(md.get("chs") or ()), "root": md.get("parent") is None,
                        "x": bool(st.get("x") or not st.get("k") or (st.get("w") and "wch" not in md))}
            if (md.get("lg") == "W" and st.get("v") == 2 and st.get("cf") == checkpoint_id
                    and isinstance(md.get("cpos"), int)):
                c = st["c"]
                meta = head.items[c["meta"]]["lgmeta"]
                return {"pos": md["cpos"], "from": md.get("cfrom"), "held": {row[0] for row in c["layout"]},
                        "root": meta.get("parent") is None, "x": bool(st.get("x") or not c.get("k"))}
        except (KeyError, TypeError, IndexError, AttributeError):
            pass
        a = self._index(run).cps.get(checkpoint_id)
        if a is None:
            return None
        _items, ast = self._record(run, a.sid, a.seq)
        n = a.md.get(NEEDS_KEY)
        x = not (isinstance(ast, dict) and ast.get("v") == 2 and ast.get("k") == 1 and not ast.get("x")
                 and (not ast.get("w") or "wch" in a.md))
        return {"pos": a.seq, "from": n.get("from") if isinstance(n, dict) else None,
                "held": set(a.md.get("chs") or ()), "root": a.md.get("parent") is None, "x": x}

    def _needs_from(self, run: str, head: _Head, parent: str | None, md: dict, chs: list) -> int | None:
        """The log position from which a new checkpoint record needs every record of the run
        (written as its ``NEEDS_KEY`` metadata, so that the core's retention keeps them), or None
        when it needs none: a checkpoint whose DeltaChannel channels (its metadata's
        ``counters_since_delta_snapshot``) it does not hold rebuilds from its ancestors back to
        the nearest one holding each (a ``_DeltaSnapshot``) and their writes: from the parent's
        position, or, when the parent lacks one of those channels, from where the parent's own
        chain starts. Conservative where unsure: 0 (every older record) for a parent of an
        earlier release or one that may miss writes stored before it."""
        counters = md.get("counters_since_delta_snapshot") if isinstance(md, dict) else None
        need = {ch for ch in (counters if isinstance(counters, dict) else ()) if ch not in chs}
        if not need or parent is None:
            return None
        p = self._record_of(run, head, parent)
        if p is None:
            return 0  # the parent's record is gone: keep what is left of the chain
        if p["x"]:
            return 0  # writes for it may sit in older records
        if need <= p["held"] or p["root"]:
            return p["pos"]
        return min(p["pos"], p["from"]) if isinstance(p["from"], int) else 0

    def _carried_needs(self, head: _Head) -> dict:
        """Metadata of a writes record built on ``head``: the carried checkpoint's record position
        (``cpos``), its own ``NEEDS_KEY`` position (``cfrom``) and, as ``NEEDS_KEY``, from where
        this record needs the run's records (the checkpoint's record and its chain: the record is
        listed as that checkpoint only while its checkpoint record is live)."""
        md = head.md or {}
        if md.get("lg") == "W":
            if not isinstance(md.get("cpos"), int):
                return {}
            pos, frm = md["cpos"], md.get("cfrom")
        elif md.get("lg") == "C" and head.seq is not None:
            n = md.get(NEEDS_KEY)
            pos, frm = head.seq, (n.get("from") if isinstance(n, dict) else None)
            st = head.st if isinstance(head.st, dict) else {}
            if st.get("x") or not st.get("k") or (st.get("w") and "wch" not in md):
                frm = 0  # writes for it may sit in older records only
        else:
            return {}
        out = {"cpos": pos, NEEDS_KEY: {"from": min(pos, frm) if isinstance(frm, int) else pos, "by": DELTA_CHAIN}}
        if isinstance(frm, int):
            out["cfrom"] = frm
        return out

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store ``checkpoint`` (its full ``channel_values``) as a child of ``config``'s checkpoint.

        One snapstore save (a pack and a manifest: 2 PUTs). A checkpoint id put again replaces
        the earlier put of it (the newest record of an id is the checkpoint).

        Returns:
            ``{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}`` of the stored one.
        Raises:
            StoreError: the store failed (nothing visible was half-written).
            ConflictError: other writers kept moving the thread (``SAVE_ATTEMPTS`` times).
        """
        c, thread_id, ns = _target(config, "put")
        run = run_id_for(thread_id, ns)
        cid = checkpoint["id"]
        md = get_checkpoint_metadata(config, metadata)
        parent = c.get("checkpoint_id")

        def build(head):
            items, state, chs = self._encode_checkpoint(run, checkpoint, md, parent, head)
            field_md = {"lg": "C", "id": cid, "parent": parent, "chs": chs, **self._md_field(md)}
            if state.get("w"):
                field_md["wch"] = sorted({row[2] for row in state["w"]})  # channels of the writes it carries
            need = self._needs_from(run, head, parent, md, chs)
            if need is not None:
                field_md[NEEDS_KEY] = {"from": need, "by": DELTA_CHAIN}
            # LangGraph numbers the input checkpoint -1; snapstore's step is a non-negative int (the
            # exact value stays in the metadata)
            step = md.get("step") if isinstance(md.get("step"), int) and md.get("step") >= 0 else None
            return items, state, field_md, step

        with self._rlock(run):
            self._put_record(run, build)
            ids = self._put_ids.setdefault(run, {})
            ids[cid] = None
            while len(ids) > self.PUT_IDS:
                del ids[next(iter(ids))]
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes for ``config``'s checkpoint (idempotent per task and index).

        Messages written (a message, or a non-empty list of messages) are stored one per chunk;
        other values through the serde. Writes may be stored before their checkpoint is. One
        snapstore save (2 PUTs). When the run's newest record is the checkpoint (or a writes
        record carrying it), the new record carries the checkpoint and all its writes so far,
        so the latest checkpoint is always read from one record.
        """
        c, thread_id, ns = _target(config, "put_writes", need_id=True)
        cid = c["checkpoint_id"]
        run = run_id_for(thread_id, ns)
        with self._rlock(run):
            seen = self._seen.setdefault((run, cid), set())
            done: list = []

            def build(head):
                view = self._covers(head, cid)
                known = set(seen)
                if view is not None:
                    known.update((r[0], r[3]) for r in view["rows"])
                todo = []
                for idx, (ch, v) in enumerate(writes):
                    widx = WRITES_IDX_MAP.get(ch, idx)
                    if widx >= 0 and (task_id, widx) in known:
                        continue
                    todo.append((widx, ch, v))
                done[:] = todo
                if not todo:
                    return None
                cache = self._enc.setdefault(run, {})
                hv = self._head_view(head)
                v2 = isinstance(head.st, dict) and head.st.get("v") == 2 and head.items is not None
                items = list(head.items) if v2 else []
                state: dict = {"v": 2}
                if hv is not None:
                    pcid, pv = hv
                    state.update(cf=pcid, c=pv["cst"], cn=len(pv["items"]), w=list(pv["wdesc"]))
                    if pv["pre"]:
                        state["x"] = 1
                    if pv["stale"]:
                        state["h"] = 1
                # every write set the newest record carries for checkpoints not put yet goes on
                # with this record (LangGraph's async durability stores a task's writes before the
                # checkpoint they are for, even before that checkpoint's parent is put)
                sets = self._early_sets(head, run) if v2 else {}
                own = sets.pop(cid, None)
                latest = hv[0] if hv is not None else None
                if latest is not None:
                    sets = {k: d for k, d in sets.items() if k >= latest}
                mine = v2 and (head.md or {}).get("lg") == "W" and head.md.get("for") == cid
                if hv is not None and hv[0] == cid:
                    # writes for the latest checkpoint: carried on with it
                    desc = state["w"]
                    carried = mine
                else:
                    carried = mine and own is not None and head.st.get("ef") == cid
                    if hv is not None and (cid in self._put_ids.get(run, ()) or cid < hv[0]):
                        # writes for a checkpoint put before the latest (LangGraph's async
                        # durability may store a task's writes after the next checkpoint):
                        # the history sections built since may miss them, so they are not used
                        state["h"] = 1
                    state.update(ef=cid, e=list(own or ()))
                    desc = state["e"]
                if sets:
                    state["eo"] = sets  # descriptors into the items copied from the newest record
                chs = {row[2] for row in desc}
                for widx, ch, v in todo:
                    kind, its = self._enc_value(v, cache, None, f"write to channel {ch!r} (task {task_id})")
                    desc.append([task_id, task_path, ch, widx, kind, len(items), len(its)])
                    items.extend(its)
                    chs.add(ch)
                field_md = {"lg": "W", "for": cid, "chs": sorted(chs)}  # tasks and paths: in the descriptors
                if hv is not None:
                    field_md.update(self._carried_needs(head))
                if carried:
                    field_md["acc"] = head.seq
                return items, state, field_md, None

            def build_or_skip(head):
                got = build(head)
                if got is None:
                    raise _NothingToWrite
                return got

            try:
                self._put_record(run, build_or_skip)
            except _NothingToWrite:
                return
            seen.update((task_id, w) for w, _, _ in done if w >= 0)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread, in every namespace (a tombstone per
        namespace run; ``gc()`` reclaims the data). A missing thread is no error."""
        for run, _t, _ns in self._runs(thread_id):
            with self._rlock(run):
                try:
                    self._retry_moved(run, lambda: self._delete_run(run))
                finally:
                    self._forget(run)
        reg = ns_run_id_for(str(thread_id))
        self._retry_moved(reg, lambda: self._delete_run(reg))  # last: its runs are gone

    def _delete_run(self, run: str) -> None:
        got = self.manager.head(run)
        if got is None:
            return
        try:
            self.manager.delete(run, expect_head=got.id)
        except RunNotFound:
            pass

    def _retry_moved(self, run: str, op):
        """Run ``op()`` (which reads the run's head and acts on it with an explicit
        ``expect_head``), again when another writer moved the run meanwhile, at most
        :attr:`SAVE_ATTEMPTS` times.

        The saver is one caller per LangGraph thread whatever OS thread or asyncio task calls it
        (LangGraph puts from its executor threads): operations that move a run's head pass the
        head they just read as ``expect_head`` instead of relying on what the calling context
        saw (docs/format.md §20), so they conflict only with a writer that moved the run between
        that read and the operation, and are then decided again on the new head."""
        for attempt in range(self.SAVE_ATTEMPTS):
            try:
                return op()
            except ConflictError:
                if attempt == self.SAVE_ATTEMPTS - 1:
                    raise
                self._forget(run)
        raise AssertionError("unreachable")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata ``run_id`` is one of ``run_ids``, with their
        writes, in every thread (lists every LangGraph run of the repository)."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        for run, _t, _ns in self._runs():
            with self._rlock(run):
                def once():
                    ix = self._index(run)
                    doomed = []
                    for cid, rec in ix.cps.items():
                        if self._md_of(rec).get("run_id") in wanted:
                            doomed.extend(r.sid for r in ix.all_of(cid))
                    if doomed:
                        self._forget(run)
                        self.manager.delete_many(run, doomed, expect_head=ix.head)
                self._retry_moved(run, once)

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
                self._register(dst)
                if latest is not None:
                    base = self.manager.fork(run, latest.sid, dst).id
                self._forget(dst)
                moved: dict = {}  # source position -> (target id, target position)
                prev = base
                for r in reversed(ix.recs):
                    cp = self.manager.get(run, r.sid)
                    st = cp.session_state
                    md = cp.metadata
                    if isinstance(md, dict) and isinstance(md.get("acc"), int):
                        md = dict(md)
                        if md["acc"] in moved:
                            md["acc"] = moved[md["acc"]][1]
                        else:
                            del md["acc"]
                    sid = self.manager.save(dst, cp.messages, step=cp.step, metadata=md, session_state=st,
                                            checkpoint_id=r.sid if r.md.get("lg") == "c" else None, parent_id=prev,
                                            expect_head=prev or EMPTY_RUN)
                    prev = sid
                    moved[r.seq] = (sid, self.manager.head(dst).seq if r.md.get("lg") == "c" else _seq_of(sid))
                if base is not None:
                    self.manager.delete_many(dst, [base], expect_head=prev)
                self._forget(dst)

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
                    self._retry_moved(run, lambda: self._prune_run(run))

    def _prune_run(self, run: str) -> None:
        """``prune(strategy="keep_latest")`` of one run, against the head it lists."""
        ix = self._index(run)
        latest = ix.latest()
        if latest is None:
            return
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
            self._forget(run)
            self.manager.delete_many(run, doomed, expect_head=ix.head)

    HEAD_FRESH_S = 1.0
    """A DeltaChannel history read within this many seconds of reading the run's newest record
    (``get_state`` reads the checkpoint, then its history) uses that record without asking the
    store again: it is the answer as of that read."""

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
        c, thread_id, ns = _target(config, "get_delta_channel_history")
        run = run_id_for(thread_id, ns)
        cid = get_checkpoint_id(config)
        with self._rlock(run):
            h = self._heads.get(run)
            if h is None or h.items is None or time.monotonic() - h.read_at > self.HEAD_FRESH_S:
                h = self._fresh_head(run)
            got = self._hist_from_head(run, h, cid, channels)
            if got is not None:
                return got
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

    def _hist_from_head(self, run: str, h: _Head, cid: str | None, channels: Sequence[str]) -> dict | None:
        hv = self._head_view(h)
        if hv is None or (cid is not None and cid != hv[0]):
            return None
        view = hv[1]
        if view["stale"]:
            return None
        hist = view["cst"].get("hist") or {}
        if not all(ch in hist for ch in channels):
            return None
        try:
            return {ch: self._parse_hist(view["items"], hist[ch][0], hist[ch][1], ch) for ch in channels}
        except SnapstoreError:
            raise
        except Exception as e:
            raise IntegrityError(f"run {run!r} record {h.id!r} (log position {h.seq})",
                                 f"not a valid LangGraph history section: {type(e).__name__}: {e}") from e

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
            # the writes its record carries (stored before it was put): the writes records that
            # held them may be gone (retention keeps a delta chain from the ancestor's record on)
            own = (remaining & set(a.md.get("wch") or ())) and self._own_rows(run, a, *self._record(run, a.sid, a.seq))
            if wrecs or own:
                for w in self._writes_of(run, ix.writes.get(cur, []), own or ()):
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
