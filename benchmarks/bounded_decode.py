"""What bounded decoding costs: streaming zstd with a size limit against zstandard's one-shot
``decompress``, on pack blocks and manifests as snapstore writes them, and a cold restore.

Run (from the repository root)::

    python benchmarks/bounded_decode.py            # 8 MiB block, 2 KB manifest bodies, 400-save restore
    python benchmarks/bounded_decode.py --quick    # smaller, a few seconds

Measured (best of ``--repeat``, old and new alternately, ``time.perf_counter``):

* ``block``: one pack data block of ``--block-mib`` MiB of agent-like JSON (seeded pseudo-random
  words), zstd level 3 without content size as :class:`snapstore.format.pack.PackBuilder` writes
  it, decoded by ``ZstdDecompressor().decompress(frame, max_output_size=rawlen)`` (the old code:
  bounded only when the header has no size) and by :func:`snapstore.format.codec.zstd_decompress`
  with ``expected=rawlen`` (the new code).
* ``manifest``: 2,000 manifest envelopes (``Manifest.to_bytes`` of a typical checkpoint record)
  opened by the old one-shot path and by :func:`snapstore.format.codec.open_envelope`.
* ``restore``: a cold ``latest()`` of a run of ``--saves`` saves on a local store (fsync off),
  each save appending two 1-2 KB messages: a fresh manager per repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import zstandard  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.format.codec import open_envelope, zstd_decompress  # noqa: E402
from snapstore.format.manifest import MANIFEST_DICT_V1, MANIFEST_MAGIC, Manifest  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]


def text(rng: random.Random, n: int) -> str:
    out, size = [], 0
    while size < n:
        w = WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)]
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def best(fn, repeat: int) -> float:
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def best_pair(old, new, repeat: int) -> tuple[float, float]:
    """Best time of each, the two run alternately (a busy machine slows both alike)."""
    a, b = [], []
    for _ in range(repeat):
        a.append(best(old, 1))
        b.append(best(new, 1))
    return min(a), min(b)


def old_envelope(data: bytes) -> bytes:
    stored = data[22:]
    if data[5] == 2:
        zd = zstandard.ZstdCompressionDict(MANIFEST_DICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        return zstandard.ZstdDecompressor(dict_data=zd).decompress(stored)
    if data[5] == 1:
        return zstandard.ZstdDecompressor().decompress(stored)
    return stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--block-mib", type=int, default=8)
    ap.add_argument("--saves", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args()
    if a.quick:
        a.block_mib, a.saves, a.repeat = 2, 100, 3
    rng = random.Random(7)
    res = {}

    raw = json.dumps([{"role": "tool", "content": text(rng, 1500)} for _ in range(a.block_mib * 700)]).encode()
    raw = raw[: a.block_mib << 20]
    frame = zstandard.ZstdCompressor(level=3, write_checksum=False, write_content_size=False).compress(raw)
    old, new = best_pair(lambda: zstandard.ZstdDecompressor().decompress(frame, max_output_size=len(raw)),
                         lambda: zstd_decompress("k", frame, 128 << 20, expected=len(raw)), a.repeat)
    res["block"] = {"raw_bytes": len(raw), "frame_bytes": len(frame), "old_s": old, "new_s": new,
                    "old_MBps": len(raw) / old / 1e6, "new_MBps": len(raw) / new / 1e6}

    from datetime import datetime, timezone
    envs = []
    for i in range(2000):
        m = Manifest(kind="checkpoint", run_id="run-1", seq=i, write_id=os.urandom(8).hex(),
                     created=datetime.now(timezone.utc), checkpoint_id=f"{i:020x}-{i:x}", parent_id=f"{i - 1:020x}",
                     fields={"step": i, "token_usage": {"input_tokens": 1200 + i, "output_tokens": 80}, "metadata": {"task": "t"}},
                     count=2 * i + 2, size=3000 * i, digest=os.urandom(16).hex(), state=[os.urandom(16).hex(), os.urandom(8).hex()])
        envs.append(m.to_bytes())
    old, new = best_pair(lambda: [old_envelope(e) for e in envs],
                         lambda: [open_envelope("k", MANIFEST_MAGIC, e, MANIFEST_DICT_V1) for e in envs], a.repeat)
    res["manifest"] = {"objects": len(envs), "old_us_each": old / len(envs) * 1e6, "new_us_each": new / len(envs) * 1e6}

    with tempfile.TemporaryDirectory() as tmp:
        mgr = CheckpointManager(LocalStore(tmp, fsync=False))
        msgs = [{"role": "system", "content": "You are a coding agent."}]
        for i in range(a.saves):
            msgs = msgs + [{"role": "assistant", "content": text(rng, 1000)}, {"role": "tool", "content": text(rng, 2000)}]
            mgr.save("r", msgs)
        mgr.close()

        def cold():
            m = CheckpointManager(LocalStore(tmp, fsync=False))
            assert len(m.latest("r").messages) == len(msgs)
            m.close()
        res["restore"] = {"saves": a.saves, "messages": len(msgs), "cold_latest_s": best(cold, a.repeat)}

    for k, v in res.items():
        print(k, " ".join(f"{x}={y:.4g}" if isinstance(y, float) else f"{x}={y}" for x, y in v.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
