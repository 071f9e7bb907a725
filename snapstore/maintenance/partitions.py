"""GC's mark as a plan of independent partitions (balanced run-key ranges), run by a local or a Dask executor.

Layer 3 (uses :mod:`snapstore.maintenance.gc`). This is the first slice of issue 25: the *mark* half
of GC split by run key. :func:`plan_mark` lists the runs once and cuts their sorted keys into ranges
of about equal numbers of listed log records (derived from the actual run list, not fixed prefixes);
each partition is marked on its own (:func:`mark_partition`: the worker opens the repository from
its URL, credentials from its environment, lists only its key range of ``runs/`` (and ``packs/``) and marks only the runs in its range with GC's
own mark, as a dry run: it writes nothing to the repository but the store-clock probe, one PUT and
DELETE of ``gc/clock-<random>``, which a later GC removes if a kill leaves it) and writes its live packs as Parquet
in the job directory (``mark-<i>.parquet``). A partition whose file exists is not marked again, so a
job that was interrupted resumes, and a failed partition is retried on its own. :func:`reduce_mark`,
the driver step, unions the live packs and writes the packs no partition needs as
``candidates.parquet``.

Only the plan (a :class:`MarkPlan`, plain data) and the per-partition summaries travel between the
driver and the workers; nothing else is pickled. The candidates here are a report, never deleted on
their own word: :mod:`snapstore.maintenance.partsweep` (``gc --plan`` without ``--dry-run``) holds
the GC lock around this mark and deletes under the two-phase rule, judged at the plan's store time
(:attr:`MarkPlan.now`). With an S3 Inventory (:mod:`snapstore.maintenance.inventory`) the driver
reads it once into ``inventory.parquet`` and every partition takes the packs from it.

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

from ..errors import InvalidInputError, MissingDependencyError
from ..repo.repository import Repository
from ..stores import open_store
from .gc import GCPlan
from .gcreport import GCOptions
from .runs import list_runs

__all__ = ["Partition", "MarkPlan", "plan_mark", "owned_range", "mark_partition", "reduce_mark", "run_local", "run_dask",
           "partitioned_mark", "peak_rss_kb", "open_url", "open_plan", "absolute_url", "store_requests",
           "check_job_owner", "check_job_dir"]

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
        now: the store's clock (seconds since the epoch, UTC) before the runs were listed: the
            time a deleting job's grace rule is judged at (docs/format.md §21).
        inventory: None, or the S3 Inventory manifest URL whose packs stand in for the LIST of
            ``packs/`` (read once by the driver into ``<job_dir>/inventory.parquet``).
    """

    url: str
    job_dir: str
    partitions: tuple
    store_options: dict = field(default_factory=dict)
    now: float = 0.0
    inventory: str | None = None

    def result_path(self, index: int) -> str:
        """Path of partition ``index``'s Parquet file."""
        return os.path.join(self.job_dir, f"mark-{index:05d}.parquet")


def owned_range(plan: MarkPlan, index: int) -> tuple:
    """The run keys partition ``index`` of ``plan`` owns: ``(after, last)``, every run key ``rk``
    with ``after < rk <= last`` (``after`` None for the first partition: no lower bound). The
    ranges of consecutive partitions meet, so a run created after planning between two planned
    runs belongs to exactly one partition."""
    after = plan.partitions[index - 1].last if index > 0 else None
    return after, plan.partitions[index].last


def open_url(url: str, store_options: dict) -> Repository:
    """The repository at ``url``; an encrypted one through the keys of this process's environment
    (``$SNAPSTORE_PASSPHRASE`` / ``$SNAPSTORE_KMS_KEY``, as every worker must have them).

    Args:
        url: the repository's URL (``s3://bucket/prefix``, a local path, ...).
        store_options: keyword options for :func:`snapstore.stores.open_store` (e.g. ``endpoint_url``).
    Returns:
        The opened :class:`~snapstore.repo.repository.Repository` (the caller closes its store).
    Raises:
        RepositoryNotFound: nothing at ``url``. StoreError: the store failed.
    """
    from ..stores.crypt import keys_from_env, sealed_if_keyed

    store = open_store(url, **store_options)
    try:
        store = sealed_if_keyed(store, *keys_from_env())
    except BaseException:
        store.close()
        raise
    return Repository.open(store, create=False)


