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

Exit status: 0 if every restore matched and both targets are met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import zstandard  # noqa: E402

import snapstore  # noqa: E402
from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import InvalidInputError  # noqa: E402
from snapstore.format import keys  # noqa: E402
from snapstore.format.manifest import FORMAT_VERSION, RepoConfig  # noqa: E402
from snapstore.format.pack import ENTRY_TYPES, T_CHUNK, Pack  # noqa: E402
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
                if ts and ts == {T_CHUNK}:
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
    settings = {k: getattr(mgr.repo.config, k) for k in RepoConfig._SETTINGS}
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


def _git_commit() -> str:
    try:
        r = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=5)
        c = r.stdout.strip()
        d = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "snapstore"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
        return c + (" (+ uncommitted changes in snapstore/)" if d else "")
    except Exception:
        return "unknown"


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="directory of trajectory files (default: %(default)s)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--full-check", action="store_true", help="restore and compare every checkpoint")
    ap.add_argument("--only", metavar="SUBSTR", action="append", help="only files whose name contains SUBSTR")
    ap.add_argument("--keep", metavar="DIR", help="write the repositories under DIR and keep them")
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
    t0 = time.perf_counter()
    try:
        for p in files:
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
    if not results:
        print("no file could be replayed", file=sys.stderr)
        return 2
    env = {"snapstore_version": snapstore.__version__, "format_version": FORMAT_VERSION, "commit": _git_commit(),
           "python": platform.python_version(), "zstandard": zstandard.__version__, "fsync": False,
           "settings": results[0]["settings"], "data": str(data.resolve()), "full_check": args.full_check,
           "lb": f"zstd-{LB_LEVEL}"}
    summary = print_report(results, skipped, env, args.full_check)
    print(f"\ntotal time {time.perf_counter() - t0:.1f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "files": results, "summary": summary, "skipped": skipped}, f, indent=1)
        print(f"results written to {args.json}")
    ok = summary["pass_median"] and summary["pass_all_6lb"] and not summary["restore_failures"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
