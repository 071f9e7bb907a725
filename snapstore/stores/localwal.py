"""The directory store's write-ahead journal (``<root>/.wal``): durable writes in one fdatasync.

A :class:`~snapstore.stores.local.LocalStore` with ``fsync=True`` makes each write durable by
appending a checksummed record to one journal file shared by every process of the repository and
fdatasyncing that file once, *before* the object's file becomes visible; the object file itself
and its directory entry are then written without fsync. A *settler* (a background thread of each
process, and every ``close``) later fsyncs the files and directories the journal's records
name and advances the journal's *settled mark*; a fully settled journal is truncated to its
header, and the last process to close the store removes it. Opening a repository whose journal
no process holds (its users lock is free: every user died, or the machine lost power) *replays*
the unsettled records first: every object they name is made to hold what its last record says
(written again when missing or torn, removed when deleted), fsynced, and the journal settled,
before anything is read. docs/format.md §26 specifies the bytes.

Why this keeps today's durability: an object's file is created only after its record is on disk
(the fdatasync returned), so after a power cut every object a reader could ever have seen, and
every object an acknowledged write made, is either intact on disk or restored from its record;
records are replayed in journal order, one journal for all processes, so a delete (journaled
too) is never undone by a replay of an older write. A settler advances the mark only past
records whose writers finished (every write holds the *barrier* lock shared from before its
record until its file is in place; a settler takes it exclusively once before it reads the
journal's end).

Locks (:mod:`snapstore.stores.walocks`): the users lock is flock(2) on the journal file; the
append lock, the barrier (shared by each write from its record to its file, exclusive to a
settler) and the 65,536 key stripes (a key's stripe is held exclusively by a create-only ``put``
or a compare-and-swap ``put_if_match`` from its existence or ETag check until its file is in
place) are Linux open-file-description byte ranges on the journal (byte 0, byte 2, bytes
``2**30 + n``), or, where fcntl has no ``F_OFD_SETLKW`` (macOS, BSDs, Linux < 3.15), flock(2) on
lock files in ``<root>/.wal-locks/`` (which stay). Each write opens its own descriptors, so
threads, processes and several stores of one process exclude each other alike. The header's byte
36 says which way the journal's users lock; a joiner without OFD locks refuses an OFD journal.

A batch (:meth:`Journal.mutation` with a list of keys, :meth:`_Write.append_batch`) is one ``B``
record whose body holds its sub-records: one fdatasync, replayed whole or not at all.

Objects larger than :data:`INLINE_MAX` are not copied into the journal: their file is fsynced,
and a ``N`` record (the key's state is whatever is on disk) is journaled, so that a replay of an
older record of that key does not overwrite it, then their directory is fsynced.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import stat
import struct
import threading
import weakref
import zlib
from contextlib import contextmanager
from typing import Iterator

from ..errors import InvalidInputError, StoreError
from . import walocks
from .base import check_key

NAME = ".wal"
"""The journal's file name below the repository root (a dot name: never a key)."""

INLINE_MAX = 1 << 20
"""Objects of at most this many bytes are copied into their journal record (one fdatasync per
write); larger ones are fsynced in place (file and directory) with a ``N`` record."""

_MAGIC = b"SSWAL\x01\x00\x00"
_HDR = struct.Struct("<8sQQQ")  # magic, generation, settled offset, end offset
HEADER_SIZE = 64
_REC = struct.Struct("<IIQIBH")  # magic, crc32 of the rest, generation, body length, kind, key length
_REC_MAGIC = 0x5357_4C52
PUT, DELETE, LEAVE = ord("P"), ord("D"), ord("N")

APPEND, BARRIER = walocks.APPEND, walocks.BARRIER
STRIPES_AT, STRIPES = walocks.STRIPES_AT, 1 << 16
BATCH = ord("B")
_SUB = struct.Struct("<BHI")  # a batch record's sub-record: kind, key length, body length

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
SHARED, EXCLUSIVE, UNLOCK = walocks.SHARED, walocks.EXCLUSIVE, walocks.UNLOCK
_WAY_AT = _HDR.size + 4  # the header byte naming how the journal's users lock (walocks: "O" or "F")


def stripe(key: str) -> int:
    """The byte offset of ``key``'s stripe lock (one of 65,536, by SHA-256 of the key)."""
    return STRIPES_AT + int.from_bytes(hashlib.sha256(key.encode()).digest()[:2], "big")


