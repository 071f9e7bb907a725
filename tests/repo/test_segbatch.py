"""Log segments, their lower-level deletions and log stubs at one commit (snapstore/repo/log/segbatch.py,
docs/format.md §12, §14) on the two stores with atomic batches, through the real CheckpointManager.

Counted on real stores: fsyncs on a directory (``os.fsync`` / ``os.fdatasync`` on every thread but
the background settler's, as tests/stores/test_local_wal.py counts them) and commits on a SQLite file
(the store's ``commits``), over 600 saves: the saves ending a level-2 range (positions 255 and 511)
included. Then the rules the ordered writes keep: a level-2 segment built over stubs holds every
copy and the level-1 segments go; a level-2 writer that misses a listed record deletes nothing; a
batch refused on an existing segment falls back to the ordered writes; a stub whose checked copy
the batch deletes is written only if the new segment holds its position.
"""

from __future__ import annotations

import os
import threading

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.logseg import decode_logseg, logseg_key
from snapstore.repo.log import segbatch
from snapstore.repo.log.stubs import prefetch
from snapstore.stores import LocalStore
from snapstore.stores.sqlite import SqliteStore


def turn(i: int) -> list[dict]:
    return [{"role": "assistant", "content": f"step {i}: tool call {i * 7919 % 10007}"},
            {"role": "tool", "content": f"result {i}: " + "ok " * (i % 13 + 5)}]


def segments(store, rk: str) -> dict[int, list[int]]:
    """``level -> sorted hi`` of the run's stored log segments."""
    out: dict[int, list[int]] = {}
    for i in store.list(f"runs/{rk}/l/"):
        name = i.key.rsplit("/", 1)[1]
        hexpart, level = name.split(".")
        out.setdefault(int(level), []).append((1 << 64) - 1 - int(hexpart, 16))
    return {k: sorted(v) for k, v in out.items()}


def sizes(store, rk: str) -> dict[int, int]:
    return {keys.seq_from_manifest_key(i.key): i.size for i in store.list(keys.manifests_prefix(rk))}


def save_run(mgr, n: int, per_save, run: str = "r", start: int = 0) -> list[int]:
    """Save ``n`` checkpoints (each two messages more); ``per_save()`` is read before and after
    each save and the differences returned."""
    messages = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(start):
        messages = messages + turn(i)
    out = []
    for i in range(start, start + n):
        messages = messages + turn(i)
        before = per_save()
        mgr.save(run, messages, step=i)
        out.append(per_save() - before)
    return out


