"""What a run's log costs: manifests, index records and log segments, now against the earlier encodings.

Builds two runs in fresh local repositories (fsync off; this measures bytes):

* ``langgraph``: the 300-turn LangGraph chat graph of ``benchmarks/lgraph.py`` (as ``langgraph_storage.py`` runs it) (DeltaChannel
  with ``--delta``, else add_messages) checkpointed by ``SnapstoreSaver``;
* ``plain``: ``CheckpointManager.save`` of a growing chat (two ~360-character messages per save)
  with token usage, agent id, status and metrics, ``--turns`` saves.

and reports, per run, the stored objects by kind (packs, manifests ``m/``, index records ``c/``,
log segments ``l/``) and the run log re-encoded as earlier versions wrote it, from the same
records: every manifest as version 2 (full run id, ``MANIFEST_DICT_V1``), and every log segment as
version 2 (the version-2 manifest objects in one frame). So "before" and "after" come from one
run, with no dependence on timing or random ids. Local repositories compact their run logs by
default (docs/format.md §14: manifests covered by a log segment are 0-byte stubs); the "disk"
figures are the files' allocated blocks (``st_blocks``), what ``du`` counts.

    python benchmarks/log_bytes.py                 # LangGraph add_messages + plain, 300 turns
    python benchmarks/log_bytes.py --delta         # LangGraph with DeltaChannel
    python benchmarks/log_bytes.py --turns 1000 --json out.json

Needs ``pip install '.[langgraph]'`` for the LangGraph run (``--no-langgraph`` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from snapstore import CheckpointManager  # noqa: E402
from snapstore.format import keys  # noqa: E402
from snapstore.format.codec import dumps_exact, seal_envelope  # noqa: E402
from snapstore.format.ids import name_from_key  # noqa: E402
from snapstore.format.logseg import decode_logseg, encode_logseg_v2, parse_logseg_key  # noqa: E402
from snapstore.format.manifest import MANIFEST_DICT_V1, MANIFEST_MAGIC, open_manifest  # noqa: E402
from snapstore.format.config import FORMAT_VERSION  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


def _v2_manifest(key: str, obj: bytes, copy=None) -> bytes:
    """The record at ``key`` sealed as version 2/3 wrote it: the full run id, dictionary V1. A
    compacted record (0 bytes, docs/format.md §14) is taken from its log segment ``copy``."""
    if not obj:
        version, body = copy.record(key)
    else:
        version, body = open_manifest(key, obj)
    if version < 4:
        return obj or seal_envelope(MANIFEST_MAGIC, version, body, MANIFEST_DICT_V1)
    d = json.loads(body)
    if "rd" in d:
        run = name_from_key(key.split("/")[1])
        d = {"kind": d.pop("kind"), "run": run, **{k: v for k, v in d.items() if k != "rd"}}
    old = 3 if "session_state_tree" in d else FORMAT_VERSION
    return seal_envelope(MANIFEST_MAGIC, old, dumps_exact(d), MANIFEST_DICT_V1)


def measure(root: str) -> dict:
    """Bytes by object kind in the repository at ``root``, and the run logs re-encoded as version 2."""
    store = LocalStore(root, fsync=False)
    kinds: dict[str, list[int]] = {}
    blocks: dict[str, int] = {}
    objs: dict[str, bytes] = {}
    for info in store.list(""):
        parts = info.key.split("/")
        kind = parts[2] if parts[0] == "runs" and len(parts) == 4 else parts[0]
        data = store.get(info.key)
        kinds.setdefault(kind, []).append(len(data))
        blocks[kind] = blocks.get(kind, 0) + os.stat(os.path.join(root, *parts)).st_blocks * 512
        if kind in ("m", "l"):
            objs[info.key] = data
    copies = {}
    for k, v in objs.items():
        if k.split("/")[2] == "l" and parse_logseg_key(k) is not None:
            rk = k.split("/")[1]
            for c in decode_logseg(k, v):
                copies.setdefault(keys.manifest_key(rk, c.seq), c)
    v2_man = {k: _v2_manifest(k, v, copies.get(k)) for k, v in objs.items() if k.split("/")[2] == "m"}
    v2_seg = 0
    for k, v in objs.items():
        if k.split("/")[2] != "l" or parse_logseg_key(k) is None:
            continue
        rk = k.split("/")[1]
        recs = [(c.seq, v2_man[keys.manifest_key(rk, c.seq)]) for c in decode_logseg(k, v)
                if keys.manifest_key(rk, c.seq) in v2_man]
        v2_seg += len(encode_logseg_v2(recs))
    n_m = len(kinds.get("m", []))
    out = {k: {"objects": len(v), "bytes": sum(v), "disk_bytes": blocks.get(k, 0), "empty": v.count(0)}
           for k, v in sorted(kinds.items())}
    out["disk_bytes"] = sum(blocks.values())
    out["total_bytes"] = sum(sum(v) for v in kinds.values())
    out["manifest_bytes_each"] = round(sum(kinds.get("m", [])) / max(1, n_m), 1)
    out["v2_manifest_bytes_each"] = round(sum(len(v) for v in v2_man.values()) / max(1, n_m), 1)
    out["v2_logseg_bytes"] = v2_seg
    out["v2_total_bytes"] = (out["total_bytes"] - sum(kinds.get("m", [])) - sum(kinds.get("l", []))
                             + sum(len(v) for v in v2_man.values()) + v2_seg)
    return out


def langgraph_run(root: str, turns: int, delta: bool) -> None:
    """The chat graph of ``benchmarks/lgraph.py`` (as ``langgraph_storage.py`` runs it) for
    ``turns`` turns on a SnapstoreSaver in the directory ``root`` (fsync off)."""
    os.environ["BENCH_FSYNC"] = "0"
    from benchmarks import lgraph

    saver = lgraph.make_saver({"kind": "snapstore", "path": root})
    try:
        lgraph.chat_turns(lgraph.build_chat_graph(saver, delta), turns)
    finally:
        saver.close()


def plain_run(root: str, turns: int) -> None:
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    rng = random.Random(2)
    words = "the agent tool call result file test error patch function value returns line".split()
    msgs: list = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        msgs = msgs + [{"role": "assistant", "content": " ".join(rng.choice(words) for _ in range(60))},
                       {"role": "tool", "content": " ".join(rng.choice(words) for _ in range(60))}]
        mgr.save("coding-run-2026-12-01", msgs, step=i, agent_id="coder", status="running",
                 token_usage={"input_tokens": 1200 + 90 * i, "output_tokens": 80 + i % 17},
                 metrics={"latency_s": round(rng.uniform(0.5, 3), 3)})
    mgr.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--delta", action="store_true", help="LangGraph messages as a DeltaChannel")
    ap.add_argument("--no-langgraph", action="store_true")
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        runs = [("plain", lambda r: plain_run(r, a.turns))]
        if not a.no_langgraph:
            runs.insert(0, ("langgraph" + ("-delta" if a.delta else ""), lambda r: langgraph_run(r, a.turns, a.delta)))
        for name, build in runs:
            root = os.path.join(work, name)
            build(root)
            r = measure(root)
            results[name] = r
            print(f"{name} ({a.turns} turns): {r['total_bytes']:,} B stored ({r['disk_bytes']:,} B in disk "
                  f"blocks); as version 2 wrote the log: {r['v2_total_bytes']:,} B")
            for k in ("packs", "m", "c", "l"):
                if k in r:
                    stubs = f", {r[k]['empty']} of them 0-byte stubs (§14)" if k == "m" and r[k]["empty"] else ""
                    print(f"  {k:6} {r[k]['objects']:6} objects {r[k]['bytes']:>10,} B "
                          f"({r[k]['disk_bytes']:>10,} B on disk){stubs}")
            print(f"  manifest {r['manifest_bytes_each']} B each (version 2: {r['v2_manifest_bytes_each']} B); "
                  f"log segments {r.get('l', {}).get('bytes', 0):,} B (version 2: {r['v2_logseg_bytes']:,} B)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"turns": a.turns, "delta": a.delta, "runs": results}, f, indent=1)


if __name__ == "__main__":
    main()
