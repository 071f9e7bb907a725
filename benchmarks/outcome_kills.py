"""SIGKILL campaign on ``CheckpointedLoop`` with tool outcomes (issue 27 item 6):
``python -m benchmarks.outcome_kills --kills 60``.

A child process runs a deterministic model loop (``--roundtrips`` roundtrips of ``--calls``
parallel tool calls each, then a final answer) over a local repository; each tool appends
``ran <call id>`` to a side-effect log (fsynced) and the child's ``record_outcome`` appends
``rec <call id>`` once the outcome is recorded. The parent kills the child with SIGKILL at a random
moment after it starts, ``--kills`` times, restarting it (it resumes from the run's latest
checkpoint), then lets it finish. Counted:

* ``twice_recorded``: side effects that ran again after their outcome was recorded (must be 0);
* ``twice_total``: every call id that ran more than once (a kill between a tool's side effect
  and its record is the at-least-once window no store can close);
* ``calls``: distinct call ids run; ``verify_ok``: ``verify()`` of the repository at the end;
  ``final_ok``: the final run holds every roundtrip's tool messages once.

``--no-outcomes`` runs the same loop with outcomes disabled (the baseline before them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def child(repo: str, sidefile: str, roundtrips: int, calls: int, use_outcomes: bool) -> None:
    """The agent process: resume the run ``r`` and drive the loop to its final answer."""
    from snapstore import CheckpointManager
    from snapstore.integrations.workflows import CheckpointedLoop

    mgr = CheckpointManager(repo)
    if use_outcomes:
        real = mgr.record_outcome

        def record_outcome(run_id, checkpoint_id, call_id, result):
            out = real(run_id, checkpoint_id, call_id, result)
            _append(sidefile, f"rec {call_id}")
            return out
        mgr.record_outcome = record_outcome
    else:
        mgr.record_outcome = lambda *a, **k: True
        mgr.outcomes = lambda *a, **k: {}
    loop = CheckpointedLoop(mgr, "r", [{"role": "user", "content": "go"}])
    loop.resume()

    def complete(messages):
        k = sum(1 for m in messages if m.get("role") == "assistant")
        if k >= roundtrips:
            return {"role": "assistant", "content": "done"}, {"prompt_tokens": 1}
        return ({"role": "assistant", "content": None,
                 "tool_calls": [{"id": f"call-{k}-{j}", "type": "function",
                                 "function": {"name": "act", "arguments": json.dumps({"n": j})}}
                                for j in range(calls)]},
                {"prompt_tokens": 10, "completion_tokens": 2})

    def act(n):
        time.sleep(random.uniform(0, 0.01))
        return {"n": n}

    # the tool needs its call id for the side-effect log: wrap per call via the messages
    def tools_for():
        def act_logged(n):
            cid = f"call-{sum(1 for m in loop.messages if m.get('role') == 'assistant') - 1}-{n}"
            _append(sidefile, f"ran {cid}")
            return act(n)
        return {"act": act_logged}

    print("go", flush=True)
    loop.run(complete, tools_for(), max_roundtrips=roundtrips + 1)


def campaign(kills: int, roundtrips: int, calls: int, use_outcomes: bool = True, seed: int = 0,
             max_delay: float = 0.4, workdir: str | None = None) -> dict:
    """Run the campaign; return the counts described in the module docstring plus ``seconds``."""
    rng = random.Random(seed)
    work = workdir or tempfile.mkdtemp(prefix="outcome-kills-")
    repo, side = os.path.join(work, "repo"), os.path.join(work, "side.log")
    cmd = [sys.executable, "-m", "benchmarks.outcome_kills", "--child", repo, side, str(roundtrips), str(calls),
           "1" if use_outcomes else "0"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    done_kills = 0
    while done_kills < kills:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=str(ROOT), env=env)
        p.stdout.readline()  # "go": imports done, the loop starts
        time.sleep(rng.uniform(0, max_delay))
        if p.poll() is not None:
            break  # finished before the kill: the campaign ends early
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        done_kills += 1
    subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=str(ROOT), env=env, check=True)
    seconds = time.monotonic() - t0
    ran, twice_recorded, recorded = Counter(), 0, set()
    for line in open(side).read().splitlines():
        what, cid = line.split(" ", 1)
        if what == "rec":
            recorded.add(cid)
        else:
            if cid in recorded:
                twice_recorded += 1
            ran[cid] += 1
    from snapstore import CheckpointManager
    mgr = CheckpointManager(repo)
    cp = mgr.latest("r")
    tool_ids = [m["tool_call_id"] for m in cp.messages if m.get("role") == "tool"]
    want = [f"call-{k}-{j}" for k in range(roundtrips) for j in range(calls)]
    return {"kills": done_kills, "calls": len(ran), "twice_recorded": twice_recorded,
            "twice_total": sum(1 for c in ran.values() if c > 1), "verify_ok": mgr.verify().ok,
            "final_ok": tool_ids == want and cp.status == "completed", "seconds": round(seconds, 1)}


def main(argv=None) -> None:
    """Command line: see the module docstring."""
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--child":
        repo, side, rt, calls, use = argv[1:6]
        child(repo, side, int(rt), int(calls), use == "1")
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=60)
    ap.add_argument("--roundtrips", type=int, default=400)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-outcomes", action="store_true")
    a = ap.parse_args(argv)
    print(json.dumps(campaign(a.kills, a.roundtrips, a.calls, not a.no_outcomes, a.seed)))


if __name__ == "__main__":
    main()
