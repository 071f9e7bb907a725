"""Ledger load test: writer processes share runs with rollbacks, deletes and prunes; nothing acknowledged is lost.

Run (from the repository root)::

    python benchmarks/ledger_load.py                           # 8 processes x 2,000 operations, 2 runs
    python benchmarks/ledger_load.py --procs 4 --ops 150 --runs 2 --json ledger.json
    python benchmarks/ledger_load.py --code 2820bfc            # the package as committed there
    python benchmarks/load_test.py --ledger ...                # the same, through the load test

What is measured (issue 20, "Must show": every acknowledged save restorable after two GCs, or its
writer got ConflictError). ``--procs`` OS processes (``multiprocessing`` 'spawn') share ``--runs``
runs of ONE repository on the local store with fsync ON (``LocalStore(path, fsync=True)``; or one SQLite file, ``store="sqlite"``), one
``CheckpointManager`` each, and loop ``--ops`` times over random operations on a random run:

* ``save`` continuing what the process last saw: either ``latest()`` first, or (``--p-own``) its
  own view without re-reading (its last save, the target of its last rollback, what it last read),
  which may be stale by then: exactly the writer one position behind of issue 20;
* ``rollback`` to a random listed checkpoint other than the head;
* ``delete`` of the head checkpoint, of the run, of a random non-head (middle) checkpoint;
* ``prune(keep_last=k, run_id=run)``, k random in 1..4;
* ``gc(grace_period=3600)`` (the default grace; never grace 0 while writers run).

After a ConflictError a writer reads the head again only with probability ``--p-reread``; else it
keeps its stale view for its next operation on that run (adversarial on purpose).

Each process appends to its own ledger (``ledger-<p>.jsonl``, one JSON object a line, flushed
after every line) every acknowledged save (run, checkpoint id, parent it continued, message count,
sha256 of the compact JSON of the message list, start and end of the call on the system-wide
monotonic clock), every ConflictError, every other typed refusal, every untyped exception (with
its traceback), and every rollback / head delete / run delete / middle delete / prune with what it
removed. A rollback, head delete or run delete first reads ``latest()`` (the caller's view) then
``list()``; the operation is only attempted if the list's newest is that head, so when it succeeds
(the head did not move in between: a save in between would have made it conflict) what it removed
is exactly the listed checkpoints newer than the target (rollback), the head (head delete), or the
whole list (run delete). A prune removed what it returned; a middle delete the id it named.

At the end, writers stopped: ``gc(grace_period=0)`` twice, then the checks, per run, through a new
manager:

* **lost** (must be 0): an acknowledged save that no acknowledged operation removed (never in a
  prune's returned list, never a deleted checkpoint, not in the list a successful rollback removed
  or a run delete deleted) and that ``get(run, id)`` does not restore with exactly its messages;
* **lost (coarse rule)**, the strictest rule that only trusts timestamps: the save was never in a
  prune's list nor a deleted checkpoint, no run delete of its run ended after the save started, and
  no rollback in its run ended after the save started whose target was not saved after it; such a
  save must be restorable. It is weaker than *lost* (every save it flags, *lost* flags too);
* **wrong data** (must be 0): ``get`` returned other messages than the save was given;
* **resurrected** (must be 0): a checkpoint an acknowledged operation removed is still listed or
  restorable;
* **phantoms** (must be 0): a listed checkpoint no ledger acknowledged (a save that raised but landed);
* **below a newer head** (must be 0): two listed checkpoints whose log order contradicts the order of
  their saves (one save started after the other was acknowledged, yet it sits at a lower position):
  the prune variant of issue 20, a stale save landing in a freed slot in the middle of the run;
* **unlisted survivor** (must be 0): ``list()`` must be exactly the acknowledged saves minus the
  removed ones;
* **head** (must be 0 mismatches): ``latest()`` is what the last successful head-moving operation
  left (a save: its id; a rollback: its target, or, when a prune or middle delete beside it removed
  the target, the newest listed checkpoint below it or nothing; a run delete: nothing; a head delete: one of the
  checkpoints listed under the deleted head). "Last" is the operation that published last; since
  that is not observable, any operation that ended after every other one started qualifies;
* ``verify(read_data=True)`` reports 0 errors; no untyped exception in any writer or GC.

Reported: operations by kind, saves acknowledged, conflicts, refusals, and the counts above.
Exit status 1 if any must-be-0 count is not 0 or a process died.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

OPS = ("save", "rollback", "delete_head", "delete_run", "delete_middle", "prune", "gc")
# default mix: about one head-moving clean-up per two saves (adversarial for stale writers)
DEFAULT_MIX = {"save": 0.52, "rollback": 0.13, "delete_head": 0.09, "delete_run": 0.03,
               "delete_middle": 0.09, "prune": 0.12, "gc": 0.02}
_WORDS = ("the a to of and in is that for it this with on be as are we not file function test should will can "
          "now let me check see need error value return code change fix issue line call class method").split()


def digest(msgs: list) -> str:
    """sha256 of the compact JSON of a message list (key order and unicode kept)."""
    return hashlib.sha256(json.dumps(msgs, separators=(",", ":"), ensure_ascii=False).encode()).hexdigest()


def now() -> int:
    """System-wide monotonic clock (CLOCK_MONOTONIC: comparable between processes on one machine), ns."""
    return time.monotonic_ns()


def _turn(rng: random.Random, p: int, k: int) -> list:
    """Two new messages, unique to (process, operation), 150-400 bytes of JSON."""
    words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(10, 40)))
    return [{"role": "assistant", "content": f"p{p} op{k}: {words}",
             "tool_calls": [{"id": f"call_{p}_{k}", "name": "bash", "arguments": {"cmd": f"echo {k}"}}]},
            {"role": "tool", "tool_call_id": f"call_{p}_{k}", "content": f"{k} é {rng.random()}"}]


# ------------------------------------------------------------------------------------------------
# writer process


def writer(root: str, pkg: str | None, p: int, runs: list, nops: int, seed: int, ledger: str, mix: dict,
           p_own: float, p_reread: float, ready, go) -> None:
    """One writer process: ``nops`` random operations on the shared runs, every outcome in ``ledger``."""
    if pkg:
        sys.path.insert(0, pkg)
    from snapstore import CheckpointManager
    from snapstore.errors import ConflictError, SnapstoreError
    from snapstore.stores import open_store

    store = open_store(root)  # a directory: LocalStore with fsync; a path ending in .db: one SQLite file (FULL)
    mgr = CheckpointManager(store, create=False)
    mgr.repo
    rng = random.Random(seed * 7919 + p)
    kinds, weights = zip(*mix.items())
    # per run, what this process last saw: (checkpoint id or None for an empty run, messages), or
    # None: never saw it / must read the head again
    cur: dict = {r: None for r in runs}
    f = open(ledger, "a", buffering=1)

    def log(**e) -> None:
        e["p"] = p
        f.write(json.dumps(e) + "\n")
        f.flush()

    def read_head(run):
        cp = mgr.latest(run)
        cur[run] = (cp.id, list(cp.messages)) if cp is not None else (None, [])
        return cp

    def listed_under_view(run):
        """(head, list ids newest first) if the list's newest is the head just read, else None."""
        cp = read_head(run)
        if cp is None:
            return None
        ids = [s.id for s in mgr.list(run)]
        if not ids or ids[0] != cp.id:
            log(op="raced", run=run, view=cp.id, listed=ids)  # the run moved between latest() and list()
            return None
        return cp, ids

    with ready.get_lock():
        ready.value += 1
    go.wait()
    for k in range(nops):
        run = rng.choice(runs)
        op = rng.choices(kinds, weights)[0]
        t0 = now()
        try:
            if op == "save":
                mode = "own" if cur[run] is not None and rng.random() < p_own else "latest"
                if mode == "latest":
                    read_head(run)
                parent, base = cur[run]
                msgs = base + _turn(rng, p, k)
                t0 = now()
                cid = mgr.save(run, msgs)
                t1 = now()
                log(op="save", run=run, id=cid, parent=parent, mode=mode, n=len(msgs), sha=digest(msgs), t0=t0, t1=t1)
                cur[run] = (cid, msgs)
            elif op in ("rollback", "delete_head", "delete_run"):
                got = listed_under_view(run)
                if got is None or (op == "rollback" and len(got[1]) < 2):
                    continue
                cp, ids = got
                if op == "rollback":
                    target = rng.choice(ids[1:])
                    t0 = now()
                    back = mgr.rollback(run, target)
                    t1 = now()
                    removed = ids[:ids.index(target)]
                    log(op=op, run=run, view=cp.id, target=target, listed=ids, removed=removed, t0=t0, t1=t1)
                    cur[run] = (target, list(back.messages))
                elif op == "delete_head":
                    t0 = now()
                    mgr.delete(run, cp.id)
                    t1 = now()
                    log(op=op, run=run, view=cp.id, listed=ids, removed=[cp.id], t0=t0, t1=t1)
                    cur[run] = None
                else:
                    t0 = now()
                    mgr.delete(run)
                    t1 = now()
                    log(op=op, run=run, view=cp.id, listed=ids, removed=ids, t0=t0, t1=t1)
                    cur[run] = (None, [])
            elif op == "delete_middle":
                ids = [s.id for s in mgr.list(run)]
                if len(ids) < 2:
                    continue
                victim = rng.choice(ids[1:])
                t0 = now()
                mgr.delete(run, victim)
                t1 = now()
                log(op=op, run=run, listed=ids, removed=[victim], t0=t0, t1=t1)
            elif op == "prune":
                keep = rng.randint(1, 4)
                t0 = now()
                gone = mgr.prune(keep_last=keep, run_id=run)
                t1 = now()
                log(op=op, run=run, keep_last=keep, removed=[s.id for s in gone], t0=t0, t1=t1)
            elif op == "gc":
                t0 = now()
                rep = mgr.gc(grace_period=3600)
                log(op=op, t0=t0, t1=now(), deleted=dict(rep.deleted))
        except ConflictError as e:
            log(op="conflict", what=op, run=run, t0=t0, t1=now(), error=str(e)[:300])
            if op != "gc" and rng.random() < p_reread:
                cur[run] = None
        except SnapstoreError as e:  # typed refusals (e.g. a middle checkpoint another process deleted)
            log(op="refused", what=op, run=run, t0=t0, t1=now(), type=type(e).__name__, error=str(e)[:300])
            cur[run] = None
        except Exception as e:  # noqa: BLE001 - an untyped exception is a defect: recorded, reported
            log(op="error", what=op, run=run, t0=t0, t1=now(), type=type(e).__name__, error=str(e)[:300],
                tb=traceback.format_exc())
            cur[run] = None
    log(op="done", t1=now())
    f.close()
    mgr.close()
    store.close()


