"""Removal records: which log positions of a run were removed on purpose (docs/format.md §16).

A run's log may have gaps: retention, rollbacks and deletes remove records, and GC removes the
records nothing needs. A removal record, written create-only *before* the records it names are
deleted, says which positions went, so that ``verify`` can tell such a gap from a manifest lost
to a disk error, an operator's mistake or a lifecycle rule (a missing manifest of a checkpoint
that was never removed is an error). Pure encoding here; no I/O.

Key: ``runs/<R>/x/<16 hex of 2^64-1-hi>.<8 hex random>``, ``hi`` the highest position it names.
Object: envelope magic ``SNRM``, version 1, body the compact JSON ``{"ranges": [[lo, hi], ...]}``:
inclusive ranges of positions, sorted, disjoint and not adjacent, at most :data:`MAX_RANGES`.
"""

from __future__ import annotations

import json
import os

from ..errors import IntegrityError
from .codec import loads_exact, open_envelope, seal_envelope
from .keys import SEQ_MAX

REMOVALS_MAGIC = b"SNRM"
MAX_RANGES = 1 << 16
"""Ranges one removal record may hold (a writer splits a larger set into several records)."""
BODY_LIMIT = 4 << 20
"""Bytes a removal record's body may decompress to (readers refuse more: IntegrityError)."""


def removals_prefix(run_key: str) -> str:
    """``runs/<run key>/x/``: the run's removal records."""
    return f"runs/{run_key}/x/"


def removals_key(run_key: str, hi: int) -> str:
    """A new removal record's key for a record whose highest position is ``hi`` (random suffix,
    so that concurrent removers never collide)."""
    return f"{removals_prefix(run_key)}{SEQ_MAX - hi:016x}.{os.urandom(4).hex()}"


def is_removals_key(key: str) -> bool:
    """True if ``key`` is shaped like a removal record's key (``runs/<R>/x/<16 hex>.<8 hex>``)."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != "runs" or parts[2] != "x":
        return False
    name = parts[3]
    return (len(name) == 25 and name[16] == "." and not name[:16].strip("0123456789abcdef")
            and not name[17:].strip("0123456789abcdef"))


def to_ranges(positions) -> list[list[int]]:
    """Sorted, merged inclusive ranges ``[[lo, hi], ...]`` of an iterable of positions."""
    out: list[list[int]] = []
    for p in sorted(set(positions)):
        if out and p == out[-1][1] + 1:
            out[-1][1] = p
        else:
            out.append([p, p])
    return out


def merge_ranges(ranges) -> list[list[int]]:
    """Sorted, merged inclusive ranges covering every ``[lo, hi]`` of ``ranges``."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def encode_removals(ranges: list[list[int]]) -> bytes:
    """Seal ``ranges`` (as :func:`merge_ranges` returns them, at most :data:`MAX_RANGES`)."""
    if len(ranges) > MAX_RANGES:
        raise ValueError(f"a removal record holds at most {MAX_RANGES} ranges, got {len(ranges)}")
    body = json.dumps({"ranges": ranges}, separators=(",", ":")).encode()
    return seal_envelope(REMOVALS_MAGIC, 1, body)


def encode_removal_records(ranges: list[list[int]]) -> list[tuple[int, bytes]]:
    """Seal merged ``ranges`` as removal records of at most :data:`MAX_RANGES` ranges each:
    ``[(highest position, object bytes), ...]``."""
    return [(part[-1][1], encode_removals(part))
            for part in (ranges[i:i + MAX_RANGES] for i in range(0, len(ranges), MAX_RANGES))]


def decode_removals(key: str, data: bytes) -> list[list[int]]:
    """Open a removal record; return its ranges.

    Raises:
        IntegrityError: a corrupt record, or ranges that are not sorted disjoint ``[lo, hi]``
            pairs of positions (names ``key``).
    """
    _, body = open_envelope(key, REMOVALS_MAGIC, data, limit=BODY_LIMIT)
    try:
        d = loads_exact(body, 3)
        ranges = d["ranges"]
        if not isinstance(ranges, list) or len(ranges) > MAX_RANGES:
            raise ValueError("ranges is not a list of at most 65,536 pairs")
        prev = -2
        for r in ranges:
            if not (isinstance(r, list) and len(r) == 2 and all(type(x) is int for x in r)):
                raise ValueError("a range is not a pair of integers")
            lo, hi = r
            if not (prev + 1 < lo <= hi < SEQ_MAX):
                raise ValueError("ranges are not sorted, disjoint positions")
            prev = hi
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed removal record: {e}") from None
    return ranges
