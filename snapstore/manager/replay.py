"""Replays of an older head refused for a caller that saw a newer one (docs/format.md §27
"Replays").

Layer 4 helper of :mod:`snapstore.manager.views`. In an encrypted repository every sealed object is
bound to its key (§27), so an object put under another key never authenticates; what remains is
an *older* object under a key a reader looks at: the run's newest records deleted (its head moves
back to an older record), or an older sealed record of the same position put back (a record of an
earlier life of the run, before a tombstone and a GC that collected its whole log). A run's log
position is its counter: positions only grow while a run has records, and every record carries its
``write_id`` and ``created`` time, authenticated with it. So a caller that saw newest record
``(p, w)`` and now finds the newest record at ``q < p``, or at ``p`` with another write id, sees
the run go back; that is an honest change only when the run was deleted, collected whole and saved
again since, and then the newest record was created after the caller's view. A record created
before the caller's view (less :data:`CLOCK_MARGIN`) is refused with
:class:`~snapstore.errors.HeadReplayed`.

Plain repositories are not checked: anyone who can write to them can write any record.
"""

from __future__ import annotations

from . import callers
from ..errors import HeadReplayed
from ..format import keys
from ..stores import crypt

CLOCK_MARGIN = 120.0
"""Seconds by which writers' clocks (a record's ``created``) may run behind the caller's: a record
that went back and was created less than this after the caller's view is taken for a replay."""


def check_newest(mgr, run_id: str, rk: str, newest) -> None:
    """Refuse ``newest`` (the run's newest log record just read, a
    :class:`~snapstore.format.manifest.Manifest`, or None for a run without records) if it is
    older than what the calling context last saw of the run, in an encrypted repository.

    Args:
        mgr: the :class:`~snapstore.manager.facade.CheckpointManager`. run_id: the run (str).
        rk: its key segment (str). newest: the record read.
    Raises:
        HeadReplayed: ``newest`` sits at a lower position than the record the caller saw, or at the
            same one with another write id, and was created before the caller saw the run. A run
            without records passes, and so does anything after the caller saw the run without a
            live checkpoint (deleted: GC may collect its whole log, and positions restart at 0).
    """
    if newest is None or not crypt.is_sealed(mgr.store):
        return
    seen = callers.seen(mgr, run_id)
    if seen is None or not seen.known or seen.seq is None or seen.checkpoint_id is None:
        return  # (a run seen without a live checkpoint may be collected whole by GC and saved again)
    if newest.seq > seen.seq or (newest.seq == seen.seq and newest.write_id == seen.write_id):
        return
    if newest.created.timestamp() > seen.wall + CLOCK_MARGIN:
        return  # a new life of the run, saved after the caller's view (deleted, collected, saved again)
    how = ("another record at the same position" if newest.seq == seen.seq
           else f"the newest record at position {newest.seq}")
    raise HeadReplayed(
        keys.manifest_key(rk, newest.seq), run_id, seen.seq, newest.seq,
        f"run {run_id!r} went back: this caller saw its newest log record at position {seen.seq} "
        f"(write id {seen.write_id}), the repository now holds {how}, created before that view: newer records "
        "were deleted or an older sealed record was put back (encrypted repository, docs/format.md §27 "
        "\"Replays\"); nothing was read from it. A new manager does not know the newer head and reads this one")


__all__ = ["CLOCK_MARGIN", "check_newest"]
