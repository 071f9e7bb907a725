"""Archive benchmark (issue 23's Must show): the shared agent trajectories and the shared-prompt
workload saved hot, archived, then GC'd; bytes against the lower bound, objects, hot bytes left,
times, and what 1M checkpoints cost live, archived in each storage class and restored once.

For each workload (every file of ``../shared/data/trajectories`` or ``$SNAPSTORE_SHARED_DATA``, one
run per conversation; and ``benchmarks/workloads.py``'s ``shared-prompt:<runs>``), every checkpoint
is saved into a fresh local repository, then ``archive()`` (GLACIER_IR, recorded) and
``gc(grace_period=0)`` twice. Reported per workload:

* **hot**: every object's bytes before archiving (config left out), and objects per run;
* **bundle**: the archive bundles' bytes; **hot left**: the bytes of everything else left (manifests
  and their stubs, log segments and archive logs, run markers, the bundle index record), per
  archived checkpoint, and split: **logs** (``runs/*/l/`` and the bundle logs ``archive/log/``),
  **manif** (``runs/*/m/``), **index**
  (``archive/index/``); ``--no-catalogue`` skips archive's hot-catalogue step (docs/format.md §28),
  leaving the run logs as they were, for the figure before it;
* **LB**: the lower bound, zstd -19 of each conversation's final history (the workload's own
  definition, ``benchmarks/workloads.py``: distinct messages if a conversation rewrote its
  history; the shared prompt counted once for ``shared-prompt``);
* objects per run after archiving, the time to archive, and a cold ``latest()`` of the largest run
  (fresh manager; GETs and bytes down, wall time) hot before archiving and from the bundle after GC;
* **the bill of 1M checkpoints** (``snapstore.maintenance.bill``, S3's public prices): the measured
  bytes and objects per checkpoint over all workloads scaled to 1,000,000 checkpoints, live (every
  object in STANDARD) and archived in each class (the hot catalogue in STANDARD, the bundles in the
  class, 64 MiB each: the middle of archive's 16-128 MiB aim), per month, to write (PUTs or
  transitions) and to restore or read every object once (bulk tier where there is one).

Every archived checkpoint is read back and compared with what was saved, and the repository
verified with ``--read-data`` (exit 1 on a mismatch).

    python benchmarks/archive.py [--quick] [--data DIR] [--json OUT] [--shared-runs N] [--level N] [--ldm]
                                 [--window-log N] [--no-catalogue] [--breakdown]

``--quick`` (under a minute): the three smallest trajectory files and ``shared-prompt:20``.
``--breakdown`` adds the hot catalogue's bytes per record by field group and the index records' parts.

Figures (``python benchmarks/archive.py --breakdown``, at 5716356, local directory, thin bundle
logs): hot bytes left per archived checkpoint 41 B on the trajectories (bundle logs 29, index
records 11) and 40 B on ``shared-prompt:100`` (28, 12): PASS against the issue's 64 B. Bundles
1.02x LB on the trajectories, 1.27x on ``shared-prompt:100`` (within 1.2x LB + 1 KB per run).
``--quick`` at 5716356: 92 B on its 3 single-run files (FAIL: each run of 5-12 checkpoints pays
a whole index record, 45 B a checkpoint) and 43 B on ``shared-prompt:20``. At
077ab01, with whole records in the bundle logs (version 5): 104 B and 103 B (bundle logs 93 and
91, of which digest 18, state 25, ``xt`` 9, segment list 8), bundles 0.84x and 1.17x LB.
``benchmarks/archive_size.py`` is this script under its earlier name.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _lib  # noqa: E402

from benchmarks import workloads as wl  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.format.bundle import STORAGE_CLASSES  # noqa: E402
from snapstore.maintenance.bill import bill  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

QUICK_FILES = 3
"""``--quick``: this many of the smallest trajectory files."""
SCALE = 1_000_000
"""Checkpoints of the cost table."""
BUNDLE_BYTES = 64 << 20
"""Bundle size assumed in the cost table (bytes)."""
MiB = 1 << 20


def _objects(store) -> list:
    return [i for i in store.list("") if i.key != "config"]


def _cold_latest(root: Path, run: str) -> tuple:
    """A fresh manager's ``latest(run)``: (checkpoint, seconds, GETs, bytes down)."""
    store = LocalStore(root, fsync=False)
    fresh = CheckpointManager(store)
    t0 = time.perf_counter()
    cp = fresh.latest(run)
    return cp, time.perf_counter() - t0, store.stats.counts.get("GET", 0), store.stats.bytes_down


