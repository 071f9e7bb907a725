"""snapstore.repo: the repository engine (layer 3).

:class:`~snapstore.repo.repository.Repository` is composed of named parts, one per module:
``packcache`` (PackCache), ``locate`` (SegmentIndex, ForwardLookup, Locator), ``entries``
(EntryReader), ``trees`` (TreeReader), ``arrays`` (ArrayReader), ``values`` (ValueReader),
``prepare`` (SavePreparer, with the data of ``liststate``); ``tiers`` builds writer-side tier packs
and ``log/`` holds the run log (records one at a time, in bulk, stubs, run markers).
"""
