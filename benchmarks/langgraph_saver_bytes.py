"""Where ``SnapstoreSaver``'s bytes go, against the core API's for the same messages: per object
kind, per record kind, and per kind of stored item.

The graph is ``benchmarks.lgraph.build_chat_graph`` (two messages of 360 characters per turn, its
``messages`` channel a ``DeltaChannel``), one ``invoke`` per turn at LangGraph's default
``async`` durability, on a fresh store (``--store sqlite``: a snapstore SQLite file; ``dir``: a
directory). ``core`` is the same messages (``message_to_dict``) saved with
``CheckpointManager.save``, one checkpoint per turn, on the same kind of store
(as ``benchmarks/langgraph_saver_scale.py`` computes its ``vs core``).

Printed for each of ``saver`` and ``core`` (bytes as the store reports each object's size):

* ``objects``: manifests (``runs/*/m/``), log segments (``runs/*/l/``), the writes area
  (``runs/*/w/``: pending-writes objects not folded into a record yet, layout §4a), packs and
  the rest;
* ``records``: per record kind (``C-input``, ``C-loop``, ``W``: layout §3-§4 of
  docs/langgraph-layout.md; ``core`` for the core API's checkpoints): how many, and their
  manifests' bytes;
* ``pack entries``: the packs' entries by type (``chunk``, ``state``, ``node``, ``upper``...), a
  chunk split further by what it holds (``message``, ``meta``, ``serde``, ``write-marker``,
  ``seed-marker``, ``other``): count and *uncompressed* bytes, each distinct entry once;
  ``packs`` (above) is what they cost compressed.

    python benchmarks/langgraph_saver_bytes.py --turns 1000
    python benchmarks/langgraph_saver_bytes.py --turns 300 --store dir --json out.json

Needs ``pip install '.[langgraph]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.lgraph import CHAT_THREAD, build_chat_graph, chat_text  # noqa: E402

ENTRY_TYPES = {"c": "chunk", "s": "state", "n": "node", "u": "upper"}
"""Pack entry type letters (``snapstore.format.pack`` ``T_*``) named here; others by letter."""


def chunk_kind(raw: bytes) -> str:
    """What a chunk entry's JSON holds (layout §2: a message item, a meta item, a serde item, a
    history section's markers), from its first bytes."""
    head = raw[:24]
    for tag, name in ((b'{"type"', "message"), (b'{"lgmeta"', "meta"), (b'{"serde"', "serde"),
                      (b'{"lgw"', "write-marker"), (b'{"lgs"', "seed-marker")):
        if head.startswith(tag):
            return name
    return "other"


def record_kind(md) -> str:
    """``C-<LangGraph source>`` or ``W`` for a saver record, ``registry`` for a namespace
    registry record, ``core`` for anything else (a core API checkpoint)."""
    if isinstance(md, dict) and md.get("lg") in ("C", "c"):
        src = md.get("md", {}).get("source") if isinstance(md.get("md"), dict) else None
        return f"C-{src}"
    if isinstance(md, dict) and md.get("lg") in ("W", "w"):
        return "W"
    if isinstance(md, dict) and "lgns" in md:
        return "registry"
    return "core"