def open_plan(plan: MarkPlan) -> Repository:
    """The repository of ``plan`` (:func:`open_url` of its ``url`` and ``store_options``), as a worker opens it."""
    return open_url(plan.url, plan.store_options)


def absolute_url(url: str) -> str:
    """``url`` (a string) with a local path made absolute (workers resolve paths against their own
    working directory); URLs with a scheme (``s3://...``) are returned as they are."""
    return url if "://" in url else os.path.abspath(url)


def check_job_owner(job_dir: str, url: str) -> None:
    """Refuse ``job_dir`` if any job plan in it (``plan.json`` of mark, sweep, verify and stats,
    ``archive-plan.json``, ``import-plan.json``; finished or not) is for another repository.

    Every partitioned job calls this before it clears a finished job's files, so that a job
    directory given for the wrong repository is refused, never silently replaced.

    Args:
        job_dir: the job directory (need not exist).
        url: the absolute repository URL of the job about to run.
    Raises:
        InvalidInputError: a plan there names another repository URL, or is unreadable.
    """
    try:
        names = sorted(os.listdir(job_dir))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if name != PLAN_FILE and not name.endswith("-" + PLAN_FILE):
            continue
        path = os.path.join(job_dir, name)
        try:
            with open(path) as f:
                theirs = json.load(f)["url"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InvalidInputError(f"{path} is not a readable job plan ({e}); give an empty job directory") from None
        if theirs != url:
            raise InvalidInputError(f"the job directory {job_dir} holds a job for another repository ({theirs}), "
                                    f"not {url}; give each repository its own job directory")


def check_job_dir(job_dir: str, url: str, inventory: str | None = None) -> dict | None:
    """The plan ``job_dir`` holds (its ``plan.json`` as a dict), or None if it holds none.

    Raises:
        InvalidInputError: a plan there (of any job: :func:`check_job_owner`) is for another
            repository URL, the mark plan for another inventory (a job directory serves one
            repository: give each job its own), or a plan is unreadable.
    """
    check_job_owner(job_dir, url)
    path = os.path.join(job_dir, PLAN_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            d = json.load(f)
        theirs, their_inv = d["url"], d.get("inventory")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(f"{path} is not a readable job plan ({e}); give an empty job directory") from None
    if theirs != url:
        raise InvalidInputError(f"the job directory {job_dir} holds a job for another repository ({theirs}), "
                                f"not {url}; give each repository its own job directory")
    if their_inv != inventory:
        def name(i):
            return "no inventory" if i is None else f"inventory {i}"
        raise InvalidInputError(f"the job directory {job_dir} holds a job planned with {name(their_inv)}, "
                                f"not {name(inventory)}; give a new job directory or the same --inventory")
    return d


def plan_mark(url: str, job_dir: str, partitions: int, store_options: dict | None = None,
              inventory: str | None = None) -> MarkPlan:
    """List the runs of the repository at ``url`` and cut them into balanced key ranges.

    Args:
        url: repository URL (``s3://...``, a path, ...).
        job_dir: directory for the plan and results (created; an existing plan there is reused,
            so a re-run resumes).
        partitions: wanted number of partitions (>= 1; fewer when there are fewer runs).
        store_options: options for :func:`~snapstore.stores.open_store`.
        inventory: None, or the ``s3://`` URL of an S3 Inventory's ``manifest.json``: read here
            once (:func:`~snapstore.maintenance.inventory.read_inventory`) and written to
            ``job_dir/inventory.parquet``, which every partition reads instead of LISTing packs.
    Returns:
        The :class:`MarkPlan` (also written to ``job_dir/plan.json``).
    Raises:
        InvalidInputError: ``partitions`` < 1, ``job_dir`` holds a plan for another URL or
            inventory, or the inventory is malformed.
        RepositoryNotFound: nothing at ``url``.
    """
    if partitions < 1:
        raise InvalidInputError(f"partitions must be >= 1, got {partitions}")
    os.makedirs(job_dir, exist_ok=True)
    path = os.path.join(job_dir, PLAN_FILE)
    d = check_job_dir(job_dir, url, inventory)
    if d is not None:
        return MarkPlan(d["url"], job_dir, tuple(Partition(**p) for p in d["partitions"]), store_options or {},
                        d.get("now", 0.0), d.get("inventory"))
    repo = open_url(url, store_options or {})
    if inventory is not None:
        from .inventory import read_inventory
        _write_inventory(read_inventory(inventory, repo.store), job_dir)
    now = repo.store_time()  # before the runs are listed: the grace rule is judged at it
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
    plan = MarkPlan(url, job_dir, tuple(parts), store_options or {}, now, inventory)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"url": url, "partitions": [asdict(p) for p in parts], "now": now, "inventory": inventory}, f)
    os.replace(tmp, path)
    return plan


