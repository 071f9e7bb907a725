"""The partitioned GC's sweep: the packs no partition needs deleted as partitions, under the GC lock.

Layer 3 (uses :mod:`snapstore.maintenance.partitions`, :mod:`snapstore.maintenance.lock` and the
candidate records of :mod:`snapstore.format.gcstate`). :func:`partitioned_gc` is the whole job:
the driver takes the GC lock, marks every partition and reduces (:mod:`.partitions`), then
:func:`plan_partitioned_sweep` applies the two-phase rule of docs/format.md §21 to the packs no
partition needs, judged at the plan's store time (taken before any partition listed its runs):

* a pack goes only when a candidate record older than the grace period names it and the pack
  itself is older than the grace period (with grace 0: at once);
* an unreferenced pack older than half the grace period, not yet pending, is named in one new
  candidate record, written *before* any deletion;
* with an S3 Inventory, only packs it lists (modified at or before its creation) are judged at all.

The deletions are cut into ``sweep-<i>.parquet`` files (pack key, bytes), and ``sweep.json`` is
written last: from then on the plan is fixed. :func:`sweep_partition` deletes one file's packs
(``DeleteObjects`` of up to 1,000 keys; deleting a missing key succeeds, so a partition retried
after a lost reply or a killed worker deletes nothing else) and writes ``swept-<i>.json``. Once
every partition is swept the driver deletes the candidate records it used (those naming packs
only), writes ``gc-done.json`` and releases the lock. A driver killed at any moment is resumed by a
re-run in the same directory: before ``sweep.json`` exists it marks again (a candidate record
already written is then pending and its packs are not named twice); after, it sweeps the
partitions not yet swept. Deciding later than the mark is safe: a pack unreferenced at a mark made
at least the grace period after its candidate record can gain no reference any more (§21, "Why
nothing live is deleted", (b)).

Only packs are swept here: forwarding records, log records, index records, archive bundles and
the repack stay with the one-process ``snapstore gc``, which reads the same candidate records.
"""

from __future__ import annotations

import json
import os
import time

from ..errors import InvalidInputError, SnapstoreError
from ..format import keys
from ..format.gcstate import candidates_key, decode_candidate_bundles, decode_candidates, encode_candidates
from . import partitions as P
from .lock import LOCK_TIMEOUT, LockKeeper, acquire, release

__all__ = ["plan_partitioned_sweep", "sweep_partition", "partitioned_gc", "SWEEP_FILE", "DONE_FILE"]

SWEEP_FILE = "sweep.json"
DONE_FILE = "gc-done.json"
DELETE_BATCH = 1000


def _sweep_path(plan: P.MarkPlan, i: int) -> str:
    return os.path.join(plan.job_dir, f"sweep-{i:05d}.parquet")


def _swept_path(plan: P.MarkPlan, i: int) -> str:
    return os.path.join(plan.job_dir, f"swept-{i:05d}.json")


