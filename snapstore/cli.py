"""The ``snapstore`` command line: inspect and manage a checkpoint repository.

Usage: ``snapstore [--repo PATH_OR_URL] COMMAND ...`` (``--repo`` defaults to ``$SNAPSTORE_URL``,
else ``./.snapstore``). Commands::

    init      create a repository (explicit settings)
    import    replay a trajectory file as one checkpoint per turn (resumable; any shape holding
              message lists or event streams; -n: show what was found, write nothing)
    runs      list run ids
    list      list a run's checkpoints
    show      one checkpoint's summary (not its messages)
    export    a checkpoint's message list as JSON (stdout or -o FILE)
    rollback  make an earlier checkpoint the run's head again
    fork      start a new run at a checkpoint
    delete    delete a checkpoint or a whole run
    prune     apply a retention policy (--keep-last, --keep-daily, --older-than, ...)
    gc        reclaim the space of deleted checkpoints; repack small packs
    stats     repository size, dedup ratio, object counts, requests and cost estimate
    verify    check the repository's integrity

Machine-readable output (``--json``, ``export``) goes to stdout and nothing else does; progress,
summaries and errors go to stderr. Errors are one line, ``snapstore: error: <message>``.

Exit status: 0 success; 2 bad usage or bad input (unknown option, invalid value, unreadable or
malformed input file); 1 any other failure (unknown run or checkpoint, conflict, store error,
corrupt object); 130 interrupted. ``verify`` exits 1 if it found corrupt objects, 2 if it found
missing objects / dangling references, 3 for other errors (the smallest applicable code wins);
warnings never fail it.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from . import __version__
from .manager.facade import CheckpointManager
from .errors import InvalidInputError, RepositoryError, RunNotFound, SnapstoreError
from .format.codec import any_int_digits
from .importers import FORMATS, default_run_id, load_trajectory, rebuild_record

__all__ = ["cli", "main", "parse_duration"]

DEFAULT_REPO = ".snapstore"


# ------------------------------------------------------------------------------------------------
# errors and output helpers

class CommandError(click.ClickException):
    """A failure reported as one line ``snapstore: error: <message>`` with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        _write(f"snapstore: error: {self.format_message()}\n", err=True)


class _Interrupted(click.ClickException):
    """Ctrl-C: exit 130 without a traceback or message."""

    exit_code = 130

    def __init__(self):
        super().__init__("interrupted")

    def show(self, file=None) -> None:
        pass


def _enc(text: str) -> bytes:
    """UTF-8 bytes of ``text``; never fails on lone surrogates (argv bytes round-trip)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace")


def _write(text_or_bytes, err: bool = False) -> None:
    """Write to stdout/stderr as bytes (flushing the text layer first to keep the order); clears
    the activity line (:class:`_Activity`) first."""
    with _OUTPUT_LOCK:
        activity = _ACTIVITY[0]
        if activity is not None:
            activity.clear_locked()
            activity.last_output = time.monotonic()
        _raw_write(text_or_bytes, err)


_OUTPUT_LOCK = threading.RLock()
_ACTIVITY: list = [None]  # the running command's _Activity, if any


def _stderr_tty() -> bool:
    """True if stderr is an interactive terminal (progress lines are shown only there)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _Activity:
    """A status line for any command that runs longer than ``delay`` seconds without printing:
    ``snapstore COMMAND: working... N s`` on an interactive stderr, redrawn every quarter second and
    cleared before anything else is written and when the command ends. Commands with a progress
    line of their own (:class:`_Progress`) print often enough that it never shows."""

    delay = 1.0

    def __init__(self, label: str):
        self.label = label
        self.started = self.last_output = time.monotonic()
        self.shown = False
        self.suspended = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "_Activity":
        _ACTIVITY[0] = self
        if _stderr_tty():
            self._thread = threading.Thread(target=self._run, name="snapstore-activity", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with _OUTPUT_LOCK:
                if self.suspended or now - self.last_output < self.delay or self._stop.is_set():
                    continue
                try:
                    _raw_write(f"\r\x1b[Ksnapstore {self.label}: working... {now - self.started:.0f} s", err=True)
                    self.shown = True
                except (OSError, ValueError):
                    return

    def clear_locked(self) -> None:
        if self.shown:
            self.shown = False
            try:
                _raw_write("\r\x1b[K", err=True)
            except (OSError, ValueError):
                pass

    def suspend(self) -> None:
        """Stop showing the line (before a prompt)."""
        with _OUTPUT_LOCK:
            self.suspended = True
            self.clear_locked()

    def resume(self) -> None:
        with _OUTPUT_LOCK:
            self.suspended = False
            self.last_output = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with _OUTPUT_LOCK:
            self.clear_locked()
            if _ACTIVITY[0] is self:
                _ACTIVITY[0] = None


def _raw_write(text_or_bytes, err: bool = False) -> None:
    text_stream = sys.stderr if err else sys.stdout
    data = text_or_bytes if isinstance(text_or_bytes, bytes) else _enc(text_or_bytes)
    text_stream.flush()
    stream = getattr(text_stream, "buffer", None)
    if stream is None:  # a text-only stream (e.g. replaced by a test harness)
        text_stream.write(data.decode("utf-8", "replace"))
        text_stream.flush()
        return
    stream.write(data)
    stream.flush()


def _json_bytes(value, indent: int | None = None) -> bytes:
    """``json.dumps(value, ensure_ascii=False)`` as UTF-8; values holding lone surrogates fall back
    to ``ensure_ascii=True`` (escaped ``\\udXXX``, still valid JSON that decodes to the same value)."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, indent=indent).encode("ascii")


def _emit_json(value) -> None:
    _write(_json_bytes(value, indent=2) + b"\n")


def _iso(dt: datetime | None, micro: bool = False) -> str | None:
    if dt is None:
        return None
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def human_size(n: int | float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _human_duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            q, r = divmod(seconds, size)
            return f"{q}{unit}" if r == 0 or unit in ("m",) else f"{q}{unit}{_human_duration(r)}"
    return f"{seconds}s"


def _short(value) -> str:
    """One-line rendering of a user field (JSON for structured values, '-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
        return ", ".join(f"{k}={_short(v)}" for k, v in value.items())
    return _json_bytes(value).decode("utf-8", "surrogateescape")


def _table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells):
        out = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()
    return "\n".join([line(headers)] + [line(r) for r in rows]) + "\n"


def _kv(pairs: list[tuple[str, str]], width: int | None = None) -> str:
    width = width or max(len(k) for k, _ in pairs) + 1
    return "".join(f"{(k + ':').ljust(width)}  {v}\n" for k, v in pairs)


def _usd(x: float) -> str:
    """US dollars with two significant digits below one cent: ``$1.50``, ``$0.00022``, ``$0``."""
    x = float(x)
    if x == 0:
        return "$0"
    if abs(x) >= 0.01:
        return f"${x:,.2f}"
    decimals = min(12, 1 - math.floor(math.log10(abs(x))))
    return f"${x:.{decimals}f}"


def _price(x: float) -> str:
    """A price without trailing zeros: ``$0.0004``, ``$0.023``, ``$0``."""
    text = f"{float(x):.10f}".rstrip("0").rstrip(".")
    return f"${text}"


_REQUEST_KINDS = ("PUT", "LIST", "GET", "HEAD", "DELETE")


def _prices_text(prices: dict, storage: bool = True) -> str:
    """``$0.023/GB-month; PUT/LIST $0.005, GET/HEAD $0.0004, DELETE $0 per 1,000 requests``."""
    groups: dict[float, list[str]] = {}
    for k in _REQUEST_KINDS:
        if isinstance(prices.get(k), (int, float)):
            groups.setdefault(round(prices[k] * 1000, 12), []).append(k)
    req = ", ".join(f"{'/'.join(ks)} {_price(p)}" for p, ks in groups.items()) + " per 1,000 requests"
    if storage and isinstance(prices.get("gb_month"), (int, float)):
        return f"storage {_price(prices['gb_month'])}/GB-month; {req}"
    return req


def _is_s3(store) -> bool:
    return str(getattr(store, "url", "")).startswith("s3://")


def _request_cost(counts: dict) -> dict:
    """``{"requests": usd, "prices": ...}`` for request counts at S3 Standard list prices."""
    from .maintenance.stats import estimate_cost
    return estimate_cost(0, counts)


# ------------------------------------------------------------------------------------------------
# parameter types

def parse_duration(text: str) -> timedelta:
    """Parse ``3600``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w``, ``1y`` (or combinations like ``1h30m``).

    The syntax of :func:`snapstore.manager.retention.parse_duration` (what the library accepts), also allowing
    blanks around units (``1h 30m``, ``90 s``).

    Raises:
        InvalidInputError: not a duration.
    """
    from .manager.retention import parse_duration as _parse

    s = re.sub(r"\s+(?=[a-z])|(?<=[a-z])\s+", "", str(text).strip().lower())
    try:
        return timedelta(seconds=_parse(s))
    except InvalidInputError:
        raise InvalidInputError(
            f"invalid duration {text!r} (expected seconds or a number with a unit s/m/h/d/w/y, e.g. 90s, 12h, 7d)"
        ) from None
    except OverflowError:
        raise InvalidInputError(f"duration {text!r} is too large") from None


class _Duration(click.ParamType):
    name = "DURATION"

    def convert(self, value, param, ctx):
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(value)
        except InvalidInputError as e:
            self.fail(str(e), param, ctx)


_SIZE_RE = re.compile(r"^\s*(\d+)\s*(b|k|kb|kib|m|mb|mib|g|gb|gib)?\s*$", re.I)
_SIZE_UNITS = {None: 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


class _Size(click.ParamType):
    name = "BYTES"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        m = _SIZE_RE.match(str(value))
        if not m:
            self.fail(f"invalid size {value!r} (expected bytes, optionally with K/M/G, e.g. 65536 or 64K)", param, ctx)
        return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower() if m.group(2) else None]


DURATION = _Duration()
SIZE = _Size()


# ------------------------------------------------------------------------------------------------
# the command group

class _Group(click.Group):
    """Turns library errors into one-line messages and exit codes (both for ``main()`` and CliRunner)."""

    def list_commands(self, ctx):
        return list(self.commands)  # help lists commands in definition order

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException):
            raise
        except (KeyboardInterrupt, click.Abort):  # Ctrl-C (click.confirm turns it into Abort)
            raise _Interrupted() from None
        except InvalidInputError as e:
            raise CommandError(str(e), 2) from None
        except SnapstoreError as e:
            raise CommandError(str(e) or type(e).__name__, 1) from None
        except BrokenPipeError:
            raise  # click's main() handles EPIPE quietly
        except OSError as e:
            where = f"{e.filename}: " if e.filename else ""
            raise CommandError(f"{where}{e.strerror or e}", 1) from None


