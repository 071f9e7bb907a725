"""Saving a record on top of a run's newest one, as a compare-and-swap on it (layout §2)."""

from __future__ import annotations

from ...errors import CheckpointNotFound, ConflictError
from ...format.ids import seq_hint
from ...manager.facade import EMPTY_RUN
from .layout import Head
from .registry import register
from .state import SaverState


class NothingToWrite(Exception):
    """Raised by a ``build`` given to :func:`put_record` when there is nothing to save (every
    write of a put_writes call is stored already)."""


def put_record(s: SaverState, run: str, build, head_of=None) -> tuple[str, Head]:
    """Save the record ``build(head)`` returns on top of the run's newest record.

    Args:
        s: the saver's state.
        run: the snapstore run id.
        build: ``head -> (items, session state, metadata field, step)`` (a
            :class:`~.layout.Head` in; the record's message list, session state, snapstore
            metadata and step out). A record is built from what the newest one carries, so if
            another writer saved meanwhile it is built again on the new one.
        head_of: ``() -> Head``, the run's newest record to build on (default: the one held,
            :meth:`~.state.SaverState.head`); a checkpoint's put passes the head with the
            pending-writes objects beside it folded in (:func:`~.sidewrites.current`).
    Returns:
        ``(the snapstore checkpoint id of the saved record, the head it was built on)``.
    Raises:
        ConflictError, CheckpointNotFound: other writers kept moving the run
            (``save_attempts`` times).
        Whatever ``build`` raises (e.g. :class:`NothingToWrite`), and ``CheckpointManager.save``'s errors.
    """
    for attempt in range(s.save_attempts):
        head = head_of() if head_of is not None else s.head(run)
        items, state, field_md, step = build(head)
        if head.id is None:
            register(s, run)  # a new (or deleted) run: listed in the thread's registry first
        try:
            sid = s.manager.save(run, items, parent_id=head.id, step=step, metadata=field_md,
                                 session_state=state, expect_head=head.id or EMPTY_RUN)
        except (ConflictError, CheckpointNotFound):
            if attempt == s.save_attempts - 1:
                raise
            s.forget(run)  # another writer moved the run: build again on its newest record
            continue
        seq = seq_hint(sid)
        s.heads[run] = Head(sid, items, state, field_md, seq, parent=head.id)
        s.remember(run, sid, seq, items, state, trim=False)
        return sid, head
    raise AssertionError("unreachable")
