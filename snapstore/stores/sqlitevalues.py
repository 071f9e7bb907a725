"""Large values of a SQLite store as files beside the database, in ``<file>.values/``.

An object of at least the store's ``beside_min`` bytes is a file of this directory and its row
names it (``benchmarks/sqlite_store.py --values``: at 1-64 MiB a put costs 2.5-4x less and a read
3-10x less than a BLOB in the file). The store's rules, which :class:`ValueFiles` serves:

* a value file is written and fsynced (with its directory) under a fresh random name before the
  row naming it commits, and unlinked only after the row's removal commits;
* a crash between the two leaves a file no row names: a *leftover* (:meth:`ValueFiles.unreferenced`),
  which GC removes after its grace period;
* a read of a file that is gone (deleted or replaced since its row was read) returns None, and the
  store reads the row again.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from ..errors import InvalidInputError, StoreError
from .base import Leftover


def fsync_dir(path: str) -> None:
    """fsync the directory ``path`` (a rename or a new entry in it becomes durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ValueFiles:
    """The value files of one SQLite store.

    Args:
        directory: ``<database file>.values`` (absolute path); created on the first write.
        fsync: False skips every fsync (tests and CPU benchmarks only).
        error: the store's ``error(e, what)``, turning an OSError into a StoreError naming the file.
    """

    def __init__(self, directory: str, fsync: bool, error: Callable[[BaseException, str], StoreError]):
        self.directory = directory
        self._fsync = fsync
        self._error = error

    def write(self, data: bytes) -> str:
        """Write ``data`` to a new file of the directory, durably; return its name (24 hex digits).

        Raises:
            StoreError: the file cannot be written (read-only, disk full).
        """
        d = self.directory
        try:
            if not os.path.isdir(d):
                os.makedirs(d, exist_ok=True)
                if self._fsync:
                    fsync_dir(os.path.dirname(d))
            name = os.urandom(12).hex()
            tmp = os.path.join(d, ".tmp-" + name)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, os.path.join(d, name))
            if self._fsync:
                fsync_dir(d)
            return name
        except OSError as e:
            raise self._error(e, "write a value file of") from None

    def unlink(self, names: Iterable[str]) -> None:
        """Remove the value files ``names`` (missing ones ignored). Raises StoreError."""
        for n in names:
            try:
                os.unlink(os.path.join(self.directory, n))
            except FileNotFoundError:
                pass
            except OSError as e:
                raise self._error(e, "delete a value file of") from None

    def exists(self, name: str) -> bool:
        """Whether the value file ``name`` is there."""
        return os.path.exists(os.path.join(self.directory, name))

    def read(self, name: str, byte_range: tuple[int, int | None] | None) -> bytes | None:
        """The bytes of value file ``name``, or bytes ``[start, end)`` of it (a range as
        :func:`~snapstore.stores.base.check_range` returns); None when it is gone (deleted or
        replaced since its row was read: the caller reads the row again). Raises StoreError."""
        try:
            fd = os.open(os.path.join(self.directory, name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise self._error(e, "read a value file of") from None
        try:
            size = os.fstat(fd).st_size
            start, end = byte_range if byte_range is not None else (0, None)
            if start < 0:
                start = max(0, size + start)
            end = size if end is None else min(end, size)
            if end <= start:
                return b""
            parts, pos = [], start
            while pos < end:
                b = os.pread(fd, end - pos, pos)
                if not b:
                    break
                parts.append(b)
                pos += len(b)
            return b"".join(parts)
        finally:
            os.close(fd)

    def unreferenced(self, used: Callable[[], set[str]]) -> list[Leftover]:
        """The files of the directory that ``used()`` (the names the rows hold, read after the
        listing) does not name, temporary files included, as leftovers: ``name`` is
        ``<file>.values/NAME``, ``mtime`` the file's. Raises StoreError."""
        d = self.directory
        if not os.path.isdir(d):
            return []
        try:
            names = os.listdir(d)
        except OSError as e:
            raise self._error(e, "list the value files of") from None
        named = used()
        out = []
        for n in names:
            if n in named:
                continue
            try:
                st = os.stat(os.path.join(d, n))
            except FileNotFoundError:
                continue
            out.append(Leftover(os.path.basename(d) + "/" + n, st.st_size, st.st_mtime))
        return out

    def names_of(self, items: Iterable[Leftover]) -> list[str]:
        """The value-file names of leftovers :meth:`unreferenced` returned.

        Raises:
            InvalidInputError: a name that is not a value file of this store.
        """
        prefix = os.path.basename(self.directory) + "/"
        names = []
        for it in items:
            n = it.name[len(prefix):] if it.name.startswith(prefix) else ""
            if not n or "/" in n or n in (".", ".."):
                raise InvalidInputError(f"not a value file of this store: {it.name!r}")
            names.append(n)
        return names