def check_readable(loc, n: int) -> None:
    fresh = CheckpointManager(loc)
    cps = fresh.list("r")
    assert [c.step for c in cps] == list(range(n - 1, -1, -1))
    assert fresh.get("r", cps[-1].id).messages[-1] == turn(0)[-1]
    assert fresh.get("r", cps[n // 2].id).step == n - 1 - n // 2
    assert fresh.verify().ok
    fresh.close()


def test_600_saves_on_a_directory_cost_at_most_two_fsyncs_each(tmp_path, monkeypatch):
    root = str(tmp_path / "repo")
    mgr = CheckpointManager(root)
    assert mgr.compact_log  # a directory stubs: every 16th save writes segments AND stubs
    mgr.save("warm", [{"role": "user", "content": "warm"}])  # the config and the journal exist
    calls = {"path": 0, "settler": 0}
    real = os.fsync, os.fdatasync

    def counted(fn):
        def call(fd):
            calls["settler" if threading.current_thread().name == "snapstore-settler" else "path"] += 1
            return fn(fd)
        return call
    monkeypatch.setattr(os, "fsync", counted(real[0]))
    monkeypatch.setattr(os, "fdatasync", counted(real[1]))
    per = save_run(mgr, 600, lambda: calls["path"])
    monkeypatch.setattr(os, "fsync", real[0])
    monkeypatch.setattr(os, "fdatasync", real[1])
    rk = mgr.repo.run_key("r")
    assert max(per) <= 2, [(i, c) for i, c in enumerate(per) if c > 2]
    assert per[255] == per[511] == 2 and per[31] == 2 and per[100] == 1  # segments+stubs: one more
    segs = segments(mgr.store, rk)
    assert segs[2] == [255, 511]  # level 2 written ...
    assert segs[1] == list(range(527, 600, 16))  # ... and the level-1 segments under them deleted
    s = sizes(mgr.store, rk)
    assert [p for p in range(600) if s[p] == 0] == list(range(0, 576))  # stubbed up to 31 behind
    mgr.close()
    check_readable(root, 600)


def test_600_saves_on_sqlite_cost_at_most_two_commits_each(tmp_path):
    store = SqliteStore(tmp_path / "r.db")
    mgr = CheckpointManager(store)
    mgr.save("warm", [{"role": "user", "content": "warm"}])
    per = save_run(mgr, 600, lambda: store.commits)
    assert max(per) <= 2, [(i, c) for i, c in enumerate(per) if c > 2]
    assert per[255] == per[511] == 2  # the publish, then the level-2 segment with the deletions
    assert segments(store, mgr.repo.run_key("r")) == {1: list(range(527, 600, 16)), 2: [255, 511]}
    mgr.close()
    check_readable(f"sqlite://{tmp_path / 'r.db'}", 600)


@pytest.fixture(params=["local", "sqlite"])
def loc(request, tmp_path):
    return str(tmp_path / "repo") if request.param == "local" else f"sqlite://{tmp_path / 'r.db'}"


def test_level2_batch_over_stubs_keeps_every_copy(loc):
    """The level-2 writer holds only 16 records: the other 240 come from the level-1 segments
    (the stubs have no content to GET), and the batch then deletes those segments."""
    mgr = CheckpointManager(loc, compact_log=True)
    mgr.LOG_CACHE = 16
    save_run(mgr, 256, lambda: 0)
    rk = mgr.repo.run_key("r")
    assert sum(1 for v in sizes(mgr.store, rk).values() if v == 0) == 240  # 0..239: the newest 16 stay full
    copies = decode_logseg("k", mgr.store.get(logseg_key(rk, 255, 2)))
    assert [c.seq for c in copies] == list(range(256))
    assert segments(mgr.store, rk) == {2: [255]}
    mgr.close()
    check_readable(loc, 256)


def test_level2_batch_deletes_nothing_when_a_listed_copy_is_missing(loc):
    mgr = CheckpointManager(loc, compact_log=True)
    mgr.LOG_CACHE = 16
    save_run(mgr, 250, lambda: 0)
    rk = mgr.repo.run_key("r")
    mgr.store.delete_many([logseg_key(rk, 31, 1)])  # stubs 16..31 lose their only copy
    save_run(mgr, 6, lambda: 0, start=250)
    segs = segments(mgr.store, rk)
    assert segs[1] == [s for s in range(15, 256, 16) if s != 31]  # all 15 kept
    assert segs[2] == [255]
    rep = CheckpointManager(loc).verify()
    assert sorted({p.code for p in rep.errors}) == ["compacted-record-without-copy"]
    assert len(rep.errors) == 16
    mgr.close()


def test_a_stub_whose_checked_copy_the_batch_deletes_needs_the_new_segment(loc, monkeypatch):
    """At position 255 the stubs of 224..239 are checked against the level-1 segment ending at
    239, which the level-2 batch deletes: a stub whose position the new segment does not hold is
    not written (fault injected: the plan reports 230 as not held, which only a race between the
    two LISTs could cause), the others are, in the same batch."""
    import snapstore.manager.publish as publish
    mgr = CheckpointManager(loc, compact_log=True)
    save_run(mgr, 255, lambda: 0)
    rk = mgr.repo.run_key("r")
    monkeypatch.setattr(publish, "write_at_one_commit", lambda *a, **kw: ([], [], False))
    messages = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(256):
        messages = messages + turn(i)
    mgr.save("r", messages, step=255)  # published with its level-1 segment; nothing after it
    monkeypatch.undo()
    assert segments(mgr.store, rk) == {1: list(range(15, 256, 16))}
    real_plan = segbatch.plan_logsegs

    def plan_without_230(*a, **kw):
        p = real_plan(*a, **kw)
        p.held.discard(230)
        return p
    monkeypatch.setattr(segbatch, "plan_logsegs", plan_without_230)
    known = dict(mgr.state.views.get("r").log_cache)
    done = [logseg_key(rk, 255, 1)]
    written, stubbed, _ = segbatch.write_at_one_commit(mgr.repo, rk, 255, known, done, prefetch(mgr.repo, rk, 255))
    assert written == done + [logseg_key(rk, 255, 2)]
    assert stubbed == [s for s in range(224, 240) if s != 230]
    s = sizes(mgr.store, rk)
    assert s[230] > 0 and all(s[p] == 0 for p in stubbed)
    assert segments(mgr.store, rk) == {2: [255]}  # the level-1 segments went in the same batch
    mgr.close()
    check_readable(loc, 256)


def test_a_batch_refused_on_an_existing_segment_falls_back_to_the_ordered_writes(loc):
    """A level-2 segment already stored (a racing writer of the same range, an earlier attempt):
    the batch is refused on it; the ordered writes keep the stored one and the stubs still go."""
    mgr = CheckpointManager(loc, compact_log=True)
    save_run(mgr, 255, lambda: 0)
    rk = mgr.repo.run_key("r")
    k2 = logseg_key(rk, 255, 2)
    mgr.store.put(k2, b"\x00 not a segment")  # exists: create-only writes of it fail
    messages = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(256):
        messages = messages + turn(i)
    mgr.save("r", messages, step=255)
    assert mgr.store.get(k2) == b"\x00 not a segment"  # never overwritten
    segs = segments(mgr.store, rk)
    assert segs[1] == list(range(15, 256, 16))  # nothing deleted under a segment not ours
    s = sizes(mgr.store, rk)
    assert all(s[p] == 0 for p in range(224, 240))  # the stubs of the range still written
    mgr.close()
    check_readable(loc, 256)
