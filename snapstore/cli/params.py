"""The command line's parameter types: durations (``90s``, ``7d``, ``1h30m``) and sizes (``64K``).

``DURATION`` converts an option to a :class:`datetime.timedelta`, ``SIZE`` to a number of bytes;
a bad value is click's usage error (exit status 2) naming the option.
"""

from __future__ import annotations

import re
from datetime import timedelta

import click

from ..errors import InvalidInputError

__all__ = ["DURATION", "SIZE", "parse_duration"]


def parse_duration(text: str) -> timedelta:
    """Parse ``3600``, ``90s``, ``30m``, ``12h``, ``7d``, ``2w``, ``1y`` (or combinations like ``1h30m``).

    The syntax of :func:`snapstore.manager.retention.parse_duration` (what the library accepts), also allowing
    blanks around units (``1h 30m``, ``90 s``).

    Args:
        text: the option's text.
    Returns:
        The duration.
    Raises:
        InvalidInputError: not a duration, or too large for a timedelta.
    """
    from ..manager.retention import parse_duration as _parse

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
    """A duration option (:func:`parse_duration`); the value is a :class:`~datetime.timedelta`."""

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
    """A size option: bytes, or a number with ``K``/``M``/``G`` (binary: ``64K`` is 65536); the value is an int."""

    name = "BYTES"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        m = _SIZE_RE.match(str(value))
        if not m:
            self.fail(f"invalid size {value!r} (expected bytes, optionally with K/M/G, e.g. 65536 or 64K)", param, ctx)
        return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower() if m.group(2) else None]


DURATION = _Duration()
"""Click type of duration options (``--older-than 7d``): a :class:`~datetime.timedelta`."""
SIZE = _Size()
"""Click type of size options (``--dict-bytes 64K``): bytes, an int."""