PROBE_CONNECT_TIMEOUT = 2.0  # seconds: the S3 reachability probe's connect timeout (one attempt)
PROBE_READ_TIMEOUT = 3.0  # seconds: its read timeout


def probe_store(location: str) -> None:
    """Fail fast when an S3 endpoint cannot be reached: one HEAD of the repository's ``config`` with
    a 2 s connect and 3 s read timeout and no retries (the command's own store keeps its normal
    timeouts and retries, for transient errors later on). Other locations are not probed.

    Raises:
        StoreError: the endpoint cannot be reached or timed out, with how long it waited
            (seconds); also any other store error the HEAD got (access denied, no such bucket...).
    """
    if not str(location).startswith("s3://"):
        return
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    from .errors import ObjectNotFound, StoreError
    from .format import keys
    from .stores.s3 import S3Store

    t0 = time.monotonic()
    store = S3Store.from_url(location, connect_timeout=PROBE_CONNECT_TIMEOUT, read_timeout=PROBE_READ_TIMEOUT,
                             max_attempts=0)
    try:
        store.head(keys.CONFIG)
    except ObjectNotFound:
        pass
    except StoreError as e:
        if isinstance(e.__cause__, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
            raise StoreError(f"{e} (gave up after {time.monotonic() - t0:.1f} s: check the endpoint URL, "
                             "that the service is running, and the network)") from None
        raise
    finally:
        store.close()


class _State:
    def __init__(self, location: str, compact_log: bool | None = None):
        self.location = location
        self.compact_log = compact_log
        self._mgr: CheckpointManager | None = None

    def open_store(self):
        """The store at ``--repo`` (an S3 endpoint is probed first, see :func:`probe_store`)."""
        from .stores import open_store

        probe_store(self.location)
        return open_store(self.location)

    def manager(self, create: bool = False) -> CheckpointManager:
        """The checkpoint manager (repository must exist unless ``create``)."""
        if self._mgr is None:
            probe_store(self.location)
            mgr = CheckpointManager(self.location, create=create, compact_log=self.compact_log)
            click.get_current_context().find_root().call_on_close(mgr.close)
            if not create:
                mgr.repo  # open now: a missing repository is an error, not an empty one
            self._mgr = mgr
        return self._mgr


def _state(ctx: click.Context) -> _State:
    return ctx.find_object(_State)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--repo", metavar="PATH_OR_URL", envvar="SNAPSTORE_URL", default=None,
              help="Repository: a directory, file:///path, s3://BUCKET/PREFIX or memory://. "
                   "[default: $SNAPSTORE_URL, else ./.snapstore]")
@click.option("--compact-log/--no-compact-log", default=None,
              help="Writers replace manifests covered by a log segment with 0-byte stubs (docs/format.md "
                   "§14). [default: on for a local directory, off elsewhere]")
@click.version_option(__version__, "--version", prog_name="snapstore", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, repo: str | None, compact_log: bool | None):
    """Content-addressed, deduplicated storage for AI-agent checkpoints.

    Exit status: 0 ok, 1 failure (unknown run/checkpoint, conflict, store error), 2 bad usage or
    bad input, 130 interrupted; see 'snapstore verify --help' for verify's codes.
    """
    if repo is not None and not repo.strip():
        raise CommandError("--repo is empty: give a directory, file:///path, s3://BUCKET/PREFIX or memory://", 2)
    ctx.obj = _State(repo if repo is not None else DEFAULT_REPO, compact_log)
    ctx.with_resource(any_int_digits())  # integers of any size, in files read and JSON printed
    if ctx.invoked_subcommand is not None:
        activity = _Activity(ctx.invoked_subcommand).start()
        ctx.call_on_close(activity.stop)


# ------------------------------------------------------------------------------------------------
# init

@cli.command("init")
@click.option("--level", type=click.IntRange(1, 22), help="zstd compression level for packs [default: 3].")
@click.option("--dict-bytes", type=SIZE, help="raw-content dictionary size per data block; 0 disables "
              "dictionaries [default: 128K].")
@click.option("--cdc-threshold", type=SIZE, help="messages larger than this are split into content-defined "
              "chunks [default: 64K].")
@click.option("--cdc-min", type=SIZE, help="minimum chunk size [default: 16K].")
@click.option("--cdc-avg", type=SIZE, help="average chunk size [default: 64K].")
@click.option("--cdc-max", type=SIZE, help="maximum chunk size [default: 256K].")
@click.option("--leaf-bits", type=click.IntRange(1, 12), help="message-tree leaf fan-out bits [default: 3].")
@click.option("--node-bits", type=click.IntRange(1, 12), help="message-tree node fan-out bits [default: 3].")
@click.option("--max-items", type=click.IntRange(min=2), help="maximum items per tree node [default: 64].")
@click.option("--inline-state-max", type=SIZE, help="session states larger than this are stored as chunks "
              "[default: 4K].")
