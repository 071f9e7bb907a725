"""``verify`` as a plan of independent run-key partitions (``verify --plan DIR``), run by the local or the Dask executor.

Layer 3 (uses :mod:`snapstore.maintenance.verify` and :mod:`snapstore.maintenance.partitions`).
The report is the one-process :func:`~snapstore.maintenance.verify.verify` report of the same
repository: the same errors and warnings (code, key, message) and the same counts. Its steps
split in two kinds:

* per run (the run logs, tool outcomes, log segments, gaps, mark, needed entries, data, segments,
  touched packs): a partition (:func:`verify_partition`, on a worker that opens the repository
  from its URL with credentials from its environment) runs them for the runs of its key range
  only (it LISTs only that range, :func:`~snapstore.maintenance.runs.list_run_range`) and writes
  what it found as ``verify-<i>.parquet``;
* global (the layout's unknown objects, the forwarding map, archive bundles, unreferenced packs and
  forwarding records, crash leftovers): the driver runs them once, from its one LIST of the
  repository, whose packs it writes as ``packs.parquet`` for the partitions (no partition LISTs
  ``packs/``).

A partition's decision that depends on other runs is not taken by the partition: it keeps the
facts for the driver, which decides them over every partition's facts as the one process
decides them over every run (:func:`merge`):

* what mark could not read (``found``: object, message, the runs that need it, the cause) is merged
  per object, then grouped by cause (:func:`~snapstore.maintenance.verify.found_problems`): an
  object two partitions need is one problem naming the runs of both;
* a ``missing-pack`` / ``corrupt-pack`` error "unless already reported" carries the keys that
  silence it (``gates``) and the pack whose cause may fold it (``fold``); the driver applies them
  against the errors of every partition;
* a segment that is gone or damaged is judged by the driver: whether live entries were lost
  anywhere and whether any partition's live checkpoints need it;
* a damaged pack a reader may touch is a warning only if no partition needs it or holds it as a
  segment; live packs, segments and the retired packs live hints name are unioned before the
  unreferenced packs and forwarding records are reported.

Each partition file holds rows ``(kind, step, code, key, message, extra)`` (``extra``: JSON) and
its summary (runs, checkpoints, requests by kind, seconds, peak RSS) in the schema metadata. A
partition whose file exists is not verified again (a re-run of an interrupted job resumes; a
killed worker leaves no partial file, it writes to a temporary name and renames); after a
finished job (``verify-done.json``) a re-run verifies anew.
"""

from __future__ import annotations

import json
import os
import time
from functools import partial

from ..format import keys
from ..format.bundle import ARCHIVE
from ..repo.repository import Repository
from . import outcomes
from . import partitions as P
from .mark import Reach
from .runs import head_segments, list_run_range
from .verify import Verifier, VerifyReport, found_needed_by, found_problems

__all__ = ["PartitionVerifier", "verify_partition", "merge", "partitioned_verify", "PACKS_FILE", "DONE_FILE"]

PACKS_FILE = "packs.parquet"
DONE_FILE = "verify-done.json"
_PER_RUN = ("check_logs", "check_outcomes", "check_logsegs", "check_gaps", "mark", "check_needed", "check_data")


def _result_path(plan: P.MarkPlan, index: int) -> str:
    return os.path.join(plan.job_dir, f"verify-{index:05d}.parquet")


