"""``python -m benchmarks``: snapstore against what users would pick instead, on identical checkpoints.

Run (from the repository root, with the ``bench`` extra installed: ``pip install '.[test,bench]'``)::

    python -m benchmarks --quick                 # < 5 minutes on 2 cores: smaller synthetic sizes
    python -m benchmarks                         # the full run (installs restic and borg if absent)
    python -m benchmarks --data DIR --systems snapstore-local,json-files --workloads traj: --out DIR

For every workload (:mod:`benchmarks.workloads`) and every system (:mod:`benchmarks.peers`), in one
process: a fresh store in a temporary directory (or a fresh bucket on moto's HTTP server on
127.0.0.1), every checkpoint saved in order (save latency per checkpoint, ``time.perf_counter``; for
the LangGraph systems the time spent in the checkpointer's ``put``/``put_writes``, the graph's own
overhead is reported beside it as ``invoke_p50_ms``), stored bytes sampled along the way, then the
store measured (:meth:`~benchmarks.peers.System.usage`), then the latest checkpoint of the workload's
heaviest run restored in a fresh process (:mod:`benchmarks.child`; median of ``--trials``), compared
with what was saved (sha256 of its JSON). S3 systems are restored a second time through
``benchmarks/latency.py``'s latency proxy (``--delay-ms`` per response): requests and sequential
round trips come from the proxy's log.

Output: ``benchmarks/results/latest.json`` (one record per system x workload, keys listed in
:data:`RECORD_KEYS`; a skipped system's record says why in ``note``), ``benchmarks/RESULTS.md`` and
PNG plots in ``benchmarks/results/`` (:mod:`benchmarks.report`).

Exit status: 0 when every restore that ran matched what was saved, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import peers, workloads as wl  # noqa: E402
from benchmarks._lib import child_env, commit_stamp, quadratic_coefficients, run_child as _run_child  # noqa: E402,F401
from benchmarks.child import digest  # noqa: E402

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "trajectories"
RESULTS_DIR = HERE / "results"

RECORD_DOC = {
    "system": "the system's name (benchmarks.peers)",
    "workload": "the workload's name (benchmarks.workloads)",
    "checkpoints": "checkpoints this system saved (the cap for a capped quadratic system)",
    "stored_bytes": "sum of the sizes of the files / objects the system keeps after the replay (what S3 bills), bytes",
    "disk_bytes": "local stores: file system blocks of those files (st_blocks x 512, as du), bytes; None on S3",
    "objects": "files / objects kept",
    "requests": "what the saves sent, by kind: S3 requests (PUT, GET, LIST pages, HEAD, DELETE batches), or files "
                "written / commits / graph invokes / snapshots",
    "save_p50_ms": "median save latency, ms (LangGraph: time in the checkpointer's put + put_writes)",
    "save_p99_ms": "99th percentile (nearest rank) save latency, ms",
    "restore_ms": "median over trials of reading the heaviest run's latest checkpoint in a fresh process, ms "
                  "(opening the store included, imports and client construction not)",
    "resume_round_trips": "S3 systems: sequential round trips of that restore through the latency proxy",
    "resume_ms_at_latency": "S3 systems: its wall time through the proxy (resume_delay_ms per response), ms",
    "total_s": "wall time of the replay (every save, plus the stored-bytes samples), seconds",
    "lower_bound_bytes": "the workload's lower bound (lb_def says how it is defined), bytes",
    "durability": "what a save makes durable before it returns",
}
"""What each key of a record means, with its unit. Records also carry ``status`` (ok / skipped / failed),
``note``, ``restore_ok``, ``series`` (checkpoint index, stored bytes, median save ms per window) and,
where they apply, ``fsyncs_per_save`` and ``save_p50_ms_without_fsync`` (fsyncs made through
``os.fsync`` in this process), ``invoke_p50_ms`` (LangGraph: a whole ``invoke``),
``turn_checkpointer_p50_ms`` (LangGraph: every checkpointer call of one invoke, reads included),
``extrapolated_stored_bytes`` (capped quadratic systems: ``{checkpoints: bytes}`` from a least-squares
quadratic fit), ``resume_requests``."""

RECORD_KEYS = ("system", "workload", "checkpoints", "stored_bytes", "disk_bytes", "objects", "requests",
               "save_p50_ms", "save_p99_ms", "restore_ms", "resume_round_trips", "resume_ms_at_latency",
               "total_s", "lower_bound_bytes", "durability")
"""The keys every record has (None where a figure does not apply or the system was skipped)."""

QUICK = {"long": [1000], "quadratic_cap": 200, "extrapolate": [1000, 10000], "shared_runs": 100,
         "shared_turns": 5, "image_steps": 30, "slow_max": 12, "trials": 1, "samples": 24,
         "traj_skip": ["taubench", "llamafactory", "astroid", "openhands-oas-gpt4o-critic"],
         "s3_workloads": ["traj:claudecode", "state:image"],
         "archive_workloads": ["traj:sweagent", "shared-prompt"]}
"""``--quick``: what fits in 5 minutes on 2 cores. The files left out of ``traj:`` are the two largest
coding runs' sibling (astroid) and the many-conversation files; the S3 systems (moto over HTTP, a
few ms per request) run on ``s3_workloads`` only, snapstore-archived on ``archive_workloads``; restic and borg (a process per snapshot) on
workloads of at most ``slow_max`` checkpoints; quadratic systems on the first ``quadratic_cap``
checkpoints of the synthetic run."""
FULL = {"long": [1000, 10000], "quadratic_cap": 1000, "extrapolate": [10000], "shared_runs": 100,
        "shared_turns": 20, "image_steps": 200, "slow_max": None, "trials": 3, "samples": 40, "traj_skip": [],
        "s3_workloads": None, "archive_workloads": None}
"""The full run: every shared file, synthetic runs of 1,000 and 10,000 checkpoints, every system on
every workload, 3 restores per record."""


def pct(xs: list, p: float) -> float | None:
    """The ``p``-th percentile (nearest rank) of ``xs``, or None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))
    return s[k]


