"""The manager's per-run memory, bounded: :class:`RunCache`, an LRU of
:class:`~snapstore.manager.views.RunView` objects with an entry limit and a byte budget.

Layer 4, below :mod:`snapstore.manager.state`. A view holds what a manager knows of one run: the
newest head it read or wrote and the caches built on it (the message list's writer state, recent
log records, the live list). Everything in a view is a cache: an evicted run costs a re-read of
its head (one LIST and one GET) and, on its next save, of its writer state; never correctness.
What a save is checked against is what the *caller* last saw (:mod:`snapstore.manager.callers`),
which is kept apart and never evicted; the head an evicted run's next operation acts on is read
from the store again (:func:`snapstore.manager.views.view`), exactly as a new manager would.

A view whose save has an unknown outcome (``pending``: a retry reuses its pack and write id) is
pinned: it is not evicted until that save is decided.

Sizes are estimates of what a view keeps alive (bytes), computed from counts in O(1) when a view
is stored or looked up: :func:`view_cost`. They count the caller's message objects a writer state
keeps for its identity fast path (``ListState.objs``), since after the caller dropped them only
the view holds them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ..errors import InvalidInputError
from ..repo.liststate import RECENT_RAW_KEEP

__all__ = ["RunCache", "view_cost", "DEFAULT_ENTRIES", "DEFAULT_BYTES", "RUNS_SEEN_MAX"]

DEFAULT_ENTRIES = 4096
"""Runs whose views a manager keeps by default (``CheckpointManager(run_cache_entries=...)``)."""

DEFAULT_BYTES = 64 << 20
"""Estimated bytes of views a manager keeps by default (``CheckpointManager(run_cache_bytes=...)``)."""

RUNS_SEEN_MAX = 100_000
"""Most run heads ``runs()`` remembers (:attr:`ManagerState.runs_seen`, about 300 bytes each); the
memo is cleared when full (the next ``runs()`` reads each head again)."""

VIEW_BASE = 2048
"""Bytes counted for a view itself: the RunView, its head Manifest (fields, segment list, ids)."""

PER_MESSAGE = 300
"""Bytes counted per message of a loaded writer state: its id, its ref, its entry in ``known``,
its slots in ``raws`` and ``objs``, and the container overhead of the caller's message object."""

PER_ENTRY = 120
"""Bytes counted per entry of the other maps a writer state keeps (pieces, nodes, the value tree's
pieces and nodes) and per live-list item."""


def view_cost(v, raw_keep: int = RECENT_RAW_KEEP * 131072) -> int:
    """Estimated bytes view ``v`` keeps alive.

    Args:
        v: a :class:`~snapstore.manager.views.RunView`.
        raw_keep: bytes of recent message JSON a writer state keeps at most (``RECENT_RAW_KEEP``
            times the repository's ``dict_bytes``).
    Returns:
        An estimate in bytes (an upper bound for typical JSON messages): :data:`VIEW_BASE`, plus
        for a writer state :data:`PER_MESSAGE` per message, its recent raw JSON (at most
        ``raw_keep``), the caller's message objects (their JSON size) and :data:`PER_ENTRY` per
        other map entry; plus recent log records' bytes, the live list and a pending save's pack.
    """
    c = VIEW_BASE
    ls = v.list_state
    if ls is not None:
        n = max(ls.count, len(ls.ids) if ls.ids is not None else 0)
        c += PER_MESSAGE * n + min(ls.size, raw_keep)
        if ls.objs is not None:
            c += ls.size
        c += PER_ENTRY * (len(ls.known_pieces) + len(ls.nodes))
        if ls.value is not None:
            c += PER_ENTRY * (len(ls.value.pieces) + len(ls.value.nodes))
    if v.live:
        c += PER_ENTRY * len(v.live)
    if v.log_cache:
        c += sum(len(b) + PER_ENTRY for b in v.log_cache.values())
    p = v.pending
    if p is not None:
        prep = p.prepared
        c += len(getattr(prep, "pack_bytes", None) or b"")
        c += sum(len(b) for b in (getattr(prep, "raw_blocks", None) or {}).values())
        if p.tier is not None:
            c += len(p.tier[1]) + sum(len(b) for b in (p.tier[2] or {}).values())
    return c