@click.option("--allow-nonempty", is_flag=True, help="Create the repository even if the directory (or S3 "
              "prefix) already holds other files.")
@click.pass_context
def init_cmd(ctx, allow_nonempty, **settings):
    """Create a repository at --repo (fails if one exists).

    Settings are fixed at creation; options not given keep their defaults. A directory (or S3
    prefix) that holds other files is refused unless --allow-nonempty.
    """
    from .repo.repository import Repository

    settings = {k: v for k, v in settings.items() if v is not None}
    store = _state(ctx).open_store()
    try:
        _refuse_foreign_content(store, allow_nonempty)
        repo = Repository.init(store, **settings)
        cfg = repo.config
        _write(f"initialized snapstore repository at {store.url} (id {cfg.repo_id})\n")
        if settings:
            _write("".join(f"  {k} = {getattr(cfg, k)}\n" for k in settings))
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# import

def _refuse_foreign_content(store, allow: bool) -> None:
    """Refuse to create a repository where other files are (a directory or S3 prefix that is not
    empty and has no repository ``config``), unless ``allow``. snapstore's own leftovers of an
    interrupted init (``.tmp-*`` files, ``.locks``) do not count.

    Raises:
        CommandError: exit status 2, naming the location and one of the files found.
    """
    from .format import keys
    from .stores.local import LocalStore

    if allow:
        return
    found = None
    if isinstance(store, LocalStore):
        if os.path.isdir(store.root):
            with os.scandir(store.root) as entries:  # a crashed init's own leftovers do not count
                names = sorted(e.name for e in entries if not (e.name.startswith(".tmp-") or e.name == ".locks"))
            if names and keys.CONFIG not in names:
                found = names[0]
    else:
        first = next(iter(store.list("", limit=1)), None)
        if first is not None and first.key != keys.CONFIG:
            try:
                store.head(keys.CONFIG)
            except SnapstoreError:
                found = first.key
    if found is not None:
        raise CommandError(f"{store.url} is not empty and holds no snapstore repository (found {found!r}); "
                           "refusing to create one there (choose another --repo, or pass --allow-nonempty)", 2)


class _Progress:
    """A single updating progress line on an interactive stderr; sparse lines otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        try:
            self.tty = enabled and sys.stderr.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.last = 0.0
        self.dirty = False

    def update(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if force or now - self.last >= 0.1:
                self.last = now
                _write("\r\x1b[K" + text, err=True)
                self.dirty = True
        elif force or now - self.last >= 5.0:
            if self.last == 0.0 and not force:
                self.last = now  # first line only after 5 s of work: short imports stay quiet
                return
            self.last = now
            _write(text + "\n", err=True)

    def clear(self) -> None:
        if self.dirty:
            _write("\r\x1b[K", err=True)
            self.dirty = False


def _message_sizes(checkpoint: list, cache: dict) -> int:
    """Total exact-JSON bytes of a message list (what the manifest records as its size)."""
    from .format.codec import encode_json

    total = 0
    for m in checkpoint:
        n = cache.get(id(m))
        if n is None:
            n = cache[id(m)] = len(encode_json(m)[0])
        total += n
    return total


def _strict_equal(a: list, b: list) -> bool:
    """Equal as JSON documents, including key order and int/float distinction."""
    if a != b:
        return False
    return _json_bytes(a) == _json_bytes(b)


def _resume_index(mgr: CheckpointManager, run: str, checkpoints: list[list], where: str) -> int:
    """Index of the first checkpoint of ``checkpoints`` not yet in ``run`` (0 for a new run).

    Raises:
        CommandError: the run has content that matches none of the checkpoints.
    """
    latest = mgr.latest(run)
    if latest is None:
        return 0
    for k in range(len(checkpoints) - 1, -1, -1):
        if len(checkpoints[k]) == latest.message_count and _strict_equal(checkpoints[k], latest.messages):
            return k + 1
    raise CommandError(
        f"run {run!r} already exists and its latest checkpoint {latest.id} ({latest.message_count} messages) "
        f"matches none of the {len(checkpoints)} checkpoints of {where}; refusing to add to it "
        "(import under another id with --run, or delete the run first)", 1)


IMPORT_STATE_KEY = "import"
"""The session-state key under which ``import`` keeps a conversation's record (see ``import --help``)."""


def _import_state(file: str, fmt_name: str, conv) -> dict | None:
    """The session state of a conversation's last checkpoint: ``{"import": {...}}`` holding where it
    came from and :meth:`snapstore.importers.Conversation.extras` (the record's other fields)."""
    extras = conv.extras()
    if extras is None:
        return None
    return {IMPORT_STATE_KEY: {"file": os.path.basename(file), "format": fmt_name, "conversation": conv.name,
                               "where": conv.where, **extras}}


def _other_fields(conv) -> list[str]:
    """The names of what the conversation's record holds besides the messages: the file's own
    fields around the records (tau2-bench ``info``, ``tasks``...), the record's fields, skipped
    records, the raw events that the messages were made from."""
    rec = conv.record
    out = list(conv.file_fields)
    for part in conv.record_at:  # the conversation's own record inside the (narrowed) file
        rec = rec[part]
    inner = conv.path[len(conv.record_at):]
    if isinstance(rec, dict):
        out.extend(k for k in rec if not (len(inner) == 1 and k == inner[0]) or conv.derived)
    if conv.derived:
        events = rec
        for part in inner:
            events = events[part]
        out.append(f"{len(events)} raw events")
    if conv.omitted:
        out.append(f"{len(conv.omitted)} non-message records")
    return out


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _dry_run_report(file: str, fmt_name: str, prefix: str, runs: list[str], conversations, as_json: bool) -> None:
    items = []
    for run, conv in zip(runs, conversations):
        items.append({"run": run, "where": conv.where, "checkpoints": len(conv.checkpoints),
                      "messages": len(conv.messages), "kept_fields": _other_fields(conv)})
    if as_json:
        _emit_json({"file": file, "format": fmt_name, "dry_run": True, "conversations": len(items),
                    "checkpoints": sum(i["checkpoints"] for i in items), "runs": items})
        return
    total = sum(i["checkpoints"] for i in items)
    head = (f"dry run: nothing was written\n{file}: format {fmt_name}, {_plural(len(items), 'conversation')}, "
            f"{_plural(total, 'checkpoint')} (one per turn), {sum(i['messages'] for i in items)} messages\n")
    rows = [[i["run"], i["where"], str(i["checkpoints"]), str(i["messages"]),
             _clip(", ".join(i["kept_fields"]), 60) or "-"] for i in items]
    _write(head + _table(["RUN", "WHERE", "TURNS", "MESSAGES", "KEPT FIELDS"], rows, right={2, 3}))


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--run", "run_prefix", metavar="ID",
              help="Run id (default: the file's name without .json/.jsonl/.traj). Files with several "
                   "conversations get one run per conversation, named ID/NAME.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Trajectory format (default: detect; "
              "'messages' and 'events' are the shape-based readers).")
@click.option("--messages-path", metavar="PATH", help="Where the message lists are, from the top of the "
              "file (of each line of a JSON Lines file): dotted keys, [] for every element of a list, [N] "
              "for one, e.g. 'results[].conversation.messages'. The first [] marks the records.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what was found (conversations, turns, where in the "
              "file, the fields kept besides the messages); write nothing.")
@click.option("--allow-nonempty", is_flag=True, help="Create a repository even if --repo is a directory (or S3 "
              "prefix) that holds other files.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line and no summary on stderr.")
