"""Reading many checkpoints of one run together: :class:`RunReader`.

Layer 4, beside :mod:`snapstore.manager.read` (docs/format.md §12, §19). ``CheckpointManager.get``
costs a manifest GET and a segment wave per checkpoint; a caller that reads most of a run (a
framework listing a thread with every checkpoint's data) lists the run's log once through its
log segments (:func:`snapstore.manager.history.scan_bulk`: the manifests come with the listing) and
reads every checkpoint's entries from the segment list of the run's newest record, fetched once
and kept in the repository's pack cache. Reads here change no caller's view of the run: what
a caller saw (and so what its next save conflicts with) stays as it was.
"""

from __future__ import annotations

from . import history as logscan
from .checkpoint import Checkpoint, CheckpointSummary, make_checkpoint
from ..errors import CheckpointNotFound, NotFoundError
from ..format.ids import check_checkpoint_id, check_run_id


class RunReader:
    """The live checkpoints of one run as listed at construction, readable one by one without
    another listing (``CheckpointManager.read_run(run_id)`` makes one).

    Attributes:
        run_id: the run (str).
        summaries: list of :class:`~snapstore.manager.checkpoint.CheckpointSummary`, newest first (what
            ``CheckpointManager.list(run_id)`` returns); empty for an unknown or empty run.

    Requests: construction costs what ``CheckpointManager.list(run_id)`` costs (the log
    positions listed beside the log segments, non-stub records read in one parallel wave);
    :meth:`get` reads no manifest, and the first one fetches the segment packs of the run's
    newest record in one parallel wave (later ones read them from the pack cache; a pack evicted
    meanwhile is fetched again).
    """

    def __init__(self, mgr, run_id: str):
        check_run_id(run_id)
        self.run_id = run_id
        self._mgr = mgr
        ms = [] if not mgr.state.exists() else [m for _s, _cid, m in logscan.scan_bulk(mgr.repo, mgr.state.run_key(run_id))]
        self._by_id = {}
        for m in ms:  # newest first: a checkpoint id saved twice resolves to its newest record
            self._by_id.setdefault(m.checkpoint_id, m)
        self._segs = ms[0].segment_list() if ms else None  # the newest record's: covers the run
        self._fetched = False
        self.summaries = [CheckpointSummary.from_manifest(m) for m in ms]

    def get(self, checkpoint_id: str) -> Checkpoint:
        """Return checkpoint ``checkpoint_id`` (its newest record, if the id was saved twice) with
        its messages and session state, as ``CheckpointManager.get`` does.

        Raises:
            InvalidCheckpointIdError: a malformed id.
            CheckpointNotFound: the id was not among the run's live checkpoints when listed, or
                is gone since.
            StoreError / IntegrityError: a read failed or found damage.
        """
        check_checkpoint_id(checkpoint_id)
        m = self._by_id.get(checkpoint_id)
        if m is None:
            raise CheckpointNotFound(f"run {self.run_id!r} has no checkpoint {checkpoint_id!r}")
        repo = self._mgr.repo
        try:
            if not self._fetched and self._segs:
                repo.prefetch_segments(self._segs)  # one parallel wave for the whole run
                self._fetched = True
            msgs, _ls = repo.load_with_state(m, self._segs or None, fetched=self._fetched)
        except NotFoundError:
            # the run's writer merged those segments into a tier pack and deleted them (or the
            # record went): the single-checkpoint path, which reads the newest record again
            return self._mgr.get(self.run_id, checkpoint_id)
        return make_checkpoint(repo, m, msgs)
