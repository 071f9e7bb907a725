"""Storage benchmark: replay real agent trajectories into snapstore and compare bytes to a lower bound.

Run (from the repository root)::

    python benchmarks/storage.py                       # every file in ../shared/data/trajectories
    python benchmarks/storage.py --data DIR --full-check --json results.json

What it does, per trajectory file (``snapstore.importers.load_trajectory``):

* a fresh local repository (``LocalStore`` on a temp dir, **fsync off**: this benchmark measures
  bytes, not durability cost), one run per conversation, one ``CheckpointManager.save`` per
  checkpoint (turn), one warm manager for the whole file;
* **naive** bytes: the sum over checkpoints of ``len(json.dumps(messages, ensure_ascii=False).encode())``
  (one JSON file per checkpoint);
* **stored** bytes: every object in the repository after the replay (``config`` included), split into
  *chunk payload* (the compressed data blocks of the packs: blocks whose entries are all chunks ``c``,
  found by parsing every pack with ``snapstore.format.pack.Pack.parse``) and *metadata* (everything
  else: manifests, index records, pack meta blocks holding tree nodes / spine states / pieces lists,
  pack headers and framing, config); objects written = PUT requests made by the replay;
* the lower bound **LB**: the sum over the file's conversations of the zstd-19 size of the
  conversation's final history (``json.dumps(messages, ensure_ascii=False)`` as UTF-8); for a
  rewritten history (some checkpoint is not a prefix of the last one, e.g. SWE-agent function-calling
  files) the distinct messages (by exact JSON) in order of first appearance;
* budgets ``3*LB + 512*ckpts`` (target: the median over files of stored / this budget <= 1) and
  ``6*LB + 1024*ckpts`` (target: every file fits);
* a restore check with a fresh manager (no shared cache): the last checkpoint of every conversation
  (``latest`` and ``get``), or every checkpoint with ``--full-check``; compared as exact JSON
  (key order, types, unicode) and by value.

Also reported: write amplification (bytes uploaded by the replay / bytes stored at the end: format
2's tiered compaction rewrites each byte about log4(saves) times) and disk usage (``du``: file
system blocks, beside the object bytes).

Session-state workloads (``--state-only`` runs just these, ``--no-state`` skips them; see
docs/format.md §7):

* **one key**: ``--state-saves`` (300) saves of a 400 KB state (a base64 image of 300,000 random
  bytes, a few small keys, a step counter that changes at every save); reports the bytes stored per
  save after the first (target: at most 4,000) and what a save uploads (tier merges included);
* **whole agent state**: the first conversation of each trajectory file saved twice into fresh
  repositories, as messages and as ``session_state={"messages": history, "step": i}`` (growing
  every step, no messages); target: stored(state) <= 1.5 x stored(messages) for every file;
* **read amplification**: for both, a cold ``latest()`` (fresh manager) reads what it GETs, the
  config left out, against the checkpoint's own compressed bytes (every object but the config of a
  fresh repository holding only that checkpoint); target: at most 2x;
* **rewritten key** (no target, it shows the known limit): one 50 KB key rewritten whole at each of
  100 saves: every version stays restorable and lives in the run's segments, which a cold read
  fetches whole.

Exit status: 0 if every restore matched and every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
sys.path.insert(0, str(REPO_ROOT))

import zstandard  # noqa: E402

import snapstore  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import InvalidInputError  # noqa: E402
from snapstore.format import keys  # noqa: E402
from snapstore.format.config import FORMAT_VERSION, RepoConfig  # noqa: E402
from snapstore.format.pack import ENTRY_TYPES, T_CHUNK, T_HOLE, Pack  # noqa: E402
from snapstore.importers import load_trajectory  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "trajectories"
LB_LEVEL = 19


# ------------------------------------------------------------------------------------------------
# the lower bound and naive size

class _Enc:
    """Per-message ``json.dumps(m, ensure_ascii=False)`` cache keyed by object identity.

    The importers share message objects between the checkpoints of a conversation; the conversation
    keeps them alive, so ids are stable while the cache lives.
    """

    def __init__(self):
        self._c: dict[int, tuple[object, str, int]] = {}

    def text(self, m) -> str:
        e = self._c.get(id(m))
        if e is None or e[0] is not m:
            s = json.dumps(m, ensure_ascii=False)
            e = self._c[id(m)] = (m, s, len(s.encode("utf-8")))
        return e[1]

    def nbytes(self, m) -> int:
        self.text(m)
        return self._c[id(m)][2]

    def list_bytes(self, msgs: list) -> int:
        """``len(json.dumps(msgs, ensure_ascii=False).encode())`` without re-encoding shared messages."""
        if not msgs:
            return 2
        return 2 + sum(self.nbytes(m) for m in msgs) + 2 * (len(msgs) - 1)


def conversation_lb(checkpoints: list[list], enc: _Enc) -> tuple[int, bool, int]:
    """Return ``(zstd-19 bytes, rewritten, distinct messages)`` for one conversation."""
    if not checkpoints:
        return 0, False, 0
    last = [enc.text(m) for m in checkpoints[-1]]
    rewritten = False
    for cp in checkpoints[:-1]:
        if len(cp) > len(last) or any(enc.text(m) != last[i] for i, m in enumerate(cp)):
            rewritten = True
            break
    if rewritten:
        seen: set[str] = set()
        parts: list[str] = []
        for cp in checkpoints:
            for m in cp:
                t = enc.text(m)
                if t not in seen:
                    seen.add(t)
                    parts.append(t)
    else:
        parts = last
    text = "[" + ", ".join(parts) + "]"  # == json.dumps(list, ensure_ascii=False)
    z = zstandard.ZstdCompressor(level=LB_LEVEL).compress(text.encode("utf-8"))
    return len(z), rewritten, len(parts)


# ------------------------------------------------------------------------------------------------
# walking a repository

def _disk_bytes(root) -> int:
    """Disk blocks the repository directory's files occupy, in bytes (``st_blocks * 512``, as ``du``)."""
    import os
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def walk_repo(store: LocalStore) -> dict:
    """Classify every object's bytes. Returns a dict of byte counts and object counts."""
    out = {"objects": 0, "total": 0, "chunk_payload": 0, "pack_meta_blocks": 0, "pack_framing": 0,
           "manifests": 0, "index_records": 0, "config": 0, "other": 0, "packs": 0, "manifest_count": 0,
           "index_count": 0, "mixed_blocks": 0, "entries": {}}
    for info in store.list(""):
        out["objects"] += 1
        out["total"] += info.size
        k = info.key
        if k == keys.CONFIG:
            out["config"] += info.size
        elif k.startswith(keys.PACKS):
            pid = keys.pack_id_from_key(k)
            pack = Pack.parse(k, store.get(k), pid)
            out["packs"] += 1
            types_by_block: dict[int, set] = {}
            for (t, _), e in pack.entries.items():
                types_by_block.setdefault(e.block, set()).add(t)
                name = ENTRY_TYPES.get(t, chr(t))
                out["entries"][name] = out["entries"].get(name, 0) + 1
            blocks_total = 0
            for bi, b in enumerate(pack.blocks):
                blocks_total += b.clen
                ts = types_by_block.get(bi, set())
                if ts and (ts == {T_CHUNK} or (b.array and ts <= {T_CHUNK, T_HOLE})):  # holes: 0 bytes
                    out["chunk_payload"] += b.clen
                else:
                    if T_CHUNK in ts:
                        out["mixed_blocks"] += 1
                    out["pack_meta_blocks"] += b.clen
            out["pack_framing"] += info.size - blocks_total
        elif k.startswith(keys.RUNS) and "/m/" in k:
            out["manifests"] += info.size
            out["manifest_count"] += 1
        elif k.startswith(keys.RUNS) and "/c/" in k:
            out["index_records"] += info.size
            out["index_count"] += 1
        else:
            out["other"] += info.size
    out["metadata"] = out["total"] - out["chunk_payload"]
    return out


