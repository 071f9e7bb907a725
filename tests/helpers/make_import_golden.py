"""Write ``tests/data/import_golden.json``: what importing each shared trajectory produces.

Run from the project root: ``python tests/helpers/make_import_golden.py``. For each shared file it
records the format, and per conversation the run id the CLI gives it, the length of every checkpoint
(the turns) and a SHA-256 over the SHA-256s of the exact JSON of every checkpoint (the exports).
``tests/importers/test_importers.py`` checks the importer against it, so a change of behaviour on the
shared runs shows up as a failing test. The committed file was made with the importer as it was
before issue 13 (commit 14ad0c1), the run ids following the one change that issue asks for
(``x.traj.json`` -> ``x``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.shared_data import shared_data_dir  # noqa: E402

from snapstore.importers import load_trajectory  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "data" / "import_golden.json"


def run_prefix(name: str) -> str:
    """The run id the CLI derives from a file name (issue 13: every known suffix is dropped)."""
    for suffix in (".jsonl", ".json", ".traj"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


def digest(checkpoint: list) -> str:
    return hashlib.sha256(json.dumps(checkpoint, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


def describe(path: Path) -> dict:
    fmt, convs = load_trajectory(path)
    prefix = run_prefix(path.name)
    return {
        "format": fmt,
        "conversations": [
            {
                "run": f"{prefix}/{c.name}" if c.name else prefix,
                "lengths": [len(cp) for cp in c.checkpoints],
                "sha256": hashlib.sha256("".join(digest(cp) for cp in c.checkpoints).encode()).hexdigest(),
            }
            for c in convs
        ],
    }


def main() -> None:
    shared = shared_data_dir()
    if shared is None:
        raise SystemExit("shared trajectories not found")
    golden = {p.name: describe(p) for p in sorted(shared.iterdir()) if p.is_file() and p.suffix != ".md"}
    lines = []
    for name, d in golden.items():
        convs = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in d["conversations"])
        lines.append(f"{json.dumps(name)}: {{\"format\": {json.dumps(d['format'])}, \"conversations\": [\n{convs}]}}")
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {OUT} ({len(golden)} files)")


if __name__ == "__main__":
    main()
