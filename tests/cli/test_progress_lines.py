"""Progress lines off a terminal: a log file gets at most one line per phase and no carriage
returns (it used to get a line every 5 s of every phase); on a terminal the line is redrawn."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.helpers import paths

SCRIPT = textwrap.dedent("""
    import sys, time
    from snapstore.cli import output
    clock = [0.0]
    output.time.monotonic = lambda: clock[0]  # the process's own clock: 0.5 s per update
    p = output.Progress(True)
    for phase in ("marking", "repacking", "sweeping"):
        for i in range(60):
            clock[0] += 0.5
            p.update(f"gc {phase}: {i + 1}/60", force=i == 59)
    p.clear()
    print("tty" if p.tty else "not a tty", file=sys.stderr)
""")


def test_a_log_file_gets_one_line_per_phase(tmp_path):
    log = tmp_path / "stderr.log"
    env = dict(os.environ, PYTHONPATH=str(paths.ROOT))
    with open(log, "wb") as f:
        r = subprocess.run([sys.executable, "-c", SCRIPT], stderr=f, stdout=subprocess.PIPE, env=env)
    assert r.returncode == 0
    text = log.read_bytes().decode()
    assert "\r" not in text and "\x1b" not in text, repr(text)
    lines = text.splitlines()
    assert lines[-1] == "not a tty"
    phases = [ln.split(":")[0] for ln in lines[:-1]]
    assert phases == ["gc marking", "gc repacking", "gc sweeping"], lines