# ------------------------------------------------------------------------------------------------
# the check


def read_ledgers(work: Path) -> list[dict]:
    out = []
    for path in sorted(work.glob("ledger-*.jsonl")):
        with open(path) as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out


def _last_head_candidates(moves: list[dict]) -> list[dict]:
    """The successful head-moving operations that may have published last: those that ended after
    every other one started (the one that truly published last always qualifies)."""
    if not moves:
        return []
    out = []
    for m in moves:
        others = max((o["t0"] for o in moves if o is not m), default=-1)
        if m["t1"] >= others:
            out.append(m)
    return out


def check(root: str, entries: list[dict], runs: list, *, pkg: str | None = None) -> dict:
    """Two ``gc(grace_period=0)``, then every check of the module docstring; returns counts and examples."""
    if pkg and pkg not in sys.path:
        sys.path.insert(0, pkg)
    from snapstore import CheckpointManager
    from snapstore.errors import CheckpointNotFound, SnapstoreError
    from snapstore.format.ids import seq_hint
    from snapstore.stores import open_store

    store = open_store(root)  # a directory: LocalStore with fsync; a path ending in .db: one SQLite file (FULL)
    res: dict = {"gc_errors": []}
    with CheckpointManager(store, create=False) as g:
        for _ in range(2):
            try:
                g.gc(grace_period=0)
            except Exception as e:  # noqa: BLE001 - reported
                res["gc_errors"].append(f"{type(e).__name__}: {e}")
    saves = [e for e in entries if e["op"] == "save"]
    dup_ids = [k for k, n in Counter((e["run"], e["id"]) for e in saves).items() if n > 1]
    removing = [e for e in entries if e["op"] in ("rollback", "delete_head", "delete_run", "delete_middle", "prune")]
    counts = Counter()
    examples = defaultdict(list)

    def bad(kind, text):
        counts[kind] += 1
        if len(examples[kind]) < 8:
            examples[kind].append(text)

    mgr = CheckpointManager(store, create=False)
    for run in runs:
        rs = [e for e in saves if e["run"] == run]
        rem = [e for e in removing if e["run"] == run]
        removed = set().union(*(e["removed"] for e in rem)) if rem else set()
        exact_removed = set().union(*(e["removed"] for e in rem if e["op"] in ("prune", "delete_head", "delete_middle"))) \
            if rem else set()
        save_by_id = {e["id"]: e for e in rs}
        listed = mgr.list(run)
        listed_ids = [s.id for s in listed]
        seq_of = {s.id: s.seq for s in listed}
        restorable = set()
        for e in rs:
            try:
                cp = mgr.get(run, e["id"])
            except CheckpointNotFound:
                cp = None
            except SnapstoreError as x:
                bad("get_errors", f"{run} {e['id']}: {type(x).__name__}: {x}")
                cp = None
            if cp is not None:
                if len(cp.messages) != e["n"] or digest(cp.messages) != e["sha"]:
                    bad("wrong_data", f"{run} {e['id']} (p{e['p']}): get() returned {len(cp.messages)} messages, "
                                      f"saved {e['n']}, digest equal {digest(cp.messages) == e['sha']}")
                else:
                    restorable.add(e["id"])
            if e["id"] in restorable:
                if e["id"] in removed:
                    bad("resurrected", f"{run} {e['id']} (p{e['p']}) was removed by "
                                       f"{[(r['op'], r['p']) for r in rem if e['id'] in r['removed']]} and still restores")
                continue
            if e["id"] not in removed:
                bad("lost", f"{run} {e['id']} (p{e['p']}, {e['mode']}, parent {e['parent']}) acknowledged at "
                            f"t={e['t1'] / 1e9:.3f}; no acknowledged operation removed it; get(): not found")
            # the coarse rule: trusts only exact removals and timestamps
            if e["id"] in exact_removed:
                continue
            if any(r["op"] == "delete_run" and r["t1"] > e["t0"] for r in rem):
                continue
            if any(r["op"] == "rollback" and r["t1"] > e["t0"] and r["target"] != e["id"]
                   and not (r["target"] in save_by_id and save_by_id[r["target"]]["t0"] > e["t1"]) for r in rem):
                continue
            bad("lost_coarse", f"{run} {e['id']} (p{e['p']}): nothing could have removed it; not restorable")
        for cid in listed_ids:
            if cid not in save_by_id:
                bad("phantoms", f"{run} {cid}: listed, no ledger acknowledged it")
        for e in rs:
            if e["id"] not in removed and e["id"] in restorable and e["id"] not in seq_of:
                bad("unlisted_survivor", f"{run} {e['id']}: restorable, never removed, not listed")
        # log order vs save order, for listed checkpoints
        live = sorted((save_by_id[c] for c in listed_ids if c in save_by_id), key=lambda e: e["t1"])
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                if b["t0"] > a["t1"] and seq_of[b["id"]] < seq_of[a["id"]]:
                    bad("below_newer_head", f"{run}: {b['id']} (p{b['p']}, saved after {a['id']} was acknowledged) "
                                            f"sits at position {seq_of[b['id']]} below {seq_of[a['id']]}")
        # the head
        moves = [dict(e, after={e["id"]}) for e in rs]
        for r in rem:
            if r["op"] == "rollback":
                after = {r["target"]}
                if r["target"] in exact_removed:
                    # a delete or prune beside the rollback removed its target after it published:
                    # the head resolves to the newest live checkpoint below it, or none (format.md §11)
                    ts = seq_hint(r["target"])
                    below = [c for c in listed_ids if ts is not None and seq_of[c] < ts]
                    after.add(below[0] if below else None)
                moves.append(dict(r, after=after))
            elif r["op"] == "delete_run":
                moves.append(dict(r, after={None}))
            elif r["op"] == "delete_head":
                moves.append(dict(r, after=set(r["listed"][1:]) | {None}))
        head = mgr.latest(run)
        hid = head.id if head is not None else None
        cands = _last_head_candidates(moves)
        ok = any(hid in m["after"] for m in cands) if cands else hid is None
        if not ok:
            bad("head_mismatch", f"{run}: latest() is {hid}; the last head-moving operations left "
                                 f"{[(m['op'], m['p'], sorted(map(str, m['after']))[:3]) for m in cands]}")
        if head is not None and hid in save_by_id and digest(head.messages) != save_by_id[hid]["sha"]:
            bad("wrong_data", f"{run}: latest() {hid} returned other messages than saved")
        counts["listed_at_end"] += len(listed_ids)
        counts["restorable_at_end"] += len(restorable)
    counts["duplicate_ids"] = len(dup_ids)
    rep = mgr.verify(read_data=True)
    res["verify_errors"] = [str(x) for x in rep.errors][:20]
    mgr.close()
    store.close()
    res["counts"] = dict(counts)
    res["examples"] = dict(examples)
    return res


