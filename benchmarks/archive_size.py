"""The archive benchmark under its earlier name: ``python benchmarks/archive_size.py ARGS`` runs
``benchmarks/archive.py ARGS`` (figures in docs/format.md §28 name this command)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