# ------------------------------------------------------------------------------------------------
# one file

def _same(a, b) -> bool:
    return a == b and json.dumps(a, ensure_ascii=False) == json.dumps(b, ensure_ascii=False)


def run_file(path: Path, workdir: Path, full_check: bool) -> dict:
    t0 = time.perf_counter()
    fmt, convs = load_trajectory(path)
    t_load = time.perf_counter() - t0
    enc = _Enc()
    repo_dir = workdir / (path.name + ".repo")
    store = LocalStore(repo_dir, fsync=False)
    mgr = CheckpointManager(store)
    ckpts = 0
    naive = 0
    lb = 0
    rewritten_convs = 0
    saved: list[tuple[str, list, list]] = []  # (run id, checkpoint ids, checkpoints)
    t_save = 0.0
    save_times: list[float] = []
    for conv in convs:
        if not conv.checkpoints:
            continue
        run_id = conv.name or "run"
        cids = []
        for cp in conv.checkpoints:
            naive += enc.list_bytes(cp)
            s = time.perf_counter()
            cids.append(mgr.save(run_id, cp))
            dt = time.perf_counter() - s
            t_save += dt
            save_times.append(dt)
            ckpts += 1
        c_lb, rw, _ = conversation_lb(conv.checkpoints, enc)
        lb += c_lb
        rewritten_convs += rw
        saved.append((run_id, cids, conv.checkpoints))
    puts = dict(store.stats.counts)
    bytes_up = store.stats.bytes_up
    settings = {k: getattr(mgr.repo.config, k) for k in RepoConfig.SETTINGS}
    mgr.close()
    # sanity: the cached naive size equals the definition on one checkpoint
    if saved:
        cp = saved[-1][2][-1]
        assert enc.list_bytes(cp) == len(json.dumps(cp, ensure_ascii=False).encode()), "naive size bug"

    walked = walk_repo(LocalStore(repo_dir, fsync=False))
    disk = _disk_bytes(repo_dir)

    # restore check with a fresh manager (its own Repository and pack cache)
    t1 = time.perf_counter()
    checked = 0
    mismatches = []
    reader = CheckpointManager(LocalStore(repo_dir, fsync=False), create=False)
    for run_id, cids, cps in saved:
        idx = range(len(cids)) if full_check else [len(cids) - 1]
        for i in idx:
            got = reader.get(run_id, cids[i])
            checked += 1
            if not _same(got.messages, cps[i]):
                mismatches.append(f"{run_id}#{i}")
        latest = reader.latest(run_id)
        checked += 1
        if latest is None or latest.id != cids[-1] or not _same(latest.messages, cps[-1]):
            mismatches.append(f"{run_id}#latest")
    reader.close()
    t_check = time.perf_counter() - t1

    stored = walked["total"]
    budget3 = 3 * lb + 512 * ckpts
    budget6 = 6 * lb + 1024 * ckpts
    return {
        "file": path.name, "format": fmt, "conversations": len(saved), "rewritten_conversations": rewritten_convs,
        "checkpoints": ckpts, "naive_bytes": naive, "stored_bytes": stored,
        "chunk_payload_bytes": walked["chunk_payload"], "metadata_bytes": walked["metadata"],
        "metadata_breakdown": {k: walked[k] for k in ("manifests", "index_records", "pack_meta_blocks",
                                                      "pack_framing", "config", "other")},
        "objects_in_repo": walked["objects"], "objects_written": puts["PUT"], "packs": walked["packs"],
        "manifests": walked["manifest_count"], "index_records": walked["index_count"],
        "pack_entries": walked["entries"], "mixed_blocks": walked["mixed_blocks"],
        "requests": puts, "bytes_up": bytes_up,
        "write_amplification": bytes_up / stored if stored else None, "disk_bytes": disk,
        "lb_bytes": lb, "stored_over_lb": stored / lb if lb else None, "naive_over_lb": naive / lb if lb else None,
        "budget_3lb": budget3, "budget_6lb": budget6,
        "stored_over_budget_3lb": stored / budget3 if budget3 else None,
        "pass_3lb": stored <= budget3, "pass_6lb": stored <= budget6,
        "restores_checked": checked, "restore_mismatches": mismatches,
        "seconds": {"load": t_load, "save_total": t_save,
                    "save_median_ms": 1e3 * statistics.median(save_times) if save_times else None,
                    "save_max_ms": 1e3 * max(save_times) if save_times else None, "restore_check": t_check},
        "settings": settings,
    }