def _header(gen: int, settled: int, end: int, way: int = walocks.OFD) -> bytes:
    body = _HDR.pack(_MAGIC, gen, settled, end)
    return (body + struct.pack("<IB", zlib.crc32(body), way)).ljust(HEADER_SIZE, b"\0")


def _read_way(fd: int) -> int:
    """How the journal on ``fd`` is locked (:data:`walocks.OFD` or :data:`walocks.FLOCK`; a
    header of an earlier release, byte 0, is OFD)."""
    raw = os.pread(fd, 1, _WAY_AT)
    return walocks.FLOCK if raw == bytes([walocks.FLOCK]) else walocks.OFD


def _read_header(fd: int) -> tuple[int, int, int] | None:
    """(generation, settled, end) of the journal on ``fd``, or None for a short or damaged header."""
    raw = os.pread(fd, HEADER_SIZE, 0)
    if len(raw) < HEADER_SIZE:
        return None
    body = raw[:_HDR.size]
    magic, gen, settled, end = _HDR.unpack(body)
    if magic != _MAGIC or struct.unpack_from("<I", raw, _HDR.size)[0] != zlib.crc32(body):
        return None
    if not HEADER_SIZE <= settled <= end:
        return None
    return gen, settled, end


def encode_record(gen: int, kind: int, key: str, body: bytes) -> bytes:
    """One journal record: a 24-byte head (magic, CRC-32 of everything after it, generation, body
    length, kind ``P``/``D``/``N``, key length), the key (UTF-8) and the body."""
    k = key.encode()
    rest = _REC.pack(0, 0, gen, len(body), kind, len(k))[8:] + k + body
    return struct.pack("<II", _REC_MAGIC, zlib.crc32(rest)) + rest


def iter_records(fd: int, gen: int, start: int, end: int | None) -> Iterator[tuple[int, int, str, bytes]]:
    """Yield ``(offset after the record, kind, key, body)`` of the valid records of generation
    ``gen`` from ``start``, stopping at ``end`` (None: the file's end) or at the first record that
    is short, damaged or of another generation (a torn tail)."""
    off = start
    limit = os.fstat(fd).st_size if end is None else end
    while off + _REC.size <= limit:
        head = os.pread(fd, _REC.size, off)
        if len(head) < _REC.size:
            return
        magic, crc, g, blen, kind, klen = _REC.unpack(head)
        nxt = off + _REC.size + klen + blen
        if magic != _REC_MAGIC or g != gen or nxt > limit or kind not in (PUT, DELETE, LEAVE, BATCH):
            return
        tail = os.pread(fd, klen + blen, off + _REC.size)
        if len(tail) != klen + blen or zlib.crc32(head[8:] + tail) != crc:
            return
        try:
            key = tail[:klen].decode()
        except UnicodeDecodeError:
            return
        yield nxt, kind, key, bytes(tail[klen:])
        off = nxt


_OPEN: "weakref.WeakSet[Journal]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # a store nobody closed still settles (and removes its journal) at exit
    for j in list(_OPEN):
        try:
            j.close()
        except Exception:  # noqa: BLE001 - at interpreter exit: the next opener replays instead
            pass


