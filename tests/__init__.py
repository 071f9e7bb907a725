"""snapstore's test suite: one folder per package folder of ``snapstore/`` (format, stores, repo,
manager, maintenance, integrations, importers, server, cli), folders for properties of the whole
(robustness, cost, benchmarks) and ``helpers/``, the one home of what tests share."""
