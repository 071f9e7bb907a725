"""The workloads of ``python -m benchmarks``: identical checkpoint lists for every system.

A :class:`Workload` is a list of runs; a run is a list of checkpoints, each a message list (JSON
values, as ``CheckpointManager.save`` takes them) and, for the state workload, a session state. Every
system is driven with exactly these lists (the same Python objects), in the same order.

Workloads (names as they appear in the results):

* ``traj:<file>``: every shared trajectory (``--data``), one checkpoint per turn, one run per
  conversation (``snapstore.importers.load_trajectory``, as ``snapstore import`` does).
* ``rewritten:<file>``: the trajectories whose per-step prompts are not prefixes of each other (the
  SWE-agent function-calling files: from step 5 on the history processor elides older tool outputs),
  the same lists as their ``traj:`` workload, reported on their own.
* ``synth:long-<n>``: one run of n checkpoints, each adding an assistant tool call and a tool result
  whose JSON sizes are drawn (seeded) from the sizes of the shared files' messages, with text from
  ``benchmarks/latency.py``'s generator (Zipf-like words: compresses about like agent output). The
  quadratic systems run the first ``quadratic_cap`` checkpoints only, and their bytes at n are a fitted
  extrapolation, labelled as such.
* ``shared-prompt:<runs>``: that many runs sharing one large system prompt and tool schema, each a
  few turns of its own.
* ``state:image``: one run whose session state holds a large image (raw RGB pixels, base64) that
  changes a little (one small rectangle) each step, beside small message turns.

Lower bound (``lower_bound_bytes``, definition in ``lb_def``): zstd -19 of the information, see
:func:`message_lb` and the workload builders.
"""

from __future__ import annotations

import base64
import json
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from benchmarks.latency import _text, prelude as _latency_prelude, turn as _latency_turn
from benchmarks.storage import LB_LEVEL, _Enc, conversation_lb

SEED = 20251201


class Prefixes:
    """A read-only sequence of the growing prefixes of one message list: item ``i`` is
    ``messages[:ends[i]]`` (a new list each time, sharing the message objects), so a run of n
    append-only checkpoints takes O(n) memory instead of O(n^2)."""

    def __init__(self, messages: list, ends: list):
        self.messages, self.ends = messages, ends

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Prefixes(self.messages, self.ends[i])
        return self.messages[:self.ends[i]]

    def __iter__(self):
        return (self.messages[:e] for e in self.ends)


@dataclass
class Run:
    """One run (conversation / thread): ``checkpoints[i]`` is checkpoint i's full message list (a
    list, or :class:`Prefixes`); ``states[i]`` its session state (a JSON value) or ``states`` None
    when the run has none."""

    run_id: str
    checkpoints: object
    states: list | None = None


@dataclass
class Workload:
    """A named list of runs, with its lower bound.

    Attributes:
        name: e.g. ``traj:claudecode-cctrace-phase0.jsonl``. kind: ``traj``, ``rewritten``,
        ``synth``, ``shared-prompt`` or ``state``. runs: the runs, in save order.
        lb_bytes: the lower bound in bytes; lb_def: how it is defined.
        quadratic_cap: when set, systems whose stored bytes grow with the square of the run length
            run only the first ``quadratic_cap`` checkpoints of each run and extrapolate to the full
            length (``extrapolate_to``: the checkpoint counts to extrapolate to).
        description: one line for the report.
    """

    name: str
    kind: str
    runs: list
    lb_bytes: int
    lb_def: str
    description: str = ""
    quadratic_cap: int | None = None
    extrapolate_to: list = field(default_factory=list)

    @property
    def checkpoints(self) -> int:
        """Number of checkpoints over all runs."""
        return sum(len(r.checkpoints) for r in self.runs)

    def truncated(self, cap: int) -> "Workload":
        """The same workload with each run cut to its first ``cap`` checkpoints (same objects)."""
        runs = [Run(r.run_id, r.checkpoints[:cap], None if r.states is None else r.states[:cap]) for r in self.runs]
        return Workload(self.name, self.kind, runs, self.lb_bytes, self.lb_def, self.description)


def deltas(run: Run) -> list:
    """Per checkpoint: ``("append", new_messages)`` when it extends the previous one (same message
    values in the same order, a few more at the end), else ``("rewrite", all_messages)``."""
    if isinstance(run.checkpoints, Prefixes):  # append-only by construction
        p = run.checkpoints
        return [("append", p.messages[(p.ends[i - 1] if i else 0):e]) for i, e in enumerate(p.ends)]
    out = []
    prev: list = []
    for cp in run.checkpoints:
        n = len(prev)
        if len(cp) >= n and all(a is b or a == b for a, b in zip(prev, cp)):
            out.append(("append", cp[n:]))
        else:
            out.append(("rewrite", cp))
        prev = cp
    return out