INVENTORY_FILE = "inventory.parquet"


def _write_inventory(inv, job_dir: str) -> None:
    """Write an :class:`~snapstore.maintenance.inventory.Inventory`'s packs to
    ``job_dir/inventory.parquet`` (columns key, size, etag, mtime; its url, created and counts in
    the schema metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"key": pa.array([i.key for i in inv.packs], pa.string()),
                      "size": pa.array([i.size for i in inv.packs], pa.int64()),
                      "etag": pa.array([i.etag for i in inv.packs], pa.string()),
                      "mtime": pa.array([i.mtime for i in inv.packs], pa.float64())})
    meta = {"url": inv.url, "source_bucket": inv.source_bucket, "created": inv.created, "rows": inv.rows,
            "newer": inv.newer, "files": inv.files, "requests": inv.requests}
    table = table.replace_schema_metadata({"inventory": json.dumps(meta)})
    out = os.path.join(job_dir, INVENTORY_FILE)
    pq.write_table(table, out + ".tmp")
    os.replace(out + ".tmp", out)


def load_inventory(plan: MarkPlan):
    """The plan's :class:`~snapstore.maintenance.inventory.Inventory` from
    ``job_dir/inventory.parquet``, or None when the plan has no inventory.

    Raises:
        InvalidInputError: the plan names an inventory but the file is missing.
    """
    if plan.inventory is None:
        return None
    import pyarrow.parquet as pq

    from ..stores.base import ObjectInfo
    from .inventory import Inventory

    path = os.path.join(plan.job_dir, INVENTORY_FILE)
    if not os.path.exists(path):
        raise InvalidInputError(f"the plan names the inventory {plan.inventory} but {path} is missing")
    t = pq.read_table(path)
    meta = json.loads((t.schema.metadata or {}).get(b"inventory", b"{}"))
    inv = Inventory(meta.get("url", plan.inventory), meta.get("source_bucket", ""), float(meta.get("created", 0.0)),
                    rows=meta.get("rows", 0), newer=meta.get("newer", 0), files=meta.get("files", 0),
                    requests=meta.get("requests", {}))
    cols = [t.column(c).to_pylist() for c in ("key", "size", "etag", "mtime")]
    inv.packs = [ObjectInfo(k, sz, e, m) for k, sz, e, m in zip(*cols)]
    return inv


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

    out = plan.result_path(index)
    done = finished_summary(out)
    if done is not None:
        return done
    part = plan.partitions[index]
    t0 = time.monotonic()
    repo = open_plan(plan)
    g = GCPlan(repo, GCOptions(dry_run=True), repo.store_time(), repo.cache.limit)
    g.run_range = owned_range(plan, index)
    g.inventory = load_inventory(plan)
    g.list_repository()
    try:
        g.mark()
    finally:
        g.abandon()
    packs = sorted(g.reach.packs)
    summary = {"index": index, "runs": len(g.logs), "live_checkpoints": sum(len(x.live) for x in g.logs.values()),
               "live_packs": len(packs), "listed_packs": len(g.packs),
               "live_bytes": sum(g.packs[p].size for p in packs if p in g.packs),
               "requests": store_requests(repo), "seconds": round(time.monotonic() - t0, 3), "resumed": False,
               "peak_rss_kb": peak_rss_kb()}
    table = pa.table({"pack": pa.array([p.hex() for p in packs], pa.string()),
                      "size": pa.array([g.packs[p].size if p in g.packs else -1 for p in packs], pa.int64())})
    write_result(table, summary, out)
    return summary


def finished_summary(out: str) -> dict | None:
    """The summary of the partition result file ``out`` (its schema metadata ``summary``) with
    ``resumed`` set, if the file exists: the partition is done and is not run again; else None."""
    import pyarrow.parquet as pq

    if not os.path.exists(out):
        return None
    s = json.loads((pq.read_schema(out).metadata or {}).get(b"summary", b"{}"))
    s["resumed"] = True
    return s


def write_result(table, summary: dict, out: str) -> None:
    """Write the pyarrow ``table`` to the Parquet file ``out`` with ``summary`` (JSON) as its schema
    metadata ``summary``: to a temporary name first, then renamed, so a reader (or a resumed job)
    sees the whole file or none."""
    import pyarrow.parquet as pq

    table = table.replace_schema_metadata({"summary": json.dumps(summary)})
    tmp = out + f".tmp{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, out)


def peak_rss_kb() -> int:
    """This process's peak resident set so far, KiB (0 where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # (not on Windows)
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def store_requests(repo: Repository) -> dict:
    """The requests ``repo``'s store has sent so far, kind (``GET``, ``LIST``, ...) -> count; ``{}``
    for a store that does not count them."""
    stats = getattr(repo.store, "stats", None)
    return dict(stats.counts) if stats is not None else {}


