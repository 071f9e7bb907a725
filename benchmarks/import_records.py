"""What keeping each conversation's record costs, and that ``export --record`` gives it back.

Run (from the repository root)::

    python benchmarks/import_records.py                 # every file in ../shared/data/trajectories
    python benchmarks/import_records.py --data DIR --json out.json

Per trajectory file, in a fresh local repository in a temp dir (fsync off: bytes are measured, not
durability), through the CLI in-process (``snapstore import FILE --json``):

1. the import's stored bytes (every object of the repository, ``config`` included), its time, and
   the bytes of the kept records (the JSON of each last checkpoint's ``"import"`` session state);
2. the same checkpoints saved without the records (``load_trajectory`` + one ``save`` per turn,
   no session state) in a second fresh repository: the difference is what keeping the records costs;
3. ``export RUN --record`` of every run, compared with the file's record (its line, item or the
   whole file) as JSON text (key order included).

Exit status 0 if every record came back exactly, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from click.testing import CliRunner  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.cli import cli  # noqa: E402
from snapstore.importers import load_trajectory, rebuild_record  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402

DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "trajectories"


def stored(root: Path) -> int:
    return sum(info.size for info in LocalStore(root, fsync=False).list(""))


def invoke(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if r.exit_code != 0:
        raise SystemExit(f"snapstore {' '.join(args)} failed: {r.stderr}")
    return r.stdout


def one_file(path: Path, work: Path) -> dict:
    repo = work / "with-records"
    t0 = time.monotonic()
    summary = json.loads(invoke("--repo", f"file://{repo}", "import", str(path), "--json", "-q"))
    elapsed = time.monotonic() - t0
    with_records = stored(repo)
    mgr = CheckpointManager(LocalStore(repo, fsync=False))
    record_bytes = 0
    exact = True
    _, convs = load_trajectory(path)
    for item, conv in zip(summary["runs"], convs):
        if not conv.checkpoints:
            continue
        state = mgr.latest(item["run"]).session_state["import"]
        record_bytes += len(json.dumps(state, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        out = invoke("--repo", f"file://{repo}", "export", item["run"], "--record")
        expected = rebuild_record(conv.extras(), conv.messages)  # the file's record, by the loader
        if conv.jsonl:
            text = "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in expected)
        else:
            text = json.dumps(expected, ensure_ascii=False)
        exact = exact and out == text and conv.record == expected
    mgr.close()

    bare = work / "without-records"
    mgr = CheckpointManager(LocalStore(bare, fsync=False))
    prefix = summary["runs"][0]["run"].split("/")[0] if summary["runs"] else "x"
    for conv in convs:
        run = f"{prefix}/{conv.name}" if conv.name else prefix
        for i, cp in enumerate(conv.checkpoints):
            mgr.save(run, cp, step=i)
    mgr.close()
    without = stored(bare)
    return {"file": path.name, "format": summary["format"], "runs": len(summary["runs"]),
            "checkpoints": summary["saved"], "file_bytes": path.stat().st_size, "record_json_bytes": record_bytes,
            "stored_with_records": with_records, "stored_without_records": without,
            "record_cost_bytes": with_records - without, "import_s": round(elapsed, 2), "records_exact": exact}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    files = sorted(p for p in args.data.iterdir() if p.is_file() and p.suffix != ".md")
    rows = []
    for path in files:
        work = Path(tempfile.mkdtemp(prefix="snapstore-records-"))
        try:
            rows.append(one_file(path, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        r = rows[-1]
        print(f"{r['file']:46} {r['format']:12} runs {r['runs']:4} cps {r['checkpoints']:5} "
              f"records {r['record_json_bytes']:9,} B JSON, cost {r['record_cost_bytes']:8,} B stored "
              f"({r['stored_without_records']:10,} -> {r['stored_with_records']:10,}) "
              f"import {r['import_s']:6.2f} s exact {r['records_exact']}", flush=True)
    total_with = sum(r["stored_with_records"] for r in rows)
    total_without = sum(r["stored_without_records"] for r in rows)
    total_json = sum(r["record_json_bytes"] for r in rows)
    print(f"total: records {total_json:,} B as JSON cost {total_with - total_without:,} B stored "
          f"({total_without:,} -> {total_with:,} B, +{(total_with / total_without - 1) * 100:.1f}%); "
          f"every record exact: {all(r['records_exact'] for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(r["records_exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
