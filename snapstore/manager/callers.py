"""What each calling context last saw of a run (the per-caller half of the conflict contract).

Layer 4 helper of :mod:`snapstore.manager.facade`; standard library only.

A :class:`~snapstore.manager.facade.CheckpointManager` shared by several threads or asyncio tasks keeps one
*shared* view of each run (the newest head it knows, caches that are pure functions of content:
message-list writer state, decoded packs, recent log records). What must not be shared is *what a
caller last saw*: that is what a save is checked against (docs/format.md §20). This module keeps
it per calling context:

- a **thread** has its own view (a thread starts with an empty context);
- an **asyncio task** has its own view; a task inherits a copy of what the code that created it
  had seen (as :mod:`contextvars` values are inherited), and its later reads and saves are its own;
- code run for a task in another thread through a copied context (``asyncio.to_thread``,
  ``loop.run_in_executor(None, contextvars.copy_context().run, fn)``) acts as that task;
- a context copied into another thread or task by other means (``contextvars.copy_context().run``
  in a thread pool worker) gets its own copy on first use.

Work items of a ``concurrent.futures`` pool that are not run in a copied context share their
worker thread's context, so they count as one caller (the pool does not copy contexts; nor does
``loop.run_in_executor``: there, tasks sharing a worker thread share its view).

A copied context cannot hand a view it creates back to the context it was copied from. So an
asyncio task whose *first* call of a manager goes through ``asyncio.to_thread`` must call
:func:`own_view` first (any direct call of a manager method in the task does the same); otherwise
each ``to_thread`` call starts without a view, and its save continues from the head like a caller
that never read the run.

The value of the context variable is a small holder object owned by one thread or task; a context
that finds a holder owned by someone else (it inherited the variable) copies it before the first
change, so views never leak between callers. Managers are held weakly.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field

__all__ = ["Seen", "seen", "set_seen", "own_view"]


@dataclass(frozen=True, slots=True)
class Seen:
    """What one caller last saw of a run.

    Attributes:
        checkpoint_id: the checkpoint the caller last saved or read (None: it saw the run empty).
        seq: the run's newest log position the caller last saw (None: the run had no log record).
        write_id: the write id of that newest log record (None when ``seq`` is None); it tells a
            record apart from one written at the same position after a deletion.
        at_head: False when ``checkpoint_id`` was read by id and was not the head (``get()`` of an
            older checkpoint): a save then needs ``parent_id=`` (or a fresh read of the head).
        known: ``seq``/``write_id`` are a head record the caller saw (False: it only read an older
            checkpoint by id and never saw the head; operations that move the head then act on
            the head they read, as for a caller without a view).
        wall: the caller's wall-clock time (``time.time()``, seconds) when it recorded this view;
            an older record put back in place of the one it saw was created before it
            (:mod:`snapstore.manager.replay`).
    """

    checkpoint_id: str | None
    seq: int | None
    write_id: str | None
    at_head: bool = True
    known: bool = True
    wall: float = field(default_factory=time.time, compare=False)

    def matches(self, checkpoint_id: str | None, seq: int | None, write_id: str | None) -> bool:
        """True if a save may continue: the run's head (checkpoint id, newest log position, its
        write id) is the head the caller last saw."""
        return self.at_head and self.known and (self.checkpoint_id, self.seq, self.write_id) == \
            (checkpoint_id, seq, write_id)

    def same_record(self, seq: int | None, write_id: str | None) -> bool:
        """True if the run's newest log record is the one the caller last saw (for rollback,
        delete and prune, which need not start from the head checkpoint)."""
        return self.known and (self.seq, self.write_id) == (seq, write_id)


class _Holder:
    __slots__ = ("owner", "views", "lock")

    def __init__(self, owner, views):
        self.owner = owner        # weakref to the owning asyncio task or thread
        self.views = views        # WeakKeyDictionary: manager -> {run id: Seen}
        self.lock = threading.Lock()


_CURRENT: contextvars.ContextVar[_Holder] = contextvars.ContextVar("snapstore_caller_views")


def _current_task():
    aio = sys.modules.get("asyncio")  # no asyncio imported: no task can be running
    if aio is None:
        return None
    loop = aio._get_running_loop()
    if loop is None:
        return None
    return aio.current_task(loop)


def _holder(for_write: bool) -> _Holder | None:
    """The calling context's holder; with ``for_write``, one it owns (copied or created)."""
    h = _CURRENT.get(None)
    task = _current_task()
    if h is not None:
        owner = h.owner()
        if task is not None:
            mine = owner is task
        else:
            # a worker thread running a task's copied context acts as that task
            mine = owner is threading.current_thread() or (owner is not None and not isinstance(owner, threading.Thread))
        if mine or not for_write:
            return h
    elif not for_write:
        return None
    me = task if task is not None else threading.current_thread()
    views = weakref.WeakKeyDictionary()
    if h is not None:
        with h.lock:
            for mgr, runs in list(h.views.items()):
                views[mgr] = dict(runs)
    nh = _Holder(weakref.ref(me), views)
    _CURRENT.set(nh)
    return nh


def own_view() -> None:
    """Give the calling context (thread or asyncio task) a view of its own now, inheriting what the
    context it was copied from had seen. Call it at the start of an asyncio task that reaches a
    manager only through ``asyncio.to_thread`` (see the module docstring); elsewhere it is implied."""
    _holder(True)


def seen(manager, run_id: str) -> Seen | None:
    """What the calling context last saw of ``run_id`` through ``manager`` (None: nothing)."""
    h = _holder(False)
    if h is None:
        return None
    with h.lock:
        runs = h.views.get(manager)
        return None if runs is None else runs.get(run_id)


def set_seen(manager, run_id: str, value: Seen | None) -> None:
    """Record (or, with None, forget) what the calling context saw of ``run_id`` through ``manager``."""
    if value is None and _CURRENT.get(None) is None:
        return
    h = _holder(True)
    with h.lock:
        runs = h.views.get(manager)
        if runs is None:
            if value is None:
                return
            runs = h.views[manager] = {}
        if value is None:
            runs.pop(run_id, None)
        else:
            runs[run_id] = value