class PartitionVerifier(Verifier):
    """The per-run steps of :class:`~snapstore.maintenance.verify.Verifier` for one partition's
    runs; what needs every run's findings is kept as facts (:meth:`rows`) for the driver.

    Args:
        repo: the repository (opened by the worker).
        plan: the :class:`~snapstore.maintenance.partitions.MarkPlan`.
        index: the partition's index.
        packs_present: pack id (bytes) -> key, from the driver's listing (``packs.parquet``).
        read_data / accept_missing: as for :func:`~snapstore.maintenance.verify.verify`.
    """

    def __init__(self, repo: Repository, plan: P.MarkPlan, index: int, packs_present: dict,
                 read_data: bool = False, accept_missing: bool = False):
        super().__init__(repo, read_data, None, accept_missing)
        self.plan, self.index, self.given_packs = plan, index, packs_present
        self.gates: dict = {}  # id(problem) -> (gates, fold) of gated errors
        self.items: list = []  # (kind, step, code, key, message, extra dict)
        self.seg_facts: list = []
        self.touched: list = []

    def run(self) -> VerifyReport:
        """Run every step, noting which step found each problem; return the partition's report."""
        with self.repo.lock:
            self.repo.cache.forget_corrupt()
        for step in self.STEPS:
            ne, nw = len(self.rep.errors), len(self.rep.warnings)
            getattr(self, step)()
            skip = {id(p) for p in (self.marker_problems if step == "mark" else ())}
            for kind, new in (("error", self.rep.errors[ne:]), ("warning", self.rep.warnings[nw:])):
                for p in new:
                    if id(p) in skip:
                        continue  # mark's findings go as ``found`` rows, merged by the driver
                    g, fold = self.gates.get(id(p), ((), None))
                    self.items.append((kind, step, p.code, p.key, p.message,
                                       {"gates": list(g), "fold": fold} if g or fold else {}))
        return self.rep

    def list_objects(self) -> None:
        """Only the partition's key range of ``runs/`` is listed (and ``fwd/``, ``archive/``);
        the packs come from the driver's listing. Unknown objects are the driver's to report."""
        store = self.repo.store
        self.fwd_infos = list(store.list(keys.FWD))
        self.archive_infos = {i.key: i for i in store.list(ARCHIVE)}
        self.packs_present = dict(self.given_packs)
        self.listing = list_run_range(self.repo, *P.owned_range(self.plan, self.index))
        self.outcome_keys = [i.key for i in self.listing.other if outcomes.is_outcome_key(i.key)]
        self.all_infos = list(self.listing.infos.values())

    def load_forwarding(self, report: bool = True) -> None:
        """The forwarding map, read without reporting (the driver reports it once)."""
        super().load_forwarding(report=False)

    def read_bundle_index(self, report: bool = True) -> None:
        """The bundle index, read without reporting (the driver reports it once)."""
        super().read_bundle_index(report=False)

    def report_unused_forwarding(self, fwd_used: set) -> None:
        """Left to the driver (it needs every partition's ``fwd_used``)."""

    def check_bundles(self) -> None:
        """Left to the driver (bundles are global)."""

    def gated_error(self, code: str, key: str, message: str, gates: tuple = (), fold: str | None = None) -> None:
        """As :meth:`Verifier.gated_error` against this partition's errors, keeping ``gates`` and
        ``fold`` for the driver."""
        n = len(self.rep.errors)
        super().gated_error(code, key, message, gates, fold)
        if len(self.rep.errors) > n:
            self.gates[id(self.rep.errors[-1])] = (tuple(g for g in gates if g is not None), fold)

    def check_segments(self) -> None:
        """Probe the newest records' segments of the partition's runs; the driver judges them."""
        self.segs = segs = head_segments(self.logs)
        for pid, rk in segs.items():
            state, err = self.probe_segment(pid)
            self.seg_facts.append((pid, state, err, self.run_name(rk), self.head_run_id(rk)))

    def check_touched(self) -> None:
        """Read the packs readers may touch; the driver decides which damage is a warning."""
        self.touched = self.touched_damage()

    def report_unreferenced(self) -> None:
        """Left to the driver (it needs every partition's live packs)."""

    def report_leftovers(self) -> None:
        """Left to the driver (the store's leftovers are global)."""

    def rows(self) -> list:
        """Everything the driver needs, as ``(kind, step, code, key, message, extra dict)`` rows."""
        out = list(self.items)
        for (code, key), (msg, runs, cause) in self.marker.found.items():
            out.append(("found", "mark", code, key, msg, {"runs": runs, "cause": cause,
                                                          "dict_runs": self.marker.dict_runs.get((code, key))}))
        reach = self.reach
        out.extend(("live-pack", "", "", p.hex(), "", {}) for p in reach.packs)
        out.extend(("fwd-used", "", "", p.hex(), "", {}) for p in reach.fwd_used)
        out.extend(("node", "", "", n.hex(), "", {}) for n in reach.nodes_seen)
        out.extend(("ref", "", "", f"{mid.hex()}:{pack.hex() if pack else ''}", "", {}) for mid, pack in reach.refs)
        for pid, state, err, name, run_id in self.seg_facts:
            out.append(("segment", "check_segments", state, pid.hex(), err or "", {"name": name, "run_id": run_id}))
        out.extend(("touched", "check_touched", "", pid.hex(), msg, {}) for pid, msg in self.touched)
        return out


