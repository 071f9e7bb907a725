"""How a fresh ``latest()``'s parallel wave of pack GETs spreads out in time (issue 26 items 4-5).

Run (from the repository root)::

    python benchmarks/wave_spread.py                       # 300 saves, seg_limit 46 (39 packs), 80 ms, 3 trials
    python benchmarks/wave_spread.py --saves 300 --seg-limit 0 --delay-ms 20

A run of ``--saves`` saves (``benchmarks/latency.py``'s messages) is written straight to moto's HTTP
server into a repository created with ``seg_limit`` = ``--seg-limit`` (0: the counter of fanout 4);
then each trial is a fresh child process (``latency.py``'s child) calling ``latest()`` through
``latency.py``'s proxy, which holds every response back ``--delay-ms``. Printed per trial: the
sequential round trips (the longest chain of requests each starting after the previous one ended),
the wall time, and every request with the times (ms after the child's start of timing) its head
reached the proxy and its response was sent, so the spread of the wave's start times (client CPU
per request: botocore builds and signs each one under the GIL) can be read against the delay.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saves", type=int, default=300)
    ap.add_argument("--seg-limit", type=int, default=46, help="the repository's seg_limit (0: the counter)")
    ap.add_argument("--delay-ms", type=float, default=80.0)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks import latency as lat

    os.environ.update(lat.DUMMY_ENV)
    for k in lat.UNSET_ENV:
        os.environ.pop(k, None)
    if a.seg_limit:
        lat.REPO_SETTINGS["seg_limit"] = a.seg_limit
    server, port = lat.start_moto()
    try:
        ep = f"http://127.0.0.1:{port}"
        bucket = lat.new_bucket(ep, "wave")
        url = f"s3://{bucket}/{lat.PREFIX}"
        lat.populate(ep, url, a.saves, "")
        px = lat.LatencyProxy(port, a.delay_ms / 1000).start()
        try:
            spreads = []
            for t in range(a.trials):
                out = lat.run_child({"task": "latest", "url": url, "endpoint": px.endpoint, "run": lat.RUN})
                es = sorted(px.entries(out["t0"], out["t1"]), key=lambda e: e["start"])
                t0 = out["t0"]
                packs = [e for e in es if "/packs/" in e["target"]]
                spread = (packs[-1]["start"] - packs[0]["start"]) * 1000 if packs else 0.0
                spreads.append(spread)
                print(f"trial {t}: {lat.sequential_round_trips((e['start'], e['end']) for e in es)} round trips, "
                      f"{len(es)} requests ({len(packs)} pack GETs started over {spread:.0f} ms), "
                      f"wall {out['t1'] - t0:.3f} s")
                for e in es:
                    print(f"  {1000 * (e['start'] - t0):7.1f} {1000 * (e['end'] - t0):7.1f}  {e['kind']} {e['target'][:70]}")
            print(f"median spread of the pack GETs' start times: {statistics.median(spreads):.0f} ms "
                  f"(delay {a.delay_ms:g} ms)")
        finally:
            px.stop()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