def _write_json(path: str, d: dict) -> None:
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def plan_partitioned_sweep(plan: P.MarkPlan, red: dict, grace_period: float, parts: int) -> dict:
    """Decide the deletions of a partitioned GC and write them as ``parts`` sweep partitions.

    Reads the candidate records (LIST ``gc/candidates/`` and one GET each), writes one new
    candidate record (if any pack becomes one), the ``sweep-<i>.parquet`` files, then ``sweep.json``.

    Args:
        plan: the :class:`~snapstore.maintenance.partitions.MarkPlan` (its ``now`` is the time the
            rule is judged at).
        red: what :func:`~snapstore.maintenance.partitions.reduce_mark` returned (``live``, ``listed``).
        grace_period: seconds (>= 0).
        parts: number of sweep partitions (>= 1).
    Returns:
        The sweep plan as written to ``sweep.json``: ``now``, ``grace_period``, ``partitions``,
        ``delete_packs``, ``delete_bytes``, ``new_candidates``, ``pending_candidates``,
        ``used_records`` (candidate record keys deleted at the end), ``requests``.
    Raises:
        StoreError: the store failed (nothing deleted yet).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = P.open_plan(plan)
    store = repo.store
    now, grace = plan.now, grace_period
    mature, settled = now - grace, now - grace / 2
    listed, live = red["listed"], red["live"]
    unref = {p for p in listed if p not in live}
    matured_p, pending_p, used = set(), set(), []
    for info in store.list(keys.GC_CANDIDATES):
        try:
            data = store.get(info.key)
            ps, fs = decode_candidates(info.key, data)
            bs = decode_candidate_bundles(info.key, data)
        except (SnapstoreError, ValueError):
            continue  # unreadable: the one-process GC deletes it
        if info.mtime <= mature:
            matured_p |= ps
            if not fs and not bs:
                used.append(info.key)  # names packs only: this sweep uses it up
        else:
            pending_p |= ps
    if grace == 0:
        doomed = sorted(unref)
    else:
        doomed = sorted(p for p in unref if p.hex() in matured_p and listed[p][1] <= mature)
    gone = set(doomed)
    new = sorted(p.hex() for p in unref - gone if p.hex() not in pending_p and listed[p][1] <= settled) \
        if grace > 0 else []
    if new:  # before any deletion: nothing unreferenced is forgotten
        store.put(candidates_key(now, os.urandom(4).hex()), encode_candidates(new, []))
    parts = max(1, min(parts, len(doomed) or 1))
    for i in range(parts):
        chunk = doomed[i::parts]
        tmp = _sweep_path(plan, i) + ".tmp"
        pq.write_table(pa.table({"key": pa.array([keys.pack_key(p) for p in chunk], pa.string()),
                                 "size": pa.array([listed[p][0] for p in chunk], pa.int64())}), tmp)
        os.replace(tmp, _sweep_path(plan, i))
    sweep = {"now": now, "grace_period": grace, "partitions": parts, "delete_packs": len(doomed),
             "delete_bytes": sum(listed[p][0] for p in doomed), "new_candidates": len(new),
             "pending_candidates": len(unref - gone), "used_records": used, "requests": P.store_requests(repo)}
    _write_json(os.path.join(plan.job_dir, SWEEP_FILE), sweep)
    return sweep


def sweep_partition(plan: P.MarkPlan, index: int) -> dict:
    """Delete the packs of sweep partition ``index`` (``sweep-<index>.parquet``); write
    ``swept-<index>.json``. Runs on a worker (opens the repository from ``plan.url``); a partition
    already swept is not swept again, and one retried deletes what is left (deletes are idempotent).

    Returns:
        ``{"index", "deleted" (packs), "deleted_bytes", "requests" (kind -> count), "seconds", "resumed"}``.
    Raises:
        StoreError: the store failed (a retry deletes what is left).
    """
    import pyarrow.parquet as pq

    done = _swept_path(plan, index)
    if os.path.exists(done):
        with open(done) as f:
            d = json.load(f)
        d["resumed"] = True
        return d
    t0 = time.monotonic()
    t = pq.read_table(_sweep_path(plan, index))
    doomed, sizes = t.column("key").to_pylist(), t.column("size").to_pylist()
    repo = P.open_plan(plan)
    for i in range(0, len(doomed), DELETE_BATCH):
        repo.store.delete_many(doomed[i:i + DELETE_BATCH])
    d = {"index": index, "deleted": len(doomed), "deleted_bytes": sum(sizes), "requests": P.store_requests(repo),
         "seconds": round(time.monotonic() - t0, 3), "resumed": False}
    _write_json(done, d)
    return d


def _clear(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        if name in (SWEEP_FILE, DONE_FILE, P.PLAN_FILE, P.CANDIDATES_FILE, P.INVENTORY_FILE) or (
                name.startswith(("mark-", "sweep-", "swept-")) and name.endswith((".parquet", ".json"))):
            os.remove(os.path.join(job_dir, name))


def partitioned_gc(url: str, job_dir: str, partitions: int = 8, executor: str = "local",
                   scheduler: "str | object | None" = None, workers: int = 4, grace_period: float = 3600.0,
                   store_options: dict | None = None, inventory: str | None = None, progress=None,
                   lock_timeout: float = LOCK_TIMEOUT, hooks: dict | None = None) -> dict:
    """A partitioned GC of packs: mark as partitions, reduce, then sweep as partitions, under the GC lock.

    Args:
        url: the repository's URL (workers open it; credentials from their environment).
        job_dir: the job directory (shared with the workers); a re-run after a kill resumes there.
        partitions: run-key partitions to mark (and at most as many sweep partitions).
        executor: ``local`` (``workers`` threads, the default) or ``dask`` (``scheduler``).
        grace_period: seconds (>= 0; 0 asserts nothing else writes: unreferenced packs go at once).
        store_options: options for :func:`~snapstore.stores.open_store`.
        inventory: None, or an S3 Inventory manifest URL listing the packs instead of a LIST.
        progress: optional ``progress(phase, done, total)``; phases ``mark`` and ``sweep`` (partitions).
        lock_timeout: seconds after which another GC's unrefreshed lock is stale.
        hooks: test hooks: ``after_sweep_plan(sweep=dict)``, called once ``sweep.json`` is written.
    Returns:
        The mark's report (:func:`~snapstore.maintenance.partitions.partitioned_mark`) plus
        ``sweep`` (the plan, see :func:`plan_partitioned_sweep`), ``sweep_partitions_done``,
        ``deleted_packs``, ``deleted_bytes``, ``resumed`` (``mark`` / ``sweep`` / None), with
        ``requests`` summed over every step.
    Raises:
        ConflictError: another GC holds the lock, or this one lost it before deleting.
        InvalidInputError: a negative grace period, an unknown executor, a bad inventory.
    """
    if grace_period < 0:
        raise InvalidInputError(f"grace_period must be >= 0, got {grace_period}")
    P.require_pyarrow()
    P.check_executor(executor, scheduler)
    url, job_dir = P.absolute_url(url), os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    P.check_job_owner(job_dir, url)  # another repository's job (finished or not) is refused
    if os.path.exists(os.path.join(job_dir, DONE_FILE)) or (
            os.path.exists(os.path.join(job_dir, P.CANDIDATES_FILE))
            and not os.path.exists(os.path.join(job_dir, SWEEP_FILE))):
        _clear(job_dir)  # a finished job (or a dry run's): a re-run collects the repository as it is now
    repo = P.open_url(url, store_options or {})
    token = os.urandom(8).hex()
    keeper = LockKeeper(repo, token, acquire(repo, repo.store_time(), lock_timeout, token),
                        max(0.05, lock_timeout / 5))
    try:
        sweep_file = os.path.join(job_dir, SWEEP_FILE)
        resumed = None
        if os.path.exists(sweep_file):  # killed mid-sweep: the plan is fixed, sweep what is left
            resumed = "sweep"
            plan = P.plan_mark(url, job_dir, partitions, store_options, inventory)
            with open(sweep_file) as f:
                sweep = json.load(f)
            sums = [P.mark_partition(plan, i) for i in range(len(plan.partitions))]
            red = P.reduce_mark(plan)
        else:
            if os.path.exists(os.path.join(job_dir, P.PLAN_FILE)):
                resumed = "mark"
            plan = P.plan_mark(url, job_dir, partitions, store_options, inventory)
            sums = P.execute(plan, executor, scheduler, workers, progress=progress)
            red = P.reduce_mark(plan)
            keeper.check()  # a GC that lost its lock decides and deletes nothing
            sweep = plan_partitioned_sweep(plan, red, grace_period, partitions)
        (hooks or {}).get("after_sweep_plan", lambda **k: None)(sweep=sweep)
        keeper.check()
        swept = P.execute(plan, executor, scheduler, workers, task=sweep_partition, count=sweep["partitions"],
                          progress=progress, phase="sweep")
        keeper.check()
        if sweep["used_records"]:
            repo.store.delete_many(sweep["used_records"])
        rep = P.mark_report(plan, sums, red)
        rep.update({"sweep": sweep, "sweep_partitions": sweep["partitions"], "sweep_partitions_done": len(swept),
                    "deleted_packs": sum(s["deleted"] for s in swept),
                    "deleted_bytes": sum(s["deleted_bytes"] for s in swept), "resumed": resumed,
                    "grace_period": grace_period})
        rep["requests"] = P.sum_requests(rep["requests"], sweep.get("requests"),
                                         *(s.get("requests") for s in swept), P.store_requests(repo))
        _write_json(os.path.join(job_dir, DONE_FILE),
                    {k: v for k, v in rep.items() if k not in ("live", "candidate_ids", "summaries")})
        return rep
    finally:
        keeper.stop()
        release(repo, token)
