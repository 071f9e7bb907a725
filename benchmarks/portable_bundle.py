"""Portable bundle benchmark: the shared trajectories exported to one bundle and imported again.

Every conversation of every trajectory file (``../shared/data/trajectories`` or
``$SNAPSTORE_SHARED_DATA``) is saved checkpoint by checkpoint into a fresh local repository (one
run each); then ``export_bundle`` of all runs, and ``import_bundle`` into a second fresh local
repository. Reported: the bundle's bytes against the LB (zstd -19 of each conversation's final
history, ``benchmarks/storage.py``'s ``conversation_lb``) and against the hot repository, the raw
item bytes, and the time to export and to import. Every imported checkpoint is compared with the
source's (summary, messages as exact JSON, session state): exit 1 on a mismatch.

    python benchmarks/portable_bundle.py [--data DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402,F401
from storage import _Enc, conversation_lb  # noqa: E402

import orjson  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.importers import load_trajectory  # noqa: E402
from snapstore.stores.local import LocalStore  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.helpers.shared_data import shared_data_dir
    data = args.data or shared_data_dir()
    files = sorted(p for p in data.iterdir() if p.is_file() and p.suffix != ".md")
    with tempfile.TemporaryDirectory() as tmp:
        src = CheckpointManager(LocalStore(Path(tmp) / "src", fsync=False))
        enc = _Enc()
        lb = ckpts = 0
        for f in files:
            _fmt, convs = load_trajectory(f)
            for ci, conv in enumerate(convs):
                if not conv.checkpoints:
                    continue
                run = f"{f.name}/{conv.name or 'run'}-{ci}"
                for cp in conv.checkpoints:
                    src.save(run, cp)
                ckpts += len(conv.checkpoints)
                lb += conversation_lb(conv.checkpoints, enc)[0]
        hot = sum(i.size for i in src.store.list("") if i.key != "config")
        runs = src.runs()
        path = Path(tmp) / "all.snap"
        t0 = time.perf_counter()
        rep = src.export_bundle(runs, str(path))
        t_export = time.perf_counter() - t0
        dst = CheckpointManager(LocalStore(Path(tmp) / "dst", fsync=False))
        t0 = time.perf_counter()
        got = dst.import_bundle(str(path))
        t_import = time.perf_counter() - t0
        bad = 0
        for r in runs:
            a, b = src.list(r), dst.list(r)
            if a != b:
                bad += 1
                continue
            for s in a:
                x, y = src.get(r, s.id), dst.get(r, s.id)
                if orjson.dumps(x.messages) != orjson.dumps(y.messages) or repr(x.session_state) != repr(y.session_state):
                    bad += 1
        print(f"portable bundle (shared trajectories, {len(files)} files): {len(runs)} runs, {ckpts} checkpoints")
        print(f"  bundle        {rep.bytes:>10,} B  ({rep.bytes / lb:.2f}x LB {lb:,} B; hot repository {hot:,} B, "
              f"{hot / rep.bytes:.1f}x the bundle)")
        print(f"  raw items     {rep.raw_bytes:>10,} B  ({rep.messages:,} messages stored, new ones per checkpoint)")
        print(f"  export        {t_export:>10.2f} s")
        print(f"  import        {t_import:>10.2f} s  ({got.checkpoints} checkpoints saved at their positions)")
        print(f"  mismatches    {bad:>10}")
        return 1 if bad or got.checkpoints != ckpts else 0


if __name__ == "__main__":
    sys.exit(main())