# ------------------------------------------------------------------------------------------------
# output

def _kb(n: int) -> str:
    return f"{n / 1000:,.1f}"


_git_commit = _lib.commit_label


def print_report(results: list[dict], skipped: list, env: dict, full_check: bool) -> dict:
    print("snapstore storage benchmark")
    print(f"  snapstore {env['snapstore_version']} (format v{env['format_version']}), commit {env['commit']}; "
          f"python {env['python']}, zstandard {env['zstandard']}")
    print(f"  store: LocalStore on a temp dir, fsync=OFF (bytes only; durability not measured)")
    print(f"  repository settings (defaults): {env['settings']}")
    print(f"  one warm CheckpointManager per file, one run per conversation, one save per checkpoint")
    print(f"  LB = zstd-{LB_LEVEL} of each conversation's final history (distinct messages if rewritten)")
    print(f"  sizes in kB (1 kB = 1000 bytes)")
    print()
    hdr = (f"{'file':<45} {'ckpts':>5} {'naive':>9} {'stored':>8} {'chunks':>8} {'meta':>7} {'objs':>5} "
           f"{'LB':>7} {'st/LB':>6} {'nv/LB':>7} {'3LB+512c':>8} {'':>4} {'6LB+1Kc':>8} {'':>4} {'st/b3':>5}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        print(f"{r['file']:<45} {r['checkpoints']:>5} {_kb(r['naive_bytes']):>9} {_kb(r['stored_bytes']):>8} "
              f"{_kb(r['chunk_payload_bytes']):>8} {_kb(r['metadata_bytes']):>7} {r['objects_written']:>5} "
              f"{_kb(r['lb_bytes']):>7} {r['stored_over_lb']:>6.2f} {r['naive_over_lb']:>7.1f} "
              f"{_kb(r['budget_3lb']):>8} {'ok' if r['pass_3lb'] else 'FAIL':>4} "
              f"{_kb(r['budget_6lb']):>8} {'ok' if r['pass_6lb'] else 'FAIL':>4} {r['stored_over_budget_3lb']:>5.2f}")
    tot = {k: sum(r[k] for r in results) for k in ("checkpoints", "naive_bytes", "stored_bytes",
                                                    "chunk_payload_bytes", "metadata_bytes", "objects_written",
                                                    "lb_bytes", "budget_3lb", "budget_6lb")}
    print("-" * len(hdr))
    print(f"{'TOTAL':<45} {tot['checkpoints']:>5} {_kb(tot['naive_bytes']):>9} {_kb(tot['stored_bytes']):>8} "
          f"{_kb(tot['chunk_payload_bytes']):>8} {_kb(tot['metadata_bytes']):>7} {tot['objects_written']:>5} "
          f"{_kb(tot['lb_bytes']):>7} {tot['stored_bytes'] / tot['lb_bytes']:>6.2f} "
          f"{tot['naive_bytes'] / tot['lb_bytes']:>7.1f} {_kb(tot['budget_3lb']):>8} {'':>4} "
          f"{_kb(tot['budget_6lb']):>8}")
    print()
    print("columns: naive = JSON per checkpoint; stored = all objects in the repo = chunks (compressed data "
          "blocks) + meta;\n         objs = objects written (PUTs); st/b3 = stored / (3*LB + 512*ckpts)")
    print()
    print("metadata breakdown (kB) and per-checkpoint costs")
    hdr2 = (f"{'file':<45} {'convs':>5} {'rw':>3} {'manif':>7} {'index':>6} {'nodes/st':>8} {'framing':>7} "
            f"{'config':>6} {'meta/ck':>7} {'B/ck':>7} {'packs':>5} {'save ms':>7} {'max ms':>7}")
    print(hdr2)
    print("-" * len(hdr2))
    for r in results:
        b = r["metadata_breakdown"]
        print(f"{r['file']:<45} {r['conversations']:>5} {r['rewritten_conversations']:>3} {_kb(b['manifests']):>7} "
              f"{_kb(b['index_records']):>6} {_kb(b['pack_meta_blocks']):>8} {_kb(b['pack_framing']):>7} "
              f"{_kb(b['config'] + b['other']):>6} {r['metadata_bytes'] / r['checkpoints']:>7.0f} "
              f"{r['stored_bytes'] / r['checkpoints']:>7.0f} {r['packs']:>5} "
              f"{r['seconds']['save_median_ms']:>7.2f} {r['seconds']['save_max_ms']:>7.1f}")
    print("(rw = conversations whose history is rewritten; nodes/st = pack meta blocks: tree nodes, spine "
          "states, pieces lists;\n framing = pack headers/entry tables/trailers; meta/ck, B/ck = bytes per "
          "checkpoint; save ms = median/max save time, fsync off)")
    print()

    print("write amplification (bytes written / bytes stored at the end) and disk usage (du, 512-byte blocks)")
    hdr3 = f"{'file':<45} {'written':>9} {'stored':>8} {'w/st':>5} {'disk':>8} {'disk/st':>7} {'objects':>7}"
    print(hdr3)
    print("-" * len(hdr3))
    for r in results:
        print(f"{r['file']:<45} {_kb(r['bytes_up']):>9} {_kb(r['stored_bytes']):>8} {r['write_amplification']:>5.2f} "
              f"{_kb(r['disk_bytes']):>8} {r['disk_bytes'] / r['stored_bytes']:>7.2f} {r['objects_in_repo']:>7}")
    tw, ts, td = (sum(r[k] for r in results) for k in ("bytes_up", "stored_bytes", "disk_bytes"))
    print("-" * len(hdr3))
    print(f"{'TOTAL':<45} {_kb(tw):>9} {_kb(ts):>8} {tw / ts:>5.2f} {_kb(td):>8} {td / ts:>7.2f} "
          f"{sum(r['objects_in_repo'] for r in results):>7}")
    print()

    ratios = [r["stored_over_budget_3lb"] for r in results]
    med = statistics.median(ratios) if ratios else float("nan")
    fails6 = [r["file"] for r in results if not r["pass_6lb"]]
    fails3 = [r["file"] for r in results if not r["pass_3lb"]]
    restore_bad = [(r["file"], r["restore_mismatches"]) for r in results if r["restore_mismatches"]]
    checked = sum(r["restores_checked"] for r in results)
    ok_median = med <= 1.0
    ok_all6 = not fails6
    print("targets")
    print(f"  median over files of stored / (3*LB + 512*ckpts) = {med:.3f}  (target <= 1)   "
          f"{'PASS' if ok_median else 'FAIL'}")
    print(f"  files over 3*LB + 512*ckpts: {len(fails3)}/{len(results)} {fails3 if fails3 else ''}")
    print(f"  every file stored <= 6*LB + 1024*ckpts: {len(results) - len(fails6)}/{len(results)} fit   "
          f"{'PASS' if ok_all6 else 'FAIL ' + str(fails6)}")
    print(f"  restores checked ({'every checkpoint' if full_check else 'last checkpoint of every conversation'}"
          f" + latest()): {checked}, mismatches: {sum(len(m) for _, m in restore_bad)}   "
          f"{'PASS' if not restore_bad else 'FAIL ' + str(restore_bad)[:500]}")
    if any(r["mixed_blocks"] for r in results):
        print("  WARNING: some pack blocks mix chunk and non-chunk entries; counted as metadata")
    for name, why in skipped:
        print(f"  skipped {name}: {why}")
    return {"median_stored_over_budget_3lb": med, "pass_median": ok_median, "pass_all_6lb": ok_all6,
            "files_over_3lb": fails3, "files_over_6lb": fails6, "restores_checked": checked,
            "restore_failures": restore_bad, "totals": tot}