def run_child(spec: dict, timeout: float = 900) -> dict:
    """One fresh ``python benchmarks/child.py`` process (this checkout's snapstore, dummy AWS
    credentials); its JSON result. Raises ``benchmarks._lib.ChildFailed`` if it failed."""
    return _run_child(HERE / "child.py", spec, env=child_env(s3=True), timeout=timeout)


def fit_quadratic(xs: list, ys: list, targets: list) -> dict:
    """Least-squares ``a*n^2 + b*n + c`` through ``(xs, ys)``, evaluated at ``targets``: ``{str(n): bytes}``
    ({} with fewer than 3 points). Solved from the normal equations (no numpy needed)."""
    if len(xs) < 3:
        return {}
    coef = quadratic_coefficients(xs, ys)
    return {str(n): int(round(coef[0] * n * n + coef[1] * n + coef[2])) for n in targets}


def empty_record(system, workload, note: str) -> dict:
    rec = {k: None for k in RECORD_KEYS}
    rec.update(system=system.name, workload=workload.name, durability=system.durability,
               lower_bound_bytes=workload.lb_bytes, status="skipped", note=note, lb_def=workload.lb_def)
    return rec


def run_system(system, workload, args, cfg, tmp_root: Path, env: peers.S3Env) -> dict:
    """Replay ``workload`` into ``system``; its record (see :data:`RECORD_KEYS`)."""
    why = system.unavailable()
    if why:
        return empty_record(system, workload, why)
    if system.slow and cfg["slow_max"] is not None and workload.checkpoints > cfg["slow_max"]:
        return empty_record(system, workload, f"--quick: a save spawns a process (~0.3-0.7 s); run only on "
                                              f"workloads of <= {cfg['slow_max']} checkpoints "
                                              f"(this one: {workload.checkpoints})")
    if system.s3 and cfg["s3_workloads"] is not None and not any(workload.name.startswith(p)
                                                                 for p in cfg["s3_workloads"]):
        return empty_record(system, workload, "--quick: S3 systems run on " + ", ".join(cfg["s3_workloads"]) +
                            " only (moto over HTTP costs a few ms per request)")
    if system.archived and cfg.get("archive_workloads") is not None and not any(
            workload.name.startswith(p) for p in cfg["archive_workloads"]):
        return empty_record(system, workload, "--quick: snapstore-archived runs on " + ", ".join(cfg["archive_workloads"])
                            + " only (benchmarks/archive.py measures archiving in detail)")
    capped = system.quadratic and workload.quadratic_cap
    w = workload.truncated(workload.quadratic_cap) if capped else workload
    wdir = Path(tempfile.mkdtemp(prefix=f"{system.name}-", dir=tmp_root))
    total = w.checkpoints
    step = max(1, total // cfg["samples"])
    save_s, series = [], {"index": [], "stored_bytes": [], "save_ms": []}
    window: list = []
    fs = {"n": 0, "s": 0.0}
    real_fsync = os.fsync

    def counting_fsync(fd):  # fsyncs made in this process (snapstore, JSON files; not SQLite's C code)
        t = time.perf_counter()
        try:
            return real_fsync(fd)
        finally:
            fs["n"] += 1
            fs["s"] += time.perf_counter() - t
    no_fsync: list = []
    t0 = time.perf_counter()
    os.fsync = counting_fsync
    try:
        system.setup(wdir, w)
        fs.update(n=0, s=0.0)
        k = 0
        for ri, run in enumerate(w.runs):
            ds = wl.deltas(run)
            system.begin_run(ri, run, ds)
            for i, cp in enumerate(run.checkpoints):
                state = run.states[i] if run.states is not None else None
                before = fs["s"]
                s = time.perf_counter()
                inner = system.save(ri, i, cp, state, ds[i])
                dt = inner if inner is not None else time.perf_counter() - s
                save_s.append(dt)
                no_fsync.append(max(0.0, dt - (fs["s"] - before)))
                window.append(dt)
                k += 1
                if k % step == 0 or k == total:
                    series["index"].append(k)
                    series["stored_bytes"].append(system.sample())
                    series["save_ms"].append(1e3 * statistics.median(window))
                    window = []
        replay_s = time.perf_counter() - t0
        os.fsync = real_fsync
        system.finish()
        usage = system.usage()
        heavy_i = max(range(len(w.runs)), key=lambda j: wl._Enc().list_bytes(w.runs[j].checkpoints[-1]))
        heavy = w.runs[heavy_i]
        expect = digest(heavy.checkpoints[-1], heavy.states[-1] if heavy.states is not None else None)
        spec = system.restore_spec(heavy_i, heavy)
        trials, ok = [], True
        for _ in range(cfg["trials"]):
            out = run_child(spec)
            trials.append(out["t1"] - out["t0"])
            ok = ok and out["digest"] == expect
        rec = {k: None for k in RECORD_KEYS}
        rec.update(
            system=system.name, workload=w.name, checkpoints=total, stored_bytes=usage["stored_bytes"],
            disk_bytes=usage["disk_bytes"], objects=usage["objects"], requests=system.requests(),
            save_p50_ms=1e3 * statistics.median(save_s), save_p99_ms=1e3 * pct(save_s, 99),
            restore_ms=1e3 * statistics.median(trials), total_s=replay_s, lower_bound_bytes=workload.lb_bytes,
            durability=system.durability, status="ok", note="; ".join(system.notes) or None,
            restore_ok=ok, restore_ms_all=[1e3 * t for t in trials], lb_def=workload.lb_def,
            restored_run=heavy.run_id, restored_messages=len(heavy.checkpoints[-1]), series=series)
        if fs["n"]:
            rec["fsyncs_per_save"] = fs["n"] / total
            rec["save_p50_ms_without_fsync"] = 1e3 * statistics.median(no_fsync)
        if getattr(system, "invoke_times", None):
            rec["invoke_p50_ms"] = 1e3 * statistics.median(system.invoke_times)
            rec["turn_checkpointer_p50_ms"] = 1e3 * statistics.median(system.turn_store_times)
        if capped:
            rec["extrapolated_stored_bytes"] = fit_quadratic(series["index"], series["stored_bytes"],
                                                             workload.extrapolate_to or [workload.checkpoints])
            rec["note"] = ((rec["note"] + "; ") if rec["note"] else "") + (
                f"quadratic: ran the first {workload.quadratic_cap:,} of {workload.checkpoints:,} checkpoints; "
                "extrapolated_stored_bytes is a least-squares fit a*n^2+b*n+c of the measured growth")
        if system.s3 and env.proxy is not None:
            pspec = system.proxied_spec(spec, env.proxy.endpoint)
            res = []
            for _ in range(cfg["trials"]):
                before = len(env.proxy.log)
                out = run_child(pspec)
                entries = env.proxy.entries(out["t0"], out["t1"])
                from benchmarks.latency import summarize

                summ = summarize(entries)
                summ["wall_ms"] = 1e3 * (out["t1"] - out["t0"])
                summ["ok"] = out["digest"] == expect
                summ["outside_window"] = len(env.proxy.log) - before - len(entries)
                res.append(summ)
            med = sorted(res, key=lambda r: r["wall_ms"])[(len(res) - 1) // 2]
            rec.update(resume_round_trips=med["round_trips"], resume_ms_at_latency=med["wall_ms"],
                       resume_requests=med["requests"], resume_delay_ms=env.delay_s * 1e3)
            rec["restore_ok"] = rec["restore_ok"] and all(r["ok"] for r in res)
        return rec
    finally:
        os.fsync = real_fsync
        for attr in ("bucket",):
            b = getattr(system, attr, None)
            if b and env.server is not None:
                try:
                    env.drop_bucket(b)
                except Exception:  # noqa: BLE001  (moto memory only)
                    pass
        shutil.rmtree(wdir, ignore_errors=True)


def build_workloads(args, cfg) -> tuple[list, list]:
    """``(workloads, notes)`` for the arguments (only the selected workloads are built)."""
    notes = []
    data = Path(args.data)
    sel = args.workloads

    def wanted(name: str) -> bool:
        return not sel or any(name.startswith(p) or p in name for p in sel)

    out = []
    sizes = []
    synth = [f"synth:long-{n}" for n in cfg["long"]]
    if data.is_dir():
        if any(wanted(f"{kind}:{p.name}") for p in wl.trajectory_files(data) for kind in ("traj", "rewritten")):
            traj, rewritten = wl.trajectory_workloads(data, cfg["traj_skip"])
            skipped = [p.name for p in wl.trajectory_files(data) if any(s in p.name for s in cfg["traj_skip"])]
            if skipped:
                notes.append("--quick leaves out the files " + ", ".join(skipped) + " (the full run includes them)")
            out += [w for w in traj + rewritten if wanted(w.name)]
        if any(wanted(n) for n in synth):
            sizes = wl.shared_message_sizes(data)
    else:
        notes.append(f"no trajectories in {data}: the traj:/rewritten: workloads are left out and the synthetic "
                     "message sizes are 1-2 KB")
    for n, name in zip(cfg["long"], synth):
        if wanted(name):
            out.append(wl.synthetic_long(n, sizes, cfg["quadratic_cap"],
                                         [x for x in cfg["extrapolate"] if x >= n] or [n]))
    if wanted(f"shared-prompt:{cfg['shared_runs']}"):
        out.append(wl.shared_prompt(cfg["shared_runs"], cfg["shared_turns"]))
    if wanted("state:image"):
        out.append(wl.image_state(cfg["image_steps"]))
    return out, notes


def ensure_backup_tools(quick: bool) -> list:
    """Install restic and borg from Debian's packages when absent (full mode only); notes."""
    missing = [pkg for binary, pkg in (("restic", "restic"), ("borg", "borgbackup")) if shutil.which(binary) is None]
    if not missing:
        return []
    if quick:
        return [f"{', '.join(missing)} not installed: skipped (--quick does not install them)"]
    try:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=600)
        r = subprocess.run(["apt-get", "install", "-y", "-qq", *missing], capture_output=True, text=True, timeout=1200)
        return [f"installed {', '.join(missing)} with apt-get"] if r.returncode == 0 else [
            f"apt-get install {' '.join(missing)} failed: {r.stderr[-300:]}"]
    except (OSError, subprocess.SubprocessError) as e:
        return [f"could not install {', '.join(missing)}: {e}"]


def environment(args, cfg, started: float) -> dict:
    import importlib.metadata as md

    versions = {}
    for pkg in ("snapstore", "zstandard", "boto3", "moto", "langgraph", "langgraph-checkpoint",
                "langgraph-checkpoint-sqlite", "langgraph-checkpoint-objectstorage", "langchain-core", "matplotlib"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            versions[pkg] = None
    for binary, cmd in (("restic", ["restic", "version"]), ("borg", ["borg", "--version"])):
        v = peers._tool_version(cmd) if shutil.which(binary) else None
        versions[binary] = v.split()[1] if v and len(v.split()) > 1 else v
    versions["sqlite"] = __import__("sqlite3").sqlite_version
    commit, dirty = commit_stamp(("snapstore", "benchmarks/*.py"))
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"command": "python -m benchmarks " + shlex.join(sys.argv[1:]), "quick": args.quick,
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "cores": os.cpu_count(),
            "python": platform.python_version(), "platform": platform.platform(), "versions": versions,
            "commit": commit, "dirty": dirty, "load_avg_start": load, "delay_ms": args.delay_ms,
            "trials": cfg["trials"], "data": str(Path(args.data).resolve())}


def write_report(out: Path, report_path: Path, no_plots: bool, rebuilt: bool = False) -> int:
    """Write ``report_path`` (Markdown) and, unless ``no_plots``, the PNG plots into ``out``, from
    ``out/latest.json`` and ``out/meta.json``. Returns 0, or 2 when those files are missing."""
    from benchmarks import report

    try:
        records = json.loads((out / "latest.json").read_text())
        meta = json.loads((out / "meta.json").read_text())
    except (OSError, ValueError) as e:
        print(f"cannot read the results in {out}: {e}", file=sys.stderr)
        return 2
    if rebuilt:
        meta.setdefault("notes", []).append(
            f"report rebuilt from these records on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with "
            f"`python -m benchmarks --report-only` (nothing re-measured)")
    plots = [] if no_plots else report.plots(records, meta, out)
    report_path.write_text(report.markdown(records, meta, plots, report_path.parent))
    print(f"wrote {report_path}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="trajectory files (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="smaller synthetic sizes, restic/borg on small workloads "
                    "only, 1 restore trial: under 5 minutes on 2 cores")
    ap.add_argument("--systems", help="comma-separated system names (default: all)")
    ap.add_argument("--workloads", help="comma-separated workload names or prefixes (e.g. traj:,state:image)")
    ap.add_argument("--delay-ms", type=float, default=50.0, help="latency proxy delay per response (default 50)")
    ap.add_argument("--trials", type=int, help="fresh-process restores per record (default: 1 quick, 3 full)")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="directory of latest.json and the plots")
    ap.add_argument("--report", default=str(HERE / "RESULTS.md"), help="the Markdown report to write")
    ap.add_argument("--machine-note", help="a sentence about the machine for the report (e.g. that it was loaded)")
    ap.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: rebuild the report and plots from OUT/latest.json and OUT/meta.json")
    args = ap.parse_args(argv)
    if args.report_only:
        return write_report(Path(args.out), Path(args.report), args.no_plots, rebuilt=True)
    cfg = dict(QUICK if args.quick else FULL)
    if args.trials is not None:
        if args.trials < 1:
            ap.error("--trials must be >= 1")
        cfg["trials"] = args.trials
    args.workloads = [s for s in (args.workloads or "").split(",") if s]
    names = [s for s in (args.systems or "").split(",") if s]
    known = [c.name for c in peers.SYSTEMS]
    bad = [n for n in names if n not in known]
    if bad:
        ap.error(f"unknown system(s) {bad}; known: {', '.join(known)}")
    started = time.time()
    t_start = time.perf_counter()
    notes = ensure_backup_tools(args.quick)
    workloads, wnotes = build_workloads(args, cfg)
    notes += wnotes
    if not workloads:
        print("no workload selected", file=sys.stderr)
        return 2
    env = peers.S3Env(args.delay_ms / 1000)
    classes = [c for c in peers.SYSTEMS if not names or c.name in names]
    if any(c.s3 for c in classes):
        env.start()
    records = []
    tmp_root = Path(tempfile.mkdtemp(prefix="snapstore-bench-"))
    try:
        for w in workloads:
            for cls in classes:
                system = cls(env)
                t = time.perf_counter()
                try:
                    rec = run_system(system, w, args, cfg, tmp_root, env)
                except Exception as e:  # noqa: BLE001  (one system failing must not lose the others' figures)
                    rec = empty_record(system, w, f"FAILED: {type(e).__name__}: {str(e)[:400]}")
                    rec["status"] = "failed"
                records.append(rec)
                tag = rec["status"] if rec["status"] != "ok" else (
                    f"{rec['stored_bytes'] / 1e3:,.0f} kB, save p50 {rec['save_p50_ms']:.2f} ms, "
                    f"restore {rec['restore_ms']:.1f} ms")
                print(f"[{time.perf_counter() - t_start:6.1f}s] {w.name} / {cls.name}: {tag} "
                      f"({time.perf_counter() - t:.1f}s)", file=sys.stderr, flush=True)
    finally:
        env.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)
    meta = environment(args, cfg, started)
    meta["total_s"] = time.perf_counter() - t_start
    meta["notes"] = notes
    meta["machine_note"] = args.machine_note
    meta["workloads"] = [{"name": w.name, "kind": w.kind, "checkpoints": w.checkpoints, "runs": len(w.runs),
                          "lower_bound_bytes": w.lb_bytes, "lb_def": w.lb_def, "description": w.description,
                          "quadratic_cap": w.quadratic_cap, "extrapolate_to": w.extrapolate_to} for w in workloads]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(records, indent=1))
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    write_report(out, Path(args.report), args.no_plots)
    bad = [(r["system"], r["workload"]) for r in records if r.get("restore_ok") is False]
    failed = [(r["system"], r["workload"]) for r in records if r["status"] == "failed"]
    print(f"wrote {out / 'latest.json'} ({len(records)} records); total {meta['total_s']:.0f} s", file=sys.stderr)
    if bad:
        print(f"RESTORE MISMATCH: {bad}", file=sys.stderr)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
    return 1 if bad or failed else 0
