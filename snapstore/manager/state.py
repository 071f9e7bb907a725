"""What a :class:`~snapstore.manager.facade.CheckpointManager` holds besides its settings:
:class:`ManagerState`.

Layer 4. The operation modules of :mod:`snapstore.manager` take the manager (``mgr``) and reach
its state only through ``mgr.state``, an instance of :class:`ManagerState`: the repository
(opened on first use), one lock per run in use and the :class:`~snapstore.manager.views.RunView` of
each run used lately (:mod:`snapstore.manager.runcache`: bounded in entries and bytes), the
monotonic clock of the GC-safety rule, test hooks, and the two memos a manager keeps (the heads
``runs()`` already read, whether the grace-period warning was given). Everything a manager holds
is declared here.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Callable

from ..errors import InvalidInputError, RepositoryNotFound, SnapstoreError
from ..format.ids import check_run_id
from ..repo.repository import RECENT_RAW_KEEP, Repository
from ..stores.base import ObjectStore, store_capabilities
from .runcache import RUNS_SEEN_MAX, RunCache

__all__ = ["ManagerState"]


def beside(fn: Callable[[], object], name: str, failed=None):
    """Run ``fn()`` in a daemon thread named ``name`` (a request sent beside another one); return
    a future of its result: ``failed`` when it raised a SnapstoreError, any other exception handed
    to the caller that waits on the future."""
    from concurrent.futures import Future

    fut: Future = Future()

    def run():
        try:
            fut.set_result(fn())
        except SnapstoreError:
            fut.set_result(failed)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting caller
            fut.set_exception(e)
    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


def utc_now() -> datetime:
    """The time now, an aware UTC ``datetime`` (the default :attr:`ManagerState.wall_clock`)."""
    return datetime.now(timezone.utc)


def _checked_clock(fn: Callable[[], datetime]) -> Callable[[], datetime]:
    """``fn`` (a caller's wall clock) with each result checked to be an aware ``datetime``,
    returned in UTC.

    Raises (from the returned callable):
        InvalidInputError: ``fn`` returned anything else (a float, a naive datetime).
    """
    def now() -> datetime:
        t = fn()
        if not isinstance(t, datetime) or t.tzinfo is None or t.utcoffset() is None:
            raise InvalidInputError(f"wall_clock() must return an aware datetime (e.g. "
                                    f"datetime.now(timezone.utc)), got {type(t).__name__} {t!r}")
        return t.astimezone(timezone.utc)
    return now


@dataclass(eq=False)
class ManagerState:
    """A manager's state, shared by its callers (threads and asyncio tasks) and its operations.

    Attributes:
        store: the manager's :class:`~snapstore.stores.base.ObjectStore`.
        create: create the repository on first use if the location is empty.
        owns_store: the manager opened ``store`` itself (from a path, URL or None), so
            :meth:`close` closes it.
        clock: monotonic clock in seconds (``time.monotonic`` unless a test gives another).
        wall_clock: the time now as an aware UTC ``datetime`` (:func:`utc_now` unless a test gives
            another): the creation time of saved checkpoints and the "now" of age-based retention.
        views: run id -> :class:`~snapstore.manager.views.RunView`, the newest head this manager
            knows of each run and its caches (:mod:`snapstore.manager.views`), in a
            :class:`~snapstore.manager.runcache.RunCache` (an LRU bounded in entries and bytes: an
            evicted run's head is read from the store again).
        hooks: test hooks, name -> ``callable(**info)`` (see :meth:`hook`); the manager's public
            ``hooks`` attribute is this dict.
        versioned: the bucket has versioning enabled (known once the repository is opened).
        warned_grace: the warning that ``gc_grace_period`` is shorter than twice a save was given
            (once per manager; :mod:`snapstore.manager.save`).
        pack_cache_bytes: the budget of the repository's pack cache (bytes; None: its default).
        runs_seen: run key -> ``(head key, ETag, run id or None)`` of heads ``runs()`` read, so an
            unchanged head (same ETag in the LIST) is not read again
            (:func:`snapstore.manager.read.live_run_ids`); cleared when it holds
            :data:`~snapstore.manager.runcache.RUNS_SEEN_MAX` heads (:meth:`remember_run_head`).

    The per-run locks (:meth:`run_lock`) are held weakly: a lock no operation holds goes away.
    """

    store: ObjectStore
    create: bool
    owns_store: bool
    clock: Callable[[], float]
    wall_clock: Callable[[], datetime] = field(default=None)
    views: RunCache = field(default_factory=RunCache)
    hooks: dict = field(default_factory=dict)
    versioned: bool = False
    warned_grace: bool = False
    runs_seen: dict[str, tuple] = field(default_factory=dict)
    pack_cache_bytes: int | None = None
    _repo: Repository | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _run_locks: weakref.WeakValueDictionary = field(default_factory=weakref.WeakValueDictionary, repr=False)

    def __post_init__(self) -> None:
        if self.wall_clock is None:
            self.wall_clock = utc_now
        elif not callable(self.wall_clock):
            raise InvalidInputError(f"wall_clock must be a callable returning an aware UTC datetime, got "
                                    f"{type(self.wall_clock).__name__} {self.wall_clock!r}")
        else:
            self.wall_clock = _checked_clock(self.wall_clock)

    @property
    def opened(self) -> Repository | None:
        """The repository if it is open, else None (no request is made)."""
        return self._repo

    def repository(self, create: bool) -> Repository:
        """The repository, opened on the first call (created if ``create`` and the location is
        empty); warns (UserWarning) if the bucket has versioning enabled, and sets
        :attr:`versioned`.

        Args:
            create: create the repository if the location holds none.
        Returns:
            The :class:`~snapstore.repo.repository.Repository`.
        Raises:
            RepositoryNotFound: none there and not ``create``; UnsupportedFormatError: written by
                a newer snapstore.
        """
        if self._repo is None:
            with self._lock:
                if self._repo is None:
                    check = self.store.check_versioning if store_capabilities(self.store).versioning else None
                    # the versioning check goes beside the config GET (one round trip for both)
                    # (an unknown versioning state is treated as unversioned, as before)
                    got = beside(lambda: bool(check()), "snapstore-versioning", False) if check is not None else None
                    try:
                        repo = Repository.open(self.store, create=create)
                    except BaseException:
                        if got is not None:
                            got.exception()  # wait for it; the open's error is the one to raise
                        raise
                    if self.pack_cache_bytes is not None:
                        repo.cache.limit = self.pack_cache_bytes
                    if got is not None:
                        self.versioned = got.result()
                        if self.versioned:
                            warnings.warn(
                                f"bucket versioning is enabled for {self.store.url}: deletes only add delete markers, "
                                "so garbage collection reclaims nothing without a noncurrent-version expiration "
                                "rule (see infra/aws/README.md)", stacklevel=5)
                    self.views.raw_keep = RECENT_RAW_KEEP * max(repo.config.dict_bytes, 1)
                    self._repo = repo
        return self._repo

    def opening(self) -> bool:
        """True while the repository is not open yet: the next operation's first request is the
        config GET, beside which a caller may send a read that needs no config
        (:mod:`snapstore.manager.firstread`)."""
        return self._repo is None

    def exists(self) -> bool:
        """True if the location holds a repository (opens it; never creates one)."""
        try:
            self.repository(False)
            return True
        except RepositoryNotFound:
            return False

    def run_lock(self, run_id: str) -> threading.RLock:
        """This manager's lock for run ``run_id`` (one per run: operations on a run take it; it
        lives while someone holds a reference to it, so hold the returned lock, not its run id).

        Raises:
            InvalidRunIdError: a bad run id.
        """
        check_run_id(run_id)
        with self._lock:
            lk = self._run_locks.get(run_id)
            if lk is None:
                lk = self._run_locks[run_id] = threading.RLock()
            return lk

    def remember_run_head(self, run_key: str, value: tuple) -> None:
        """Remember in :attr:`runs_seen` what ``runs()`` read of run key ``run_key``
        (``(head key, ETag, run id or None)``); the memo is cleared first when it holds
        :data:`~snapstore.manager.runcache.RUNS_SEEN_MAX` heads (each forgotten head costs one
        GET at the next ``runs()``)."""
        seen = self.runs_seen
        if run_key not in seen and len(seen) >= RUNS_SEEN_MAX:
            seen.clear()
        seen[run_key] = value

    def run_key(self, run_id: str) -> str:
        """The key segment of run ``run_id`` in this repository (opens, or with :attr:`create`
        creates, the repository).

        Raises:
            InvalidRunIdError: a bad run id; RepositoryNotFound: none there and not :attr:`create`.
        """
        return self.repository(self.create).run_key(check_run_id(run_id))

    def hook(self, name: str, **info) -> None:
        """Call test hook ``name`` (``self.hooks[name](**info)``) if one is set."""
        fn = self.hooks.get(name)
        if fn is not None:
            fn(**info)

    def close(self) -> None:
        """Release the repository's thread pool, and the store if :attr:`owns_store`."""
        if self._repo is not None:
            self._repo.close(close_store=self.owns_store)
        elif self.owns_store:
            self.store.close()