# ------------------------------------------------------------------------------------------------
# one whole workload


MUST_BE_ZERO = ("lost", "lost_coarse", "wrong_data", "resurrected", "phantoms", "below_newer_head",
                "unlisted_survivor", "head_mismatch", "get_errors")


def run_workload(work: Path, *, procs: int = 4, runs: int = 2, ops: int = 150, seed: int = 1,
                 pkg: str | None = None, mix: dict | None = None, p_own: float = 0.6, p_reread: float = 0.3,
                 timeout: float = 900.0, store: str = "local") -> dict:
    """Create a repository under ``work``, run the writers, check; return the figures (see module doc).

    ``store``: ``"local"`` (a directory, fsync on) or ``"sqlite"`` (one SQLite file, synchronous=FULL).

    ``pkg``: a directory to put first on ``sys.path`` (a copy of another snapstore), else the
    snapstore this interpreter imports."""
    if pkg:
        sys.path.insert(0, pkg)
    from snapstore import CheckpointManager
    from snapstore.stores import open_store

    work.mkdir(parents=True, exist_ok=True)
    root = str(work / ("repo.db" if store == "sqlite" else "repo"))
    store = open_store(root)  # a directory: LocalStore with fsync; a path ending in .db: one SQLite file (FULL)
    CheckpointManager(store).repo  # create it before the writers start
    store.close()
    run_ids = [f"shared-{j}" for j in range(runs)]
    mix = dict(mix or DEFAULT_MIX)
    ctx = mp.get_context("spawn")
    ready, go = ctx.Value("i", 0), ctx.Event()
    ps = [ctx.Process(target=writer, name=f"ledger-writer-{p}",
                      args=(root, pkg, p, run_ids, ops, seed, str(work / f"ledger-{p}.jsonl"), mix, p_own, p_reread,
                            ready, go)) for p in range(procs)]
    for pr in ps:
        pr.start()
    t = time.monotonic()
    while ready.value < procs and time.monotonic() - t < 120 and all(pr.is_alive() for pr in ps):
        time.sleep(0.02)
    t_start = time.monotonic()
    go.set()
    for pr in ps:
        pr.join(max(1.0, timeout - (time.monotonic() - t_start)))
    load_s = time.monotonic() - t_start
    died = []
    for pr in ps:
        if pr.is_alive():
            pr.terminate()
            pr.join()
            died.append(f"{pr.name} did not finish in {timeout:.0f}s")
        elif pr.exitcode != 0:
            died.append(f"{pr.name} exit code {pr.exitcode}")
    entries = read_ledgers(work)
    done = sum(1 for e in entries if e["op"] == "done")
    if done != procs:
        died.append(f"{procs - done} writer(s) wrote no 'done' line")
    t = time.monotonic()
    res = check(root, entries, run_ids, pkg=pkg)
    res["check_seconds"] = round(time.monotonic() - t, 2)
    ops_c = Counter(e["op"] for e in entries if e["op"] not in ("conflict", "refused", "error", "done", "raced"))
    res.update(
        procs=procs, runs=runs, ops_per_proc=ops, seed=seed, load_seconds=round(load_s, 2), died=died,
        operations=dict(ops_c), saves_acknowledged=ops_c["save"],
        saves_own_view=sum(1 for e in entries if e["op"] == "save" and e["mode"] == "own"),
        conflicts=dict(Counter(e["what"] for e in entries if e["op"] == "conflict")),
        refused=dict(Counter(f"{e['what']}:{e['type']}" for e in entries if e["op"] == "refused")),
        raced=sum(1 for e in entries if e["op"] == "raced"),
        untyped_errors=[f"{e['what']}: {e['type']}: {e['error']}\n{e['tb']}" for e in entries if e["op"] == "error"],
        removed_by_ops=sum(len(e["removed"]) for e in entries if "removed" in e),
    )
    res["lost"] = res["counts"].get("lost", 0)
    failures = [f"{k}: {res['counts'][k]}" for k in MUST_BE_ZERO if res["counts"].get(k)]
    if res["verify_errors"]:
        failures.append(f"verify errors: {len(res['verify_errors'])}")
    if res["gc_errors"]:
        failures.append(f"final GC errors: {len(res['gc_errors'])}")
    if res["untyped_errors"]:
        failures.append(f"untyped exceptions: {len(res['untyped_errors'])}")
    if died:
        failures.append("; ".join(died))
    res["failures"] = failures
    return res


