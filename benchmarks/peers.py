"""The systems of ``python -m benchmarks``: snapstore and what users would pick instead.

Every system gets the same checkpoint lists (:mod:`benchmarks.workloads`), one save per checkpoint,
and is measured the same way:

* ``stored_bytes``: the sum of the sizes of the files / objects the system keeps (what S3 bills);
* ``disk_bytes``: for local stores, the file system blocks of those files (``st_blocks * 512``, as
  ``du`` counts them; directories not counted), None on S3;
* ``objects``: files / objects kept; ``requests``: what the saves sent, by kind (S3 requests for S3
  systems; files written, commits or snapshots for the local ones);
* ``durability``: what is made durable before a save returns (stated per system; made equal where
  the peer allows: fsync of JSON files, SQLite ``synchronous=FULL``).

Restores run in a fresh process (:mod:`benchmarks.child`) from the spec :meth:`System.restore_spec`
returns. A system that cannot run here (a package or binary missing) says why in
:meth:`System.unavailable`, and the harness records it as skipped with that note.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def dir_usage(root: Path, skip: tuple = ()) -> dict:
    """``{stored_bytes, disk_bytes, objects}`` of the regular files under ``root`` (names in
    ``skip`` left out): the sum of their sizes, of their blocks (``st_blocks * 512``) and their count."""
    size = blocks = n = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        for f in files:
            if f in skip:
                continue
            st = os.lstat(os.path.join(dirpath, f))
            size += st.st_size
            blocks += st.st_blocks * 512
            n += 1
    return {"stored_bytes": size, "disk_bytes": blocks, "objects": n}


def bucket_usage(client, bucket: str, prefix: str = "") -> dict:
    """``{stored_bytes, disk_bytes: None, objects}`` of every object under ``prefix`` in ``bucket``."""
    size = n = 0
    token = None
    while True:
        kw = {"Bucket": bucket, "Prefix": prefix}
        if token:
            kw["ContinuationToken"] = token
        r = client.list_objects_v2(**kw)
        for o in r.get("Contents", []):
            size += o["Size"]
            n += 1
        if not r.get("IsTruncated"):
            return {"stored_bytes": size, "disk_bytes": None, "objects": n}
        token = r["NextContinuationToken"]


def doc(messages: list, state) -> dict:
    """The document the whole-history systems store per checkpoint: the messages, and the session
    state when the workload has one."""
    return {"messages": messages} if state is None else {"messages": messages, "session_state": state}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class System:
    """One system under test. Subclasses set the class attributes and implement the methods.

    Attributes:
        name: the system's name in the results. durability: what a save makes durable.
        quadratic: its stored bytes grow with the square of the run length (whole history per
            checkpoint), so capped workloads run it on the cap and extrapolate.
        s3: it stores to S3 (moto); restores are also measured through the latency proxy.
        slow: a save spawns a process (restic, borg): ``--quick`` runs it on small workloads only.
        archived: it archives every run after the saves (``--quick`` runs it on a few workloads only).
        notes: extra facts for the report (versions, settings).
    """

    name = "?"
    durability = "?"
    quadratic = False
    s3 = False
    slow = False
    archived = False

    def __init__(self, env):
        self.env = env
        self.notes: list = []

    def unavailable(self) -> str | None:
        """None when the system can run here, else why not (one line)."""
        return None

    def setup(self, wdir: Path, workload) -> None:
        """Create an empty store in ``wdir`` (a fresh directory) for ``workload``."""
        raise NotImplementedError

    def begin_run(self, index: int, run, step_deltas: list) -> None:
        """Called before run ``index``'s first save (``step_deltas``: :func:`benchmarks.workloads.deltas`)."""

    def save(self, index: int, i: int, messages: list, state, delta) -> float | None:
        """Save checkpoint ``i`` of run ``index``. Returns the seconds spent in the store when the
        harness should not time the whole call (LangGraph: the checkpointer's own calls), else None."""
        raise NotImplementedError

    def sample(self) -> int:
        """Stored bytes now (for the growth plot)."""
        return self.usage()["stored_bytes"]

    def finish(self) -> None:
        """Flush and close the writer (after the last save)."""

    def usage(self) -> dict:
        """``{stored_bytes, disk_bytes, objects}`` now."""
        raise NotImplementedError

    def requests(self) -> dict:
        """Requests made by the saves, by kind."""
        return {}

    def restore_spec(self, index: int, run) -> dict:
        """What :mod:`benchmarks.child` needs to restore run ``index``'s latest checkpoint."""
        raise NotImplementedError

    def proxied_spec(self, spec: dict, endpoint: str) -> dict:
        """``spec`` with the S3 endpoint replaced by ``endpoint`` (S3 systems)."""
        return dict(spec, endpoint=endpoint)


