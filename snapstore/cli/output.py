"""What the command line prints, and how: one-line errors, byte-exact writes to stdout/stderr, the
activity and progress lines of an interactive terminal, tables, key/value blocks, JSON, and the
human spellings of sizes, durations, times and prices.

Every write goes through :func:`write`, which clears the activity line first; machine-readable
output (JSON, ``export``) goes to stdout and nothing else does.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from datetime import datetime, timezone

import click

__all__ = ["Activity", "CommandError", "Interrupted", "Progress", "plan_progress", "current_activity", "emit_json", "human_duration",
           "human_size", "is_s3", "iso_time", "json_bytes", "kv_text", "plural", "prices_text", "request_cost",
           "short", "stderr_tty", "summary_json", "table_text", "usd", "write"]


class CommandError(click.ClickException):
    """A failure reported as one line ``snapstore: error: <message>`` with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        write(f"snapstore: error: {self.format_message()}\n", err=True)


class Interrupted(click.ClickException):
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


def write(text_or_bytes, err: bool = False) -> None:
    """Write to stdout/stderr as bytes (flushing the text layer first to keep the order); clears
    the activity line (:class:`Activity`) first."""
    with _OUTPUT_LOCK:
        activity = _ACTIVITY[0]
        if activity is not None:
            activity.clear_locked()
            activity.last_output = time.monotonic()
        _raw_write(text_or_bytes, err)


_OUTPUT_LOCK = threading.RLock()
_ACTIVITY: list = [None]  # the running command's Activity, if any


def stdin_interactive() -> bool:
    """True if stdin is an interactive terminal (``delete RUN`` and a prune that deletes whole
    runs ask for confirmation only there)."""
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def current_activity() -> "Activity | None":
    """The running command's activity line (to :meth:`Activity.suspend` it around a prompt), or None."""
    return _ACTIVITY[0]


def stderr_tty() -> bool:
    """True if stderr is an interactive terminal (progress lines are shown only there)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Activity:
    """A status line for any command that runs longer than ``delay`` seconds without printing:
    ``snapstore COMMAND: working... N s`` on an interactive stderr, redrawn every quarter second and
    cleared before anything else is written and when the command ends. Commands with a progress
    line of their own (:class:`Progress`) print often enough that it never shows.

    Args:
        label: the command's name, shown in the line.
    """

    delay = 1.0

    def __init__(self, label: str):
        self.label = label
        self.started = self.last_output = time.monotonic()
        self.shown = False
        self.suspended = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Activity":
        """Make this the running command's line (:func:`current_activity`) and, on an interactive
        stderr, start the thread that draws it; returns ``self``."""
        _ACTIVITY[0] = self
        if stderr_tty():
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
        """Erase the line if it is shown; the caller holds the output lock (as :func:`write` does)."""
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
        """Show the line again after :meth:`suspend` (after another ``delay`` without output)."""
        with _OUTPUT_LOCK:
            self.suspended = False
            self.last_output = time.monotonic()

    def stop(self) -> None:
        """End the line for good: stop the thread (waits up to 2 s) and erase the line."""
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


def restore_command(runs: str, repo: str | None) -> str:
    """The ``snapstore restore`` command line a user should run for ``runs`` (space-separated run
    ids), naming ``--repo`` when the user gave one (or ``$SNAPSTORE_URL`` did), so that it can be
    pasted as it is; ``repo`` None: the default repository, no ``--repo``."""
    import shlex

    where = f"--repo {shlex.quote(repo)} " if repo else ""
    return f"snapstore {where}restore {runs}"


def json_bytes(value, indent: int | None = None) -> bytes:
    """``json.dumps(value, ensure_ascii=False)`` as UTF-8; values holding lone surrogates fall back
    to ``ensure_ascii=True`` (escaped ``\\udXXX``, still valid JSON that decodes to the same value)."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=indent).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, indent=indent).encode("ascii")


def emit_json(value) -> None:
    """Print ``value`` as indented JSON (:func:`json_bytes`, indent 2) and a newline on stdout."""
    write(json_bytes(value, indent=2) + b"\n")


def iso_time(dt: datetime | None, micro: bool = False) -> str | None:
    """``2026-01-02T03:04:05Z`` (UTC; with ``micro``, microseconds ``.000123`` before the Z); None for None."""
    if dt is None:
        return None
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def summary_json(s) -> dict:
    """A checkpoint summary (a :class:`~snapstore.CheckpointSummary` or :class:`~snapstore.Checkpoint`)
    as the JSON object ``list --json``, ``show --json`` and ``prune --json`` print: ids, ``seq``,
    ``step``, ``created_at`` (ISO 8601 UTC with microseconds), sizes and the user fields."""
    d = {"id": s.id, "run_id": s.run_id, "seq": s.seq, "step": s.step, "created_at": iso_time(s.created_at, True),
         "parent_id": s.parent_id, "message_count": s.message_count, "message_bytes": s.message_bytes,
         "token_usage": s.token_usage, "metrics": s.metrics, "agent_id": s.agent_id, "status": s.status,
         "metadata": s.metadata}
    return d


def human_size(n: int | float) -> str:
    """A byte count in binary units: ``1536`` -> ``1.5 KiB``, ``12`` -> ``12 B`` (up to TiB)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float) -> str:
    """Whole seconds in the units ``--older-than`` takes: ``90`` -> ``1m`` (minutes are the last
    unit shown), ``93784`` -> ``1d2h3m``, ``45`` -> ``45s``."""
    seconds = int(seconds)
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            q, r = divmod(seconds, size)
            return f"{q}{unit}" if r == 0 or unit in ("m",) else f"{q}{unit}{human_duration(r)}"
    return f"{seconds}s"


def short(value) -> str:
    """One-line rendering of a user field (JSON for structured values, '-' for None)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
        return ", ".join(f"{k}={short(v)}" for k, v in value.items())
    return json_bytes(value).decode("utf-8", "surrogateescape")


