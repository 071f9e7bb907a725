"""Times as the format stores them: ISO-8601 UTC with microseconds and a ``Z`` suffix.

Pure functions; no I/O.
"""

from __future__ import annotations

from datetime import datetime, timezone


def format_time(dt: datetime) -> str:
    """ISO-8601 UTC with microseconds and a ``Z`` suffix."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str) -> datetime:
    """Inverse of :func:`format_time`; returns an aware UTC datetime.

    The form :func:`format_time` writes (``2026-11-29T21:18:28.581882Z``, ASCII, 27 characters)
    is read field by field; anything else goes through ``strptime``, which is what every time
    was read with before (its first call costs a fresh process about 2 ms: it imports
    ``_strptime`` and compiles its patterns). Raises ValueError for a malformed time.
    """
    if (len(s) == 27 and s.isascii() and s[4] == "-" and s[7] == "-" and s[10] == "T" and s[13] == ":"
            and s[16] == ":" and s[19] == "." and s[26] == "Z"):
        if (s[0:4] + s[5:7] + s[8:10] + s[11:13] + s[14:16] + s[17:19] + s[20:26]).isdigit():
            return datetime(int(s[0:4]), int(s[5:7]), int(s[8:10]), int(s[11:13]), int(s[14:16]), int(s[17:19]),
                            int(s[20:26]), tzinfo=timezone.utc)
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
