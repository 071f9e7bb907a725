"""The ``snapstore`` command line: inspect and manage a checkpoint repository.

Usage: ``snapstore [--repo PATH_OR_URL] COMMAND ...`` (``--repo`` defaults to ``$SNAPSTORE_URL``,
else ``./.snapstore``). Commands::

    init      create a repository (explicit settings)
    import    replay a trajectory file as one checkpoint per turn (resumable)
    runs      list run ids
    list      list a run's checkpoints
    show      one checkpoint's summary (not its messages)
    export    a checkpoint's message list as JSON (stdout or -o FILE)
    rollback  make an earlier checkpoint the run's head again
    fork      start a new run at a checkpoint
    delete    delete a checkpoint or a whole run
    prune     apply a retention policy (--keep-last / --older-than)
    stats     repository size, dedup ratio and object counts
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
import os
import re
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from . import __version__
from .api import CheckpointManager
from .errors import InvalidInputError, RepositoryError, RunNotFound, SnapstoreError
from .importers import FORMATS, load_trajectory

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
    """Write to stdout/stderr as bytes (flushing the text layer first to keep the order)."""
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


# ------------------------------------------------------------------------------------------------
# parameter types

_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", re.I)
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``3600``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (or combinations like ``1h30m``).

    Raises:
        InvalidInputError: not a duration.
    """
    s = str(text).strip().lower()
    pos, total, parts = 0, 0.0, 0
    while pos < len(s):
        m = _DURATION_RE.match(s, pos)
        if not m or (m.group(2) == "" and m.end() != len(s)):
            raise InvalidInputError(
                f"invalid duration {text!r} (expected seconds or a number with a unit s/m/h/d/w, e.g. 90s, 12h, 7d)")
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        parts += 1
        pos = m.end()
        while pos < len(s) and s[pos] == " ":
            pos += 1
    if parts == 0:
        raise InvalidInputError(f"invalid duration {text!r} (expected e.g. 3600, 90s, 30m, 12h, 7d, 2w)")
    return timedelta(seconds=total)


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


class _State:
    def __init__(self, location: str):
        self.location = location
        self._mgr: CheckpointManager | None = None

    def manager(self, create: bool = False) -> CheckpointManager:
        """The checkpoint manager (repository must exist unless ``create``)."""
        if self._mgr is None:
            self._mgr = CheckpointManager(self.location, create=create)
            click.get_current_context().find_root().call_on_close(self._mgr.close)
        return self._mgr


def _state(ctx: click.Context) -> _State:
    return ctx.find_object(_State)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--repo", metavar="PATH_OR_URL", envvar="SNAPSTORE_URL", default=None,
              help="Repository: a directory, file:///path, s3://BUCKET/PREFIX or memory://. "
                   "[default: $SNAPSTORE_URL, else ./.snapstore]")
@click.version_option(__version__, "--version", prog_name="snapstore", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, repo: str | None):
    """Content-addressed, deduplicated storage for AI-agent checkpoints.

    Exit status: 0 ok, 1 failure (unknown run/checkpoint, conflict, store error), 2 bad usage or
    bad input, 130 interrupted; see 'snapstore verify --help' for verify's codes.
    """
    ctx.obj = _State(repo or DEFAULT_REPO)


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
@click.pass_context
def init_cmd(ctx, **settings):
    """Create a repository at --repo (fails if one exists).

    Settings are fixed at creation; options not given keep their defaults.
    """
    from .repository import Repository
    from .stores import open_store

    settings = {k: v for k, v in settings.items() if v is not None}
    location = _state(ctx).location
    store = open_store(location)
    try:
        repo = Repository.init(store, **settings)
        cfg = repo.config
        _write(f"initialized snapstore repository at {store.url} (id {cfg.repo_id})\n")
        if settings:
            _write("".join(f"  {k} = {getattr(cfg, k)}\n" for k in settings))
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# import

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


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--run", "run_prefix", metavar="ID",
              help="Run id (default: the file's stem). Files with several conversations get one run per "
                   "conversation, named ID/NAME.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), help="Trajectory format (default: detect).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line and no summary on stderr.")
