"""The guard against SQLite's WAL-reset bug: one writing connection per file per process, and a
cross-process ``flock(2)`` around every write and checkpoint.

SQLite builds 3.7.0 to 3.51.2 (except 3.44.6 and 3.50.7) can corrupt a database when two
connections write or checkpoint the same WAL file at the same moment. :class:`SqliteStore
<snapstore.stores.sqlite.SqliteStore>` never lets that happen, with what this module holds:

* a process-wide registry, keyed by the file's real path, of one :class:`Shared` per file: the
  writing connection every store of the file in this process uses, the re-entrant lock serialising
  it, the per-thread read-only connections, and the descriptor holding the ``flock``;
* :func:`take_flock`: the exclusive ``flock`` on the database file itself, polled until a
  deadline, which every write transaction, vacuum and explicit checkpoint holds.

A forked child forgets its parent's entries (its stores open their own connections on next use).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import sqlite3
import threading
import time
from typing import Callable

from ..errors import InvalidInputError, StoreError


def is_busy(e: sqlite3.Error) -> bool:
    """Whether ``e`` is SQLite's "busy" or "locked" (worth retrying until a deadline)."""
    return getattr(e, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(e)


class Shared:
    """What every SQLite store of one file shares in one process: the writing connection, the lock
    around it, the descriptor holding the cross-process ``flock``, and the readers.

    Args:
        path: the file's real path (:func:`os.path.realpath`), the registry key.
    """

    def __init__(self, path: str):
        self.path = path
        self.pid = os.getpid()
        self.synchronous = ""  # the writer's current setting (each store sets its own per write)
        self.lock = threading.RLock()
        self.refs = 0
        self.writer: sqlite3.Connection | None = None
        self.lock_fd: int | None = None
        self.tls = threading.local()
        self.readers: list[sqlite3.Connection] = []
        self.owners: dict = {}  # id(reader connection) -> weakref of the thread using it
        self.readers_lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Close readers, then the writer (under the flock: a closing last connection checkpoints),
        then the flock descriptor (only after every SQLite descriptor of the file is closed: closing
        any descriptor of a file drops the process's POSIX locks on it)."""
        with self.lock:
            self.closed = True
            with self.readers_lock:
                had_readers = bool(self.readers)
                for c in self.readers:
                    try:
                        c.close()
                    except sqlite3.Error:
                        pass
                self.readers.clear()
                self.owners.clear()
            if self.writer is not None:
                try:
                    if self.lock_fd is not None:
                        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
                    self.writer.close()
                except (sqlite3.Error, OSError):
                    pass
                self.writer = None
            elif had_readers:
                self._checkpoint_after_readers()
            if self.lock_fd is not None:
                os.close(self.lock_fd)
                self.lock_fd = None

    def _checkpoint_after_readers(self) -> None:
        """After read-only connections only (a process that read and never wrote): they cannot
        checkpoint nor remove the ``-wal``/``-shm`` files they made, so briefly open a writing
        connection under the flock, read one row, and close it: when it is the file's last
        connection (no other process has it open) SQLite checkpoints and deletes both, as the
        ``sqlite3`` shell does on a clean close; when another process has it open, that one's
        close does it. Skipped, never waited for, when another process holds the flock (it is
        writing: its own close cleans up) or the file is gone or read-only."""
        wal = self.path + "-wal"
        if not os.path.exists(wal) and not os.path.exists(self.path + "-shm"):
            return
        try:
            if self.lock_fd is None:
                self.lock_fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)  # never creates the file
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # gone, read-only, or another process is writing (BlockingIOError)
            return
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=0)
            try:
                conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL
            finally:
                conn.close()  # the last connection: checkpoint, then -wal and -shm removed
        except sqlite3.Error:
            pass  # left as it was: the next writer's close checkpoints
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)


_REGISTRY: dict[str, Shared] = {}
_REGISTRY_LOCK = threading.RLock()  # re-entrant: a store's __del__ may run inside acquire


def _forget_after_fork() -> None:
    # a child must not use its parent's connections; its stores open their own on next use
    global _REGISTRY_LOCK
    _REGISTRY.clear()
    _REGISTRY_LOCK = threading.RLock()  # re-entrant: a store's __del__ may run inside acquire


os.register_at_fork(after_in_child=_forget_after_fork)


def _close_all_at_exit() -> None:
    """At interpreter exit, close this process's connections of every file still open (a store
    its caller never closed): the writer's close, or :meth:`Shared._checkpoint_after_readers`,
    checkpoints and removes the ``-wal``/``-shm`` files when no other process has the file open."""
    with _REGISTRY_LOCK:
        held = [sh for sh in _REGISTRY.values() if sh.pid == os.getpid()]
        _REGISTRY.clear()
    for sh in held:
        try:
            sh.close()
        except Exception:  # noqa: BLE001 - at exit: leave the file as it is, SQLite recovers it
            pass


atexit.register(_close_all_at_exit)


def acquire(path: str) -> Shared:
    """This process's :class:`Shared` of the file at real path ``path`` (a new one when none is
    open, or the one held is closed or inherited from a parent), with one more reference."""
    with _REGISTRY_LOCK:
        sh = _REGISTRY.get(path)
        if sh is None or sh.closed or sh.pid != os.getpid():
            sh = _REGISTRY[path] = Shared(path)
        sh.refs += 1
        return sh


def release(sh: Shared) -> None:
    """Drop one reference to ``sh``; the last one closes its connections and its flock descriptor."""
    with _REGISTRY_LOCK:
        sh.refs -= 1
        if sh.refs > 0:
            return
        if _REGISTRY.get(sh.path) is sh:
            del _REGISTRY[sh.path]
    sh.close()


def take_flock(sh: Shared, path: str, deadline: float, lock_timeout: float,
               error: Callable[[BaseException, str], StoreError]) -> None:
    """Hold the exclusive ``flock`` on the database file ``path`` for ``sh`` (opening its descriptor,
    and the file's parent directories, on first use), polling until ``deadline``
    (:func:`time.monotonic` seconds). The caller holds ``sh.lock`` and releases the flock with
    ``fcntl.flock(sh.lock_fd, fcntl.LOCK_UN)``.

    Args:
        error: turns an OSError into the store's typed error (``error(e, "write")``).
    Raises:
        StoreError: another process held it past the deadline (``lock_timeout`` seconds, named),
            or the file cannot be opened.
    """
    if sh.lock_fd is None:
        make_parent(path)
        try:
            sh.lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise error(e, "write") from None
    delay = 0.0005
    while True:
        try:
            fcntl.flock(sh.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise StoreError(f"the SQLite store {path} stayed locked by another process for "
                                 f"{lock_timeout:g} s") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.02)


def make_parent(path: str) -> None:
    """Create the directories above the SQLite file ``path`` (as the directory store does).

    Raises:
        InvalidInputError: a component of the path is a file, not a directory (named).
        StoreError: the directories cannot be created (permissions, a read-only file system).
    """
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        probe = parent
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        raise InvalidInputError(f"cannot create the SQLite store {path}: not a directory: {probe or parent}") from None
    except OSError as e:
        raise StoreError(f"cannot create the SQLite store {path}: {e.strerror or e}") from None