@click.pass_context
def import_cmd(ctx, file, run_prefix, fmt, messages_path, dry_run, allow_nonempty, as_json, quiet):
    """Replay a trajectory FILE as one checkpoint per agent turn.

    Known formats (OpenAI chat, SWE-agent, mini-swe-agent, OpenHands, Claude Code, tau-bench,
    ShareGPT) are read by their own rules; any other JSON / JSON Lines file whose records hold
    role/content message lists or action/observation event streams at any depth is read by shape.
    The whole file is read and checked before the first save: a bad value fails with one line
    naming the record and the path in it, and nothing is stored.

    What the record holds besides the messages (tool schemas, instructions, metrics, test
    results...) is kept in the session state of each conversation's last checkpoint, under
    "import"; 'snapstore export RUN --record' gives the record back as the file had it.

    Resumable: if a run already holds a prefix of the file's checkpoints, importing again saves only
    the missing ones. A run whose latest checkpoint matches none of the file's is left untouched
    (error).
    """
    from .format.ids import check_run_id
    from .repo.repository import Repository

    t0 = time.monotonic()
    progress = _Progress(not quiet)
    fmt_name, conversations = load_trajectory(file, format=fmt, messages_path=messages_path)
    prefix = run_prefix if run_prefix is not None else default_run_id(file)
    if prefix == "":
        raise CommandError("run id must not be empty", 2)
    runs = [f"{prefix}/{conv.name}" if conv.name else prefix for conv in conversations]
    states = [_import_state(file, fmt_name, conv) for conv in conversations]
    for run in runs:  # every run id is checked before the first save
        check_run_id(run)
    if dry_run:
        _dry_run_report(file, fmt_name, prefix, runs, conversations, as_json)
        return

    st = _state(ctx)
    store = st.open_store()
    created = False
    try:
        try:
            Repository.open(store, create=False)
        except RepositoryError:
            _refuse_foreign_content(store, allow_nonempty)
            Repository.init(store, exist_ok=True)
            created = True
    except BaseException:
        store.close()
        raise
    st._mgr = mgr = CheckpointManager(store, compact_log=st.compact_log)
    ctx.find_root().call_on_close(mgr.close)
    if created and not quiet:
        _write(f"initialized new snapstore repository at {store.url}\n", err=True)

    before = mgr.store.stats.snapshot()
    total_cps = sum(len(c.checkpoints) for c in conversations)
    saved = skipped = logical = 0
    done = 0
    per_run = []
    try:
        for ci, (run, conv, state) in enumerate(zip(runs, conversations, states)):
            cps = conv.checkpoints
            if not cps:
                per_run.append({"run": run, "checkpoints": 0, "saved": 0, "skipped": 0})
                continue
            start = _resume_index(mgr, run, cps, f"{file}" + (f" conversation {conv.name!r}" if conv.name else ""))
            skipped += start
            done += start
            sizes: dict = {}
            for i in range(start, len(cps)):
                progress.update(f"importing {file}: conversation {ci + 1}/{len(conversations)}, "
                                f"checkpoint {done + 1}/{total_cps}")
                last = i == len(cps) - 1
                mgr.save(run, cps[i], step=i, session_state=state if last else None)
                logical += _message_sizes(cps[i], sizes)
                saved += 1
                done += 1
            per_run.append({"run": run, "checkpoints": len(cps), "saved": len(cps) - start, "skipped": start})
    except KeyboardInterrupt:
        progress.clear()
        if not quiet:
            _write(f"interrupted: {_plural(saved, 'checkpoint')} saved by this import ({done} of {total_cps} in "
                   f"the file now stored); run the same command again to resume: it saves only the missing ones\n",
                   err=True)
        raise
    finally:
        progress.clear()

    used = mgr.store.stats.since(before)
    elapsed = time.monotonic() - t0
    cost = _request_cost(used.counts) if _is_s3(mgr.store) else None
    summary = {
        "file": file, "format": fmt_name, "conversations": len(conversations), "runs": per_run,
        "saved": saved, "skipped": skipped, "logical_bytes": logical, "bytes_written": used.bytes_up,
        "bytes_read": used.bytes_down, "requests": dict(used.counts), "elapsed_s": round(elapsed, 3),
        "request_cost_usd": None if cost is None else cost["requests"],
    }
    if as_json:
        _emit_json(summary)
    if quiet:
        return
    req = ", ".join(f"{k} {v}" for k, v in used.counts.items() if v) or "none"
    runs_text = per_run[0]["run"] if len(per_run) == 1 else f"{len(per_run)} runs under {prefix}/"
    ratio = ""
    if used.bytes_up and logical and saved:
        ratio = (f" ({logical / used.bytes_up:.1f}x smaller)" if logical >= used.bytes_up
                 else f" ({used.bytes_up / logical:.1f}x larger)")
    pairs = [
        ("  conversations", str(len(conversations))),
        ("  checkpoints", f"{saved} saved, {skipped} already present"),
        ("  logical bytes", f"{human_size(logical)} ({logical})"),
        ("  bytes written", f"{human_size(used.bytes_up)} ({used.bytes_up}){ratio}"),
        ("  requests", f"{req} ({used.total()} total)"),
    ]
    if cost is not None:
        pairs.append(("  request cost", f"~{_usd(cost['requests'])} at {_prices_text(cost['prices'], storage=False)} "
                                        "(S3 Standard list prices, us-east-1)"))
    kept = list(dict.fromkeys(f for conv in conversations for f in _other_fields(conv)))
    if kept:
        pairs.append(("  kept", f"{_clip(', '.join(kept), 70)} ('snapstore export RUN --record' gives each "
                                "record back whole)"))
    pairs.append(("  elapsed", f"{elapsed:.2f} s"))
    _write(f"imported {file} ({fmt_name}) into {runs_text}\n" + _kv(pairs), err=True)


# ------------------------------------------------------------------------------------------------
# reading

def _summary_dict(s) -> dict:
    d = {"id": s.id, "run_id": s.run_id, "seq": s.seq, "step": s.step, "created_at": _iso(s.created_at, True),
         "parent_id": s.parent_id, "message_count": s.message_count, "message_bytes": s.message_bytes,
         "token_usage": s.token_usage, "metrics": s.metrics, "agent_id": s.agent_id, "status": s.status,
         "metadata": s.metadata}
    return d


def _get(mgr: CheckpointManager, run: str, checkpoint: str | None):
    """The checkpoint (or the run's latest); RunNotFound for an empty/unknown run."""
    if checkpoint is None:
        cp = mgr.latest(run)
        if cp is None:
            raise RunNotFound(f"run {run!r} not found")
        return cp
    return mgr.get(run, checkpoint)


@cli.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def runs_cmd(ctx, as_json):
    """List the ids of runs that have checkpoints, one per line."""
    runs = _state(ctx).manager().runs()
    if as_json:
        _emit_json(runs)
    elif runs:
        _write("".join(r + "\n" for r in runs))


@cli.command("list")
@click.argument("run")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N checkpoints (newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of checkpoint summaries.")
@click.pass_context
def list_cmd(ctx, run, limit, as_json):
    """List the checkpoints of RUN, newest first."""
    items = _state(ctx).manager().list(run, limit=limit)
    if not items:
        raise RunNotFound(f"run {run!r} not found")
    if as_json:
        _emit_json([_summary_dict(s) for s in items])
        return
    rows = [[s.id, str(s.seq), _short(s.step), _iso(s.created_at), str(s.message_count), _short(s.status)]
            for s in items]
    _write(_table(["ID", "SEQ", "STEP", "CREATED (UTC)", "MESSAGES", "STATUS"], rows, right={1, 2, 4}))


@cli.command("show")
@click.argument("run")
@click.argument("checkpoint", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def show_cmd(ctx, run, checkpoint, as_json):
    """Show a checkpoint's summary (default: the run's latest), not its messages."""
    cp = _get(_state(ctx).manager(), run, checkpoint)
    d = _summary_dict(cp)
    d["has_session_state"] = cp.session_state is not None
    if as_json:
        _emit_json(d)
        return
    pairs = [("run", cp.run_id), ("checkpoint", cp.id), ("seq", str(cp.seq)), ("step", _short(cp.step)),
             ("created", _iso(cp.created_at, True)), ("parent", cp.parent_id or "-"),
             ("messages", f"{cp.message_count} ({human_size(cp.message_bytes)})"),
             ("token usage", _short(cp.token_usage))]
    for label, value in (("status", cp.status), ("agent", cp.agent_id), ("metrics", cp.metrics),
                         ("metadata", cp.metadata)):
        if value is not None:
            pairs.append((label, _short(value)))
    if cp.session_state is not None:
        pairs.append(("session state", human_size(len(_json_bytes(cp.session_state)))))
    _write(_kv(pairs))


@cli.command("export")
@click.argument("run")
@click.option("-c", "--checkpoint", metavar="ID", help="Checkpoint id (default: the run's latest).")
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False, path_type=str),
              help="Write to FILE instead of stdout.")