BREAKDOWN = (("write_id", ("write_id",)), ("created", ("created",)), ("id", ("id",)), ("parent", ("parent",)),
             ("rd/run", ("rd", "run")), ("kind+seq", ("kind", "seq")),
             ("user fields", ("step", "agent_id", "status", "token_usage", "metrics", "metadata")),
             ("session state", ("session_state", "session_state_ref", "session_state_tree")),
             ("msgs count+bytes", ("messages.count", "messages.bytes")), ("msgs.digest", ("messages.digest",)),
             ("msgs.state", ("messages.state",)), ("msgs.xt", ("messages.xt",)), ("msgs.x+a", ("messages.x", "messages.a")),
             ("segs", ("segs",)), ("origin/target", ("origin", "target")))
"""``--breakdown``: the field groups of a record whose share of the bundle logs is measured."""


def _strip(body: bytes, names) -> bytes:
    from snapstore.format.codec import dumps_exact, loads_exact
    d = loads_exact(body, 64)
    for n in names:
        if n.startswith("messages."):
            d.get("messages", {}).pop(n.split(".", 1)[1], None)
        else:
            d.pop(n, None)
    return dumps_exact(d)


def catalogue_breakdown(store) -> dict:
    """Bytes of the bundle logs (``archive/log/``) and of the index records (``archive/index/``) of
    ``store``, split: each bundle log re-encoded with one field group of :data:`BREAKDOWN` left out
    of every record; the group's bytes are the difference (groups compress together, so the
    differences need not add up to the whole). Index records: the whole, and re-encoded with
    ``runs`` (the positions served) or ``replaces`` (the hot packs replaced) emptied.

    Returns:
        ``{"records": N, "logs": bytes, "fields": {group: bytes}, "index": bytes,
        "index_runs": bytes, "index_replaces": bytes}``.
    """
    from dataclasses import replace as dc_replace
    from snapstore.format.bundle import decode_index, encode_index
    from snapstore.format.logseg import decode_bundlelog, encode_bundlelog
    out = {"records": 0, "logs": 0, "fields": {g: 0 for g, _ in BREAKDOWN}, "index": 0, "index_runs": 0,
           "index_replaces": 0}
    for info in store.list("archive/log/"):
        logs = decode_bundlelog(info.key, store.get(info.key))
        recs = {rk: [(c.seq, c.version, c.data) for c in cs] for rk, cs in logs.items()}
        base = len(encode_bundlelog({rk: [(s, v, _strip(b, ())) for s, v, b in rs] for rk, rs in recs.items()}))
        out["logs"] += info.size
        out["records"] += sum(len(rs) for rs in recs.values())
        for g, names in BREAKDOWN:
            out["fields"][g] += base - len(encode_bundlelog(
                {rk: [(s, v, _strip(b, names)) for s, v, b in rs] for rk, rs in recs.items()}))
    for info in store.list("archive/index/"):
        ix = decode_index(info.key, store.get(info.key))
        whole = len(encode_index(ix))
        out["index"] += info.size
        out["index_runs"] += whole - len(encode_index(dc_replace(ix, runs={})))
        out["index_replaces"] += whole - len(encode_index(dc_replace(ix, replaces=[])))
    return out


