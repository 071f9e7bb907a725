"""GC's mark as a plan of independent partitions (balanced run-key ranges), run by a local or a Dask executor.

Layer 4 (uses :mod:`snapstore.maintenance.gc`). This is the first slice of issue 25: the *mark* half
of GC split by run key. :func:`plan_mark` lists the runs once and cuts their sorted keys into ranges
of about equal numbers of listed log records (derived from the actual run list, not fixed prefixes);
each partition is marked on its own (:func:`mark_partition`: the worker opens the repository from
its URL, credentials from its environment, lists it and marks only the runs in its range with GC's
own mark, as a dry run: it writes nothing to the repository but the store-clock probe, one PUT and
DELETE of ``gc/clock-<random>``, which a later GC removes if a kill leaves it) and writes its live packs as Parquet
in the job directory (``mark-<i>.parquet``). A partition whose file exists is not marked again, so a
job that was interrupted resumes, and a failed partition is retried on its own. :func:`reduce_mark`,
the driver step, unions the live packs and writes the packs no partition needs as
``candidates.parquet``.

Only the plan (a :class:`MarkPlan`, plain data) and the per-partition summaries travel between the
driver and the workers; nothing else is pickled. Deletion stays with the one-process sweep
(:func:`snapstore.maintenance.gc.gc`, with its lock and two-phase grace): the candidates here are a
report, never deleted on their own word.

Why Dask distributed and not Ray: the job is a few thousand independent Python tasks doing network
I/O and writing small Parquet files; Dask distributed is a pure-Python ``pip install`` that runs the
same code on threads, a LocalCluster or a remote scheduler given its address, with task retries
(``retries=``), and is already the engine of the PyData stack snapstore's users have (pyarrow,
pandas). Ray brings a large binary runtime, its own object store and a daemon, which this job (no
shared large objects, no actors) does not need.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from ..errors import InvalidInputError
from ..repo.repository import Repository
from ..stores import open_store
from .gc import GCPlan
from .gcreport import GCOptions
from .runs import list_runs

__all__ = ["Partition", "MarkPlan", "plan_mark", "mark_partition", "reduce_mark", "run_local", "run_dask",
           "partitioned_mark"]

PLAN_FILE = "plan.json"
CANDIDATES_FILE = "candidates.parquet"


@dataclass(frozen=True)
class Partition:
    """One partition: the runs whose keys ``k`` satisfy ``first <= k <= last`` (strings, as in
    ``runs/<key>/``), and ``records``, the listed log records they held when planned."""

    index: int
    first: str
    last: str
    records: int


@dataclass(frozen=True)
class MarkPlan:
    """A partitioned mark: plain data, picklable and written to ``<job_dir>/plan.json``.

    Attributes:
        url: the repository's URL (each worker opens it; credentials from its environment).
        job_dir: directory (local path, shared with workers) holding the plan and results.
        partitions: the :class:`Partition` list, in key order.
        store_options: keyword options for :func:`snapstore.stores.open_store` (e.g. ``endpoint_url``).
    """

    url: str
    job_dir: str
    partitions: tuple
    store_options: dict = field(default_factory=dict)

    def result_path(self, index: int) -> str:
        """Path of partition ``index``'s Parquet file."""
        return os.path.join(self.job_dir, f"mark-{index:05d}.parquet")


def _open_url(url: str, store_options: dict) -> Repository:
    """The repository at ``url``; an encrypted one through the keys of this process's environment
    (``$SNAPSTORE_PASSPHRASE`` / ``$SNAPSTORE_KMS_KEY``, as every worker must have them)."""
    from ..stores.crypt import keys_from_env, sealed_if_keyed

    store = open_store(url, **store_options)
    try:
        store = sealed_if_keyed(store, *keys_from_env())
    except BaseException:
        store.close()
        raise
    return Repository.open(store, create=False)


def _open(plan: MarkPlan) -> Repository:
    return _open_url(plan.url, plan.store_options)


def _absolute(url: str) -> str:
    """``url`` with a local path made absolute (workers resolve paths against their own working
    directory); URLs with a scheme are left as they are."""
    return url if "://" in url else os.path.abspath(url)


