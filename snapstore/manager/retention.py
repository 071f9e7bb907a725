"""Retention policies: which checkpoints of a run to keep (restic ``forget`` semantics).

:class:`Policy` and :func:`plan` are pure functions over checkpoint summaries (no I/O). A
checkpoint is kept if any rule keeps it; every rule that keeps it is named in its reasons. Times are each checkpoint's ``created_at`` (UTC).

Rules:
    keep_last N         the N newest checkpoints.
    keep_within D       checkpoints created within D of the run's newest checkpoint (restic's
                        ``--keep-within``).
    older_than D        checkpoints created within D of *now* are kept (the older API's
                        ``prune(max_age)``: older ones go).
    keep_hourly/daily/weekly/monthly/yearly N
                        for each of the N most recent hours/days/ISO weeks/months/years (UTC) that
                        have checkpoints, the newest checkpoint in it.

Dependencies: a checkpoint whose ``metadata`` (a JSON object) holds :data:`NEEDS_KEY`
(``{"from": <log position>, "by": "<why>"}``) needs every live checkpoint of its run at log
positions ``from`` up to its own to restore (a framework's delta chain: the LangGraph saver
writes it for DeltaChannel threads). Whenever a rule keeps such a checkpoint, :func:`plan`
keeps those too, with the reason ``needed by <id> (<why>)``; so do ``max_checkpoints`` and
every surface built on :func:`plan` (``prune``, the CLI, the service). A malformed value
keeps everything older (never less than the field may have meant), and so does a LangGraph
record of a release before the key, in a DeltaChannel thread (:mod:`snapstore.undeclared_needs`).

Applying a policy to a repository (layer 4, functions taking the manager ``mgr``): :func:`prune`
and :func:`retention_plan` (the bodies of :meth:`~snapstore.manager.facade.CheckpointManager.prune` and
``retention_plan``), and :func:`enforce_max` (a manager's ``max_checkpoints``, after each save).
Deleting a run's head checkpoint goes through :mod:`snapstore.manager.rollback` (a rollback record or a
tombstone, conditional like a save).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from . import callers, fanout, history, rollback, summaries, undeclared_needs, views
from .checkpoint import CheckpointSummary
from ..errors import InvalidInputError, SnapstoreError

BUCKETS = {
    "hourly": lambda t: (t.year, t.month, t.day, t.hour),
    "daily": lambda t: (t.year, t.month, t.day),
    "weekly": lambda t: tuple(t.isocalendar()[:2]),
    "monthly": lambda t: (t.year, t.month),
    "yearly": lambda t: (t.year,),
}


DURATION_MAX = timedelta.max.total_seconds()
"""Longest duration a rule takes (seconds: 999,999,999 days, what :class:`datetime.timedelta`
holds); a longer one is refused (``InvalidInputError``), as NaN and infinity are."""


def _duration(v, name: str) -> timedelta | None:
    """``v`` (seconds as int/float, a timedelta or text like ``"7d"``) as a timedelta, or None.

    Raises:
        InvalidInputError: naming ``name``: another type, a negative, NaN or infinite duration,
            or one longer than :data:`DURATION_MAX` seconds.
    """
    if v is None:
        return None
    if isinstance(v, timedelta):
        secs = v.total_seconds()
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        secs = float(v)
    elif isinstance(v, str):
        secs = parse_duration(v)
    else:
        raise InvalidInputError(f"{name}: expected seconds, a timedelta or a duration like '7d', got {v!r}")
    if secs < 0:
        raise InvalidInputError(f"{name}: duration must not be negative, got {v!r}")
    if not secs <= DURATION_MAX:  # also NaN
        raise InvalidInputError(f"{name}: duration must be finite and at most {DURATION_MAX:.0f} seconds "
                                f"(999,999,999 days), got {v!r}")
    try:
        return timedelta(seconds=secs)
    except OverflowError:  # DURATION_MAX is rounded up to a float: exactly it overflows
        raise InvalidInputError(f"{name}: duration must be finite and at most {DURATION_MAX:.0f} seconds "
                                f"(999,999,999 days), got {v!r}") from None


def parse_duration(text: str) -> float:
    """Parse ``"3600"``, ``"90s"``, ``"30m"``, ``"12h"``, ``"7d"``, ``"2w"`` (or combinations like
    ``"1d12h"``) into seconds.

    Raises:
        InvalidInputError: unparseable text.
    """
    import re

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdwy])", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise InvalidInputError(f"invalid duration {text!r} (examples: 3600, 90s, 30m, 12h, 7d, 2w)")
    return sum(float(n) * units[u] for n, u in parts)


NEEDS_KEY = "snapstore.needs"
"""Metadata key of a checkpoint's dependencies on earlier checkpoints of its run (module docstring)."""


