"""A manager's views of its runs and the conflict contract (docs/format.md §20).

Layer 4. Each :class:`~snapstore.manager.facade.CheckpointManager` keeps one :class:`RunView` per run (the
newest head it knows, the writer state for its message list, caches keyed by content), shared by
all its callers; what each calling context (thread or asyncio task) last saw of a run is kept by
:mod:`snapstore.manager.callers`. The checks here decide whether an operation that moves the head may: the
head must be what ``expect_head`` names (an explicit compare-and-swap) or, without one, what the
calling context last saw. Functions take the manager (``mgr``) whose views they read and update.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import callers, history, replay
from .callers import Seen
from .checkpoint import EMPTY_RUN
from ..errors import ConflictError, InvalidInputError
from ..format.ids import check_checkpoint_id
from ..format.manifest import KIND_TOMBSTONE, Manifest
from ..repo.repository import ListState


@dataclass(frozen=True)
class PendingSave:
    """A save attempt whose outcome is not known yet (its manifest may have landed while the
    reply was lost). A retry that prepares the same save (same ``fingerprint``, same log
    position) reuses all of it: the write id, the segment list and the pack, id and bytes, so
    a manifest that landed is read back instead of written twice.

    Attributes:
        fingerprint: a tuple identifying what was saved (message-list digest and count, fields,
            ids, session state, parent): equal for a retry of the same save.
        manifest: the :class:`~snapstore.format.manifest.Manifest` the attempt publishes.
        tier: ``(pack id, pack bytes, raw blocks)`` of the tier pack the save completes, or None.
        superseded: pack ids (bytes) merged into that tier pack, deleted after publishing.
        prepared: the save as :meth:`~snapstore.repo.repository.Repository.prepare_save`
            returned it (its pack, list state and session state).
    """

    fingerprint: tuple
    manifest: Manifest
    tier: tuple | None
    superseded: list
    prepared: object


@dataclass
class RunView:
    """A manager's knowledge of one run, shared by all its callers (what each caller last saw is
    per calling context: :mod:`snapstore.manager.callers`)."""

    head_seq: int | None = None       # newest log position known (None: run has no records)
    head_write_id: str | None = None  # write id of that newest record (identifies it across deletions)
    head_segs: list | None = None     # segment list of that newest record (format 2; [] if none)
    head: Manifest | None = None      # the effective head checkpoint (None: empty or deleted run)
    list_state: ListState | None = None  # writer state for ``head``'s message list
    live: list | None = None          # [(seq, checkpoint id)] oldest first, when known
    pending: PendingSave | None = None  # the save whose outcome is unknown (a retry reuses it)
    log_cache: dict | None = None     # seq -> manifest bytes of recent records this manager published
    loaded: bool = False              # head_seq/head are from a read or our own save
    confirmed_at: float = 0.0         # monotonic time the head (our parent) was last seen to exist
    pinned: bool = False              # the run's fork pin was seen (docs/format.md §10; pins stay)


def expect(expect_head) -> tuple | None:
    """Normalise an ``expect_head`` argument: None (no expectation) or ``(checkpoint id | None,)``
    (None inside: the run must be empty).

    Raises:
        InvalidInputError / InvalidCheckpointIdError: anything but None, EMPTY_RUN or a checkpoint id.
    """
    if expect_head is None:
        return None
    if expect_head is EMPTY_RUN:
        return (None,)
    if not isinstance(expect_head, str):
        raise InvalidInputError(f"expect_head must be a checkpoint id (str), EMPTY_RUN or None, got "
                                f"{type(expect_head).__name__}")
    check_checkpoint_id(expect_head)
    return (expect_head,)


def load_view(mgr, run_id: str, listed: list | None = None) -> RunView:
    """Read the run's newest record (LIST limit 1 + GET) into a fresh view (kept in
    ``mgr.state.views``); its writer state and live list are dropped if the head changed.

    Args:
        mgr: the :class:`~snapstore.manager.facade.CheckpointManager`. run_id: the run.
        listed: the first page of the run's manifest keys, listed already (no LIST then;
            :mod:`snapstore.manager.firstread`), or None.
    Returns:
        The run's :class:`RunView`, loaded.

    Raises:
        InvalidRunIdError: a bad run id; StoreError / IntegrityError: as the reads;
        HeadReplayed: encrypted, and the run went back below what the calling context saw.
    """
    rk = mgr.state.run_key(run_id)
    newest = mgr.repo.head(rk, listed)
    replay.check_newest(mgr, run_id, rk, newest)  # encrypted: an older head put back is refused (§27)
    v = mgr.state.views.get(run_id) or RunView()
    v.head_seq = newest.seq if newest else None
    v.head_write_id = newest.write_id if newest else None
    v.head_segs = newest.segment_list() if newest is not None and newest.kind != KIND_TOMBSTONE else []
    head = history.resolve(mgr.repo, rk, newest)
    if v.head is None or head is None or v.head.checkpoint_id != head.checkpoint_id or v.head.seq != head.seq:
        v.list_state = None
        v.live = None
    v.head = head
    v.confirmed_at = mgr.state.clock()
    v.loaded = True
    mgr.state.views[run_id] = v
    return v


def view(mgr, run_id: str) -> RunView:
    """The manager's view of the run, read with :func:`load_view` if it has none (or an unloaded one)."""
    v = mgr.state.views.get(run_id)
    if v is None or not v.loaded:
        v = load_view(mgr, run_id)
    return v


