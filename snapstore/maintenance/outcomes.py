"""Tool outcomes in GC and verify: which outcome objects are unreachable and may go, and the
check that every one decodes (docs/format.md §25, §21; keys and encoding in
:mod:`snapstore.format.outcomes`, recording and reading in :mod:`snapstore.manager.outcomes`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..errors import ObjectNotFound, SnapstoreError
from ..format import outcomes as fo
from ..stores.base import max_concurrency

__all__ = ["live_anchors", "gc_plan", "is_outcome_key", "verify_outcomes"]


def live_anchors(log) -> tuple[set, int | None]:
    """What keeps a run's outcomes reachable, from its classified log (``runs.RunLog``; None for
    a run with no log record): ``(live log positions, generation or None)``. The generation is
    set only while the run has no live checkpoint (docs/format.md §25)."""
    if log is None or not log.manifests:
        return set(), 0
    live = {m.seq for m in log.live}
    if live:
        return live, None
    return live, max(log.manifests) + 1


def _reachable(anchor: str, live: set, generation: int | None) -> bool:
    kind, pos, _ = fo.parse_anchor(anchor)
    return pos in live if kind == "c" else pos == generation


def gc_plan(infos, logs: dict, grace: float, mature: float) -> tuple[list, list, set]:
    """Which outcome objects GC deletes (docs/format.md §25, §21).

    An outcome whose anchor is no live checkpoint (nor the run's current generation) is deleted
    once its object is older than the grace period (store time; with ``grace == 0`` at once).
    Judged by log position only (GC's slim log entries keep no checkpoint id), which keeps an
    outcome whose position a later checkpoint took: conservative, never unsafe.

    Args:
        infos: :class:`~snapstore.stores.base.ObjectInfo` of listed keys (others are ignored).
        logs: run key -> classified log (``runs.RunLog``) of every run with a record.
        grace: the grace period, seconds. mature: store time (epoch seconds) before which an
            object is older than the grace period.
    Returns:
        ``(deletable [(key, size)], held [(key, size)], run keys keeping an outcome)``: a run
        keeping one must keep its lone tombstone too (its generation would restart at 0).
    """
    doomed, held, keeping = [], [], set()
    per_run: dict = {}
    for info in infos:
        parsed = fo.parse_outcome_key(info.key)
        if parsed is None:
            continue
        rk, anchor, _ = parsed
        if rk not in per_run:
            per_run[rk] = live_anchors(logs.get(rk))
        live, gen = per_run[rk]
        if _reachable(anchor, live, gen):
            keeping.add(rk)
        elif grace == 0 or info.mtime <= mature:
            doomed.append((info.key, info.size))
        else:
            held.append((info.key, info.size))
            keeping.add(rk)
    return doomed, held, keeping


def is_outcome_key(key: str) -> bool:
    """Whether ``key`` has the shape of a tool-outcome key (docs/format.md §25)."""
    return fo.parse_outcome_key(key) is not None


def verify_outcomes(repo, outcome_keys: list, logs: dict, rep) -> None:
    """``verify``'s check of the writes area: every outcome object is read and decoded.

    Appends to ``rep`` (a ``verify.VerifyReport``): an error ``corrupt-outcome`` for an object that
    does not decode (naming the key), a warning ``orphaned-outcome`` for one whose checkpoint is
    gone (unreachable; GC deletes it after its grace period).

    Args:
        repo: the repository. outcome_keys: keys :func:`is_outcome_key` accepted.
        logs: run key -> ``runs.RunLog`` (full manifests: checkpoint ids compared too).
        rep: the report to extend.
    """
    from .verify import Problem

    store = repo.store
    per_run: dict = {}

    def one(key):
        rk, anchor, ck = fo.parse_outcome_key(key)
        try:
            fo.decode_outcome(key, store.get(key), ck, repo.hasher)
        except ObjectNotFound:
            return None
        except SnapstoreError as e:
            return Problem("corrupt-outcome", key, str(e))
        if rk not in per_run:
            log = logs.get(rk)
            ids = {m.seq: m.checkpoint_id for m in log.live} if log is not None else {}
            per_run[rk] = (ids, live_anchors(log)[1])
        ids, gen = per_run[rk]
        kind, pos, ckey = fo.parse_anchor(anchor)
        ok = (pos in ids and ids[pos] is not None and repo.checkpoint_key(ids[pos]) == ckey) if kind == "c" \
            else pos == gen
        return None if ok else Problem("orphaned-outcome", key, "its checkpoint is gone; removed by 'snapstore gc' "
                                                                "after the grace period")

    if not outcome_keys:
        return
    with ThreadPoolExecutor(min(len(outcome_keys), max_concurrency(store))) as ex:
        for p in ex.map(one, outcome_keys):
            if p is not None:
                (rep.warnings if p.code == "orphaned-outcome" else rep.errors).append(p)
