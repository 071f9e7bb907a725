"""How a fresh ``latest()``'s parallel wave of pack GETs spreads out in time (issue 26 items 4-5).

Run (from the repository root)::

    python benchmarks/wave_spread.py                       # 300 saves, seg_limit 46 (39 packs), 80 ms, 3 trials
    python benchmarks/wave_spread.py --saves 300 --seg-limit 0 --delay-ms 20
    python benchmarks/wave_spread.py --probe --trials 10 --delay-ms 80,20 --against /work/main

A run of ``--saves`` saves (``benchmarks/latency.py``'s messages) is written straight to moto's HTTP
server into a repository created with ``seg_limit`` = ``--seg-limit`` (0: the counter of fanout 4)
and ``seg_from`` = ``--seg-from``; then each trial is a fresh child process calling ``latest()``
through ``latency.py``'s proxy, which holds every response back by each of ``--delay-ms``. Printed
per trial: the sequential round trips (the longest chain of requests each starting after the
previous one ended), the wall time, the spread of the pack GETs' start times as the proxy saw them
(``--verbose``: every request with the times, ms after the child's start of timing, its head
reached the proxy and its response was sent); per delay, the medians.

``--probe``: each child also times, in its own threads, every pack GET from botocore's first event
(``before-parameter-build``) to just before its bytes are sent (``before-send``): the wall times
and that thread's CPU (``time.thread_time``), and every pack decode (``Pack.parse`` and
``parse_tail`` as the pack cache calls them): wall interval and CPU. Printed: the spread of the GETs'
starts and sends in the client, their CPU (median per GET and total), the decode CPU spent before
the wave's last send (decoding that could hold back a start), the CPU the whole child process spent
from the wave's first GET start to its last send against the wall time between them (less CPU
than wall: its threads waited to run), and how long after each send the proxy
had the request's head (the proxy shares a process, and the 2 cores, with moto).

``--against TREE``: children alternate (ABBA) between this checkout's snapstore and ``TREE``'s
(another checkout, first on ``PYTHONPATH``), on the same repository and proxy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def probe_child(spec: dict) -> dict:
    """A fresh process's ``latest()`` with its GETs and pack decodes timed: for each GetObject the
    wall time and this thread's CPU at the call's start (botocore's first event) and just before its
    bytes are sent (``before-send``), and for each pack parsed the wall interval and CPU it took."""
    import threading
    import time

    sys.path.insert(0, str(ROOT))
    from snapstore.stores import s3client
    from snapstore.repo import packcache
    from snapstore.format import pack as packfmt
    from benchmarks import latency as lat

    lock = threading.Lock()
    gets: list = []
    decodes: list = []
    marks: dict = {}  # first_enter, last_send: (clock, this process's CPU time)
    local = threading.local()
    make = s3client.make_client

    def enter(params=None, **_):
        local.t = (lat.clock(), time.thread_time())
        if "packs/" in str((params or {}).get("Key", "")):
            with lock:
                marks.setdefault("first_enter", (local.t[0], time.process_time()))

    def send(request=None, **_):
        if "/packs/" in str(getattr(request, "url", "")):
            t, c = local.t
            with lock:
                gets.append((t, lat.clock(), time.thread_time() - c))
                marks["last_send"] = (gets[-1][1], time.process_time())

    def make_client(settings):
        client = make(settings)
        client.meta.events.register("before-parameter-build.s3.GetObject", enter)
        client.meta.events.register("before-send.s3.GetObject", send)
        return client

    def timed(fn):
        def wrapper(*a, **k):
            t, c = lat.clock(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                with lock:
                    decodes.append((t, lat.clock(), time.thread_time() - c))
        return wrapper

    s3client.make_client = make_client
    import snapstore.stores.s3 as s3mod
    s3mod.make_client = make_client
    packcache.parse_tail = timed(packcache.parse_tail)
    class TimedPack:  # packcache's name Pack, its parse timed (nested parses inside are not counted twice)
        parse = staticmethod(timed(packfmt.Pack.parse))
    packcache.Pack = TimedPack
    from snapstore import CheckpointManager

    mgr = CheckpointManager(spec["url"], endpoint_url=spec["endpoint"])
    t0 = lat.clock()
    cp = mgr.latest(spec["run"])
    t1 = lat.clock()
    return {"t0": t0, "t1": t1, "count": len(cp.messages),
            "gets": gets, "decodes": decodes, "marks": marks}


def probe_report(out: dict, proxy_starts: list) -> dict:
    """What :func:`probe_child` saw: the CPU each pack GET took from its start to its send (ms),
    the spread of the sends, the decode CPU spent while sends were still to come, and how long
    after the client's sends the proxy (``proxy_starts``: when it had each pack GET's head, sorted)
    received them (the i-th send against the i-th head; the proxy shares a process with moto)."""
    gets = sorted(out["gets"], key=lambda g: g[1])
    if not gets:
        return {}
    first, last = gets[0][1], gets[-1][1]
    during = [d for d in out["decodes"] if d[0] < last]
    enters = sorted(g[0] for g in gets)
    (w0, c0), (w1, c1) = out["marks"]["first_enter"], out["marks"]["last_send"]
    return {"gets": len(gets), "enter_spread_ms": 1000 * (enters[-1] - enters[0]), "cpu_per_start_ms": 1000 * statistics.median(g[2] for g in gets),
            "cpu_starts_ms": 1000 * sum(g[2] for g in gets), "send_spread_ms": 1000 * (last - first),
            "process_cpu_first_enter_to_last_send_ms": 1000 * (c1 - c0), "wall_first_enter_to_last_send_ms": 1000 * (w1 - w0),
            "decodes": len(out["decodes"]), "decodes_before_last_send": len(during),
            "decode_cpu_before_last_send_ms": 1000 * sum(d[2] for d in during),
            "decode_cpu_ms": 1000 * sum(d[2] for d in out["decodes"]),
            "proxy_lag_median_ms": 1000 * statistics.median(p - g[1] for p, g in zip(proxy_starts, gets)),
            "proxy_lag_max_ms": 1000 * max(p - g[1] for p, g in zip(proxy_starts, gets))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--saves", type=int, default=300)
    ap.add_argument("--seg-limit", type=int, default=46, help="the repository's seg_limit (0: the counter)")
    ap.add_argument("--seg-from", type=int, default=0, help="the repository's seg_from (0: none)")
    ap.add_argument("--verbose", action="store_true", help="print every request's times")
    ap.add_argument("--delay-ms", type=lambda v: [float(x) for x in v.split(",")], default=[80.0],
                    help="comma-separated delays (ms) the proxy holds each response back")
    ap.add_argument("--against", default="", help="another checkout: its snapstore read in children interleaved with this one's")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--probe", action="store_true",
                    help="also time, in each child, every pack GET's client CPU before its send and every pack decode")
    if _lib_child(argv):
        return 0
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from benchmarks import latency as lat

    os.environ.update(lat.DUMMY_ENV)
    for k in lat.UNSET_ENV:
        os.environ.pop(k, None)
    if a.seg_from:
        lat.REPO_SETTINGS["seg_from"] = a.seg_from
    if a.seg_limit:
        lat.REPO_SETTINGS["seg_limit"] = a.seg_limit
    server, port = lat.start_moto()
    try:
        ep = f"http://127.0.0.1:{port}"
        bucket = lat.new_bucket(ep, "wave")
        url = f"s3://{bucket}/{lat.PREFIX}"
        lat.populate(ep, url, a.saves, "")
        from benchmarks import _lib

        trees = [("this", ROOT)] + ([("against", Path(a.against).resolve())] if a.against else [])
        for delay in a.delay_ms:
            px = lat.LatencyProxy(port, delay / 1000).start()
            try:
                got: dict = {name: [] for name, _ in trees}
                for t in range(a.trials):
                    order = trees if t % 2 == 0 else trees[::-1]  # ABBA: load drifts hit both alike
                    for name, tree in order:
                        spec = {"task": "latest", "url": url, "endpoint": px.endpoint, "run": lat.RUN}
                        if a.probe or a.against:
                            out = _lib.run_child(Path(__file__).resolve(), spec, env=_lib.child_env(tree, s3=True))
                        else:
                            out = lat.run_child(spec)
                        es = sorted(px.entries(out["t0"], out["t1"]), key=lambda e: e["start"])
                        t0 = out["t0"]
                        packs = [e for e in es if "/packs/" in e["target"]]
                        spread = (packs[-1]["start"] - packs[0]["start"]) * 1000 if packs else 0.0
                        rt = lat.sequential_round_trips((e["start"], e["end"]) for e in es)
                        got[name].append((rt, spread, out["t1"] - t0))
                        print(f"{delay:g} ms, {name}, trial {t}: {rt} round trips, "
                              f"{len(es)} requests ({len(packs)} pack GETs started over {spread:.0f} ms), "
                              f"wall {out['t1'] - t0:.3f} s")
                        if "gets" in out:
                            print("  probe: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                          for k, v in probe_report(out, [e["start"] for e in packs]).items()))
                        for e in es if a.verbose else ():
                            print(f"  {1000 * (e['start'] - t0):7.1f} {1000 * (e['end'] - t0):7.1f}  {e['kind']} {e['target'][:70]}")
                for name, tree in trees:
                    rts = [r[0] for r in got[name]]
                    print(f"{delay:g} ms, {name} ({tree}): round trips median {statistics.median(rts):g} "
                          f"(min {min(rts)}, max {max(rts)}), pack GETs' start spread median "
                          f"{statistics.median(r[1] for r in got[name]):.0f} ms, wall median "
                          f"{statistics.median(r[2] for r in got[name]):.3f} s")
            finally:
                px.stop()
    finally:
        server.stop()
    return 0


def _lib_child(argv) -> bool:
    """The child side: ``--child SPEC`` runs :func:`probe_child`."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import _lib

    return _lib.child_entry(argv, probe_child)


if __name__ == "__main__":
    sys.exit(main())