class Journal:
    """The journal of one :class:`~snapstore.stores.local.LocalStore` (one per store instance and
    process; every instance on a root shares the file ``<root>/.wal``).

    Args:
        store: the LocalStore (its link-refusing directory helpers are used to reach objects).
        settle_delay: seconds the background settler waits after a write before settling (writes
            meanwhile are settled together); None: no background settler (only ``settle()`` and
            ``close()`` settle; tests of power cuts use it).
        durable: False (a store with ``fsync=False``): the journal only holds the locks; nothing
            is appended, synced or settled.
    """

    def __init__(self, store, settle_delay: float | None, durable: bool = True):
        self.durable = durable
        self.store = store
        self.path = os.path.join(store.root, NAME)
        self.pid = os.getpid()
        self.fd: int | None = None
        self.way = walocks.preferred()  # how this journal's users lock (the header says; see open)
        self._delay = settle_delay
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._settle_lock = threading.Lock()
        self._thread_lock = threading.Lock()
        # group commit: threads of this process whose records are appended share one fdatasync
        self._sync_cond = threading.Condition()
        self._appended = 0  # records appended by this process (a count)
        self._synced = 0  # of which this many are covered by a finished fdatasync
        self._syncing = False

    # -- opening and closing -----------------------------------------------------------------
    def open(self, create: bool) -> bool:
        """Open the journal and join its users, replaying it first when no other process uses it.

        Args:
            create: create the journal when missing (a write); False (a read): a missing journal
                is left missing and False returned.
        Returns:
            True when the journal is open (this store holds the users lock shared).
        Raises:
            StoreError: a link or non-regular file is at ``.wal``, or the file system refused.
        """
        flags = os.O_RDWR | os.O_NOFOLLOW | _CLOEXEC | (os.O_CREAT if create else 0)
        while True:
            try:
                fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:
                return False
            except OSError as e:
                if not create and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                    return False  # a repository this process may only read: read it as it is
                if e.errno == errno.ELOOP:
                    raise StoreError(f"refusing the journal {self.path}: a symbolic link is there") from None
                raise StoreError(f"cannot open the journal {self.path}: {e.strerror or e}") from e
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise StoreError(f"refusing the journal {self.path}: not a regular file")
                alone = walocks.users(fd, EXCLUSIVE, wait=False)
                if not alone:
                    walocks.users(fd, SHARED)
                if not self._same_file(st):  # the last user removed the file between our open and our lock
                    os.close(fd)
                    continue
                self.fd = fd
                # a store dropped without close() still releases its locks once collected
                self._finalizer = weakref.finalize(self, os.close, fd)
                self._finalizer.atexit = False  # at exit _close_all() settles and removes it first
                if alone:
                    self.way = walocks.preferred()
                    self.replay()
                    # flock(2) converts by releasing first: another opener may replay (a settled
                    # journal: nothing) or, as the last user, remove the file meanwhile
                    walocks.users(fd, SHARED)
                    if not self._same_file(st):
                        self._finalizer.detach()
                        self.fd = None
                        os.close(fd)
                        continue
                self._init_header(fd)
                self.way = _read_way(fd)
                if self.way == walocks.OFD and not walocks.ofd_available():
                    raise StoreError(f"the journal {self.path} is locked with open-file-description locks by a "
                                     "process of this repository, which this platform does not have: close it "
                                     "first (the next opener locks with lock files)")
            except BaseException:
                if self.fd is not None:
                    self._finalizer.detach()
                os.close(fd)
                self.fd = None
                raise
            _OPEN.add(self)
            return True

    def _same_file(self, st: os.stat_result) -> bool:
        try:
            return os.stat(self.path, follow_symlinks=False).st_ino == st.st_ino
        except FileNotFoundError:
            return False

    def _init_header(self, fd: int) -> None:
        """Write a first header (this process's lock way) when the file has none (a replayer
        always leaves one; a file cut short by hand has none)."""
        if _read_header(fd) is not None or os.fstat(fd).st_size >= HEADER_SIZE:
            return
        h = self._holder(os.dup(fd), walocks.preferred())
        try:
            h.lock(EXCLUSIVE, APPEND)
            if _read_header(fd) is None and os.fstat(fd).st_size < HEADER_SIZE:
                os.pwrite(fd, _header(1, HEADER_SIZE, HEADER_SIZE, h.way), 0)
        finally:
            h.close()

    def _holder(self, fd: int | None = None, way: int | None = None) -> walocks.Holder:
        """A lock holder on its own open file description of the journal (``fd``: one opened
        already, which the holder then owns)."""
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | _CLOEXEC)
            except OSError as e:
                raise StoreError(f"cannot open the journal {self.path}: {e.strerror or e}") from e
        return walocks.Holder(self.store.root, fd, self.way if way is None else way)

    def close(self) -> None:
        """Stop the settler, settle, and leave the journal; the last user removes the (settled)
        file. Idempotent; a no-op in a forked child (its parent owns the descriptor)."""
        if self.fd is None or os.getpid() != self.pid:
            return
        self._stop = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None
        try:
            self.settle()
            if walocks.users(self.fd, EXCLUSIVE, wait=False):
                hdr = _read_header(self.fd)
                if hdr is not None and hdr[1] == hdr[2]:
                    os.unlink(self.path)  # while held exclusively: an opener re-checks the inode
        finally:
            self._finalizer.detach()
            os.close(self.fd)
            self.fd = None
            _OPEN.discard(self)

    # -- writing ----------------------------------------------------------------------------
    @contextmanager
    def mutation(self, key: "str | list[str] | None"):
        """Hold what a write needs from its check until its file is in place: the stripe of
        ``key`` (a list: of each key, in stripe order, each lock once; None: no stripe, a
        delete), then the barrier shared. Yields a :class:`_Write` whose ``append(kind, key,
        body)`` journals a record (fdatasynced) on its own descriptor.

        Raises:
            StoreError: the journal cannot be opened or written.
        """
        h = self._holder()
        try:
            try:
                taken: list[int] = []
                for s in sorted({stripe(k) for k in ([key] if isinstance(key, str) else key or ())}):
                    if not (taken and h.same_lock(taken[-1], s)):
                        h.lock(EXCLUSIVE, s)
                        taken.append(s)
                h.lock(SHARED, BARRIER)
            except OSError as e:
                raise StoreError(f"cannot lock the journal {self.path}: {e.strerror or e}") from e
            yield _Write(self, h)
        finally:
            h.close()  # releases every lock this write took
        if self._delay is not None and self.durable:
            self._wake.set()  # before the check below: an idle settler ending now sees it, or we start one
            self._start_settler()

    def _start_settler(self) -> None:
        with self._thread_lock:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._settler, name="snapstore-settler", daemon=True)
                self._thread.start()

    def _settler(self) -> None:
        while not self._stop:
            if not self._wake.wait(2.0):
                with self._thread_lock:  # idle: the thread ends (the next write starts another)
                    if not self._wake.is_set():
                        self._thread = None
                        return
                continue
            if self._stop:
                return
            self._wake.clear()
            if self._delay:
                threading.Event().wait(self._delay)
            try:
                self.settle()
            except Exception:  # noqa: BLE001 - retried at the next write and at close
                pass

    def sync_upto(self, fd: int, mine: int) -> None:
        """Return once an fdatasync that began after this process's ``mine``-th record was appended
        has finished: one thread syncs, threads whose records it covers wait for it (group commit:
        the parallel writes of one save, such as compacted-log stubs, share fdatasyncs)."""
        cond = self._sync_cond
        with cond:
            while self._synced < mine:
                if not self._syncing:
                    self._syncing = True
                    target = self._appended
                    break
                cond.wait()
            else:
                return
        try:
            os.fdatasync(fd)
        except BaseException:
            with cond:
                self._syncing = False
                cond.notify_all()
            raise
        with cond:
            self._synced = max(self._synced, target)
            self._syncing = False
            cond.notify_all()

    # -- settling and replay ----------------------------------------------------------------
    def settle(self) -> int:
        """Make every finished write's file and directory entries durable (fsync) and advance the
        settled mark past them (truncating a fully settled journal to its header). Settles the
        records of every process. Returns the number of records settled.

        Raises:
            StoreError: the journal could not be read or a file could not be synced.
        """
        if self.fd is None or not self.durable:
            return 0
        with self._settle_lock:
            h = self._holder()
            fd = h.fd
            try:
                h.lock(EXCLUSIVE, BARRIER)  # every write that journaled before now has finished
                h.lock(EXCLUSIVE, APPEND)
                hdr = _read_header(fd)
                h.lock(UNLOCK, APPEND)
                h.lock(UNLOCK, BARRIER)
                if hdr is None or hdr[1] == hdr[2]:
                    return 0
                gen, settled, end = hdr
                recs = list(iter_records(fd, gen, settled, end))
                self._sync_objects(flat((kind, key, body) for _, kind, key, body in recs))
                upto = recs[-1][0] if recs else end
                self._advance(h, gen, upto)
                return len(recs)
            finally:
                h.close()

    def _advance(self, h: walocks.Holder, gen: int, upto: int) -> None:
        fd = h.fd
        h.lock(EXCLUSIVE, APPEND)
        try:
            hdr = _read_header(fd)
            if hdr is None or hdr[0] != gen or hdr[1] >= upto:
                return
            if upto >= hdr[2]:  # all settled: start again at the header (a new generation)
                os.pwrite(fd, _header(gen + 1, HEADER_SIZE, HEADER_SIZE, self.way), 0)
                os.ftruncate(fd, HEADER_SIZE)
            else:
                os.pwrite(fd, _header(gen, upto, hdr[2], self.way), 0)
        finally:
            h.lock(UNLOCK, APPEND)

    def _keys_of(self, kind: int, key: str, body: bytes) -> list[str]:
        """The valid keys a record names (a crafted journal's other names are ignored)."""
        try:
            names = body.decode().split("\n") if kind == DELETE and body else ([key] if key else [])
        except UnicodeDecodeError:
            return []
        out = []
        for k in names:
            try:
                out.append(check_key(k))
            except InvalidInputError:
                pass
        return out

    def _sync_objects(self, recs: list[tuple[int, str, bytes]]) -> None:
        """fsync each named object's file (when present) and every directory from its own up to
        the root (new directories were made without fsync)."""
        dirs: set[tuple[str, ...]] = set()
        files: set[str] = set()
        for kind, key, body in recs:
            for k in self._keys_of(kind, key, body):
                parts = k.split("/")
                for i in range(len(parts)):
                    dirs.add(tuple(parts[:i]))
                if kind == PUT:
                    files.add(k)
        for k in sorted(files):
            parts = k.split("/")
            try:
                dfd = self.store._dir_fd(parts[:-1])
            except OSError:
                continue  # gone (deleted, or its directory pruned): a later record says so
            try:
                f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dfd)
            except OSError:
                continue
            finally:
                os.close(dfd)
            try:
                if stat.S_ISREG(os.fstat(f).st_mode):
                    os.fsync(f)
            finally:
                os.close(f)
        for parts in sorted(dirs, key=len, reverse=True):
            try:
                dfd = self.store._dir_fd(list(parts))
            except OSError:
                continue
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def replay(self) -> int:
        """Bring every object the unsettled records name to the state its last record gives
        (``P``: these bytes, written again when missing or different, as after a power cut;
        ``D``: absent; ``N``: as on disk), sync them and settle the journal. Called with the
        users lock held exclusively (no other process uses the repository). Returns the number
        of records replayed.

        Raises:
            StoreError: an object could not be restored.
        """
        fd = self.fd
        hdr = _read_header(fd)
        if hdr is None:
            if os.fstat(fd).st_size <= HEADER_SIZE:
                os.pwrite(fd, _header(1, HEADER_SIZE, HEADER_SIZE, self.way), 0)
                return 0
            # a damaged header: replay every valid record of the first record's generation
            head = os.pread(fd, _REC.size, HEADER_SIZE)
            gen = _REC.unpack(head)[2] if len(head) == _REC.size else 0
            start, end = HEADER_SIZE, None
        else:
            gen, start, end = hdr
        recs = flat((kind, key, body) for _, kind, key, body in iter_records(fd, gen, start, end))
        final: dict[str, tuple[int, bytes]] = {}
        for kind, key, body in recs:
            for k in self._keys_of(kind, key, body):
                final[k] = (kind, body)
        for k, (kind, body) in final.items():
            self._restore(k, kind, body)
        self._sync_objects(recs)
        os.pwrite(fd, _header(gen + 1, HEADER_SIZE, HEADER_SIZE, self.way), 0)
        os.ftruncate(fd, HEADER_SIZE)
        os.fdatasync(fd)
        return len(recs)

    def _restore(self, key: str, kind: int, body: bytes) -> None:
        st = self.store
        path = st._path(key)
        if kind == LEAVE:
            return
        try:
            if kind == DELETE:
                try:
                    st._check_dir(os.path.dirname(path))
                    os.unlink(path)
                except (FileNotFoundError, NotADirectoryError):
                    pass
                return
            parts = key.split("/")
            try:  # read without following links, as every read of the store
                dfd = st._dir_fd(parts[:-1])
                try:
                    f = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=dfd)
                finally:
                    os.close(dfd)
                try:
                    same = stat.S_ISREG(os.fstat(f).st_mode) and os.pread(f, len(body) + 1, 0) == body
                finally:
                    os.close(f)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                same = False
            if not same:
                d = os.path.dirname(path)
                tmp = st._write_temp(d, body, sync=True)
                os.replace(tmp, path)
        except OSError as e:
            raise StoreError(f"cannot restore {path} from the journal: {e.strerror or e}") from e


