"""Tool outcomes: a tool call's result recorded beside the checkpoint it started from, so that a
resumed agent skips a call that already ran (docs/format.md §25; keys and encoding in
:mod:`snapstore.format.outcomes`).

* :func:`record_outcome` writes one object per (checkpoint, call id) with the store's create-only
  PUT: a replay of the same result is a no-op, another result for the same call a ConflictError.
* :func:`read_outcomes` reads every outcome of one checkpoint: one LIST of its prefix and the
  GETs in parallel (for a generated checkpoint id, the LIST runs beside the liveness check).
* GC and verify of the writes area live in :mod:`snapstore.maintenance.outcomes`.

A checkpoint's outcomes are reachable while it is a live checkpoint of its run: rolling it back,
deleting it or deleting the run makes them unreachable at once (the anchor names the checkpoint's
log position and id, and a run's generation, so a later checkpoint of the same id or a new run of
the same id never sees them); GC deletes them once they are older than its grace period.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..errors import CheckpointNotFound, ConflictError, IntegrityError, ObjectNotFound, PreconditionFailed
from ..format import outcomes as fo
from ..format.ids import check_checkpoint_id, check_run_id, seq_hint
from ..format.manifest import KIND_TOMBSTONE
from ..stores.base import max_concurrency, store_capabilities

__all__ = ["record_outcome", "read_outcomes", "delete_outcomes", "outcomes_beside"]


def _generation(mgr, run_id: str, rk: str) -> int:
    """The run's generation (docs/format.md §25) while it has no live checkpoint.

    Raises:
        ConflictError: the run has a live checkpoint (name it instead of None).
    """
    repo = mgr.repo
    m = repo.head(rk)
    if m is None:
        return 0
    if m.kind != KIND_TOMBSTONE and mgr.head(run_id) is not None:
        raise ConflictError(f"run {run_id!r} has checkpoints: tool outcomes belong to the checkpoint a call "
                            f"started from, not to None (before the run's first checkpoint)")
    return m.seq + 1


def _anchor(mgr, run_id: str, checkpoint_id: str | None, create: bool) -> tuple[str, str] | None:
    """``(run key, anchor)`` of a live checkpoint (or, for None, of the run's generation); None
    when reading and no repository exists (a run with no checkpoint)."""
    if checkpoint_id is None:
        if not create and not mgr.state.exists():
            return None
        _ = mgr.repo  # opened (created only when the manager creates repositories)
        rk = mgr.state.run_key(run_id)
        return rk, fo.generation_anchor(_generation(mgr, run_id, rk))
    s = mgr.summary(run_id, checkpoint_id)  # CheckpointNotFound for a gone one
    return mgr.state.run_key(run_id), fo.checkpoint_anchor(s.seq, mgr.repo.checkpoint_key(checkpoint_id))


def record_outcome(mgr, run_id: str, checkpoint_id: str | None, call_id: str, result) -> bool:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.record_outcome` (arguments, return value
    and errors as documented there)."""
    check_run_id(run_id)
    if checkpoint_id is not None:
        check_checkpoint_id(checkpoint_id)
    data = fo.encode_outcome(call_id, result)  # bad input refused before any request
    rk, anchor = _anchor(mgr, run_id, checkpoint_id, create=True)
    repo = mgr.repo
    key = fo.outcome_key(rk, anchor, call_id, repo.hasher)
    try:
        repo.store.put(key, data)
        return True
    except PreconditionFailed:
        pass
    try:
        old = repo.store.get(key)
    except ObjectNotFound:  # deleted meanwhile (GC of an unreachable anchor): the checkpoint is gone
        raise CheckpointNotFound(f"run {run_id!r} has no checkpoint {checkpoint_id!r}") from None
    if old == data:
        return False
    try:
        _, prev = fo.decode_outcome(key, old, key.rsplit("/", 1)[1], repo.hasher)
    except IntegrityError:
        raise
    raise ConflictError(f"tool call {call_id!r} of checkpoint {checkpoint_id!r} in run {run_id!r} already has "
                        f"another recorded outcome: {str(prev)[:200]!r}")


def read_outcomes(mgr, run_id: str, checkpoint_id: str | None) -> dict:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.outcomes` (arguments, return value and
    errors as documented there)."""
    check_run_id(run_id)
    if checkpoint_id is not None:
        check_checkpoint_id(checkpoint_id)
    infos = None
    seq = seq_hint(checkpoint_id) if checkpoint_id is not None else None
    if seq is not None and mgr.state.exists():
        # a generated id names its position: list beside the liveness check (one round trip less)
        rk = mgr.state.run_key(run_id)
        guess = fo.checkpoint_anchor(seq, mgr.repo.checkpoint_key(checkpoint_id))
        pool = ThreadPoolExecutor(2)
        try:
            listing = pool.submit(lambda: list(mgr.repo.store.list(fo.anchor_prefix(rk, guess),
                                                                    limit=fo.OUTCOMES_MAX + 1)))
            got = _anchor(mgr, run_id, checkpoint_id, create=False)
            if got == (rk, guess):
                infos = listing.result()
        finally:
            pool.shutdown(wait=True)
    else:
        got = _anchor(mgr, run_id, checkpoint_id, create=False)
    if got is None:
        return {}
    rk, anchor = got
    store = mgr.repo.store
    prefix = fo.anchor_prefix(rk, anchor)
    if infos is None:
        infos = list(store.list(prefix, limit=fo.OUTCOMES_MAX + 1))
    if len(infos) > fo.OUTCOMES_MAX:
        raise IntegrityError(prefix, f"more than {fo.OUTCOMES_MAX} tool outcomes under one checkpoint")
    hasher = mgr.repo.hasher

    def one(info):
        ck = info.key[len(prefix):]
        if "/" in ck:
            raise IntegrityError(info.key, "not a tool-outcome key (docs/format.md §25)")
        try:
            return fo.decode_outcome(info.key, store.get(info.key), ck, hasher)
        except ObjectNotFound:
            return None  # deleted between LIST and GET: the checkpoint is gone (checked below)

    if len(infos) <= 1:
        pairs = [one(i) for i in infos]
    else:
        with ThreadPoolExecutor(min(len(infos), max_concurrency(store))) as ex:
            pairs = list(ex.map(one, infos))
    if any(p is None for p in pairs):
        _anchor(mgr, run_id, checkpoint_id, create=False)  # raises when it went meanwhile
        pairs = [p for p in pairs if p is not None]
    return dict(pairs)


def delete_outcomes(mgr, run_id: str, outcomes) -> int:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.delete_outcomes` (arguments,
    return value and errors as documented there)."""
    check_run_id(run_id)
    pairs = []
    for cid, call in outcomes:
        check_checkpoint_id(cid)
        pairs.append((cid, fo.check_call_id(call)))
    if not pairs or not mgr.state.exists():
        return 0
    repo = mgr.repo
    rk = mgr.state.run_key(run_id)
    anchors: dict = {}
    keys = set()
    for cid, call in pairs:
        if cid not in anchors:
            seq = seq_hint(cid)  # a generated id names its position: no lookup
            if seq is None:
                try:
                    seq = mgr.summary(run_id, cid).seq
                except CheckpointNotFound:
                    seq = None  # its outcomes are unreachable already (GC deletes them)
            anchors[cid] = None if seq is None else fo.checkpoint_anchor(seq, repo.checkpoint_key(cid))
        if anchors[cid] is not None:
            keys.add(fo.outcome_key(rk, anchors[cid], call, repo.hasher))
    if keys:
        repo.store.delete_many(sorted(keys))
    return len(keys)


def outcomes_beside(mgr, run_id: str, checkpoints, skip=()) -> dict:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.outcomes_beside` (arguments,
    return value and errors as documented there)."""
    check_run_id(run_id)
    wanted = {}
    for cid, seq in checkpoints:
        check_checkpoint_id(cid)
        wanted[fo.checkpoint_anchor(seq, mgr.repo.checkpoint_key(cid))] = cid
    if not wanted or not mgr.state.exists():
        return {}
    repo = mgr.repo
    store = repo.store
    rk = mgr.state.run_key(run_id)
    prefix = fo.outcomes_prefix(rk)
    unread = {fo.outcome_key(rk, a, c, repo.hasher) for a in wanted for c in skip}
    infos = []
    for info in store.list(prefix):
        anchor, _, rest = info.key[len(prefix):].partition("/")
        if anchor in wanted and info.key not in unread:
            if not rest or "/" in rest:
                raise IntegrityError(info.key, "not a tool-outcome key (docs/format.md §25)")
            infos.append((wanted[anchor], info.key, rest))
    if len(infos) > fo.OUTCOMES_MAX:
        raise IntegrityError(prefix, f"more than {fo.OUTCOMES_MAX} tool outcomes beside the checkpoints asked for")

    def one(item):
        cid, key, ck = item
        try:
            return cid, fo.decode_outcome(key, store.get(key), ck, repo.hasher)
        except ObjectNotFound:
            return None  # deleted between LIST and GET

    if len(infos) <= 2 or store_capabilities(store).inline_reads:
        # the usual one or two, or reads that cost no round trip (a local directory, a SQLite
        # file): a pool (threads started per call) costs more than it saves
        got = [one(i) for i in infos]
    else:
        with ThreadPoolExecutor(min(len(infos), max_concurrency(store))) as ex:
            got = list(ex.map(one, infos))
    out: dict = {}
    for g in got:
        if g is not None:
            cid, (call, result) = g
            out.setdefault(cid, {})[call] = result
    return out
