"""Single-file SQLite object store (``sqlite:///path/file.db``, or a path ending in ``.db``).

Every object is one row of the table ``snapstore_objects`` (key, data BLOB, size, etag, mtime) in
one SQLite file, with Python's standard :mod:`sqlite3`. The file is created on the first write
(reading a missing file finds no objects, as a missing directory does for the local store).

Durability and atomicity:

* The file is in WAL mode. ``synchronous=FULL`` (the default) makes each write durable when it
  returns: the commit fsyncs the write-ahead log once. ``synchronous=NORMAL`` (``?synchronous=normal``)
  fsyncs only at WAL checkpoints: after a power loss (not a process crash) the last commits before
  it may be lost, but the file is never corrupted and what survives is a prefix of the commits.
* Each write (``put``, ``put_if_match``, ``delete_many``) is one transaction begun with
  ``BEGIN IMMEDIATE``: the existence or ETag check and the write see no other writer between them.
* ETags are content-derived (a BLAKE2b digest of the bytes and their length), so they are stable
  across processes and reopenings and change whenever the bytes change.

Concurrency: many threads and processes may use one file. SQLite builds 3.7.0 to 3.51.2 (except
3.44.6 and 3.50.7; this Python links ``sqlite3.sqlite_version``) have the *WAL-reset bug*: when two
connections write or checkpoint the same WAL file at the same moment, a checkpoint can record a
wrong WAL position and corrupt the database. This store never lets that happen (the guard is
:mod:`snapstore.stores.sqlitelock`):

* one writing connection per file per process: a process-wide registry keyed by the file's real
  path (:func:`os.path.realpath`) shares it among every :class:`SqliteStore` of that file, and a
  lock serialises its use;
* between processes, every write transaction (and the automatic checkpoint its commit may run,
  and every vacuum and explicit checkpoint) holds an exclusive ``flock(2)`` on the database file
  itself, so no two connections of any process ever write or checkpoint at once;
* readers use read-only connections (one per thread), which can neither write nor checkpoint,
  and they are closed before the writer when the store closes.

Closing: the last store of a file in a process (or, at exit, :mod:`atexit`) closes its connections;
when they were the file's last, SQLite checkpoints the WAL and removes ``-wal`` and ``-shm``. After
reads only, a writing connection is opened and closed under the flock for that (read-only ones
cannot checkpoint), skipped when another process holds the flock
(:meth:`snapstore.stores.sqlitelock.Shared.close`).

No ``database is locked`` reaches a caller: writers queue on the ``flock`` (polled up to
``lock_timeout`` seconds, default 120) and SQLite's ``busy_timeout`` covers readers; a bounded retry
loop covers what is left, and only after that bound a :class:`~snapstore.errors.StoreError` naming
the file is raised. Every SQLite failure becomes a typed error naming the file.

Reads: each is one statement on this thread's read-only connection; :meth:`SqliteStore.get_batch`
reads several small objects in one (a fresh restore's segment packs: one ``SELECT ... key IN
(...)`` instead of one per pack). Opening an existing file costs one ``stat`` and the schema
check's one statement, which also refuses a file that is not a SQLite database.

Space: the file is created with ``auto_vacuum=INCREMENTAL``; a ``delete_many`` that leaves more than
a quarter of the file (and at least 1 MiB) free runs ``PRAGMA incremental_vacuum``, and
:meth:`SqliteStore.compact` (which GC calls) gives every free page back and truncates the WAL.

Large values: an object of at least ``beside_min`` bytes (default :data:`BESIDE_MIN`, 1 MiB) is a
file beside the database, in the directory ``<file>.values/``, and its row names it: at 1-64 MiB a
put costs 2.5-4x less that way and a read 3-10x less than a BLOB in the file, which SQLite writes
twice (WAL, then checkpoint) and reads along a chain of overflow pages
(``benchmarks/sqlite_store.py --values``). Smaller objects (every pack and manifest of an ordinary
save) are BLOBs in the file: one fsync per write. A value file is written and fsynced (with its
directory) before the row naming it commits, and unlinked only after the row's removal commits; a
crash between the two leaves an unreferenced value file, which :meth:`SqliteStore.leftovers`
reports and GC removes after its grace period. Readers that lose a race with a delete or replace
read the row again. The value files are :mod:`snapstore.stores.sqlitevalues`.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import sqlite3
import stat
import threading
import weakref
import time
from typing import Callable, Iterable, Iterator
from urllib.parse import parse_qsl

from ..errors import InvalidInputError, ObjectNotFound, PreconditionFailed, StoreError
from .base import Leftover, ObjectInfo, RequestStats, StoreCapabilities, check_key, check_range, check_whole_read, whole_read_limit
from .batch import BatchPut, BatchRefused, check_batch
from .sqlitelock import Shared, acquire, is_busy, make_parent, release, take_flock
from .sqlitevalues import ValueFiles

TABLE = "snapstore_objects"
"""The table holding the objects."""
META = "snapstore_meta"
"""The table naming the file's layout (``name = 'format'``: :data:`FORMAT`)."""
FORMAT = "snapstore-sqlite-store 1"