class _Write:
    """One write's journal descriptor and locks (see :meth:`Journal.mutation`)."""

    def __init__(self, journal: Journal, holder: walocks.Holder):
        self.journal = journal
        self.holder = holder
        self.fd = holder.fd

    def append(self, kind: int, key: str, body: bytes = b"") -> None:
        """Append one record (``kind`` ``PUT``/``DELETE``/``LEAVE``) and fdatasync the journal:
        durable when this returns.

        Raises:
            StoreError: the journal is damaged or cannot be written.
        """
        self._append(kind, key, body)

    def append_batch(self, subs: list[tuple[int, str, bytes]]) -> None:
        """Append ONE ``B`` record holding ``subs`` (``(kind, key, body)``, each ``PUT``,
        ``DELETE`` or ``LEAVE``, in the order a replay applies them) and fdatasync the journal
        once: all of them durable when this returns, or (a torn record) none of them.

        Raises:
            StoreError: the journal is damaged or cannot be written.
        """
        if len(subs) == 1:
            self._append(*subs[0])
        elif subs:
            self._append(BATCH, "", encode_batch(subs))

    def _append(self, kind: int, key: str, body: bytes) -> None:
        fd, h = self.fd, self.holder
        if not self.journal.durable:
            return
        try:
            h.lock(EXCLUSIVE, APPEND)
            try:
                hdr = _read_header(fd)
                if hdr is None:
                    raise StoreError(f"the journal {self.journal.path} has a damaged header; close every process "
                                     "using the repository and open it again (the opener replays it)")
                gen, settled, end = hdr
                rec = encode_record(gen, kind, key, body)
                view, off = memoryview(rec), end
                while view:
                    n = os.pwrite(fd, view, off)
                    view, off = view[n:], off + n
                os.pwrite(fd, _header(gen, settled, off, self.journal.way), 0)
                with self.journal._sync_cond:
                    self.journal._appended += 1
                    mine = self.journal._appended
            finally:
                h.lock(UNLOCK, APPEND)
            self.journal.sync_upto(fd, mine)
        except OSError as e:
            raise StoreError(f"cannot write the journal {self.journal.path}: {e.strerror or e}") from e


