"""Two real OS processes share a run through S3 (moto's HTTP server on 127.0.0.1).

Process 1 (pytest) saves a run to ``s3://bucket/prefix`` with ``endpoint_url``. Process 2 (a real
subprocess: ``subprocess.run([sys.executable, "-c", ...])``) finds the repository only through its
environment (``SNAPSTORE_URL``, ``AWS_ENDPOINT_URL_S3``, dummy credentials, an empty
``SNAPSTORE_CACHE_DIR``), resumes the run with ``latest()``, checks the restore is exact and appends a
checkpoint. Process 1's next save then raises ConflictError and overwrites nothing; process 1 forks
its own last checkpoint under a new run id (one small manifest PUT: no data copied) and continues its
divergent work there, then reloads the shared run with ``latest()`` and continues it too. A third
process checks both runs exactly.

The moto server runs in the pytest process; the subprocesses talk to it over HTTP.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest

from snapstore import CheckpointManager, ConflictError

from tests.helpers.s3_fixtures import DUMMY_ENV, _http_store
from tests.helpers import paths

ROOT = paths.ROOT
RUN = "agent-run/42 ✓"

CHILD = r'''
import json, os, pickle, sys
import snapstore
from snapstore import CheckpointManager

mode, path = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    job = pickle.load(f)
mgr = CheckpointManager()  # $SNAPSTORE_URL, endpoint and credentials from the environment
out = {"pid": os.getpid(), "snapstore": snapstore.__file__, "url": mgr.store.url}
if mode == "resume":
    cp = mgr.latest(job["run"])
    assert cp is not None, "run not found"
    assert repr(cp.messages) == repr(job["messages"]), "restored messages differ"
    assert (cp.id, cp.step, repr(cp.token_usage), repr(cp.session_state)) == \
        (job["id"], job["step"], repr(job["token_usage"]), repr(job["session_state"])), "restored fields differ"
    before = mgr.store.stats.snapshot()
    cid = mgr.save(job["run"], cp.messages + job["append"], step=cp.step + 1, agent_id="process-2")
    out.update(id=cid, save_requests=mgr.store.stats.since(before).counts)
else:  # check: exact restore of several runs
    for run, (cid, msgs) in job["expect"].items():
        cp = mgr.latest(run)
        assert cp.id == cid, (run, cp.id, cid)
        assert repr(cp.messages) == repr(msgs), f"{run}: restored messages differ"
    out["checked"] = sorted(job["expect"])
out["cache_dir"] = os.listdir(os.environ["SNAPSTORE_CACHE_DIR"])
print(json.dumps(out))
'''


_WORDS = ("the a to of and in is that for it this with on be as are we not file function test should will "
          "can now let me check error value return code change fix issue line call class method module "
          "import output run first then look expected result update def self None raise assert").split()


def msg(i: int, who: str = "p1") -> list[dict]:
    """Two messages of one turn (~1.5 KB), with values that must survive exactly (unicode, big ints,
    lone surrogates)."""
    rng = random.Random(f"{who}-{i}")
    text = " ".join(rng.choice(_WORDS) for _ in range(200))
    return [{"role": "assistant", "content": f"[{who}] step {i}: running the tests — ünïcödé ✓ 🚀 {text[:300]}",
             "tool_calls": [{"id": f"call-{who}-{i}", "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}]},
            {"role": "tool", "tool_call_id": f"call-{who}-{i}", "content": text,
             "meta": {"n": 2**70 + i, "f": 0.1 * i, "raw": "lone \ud800 surrogate"}}]


def run_child(mode: str, job: dict, env: dict, tmp_path: Path) -> dict:
    path = tmp_path / f"job-{mode}.pkl"
    path.write_bytes(pickle.dumps(job))
    r = subprocess.run([sys.executable, "-c", CHILD, mode, str(path)], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 0, f"process 2 failed:\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def shared(moto_server, tmp_path):
    """(url, endpoint, env for the other process) for a fresh bucket and prefix."""
    seed = _http_store(moto_server)  # creates the bucket
    seed.close()
    url = f"s3://{seed.bucket}/teams/agents"
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    env.update(DUMMY_ENV)
    env.update(SNAPSTORE_URL=url, AWS_ENDPOINT_URL_S3=moto_server, SNAPSTORE_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT), AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"))
    return url, moto_server, env


def test_resume_on_another_process_then_conflict_fork_and_reload(shared, tmp_path):
    url, endpoint, env = shared
    p1 = CheckpointManager(url, endpoint_url=endpoint)
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
    for i in range(10):
        msgs = msgs + msg(i)
        last = p1.save(RUN, msgs, step=i, token_usage={"input_tokens": 10**6 + i, "output_tokens": 7},
                       session_state={"cwd": "/repo", "big": 2**80})
    packs_before = p1.stats()["objects"]["packs"]

    # process 2 resumes the run and appends
    appended = msg(10, who="p2")
    out = run_child("resume", {"run": RUN, "messages": msgs, "id": last, "step": 9,
                               "token_usage": {"input_tokens": 10**6 + 9, "output_tokens": 7},
                               "session_state": {"cwd": "/repo", "big": 2**80}, "append": appended}, env, tmp_path)
    assert out["pid"] != os.getpid() and out["snapstore"].startswith(str(ROOT))
    assert out["url"].startswith(url)
    p2_id = out["id"]
    assert out["save_requests"]["PUT"] <= 3 and out["save_requests"]["GET"] == 0, out["save_requests"]
    assert out["cache_dir"] == []  # snapstore keeps no local cache

    # process 1 does not know: its next save is refused, nothing is overwritten
    mine = msgs + msg(10, who="p1")
    with pytest.raises(ConflictError):
        p1.save(RUN, mine, step=10)
    check = CheckpointManager(url, endpoint_url=endpoint)
    head = check.latest(RUN)
    assert head.id == p2_id and head.agent_id == "process-2" and repr(head.messages) == repr(msgs + appended)
    assert [s.id for s in check.list(RUN, limit=2)] == [p2_id, last]

    # option 1: fork its own last checkpoint under a new run id: the manifest and one compressed
    # copy of what that checkpoint needs (format 2: the fork does not depend on the source's packs)
    before = p1.store.stats.snapshot()
    fork = p1.fork(RUN, last, "my-branch")
    d = p1.store.stats.since(before)
    # (+ the new run's live marker, an empty object: docs/format.md §13)
    assert d.counts["PUT"] == 3 and d.bytes_up < len(repr(msgs)) / 2, d
    assert repr(fork.messages) == repr(msgs)
    before = p1.store.stats.snapshot()
    branch_id = p1.save("my-branch", mine, step=10)  # continue the divergent work on the fork
    d = p1.store.stats.since(before)
    assert d.counts["PUT"] == 2 and d.counts["GET"] == d.counts["LIST"] == 0, d

    # option 2: reload the shared run and continue from process 2's checkpoint
    cp = p1.latest(RUN)
    assert cp.id == p2_id and repr(cp.messages) == repr(msgs + appended)
    shared_msgs = cp.messages + msg(11, who="p1")
    p1_id = p1.save(RUN, shared_msgs, step=11)
    assert CheckpointManager(url, endpoint_url=endpoint).get(RUN, p1_id).parent_id == p2_id

    # a third process sees both runs exactly
    out = run_child("check", {"expect": {RUN: (p1_id, shared_msgs), "my-branch": (branch_id, mine)}}, env, tmp_path)
    assert out["checked"] == sorted([RUN, "my-branch"]) and out["cache_dir"] == []
    assert CheckpointManager(url, endpoint_url=endpoint).verify(read_data=True).ok