def needs_of(metadata) -> tuple[int, str] | None:
    """``(from position, why)`` of a checkpoint's :data:`NEEDS_KEY` metadata, or None if it has
    none. A malformed value gives ``(0, ...)``: keep everything older."""
    if not isinstance(metadata, dict) or NEEDS_KEY not in metadata:
        return None
    v = metadata[NEEDS_KEY]
    if isinstance(v, dict):
        f, why = v.get("from"), v.get("by")
        why = why if isinstance(why, str) and why else "declared dependency"
        if isinstance(f, int) and not isinstance(f, bool) and f >= 0:
            return f, why[:200]
        return 0, f"{why[:200]}; malformed 'from': keeping every older checkpoint"
    return 0, f"malformed {NEEDS_KEY!r}: keeping every older checkpoint"


def _keep_needed(decisions: list) -> None:
    """Keep what the kept checkpoints need (:data:`NEEDS_KEY`, and what records of earlier
    releases needed without declaring it: :mod:`snapstore.undeclared_needs`); ``decisions``
    newest first, in ONE run. Needs point only to older positions, so one pass newest to oldest
    closes them."""
    legacy = undeclared_needs.legacy_needs(getattr(d.checkpoint, "metadata", None) for d in decisions)
    active: list = []   # (from position, needing checkpoint id, why) of kept checkpoints seen
    for d in decisions:
        c = d.checkpoint
        seq = getattr(c, "seq", None)
        if not isinstance(seq, int):
            continue  # a summary without a log position (plan() over hand-made records)
        if not d.keep:
            by = next(((cid, why) for f, cid, why in active if f <= seq), None)
            if by is not None:
                d.keep, d.needed_by = True, by
                d.reasons.append(f"needed by {by[0]} ({by[1]})")
        if d.keep:
            md = getattr(c, "metadata", None)
            n = needs_of(md) or legacy(md)
            if n is not None and n[0] < seq:
                active.append((n[0], c.id, n[1]))


COUNT_RULES = ("keep_last", "keep_hourly", "keep_daily", "keep_weekly", "keep_monthly", "keep_yearly")


@dataclass
class Policy:
    """A retention policy (see the module docstring). All fields optional; at least one must be set."""

    keep_last: int | None = None
    keep_within: timedelta | None = None
    older_than: timedelta | None = None
    keep_hourly: int | None = None
    keep_daily: int | None = None
    keep_weekly: int | None = None
    keep_monthly: int | None = None
    keep_yearly: int | None = None

    @classmethod
    def make(cls, **kw) -> "Policy":
        """Build and validate a policy from keyword arguments (durations as seconds, timedelta or text).

        Raises:
            InvalidInputError: no rule given, an unknown rule, a negative/non-integer count, or a
                policy that keeps nothing (only count rules, every one 0: it would delete every
                checkpoint it applies to).
        """
        p = cls()
        for k, v in kw.items():
            if not hasattr(p, k):
                raise InvalidInputError(f"unknown retention rule: {k}")
            if v is None:
                continue
            if k in ("keep_within", "older_than"):
                setattr(p, k, _duration(v, k))
            else:
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise InvalidInputError(f"{k} must be a non-negative integer, got {v!r}")
                setattr(p, k, v)
        if all(getattr(p, k) is None for k in p.__dataclass_fields__):
            raise InvalidInputError("a retention policy needs at least one rule (keep_last, older_than, keep_daily, ...)")
        if p.keep_within is None and p.older_than is None and not any(
                getattr(p, k) for k in COUNT_RULES):
            given = ", ".join(f"{k}=0" for k in COUNT_RULES if getattr(p, k) == 0)
            raise InvalidInputError(
                f"this retention policy keeps no checkpoint ({given}: a count of 0 keeps none): it would "
                "delete every checkpoint it applies to; give a count of at least 1, or delete runs "
                "with delete(run_id) (CLI: snapstore delete RUN --yes)")
        return p


@dataclass
class Decision:
    """One checkpoint's fate: ``keep`` and the ``reasons`` (rules that keep it, or why it goes).

    ``needed_by``: ``(checkpoint id, why)`` when no keep rule matched and it is kept only because
    that kept checkpoint needs it (:data:`NEEDS_KEY`); None otherwise."""

    checkpoint: object
    keep: bool
    reasons: list = field(default_factory=list)
    needed_by: tuple | None = None


