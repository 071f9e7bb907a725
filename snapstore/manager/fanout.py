"""Per-run work over many runs at once: a bounded thread pool, each task in a copy of the
caller's context, outcomes in the runs' order.

Layer 4 helper (standard library and :mod:`snapstore.stores.base` only). A repository-wide
operation (``prune`` with no run) costs a handful of round trips per run, nearly all of them
one request after another; run one after another, 10,000 runs cost 10,000 times that. Here up to
:func:`width` runs are in flight at once.

Each task runs in its own :func:`contextvars.copy_context` of the calling context, so it acts
as the caller: what the caller last saw of each run (:mod:`snapstore.manager.callers`) is what
the task checks a head move against. A copied context cannot hand a view it changes back to the
caller, so tasks return what they saw and the caller records it (:func:`each_run` returns the
outcomes; the caller applies them in its own context).
"""

from __future__ import annotations

import contextvars
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable

from ..stores.base import max_concurrency

__all__ = ["RUN_SHARE", "Outcome", "each_run", "width"]

RUN_SHARE = 4
"""A run's task makes one request at a time but its bulk reads go through the repository's pool
(up to ``max_concurrency`` threads), so runs in flight are ``max_concurrency / RUN_SHARE``: on S3
(128 connections) 32 runs, on a directory or in memory (16) 4, on SQLite (4) one."""


def width(store: object, n_runs: int) -> int:
    """How many runs to work on at once on ``store`` (a count >= 1, at most ``n_runs``):
    :func:`snapstore.stores.base.max_concurrency` over :data:`RUN_SHARE`."""
    return max(1, min(n_runs, max_concurrency(store) // RUN_SHARE))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the work on one run gave.

    Attributes:
        run_id: the run.
        value: what the work returned (None when it raised).
        error: the exception it raised, or None.
    """

    run_id: str
    value: Any = None
    error: BaseException | None = None


def each_run(store: object, runs: list[str], work: Callable[[str], Any],
             on_done: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Call ``work(run_id)`` for every run of ``runs``, :func:`width` of them at once, each in a
    copy of the calling context.

    Once a run's work raises, no more runs are started; those in flight finish.

    Args:
        store: the repository's store (its ``max_concurrency`` sizes the pool).
        runs: run ids, in the order the outcomes are wanted.
        work: called with one run id, on a pool thread (in the calling thread when there is one run).
        on_done: called in the calling thread as runs finish, with (runs finished, runs in all);
            for progress lines.
    Returns:
        An :class:`Outcome` per run started, in the order of ``runs``: every run when none
        raised, otherwise a prefix that includes the first failed run in ``runs`` order (and may
        hold later ones that were in flight; runs never started are left out).
    Raises:
        Nothing of its own: errors of ``work`` are in the outcomes (KeyboardInterrupt and other
        BaseExceptions of the calling thread propagate after the runs in flight finished).
    """
    total = len(runs)
    if total == 0:
        return []
    if width(store, total) == 1 or total == 1:
        out = []
        for i, r in enumerate(runs):
            try:
                out.append(Outcome(r, work(r)))
            except Exception as e:  # noqa: BLE001 - handed to the caller in the outcome
                out.append(Outcome(r, None, e))
                break
            finally:
                if on_done is not None:
                    on_done(i + 1, total)
        return out
    got: dict[int, Outcome] = {}
    n = width(store, total)
    pool = ThreadPoolExecutor(n, thread_name_prefix="snapstore-each-run")
    try:
        pending: dict = {}
        nxt, failed, done = 0, False, 0
        while pending or (nxt < total and not failed):
            while nxt < total and not failed and len(pending) < n:
                ctx = contextvars.copy_context()  # one per task: a context is entered by one thread at a time
                pending[pool.submit(ctx.run, work, runs[nxt])] = nxt
                nxt += 1
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                i = pending.pop(f)
                e = f.exception()
                got[i] = Outcome(runs[i], None if e is not None else f.result(), e)
                failed = failed or e is not None
                done += 1
                if on_done is not None:
                    on_done(done, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [got[i] for i in sorted(got)]  # runs start in order and every one started finished
