"""Callers sharing one manager: lost updates, and what the per-caller conflict check costs.

Run (from the repository root)::

    python benchmarks/callers.py                  # local store and S3 (moto's HTTP server, in process)
    python benchmarks/callers.py --stores local   # local only (no moto needed)
    python benchmarks/callers.py --json out.json

1. **Lost updates** (issue 9): ``--threads`` threads share one ``CheckpointManager`` and each does
   ``--rounds`` times ``cp = latest(run)`` then ``save(run, cp.messages + [new])``, catching
   ConflictError. Printed: saves that returned an id, ConflictErrors, and how many of the returned
   ids are *not* in the final head's history (parent chain) or whose message is missing from the
   head: a lost update. With the per-caller views every save is in the head or got ConflictError.
   To see the lost updates the issue reports, run only this part on the previous code::

       mkdir /tmp/old && git archive 14ad0c1 | tar -x -C /tmp/old && cp benchmarks/callers.py /tmp/old/benchmarks/
       cd /tmp/old && python benchmarks/callers.py --stores local --lost-only
2. **Requests per save** (counted by the store's own request counters, ``store.stats``), on a run
   of 6 checkpoints, for saves that neither merge a tier nor write a log segment:
   an established caller (it saved the head); a fresh calling context (never read the run) on a
   manager that knows the head; the same with ``expect_head=``; a new manager's first save (reads
   the repository config, the head and its segments); a fresh context on an open manager that
   never read the run (the head and its segments); and a save with ``gc_grace_period=0`` (the
   writer re-reads the head before every publish: GC may have run while it was idle).

Figures are printed as a table; nothing is timed (see benchmarks/latency.py for wall times).
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from snapstore import CheckpointManager  # noqa: E402
from snapstore.errors import ConflictError  # noqa: E402
from snapstore.stores import LocalStore  # noqa: E402

RUN = "bench"


def lost_updates(open_store, threads: int, rounds: int) -> dict:
    mgr = CheckpointManager(open_store())
    mgr.save(RUN, [{"i": "seed"}])
    saved, conflicts, errors = {}, [0], []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def work(t):
        try:
            start.wait()
            for r in range(rounds):
                cp = mgr.latest(RUN)
                m = {"i": f"{t}-{r}"}
                try:
                    cid = mgr.save(RUN, cp.messages + [m])
                except ConflictError:
                    with lock:
                        conflicts[0] += 1
                    continue
                with lock:
                    saved[cid] = m
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    reader = CheckpointManager(open_store())
    head = reader.latest(RUN)
    history, cp = set(), head
    while cp is not None:
        history.add(cp.id)
        cp = reader.get(RUN, cp.parent_id) if cp.parent_id else None
    in_head = {m["i"] for m in head.messages}
    lost = [c for c, m in saved.items() if c not in history or m["i"] not in in_head]
    return {"saves": len(saved), "conflicts": conflicts[0], "lost": len(lost), "errors": errors,
            "lost_pct": round(100.0 * len(lost) / max(1, len(saved)), 1)}


def requests_per_save(open_store) -> dict:
    def counts(store, fn):
        s0 = store.stats.snapshot()
        fn()
        return {k: v for k, v in sorted(store.stats.since(s0).counts.items()) if v}

    mgr = CheckpointManager(open_store())
    msgs = [{"role": "system", "content": "s" * 500}]
    for i in range(4):  # seq 0..3; seq 3 completes a tier (merge); 4, 5, 6 do not
        msgs = msgs + [{"role": "user", "content": f"m{i} " * 50}]
        mgr.save(RUN, msgs)
    out = {}
    msgs = msgs + [{"role": "user", "content": "established"}]
    out["established caller"] = counts(mgr.store, lambda: mgr.save(RUN, msgs))
    msgs = msgs + [{"role": "user", "content": "fresh context"}]
    out["fresh context, manager knows head"] = counts(
        mgr.store, lambda: contextvars.Context().run(mgr.save, RUN, msgs))
    head = mgr.list(RUN, limit=1)[0].id
    msgs = msgs + [{"role": "user", "content": "expect_head"}]
    out["fresh context, expect_head=head"] = counts(
        mgr.store, lambda: contextvars.Context().run(mgr.save, RUN, msgs, expect_head=head))
    # a new manager's first save, on another run of 5 checkpoints (seq 5: no merge)
    other = [{"role": "system", "content": "s" * 500}]
    for i in range(5):
        other = other + [{"role": "user", "content": f"o{i} " * 50}]
        mgr.save("other", other)
    new = CheckpointManager(open_store())
    other = other + [{"role": "user", "content": "new manager"}]
    out["new manager (first save)"] = counts(new.store, lambda: new.save("other", other))
    # a fresh context on an open manager that never touched the run (another manager wrote it)
    third = [{"role": "system", "content": "t" * 500}]
    for i in range(5):
        third = third + [{"role": "user", "content": f"t{i} " * 50}]
        new.save("third", third)
    third = third + [{"role": "user", "content": "fresh context"}]
    out["fresh context, manager never read run"] = counts(
        mgr.store, lambda: contextvars.Context().run(mgr.save, "third", third))
    g0 = CheckpointManager(open_store(), gc_grace_period=0)
    g0.save("grace0", [{"role": "user", "content": "a"}])
    out["gc_grace_period=0, established"] = counts(
        g0.store, lambda: g0.save("grace0", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--lost-only", action="store_true", help="only part 1 (runs on code without expect_head)")
    a = ap.parse_args()
    results = {}
    tmp = tempfile.TemporaryDirectory()
    server = None
    try:
        for kind in a.stores.split(","):
            if kind == "local":
                roots = iter(range(1_000_000))

                def factory():
                    root = os.path.join(tmp.name, f"repo-{next(roots)}")
                    return lambda: LocalStore(root, fsync=True)
            elif kind == "s3":
                import logging
                import uuid

                import boto3
                from moto.server import ThreadedMotoServer

                from snapstore.stores.s3 import S3Store
                for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                             "AWS_DEFAULT_REGION": "us-east-1"}.items():
                    os.environ.setdefault(k, v)
                logging.getLogger("werkzeug").setLevel(logging.ERROR)
                if server is None:
                    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
                    server.start()
                host, port = server.get_host_and_port()
                endpoint = f"http://{host}:{port}"

                def factory():
                    bucket = f"callers-{uuid.uuid4().hex[:10]}"
                    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
                    return lambda: S3Store(bucket, endpoint_url=endpoint, region_name="us-east-1",
                                           addressing_style="path")
            else:
                raise SystemExit(f"unknown store {kind!r}")
            results[kind] = {"lost_updates": lost_updates(factory(), a.threads, a.rounds),
                             "requests_per_save": {} if a.lost_only else requests_per_save(factory())}
    finally:
        if server is not None:
            server.stop()
        tmp.cleanup()
    for kind, r in results.items():
        lu = r["lost_updates"]
        print(f"[{kind}] {a.threads} threads x {a.rounds} rounds of latest()+save() on one manager: "
              f"{lu['saves']} saves returned an id, {lu['conflicts']} ConflictError, "
              f"{lu['lost']} lost ({lu['lost_pct']}%)" + (f", errors: {lu['errors']}" if lu["errors"] else ""))
        for what, c in r["requests_per_save"].items():
            print(f"[{kind}]   {what:38s} {', '.join(f'{k} {v}' for k, v in c.items())}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
