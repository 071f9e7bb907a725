"""What a saver holds of each run, and reading a run's records: :class:`SaverState`.

One ``SaverState`` per :class:`~snapstore.integrations.langgraph.saver.SnapstoreSaver`; the
modules above take it as their first argument. It owns the locks, the run's newest record as last
read or written (:class:`~.layout.Head`), the record cache, the encoding caches and the ids put
lately, and reads through the manager's public API only (``head``, ``latest``, ``get``, ``list``).
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections import OrderedDict
from typing import Any

from ...errors import IntegrityError
from .layout import Head, Rec, RunIndex, carried_view
from .values import ValueCodec


class SaverState:
    """The state of one saver.

    Args:
        manager: the :class:`~snapstore.manager.facade.CheckpointManager` records are read from
            and saved to.
        codec: the :class:`~.values.ValueCodec` of the saver's serializer.
        limits: an object with the saver's tunables (``SAVE_ATTEMPTS``, ``EARLY_SETS``,
            ``PUT_IDS``, ``RECORD_CACHE``, ``HEAD_FRESH_S``, ``RUN_CACHE``, ``DELETE_BATCH``: see
            ``SnapstoreSaver``),
            read once here.

    Memory: the newest records held (``heads``), their encoding caches (``enc``) and the ids put
    lately (``put_ids``) are kept for the ``RUN_CACHE`` runs used last (:meth:`rlock` counts a
    use); an older run's go once nothing holds its lock, as :meth:`forget` drops them, so its
    next operation reads its newest record again, as a new saver would. The per-run locks live
    while someone holds them.
    """

    def __init__(self, manager, codec: ValueCodec, limits: Any):
        self.manager = manager
        self.codec = codec
        self.save_attempts: int = limits.SAVE_ATTEMPTS
        self.early_sets: int = limits.EARLY_SETS
        self.put_ids_max: int = limits.PUT_IDS
        self.record_cache: int = limits.RECORD_CACHE
        self.head_fresh_s: float = limits.HEAD_FRESH_S
        self.run_cache: int = getattr(limits, "RUN_CACHE", 1024)
        self.delete_batch: int = getattr(limits, "DELETE_BATCH", 16)
        self.cp_objects: int = getattr(limits, "CP_OBJECTS", 2)
        self.doomed: dict[str, list] = {}       # run -> folded pending-writes objects to delete (§4a)
        self.lock = threading.Lock()
        self._run_locks: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._used: OrderedDict = OrderedDict()  # run -> None, least recently used first
        self.heads: dict[str, Head] = {}
        self.enc: dict[str, dict] = {}          # run -> id(message) -> (message, item, message id)
        self.seen: dict[tuple, set] = {}        # (run, checkpoint id) -> {(task, idx)} written here
        self._records: OrderedDict = OrderedDict()  # (run, snapstore id, seq) -> (messages, session state)
        self.put_ids: dict[str, dict] = {}      # run -> checkpoint ids this saver put lately (oldest first)

    def with_codec(self, codec: ValueCodec) -> "SaverState":
        """A state sharing everything this one holds (locks, records, caches) but encoding with
        ``codec`` (a saver clone with another serializer: ``BaseCheckpointSaver.with_allowlist``)."""
        other = copy.copy(self)
        other.codec = codec
        return other

    def rlock(self, run: str) -> threading.RLock:
        """The re-entrant lock of ``run`` (one per run while anyone holds it, made on first use);
        a use of ``run``: past ``run_cache`` runs, the least recently used ones' held records go
        (:meth:`_evict`)."""
        with self.lock:
            lk = self._run_locks.get(run)
            if lk is None:
                lk = self._run_locks[run] = threading.RLock()
            self._used[run] = None
            self._used.move_to_end(run)
            over = len(self._used) > self.run_cache
        if over:
            self._evict()
        return lk

    def _evict(self) -> None:
        """Drop the held records, encoding caches and put ids of the least recently used runs
        beyond ``run_cache`` (down to three quarters of it), skipping runs whose lock is held."""
        with self.lock:
            n = len(self._used) - self.run_cache * 3 // 4
            victims = []
            for run in self._used:
                if len(victims) >= n:
                    break
                lk = self._run_locks.get(run)
                if lk is not None and lk._is_owned():  # this thread is inside an operation on it
                    continue
                if lk is None or lk.acquire(blocking=False):
                    victims.append((run, lk))
            for run, lk in victims:
                del self._used[run]
                self.heads.pop(run, None)
                self.enc.pop(run, None)
                self.put_ids.pop(run, None)
                if lk is not None:
                    lk.release()

    def forget(self, run: str) -> None:
        """Drop what is held of ``run``'s newest record (another writer moved it, or it was deleted)."""
        with self.lock:
            self.heads.pop(run, None)
            self.enc.pop(run, None)
            for k in [k for k in self.seen if k[0] == run]:
                del self.seen[k]

    def note_put(self, run: str, checkpoint_id: str) -> None:
        """Remember that this saver put ``checkpoint_id`` in ``run`` (the newest ``put_ids_max``)."""
        ids = self.put_ids.setdefault(run, {})
        ids[checkpoint_id] = None
        while len(ids) > self.put_ids_max:
            del ids[next(iter(ids))]

    def remember(self, run: str, sid: str, seq: int, items: list, st, trim: bool = True) -> None:
        """Cache record ``sid`` (log position ``seq``) as read or written: its items and state;
        ``trim``: drop the least recently used beyond ``record_cache``."""
        with self.lock:
            self._records[(run, sid, seq)] = (items, st)
            while trim and len(self._records) > self.record_cache:
                self._records.popitem(last=False)

    def record(self, run: str, sid: str, seq: int, reader=None) -> tuple[list, Any]:
        """``(message items, session state)`` of record ``sid`` at log position ``seq``; read
        through ``reader`` (a ``RunReader`` of the run: no manifest GET, the run's segments
        fetched once) when given, else with ``CheckpointManager.get``."""
        key = (run, sid, seq)  # a position is never reused: a re-put id gets a new key
        with self.lock:
            hit = self._records.get(key)
            if hit is not None:
                self._records.move_to_end(key)
                return hit
        cp = reader.get(sid) if reader is not None else self.manager.get(run, sid)
        got = (cp.messages, cp.session_state)
        self.remember(run, sid, seq, *got)
        return got

    def cp_record(self, run: str, rec: Rec, reader=None) -> tuple[list, Any]:
        """``(items, state)`` of checkpoint record ``rec`` as :func:`~.layout.decode_checkpoint`
        reads it: a record's own, the part of a record carrying it (``cxc``, layout §4b), or
        what a pending-checkpoint object holds (``rec.view``).

        Raises:
            IntegrityError: a carrying record does not hold it validly.
        """
        if rec.view is not None:
            return rec.view
        items, st = self.record(run, rec.sid, rec.seq, reader)
        if not rec.md.get("cxc"):
            return items, st
        try:
            return carried_view(items, st, rec.md["id"])
        except (KeyError, TypeError, ValueError) as e:
            raise IntegrityError(f"run {run!r} record {rec.sid!r} (log position {rec.seq})",
                                 f"does not carry checkpoint {rec.md.get('id')!r} validly: "
                                 f"{type(e).__name__}: {e}") from e

    def index(self, run: str, limit: int | None = None) -> RunIndex:
        """The run's records (its newest ``limit``, or all) as a :class:`~.layout.RunIndex`."""
        return RunIndex.of(self.manager.list(run, limit=limit))

    def window(self, run: str, checkpoint_id: str | None) -> tuple[RunIndex, Rec | None]:
        """The run's newest records down to (and past) the wanted checkpoint: enough to find it
        and every writes record stored after it (the writes stored before it are carried by
        its record, unless it is marked ``"x"``: then ``get_tuple`` lists the whole run)."""
        limit = 4
        while True:
            ix = self.index(run, limit)
            exhausted = ix.listed < limit
            target = ix.cps.get(checkpoint_id) if checkpoint_id else ix.latest()
            if target is not None:
                older = any(r.kind == "c" and r.seq < target.seq for r in ix.recs)
                if older or exhausted:
                    return ix, target
            elif exhausted:
                return ix, None
            limit *= 4

    def fresh_head(self, run: str) -> Head:
        """The run's newest record as stored now: one LIST (limit 1) and one GET when this saver
        already holds it, else the record read whole (``CheckpointManager.latest``: LIST, GET,
        one parallel wave of its packs)."""
        h = self.heads.get(run)
        if h is not None and h.items is not None:
            got = self.manager.head(run)
            if got is None:
                h = Head(None, [], None, {}, None)
                self.heads[run] = h
                return h
            if got.id == h.id and got.seq == h.seq:
                return h
        return self.load_head(run)

    def load_head(self, run: str) -> Head:
        """The run's newest record read whole (``CheckpointManager.latest``), now held."""
        cp = self.manager.latest(run)
        if cp is None:
            h = Head(None, [], None, {}, None)
        else:
            h = Head(cp.id, cp.messages, cp.session_state, cp.metadata if isinstance(cp.metadata, dict) else {},
                     cp.seq, parent=cp.parent_id)
            self.remember(run, cp.id, cp.seq, cp.messages, cp.session_state, trim=False)
        self.heads[run] = h
        return h

    def head(self, run: str) -> Head:
        """The run's newest record as held (read once when not held): what a new record is built on."""
        h = self.heads.get(run)
        if h is not None and h.items is not None:
            return h
        return self.load_head(run)