def breakdown(location: str) -> dict:
    """The byte breakdown of the repository at ``location`` (what ``CheckpointManager`` opens).

    Returns:
        ``{"total": bytes, "objects": {kind: bytes}, "records": {record kind: [count, manifest
        bytes]}, "entries": {entry kind: [count, uncompressed bytes]}}``; bytes are object sizes
        as the store lists them (a SQLite file's free pages and WAL are not counted).
    """
    from snapstore import CheckpointManager
    from snapstore.format.keys import manifest_key
    from snapstore.format.pack import Pack

    objects: Counter = Counter()
    sizes: dict = {}
    with CheckpointManager(location) as mgr:
        store = mgr.store
        for info in store.list(""):
            sizes[info.key] = info.size
            parts = info.key.split("/")
            kind = ("manifests" if parts[2] == "m" else "segments" if parts[2] == "l"
                    else "writes-area" if parts[2] == "w" else "runs-other") \
                if parts[0] == "runs" and len(parts) > 2 else parts[0]
            objects[kind] += info.size
        records: dict = {}
        for run in mgr.runs():
            rk = mgr.repo.run_key(run)
            for s in mgr.list(run):
                # read each checkpoint first: a merged pack's entries may name per-save packs it
                # replaced, found through the run's log (docs/format.md), not by a pack read alone
                mgr.get(run, s.id)
                k = record_kind(s.metadata)
                row = records.setdefault(k, [0, 0])
                row[0] += 1
                row[1] += sizes.get(manifest_key(rk, s.seq), 0)
        entries: dict = {}
        copies: dict = {}  # entry -> [(pack, entry)]: a merged pack holds copies of per-save packs' entries
        for key in sorted(k for k in sizes if k.startswith("packs/")):
            data = store.get(key)
            if not data:
                continue
            pack = Pack.parse(key, data)
            for ek, e in pack.entries.items():
                copies.setdefault(ek, []).append((pack, e))
        for ek, where in copies.items():
            pack, e = where[0]
            name = ENTRY_TYPES.get(chr(e.type), chr(e.type))
            if name == "chunk":
                name = "chunk:?"  # no copy the reader can read alone (pack order is random: try each)
                for pack, _e in where:
                    try:  # through the repository: a block compressed against earlier messages needs them
                        name = "chunk:" + chunk_kind(mgr.repo.read_entry_in(pack, ek[0], ek[1]))
                        break
                    except Exception:  # noqa: BLE001 - this copy cannot be read alone
                        continue
            row = entries.setdefault(name, [0, 0])
            row[0] += 1
            row[1] += e.length
    return {"total": sum(sizes.values()), "objects": dict(objects), "records": records, "entries": entries}


def build(store: str, turns: int, work: str) -> tuple[str, str]:
    """Run the chat graph ``turns`` turns on a fresh saver repository and save the same messages
    with the core API; returns the two locations ``(saver, core)``."""
    from langchain_core.messages import HumanMessage, message_to_dict

    from snapstore import CheckpointManager
    from snapstore.integrations.langgraph import SnapstoreSaver

    ext = ".db" if store == "sqlite" else ""
    saver_path, core_path = os.path.join(work, "saver" + ext), os.path.join(work, "core" + ext)
    cfg = {"configurable": {"thread_id": CHAT_THREAD}}
    with SnapstoreSaver(saver_path) as saver:
        graph = build_chat_graph(saver, True)
        rng = random.Random(1)
        for _ in range(turns):
            graph.invoke({"messages": [HumanMessage(content=chat_text(rng))]}, cfg, durability="async")
        messages = graph.get_state(cfg).values["messages"]
    dicts = [message_to_dict(m) for m in messages]
    with CheckpointManager(core_path) as mgr:
        for i in range(2, len(dicts) + 1, 2):
            mgr.save("core", dicts[:i], step=i // 2)
    return saver_path, core_path


def table(name: str, b: dict) -> str:
    """Markdown lines of one breakdown."""
    out = [f"### {name}: {b['total']:,} bytes", "", "| objects | bytes |", "|---|---|"]
    out += [f"| {k} | {v:,} |" for k, v in sorted(b["objects"].items(), key=lambda kv: -kv[1])]
    out += ["", "| record kind | records | manifest bytes | per record |", "|---|---|---|---|"]
    out += [f"| {k} | {n:,} | {v:,} | {v // max(n, 1):,} |" for k, (n, v) in sorted(b["records"].items())]
    out += ["", "| pack entry | entries | uncompressed bytes | per entry |", "|---|---|---|---|"]
    out += [f"| {k} | {n:,} | {v:,} | {v // max(n, 1):,} |"
            for k, (n, v) in sorted(b["entries"].items(), key=lambda kv: -kv[1][1])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict:
    """Parse ``argv`` (default: the command line), build both repositories in a temporary
    directory, print both breakdowns and the ratio; returns ``{"saver": ..., "core": ...}``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--store", choices=("sqlite", "dir"), default="sqlite")
    ap.add_argument("--json", help="also write both breakdowns to this file")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        saver_path, core_path = build(a.store, a.turns, work)
        got = {"saver": breakdown(saver_path), "core": breakdown(core_path)}
    print(table(f"saver, {a.turns} turns, {a.store}", got["saver"]))
    print()
    print(table(f"core API, same messages, {a.store}", got["core"]))
    print(f"\nsaver / core: {got['saver']['total'] / max(got['core']['total'], 1):.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(got, f, indent=1)
    return got


if __name__ == "__main__":
    main()