class RunCache:
    """Run id -> :class:`~snapstore.manager.views.RunView`, least recently used evicted first.

    Thread-safe. A dict-like subset: ``get``, ``[]``, ``[]=``, ``pop``, ``clear``, ``in``,
    ``len``. A lookup or store counts as a use and re-estimates that view's size (views change in
    place after they are looked up; the change is counted at the next use); either may evict
    other views until at most ``max_entries`` views are kept and their estimated sizes add up to
    at most ``max_bytes``. The view just used and pinned views (a save with an unknown outcome)
    are never evicted, so the bounds can be exceeded by those alone.

    Args:
        max_entries: most views kept (>= 1).
        max_bytes: budget for the views' estimated sizes (bytes, >= 0; :func:`view_cost`).
    Raises:
        InvalidInputError: a bound that is not an integer in range.
    """

    def __init__(self, max_entries: int = DEFAULT_ENTRIES, max_bytes: int = DEFAULT_BYTES):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidInputError(f"run_cache_entries must be a positive integer, got {max_entries!r}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidInputError(f"run_cache_bytes must be a non-negative integer (bytes), got {max_bytes!r}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.raw_keep = RECENT_RAW_KEEP * 131072
        """Bytes of recent JSON a writer state keeps at most (set from the repository's config)."""
        self.evictions = 0
        """Views evicted so far (a count, for tests and benchmarks)."""
        self._views: OrderedDict = OrderedDict()
        self._cost: dict = {}
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """The estimated bytes of the views kept (as of their last use)."""
        return self._bytes

    def _account(self, run_id: str, v) -> None:
        cost = view_cost(v, self.raw_keep)
        self._bytes += cost - self._cost.get(run_id, 0)
        self._cost[run_id] = cost

    def _evict(self, keep: str) -> None:
        if len(self._views) <= self.max_entries and self._bytes <= self.max_bytes:
            return
        n, nbytes, victims = len(self._views), self._bytes, []
        for rid, v in self._views.items():  # oldest first; stops once within bounds
            if n <= self.max_entries and nbytes <= self.max_bytes:
                break
            if rid == keep or v.pending is not None:
                continue
            victims.append(rid)
            n -= 1
            nbytes -= self._cost[rid]
        for rid in victims:
            del self._views[rid]
            self._bytes -= self._cost.pop(rid)
        self.evictions += len(victims)

    def get(self, run_id: str, default=None):
        """The view of ``run_id`` (a use: it becomes the most recently used), or ``default``."""
        with self._lock:
            v = self._views.get(run_id)
            if v is None:
                return default
            self._views.move_to_end(run_id)
            self._account(run_id, v)
            self._evict(run_id)
            return v

    def __getitem__(self, run_id: str):
        v = self.get(run_id)
        if v is None:
            raise KeyError(run_id)
        return v

    def __setitem__(self, run_id: str, v) -> None:
        with self._lock:
            self._views[run_id] = v
            self._views.move_to_end(run_id)
            self._account(run_id, v)
            self._evict(run_id)

    def pop(self, run_id: str, default=None):
        """Forget the view of ``run_id``; returns it, or ``default``."""
        with self._lock:
            v = self._views.pop(run_id, None)
            if v is None:
                return default
            self._bytes -= self._cost.pop(run_id)
            return v

    def clear(self) -> None:
        """Forget every view (the next operation on any run reads its head again)."""
        with self._lock:
            self._views.clear()
            self._cost.clear()
            self._bytes = 0

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._views

    def __len__(self) -> int:
        return len(self._views)