def reduce_mark(plan: MarkPlan) -> dict:
    """The driver step: union the partitions' live packs; the listed packs none needs are written
    to ``candidates.parquet`` (a report: the sweep, :mod:`snapstore.maintenance.partsweep` or the
    one-process GC, decides under its grace rule).

    Args:
        plan: a :class:`MarkPlan` whose partitions are all marked.
    Returns:
        ``{"live": set of pack ids (bytes), "candidates": set of pack ids (bytes),
        "bytes_to_reclaim": int, "listed": pack id -> (bytes, store time in seconds it is aged
        from), "requests": the driver's requests by kind}``.
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
    repo = open_plan(plan)
    from ..format import keys
    from ..format.shared import effective_mtime
    inv = load_inventory(plan)
    listed = {}  # pack id -> (bytes, store time it is aged from)
    # after every partition listed its runs (so every pack a live record names is in a LIST), or
    # the inventory's packs (those newer than it are not: never deleted on its word, §21)
    for info in (inv.packs if inv is not None else repo.store.list(keys.PACKS)):
        pid = keys.pack_id_from_key(info.key)
        if pid is not None:
            listed[pid] = (info.size, effective_mtime(pid, info.mtime, plan.now or repo.store_time()))
    cands = sorted(set(listed) - live)
    tmp = os.path.join(plan.job_dir, CANDIDATES_FILE + ".tmp")
    pq.write_table(pa.table({"pack": pa.array([c.hex() for c in cands], pa.string()),
                             "size": pa.array([listed[c][0] for c in cands], pa.int64()),
                             "mtime": pa.array([listed[c][1] for c in cands], pa.float64())}), tmp)
    os.replace(tmp, os.path.join(plan.job_dir, CANDIDATES_FILE))
    return {"live": live, "candidates": set(cands), "bytes_to_reclaim": sum(listed[c][0] for c in cands),
            "listed": listed, "requests": store_requests(repo)}


def run_local(plan: MarkPlan, workers: int = 4, retries: int = 1, task=None, count: int | None = None,
              progress=None, phase: str = "mark") -> list:
    """Run every partition of ``plan`` on a thread pool of ``workers`` threads (the default
    executor; no dependency). A partition that fails is tried again up to ``retries`` times.

    Args:
        plan: the :class:`MarkPlan`.
        workers: threads.
        retries: further attempts of a failed partition.
        task: ``task(plan, index) -> summary dict``; default :func:`mark_partition`.
        count: number of partitions (default: the plan's).
        progress: optional ``progress(phase, done, total)``, called as partitions finish.
        phase: the phase name passed to ``progress``.
    Returns:
        The partitions' summaries, in index order.
    Raises:
        The last error of a partition that failed every attempt.
    """
    task = task or mark_partition
    n = len(plan.partitions) if count is None else count

    def one(i):
        for attempt in range(retries + 1):
            try:
                return task(plan, i)
            except Exception:
                if attempt == retries:
                    raise
    out: list = [None] * n
    with ThreadPoolExecutor(max(1, workers)) as ex:
        futs = {ex.submit(one, i): i for i in range(n)}
        from concurrent.futures import as_completed
        for done, f in enumerate(as_completed(futs), 1):
            out[futs[f]] = f.result()
            if progress:
                progress(phase, done, n)
    return out


def run_dask(plan: MarkPlan, scheduler: "str | object", retries: int = 2, task=None, count: int | None = None,
             progress=None, phase: str = "mark") -> list:
    """Run every partition of ``plan`` on a Dask distributed cluster.

    Args:
        plan: the :class:`MarkPlan` (its ``job_dir`` must be reachable from the workers).
        scheduler: the scheduler's address (``tcp://host:8786``) or a ``distributed.Client``.
        retries: times Dask retries a failed partition task.
        task / count / progress / phase: as for :func:`run_local`.
    Returns:
        The partitions' summaries, in index order.
    Raises:
        InvalidInputError: dask distributed is not installed (``pip install 'snapstore[dask]'``).
    """
    try:
        from distributed import Client
    except ImportError:
        raise InvalidInputError("the dask executor needs dask distributed: pip install 'snapstore[dask]'") from None
    from distributed import as_completed

    task = task or mark_partition
    n = len(plan.partitions) if count is None else count
    own = not isinstance(scheduler, Client)
    client = Client(scheduler) if own else scheduler
    try:
        futs = [client.submit(task, plan, i, retries=retries, pure=False, key=f"{phase}-{i}-{os.urandom(4).hex()}")
                for i in range(n)]
        for done, _ in enumerate(as_completed(futs), 1):
            if progress:
                progress(phase, done, n)
        return client.gather(futs)
    finally:
        if own:
            client.close()


def _clear_finished(job_dir: str) -> None:
    """Remove a finished job's files (plan, partition results, candidates) from ``job_dir``: only
    an unfinished job is resumed, so a re-run never reports an earlier state of the repository."""
    for name in os.listdir(job_dir):
        if name in (PLAN_FILE, CANDIDATES_FILE, INVENTORY_FILE) or (name.startswith("mark-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def check_executor(executor: str, scheduler) -> None:
    """Raise InvalidInputError for an unknown executor, or ``dask`` without a scheduler."""
    if executor not in ("local", "dask"):
        raise InvalidInputError(f"executor must be 'local' or 'dask', got {executor!r}")
    if executor == "dask" and scheduler is None:
        raise InvalidInputError("the dask executor needs a scheduler address (--scheduler tcp://HOST:PORT)")


def execute(plan: MarkPlan, executor: str, scheduler, workers: int, task=None, count: int | None = None,
            progress=None, phase: str = "mark") -> list:
    """Run ``task`` (default :func:`mark_partition`) over ``count`` partitions on ``executor``
    (``local``: :func:`run_local` with ``workers`` threads; ``dask``: :func:`run_dask`)."""
    if executor == "local":
        return run_local(plan, workers, task=task, count=count, progress=progress, phase=phase)
    return run_dask(plan, scheduler, task=task, count=count, progress=progress, phase=phase)


def sum_requests(*parts) -> dict:
    """Requests by kind summed over dicts ``kind -> count``."""
    out: dict = {}
    for d in parts:
        for k, v in (d or {}).items():
            out[k] = out.get(k, 0) + v
    return out


def mark_report(plan: MarkPlan, sums: list, red: dict) -> dict:
    """The report of a partitioned mark (see :func:`partitioned_mark`)."""
    inv = load_inventory(plan)
    return {"partitions": len(plan.partitions), "partitions_done": len(sums),
            "listing": "LIST" if inv is None else f"inventory {inv.url}",
            "inventory_created": None if inv is None else inv.created,
            "listed_packs": len(red["listed"]), "live_checkpoints": sum(s["live_checkpoints"] for s in sums),
            "live_packs": len(red["live"]), "candidates": len(red["candidates"]),
            "bytes_to_reclaim": red["bytes_to_reclaim"],
            "requests": sum_requests(*(s.get("requests") for s in sums), red.get("requests"),
                                     None if inv is None else inv.requests),
            "summaries": sums, "live": red["live"], "candidate_ids": red["candidates"]}


def require_pyarrow() -> None:
    """Check that pyarrow (the job files' Parquet) can be imported, before anything is written.

    Raises:
        MissingDependencyError: it cannot; the message names the extra to install.
    """
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise MissingDependencyError("gc --plan (partitioned GC) writes its job files as Parquet and needs "
                                     "pyarrow: pip install 'snapstore[partitioned]' (or 'snapstore[dask]' "
                                     "for the Dask executor)") from None


def partitioned_mark(url: str, job_dir: str, partitions: int = 8, executor: str = "local",
                     scheduler: "str | object | None" = None, workers: int = 4,
                     store_options: dict | None = None, inventory: str | None = None, progress=None) -> dict:
    """Plan, mark every partition with ``executor`` (``local`` or ``dask``), then reduce.

    Args:
        url / job_dir / partitions / store_options: as for :func:`plan_mark`.
        executor: ``local`` (threads, ``workers`` of them) or ``dask`` (``scheduler``: address or Client).
        inventory: None, or an S3 Inventory manifest URL (see :func:`plan_mark`).
        progress: optional ``progress(phase, done, total)``: ``("mark", partitions done, partitions)``.
    Returns:
        A report dict: ``partitions`` (count), ``partitions_done``, ``listing`` (``LIST`` or
        ``inventory URL``), ``inventory_created`` (seconds, or None), ``listed_packs``,
        ``live_checkpoints``, ``live_packs``, ``candidates`` (count), ``bytes_to_reclaim``,
        ``requests`` (kind -> count summed over partitions, the driver and the inventory's reads),
        ``summaries`` (per partition), ``live`` / ``candidate_ids`` (sets of pack ids).
    Raises:
        InvalidInputError: an unknown executor, ``dask`` without a scheduler, a malformed inventory.
        MissingDependencyError: pyarrow is not installed (the job files are Parquet).
    """
    require_pyarrow()
    check_executor(executor, scheduler)
    url, job_dir = absolute_url(url), os.path.abspath(job_dir)
    check_job_owner(job_dir, url)
    if os.path.exists(os.path.join(job_dir, CANDIDATES_FILE)):
        _clear_finished(job_dir)  # a finished job: a re-run marks the repository as it is now
    plan = plan_mark(url, job_dir, partitions, store_options, inventory)
    sums = execute(plan, executor, scheduler, workers, progress=progress)
    return mark_report(plan, sums, reduce_mark(plan))