# ------------------------------------------------------------------------------------------------
# session-state workloads (docs/format.md §7)

STATE_PER_SAVE_MAX = 4000
"""Target: bytes per save of a 400 KB state with one key changing per save."""
STATE_VS_MESSAGES_MAX = 1.5
"""Target: a whole agent state kept in ``session_state`` stores within this factor of the same
content saved as messages."""
READ_AMP_MAX = 2.0
"""Target: a cold ``latest()`` reads at most this factor of its own compressed bytes."""


def _stored(store) -> int:
    return sum(i.size for i in store.list(""))


def _own_bytes(messages: list, state) -> int:
    """The compressed size of one checkpoint on its own: every object of a fresh repository holding
    only it, without ``config`` (its pack(s) and manifest)."""
    from snapstore.stores.memory import MemoryStore
    store = MemoryStore()
    mgr = CheckpointManager(store)
    mgr.save("own", messages, session_state=state)
    mgr.close()
    return sum(i.size for i in store.list("") if i.key != keys.CONFIG)


def cold_latest_read(root, run_id: str, messages: list, state) -> dict:
    """Read the latest checkpoint of ``run_id`` with a fresh manager (new process state: no cache)
    and compare the bytes it GETs (``config`` left out) with the checkpoint's own compressed bytes
    (:func:`_own_bytes`). Raises AssertionError if what it reads differs from what was saved."""
    cfg = next(i.size for i in LocalStore(root, fsync=False).list(keys.CONFIG) if i.key == keys.CONFIG)
    store = LocalStore(root, fsync=False)
    reader = CheckpointManager(store, create=False)
    base = store.stats.snapshot()
    cp = reader.latest(run_id)  # opens the repository too (one GET of the config)
    used = store.stats.since(base)
    reader.close()
    assert cp is not None and _same(cp.messages, messages) and _same(cp.session_state, state), "restore mismatch"
    own = _own_bytes(messages, state)
    read = used.bytes_down - cfg
    return {"read_bytes": read, "own_bytes": own, "read_amplification": read / own if own else None,
            "requests": dict(used.counts)}


