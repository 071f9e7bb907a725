"""Bulk import as a plan of independent partitions (``import --plan DIR FILE...``): one partition
per group of input files, run by the local or the Dask executor.

Layer 5 (uses :mod:`snapstore.importers.replay` and the executors and job helpers of
:mod:`snapstore.maintenance.partitions`). The driver (:func:`plan_import`) names every file's runs
(the file's default run id, under ``--run PREFIX/`` when given; two files that would share a run
id are refused before anything is written), cuts the files, in the order given, into groups of
about equal bytes and writes ``import-plan.json``. A partition (:func:`import_partition`, on a
worker that opens the repository from its URL, credentials from its environment, and reads the
files at their paths) replays each of its files as one-process ``snapstore import FILE`` does
(:func:`~snapstore.importers.replay.replay`: the whole file read and checked before its first
save, one checkpoint per turn, the checkpoints a run already holds skipped) and then writes
``import-NNNNN.parquet``: a row per run (file, format, run, checkpoints in the file, saved,
skipped) and a row per file that could not be imported (its error: a malformed file, a run that
holds other checkpoints), with its summary in the schema metadata. The driver merges the rows.

Why a rerun after a kill neither duplicates nor loses runs: a partition's runs are its files'
alone (run ids are distinct across files), each save is acknowledged or not at all, and a
partition run again (a retried task, a re-run of the job after a kill of a worker or of the
driver) saves, for each run, only the checkpoints after the newest one the run holds
(:func:`~snapstore.importers.replay.resume_index`); a partition whose result file exists is not
run again. After a finished job (``import-done.json``) a re-run imports anew, which saves nothing
for files already imported.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

from ..errors import ConflictError, InvalidInputError, StoreError
from ..maintenance import partitions as P
from . import default_run_id
from .replay import ImportResult, load_for_import, replay

__all__ = ["ImportFile", "ImportPlan", "name_files", "plan_import", "import_partition", "partitioned_import", "PLAN_FILE",
           "DONE_FILE"]

PLAN_FILE = "import-plan.json"
DONE_FILE = "import-done.json"


@dataclass(frozen=True)
class ImportFile:
    """One input file of a plan: its absolute ``path``, ``size`` (bytes, when planned) and
    ``prefix``, the run id (or prefix of its conversations' run ids) it is imported under."""

    path: str
    size: int
    prefix: str


@dataclass(frozen=True)
class ImportPlan:
    """A partitioned import: plain data, picklable and written to ``<job_dir>/import-plan.json``.

    Attributes:
        url: the repository's URL (each worker opens it; credentials from its environment).
        job_dir: directory (shared with the workers) holding the plan and results.
        files: the :class:`ImportFile` tuple, in the order given.
        partitions: per partition, the tuple of indexes into ``files`` it imports.
        format / messages_path: as for :func:`~snapstore.importers.load_trajectory` (every file).
        store_options: keyword options for :func:`snapstore.stores.open_store` (e.g. ``endpoint_url``).
    """

    url: str
    job_dir: str
    files: tuple
    partitions: tuple
    format: str | None = None
    messages_path: str | None = None
    store_options: dict = field(default_factory=dict)

    def result_path(self, index: int) -> str:
        """Path of partition ``index``'s Parquet file."""
        return os.path.join(self.job_dir, f"import-{index:05d}.parquet")


def _groups(sizes: list, partitions: int) -> tuple:
    """``min(partitions, len(sizes))`` non-empty groups of consecutive indexes, each boundary put
    where the running total of ``sizes`` is nearest to its share of the whole (a large file makes
    a group of its own rather than swallowing its neighbours)."""
    import bisect
    from itertools import accumulate

    n = min(partitions, len(sizes))
    cum = list(accumulate(sizes))
    total = cum[-1] if cum else 0
    bounds, prev = [], 0
    for k in range(1, n):
        lo, hi = prev + 1, len(sizes) - (n - k)  # the group ends after index e - 1, lo <= e <= hi
        e = bisect.bisect_left(cum, total * k / n) + 1
        cands = [x for x in (e - 1, e) if lo <= x <= hi] or [min(max(e, lo), hi)]
        e = min(cands, key=lambda x: abs(cum[x - 1] - total * k / n))
        bounds.append(e)
        prev = e
    edges = [0, *bounds, len(sizes)]
    return tuple(tuple(range(edges[i], edges[i + 1])) for i in range(n))


def name_files(files: list, run_prefix: str | None = None) -> tuple:
    """Check the files of a partitioned import and name each one's runs, before anything is written.

    Args:
        files: paths of trajectory files (JSON / JSON Lines), each given once.
        run_prefix: None (each file's runs under :func:`~snapstore.importers.default_run_id` of
            the file), or a prefix: ``PREFIX/<default run id>``.
    Returns:
        One :class:`ImportFile` per file (absolute path, size in bytes, run-id prefix), in order.
    Raises:
        InvalidInputError: no files, an empty ``run_prefix``, a file missing or given twice, or two
            files that would be imported under the same run id.
    """
    if not files:
        raise InvalidInputError("no files to import")
    if run_prefix == "":
        raise InvalidInputError("run id must not be empty")
    paths = [os.path.abspath(f) for f in files]
    items = []
    seen: dict = {}
    owners: dict = {}
    for given, p in zip(files, paths):
        if p in seen:
            raise InvalidInputError(f"{given}: given twice")
        seen[p] = given
        if not os.path.isfile(p):
            raise InvalidInputError(f"{given}: no such file")
        rid = default_run_id(p)
        prefix = rid if run_prefix is None else f"{run_prefix}/{rid}"
        if prefix in owners:
            raise InvalidInputError(f"{owners[prefix]} and {given} would both be imported as run {prefix!r} "
                                    "(rename one, or import them with different --run prefixes)")
        owners[prefix] = given
        items.append(ImportFile(p, os.path.getsize(p), prefix))
    return tuple(items)


def plan_import(url: str, job_dir: str, files: list, partitions: int = 8, run_prefix: str | None = None,
                format: str | None = None, messages_path: str | None = None,
                store_options: dict | None = None) -> ImportPlan:
    """Name every file's runs and cut the files into ``partitions`` groups of about equal bytes.

    Args:
        url: the repository's URL (it must exist: :func:`partitioned_import` does not create one).
        job_dir: directory for the plan and results (created; an existing plan of the same files
            is reused, so a re-run resumes).
        files: paths of trajectory files (JSON / JSON Lines), each given once.
        partitions: wanted number of partitions (>= 1; at most one per file).
        run_prefix: None (each file's runs under :func:`~snapstore.importers.default_run_id` of
            the file), or a prefix: ``PREFIX/<default run id>``.
        format / messages_path: as for :func:`~snapstore.importers.load_trajectory`.
        store_options: options for :func:`~snapstore.stores.open_store`.
    Returns:
        The :class:`ImportPlan` (also written to ``job_dir/import-plan.json``).
    Raises:
        InvalidInputError: ``partitions`` < 1, no files, a file missing or given twice, two files
            with the same run id, or ``job_dir`` holds a plan for another URL or other files.
    """
    if partitions < 1:
        raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
    items = name_files(files, run_prefix)
    os.makedirs(job_dir, exist_ok=True)
    path = os.path.join(job_dir, PLAN_FILE)
    if os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
        old = tuple(ImportFile(**x) for x in d["files"])
        if d["url"] != url or [(x.path, x.prefix) for x in old] != [(x.path, x.prefix) for x in items] \
                or d.get("format") != format or d.get("messages_path") != messages_path:
            raise InvalidInputError(f"{path} is a plan for other files or another repository ({d['url']}); "
                                    "give another --plan directory")
        return ImportPlan(url, job_dir, old, tuple(tuple(g) for g in d["partitions"]), format, messages_path,
                          store_options or {})
    groups = _groups([x.size for x in items], partitions)
    plan = ImportPlan(url, job_dir, tuple(items), groups, format, messages_path, store_options or {})
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"url": url, "files": [asdict(x) for x in items], "partitions": [list(g) for g in groups],
                   "format": format, "messages_path": messages_path}, f)
    os.replace(tmp, path)
    return plan