@click.option("--record", is_flag=True, help="Print the conversation's record as the imported file had it "
              "(its messages and every other field; JSON Lines if the record was a whole JSON Lines file). "
              "Needs the last checkpoint of an import.")
@click.pass_context
def export_cmd(ctx, run, checkpoint, output, record):
    """Print a checkpoint's message list as JSON, exactly as saved (nothing else on stdout)."""
    cp = _get(_state(ctx).manager(), run, checkpoint)
    what = f"{cp.message_count} messages"
    if record:
        state = cp.session_state
        extras = state.get(IMPORT_STATE_KEY) if isinstance(state, dict) else None
        if not isinstance(extras, dict):
            raise CommandError(f"checkpoint {cp.id} of run {run!r} holds no imported record (the last checkpoint "
                               "of each conversation an import saved holds it)", 1)
        value = rebuild_record(extras, cp.messages)
        if extras.get("jsonl") and isinstance(value, list):
            data = b"".join(_json_bytes(v) + b"\n" for v in value)
        else:
            data = _json_bytes(value)
        what = f"the record ({extras.get('where', 'whole file')}) of {extras.get('file', 'the imported file')}"
    else:
        data = _json_bytes(cp.messages)
    if output is None or output == "-":
        tty = False
        try:
            tty = sys.stdout.isatty()
        except (AttributeError, ValueError):
            pass
        _write(data + (b"\n" if tty and not data.endswith(b"\n") else b""))
        return
    tmp = f"{output}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, output)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):  # name the file asked for, not the temporary one
            raise CommandError(f"cannot write {output}: {e.strerror or e}", 1) from None
        raise
    _write(f"wrote {what} of {run} checkpoint {cp.id} to {output}\n", err=True)


@cli.command("diff")
@click.argument("run")
@click.argument("from_id", metavar="FROM")
@click.argument("to_id", metavar="[TO]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the operations as JSON (the service's "
              "GET /runs/{run}/diff ops: op, fromStart, fromEnd, toStart, toEnd, fromMessages, toMessages).")
