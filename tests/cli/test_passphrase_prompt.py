"""On a terminal, every command that opens an encrypted repository asks for its passphrase when
$SNAPSTORE_PASSPHRASE is not set (a trial found only init and key asking); off a terminal it says
what to set and exits 1. A real pseudo-terminal (pty.fork): the child has it as its controlling
terminal, as a user's shell would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from snapstore import CheckpointManager

pytestmark = pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a POSIX pseudo-terminal")

MSGS = [{"role": "user", "content": "a word only this test writes: quokka"}]


def _on_a_terminal(args: list[str], answer: str, env: dict, timeout: float = 60.0) -> tuple[int, str]:
    """Run ``python -m snapstore ARGS`` on a new pty, type ``answer`` at its first prompt; returns
    (exit status, everything it printed on the terminal)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal and stdin/stdout/stderr
        try:
            os.execve(sys.executable, [sys.executable, "-m", "snapstore", *args], env)
        finally:
            os._exit(127)
    out, answered, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        if not answered and b"Passphrase:" in out:
            os.write(fd, answer.encode() + b"\n")
            answered = True
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_list_and_export_ask_for_the_passphrase_on_a_terminal(tmp_path):
    repo = str(tmp_path / "repo")
    with CheckpointManager(repo, passphrase="right one") as m:
        m.save("r", MSGS)
    env = {k: v for k, v in os.environ.items() if k not in ("SNAPSTORE_PASSPHRASE", "SNAPSTORE_KMS_KEY")}
    code, out = _on_a_terminal(["--repo", repo, "export", "r"], "right one", env)
    assert code == 0 and "Passphrase:" in out and "quokka" in out, out
    code, out = _on_a_terminal(["--repo", repo, "list", "r"], "wrong one", env)
    assert code == 1 and "wrong passphrase" in out and "quokka" not in out, out
    # off a terminal: no prompt, one line saying what to set
    p = subprocess.run([sys.executable, "-m", "snapstore", "--repo", repo, "runs"], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "is encrypted: give a passphrase ($SNAPSTORE_PASSPHRASE" in p.stderr, p.stderr
    assert "Passphrase:" not in p.stdout + p.stderr
