"""Checks a command makes on a location before it uses it: is an S3 endpoint reachable at all
(:func:`probe_store`), and does a location hold files that are not a snapstore repository
(:func:`find_foreign_content`).

Both are for a command line or a service about to open a store: the library's own stores keep
their normal timeouts and retries, and creating a repository never looks at what else is there.
"""

from __future__ import annotations

import os
import time

from ..errors import ObjectNotFound, SnapstoreError, StoreError
from ..format import keys
from .base import ObjectStore
from .local import LocalStore

__all__ = ["PROBE_CONNECT_TIMEOUT", "PROBE_READ_TIMEOUT", "find_foreign_content", "probe_store"]

PROBE_CONNECT_TIMEOUT = 2.0  # seconds: the S3 reachability probe's connect timeout (one attempt)
PROBE_READ_TIMEOUT = 3.0  # seconds: its read timeout


def probe_store(location: str) -> None:
    """Fail fast when an S3 endpoint cannot be reached: one HEAD of the repository's ``config`` with
    a 2 s connect and 3 s read timeout and no retries (the command's own store keeps its normal
    timeouts and retries, for transient errors later on). Other locations are not probed.

    Args:
        location: a repository location as ``--repo`` takes it (``s3://BUCKET/PREFIX?...``, a
            directory, ``file:///path``, ``memory://``); only ``s3://`` ones are probed.
    Raises:
        StoreError: the endpoint cannot be reached or timed out, with how long it waited
            (seconds); also any other store error the HEAD got (access denied, no such bucket...).
    """
    if not str(location).startswith("s3://"):
        return
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    from .s3 import S3Store

    t0 = time.monotonic()
    store = S3Store.from_url(location, connect_timeout=PROBE_CONNECT_TIMEOUT, read_timeout=PROBE_READ_TIMEOUT,
                             max_attempts=0)
    try:
        store.head(keys.CONFIG)
    except ObjectNotFound:
        pass
    except StoreError as e:
        if isinstance(e.__cause__, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
            raise StoreError(f"{e} (gave up after {time.monotonic() - t0:.1f} s: check the endpoint URL, "
                             "that the service is running, and the network)") from None
        raise
    finally:
        store.close()


def find_foreign_content(store: ObjectStore) -> str | None:
    """One file at ``store`` that shows it is not empty and holds no snapstore repository.

    A directory (or S3 prefix, or any other store) counts as foreign when it holds anything and no
    repository ``config``. snapstore's own leftovers of an interrupted init (``.tmp-*`` files and
    the journal ``.wal``, its lock files ``.wal-locks`` or an older release's ``.locks`` in a local directory) do not count. Costs one directory scan locally, one LIST of
    one key (plus one HEAD when that key is not ``config``) elsewhere.

    Args:
        store: the store a repository is about to be created in.
    Returns:
        The name (local) or key (elsewhere) of the first file found, or None when the location is
        empty or already holds a repository.
    Raises:
        StoreError: the LIST failed.
    """
    if isinstance(store, LocalStore):
        if not os.path.isdir(store.root):
            return None
        with os.scandir(store.root) as entries:  # a crashed init's own leftovers do not count
            names = sorted(e.name for e in entries if not (e.name.startswith(".tmp-") or e.name in (".locks", ".wal", ".wal-locks")))
        return names[0] if names and keys.CONFIG not in names else None
    first = next(iter(store.list("", limit=1)), None)
    if first is None or first.key == keys.CONFIG:
        return None
    try:
        store.head(keys.CONFIG)
    except SnapstoreError:
        return first.key
    return None