# ------------------------------------------------------------------------------------------------
# snapstore

class _SnapstoreSaves(System):
    """The save path both snapstore systems share: one run per workload run, one
    ``CheckpointManager.save`` per checkpoint (``self.mgr`` and ``self.run_ids`` set by setup)."""

    def begin_run(self, index, run, step_deltas):
        self.run_ids.append(run.run_id)

    def save(self, index, i, messages, state, delta):
        if state is None:
            self.mgr.save(self.run_ids[index], messages)
        else:
            self.mgr.save(self.run_ids[index], messages, session_state=state)
        return None


class SnapstoreLocal(_SnapstoreSaves):
    name = "snapstore-local"
    durability = ("every write journaled and the journal fdatasynced before save returns; object files and "
                  "directories fsynced by the settler (LocalStore fsync=True, the default; docs/format.md §26)")

    def setup(self, wdir, workload):
        from snapstore import CheckpointManager
        from snapstore.stores.local import LocalStore

        self.root = wdir / "repo"
        self.store = LocalStore(self.root, fsync=True)
        self.mgr = CheckpointManager(self.store)
        self.run_ids: list = []

    def finish(self):
        self.mgr.close()
        # the manager leaves a store it was given open; closing it settles the journal (.wal) into
        # the object files and removes it, so usage counts what the repository keeps (§26)
        self.store.close()

    def usage(self):
        return dir_usage(self.root)

    def requests(self):
        return {k: v for k, v in self.store.stats.counts.items() if v}

    def restore_spec(self, index, run):
        return {"system": "snapstore", "location": str(self.root), "run": run.run_id}


class SnapstoreSqlite(SnapstoreLocal):
    """snapstore-local's saves, usage and request counts, on one SQLite file (in a directory of
    its own, so that ``usage`` counts the file and anything beside it)."""

    name = "snapstore-sqlite"
    durability = ("the SQLite file's WAL fsynced at every commit before save returns "
                  "(SqliteStore synchronous=FULL, the default)")

    def setup(self, wdir, workload):
        from snapstore import CheckpointManager
        from snapstore.stores.sqlite import SqliteStore

        self.root = wdir / "sqlite"
        self.root.mkdir()
        self.path = self.root / "repo.db"
        self.store = SqliteStore(self.path)
        self.mgr = CheckpointManager(self.store)
        self.run_ids: list = []

    # finish: snapstore-local's; closing the store (its last connection) makes SQLite checkpoint the
    # WAL into the file and remove it

    def restore_spec(self, index, run):
        return {"system": "snapstore", "location": f"sqlite://{self.path}", "run": run.run_id}


class SnapstoreArchived(SnapstoreLocal):
    """snapstore-local's saves, then every run archived (``CheckpointManager.archive``, GLACIER_IR
    recorded: a local directory has no classes) and GC'd twice with no grace period before usage
    is taken: what an archived repository keeps (bundles plus the hot catalogue); the restore reads
    the latest checkpoint from the bundle (docs/format.md §28; ``benchmarks/archive.py`` has the
    details). Its save figures are snapstore-local's path measured again."""

    name = "snapstore-archived"
    archived = True

    def finish(self):
        self.mgr.archive()
        self.mgr.gc(grace_period=0)
        self.mgr.gc(grace_period=0)
        super().finish()