def plan(checkpoints: list, policy: Policy, now: datetime | None = None) -> list[Decision]:
    """Decide which checkpoints of ONE run to keep.

    Args:
        checkpoints: summaries with ``created_at`` (aware UTC datetimes), ``seq`` and
            ``metadata``, newest first.
        policy: the rules.
        now: the current time (UTC) for ``older_than``; default ``datetime.now(timezone.utc)``.
    Returns:
        A :class:`Decision` per checkpoint, in the given order. A checkpoint no rule keeps is
        still kept when a kept one needs it (:data:`NEEDS_KEY`; reason ``needed by <id> (...)``).
    """
    now = now or datetime.now(timezone.utc)
    out = [Decision(c, False, []) for c in checkpoints]
    if policy.keep_last is not None:
        for d in out[:policy.keep_last]:
            d.reasons.append(f"keep-last {policy.keep_last}")
    if policy.keep_within is not None and out:
        newest = checkpoints[0].created_at
        for d in out:
            if newest - d.checkpoint.created_at <= policy.keep_within:
                d.reasons.append(f"within {policy.keep_within} of the newest")
    if policy.older_than is not None:
        for d in out:
            if now - d.checkpoint.created_at <= policy.older_than:
                d.reasons.append(f"newer than {policy.older_than}")
    for name, key in BUCKETS.items():
        n = getattr(policy, f"keep_{name}")
        if not n:
            continue
        seen = set()
        for d in out:
            b = key(d.checkpoint.created_at.astimezone(timezone.utc))
            if b in seen:
                continue
            if len(seen) >= n:
                break
            seen.add(b)
            d.reasons.append(f"{name} {len(seen)}/{n}")
    for d in out:
        d.keep = bool(d.reasons)
    _keep_needed(out)
    for d in out:
        if not d.keep:
            d.reasons.append("matched no keep rule")
    return out


