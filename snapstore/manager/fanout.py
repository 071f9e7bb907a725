"""Per-run work over many runs at once: on the repository's thread pool, a bounded share of
it, each task in a copy of the caller's context, outcomes in the runs' order.

Layer 4 helper (standard library only). A repository-wide operation (``prune`` with no run)
costs a handful of round trips per run, nearly all of them one request after another; run one
after another, 10,000 runs cost 10,000 times that. Here up to :func:`width` runs are in flight
at once. They run on the repository's own pool (``repo.pool``, sized by the store's
``max_concurrency``), so every request of theirs, and of the parallel reads they hand to that
pool, is made on one of its threads: no more requests are in flight than the store's connection
pool holds (S3: no "connection pool is full" churn). The run tasks, which wait for those reads,
hold at most a :data:`RUN_SHARE` part of the pool's threads (shared by every :func:`each_run`
of the repository at once), so the reads always find a thread.

Each task runs in its own :func:`contextvars.copy_context` of the calling context, so it acts
as the caller: what the caller last saw of each run (:mod:`snapstore.manager.callers`) is what
the task checks a head move against. A copied context cannot hand a view it changes back to the
caller, so tasks return what they saw and the caller records it (:func:`each_run` returns the
outcomes; the caller applies them in its own context).
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["RUN_SHARE", "Outcome", "each_run", "width"]

RUN_SHARE = 4
"""Run tasks hold at most 1/RUN_SHARE of the repository pool's threads (``max_concurrency`` of
the store by default): on S3 (128 connections) 32 runs at once, on a directory or in memory (16)
4, on SQLite (4) one (then the runs go one after another in the calling thread)."""

_SLOTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SLOTS_LOCK = threading.Lock()


def width(repo, n_runs: int) -> int:
    """How many runs to work on at once on repository ``repo`` (a count >= 1, at most
    ``n_runs``): its pool's threads (``repo.cache.max_workers``) over :data:`RUN_SHARE`."""
    return max(1, min(n_runs, repo.cache.max_workers // RUN_SHARE))


def _slots(repo) -> threading.BoundedSemaphore:
    """The repository's run-task slots (one semaphore per repository, shared by every call)."""
    with _SLOTS_LOCK:
        sem = _SLOTS.get(repo)
        if sem is None:
            sem = _SLOTS[repo] = threading.BoundedSemaphore(width(repo, 1 << 30))
        return sem


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


def each_run(repo, runs: list[str], work: Callable[[str], Any],
             on_done: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Call ``work(run_id)`` for every run of ``runs``, :func:`width` of them at once, each in a
    copy of the calling context, on ``repo.pool``.

    Once a run's work raises, no more runs are started; those in flight finish. ``work`` may hand
    reads to ``repo.pool`` and wait for them; it must not start another :func:`each_run`.

    Args:
        repo: the :class:`~snapstore.repo.repository.Repository` (its pool runs the tasks).
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
    n = width(repo, total)
    if n == 1:
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
    pool, slots = repo.pool, _slots(repo)

    def task(ctx, r):
        try:
            return ctx.run(work, r)
        finally:
            slots.release()
    pending: dict = {}
    nxt, failed, done = 0, False, 0
    try:
        while pending or (nxt < total and not failed):
            while nxt < total and not failed and len(pending) < n:
                if not slots.acquire(timeout=0.05 if pending else None):
                    break  # the repository's share is taken (another each_run): wait for ours
                ctx = contextvars.copy_context()  # one per task: a context is entered by one thread at a time
                try:
                    pending[pool.submit(task, ctx, runs[nxt])] = nxt
                except BaseException:
                    slots.release()
                    raise
                nxt += 1
            if not pending:
                continue
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
        for f in pending:  # interrupted (KeyboardInterrupt): let the runs in flight finish
            f.exception()
    return [got[i] for i in sorted(got)]  # runs start in order and every one started finished
