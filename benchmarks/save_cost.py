"""Save-cost benchmark: time, bytes and requests per checkpoint on a long synthetic run.

Run (from the repository root)::

    python benchmarks/save_cost.py                        # 1,011 checkpoints, 5 runs each fsync on/off
    python benchmarks/save_cost.py --checkpoints 2000 --runs 5 --trials 9 --json out.json
    python benchmarks/save_cost.py --profile               # also cProfile the warm and cold slow paths

The run: checkpoint 0 holds a ~2 KB system prompt and a ~2 KB user task; every later checkpoint adds
one turn of 2 messages of about 2 KB each (an assistant message with a tool call whose arguments vary,
and a tool result), so checkpoint 1,000 holds 2,002 messages (~4 MB of JSON). The text is drawn by a
seeded PRNG from a word/identifier list with Zipf-like frequencies (prose, code lines, paths, numbers),
so zstd compresses it about as well as real agent output (the ratio is printed), not like random
bytes. The caller appends to one list and passes it to every save, as an agent does.

Stores: ``LocalStore`` on a temp dir (same file system as ``--dir``), fsync ON (the real default) and
fsync OFF (CPU cost only). What is measured (``time.perf_counter``):

* warm manager (the one that saved the previous checkpoint): median save time over checkpoints
  5..15 and over the last 21 checkpoints (990..1010 by default), samples pooled over ``--runs``
  repositories. Targets: late/early <= 2x, late <= 5 ms. The early window is shown twice: in a fresh
  repository (its first saves also create the ``packs/xx`` directories) and for a second run started
  in the same repository afterwards (directories exist: the stricter baseline).
* cold manager: a new ``CheckpointManager`` (own ``Repository``, no shared cache; ``latest()`` NOT
  called) whose first call is ``save`` of the full history + 2 new messages onto the ~4 MB run. Each
  trial copies the built repository to a new directory first (untimed). Median over ``--trials``,
  in-process and in a fresh subprocess (timed inside the child, after imports and after loading the
  history from a JSON file). Target <= 15 ms (construction + save).
* bytes written per save (``store.stats.bytes_up`` delta: pack + manifest + index record) vs the
  data block the save wrote (``PreparedSave.sizes["data"]``, captured by wrapping the manager's
  ``repo.prepare_save``) and, for reference, zstd-3 of the 2 new messages' compact JSON on their own.
  Target: bytes written <= data block + 1 KB (median and max over checkpoints >= 1).
  The overhead (bytes written - data block) is split into manifest + index record, the pack's meta
  block (tree nodes, spine state) and pack framing, and grouped by how many tree nodes the save sealed.
* requests per warm save by kind (PUT/GET/HEAD/LIST/DELETE, ``store.stats`` delta) and sequential
  round trips (the longest chain of requests each starting after the previous one ended, timed by
  wrapping the store's methods), split by what the save did (checkpoints >= 1): a *steady-state*
  save writes its pack and manifest only; one in ``seg_fanout`` also completes a tier (a tier pack
  PUT beside its pack, then a DELETE of the merged packs, docs/format.md §10) and one in 16 ends a
  log-segment range (a log segment PUT after the manifest, §12). Target: a steady-state save at
  most 3 requests in at most 2 round trips, no GET/HEAD/LIST. Reported beside it: the mean of each
  kind, the amortised mean over every save (requests and bytes written per save) and the write
  amplification (bytes written / data blocks). The bytes target (written <= data block + 1 KB)
  applies to steady-state saves; the maximum over all saves (a tier merge) is shown as info.

The subprocess variant runs a copy of the snapstore package taken when the benchmark starts, so a
working tree edited during the run cannot mix two versions. ``--profile`` prints cProfile tables
(cumulative and internal time) for 50 warm saves after checkpoint N and for 5 cold first saves.

Exit status: 0 if every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
sys.path.insert(0, str(REPO_ROOT))

import orjson  # noqa: E402
import zstandard  # noqa: E402

import snapstore  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.format.config import RepoConfig  # noqa: E402
from snapstore.format.pack import ENTRY_TYPES, T_CHUNK, Pack  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

RUN_ID = "bench-run"
SEED = 20240601

TARGET_RATIO = 2.0
TARGET_WARM_MS = 5.0
TARGET_COLD_MS = 15.0
TARGET_EXTRA_BYTES = 1024
TARGET_REQUESTS = 3        # a steady-state save (no tier merge, no log segment): pack + manifest (+ index)
TARGET_ROUND_TRIPS = 2
TARGET_AMORTISED_REQUESTS = 3

# ------------------------------------------------------------------------------------------------
# synthetic messages

_PROSE = """the a to of and in is that for it this with on be as are we not file function test should
will can I now let me check see need error value return code change fix issue line call class method
module import output run first then look at from by if which when case expected result update use
add new make sure works correctly before after into also only one more path directory read write
problem because there was here current instead seems looks like handle edge following implement
approach verify passes failing traceback argument parameter config default option string list dict
number type object instance attribute variable loop condition branch query request response data""".split()
_CODE = """self def return if else elif for while in not None True False import from as class try except
raise with lambda yield assert pass break continue and or is len range str int dict list tuple set
print isinstance super __init__ kwargs args result value key item items node name path data config
options parser field schema validate serialize deserialize load dump get_value set_value _compute
handle_error process_request build_query to_dict from_dict make_response parse_args read_file
write_file logger debug info warning exception ValueError TypeError KeyError AttributeError
os sys re json typing Optional Any Dict List Union dataclass field property staticmethod""".split()
_DIRS = "src lib tests utils core api models fields schema io parser internal helpers compat".split()
_TOOLS = ["str_replace_editor", "bash", "view_file", "search_code", "run_tests", "edit_file"]
_PUNCT = ["(", ")", ", ", ".", ": ", " = ", " == ", "[", "]", "()", "):", " + ", "_", "."]


class TextGen:
    """Seeded generator of prose, code and paths with Zipf-like word frequencies."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.pw = [1.0 / (i + 1) ** 1.1 for i in range(len(_PROSE))]
        self.cw = [1.0 / (i + 1) ** 1.0 for i in range(len(_CODE))]

    def prose(self, nbytes: int) -> str:
        r = self.r
        out, n = [], 0
        while n < nbytes:
            words = r.choices(_PROSE, self.pw, k=r.randint(6, 18))
            if r.random() < 0.3:
                words.insert(r.randrange(len(words)), f"`{r.choice(_CODE)}{r.choice(['()', '', '_' + r.choice(_CODE)])}`")
            if r.random() < 0.2:
                words.append(str(r.randint(0, 5000)))
            s = " ".join(words).capitalize() + r.choice([". ", ". ", ".\n", ": ", "? "])
            out.append(s)
            n += len(s)
        return "".join(out)[:nbytes]

    def code_line(self, indent: int) -> str:
        r = self.r
        toks = r.choices(_CODE, self.cw, k=r.randint(2, 8))
        s = toks[0]
        for t in toks[1:]:
            s += r.choice(_PUNCT) + t
        if r.random() < 0.2:
            s += f" = {r.choice(['0', '1', 'None', repr(r.choice(_PROSE)), str(r.randint(0, 999))])}"
        return "    " * indent + s

    def code(self, nbytes: int, numbered: bool = False, start: int = 1) -> str:
        lines, n, ind, ln = [], 0, self.r.randint(0, 2), start
        while n < nbytes:
            ind = max(0, min(4, ind + self.r.choice([-1, 0, 0, 0, 1])))
            s = self.code_line(ind)
            if numbered:
                s = f"{ln:6d}\t{s}"
                ln += 1
            lines.append(s)
            n += len(s) + 1
        return "\n".join(lines)[:nbytes]

    def path(self) -> str:
        r = self.r
        return "/repo/" + "/".join(r.choice(_DIRS) for _ in range(r.randint(1, 3))) + "/" + r.choice(_CODE).strip("_") + ".py"