def retention_plan(mgr, run_id: str | None = None, **policy) -> list:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.retention_plan` (arguments, return value and
    errors as documented there). Every run is listed once; runs are listed several at once
    (:mod:`snapstore.manager.fanout`)."""
    pol = Policy.make(**policy)
    now = mgr.state.wall_clock()
    if not mgr.state.exists():
        return []
    runs = [run_id] if run_id is not None else mgr.runs()

    def one(r):
        live = summaries.list_live(mgr.repo, mgr.state.run_key(r)).live
        return plan([CheckpointSummary.from_manifest(m) for m in live], pol, now)
    out = []
    for o in fanout.each_run(mgr.repo, runs, one):
        if o.error is not None:
            raise o.error
        out.extend(o.value)
    return out


@dataclass
class _Pruned:
    """What pruning one run gave (:func:`_prune_run`): its ``decisions`` (newest first), the
    ``doomed`` summaries, and ``saw`` = ``(checkpoint id, seq, write id)`` of the head record the
    prune published, for the caller's view (None: the head did not move, or no view to update)."""

    decisions: list
    doomed: list
    saw: tuple | None = None


def _prune_run(mgr, r: str, pol: Policy, now: datetime, dry_run: bool, store_now) -> _Pruned:
    """Decide and apply ``pol`` on run ``r`` (one listing of its log; the head move conditional
    on the calling context's view of it). Raises ConflictError, StoreError, IntegrityError."""
    with mgr.state.run_lock(r):
        rk = mgr.state.run_key(r)
        listed = summaries.list_live(mgr.repo, rk)  # from the log segments' copies
        live = listed.live
        decisions = plan([CheckpointSummary.from_manifest(m) for m in live], pol, now)
        doomed = [m for m, d in zip(live, decisions) if not d.keep]
        saw = None
        if doomed and not dry_run:
            # deleting the head is conditional on the caller's view of the run (if any)
            check = views.head_check(mgr, r, rk, None, callers.seen(mgr, r), "prune")
            rec = rollback.delete_checkpoints(mgr, r, rk, [(m.seq, m.checkpoint_id) for m in doomed], check,
                                             listed, store_now)
            mgr.state.views.pop(r, None)
            if rec is not None and check is not None:
                head = history.resolve(mgr.repo, rk, rec)
                saw = (head.checkpoint_id if head else None, rec.seq, rec.write_id)
        return _Pruned(decisions, [CheckpointSummary.from_manifest(m) for m in doomed], saw)


def prune(mgr, older_than=None, keep_last: int | None = None, run_id: str | None = None, *,
          keep_within=None, keep_hourly: int | None = None, keep_daily: int | None = None,
          keep_weekly: int | None = None, keep_monthly: int | None = None, keep_yearly: int | None = None,
          dry_run: bool = False, needed: list | None = None, decisions: list | None = None,
          progress=None) -> list[CheckpointSummary]:
    """Implements :meth:`snapstore.manager.facade.CheckpointManager.prune` (arguments, return value and
    errors as documented there). ``needed``: if a list, the :class:`Decision` of every
    checkpoint no rule kept but a kept one needs (:data:`NEEDS_KEY`) is appended to it.
    ``decisions``: if a list, every :class:`Decision` made (per run newest first, runs in
    order: what :func:`retention_plan` returns, from the same listing the deletion used).
    ``progress``: called in the calling thread as runs finish, with (runs done, runs in all).

    Runs are pruned several at once (:mod:`snapstore.manager.fanout`: ``max_concurrency / 4``
    of them), each in a copy of the calling context; what a head move makes the caller see is
    recorded in the caller's context when its run is done. The outcome is that of pruning the
    runs in order: the deleted checkpoints in run order; on an error, the first failed run's
    error is raised once the runs in flight are done (runs before it, and those in flight
    beside it, stay pruned; no later run is started)."""
    policy = dict(older_than=older_than, keep_last=keep_last, keep_within=keep_within, keep_hourly=keep_hourly,
                  keep_daily=keep_daily, keep_weekly=keep_weekly, keep_monthly=keep_monthly,
                  keep_yearly=keep_yearly)
    pol = Policy.make(**policy)
    now = mgr.state.wall_clock()
    if not mgr.state.exists():
        return []
    runs = [run_id] if run_id is not None else mgr.runs()
    store_now = mgr.repo.store_clock()  # one clock probe for every run's removals
    outcomes = fanout.each_run(mgr.repo, runs,
                               lambda r: _prune_run(mgr, r, pol, now, dry_run, store_now), progress)
    gone: list[CheckpointSummary] = []
    error = None
    for o in outcomes:
        if o.error is not None:
            error = error or o.error
            continue
        if o.value.saw is not None:
            views.saw(mgr, o.run_id, *o.value.saw)  # in the caller's context
        if error is not None:
            continue
        if needed is not None:
            needed.extend(d for d in o.value.decisions if d.keep and d.needed_by is not None)
        if decisions is not None:
            decisions.extend(o.value.decisions)
        gone.extend(o.value.doomed)
    if error is not None:
        raise error
    return gone


def live_list(mgr, rk: str, v: views.RunView) -> list:
    """The run's live checkpoints ``[(seq, checkpoint id, needs)]`` (needs: :func:`needs_of` of
    its metadata), oldest first, as view ``v`` caches them
    (read with :func:`snapstore.manager.history.scan_bulk` when it has none)."""
    if v.live is None:
        v.live = [(s, c, needs_of(m.fields.get("metadata"))) for s, c, m in history.scan_bulk(mgr.repo, rk)][::-1]
    return v.live


def enforce_max(mgr, run_id: str, rk: str, v: views.RunView) -> None:
    """Delete the oldest checkpoints beyond ``max_checkpoints`` (best effort: the save already
    succeeded; a failure here leaves extra checkpoints for the next save or prune).

    Conditional on the save just made: only while the run's newest live checkpoint is that
    save (``v.head``); if another writer moved the head meanwhile (a rollback may be making an
    old checkpoint the head again), nothing is deleted and the next save or prune decides.
    What the kept checkpoints need (:data:`NEEDS_KEY`) is kept beyond ``max_checkpoints``."""
    try:
        fresh = v.live is None  # listed just now (one bulk listing, below): no need to list again
        if len(live_list(mgr, rk, v)) <= mgr.max_checkpoints:
            return
        if not fresh:
            v.live = None  # another manager may have deleted some: count afresh before deleting
        live = live_list(mgr, rk, v)
        excess = len(live) - mgr.max_checkpoints
        if excess > 0:
            floor = min([n[0] for _s, _c, n in live[excess:] if n is not None] or [live[excess][0]])
            while excess > 0 and live[excess - 1][0] >= floor:
                excess -= 1  # needed by a kept checkpoint (and what it needs in turn)
                n = live[excess][2]
                if n is not None:
                    floor = min(floor, n[0])
        if excess > 0 and v.head is not None and live[-1][:2] == (v.head.seq, v.head.checkpoint_id):
            mgr.repo.remove_records(rk, [(s, c) for s, c, _n in live[:excess]])
            del live[:excess]
    except SnapstoreError as e:
        v.live = None
        warnings.warn(f"run {run_id!r}: could not apply max_checkpoints: {e}", stacklevel=6)
