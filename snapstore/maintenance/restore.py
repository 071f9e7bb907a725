"""Restore: archived runs' bundles in ``GLACIER``/``DEEP_ARCHIVE`` made readable again
(S3 RestoreObject; docs/format.md §28, "Restoring")."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import InvalidInputError, RunNotFound
from ..format.bundle import COLD_CLASSES
from ..repo.repository import Repository

TIERS = ("bulk", "standard", "expedited")
"""Retrieval tiers (S3: Bulk, Standard, Expedited; Deep Archive has no Expedited)."""


@dataclass
class RestoreReport:
    """What :func:`restore` asked for and found.

    Attributes:
        bundles: bundle key -> state: ``readable`` (a class read in place), ``requested``,
            ``restoring``, ``restored``.
        runs: the run ids whose bundles these are.
    """

    bundles: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)

    @property
    def done(self) -> bool:
        """True when every bundle can be read now."""
        return all(s in ("readable", "restored") for s in self.bundles.values())


def restore(repo: Repository, run_ids: list, tier: str = "standard", days: int = 7, wait: bool = False,
            poll_s: float = 60.0, timeout_s: float | None = None) -> RestoreReport:
    """Issue restore requests for the cold bundles that serve ``run_ids`` and report their state.

    Args:
        repo: the repository.
        run_ids: run ids (a non-empty list).
        tier: one of :data:`TIERS`.
        days: days the restored copy stays readable (1-36500).
        wait: poll every ``poll_s`` seconds until every bundle is readable (or ``timeout_s``
            seconds passed: the report says what is still restoring).
    Returns:
        A :class:`RestoreReport`.
    Raises:
        InvalidInputError: a bad tier, day count or empty run list; a store without storage classes.
        RunNotFound: no bundle serves a named run.
        StoreError: a request failed.
    """
    if tier not in TIERS:
        raise InvalidInputError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    if not isinstance(days, int) or not 1 <= days <= 36500:
        raise InvalidInputError("days must be an integer from 1 to 36500")
    if not run_ids:
        raise InvalidInputError("name at least one run to restore")
    bundles = repo.bundles.load()
    rep = RestoreReport(runs=list(run_ids))
    chosen = {}
    for run in run_ids:
        rk = repo.run_key(run)
        mine = [ix for ix in bundles.values() if rk in ix.runs]
        if not mine:
            raise RunNotFound(f"run {run!r} is not archived (no bundle serves it)")
        chosen.update((ix.bundle, ix) for ix in mine)
    ask = getattr(repo.store, "request_restore", None)
    state = getattr(repo.store, "restore_state", None)
    for ix in chosen.values():
        if ix.storage_class not in COLD_CLASSES or state is None:
            rep.bundles[ix.key] = "readable"
            continue
        now = state(ix.key)
        rep.bundles[ix.key] = now if now in ("readable", "restored", "restoring") else ask(ix.key, days, tier.capitalize())
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while wait and not rep.done and (deadline is None or time.monotonic() < deadline):
        time.sleep(poll_s)
        for k, s in rep.bundles.items():
            if s not in ("readable", "restored"):
                rep.bundles[k] = state(k)
    return rep
