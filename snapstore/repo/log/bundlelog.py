"""Bundle logs as readers see them: a run's log copies read through its pointer (docs/format.md §28).

An archived run's log is held, with the logs of the runs next to it among those its bundle serves,
in one bundle log ``archive/log/<log id>`` (log segment version 5, about 64 KiB of records); the
run's ``runs/<R>/l/`` holds a 0-byte pointer ``<inverted hi>.<log id>.b`` naming it. :func:`read_copies` is what every reader of a
log segment key calls: a pointer GETs the bundle log (decoded logs are kept for a few bundle logs
per process: they are immutable, and a GC or a listing of many runs of one bundle reads it once)
and gives the run's copies; any other key is GET and decoded as a log segment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from ...format.logseg import LogCopy, bundlelog_key, decode_bundlelog, decode_logseg, pointer_bundle
from ...stores.base import ObjectStore

KEEP = 4
"""Decoded bundle logs kept per process (most recently used)."""
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


def bundle_logs(store: ObjectStore, lid: bytes) -> dict:
    """``{run key: [LogCopy]}`` of the bundle log ``lid`` (10 bytes; cached, see module docstring).

    Raises:
        ObjectNotFound: the bundle log is gone (names its key). IntegrityError: it is corrupt.
    """
    key = bundlelog_key(lid)
    ck = (id(store), key)
    with _lock:
        hit = _cache.get(ck)
        if hit is not None:
            _cache.move_to_end(ck)
            return hit
    logs = decode_bundlelog(key, store.get(key))
    with _lock:
        _cache[ck] = logs
        while len(_cache) > KEEP:
            _cache.popitem(last=False)
    return logs


def read_copies(store: ObjectStore, key: str) -> list[LogCopy]:
    """The copies of log segment ``key`` (``runs/<R>/l/...``): a bundle-log pointer's from its
    bundle log (the run's own records; none when the log does not hold the run), else the segment's.

    Raises:
        ObjectNotFound: the segment, or the bundle log a pointer names, is gone (names that key).
        IntegrityError: it is corrupt.
    """
    bid = pointer_bundle(key)
    if bid is None:
        return decode_logseg(key, store.get(key))
    run_key = key.split("/")[1]
    return list(bundle_logs(store, bid).get(run_key, ()))