def _packs_present(plan: P.MarkPlan) -> dict:
    import pyarrow.parquet as pq

    t = pq.read_table(os.path.join(plan.job_dir, PACKS_FILE), columns=["key"])
    out = {}
    for k in t.column("key").to_pylist():
        out[keys.pack_id_from_key(k)] = k
    return out


def verify_partition(plan: P.MarkPlan, index: int, read_data: bool = False, accept_missing: bool = False) -> dict:
    """Verify the runs of partition ``index``; write its findings as ``verify-<index>.parquet``.

    Runs on a worker (opens the repository from ``plan.url``, reads ``packs.parquet``). Skips the
    work when the partition's file exists (a resumed job); writes to a temporary name, then renames.

    Args:
        plan: the :class:`~snapstore.maintenance.partitions.MarkPlan`.
        index: the partition's index.
        read_data / accept_missing: as for :func:`~snapstore.maintenance.verify.verify`.
    Returns:
        A summary dict: ``index``, ``runs``, ``checkpoints``, ``rows``, ``requests`` (kind ->
        count), ``seconds``, ``resumed`` (bool), ``peak_rss_kb``.
    Raises:
        StoreError: the store failed (what the repository holds is reported, not raised).
    """
    import pyarrow as pa

    out = _result_path(plan, index)
    done = P.finished_summary(out)
    if done is not None:
        return done
    t0 = time.monotonic()
    repo = P.open_plan(plan)
    try:
        v = PartitionVerifier(repo, plan, index, _packs_present(plan), read_data, accept_missing)
        with repo.whole_packs():
            v.run()
        rows = v.rows()
        summary = {"index": index, "runs": sum(1 for log in v.logs.values() if log.live), "checkpoints": len(v.live),
                   "rows": len(rows), "requests": P.store_requests(repo), "seconds": round(time.monotonic() - t0, 3),
                   "resumed": False, "peak_rss_kb": P.peak_rss_kb()}
    finally:
        repo.store.close()
    cols = list(zip(*rows)) if rows else [()] * 6
    table = pa.table({"kind": pa.array(cols[0], pa.string()), "step": pa.array(cols[1], pa.string()),
                      "code": pa.array(cols[2], pa.string()), "key": pa.array(cols[3], pa.string()),
                      "message": pa.array(cols[4], pa.string()),
                      "extra": pa.array([json.dumps(x) for x in cols[5]], pa.string())})
    P.write_result(table, summary, out)
    return summary


def _read_rows(path: str) -> list:
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    cols = [t.column(c).to_pylist() for c in ("kind", "step", "code", "key", "message", "extra")]
    return [(k, s, c, key, m, json.loads(x)) for k, s, c, key, m, x in zip(*cols)]


