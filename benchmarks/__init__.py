"""snapstore's benchmarks.

``python -m benchmarks`` (see :mod:`benchmarks.harness`) runs snapstore side by side with the stores
users would pick instead, on identical checkpoint lists, and writes ``benchmarks/results/latest.json``,
``benchmarks/RESULTS.md`` and PNG plots. The other modules here are standalone scripts
(``python benchmarks/storage.py`` ...), one per question; the harness imports what it reuses from
them. What they share (the fresh-process child runner, the commit stamp, medians and percentiles,
repository builders from the shared trajectories) is in :mod:`benchmarks._lib`; the LangGraph
graphs and savers are in :mod:`benchmarks.lgraph`.
"""
