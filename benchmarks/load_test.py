"""Load test: concurrent writers and a garbage collector on one local repository, then a full check.

Run (from the repository root)::

    python benchmarks/load_test.py                    # 180 s, 4 writers x 5 runs, GC grace 2 s
    python benchmarks/load_test.py --seconds 60 --json load.json
    python benchmarks/load_test.py --writers 4 --runs-per-writer 5 --grace 2 --dir /tmp/lt --keep

Setup: one repository on the local store with fsync ON (the default). ``--writers`` processes
(``multiprocessing`` 'spawn') each own ``--runs-per-writer`` runs and loop over them round-robin
until told to stop. Each writer has one ``CheckpointManager(dir, gc_grace_period=G)``; per step it

* saves the run's message list plus 2 new messages (an assistant message with a tool call and a
  tool result, ~300-500 bytes of JSON each, seeded varied text) -- most steps;
* with probability ``--p-rollback`` rolls the run back to a random earlier checkpoint it saved
  (and checks that ``rollback`` returned exactly the messages it had saved there);
* with probability ``--p-prune`` prunes the run with ``prune(keep_last=K, run_id=run)`` (K random
  in 2..8) and checks that what went matches its own bookkeeping;
* with probability ``--p-read`` restores the run's latest checkpoint through a *new* manager (a cold
  reader, no caches) while GC is running, and compares it with what it last saved.

``ConflictError`` is counted and handled by ``latest()`` (continue from the head). Any other
exception is counted as an error (with its traceback), and the writer re-synchronises from
``latest()``. Each writer records, per run, what it believes the head is: (checkpoint id, message
count, sha256 of the compact JSON of the message list), and writes it to a JSON file when it stops.

Meanwhile the main process runs ``mgr.gc(grace_period=G)`` in a loop (a long-lived manager
constructed with ``gc_grace_period=G``) for ``--seconds``. After the writers stop:

1. check A (quiescent, right after the load): ``verify(read_data=True)`` through a new manager
   must report zero errors, and every run's ``latest()`` (new manager) must have the id, message
   count and sha256 its writer last recorded;
2. three more GC passes ``gc(grace_period=G)`` separated by G + 0.5 s (so candidates mature and
   everything unreferenced is deleted), then check B: the same verify and comparison again.

Reported: checkpoints saved, conflicts, rollbacks, prunes, cold reads, errors, save latency
percentiles, GC cycles (time, errors), bytes and objects reclaimed in total, repository size,
verify results (errors, warnings by code), and the comparison. Exit status 1 on any verify error,
comparison mismatch, writer or reader error, GC error, or a writer that died; 0 otherwise.

``--ledger`` runs the shared-runs mode instead (benchmarks/ledger_load.py; its options follow, e.g.
``python benchmarks/load_test.py --ledger --procs 8 --ops 2000``): writer processes share runs with
rollbacks, head/middle/run deletes, prunes and GC, each keeping a ledger of every acknowledged save
and removal; after two ``gc(grace_period=0)`` every acknowledged save that no acknowledged operation
removed must restore exactly (issue 20).

The processes import a copy of the ``snapstore`` package taken at start (the working tree may be
edited concurrently). The machine may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

from _lib import snapshot_package  # noqa: E402  (benchmarks/ is on sys.path)

_WORDS = """the a to of and in is that for it this with on be as are we not file function test should
will can now let me check see need error value return code change fix issue line call class method
module import output run first then look at from by if which when case expected result update use
add new make sure works correctly before after into also only one more path directory read write
problem because there was here current instead seems looks like handle edge following implement
approach verify passes failing traceback argument parameter config default option string list dict
number type object instance attribute variable loop condition branch query request response data
self def return None True False len range str int kwargs args result key item node name parser field""".split()
_TOOLS = ["bash", "str_replace_editor", "view_file", "search_code", "run_tests"]


def error_class(e: BaseException) -> str:
    """Exception type and message with object ids and paths blurred, to group errors."""
    msg = re.sub(r"[0-9a-f]{16,}", "<id>", str(e))
    msg = re.sub(r"packs/[0-9a-f]{2}/", "packs/xx/", msg)
    msg = re.sub(r"/\S*/repo/", "<repo>/", msg)
    msg = re.sub(r"'[^']*'", "'...'", msg)
    return f"{type(e).__name__}: {msg}"[:200]


def short_tb(tb: str) -> str:
    """The first line and the last 6 lines of a traceback, indented."""
    lines = tb.strip().splitlines()
    keep = lines[:1] + (["..."] if len(lines) > 7 else []) + lines[-6:] if len(lines) > 7 else lines
    return "\n      ".join(keep)


def fwd_chains(repo) -> dict:
    """Histogram of forwarding hops from each retired pack to an existing pack (-1: none reached)."""
    from snapstore.maintenance.forwarding import read_forward_map
    packs = {i.key.rsplit("/", 1)[1] for i in repo.store.list("packs/")}
    fwd = {pid.hex(): [p.hex() for p in to] for pid, to in read_forward_map(repo).to.items()}
    memo: dict = {}

    def hops(p, depth=0):
        if p in packs:
            return 0
        if p in memo:
            return memo[p]
        if depth > 64:
            return -1
        best = -1
        for n in fwd.get(p, []):
            h = hops(n, depth + 1)
            if h >= 0 and (best < 0 or h + 1 < best):
                best = h + 1
        memo[p] = best
        return best
    return dict(sorted(Counter(hops(p) for p in fwd).items()))


def digest(msgs: list) -> str:
    """sha256 of the compact JSON of a message list (what writers record and the check compares)."""
    return hashlib.sha256(json.dumps(msgs, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def text(self, n: int) -> str:
        r = self.r
        out, k = [], 0
        while k < n:
            x = r.random()
            w = (f"{r.choice(_WORDS)}_{r.randrange(1000)}" if x < 0.1 else
                 str(r.randrange(10 ** r.randint(1, 7))) if x < 0.14 else r.choice(_WORDS))
            out.append(w)
            k += len(w) + 1
        return " ".join(out)[:n]

    def prelude(self, run: str) -> list:
        return [{"role": "system", "content": f"[{run}] " + self.text(self.r.randint(250, 420))},
                {"role": "user", "content": self.text(self.r.randint(250, 420))}]

    def turn(self, k: int) -> list:
        r = self.r
        return [{"role": "assistant", "content": self.text(r.randint(120, 260)),
                 "tool_calls": [{"id": f"call_{r.getrandbits(48):012x}", "name": r.choice(_TOOLS),
                                 "arguments": self.text(r.randint(60, 140))}]},
                {"role": "tool", "tool_call_id": f"call_{k}", "content": self.text(r.randint(250, 420))}]


# ------------------------------------------------------------------------------------------------
# writer process


def writer_main(root: str, pkg: str, w: int, nruns: int, grace: float, ready, go, stop, out_path: str, seed: int,
                p_rollback: float, p_prune: float, p_read: float) -> None:
    sys.path.insert(0, pkg)
    from snapstore import CheckpointManager
    from snapstore.errors import ConflictError

    rng = random.Random(seed * 1000 + w)
    gen = Gen(seed * 1000 + w + 1)
    mgr = CheckpointManager(root, gc_grace_period=grace)
    runs = [f"w{w}-run{j}" for j in range(nruns)]
    # per run: current message list, known live checkpoints [(id, count, sha)] oldest first
    msgs: dict[str, list] = {r: [] for r in runs}
    saved: dict[str, list] = {r: [] for r in runs}
    stats = Counter()
    kinds = Counter()  # error classes
    lat: list[float] = []
    errors: list[str] = []

    def resync(run: str) -> None:
        """Continue from the head; rebuild the list of live checkpoints (older ones without sha)."""
        cp = mgr.latest(run)
        if cp is None:
            msgs[run] = []
            saved[run] = []
            return
        msgs[run] = list(cp.messages)
        known = {c: (c, n, sha) for c, n, sha in saved[run]}
        older = [known.get(s.id, (s.id, s.message_count, None)) for s in reversed(mgr.list(run)) if s.id != cp.id]
        saved[run] = older + [(cp.id, len(cp.messages), digest(cp.messages))]

    def record_error(kind: str, run: str) -> None:
        stats[kind] += 1
        etype, e = sys.exc_info()[:2]
        kinds[error_class(e)] += 1
        if len(errors) < 50:
            errors.append(f"{kind} on {run}: {traceback.format_exc()}")

    mgr.repo  # open before the start signal
    with ready.get_lock():
        ready.value += 1
    go.wait()
    i = 0
    while not stop.is_set():
        run = runs[i % nruns]
        i += 1
        x = rng.random()
        try:
            if x < p_rollback and len(saved[run]) >= 3:
                j = rng.randrange(max(0, len(saved[run]) - 12), len(saved[run]) - 1)
                cid, count, sha = saved[run][j]
                cp = mgr.rollback(run, cid)
                stats["rollbacks"] += 1
                if cp.id != cid or len(cp.messages) != count or (sha is not None and digest(cp.messages) != sha):
                    stats["rollback_mismatch"] += 1
                    errors.append(f"rollback of {run} to {cid} returned {cp.id} with {len(cp.messages)} messages "
                                  f"(expected {count}), sha match {digest(cp.messages) == sha}")
                msgs[run] = list(cp.messages)
                saved[run] = saved[run][:j + 1]
            elif x < p_rollback + p_prune and len(saved[run]) > 8:
                k = rng.randint(2, 8)
                gone = mgr.prune(keep_last=k, run_id=run)
                stats["prunes"] += 1
                stats["pruned_checkpoints"] += len(gone)
                expect = {c for c, _, _ in saved[run][:-k]}
                if {g.id for g in gone} != expect:
                    stats["prune_mismatch"] += 1
                    errors.append(f"prune of {run} keep_last={k} deleted {len(gone)} checkpoints, expected {len(expect)}")
                saved[run] = saved[run][-k:]
            elif x < p_rollback + p_prune + p_read and saved[run]:
                with CheckpointManager(root, create=False, gc_grace_period=grace) as reader:
                    cp = reader.latest(run)
                stats["cold_reads"] += 1
                cid, count, sha = saved[run][-1]
                if cp is None or cp.id != cid or len(cp.messages) != count or digest(cp.messages) != sha:
                    stats["read_mismatch"] += 1
                    errors.append(f"cold read of {run}: got {cp and cp.id} ({cp and len(cp.messages)} messages), "
                                  f"expected {cid} ({count})")
            else:
                new = msgs[run] + (Gen(rng.random()).prelude(run) if not msgs[run] else gen.turn(len(msgs[run])))
                t = time.perf_counter()
                cid = mgr.save(run, new, step=len(new) // 2, token_usage={"input_tokens": 100 * len(new)})
                lat.append(time.perf_counter() - t)
                stats["saves"] += 1
                msgs[run] = new
                saved[run].append((cid, len(new), digest(new)))
        except ConflictError:
            stats["conflicts"] += 1
            try:
                resync(run)
            except Exception:
                record_error("errors", run)
        except Exception:
            record_error("errors", run)
            try:
                resync(run)
            except Exception:
                record_error("resync_errors", run)
    last = {}
    for run in runs:
        last[run] = list(saved[run][-1]) if saved[run] else None
    lat.sort()
    res = {"writer": w, "stats": dict(stats), "last": last, "errors": errors, "error_classes": dict(kinds),
           "save_latency_ms": {"p50": 1e3 * lat[len(lat) // 2] if lat else None,
                               "p90": 1e3 * lat[int(len(lat) * 0.9)] if lat else None,
                               "p99": 1e3 * lat[int(len(lat) * 0.99)] if lat else None,
                               "max": 1e3 * lat[-1] if lat else None},
           "messages": {r: len(msgs[r]) for r in runs}}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, out_path)
    mgr.close()


# ------------------------------------------------------------------------------------------------
# checks (main process)


def check(root: str, expected: dict, grace: float) -> dict:
    from snapstore import CheckpointManager
    t = time.perf_counter()
    with CheckpointManager(root, create=False, gc_grace_period=grace) as mgr:
        rep = mgr.verify(read_data=True)
    verify_s = time.perf_counter() - t
    mismatches = []
    with CheckpointManager(root, create=False, gc_grace_period=grace) as mgr:
        for run, exp in sorted(expected.items()):
            try:
                cp = mgr.latest(run)
            except Exception as e:  # noqa: BLE001 - reported as a mismatch
                mismatches.append(f"{run}: latest() raised {type(e).__name__}: {e}")
                continue
            if exp is None:
                if cp is not None:
                    mismatches.append(f"{run}: writer recorded no checkpoint, store has {cp.id}")
                continue
            cid, count, sha = exp
            if cp is None:
                mismatches.append(f"{run}: expected {cid} ({count} messages), store has no checkpoint")
            elif cp.id != cid or len(cp.messages) != count or digest(cp.messages) != sha:
                mismatches.append(f"{run}: expected {cid} ({count} messages), store has {cp.id} "
                                  f"({len(cp.messages)} messages), sha equal: {digest(cp.messages) == sha}")
        stats = mgr.stats()
        chains = fwd_chains(mgr.repo)
    return {"forward_hops": chains, "verify_seconds": round(verify_s, 2), "errors": [str(p) for p in rep.errors],
            "warnings": dict(Counter(p.code for p in rep.warnings)), "checked": rep.checked,
            "runs_compared": len(expected), "mismatches": mismatches,
            "stored_bytes": stats["stored_bytes"], "objects": {k: v["count"] for k, v in stats["objects"].items()}}


def main() -> int:
    if "--ledger" in sys.argv[1:]:
        import ledger_load
        return ledger_load.main([a for a in sys.argv[1:] if a != "--ledger"])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="load duration (default 180)")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--runs-per-writer", type=int, default=5)
    ap.add_argument("--grace", type=float, default=2.0, help="GC grace period G, seconds (writers use the same)")
    ap.add_argument("--gc-pause", type=float, default=0.0, help="seconds between GC cycles (default 0)")
    ap.add_argument("--p-rollback", type=float, default=0.02)
    ap.add_argument("--p-prune", type=float, default=0.03)
    ap.add_argument("--p-read", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", help="working directory (default: a new temp dir, removed at the end unless --keep)")
    ap.add_argument("--keep", action="store_true", help="keep the repository")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--code", default="head",
                    help="test the snapstore package as committed at HEAD (default), at a git revision, "
                         "or 'worktree' for the working tree")
    args = ap.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="snapstore-load-"))
    work.mkdir(parents=True, exist_ok=True)
    pkg, code_desc = snapshot_package(work / "pkg", args.code)
    sys.path.insert(0, str(pkg))
    import snapstore
    from snapstore import CheckpointManager
    root = str(work / "repo")
    if os.path.exists(root):
        shutil.rmtree(root)
    for f in work.glob("writer-*.json"):
        f.unlink()
    print(f"snapstore {code_desc} (copy at {snapstore.__file__}); python {sys.version.split()[0]}; "
          f"{os.cpu_count()} CPUs; {platform.platform()}; load average {os.getloadavg()[0]:.2f}")
    print(f"repository {root} (local store, fsync ON); {args.writers} writers x {args.runs_per_writer} runs; "
          f"GC grace {args.grace}s; {args.seconds:.0f}s", flush=True)

    gmgr = CheckpointManager(root, gc_grace_period=args.grace)
    gmgr.repo  # create the repository before the writers start
    ctx = mp.get_context("spawn")
    stop, go = ctx.Event(), ctx.Event()
    ready = ctx.Value("i", 0)
    procs = []
    for w in range(args.writers):
        p = ctx.Process(target=writer_main, name=f"writer-{w}",
                        args=(root, str(pkg), w, args.runs_per_writer, args.grace, ready, go, stop,
                              str(work / f"writer-{w}.json"), args.seed, args.p_rollback, args.p_prune, args.p_read))
        p.start()
        procs.append(p)

    t_wait = time.monotonic()
    while ready.value < args.writers and time.monotonic() - t_wait < 120:
        if any(not p.is_alive() for p in procs):
            break
        time.sleep(0.05)
    go.set()
    gc_cycles, gc_errors, gc_times = 0, [], []
    gc_log: list[dict] = []
    reclaimed_bytes = reclaimed_objects = deleted_objects = repacked = 0
    deleted_cat: Counter = Counter()
    t_start = time.monotonic()
    deadline = t_start + args.seconds
    # with --keep, every GC cycle's pack sets (listed, live, retired, deleted, new candidates) go to
    # gc-events.jsonl next to the repository, to trace a failure back to the GC that caused it
    events_file = open(work / "gc-events.jsonl", "w") if args.keep else None
    next_report = t_start + 30
    loads = []
    dead_writers = []
    gc_error_classes: Counter = Counter()
    gc_diag: list[str] = []
    while time.monotonic() < deadline:
        t = time.perf_counter()
        t_wall = time.time()
        event = {"cycle": gc_cycles + len(gc_errors), "t": round(time.monotonic() - t_start, 3)}

        def hooks_for(ev):
            def note(name):
                def f(**info):
                    ev[name] = {k: sorted(x.hex() if isinstance(x, bytes) else x for x in v) if isinstance(v, (set, frozenset)) else v
                                for k, v in info.items() if isinstance(v, (set, frozenset, int, float, str))}
                    ev[name]["t"] = round(time.monotonic() - t_start, 3)
                return f
            return {n: note(n) for n in ("after_list", "after_mark", "after_repack", "before_sweep")}
        try:
            rep = gmgr.gc(grace_period=args.grace, hooks=hooks_for(event))
            gc_cycles += 1
            gc_log.append({"t": round(time.monotonic() - t_start, 2), "seconds": round(rep.elapsed, 3),
                           "live_checkpoints": rep.live_checkpoints, "live_packs": rep.live_packs,
                           "repacked": rep.repacked_packs, "deleted": dict(rep.deleted),
                           "reclaimed_bytes": rep.reclaimed_bytes, "pending": rep.pending_candidates})
            reclaimed_bytes += rep.reclaimed_bytes
            reclaimed_objects += rep.reclaimed_objects
            deleted_objects += sum(rep.deleted.values())
            deleted_cat.update(rep.deleted)
            repacked += rep.repacked_packs
        except Exception as e:  # noqa: BLE001 - every GC failure is reported
            gc_errors.append(f"cycle {gc_cycles + len(gc_errors)} at {time.monotonic() - t_start:.1f}s: {traceback.format_exc()}")
            gc_error_classes[error_class(e)] += 1
            gc_log.append({"t": round(time.monotonic() - t_start, 2), "seconds": round(time.perf_counter() - t, 3),
                           "error": error_class(e)})
            key = getattr(e, "key", None)
            if isinstance(key, str) and key.startswith("packs/"):
                # diagnose "live pack missing": does the pack exist now, and when was it written?
                path = os.path.join(root, *key.split("/"))
                try:
                    mt = os.stat(path).st_mtime
                    gc_diag.append(f"{key}: exists now, written {mt - t_wall:+.3f}s after this GC started "
                                   f"({'during' if mt >= t_wall else 'before'} the GC)")
                except FileNotFoundError:
                    gc_diag.append(f"{key}: does not exist now")
        gc_times.append(time.perf_counter() - t)
        if events_file is not None:
            events_file.write(json.dumps(event) + "\n")
        dead_writers = [p.name for p in procs if not p.is_alive()]
        if dead_writers:
            print(f"writer(s) died: {dead_writers}", flush=True)
            break
        if time.monotonic() >= next_report:
            loads.append(os.getloadavg()[0])
            print(f"  {time.monotonic() - t_start:5.0f}s: {gc_cycles} GC cycles ({len(gc_errors)} failed), reclaimed "
                  f"{reclaimed_bytes / 1e6:.1f} MB so far, last GC {gc_times[-1]:.2f}s, load {loads[-1]:.2f}", flush=True)
            next_report += 30
        if args.gc_pause:
            time.sleep(args.gc_pause)
    load_seconds = time.monotonic() - t_start
    stop.set()
    for p in procs:
        p.join(120)
        if p.is_alive():
            print(f"{p.name} did not stop; terminating it", flush=True)
            p.terminate()
            p.join()
    gmgr.close()

    writers = []
    for w in range(args.writers):
        path = work / f"writer-{w}.json"
        if path.exists():
            writers.append(json.load(open(path)))
        else:
            writers.append({"writer": w, "stats": {}, "last": {}, "errors": ["no result file (writer died?)"],
                            "missing": True})
    tot = Counter()
    for wr in writers:
        tot.update(wr["stats"])
    expected = {}
    for wr in writers:
        expected.update(wr.get("last", {}))

    print(f"\nload phase: {load_seconds:.1f}s")
    print(f"  checkpoints saved {tot['saves']} ({tot['saves'] / load_seconds:.1f}/s), conflicts {tot['conflicts']}, "
          f"rollbacks {tot['rollbacks']}, prunes {tot['prunes']} ({tot['pruned_checkpoints']} checkpoints), "
          f"cold reads {tot['cold_reads']}, writer errors {tot['errors']}, mismatches "
          f"(rollback/prune/read) {tot['rollback_mismatch']}/{tot['prune_mismatch']}/{tot['read_mismatch']}")
    for wr in writers:
        lat = wr.get("save_latency_ms", {})
        if lat.get("p50") is not None:
            print(f"  writer {wr['writer']}: {wr['stats'].get('saves', 0)} saves, latency p50 {lat['p50']:.1f} ms, "
                  f"p90 {lat['p90']:.1f}, p99 {lat['p99']:.1f}, max {lat['max']:.1f}; messages per run "
                  f"{sorted(wr['messages'].values())}")
    gt = sorted(gc_times)
    print(f"  GC: {gc_cycles} cycles ok, {len(gc_errors)} failed; cycle time median "
          f"{statistics.median(gt) if gt else 0:.2f}s, p90 {gt[int(len(gt) * 0.9)] if gt else 0:.2f}s, "
          f"max {gt[-1] if gt else 0:.2f}s; repacked {repacked} packs; "
          f"deleted {deleted_objects} objects {dict(deleted_cat)}; reclaimed {reclaimed_bytes / 1e6:.2f} MB "
          f"({reclaimed_objects} objects net)")
    during = sum(1 for d in gc_diag if "during the GC" in d)
    if gc_diag:
        print(f"  of the GC failures naming a pack, {during} of {len(gc_diag)} name a pack written while that GC "
              "was running (after it started listing)")
    step = max(1, len(gc_log) // 12)
    for g in gc_log[::step]:
        print(f"    GC at {g['t']:6.1f}s: " + (f"FAILED after {g['seconds']:.2f}s ({g['error'][:60]})" if "error" in g else
              f"{g['seconds']:.2f}s, live {g['live_checkpoints']} checkpoints / {g['live_packs']} packs, repacked "
              f"{g['repacked']}, deleted {sum(g['deleted'].values())}, reclaimed {g['reclaimed_bytes'] / 1e3:.0f} kB"))
    for c, n in gc_error_classes.most_common():
        print(f"  GC errors x{n}: {c}")
    for d in gc_diag[:10]:
        print(f"    {d}")
    for e in gc_errors[:1]:
        print("  first GC error: " + short_tb(e))
    wcls = Counter()
    for wr in writers:
        wcls.update(wr.get("error_classes", {}))
    for c, n in wcls.most_common():
        print(f"  writer errors x{n}: {c}")
    for wr in writers:
        if wr["errors"]:
            print(f"  first error of writer {wr['writer']}: " + short_tb(wr["errors"][0]))
            break

    if events_file is not None:
        events_file.close()
    print("\ncheck A (right after the load) ...", flush=True)
    chk_a = check(root, expected, args.grace)
    if args.keep and (chk_a["errors"] or chk_a["mismatches"]):
        # objects are immutable: a hard-link copy is a snapshot of the repository at check A
        subprocess.run(["cp", "-al", root, root.rstrip("/") + "-check-a"], check=False)
        print(f"  snapshot of the failing repository: {root.rstrip('/')}-check-a")
    print(f"  verify(read_data=True): {len(chk_a['errors'])} errors, warnings {chk_a['warnings']}, checked "
          f"{chk_a['checked']} ({chk_a['verify_seconds']}s)")
    print(f"  latest() of {chk_a['runs_compared']} runs vs writers' records: {len(chk_a['mismatches'])} mismatches")
    for e in chk_a["errors"][:10] + chk_a["mismatches"][:10]:
        print("   " + e)
    print(f"  repository: {chk_a['stored_bytes'] / 1e6:.2f} MB in {sum(chk_a['objects'].values())} objects {chk_a['objects']}")
    print(f"  forwarding records by hops to an existing pack (readers follow at most 8): {chk_a['forward_hops']}")

    final_gc = []
    final_gc_errors = []
    with CheckpointManager(root, create=False, gc_grace_period=args.grace) as fmgr:
        for k in range(3):
            if k:
                time.sleep(args.grace + 0.5)
            try:
                r = fmgr.gc(grace_period=args.grace)
                final_gc.append(r.as_dict())
            except Exception:  # noqa: BLE001
                final_gc_errors.append(traceback.format_exc())
    fr = sum(r["reclaimed_bytes"] for r in final_gc)
    print(f"\nquiescent GC x3 (grace {args.grace}s): reclaimed {fr / 1e6:.2f} MB, deleted "
          f"{[r['deleted'] for r in final_gc]}, pending candidates after: "
          f"{final_gc[-1]['pending_candidates'] if final_gc else '-'}, errors {len(final_gc_errors)}")
    for e in final_gc_errors[:3]:
        print("  GC error: " + e.strip().replace("\n", "\n    "))
    print("check B (after the quiescent GCs) ...", flush=True)
    chk_b = check(root, expected, args.grace)
    print(f"  verify(read_data=True): {len(chk_b['errors'])} errors, warnings {chk_b['warnings']}, checked "
          f"{chk_b['checked']} ({chk_b['verify_seconds']}s)")
    print(f"  latest() of {chk_b['runs_compared']} runs vs writers' records: {len(chk_b['mismatches'])} mismatches")
    for e in chk_b["errors"][:10] + chk_b["mismatches"][:10]:
        print("   " + e)
    print(f"  repository: {chk_b['stored_bytes'] / 1e6:.2f} MB in {sum(chk_b['objects'].values())} objects {chk_b['objects']}")
    print(f"  forwarding records by hops to an existing pack (readers follow at most 8): {chk_b['forward_hops']}")

    failures = []
    if chk_a["errors"] or chk_b["errors"]:
        failures.append(f"verify errors: {len(chk_a['errors'])} / {len(chk_b['errors'])}")
    if chk_a["mismatches"] or chk_b["mismatches"]:
        failures.append(f"latest() mismatches: {len(chk_a['mismatches'])} / {len(chk_b['mismatches'])}")
    if tot["errors"] or tot["resync_errors"]:
        failures.append(f"writer errors: {tot['errors'] + tot['resync_errors']}")
    if tot["rollback_mismatch"] or tot["prune_mismatch"] or tot["read_mismatch"]:
        failures.append("writer-side mismatches")
    if gc_errors or final_gc_errors:
        failures.append(f"GC errors: {len(gc_errors)} during load, {len(final_gc_errors)} after")
    if dead_writers or any(wr.get("missing") for wr in writers):
        failures.append("writer process died")
    print("\nRESULT: " + ("FAIL: " + "; ".join(failures) if failures else "PASS"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "code": code_desc, "load_seconds": load_seconds, "totals": dict(tot),
                       "writers": writers, "gc": {"cycles": gc_cycles, "errors": gc_errors, "times": gc_times,
                                                   "error_classes": dict(gc_error_classes), "diagnostics": gc_diag,
                                                   "log": gc_log,
                                                   "reclaimed_bytes": reclaimed_bytes,
                                                   "reclaimed_objects": reclaimed_objects,
                                                   "deleted": dict(deleted_cat), "repacked": repacked},
                       "check_a": chk_a, "final_gc": final_gc, "final_gc_errors": final_gc_errors,
                       "check_b": chk_b, "failures": failures}, f, indent=1)
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