def merge(driver: Verifier, parts: list) -> VerifyReport:
    """The driver step: every partition's rows (``parts``: one list per partition, in key order)
    and the driver's global findings combined into the one-process report (see the module).

    Args:
        driver: a :class:`~snapstore.maintenance.verify.Verifier` that has listed the repository
            (:meth:`~Verifier.list_objects`), read the forwarding map and the bundle index.
        parts: the partitions' rows, as :func:`verify_partition` wrote them.
    Returns:
        The :class:`~snapstore.maintenance.verify.VerifyReport`.
    """
    d = driver
    by_step: dict = {s: [] for s in d.STEPS}
    found: dict = {}
    dict_seen: set = set()
    live, fwd_used, nodes, refs, segs, touched = set(), set(), set(), set(), {}, {}
    for rows in parts:
        for kind, step, code, key, msg, extra in rows:
            if kind in ("error", "warning"):
                by_step[step].append((id(rows), kind, code, key, msg, extra))
            elif kind == "found":
                got = found.setdefault((code, key), [msg, [], extra["cause"]])
                if got[2] is None:
                    got[2] = extra["cause"]
                # a run named only by its dictionary pass: that pass runs in the first run that
                # finds the pack, so only the first partition's such names are one-process verify's
                dr = extra.get("dict_runs")
                skip = set(dr or ()) if (code, key) in dict_seen else set()
                if dr is not None:
                    dict_seen.add((code, key))
                got[1].extend(r for r in extra["runs"] if r not in got[1] and r not in skip)
            elif kind == "live-pack":
                live.add(bytes.fromhex(key))
            elif kind == "fwd-used":
                fwd_used.add(bytes.fromhex(key))
            elif kind == "node":
                nodes.add(key)
            elif kind == "ref":
                refs.add(key)
            elif kind == "segment":
                segs.setdefault(bytes.fromhex(key), (code, msg or None, extra["name"], extra["run_id"]))
            elif kind == "touched":
                touched.setdefault(bytes.fromhex(key), msg)
    seen: dict = {}  # (kind, step, code, key, message) -> the partition that reported it first

    def add(step: str) -> None:
        for part, kind, code, key, msg, extra in by_step[step]:
            first = seen.setdefault((kind, step, code, key, msg), part)
            if first != part:
                continue  # the same finding of an object two partitions reach: reported once
            if kind == "warning":
                d.warn(code, key, msg)
            elif extra:
                d.gated_error(code, key, msg, tuple(extra.get("gates", ())), extra.get("fold"))
            else:
                d.error(code, key, msg)

    for step in d.STEPS:
        if step == "mark":
            problems, d.folded = found_problems(found)
            d.rep.errors.extend(problems)
            d.needed_by = found_needed_by(found)
            add(step)
            d.report_unused_forwarding(fwd_used)
        elif step == "check_bundles":
            d.check_bundles()
        elif step == "check_segments":
            lost = d.lost()
            d.segs = segs
            for pid, (state, err, name, run_id) in segs.items():
                d.judge_segment(pid, state, err, lost, name, run_id, pid in live)
        elif step == "check_touched":
            for pid, msg in touched.items():
                if pid not in live and pid not in segs:
                    d.damaged.add(pid)
                    d.warn("corrupt-unneeded-pack", keys.pack_key(pid), msg)
        elif step == "report_unreferenced":
            d.reach = Reach()
            d.reach.packs.update((p, set()) for p in live)
            d.report_unreferenced()
        elif step == "report_leftovers":
            d.report_leftovers()
        elif step in _PER_RUN:
            add(step)
    d.rep.checked = {"nodes": len(nodes), "messages": len(refs), "packs": len(live)}
    return d.rep


def _write_packs(driver: Verifier, job_dir: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = os.path.join(job_dir, PACKS_FILE)
    tmp = out + f".tmp{os.getpid()}"
    pq.write_table(pa.table({"key": pa.array(sorted(driver.packs_present.values()), pa.string())}), tmp)
    os.replace(tmp, out)


def _write_json(path: str, d: dict) -> None:
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, path)


def _clear(job_dir: str) -> None:
    for name in os.listdir(job_dir):
        if name in (DONE_FILE, PACKS_FILE, P.PLAN_FILE) or (name.startswith("verify-") and name.endswith(".parquet")):
            os.remove(os.path.join(job_dir, name))


