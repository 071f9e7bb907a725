"""The first read of a manager that has not opened its repository yet: the run's newest log
positions listed beside the config GET (:func:`early_listing`).

Layer 4, between the manager's state and its operations (docs/format.md §4, §5, §11). A fresh
manager's first operation on a run starts with the config GET (and, on S3, the bucket
versioning check, which goes beside it: :meth:`~snapstore.manager.state.ManagerState.repository`).
The LIST of a run's manifests needs no config when the run's key segment is inline (``b`` +
base32 of the id, run ids of up to 59 UTF-8 bytes): it is the id itself. So ``latest()``,
``list(limit=k)``, ``rollback`` and a head ``delete`` send that LIST at the same time as the
config GET, and a fresh process pays one round trip less. A hashed (``h``) run key needs the
repository's key: no early listing (the LIST follows the config GET, as before).

A listing sent beside the config GET is no staler than one sent right after it: the caller uses
it as the run's state at that moment, as any LIST.

A store whose reads cost no round trip (``inline_reads``: a local directory, a SQLite file) gets
no early listing: there is no round trip to save, and starting a thread costs more than the LIST
(0.1-0.2 ms, and on a busy machine a wait for the scheduler of up to a time slice; on a SQLite
file the thread also opens a read connection of its own).
"""

from __future__ import annotations

from concurrent.futures import Future

from ..format import keys
from ..format.ids import check_run_id, name_key
from ..stores.base import store_capabilities
from .state import beside


class _NoHasher:
    """Stands in for the repository's hasher: an inline run key needs none (a hashed one raises)."""

    def name_hash(self, raw: bytes) -> str:
        raise LookupError("a hashed run key needs the repository's key")


def inline_run_key(run_id: str) -> str | None:
    """The key segment of ``run_id`` if it is inline (``b`` + base32, the same in every
    repository), else None (a hashed segment depends on the repository's key).

    Raises:
        InvalidRunIdError: a bad run id.
    """
    check_run_id(run_id)
    try:
        return name_key(run_id, _NoHasher())
    except LookupError:
        return None


def early_listing(mgr, run_id: str, limit: int) -> Future | None:
    """Start the first LIST page (``limit`` keys, newest first) of run ``run_id``'s manifests in a
    thread of its own, if the manager has not opened its repository yet, the run's key is inline
    and the store's reads are round trips (not ``inline_reads``); else None (nothing sent).

    Args:
        mgr: the :class:`~snapstore.manager.facade.CheckpointManager`.
        run_id: the run.
        limit: keys to ask for (1 for the head; more for a listing with a limit).
    Returns:
        A future of ``(run key, [ObjectInfo])``, or of None when the LIST failed (the caller
        then lists again the usual way, which raises the error if it persists); or None.
    Raises:
        InvalidRunIdError: a bad run id.
    """
    if not mgr.state.opening():
        return None
    store = mgr.state.store
    if store_capabilities(store).inline_reads:
        check_run_id(run_id)
        return None
    rk = inline_run_key(run_id)
    if rk is None:
        return None
    return beside(lambda: (rk, list(store.list(keys.manifests_prefix(rk), limit=max(1, int(limit))))),
                  "snapstore-first-list")


def listed(fut: Future | None, rk: str) -> list | None:
    """The page :func:`early_listing` listed for run key ``rk``, or None (none was sent, it
    failed, or it is of another key: the repository keys this run differently)."""
    if fut is None:
        return None
    got = fut.result()
    if got is None or got[0] != rk:
        return None
    return got[1]