_HEADER = b"SQLite format 3\x00"
_SMALL_FILE = 4096  # bytes: a shorter file's header is checked by reading it (see _check_file)
_SYNC = {"full": "FULL", "normal": "NORMAL", "off": "OFF"}
_HI = "\x7f"  # sorts after every key character ([a-z0-9._-/])
_VACUUM_MIN = 1 << 20  # free bytes before a delete_many gives space back
_RANGED_WHOLE = 256 << 10  # a ranged read of a BLOB up to this size reads it whole and slices it
BESIDE_MIN = 1 << 20
"""Objects this large (bytes) or larger are files beside the database (see the module docstring)."""


def _etag(data: bytes) -> str:
    return f'"{hashlib.blake2b(data, digest_size=16).hexdigest()}-{len(data):x}"'


def _one(cur: sqlite3.Cursor):
    """The first row of ``cur`` or None, reading it to its end (a statement left unfinished would
    keep its read transaction, and its old snapshot, open)."""
    rows = cur.fetchall()
    return rows[0] if rows else None


def _vacuum(conn: sqlite3.Connection) -> int:
    """Give every free page of the file back (``PRAGMA incremental_vacuum``) inside the caller's
    write transaction; return the pages freed. Python's sqlite3 steps a statement without result
    columns once, and each step of this pragma frees one page: so it is run until none is left."""
    freed = 0
    while True:
        free = conn.execute("PRAGMA freelist_count").fetchall()[0][0]
        if not free:
            return freed
        for _ in range(free):
            conn.execute("PRAGMA incremental_vacuum")
        freed += free


def parse_sqlite_url(url: str) -> tuple[str, dict]:
    """Split ``sqlite:///abs/file.db?opt=v`` or ``sqlite://rel.db`` into ``(path, options)``
    (SQLAlchemy's four-slash ``sqlite:////abs/file.db`` is the same absolute path).

    Options: ``synchronous`` (``full`` or ``normal``), ``lock_timeout`` (seconds, a number).
    Raises:
        InvalidInputError: no path, or an unknown or malformed option.
    """
    rest = url[len("sqlite://"):]
    path, _, query = rest.partition("?")
    if path.startswith("//"):
        path = "/" + path.lstrip("/")  # SQLAlchemy's sqlite:////abs/path.db: the same absolute path
    if not path:
        raise InvalidInputError(f"no file in the SQLite URL {url!r} (sqlite:///abs/path.db or sqlite://relative.db)")
    opts: dict = {}
    for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)) if query else ():
        if k == "synchronous":
            opts[k] = v
        elif k == "lock_timeout":
            try:
                opts[k] = float(v)
            except ValueError:
                raise InvalidInputError(f"lock_timeout must be a number of seconds, not {v!r} in {url!r}") from None
        else:
            raise InvalidInputError(f"unknown SQLite store option {k!r} in {url!r} (synchronous, lock_timeout)")
    return path, opts