def one_key_states(saves: int, image_bytes: int = 300_000, seed: int = 7):
    """The states of the one-key workload: a base64 image (``image_bytes`` random bytes, so about
    4/3 of that as text, incompressible), a few small keys, and a step counter that changes at every
    save (the only change)."""
    import base64
    import random
    rng = random.Random(seed)
    img = base64.b64encode(rng.randbytes(image_bytes)).decode()
    for i in range(saves):
        yield {"cwd": "/repo", "image": img, "model": "gpt-4o", "step": i, "todo": ["read the file", "fix the bug"]}


def run_state_one_key(workdir: Path, saves: int = 300, image_bytes: int = 300_000) -> dict:
    """Save ``saves`` checkpoints of :func:`one_key_states` (two small messages each) into a fresh
    local repository (fsync off); return the bytes stored per save after the first (the target is
    :data:`STATE_PER_SAVE_MAX`), what the first save stored, bytes uploaded per save, and the cold
    ``latest()`` read (:func:`cold_latest_read`)."""
    root = workdir / "state-one-key.repo"
    store = LocalStore(root, fsync=False)
    mgr = CheckpointManager(store)
    msgs = [{"role": "user", "content": "Look at the screenshot and continue."}]
    first = None
    state = None
    for i, state in enumerate(one_key_states(saves, image_bytes)):
        mgr.save("img", msgs, session_state=state)
        if i == 0:
            first = _stored(store)
            up0 = store.stats.bytes_up
    total = _stored(store)
    up = store.stats.bytes_up - up0
    mgr.close()
    state_bytes = len(json.dumps(state, separators=(",", ":")).encode())
    out = {"workload": "one key", "saves": saves, "state_bytes": state_bytes, "first_save_bytes": first,
           "stored_bytes": total, "per_save_bytes": (total - first) / (saves - 1),
           "uploaded_per_save_bytes": up / (saves - 1),
           "naive_state_bytes": state_bytes * saves}
    out.update(cold_latest_read(root, "img", msgs, state))
    out["pass"] = out["per_save_bytes"] <= STATE_PER_SAVE_MAX
    return out


