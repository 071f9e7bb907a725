"""snapstore's benchmarks.

``python -m benchmarks`` (see :mod:`benchmarks.harness`) runs snapstore side by side with the stores
users would pick instead, on identical checkpoint lists, and writes ``benchmarks/results/latest.json``,
``benchmarks/RESULTS.md`` and PNG plots. The other modules here are standalone scripts
(``python benchmarks/storage.py`` ...); the harness imports what it reuses from them.
"""