def report_breakdown(rows: list) -> str:
    """The ``--breakdown`` lines: bytes per archived checkpoint per field group, per workload kind."""
    out = []
    for label, sel in (("trajectories", [r for r in rows if not r["file"].startswith("shared-prompt")]),
                       ("shared-prompt", [r for r in rows if r["file"].startswith("shared-prompt")])):
        sel = [r["breakdown"] for r in sel if "breakdown" in r]
        if not sel:
            continue
        n = sum(b["records"] for b in sel) or 1
        f = {g: sum(b["fields"][g] for b in sel) / n for g, _ in BREAKDOWN}
        out.append(f"{label}: bundle logs {sum(b['logs'] for b in sel) / n:.1f} B per record, of which (left out one "
                   f"group at a time): " + ", ".join(f"{g} {v:.1f}" for g, v in f.items()))
        out.append(f"{label}: index records {sum(b['index'] for b in sel) / n:.1f} B per record (runs/seqs "
                   f"{sum(b['index_runs'] for b in sel) / n:.1f}, replaces {sum(b['index_replaces'] for b in sel) / n:.1f})")
    return "\n".join(out)


def run_workload(w, workdir: Path, breakdown: bool = False) -> dict:
    """Save ``w`` (a :class:`benchmarks.workloads.Workload`) hot, archive it, GC twice; measure (module docstring)."""
    root = workdir / (w.name.replace(":", "_").replace("/", "_") + ".repo")
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    saved = {}
    ckpts = 0
    for ri, r in enumerate(w.runs):
        run = f"{r.run_id}-{ri}"
        pairs = []
        for i, msgs in enumerate(r.checkpoints):
            msgs = list(msgs)
            if r.states is None:
                pairs.append((mgr.save(run, msgs), msgs))
            else:
                pairs.append((mgr.save(run, msgs, session_state=r.states[i]), msgs))
        saved[run] = pairs
        ckpts += len(pairs)
    hot = _objects(mgr.store)
    big = max(saved, key=lambda r: len(saved[r]))
    hot_read = _cold_latest(root, big)
    t0 = time.perf_counter()
    rep = mgr.archive()
    t_archive = time.perf_counter() - t0
    mgr.gc(grace_period=0)
    mgr.gc(grace_period=0)
    after = _objects(mgr.store)
    bundle = sum(i.size for i in after if i.key.startswith("archive/data/"))
    left = sum(i.size for i in after if not i.key.startswith("archive/data/"))
    split = {part: sum(i.size for i in after if i.key.startswith("runs/") and i.key.split("/")[2] == part)
             for part in ("l", "m")}
    split["l"] += sum(i.size for i in after if i.key.startswith("archive/log/"))  # bundle logs (§28)
    index = sum(i.size for i in after if i.key.startswith("archive/index/"))
    # a cold read of the largest run's latest checkpoint, from the bundle
    cp, t_read, gets, down = _cold_latest(root, big)
    ok = cp.messages == saved[big][-1][1]
    check = CheckpointManager(LocalStore(root, fsync=False))
    for run, pairs in saved.items():
        for cid, msgs in pairs:
            ok = ok and check.get(run, cid).messages == msgs
    ok = ok and check.verify(read_data=True).ok
    runs = len(saved)
    extra = {"breakdown": catalogue_breakdown(mgr.store)} if breakdown else {}
    return {**extra, "file": w.name, "runs": runs, "checkpoints": ckpts, "lb": w.lb_bytes,
            "hot": sum(i.size for i in hot), "hot_objects": len(hot), "hot_objects_per_run": len(hot) / runs,
            "bundle": bundle, "bundles": len(rep.bundles), "hot_left": left,
            "hot_left_objects": sum(1 for i in after if not i.key.startswith("archive/data/")),
            "hot_left_per_ckpt": left / ckpts, "logs_left": split["l"], "manifests_left": split["m"],
            "index_left": index, "objects_per_run": len(after) / runs,
            "archive_s": t_archive, "read_s": t_read, "read_gets": gets, "read_bytes": down,
            "hot_read_s": hot_read[1], "hot_read_gets": hot_read[2], "hot_read_bytes": hot_read[3], "exact": ok}


