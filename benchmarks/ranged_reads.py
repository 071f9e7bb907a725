"""Ranged pack reads: bytes and GETs of a fresh read next to large session states, whole packs vs
byte ranges (docs/format.md §19).

Run (from the repository root)::

    python benchmarks/ranged_reads.py

Workloads, each on a fresh local repository (``LocalStore`` on a temp dir, fsync off), read by a
fresh ``CheckpointManager`` (no cache) and counted through the store's ``stats`` (GETs and bytes
received; the LIST of the run's head is not a GET):

* **big state**: one checkpoint of one small message, then 15 saves each appending a ~200-byte
  message and rewriting a 1 MiB session state whole (base64 of seeded random bytes); after the
  16th save the run's data sits in one tier pack of about 12 MB. Read: ``get()`` of the first
  (small) checkpoint and ``latest()`` (its messages and its 1 MiB state).
* **rewritten key**: the known limit of docs/format.md §7, one 50 KB key rewritten whole at each
  of 100 saves (``benchmarks/storage.py --state-only`` prints the same ratio); ``latest()``.

Each read is done three ways (``PackCache.range_tail`` replaced): packs read whole (a suffix
past any pack: what the reader did before ranged reads), the default (a suffix of what the
checkpoint needs per its manifest, see ``PackCache.range_tail``, then only the needed blocks), and a
fixed 1 MiB suffix. Results equal in every case.
"""

from __future__ import annotations

import base64
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from snapstore import CheckpointManager  # noqa: E402
from snapstore.repo.packcache import PackCache  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

_DEFAULT_TAIL = PackCache.range_tail
TAILS = {"whole packs": lambda self, m: 1 << 40,
         "ranged, tail from the manifest (default)": _DEFAULT_TAIL,
         "ranged, fixed 1 MiB tail": lambda self, m: 1 << 20}


def big_state(i: int, nbytes: int) -> dict:
    return {"step": i, "blob": base64.b64encode(random.Random(i).randbytes(nbytes * 3 // 4)).decode()}


def measure(store, read) -> tuple[int, int, object]:
    before = store.stats.snapshot()
    got = read(CheckpointManager(store))
    d = store.stats.since(before)
    return d.counts["GET"], d.bytes_down, got


def rows(name: str, store, reads: dict) -> None:
    packs = sum(o.size for o in store.list("packs/"))
    print(f"\n{name}: packs hold {packs:,} bytes in {sum(1 for _ in store.list('packs/'))} objects")
    for what, (read, want) in reads.items():
        for label, tail in TAILS.items():
            PackCache.range_tail = tail
            gets, nbytes, got = measure(store, read)
            assert want(got), (what, label)
            print(f"  {what:<37} {label:<41} {gets:>3} GETs {nbytes:>11,} bytes")
    PackCache.range_tail = _DEFAULT_TAIL


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(tmp + "/big", fsync=False)
        mgr = CheckpointManager(store)
        msgs = [{"role": "user", "content": "fix the bug"}]
        first = mgr.save("r", msgs, step=0)
        for i in range(1, 16):
            msgs = msgs + [{"role": "assistant", "content": f"tool call {i} " * 16}]
            mgr.save("r", msgs, step=i, session_state=big_state(i, 1 << 20))
        final, state = list(msgs), big_state(15, 1 << 20)
        rows("big state (16 saves, a 1 MiB state rewritten at 15)", store, {
            "get(first checkpoint): 1 message": (lambda m: m.get("r", first), lambda cp: cp.messages == final[:1]),
            "latest(): 16 messages + 1 MiB state": (lambda m: m.latest("r"),
                                                    lambda cp: cp.messages == final and cp.session_state == state),
        })

        store = LocalStore(tmp + "/key", fsync=False)
        mgr = CheckpointManager(store)
        base = {"cwd": "/repo", "notes": "x" * 200}
        for i in range(100):
            st = dict(base, doc=base64.b64encode(random.Random(1000 + i).randbytes(37_500)).decode())
            mgr.save("k", [{"role": "user", "content": "go"}], step=i, session_state=st)
        rows("rewritten key (a 50 KB key rewritten at each of 100 saves)", store, {
            "latest()": (lambda m: m.latest("k"), lambda cp: cp.session_state == st),
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