def message_lb(runs: list, enc: _Enc | None = None) -> int:
    """Sum over runs of zstd -19 of the run's final history (its distinct messages in order of first
    appearance when the history is rewritten): ``benchmarks/storage.py``'s lower bound."""
    enc = enc or _Enc()
    total = 0
    for r in runs:
        if isinstance(r.checkpoints, Prefixes):  # append-only: the final history
            if len(r.checkpoints):
                total += _zstd19(json.dumps(r.checkpoints[-1], ensure_ascii=False).encode("utf-8"))
        else:
            total += conversation_lb(r.checkpoints, enc)[0]
    return total


def _zstd19(data: bytes) -> int:
    return len(zstandard.ZstdCompressor(level=LB_LEVEL).compress(data))


# ------------------------------------------------------------------------------------------------
# traj: and rewritten:

def trajectory_files(data: Path) -> list:
    """The trajectory files in ``data`` (every file but ``*.md``), sorted by name."""
    return sorted(p for p in Path(data).iterdir() if p.is_file() and p.suffix != ".md")


def trajectory_workloads(data: Path, skip: list | None = None) -> tuple[list, list]:
    """``(traj workloads, rewritten workloads)`` of the files in ``data`` but those whose name
    contains a string of ``skip``.

    Raises:
        snapstore.errors.InvalidInputError: a file the importers cannot read (names it).
    """
    from snapstore.importers import load_trajectory

    traj, rewritten = [], []
    for p in trajectory_files(data):
        if skip and any(s in p.name for s in skip):
            continue
        fmt, convs = load_trajectory(p)
        runs = [Run(c.name or f"run-{i}", c.checkpoints) for i, c in enumerate(convs) if c.checkpoints]
        enc = _Enc()
        lb = message_lb(runs, enc)
        desc = f"{fmt}, {len(runs)} conversation(s), one checkpoint per turn"
        w = Workload(f"traj:{p.name}", "traj", runs, lb, f"zstd-{LB_LEVEL} of each conversation's final history "
                     "(distinct messages if rewritten), summed", desc)
        traj.append(w)
        if any(k == "rewrite" for r in runs for k, _ in deltas(r)):
            rewritten.append(Workload(f"rewritten:{p.name}", "rewritten", runs, lb, w.lb_def,
                                      f"{fmt}: per-step prompts, older tool outputs elided (not prefixes)"))
    return traj, rewritten


# ------------------------------------------------------------------------------------------------
# synth:long-n

def shared_message_sizes(data: Path | None) -> list:
    """JSON sizes (bytes, ``ensure_ascii=False``) of every message of the shared files, or [] without them."""
    if data is None or not Path(data).is_dir():
        return []
    from snapstore.importers import load_trajectory

    sizes = []
    for p in trajectory_files(data):
        try:
            _fmt, convs = load_trajectory(p)
        except Exception:  # noqa: BLE001  (not a trajectory: no sizes from it)
            continue
        for c in convs:
            sizes += [len(json.dumps(m, ensure_ascii=False).encode()) for m in c.messages]
    return sizes


def synthetic_long(n: int, sizes: list, quadratic_cap: int | None, extrapolate_to: list) -> Workload:
    """One run of ``n`` checkpoints of 2 new messages each (sizes drawn from ``sizes``, else 1-2 KB)."""
    rng = random.Random(SEED + n)
    msgs = _latency_prelude(SEED)
    ends = []
    for i in range(n):
        new = _latency_turn(SEED, i)
        if sizes:
            for m in new:
                target = max(40, rng.choice(sizes) - 120)
                m["content"] = _text(rng, target)
        msgs += new
        ends.append(len(msgs))
    runs = [Run("long-run", Prefixes(msgs, ends))]
    src = "the shared files' message sizes" if sizes else "1-2 KB (no shared files)"
    return Workload(f"synth:long-{n}", "synth", runs, message_lb(runs),
                    f"zstd-{LB_LEVEL} of the final history",
                    f"1 run, {n:,} checkpoints of 2 messages, sizes drawn from {src}",
                    quadratic_cap=quadratic_cap if quadratic_cap and quadratic_cap < n else None,
                    extrapolate_to=extrapolate_to)


# ------------------------------------------------------------------------------------------------
# shared-prompt:runs

