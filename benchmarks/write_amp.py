"""Write amplification benchmark: where the bytes a run PUTs go, by object kind (issue 26 item 4).

Run (from the repository root)::

    python benchmarks/write_amp.py                              # 1,000 and 10,000 saves, S3 (moto HTTP) and a directory
    python benchmarks/write_amp.py --sizes 1000 --stores dir    # one size, one store
    python benchmarks/write_amp.py --compare eea7f20            # the same, also for commit eea7f20, side by side
    python benchmarks/write_amp.py --stores dir --fanout 8      # repositories created with seg_fanout 8
    python benchmarks/write_amp.py --stores s3 --seg-limit 46   # bounded segment lists (seg_limit 46)
    python benchmarks/write_amp.py --stores s3 --seg-limit 46 --seg-from 4   # the counter up to level 4, then bounded

Per store and size, one run of that many saves is written by one ``CheckpointManager`` into a fresh
repository: the message list of ``benchmarks/latency.py`` (a system prompt and a user task, then per
save an assistant tool call and a tool result of 1-2 KB each of seeded pseudo-random text), no GC.
Stores: ``s3`` is an :class:`~snapstore.stores.s3.S3Store` on moto's ``ThreadedMotoServer`` on
127.0.0.1 (real HTTP; the store's defaults, so what a user of ``s3://`` gets); ``dir`` is a local
directory (:class:`~snapstore.stores.local.LocalStore`, its defaults; fsync off to spare the shared
disk: it changes no byte written); ``sqlite`` a SQLite file.

Counted: the payload bytes of every write call the store receives (``put``, ``put_if_match``,
``write_batch``; a call that fails counts too: its bytes went over the wire), by the kind of key,
and afterwards the objects the repository holds, by kind (one ``list``). Kinds: ``pack L0`` (a save's
own pack), ``tier L1``..``tier L9`` (tier packs: the merges of §10, told apart by recording the
pack ids :func:`snapstore.repo.tiers.build_tier` returns and their level), ``manifest`` (a log record
of more than 1 byte), ``stub`` (0-byte manifests, §14), ``void`` (1 byte, §15), ``logseg L1..L3``
(§12), ``marker`` (run markers, §13), ``other`` (config, index and removal records, pins). The
write amplification is bytes PUT / bytes stored; target at 10,000 saves: at most 3x. Also printed:
how many segments the run's newest record lists (what a fresh ``latest()`` fetches, §10); what the
ratio would be with the manifests a stored log segment covers retired (§14, *Retired records*:
designed, not built; bytes PUT unchanged, bytes stored without them), and the same ratio were every
tier byte written only once (bytes PUT minus the tier bytes PUT beyond the tier packs stored):
about the least a merge policy that ends with few packs can write with today's per-save packs,
manifests and log segments, which are PUT whatever the policy.

``--compare REV``: the same measurement also for the snapstore package of git revision ``REV`` of
this checkout (``git archive`` into a temporary directory, run in a child process of this
interpreter with that directory first on ``sys.path``; this file drives both), printed beside the
working tree's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("pack L0", *(f"tier L{i}" for i in range(1, 10)), "manifest", "stub", "void",
         "logseg L1", "logseg L2", "logseg L3", "marker", "other")
LIMIT = 3.0


def key_kind(key: str, size: int, tiers: dict) -> str:
    """The kind of object ``key`` (below the repository prefix) holding ``size`` bytes; ``tiers``
    maps pack keys to their tier level (absent: a per-save pack)."""
    parts = key.split("/")
    if parts[0] == "packs":
        lv = tiers.get(key)
        return "pack L0" if lv is None else f"tier L{min(lv, 9)}"
    if parts[0] == "runmarks":
        return "marker"
    if parts[0] == "runs" and len(parts) >= 4:
        if parts[2] == "m":
            return "stub" if size == 0 else "void" if size == 1 else "manifest"
        if parts[2] == "l":
            return f"logseg L{parts[-1].rsplit('.', 1)[-1]}"
    return "other"


def covered_manifests(listed, tiers: dict) -> list:
    """``[objects, bytes]`` of the manifests (records of more than 1 byte) among ``listed`` (the
    repository's ObjectInfos) whose position a stored log segment of their run covers: what
    retiring covered records (docs/format.md §14, *Retired records*) would no longer store."""
    from snapstore.format.keys import seq_from_manifest_key
    from snapstore.format.logseg import parse_logseg_key, seg_lo

    ranges: dict = {}
    for o in listed:
        if key_kind(o.key, o.size, tiers).startswith("logseg"):
            hl = parse_logseg_key(o.key)
            if hl is not None:
                ranges.setdefault(o.key.split("/")[1], []).append((seg_lo(*hl), hl[0]))
    out = [0, 0]
    for o in listed:
        if key_kind(o.key, o.size, tiers) == "manifest":
            seq = seq_from_manifest_key(o.key)
            if any(lo <= seq <= hi for lo, hi in ranges.get(o.key.split("/")[1], ())):
                out[0] += 1
                out[1] += o.size
    return out


def counting(store, log: list):
    """Make ``store`` append ``(key, bytes)`` to ``log`` for each write call it receives (the
    outermost call only: a store's ``put`` may call its own ``put_if_match`` or the reverse)."""
    cls = type(store)
    depth = threading.local()

    def wrap(name, keys_of):
        orig = getattr(cls, name)

        def f(self, *a, **kw):
            outer = getattr(depth, "n", 0) == 0
            depth.n = getattr(depth, "n", 0) + 1
            try:
                if outer:
                    log.extend(keys_of(*a, **kw))
                return orig(self, *a, **kw)
            finally:
                depth.n -= 1
        return f

    ns = {"put": wrap("put", lambda key, data: [(key, len(data))]),
          "put_if_match": wrap("put_if_match", lambda key, data, etag: [(key, len(data))])}
    if hasattr(cls, "write_batch"):
        ns["write_batch"] = wrap("write_batch", lambda puts, *a, **kw: [(p.key, len(p.data)) for p in puts])
    store.__class__ = type("Counting" + cls.__name__, (cls,), ns)
    return store


def measure(store_kind: str, n: int, endpoint: str | None, fanout: int | None = None,
            seg_limit: int | None = None, seg_from: int | None = None) -> dict:
    """One run of ``n`` saves into a fresh repository of ``store_kind`` (``s3``, ``dir``,
    ``sqlite``), created with ``seg_fanout=fanout`` (None: the default); returns ``{"put": {kind: [writes, bytes]}, "stored": {kind: [objects, bytes]},
    "put_bytes", "stored_bytes", "amp", "seconds"}``."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.latency import prelude, turn
    from snapstore import CheckpointManager
    from snapstore.repo import tiers as tiers_mod
    from snapstore.format.keys import pack_key
    from snapstore.stores import open_store

    tiers: dict = {}
    orig_build = tiers_mod.build_tier

    def build(repo, inputs, level, *a, **kw):
        out = orig_build(repo, inputs, level, *a, **kw)
        tiers[pack_key(out[0])] = level
        return out
    tiers_mod.build_tier = build
    tmp = tempfile.mkdtemp(prefix="wamp-")
    try:
        if store_kind == "s3":
            import boto3
            bucket = f"wamp-{uuid.uuid4().hex[:8]}"
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
            store = open_store(f"s3://{bucket}/bench", endpoint_url=endpoint)
        elif store_kind == "dir":
            store = open_store(os.path.join(tmp, "repo"), fsync=False)
        else:
            store = open_store(os.path.join(tmp, "repo.db"))
        log: list = []
        counting(store, log)
        settings = {k: v for k, v in (("seg_fanout", fanout), ("seg_limit", seg_limit), ("seg_from", seg_from))
                    if v is not None}
        if settings:
            from snapstore.repo.repository import Repository
            Repository.init(store, **settings)
        mgr = CheckpointManager(store)
        msgs = prelude()
        t0 = time.perf_counter()
        for i in range(n):
            msgs = msgs + turn(7, i)
            mgr.save("bench-run", msgs, step=i)
        secs = time.perf_counter() - t0
        put = {k: [0, 0] for k in KINDS}
        sizes = {}
        for key, size in log:
            sizes[key] = size
            k = put[key_kind(key, size, tiers)]
            k[0] += 1
            k[1] += size
        stored = {k: [0, 0] for k in KINDS}
        listed = list(store.list(""))
        for o in listed:
            k = stored[key_kind(o.key, o.size, tiers)]
            k[0] += 1
            k[1] += o.size
        retired = covered_manifests(listed, tiers)
        assert mgr.latest("bench-run").messages == msgs
        segs = len(mgr.repo.head(mgr.repo.run_key("bench-run")).segment_list())
        mgr.close()
        store.close()
        pb = sum(v[1] for v in put.values())
        sb = sum(v[1] for v in stored.values())
        tier_put = sum(v[1] for k, v in put.items() if k.startswith("tier"))
        tier_stored = sum(v[1] for k, v in stored.items() if k.startswith("tier"))
        sr = sb - retired[1]
        return {"put": put, "stored": stored, "put_bytes": pb, "stored_bytes": sb, "segments": segs,
                "objects": sum(v[0] for v in stored.values()), "amp": pb / sb, "seconds": secs,
                "retired": retired, "amp_retired": pb / sr,
                "amp_floor_retired": (pb - tier_put + tier_stored) / sr}
    finally:
        tiers_mod.build_tier = orig_build
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(stores: list, sizes: list, fanout: int | None = None, seg_limit: int | None = None,
            seg_from: int | None = None) -> list:
    """Every (store, size) of the arguments, in this process; moto's server started when needed."""
    server = endpoint = None
    if "s3" in stores:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        import logging
        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://127.0.0.1:{port}"
    try:
        rows = []
        for s in stores:
            for n in sizes:
                print(f"  {s}, {n:,} saves ...", file=sys.stderr, flush=True)
                rows.append({"store": s, "size": n, "fanout": fanout, "seg_limit": seg_limit, "seg_from": seg_from,
                             **measure(s, n, endpoint, fanout, seg_limit, seg_from)})
        return rows
    finally:
        if server is not None:
            server.stop()


def compare_rows(rev: str, stores: list, sizes: list) -> list:
    """The rows of :func:`run_all` for git revision ``rev``'s snapstore (a child process)."""
    tmp = tempfile.mkdtemp(prefix="wamp-rev-")
    try:
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "snapstore"], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
        code = (f"import sys; sys.path.insert(0, {tmp!r}); sys.path.insert(1, {str(ROOT)!r});"
                "import snapstore; assert snapstore.__file__.startswith(%r);"
                "from benchmarks import write_amp; import json;"
                "print(json.dumps(write_amp.run_all(%r, %r)))" % (tmp, stores, sizes))
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": ""})
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def show(rows: list, title: str) -> None:
    """Per row: bytes PUT and stored by kind, then the totals and their ratio."""
    print(title)
    for r in rows:
        verdict = "" if r["size"] < 10_000 else ("  PASS" if r["amp"] <= LIMIT else "  FAIL") + f" (<= {LIMIT:g}x)"
        print(f"  {r['store']}, {r['size']:,} saves: {r['put_bytes']:,} bytes PUT / {r['stored_bytes']:,} "
              f"stored = {r['amp']:.2f}x{verdict}; {r['objects']:,} objects; "
              f"{r.get('segments', '?')} segments in the head's list; {r['seconds']:.0f} s")
        if "retired" in r:
            n_ret, b_ret = r["retired"]
            print(f"    covered manifests retired (not built; §14): {n_ret:,} objects, {b_ret:,} bytes fewer stored: "
                  f"{r['objects'] - n_ret:,} objects, {r['amp_retired']:.2f}x; each tier byte written once "
                  f"(no rewrite), retired: {r['amp_floor_retired']:.2f}x")
        print(f"    {'kind':<10} {'writes':>7} {'bytes PUT':>12} {'objects':>8} {'bytes stored':>13}")
        for k in KINDS:
            p, s = r["put"][k], r["stored"][k]
            if p[0] or s[0]:
                print(f"    {k:<10} {p[0]:>7,} {p[1]:>12,} {s[0]:>8,} {s[1]:>13,}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="run lengths in saves, comma-separated")
    ap.add_argument("--stores", default="s3,dir", help="comma-separated: s3, dir, sqlite")
    ap.add_argument("--compare", metavar="REV", help="also measure git revision REV's snapstore")
    ap.add_argument("--fanout", type=int, help="create the repositories with this seg_fanout (default: 4)")
    ap.add_argument("--seg-limit", type=int, help="create the repositories with this seg_limit (bounded segment lists)")
    ap.add_argument("--seg-from", type=int, help="with --seg-limit: the counter until an own segment of this "
                    "level, bounded lists after (docs/format.md §10, *Bounded after a level*)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    stores = [x for x in a.stores.split(",") if x]
    out = {}
    if a.compare:
        out["before"] = compare_rows(a.compare, stores, sizes)
    out["after"] = run_all(stores, sizes, a.fanout, a.seg_limit, a.seg_from)
    if a.compare:
        show(out["before"], f"revision {a.compare}:")
        print()
        show(out["after"], "this checkout:")
        print()
        print("side by side (bytes PUT / bytes stored; objects):")
        for b, w in zip(out["before"], out["after"]):
            print(f"  {b['store']:>6} {b['size']:>7,} saves: {b['amp']:.2f}x, {b['objects']:,} objects  ->  "
                  f"{w['amp']:.2f}x, {w['objects']:,} objects")
    else:
        show(out["after"], "this checkout:")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