@click.pass_context
def diff_cmd(ctx, run, from_id, to_id, as_json):
    """Show how checkpoint TO's messages differ from checkpoint FROM's (TO: the run's latest).

    Messages are compared as exact JSON values (key order included), as the service and the page
    compare them. Each line is an operation on index ranges of FROM's and TO's message lists:
    '=' equal, '-' only in FROM, '+' only in TO (a replaced range shows both). Exit status 0
    whether or not they differ.
    """
    from .server.service import Service

    mgr = _state(ctx).manager()
    if to_id is None:
        latest = mgr.latest(run)
        if latest is None:
            raise RunNotFound(f"run {run!r} not found")
        to_id = latest.id
    d = Service(mgr).diff(run, from_id, to_id)
    a, b, ops = d["from"], d["to"], d["ops"]
    if as_json:
        _emit_json({"run": run, "from": a.id, "to": b.id, "from_count": a.message_count,
                    "to_count": b.message_count, "ops": ops})
        return
    width = max(40, shutil.get_terminal_size((100, 24)).columns - 12)
    lines = [f"run {run}: {a.id} ({_plural(a.message_count, 'message')}) -> {b.id} "
             f"({_plural(b.message_count, 'message')})"]
    for op in ops:
        if op["op"] == "equal":
            n = op["fromEnd"] - op["fromStart"]
            lines.append(f"= {_plural(n, 'message')} equal (FROM [{op['fromStart']}:{op['fromEnd']}], "
                         f"TO [{op['toStart']}:{op['toEnd']}])")
            continue
        for k, m in enumerate(op["fromMessages"]):
            lines.append(f"- FROM [{op['fromStart'] + k}] {_clip(_json_bytes(m).decode('utf-8', 'replace'), width)}")
        for k, m in enumerate(op["toMessages"]):
            lines.append(f"+ TO [{op['toStart'] + k}] {_clip(_json_bytes(m).decode('utf-8', 'replace'), width)}")
    added = sum(len(op["toMessages"]) for op in ops if op["op"] != "equal")
    removed = sum(len(op["fromMessages"]) for op in ops if op["op"] != "equal")
    lines.append("identical message lists" if not (added or removed) else
                 f"{_plural(added, 'message')} only in TO (+), {_plural(removed, 'message')} only in FROM (-)")
    _write("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------
# changing runs

@cli.command("rollback")
@click.argument("run")
@click.argument("checkpoint")
@click.pass_context
def rollback_cmd(ctx, run, checkpoint):
    """Make CHECKPOINT the head of RUN again; later checkpoints are deleted."""
    cp = _state(ctx).manager().rollback(run, checkpoint)
    _write(f"rolled back {run} to {cp.id} (seq {cp.seq}, {cp.message_count} messages)\n")


@cli.command("fork")
@click.argument("run")
@click.argument("checkpoint")
@click.argument("new_run")
@click.pass_context
def fork_cmd(ctx, run, checkpoint, new_run):
    """Start NEW_RUN at CHECKPOINT of RUN (one pack copying what that checkpoint needs, compressed)."""
    cp = _state(ctx).manager().fork(run, checkpoint, new_run)
    _write(f"forked {run}@{checkpoint} as {new_run} (checkpoint {cp.id}, {cp.message_count} messages)\n")


def _stdin_interactive() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


@cli.command("delete")
@click.argument("run")
@click.argument("checkpoint", required=False)
@click.option("-y", "--yes", is_flag=True, help="Delete a whole run without asking.")
@click.pass_context
def delete_cmd(ctx, run, checkpoint, yes):
    """Delete CHECKPOINT of RUN, or the whole RUN (asks for confirmation unless --yes)."""
    mgr = _state(ctx).manager()
    if checkpoint is not None:
        mgr.delete(run, checkpoint)
        _write(f"deleted checkpoint {checkpoint} of {run}\n")
        return
    if not yes:
        if not _stdin_interactive():
            raise CommandError(f"refusing to delete run {run!r} without confirmation: stdin is not a terminal "
                               "(pass --yes)", 2)
        items = mgr.list(run)
        if not items:
            raise RunNotFound(f"run {run!r} not found")
        activity = _ACTIVITY[0]
        if activity is not None:
            activity.suspend()
        try:
            yes = click.confirm(f"Delete run {run!r} and its {len(items)} checkpoint(s)?", default=False, err=True)
        finally:
            if activity is not None:
                activity.resume()
        if not yes:
            _write(f"not deleted: run {run} is unchanged\n", err=True)
            return
    mgr.delete(run)
    _write(f"deleted run {run}\n")


_COUNT_RULES = (("keep_last", "newest"), ("keep_hourly", "hour"), ("keep_daily", "day"),
                ("keep_weekly", "ISO week"), ("keep_monthly", "month"), ("keep_yearly", "year"))
_RULE_ORDER = ("keep_last", "keep_within", "older_than", "keep_hourly", "keep_daily", "keep_weekly",
               "keep_monthly", "keep_yearly")
_GC_HINT = "space is reclaimed by 'snapstore gc' (prune deletes checkpoint records, not the data they used)"


def _policy_text(policy: dict) -> str:
    """``keep-last 3, older-than 7d`` (rules in the CLI's spelling)."""
    out = []
    for k in _RULE_ORDER:
        v = policy.get(k)
        if v is None:
            continue
        if isinstance(v, timedelta):
            v = _human_duration(v.total_seconds())
        out.append(f"{k.replace('_', '-')} {v}")
    return ", ".join(out)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


@cli.command("prune")
@click.option("--keep-last", type=click.IntRange(min=0), metavar="N",
              help="Keep the N newest checkpoints of each run.")
@click.option("--keep-within", type=DURATION, metavar="DURATION",
              help="Keep checkpoints created within DURATION of their run's newest checkpoint.")
@click.option("--older-than", type=DURATION, metavar="DURATION",
              help="Keep checkpoints created less than DURATION ago (older ones go).")
@click.option("--keep-hourly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N hours that have checkpoints.")
@click.option("--keep-daily", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N days that have checkpoints.")
@click.option("--keep-weekly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N ISO weeks that have checkpoints.")
@click.option("--keep-monthly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N months that have checkpoints.")
@click.option("--keep-yearly", type=click.IntRange(min=0), metavar="N",
              help="Keep the newest checkpoint of each of the last N years that have checkpoints.")
@click.option("--run", "run_id", metavar="RUN", help="Only this run (default: every run).")
@click.option("-n", "--dry-run", is_flag=True, help="Show what each checkpoint's fate would be and why; "
              "delete nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary line, not a line per checkpoint.")
@click.pass_context
def prune_cmd(ctx, run_id, dry_run, as_json, quiet, **rules):
    """Delete checkpoints by retention policy (restic 'forget' rules).

    A checkpoint is kept if ANY rule keeps it; every rule that keeps it is shown as a reason.
    Durations: seconds or 90s, 30m, 12h, 7d, 2w, 1y (or combinations like 1d12h). Times are UTC.
    Deleting every checkpoint of a run deletes the run.

    Pruning deletes checkpoint records only: the space their data used is reclaimed by
    'snapstore gc'.
    """
    policy = {k: v for k, v in rules.items() if v is not None}
    if not policy:
        raise click.UsageError("give at least one retention rule: --keep-last, --keep-within, --older-than, "
                               "--keep-hourly, --keep-daily, --keep-weekly, --keep-monthly or --keep-yearly")
    mgr = _state(ctx).manager()
    progress = _Progress(not as_json)
    try:
        runs = [run_id] if run_id is not None else mgr.runs()
        if run_id is not None and mgr.latest(run_id) is None:
            raise RunNotFound(f"run {run_id!r} not found")  # a typo must not look like "nothing to prune"
        decisions, doomed_runs = [], []
        for i, r in enumerate(runs):
            progress.update(f"prune: planning run {i + 1}/{len(runs)}")
            plan = mgr.retention_plan(r, **policy)
            decisions.extend(plan)
            if any(not d.keep for d in plan):
                doomed_runs.append(r)
        deleted = []
        if not dry_run:
            for i, r in enumerate(doomed_runs):
                progress.update(f"prune: deleting from run {i + 1}/{len(doomed_runs)}")
                deleted.extend(mgr.prune(run_id=r, dry_run=False, **policy))
    finally:
        progress.clear()
    by_key = {(d.checkpoint.run_id, d.checkpoint.id): d for d in decisions}
    if dry_run:
        gone = [(d.checkpoint, list(d.reasons)) for d in decisions if not d.keep]
        kept = [(d.checkpoint, list(d.reasons)) for d in decisions if d.keep]
    else:
        gone, gone_keys = [], set()
        for s in deleted:
            d = by_key.get((s.run_id, s.id))
            # the plan was made a moment earlier: a checkpoint that aged past --older-than meanwhile
            # is deleted although the plan kept it
            gone.append((s, list(d.reasons) if d is not None and not d.keep else ["matched no keep rule"]))
            gone_keys.add((s.run_id, s.id))
        kept = [(d.checkpoint, list(d.reasons)) for d in decisions
                if d.keep and (d.checkpoint.run_id, d.checkpoint.id) not in gone_keys]

    if as_json:
        def item(s, reasons):
            d = _summary_dict(s)
            d["reasons"] = reasons
            d["reason"] = "; ".join(reasons)
            return d
        out = {"dry_run": dry_run,
               "policy": {k: (v.total_seconds() if isinstance(v, timedelta) else v) for k, v in policy.items()},
               "pruned": [item(s, r) for s, r in gone], "kept": [item(s, r) for s, r in kept]}
        if gone:
            out["note"] = _GC_HINT
        _emit_json(out)
        return

    def line(verb, s, reasons):
        return f"{verb} {s.run_id} {s.id} (seq {s.seq}, created {_iso(s.created_at)}): {'; '.join(reasons)}\n"

    lines = []
    if quiet:
        pass
    elif dry_run:
        fate = {(s.run_id, s.id): False for s, _ in gone}
        for d in decisions:
            lines.append(line("would keep  " if fate.get((d.checkpoint.run_id, d.checkpoint.id), True)
                              else "would delete", d.checkpoint, d.reasons))
    else:
        lines += [line("deleted", s, r) for s, r in gone]
    runs = len({s.run_id for s, _ in gone})
    ptext = _policy_text(policy)
    if gone:
        verb, keep = ("would delete", "would keep") if dry_run else ("deleted", "kept")
        lines.append(f"{verb} {len(gone)} checkpoint(s) from {runs} run(s); {keep} {len(kept)} "
                     f"(policy: {ptext})\n")
        lines.append(f"note: {_GC_HINT}\n")
    else:
        lines.append(f"nothing to prune: {len(kept)} checkpoint(s) kept (policy: {ptext})\n")
    _write("".join(lines))


# ------------------------------------------------------------------------------------------------
# repository-wide

_GC_CATEGORIES = (("packs", "pack"), ("manifests", "manifest"), ("index", "index record"),
                  ("forward", "forwarding-map object"), ("gc", "gc record"))


def _gc_lines(rep) -> list[tuple[str, str]]:
    """Human-readable rows of a :class:`snapstore.maintenance.gc.GCReport`."""
    dry = bool(rep.dry_run)
    would = "would " if dry else ""
    deleted = {k: int(v) for k, v in dict(rep.deleted).items() if v}
    n_deleted = sum(deleted.values())
    known = dict(_GC_CATEGORIES)
    what = ", ".join(_plural(deleted[k], known[k]) for k, _ in _GC_CATEGORIES if k in deleted)
    what = ", ".join(x for x in [what] + [f"{v} {k}" for k, v in deleted.items() if k not in known] if x)
    rows = [("live", f"{_plural(rep.live_checkpoints, 'checkpoint')} using {_plural(rep.live_packs, 'pack')}")]
    if n_deleted:
        rows.append((f"{would}delete" if dry else "deleted",
                     f"{_plural(n_deleted, 'object')}, {human_size(rep.deleted_bytes)} ({what})"))
    else:
        rows.append((f"{would}delete" if dry else "deleted", "nothing"))
    if rep.live_packs and not rep.repacked_packs:
        # why nothing of the packs was reclaimed: data that live checkpoints use is never deleted
        rows.append(("kept", f"{_plural(rep.live_packs, 'pack')}, each holding data a live checkpoint uses (gc "
                             f"rewrites a pack once more than {rep.max_unused:.0%} of it is dead)"))
    if rep.repacked_packs:
        into = _plural(rep.new_packs, "new pack") + f" ({human_size(rep.repack_bytes_out)})"
        rows.append((f"{would}repack" if dry else "repacked",
                     f"{_plural(rep.repacked_packs, 'pack')} ({human_size(rep.repack_bytes_in)}) into {into}"))
    changes = [(rep.added_forward, "added"), (rep.redirected_forward, "redirected"), (rep.removed_forward, "dropped")]
    if any(n for n, _ in changes):
        # where readers find the entries of repacked packs: at most 16 shard objects (fwd/)
        rows.append(("forwarding", ", ".join(f"{_plural(n, 'record')} {what}" for n, what in changes if n)
                     + f" ({_plural(rep.forward_writes, 'map shard')} "
                       + ("would be written)" if dry else "written)")))
    b, o = rep.reclaimed_bytes, rep.reclaimed_objects
    if o >= 0:
        objs = f"{_plural(o, 'object')} fewer"
    else:  # new packs and forwarding-map shards outnumber what was deleted
        objs = f"{_plural(-o, 'object')} more (new packs, forwarding-map shards and gc state)"
    if b >= 0:
        rows.append((f"{would}reclaim" if dry else "reclaimed", f"{human_size(b)} ({b} bytes); {objs}"))
    elif rep.repacked_packs and rep.grace_period > 0:
        rows.append((f"{would}reclaim" if dry else "reclaimed",
                     f"none yet: {human_size(-b)} ({-b} bytes) more stored until the repacked packs are "
                     f"deleted (after the grace period, by a later gc); {objs}"))
    else:
        rows.append((f"{would}reclaim" if dry else "reclaimed",
                     f"nothing: {human_size(-b)} ({-b} bytes) more stored; {objs}"))
    if rep.pending_candidates:
        rows.append(("pending", f"{_plural(rep.pending_candidates, 'unreferenced pack')} "
                                f"{'wait' if rep.pending_candidates != 1 else 'waits'} for the grace period "
                                f"({_human_duration(rep.grace_period)}); a gc run after it has passed deletes "
                                f"{'them' if rep.pending_candidates != 1 else 'it'}"))
    refetched = int(getattr(rep, "refetched_packs", 0) or 0)
    if refetched:
        rows.append(("refetched", f"{_plural(refetched, 'pack')} fetched again after mark (they left the pack "
                                  "cache before their live entries could be copied)"))
    held = int(getattr(rep, "pending_objects", 0) or 0)
    if held:
        names = {"manifests": "log record", "index": "index record", "log": "log segment"}
        kinds = ", ".join(_plural(n, names.get(k, k)) for k, n in sorted(dict(rep.pending_kinds).items()) if n)
        rows.append(("waiting", f"{kinds} no longer needed ({human_size(rep.pending_bytes)}) "
                                f"{'are' if held != 1 else 'is'} younger than the grace period "
                                f"({_human_duration(rep.grace_period)}); a gc run after it has passed deletes "
                                f"{'them' if held != 1 else 'it'}"))
    corrupt = list(getattr(rep, "corrupt_packs", None) or ())
    if corrupt:
        rows.append(("damaged", f"{_plural(len(corrupt), 'pack')} ({', '.join(corrupt[:3])}"
                                f"{', ...' if len(corrupt) > 3 else ''}): their live entries are read from other "
                                "copies; deleted like unreferenced packs (run 'snapstore verify --read-data')"))
    n_left = int(getattr(rep, "leftovers_removed", 0) or 0)
    if n_left:
        rows.append((f"{would}remove" if dry else "removed",
                     f"{_plural(n_left, 'crash leftover')} ({human_size(rep.leftover_bytes_removed)}: temporary "
                     "files or incomplete uploads of interrupted writes)"))
    if getattr(rep, "leftovers_pending", 0):
        rows.append(("leftovers", f"{_plural(rep.leftovers_pending, 'temporary file or upload')} younger than the "
                                  "grace period left in place (a write may still be running)"))
    rows.append(("elapsed", f"{rep.elapsed:.2f} s"))
    return rows


@cli.command("gc")
@click.option("--grace-period", type=DURATION, metavar="DURATION",
              help="How long unreferenced data must stay unreferenced before it is deleted: seconds or "
                   "90s, 30m, 12h, 7d. 0 deletes it at once: only safe when nothing else writes to the "
                   "repository. [default: 1h]")
@click.option("-n", "--dry-run", is_flag=True, help="Report what would be done; change nothing.")
@click.option("--max-unused", type=click.FloatRange(0, 1), metavar="FRACTION",
              help="Repack a pack when more than this fraction of its bytes is unused. [default: 0.25]")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--break-lock", is_flag=True,
              help="First remove the GC lock, whoever holds it: for a gc killed on another machine (its "
                   "lock goes stale 5 minutes after its last refresh; one killed on this machine is taken "
                   "over at once). Only when no gc is running.")
@click.pass_context
def gc_cmd(ctx, grace_period, dry_run, max_unused, as_json, break_lock):
    """Garbage-collect: reclaim the space no live checkpoint needs; repack small and mostly-unused packs.

    Run it after 'prune' or 'delete'. Unreferenced data is first marked; a later gc deletes it once
    the grace period has passed (so a concurrent writer that still relies on it is safe). Only one
    gc runs at a time.
    """
    mgr = _state(ctx).manager()
    kwargs = {}
    if grace_period is not None:
        kwargs["grace_period"] = grace_period.total_seconds()
        if kwargs["grace_period"] == 0:
            _write("snapstore: note: --grace-period 0 assumes no other process is writing to this repository "
                   "(unreferenced data is deleted at once)\n", err=True)
        elif kwargs["grace_period"] < mgr.gc_grace_period:
            g = _human_duration(kwargs["grace_period"])
            _write(f"snapstore: note: --grace-period {g} is shorter than the default "
                   f"{_human_duration(mgr.gc_grace_period)}: safe only if every active writer uses "
                   f"gc_grace_period={kwargs['grace_period']:g} or less\n", err=True)
    if max_unused is not None:
        kwargs["max_unused"] = max_unused
    progress = _Progress(True)
    try:
        if break_lock:
            kwargs["break_lock"] = True
            from .maintenance.gc import LOCK_KEY
            try:
                held = mgr.store.get(LOCK_KEY).decode("utf-8", "replace")[:200]
                _write(f"snapstore: note: removing the GC lock ({held})\n", err=True)
            except SnapstoreError:
                pass
        rep = mgr.gc(dry_run=dry_run, progress=lambda phase, done, total: progress.update(
            f"gc {phase}: {done}/{total}"), **kwargs)
    finally:
        progress.clear()
    if as_json:
        d = rep.as_dict()
        d.setdefault("deleted_bytes", rep.deleted_bytes)
        d.setdefault("written_bytes", rep.written_bytes)
        _emit_json(d)
        return
    head = "dry run: nothing was changed\n" if dry_run else ""
    _write(head + _kv(_gc_lines(rep)))


@cli.command("stats")
@click.option("--price-gb-month", type=click.FloatRange(min=0), metavar="USD",
              help="Storage price per GB-month for the cost estimate. [default: S3 Standard, 0.023]")
@click.option("--price-put", type=click.FloatRange(min=0), metavar="USD",
              help="Price per 1,000 PUT and LIST requests. [default: S3 Standard, 0.005]")
@click.option("--price-get", type=click.FloatRange(min=0), metavar="USD",
              help="Price per 1,000 GET and HEAD requests. [default: S3 Standard, 0.0004]")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.pass_context
def stats_cmd(ctx, price_gb_month, price_put, price_get, as_json):
    """Repository size, deduplication ratio, object counts, this command's store requests and an
    estimated cost (S3 Standard list prices, us-east-1, unless overridden)."""
    mgr = _state(ctx).manager()
    if not hasattr(mgr, "stats"):
        raise CommandError("this snapstore version has no repository statistics (CheckpointManager.stats)", 1)
    prices = {}
    if price_gb_month is not None:
        prices["gb_month"] = price_gb_month
    if price_put is not None:
        prices["PUT"] = prices["LIST"] = price_put / 1000
    if price_get is not None:
        prices["GET"] = prices["HEAD"] = price_get / 1000
    st = mgr.stats(prices=prices) if prices else mgr.stats()
    if as_json:
        _emit_json(st)
        return
    logical, stored = int(st.get("logical_bytes", 0)), int(st.get("stored_bytes", 0))
    ratio = st.get("ratio")
    pairs = [("runs", str(st.get("runs", 0))), ("checkpoints", str(st.get("checkpoints", 0))),
             ("logical size", f"{human_size(logical)} ({logical} bytes)"),
             *([("  session state", f"{human_size(int(st['session_state_bytes']))} of it")]
               if st.get("session_state_bytes") else []),
             ("stored size", f"{human_size(stored)} ({stored} bytes)"),
             ("ratio", f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-")]
    width = max(len(k) for k in [k for k, _ in pairs] + ["cost estimate"]) + 1
    out = _kv(pairs, width)
    objects = st.get("objects") or {}
    if objects:
        order = ("config", "packs", "manifests", "log", "index", "forward", "gc", "runmarks")
        rows = []
        for cat, v in sorted(objects.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order),
                                                             kv[0])):
            rows.append([f"  {cat}", str(v.get("count", 0)), human_size(v.get("bytes", 0))])
            if v.get("stubs"):  # compacted run-log records (their copies are in log segments)
                rows.append(["    of them stubs", str(v["stubs"]), human_size(0)])
        total_n = sum(int(v.get("count", 0)) for v in objects.values())
        total_b = sum(int(v.get("bytes", 0)) for v in objects.values())
        rows.append(["  total", str(total_n), human_size(total_b)])
        out += _table(["objects:", "COUNT", "SIZE"], rows, right={1, 2})  # the section's name heads its rows
    tail = []
    left = st.get("leftovers")
    if isinstance(left, dict) and left.get("count"):
        tail.append(("leftovers", f"{_plural(int(left['count']), 'temporary file or incomplete upload')} of "
                                  f"interrupted writes ({human_size(int(left.get('bytes', 0)))}); 'snapstore gc' "
                                  "removes them once older than its grace period"))
    req = st.get("requests")
    n_requests = None
    if isinstance(req, dict):
        counts = req.get("requests", req)
        if isinstance(counts, dict):
            n_requests = sum(v for v in counts.values() if isinstance(v, int))
            text = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"
            down = req.get("bytes_down")
            extra = f", {human_size(down)} read" if isinstance(down, int) and down else ""
            tail.append(("requests", f"{text} ({n_requests} total, made by this command{extra})"))
    cost = st.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("storage_per_month"), (int, float)):
        text = f"{_usd(cost['storage_per_month'])}/month to store {human_size(stored)}"
        if isinstance(cost.get("requests"), (int, float)):
            text += f"; {_usd(cost['requests'])} for "
            text += f"this command's {n_requests} requests" if n_requests is not None else "the requests"
        tail.append(("cost estimate", text))
        if isinstance(cost.get("prices"), dict):
            source = "S3 Standard list prices, us-east-1" + (", with the prices given" if prices else "")
            tail.append(("prices", f"{_prices_text(cost['prices'])} ({source})"))
    if tail:
        out += _kv(tail, width)
    _write(out)