def _manager(plan: ImportPlan):
    from ..manager.facade import CheckpointManager

    return CheckpointManager(plan.url, create=False, **plan.store_options)


def import_partition(plan: ImportPlan, index: int) -> dict:
    """Import the files of partition ``index``; write ``import-<index>.parquet``.

    Runs on a worker: opens the repository from ``plan.url`` and reads the files at their paths.
    Skips the work when the partition's file exists (a resumed job). A file that cannot be
    imported (unreadable or malformed, a run holding other checkpoints) is a row with its error,
    and the partition goes on with its other files.

    Args:
        plan: the :class:`ImportPlan`.
        index: the partition's index.
    Returns:
        A summary dict: ``index``, ``files``, ``runs``, ``saved``, ``skipped``, ``checkpoints``
        (in the files), ``logical_bytes``, ``errors`` (count), ``requests`` (kind -> count),
        ``seconds``, ``resumed`` (bool), ``peak_rss_kb``.
    Raises:
        StoreError: the store failed (the partition is retried; what was saved stays).
    """
    import pyarrow as pa

    out = plan.result_path(index)
    done = P.finished_summary(out)
    if done is not None:
        return done
    t0 = time.monotonic()
    rows = []  # (file, format, run, checkpoints, saved, skipped, error)
    logical = 0
    mgr = _manager(plan)
    try:
        for fi in plan.partitions[index]:
            f = plan.files[fi]
            try:
                loaded = load_for_import(f.path, f.prefix, plan.format, plan.messages_path)
                res = replay(mgr, loaded, ImportResult())
            except StoreError:
                raise
            except (InvalidInputError, ConflictError) as e:
                rows.append((f.path, "", "", 0, 0, 0, f"{type(e).__name__}: {e}"))
                continue
            logical += res.logical
            rows.extend((f.path, loaded.format, r["run"], r["checkpoints"], r["saved"], r["skipped"], "")
                        for r in res.per_run)
        summary = {"index": index, "files": len(plan.partitions[index]),
                   "runs": sum(1 for r in rows if r[3]), "saved": sum(r[4] for r in rows),
                   "skipped": sum(r[5] for r in rows), "checkpoints": sum(r[3] for r in rows),
                   "logical_bytes": logical, "errors": sum(1 for r in rows if r[6]),
                   "requests": dict(mgr.store.stats.counts), "seconds": round(time.monotonic() - t0, 3),
                   "resumed": False, "peak_rss_kb": P.peak_rss_kb()}
    finally:
        mgr.close()
    cols = list(zip(*rows)) if rows else [()] * 7
    table = pa.table({"file": pa.array(cols[0], pa.string()), "format": pa.array(cols[1], pa.string()),
                      "run": pa.array(cols[2], pa.string()), "checkpoints": pa.array(cols[3], pa.int64()),
                      "saved": pa.array(cols[4], pa.int64()), "skipped": pa.array(cols[5], pa.int64()),
                      "error": pa.array(cols[6], pa.string())})
    P.write_result(table, summary, out)
    return summary


