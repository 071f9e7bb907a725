"""Garbage-collection cost benchmark: time, peak memory, requests and phases of ``gc`` on big repositories.

Run (from the repository root)::

    python benchmarks/gc.py                         # full size: 1,000 runs x 100 and 10,000 runs x 10
    python benchmarks/gc.py --scale 0.1             # run counts x 0.1 (10,000 checkpoints per setting)
    python benchmarks/gc.py --json gc.json --dir /tmp/gcbench --reuse
    python benchmarks/gc.py --scale 0.05 --profile  # also cProfile one GC per variant
    python benchmarks/gc.py --kinds norepack,norepack-trace   # only the GC with repacking off

Repositories (local store). Two settings: R runs x C checkpoints with (R, C) = (1,000, 100) and
(10,000, 10); ``--scale`` multiplies R. Checkpoint 0 of a run holds 2 messages (system prompt, task);
every later checkpoint appends 2 more (an assistant message and a tool result), each ~300-500 bytes
of JSON drawn from a seeded word/identifier generator (text differs between runs and messages; zstd
compresses it about like real agent text, not like random bytes). Every run is saved through
``CheckpointManager.save`` with **fsync OFF** (building speed only; the file contents are the same),
by one process per CPU, each taking a share of the runs. A setting is built once into ``base-RxC``
and each variant starts from a hard-link copy of it (``cp -al``): snapstore objects are immutable
(a store never writes into an existing file; GC and prune only create and unlink files), so a GC in
a copy cannot change the base. The base's file count and byte total are checked after each variant.

Variants per setting: 0 % pruned (nothing deleted) and 90 % pruned (``prune(keep_last=C/10)`` per
run, e.g. keep_last=1 for 10-checkpoint runs; prune runs in a subprocess, fsync OFF, timed but not
part of the GC numbers). Prune deletes manifests only: every run's newest checkpoint still references
every message of the run, so no pack becomes wholly unreferenced; what GC can reclaim comes from
repacking (the per-save packs are small, and pruning makes the states/nodes in them dead).

What is measured, per variant, each GC in a fresh subprocess (``python benchmarks/gc.py --child ...``)
on its own copy, with ``CheckpointManager(dir)`` (fsync ON, the default) and ``mgr.gc(grace_period=0)``:

* ``gc``: the GC as the library runs it by default (repacking on). Wall time (``time.perf_counter``);
  phases from the GC hooks (``after_list``, ``after_mark``, ``after_repack``, ``before_sweep``,
  ``after_sweep``), with the mark interval split into reading every manifest (``read_runs_slim``),
  reading every forwarding record (``fwd``) and the tree walk (``mark``), by wrapping
  ``read_runs_slim`` and ``mark`` inside the child; ``finish`` is lock
  removal plus ``remove_empty_dirs`` (a walk of the whole directory tree). Store requests
  (``mgr.store.stats`` delta, total and per phase; LIST counts one per 1,000 keys, DELETE one per
  1,000 keys), GETs of missing keys, keys listed, objects deleted, bytes reclaimed. Memory:
  ``ru_maxrss`` of the child before the GC (interpreter + imports + open repository) and at the end.
* ``gc+trace``: the same GC on another copy with ``tracemalloc`` started just before it (peak of
  Python allocations; tracemalloc slows the GC, so its wall time is shown only for reference).
* ``gc#2``: a second GC on the result of ``gc`` (steady state: nothing new to collect, forwarding
  records of every repacked pack present).
* ``norepack``: a GC with repacking disabled (``max_unused=1.0, small_pack_bytes=0``) on a fresh
  copy: pure list + mark + sweep, the shape the issue's cost claim describes (``norepack-trace``:
  the same under tracemalloc).

* ``gc+rt`` (``--kinds rt``): the same GC on another copy with ``--latency-ms`` (default 5 ms) slept
  inside every store request, so that requests the GC issues together overlap as on S3; its
  **sequential round trips** (the longest chain of requests each starting after the previous one
  ended, as in ``benchmarks/latency.py``) are the GC's structure, not the local disk's speed.
  Every GC row also shows its requests by kind (method and key kind: log segment, manifest,
  pack, ...), recorded by wrapping the store (:class:`RequestRecorder`; LIST per page of 1,000),
  and how many pack keys it GETs more than once (issue 8: a GC fetches no pack twice), beside the
  report's own count (``refetched_packs``; "-" for code older than that field).
* ``gc+top`` (``--kinds tracetop``): tracemalloc's top 20 allocation lines at ``after_mark`` and
  ``after_repack`` (slow: for finding where the memory goes).

With both ``gc`` and ``rt`` the benchmark prints the **projection** to ``--project-to`` live
checkpoints (default 1,000,000) at ``--project-ms`` per request (default 20): the ``gc+rt`` run's
sequential round trips x latency plus the ``gc`` run's CPU seconds, both scaled linearly by live
checkpoints (run a larger ``--settings``, e.g. ``3000x100``, to check the linearity), and peak RSS
per live checkpoint (of the whole process, and its growth during the GC).

``--kinds`` selects which of these run (default ``gc,trace,second,norepack``).

The claim checked: mark is O(live data), sweep is O(objects / 1,000) LIST pages plus O(dead)
deletes. Reported: mark time per live checkpoint and per live message (manifests + forwarding
records + tree walk), repack time per repacked pack and sweep time per deleted object, for settings
with equal data but different live/dead counts; run it at several ``--scale`` values to see how
each phase grows.

The children import a copy of the ``snapstore`` package taken when the benchmark starts: by default
as committed at HEAD (``git archive``), ``--code worktree`` for the working tree (other people may
edit it during a long run). The machine may be shared: each GC row shows the child's CPU seconds
and the load average next to its wall time. Page cache: copies are made just before each
GC, so the GC reads mostly from memory (local-disk, warm-cache numbers). ``--profile`` adds a
cProfile run (another copy) per variant and prints the top functions.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

from latency import sequential_round_trips  # noqa: E402  (benchmarks/ is on sys.path; stdlib only at import)
import _lib  # noqa: E402
from _lib import snapshot_package  # noqa: E402

SETTINGS = [(1000, 100), (10000, 10)]
PRUNES = [0, 90]

# ------------------------------------------------------------------------------------------------
# synthetic messages

_WORDS = """the a to of and in is that for it this with on be as are we not file function test should
will can now let me check see need error value return code change fix issue line call class method
module import output run first then look at from by if which when case expected result update use
add new make sure works correctly before after into also only one more path directory read write
problem because there was here current instead seems looks like handle edge following implement
approach verify passes failing traceback argument parameter config default option string list dict
number type object instance attribute variable loop condition branch query request response data
self def return None True False len range str int kwargs args result key item node name parser field
schema validate serialize load dump get_value set_value handle_error process_request build_query""".split()
_WEIGHTS = [1.0 / (i + 1) ** 0.9 for i in range(len(_WORDS))]
_TOOLS = ["bash", "str_replace_editor", "view_file", "search_code", "run_tests"]


class Gen:
    """Seeded message generator: text of varied words, identifiers and numbers."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def text(self, nbytes: int) -> str:
        r = self.r
        out, n = [], 0
        while n < nbytes:
            x = r.random()
            if x < 0.08:
                w = f"{r.choice(_WORDS)}_{r.randrange(1000)}"
            elif x < 0.12:
                w = f"src/{r.choice(_WORDS)}/{r.choice(_WORDS)}.py:{r.randrange(1, 900)}"
            elif x < 0.15:
                w = str(r.randrange(10 ** r.randint(1, 7)))
            else:
                w = r.choices(_WORDS, _WEIGHTS)[0]
            out.append(w)
            n += len(w) + 1
        return " ".join(out)[:nbytes]

    def prelude(self) -> list:
        return [{"role": "system", "content": self.text(self.r.randint(250, 420))},
                {"role": "user", "content": self.text(self.r.randint(250, 420))}]

    def turn(self, k: int) -> list:
        r = self.r
        return [{"role": "assistant", "content": self.text(r.randint(120, 260)),
                 "tool_calls": [{"id": f"call_{r.getrandbits(48):012x}", "name": r.choice(_TOOLS),
                                 "arguments": self.text(r.randint(60, 140))}]},
                {"role": "tool", "tool_call_id": f"call_{k}", "content": self.text(r.randint(250, 420))}]


