"""A run's log listed page by page, newest first, from a given position: :func:`log_infos`.

Layer 2 (docs/format.md §4, §11). Manifest keys are ``runs/<R>/m/<16 hex of 2^64-1-seq>``, so a
LIST of ``runs/<R>/m/`` returns the newest positions first, and ``start_after`` the key of
position ``p`` lists the positions below ``p``. A reader that needs the newest few records (a
listing with a limit, a cursor, a rollback's hidden range) lists only the pages it reads: its
cost does not grow with the run's length.
"""

from __future__ import annotations

from typing import Iterator

from ...format import keys
from ...stores.base import ObjectInfo

PAGE = 1000
"""Keys per LIST page after the first (S3's maximum)."""


def log_infos(store, run_key: str, below: int | None = None, first_limit: int = PAGE,
              first: list | None = None) -> Iterator[ObjectInfo]:
    """Yield the run's manifest objects (void records included: callers tell them by size),
    newest first, listing a page only when the previous one is used up.

    Args:
        store: the object store.
        run_key: the run's key segment.
        below: only positions strictly below this one (None: from the newest).
        first_limit: keys asked for in the first LIST (later pages: :data:`PAGE`).
        first: the first page, listed already with ``limit=first_limit`` (and no ``below``) by
            the caller (a read sent beside the config GET,
            :mod:`snapstore.manager.firstread`); None: listed here.
    Yields:
        :class:`~snapstore.stores.base.ObjectInfo` of ``runs/<R>/m/`` keys, newest first.
    Raises:
        StoreError: a LIST failed.
    """
    prefix = keys.manifests_prefix(run_key)
    after = None
    if below is not None:
        if below <= 0:
            return
        after = keys.manifest_key(run_key, min(below, keys.SEQ_MAX - 1))
        first = None
    limit = max(1, int(first_limit))
    page = list(first) if first is not None else list(store.list(prefix, start_after=after, limit=limit))
    while True:
        yield from page
        if len(page) < limit:
            return
        after, limit = page[-1].key, PAGE
        page = list(store.list(prefix, start_after=after, limit=limit))


def range_infos(store, run_key: str, low: int, high: int) -> dict[int, ObjectInfo]:
    """``{seq: ObjectInfo}`` of the run's manifest objects at positions ``low < seq < high`` (void
    records included), from LIST pages that start right below ``high``: about
    ``(high - low) / 1000 + 1`` requests, whatever the run's length.

    Raises:
        StoreError: a LIST failed; IntegrityError: a stray key under the run's manifests.
    """
    out: dict[int, ObjectInfo] = {}
    if high - low <= 1:
        return out
    span = high - low - 1
    for info in log_infos(store, run_key, below=high, first_limit=min(PAGE, span)):
        s = keys.seq_from_manifest_key(info.key)
        if s <= low:
            break
        out[s] = info
    return out
