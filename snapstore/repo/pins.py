"""Fork pins: a run whose segments a fork lists keeps the packs its writer merges.

Layer 3, beside the write path (docs/format.md §10, "Forks"). A fork's first record lists its
source run's segments as *foreign* segments instead of a copy of their entries. The source run's
writer merges its segments into tier packs and, without a pin, deletes the packs it merged right
after publishing; a fork listing one of them would lose it. So before it reads the source's head,
a fork writes the source run's *pin* (``runs/<R>/f/forked``, an empty object, create-only, never
deleted), and a writer deletes the packs it merged only after checking, after publishing, that
its run has no pin (one HEAD). A writer that finds the pin leaves those packs to GC, which keeps
the ones a newest record (the fork's) lists and deletes the others like any unreferenced pack.

Why that is enough: a fork writes the pin, then reads the source's head H and lists H's segments.
A writer deletes the packs record R merged only after publishing R and then finding no pin. If
the fork read H before R was published, H may list those packs; but then the pin existed before R
was published, so before the check, which sees it. If the fork read R or a later record, R's
segments do not list R's inputs (R's tier pack holds their entries), and every later merge checks
a pin that exists by then.
"""

from __future__ import annotations

from ..errors import ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..stores.base import ObjectStore


def pin(store: ObjectStore, run_key: str) -> None:
    """Make sure run key ``run_key`` is pinned (its pin object exists), before a fork reads the
    run's head: one create-only PUT (a pin already there is left as it is).

    Args:
        store: the repository's store. run_key: the source run's key segment (docs/format.md §4).
    Raises:
        StoreError: the PUT failed (the fork must not go on: it would list segments that the
            source's writer may delete).
    """
    try:
        store.put(keys.pin_key(run_key), b"")
    except PreconditionFailed:
        pass  # pinned before: pins are never deleted


def pinned(store: ObjectStore, run_key: str) -> bool:
    """Is run key ``run_key`` pinned? One HEAD request.

    Args:
        store: the repository's store. run_key: the run's key segment.
    Returns:
        True if the pin exists (some fork may list the run's segments).
    Raises:
        StoreError: the HEAD failed (the caller keeps the packs then: left to GC).
    """
    try:
        store.head(keys.pin_key(run_key))
        return True
    except ObjectNotFound:
        return False


def may_delete_merged(store: ObjectStore, run_key: str, known_pinned: bool) -> tuple[bool, bool]:
    """May the writer of run key ``run_key``, which has just published a record whose tier pack
    merged some of the run's packs, delete those packs?

    Only when the run has no pin, checked now, after the record was published: a fork that wrote
    the pin before that check is seen; one that writes it later reads the source's head after the
    pin, so after this record, whose segments do not list the merged packs.

    Args:
        store: the repository's store. run_key: the writer's run key.
        known_pinned: the writer already saw the pin (pins are never deleted: no request then).
    Returns:
        ``(delete, pinned)``: ``delete`` False leaves the packs to GC (pinned, or the check
        failed); ``pinned`` is what the writer knows now (True once the pin was seen).
    """
    if known_pinned:
        return False, True
    try:
        is_pinned = pinned(store, run_key)
    except SnapstoreError:
        return False, False  # keep the packs: GC reclaims them
    return not is_pinned, is_pinned