# ------------------------------------------------------------------------------------------------
# helpers


def tree_summary(root: str) -> tuple[int, int]:
    """(files, bytes) below ``root`` (excluding dot files)."""
    n = b = 0
    for dp, dns, fns in os.walk(root):
        for f in fns:
            if f.startswith("."):
                continue
            n += 1
            b += os.lstat(os.path.join(dp, f)).st_size
    return n, b


def du_bytes(root: str) -> int:
    """Allocated bytes below ``root`` (like ``du -s``)."""
    out = subprocess.run(["du", "-s", "-B1", root], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def link_copy(src: str, dst: str) -> float:
    if os.path.exists(dst):
        shutil.rmtree(dst)
    t = time.perf_counter()
    subprocess.run(["cp", "-al", src, dst], check=True)
    return time.perf_counter() - t


def child_env(pkg: Path) -> dict:
    """A child's environment: the frozen package ``pkg`` first on the path, no bytecode written."""
    return _lib.child_env(pkg, extra={"PYTHONDONTWRITEBYTECODE": "1"})


def run_child(pkg: Path, args: list[str], timeout: float | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    p = subprocess.run(cmd, env=child_env(pkg), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
        raise RuntimeError(f"child {args[:2]} failed with status {p.returncode}")
    if p.stderr.strip():
        sys.stderr.write(p.stderr[-2000:])
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("@@RESULT ")]
    res = json.loads(lines[-1][len("@@RESULT "):])
    extra = [ln for ln in p.stdout.splitlines() if not ln.startswith("@@RESULT ")]
    if extra:
        res["_stdout"] = "\n".join(extra)
    return res


# ------------------------------------------------------------------------------------------------
# building (worker processes)


def _build_worker(args) -> dict:
    root, pkg, runs, c = args
    sys.path.insert(0, pkg)
    from snapstore import CheckpointManager
    saves = 0
    nbytes = 0
    t = time.perf_counter()
    for lo in range(0, len(runs), 50):
        mgr = CheckpointManager(root, fsync=False)
        for run in runs[lo:lo + 50]:
            g = Gen(run * 7919 + 17)
            msgs = g.prelude()
            for k in range(c):
                if k:
                    msgs = msgs + g.turn(k)
                mgr.save(f"run-{run:06d}", msgs, step=k, token_usage={"input_tokens": 900 + 37 * k, "output_tokens": 80 + k},
                         metrics={"latency_s": round(0.4 + 0.01 * k, 3)})
                saves += 1
            nbytes += sum(len(json.dumps(m)) for m in msgs)
        mgr.close()
    return {"saves": saves, "seconds": time.perf_counter() - t, "final_message_bytes": nbytes}


def build(root: str, pkg: Path, nruns: int, c: int, procs: int) -> dict:
    sys.path.insert(0, str(pkg))
    from snapstore import CheckpointManager
    if os.path.exists(root):
        shutil.rmtree(root)
    CheckpointManager(root, fsync=False).repo  # create the config once
    shares = [list(range(i, nruns, procs)) for i in range(procs)]
    t = time.perf_counter()
    ctx = mp.get_context("spawn")
    with ctx.Pool(procs) as pool:
        outs = pool.map(_build_worker, [(root, str(pkg), s, c) for s in shares if s])
    wall = time.perf_counter() - t
    saves = sum(o["saves"] for o in outs)
    files, nbytes = tree_summary(root)
    return {"runs": nruns, "checkpoints_per_run": c, "saves": saves, "seconds": round(wall, 2),
            "ms_per_save_per_process": round(1e3 * sum(o["seconds"] for o in outs) / max(1, saves), 3),
            "saves_per_second": round(saves / wall, 1), "processes": procs, "files": files, "bytes": nbytes,
            "disk_bytes": du_bytes(root)}


# ------------------------------------------------------------------------------------------------
# requests and sequential round trips


def key_kind(key: str) -> str:
    """What a key is, for requests by kind: ``log-segment``, ``manifest``, ``pack``, ``fwd``, ``gc``..."""
    parts = key.split("/")
    if parts[0] == "runs" and len(parts) == 4:
        return {"l": "log-segment", "m": "manifest", "c": "index"}.get(parts[2], "runs")
    return {"packs": "pack", "fwd": "fwd", "gc": "gc", "runs": "runs"}.get(parts[0], parts[0])


class RequestRecorder:
    """Wraps a store's methods to record every request's ``(kind, key kind, start, end)`` while
    started (``time.perf_counter`` seconds), optionally sleeping ``delay`` seconds inside each
    request (the GIL is released while sleeping, so requests a GC issues in parallel overlap as
    they would on S3, and the sequential round trips measured are the GC's structure, not the
    local disk's speed). A LIST counts one request per page of 1,000 keys, each page starting when
    the previous ended; ``delete_many`` one per batch of 1,000 keys."""

    def __init__(self, store, delay: float = 0.0):
        self.store, self.delay, self.on = store, delay, False
        self.log: list = []
        self.pack_gets: dict = {}  # pack key -> GETs of it (whole or ranged)
        lock = __import__("threading").Lock()
        self._lock = lock

        def timed(kind, fn, keyarg=True):
            def f(*a, **kw):
                if not self.on:
                    return fn(*a, **kw)
                t = time.perf_counter()
                try:
                    if self.delay:
                        time.sleep(self.delay)
                    return fn(*a, **kw)
                finally:
                    k = key_kind(a[0]) if keyarg and a and isinstance(a[0], str) else ""
                    with lock:
                        self.log.append((kind, k, t, time.perf_counter()))
                        if kind == "GET" and k == "pack":
                            self.pack_gets[a[0]] = self.pack_gets.get(a[0], 0) + 1
            return f
        for name, kind in (("get", "GET"), ("put", "PUT"), ("put_if_match", "PUT"), ("head", "HEAD")):
            setattr(store, name, timed(kind, getattr(store, name)))
        orig_list, orig_del = store.list, store.delete_many

        def listing(prefix, *a, **kw):
            it = orig_list(prefix, *a, **kw)
            while True:
                t = time.perf_counter()
                if self.on and self.delay:
                    time.sleep(self.delay)
                page = list(__import__("itertools").islice(it, 1000))
                if self.on:
                    with lock:
                        self.log.append(("LIST", key_kind(prefix) if prefix else "", t, time.perf_counter()))
                yield from page
                if len(page) < 1000:
                    return

        def deleting(ks):
            ks = list(ks)
            for i in range(0, max(1, len(ks)), 1000):
                timed("DELETE", orig_del, keyarg=False)(ks[i:i + 1000])
        store.list, store.delete_many = listing, deleting

    def start(self) -> None:
        self.on = True

    def stop(self) -> None:
        self.on = False

    def round_trips(self) -> int:
        return sequential_round_trips((s, e) for _, _, s, e in self.log)

    def repeated_pack_gets(self) -> dict:
        """``{"packs_fetched_twice": pack keys GET more than once, "repeated_pack_gets": GETs of a
        pack key after its first}`` (issue 8: no pack fetched twice)."""
        return {"packs_fetched_twice": sum(1 for n in self.pack_gets.values() if n > 1),
                "repeated_pack_gets": sum(n - 1 for n in self.pack_gets.values())}

    def by_kind(self) -> dict:
        out: dict = {}
        for kind, k, _, _ in self.log:
            name = f"{kind} {k}".strip()
            out[name] = out.get(name, 0) + 1
        return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------------
# child process: one prune or one GC


def child_main(argv: list[str]) -> None:
    mode, root = argv[0], argv[1]
    opts = json.loads(argv[2]) if len(argv) > 2 else {}
    import snapstore
    import snapstore.maintenance.gc as sgc
    from snapstore import CheckpointManager
    out: dict = {"snapstore_file": snapstore.__file__}
    if mode == "prune":
        mgr = CheckpointManager(root, fsync=False)
        t = time.perf_counter()
        gone = mgr.prune(keep_last=opts["keep_last"])
        out.update(seconds=time.perf_counter() - t, deleted=len(gone), requests=mgr.store.stats.as_dict())
        print("@@RESULT " + json.dumps(out))
        return

    # ---- GC
    mgr = CheckpointManager(root)  # fsync ON (default)
    mgr.repo  # open the repository before timing
    store = mgr.store
    gc_opts = opts.get("gc_options", {})
    marks: dict[str, float] = {}
    reqs: dict[str, dict] = {}
    counters = {"listed": 0, "get_missing": 0}

    recorder = RequestRecorder(store, opts.get("latency_ms", 0.0) / 1e3)
    orig_list, orig_get = store.list, store.get

    def counting_list(prefix, *a, **kw):
        for info in orig_list(prefix, *a, **kw):
            counters["listed"] += 1
            yield info

    def counting_get(key, *a, **kw):
        try:
            return orig_get(key, *a, **kw)
        except snapstore.errors.ObjectNotFound:
            counters["get_missing"] += 1
            raise
    store.list = counting_list
    store.get = counting_get

    t0 = [0.0]

    def stamp(name):
        marks[name] = time.perf_counter() - t0[0]
        reqs[name] = dict(store.stats.counts)

    def hook(name):
        def f(**info):
            stamp(name)
            if name == "after_list":
                out["packs_listed"] = len(info.get("packs", ()))
            elif name == "before_sweep":
                out["delete_packs"] = len(info.get("delete_packs", ()))
        return f
    hooks = {n: hook(n) for n in ("after_list", "after_mark", "after_repack", "before_sweep", "after_sweep")}
    read_name = "read_runs_slim" if hasattr(sgc, "read_runs_slim") else "read_all_runs"  # (older code)
    marker = getattr(sgc, "GCMarker", None)  # (older code: a mark() function)
    orig_read, orig_mark = getattr(sgc, read_name), (marker.run if marker is not None else sgc.mark)

    def timed_read(*a, **kw):
        r = orig_read(*a, **kw)
        stamp("after_read_manifests")
        return r

    def timed_mark(*a, **kw):
        stamp("before_mark")
        reach = orig_mark(*a, **kw)
        out["live_messages"] = len(reach.refs) or None  # GC keeps no refs since it marks run by run
        out["live_nodes"] = len(reach.nodes_seen)
        return reach
    setattr(sgc, read_name, timed_read)
    if marker is not None:
        marker.run = timed_mark  # called as a method: the marker is the first argument
    else:
        sgc.mark = timed_mark

    trace = mode in ("trace", "tracetop")
    if mode == "tracetop":
        import tracemalloc

        def top(name):
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            stats = snap.statistics("lineno")
            out.setdefault("top", {})[name] = {
                "traced": sum(st.size for st in stats),
                "lines": [(f"{st.traceback[0].filename.rsplit('/snapstore/', 1)[-1]}:{st.traceback[0].lineno}",
                           st.size, st.count) for st in stats[:20]]}
        for name in ("after_mark", "after_repack"):
            prev = hooks[name]
            hooks[name] = (lambda prev, name: lambda **info: (prev(**info), top(name)))(prev, name)
    prof = None
    if trace:
        import tracemalloc
        tracemalloc.start()
        tracemalloc.reset_peak()
        base_traced = tracemalloc.get_traced_memory()[0]
    if mode == "profile":
        import cProfile
        prof = cProfile.Profile()
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    rss_before = ru0.ru_maxrss
    out["loadavg_before"] = os.getloadavg()[0]
    before = store.stats.snapshot()
    reqs["start"] = dict(before.counts)
    t0[0] = time.perf_counter()
    recorder.start()
    if prof:
        prof.enable()
    rep = mgr.gc(grace_period=0, hooks=hooks, **gc_opts)
    recorder.stop()
    if prof:
        prof.disable()
    total = time.perf_counter() - t0[0]
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    out["cpu_seconds"] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    out["loadavg_after"] = os.getloadavg()[0]
    marks["end"] = total
    reqs["end"] = dict(store.stats.counts)
    if trace:
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["tracemalloc_peak"] = peak - base_traced
    out["maxrss_before"] = rss_before * 1024  # Linux reports KiB
    out["maxrss_end"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out.update(seconds=total, marks=marks, phase_requests=reqs, report=rep.as_dict(),
               deleted_bytes=rep.deleted_bytes, written_bytes=rep.written_bytes,
               requests=store.stats.since(before).as_dict(), keys_listed=counters["listed"],
               get_missing=counters["get_missing"], python_version=sys.version.split()[0],
               round_trips=recorder.round_trips(), requests_by_kind=recorder.by_kind(),
               **recorder.repeated_pack_gets(),
               latency_ms=opts.get("latency_ms", 0.0))
    if "top" in out:
        for name, t in out["top"].items():
            print(f"tracemalloc at {name}: {t['traced'] / 1e6:.1f} MB traced; top lines (size MB, count):")
            for ln, size, count in t["lines"]:
                print(f"   {size / 1e6:8.2f} {count:>9}  {ln}")
    if prof:
        import io
        import pstats
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("cumulative").print_stats(25)
        st.sort_stats("tottime").print_stats(15)
        print(s.getvalue())
    print("@@RESULT " + json.dumps(out))


# ------------------------------------------------------------------------------------------------
# orchestration

# each phase is the interval that ends at this event (events sorted by time, so the split works
# whichever order the GC lists and reads in: older GCs list everything and then read manifests,
# newer ones list and read the run log first and list the data afterwards)
PHASE_OF_EVENT = {"after_list": "list", "after_read_manifests": "manifests", "before_mark": "fwd",
                  "after_mark": "mark", "after_repack": "repack", "before_sweep": "decide",
                  "after_sweep": "sweep", "end": "finish"}


def phase_split(res: dict) -> dict:
    """Phase name -> {"seconds", "requests"} from the child's event timestamps and request counts."""
    events = sorted((t, name) for name, t in res["marks"].items() if name in PHASE_OF_EVENT)
    out = {}
    prev_t, prev = 0.0, "start"
    for t, name in events:
        a, b = res["phase_requests"][prev], res["phase_requests"][name]
        out[PHASE_OF_EVENT[name]] = {"seconds": round(t - prev_t, 3), "requests": {k: b[k] - a[k] for k in b}}
        prev_t, prev = t, name
    return out


def summarise(res: dict) -> dict:
    rep = res["report"]
    ph = phase_split(res)
    live = rep["live_checkpoints"]
    deleted = sum(rep["deleted"].values())
    mark_s = sum(ph.get(n, {}).get("seconds", 0) for n in ("manifests", "fwd", "mark"))
    sweep_s = ph.get("sweep", {}).get("seconds", 0)
    return {"seconds": round(res["seconds"], 3), "cpu_seconds": round(res["cpu_seconds"], 2),
            "events": {k: round(v, 3) for k, v in res["marks"].items()},
            "loadavg": [res["loadavg_before"], res["loadavg_after"]], "phases": ph, "live_checkpoints": live,
            "live_packs": rep["live_packs"], "keys_listed": res["keys_listed"], "deleted": rep["deleted"],
            "deleted_objects": deleted, "deleted_bytes": res["deleted_bytes"], "written_bytes": res["written_bytes"],
            "reclaimed_bytes": rep["reclaimed_bytes"], "repacked_packs": rep["repacked_packs"],
            "new_packs": rep["new_packs"], "repack_bytes_in": rep.get("repack_bytes_in"),
            "repack_bytes_out": rep.get("repack_bytes_out"), "requests": res["requests"], "get_missing": res["get_missing"],
            "live_messages": res.get("live_messages"), "live_nodes": res.get("live_nodes"),
            "snapstore_file": res.get("snapstore_file"), "maxrss_before": res["maxrss_before"], "maxrss_end": res["maxrss_end"],
            "tracemalloc_peak": res.get("tracemalloc_peak"), "round_trips": res.get("round_trips"),
            "requests_by_kind": res.get("requests_by_kind"), "latency_ms": res.get("latency_ms", 0.0),
            "packs_fetched_twice": res.get("packs_fetched_twice"), "repeated_pack_gets": res.get("repeated_pack_gets"),
            "refetched_packs": rep.get("refetched_packs"),
            "top": res.get("top"),
            "mark_us_per_live_checkpoint": round(1e6 * mark_s / live, 1) if live else None,
            "mark_us_per_live_message": round(1e6 * mark_s / res["live_messages"], 1) if res.get("live_messages") else None,
            "repack_us_per_packed_pack": (round(1e6 * ph["repack"]["seconds"] / rep["repacked_packs"], 1)
                                          if rep["repacked_packs"] and "repack" in ph else None),
            "sweep_us_per_deleted_object": round(1e6 * sweep_s / deleted, 1) if deleted else None}


def mb(x) -> str:
    return "-" if x is None else f"{x / 1e6:.1f}"


def req_str(r: dict) -> str:
    c = r["requests"] if "requests" in r else r
    return "/".join(str(c[k]) for k in ("PUT", "GET", "HEAD", "LIST", "DELETE"))


def print_tables(results: list[dict]) -> None:
    print()
    print("GC cost (local store, fsync ON for GC; times in seconds; MB = 10^6 bytes). us/live cp and us/live msg:"
          " (manifests + fwd + mark) per live checkpoint / live message; fwd: reading forwarding records;\nus/repacked: repack per repacked pack; us/del obj:"
          " sweep per deleted object; rss: ru_maxrss of the GC child before -> after the GC; trace: tracemalloc peak"
          " during the GC (separate run);\ncpu: user+sys seconds of the GC child during the GC; load: 1-minute load average"
          " (max of before/after; the machine is shared, wall times are noisy when it is above ~1)")
    hdr = (f"{'code':>8} {'setting':>10} {'pruned':>6} {'kind':>9} {'live cp':>7} {'listed':>7} {'total':>7} {'cpu':>7} {'load':>4} {'list':>6} "
           f"{'manif':>6} {'fwd':>5} {'mark':>6} {'repack':>7} {'decide':>6} {'sweep':>6} {'finish':>6} {'deleted':>7} "
           f"{'reclaim MB':>10} {'rss MB':>11} {'trace MB':>8} {'us/live cp':>10} {'us/live msg':>11} "
           f"{'us/repacked':>11} {'us/del obj':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for kind in ("gc", "gc#2", "norepack"):
            s = r.get(kind)
            if not s:
                continue
            ph = s["phases"]
            g = lambda n: f"{ph[n]['seconds']:.2f}" if n in ph else "-"  # noqa: E731
            trace = r.get({"gc": "gc+trace", "norepack": "norepack+trace"}.get(kind, ""), {}).get("tracemalloc_peak")
            rss = f"{s['maxrss_before'] / 1e6:.0f}->{s['maxrss_end'] / 1e6:.0f}"
            print(f"{r.get('code', 'head')[:8]:>8} {r['setting']:>10} {r['pruned']:>5}% {kind:>9} {s['live_checkpoints']:>7} {s['keys_listed']:>7} "
                  f"{s['seconds']:>7.2f} {s['cpu_seconds']:>7.2f} {max(s['loadavg']):>4.1f} {g('list'):>6} {g('manifests'):>6} {g('fwd'):>5} {g('mark'):>6} {g('repack'):>7} "
                  f"{g('decide'):>6} {g('sweep'):>6} {g('finish'):>6} {s['deleted_objects']:>7} "
                  f"{mb(s['reclaimed_bytes']):>10} {rss:>11} {mb(trace):>8} "
                  f"{str(s['mark_us_per_live_checkpoint'] or '-'):>10} {str(s['mark_us_per_live_message'] or '-'):>11} "
                  f"{str(s['repack_us_per_packed_pack'] or '-'):>11} {str(s['sweep_us_per_deleted_object'] or '-'):>10}")
    print()
    print("Store requests of each GC, PUT/GET/HEAD/LIST/DELETE (LIST and DELETE count pages/batches of 1,000 keys);"
          " GET-miss = GETs of missing keys; packs x2 = pack keys GET more than once")
    hdr = f"{'code':>8} {'setting':>10} {'pruned':>6} {'kind':>9} {'total':>26} {'GET-miss':>8} {'packs x2':>8}  per phase"
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        for kind in ("gc", "gc+rt", "gc#2", "norepack"):
            s = r.get(kind)
            if not s:
                continue
            per = " ".join(f"{n}={req_str(p['requests'])}" for n, p in s["phases"].items()
                           if sum(p["requests"].values()))
            twice = "-" if s.get("packs_fetched_twice") is None else s["packs_fetched_twice"]
            print(f"{r.get('code', 'head')[:8]:>8} {r['setting']:>10} {r['pruned']:>5}% {kind:>9} {req_str(s['requests']):>26} "
                  f"{s['get_missing']:>8} {twice:>8}  {per}")
    print()
    print("Repository before GC and what GC did (MB in->out: the repacked packs' bytes and the new packs'; objects/MB"
          " after gc: the directory after the first GC)")
    hdr = (f"{'code':>8} {'setting':>10} {'pruned':>6} {'objects':>8} {'MB':>8} {'prune s':>8} {'live packs':>10} "
           f"{'repacked':>8} {'MB in->out':>11} {'new packs':>9} {'deleted by category':>40} {'objects after gc':>16} "
           f"{'MB after gc':>11}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        s = r.get("gc") or r.get("norepack")
        if not s:
            continue
        print(f"{r.get('code', 'head')[:8]:>8} {r['setting']:>10} {r['pruned']:>5}% {r['before']['files']:>8} {mb(r['before']['bytes']):>8} "
              f"{(r['prune'] or {}).get('seconds', 0):>8.1f} {s['live_packs']:>10} {s['repacked_packs']:>8} "
              f"{mb(s.get('repack_bytes_in')) + '->' + mb(s.get('repack_bytes_out')):>11} {s['new_packs']:>9} {json.dumps(s['deleted']):>40} {r.get('after_gc', {}).get('files', '-'):>16} "
              f"{mb(r.get('after_gc', {}).get('bytes')):>11}")


def projection(r: dict, to: int, ms: float) -> dict | None:
    """The GC of ``to`` live checkpoints projected from the measured one: sequential round trips
    (of the ``gc+rt`` run, whose parallel requests overlapped thanks to the added delay) x ``ms`` per
    request, plus the CPU seconds of the plain ``gc`` run, both scaled linearly by live checkpoints."""
    g, rt = r.get("gc"), r.get("gc+rt")
    if not g or not rt or not g["live_checkpoints"]:
        return None
    k = to / g["live_checkpoints"]
    wait = rt["round_trips"] * k * ms / 1e3
    cpu = g["cpu_seconds"] * k
    return {"to": to, "ms_per_request": ms, "scale": k, "round_trips": rt["round_trips"],
            "requests": sum(rt["requests_by_kind"].values()), "cpu_seconds": g["cpu_seconds"],
            "projected_round_trips": round(rt["round_trips"] * k), "projected_wait_s": round(wait, 1),
            "projected_cpu_s": round(cpu, 1), "projected_s": round(wait + cpu, 1),
            "peak_rss_per_live_checkpoint": round(g["maxrss_end"] / g["live_checkpoints"]),
            "rss_growth_per_live_checkpoint": round((g["maxrss_end"] - g["maxrss_before"]) / g["live_checkpoints"])}


def print_projection(results: list[dict], to: int, ms: float) -> None:
    rows = [(r, projection(r, to, ms)) for r in results]
    rows = [(r, p) for r, p in rows if p]
    if not rows:
        return
    print()
    print(f"Projection to {to:,} live checkpoints at {ms:g} ms per request: sequential round trips (gc+rt run) x "
          f"{ms:g} ms + CPU seconds (gc run), both scaled linearly; memory: peak RSS of the gc run per live "
          "checkpoint (whole process, and growth during the GC).\nScaling by live checkpoints fits a repository "
          "without pruning; a pruned one's requests follow its runs and stored objects (and its memory includes a "
          "fixed pack cache and repack buffers), so its row overstates both")
    hdr = (f"{'code':>8} {'setting':>10} {'pruned':>6} {'live cp':>8} {'requests':>8} {'seq RT':>7} {'cpu s':>7} "
           f"{'proj RT':>8} {'wait s':>8} {'cpu s':>8} {'total s':>8} {'<= 1 h':>6} {'B/live cp':>9} {'growth B':>8}")
    print(hdr)
    print("-" * len(hdr))
    for r, p in rows:
        print(f"{r.get('code', 'head')[:8]:>8} {r['setting']:>10} {r['pruned']:>5}% {r['gc']['live_checkpoints']:>8} "
              f"{p['requests']:>8} {p['round_trips']:>7} {p['cpu_seconds']:>7.1f} {p['projected_round_trips']:>8} "
              f"{p['projected_wait_s']:>8.0f} {p['projected_cpu_s']:>8.0f} {p['projected_s']:>8.0f} "
              f"{'yes' if p['projected_s'] <= 3600 else 'NO':>6} {p['peak_rss_per_live_checkpoint']:>9} "
              f"{p['rss_growth_per_live_checkpoint']:>8}")


def measure_variant(r: dict, pkg: Path, work: Path, setting: str, pct: int, var: str, kinds: list,
                    wanted: list, timeout: float) -> None:
    """Run each GC kind on its own hard-link copy of the variant ``var`` with package ``pkg``;
    store the summaries in ``r``."""
    for kind, mode, gopts, extra in kinds:
        d = str(work / f"gc-{setting}-{pct}-{kind.replace('+', '-').replace('#', '')}")
        link_copy(var, d)
        res = run_child(pkg, [mode, d, json.dumps({"gc_options": gopts, **extra})], timeout)
        if kind == "profile":
            r["profile"] = res.get("_stdout", "")
            print(f"   cProfile of the GC ({setting}, {pct}% pruned):\n{r['profile']}")
            shutil.rmtree(d)
            continue
        s = summarise(res)
        r[kind] = s
        if kind == "gc+top":
            print(res.get("_stdout", ""))
        print(f"   {kind:>9}: {s['seconds']:.2f}s, deleted {s['deleted_objects']}, reclaimed "
              f"{s['reclaimed_bytes'] / 1e6:.1f} MB, requests {req_str(s['requests'])}"
              + (f", tracemalloc peak {s['tracemalloc_peak'] / 1e6:.1f} MB" if s.get("tracemalloc_peak") else "")
              + f", maxrss {s['maxrss_end'] / 1e6:.0f} MB, cpu {s['cpu_seconds']:.1f}s, "
              f"{s['round_trips']} sequential round trips"
              + (f" ({s['latency_ms']:g} ms added per request)" if s["latency_ms"] else "")
              + f"\n{'':>14}requests by kind: {json.dumps(s['requests_by_kind'])}"
              + f"\n{'':>14}pack keys fetched more than once: {s['packs_fetched_twice']} "
              f"({s['repeated_pack_gets']} repeated GETs; GCReport.refetched_packs "
              f"{'-' if s['refetched_packs'] is None else s['refetched_packs']})", flush=True)
        if kind == "gc":
            files2, nbytes2 = tree_summary(d)
            r["after_gc"] = {"files": files2, "bytes": nbytes2}
            if "second" in wanted:
                res2 = run_child(pkg, ["clean", d, "{}"], timeout)
                r["gc#2"] = summarise(res2)
                s2 = r["gc#2"]
                print(f"   {'gc#2':>9}: {s2['seconds']:.2f}s, deleted {s2['deleted_objects']}, requests "
                      f"{req_str(s2['requests'])} ({s2['get_missing']} GETs of missing keys)", flush=True)
        shutil.rmtree(d)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the run counts (default 1.0)")
    ap.add_argument("--json", help="write all results to this file")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "snapstore-gc-bench"),
                    help="working directory (repositories, copies, package snapshot)")
    ap.add_argument("--reuse", action="store_true", help="reuse base repositories built earlier with the same parameters")
    ap.add_argument("--settings", default=",".join(f"{r}x{c}" for r, c in SETTINGS),
                    help="RUNSxCHECKPOINTS list (before --scale), default 1000x100,10000x10")
    ap.add_argument("--prunes", default=",".join(map(str, PRUNES)), help="percentages pruned, default 0,90")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 2, help="build processes")
    ap.add_argument("--kinds", default="gc,trace,second,norepack",
                    help="GC runs per variant, from gc (default GC), trace (gc with tracemalloc), second (a GC "
                         "after gc), norepack (repacking off), norepack-trace, profile (cProfile of gc); "
                         "default gc,trace,second,norepack")
    ap.add_argument("--profile", action="store_true", help="same as adding 'profile' to --kinds")
    ap.add_argument("--latency-ms", type=float, default=5.0,
                    help="delay added inside every store request of the 'rt' kind, so that parallel requests "
                         "overlap and its sequential round trips show the GC's structure (default 5)")
    ap.add_argument("--project-ms", type=float, default=20.0,
                    help="latency per request for the projection to --project-to checkpoints (default 20)")
    ap.add_argument("--project-to", type=int, default=1_000_000,
                    help="live checkpoints of the projection (default 1,000,000)")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds allowed per child process")
    ap.add_argument("--code", default="head",
                    help="measure the snapstore package as committed at HEAD (default), at a git revision, "
                         "or 'worktree' for the working tree; several, comma-separated (e.g. 'a0e6335,head'), "
                         "measures each on the same copies of each variant, one after the other (the first "
                         "builds the repositories)")
    args = ap.parse_args()

    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    codes = [c.strip() for c in args.code.split(",") if c.strip()]
    pkgs = [snapshot_package(work / f"pkg{i}", c) for i, c in enumerate(codes)]
    pkg, code_desc = pkgs[0]
    sys.path.insert(0, str(pkg))
    meta = {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count(),
            "code": [d for _, d in pkgs], "scale": args.scale, "argv": sys.argv[1:], "loadavg_start": os.getloadavg()}
    for c, (_, d) in zip(codes, pkgs):
        print(f"snapstore {c}: {d}")
    print(f"python {meta['python']}; {meta['cpus']} CPUs; {meta['platform']}; load average {os.getloadavg()[0]:.2f}")
    settings = [tuple(int(x) for x in s.split("x")) for s in args.settings.split(",")]
    wanted = [k.strip() for k in args.kinds.split(",") if k.strip()] + (["profile"] if args.profile else [])
    bad = [k for k in wanted if k not in ("gc", "trace", "tracetop", "rt", "second", "norepack", "norepack-trace",
                                          "profile")]
    if bad:
        ap.error(f"unknown --kinds {bad}")
    prunes = [int(p) for p in args.prunes.split(",")]
    results, builds = [], []
    t_all = time.perf_counter()
    for nruns0, c in settings:
        nruns = max(1, round(nruns0 * args.scale))
        base = str(work / f"base-{nruns}x{c}")
        marker = os.path.join(base, ".bench-built.json")
        if args.reuse and os.path.exists(marker):
            b = json.load(open(marker))
            b["reused"] = True
            print(f"\n== {nruns} runs x {c} checkpoints: reusing {base} (built in {b['seconds']:.1f}s earlier)")
        else:
            print(f"\n== {nruns} runs x {c} checkpoints: building {base} (fsync OFF, {args.procs} processes) ...", flush=True)
            b = build(base, pkg, nruns, c, args.procs)
            with open(marker, "w") as f:
                json.dump(b, f)
        builds.append(b)
        print(f"   built {b['saves']} checkpoints in {b['seconds']:.1f}s ({b['saves_per_second']:.0f} saves/s, "
              f"{b['ms_per_save_per_process']:.2f} ms per save per process); {b['files']} objects, "
              f"{b['bytes'] / 1e6:.1f} MB ({b['disk_bytes'] / 1e6:.0f} MB on disk)", flush=True)
        base_sum = tree_summary(base)
        for pct in prunes:
            setting = f"{nruns}x{c}"
            r = {"setting": setting, "runs": nruns, "checkpoints_per_run": c, "pruned": pct, "prune": None}
            keep = max(1, round(c * (100 - pct) / 100))
            var = str(work / f"var-{setting}-{pct}")
            link_copy(base, var)
            if pct:
                r["prune"] = run_child(pkg, ["prune", var, json.dumps({"keep_last": keep})], args.timeout)
                r["prune"]["keep_last"] = keep
                print(f"   pruned {pct}% (keep_last={keep}): {r['prune']['deleted']} checkpoints deleted in "
                      f"{r['prune']['seconds']:.1f}s", flush=True)
            files, nbytes = tree_summary(var)
            r["before"] = {"files": files, "bytes": nbytes}
            norep = {"max_unused": 1.0, "small_pack_bytes": 0}
            table = {"gc": ("gc", "clean", {}, {}), "trace": ("gc+trace", "trace", {}, {}),
                     "tracetop": ("gc+top", "tracetop", {}, {}),
                     "rt": ("gc+rt", "clean", {}, {"latency_ms": args.latency_ms}),
                     "norepack": ("norepack", "clean", norep, {}),
                     "norepack-trace": ("norepack+trace", "trace", norep, {}),
                     "profile": ("profile", "profile", {}, {})}
            kinds = [table[k] for k in wanted if k in table]
            for code, (cpkg, _) in zip(codes, pkgs):
                rc = dict(r, code=code)
                if len(codes) > 1:
                    print(f"   -- {code}", flush=True)
                measure_variant(rc, cpkg, work, setting, pct, var, kinds, wanted, args.timeout)
                results.append(rc)
            shutil.rmtree(var)
            if tree_summary(base) != base_sum:
                raise SystemExit(f"base repository {base} changed during the variant: hard-link copies are not safe")
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"meta": meta, "builds": builds, "results": results}, f, indent=1)
    print_tables(results)
    print_projection(results, args.project_to, args.project_ms)
    for r in results:
        p = projection(r, args.project_to, args.project_ms)
        if p:
            r["projection"] = p
    print(f"\ntotal benchmark time {time.perf_counter() - t_all:.0f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "builds": builds, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        sys.exit(0)
    sys.exit(main())