def encode_batch(subs: list[tuple[int, str, bytes]]) -> bytes:
    """The body of a ``B`` record: per sub-record u8 kind, u16 key length, u32 body length, the
    key (UTF-8), the body."""
    out = []
    for kind, key, body in subs:
        k = key.encode()
        out += [_SUB.pack(kind, len(k), len(body)), k, body]
    return b"".join(out)


def flat(recs) -> list[tuple[int, str, bytes]]:
    """``(kind, key, body)`` records with each ``B`` record replaced by its sub-records in order
    (a malformed batch body ends where it stops parsing: its CRC held, so only a crafted journal
    has one)."""
    out = []
    for kind, key, body in recs:
        if kind != BATCH:
            out.append((kind, key, body))
            continue
        off, n = 0, len(body)
        while off + _SUB.size <= n:
            sk, klen, blen = _SUB.unpack_from(body, off)
            nxt = off + _SUB.size + klen + blen
            if nxt > n or sk not in (PUT, DELETE, LEAVE):
                break
            try:
                skey = body[off + _SUB.size:off + _SUB.size + klen].decode()
            except UnicodeDecodeError:
                break
            out.append((sk, skey, body[off + _SUB.size + klen:nxt]))
            off = nxt
    return out


def unsettled(root: str | os.PathLike) -> list[tuple[str, str]]:
    """The unsettled records of the journal below ``root`` as ``(kind, key)`` pairs in journal
    order (``kind`` ``"P"``, ``"D"`` or ``"N"``; a delete yields one pair per key, a batch its
    sub-records): the writes a power cut could lose from the file system (tests simulate that
    with it). ``[]`` without a journal."""
    try:
        fd = os.open(os.path.join(os.fspath(root), NAME), os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        hdr = _read_header(fd)
        if hdr is None:
            return []
        out = []
        for kind, key, body in flat((k, key, b) for _, k, key, b in iter_records(fd, hdr[0], hdr[1], hdr[2])):
            keys = body.decode().split("\n") if kind == DELETE and body else [key]
            out.extend((chr(kind), k) for k in keys)
        return out
    finally:
        os.close(fd)