@click.pass_context
def import_cmd(ctx, file, run_prefix, fmt, as_json, quiet):
    """Replay a trajectory FILE as one checkpoint per agent turn.

    Resumable: if a run already holds a prefix of the file's checkpoints, importing again saves only
    the missing ones. A run whose latest checkpoint matches none of the file's is left untouched
    (error).
    """
    from .repository import Repository
    from .stores import open_store

    t0 = time.monotonic()
    progress = _Progress(not quiet)
    fmt_name, conversations = load_trajectory(file, format=fmt)
    prefix = run_prefix if run_prefix is not None else Path(file).stem
    if prefix == "":
        raise CommandError("run id must not be empty", 2)

    st = _state(ctx)
    store = open_store(st.location)
    created = False
    try:
        Repository.open(store, create=False)
    except RepositoryError:
        Repository.init(store, exist_ok=True)
        created = True
    except BaseException:
        store.close()
        raise
    st._mgr = mgr = CheckpointManager(store)
    ctx.find_root().call_on_close(mgr.close)
    if created and not quiet:
        _write(f"initialized new snapstore repository at {store.url}\n", err=True)

    before = mgr.store.stats.snapshot()
    total_cps = sum(len(c.checkpoints) for c in conversations)
    saved = skipped = logical = 0
    done = 0
    per_run = []
    try:
        for ci, conv in enumerate(conversations):
            run = f"{prefix}/{conv.name}" if conv.name else prefix
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
                mgr.save(run, cps[i], step=i)
                logical += _message_sizes(cps[i], sizes)
                saved += 1
                done += 1
            per_run.append({"run": run, "checkpoints": len(cps), "saved": len(cps) - start, "skipped": start})
    finally:
        progress.clear()

    used = mgr.store.stats.since(before)
    elapsed = time.monotonic() - t0
    summary = {
        "file": file, "format": fmt_name, "conversations": len(conversations), "runs": per_run,
        "saved": saved, "skipped": skipped, "logical_bytes": logical, "bytes_written": used.bytes_up,
        "bytes_read": used.bytes_down, "requests": dict(used.counts), "elapsed_s": round(elapsed, 3),
    }
    if as_json:
        _emit_json(summary)
    if quiet:
        return
    req = ", ".join(f"{k} {v}" for k, v in used.counts.items() if v) or "none"
    runs_text = per_run[0]["run"] if len(per_run) == 1 else f"{len(per_run)} runs under {prefix}/"
    ratio = f" ({logical / used.bytes_up:.1f}x smaller)" if used.bytes_up and saved else ""
    _write(f"imported {file} ({fmt_name}) into {runs_text}\n" + _kv([
        ("  conversations", str(len(conversations))),
        ("  checkpoints", f"{saved} saved, {skipped} already present"),
        ("  logical bytes", f"{human_size(logical)} ({logical})"),
        ("  bytes written", f"{human_size(used.bytes_up)} ({used.bytes_up}){ratio}"),
        ("  requests", f"{req} ({used.total()} total)"),
        ("  elapsed", f"{elapsed:.2f} s"),
    ]), err=True)


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
@click.option("-n", "--limit", type=click.IntRange(min=1), help="At most N checkpoints (newest first).")
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
@click.pass_context
def export_cmd(ctx, run, checkpoint, output):
    """Print a checkpoint's message list as JSON, exactly as saved (nothing else on stdout)."""
    cp = _get(_state(ctx).manager(), run, checkpoint)
    data = _json_bytes(cp.messages)
    if output is None or output == "-":
        tty = False
        try:
            tty = sys.stdout.isatty()
        except (AttributeError, ValueError):
            pass
        _write(data + (b"\n" if tty else b""))
        return
    tmp = f"{output}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, output)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _write(f"wrote {cp.message_count} messages of {run} checkpoint {cp.id} to {output}\n", err=True)


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
    """Start NEW_RUN at CHECKPOINT of RUN (no data is copied)."""
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
        if not click.confirm(f"Delete run {run!r} and its {len(items)} checkpoint(s)?", default=False, err=True):
            raise CommandError("not deleted", 1)
    mgr.delete(run)
    _write(f"deleted run {run}\n")


@cli.command("prune")
@click.option("--keep-last", type=click.IntRange(min=0), metavar="N",
              help="Always keep the N newest checkpoints of each run.")
@click.option("--older-than", type=DURATION, metavar="DURATION",
              help="Delete checkpoints older than this: seconds or 90s, 30m, 12h, 7d, 2w.")
