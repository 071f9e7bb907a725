"""Restore in a fresh process: ``python benchmarks/child.py --child SPEC_JSON`` prints one JSON line
(``benchmarks._lib.run_child`` starts it).

The spec names the system (``snapstore``, ``json-files``, ``sqlite-rows``, ``langgraph-sqlite``,
``langgraph-objectstorage``, ``snapstore-saver``, ``restic``, ``borg``) and where its store is
(:meth:`benchmarks.peers.System.restore_spec`). The child imports what it needs first, then times
(``time.monotonic``, the clock the latency proxy logs with) opening the store and reading the latest
checkpoint of the run into Python values. Client objects that send no request (boto3 clients, a
``CheckpointManager``) are made before the timing starts, as in ``benchmarks/latency.py``. It prints ``{"t0", "t1", "count", "digest"}``: the digest
(:func:`digest`) lets the parent check that what came back equals what was saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time

clock = time.monotonic


def digest(messages: list, state) -> str:
    """sha256 of ``json.dumps([messages, state], ensure_ascii=False)``: equal values, key order and all."""
    return hashlib.sha256(json.dumps([messages, state], ensure_ascii=False).encode("utf-8")).hexdigest()


def _doc(data: bytes) -> tuple[list, object]:
    d = json.loads(data)
    return d["messages"], d.get("session_state")


def restore(spec: dict) -> dict:
    """Restore the latest checkpoint the spec names; ``{"t0", "t1", "count", "digest"}``."""
    kind = spec["system"]
    if kind == "snapstore":
        from snapstore import CheckpointManager

        opts = {"endpoint_url": spec["endpoint"]} if spec.get("endpoint") else {}
        mgr = CheckpointManager(spec["location"], create=False, **opts)  # sends no request
        t0 = clock()
        cp = mgr.latest(spec["run"])
        msgs, state = cp.messages, cp.session_state
        t1 = clock()
    elif kind == "json-files":
        t0 = clock()
        last = max(os.listdir(spec["dir"]))
        with open(os.path.join(spec["dir"], last), "rb") as f:
            msgs, state = _doc(f.read())
        t1 = clock()
    elif kind == "sqlite-rows":
        import sqlite3

        t0 = clock()
        conn = sqlite3.connect(spec["path"])
        row = conn.execute("SELECT doc FROM checkpoints WHERE run = ? ORDER BY idx DESC LIMIT 1",
                           (spec["run"],)).fetchone()
        msgs, state = _doc(row[0].encode("utf-8"))
        t1 = clock()
    elif kind in ("langgraph-sqlite", "langgraph-objectstorage", "snapstore-saver"):
        from benchmarks import lgraph

        if kind == "langgraph-sqlite":
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver
        elif kind == "langgraph-objectstorage":
            import boto3
            from langgraph_checkpoint_objectstorage import ObjectStorageSaver

            client = boto3.client("s3", endpoint_url=spec["endpoint"], region_name="us-east-1")
        else:
            from snapstore import CheckpointManager
            from snapstore.integrations.langgraph import SnapstoreSaver

            mgr = CheckpointManager(spec["location"], create=False,
                                    **({"endpoint_url": spec["endpoint"]} if spec.get("endpoint") else {}))
        t0 = clock()
        if kind == "langgraph-sqlite":
            saver = SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
        elif kind == "langgraph-objectstorage":
            saver = ObjectStorageSaver(lgraph.BotoFS(client), f"{spec['bucket']}/lg")
        else:
            saver = SnapstoreSaver(mgr)
        app = lgraph.build_graph(bool(spec.get("delta")), saver)
        msgs, state = lgraph.restored_values(app, spec["thread"])
        t1 = clock()
    elif kind == "restic":
        env = dict(os.environ, **spec["env"])
        t0 = clock()
        out = subprocess.run(["restic", "-r", spec["repo"], "dump", "-q", "--tag", spec["tag"], "latest",
                              spec["file"]], env=env, capture_output=True, check=True).stdout
        msgs, state = _doc(out)
        t1 = clock()
    elif kind == "borg":
        env = dict(os.environ, **spec["env"])
        t0 = clock()
        out = subprocess.run(["borg", "extract", "--stdout", f"{spec['repo']}::{spec['archive']}", "checkpoint.json"],
                             env=env, capture_output=True, check=True).stdout
        msgs, state = _doc(out)
        t1 = clock()
    else:
        raise ValueError(f"unknown system {kind!r} in the restore spec")
    return {"t0": t0, "t1": t1, "count": len(msgs), "digest": digest(msgs, state)}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks._lib import child_entry

    if not child_entry(None, restore):
        sys.exit("usage: python benchmarks/child.py --child SPEC_JSON")