def run_state_whole_agent(path: Path, workdir: Path, limit: int | None = None) -> dict:
    """Replay the first conversation of trajectory ``path`` twice into fresh local repositories:
    once as messages (``save(run, history)``), once as a whole agent state
    (``save(run, [], session_state={"messages": history, "step": i})``, the state growing every
    step); compare the bytes stored (target: state / messages <= :data:`STATE_VS_MESSAGES_MAX`)
    and the cold ``latest()`` reads of both."""
    _fmt, convs = load_trajectory(path)
    conv = next(c for c in convs if c.checkpoints)
    cps = conv.checkpoints[:limit] if limit else conv.checkpoints
    out = {"workload": "whole agent state", "file": path.name, "checkpoints": len(cps),
           "history_bytes": len(json.dumps(cps[-1], separators=(",", ":"), ensure_ascii=False).encode()),
           "rewritten": conversation_lb(cps, _Enc())[1]}
    for mode in ("messages", "state"):
        root = workdir / f"{path.name}.{mode}.repo"
        store = LocalStore(root, fsync=False)
        mgr = CheckpointManager(store)
        t = time.perf_counter()
        for i, cp in enumerate(cps):
            if mode == "messages":
                mgr.save("run", cp)
            else:
                mgr.save("run", [], session_state={"messages": cp, "step": i})
        out[f"{mode}_seconds"] = time.perf_counter() - t
        out[f"{mode}_stored_bytes"] = _stored(store)
        mgr.close()
        msgs, st = (cps[-1], None) if mode == "messages" else ([], {"messages": cps[-1], "step": len(cps) - 1})
        r = cold_latest_read(root, "run", msgs, st)
        out[f"{mode}_read_bytes"], out[f"{mode}_own_bytes"] = r["read_bytes"], r["own_bytes"]
        out[f"{mode}_read_amplification"] = r["read_amplification"]
        shutil.rmtree(root, ignore_errors=True)
    out["state_over_messages"] = out["state_stored_bytes"] / out["messages_stored_bytes"]
    out["pass"] = out["state_over_messages"] <= STATE_VS_MESSAGES_MAX
    return out