def cost_table(rows: list, scale: int = SCALE) -> list:
    """Rows ``(what, $ per month, $ to write, $ to restore or read once, objects, GB)`` for ``scale``
    checkpoints at the per-checkpoint bytes and objects measured over ``rows`` (module docstring).
    To write: one PUT per object (live: every hot object; archived: the hot catalogue's objects in
    STANDARD and each bundle into its class). To restore once: live, a GET per object; archived,
    the bill's restore estimate of the bundles (requests, retrieval per GB, a GET each)."""
    n = sum(r["checkpoints"] for r in rows)
    f = scale / n
    hot_objs, hot_bytes = sum(r["hot_objects"] for r in rows) * f, sum(r["hot"] for r in rows) * f
    left_objs, left_bytes = sum(r["hot_left_objects"] for r in rows) * f, sum(r["hot_left"] for r in rows) * f
    bundle_bytes = sum(r["bundle"] for r in rows) * f
    out = []
    live = bill((int(hot_objs), int(hot_bytes)), [], 0.0)
    gets = hot_objs * live["prices"]["get_per_1000"]["STANDARD"] / 1000
    puts = hot_objs * live["prices"]["put_per_1000"]["STANDARD"] / 1000
    out.append(("live (every object in STANDARD)", live["per_month"], puts, gets, int(hot_objs), hot_bytes / 2 ** 30))
    nb = max(1, math.ceil(bundle_bytes / BUNDLE_BYTES))
    for cls in STORAGE_CLASSES:
        sizes = [bundle_bytes / nb] * nb
        b = bill((int(left_objs), int(left_bytes)), [(cls, int(s), 0.0) for s in sizes], 0.0, tier="bulk")
        write = b["transition"]["usd"] + left_objs * b["prices"]["put_per_1000"]["STANDARD"] / 1000
        out.append((f"archived, {cls}", b["per_month"], write, b["restore_once"]["usd"],
                    int(left_objs) + nb, (left_bytes + bundle_bytes) / 2 ** 30))
    return out


def report(rows: list) -> str:
    out = ["archive: bytes hot vs archived vs LB (zstd -19 of each final history), per workload",
           f"{'workload':<44} {'runs':>4} {'ckpts':>5} {'hot':>9} {'bundle':>8} {'LB':>8} {'hot/LB':>6} "
           f"{'bun/LB':>6} {'left/ck':>7} {'obj/run':>8} {'arch s':>6} {'cold latest: hot -> archived':>30}"]
    for r in rows:
        out.append(f"{r['file'][:44]:<44} {r['runs']:>4} {r['checkpoints']:>5} {r['hot']:>9} {r['bundle']:>8} "
                   f"{r['lb']:>8} {r['hot'] / r['lb']:>6.2f} {r['bundle'] / r['lb']:>6.2f} "
                   f"{r['hot_left_per_ckpt']:>7.0f} {r['hot_objects_per_run']:>4.0f}->{r['objects_per_run']:<3.0f} "
                   f"{r['archive_s']:>6.2f} {r['hot_read_gets']:>3} GET {r['hot_read_bytes'] / 1024:>4.0f}K -> "
                   f"{r['read_gets']:>3} GET {r['read_bytes'] / 1024:>4.0f}K {r['read_s'] * 1000:>4.0f}ms"
                   + ("" if r["exact"] else "  MISMATCH"))
    for label, sel in (("trajectories", [r for r in rows if not r["file"].startswith("shared-prompt")]),
                       ("shared-prompt", [r for r in rows if r["file"].startswith("shared-prompt")])):
        if not sel:
            continue
        tot = {k: sum(r[k] for r in sel) for k in ("hot", "bundle", "lb", "hot_left", "checkpoints", "logs_left",
                                                    "manifests_left", "index_left", "runs")}
        out.append(f"{label}: hot {tot['hot']} B = {tot['hot'] / tot['lb']:.2f}x LB; bundles {tot['bundle']} B = "
                   f"{tot['bundle'] / tot['lb']:.2f}x LB; hot bytes left {tot['hot_left']} B = "
                   f"{tot['hot_left'] / tot['checkpoints']:.0f} B per archived checkpoint (logs "
                   f"{tot['logs_left'] / tot['checkpoints']:.0f}, manifests {tot['manifests_left'] / tot['checkpoints']:.0f}, "
                   f"index {tot['index_left'] / tot['checkpoints']:.0f}; target <= 64: "
                   f"{'yes' if tot['hot_left'] <= 64 * tot['checkpoints'] else 'no'}); bundles <= 1.2x LB + 1 KB per run: "
                   f"{tot['bundle']} <= {1.2 * tot['lb'] + 1024 * tot['runs']:.0f}: "
                   f"{'yes' if tot['bundle'] <= 1.2 * tot['lb'] + 1024 * tot['runs'] else 'no'}")
    n = sum(r["checkpoints"] for r in rows)
    out.append(f"cost of {SCALE:,} checkpoints at these workloads' bytes per checkpoint ({n:,} measured; USD, "
               f"S3 public prices, bundles of {BUNDLE_BYTES // MiB} MiB, restore tier bulk):")
    out.append(f"  {'':<34} {'$/month':>10} {'$ write':>10} {'$ restore once':>15} {'objects':>10} {'GB':>8}")
    for what, month, write, restore, objs, gb in cost_table(rows):
        out.append(f"  {what:<34} {month:>10.4f} {write:>10.4f} {restore:>15.4f} {objs:>10,} {gb:>8.2f}")
    return "\n".join(out)


