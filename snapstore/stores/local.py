"""Local-directory object store: the embedded default.

Layout: the object with key ``a/b/c`` is the file ``<root>/a/b/c``. Names starting with ``.`` are
never keys (see :func:`~snapstore.stores.base.check_key`); the store uses them for temporary files
(``.tmp-*``) and its write-ahead journal (``<root>/.wal``, :mod:`snapstore.stores.localwal`), which
also holds every lock (byte-range locks): no lock file is left behind.

Durability and atomicity (``fsync=True``, the default; docs/format.md §26):

* Every write (``put``, ``put_if_match``, ``delete_many``) journals a checksummed record (the key
  and the bytes, or the deleted keys) and fdatasyncs the journal once: it is durable when it
  returns. Only then does the object's file change: ``put`` (create-only) ``link(2)``s a temporary
  file written beside it (not fsynced) to the final name, which fails atomically if the name
  exists; ``put_if_match`` ``rename(2)``s one over it; ``delete_many`` unlinks. Files and
  directories are fsynced later, off the write's path, by a settler (a background thread, and
  ``close``), which then advances the journal's settled mark. Parallel writes of one process
  share fdatasyncs (group commit). A save of a pack and a manifest costs two fdatasyncs. After a
  power cut or a killed process, the next opener of a journal no process holds replays the
  unsettled records (objects missing or torn are written again from their records, deleted ones
  removed again) before anything is read. Objects above 1 MiB are fsynced in place (file, then
  directory) instead of copied into the journal.
* ``put`` and ``put_if_match`` hold the key's stripe lock (one of 65,536 byte ranges of the
  journal, Linux open-file-description locks: threads and processes alike) from the existence or
  ETag check until the file is in place.
* A crash leaves either the complete object or none (plus, at worst, a ``.tmp-*`` file, which
  ``verify`` reports as a warning).
* With ``fsync=False`` nothing is journaled nor synced; the journal file only holds the locks
  (tests and CPU benchmarks only; such a store must not write a repository a journaling process
  writes at the same time: a replay could undo its writes).

Links: the store never follows a symbolic link below its root, so a repository cannot make it
read, write or delete outside the root. Reads open every directory below the root and the file
itself with ``O_NOFOLLOW`` (``openat(2)`` from the directory above); a link there raises
:class:`~snapstore.errors.IntegrityError` naming the key. Writes and deletes check (``lstat``)
that no directory on the key's path is a link and raise :class:`~snapstore.errors.StoreError`
otherwise. Listings neither list nor enter linked directories; a linked file is listed, so
reading it reports it. The root itself may be a link (the user chose it).
"""

from __future__ import annotations

import errno
import heapq
import os
import stat
import threading
from typing import Iterable, Iterator

from ..errors import IntegrityError, InvalidInputError, ObjectNotFound, PreconditionFailed, StoreError
from . import localwal
from .batch import BatchPut, BatchRefused, check_batch
from .base import Leftover, ObjectInfo, RequestStats, StoreCapabilities, check_key, check_range, check_whole_read

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC


def _link_error(key: str) -> IntegrityError:
    return IntegrityError(key, "a symbolic link is on its path (the local store never follows links below its root)")


def _read_to_end(fd: int, size: int, key: str) -> bytes:
    """Read file ``fd`` from its position to its end; ``size`` (bytes, from ``fstat``) sizes the
    first read, and a file of that size ends with one more read of one byte (empty): no buffer
    larger than the file is allocated unless the file is larger than ``size``. A file that grows
    past what a whole read of ``key`` may take while it is read (an object is never written in
    place: only a hostile writer does that) raises :class:`~snapstore.errors.ObjectTooLarge`
    instead of growing the buffer further."""
    first = os.read(fd, size)
    pieces = [first]
    got = len(first)
    want = 1
    while True:
        more = os.read(fd, want)
        if not more:
            break
        got += len(more)
        check_whole_read(key, got)
        pieces.append(more)
        want = 1 << 20
    return first if len(pieces) == 1 else b"".join(pieces)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link"))


def _not_regular(key: str, what: str) -> IntegrityError:
    return IntegrityError(key, f"not a regular file but {what} (the local store never opens one for reading)")


