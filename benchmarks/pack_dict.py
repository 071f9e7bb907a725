"""What compressing a save's appended messages against the run's recent messages would save (issue 26
item 4): an estimate for per-save packs, not a pack format (nothing here is stored).

Run (from the repository root)::

    python benchmarks/pack_dict.py                  # latency.py's 10,000 saves and the shared trajectories
    python benchmarks/pack_dict.py --saves 1000 --no-shared

A format-2 save puts the messages it appends into its pack's array blocks (docs/format.md §8): one
zstd frame of ``[`` + the messages' exact JSON joined by ``,`` + ``]``, without a dictionary, at the
repository's level (3) or 9 for small blocks against a shared dictionary (§29). Per-save packs are
pure write amplification on a long run (every one is merged into a tier pack and deleted, §10), so
their bytes lower the ratio bytes PUT / bytes stored one for one. For each save that appends
(``benchmarks/latency.py``'s messages: 2 messages of 1-2 KB per save; each shared trajectory's
conversations, one save per turn, appends only) this measures the array's frame (level 3, 9 and
19) against the same frame compressed with a zstd raw-content dictionary: the last ``--dict-kib``
KiB of the arrays of the run's earlier saves (what the writer holds in memory, and what a reader
restoring in list order has decoded before it reaches this array, so that the dictionary would
cost it no request). Printed per workload: the saves, raw array bytes, and the compressed bytes of
each way, as totals and as a fraction of level 3 alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def arrays_of(checkpoints) -> list:
    """The raw array bytes of each appending save of a run (``checkpoints``: each checkpoint's
    message list, in save order); a save that rewrites the list, or appends nothing, is skipped."""
    from snapstore.format.codec import encode_json

    from benchmarks.workloads import Run, deltas

    out = []
    for kind, msgs in deltas(Run("r", checkpoints)):
        if kind == "append" and msgs:
            out.append(b"[" + b",".join(encode_json(m)[0] for m in msgs) + b"]")
    return out


def measure(runs: list, dict_kib: list) -> dict:
    """Totals over ``runs`` (each a list of save arrays, :func:`arrays_of`): ``saves``, ``raw``, and
    compressed bytes ``alone L`` (levels 3, 9, 19) and ``dict K KiB`` (level 3, dictionary: the
    last K KiB of the run's earlier arrays, concatenated)."""
    import zstandard as zstd

    res: dict = {"saves": 0, "raw": 0, **{f"alone {lv}": 0 for lv in (3, 9, 19)},
                 **{f"dict {k} KiB": 0 for k in dict_kib}}
    alone = {lv: zstd.ZstdCompressor(level=lv) for lv in (3, 9, 19)}
    for arrays in runs:
        history = b""
        for a in arrays:
            res["saves"] += 1
            res["raw"] += len(a)
            for lv, c in alone.items():
                res[f"alone {lv}"] += len(c.compress(a))
            for k in dict_kib:
                d = history[-(k << 10):]
                if len(d) < 8:  # zstd needs a few bytes of content for a dictionary
                    n = len(alone[3].compress(a))
                else:
                    cd = zstd.ZstdCompressionDict(d, dict_type=zstd.DICT_TYPE_RAWCONTENT)
                    n = len(zstd.ZstdCompressor(level=3, dict_data=cd, write_dict_id=False).compress(a))
                res[f"dict {k} KiB"] += n
            history = (history + a)[-(max(dict_kib) << 10):]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saves", type=int, default=10_000, help="saves of latency.py's run")
    ap.add_argument("--dict-kib", default="4,16,64", help="dictionary sizes to try (KiB, comma-separated)")
    ap.add_argument("--no-shared", action="store_true", help="skip the shared trajectories")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks import latency as lat
    from benchmarks import workloads
    from benchmarks._lib import shared_dir

    kib = [int(x) for x in a.dict_kib.split(",")]
    work = [(f"latency.py, {a.saves} saves", [arrays_of(_prefixes(lat, a.saves))])]
    data = None if a.no_shared else shared_dir()
    if data is not None:
        from snapstore.importers import load_trajectory

        for p in workloads.trajectory_files(data):
            _, convs = load_trajectory(p)
            work.append((f"traj:{p.name}", [arrays_of(c.checkpoints) for c in convs if c.checkpoints]))
    cols = ["alone 3", "alone 9", "alone 19", *(f"dict {k} KiB" for k in kib)]
    print(f"{'workload':48} {'saves':>6} {'raw':>11} " + " ".join(f"{c:>15}" for c in cols))
    total: dict = {}
    for name, runs in work:
        r = measure(runs, kib)
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
        _row(name, r, cols)
    if len(work) > 1:
        _row("all", total, cols)
    return 0


def _prefixes(lat, saves: int):
    """The checkpoints of latency.py's run: after save i, the prelude and turns 0..i."""
    from benchmarks.workloads import Prefixes

    msgs = lat.prelude()
    ends = []
    for i in range(saves):
        msgs += lat.turn(lat.SEED, i)
        ends.append(len(msgs))
    return Prefixes(msgs, ends)


def _row(name: str, r: dict, cols: list) -> None:
    base = r["alone 3"] or 1
    print(f"{name[:48]:48} {r['saves']:>6} {r['raw']:>11,} " +
          " ".join(f"{r[c]:>9,} {r[c] / base:.3f}" for c in cols))


if __name__ == "__main__":
    sys.exit(main())