def partitioned_verify(url: str, job_dir: str, partitions: int = 8, executor: str = "local",
                       scheduler: "str | object | None" = None, workers: int = 4, read_data: bool = False,
                       accept_missing: bool = False, store_options: dict | None = None, progress=None) -> dict:
    """``verify`` as partitions: the driver lists the repository once and plans run-key
    partitions, each partition verifies its runs on ``executor``, the driver merges.

    Args:
        url: the repository's URL (workers open it; credentials from their environment).
        job_dir: the job directory (shared with the workers); a re-run of an unfinished job resumes.
        partitions: wanted number of run-key partitions (>= 1).
        executor: ``local`` (``workers`` threads, the default) or ``dask`` (``scheduler``: address or Client).
        read_data / accept_missing: as for :func:`~snapstore.maintenance.verify.verify`.
        store_options: options for :func:`~snapstore.stores.open_store` (e.g. ``endpoint_url``).
        progress: optional ``progress(phase, done, total)``: ``("verify", partitions done, partitions)``.
    Returns:
        ``{"report": VerifyReport (as one-process verify's), "partitions", "partitions_done",
        "resumed" (partitions reused), "requests" (kind -> count, every step), "summaries"}``.
    Raises:
        InvalidInputError: ``partitions`` < 1, an unknown executor, ``dask`` without a scheduler,
            ``job_dir`` holding a job of another repository.
        MissingDependencyError: pyarrow is not installed (the job files are Parquet).
        RepositoryNotFound: nothing at ``url``. StoreError: the store failed.
    """
    P.require_pyarrow()
    P.check_executor(executor, scheduler)
    url, job_dir = P.absolute_url(url), os.path.abspath(job_dir)
    os.makedirs(job_dir, exist_ok=True)
    P.check_job_owner(job_dir, url)  # another repository's job (finished or not) is refused
    if os.path.exists(os.path.join(job_dir, DONE_FILE)):
        _clear(job_dir)  # a finished job: a re-run verifies the repository as it is now
    plan = P.plan_mark(url, job_dir, partitions, store_options)
    repo = P.open_url(url, store_options or {})
    try:
        d = Verifier(repo, read_data)
        with repo.whole_packs():
            with repo.lock:
                repo.cache.forget_corrupt()
            d.list_objects()
            _write_packs(d, job_dir)
            d.load_forwarding()
            d.read_bundle_index()
            task = partial(verify_partition, read_data=read_data, accept_missing=accept_missing)
            sums = P.execute(plan, executor, scheduler, workers, task=task, count=len(plan.partitions),
                             progress=progress, phase="verify")
            parts = [_read_rows(_result_path(plan, i)) for i in range(len(plan.partitions))]
            rep = merge(d, parts)
        rep.checked = {"runs": sum(s["runs"] for s in sums), "checkpoints": sum(s["checkpoints"] for s in sums),
                       "packs": rep.checked["packs"], "nodes": rep.checked["nodes"],
                       "messages": rep.checked["messages"], "objects": len(d.all_infos)}
        out = {"report": rep, "partitions": len(plan.partitions), "partitions_done": len(sums),
               "resumed": sum(1 for s in sums if s.get("resumed")),
               "requests": P.sum_requests(*(s.get("requests") for s in sums), P.store_requests(repo)),
               "summaries": sums}
    finally:
        repo.store.close()
    _write_json(os.path.join(job_dir, DONE_FILE),
                 {"ok": rep.ok, "checked": rep.checked, "errors": [vars(p) for p in rep.errors],
                  "warnings": [vars(p) for p in rep.warnings], "requests": out["requests"]})
    return out


def problems_of(rep: VerifyReport) -> tuple:
    """``(errors, warnings)`` of ``rep`` as sorted ``(code, key, message)`` tuples (for comparing reports)."""
    def one(ps):
        return sorted((p.code, p.key, p.message) for p in ps)
    return one(rep.errors), one(rep.warnings)