def _check_regular(key: str, st: os.stat_result) -> None:
    """Raise for what is at a key when it is not a regular file: a directory is no object
    (IsADirectoryError, which callers turn into ObjectNotFound), a link is refused as every link
    below the root, a FIFO, socket or device is corrupt (IntegrityError naming the key)."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(key)
    if stat.S_ISLNK(mode):
        raise _link_error(key)
    raise _not_regular(key, next((what for test, what in _KINDS if test(mode)), f"file type {stat.S_IFMT(mode):o}"))


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)



def _is_key(name: str) -> bool:
    """Whether ``name`` (a path relative to the store root, ``/``-separated) is a valid object key
    (:func:`~snapstore.stores.base.check_key`): files of other names (a user's ``README.txt``, a
    ``Backup/`` folder) are not objects of this store, so listings leave them out."""
    try:
        check_key(name)
    except InvalidInputError:
        return False
    return True

class LocalStore:
    """An :class:`~snapstore.stores.base.ObjectStore` over a directory.

    Args:
        root: directory path; created (with parents) on the first write if missing.
        fsync: when True (default) every write is durable before it returns (journaled and
            fdatasynced; see the module docstring). Only tests and benchmarks of pure CPU cost
            should turn it off.
        settle_delay: seconds (float) the background settler waits after a write before it
            fsyncs the files written meanwhile (default 0.05); None: no background settler, files
            are settled only by ``settle()``, ``close()`` (or the next opener's replay).
    Raises:
        StoreError: ``root`` exists and is not a directory.
    """

    KNOWN_DIRS_MAX = 16384
    """Most directories the store remembers as existing (about 200 bytes each; a run has a few);
    the memo is cleared when full, so a store used for any number of runs stays bounded."""

    def __init__(self, root: str | os.PathLike, fsync: bool = True, settle_delay: float | None = 0.05):
        self.root = os.path.abspath(os.fspath(root))
        try:  # one stat (following links, as the root may be one): exists and is not a directory?
            is_dir = stat.S_ISDIR(os.stat(self.root).st_mode)
        except (OSError, ValueError):
            is_dir = True  # missing (created on the first write) or unreadable (reported by the first request)
        if not is_dir:
            raise StoreError(f"repository path is not a directory: {self.root}")
        self.url = self.root
        self.stats = RequestStats()
        self._fsync = fsync
        self._settle_delay = settle_delay
        self._wal: localwal.Journal | None = None
        self._wal_checked = False
        self._wal_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._known_dirs: set[str] = set()  # directories known to exist (at most KNOWN_DIRS_MAX)
        #: What this store is (see :class:`~snapstore.stores.base.StoreCapabilities`): 16 reads
        #: worth running in parallel (file reads release the GIL; more threads only contend; the
        #: repository's historical default pool size); inline reads (a restore reads its run's
        #: few segment packs one after another rather than on a thread pool: a read from the page
        #: cache is a memory copy, and starting the pool's threads cost a fresh process about 2 ms
        #: of a 12 ms cold ``latest()``, ``benchmarks/local_read.py``); compacted run logs (a
        #: manifest file costs a 4 KiB disk block); leftovers (``.tmp-*`` files) and empty
        #: directories to remove; atomic batches (:meth:`write_batch`: one journal record, one
        #: fdatasync; a save's packs and manifest at one commit).
        self.capabilities = StoreCapabilities(max_concurrency=16, inline_reads=True, compact_log=True,
                                              leftovers=True, empty_dirs=True, atomic_batch=True)

    # ------------------------------------------------------------------------------------------
    def _journal(self, create: bool = True) -> "localwal.Journal | None":
        """The open journal (opened, and replayed when no other process holds it, on first use);
        None for ``create=False`` (a read) when there is none. With ``fsync=False`` the journal
        only holds the locks (nothing is journaled nor synced).

        Raises:
            StoreError: the journal cannot be opened or replayed.
        """
        j = self._wal
        if j is not None and j.fd is not None and j.pid == os.getpid():
            return j
        if not create and self._wal_checked and j is None:
            return None
        with self._wal_lock:
            j = self._wal
            if j is not None and j.fd is not None and j.pid == os.getpid():
                return j
            if j is not None and j.pid != os.getpid():
                self._known_dirs.clear()  # a forked child: the parent's journal is not ours
            if create:
                self._ensure_dir(self.root)
            j = localwal.Journal(self, self._settle_delay, durable=self._fsync)
            try:
                opened = j.open(create)
            except OSError as e:
                raise StoreError(f"cannot open the journal of {self.root}: {e.strerror or e}") from e
            self._wal_checked = True
            self._wal = j if opened else None
            return self._wal

    def _ready(self) -> None:
        """Before a read: replay an unsettled journal no process holds (once per store)."""
        if not self._wal_checked:
            self._journal(create=False)

    def settle(self) -> int:
        """fsync every journaled write's file and directories now and advance the journal's
        settled mark (the background settler does it ``settle_delay`` after writes). Returns the
        number of records settled (0 with ``fsync=False`` or no journal).

        Raises:
            StoreError: a file could not be synced.
        """
        j = self._journal(create=False)
        return j.settle() if j is not None and j.durable else 0

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _dir_fd(self, parts: list[str]) -> int:
        """Open the directory ``root/parts...`` without following links (caller closes the fd).

        Raises OSError: ELOOP for a link on the way, ENOENT/ENOTDIR for a missing directory."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        try:
            for comp in parts:
                try:
                    nfd = os.open(comp, _DIR_NOFOLLOW, dir_fd=fd)
                except NotADirectoryError:
                    # Linux answers O_DIRECTORY | O_NOFOLLOW on a link with ENOTDIR, not ELOOP
                    if stat.S_ISLNK(os.stat(comp, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, "symbolic link", comp) from None
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_dir(self, d: str) -> None:
        """Raise StoreError if a directory between the root and ``d`` (inclusive) is a link."""
        if d in self._known_dirs or d == self.root:
            return
        rel = os.path.relpath(d, self.root)
        p = self.root
        for comp in rel.split(os.sep):
            p = os.path.join(p, comp)
            try:
                st = os.lstat(p)
            except (FileNotFoundError, NotADirectoryError):
                return  # missing from here on: nothing to follow
            if stat.S_ISLNK(st.st_mode):
                raise StoreError(f"refusing to follow the symbolic link {p} inside the repository")

    def _count(self, kind: str, up: int = 0, down: int = 0, n: int = 1) -> None:
        with self._stats_lock:
            self.stats.counts[kind] += n
            self.stats.bytes_up += up
            self.stats.bytes_down += down

    def _ensure_dir(self, d: str) -> None:
        if d in self._known_dirs:
            return
        self._check_dir(d)
        for attempt in range(5):
            missing = []
            p = d
            while not os.path.isdir(p):
                missing.append(p)
                parent = os.path.dirname(p)
                if parent == p:
                    break
                p = parent
            try:
                for m in reversed(missing):
                    try:
                        os.mkdir(m)
                    except FileExistsError:
                        if not os.path.isdir(m):
                            raise StoreError(f"not a directory: {m}") from None
                    # (not fsynced here: the settler fsyncs every directory up to the root)
                break
            except FileNotFoundError:
                # a parent was removed meanwhile (GC prunes empty directories): start again
                if attempt == 4:
                    raise
        if len(self._known_dirs) >= self.KNOWN_DIRS_MAX:
            self._known_dirs.clear()  # a bounded memo (a forgotten directory costs a stat again)
        self._known_dirs.add(d)

    def _write_temp(self, d: str, data: bytes, sync: bool = False) -> str:
        self._ensure_dir(d)
        tmp = os.path.join(d, ".tmp-" + os.urandom(8).hex())
        for attempt in range(5):
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileNotFoundError:
                # the directory was removed meanwhile (GC prunes empty directories): create it again
                if attempt == 4:
                    raise
                self._known_dirs.discard(d)
                self._ensure_dir(d)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    @staticmethod
    def _info(key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(key, st.st_size, f"{st.st_ino:x}.{st.st_mtime_ns:x}.{st.st_size:x}", st.st_mtime)

    # ------------------------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key`` atomically and durably (journaled and fdatasynced before the file
        appears; see the module docstring).

        Raises:
            PreconditionFailed: the key exists.
            StoreError: the write failed (or a link is on the key's path).
        """
        path = self._path(key)
        d = os.path.dirname(path)
        self._count("PUT", up=len(data))
        try:
            wal = self._journal()
            big = wal.durable and len(data) > localwal.INLINE_MAX
            with wal.mutation(key) as w:
                self._check_dir(d)
                if os.path.lexists(path):
                    raise PreconditionFailed(key)
                w.append(localwal.LEAVE if big else localwal.PUT, key, b"" if big else data)
                info = self._link_new(key, path, d, data, lambda: w.append(localwal.LEAVE, key), sync=big)
                if big:
                    _fsync_dir(d)
                return info
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror or e}") from e

    def _link_new(self, key: str, path: str, d: str, data: bytes, on_taken, sync: bool = False) -> ObjectInfo:
        """Write a temp file beside ``path`` and ``link(2)`` it there (create-only); ``on_taken()``
        runs when another writer's file is there (then PreconditionFailed); ``sync``: fsync the
        temp file first."""
        for attempt in range(5):
            tmp = self._write_temp(d, data, sync=sync)
            try:
                os.link(tmp, path)
                # the object's inode, read through our own name for it: the key itself may
                # already be deleted by another process (a writer cleaning up run markers)
                return self._info(key, os.stat(tmp))
            except FileExistsError:
                on_taken()  # a writer outside the journal took it: a replay leaves it alone
                raise PreconditionFailed(key) from None
            except FileNotFoundError:
                if attempt == 4:  # directory removed between the temp write and the link
                    raise
                self._known_dirs.discard(d)
            finally:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
        raise AssertionError("unreachable")

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Compare-and-swap ``key`` on ``etag`` (``None``: create-only), durably (journaled);
        the key's stripe lock is held from the ETag check until the new file is in place.

        Raises:
            PreconditionFailed: the ETag differs (or the key is missing).
            StoreError: the write failed, or something other than a regular file is at the key
                (or a link or non-regular file is at the journal ``.wal``).
        """
        if etag is None:
            return self.put(key, data)
        path = self._path(key)
        d = os.path.dirname(path)
        self._count("PUT", up=len(data))
        try:
            wal = self._journal()
            big = wal.durable and len(data) > localwal.INLINE_MAX
            with wal.mutation(key) as w:
                self._check_dir(d)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    raise PreconditionFailed(key) from None
                if not stat.S_ISREG(st.st_mode):
                    raise StoreError(f"refusing to replace {path}: not a regular file (a link or a directory)")
                if self._info(key, st).etag != etag:
                    raise PreconditionFailed(key)
                tmp = self._write_temp(d, data, sync=big)
                try:
                    w.append(localwal.LEAVE if big else localwal.PUT, key, b"" if big else data)
                    os.replace(tmp, path)
                except BaseException:
                    if os.path.lexists(tmp):
                        os.unlink(tmp)
                    raise
                if big:
                    _fsync_dir(d)
                return self._info(key, os.stat(path))
        except OSError as e:
            raise StoreError(f"cannot write {path}: {e.strerror or e}") from e

    def write_batch(self, puts: Iterable[BatchPut], deletes: Iterable[str] = (),
                    deletes_unless: str | None = None) -> list[ObjectInfo | None]:
        """Apply conditional puts and deletes as ONE journal record (one fdatasync): every
        condition is decided while the stripes of all the put keys are held, then the record
        is journaled, then the files change in batch order (puts, then deletes) without fsync
        (:mod:`snapstore.stores.batch`; docs/format.md §26). Durable all or none: a replay
        applies the whole record or, torn, none of it. Readers see the files appear in batch
        order (a manifest put last is never visible before its packs), as after ordered writes.
        Objects above 1 MiB are fsynced in place before the record (an ``N`` sub-record).

        Args:
            puts: :class:`~snapstore.stores.batch.BatchPut` items (distinct keys), decided in order.
            deletes: keys unlinked after the puts (missing ones ignored).
            deletes_unless: a key whose existence skips the deletes (the puts still land),
                checked while its stripe is held through the batch, so a create-only ``put`` of
                it (a fork's pin, docs/format.md §10) lands before the check or after the batch.
        Returns:
            Per put, in order: its :class:`ObjectInfo` (for an ``if_exists="same"`` put whose
            identical object existed, that object's), or None for an ``if_exists="skip"`` put
            whose key existed.
        Raises:
            BatchRefused: a put's condition failed (names it); nothing was written. (The one
                exception: a file created at a create-only key by something outside snapstore's
                locks between the check and the link leaves the puts before it in place.)
            InvalidInputError: a malformed batch (:func:`~snapstore.stores.batch.check_batch`).
            StoreError: the write failed (or a link or non-regular file is on a key's path).
        """
        puts, dels = check_batch(puts, deletes)
        if not puts and not dels:
            return []
        self._count("PUT", up=sum(len(p.data) for p in puts), n=len(puts))
        if dels:
            self._count("DELETE", n=(len(dels) + 999) // 1000)
        wal = self._journal()
        temps: list[str] = []
        try:
            guard = [deletes_unless] if dels and deletes_unless is not None else []
            if guard:
                check_key(deletes_unless)
            with wal.mutation([p.key for p in puts] + guard) as w:
                if guard and os.path.lexists(self._path(deletes_unless)):
                    dels = []  # pinned: the deletes are skipped (left to GC)
                plan: list = []  # per put: None (skip), ("same", info), ("new"|"swap", path, d, big)
                for p in puts:
                    path = self._path(p.key)
                    d = os.path.dirname(path)
                    self._check_dir(d)
                    big = wal.durable and len(p.data) > localwal.INLINE_MAX
                    if p.etag is None:
                        try:
                            st = os.lstat(path)
                        except (FileNotFoundError, NotADirectoryError):
                            plan.append(("new", path, d, big))
                            continue
                        if p.if_exists == "skip":
                            plan.append(None)
                            continue
                        if p.if_exists == "same" and stat.S_ISREG(st.st_mode) and st.st_size == len(p.data):
                            try:
                                if self._read_plain(p.key) == p.data:
                                    plan.append(("same", self._info(p.key, st)))
                                    continue
                            except ObjectNotFound:
                                pass
                        raise BatchRefused(p.key, False if p.if_exists == "same" else None)
                    try:
                        st = os.lstat(path)
                    except (FileNotFoundError, NotADirectoryError):
                        raise BatchRefused(p.key) from None
                    if not stat.S_ISREG(st.st_mode):
                        raise StoreError(f"refusing to replace {path}: not a regular file (a link or a directory)")
                    if self._info(p.key, st).etag != p.etag:
                        raise BatchRefused(p.key)
                    plan.append(("swap", path, d, big))
                subs = []
                for p, act in zip(puts, plan):
                    if act is None or act[0] == "same":
                        continue
                    big = act[3]
                    temps.append(self._write_temp(act[2], p.data, sync=big))
                    subs.append((localwal.LEAVE, p.key, b"") if big else (localwal.PUT, p.key, p.data))
                if dels:
                    subs.append((localwal.DELETE, "", "\n".join(dels).encode()))
                w.append_batch(subs)
                out: list[ObjectInfo | None] = []
                it = iter(temps)
                big_dirs = set()
                for p, act in zip(puts, plan):
                    if act is None or act[0] == "same":
                        out.append(None if act is None else act[1])
                        continue
                    tmp, (how, path, d, big) = next(it), act
                    if big:
                        big_dirs.add(d)
                    if how == "swap":
                        os.replace(tmp, path)
                        out.append(self._info(p.key, os.stat(path)))
                        continue
                    try:
                        os.link(tmp, path)
                    except FileExistsError:
                        w.append(localwal.LEAVE, p.key)  # a writer outside the journal took it
                        raise BatchRefused(p.key) from None
                    out.append(self._info(p.key, os.stat(tmp)))
                    os.unlink(tmp)
                for k in dels:
                    path = self._path(k)
                    try:
                        self._check_dir(os.path.dirname(path))  # never delete through a linked directory
                        os.unlink(path)
                    except (FileNotFoundError, NotADirectoryError):
                        pass
                for d in big_dirs:
                    _fsync_dir(d)
                return out
        except OSError as e:
            raise StoreError(f"cannot write a batch in {self.root}: {e.strerror or e}") from e
        finally:
            for t in temps:
                try:
                    os.unlink(t)
                except FileNotFoundError:
                    pass

    def _read_plain(self, key: str) -> bytes:
        """The bytes of the regular file at ``key`` (no request counted: a batch's ``same``
        check), read without following links.

        Raises:
            ObjectNotFound: nothing readable there. OSError: the read failed.
        """
        parts = key.split("/")
        try:
            dfd = self._dir_fd(parts[:-1])
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dfd)
            finally:
                os.close(dfd)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ObjectNotFound(key)
            return _read_to_end(fd, st.st_size, key)
        finally:
            os.close(fd)

    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """Return the object's bytes, or a range of them (``pread`` of just those bytes; see
        :func:`~snapstore.stores.base.check_range`). The file is opened with ``O_NOFOLLOW`` below
        directories opened the same way, so a link on the key's path is refused; what is not a
        regular file (a FIFO, socket or device) is never opened (``lstat`` first, then an
        ``O_NONBLOCK`` open and ``fstat``). A whole read (no range) is refused before a byte is
        read when the file is larger than its kind of object may be
        (:func:`~snapstore.stores.base.whole_read_limit`); a ranged read of any file works.

        Raises:
            ObjectNotFound: no such key (or a directory there).
            ObjectTooLarge: a whole read of a file larger than its kind allows (names the key,
                its size and the limit; an IntegrityError).
            IntegrityError: a symbolic link on the key's path, or a FIFO, socket or device at it.
            InvalidInputError: a malformed range.
            StoreError: the read failed.
        """
        parts = check_key(key).split("/")
        byte_range = check_range(key, byte_range)
        self._ready()
        try:
            dfd = self._dir_fd(parts[:-1])
            try:
                # never open what is not a regular file: a FIFO would block the open (and the
                # read) forever, a device could be endless; O_NONBLOCK covers the race between
                # this lstat and the open, and the fstat below decides
                _check_regular(key, os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False))
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dfd)
            finally:
                os.close(dfd)
            try:
                st = os.fstat(fd)
                _check_regular(key, st)
                if byte_range is None:
                    check_whole_read(key, st.st_size)  # before a byte is read (a sparse file of 2 GiB)
                    data = _read_to_end(fd, st.st_size, key)
                else:
                    start, end = byte_range
                    size = st.st_size
                    if start < 0:
                        start = max(0, size + start)
                    end = size if end is None else min(end, size)
                    data = os.pread(fd, end - start, start) if end > start else b""
            finally:
                os.close(fd)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            self._count("GET")
            raise ObjectNotFound(key) from None
        except IntegrityError:
            self._count("GET")
            raise
        except OSError as e:
            self._count("GET")
            if e.errno == errno.ELOOP:
                raise _link_error(key) from None
            if e.errno == errno.ENXIO:  # a socket (or a FIFO without writer, opened for writing)
                raise _not_regular(key, "a socket") from None
            raise StoreError(f"cannot read {self._path(key)}: {e.strerror or e}") from e
        self._count("GET", down=len(data))
        return data

    def head(self, key: str) -> ObjectInfo:
        """Return ObjectInfo (size, ETag, mtime) of the regular file at ``key`` (one ``lstat``).

        Raises:
            ObjectNotFound: no such key (or a directory there).
            IntegrityError: a link on the key's path, or a FIFO, socket or device at it.
            StoreError: the stat failed.
        """
        path = self._path(key)
        parts = key.split("/")
        self._ready()
        self._count("HEAD")
        try:
            dfd = self._dir_fd(parts[:-1])
            try:
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
            finally:
                os.close(dfd)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _link_error(key) from None
            raise StoreError(f"cannot read {path}: {e.strerror or e}") from e
        try:
            _check_regular(key, st)
        except IsADirectoryError:
            raise ObjectNotFound(key) from None
        return self._info(key, st)

    def _smallest_in_dir(self, prefix: str, limit: int) -> list[ObjectInfo] | None:
        """The first ``limit`` objects in key order below ``prefix`` (which ends in ``/``) when
        they are files directly in its directory: one ``listdir`` and an ``lstat`` of only those
        names, relative to the directory opened without following links. A name sorts before
        every key below a directory with a greater name, so the smallest names answer unless one
        of them is a directory (or has gone meanwhile): then None, and the full walk answers.

        Raises:
            OSError: the directory cannot be read; InvalidInputError: a chosen name is no key.
        """
        fd = self._prefix_dir_fd(prefix)
        if fd is None:
            return []
        try:
            names = os.listdir(fd)
            first = min(names) if limit == 1 and names else "."
            if not first.startswith("."):
                names = [first]  # the smallest name is no dot name (not a key): nothing to filter
            else:
                names = heapq.nsmallest(limit, [n for n in names if not n.startswith(".")])
            out = []
            for n in names:
                try:  # lstat: a link is listed as itself (reading it raises IntegrityError)
                    st = os.stat(n, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return None
                if stat.S_ISDIR(st.st_mode):
                    return None
                out.append(self._info(check_key(prefix + n), st))
            return out
        finally:
            os.close(fd)

    def _prefix_dir_fd(self, prefix: str) -> int | None:
        """A descriptor of the directory a ``/``-ending ``prefix`` names (opened without following
        links; the caller closes it), or None when there is none: missing, not a directory, or
        a linked directory (not followed).

        Raises:
            OSError: the directory exists but cannot be opened.
        """
        try:
            return self._dir_fd(prefix[:-1].split("/"))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                return None
            raise

    def _walk(self, prefix: str) -> list[str]:
        if prefix.endswith("/"):
            fd = self._prefix_dir_fd(prefix)
            if fd is None:
                return []
            try:
                entries = list(os.scandir(fd))
            finally:
                os.close(fd)
            if not any(e.is_dir(follow_symlinks=False) for e in entries):
                return [prefix + e.name for e in entries if not e.name.startswith(".")]
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = os.path.join(self.root, *base.split("/")) if base else self.root
        try:
            self._check_dir(top)
        except StoreError:
            return []  # a linked directory: not followed
        keys = []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [n for n in dirnames if not n.startswith(".")]
            rel = os.path.relpath(dirpath, self.root)
            relkey = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            if not (relkey.startswith(prefix) or prefix.startswith(relkey)):
                dirnames[:] = []
                continue
            for n in filenames:
                if not n.startswith("."):
                    k = relkey + n
                    if k.startswith(prefix) and _is_key(k):  # a file no key names (README.txt) is not an object
                        keys.append(k)
        return keys

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> Iterator[ObjectInfo]:
        """Yield objects under ``prefix`` in key order; one LIST counted per 1,000 keys.

        Raises:
            StoreError: the directory cannot be read (permissions, I/O error).
        """
        self._ready()
        if limit is not None and start_after is None and 0 < limit < 64 and prefix.endswith("/"):
            try:
                few = self._smallest_in_dir(prefix, limit)
            except OSError as e:
                raise StoreError(f"cannot list {prefix!r} in {self.root}: {e.strerror or e}") from e
            if few is not None:
                self._count("LIST")
                yield from few
                return
        try:
            found = [k for k in self._walk(prefix) if start_after is None or k > start_after]
        except OSError as e:
            raise StoreError(f"cannot list {prefix!r} in {self.root}: {e.strerror or e}") from e
        keys = heapq.nsmallest(limit, found) if limit is not None and limit < 64 else sorted(found)
        if limit is not None:
            keys = keys[:limit]
        self._count("LIST", n=max(1, (len(keys) + 999) // 1000))
        for k in keys:
            try:  # lstat: a link is listed as itself (reading it raises IntegrityError)
                info = self._info(k, os.lstat(self._path(k)))
            except FileNotFoundError:
                continue
            except OSError as e:
                raise StoreError(f"cannot list {k} in {self.root}: {e.strerror or e}") from e
            yield info

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Yield the distinct next path segments below ``prefix`` (which ends in ``/``), sorted."""
        self._ready()
        self._count("LIST")
        top = os.path.join(self.root, *[s for s in prefix.split("/") if s])
        try:
            self._check_dir(top)
            names = sorted(e.name for e in os.scandir(top) if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError, StoreError):
            names = []
        except OSError as e:
            raise StoreError(f"cannot list {prefix!r} in {self.root}: {e.strerror or e}") from e
        return iter(names)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Unlink the keys (missing ones ignored), durably: one journal record names them all
        (fdatasynced before the first unlink; a replay removes them again); one DELETE counted
        per 1,000 keys.

        Raises:
            InvalidInputError: a malformed key. StoreError: an unlink failed.
        """
        keys = list(keys)
        paths = [self._path(k) for k in keys]
        if not keys:
            return
        with self._journal().mutation(None) as w:
            w.append(localwal.DELETE, "", "\n".join(keys).encode())
            for p in paths:
                try:
                    self._check_dir(os.path.dirname(p))  # never delete through a linked directory
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                        raise StoreError(f"cannot delete {p}: {e.strerror or e}") from e
        self._count("DELETE", n=(len(keys) + 999) // 1000)

    def close(self) -> None:
        """Settle and leave the journal (the last user removes it); the store may be used again
        (it opens the journal again).

        Raises:
            StoreError: a file could not be synced.
        """
        with self._wal_lock:
            j, self._wal, self._wal_checked = self._wal, None, False
        if j is not None:
            j.close()

    def temp_files(self) -> list[str]:
        """Return paths of leftover ``.tmp-*`` files (a crash mid-write leaves them)."""
        out = []
        if not os.path.isdir(self.root):
            return out
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [n for n in dirnames if n != ".locks"]  # (an older release's lock files)
            out.extend(os.path.join(dirpath, n) for n in filenames if n.startswith(".tmp-"))
        return out

    def leftovers(self) -> list[Leftover]:
        """Return the temporary files (``.tmp-*``) below the root: what a process killed in the
        middle of a write leaves (each write's own temp file is removed when it completes or fails).
        ``name`` is the path relative to the root, ``mtime`` its modification time (the same clock
        as the objects' timestamps)."""
        out = []
        for path in self.temp_files():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # the write finished meanwhile
            out.append(Leftover(os.path.relpath(path, self.root).replace(os.sep, "/"), st.st_size, st.st_mtime))
        return out

    def remove_leftovers(self, items: Iterable[Leftover]) -> int:
        """Delete the given leftovers (from :meth:`leftovers`; names must be ``.tmp-*`` files below
        the root); return how many were removed (already gone ones are skipped).

        Raises:
            InvalidInputError: a name that is not a temporary file of this store.
            StoreError: a file cannot be removed.
        """
        n = 0
        for it in items:
            parts = it.name.split("/")
            if not parts[-1].startswith(".tmp-") or any(p in ("", ".", "..") for p in parts) or ".locks" in parts:
                raise InvalidInputError(f"not a temporary file of this store: {it.name!r}")
            path = os.path.join(self.root, *parts)
            try:
                os.unlink(path)
                n += 1
            except FileNotFoundError:
                pass
            except OSError as e:
                raise StoreError(f"cannot delete {path}: {e.strerror or e}") from e
        self._count("DELETE", n=1 if n else 0)
        return n

    def remove_empty_dirs(self) -> None:
        """Remove empty directories below the root (housekeeping after deletes), and the empty
        compare-and-swap lock files an older release left in ``.locks/`` (this release locks byte
        ranges of the journal instead)."""
        legacy = os.path.join(self.root, ".locks")
        if os.path.isdir(legacy) and not os.path.islink(legacy):
            for n in os.listdir(legacy):
                p = os.path.join(legacy, n)
                try:
                    if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) == 0:
                        os.unlink(p)
                except OSError:
                    pass
        for dirpath, dirnames, filenames in os.walk(self.root, topdown=False):
            if dirpath != self.root and not os.listdir(dirpath):
                try:
                    os.rmdir(dirpath)
                    self._known_dirs.discard(dirpath)
                except OSError:
                    pass