def summary(res: dict) -> str:
    c = res["counts"]
    lines = [f"{res['procs']} processes x {res['ops_per_proc']} operations on {res['runs']} shared runs: "
             f"{res['load_seconds']}s load, {res['check_seconds']}s check",
             f"  operations acknowledged {res['operations']}",
             f"  saves acknowledged {res['saves_acknowledged']} ({res['saves_own_view']} on the writer's own view), "
             f"conflicts {res['conflicts']} (total {sum(res['conflicts'].values())}), refused {res['refused']}, "
             f"raced (skipped) {res['raced']}",
             f"  checkpoints removed by acknowledged operations {res['removed_by_ops']}; at the end listed "
             f"{c.get('listed_at_end', 0)}, restorable {c.get('restorable_at_end', 0)}",
             "  " + ", ".join(f"{k} {c.get(k, 0)}" for k in MUST_BE_ZERO),
             f"  verify errors {len(res['verify_errors'])}, final GC errors {len(res['gc_errors'])}, untyped "
             f"exceptions {len(res['untyped_errors'])}"]
    for k, ex in res["examples"].items():
        for x in ex[:4]:
            lines.append(f"    {k}: {x}")
    for e in res["untyped_errors"][:2] + res["verify_errors"][:3] + res["gc_errors"][:3]:
        lines.append("    " + e.strip().replace("\n", "\n      "))
    lines.append("RESULT: " + ("FAIL: " + "; ".join(res["failures"]) if res["failures"] else "PASS"))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000, help="operations per process")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--p-own", type=float, default=0.6, help="a save continues the writer's own view unread")
    ap.add_argument("--p-reread", type=float, default=0.3, help="after a ConflictError, read the head again")
    ap.add_argument("--mix", help="operation weights as JSON, e.g. '{\"save\": 0.5, \"rollback\": 0.2}'")
    ap.add_argument("--dir", help="working directory (default: a new temp dir, removed unless --keep)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--store", choices=("local", "sqlite"), default="local",
                    help="the repository: a directory (default) or one SQLite file")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--code", default="head", help="the snapstore to test: 'head' (committed, default), a git "
                                                   "revision, or 'worktree'")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _lib import snapshot_package

    work = Path(args.dir or tempfile.mkdtemp(prefix="snapstore-ledger-"))
    if work.exists() and args.dir:
        for f in work.glob("ledger-*.jsonl"):
            f.unlink()
        shutil.rmtree(work / "repo", ignore_errors=True)
    pkg, desc = snapshot_package(work / "pkg", args.code)
    mix = dict(DEFAULT_MIX, **json.loads(args.mix)) if args.mix else None
    print(f"snapstore {desc}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; {platform.platform()}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    res = run_workload(work, procs=args.procs, runs=args.runs, ops=args.ops, seed=args.seed, pkg=str(pkg),
                       mix=mix, p_own=args.p_own, p_reread=args.p_reread, store=args.store)
    res["code"] = desc
    res["load_average_after"] = os.getloadavg()
    print(summary(res))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in res['load_average_after'])} (1, 5, 15 min)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    elif args.keep:
        print(f"kept {work}")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