def select_workloads(data: Path | None, quick: bool, shared_runs: int | None) -> list:
    """The trajectory workloads of ``data`` (the smallest :data:`QUICK_FILES` with ``quick``) and
    ``shared-prompt:<shared_runs>`` (20 quick, 100 full; 0: none)."""
    out = []
    if data is not None:
        files = wl.trajectory_files(Path(data))
        if quick:
            keep = {p.name for p in sorted(files, key=lambda p: p.stat().st_size)[:QUICK_FILES]}
            skip = [p.name for p in files if p.name not in keep]
        else:
            skip = []
        out += wl.trajectory_workloads(Path(data), skip=skip)[0]
    n = (20 if quick else 100) if shared_runs is None else shared_runs
    if n:
        out.append(wl.shared_prompt(n, 5))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=None, help="trajectories directory")
    ap.add_argument("--quick", action="store_true", help="the 3 smallest trajectory files and shared-prompt:20")
    ap.add_argument("--shared-runs", type=int, default=None, help="runs of the shared-prompt workload (0: none)")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--level", type=int, default=None, help="zstd level of bundle blocks (default: archive's, 19)")
    ap.add_argument("--ldm", action="store_true", help="long-range matching in bundle blocks (enable_ldm)")
    ap.add_argument("--window-log", type=int, default=None, help="zstd window_log of bundle blocks")
    ap.add_argument("--breakdown", action="store_true",
                    help="the hot catalogue's bytes per record split by field (bundle logs) and part (index records)")
    ap.add_argument("--no-catalogue", action="store_true",
                    help="skip archive's hot-catalogue step (run logs left as they were: the figure before it)")
    a = ap.parse_args(argv)
    from snapstore.maintenance import archive as archive_mod
    if a.level is not None:
        archive_mod.BUNDLE_LEVEL = a.level
    params = {**({"enable_ldm": 1} if a.ldm else {}), **({"window_log": a.window_log} if a.window_log else {})}
    archive_mod.BUNDLE_ZSTD_PARAMS = params or None
    if a.no_catalogue:
        from snapstore.maintenance.archcat import CompactResult
        archive_mod.compact_bundle_logs = lambda repo, bid, runs, hook=None, stub=True: {rk: CompactResult(why="--no-catalogue")
                                                                               for rk in runs}
    data = a.data or _lib.shared_dir()
    if data is None:
        print("no shared trajectories found (../shared/data/trajectories or $SNAPSTORE_SHARED_DATA): "
              "the shared-prompt workload only", file=sys.stderr)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for w in select_workloads(data, a.quick, a.shared_runs):
            rows.append(run_workload(w, Path(work), a.breakdown))
    if not rows:
        print("no workload selected", file=sys.stderr)
        return 2
    print(report(rows))
    if a.breakdown:
        print(report_breakdown(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
