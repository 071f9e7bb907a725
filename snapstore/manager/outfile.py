"""Writing an output file the way a user of ``-o FILE`` expects (export, export --bundle).

Layer 4 (a helper of the manager and the command line). A regular file is written beside its
name and renamed over it, so that a failed or interrupted write leaves the old file (or none) and
never half a file; a symbolic link is written through (the file it names is replaced, the link
stays); a file that is not a regular one (a FIFO, ``/dev/stdout``, ``/dev/null``, ``/dev/full``,
a socket) is opened and written in place, never replaced by a regular file, so a write error such
as ENOSPC from ``/dev/full`` reaches the caller. A directory is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class OutputTarget:
    """Where :func:`output_file` writes.

    Attributes:
        path: the path asked for (str).
        target: the file written: ``path``, or the file a symbolic link at ``path`` names.
        replaced: True if a regular file was there and is replaced (the caller may say so).
        in_place: True if ``target`` is not a regular file (a FIFO or device) and is written in place.
    """

    path: str
    target: str
    replaced: bool
    in_place: bool


def output_target(path: str) -> OutputTarget:
    """What :func:`output_file` would do with ``path`` (str), without writing anything.

    Raises:
        IsADirectoryError: ``path`` is a directory (or a link to one).
    """
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return OutputTarget(path, target, False, False)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    regular = stat.S_ISREG(st.st_mode)
    return OutputTarget(path, target, regular, not regular)


@contextmanager
def output_file(path: str, fsync: bool = False):
    """Open ``path`` (str) for writing bytes as the module docstring says; yields the binary file
    object. On a normal exit the data is complete in ``path`` (a regular file: renamed into place,
    after an ``fsync`` when ``fsync`` is true); on an exception a regular file's temporary copy is
    removed and the old file is left as it was.

    Raises:
        OSError: the file cannot be opened or written (ENOSPC, EACCES, EISDIR...), raised as is.
    """
    where = output_target(path)
    if where.in_place:
        with open(where.target, "wb") as f:
            yield f
            f.flush()
        return
    tmp = f"{where.target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, where.target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