@click.option("--run", "run_id", metavar="RUN", help="Only this run (default: every run).")
@click.option("-n", "--dry-run", is_flag=True, help="Only report what would be deleted.")
@click.option("--json", "as_json", is_flag=True, help="Print the pruned checkpoints as JSON.")
@click.pass_context
def prune_cmd(ctx, keep_last, older_than, run_id, dry_run, as_json):
    """Delete checkpoints by retention policy.

    A checkpoint is kept if it is among the --keep-last newest of its run or younger than
    --older-than; everything else goes. Deleting every checkpoint of a run deletes the run. Unused
    data is reclaimed by garbage collection, not here.
    """
    if keep_last is None and older_than is None:
        raise click.UsageError("give --keep-last and/or --older-than")
    gone = _state(ctx).manager().prune(older_than=older_than, keep_last=keep_last, run_id=run_id, dry_run=dry_run)
    now = datetime.now(timezone.utc)
    if as_json:
        out = []
        for s in gone:
            d = _summary_dict(s)
            d["reason"] = _prune_reason(s, now, older_than, keep_last)
            out.append(d)
        _emit_json({"dry_run": dry_run, "pruned": out})
        return
    verb = "would delete" if dry_run else "deleted"
    lines = [f"{verb} {s.run_id} {s.id} (seq {s.seq}, created {_iso(s.created_at)}): "
             f"{_prune_reason(s, now, older_than, keep_last)}\n" for s in gone]
    runs = len({s.run_id for s in gone})
    lines.append(f"{verb} {len(gone)} checkpoint(s) from {runs} run(s)\n" if gone else "nothing to prune\n")
    _write("".join(lines))


def _prune_reason(s, now: datetime, older_than: timedelta | None, keep_last: int | None) -> str:
    parts = []
    if older_than is not None:
        age = (now - s.created_at).total_seconds()
        parts.append(f"older than {_human_duration(older_than.total_seconds())} (age {_human_duration(age)})")
    if keep_last is not None:
        parts.append(f"not among the {keep_last} newest of its run" if keep_last else "--keep-last 0 keeps none")
    return " and ".join(parts)


# ------------------------------------------------------------------------------------------------
# repository-wide

@cli.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.pass_context
def stats_cmd(ctx, as_json):
    """Repository size, deduplication ratio and object counts."""
    mgr = _state(ctx).manager()
    if not hasattr(mgr, "stats"):
        raise CommandError("this snapstore version has no repository statistics (CheckpointManager.stats)", 1)
    st = mgr.stats()
    if as_json:
        _emit_json(st)
        return
    logical, stored = int(st.get("logical_bytes", 0)), int(st.get("stored_bytes", 0))
    ratio = st.get("ratio")
    pairs = [("runs", str(st.get("runs", 0))), ("checkpoints", str(st.get("checkpoints", 0))),
             ("logical size", f"{human_size(logical)} ({logical} bytes)"),
             ("stored size", f"{human_size(stored)} ({stored} bytes)"),
             ("ratio", f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "-")]
    width = max(len(k) for k in [k for k, _ in pairs] + ["S3 estimate"]) + 1
    out = _kv(pairs, width)
    objects = st.get("objects") or {}
    if objects:
        rows = [[f"  {cat}", str(v.get("count", 0)), human_size(v.get("bytes", 0))] for cat, v in objects.items()]
        total_n = sum(int(v.get("count", 0)) for v in objects.values())
        total_b = sum(int(v.get("bytes", 0)) for v in objects.values())
        rows.append(["  total", str(total_n), human_size(total_b)])
        out += "objects:\n" + "".join(_table(["", "COUNT", "SIZE"], rows, right={1, 2}).splitlines(True)[1:])
    tail = []
    req = st.get("requests")
    if isinstance(req, dict):
        counts = req.get("requests", req)
        if isinstance(counts, dict):
            text = ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"
            tail.append(("requests", f"{text} (this command)"))
    cost = st.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("storage_per_month"), (int, float)):
        usd = cost["storage_per_month"]
        tail.append(("S3 estimate", f"{'< $0.0001' if usd < 0.0001 else f'${usd:.4f}'}/month storage "
                                    "at S3 Standard prices"))
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
@click.pass_context
def verify_cmd(ctx, read_data, as_json):
    """Check the repository's integrity.

    Exit status: 0 no errors (warnings allowed); 1 corrupt objects; 2 missing objects or dangling
    references; 3 other errors. With several kinds the smallest code is used.
    """
    mgr = _state(ctx).manager()
    if not hasattr(mgr, "verify"):
        raise CommandError("this snapstore version cannot verify repositories (CheckpointManager.verify)", 1)
    progress = _Progress(not as_json)
    kwargs = {}
    if progress.tty:
        kwargs["progress"] = lambda phase, done, total: progress.update(f"verifying {phase}: {done}/{total}")
    try:
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
        lines += [f"warning: {p.code}: {p.key}: {p.message}\n" for p in warnings]
        what = ", ".join(f"{v} {k}" for k, v in checked.items()) or "nothing"
        status = "OK" if not errors else "FAILED"
        lines.append(f"{status}: checked {what}; {len(errors)} error(s), {len(warnings)} warning(s)\n")
        _write("".join(lines))
    if code:
        ctx.exit(code)


# ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    """Console entry point (``snapstore``)."""
    try:
        cli.main(args=argv, prog_name="snapstore")
    except KeyboardInterrupt:  # during argument parsing or teardown
        sys.exit(130)


if __name__ == "__main__":
    main()