class SnapstoreS3(_SnapstoreSaves):
    name = "snapstore-s3"
    durability = "S3 PUT acknowledged (moto's HTTP server on 127.0.0.1: in memory)"
    s3 = True

    def unavailable(self):
        return self.env.s3_unavailable

    def setup(self, wdir, workload):
        from snapstore import CheckpointManager

        self.bucket = self.env.new_bucket("snap")
        self.url = f"s3://{self.bucket}/snap"
        self.mgr = CheckpointManager(self.url, endpoint_url=self.env.moto_endpoint)
        self.run_ids: list = []

    def finish(self):
        self._counts = {k: v for k, v in self.mgr.store.stats.counts.items() if v}
        self.mgr.close()

    def usage(self):
        return bucket_usage(self.env.client(), self.bucket)

    def requests(self):
        return self._counts

    def restore_spec(self, index, run):
        return {"system": "snapstore", "location": self.url, "endpoint": self.env.moto_endpoint, "run": run.run_id}


# ------------------------------------------------------------------------------------------------
# whole history per checkpoint

class JsonFiles(System):
    name = "json-files"
    durability = "each file fsynced, then its directory (os.fsync)"
    quadratic = True

    def setup(self, wdir, workload):
        self.root = wdir / "json"
        self.root.mkdir()
        self.files = 0

    def begin_run(self, index, run, step_deltas):
        (self.root / f"run-{index:05d}").mkdir()
        _fsync_dir(self.root)

    def save(self, index, i, messages, state, delta):
        d = self.root / f"run-{index:05d}"
        data = json.dumps(doc(messages, state), ensure_ascii=False).encode("utf-8")
        fd = os.open(d / f"{i:06d}.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(d)
        self.files += 1
        return None

    def usage(self):
        return dir_usage(self.root)

    def requests(self):
        return {"files written": self.files}

    def restore_spec(self, index, run):
        d = self.root / f"run-{index:05d}"
        return {"system": "json-files", "dir": str(d)}


class SqliteRows(System):
    name = "sqlite-rows"
    durability = "SQLite WAL, synchronous=FULL: the WAL fsynced at every commit (one commit per save)"
    quadratic = True

    def setup(self, wdir, workload):
        self.root = wdir / "sqlite"
        self.root.mkdir()
        self.path = self.root / "checkpoints.db"
        self.conn = sqlite3.connect(self.path)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE checkpoints (run INTEGER, idx INTEGER, doc TEXT, PRIMARY KEY (run, idx))")
        self.conn.commit()
        self.commits = 0

    def save(self, index, i, messages, state, delta):
        self.conn.execute("INSERT INTO checkpoints VALUES (?, ?, ?)",
                          (index, i, json.dumps(doc(messages, state), ensure_ascii=False)))
        self.conn.commit()
        self.commits += 1
        return None

    def finish(self):
        self.conn.close()  # checkpoints the WAL into the database file

    def usage(self):
        return dir_usage(self.root)

    def requests(self):
        return {"commits": self.commits}

    def restore_spec(self, index, run):
        return {"system": "sqlite-rows", "path": str(self.path), "run": index}


# ------------------------------------------------------------------------------------------------
# LangGraph

class _LangGraphBase(System):
    """Drives :func:`benchmarks.lgraph.build_graph`; times the checkpointer's own calls.

    The save time returned is the time in ``put`` and ``put_writes`` (the write, as snapstore's
    ``save`` is one); ``turn_store_times`` adds what the graph reads back through the checkpointer at
    the start of each invoke (``get_tuple``, DeltaChannel's ``get_delta_channel_history``), and
    ``invoke_times`` is the whole ``invoke``."""

    delta = False

    def unavailable(self):
        try:
            import langgraph  # noqa: F401

            from benchmarks import lgraph  # noqa: F401
        except ImportError as e:
            return f"LangGraph not importable ({e}); pip install '.[bench]'"
        return None

    def make_checkpointer(self, wdir):
        raise NotImplementedError

    def setup(self, wdir, workload):
        from benchmarks import lgraph

        self.feed = lgraph.Feed()
        self.saver = self.make_checkpointer(wdir)
        self.app = lgraph.build_graph(self.delta, self.saver, self.feed)
        self._in_store = 0.0
        self._in_reads = 0.0
        self.invoke_times: list = []
        self.turn_store_times: list = []
        for meth in ("put", "put_writes"):
            self._wrap(meth, "_in_store")
        for meth in ("get_tuple", "get_delta_channel_history"):  # what the graph reads back at each invoke
            if hasattr(self.saver, meth):
                self._wrap(meth, "_in_reads")

    def _wrap(self, meth: str, slot: str) -> None:
        orig = getattr(self.saver, meth)

        def timed(*a, _orig=orig, **kw):  # nested checkpointer calls are counted once, by the outer one
            self._depth = getattr(self, "_depth", 0) + 1
            t = time.perf_counter()
            try:
                return _orig(*a, **kw)
            finally:
                self._depth -= 1
                if not self._depth:
                    setattr(self, slot, getattr(self, slot) + time.perf_counter() - t)
        setattr(self.saver, meth, timed)

    def begin_run(self, index, run, step_deltas):
        from benchmarks import lgraph

        self.feed.updates[f"t{index}"] = lgraph.turn_updates(run, step_deltas)

    def save(self, index, i, messages, state, delta):
        self._in_store = self._in_reads = 0.0
        t = time.perf_counter()
        self.app.invoke({"turn": i}, {"configurable": {"thread_id": f"t{index}"}}, durability="exit")
        self.invoke_times.append(time.perf_counter() - t)
        self.turn_store_times.append(self._in_store + self._in_reads)
        return self._in_store

    def finish(self):
        self.feed.updates.clear()


class LangGraphSqlite(_LangGraphBase):
    name = "langgraph-sqlitesaver"
    durability = "SqliteSaver's WAL with synchronous=FULL set on its connection: the WAL fsynced at every commit"
    quadratic = True

    def unavailable(self):
        why = super().unavailable()
        if why:
            return why
        try:
            import langgraph.checkpoint.sqlite  # noqa: F401
        except ImportError as e:
            return f"langgraph-checkpoint-sqlite not importable ({e}); pip install '.[bench]'"
        return None

    def make_checkpointer(self, wdir):
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.root = wdir / "lg"
        self.root.mkdir()
        self.path = self.root / "checkpoints.db"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        saver = SqliteSaver(self.conn)
        saver.setup()
        self.conn.execute("PRAGMA synchronous=FULL")
        mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        if (mode, sync) != ("wal", 2):
            raise RuntimeError(f"SqliteSaver connection is journal_mode={mode}, synchronous={sync}")
        self.invokes = 0
        return saver

    def save(self, index, i, messages, state, delta):
        self.invokes += 1
        return super().save(index, i, messages, state, delta)

    def finish(self):
        super().finish()
        self.conn.close()

    def usage(self):
        return dir_usage(self.root)

    def requests(self):
        return {"graph invokes (one checkpoint each)": self.invokes}

    def restore_spec(self, index, run):
        return {"system": "langgraph-sqlite", "path": str(self.path), "delta": self.delta, "thread": f"t{index}"}


class LangGraphDelta(LangGraphSqlite):
    name = "langgraph-deltachannel"
    durability = LangGraphSqlite.durability
    delta = True
    quadratic = False  # a full snapshot every 100 updates of the channel: ~n^2/100


class LangGraphObjectStorage(_LangGraphBase):
    name = "langgraph-objectstorage"
    durability = "S3 PUT acknowledged (moto); compression='none' (the saver's default)"
    quadratic = True
    s3 = True

    def unavailable(self):
        why = super().unavailable() or self.env.s3_unavailable
        if why:
            return why
        try:
            import langgraph_checkpoint_objectstorage  # noqa: F401
        except ImportError as e:
            return f"langgraph-checkpoint-objectstorage not importable ({e}); pip install '.[bench]'"
        return None

    def make_checkpointer(self, wdir):
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        from benchmarks.lgraph import BotoFS

        self.bucket = self.env.new_bucket("lgos")
        self.fs = BotoFS(self.env.client())
        return ObjectStorageSaver(self.fs, f"{self.bucket}/lg")

    def usage(self):
        return bucket_usage(self.env.client(), self.bucket)

    def requests(self):
        return {k: v for k, v in self.fs.counts.items() if v}

    def restore_spec(self, index, run):
        return {"system": "langgraph-objectstorage", "bucket": self.bucket, "endpoint": self.env.moto_endpoint,
                "thread": f"t{index}"}


# ---- SLOT: snapstore-saver -------------------------------------------------------------------------
# SnapstoreSaver (snapstore.integrations.langgraph, issue 10) is written on another branch. Until it is
# merged these two systems are skipped with a note; once it is importable they run the same graph
# (add_messages channel) with SnapstoreSaver(url_or_manager) as the checkpointer, locally and on S3.

def _snapstore_saver_class():
    try:
        from snapstore.integrations.langgraph import SnapstoreSaver
    except ImportError as e:
        return None, f"snapstore.integrations.langgraph.SnapstoreSaver not importable yet ({e})"
    return SnapstoreSaver, None


class SnapstoreSaverLocal(_LangGraphBase):
    name = "snapstore-saver"
    durability = SnapstoreLocal.durability

    def unavailable(self):
        return super().unavailable() or _snapstore_saver_class()[1]

    def make_checkpointer(self, wdir):
        cls, _ = _snapstore_saver_class()
        self.root = wdir / "repo"
        self.location = str(self.root)
        return cls(self.location)

    def usage(self):
        return dir_usage(self.root)

    def restore_spec(self, index, run):
        return {"system": "snapstore-saver", "location": self.location, "thread": f"t{index}"}


class SnapstoreSaverS3(SnapstoreSaverLocal):
    name = "snapstore-saver-s3"
    durability = SnapstoreS3.durability
    s3 = True

    def unavailable(self):
        return super().unavailable() or self.env.s3_unavailable

    def make_checkpointer(self, wdir):
        from snapstore import CheckpointManager

        cls, _ = _snapstore_saver_class()
        self.bucket = self.env.new_bucket("saver")
        self.location = f"s3://{self.bucket}/saver"
        return cls(CheckpointManager(self.location, endpoint_url=self.env.moto_endpoint))

    def usage(self):
        return bucket_usage(self.env.client(), self.bucket)

    def restore_spec(self, index, run):
        return {"system": "snapstore-saver", "location": self.location, "endpoint": self.env.moto_endpoint,
                "thread": f"t{index}"}


class SnapstoreSaverSqlite(SnapstoreSaverLocal):
    name = "snapstore-saver-sqlite"
    durability = SnapstoreSqlite.durability

    def make_checkpointer(self, wdir):
        cls, _ = _snapstore_saver_class()
        self.root = wdir / "saver-sqlite"
        self.root.mkdir()
        self.location = f"sqlite://{self.root / 'repo.db'}"
        return cls(self.location)

    def finish(self):
        super().finish()
        self.saver.close()  # it opened the repository: its store's last connection checkpoints the WAL


# ---- end of the snapstore-saver slot ---------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# backup tools: each checkpoint one snapshot of a file holding the whole checkpoint

def _tool_version(cmd: list) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


class _BackupTool(System):
    quadratic = False
    slow = True
    binary = "?"

    def unavailable(self):
        if shutil.which(self.binary) is None:
            return (f"{self.binary} not installed (apt-get install -y {'borgbackup' if self.binary == 'borg' else 'restic'};"
                    " the full mode installs it)")
        return None

    def _write_source(self, index, messages, state) -> Path:
        d = self.src / f"r{index:05d}"
        d.mkdir(exist_ok=True)
        p = d / "checkpoint.json"
        p.write_bytes(json.dumps(doc(messages, state), ensure_ascii=False).encode("utf-8"))
        return d

    def _run(self, args: list, cwd=None) -> subprocess.CompletedProcess:
        r = subprocess.run(args, cwd=cwd, env=self.tool_env, capture_output=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, args[:3]))} failed ({r.returncode}): {r.stderr[-800:]!r}")
        return r

    def usage(self):
        return dir_usage(self.repo)

    def requests(self):
        return {"snapshots": self.snapshots}


