"""``python -m benchmarks``: the side-by-side benchmark (see :mod:`benchmarks.harness`)."""

import sys

from benchmarks.harness import main

sys.exit(main())
