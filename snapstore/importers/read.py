"""Reading a trajectory file: JSON or JSON Lines, exactly (integers of any size, key order), and
refusing what would lose data (NaN/Infinity, floats that overflow, a key held twice), with one-line
errors naming the file, the line or item, and the path in it.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import InvalidInputError
from .conversation import format_path

__all__ = ["EXPECTED", "describe", "read_payload"]

EXPECTED = (
    "an agent trajectory: an OpenAI chat message list or {'messages': [...]}, a SWE-agent .traj, "
    "a mini-swe-agent .traj.json, OpenHands V0/V1 events or episodes (JSON/JSONL), a Claude Code "
    "session JSONL, a tau-bench results list, a tau2-bench results object or a ShareGPT list"
)


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


class _Overflow(ValueError):
    pass


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):
        raise _Overflow(text)
    return value


_INF = float("inf")


class _DuplicateKey(ValueError):
    """A JSON object of the text holds a key twice: ``key``, ``path`` (from the parsed value)."""

    def __init__(self, key: str, path: str):
        super().__init__(key)
        self.key, self.path = key, path


def _loads(text: str) -> Any:
    """Parse JSON text: NaN/Infinity, floats that overflow and objects holding a key twice are
    refused (:class:`_NonFinite`, :class:`_Overflow`, :class:`_DuplicateKey`); integers of any
    size are kept (the caller lifts Python's digit limit, see :func:`any_int_digits`)."""
    dups: list = []

    def pairs(items: list) -> dict:
        obj = dict(items)
        if len(obj) != len(items) and not dups:
            seen: set = set()
            key = next(k for k, _ in items if k in seen or seen.add(k))
            dups.append((key, obj))
        return obj

    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_parse_float, object_pairs_hook=pairs)
    except RecursionError:
        raise _TooDeep() from None
    if dups:
        key, obj = dups[0]
        raise _DuplicateKey(key, _path_of(value, obj))
    return value


def _path_of(value: Any, target: Any) -> tuple:
    """The path (``(3, "traj", 2)``) of the object ``target`` (by identity) inside ``value``."""
    stack: list = [(value, ())]
    while stack:
        v, p = stack.pop()
        if v is target:
            return p
        if isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())) if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))) if isinstance(x, (dict, list)))
    return ()


def _duplicate_error(where: str, line: int | None, e: _DuplicateKey) -> InvalidInputError:
    """``file: item 3: traj[2]: the object holds the key 'content' twice ...`` (``line N:`` in JSON
    Lines; the top-level object is named as such)."""
    path = e.path
    at = [] if line is None else [f"line {line}"]
    if line is None and path and isinstance(path[0], int):
        at.append(f"item {path[0]}")
        path = path[1:]
    at.append(format_path(path) or ("the top-level object" if not at else ""))
    at = [a for a in at if a]
    return InvalidInputError(
        f"{where}: {': '.join(at)}: the object holds the key {e.key!r} twice (JSON readers keep only one of "
        "the two values, so part of the file would be lost); nothing was imported")


def _syntax_error(e: json.JSONDecodeError, text: str) -> str:
    """What a JSON syntax error says, as a whole sentence (the decoder's "Unterminated string
    starting at" expects a position after it), and, when the text stops inside a value, that the
    file looks cut short."""
    msg = e.msg
    if msg.endswith(" starting at"):
        msg = msg[: -len(" at")] + " there"
    if e.msg.startswith("Unterminated string") or e.pos >= len(text.rstrip()):
        msg += " (the text ends inside a value: the file looks truncated)"
    return msg


class _TooDeep(ValueError):
    pass


def _overflow_path(value: Any) -> str:
    """The path (``history[3].metrics.cost``) of the first float in ``value`` that is infinite."""
    stack: list = [(value, ())]
    while stack:
        v, p = stack.pop()
        if type(v) is float and v in (_INF, -_INF):
            return format_path(p) or "(the value itself)"
        if isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))))
    return "?"


def _overflow_error(where: str, text: str, number: str, line: int | None) -> InvalidInputError:
    """Name the record and the path of a number too large for a float (1e400)."""
    value = json.loads(text)  # the same text, parsed without the check: infinities in place
    if isinstance(value, list) and line is None:
        for i, item in enumerate(value):
            path = _overflow_path(item)
            if path != "?":
                label = f"item {i}: {path}"
                break
        else:
            label = "?"
    else:
        label = ("" if line is None else f"line {line}: ") + _overflow_path(value)
    return InvalidInputError(
        f"{where}: {label}: the number {number[:40]} is too large for a float (it would be Infinity, "
        "which JSON and snapstore do not allow); nothing was imported")


def read_payload(where: str) -> tuple[str, Any]:
    """Read the trajectory file at ``where``: one JSON value, else JSON Lines.

    Returns:
        ``("json", value)`` or ``("jsonl", [(line_number, value), ...])`` (1-based line numbers,
        blank lines skipped).
    Raises:
        InvalidInputError: unreadable, not UTF-8, empty, not JSON (a broken JSON Lines line named
            by number), NaN/Infinity, a float that overflows or a key held twice (named by record
            and path), or nested too deeply.
    """
    try:
        with open(where, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InvalidInputError(f"{where}: cannot read trajectory file: {e.strerror or e}") from e
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{where}: not UTF-8 text (bad byte at offset {e.start})") from e
    if not text.strip(" \t\r\n"):
        raise InvalidInputError(f"{where}: empty file, expected {EXPECTED}")
    try:
        return "json", _loads(text)
    except _DuplicateKey as e:
        raise _duplicate_error(where, None, e) from None
    except _NonFinite as e:
        raise InvalidInputError(f"{where}: {e} is not a JSON value (NaN/Infinity are not allowed)") from None
    except _Overflow as e:
        raise _overflow_error(where, text, str(e), None) from None
    except _TooDeep:
        raise InvalidInputError(f"{where}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            raise InvalidInputError(
                f"{where}: invalid JSON at line {e.lineno} column {e.colno}: {_syntax_error(e, text)}") from None
    # More than one JSON value: JSON Lines. Split on "\n" only: JSON strings may hold raw U+2028 etc.
    lines: list[tuple[int, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        if not line:
            continue
        try:
            lines.append((number, _loads(line)))
        except _DuplicateKey as e:
            raise _duplicate_error(where, number, e) from None
        except _NonFinite as e:
            raise InvalidInputError(
                f"{where}: line {number}: {e} is not a JSON value (NaN/Infinity are not allowed)"
            ) from None
        except _Overflow as e:
            raise _overflow_error(where, line, str(e), number) from None
        except _TooDeep:
            raise InvalidInputError(f"{where}: line {number}: JSON nested too deeply to read") from None
        except json.JSONDecodeError as e:
            raise InvalidInputError(
                f"{where}: line {number}: invalid JSON Lines record (column {e.colno}: {_syntax_error(e, line)})"
            ) from None
    return "jsonl", lines


def describe(value: Any) -> str:
    """What a JSON value is, for an error message: ``object with keys [a, b, ...]``, ``empty list``,
    ``list of dict``, ``str``..."""
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:6])
        return f"object with keys [{keys}{', ...' if len(value) > 6 else ''}]"
    if isinstance(value, list):
        if not value:
            return "empty list"
        return f"list of {type(value[0]).__name__}"
    return type(value).__name__