def shared_prompt(n_runs: int, turns: int) -> Workload:
    """``n_runs`` runs, each starting with the same ~12 KB system prompt and ~6 KB tool schema, then
    a user task and ``turns`` checkpoints of 2 messages of its own."""
    rng = random.Random(SEED)
    tools = [{"type": "function", "function": {
        "name": f"tool_{k}", "description": _text(rng, 300),
        "parameters": {"type": "object", "properties": {f"arg{j}": {"type": "string", "description": _text(rng, 60)}
                                                         for j in range(3)}, "required": ["arg0"]}}}
        for k in range(12)]
    system = {"role": "system", "content": "You are an autonomous coding agent. " + _text(rng, 12000),
              "tools": tools}
    runs = []
    for r in range(n_runs):
        msgs = [system, {"role": "user", "content": f"Task {r}: " + _text(random.Random(SEED + r), 600)}]
        cps = []
        for i in range(turns):
            msgs = msgs + _latency_turn(SEED + 7919 * (r + 1), i)
            cps.append(msgs)
        runs.append(Run(f"run-{r:03d}", cps))
    finals = "[" + ", ".join(json.dumps(r.checkpoints[-1], ensure_ascii=False) for r in runs) + "]"
    lb = _zstd19(finals.encode())
    return Workload(f"shared-prompt:{n_runs}", "shared-prompt", runs, lb,
                    f"zstd-{LB_LEVEL} of every run's final history in one frame (the shared prompt counted once)",
                    f"{n_runs} runs x {turns} checkpoints, one shared system prompt + tool schema "
                    f"({len(json.dumps(system)) / 1000:.1f} kB)")


# ------------------------------------------------------------------------------------------------
# state:image

IMAGE_W, IMAGE_H = 640, 480


def _base_image(rng: random.Random) -> bytearray:
    """A synthetic 'screenshot': flat panels and rows of text-like dark pixels, raw RGB (3 B/pixel)."""
    w, h = IMAGE_W, IMAGE_H
    img = bytearray(bytes((236, 236, 240)) * (w * h))
    for _ in range(12):  # panels
        x0, y0 = rng.randrange(w - 100), rng.randrange(h - 60)
        x1, y1 = min(w, x0 + rng.randrange(60, 300)), min(h, y0 + rng.randrange(30, 200))
        col = bytes(rng.randrange(150, 256) for _ in range(3))
        for y in range(y0, y1):
            img[3 * (y * w + x0):3 * (y * w + x1)] = col * (x1 - x0)
    for y in range(8, h - 8, 14):  # text lines: runs of dark glyph pixels
        x = 10
        while x < w - 20:
            word = rng.randrange(3, 40)
            for yy in range(y, y + 7):
                row = bytearray()
                for _ in range(word):
                    row += bytes((30, 30, 40)) if rng.random() < 0.45 else bytes((236, 236, 240))
                img[3 * (yy * w + x):3 * (yy * w + x + word)] = row[:3 * max(0, min(word, w - x))]
            x += word + rng.randrange(4, 12)
    return img


def image_state(steps: int) -> Workload:
    """One run of ``steps`` checkpoints; the session state holds a 640x480 RGB image (921,600 raw
    bytes, 1.23 MB as base64) of which one 32x24 rectangle changes per step (a cursor / a widget),
    beside 2 small messages per step."""
    rng = random.Random(SEED)
    img = _base_image(rng)
    patches = bytearray()
    msgs = _latency_prelude(SEED + 1)
    cps, states = [], []
    for i in range(steps):
        if i:
            x0, y0 = rng.randrange(IMAGE_W - 32), rng.randrange(IMAGE_H - 24)
            col = bytes(rng.randrange(256) for _ in range(3))
            for y in range(y0, y0 + 24):
                off = 3 * (y * IMAGE_W + x0)
                img[off:off + 96] = col * 32
                patches += (y * IMAGE_W + x0).to_bytes(4, "little") + col
        states.append({"cwd": "/workspace", "step": i,
                       "screenshot": {"format": "rgb24", "width": IMAGE_W, "height": IMAGE_H,
                                      "data_b64": base64.b64encode(bytes(img)).decode("ascii")}})
        msgs = msgs + _latency_turn(SEED + 3, i)
        cps.append(msgs)
    runs = [Run("image-run", cps, states)]
    first = base64.b64decode(states[0]["screenshot"]["data_b64"])
    lb = message_lb(runs) + _zstd19(first + bytes(patches))
    return Workload("state:image", "state", runs, lb,
                    f"zstd-{LB_LEVEL} of the final history + zstd-{LB_LEVEL} of (first image's raw pixels + "
                    "each step's change: offset and colour)",
                    f"1 run, {steps} checkpoints; session state: a {IMAGE_W}x{IMAGE_H} RGB image "
                    f"({len(states[0]['screenshot']['data_b64']) / 1e6:.2f} MB base64), a 32x24 rectangle "
                    "changes per step")


def size_stats(sizes: list) -> dict:
    """Mean/median/max of message sizes (bytes), for the report."""
    if not sizes:
        return {}
    return {"messages": len(sizes), "mean": statistics.mean(sizes), "median": statistics.median(sizes),
            "max": max(sizes)}