def run_state_rewritten_key(workdir: Path, saves: int = 100, key_bytes: int = 50_000) -> dict:
    """The worst case for reads: a state whose one large key (``key_bytes`` of text) is rewritten
    whole at every save. Every version is kept (every checkpoint stays restorable), so the run's
    segments hold them all; reports the cold ``latest()`` read against the checkpoint's own bytes."""
    import random
    rng = random.Random(3)
    words = "the a to of and in is that for it file function test error value return code fix".split()
    root = workdir / "state-rewrite.repo"
    store = LocalStore(root, fsync=False)
    mgr = CheckpointManager(store)
    state = None
    for i in range(saves):
        state = {"step": i, "scratchpad": " ".join(rng.choice(words) for _ in range(key_bytes // 5))}
        mgr.save("pad", [], session_state=state)
    stored = _stored(store)
    mgr.close()
    out = {"workload": "rewritten key", "saves": saves, "key_bytes": key_bytes, "stored_bytes": stored}
    out.update(cold_latest_read(root, "pad", [], state))
    shutil.rmtree(root, ignore_errors=True)
    return out


def run_state_workloads(files: list[Path], workdir: Path, saves: int, t0: float) -> tuple:
    """Run the three session-state workloads: one key (``saves`` saves), the whole agent state of
    the first conversation of every file in ``files``, and the rewritten key; returns their results
    for :func:`print_state_report`."""
    one = run_state_one_key(workdir, saves=saves)
    print(f"  [{time.perf_counter() - t0:6.1f}s] session state, one key: {saves} saves", file=sys.stderr, flush=True)
    whole = []
    for p in files:
        try:
            whole.append(run_state_whole_agent(p, workdir))
        except (InvalidInputError, StopIteration):
            continue
        print(f"  [{time.perf_counter() - t0:6.1f}s] session state, whole agent: {p.name}", file=sys.stderr, flush=True)
    rewrite = run_state_rewritten_key(workdir)
    return one, whole, rewrite


def print_state_report(one: dict, whole: list[dict], rewrite: dict | None) -> dict:
    print(f"session-state workloads (docs/format.md §7; commit {_git_commit()}; LocalStore, fsync off; sizes in kB)")
    print(f"  one key: a {_kb(one['state_bytes'])} kB state (base64 image, a step counter that changes), "
          f"{one['saves']} saves: first save {_kb(one['first_save_bytes'])} kB, then "
          f"{one['per_save_bytes']:.0f} bytes per save (target <= {STATE_PER_SAVE_MAX})   "
          f"{'PASS' if one['pass'] else 'FAIL'}")
    print(f"           stored {_kb(one['stored_bytes'])} kB for {_kb(one['naive_state_bytes'])} kB of states; "
          f"uploaded {one['uploaded_per_save_bytes']:.0f} bytes per save (tier merges included); cold latest() "
          f"read {_kb(one['read_bytes'])} kB = {one['read_amplification']:.2f}x its own {_kb(one['own_bytes'])} kB")
    if whole:
        print("  whole agent state: the first conversation of each file kept in session_state "
              "({'messages': history, 'step': i}) vs the same histories saved as messages")
        hdr = (f"    {'file':<45} {'ckpts':>5} {'history':>8} {'as msgs':>8} {'as state':>8} {'st/msg':>6} "
               f"{'read amp msgs':>13} {'read amp state':>14}")
        print(hdr)
        for r in whole:
            print(f"    {r['file'] + (' (rw)' if r['rewritten'] else ''):<45} {r['checkpoints']:>5} {_kb(r['history_bytes']):>8} "
                  f"{_kb(r['messages_stored_bytes']):>8} {_kb(r['state_stored_bytes']):>8} "
                  f"{r['state_over_messages']:>6.2f} {r['messages_read_amplification']:>13.2f} "
                  f"{r['state_read_amplification']:>14.2f}")
        tm = sum(r["messages_stored_bytes"] for r in whole)
        ts = sum(r["state_stored_bytes"] for r in whole)
        worst = max(r["state_over_messages"] for r in whole)
        print(f"    {'TOTAL':<45} {sum(r['checkpoints'] for r in whole):>5} {'':>8} {_kb(tm):>8} {_kb(ts):>8} "
              f"{ts / tm:>6.2f}")
        print(f"  whole agent state: worst file {worst:.2f}x, total {ts / tm:.2f}x the messages "
              f"(target <= {STATE_VS_MESSAGES_MAX} per file)   {'PASS' if worst <= STATE_VS_MESSAGES_MAX else 'FAIL'}")
        amps = [r["state_read_amplification"] for r in whole if not r["rewritten"]] + [one["read_amplification"]]
        print(f"  cold latest() reads, one key and the histories that only grow: at most {max(amps):.2f}x their own "
              f"compressed bytes (target <= {READ_AMP_MAX})   {'PASS' if max(amps) <= READ_AMP_MAX else 'FAIL'}")
        rw = [r for r in whole if r["rewritten"]]
        if rw:
            print("  (rw) = a rewritten history (some checkpoint is not a prefix of the last): the run's segments also "
                  "hold what the rewrites dropped, as messages too; cold reads there: state "
                  f"{max(r['state_read_amplification'] for r in rw):.2f}x, messages "
                  f"{max(r['messages_read_amplification'] for r in rw):.2f}x (no target)")
    if rewrite:
        print(f"  rewritten key (not a target; the known limit): a {_kb(rewrite['key_bytes'])} kB key rewritten "
              f"at each of {rewrite['saves']} saves: stored {_kb(rewrite['stored_bytes'])} kB, cold latest() read "
              f"{_kb(rewrite['read_bytes'])} kB = {rewrite['read_amplification']:.1f}x its own "
              f"{_kb(rewrite['own_bytes'])} kB")
    ok = one["pass"] and all(r["pass"] for r in whole) and \
        max([r["state_read_amplification"] for r in whole if not r["rewritten"]] + [one["read_amplification"]]) <= READ_AMP_MAX
    return {"pass": ok}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="directory of trajectory files (default: %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--full-check", action="store_true", help="restore and compare every checkpoint")
    ap.add_argument("--only", metavar="SUBSTR", action="append", help="only files whose name contains SUBSTR")
    ap.add_argument("--keep", metavar="DIR", help="write the repositories under DIR and keep them")
    ap.add_argument("--state-only", action="store_true", help="run only the session-state workloads")
    ap.add_argument("--no-state", action="store_true", help="skip the session-state workloads")
    ap.add_argument("--state-saves", type=int, default=300, metavar="N",
                    help="saves of the one-key session-state workload (default: %(default)s)")
    args = ap.parse_args(argv)

    data = Path(args.data)
    files = sorted(p for p in data.iterdir() if p.is_file() and not p.name.endswith(".md"))
    if args.only:
        files = [p for p in files if any(s in p.name for s in args.only)]
    if not files:
        print(f"no trajectory files in {data}", file=sys.stderr)
        return 2
    if args.keep:
        workdir = Path(args.keep)
        workdir.mkdir(parents=True, exist_ok=True)
        cleanup = False
    else:
        workdir = Path(tempfile.mkdtemp(prefix="snapstore-storage-bench-"))
        cleanup = True
    results, skipped = [], []
    state = None
    t0 = time.perf_counter()
    try:
        if not args.no_state:
            state = run_state_workloads(files, workdir, args.state_saves, t0)
        for p in files if not args.state_only else ():
            try:
                r = run_file(p, workdir, args.full_check)
            except InvalidInputError as e:
                skipped.append((p.name, str(e)))
                continue
            results.append(r)
            print(f"  [{time.perf_counter() - t0:6.1f}s] {p.name}: {r['checkpoints']} checkpoints, "
                  f"save {r['seconds']['save_total']:.2f}s, check {r['seconds']['restore_check']:.2f}s",
                  file=sys.stderr, flush=True)
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.state_only:
        summary = print_state_report(*state)
        print(f"\ntotal time {time.perf_counter() - t0:.1f}s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"session_state": {"one_key": state[0], "whole_agent": state[1], "rewritten_key": state[2],
                                             "summary": summary}, "commit": _git_commit()}, f, indent=1)
        return 0 if summary["pass"] else 1
    if not results:
        print("no file could be replayed", file=sys.stderr)
        return 2
    env = {"snapstore_version": snapstore.__version__, "format_version": FORMAT_VERSION, "commit": _git_commit(),
           "python": platform.python_version(), "zstandard": zstandard.__version__, "fsync": False,
           "settings": results[0]["settings"], "data": str(data.resolve()), "full_check": args.full_check,
           "lb": f"zstd-{LB_LEVEL}"}
    summary = print_report(results, skipped, env, args.full_check)
    state_summary = None
    if state is not None:
        print()
        state_summary = print_state_report(*state)
    print(f"\ntotal time {time.perf_counter() - t0:.1f}s")
    if args.json:
        out = {"environment": env, "files": results, "summary": summary, "skipped": skipped}
        if state is not None:
            out["session_state"] = {"one_key": state[0], "whole_agent": state[1], "rewritten_key": state[2],
                                    "summary": state_summary}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"results written to {args.json}")
    ok = summary["pass_median"] and summary["pass_all_6lb"] and not summary["restore_failures"]
    if state_summary is not None:
        ok = ok and state_summary["pass"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
