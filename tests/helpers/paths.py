"""The project's directories, for tests that read files beside the package.

``ROOT``: the project root (the directory holding ``snapstore/``, ``benchmarks/``, ``examples/``,
``docs/``). ``TESTS``: the ``tests/`` directory. ``DATA``: ``tests/data`` (committed inputs such as
the import golden file). ``HELPERS``: this package's directory (scripts run as subprocesses)."""

from __future__ import annotations

from pathlib import Path

HELPERS = Path(__file__).resolve().parent
TESTS = HELPERS.parent
ROOT = TESTS.parent
DATA = TESTS / "data"
