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

from ...errors import IntegrityError
from ...format.archfields import decode_fields
from ...format.logseg import LogCopy, bundlelog_key, decode_bundlelog, decode_logseg, pointer_bundle
from ...format.pack import T_FIELDS
from ...stores.base import ObjectStore

KEEP = 4
"""Decoded bundle logs kept per process (most recently used)."""
_cache: OrderedDict = OrderedDict()
_lock = threading.Lock()


_fields: OrderedDict = OrderedDict()


def bundle_logs(store: ObjectStore, lid: bytes, repo=None) -> dict:
    """``{run key: [LogCopy]}`` of the bundle log ``lid`` (10 bytes; cached, see module docstring).
    The thin copies of a thin one (version 6) read their moved fields from the bundle (the log
    id's first 8 bytes) through ``repo`` (:func:`bundle_fields`) when first used; without
    ``repo`` using one raises IntegrityError.

    Raises:
        ObjectNotFound: the bundle log is gone (names its key). IntegrityError: it is corrupt.
    """
    key = bundlelog_key(lid)
    ck = (id(store), key, id(repo))
    with _lock:
        hit = _cache.get(ck)
        if hit is not None:
            _cache.move_to_end(ck)
            return hit
    bid = bytes(lid[:8])
    fill = None if repo is None else (lambda rk, seq: fields_of(repo, bid, rk, seq))
    logs = decode_bundlelog(key, store.get(key), fill)
    with _lock:
        _cache[ck] = logs
        while len(_cache) > KEEP:
            _cache.popitem(last=False)
    return logs


def bundle_fields(repo, bundle_id: bytes) -> tuple[str, dict]:
    """``(bundle key, {run key: {seq: moved fields}})``: the fields entry of archive bundle
    ``bundle_id`` (docs/format.md §28), read with the bundle's suffix (a ranged read, the one a
    reader of its data makes first; cached for :data:`KEEP` bundles per process).

    Raises:
        ColdObjectError: the bundle is in GLACIER/DEEP_ARCHIVE and not restored.
        IntegrityError: no index record names the bundle, or it holds no valid fields entry.
        ObjectNotFound: the bundle is gone. StoreError: the store failed.
    """
    ck = (id(repo), bundle_id)
    with _lock:
        hit = _fields.get(ck)
        if hit is not None:
            _fields.move_to_end(ck)
            return hit
    key = repo.bundles.key_loaded(bundle_id)
    if key is None:
        raise IntegrityError(f"archive/index/{bundle_id.hex()}", "no index record names the bundle whose fields "
                             "entry a thin bundle log's records need")
    pack = repo.cache.get_pack(bundle_id, ranged=True)
    ents = [k for k in pack.entries if k[0] == T_FIELDS]
    if len(ents) != 1:
        raise IntegrityError(key, f"{len(ents)} fields entries in an archive bundle a thin bundle log names")
    out = (key, decode_fields(key, repo.read_entry_in(pack, T_FIELDS, ents[0][1])))
    with _lock:
        _fields[ck] = out
        while len(_fields) > KEEP:
            _fields.popitem(last=False)
    return out


def fields_of(repo, bundle_id: bytes, run_key: str, seq: int) -> tuple[str, dict]:
    """``(bundle key, moved fields)`` of run ``run_key``'s record at ``seq`` from its bundle
    (:func:`bundle_fields`).

    Raises:
        IntegrityError: the bundle's fields entry has no such record; as :func:`bundle_fields`.
    """
    key, runs = bundle_fields(repo, bundle_id)
    try:
        return key, runs[run_key][seq]
    except KeyError:
        raise IntegrityError(key, f"the bundle's fields entry holds no record of run {run_key!r} position {seq}") from None


def read_copies(store: ObjectStore, key: str, repo=None) -> list[LogCopy]:
    """The copies of log segment ``key`` (``runs/<R>/l/...``): a bundle-log pointer's from its
    bundle log (the run's own records; none when the log does not hold the run), else the segment's.
    ``repo``: the repository (:class:`~snapstore.repo.repository.Repository`) whose bundles a
    thin bundle log's copies read their moved fields from (:func:`bundle_logs`).

    Raises:
        ObjectNotFound: the segment, or the bundle log a pointer names, is gone (names that key).
        IntegrityError: it is corrupt.
    """
    bid = pointer_bundle(key)
    if bid is None:
        return decode_logseg(key, store.get(key))
    run_key = key.split("/")[1]
    return list(bundle_logs(store, bid, repo).get(run_key, ()))