def table_text(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """A plain-text table: ``headers`` then ``rows`` (lists of cell strings, as many as headers),
    columns two blanks apart, the columns numbered in ``right`` right-aligned; ends with a newline."""
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells):
        out = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)]
        return "  ".join(out).rstrip()
    return "\n".join([line(headers)] + [line(r) for r in rows]) + "\n"


def kv_text(pairs: list[tuple[str, str]], width: int | None = None) -> str:
    """``key:  value`` lines, one per pair, the values aligned at ``width`` characters (default: the
    longest key plus its colon)."""
    width = width or max(len(k) for k, _ in pairs) + 1
    return "".join(f"{(k + ':').ljust(width)}  {v}\n" for k, v in pairs)


def usd(x: float) -> str:
    """US dollars with two significant digits below one cent: ``$1.50``, ``$0.00022``, ``$0``
    (only for 0 itself); below a billionth of a dollar in scientific notation (``$3.2e-12``), so
    that a small cost never prints as zero."""
    x = float(x)
    if x == 0:
        return "$0"
    if abs(x) >= 0.01:
        return f"${x:,.2f}"
    decimals = 1 - math.floor(math.log10(abs(x)))
    if decimals > 10:
        return f"${x:.1e}"
    return f"${x:.{decimals}f}"


def _price(x: float) -> str:
    """A price without trailing zeros: ``$0.0004``, ``$0.023``, ``$0``."""
    text = f"{float(x):.10f}".rstrip("0").rstrip(".")
    return f"${text}"


_REQUEST_KINDS = ("PUT", "LIST", "GET", "HEAD", "DELETE")


def prices_text(prices: dict, storage: bool = True) -> str:
    """Prices (``{"gb_month": usd, "PUT": usd per request, ...}``) as one line, storage first unless
    not ``storage``: ``$0.023/GB-month; PUT/LIST $0.005, GET/HEAD $0.0004, DELETE $0 per 1,000 requests``."""
    groups: dict[float, list[str]] = {}
    for k in _REQUEST_KINDS:
        if isinstance(prices.get(k), (int, float)):
            groups.setdefault(round(prices[k] * 1000, 12), []).append(k)
    req = ", ".join(f"{'/'.join(ks)} {_price(p)}" for p, ks in groups.items()) + " per 1,000 requests"
    if storage and isinstance(prices.get("gb_month"), (int, float)):
        return f"storage {_price(prices['gb_month'])}/GB-month; {req}"
    return req


def is_s3(store) -> bool:
    """Whether ``store`` (an ObjectStore) is an S3 bucket (its ``url`` starts with ``s3://``)."""
    return str(getattr(store, "url", "")).startswith("s3://")


def request_cost(counts: dict) -> dict:
    """``{"requests": usd, "prices": ...}`` for request counts at S3 Standard list prices."""
    from ..maintenance.stats import estimate_cost
    return estimate_cost(0, counts)


class Progress:
    """A single updating progress line on an interactive stderr; sparse lines otherwise.

    Args:
        enabled: False makes every call a no-op (``--quiet``, ``--json``).
    Attributes:
        tty: whether the line is redrawn in place (stderr is a terminal); off a terminal (a log
            file, a pipe) no carriage return is written: one line per phase at most, the first
            after 5 s of work (short commands stay quiet). A text's phase is what comes before
            its first ``": "`` (``"gc repack: 1/2"`` is phase ``gc repack``).
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        try:
            self.tty = enabled and sys.stderr.isatty()
        except (AttributeError, ValueError):
            self.tty = False
        self.last = 0.0
        self.dirty = False
        self.started: float | None = None  # the first update (off a terminal)
        self.phase: str | None = None  # the phase of the last line printed off a terminal

    def update(self, text: str, force: bool = False) -> None:
        """Show ``text`` (one line, no newline) as the progress now: on a terminal redrawn at
        most every 0.1 s unless ``force``; elsewhere printed as a line only when its phase is not
        the last printed one, once 5 s passed since the first update (or ``force``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if force or now - self.last >= 0.1:
                self.last = now
                write("\r\x1b[K" + text, err=True)
                self.dirty = True
        else:
            if self.started is None:
                self.started = now
            phase = text.split(": ", 1)[0]
            if phase == self.phase or not (force or now - self.started >= 5.0):
                return  # one line per phase; the first only after 5 s of work: short commands stay quiet
            self.phase, self.last = phase, now
            write(text + "\n", err=True)

    def clear(self) -> None:
        """Erase the progress line if one is shown (before the command's own output)."""
        if self.dirty:
            write("\r\x1b[K", err=True)
            self.dirty = False


def plural(n: int, word: str) -> str:
    """``1 pack``, ``2 packs``: ``n`` and ``word``, with an ``s`` unless ``n`` is 1."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def plan_progress(progress: Progress, label: str = "gc --plan"):
    """A ``progress(phase, done, total)`` for a partitioned job: partitions done and, from the
    rate so far, the time left of the phase."""
    import time as _time
    started: dict = {}

    def show(phase, done, total):
        t0 = started.setdefault(phase, _time.monotonic())
        el = _time.monotonic() - t0
        left = f", about {human_duration(el / done * (total - done))} left" if 0 < done < total and el > 0 else ""
        progress.update(f"{label} {phase}: {done}/{total} partitions{left}", force=done == total)
    return show