def _read_rows(path: str) -> list:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    return t.to_pylist()


def _clear(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        if name in (DONE_FILE, PLAN_FILE) or (name.startswith("import-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def partitioned_import(url: str, job_dir: str, files: list, partitions: int = 8, executor: str = "local",
                       scheduler: "str | object | None" = None, workers: int = 4, run_prefix: str | None = None,
                       format: str | None = None, messages_path: str | None = None,
                       store_options: dict | None = None, progress=None) -> dict:
    """Import many trajectory files as partitions: plan, import each group on ``executor``, merge.

    Args:
        url: the repository's URL (it must exist; workers open it, credentials from their environment).
        job_dir: the job directory (shared with the workers); a re-run of an unfinished job resumes.
        files / partitions / run_prefix / format / messages_path / store_options: as for :func:`plan_import`.
        executor: ``local`` (``workers`` threads, the default) or ``dask`` (``scheduler``: address or
            Client; the files must be at the same paths on every worker).
        progress: optional ``progress(phase, done, total)``: ``("import", partitions done, partitions)``.
    Returns:
        ``{"files", "partitions", "partitions_done", "resumed" (partitions reused), "runs" (one
        dict per run: file, format, run, checkpoints, saved, skipped), "errors" (``{"file",
        "error"}`` per file not imported), "saved", "skipped", "checkpoints", "logical_bytes",
        "requests" (kind -> count, every partition), "summaries"}``.
    Raises:
        InvalidInputError: see :func:`plan_import`; an unknown executor, ``dask`` without a scheduler.
        MissingDependencyError: pyarrow is not installed (the job files are Parquet).
        RepositoryNotFound: nothing at ``url``. StoreError: the store failed every attempt.
    """
    P.require_pyarrow()
    P.check_executor(executor, scheduler)
    url, job_dir = P.absolute_url(url), os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    P.check_job_owner(job_dir, url)  # another repository's job (finished or not) is refused
    if os.path.exists(os.path.join(job_dir, DONE_FILE)):
        _clear(job_dir)  # a finished job: a re-run imports anew (saving only what is missing)
    plan = plan_import(url, job_dir, files, partitions, run_prefix, format, messages_path, store_options)
    P.open_url(url, store_options or {}).store.close()  # the repository exists before any worker starts
    sums = P.execute(plan, executor, scheduler, workers, task=import_partition, count=len(plan.partitions),
                     progress=progress, phase="import")
    rows = [r for i in range(len(plan.partitions)) for r in _read_rows(plan.result_path(i))]
    out = {"files": len(plan.files), "partitions": len(plan.partitions), "partitions_done": len(sums),
           "resumed": sum(1 for s in sums if s.get("resumed")),
           "runs": [{k: r[k] for k in ("file", "format", "run", "checkpoints", "saved", "skipped")}
                    for r in rows if not r["error"]],
           "errors": [{"file": r["file"], "error": r["error"]} for r in rows if r["error"]],
           "saved": sum(s["saved"] for s in sums), "skipped": sum(s["skipped"] for s in sums),
           "checkpoints": sum(s["checkpoints"] for s in sums), "logical_bytes": sum(s["logical_bytes"] for s in sums),
           "requests": P.sum_requests(*(s.get("requests") for s in sums)), "summaries": sums}
    tmp = os.path.join(job_dir, DONE_FILE + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({k: v for k, v in out.items() if k != "summaries"}, f)
    os.replace(tmp, os.path.join(job_dir, DONE_FILE))
    return out