def conflict_if_moved(run_id: str, v: "RunView", exp: tuple | None, seen: Seen | None) -> None:
    """Raise ConflictError unless the head in ``v`` is what ``exp`` (an explicit expected head) or,
    without one, ``seen`` (the calling context's view; None: no view, nothing to check) says."""
    head_id = v.head.checkpoint_id if v.head else None
    if exp is not None:
        if head_id != exp[0]:
            want = "no checkpoint (EMPTY_RUN)" if exp[0] is None else repr(exp[0])
            raise ConflictError(f"run {run_id!r}: expected head {want} but the head is {head_id!r}; "
                                "read the head again and retry")
    elif seen is not None and not seen.matches(head_id, v.head_seq, v.head_write_id):
        why = ("it read that checkpoint by id" if not seen.at_head else
               "another writer saved, rolled back or deleted since")
        raise ConflictError(
            f"run {run_id!r}: this caller last saw checkpoint {seen.checkpoint_id!r} but the head is {head_id!r} "
            f"({why}); call latest() to continue from the head, or pass parent_id= to branch")


def saw(mgr, run_id: str, checkpoint_id: str | None, seq: int | None, write_id: str | None) -> None:
    """Record in the calling context that it saw ``checkpoint_id`` as the head at log record
    ``(seq, write_id)``."""
    callers.set_seen(mgr, run_id, Seen(checkpoint_id, seq, write_id))


def saw_view(mgr, run_id: str, v: "RunView") -> None:
    """Record in the calling context that it saw the head of view ``v``."""
    saw(mgr, run_id, v.head.checkpoint_id if v.head else None, v.head_seq, v.head_write_id)


def saw_record(mgr, run_id: str, rk: str, rec: Manifest) -> None:
    """The calling context moved the head with record ``rec``: its view is now that head."""
    head = history.resolve(mgr.repo, rk, rec)
    saw(mgr, run_id, head.checkpoint_id if head else None, rec.seq, rec.write_id)


def head_check(mgr, run_id: str, rk: str, exp: tuple | None, seen: Seen | None, what: str):
    """A check of the run's newest record against the caller's expectation, for operations that
    move the head: ``check(newest)`` raises ConflictError unless the head ``newest`` resolves to
    is ``exp`` (explicit ``expect_head``) or, without one, what ``seen`` (the calling context's
    view) recorded. None when there is nothing to check (no expectation, no view). ``check``'s
    optional second argument ``known`` (``{seq: Manifest or None}``, records read just now) is
    handed to :func:`~snapstore.manager.history.resolve` (a rollback's target read already)."""
    if exp is None and (seen is None or not seen.known):
        return None

    def check(newest: Manifest | None, known: dict | None = None) -> None:
        head = history.resolve(mgr.repo, rk, newest, known)
        hid = head.checkpoint_id if head else None
        if exp is not None:
            if hid != exp[0]:
                want = "no checkpoint (EMPTY_RUN)" if exp[0] is None else repr(exp[0])
                raise ConflictError(f"run {run_id!r}: {what} expected head {want} but the head is {hid!r}; "
                                    "read the head again and retry")
        elif not seen.same_record(newest.seq if newest else None, newest.write_id if newest else None):
            raise ConflictError(
                f"run {run_id!r}: {what} refused: this caller last saw checkpoint {seen.checkpoint_id!r} but the "
                f"head is {hid!r} (another writer saved, rolled back or deleted since); call latest() and decide "
                "again")
    return check