def plan_mark(url: str, job_dir: str, partitions: int, store_options: dict | None = None) -> MarkPlan:
    """List the runs of the repository at ``url`` and cut them into balanced key ranges.

    Args:
        url: repository URL (``s3://...``, a path, ...).
        job_dir: directory for the plan and results (created; an existing plan there is reused,
            so a re-run resumes).
        partitions: wanted number of partitions (>= 1; fewer when there are fewer runs).
        store_options: options for :func:`~snapstore.stores.open_store`.
    Returns:
        The :class:`MarkPlan` (also written to ``job_dir/plan.json``).
    Raises:
        InvalidInputError: ``partitions`` < 1, or ``job_dir`` holds a plan for another URL.
        RepositoryNotFound: nothing at ``url``.
    """
    if partitions < 1:
        raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
    os.makedirs(job_dir, exist_ok=True)
    path = os.path.join(job_dir, PLAN_FILE)
    if os.path.exists(path):
        with open(path) as f:
            d = json.load(f)
        if d["url"] != url:
            raise InvalidInputError(f"{path} is a plan for {d['url']}, not {url}")
        return MarkPlan(d["url"], job_dir, tuple(Partition(**p) for p in d["partitions"]), store_options or {})
    repo = _open_url(url, store_options or {})
    listing = list_runs(repo)
    counts = sorted((rk, len(ks)) for rk, ks in listing.manifests.items())
    total = sum(c for _, c in counts) or 1
    parts, cur, acc = [], [], 0
    for rk, c in counts:
        cur.append((rk, c))
        acc += c
        if acc * partitions >= total * (len(parts) + 1) and len(parts) < partitions - 1:
            parts.append(Partition(len(parts), cur[0][0], cur[-1][0], sum(x for _, x in cur)))
            cur = []
    if cur:
        parts.append(Partition(len(parts), cur[0][0], cur[-1][0], sum(x for _, x in cur)))
    if parts:  # the ends are open: runs created after planning fall in a partition
        parts[0] = Partition(0, "", parts[0].last, parts[0].records)
        p = parts[-1]
        parts[-1] = Partition(p.index, p.first, "\U0010ffff", p.records)
    else:
        parts = [Partition(0, "", "\U0010ffff", 0)]
    plan = MarkPlan(url, job_dir, tuple(parts), store_options or {})
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"url": url, "partitions": [asdict(p) for p in parts]}, f)
    os.replace(tmp, path)
    return plan


def mark_partition(plan: MarkPlan, index: int) -> dict:
    """Mark the live checkpoints of partition ``index``'s runs; write its live packs as Parquet.

    Runs on a worker: opens the repository from ``plan.url``. Skips the work when the partition's
    file already exists (a resumed job). The file is written to a temporary name and renamed, so a
    worker killed mid-partition leaves no partial result.

    Args:
        plan: the :class:`MarkPlan`.
        index: the partition's index.
    Returns:
        A summary dict: ``index``, ``runs``, ``live_checkpoints``, ``live_packs``, ``listed_packs``,
        ``requests`` (kind -> count), ``seconds``, ``resumed`` (bool), ``peak_rss_kb`` (the worker
        process's peak resident set so far, KiB).
    Raises:
        IntegrityError / ObjectNotFound: a live checkpoint of the partition is unreadable.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = plan.result_path(index)
    if os.path.exists(out):
        meta = pq.read_schema(out).metadata or {}
        s = json.loads(meta.get(b"summary", b"{}"))
        s["resumed"] = True
        return s
    part = plan.partitions[index]
    t0 = time.monotonic()
    repo = _open(plan)
    g = GCPlan(repo, GCOptions(dry_run=True), repo.store_time(), repo.cache.limit)
    g.run_range = (part.first, part.last)
    g.list_repository()
    try:
        g.mark()
    finally:
        g.abandon()
    packs = sorted(g.reach.packs)
    summary = {"index": index, "runs": len(g.logs), "live_checkpoints": sum(len(x.live) for x in g.logs.values()),
               "live_packs": len(packs), "listed_packs": len(g.packs),
               "live_bytes": sum(g.packs[p].size for p in packs if p in g.packs),
               "requests": _requests(repo), "seconds": round(time.monotonic() - t0, 3), "resumed": False,
               "peak_rss_kb": _peak_rss_kb()}
    table = pa.table({"pack": pa.array([p.hex() for p in packs], pa.string()),
                      "size": pa.array([g.packs[p].size if p in g.packs else -1 for p in packs], pa.int64())})
    table = table.replace_schema_metadata({"summary": json.dumps(summary)})
    tmp = out + f".tmp{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return summary


def _peak_rss_kb() -> int:
    try:
        import resource
    except ImportError:  # (not on Windows)
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _requests(repo: Repository) -> dict:
    stats = getattr(repo.store, "stats", None)
    return dict(stats.counts) if stats is not None else {}


def reduce_mark(plan: MarkPlan) -> dict:
    """The driver step: union the partitions' live packs; the listed packs none needs are written
    to ``candidates.parquet`` (a report: the one-process sweep decides, under its grace rule).

    Args:
        plan: a :class:`MarkPlan` whose partitions are all marked.
    Returns:
        ``{"live": set of pack ids (bytes), "candidates": set of pack ids (bytes)}``.
    Raises:
        InvalidInputError: a partition has no result yet.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    live: set = set()
    for p in plan.partitions:
        path = plan.result_path(p.index)
        if not os.path.exists(path):
            raise InvalidInputError(f"partition {p.index} is not marked yet ({path} missing)")
        live.update(bytes.fromhex(h) for h in pq.read_table(path, columns=["pack"]).column("pack").to_pylist())
    repo = _open(plan)
    from ..format import keys
    listed = {}
    for info in repo.store.list(keys.PACKS):
        pid = keys.pack_id_from_key(info.key)
        if pid is not None:
            listed[pid] = info.size
    cands = sorted(set(listed) - live)
    pq.write_table(pa.table({"pack": pa.array([c.hex() for c in cands], pa.string()),
                             "size": pa.array([listed[c] for c in cands], pa.int64())}),
                   os.path.join(plan.job_dir, CANDIDATES_FILE))
    return {"live": live, "candidates": set(cands), "bytes_to_reclaim": sum(listed[c] for c in cands)}


