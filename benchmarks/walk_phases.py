"""Per-phase medians of a fresh ``latest()``: pack headers, segment index, tree walk, ListState.

Run (from the repository root)::

    python benchmarks/walk_phases.py                 # 21 fresh children, medians per phase
    python benchmarks/walk_phases.py --trials 41 --json out.json

Setup: the same repository as ``benchmarks/local_read.py`` (the largest shared coding run saved
one checkpoint per turn into a temporary local repository). The children read it through the
tree (``ArrayReader.read`` off): the path a read takes when the segments' array blocks are not
the checkpoint's list (a rewritten or rolled-back run, data
of an earlier version; docs/format.md §11). ``local_read.py`` measures the read a run that only
appended gets.

Measured: per trial, one fresh child process (``--child``, imports done before the clock) runs
``CheckpointManager(repo).latest(run)`` with each phase's function wrapped by a wall-clock and
page-fault counter (phases nest: a wrapped function called inside another counts in both). The
phases are those of the restore before and after the messages are sliced: ``Pack.parse`` and
``_parse_header`` (the four segment packs' headers), ``SegmentIndex.add`` (the segment index),
``TreeReader.read_state`` and ``TreeReader.expand`` (the tree walk), and what ``load_with_state`` does
besides fetching, walking and reading the list (``load_with_state rest``: building the
ListState). ``local_read.py --profile`` profiles a single child; this one reports medians over
``--trials`` children, which is what to compare before and after a change of a few hundred
microseconds on a shared machine.

``--fixed-malloc`` runs the children with glibc's malloc thresholds fixed
(``MALLOC_MMAP_THRESHOLD_`` 32 MiB, ``MALLOC_TRIM_THRESHOLD_`` 256 MiB) instead of adjusting
themselves: by default glibc raises its mmap threshold when an mmapped block is freed, so whether
a later large buffer (a decompressed block, orjson's output) comes from already touched heap or
from fresh pages depends on the allocations before it, and an unrelated change (one more class
attribute in the read path) moves a fresh ``latest()`` by about 120 page faults (0.3 ms) either
way. With the thresholds fixed the counts repeat to within a fault or two, which is what an A/B
of a change needs; the default is what a user's process does.

``--pyc`` makes the children import snapstore from bytecode, as an installed package does (pip
compiles it), instead of compiling it from source at import, as a checkout does where
``PYTHONDONTWRITEBYTECODE`` is set or no ``__pycache__`` can be written: the checkout is compiled
first into a private cache (``PYTHONPYCACHEPREFIX`` in a temporary directory; nothing is written
into the checkout). Compiling from source leaves the interpreter's heap with more touched, freed
memory that the read then reuses, so the same ``latest()`` costs fewer fresh pages than it would
in a user's process.

``--floors`` adds, in as many more fresh children, what the two decoders cost against the
allocations they cannot avoid: the four segment packs' headers parsed by ``_parse_header`` and by
the same loop storing a plain integer instead of each ``Entry`` (the packs read before the
clock); the run's tree nodes decoded by ``decode_node`` and a loop that only slices each item's id
and builds its ``Ref`` (the node bytes taken from the packs before the clock).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import local_read  # noqa: E402  (the repository and the child runner)

PHASES = [
    ("snapstore.repo.locate", "Locator.prefetch_segments"),
    ("snapstore.format.pack", "Pack.parse"),
    ("snapstore.format.pack", "_parse_header"),
    ("snapstore.repo.locate", "SegmentIndex.add"),
    ("snapstore.repo.trees", "TreeReader.read_state"),
    ("snapstore.repo.trees", "TreeReader.expand"),
    ("snapstore.repo.trees", "TreeReader.read_list"),
    ("snapstore.repo.trees", "TreeReader.load_with_state"),
]


def child(spec: dict) -> dict:
    """One fresh-process ``latest()`` with the phases wrapped; seconds and faults per phase."""
    import importlib

    sys.path.insert(0, str(local_read.REPO_ROOT))
    from snapstore import CheckpointManager
    from snapstore.repo.arrays import ArrayReader
    from snapstore.repo.locate import Locator
    from snapstore.repo.locate import SegmentIndex
    from snapstore.repo.trees import TreeReader

    ArrayReader.read = lambda self, m, segs: None  # the tree path (module docstring)
    acc: dict = {}
    for modname, qual in PHASES:
        mod = importlib.import_module(modname)
        owner, name = (mod, qual) if "." not in qual else (getattr(mod, qual.split(".")[0]), qual.split(".")[1])
        fn = getattr(owner, name)

        def timed(*a, _fn=fn, _q=qual, **k):
            f0, t0 = local_read._faults(), time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                rec = acc.setdefault(_q, [0.0, 0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
                rec[2] += local_read._faults() - f0
        setattr(owner, name, timed)  # _parse_header: pack.py looks its module attribute up per call
    f0, t0 = local_read._faults(), time.perf_counter()
    cp = CheckpointManager(spec["repo"]).latest(spec["run"])
    total, faults = time.perf_counter() - t0, local_read._faults() - f0
    out = {"count": len(cp.messages), "wall_s": total, "faults": faults}
    for _, qual in PHASES:
        w, n, fl = acc.get(qual, [0.0, 0, 0])
        out[qual] = {"wall_s": w, "calls": n, "faults": fl}
    lw = out["TreeReader.load_with_state"]["wall_s"]
    rest = lw - sum(out[q]["wall_s"] for q in ("Locator.prefetch_segments", "TreeReader.read_state",
                                                "TreeReader.expand", "TreeReader.read_list"))
    out["load_with_state rest"] = {"wall_s": rest, "calls": 1, "faults": 0}
    return out


def floors_child(spec: dict) -> dict:
    """Fresh-process costs of the header and node decoders and of their allocations alone."""
    sys.path.insert(0, str(local_read.REPO_ROOT))
    from snapstore import CheckpointManager
    from snapstore.manager import views
    from snapstore.format import pack as P
    from snapstore.format.codec import get_varint
    from snapstore.format.tree import Ref, decode_node
    from snapstore.repo.arrays import ArrayReader
    from snapstore.repo.locate import Locator
    from snapstore.repo.locate import SegmentIndex
    from snapstore.repo.trees import TreeReader

    ArrayReader.read = lambda self, m, segs: None  # the tree path (module docstring)
    datas = [p.read_bytes() for p in sorted(Path(spec["repo"], "packs").rglob("*")) if p.is_file()]
    bounds = []
    for d in datas:
        hlen = int.from_bytes(d[-20:-16], "little")
        bounds.append((len(d) - 20 - hlen, len(d) - 20))

    def ints_only(data, hstart, hend):
        # the entry table as _parse_header walks it, a plain integer stored per entry
        pos = hstart
        nb, pos = get_varint(data, pos)
        for _ in range(nb):
            kind = data[pos]
            pos += 1 + (24 if kind == 2 else 0)
            _, pos = get_varint(data, pos)
            _, pos = get_varint(data, pos)
            if kind in (4, 5):  # an array block: its item count
                _, pos = get_varint(data, pos)
            if kind in (1, 2):
                pos += 16
                for _ in range(3):
                    _, pos = get_varint(data, pos)
        n, pos = get_varint(data, pos)
        entries, fill = {}, [0] * nb
        for _ in range(n):  # as _parse_header's loop (one-byte blocks, 1-2 byte lengths inline)
            end = pos + 17
            bi = data[end]
            if bi < 0x80:
                ln = data[end + 1]
                p = end + 2
            else:
                bi, p = get_varint(data, end)
                ln = data[p]
                p += 1
            if ln >= 0x80:
                x = data[p]
                if x < 0x80:
                    ln = (ln & 0x7F) | (x << 7)
                    p += 1
                else:
                    ln, p = get_varint(data, p - 1)
            f = fill[bi]
            fill[bi] = f + ln
            t = data[pos]
            eid = data[pos + 1:end]
            entries[(t, eid)] = f
            pos = p
        return entries

    clock = time.perf_counter
    t0 = clock()
    for d, (a, b) in zip(datas, bounds):
        P._parse_header("k", d, a, b, a)
    t1 = clock()
    for d, (a, b) in zip(datas, bounds):
        ints_only(d, a, b)
    t2 = clock()
    # the run's nodes, as bytes (read with a throwaway manager, before the clock)
    mgr = CheckpointManager(spec["repo"])
    m = views.load_view(mgr, spec["run"]).head
    ls = mgr.repo.load_with_state(m)[1]
    raws = [mgr.repo.read_entry(P.T_NODE, nid, pk) for nid, pk in ls.nodes.items()]
    nitems = sum(len(decode_node(r)[1]) for r in raws)
    mgr.repo.trees.forget_nodes()
    ids = b"".join(r[-20 * 8:] for r in raws) * 4
    pk = bytes(8)
    new = tuple.__new__
    t3 = clock()
    for r in raws:
        decode_node(r)
    t4 = clock()
    out = [None] * nitems
    for i in range(nitems):
        out[i] = new(Ref, (ids[i * 16:i * 16 + 16], 1000, 1, 0, pk))
    t5 = clock()
    nent = sum(len(P._parse_header("k", d, a, b, a)[1]) for d, (a, b) in zip(datas, bounds))
    return {"entries": nent, "header_s": t1 - t0, "header_ints_s": t2 - t1,
            "nodes": len(raws), "items": nitems, "nodes_s": t4 - t3, "refs_only_s": t5 - t4}


FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


def run_child(spec: dict, fixed_malloc: bool = False, pycache: str | None = None) -> dict:
    import subprocess

    env = local_read._child_env(pycache)
    if fixed_malloc:
        env.update(FIXED_MALLOC)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          cwd=str(local_read.REPO_ROOT), env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(trials: int, floors: bool = False, fixed_malloc: bool = False, repo: str | None = None,
            pyc: bool = False) -> dict | None:
    """Build the repository, run ``trials`` fresh children; medians per phase (or None without
    the shared trajectories). With ``floors``, also the medians of :func:`floors_child`; with
    ``fixed_malloc``, the children run with :data:`FIXED_MALLOC`. ``repo``: a directory to
    build the repository in and keep (or to reuse, if built there before: pack ids are random,
    so an A/B of two checkouts should read the same one). ``pyc``: the children import snapstore
    from bytecode compiled first (:func:`local_read.compile_checkout`)."""
    fl = []
    with tempfile.TemporaryDirectory(prefix="walk-phases-") as tmp:
        pycache = None
        if pyc:
            pycache = str(Path(tmp, "pycache"))
            local_read.compile_checkout(pycache)
        if repo is not None and Path(repo, "info.json").exists():
            info = json.loads(Path(repo, "info.json").read_text())
        else:
            if repo is not None:
                Path(repo).mkdir(parents=True, exist_ok=True)
            info = local_read.build(repo or tmp)
            if info is None:
                return None
            if repo is not None:
                Path(repo, "info.json").write_text(json.dumps(info))
        spec = {"repo": info["repo"], "run": local_read.RUN}
        rows = []
        for _ in range(trials):
            rows.append(run_child(spec, fixed_malloc, pycache))
            if floors:
                fl.append(run_child(dict(spec, floors=True), fixed_malloc, pycache))
    for r in rows:
        if r["count"] != info["messages"]:
            raise AssertionError("latest() returned the wrong number of messages")
    names = [q for _, q in PHASES] + ["load_with_state rest"]
    res = {"trials": trials, "fixed_malloc": fixed_malloc, "pyc": pyc, "messages": info["messages"], "packs": info["packs"],
           "total_s": statistics.median(r["wall_s"] for r in rows),
           "faults": statistics.median(r["faults"] for r in rows), "phases": {}}
    for q in names:
        res["phases"][q] = {"wall_s": statistics.median(r[q]["wall_s"] for r in rows),
                            "calls": rows[0][q]["calls"],
                            "faults": statistics.median(r[q]["faults"] for r in rows)}
    if fl:
        res["floors"] = {k: (statistics.median(r[k] for r in fl) if k.endswith("_s") else fl[0][k]) for k in fl[0]}
    return res


def report(r: dict) -> str:
    lines = [f"fresh latest(), {r['messages']} messages, {r['packs']} packs; medians of {r['trials']} children"
             f"{' (malloc thresholds fixed)' if r.get('fixed_malloc') else ''}"
             f"{' (snapstore from bytecode)' if r.get('pyc') else ''} (phases nest): total {r['total_s'] * 1e3:.2f} ms, {r['faults']:.0f} page faults"]
    for q, p in r["phases"].items():
        lines.append(f"  {p['wall_s'] * 1e3:7.3f} ms {p['faults']:6.0f} flt {p['calls']:4d}x  {q}")
    f = r.get("floors")
    if f:
        ms = 1e3
        lines.append(f"  floors (fresh children, medians): {f['entries']} header entries: _parse_header "
                     f"{f['header_s'] * ms:.3f} ms, the same loop storing ints instead of Entry objects "
                     f"{f['header_ints_s'] * ms:.3f} ms; {f['nodes']} nodes, {f['items']} items: decode_node "
                     f"{f['nodes_s'] * ms:.3f} ms, slicing ids and building Refs alone {f['refs_only_s'] * ms:.3f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=21, help="fresh children (default 21)")
    ap.add_argument("--fixed-malloc", action="store_true", help="children with glibc's malloc thresholds fixed")
    ap.add_argument("--pyc", action="store_true", help="children import snapstore from bytecode (as installed)")
    ap.add_argument("--floors", action="store_true", help="also the decoders against their allocations alone")
    ap.add_argument("--repo", help="build the repository here and keep it, or reuse the one built here before")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(floors_child(spec) if spec.get("floors") else child(spec)))
        return 0
    return local_read.emit(measure(args.trials, args.floors, args.fixed_malloc, args.repo, args.pyc), report, args.json)


if __name__ == "__main__":
    sys.exit(main())