_VERIFY_CODES = (("corrupt", 1), ("missing", 2))


def _problem_exit_code(code: str) -> int:
    c = str(code).lower()
    for prefix, n in _VERIFY_CODES:
        if c.startswith(prefix):
            return n
    return 3


def _problem_dict(p) -> dict:
    return {"code": getattr(p, "code", None), "key": getattr(p, "key", None), "message": getattr(p, "message", str(p))}


@cli.command("verify")
@click.option("--read-data", is_flag=True, help="Also read and check every pack (slower).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Count the warnings by kind instead of listing each "
              "(errors are always listed).")
@click.option("--accept-missing", is_flag=True,
              help="Put manifests deleted outside snapstore (missing-manifest errors) on record as removed: "
                   "their checkpoints are lost; later runs of verify pass.")
@click.pass_context
def verify_cmd(ctx, read_data, as_json, quiet, accept_missing):
    """Check the repository's integrity.

    Exit status: 0 no errors (warnings allowed); 1 corrupt objects; 2 missing objects or dangling
    references; 3 other errors. With several kinds the smallest code is used.

    Warnings are what a later 'snapstore gc' reclaims: leftovers of crashes or interrupted
    operations, and after a gc with a grace period the packs it repacked (retired-pack).
    """
    mgr = _state(ctx).manager()
    if not hasattr(mgr, "verify"):
        raise CommandError("this snapstore version cannot verify repositories (CheckpointManager.verify)", 1)
    progress = _Progress(not as_json)
    kwargs = {}
    if progress.tty:
        kwargs["progress"] = lambda phase, done, total: progress.update(f"verifying {phase}: {done}/{total}")
    try:
        if accept_missing:
            kwargs["accept_missing"] = True
        report = mgr.verify(read_data=read_data, **kwargs)
    finally:
        progress.clear()
    errors = list(getattr(report, "errors", []) or [])
    warnings = list(getattr(report, "warnings", []) or [])
    checked = dict(getattr(report, "checked", {}) or {})
    code = min((_problem_exit_code(p.code) for p in errors), default=0)
    if as_json:
        _emit_json({"ok": not errors, "exit_code": code, "checked": checked,
                    "errors": [_problem_dict(p) for p in errors], "warnings": [_problem_dict(p) for p in warnings]})
    else:
        lines = [f"error: {p.code}: {p.key}: {p.message}\n" for p in errors]
        if quiet:
            lines += [f"warning: {c}: {n}\n" for c, n in Counter(p.code for p in warnings).items()]
        else:
            lines += [f"warning: {p.code}: {p.key}: {p.message}\n" for p in warnings]
        what = ", ".join(f"{v} {k[:-1] if v == 1 and k.endswith('s') else k}" for k, v in checked.items()) or "nothing"
        status = "OK" if not errors else "FAILED"
        lines.append(f"{status}: checked {what}; {len(errors)} error(s), {len(warnings)} warning(s)\n")
        _write("".join(lines))
    if code:
        ctx.exit(code)



