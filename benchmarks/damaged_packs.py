"""What damaged retired packs cost readers, verify and GC (docs/format.md §21, "Damaged packs readers
can still touch").

Run (from the repository root)::

    python benchmarks/damaged_packs.py                  # 20 runs x 30 saves
    python benchmarks/damaged_packs.py --runs 50 --saves 60 --json out.json

Repository: a local store in a temp dir (fsync off: request counts do not depend on it), written
with segments off (``seg_fanout=0``, the format-1 layout GC repacks), ``--runs`` runs of
``--saves`` saves of one ~400-byte message each, then ``gc(grace_period=3600)`` (every per-save
pack is repacked and *retired*: it stays, with a forwarding record, until a later GC deletes it),
then 3 more saves per run, whose trees still hint at the retired packs.

Measured twice, on the intact repository and after flipping one byte in the middle of every
retired pack: a cold restore of every run's latest checkpoint (a new manager per run; store GETs
and wall time in total), ``verify(read_data=True)`` (GETs, time, errors, warnings) and
``gc(grace_period=3600)`` (GETs, time, damaged packs reported). Every restore is checked to be
exact. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from snapstore import CheckpointManager  # noqa: E402
from snapstore.format import keys  # noqa: E402
from snapstore.maintenance.forwarding import read_forward_map  # noqa: E402
from snapstore.repo.repository import Repository  # noqa: E402
from snapstore.stores import LocalStore  # noqa: E402


def _format1_writes() -> None:
    orig = Repository.init.__func__

    def init(cls, store, exist_ok=False, **settings):
        settings.setdefault("seg_fanout", 0)
        return orig(cls, store, exist_ok, **settings)
    Repository.init = classmethod(init)


def _msg(run: int, i: int) -> dict:
    return {"role": "assistant" if i % 2 else "user",
            "content": f"run {run} step {i}: " + " ".join(f"tok{(run * 7919 + i * 31 + k) % 997}" for k in range(60))}


def _gets(store: LocalStore) -> int:
    return store.stats.counts.get("GET", 0)


def measure(root: str, expect: dict) -> dict:
    out = {}
    gets, t0 = 0, time.perf_counter()
    for run, msgs in expect.items():
        store = LocalStore(root, fsync=False)
        cp = CheckpointManager(store).latest(run)
        assert json.dumps(cp.messages) == json.dumps(msgs), run
        gets += _gets(store)
    out["restore_all_latest"] = {"gets": gets, "seconds": round(time.perf_counter() - t0, 3)}
    store = LocalStore(root, fsync=False)
    t0 = time.perf_counter()
    rep = CheckpointManager(store).verify(read_data=True)
    out["verify_read_data"] = {"gets": _gets(store), "seconds": round(time.perf_counter() - t0, 3),
                               "errors": len(rep.errors),
                               "damage_warnings": sum(p.code == "corrupt-unneeded-pack" for p in rep.warnings)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--saves", type=int, default=30)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    _format1_writes()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        m = CheckpointManager(LocalStore(root, fsync=False))
        expect = {}
        for r in range(args.runs):
            msgs = []
            for i in range(args.saves):
                msgs = msgs + [_msg(r, i)]
                m.save(f"run{r}", msgs)
            expect[f"run{r}"] = msgs
        g = m.gc(grace_period=3600)
        for r in range(args.runs):
            msgs = expect[f"run{r}"]
            for i in range(args.saves, args.saves + 3):
                msgs = msgs + [_msg(r, i)]
                m.save(f"run{r}", msgs)
            expect[f"run{r}"] = msgs
        retired = [p for p in read_forward_map(m.repo).to if os.path.exists(os.path.join(root, keys.pack_key(p)))]
        result = {"runs": args.runs, "saves": args.saves + 3, "retired_packs": len(retired),
                  "repacked_by_gc": g.repacked_packs, "intact": measure(root, expect)}
        for p in retired:
            path = os.path.join(root, keys.pack_key(p))
            with open(path, "rb") as f:
                data = bytearray(f.read())
            data[len(data) // 2] ^= 1
            with open(path, "wb") as f:
                f.write(data)
        result["damaged"] = measure(root, expect)
        store = LocalStore(root, fsync=False)
        t0 = time.perf_counter()
        rep = CheckpointManager(store).gc(grace_period=3600)
        result["damaged"]["gc"] = {"gets": _gets(store), "seconds": round(time.perf_counter() - t0, 3),
                                   "damaged_packs_reported": len(rep.corrupt_packs)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
