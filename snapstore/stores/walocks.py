"""The directory store journal's locks: open-file-description byte ranges, or flock(2) lock files.

Every lock of :mod:`snapstore.stores.localwal` is one of: the *users* lock (shared by every open
store of a repository, exclusive to a replay and to the removal of the journal), the *append*
lock, the *barrier* and a key's *stripe*. Each is held through one open file description, so two
threads of one process, two stores of one process and two processes exclude each other alike.
Two ways to hold them (docs/format.md §26), chosen per journal:

* ``"O"`` (Linux 3.15 and later: ``fcntl.F_OFD_SETLKW``): byte-range locks on the journal file
  ``.wal`` itself: byte 0 the append lock, byte 2 the barrier, byte ``2**30 + n`` stripe ``n`` of
  65,536. No lock file exists.
* ``"F"`` (macOS, the BSDs, older Linux: no OFD locks): ``flock(2)`` on small empty lock files in
  the directory ``<root>/.wal-locks/`` (a dot name: never a key): ``append``, ``barrier`` and
  ``s00`` ... ``sff`` (stripe ``n`` of 65,536 is file ``n >> 8``: 256 files). flock(2) locks
  belong to the open file description on Linux, macOS and the BSDs, as OFD locks do. The files
  are made on first use and stay (unlinking a lock file another process holds open would let two
  writers hold "one" lock); they are empty, 258 at most. NOT on NFS: Linux emulates flock there
  with per-process POSIX locks (threads of one process would not exclude each other).

The users lock is ``flock(2)`` on the journal file in both ways (a replay must exclude every
user, whichever way it locks). The journal's header records the way its first user chose
(:mod:`snapstore.stores.localwal`); a process joining a journal uses that way, and refuses one of
``"O"`` when it has no OFD locks (StoreError), so two processes on one repository never lock in
two ways that do not see each other.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct

from ..errors import StoreError

DIR = ".wal-locks"
"""The lock files' directory below the repository root (way ``"F"`` only)."""

APPEND, BARRIER = 0, 2
STRIPES_AT = 1 << 30
FILE_STRIPES = 256

OFD, FLOCK = ord("O"), ord("F")
SHARED, EXCLUSIVE, UNLOCK = "s", "x", "u"

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_OFD_KIND = {SHARED: fcntl.F_RDLCK, EXCLUSIVE: fcntl.F_WRLCK, UNLOCK: fcntl.F_UNLCK}
_FLOCK_KIND = {SHARED: fcntl.LOCK_SH, EXCLUSIVE: fcntl.LOCK_EX, UNLOCK: fcntl.LOCK_UN}


def ofd_available() -> bool:
    """Whether this platform's ``fcntl`` has open-file-description locks (``F_OFD_SETLKW``)."""
    return getattr(fcntl, "F_OFD_SETLKW", None) is not None and getattr(fcntl, "F_OFD_SETLK", None) is not None


def preferred() -> int:
    """The way a new journal locks here: :data:`OFD` when available, else :data:`FLOCK`."""
    return OFD if ofd_available() else FLOCK


def _flock(fd: int, mode: str, wait: bool) -> bool:
    try:
        fcntl.flock(fd, _FLOCK_KIND[mode] | (0 if wait or mode == UNLOCK else fcntl.LOCK_NB))
        return True
    except OSError as e:
        if not wait and e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


def users(fd: int, mode: str, wait: bool = True) -> bool:
    """Take (``mode`` SHARED or EXCLUSIVE) or release (UNLOCK) the users lock: flock(2) on the
    journal's descriptor ``fd``. ``wait=False`` returns False instead of waiting for a holder.

    Raises:
        OSError: the file system refused the lock.
    """
    return _flock(fd, mode, wait)


def stripe_file(slot: int) -> str:
    """The lock file name of stripe byte offset ``slot`` (way ``"F"``): ``s00`` ... ``sff``."""
    return f"s{((slot - STRIPES_AT) >> 8) % FILE_STRIPES:02x}"


class Holder:
    """One open file description's locks on a journal (one per write, settle or replay).

    Args:
        root: the repository root (the lock files' directory is below it).
        fd: a descriptor of the journal ``.wal`` this holder opened (closed by :meth:`close`).
        way: :data:`OFD` or :data:`FLOCK`.
    """

    def __init__(self, root: str, fd: int, way: int):
        self.root = root
        self.fd = fd
        self.way = way
        self._files: dict[str, int] = {}

    def _file(self, name: str) -> int:
        f = self._files.get(name)
        if f is not None:
            return f
        d = os.path.join(self.root, DIR)
        for attempt in range(5):
            try:
                f = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | _CLOEXEC, 0o644)
                break
            except FileNotFoundError:
                if attempt == 4:
                    raise
                try:
                    os.mkdir(d)  # (not fsynced: a lock file holds nothing worth keeping)
                except FileExistsError:
                    pass
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise StoreError(f"refusing the lock file {os.path.join(d, name)}: a symbolic link is there") from None
                raise
        self._files[name] = f
        return f

    def lock(self, mode: str, slot: int, wait: bool = True) -> bool:
        """Take (``mode`` SHARED or EXCLUSIVE) or release (UNLOCK) lock ``slot`` (APPEND, BARRIER
        or a stripe's byte offset); ``wait=False`` returns False instead of waiting.

        Raises:
            OSError: the lock (or its lock file) was refused.
            StoreError: a symbolic link is at a lock file.
        """
        if self.way == OFD:
            arg = struct.pack("hhqqixxxx", _OFD_KIND[mode], os.SEEK_SET, slot, 1, 0)
            try:
                fcntl.fcntl(self.fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, arg)
                return True
            except OSError as e:
                if not wait and e.errno in (errno.EAGAIN, errno.EACCES):
                    return False
                raise
        name = "append" if slot == APPEND else "barrier" if slot == BARRIER else stripe_file(slot)
        if mode == UNLOCK and name not in self._files:
            return True
        return _flock(self._file(name), mode, wait)

    def same_lock(self, a: int, b: int) -> bool:
        """Whether stripe offsets ``a`` and ``b`` are one lock in this way (one is taken once)."""
        return a == b if self.way == OFD else stripe_file(a) == stripe_file(b)

    def close(self) -> None:
        """Close the journal descriptor and every lock file: releases every lock held."""
        for f in self._files.values():
            os.close(f)
        self._files.clear()
        os.close(self.fd)
