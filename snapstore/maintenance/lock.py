"""The GC lock, ``gc/lock`` (docs/format.md §21): one garbage collection at a time.

The lock is created create-only, refreshed by its holder (compare-and-swap on its ETag) every
``timeout / 5`` seconds from a daemon thread, and removed at the end. A lock not refreshed for
``timeout`` seconds (store time), or whose process is gone on this machine (same host name and
boot id; no process with its pid and start time, or only a zombie left of it), is stale and taken
over (restic does the same for its locks).

Layer 4's whole-repository operations (uses :mod:`snapstore.repo.repository`).
"""

from __future__ import annotations

import json
import os
import threading

from ..errors import ConflictError, ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.codec import loads_exact
from ..repo.repository import Repository

LOCK_KEY = keys.GC_LOCK
LOCK_TIMEOUT = 300.0
"""Seconds (store time) after its last refresh at which another GC's lock is stale. A running GC
refreshes its lock every ``LOCK_TIMEOUT / 5`` seconds, so only a GC that stopped (killed, its
machine gone) leaves a lock this old."""


def _boot_id() -> str:
    """This machine's boot id ('' where the system does not say)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _proc_start(pid: int) -> str:
    """The start time (clock ticks since boot) of process ``pid`` on this machine, '' if unknown,
    None if there is no such process or it is dead: a zombie (``Z``, killed or exited and not yet
    waited for by its parent) or being reaped (``X``) holds nothing and never refreshes a lock."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X", "x") else fields[19]
    except FileNotFoundError:
        return None
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError:
            pass
        return ""


def _lock_body(token: str) -> bytes:
    """The lock's body: JSON naming this host, process (id and start time), boot and ``token``."""
    pid = os.getpid()
    return json.dumps({"host": os.uname().nodename, "pid": pid, "token": token, "boot": _boot_id(),
                       "start": _proc_start(pid) or ""}).encode()


def _owner_dead(body: bytes) -> bool:
    """True if the lock ``body`` names a process of this machine (same host name and boot) that no
    longer exists (restic does the same for its locks)."""
    try:
        d = loads_exact(body, 2)
        if not isinstance(d, dict) or d.get("host") != os.uname().nodename or not d.get("boot") \
                or d.get("boot") != _boot_id() or not isinstance(d.get("pid"), int):
            return False
        start = _proc_start(d["pid"])
        return start is None or (bool(start) and bool(d.get("start")) and start != d.get("start"))
    except (ValueError, UnicodeDecodeError):
        return False


class LockKeeper:
    """Refreshes this GC's lock (compare-and-swap on its ETag) every ``interval`` seconds from a
    daemon thread; :meth:`check` raises ConflictError once the lock was lost (taken over or removed).

    Args:
        repo: the repository.
        token: the holder's random token (hex), written in the lock's body.
        etag: the lock's ETag as :func:`acquire` wrote it.
        interval: seconds between refreshes.
    """

    def __init__(self, repo: Repository, token: str, etag: str, interval: float):
        self.repo, self.token, self.etag, self.lost = repo, token, etag, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval,), daemon=True, name="snapstore-gc-lock")
        self._thread.start()

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.etag = self.repo.store.put_if_match(LOCK_KEY, _lock_body(self.token), self.etag).etag
            except (PreconditionFailed, ObjectNotFound):
                self.lost = "it was taken over or removed by another process"
                return
            except SnapstoreError:
                continue  # a failed refresh: try again (the lock goes stale only after LOCK_TIMEOUT)

    def check(self) -> None:
        """Raise ConflictError if the lock is no longer this GC's (before deleting anything)."""
        if self.lost is None:
            try:
                d = loads_exact(self.repo.store.get(LOCK_KEY), 2)
                if not (isinstance(d, dict) and d.get("token") == self.token):
                    self.lost = "another GC holds it now"
            except ObjectNotFound:
                self.lost = "it was removed"
            except (ValueError, UnicodeDecodeError):
                self.lost = "it was replaced by an unreadable object"
        if self.lost is not None:
            raise ConflictError(f"garbage collection stopped before deleting anything: lost its lock {LOCK_KEY} "
                                f"({self.lost})")

    def stop(self) -> None:
        """Stop refreshing (waits up to 30 s for the thread)."""
        self._stop.set()
        self._thread.join(timeout=30)


def break_lock(repo: Repository) -> bool:
    """Remove the GC lock whoever holds it (``snapstore gc --break-lock``). Only safe when no GC is
    running: a GC whose lock is removed stops before deleting anything, but one past that point
    finishes beside the next. Returns True if there was a lock."""
    try:
        repo.store.head(LOCK_KEY)
    except ObjectNotFound:
        return False
    repo.store.delete_many([LOCK_KEY])
    return True


def release(repo: Repository, token: str) -> None:
    """Remove the lock if it is still ours (a stale-lock takeover may have replaced it)."""
    try:
        d = loads_exact(repo.store.get(LOCK_KEY), 2)
        if isinstance(d, dict) and d.get("token") == token:
            repo.store.delete_many([LOCK_KEY])
    except (ObjectNotFound, ValueError, UnicodeDecodeError):
        pass  # gone, or not ours (a lock we cannot read was not written by this GC)


def acquire(repo: Repository, now: float, timeout: float, token: str) -> str:
    """Take the GC lock for the holder ``token`` at store time ``now`` (seconds); return its ETag. A lock whose owner died on this machine, or that was not
    refreshed for ``timeout`` seconds (store time), is taken over (compare-and-swap).

    Raises:
        ConflictError: a live GC holds it (names its host, process and age).
    """
    body = _lock_body(token)
    for _ in range(4):
        try:
            return repo.store.put(LOCK_KEY, body).etag
        except PreconditionFailed:
            pass
        try:
            info = repo.store.head(LOCK_KEY)
            held = repo.store.get(LOCK_KEY)
        except ObjectNotFound:
            continue  # released meanwhile: try again
        if now - info.mtime < timeout and not _owner_dead(held):
            try:
                d = loads_exact(held, 2)
                who = f" by {d.get('host')} pid {d.get('pid')}" if isinstance(d, dict) else ""
            except (ValueError, UnicodeDecodeError):
                who = ""
            raise ConflictError(f"another garbage collection is running (lock {LOCK_KEY} held{who}, refreshed "
                                f"{max(0.0, now - info.mtime):.0f} s ago; it is stale after {timeout:.0f} s "
                                "without a refresh, or at once if its process is gone on this machine; "
                                "`snapstore gc --break-lock` removes it)")
        try:
            return repo.store.put_if_match(LOCK_KEY, body, info.etag).etag  # stale lock: take it over
        except (PreconditionFailed, ObjectNotFound):
            continue  # another GC took it first, or it was released: look again
    raise ConflictError(f"the GC lock {LOCK_KEY} keeps changing hands; try again")