class Restic(_BackupTool):
    name = "restic"
    binary = "restic"
    durability = "restic's local backend fsyncs every file it writes (checked with strace: 13 fsyncs per backup)"

    def setup(self, wdir, workload):
        self.repo, self.src = wdir / "restic-repo", wdir / "src"
        self.src.mkdir()
        self.tool_env = dict(os.environ, RESTIC_PASSWORD="bench", RESTIC_CACHE_DIR=str(wdir / "restic-cache"))
        self._run(["restic", "-r", str(self.repo), "init", "-q"])
        self.snapshots = 0
        self.notes.append(_tool_version(["restic", "version"]) or "restic")

    def save(self, index, i, messages, state, delta):
        d = self._write_source(index, messages, state)
        self._run(["restic", "-r", str(self.repo), "backup", "-q", "--host", "bench", "--tag", f"r{index}",
                   "checkpoint.json"], cwd=d)
        self.snapshots += 1
        return None

    def restore_spec(self, index, run):
        return {"system": "restic", "repo": str(self.repo), "tag": f"r{index}",
                "file": "checkpoint.json", "env": {
            "RESTIC_PASSWORD": "bench", "RESTIC_CACHE_DIR": self.tool_env["RESTIC_CACHE_DIR"]}}


class Borg(_BackupTool):
    name = "borg"
    binary = "borg"
    durability = "borg fsyncs its segments and index at each archive's commit (checked with strace: 25 fsyncs per create)"

    def setup(self, wdir, workload):
        self.repo, self.src = wdir / "borg-repo", wdir / "src"
        self.src.mkdir()
        self.tool_env = dict(os.environ, BORG_BASE_DIR=str(wdir / "borg-base"),
                             BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK="yes", BORG_RELOCATED_REPO_ACCESS_IS_OK="yes")
        self._run(["borg", "init", "--encryption=none", str(self.repo)])
        self.snapshots = 0
        self.last: dict = {}
        self.notes.append(_tool_version(["borg", "--version"]) or "borg")

    def save(self, index, i, messages, state, delta):
        d = self._write_source(index, messages, state)
        name = f"r{index}-{i}"
        self._run(["borg", "create", f"{self.repo}::{name}", "checkpoint.json"], cwd=d)
        self.last[index] = name
        self.snapshots += 1
        return None

    def restore_spec(self, index, run):
        return {"system": "borg", "repo": str(self.repo), "archive": self.last[index],
                "env": {k: self.tool_env[k] for k in ("BORG_BASE_DIR", "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK",
                                                       "BORG_RELOCATED_REPO_ACCESS_IS_OK")}}