# ------------------------------------------------------------------------------------------------
# serve (issue 12: the HTTP service, snapstore.server; needs the "server" extra)

@cli.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=str),
              help="Read the bearer token from this file [default: $SNAPSTORE_TOKEN].")
@click.option("--no-auth", is_flag=True, help="Serve without a token (only on a loopback address).")
@click.option("--max-body", "max_body", type=SIZE, default="64M", show_default=True,
              help="Largest request body; larger ones get 413.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow browser calls from this origin (repeatable) [default: CORS off].")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
@click.pass_context
def serve_cmd(ctx, host, port, token_file, no_auth, max_body, cors_origins, log_level):
    """Serve the repository over HTTP: the REST API and a page to browse runs at /.

    Every API request needs 'Authorization: Bearer TOKEN' ($SNAPSTORE_TOKEN or --token-file)
    unless the server listens on loopback and --no-auth is given. The OpenAPI document is at
    /openapi.json (and in docs/openapi.json).
    """
    try:
        from .server import ServerSettings, resolve_token, serve
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise CommandError(f"snapstore serve needs the server extra (pip install 'snapstore[server]'): {e}", 2)
    token = resolve_token(host, no_auth=no_auth, token_file=token_file)
    settings = ServerSettings(token=token, max_body_bytes=max_body, cors_origins=tuple(cors_origins))
    location = _state(ctx).location
    probe_store(location)  # an unreachable S3 endpoint: one clear error and exit 1, before listening
    _write(f"snapstore: serving {location} on http://{host}:{port}/ "
           f"({'no authentication' if token is None else 'bearer token required'})\n", err=True)
    serve(location, host=host, port=port, settings=settings, log_level=log_level)

# ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    """Console entry point (``snapstore``)."""
    try:
        cli.main(args=argv, prog_name="snapstore")
    except KeyboardInterrupt:  # during argument parsing or teardown
        sys.exit(130)


if __name__ == "__main__":
    main()
