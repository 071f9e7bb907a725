"""Archive as a plan of independent partitions (``archive --plan DIR``): the runs chosen by the
driver, each partition's runs written into their own bundles on a worker.

Layer 3 (uses :mod:`snapstore.maintenance.archive` and the executors of
:mod:`snapstore.maintenance.partitions`). The driver chooses the runs once
(:func:`~snapstore.maintenance.archive.select_runs`: the runs named, or every run, with a
live checkpoint, not archived yet, finished before the cutoff), cuts them in run-id order into
partitions of about equal numbers of live checkpoints and writes ``archive-plan.json``. A
partition (:func:`archive_partition`, on a worker that opens the repository from its URL,
credentials from its environment) archives exactly its runs with the one-process
:func:`~snapstore.maintenance.archive.archive` (mark, bundle write, read-back, index record,
hot catalogue, in that order), so each bundle holds runs of one partition only, and writes
``archive-NNNNN.parquet`` (a row per run: ``run``, ``status`` ``archived`` / ``skipped``,
``why``, ``bundle``). Partitions write disjoint runs: two never stub or catalogue one run.

Why a kill loses nothing and a rerun duplicates nothing: one-process archive's order holds in
every partition (a bundle is switched by its index record only after it was read back whole; a
crash before that leaves an unindexed bundle, which GC collects); a partition run again archives
only its runs that are not archived yet (``already archived`` is read from the index records),
and a partition whose file exists is not run again.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime

from ..errors import InvalidInputError
from ..format.bundle import check_retention_class, check_storage_class
from . import partitions as P
from .archive import archive, choose_runs

__all__ = ["archive_partition", "partitioned_archive", "PLAN_FILE", "DONE_FILE"]

PLAN_FILE = "archive-plan.json"
DONE_FILE = "archive-done.json"


def _result_path(job_dir: str, index: int) -> str:
    return os.path.join(job_dir, f"archive-{index:05d}.parquet")


def _cut(runs: list, weights: dict, partitions: int) -> list:
    """``runs`` (in order) in at most ``partitions`` consecutive groups of about equal weight."""
    total = sum(weights.get(r, 1) for r in runs) or 1
    out, cur, acc = [], [], 0
    for r in runs:
        cur.append(r)
        acc += weights.get(r, 1)
        if acc * partitions >= total * (len(out) + 1) and len(out) < partitions - 1:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def archive_partition(plan: dict, index: int) -> dict:
    """Archive partition ``index``'s runs of ``plan`` (the dict of ``archive-plan.json``); write
    ``archive-<index>.parquet``. Skips the work when that file exists (a resumed job).

    Args:
        plan: the plan dict (``url``, ``job_dir``, ``partitions`` (lists of run ids), ``options``,
            ``store_options``).
        index: the partition's index.
    Returns:
        A summary dict: ``index``, ``runs`` (archived now), ``skipped``, ``bundles``,
        ``checkpoints``, ``bytes_before``, ``bytes_after``, ``index_bytes``, ``catalogue_bytes``,
        ``requests`` (kind -> count), ``seconds``, ``resumed``, ``peak_rss_kb``.
    Raises:
        As :func:`~snapstore.maintenance.archive.archive` (a run of the partition deleted since
        planning: RunNotFound).
    """
    import pyarrow as pa

    out = _result_path(plan["job_dir"], index)
    done = P.finished_summary(out)
    if done is not None:
        return done
    t0 = time.monotonic()
    o = plan["options"]
    repo = P.open_url(plan["url"], plan.get("store_options") or {})
    try:
        rep = archive(repo, plan["partitions"][index], None, o["storage_class"], o["retention_class"],
                      o["expire_after_days"], grace_period=o["grace_period"], stub=o["stub"])
        mine = set(rep.bundles)
        bundle_of = {rk: ix.key for ix in repo.bundles.load().values() if ix.key in mine for rk in ix.runs}
        rows = [(r, "archived", "", bundle_of.get(repo.run_key(r), "")) for r in rep.runs]
        rows += [(r, "skipped", why, "") for r, why in sorted(rep.skipped.items())]
        summary = {"index": index, "runs": len(rep.runs), "skipped": len(rep.skipped), "bundles": list(rep.bundles),
                   "checkpoints": rep.checkpoints, "bytes_before": rep.bytes_before, "bytes_after": rep.bytes_after,
                   "index_bytes": rep.index_bytes, "catalogue_bytes": rep.catalogue_bytes,
                   "hot_logs": dict(rep.hot_logs), "requests": P.store_requests(repo),
                   "seconds": round(time.monotonic() - t0, 3), "resumed": False, "peak_rss_kb": P.peak_rss_kb()}
    finally:
        repo.store.close()
    cols = list(zip(*rows)) if rows else [()] * 4
    table = pa.table({"run": pa.array(cols[0], pa.string()), "status": pa.array(cols[1], pa.string()),
                      "why": pa.array(cols[2], pa.string()), "bundle": pa.array(cols[3], pa.string())})
    P.write_result(table, summary, out)
    return summary


def _clear(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        if name in (DONE_FILE, PLAN_FILE) or (name.startswith("archive-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def partitioned_archive(url: str, job_dir: str, run_ids: list | None = None, finished_before: datetime | None = None,
                        storage_class: str = "GLACIER_IR", retention_class: str = "default",
                        expire_after_days: int | None = None, grace_period: float = 3600.0, stub: bool | None = None,
                        partitions: int = 8, executor: str = "local", scheduler: "str | object | None" = None,
                        workers: int = 4, store_options: dict | None = None, progress=None) -> dict:
    """Archive as partitions: the driver chooses the runs and cuts them; each partition archives its
    runs into its own bundles on ``executor``; the driver merges the reports.

    Args:
        url: the repository's URL (workers open it; credentials from their environment).
        job_dir: the job directory (shared with the workers); a re-run of an unfinished job resumes
            with the runs chosen then.
        run_ids / finished_before / storage_class / retention_class / expire_after_days /
            grace_period / stub: as for :func:`~snapstore.maintenance.archive.archive`.
        partitions: wanted number of partitions (>= 1; at most one per run).
        executor: ``local`` (``workers`` threads, the default) or ``dask`` (``scheduler``).
        store_options: options for :func:`~snapstore.stores.open_store`.
        progress: optional ``progress(phase, done, total)``: ``("archive", partitions done, partitions)``.
    Returns:
        ``{"runs" (archived now), "skipped" (run id -> why: by the driver's choice, or by a
        partition), "bundles", "checkpoints", "bytes_before", "bytes_after", "index_bytes",
        "catalogue_bytes", "hot_logs", "partitions", "partitions_done", "resumed", "requests"
        (kind -> count, the driver's and every partition's), "summaries"}``.
    Raises:
        InvalidInputError: ``partitions`` < 1, a bad storage class, retention class or day count,
            an unknown executor, ``dask`` without a scheduler, or ``job_dir`` holds the plan of
            another repository.
        RunNotFound: a named run has no checkpoint. MissingDependencyError: no pyarrow.
    """
    if partitions < 1:
        raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
    check_storage_class(storage_class)
    check_retention_class(retention_class)
    P.require_pyarrow()
    P.check_executor(executor, scheduler)
    url, job_dir = P.absolute_url(url), os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    P.check_job_owner(job_dir, url)  # another repository's job (finished or not) is refused
    if os.path.exists(os.path.join(job_dir, DONE_FILE)):
        _clear(job_dir)  # a finished job: a re-run chooses the runs anew
    path = os.path.join(job_dir, PLAN_FILE)
    repo = P.open_url(url, store_options or {})
    try:
        if os.path.exists(path):
            with open(path) as f:
                plan = json.load(f)
            if plan["url"] != url:
                raise InvalidInputError(f"{path} is a plan for {plan['url']}, not {url}")
            plan["store_options"] = store_options or {}
        else:
            weights, skipped = choose_runs(repo, run_ids, finished_before)
            groups = _cut(sorted(weights), weights, partitions)
            opts = {"storage_class": storage_class, "retention_class": retention_class,
                    "expire_after_days": expire_after_days, "grace_period": grace_period, "stub": stub}
            plan = {"url": url, "job_dir": job_dir, "partitions": groups, "skipped": skipped, "options": opts}
            tmp = path + f".tmp{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(plan, f)
            os.replace(tmp, path)
            plan["store_options"] = store_options or {}
        driver_requests = P.store_requests(repo)
    finally:
        repo.store.close()
    plan["job_dir"] = job_dir
    n = len(plan["partitions"])
    sums = P.execute(plan, executor, scheduler, workers, task=archive_partition, count=n, progress=progress,
                     phase="archive") if n else []
    skipped = dict(plan["skipped"])
    import pyarrow.parquet as pq
    for i in range(n):
        t = pq.read_table(_result_path(job_dir, i)).to_pylist()
        skipped.update((r["run"], r["why"]) for r in t if r["status"] == "skipped")
    out = {"runs": [r for i in range(n) for r in pq.read_table(_result_path(job_dir, i)).to_pylist()
                    if r["status"] == "archived"],
           "skipped": skipped, "bundles": [b for s in sums for b in s["bundles"]],
           **{k: sum(s[k] for s in sums) for k in ("checkpoints", "bytes_before", "bytes_after", "index_bytes",
                                                   "catalogue_bytes")},
           "hot_logs": {k: v for s in sums for k, v in s.get("hot_logs", {}).items()},
           "partitions": n, "partitions_done": len(sums), "resumed": sum(1 for s in sums if s.get("resumed")),
           "requests": P.sum_requests(driver_requests, *(s.get("requests") for s in sums)), "summaries": sums}
    out["runs"] = [r["run"] for r in out["runs"]]
    tmp = os.path.join(job_dir, DONE_FILE + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({k: v for k, v in out.items() if k != "summaries"}, f)
    os.replace(tmp, os.path.join(job_dir, DONE_FILE))
    return out
