"""Encrypted against plain restore in instructions (valgrind's callgrind), which a loaded machine
does not change: the measure behind docs/format.md §27 "Timing".

Run (from the repository root; needs ``valgrind``)::

    python benchmarks/encryption_instructions.py                       # the taubench file
    python benchmarks/encryption_instructions.py --file claudecode-cctrace-phase0.jsonl

What it does: saves every conversation of one shared trajectory file into two fresh directory
repositories (plain; encrypted, ``SealedStore``, as ``benchmarks/encryption.py`` does), then for
each side runs a child process under ``valgrind --tool=callgrind`` that opens the repository
(the encrypted side unlocked: one scrypt) and restores every conversation's latest checkpoint
with a fresh manager ``n`` times (``gc.collect()`` before each), for ``n`` = 1 and 3. The
instructions of one restore are half the difference of the two children's totals (the start,
the imports, the trajectory's parsing and the unlock cancel out). Printed: per side, the
instructions of one restore, and their ratio encrypted/plain.
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import _lib  # noqa: E402

PASSPHRASE = "benchmark passphrase"


def _convs(name: str) -> list:
    from snapstore.importers import load_trajectory

    _fmt, convs = load_trajectory(_lib.shared_dir() / name)
    return [c for c in convs if c.checkpoints]


def _store(side: str, path: Path):
    from snapstore.stores.crypt import SealedStore
    from snapstore.stores.local import LocalStore

    inner = LocalStore(path, fsync=False)
    return SealedStore(inner, PASSPHRASE) if side == "encrypted" else inner


def child(side: str, path: Path, name: str, n: int) -> None:
    """Restore every conversation of ``name`` from the repository at ``path`` ``n`` times."""
    from snapstore import CheckpointManager

    convs = _convs(name)
    store = _store(side, path)
    if side == "encrypted":
        store.content_key  # unlock (one scrypt), as the timed benchmark does before its clock
    for _ in range(n):
        gc.collect()
        mgr = CheckpointManager(store)
        got = [mgr.latest(f"run-{i}").messages for i in range(len(convs))]
        assert got == [c.checkpoints[-1] for c in convs], f"{side}: a restored history differs"


def instructions(side: str, path: Path, name: str, n: int) -> int:
    """Instructions callgrind counts for a child restoring ``n`` times."""
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                          __file__, "--child", side, str(path), name, str(n)],
                         capture_output=True, text=True, check=True)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if m is None:
        raise RuntimeError(f"no callgrind total in: {out.stderr[-500:]}")
    return int(m.group(1))


def measure(name: str) -> dict | None:
    """``{"file", "plain", "encrypted", "ratio"}``: instructions of one restore per side; None
    without the shared data."""
    if _lib.shared_dir() is None:
        return None
    sys.path.insert(0, str(HERE))
    import encryption

    convs = _convs(name)
    out = {"file": name}
    with tempfile.TemporaryDirectory(prefix="snapstore-enc-instr-") as tmp:
        for side in ("plain", "encrypted"):
            path = Path(tmp) / side
            encryption.save_side(side, path, convs, False)
            one, three = (instructions(side, path, name, n) for n in (1, 3))
            out[side] = (three - one) // 2
            shutil.rmtree(path)
    out["ratio"] = _lib.ratio(out["encrypted"], out["plain"])
    return out


def report(r: dict) -> str:
    """One line per side and the ratio."""
    return (f"{r['file']}: one restore, plain {r['plain']:,} instructions, encrypted {r['encrypted']:,} "
            f"(+{r['encrypted'] - r['plain']:,}); encrypted/plain {r['ratio']:.3f}")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``--file NAME`` (a shared trajectory file), ``--json PATH``."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        side, path, name, n = argv[1:5]
        child(side, Path(path), name, int(n))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default="taubench-gpt4o-airline.json", help="a shared trajectory file's name")
    ap.add_argument("--json", default=None, help="write the result here")
    a = ap.parse_args(argv)
    return _lib.emit(measure(a.file), report, a.json)


if __name__ == "__main__":
    sys.exit(main())