def run_local(plan: MarkPlan, workers: int = 4, retries: int = 1) -> list:
    """Mark every partition of ``plan`` on a thread pool of ``workers`` threads (the default
    executor; no dependency). A partition that fails is tried again up to ``retries`` times.

    Returns:
        The partitions' summaries, in index order.
    Raises:
        The last error of a partition that failed every attempt.
    """
    def one(i):
        for attempt in range(retries + 1):
            try:
                return mark_partition(plan, i)
            except Exception:
                if attempt == retries:
                    raise
    with ThreadPoolExecutor(max(1, workers)) as ex:
        return list(ex.map(one, range(len(plan.partitions))))


def run_dask(plan: MarkPlan, scheduler: "str | object", retries: int = 2) -> list:
    """Mark every partition of ``plan`` on a Dask distributed cluster.

    Args:
        plan: the :class:`MarkPlan` (its ``job_dir`` must be reachable from the workers).
        scheduler: the scheduler's address (``tcp://host:8786``) or a ``distributed.Client``.
        retries: times Dask retries a failed partition task.
    Returns:
        The partitions' summaries, in index order.
    Raises:
        InvalidInputError: dask distributed is not installed (``pip install 'snapstore[dask]'``).
    """
    try:
        from distributed import Client
    except ImportError:
        raise InvalidInputError("the dask executor needs dask distributed: pip install 'snapstore[dask]'") from None
    own = not isinstance(scheduler, Client)
    client = Client(scheduler) if own else scheduler
    try:
        futs = [client.submit(mark_partition, plan, i, retries=retries, pure=False, key=f"mark-{i}-{os.urandom(4).hex()}")
                for i in range(len(plan.partitions))]
        return client.gather(futs)
    finally:
        if own:
            client.close()


def _clear_finished(job_dir: str) -> None:
    """Remove a finished job's files (plan, partition results, candidates) from ``job_dir``: only
    an unfinished job is resumed, so a re-run never reports an earlier state of the repository."""
    for name in os.listdir(job_dir):
        if name == PLAN_FILE or name == CANDIDATES_FILE or (name.startswith("mark-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def partitioned_mark(url: str, job_dir: str, partitions: int = 8, executor: str = "local",
                     scheduler: "str | object | None" = None, workers: int = 4,
                     store_options: dict | None = None) -> dict:
    """Plan, mark every partition with ``executor`` (``local`` or ``dask``), then reduce.

    Returns:
        A report dict: ``partitions`` (count), ``partitions_done``, ``live_checkpoints``,
        ``live_packs``, ``candidates`` (count), ``bytes_to_reclaim``, ``requests`` (kind -> summed
        count), ``summaries`` (per partition), ``live`` / ``candidate_ids`` (sets of pack ids).
    Raises:
        InvalidInputError: an unknown executor, or ``dask`` without a scheduler.
    """
    if executor not in ("local", "dask"):
        raise InvalidInputError(f"executor must be 'local' or 'dask', got {executor!r}")
    if executor == "dask" and scheduler is None:
        raise InvalidInputError("the dask executor needs a scheduler address (--scheduler tcp://HOST:PORT)")
    url, job_dir = _absolute(url), os.path.abspath(job_dir)
    if os.path.exists(os.path.join(job_dir, CANDIDATES_FILE)):
        _clear_finished(job_dir)  # a finished job: a re-run marks the repository as it is now
    plan = plan_mark(url, job_dir, partitions, store_options)
    sums = run_local(plan, workers) if executor == "local" else run_dask(plan, scheduler)
    red = reduce_mark(plan)
    reqs: dict = {}
    for s in sums:
        for k, v in (s.get("requests") or {}).items():
            reqs[k] = reqs.get(k, 0) + v
    return {"partitions": len(plan.partitions), "partitions_done": len(sums),
            "live_checkpoints": sum(s["live_checkpoints"] for s in sums), "live_packs": len(red["live"]),
            "candidates": len(red["candidates"]), "bytes_to_reclaim": red["bytes_to_reclaim"], "requests": reqs,
            "summaries": sums, "live": red["live"], "candidate_ids": red["candidates"]}