class Workspace:
    """A fixed set of synthetic source files the agent views and edits (real runs re-read the same
    files, so tool outputs overlap: this is what dictionaries and dedup can exploit)."""

    def __init__(self, g: TextGen, nfiles: int = 40, lines: int = 220):
        self.g = g
        self.files = {}
        while len(self.files) < nfiles:
            self.files[g.path()] = g.code(lines * 40).split("\n")[:lines]

    def window(self, path: str, nlines: int) -> tuple[int, list]:
        lines = self.files[path]
        start = self.g.r.randint(0, max(0, len(lines) - nlines))
        return start + 1, lines[start:start + nlines]

    def edit(self, path: str) -> tuple[str, str]:
        """Replace a few lines of a file by new ones; return (old_str, new_str)."""
        r = self.g.r
        lines = self.files[path]
        k = r.randint(3, 9)
        i = r.randint(0, len(lines) - k)
        old = lines[i:i + k]
        new = [self.g.code_line((len(ln) - len(ln.lstrip())) // 4) if r.random() < 0.5 else ln for ln in old]
        new.insert(r.randint(0, len(new)), self.g.code_line(r.randint(1, 3)))
        lines[i:i + k] = new
        return "\n".join(old), "\n".join(new)


def make_prelude(g: TextGen) -> list:
    return [{"role": "system", "content": "You are a helpful coding agent. " + g.prose(1700)},
            {"role": "user", "content": "<task>\n" + g.prose(900) + "\n</task>\n<code>\n" + g.code(900) + "\n</code>"}]


def make_turn(g: TextGen, k: int, ws: Workspace | None = None) -> list:
    """Two messages of about 2 KB each: an assistant tool call and its tool result."""
    r = g.r
    ws = ws or Workspace(g, nfiles=4)
    cid = f"call_{r.getrandbits(96):024x}"
    path = r.choice(list(ws.files))
    command = r.choice(["view", "view", "str_replace", "run_tests"])
    args: dict = {"command": command, "path": path}
    if command == "str_replace":
        args["old_str"], args["new_str"] = ws.edit(path)
        tool = "str_replace_editor"
    elif command == "view":
        a = r.randint(1, 180)
        args["view_range"] = [a, a + 40]
        tool = "str_replace_editor"
    else:
        args = {"command": f"cd /repo && python -m pytest {path} -k {r.choice(_CODE).strip('_')} -x -q"}
        tool = "bash"
    thought = g.prose(max(300, 1900 - len(json.dumps(args))))
    assistant = {"role": "assistant", "content": thought,
                 "tool_calls": [{"id": cid, "type": "function",
                                 "function": {"name": tool, "arguments": json.dumps(args)}}]}
    if command == "view" or (command == "str_replace" and r.random() < 0.5):
        start, lines = ws.window(path, 60)
        body, n = [], 0
        for i, ln in enumerate(lines):
            s = f"{start + i:6d}\t{ln}"
            if n + len(s) > 1900:
                break
            body.append(s)
            n += len(s) + 1
        head = ("Here's the result of running `cat -n` on " if command == "view"
                else f"The file {path} has been edited. Here's the result of running `cat -n` on a snippet of ")
        out = head + f"{path}:\n" + "\n".join(body)
    elif command == "str_replace":
        out = f"The file {path} has been edited successfully. " + g.prose(r.randint(1200, 1700))
    else:
        fails = r.randint(0, 3)
        tb = []
        for _ in range(fails):
            p2 = r.choice(list(ws.files))
            st, lines = ws.window(p2, 3)
            tb.append(f'  File "{p2}", line {st}, in {r.choice(_CODE)}\n    ' + "\n    ".join(x.strip() for x in lines))
        out = ("============================= test session starts ==============================\n"
               + f"collected {r.randint(5, 400)} items\n\n" + g.prose(r.randint(500, 900)) + "\n"
               + "\n".join(tb) + "\n" + g.prose(r.randint(200, 500))
               + f"\n========================= {r.randint(0, 40)} passed, {fails} failed in "
               f"{r.random() * 9:.2f}s =========================")
    result = {"role": "tool", "tool_call_id": cid, "name": tool, "content": out}
    return [assistant, result]


def make_history(n: int, seed: int = SEED) -> tuple[list, list]:
    """Return (prelude, turns) for checkpoints 0..n (turn k-1 is added at checkpoint k)."""
    g = TextGen(seed)
    ws = Workspace(g)
    return make_prelude(g), [make_turn(g, k, ws) for k in range(1, n + 1)]


def compact(msgs: list) -> bytes:
    return b"".join(orjson.dumps(m) for m in msgs)


# ------------------------------------------------------------------------------------------------
# warm runs

def _capture_sizes(mgr: CheckpointManager) -> list:
    """Wrap the manager's repository ``prepare_save`` (once) to record each PreparedSave's pack sizes.

    The wrapper is an instance attribute of this manager's Repository only; snapstore is not changed.
    """
    repo = mgr.repo
    got = getattr(repo, "_bench_sizes", None)
    if got is not None:
        return got
    orig = repo.prepare_save
    got = repo._bench_sizes = []

    def wrapped(*a, **kw):
        prep = orig(*a, **kw)
        got.append((dict(prep.sizes), prep.pack_bytes))  # parsed later, outside the timed region
        return prep
    repo.prepare_save = wrapped
    return got


class _Recorder:
    """Records every request a store makes (``(start, end, kind, key)``, ``time.perf_counter``)
    by wrapping its methods on the instance; :meth:`take` returns and clears them."""

    def __init__(self, store):
        self.calls: list = []
        self._lock = threading.Lock()
        for name, kind in (("put", "PUT"), ("put_if_match", "PUT"), ("get", "GET"), ("head", "HEAD"),
                           ("delete_many", "DELETE")):
            setattr(store, name, self._wrap(getattr(store, name), kind))
        lst = store.list

        def listed(prefix, *a, **kw):  # a generator: timed from the call to the last item
            t0 = time.perf_counter()
            out = list(lst(prefix, *a, **kw))
            with self._lock:
                self.calls.append((t0, time.perf_counter(), "LIST", prefix))
            return iter(out)
        store.list = listed

    def _wrap(self, fn, kind):
        def timed(key, *a, **kw):
            keys_ = list(key) if kind == "DELETE" else key
            t0 = time.perf_counter()
            try:
                return fn(keys_, *a, **kw)
            finally:
                with self._lock:
                    self.calls.append((t0, time.perf_counter(), kind, keys_))
        return timed

    def take(self) -> list:
        with self._lock:
            out, self.calls = self.calls, []
        return out


def round_trips(calls: list) -> int:
    """The longest chain of requests each starting after the previous one ended."""
    calls = sorted(calls, key=lambda c: c[1])
    best: list = []
    for i, c in enumerate(calls):
        best.append(1 + max((best[j] for j in range(i) if calls[j][1] <= c[0]), default=0))
    return max(best, default=0)


SAVE_KINDS = ("steady", "tier merge", "log segment", "tier merge + log segment")


def save_kind(calls: list) -> str:
    """What a save did beyond its pack and manifest, from its requests: ``steady`` (nothing),
    ``tier merge`` (a tier pack PUT beside the pack and a DELETE of the merged packs, §10),
    ``log segment`` (a log segment PUT after the manifest, and a DELETE of the level below when a
    level >= 2 is written, §12), or both."""
    puts = [c[3] for c in calls if c[2] == "PUT"]
    merge = sum(k.startswith("packs/") for k in puts) > 1
    logseg = any("/l/" in k for k in puts)
    return SAVE_KINDS[merge + 2 * logseg]


def warm_run(root: str, n: int, fsync: bool, prelude: list, turns: list, run_id: str = RUN_ID,
             mgr: CheckpointManager | None = None, store: LocalStore | None = None) -> dict:
    """Save checkpoints 0..n-1 with one manager; per-save time, requests, bytes, sequential round
    trips (``round_trips``) and what the save did (``kinds``, see :func:`save_kind`)."""
    if mgr is None:
        store = LocalStore(root, fsync=fsync)
        mgr = CheckpointManager(store)
    rec = store.__dict__.get("_bench_recorder") or _Recorder(store)
    store.__dict__["_bench_recorder"] = rec
    sizes = _capture_sizes(mgr)
    history = list(prelude)
    times, reqs, up, data, rts, kinds = [], [], [], [], [], []
    for k in range(n):
        if k:
            history.extend(turns[k - 1])
        before = store.stats.snapshot()
        nsz = len(sizes)
        rec.take()
        t = time.perf_counter()
        mgr.save(run_id, history, step=k, token_usage={"input_tokens": 1000 + 1000 * k, "output_tokens": 150})
        times.append(time.perf_counter() - t)
        calls = rec.take()
        d = store.stats.since(before)
        reqs.append(dict(d.counts))
        up.append(d.bytes_up)
        rts.append(round_trips(calls))
        kinds.append(save_kind(calls))
        data.append(sizes[nsz][0]["data"] if len(sizes) > nsz else 0)
    packs = [sizes[i][1] for i in range(len(sizes) - n, len(sizes))] if len(sizes) >= n else []
    return {"times": times, "reqs": reqs, "bytes_up": up, "data": data, "mgr": mgr, "store": store, "packs": packs,
            "history": history, "round_trips": rts, "kinds": kinds}


def pack_breakdown(packs: list, bytes_up: list) -> list:
    """Per save: pack bytes split into data block / meta block / framing, entry counts by type, and
    the rest of the bytes written (manifest + index record)."""
    out = []
    for k, pb in enumerate(packs):
        if pb is None:
            out.append({"pack": 0, "data": 0, "meta_block": 0, "framing": 0, "manifest_index": bytes_up[k],
                        "entries": {}})
            continue
        p = Pack.parse("bench", pb)
        ents: dict = {}
        for (t, _), e in p.entries.items():
            ents[ENTRY_TYPES[t]] = ents.get(ENTRY_TYPES[t], 0) + 1
        chunk_blocks = {e.block for e in p.entries.values() if e.type == T_CHUNK} - \
            {e.block for e in p.entries.values() if e.type != T_CHUNK}
        data = sum(p.blocks[b].clen for b in chunk_blocks)  # data blocks (first or last: any order)
        blocks = sum(b.clen for b in p.blocks)
        out.append({"pack": len(pb), "data": data, "meta_block": blocks - data, "framing": len(pb) - blocks,
                    "manifest_index": bytes_up[k] - len(pb), "entries": ents})
    return out


_med_it = _med = _lib.median


# ------------------------------------------------------------------------------------------------
# cold saves

def cold_trial_inproc(src: str, tmp_parent: str, fsync: bool, history: list) -> dict:
    dst = tempfile.mkdtemp(prefix="cold-", dir=tmp_parent)
    shutil.rmtree(dst)
    shutil.copytree(src, dst)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    store = LocalStore(dst, fsync=fsync)
    mgr = CheckpointManager(store)
    t1 = time.perf_counter()
    mgr.save(RUN_ID, history, step=len(history) // 2)
    t2 = time.perf_counter()
    res = {"total": t2 - t0, "construct": t1 - t0, "save": t2 - t1, "reqs": dict(store.stats.counts),
           "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0,
           "bytes_up": store.stats.bytes_up, "bytes_down": store.stats.bytes_down}
    mgr.close()
    shutil.rmtree(dst, ignore_errors=True)
    return res


_CHILD_CODE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import orjson
from snapstore import CheckpointManager
from snapstore.stores.local import LocalStore
history = orjson.loads(open(sys.argv[3], 'rb').read())
fsync = sys.argv[4] == '1'
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0 = time.perf_counter()
store = LocalStore(sys.argv[2], fsync=fsync)
mgr = CheckpointManager(store)
t1 = time.perf_counter()
mgr.save(sys.argv[5], history, step=len(history) // 2)
t2 = time.perf_counter()
print(json.dumps({"total": t2 - t0, "construct": t1 - t0, "save": t2 - t1, "reqs": store.stats.counts,
                  "minflt": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}))
"""


def snapshot_code(work: str) -> str:
    """Copy the snapstore package this process imported, so child processes run the same code even
    if the working tree changes during the benchmark. Returns the directory to put on sys.path."""
    dst = os.path.join(work, "code")
    shutil.copytree(os.path.dirname(snapstore.__file__), os.path.join(dst, "snapstore"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def cold_trial_subprocess(src: str, tmp_parent: str, fsync: bool, hist_file: str, code_dir: str) -> dict:
    dst = tempfile.mkdtemp(prefix="coldp-", dir=tmp_parent)
    shutil.rmtree(dst)
    shutil.copytree(src, dst)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD_CODE, code_dir, dst, hist_file, "1" if fsync else "0",
                          RUN_ID], capture_output=True, text=True)
    wall = time.perf_counter() - t
    shutil.rmtree(dst, ignore_errors=True)
    if out.returncode != 0:
        raise RuntimeError(f"cold-save child failed (exit {out.returncode}):\n{out.stderr.strip()[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall"] = wall
    return res


# ------------------------------------------------------------------------------------------------
# profiling

def _profile_text(pr: cProfile.Profile, n: int = 18) -> str:
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    st.sort_stats("cumulative").print_stats(n)
    st.sort_stats("tottime").print_stats(n)
    lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
    return "\n".join(lines)


def profile_paths(root: str, n: int, prelude: list, turns: list) -> None:
    print("\n=== cProfile: warm saves of checkpoints n..n+49 (fsync on) ===")
    store = LocalStore(os.path.join(root, "prof"), fsync=True)
    mgr = CheckpointManager(store)
    r = warm_run("", n, True, prelude, turns, mgr=mgr, store=store)
    hist = r["history"]
    pr = cProfile.Profile()
    for k in range(n, n + 50):
        hist.extend(turns[k - 1])
        pr.enable()
        mgr.save(RUN_ID, hist, step=k)
        pr.disable()
    print(_profile_text(pr))
    mgr.close()
    print(f"\n=== cProfile: cold first save onto checkpoint {n + 49} (fsync on; 5 trials, each on a fresh copy) ===")
    pr = cProfile.Profile()
    src = os.path.join(root, "prof")
    for i in range(5):
        dst = os.path.join(root, f"prof-cold-{i}")
        shutil.copytree(src, dst)
        store = LocalStore(dst, fsync=True)
        pr.enable()
        m = CheckpointManager(store)
        m.save(RUN_ID, list(hist) + turns[n + 49], step=n + 50)
        pr.disable()
        m.close()
    print(_profile_text(pr))


# ------------------------------------------------------------------------------------------------
# main

def _fs_of(path: str) -> str:
    path = os.path.realpath(path)
    best = ("?", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if path == mnt or path.startswith(mnt.rstrip("/") + "/"):
                    if len(mnt) >= len(best[0]):
                        best = (mnt, f"{fstype} on {dev}")
    except OSError:
        pass
    return best[1]


_git_commit = _lib.commit_label


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=1011,
                    help="checkpoints per run (default %(default)s: the late window is 990..1010)")
    ap.add_argument("--runs", type=int, default=5, help="repositories per fsync mode for the warm timings")
    ap.add_argument("--trials", type=int, default=7, help="cold-save trials per variant")
    ap.add_argument("--subprocess-trials", type=int, default=5, help="cold-save trials in a fresh process")
    ap.add_argument("--dir", default=None, help="parent directory for the temp repositories (default: system temp)")
    ap.add_argument("--profile", action="store_true", help="cProfile the warm late-window and cold saves")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    args = ap.parse_args(argv)
    n = args.checkpoints
    if n < 40:
        ap.error("--checkpoints must be at least 40")
    early = list(range(5, 16))
    late = list(range(n - 21, n))

    work = tempfile.mkdtemp(prefix="snapstore-savecost-", dir=args.dir)
    code_dir = snapshot_code(work)
    prelude, turns = make_history(n + 60)
    extra_turn = turns[n - 1]  # the next turn after the built run's last checkpoint
    results: dict = {"checkpoints": n, "early_window": [early[0], early[-1]], "late_window": [late[0], late[-1]]}
    cfg = {k: getattr(RepoConfig, k) for k in RepoConfig.SETTINGS}
    print("snapstore save-cost benchmark")
    print(f"  snapstore {snapstore.__version__}, commit {_git_commit()}; python {platform.python_version()}; "
          f"zstandard {zstandard.__version__}; {os.cpu_count()} CPUs")
    print(f"  repositories under {work} ({_fs_of(work)})")
    print(f"  repository settings (defaults): {cfg}")
    h_final = prelude + [m for t in turns[:n - 1] for m in t]
    hb = compact(h_final)
    turn_sizes = [len(compact(t)) for t in turns[:n - 1]]
    per_msg = [len(orjson.dumps(m)) for t in turns[:50] for m in t]
    z3 = [len(zstandard.ZstdCompressor(level=3).compress(compact(t))) for t in turns[:200]]
    print(f"  synthetic run: {n} checkpoints, final history {len(h_final)} messages, {len(hb) / 1e6:.2f} MB "
          f"compact JSON; message size median {_med(per_msg):.0f} B (min {min(per_msg)}, max {max(per_msg)}); "
          f"turn {_med(turn_sizes):.0f} B, zstd-3 of a turn alone {_med(z3):.0f} B "
          f"({_med(turn_sizes) / _med(z3):.2f}x); whole history zstd-19 "
          f"{len(zstandard.ZstdCompressor(level=19).compress(hb)) / 1e3:.0f} kB")
    print(f"  windows: early = checkpoints {early[0]}..{early[-1]}, late = {late[0]}..{late[-1]}; "
          f"{args.runs} runs per fsync mode, samples pooled")
    print(flush=True)

    failures = []
    try:
        # ---------------------------------------------------------------- warm
        warm = {}
        built_repo = {}
        for fsync in (True, False):
            tag = "on" if fsync else "off"
            e_fresh, e_b, lt, per_run = [], [], [], []
            reqs_all, up_all, data_all, z_new, packs_all = [], [], [], [], []
            t_run = time.perf_counter()
            for ri in range(args.runs):
                root = os.path.join(work, f"warm-{tag}-{ri}")
                r = warm_run(root, n, fsync, prelude, turns)
                e_fresh += [r["times"][k] for k in early]
                lt += [r["times"][k] for k in late]
                # second run in the same repository (pack directories exist), same manager
                r2 = warm_run(root, early[-1] + 1, fsync, prelude, turns, run_id=RUN_ID + "-b",
                              mgr=r["mgr"], store=r["store"])
                e_b += [r2["times"][k] for k in early]
                per_run.append((_med([r["times"][k] for k in early]), _med([r2["times"][k] for k in early]),
                                _med([r["times"][k] for k in late])))
                if ri == 0:
                    reqs_all, up_all, data_all, packs_all = r["reqs"], r["bytes_up"], r["data"], r["packs"]
                    rts_all, kinds_all = r["round_trips"], r["kinds"]
                    if fsync:
                        built_repo["history"] = r["history"]
                r["mgr"].close()
                if ri == 0 and fsync:
                    built_repo["path"] = os.path.join(work, "built")
                    # the built repository holds run RUN_ID at checkpoint n-1 (plus the short second run)
                    shutil.copytree(root, built_repo["path"])
                if ri > 0:
                    shutil.rmtree(root, ignore_errors=True)
            z_new = [len(zstandard.ZstdCompressor(level=3).compress(compact(turns[k - 1]))) for k in range(1, n)]
            warm[tag] = {"early_fresh": e_fresh, "early_second_run": e_b, "late": lt, "per_run": per_run,
                         "reqs": reqs_all, "bytes_up": up_all, "data": data_all, "zstd3_new": z_new,
                         "round_trips": rts_all, "kinds": kinds_all,
                         "breakdown": pack_breakdown(packs_all, up_all),
                         "seconds": time.perf_counter() - t_run}
            print(f"  warm runs fsync {tag}: {time.perf_counter() - t_run:.1f}s", file=sys.stderr, flush=True)

        # ---------------------------------------------------------------- cold
        cold = {}
        hist_cold = built_repo["history"] + extra_turn
        hist_file = os.path.join(work, "history.json")
        with open(hist_file, "wb") as f:
            f.write(orjson.dumps(hist_cold))
        hist_mb = len(compact(hist_cold)) / 1e6
        for fsync in (True, False):
            tag = "on" if fsync else "off"
            trials = [cold_trial_inproc(built_repo["path"], work, fsync, hist_cold) for _ in range(args.trials)]
            sub = [cold_trial_subprocess(built_repo["path"], work, fsync, hist_file, code_dir)
                   for _ in range(args.subprocess_trials if fsync else max(1, args.subprocess_trials // 2))]
            cold[tag] = {"inproc": trials, "subprocess": sub}
        print(f"  cold trials done", file=sys.stderr, flush=True)

        # ---------------------------------------------------------------- report
        print("warm manager: save time (ms)        median    p90     max   per-run medians")
        for tag in ("on", "off"):
            w = warm[tag]
            for label, key, idx in (("early, fresh repo", "early_fresh", 0),
                                    ("early, 2nd run same repo", "early_second_run", 1),
                                    (f"late ({late[0]}..{late[-1]})", "late", 2)):
                xs = [1e3 * x for x in w[key]]
                runs_s = " ".join(f"{1e3 * pr[idx]:.2f}" for pr in w["per_run"])
                print(f"  fsync {tag:<3} {label:<26} {_med(xs):7.2f} {_lib.percentile(xs, 90):7.2f} {max(xs):7.2f}   {runs_s}")
        print()
        rows = []
        for tag in ("on", "off"):
            w = warm[tag]
            lm = 1e3 * _med(w["late"])
            for label, key in (("fresh repo", "early_fresh"), ("2nd run", "early_second_run")):
                em = 1e3 * _med(w[key])
                rows.append((f"warm late/early ratio, fsync {tag} (early: {label})", f"{lm / em:.2f}x",
                             f"<= {TARGET_RATIO:.0f}x", lm / em <= TARGET_RATIO, tag == "on"))
            rows.append((f"warm late median, fsync {tag}", f"{lm:.2f} ms", f"<= {TARGET_WARM_MS:.0f} ms",
                         lm <= TARGET_WARM_MS, tag == "on"))
        print(f"cold manager: first save onto checkpoint {n - 1} ({len(hist_cold)} messages, {hist_mb:.2f} MB "
              f"JSON), median over trials (ms)")
        print(f"  {'variant':<28} {'total':>7} {'constr':>7} {'save':>7} {'min':>7} {'max':>7} {'minflt':>7}  "
              f"requests (first trial)")
        for tag in ("on", "off"):
            for kind in ("inproc", "subprocess"):
                ts = cold[tag][kind]
                tot = [1e3 * t["total"] for t in ts]
                print(f"  fsync {tag:<3} {kind:<18} {_med(tot):7.2f} {1e3 * _med([t['construct'] for t in ts]):7.2f} "
                      f"{1e3 * _med([t['save'] for t in ts]):7.2f} {min(tot):7.2f} {max(tot):7.2f} "
                      f"{_med([t['minflt'] for t in ts]):7.0f}  "
                      f"{ {k: v for k, v in ts[0]['reqs'].items() if v} } (n={len(ts)})")
                cm = _med(tot)
                rows.append((f"cold first save, fsync {tag}, {kind}", f"{cm:.2f} ms", f"<= {TARGET_COLD_MS:.0f} ms",
                             cm <= TARGET_COLD_MS, tag == "on"))
        print(f"  (subprocess: timed inside the child after imports and history load; process wall median "
              f"{1e3 * _med([t['process_wall'] for t in cold['on']['subprocess']]):.0f} ms incl. interpreter start;\n"
              f"   minflt = minor page faults during the timed region)")
        print()

        w = warm["on"]
        ks = list(range(1, n))
        extra = [w["bytes_up"][k] - w["data"][k] for k in ks]
        over = [w["bytes_up"][k] - (w["data"][k] + TARGET_EXTRA_BYTES) for k in ks]
        print("bytes written per warm save (checkpoints 1..%d, fsync on run 1)   median      max" % (n - 1))
        print(f"  bytes written (PUT payload: pack + manifest + index)        {_med([w['bytes_up'][k] for k in ks]):8.0f} "
              f"{max(w['bytes_up'][k] for k in ks):8d}")
        print(f"  data block written (compressed new messages, with dict)     {_med([w['data'][k] for k in ks]):8.0f} "
              f"{max(w['data'][k] for k in ks):8d}")
        print(f"  zstd-3 of the 2 new messages alone (reference)              {_med(w['zstd3_new']):8.0f} "
              f"{max(w['zstd3_new']):8d}")
        print(f"  overhead = written - data block                             {_med(extra):8.0f} {max(extra):8d}")
        print(f"  overhead at checkpoints 1..20 / {n - 20}..{n - 1} (median)           "
              f"{_med(extra[:20]):8.0f} {_med(extra[-20:]):8.0f}")
        kmax = max(ks, key=lambda k: w["bytes_up"][k] - w["data"][k])
        print(f"  worst checkpoint: {kmax} (written {w['bytes_up'][kmax]}, data block {w['data'][kmax]})")
        bd = w["breakdown"]
        print("  overhead components (median / max):  manifest+index %s / %s;  pack meta block (tree nodes, spine "
              "state) %s / %s;  pack framing (header, entry table, trailer) %s / %s" % (
                  *(f"{f(bd[k][c] for k in ks):.0f}" for c in ("manifest_index",) for f in (_med_it, max)),
                  *(f"{f(bd[k][c] for k in ks):.0f}" for c in ("meta_block",) for f in (_med_it, max)),
                  *(f"{f(bd[k][c] for k in ks):.0f}" for c in ("framing",) for f in (_med_it, max))))
        print("  overhead by tree nodes sealed in the save (n + u entries):")
        groups: dict = {}
        for k in ks:
            e = bd[k]["entries"]
            groups.setdefault(min(3, e.get("node", 0) + e.get("upper", 0)), []).append(k)
        for g in sorted(groups):
            gk = groups[g]
            ov = [w["bytes_up"][k] - w["data"][k] for k in gk]
            print(f"    {str(g) + ('+' if g == 3 else ''):>3} nodes: {len(gk):5d} saves, overhead median {_med(ov):5.0f} "
                  f"max {max(ov):5d}, meta block median {_med([bd[k]['meta_block'] for k in gk]):5.0f}, "
                  f"over data+1KB: {sum(o > TARGET_EXTRA_BYTES for o in ov)}")
        n_over = sum(o > 0 for o in over)
        print(f"  saves over data block + 1 KB: {n_over} of {len(ks)} ({100 * n_over / len(ks):.1f}%)")
        rows.append(("bytes written - data block, median", f"{_med(extra):.0f} B", f"<= {TARGET_EXTRA_BYTES} B",
                     _med(extra) <= TARGET_EXTRA_BYTES, True))
        st_over = [o for k, o in zip(ks, over) if w["kinds"][k] == "steady"]
        st_extra = [e for k, e in zip(ks, extra) if w["kinds"][k] == "steady"]
        rows.append(("bytes written - data block, max (steady saves)", f"{max(st_extra, default=0):.0f} B",
                     f"<= {TARGET_EXTRA_BYTES} B", max(st_over, default=0) <= 0, True))
        rows.append(("bytes written - data block, max (all saves)", f"{max(extra):.0f} B",
                     "info: tier merges", max(over) <= 0, False))
        print()

        kinds_ = w["kinds"]
        first = w["reqs"][0]
        print("requests per warm save (fsync on run 1)            saves   PUT   GET  HEAD  LIST   DEL   req    RT  bytes written")
        print(f"  checkpoint 0 (new run, new repository)                1 {first['PUT']:>5} {first['GET']:>5} "
              f"{first['HEAD']:>5} {first['LIST']:>5} {first['DELETE']:>5} {sum(first.values()):>5} "
              f"{w['round_trips'][0]:>5} {w['bytes_up'][0]:>8}")

        def _row(label, idx, agg):
            if not idx:
                print(f"  {label:<50} {0:>5}")
                return None
            per = {kk: agg([w["reqs"][k][kk] for k in idx]) for kk in first}
            tot = agg([sum(w["reqs"][k].values()) for k in idx])
            rt = agg([w["round_trips"][k] for k in idx])
            b = agg([w["bytes_up"][k] for k in idx])
            print(f"  {label:<50} {len(idx):>5} {per['PUT']:>5.2f} {per['GET']:>5.2f} {per['HEAD']:>5.2f} "
                  f"{per['LIST']:>5.2f} {per['DELETE']:>5.2f} {tot:>5.2f} {rt:>5.2f} {b:>8.0f}")
            return per, tot, rt, b
        mean = statistics.fmean
        steady_idx = [k for k in ks if kinds_[k] == "steady"]
        st_max = _row("steady state (pack + manifest): max", steady_idx, max)
        _row("steady state: mean", steady_idx, mean)
        for kind in SAVE_KINDS[1:]:
            _row(f"{kind}: mean", [k for k in ks if kinds_[k] == kind], mean)
        am = _row(f"amortised: every save 1..{n - 1}, mean", ks, mean)
        tot_up, tot_data = sum(w["bytes_up"][k] for k in ks), sum(w["data"][k] for k in ks)
        print(f"  amortised bytes written / data blocks written (checkpoints 1..{n - 1}): "
              f"{tot_up:,} / {tot_data:,} = {tot_up / max(1, tot_data):.2f}x "
              f"(tier packs rewrite merged data: about log_4 n times each byte)")
        print("  (RT: sequential round trips, the longest chain of requests each starting after the previous "
              "one ended; a tier pack is written beside the save's pack)")
        if st_max is not None:
            per, tot, rt, _ = st_max
            ok_req = tot <= TARGET_REQUESTS and rt <= TARGET_ROUND_TRIPS and \
                per["GET"] == 0 and per["HEAD"] == 0 and per["LIST"] == 0
            rows.append(("steady-state save requests (max over steady saves)",
                         f"{tot:.0f} req ({per['PUT']:.0f} PUT) in {rt:.0f} RT",
                         f"<= {TARGET_REQUESTS} req, <= {TARGET_ROUND_TRIPS} RT", ok_req, True))
        if am is not None:
            per, tot, rt, b = am
            rows.append(("amortised requests per save (mean, all saves)", f"{tot:.2f} req, {b:.0f} B",
                         f"<= {TARGET_AMORTISED_REQUESTS} req (info)", tot <= TARGET_AMORTISED_REQUESTS, False))
        print()

        print(f"{'TARGETS':<58} {'measured':>32} {'target':>26}  verdict")
        for name, val, tgt, ok, primary in rows:
            print(f"  {name:<56} {val:>32} {tgt:>26}  {_verdict(ok)}{'' if primary else ' (info)'}")
            if primary and not ok:
                failures.append(name)
        print()
        print("overall: " + ("all targets met" if not failures else f"{len(failures)} target(s) missed: {failures}"))

        results.update({
            "environment": {"snapstore": snapstore.__version__, "python": platform.python_version(),
                            "zstandard": zstandard.__version__, "fs": _fs_of(work), "settings": cfg,
                            "history_messages_final": len(h_final), "history_bytes_final": len(hb)},
            "warm": {tag: {"early_fresh_ms": [1e3 * x for x in warm[tag]["early_fresh"]],
                           "early_second_run_ms": [1e3 * x for x in warm[tag]["early_second_run"]],
                           "late_ms": [1e3 * x for x in warm[tag]["late"]],
                           "per_run_medians_ms": [[1e3 * v for v in pr] for pr in warm[tag]["per_run"]],
                           "bytes_up": warm[tag]["bytes_up"], "data_block": warm[tag]["data"],
                           "zstd3_new": warm[tag]["zstd3_new"], "requests": warm[tag]["reqs"],
                           "round_trips": warm[tag]["round_trips"], "save_kinds": warm[tag]["kinds"],
                           "breakdown": warm[tag]["breakdown"]}
                     for tag in warm},
            "cold": cold,
            "targets": [{"name": r[0], "measured": r[1], "target": r[2], "pass": r[3], "primary": r[4]} for r in rows],
            "failures": failures,
        })
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
            print(f"results written to {args.json}")
        if args.profile:
            profile_paths(work, n, prelude, turns)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