SYSTEMS = [SnapstoreLocal, SnapstoreSqlite, SnapstoreArchived, SnapstoreS3, SnapstoreSaverLocal, SnapstoreSaverSqlite, SnapstoreSaverS3,
           JsonFiles, SqliteRows, LangGraphSqlite, LangGraphDelta, LangGraphObjectStorage, Restic, Borg]
"""Every system, in report order."""


# ------------------------------------------------------------------------------------------------
# S3: moto's HTTP server and the latency proxy

class S3Env:
    """moto's ``ThreadedMotoServer`` on 127.0.0.1 and, in front of it, ``benchmarks/latency.py``'s
    :class:`LatencyProxy` holding back every response ``delay_s`` seconds (started lazily)."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.server = self.proxy = None
        self.moto_endpoint = None
        self.s3_unavailable = None
        self._client = None
        from benchmarks.latency import DUMMY_ENV, UNSET_ENV

        os.environ.update(DUMMY_ENV)
        for k in UNSET_ENV:
            os.environ.pop(k, None)

    def start(self) -> None:
        """Start moto and the proxy; on failure, ``s3_unavailable`` says why."""
        try:
            from benchmarks.latency import LatencyProxy, start_moto

            self.server, port = start_moto()
            self.moto_endpoint = f"http://127.0.0.1:{port}"
            self.proxy = LatencyProxy(port, self.delay_s).start()
        except Exception as e:  # noqa: BLE001  (no moto: the S3 systems are skipped with this note)
            self.s3_unavailable = f"moto's server could not start ({e!r}); pip install '.[test]'"

    def client(self):
        """One boto3 S3 client on moto (no proxy)."""
        if self._client is None:
            import boto3

            self._client = boto3.client("s3", endpoint_url=self.moto_endpoint, region_name="us-east-1")
        return self._client

    def new_bucket(self, tag: str) -> str:
        name = f"bench-{tag}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def drop_bucket(self, name: str) -> None:
        """Delete every object of ``name`` and the bucket (frees moto's memory)."""
        c = self.client()
        while True:
            r = c.list_objects_v2(Bucket=name)
            objs = [{"Key": o["Key"]} for o in r.get("Contents", [])]
            if not objs:
                break
            c.delete_objects(Bucket=name, Delete={"Objects": objs})
        c.delete_bucket(Bucket=name)

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        if self.server is not None:
            self.server.stop()