class SqliteStore:
    """An :class:`~snapstore.stores.base.ObjectStore` in one SQLite file (see the module docstring).

    Args:
        path: the database file (str or path-like); created with its parent directories on the
            first write. An existing file must be a SQLite database that is empty or holds this
            store's tables.
        synchronous: ``"full"`` (default: each write durable when it returns, one fsync of the WAL
            per commit) or ``"normal"`` (a power loss may lose the last commits; never corrupts).
        fsync: False sets ``synchronous=OFF`` (no fsync at all), for tests and CPU benchmarks only.
        lock_timeout: seconds a write waits for the file's write lock before StoreError (default 120).
        beside_min: objects of at least this many bytes are files in ``<path>.values/`` (default
            :data:`BESIDE_MIN`); ``None`` keeps every object in the file.
        clock: callable returning seconds since the epoch (UTC) for object ``mtime``; default
            ``time.time``. Tests pass a controllable clock.
    Raises:
        StoreError: ``path`` is a directory, a file that is not a SQLite database, a SQLite database
            holding other tables and not this store's, or unreadable. The message names the path.
        InvalidInputError: an unknown ``synchronous`` value.
    """

    def __init__(self, path: str | os.PathLike, synchronous: str = "full", fsync: bool = True,
                 lock_timeout: float = 120.0, clock: Callable[[], float] | None = None,
                 beside_min: int | None = BESIDE_MIN):
        sync = _SYNC.get(str(synchronous).lower())
        if sync is None or sync == "OFF":
            raise InvalidInputError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if not fsync:
            sync = "OFF"
        self.path = os.path.abspath(os.fspath(path))
        self.values_dir = self.path + ".values"
        self.beside_min = beside_min
        self._fsync = fsync
        self._values = ValueFiles(self.values_dir, fsync, self._error)
        #: where it is: ``sqlite:///abs/path.db`` (``?synchronous=normal`` when chosen)
        self.url = "sqlite://" + self.path + ("?synchronous=normal" if sync == "NORMAL" else "")
        self.stats = RequestStats()
        self._stats_lock = threading.Lock()
        self._clock = clock or time.time
        self.lock_timeout = float(lock_timeout)
        #: Reads run on per-thread connections and release the GIL, so a few are worth overlapping
        #: (max_concurrency 4); restores read their few packs in the calling thread (inline_reads,
        #: as the local store); crash leftovers are value files beside the database; GC calls
        #: :meth:`compact` to give freed pages back; :meth:`write_batch` writes a save's pack and
        #: manifest in one transaction (one WAL fsync).
        self.capabilities = StoreCapabilities(max_concurrency=4, inline_reads=True, leftovers=True, vacuum=True,
                                              atomic_batch=True)
        #: write transactions committed by this store object (each one WAL commit, one fsync with
        #: ``synchronous=FULL``); read it to count a save's commits
        self.commits = 0
        self._check_file()
        self._sh: Shared | None = acquire(os.path.realpath(self.path))
        self._sync = sync
        self._known = os.path.exists(self.path)
        if self._known:
            self._check_schema()

    # --- checks ---------------------------------------------------------------------------------
    def _check_file(self) -> None:
        """A directory in the way is refused here (one ``stat``). A file of at least one page
        (:data:`_SMALL_FILE` bytes) that is not a SQLite database is refused by the first statement
        on it (:meth:`_check_schema`, which runs for every existing file: SQLite answers
        ``SQLITE_NOTADB``, :meth:`_error` names the path), so its header is not read a second time
        here; a shorter file's header is read here."""
        p = self.path
        try:
            st = os.stat(p)
        except (OSError, ValueError):
            return  # not there (as os.path.exists says): the first write creates it or names why not
        if stat.S_ISDIR(st.st_mode):
            raise StoreError(f"SQLite store path is a directory, not a file: {p}")
        if 0 < st.st_size < _SMALL_FILE:  # SQLite reads a 1-byte file as an empty database
            try:
                with open(p, "rb") as f:
                    head = f.read(len(_HEADER))
            except OSError as e:
                raise StoreError(f"cannot read the SQLite store file {p}: {e.strerror or e}") from None
            if head != _HEADER:
                raise StoreError(f"not a SQLite database: {p}")

    def _check_schema(self) -> None:
        conn = self._reader()
        if conn is None:
            return
        try:
            try:  # the common case, one statement: this store's file, its format recorded
                row = _one(conn.execute(f"SELECT value FROM {META} WHERE name = 'format'"))
                if row is not None and row[0] == FORMAT:
                    return
            except sqlite3.OperationalError as e:
                if "no such table" not in str(e):
                    raise
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not names:
                return
            if TABLE not in names or META not in names:
                raise StoreError(f"SQLite database {self.path} holds no snapstore store "
                                 f"(no table {TABLE}; it has {', '.join(sorted(names))})")
            row = _one(conn.execute(f"SELECT value FROM {META} WHERE name = 'format'"))
        except sqlite3.Error as e:
            raise self._error(e, "read") from None
        if row is None or row[0] != FORMAT:
            raise StoreError(f"SQLite database {self.path}: unknown snapstore store format {row and row[0]!r}")

    def _error(self, e: BaseException, what: str) -> StoreError:
        name = getattr(e, "sqlite_errorname", "")
        if name == "SQLITE_NOTADB":
            return StoreError(f"not a SQLite database: {self.path}")
        if name.startswith("SQLITE_READONLY") or (isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EROFS, errno.EPERM)):
            return StoreError(f"cannot {what} the SQLite store {self.path}: the file or its directory is read-only")
        if name.startswith("SQLITE_CORRUPT"):
            return StoreError(f"the SQLite store {self.path} is damaged: {e}")
        if name == "SQLITE_FULL":
            return StoreError(f"cannot {what} the SQLite store {self.path}: disk full")
        if is_busy(e):
            return StoreError(f"the SQLite store {self.path} stayed locked for {self.lock_timeout:g} s ({what})")
        return StoreError(f"cannot {what} the SQLite store {self.path}: {getattr(e, 'strerror', None) or e}")

    def _shared(self) -> Shared:
        sh = self._sh
        if sh is None:
            raise StoreError(f"the SQLite store {self.path} is closed")
        if sh.pid != os.getpid() or sh.closed:  # forked: this process opens its own connections
            sh = self._sh = acquire(os.path.realpath(self.path))
        return sh

    def _count(self, kind: str, up: int = 0, down: int = 0, n: int = 1) -> None:
        with self._stats_lock:
            self.stats.counts[kind] += n
            self.stats.bytes_up += up
            self.stats.bytes_down += down

    # --- connections ------------------------------------------------------------------------------
    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read-only connection, or None while the file does not exist."""
        sh = self._shared()
        conn = getattr(sh.tls, "conn", None)
        if conn is not None:
            return conn
        if not self._known:
            if not os.path.exists(self.path):
                return None
            self._known = True
        me = threading.current_thread()
        with sh.readers_lock:
            # a reader of a thread that ended goes to this one (threads come and go: LangGraph's
            # executors, parallel GETs), so connections stay as many as live threads at once
            for c in sh.readers:
                owner = sh.owners.get(id(c))
                if owner is not None and (owner() is None or not owner().is_alive()):
                    sh.owners[id(c)] = weakref.ref(me)
                    sh.tls.conn = c
                    return c
        uri = "file:" + _quote(self.path) + "?mode=ro"
        try:
            # (connect's timeout is SQLite's busy_timeout: no PRAGMA needed, one statement less)
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False,
                                   timeout=self.lock_timeout)
        except sqlite3.Error as e:
            raise self._error(e, "open") from None
        with sh.readers_lock:
            if sh.closed:
                conn.close()
                raise StoreError(f"the SQLite store {self.path} is closed")
            sh.readers.append(conn)
            sh.owners[id(conn)] = weakref.ref(me)
        sh.tls.conn = conn
        return conn

    def _writer(self, sh: Shared) -> sqlite3.Connection:
        """The process's writing connection to the file (caller holds ``sh.lock`` and the flock),
        creating the file and its tables on first use."""
        if sh.writer is not None:
            return sh.writer
        make_parent(self.path)
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self.lock_timeout)
        except sqlite3.Error as e:
            raise self._error(e, "open") from None
        try:
            if not conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]:
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # only takes effect before the first table
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchall()[0][0]
            if mode.lower() != "wal":
                raise StoreError(f"cannot put the SQLite store {self.path} in WAL mode (journal mode {mode})")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {META} (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, "
                         f"etag TEXT NOT NULL, mtime REAL NOT NULL, data BLOB NOT NULL, file TEXT)")
            conn.execute(f"INSERT OR IGNORE INTO {META} VALUES ('format', ?)", (FORMAT,))
            conn.execute("COMMIT")
        except BaseException as e:
            conn.close()
            if isinstance(e, sqlite3.Error):
                raise self._error(e, "create") from None
            raise
        self._known = True
        sh.writer = conn
        return conn

    def _write(self, what: str, fn):
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction on the writing connection, under
        the process lock and the cross-process flock; retry busy errors until ``lock_timeout``."""
        sh = self._shared()
        deadline = time.monotonic() + self.lock_timeout
        with sh.lock:
            take_flock(sh, self.path, deadline, self.lock_timeout, self._error)
            try:
                conn = self._writer(sh)
                if sh.synchronous != self._sync:  # stores of one file may differ: set per write
                    conn.execute(f"PRAGMA synchronous = {self._sync}")
                    sh.synchronous = self._sync
                delay = 0.001
                while True:
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                        try:
                            out = fn(conn)
                            conn.execute("COMMIT")
                            self.commits += 1
                            return out
                        except BaseException:
                            if conn.in_transaction:
                                conn.execute("ROLLBACK")
                            raise
                    except sqlite3.Error as e:
                        if is_busy(e) and time.monotonic() < deadline:
                            time.sleep(delay)
                            delay = min(delay * 2, 0.05)
                            continue
                        raise self._error(e, what) from None
            finally:
                if sh.lock_fd is not None:
                    fcntl.flock(sh.lock_fd, fcntl.LOCK_UN)

    def _read(self, what: str, fn, empty):
        """Run ``fn(conn)`` on this thread's reader (``empty`` while the file does not exist);
        busy errors are retried until ``lock_timeout``."""
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        while True:
            conn = self._reader()
            if conn is None:
                return empty
            try:
                return fn(conn)
            except sqlite3.Error as e:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if is_busy(e) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                    continue
                if getattr(e, "sqlite_errorname", "") == "SQLITE_ERROR" and "no such table" in str(e):
                    return empty  # a database created by another process that has no tables yet
                raise self._error(e, what) from None

    # --- the protocol ---------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key`` holding ``data`` (bytes), durably (see ``synchronous``).

        Raises:
            PreconditionFailed: the key exists (nothing changed).
            InvalidInputError: a malformed key.
            StoreError: the write failed (read-only file, disk full, locked past ``lock_timeout``).
        """
        return self.put_if_match(key, data, None)

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Replace ``key`` only if its ETag is ``etag`` (``None``: only if absent); the check and the
        write are one ``BEGIN IMMEDIATE`` transaction.

        Raises:
            PreconditionFailed: the object is missing, exists, or has another ETag (nothing changed).
            StoreError: the write failed.
        """
        check_key(key)
        data = bytes(data)
        tag = _etag(data)
        self._count("PUT", up=len(data))
        fname = None
        if self.beside_min is not None and len(data) >= self.beside_min:
            if etag is None and self._exists(key):
                raise PreconditionFailed(key)  # no file written for a put that cannot succeed
            fname = self._values.write(data)
        old: list = []

        def tx(conn):
            mtime = self._clock()
            body = b"" if fname else data
            if etag is None:
                cur = conn.execute(f"INSERT INTO {TABLE} (key, size, etag, mtime, data, file) VALUES (?, ?, ?, ?, ?, ?) "
                                   f"ON CONFLICT (key) DO NOTHING", (key, len(data), tag, mtime, body, fname))
            else:
                row = _one(conn.execute(f"SELECT file FROM {TABLE} WHERE key = ? AND etag = ?", (key, etag)))
                if row is None:
                    raise PreconditionFailed(key)
                old.append(row[0])
                cur = conn.execute(f"UPDATE {TABLE} SET size = ?, etag = ?, mtime = ?, data = ?, file = ? WHERE key = ?",
                                   (len(data), tag, mtime, body, fname, key))
            if cur.rowcount != 1:
                raise PreconditionFailed(key)
            return ObjectInfo(key, len(data), tag, mtime)
        try:
            info = self._write("write", tx)
        except BaseException:
            if fname:
                self._values.unlink([fname])
            raise
        self._values.unlink([f for f in old if f])
        return info

    def write_batch(self, puts: Iterable[BatchPut], deletes: Iterable[str] = (),
                    deletes_unless: str | None = None) -> list[ObjectInfo | None]:
        """Apply conditional puts and deletes in ONE ``BEGIN IMMEDIATE`` transaction: one commit,
        one WAL fsync (``synchronous=FULL``); all of them or none (:mod:`snapstore.stores.batch`).

        Args:
            puts: :class:`~snapstore.stores.batch.BatchPut` items (distinct keys), decided in order.
            deletes: keys deleted after the puts (missing ones ignored).
            deletes_unless: a key whose existence, checked inside the transaction, skips the
                deletes (the batch's puts still land): a fork's pin (docs/format.md §10).
        Returns:
            Per put, in order: its :class:`ObjectInfo` (for an ``if_exists="same"`` put whose
            identical object existed, that object's), or None for an ``if_exists="skip"`` put
            whose key existed.
        Raises:
            BatchRefused: a put's condition failed (names it); nothing was written.
            InvalidInputError: a malformed batch (:func:`~snapstore.stores.batch.check_batch`).
            StoreError: the write failed; nothing was written.
        """
        puts, dels = check_batch(puts, deletes)
        self._count("PUT", up=sum(len(p.data) for p in puts), n=len(puts))
        if dels:
            self._count("DELETE", n=(len(dels) + 999) // 1000)
        files = [self._values.write(p.data) if self.beside_min is not None and len(p.data) >= self.beside_min
                 else None for p in puts]
        old: list = []
        used: set = set()  # indexes of the puts that wrote their row

        def tx(conn):
            mtime = self._clock()
            out: list = []
            old.clear()
            used.clear()
            for p, fname in zip(puts, files):
                tag, body = _etag(p.data), b"" if fname else p.data
                row = _one(conn.execute(f"SELECT etag, size, mtime, file FROM {TABLE} WHERE key = ?", (p.key,)))
                if p.etag is not None:
                    if row is None or row[0] != p.etag:
                        raise BatchRefused(p.key)
                    old.append(row[3])
                    conn.execute(f"UPDATE {TABLE} SET size = ?, etag = ?, mtime = ?, data = ?, file = ? WHERE key = ?",
                                 (len(p.data), tag, mtime, body, fname, p.key))
                    used.add(len(out))
                elif row is not None:
                    if p.if_exists == "skip":
                        out.append(None)
                        continue
                    if p.if_exists == "same" and row[0] == tag:  # content-derived ETags: the same bytes
                        out.append(ObjectInfo(p.key, row[1], row[0], row[2]))
                        continue
                    raise BatchRefused(p.key, False if p.if_exists == "same" else None)
                else:
                    conn.execute(f"INSERT INTO {TABLE} (key, size, etag, mtime, data, file) VALUES (?, ?, ?, ?, ?, ?)",
                                 (p.key, len(p.data), tag, mtime, body, fname))
                    used.add(len(out))
                out.append(ObjectInfo(p.key, len(p.data), tag, mtime))
            if dels and deletes_unless is not None and _one(conn.execute(
                    f"SELECT 1 FROM {TABLE} WHERE key = ?", (deletes_unless,))) is not None:
                return out  # the key exists: the deletes are skipped (left to GC)
            old.extend(_delete_rows(conn, dels))
            return out
        try:
            out = self._write("write", tx)
        except BaseException:
            old.clear()
            self._values.unlink([f for f in files if f])
            raise
        # value files of puts that found their key taken ("same", "skip") no row names
        self._values.unlink([f for i, f in enumerate(files) if f and i not in used])
        self._values.unlink([f for f in old if f])
        return out

    # --- values beside the file (stores/sqlitevalues.py) ---------------------------------------
    def _exists(self, key: str) -> bool:
        return self._read("read", lambda c: _one(c.execute(f"SELECT 1 FROM {TABLE} WHERE key = ?", (key,))), None) is not None

    def _used_files(self) -> set[str]:
        return {r[0] for r in self._read("list", lambda c: c.execute(
            f"SELECT file FROM {TABLE} WHERE file IS NOT NULL").fetchall(), [])}

    def leftovers(self) -> list[Leftover]:
        """Value files no row names (a crash between writing a value file and committing its row,
        or between a row's removal and the unlink) and temporary value files: ``name`` is
        ``<file>.values/NAME`` relative to the database's directory, ``mtime`` the file's."""
        return self._values.unreferenced(self._used_files)

    def remove_leftovers(self, items: Iterable[Leftover]) -> int:
        """Delete the given leftovers (from :meth:`leftovers`) that still no row names; return how
        many were removed.

        Raises:
            InvalidInputError: a name that is not a value file of this store.
            StoreError: a file cannot be removed.
        """
        names = self._values.names_of(items)
        if not names:
            return 0
        # under the write lock: a row naming one of them cannot commit meanwhile
        def tx(conn):
            used = {r[0] for r in conn.execute(f"SELECT file FROM {TABLE} WHERE file IS NOT NULL").fetchall()}
            gone = 0
            for n in names:
                if n not in used and self._values.exists(n):
                    self._values.unlink([n])
                    gone += 1
            return gone
        n = self._write("clean", tx)
        self._count("DELETE", n=1 if n else 0)
        return n

    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """Return the object's bytes, or bytes ``[start, end)`` of it (see
        :func:`~snapstore.stores.base.check_range`; a ranged read reads only those bytes).

        Raises:
            ObjectNotFound: no such key.
            ObjectTooLarge: a whole read of an object larger than its kind allows.
            InvalidInputError: a malformed key or range.
            StoreError: the read failed.
        """
        check_key(key)
        byte_range = check_range(key, byte_range)

        def whole(conn):
            limit = whole_read_limit(key)[0]
            row = _one(conn.execute(f"SELECT size, CASE WHEN size <= ? THEN data END, file FROM {TABLE} WHERE key = ?",
                               (limit, key)))
            if row is None:
                return None
            check_whole_read(key, row[0])
            return row[1] if row[2] is None else ("file", row[2])

        def ranged(conn):
            start, end = byte_range
            # a small BLOB (every pack of an ordinary save) comes whole in the lookup's own
            # statement and is sliced here: one statement instead of BEGIN, lookup, blob, COMMIT
            row = _one(conn.execute(f"SELECT size, file, CASE WHEN size <= {_RANGED_WHOLE} THEN data END "
                                    f"FROM {TABLE} WHERE key = ?", (key,)))
            if row is None:
                return None
            if row[1] is not None:
                return ("file", row[1])
            if row[2] is not None:
                size = row[0]
                s0 = max(0, size + start) if start < 0 else start
                return row[2][s0:size if end is None else end]
            conn.execute("BEGIN")  # one snapshot for the lookup and the BLOB read
            try:
                row = _one(conn.execute(f"SELECT rowid, size, file FROM {TABLE} WHERE key = ?", (key,)))
                if row is None:
                    return None
                rowid, size, fname = row
                if fname is not None:
                    return ("file", fname)
                start, end = byte_range
                if start < 0:
                    start = max(0, size + start)
                end = size if end is None else min(end, size)
                if end <= start:
                    return b""
                with conn.blobopen(TABLE, "data", rowid, readonly=True) as blob:
                    blob.seek(start)
                    return blob.read(end - start)
            finally:
                conn.execute("COMMIT")

        for _ in range(100):
            data = self._read("read", whole if byte_range is None else ranged, None)
            if not isinstance(data, tuple):
                break
            data = self._values.read(data[1], byte_range)
            if data is not None:
                break
        else:
            raise StoreError(f"cannot read {key} in the SQLite store {self.path}: its value file kept changing")
        if data is None:
            self._count("GET")
            raise ObjectNotFound(key)
        self._count("GET", down=len(data))
        return data

    def get_batch(self, keys: Iterable[str], max_size: int) -> dict[str, bytes]:
        """Whole objects of ``keys`` read together, in one ``SELECT ... WHERE key IN (...)`` per
        500 keys (a restore's few packs: one statement instead of one per pack). Only objects
        that exist, are BLOBs in the file (not value files beside it) and are shorter than
        ``max_size`` bytes are returned; the caller reads any other key with :meth:`get`, which
        raises its errors. Each object returned counts as one GET in :attr:`stats`.

        Args:
            keys: the keys (duplicates read once).
            max_size: objects of this many bytes or more are left out (bytes).
        Returns:
            ``{key: bytes}`` for the keys found within ``max_size``.
        Raises:
            InvalidInputError: a malformed key.
            StoreError: the read failed.
        """
        unique = list(dict.fromkeys(keys))
        for k in unique:
            check_key(k)
        limit = int(max_size)

        def rows(conn):
            out = {}
            for i in range(0, len(unique), 500):
                part = unique[i:i + 500]
                marks = ",".join("?" * len(part))
                for k, data in conn.execute(f"SELECT key, data FROM {TABLE} WHERE key IN ({marks}) "
                                            f"AND file IS NULL AND size < ?", (*part, limit)).fetchall():
                    out[k] = data
            return out

        got = self._read("read", rows, {}) if unique else {}
        if got:
            self._count("GET", down=sum(len(v) for v in got.values()), n=len(got))
        return got

    def head(self, key: str) -> ObjectInfo:
        """Return the object's :class:`ObjectInfo`. Raises ObjectNotFound, StoreError."""
        check_key(key)
        self._count("HEAD")
        row = self._read("read", lambda c: _one(c.execute(f"SELECT size, etag, mtime FROM {TABLE} WHERE key = ?",
                                                     (key,))), None)
        if row is None:
            raise ObjectNotFound(key)
        return ObjectInfo(key, row[0], row[1], row[2])

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> Iterator[ObjectInfo]:
        """Yield objects whose key starts with ``prefix`` in key order, after ``start_after``, at
        most ``limit``; one LIST counted per 1,000 keys. Raises StoreError."""
        sql = f"SELECT key, size, etag, mtime FROM {TABLE} WHERE key >= ?"
        args: list = [prefix]
        if prefix:
            sql += " AND key < ?"
            args.append(prefix + _HI)
        if start_after is not None:
            sql += " AND key > ?"
            args.append(start_after)
        sql += " ORDER BY key"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(max(0, int(limit)))
        rows = self._read("list", lambda c: c.execute(sql, args).fetchall(), [])
        self._count("LIST", n=max(1, (len(rows) + 999) // 1000))
        return iter([ObjectInfo(*r) for r in rows])

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Yield the distinct next path segments below ``prefix`` (ending in ``/``), sorted: a skip
        scan of the key index (one seek per segment and per key directly below ``prefix``)."""
        self._count("LIST")
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # as the local and S3 stores: "runs" lists what is below "runs/"
        n = len(prefix)
        hi = prefix + _HI

        def scan(conn):
            out = []
            conn.execute("BEGIN")
            try:
                cur_sql = f"SELECT key FROM {TABLE} WHERE key > ? AND key < ? ORDER BY key LIMIT 1"
                row = _one(conn.execute(f"SELECT key FROM {TABLE} WHERE key >= ? AND key < ? ORDER BY key LIMIT 1",
                                   (prefix, hi)))
                while row is not None:
                    rest = row[0][n:]
                    seg, slash, _ = rest.partition("/")
                    if slash:
                        out.append(seg)
                        bound = prefix + seg + "0"  # '0' follows '/': past every key below seg/
                        row = _one(conn.execute(f"SELECT key FROM {TABLE} WHERE key >= ? AND key < ? ORDER BY key LIMIT 1",
                                           (bound, hi)))
                    else:
                        row = _one(conn.execute(cur_sql, (row[0], hi)))
            finally:
                conn.execute("COMMIT")
            return out
        return iter(sorted(set(self._read("list", scan, []))))

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the keys (missing ones ignored), in one transaction; one DELETE counted per 1,000
        keys. When the deletes leave more than a quarter of the file (and at least 1 MiB) free,
        the free pages are given back (``PRAGMA incremental_vacuum``). Raises StoreError."""
        keys = [check_key(k) for k in keys]
        self._count("DELETE", n=(len(keys) + 999) // 1000)
        if not keys or not os.path.exists(self.path):
            return

        files: list = []

        def tx(conn):
            files.extend(_delete_rows(conn, keys))
            free, total, page = (conn.execute(f"PRAGMA {p}").fetchall()[0][0]
                                 for p in ("freelist_count", "page_count", "page_size"))
            if free * page >= _VACUUM_MIN and free * 4 >= total:
                _vacuum(conn)
        self._write("delete from", tx)
        self._values.unlink(files)

    def compact(self) -> dict:
        """Give every free page back to the file system (``PRAGMA incremental_vacuum``) and
        checkpoint and truncate the WAL. GC calls it after collecting.

        Returns:
            ``{"freed_bytes": int, "file_bytes": int}``: bytes the main file shrank by, and its size after.
        Raises:
            StoreError: the file cannot be written.
        """
        if not os.path.exists(self.path):
            return {"freed_bytes": 0, "file_bytes": 0}
        before = os.path.getsize(self.path)
        self._write("compact", _vacuum)
        sh = self._shared()
        with sh.lock:
            take_flock(sh, self.path, time.monotonic() + self.lock_timeout, self.lock_timeout, self._error)
            try:
                self._writer(sh).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as e:
                raise self._error(e, "compact") from None
            finally:
                fcntl.flock(sh.lock_fd, fcntl.LOCK_UN)
        after = os.path.getsize(self.path)
        return {"freed_bytes": max(0, before - after), "file_bytes": after}

    def close(self) -> None:
        """Release this store's share of the file's connections (the last store of the file in
        this process closes them). Idempotent."""
        sh, self._sh = self._sh, None
        if sh is not None and sh.pid == os.getpid():
            release(sh)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _delete_rows(conn: sqlite3.Connection, keys: list[str]) -> list[str]:
    """Delete the rows of ``keys`` (500 to a statement, under SQLite's variable limit) inside the
    caller's transaction; return the names of the value files beside the database they named (the
    caller removes them after the commit)."""
    files: list[str] = []
    for i in range(0, len(keys), 500):
        part = keys[i:i + 500]
        marks = ",".join("?" * len(part))
        files.extend(r[0] for r in conn.execute(
            f"SELECT file FROM {TABLE} WHERE file IS NOT NULL AND key IN ({marks})", part).fetchall())
        conn.execute(f"DELETE FROM {TABLE} WHERE key IN ({marks})", part)
    return files


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")
