"""A run's live checkpoints as retention decides from them: one listing of the run log read from
the copies its log segments hold (docs/format.md §12, §14), no GET per manifest.

Layer 4, just above :mod:`snapstore.manager.history`. ``prune``, ``retention_plan`` and the head
move of a prune (:func:`snapstore.manager.rollback.delete_checkpoints`) read a run through
:func:`list_live`: the manifest keys are listed (LIST pages in parallel) beside one LIST of the
run's log segments, then the segments covering the listed positions and the few manifests no
segment covers (the newest positions, up to 15, whose level-1 segment is not written yet; a range
whose segment a writer never wrote) are fetched in one parallel wave. A log segment holds the whole
manifest body (id, time, step, status, metadata with its dependencies, parent, counts), so nothing
retention needs is missing from a copy; a manifest is read only where no valid copy covers its
position. A run of n checkpoints costs about ``n / 1000`` LISTs plus ``n / 4096 + 30`` GETs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..format.liveness import LogWalk
from ..format.manifest import record_positions
from ..repo.log.bulk import list_infos, list_logsegs, read_records
from .history import live_records


@dataclass
class Listing:
    """What one listing of a run's log found.

    Attributes:
        top: the newest listed log position (int), or None when the run has no record. A
            head record at this position means nothing was published since the listing.
        live: the live checkpoints' :class:`~snapstore.format.manifest.Manifest` (copies from
            log segments, or the manifests themselves), newest first; hidden positions and
            everything below a tombstone left out, as :func:`snapstore.manager.history.scan` does.
        infos: ``{seq: ObjectInfo}`` of every manifest object listed (void records included),
            newest first: what removing them needs (age, ETag) without listing again.
        top_record: the record at :attr:`top` as read (a Manifest), or None.
    """

    top: int | None
    live: list = field(default_factory=list)
    infos: dict = field(default_factory=dict)
    top_record: object = None

    def pairs(self) -> list[tuple[int, str]]:
        """``[(seq, checkpoint id)]`` of :attr:`live`, newest first."""
        return [(m.seq, m.checkpoint_id) for m in self.live]


def list_live(repo, rk: str) -> Listing:
    """List run key ``rk``'s live checkpoints in one bulk read (module docstring for the cost).

    Args:
        repo: the :class:`~snapstore.repo.repository.Repository`.
        rk: the run's key segment (``repo.run_key(run_id)``).
    Returns:
        A :class:`Listing`; ``Listing(None, [])`` for a run with no record.
    Raises:
        IntegrityError: a manifest read (no valid copy of it) is corrupt or misplaced.
        StoreError: a request failed.
    """
    f_segs = repo.pool.submit(list_logsegs, repo, rk)
    infos = list_infos(repo, rk)
    seqs = record_positions(infos.values())
    segs = f_segs.result()
    if not seqs:
        return Listing(None, [], infos)
    got = read_records(repo, rk, seqs, segs)
    live = []
    for _s, m, end in live_records(seqs, got, LogWalk()):
        if end:
            break
        live.append(m)
    return Listing(seqs[0], live, infos, got.get(seqs[0]))
