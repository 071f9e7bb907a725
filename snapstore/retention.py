"""Retention policies: which checkpoints of a run to keep (restic ``forget`` semantics).

Pure functions over checkpoint summaries; no I/O. A checkpoint is kept if any rule keeps it;
every rule that keeps it is named in its reasons. Times are each checkpoint's ``created_at`` (UTC).

Rules:
    keep_last N         the N newest checkpoints.
    keep_within D       checkpoints created within D of the run's newest checkpoint (restic's
                        ``--keep-within``).
    older_than D        checkpoints created within D of *now* are kept (the seed API's
                        ``prune(max_age)``: older ones go).
    keep_hourly/daily/weekly/monthly/yearly N
                        for each of the N most recent hours/days/ISO weeks/months/years (UTC) that
                        have checkpoints, the newest checkpoint in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from .errors import InvalidInputError

BUCKETS = {
    "hourly": lambda t: (t.year, t.month, t.day, t.hour),
    "daily": lambda t: (t.year, t.month, t.day),
    "weekly": lambda t: tuple(t.isocalendar()[:2]),
    "monthly": lambda t: (t.year, t.month),
    "yearly": lambda t: (t.year,),
}


def _duration(v, name: str) -> timedelta | None:
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
    return timedelta(seconds=secs)


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
            InvalidInputError: no rule given, an unknown rule, or a negative/non-integer count.
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
        return p


@dataclass
class Decision:
    """One checkpoint's fate: ``keep`` and the ``reasons`` (rules that keep it, or why it goes)."""

    checkpoint: object
    keep: bool
    reasons: list = field(default_factory=list)


def plan(checkpoints: list, policy: Policy, now: datetime | None = None) -> list[Decision]:
    """Decide which checkpoints of ONE run to keep.

    Args:
        checkpoints: summaries with ``created_at`` (aware UTC datetimes), newest first.
        policy: the rules.
        now: the current time (UTC) for ``older_than``; default ``datetime.now(timezone.utc)``.
    Returns:
        A :class:`Decision` per checkpoint, in the given order.
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
        if not d.keep:
            d.reasons.append("matched no keep rule")
    return out
