"""A format-1 repository written by the previous release reads, verifies, continues and is upgraded
by GC.

The fixture is made by the release itself: the package of commit ``FORMAT1_COMMIT`` (the last one
that wrote format 1) is extracted with ``git archive`` and run in a separate process to write a
repository; then this checkout reads it. Skipped when git or that commit is not available (e.g. a
shallow clone).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.helpers.old_release import extract_release

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.config import RepoConfig
from snapstore.stores import LocalStore
from tests.helpers import paths

FORMAT1_COMMIT = "c6f8675"
ROOT = paths.ROOT

WRITER = r'''
import json, sys
from snapstore import CheckpointManager
root, out = sys.argv[1], sys.argv[2]
m = CheckpointManager(root)
msgs = [{"role": "system", "content": "You are a format-1 agent."}]
expect = {"runs": {}, "ids": {}}
ids = []
for i in range(40):
    msgs = msgs + [{"role": "assistant", "content": f"step {i} " * 30, "n": i},
                   {"role": "tool", "content": ("result %d " % i) * 50}]
    kw = {"checkpoint_id": f"named-{i}"} if i == 7 else {}
    ids.append(m.save("r1", msgs, step=i, session_state={"i": i, "blob": "x" * (6000 if i == 9 else 10)}, **kw))
    expect["ids"][ids[-1]] = msgs
m.fork("r1", ids[20], "r1-fork")
m.rollback("r1", ids[35])
m.save("r2", [{"role": "user", "content": "other run \u00e9\ud800"}])
expect["runs"]["r1"] = expect["ids"][ids[35]]
expect["runs"]["r1-fork"] = expect["ids"][ids[20]]
expect["runs"]["r2"] = [{"role": "user", "content": "other run \u00e9\ud800"}]
expect["order"] = ids[:36]
json.dump(expect, open(out, "w"))
'''


@pytest.fixture(scope="module")
def format1_repo(tmp_path_factory):
    base = tmp_path_factory.mktemp("format1")
    src = extract_release(FORMAT1_COMMIT, base)
    root, out = base / "repo", base / "expect.json"
    proc = subprocess.run([sys.executable, "-c", WRITER, str(root), str(out)], cwd=str(base),
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return root, json.loads(out.read_text())


def _same(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)


def test_format1_repository_reads_verifies_continues_and_gc_upgrades(format1_repo, tmp_path):
    import shutil
    root = tmp_path / "repo"
    shutil.copytree(format1_repo[0], root)
    expect = format1_repo[1]
    store = LocalStore(root, fsync=False)
    assert RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG)).version == 1
    m = CheckpointManager(store)
    for run, msgs in expect["runs"].items():
        assert _same(m.latest(run).messages, msgs), run
    assert m.runs() == sorted(expect["runs"])
    assert [s.id for s in m.list("r1")] == expect["order"][::-1]
    for cid in expect["order"][::7]:
        assert _same(m.get("r1", cid).messages, expect["ids"][cid])
    rep = m.verify(read_data=True)  # the rollback left the later saves' packs: warnings only
    assert rep.ok and {p.code for p in rep.warnings} <= {"unreferenced-pack"}, [str(p) for p in rep.errors + rep.warnings]

    # this version continues the run: format-2 records (segment lists, log segments) beside format 1
    cont = CheckpointManager(LocalStore(root, fsync=False))
    msgs = cont.latest("r1").messages
    for i in range(40):
        msgs = msgs + [{"role": "assistant", "content": f"v2 step {i}"}]
        cont.save("r1", msgs, step=100 + i)
    head = cont.repo.head(cont.repo.run_key("r1"))
    assert head.segment_list() and any(s.level >= 1 for s in head.segment_list())
    fresh = CheckpointManager(LocalStore(root, fsync=False))
    assert _same(fresh.latest("r1").messages, msgs)
    assert len(fresh.list("r1")) == 36 + 40
    rep = fresh.verify(read_data=True)
    assert rep.ok and {p.code for p in rep.warnings} <= {"unreferenced-pack"}, [str(p) for p in rep.errors + rep.warnings]
    # nothing was rewritten in place: the config is still the format-1 object
    assert RepoConfig.from_bytes(keys.CONFIG, store.get(keys.CONFIG)).version == 1

    # GC upgrades the format-1 part: the per-save packs are repacked into a few large packs, so a
    # cold read of the old run no longer touches one pack per save
    per_save_before = sum(1 for i in store.list(keys.PACKS))
    fresh.gc(grace_period=0)
    fresh.gc(grace_period=0)
    after = sum(1 for i in store.list(keys.PACKS))
    assert after < per_save_before / 4, (per_save_before, after)
    cold = CheckpointManager(LocalStore(root, fsync=False))
    cold.repo
    before = cold.store.stats.snapshot()
    assert _same(cold.latest("r1-fork").messages, expect["runs"]["r1-fork"])
    assert _same(cold.latest("r1").messages, msgs)
    d = cold.store.stats.since(before)
    assert d.counts["GET"] <= 20, d
    rep = cold.verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]
    for run, want in expect["runs"].items():
        if run != "r1":
            assert _same(cold.latest(run).messages, want)
