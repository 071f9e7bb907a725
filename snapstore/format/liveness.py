"""Which records of a run's log are live: the rollback/tombstone rule (docs/format.md §11), once.

A run's log is read newest first. A rollback record at position ``s`` with target ``t`` hides
every record at a position ``p`` with ``t < p < s``; a tombstone ends the run's life: every older
record is hidden. A checkpoint record that nothing hides is live. A rollback record or tombstone
that is itself hidden has no effect.

Pure: no I/O. Used by the manager's reading of one run (:mod:`snapstore.manager.history`) and by
the whole-repository walks (:mod:`snapstore.maintenance.runs`).
"""

from __future__ import annotations

from .manifest import KIND_ROLLBACK, KIND_TOMBSTONE

LIVE = "live"
HIDDEN = "hidden"
ROLLBACK = "rollback"
TOMBSTONE = "tombstone"


class LogWalk:
    """The state of one walk over a run's log, newest position first.

    Attributes:
        skip_above: None, or the lowest target of the rollback records met so far: positions above
            it (and below the rollback record) are hidden.
        ended: a tombstone was met: every older position is hidden.
    """

    __slots__ = ("skip_above", "ended")

    def __init__(self) -> None:
        self.skip_above: int | None = None
        self.ended = False

    def hides(self, seq: int) -> bool:
        """True if position ``seq`` (older than every position judged so far) is hidden whatever
        record it holds."""
        return self.ended or (self.skip_above is not None and seq > self.skip_above)

    def judge(self, seq: int, record) -> str:
        """Judge the record at position ``seq``; positions must come newest first.

        Args:
            seq: the log position (int).
            record: the record there: anything with ``kind`` and, for a rollback record,
                ``target["seq"]`` (a :class:`~snapstore.format.manifest.Manifest`).
        Returns:
            :data:`HIDDEN`, :data:`TOMBSTONE` (the walk has ended), :data:`ROLLBACK` (positions
            above its target are hidden from now on) or :data:`LIVE`.
        """
        if self.hides(seq):
            return HIDDEN
        if record.kind == KIND_TOMBSTONE:
            self.ended = True
            return TOMBSTONE
        if record.kind == KIND_ROLLBACK:
            t = int(record.target["seq"])
            self.skip_above = t if self.skip_above is None else min(self.skip_above, t)
            return ROLLBACK
        return LIVE
