"""``stats`` as a plan of independent run-key partitions (``stats --plan DIR``), run by the local or the Dask executor.

Layer 3 (uses :mod:`snapstore.maintenance.stats` and :mod:`snapstore.maintenance.partitions`).
The report is the one-process :func:`~snapstore.maintenance.stats.stats` report of the same
repository: the same runs, checkpoints, logical and stored bytes, ratio, objects by category and
leftovers; only ``requests`` (and the cost of the requests) differ, being the job's: summed over
the driver and every partition.

* The driver plans the partitions (:func:`~snapstore.maintenance.partitions.plan_mark`: balanced
  run-key ranges) and counts every object outside ``runs/`` from two LISTs of the whole key space
  that skip ``runs/`` (keys before it, and keys after the last run folder's range).
* A partition (:func:`stats_partition`, on a worker that opens the repository from its URL,
  credentials from its environment) LISTs only its key range of ``runs/``
  (:func:`~snapstore.maintenance.runs.list_run_range`), counts those objects by category, reads its
  runs' logs in bulk and writes ``stats-<i>.parquet``: one row per run with a live checkpoint
  (``run_key``, ``checkpoints``, ``message_bytes``, ``session_state_bytes``), and in the schema
  metadata its summary (categories, bytes counted, runs, checkpoints, requests by kind, seconds,
  peak RSS).
* The driver sums the categories and figures (every key is counted by exactly one of them: the
  partitions' ranges meet and cover ``runs/``) and builds the report as one-process ``stats``
  does (:func:`~snapstore.maintenance.stats.assemble`: leftovers, the cost estimate, ``--cost``'s
  bill from the bundles it listed).

A partition whose file exists is not counted again (an interrupted job resumes; a killed worker
leaves no partial file: it writes a temporary name and renames); after a finished job
(``stats-done.json``) a re-run counts anew.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict

from ..format import keys
from . import partitions as P
from .runs import list_run_range
from .stats import Tally, assemble, live_figures, tally

__all__ = ["stats_partition", "partitioned_stats", "outside_runs", "merge_categories", "DONE_FILE"]

DONE_FILE = "stats-done.json"


def _result_path(plan: P.MarkPlan, index: int) -> str:
    return os.path.join(plan.job_dir, f"stats-{index:05d}.parquet")


def stats_partition(plan: P.MarkPlan, index: int) -> dict:
    """Count partition ``index``'s key range of ``runs/`` and its runs' live checkpoints; write
    ``stats-<index>.parquet``. Skips the work when that file exists (a resumed job).

    Args:
        plan: the :class:`~snapstore.maintenance.partitions.MarkPlan`.
        index: the partition's index.
    Returns:
        The summary dict: ``index``, ``objects`` (category -> counts, as ``stats``' ``objects``),
        ``stored_bytes``, ``runs``, ``checkpoints``, ``message_bytes``, ``session_state_bytes``,
        ``requests`` (kind -> count), ``seconds``, ``resumed`` (bool), ``peak_rss_kb``.
    Raises:
        StoreError: the store failed. IntegrityError: a run's log is unreadable (as for ``stats``).
    """
    import pyarrow as pa

    out = _result_path(plan, index)
    done = P.finished_summary(out)
    if done is not None:
        return done
    t0 = time.monotonic()
    repo = P.open_plan(plan)
    try:
        listing = list_run_range(repo, *P.owned_range(plan, index))
        t = tally(listing.infos.values())
        fig = live_figures(repo, t)
        summary = {"index": index, "objects": dict(t.cats), "stored_bytes": t.total,
                   **{k: fig[k] for k in ("runs", "checkpoints", "message_bytes", "session_state_bytes")},
                   "requests": P.store_requests(repo), "seconds": round(time.monotonic() - t0, 3),
                   "resumed": False, "peak_rss_kb": P.peak_rss_kb()}
    finally:
        repo.store.close()
    rows = sorted(fig["per_run"].items())
    table = pa.table({"run_key": pa.array([rk for rk, _ in rows], pa.string()),
                      "checkpoints": pa.array([v[0] for _, v in rows], pa.int64()),
                      "message_bytes": pa.array([v[1] for _, v in rows], pa.int64()),
                      "session_state_bytes": pa.array([v[2] for _, v in rows], pa.int64())})
    P.write_result(table, summary, out)
    return summary


def outside_runs(store, last: str):
    """Every object of ``store`` outside the run folders the partitions count: the keys before
    ``runs/`` and the keys after ``runs/<last>0`` (``last``: the last partition's upper bound;
    that one key itself, which no run key can make, is counted by nobody), in
    two LISTs of the whole key space (``StartAfter`` skips ``runs/``).

    Args:
        store: the repository's ObjectStore.
        last: the last partition's inclusive upper run key (``"\\U0010ffff"``).
    Yields:
        ObjectInfo.
    """
    for info in store.list(""):
        if info.key >= keys.RUNS:
            break
        yield info
    stop = f"{keys.RUNS}{last}0"  # list_run_range's exclusive end: keys at or past it are the driver's
    yield from store.list("", start_after=stop)


def merge_categories(parts) -> dict:
    """Category counts summed over ``parts`` (dicts category -> ``{"count", "bytes", ...}``), every
    field added."""
    out: dict = defaultdict(lambda: {"count": 0, "bytes": 0})
    for cats in parts:
        for c, v in cats.items():
            for f, n in v.items():
                out[c][f] = out[c].get(f, 0) + n
    return dict(out)


def _clear(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        if name in (DONE_FILE, P.PLAN_FILE) or (name.startswith("stats-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def partitioned_stats(url: str, job_dir: str, partitions: int = 8, executor: str = "local",
                      scheduler: "str | object | None" = None, workers: int = 4, prices: dict | None = None,
                      cost: bool = False, class_prices: dict | None = None, tier: str = "standard",
                      store_options: dict | None = None, progress=None) -> dict:
    """``stats`` as partitions: plan run-key ranges, count each on ``executor``, merge on the driver.

    Args:
        url: the repository's URL (workers open it; credentials from their environment).
        job_dir: the job directory (shared with the workers); a re-run of an unfinished job resumes.
        partitions: wanted number of run-key partitions (>= 1).
        executor: ``local`` (``workers`` threads, the default) or ``dask`` (``scheduler``: address or Client).
        prices / cost / class_prices / tier: as for :func:`~snapstore.maintenance.stats.stats`.
        store_options: options for :func:`~snapstore.stores.open_store` (e.g. ``endpoint_url``).
        progress: optional ``progress(phase, done, total)``: ``("stats", partitions done, partitions)``.
    Returns:
        ``{"report": the stats dict (one-process ``stats``' figures; ``requests``: the job's, kind
        -> count, summed over every step, and the cost estimate prices those), "partitions",
        "partitions_done", "resumed" (partitions reused), "summaries"}``.
    Raises:
        InvalidInputError: ``partitions`` < 1, an unknown executor, ``dask`` without a scheduler,
            a bad tier or price override.
        MissingDependencyError: pyarrow is not installed (the job files are Parquet).
        RepositoryNotFound: nothing at ``url``. StoreError: the store failed.
    """
    P.require_pyarrow()
    P.check_executor(executor, scheduler)
    url, job_dir = P.absolute_url(url), os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    P.check_job_owner(job_dir, url)  # another repository's job (finished or not) is refused
    if os.path.exists(os.path.join(job_dir, DONE_FILE)):
        _clear(job_dir)  # a finished job: a re-run counts the repository as it is now
    plan = P.plan_mark(url, job_dir, partitions, store_options)
    repo = P.open_url(url, store_options or {})
    try:
        sums = P.execute(plan, executor, scheduler, workers, task=stats_partition, count=len(plan.partitions),
                         progress=progress, phase="stats")
        # the objects outside runs/ are listed after the partitions' runs: a pack a run's record
        # names was written before that record, so no run is counted without its packs
        driver: Tally = tally(outside_runs(repo.store, plan.partitions[-1].last))
        cats = merge_categories([driver.cats, *(s["objects"] for s in sums)])
        fig = {k: sum(s[k] for s in sums) for k in ("runs", "checkpoints", "message_bytes", "session_state_bytes")}
        total = driver.total + sum(s["stored_bytes"] for s in sums)

        def requests():
            counts = P.sum_requests(*(s.get("requests") for s in sums), P.store_requests(repo))
            return {"requests": counts}, counts
        rep = assemble(repo, cats, total, fig, requests, prices, cost, driver.bundle_infos, class_prices, tier)
    finally:
        repo.store.close()
    out = {"report": rep, "partitions": len(plan.partitions), "partitions_done": len(sums),
           "resumed": sum(1 for s in sums if s.get("resumed")), "summaries": sums}
    tmp = os.path.join(job_dir, DONE_FILE + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({k: v for k, v in rep.items()}, f)
    os.replace(tmp, os.path.join(job_dir, DONE_FILE))
    return out
