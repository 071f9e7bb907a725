"""Segments: the short list of packs that hold a run's data, kept by writer-side tiered compaction.

Format 2 (docs/format.md §10). Every checkpoint (and rollback) record carries ``segs``: packs
that together hold every entry the run has written, so a reader fetches them all in one parallel
wave instead of following per-save location hints pack by pack. A *level-0* segment is a per-save
pack; a level-L segment (a *tier pack*) is a copy of ``fanout`` level-(L-1) segments merged into one
pack. Appending a segment works like a counter in base ``fanout``: when the last ``fanout``
segments have the same level they merge into one of the next level (cascading), so a run of n
saves has at most ``(fanout - 1) * (log_fanout(n) + 1)`` segments and each byte is rewritten about
``log_fanout(n)`` times. A *foreign* segment (another run's pack) is read but never merged or
deleted by this run's writers; writers of this version list none (a fork copies what it needs).

Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IntegrityError, InvalidInputError
from .ids import PACK_ID_BYTES

MAX_SEGS = 512
"""Most segments a record may list (a reader refuses more: bounded memory for hostile input)."""

MAX_LEVEL = 35
MAX_OPEN_SEGS = 96
"""A writer whose segment list would grow beyond this (foreign segments do not merge) merges the
whole list into one segment. 96: fanout 16 (the default of new repositories) lists up to 15
segments per level, 90 at 16 million saves (fanout 4: at most 3 per level)."""
_LEVELS = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True, slots=True)
class Seg:
    """One segment: ``pack`` (8-byte pack id), ``level`` (0 = a per-save pack), ``foreign``
    (another run's pack: never merged or deleted by this run's writers)."""

    pack: bytes
    level: int
    foreign: bool = False


def encode_segs(segs: list[Seg]) -> str:
    """Encode as one string: per segment 16 lowercase hex digits of the pack id, then the level as
    one character of ``0-9a-z``; a foreign segment's level character is upper case (``A-Z`` for
    levels 10-35, and ``!``-prefixed for levels 0-9)."""
    out = []
    for s in segs:
        c = _LEVELS[s.level]
        if s.foreign:
            c = c.upper() if c.isalpha() else "!" + c
        out.append(s.pack.hex() + c)
    return "".join(out)


def decode_segs(key: str, text: object) -> list[Seg]:
    """Inverse of :func:`encode_segs`.

    Raises:
        IntegrityError: not a string of valid segments, or more than :data:`MAX_SEGS` (names ``key``).
    """
    if not isinstance(text, str) or len(text) > MAX_SEGS * (2 * PACK_ID_BYTES + 2):
        raise IntegrityError(key, "malformed segment list")
    out: list[Seg] = []
    i, n, w = 0, len(text), 2 * PACK_ID_BYTES
    try:
        while i < n:
            pack = bytes.fromhex(text[i:i + w])
            if len(pack) != PACK_ID_BYTES:
                raise ValueError("short pack id")
            i += w
            c = text[i]
            foreign = False
            if c == "!":
                foreign = True
                i += 1
                c = text[i]
                if not c.isdigit():
                    raise ValueError(f"bad level {c!r}")
            elif c.isupper():
                foreign = True
                c = c.lower()
            if c not in _LEVELS:
                raise ValueError(f"bad level {c!r}")
            i += 1
            out.append(Seg(pack, _LEVELS.index(c), foreign))
    except (ValueError, IndexError) as e:
        raise IntegrityError(key, f"malformed segment list: {e}") from None
    if len(out) > MAX_SEGS:
        raise IntegrityError(key, f"segment list longer than {MAX_SEGS}")
    return out


@dataclass(frozen=True)
class MergePlan:
    """What appending one segment requires.

    Attributes:
        segs: the new segment list; if ``inputs`` is non-empty, the entry at index ``slot`` is a
            placeholder (pack ``b""``) for the merged pack the writer must build.
        inputs: segments to merge into one pack of level ``level``, oldest first (empty: no merge).
        level: the merged pack's level.
        slot: index of the placeholder in ``segs`` (-1 when nothing is merged).
    """

    segs: list
    inputs: list
    level: int
    slot: int


def plan_append(segs: list[Seg], new_pack: bytes | None, fanout: int) -> MergePlan:
    """Append the per-save pack ``new_pack`` (None: the save wrote no pack) to ``segs``.

    Merges cascade: if the last ``fanout`` own segments all have level L they become one segment
    of level L + 1, and so on; all inputs of the cascade go into ONE merged pack. Foreign segments
    (a fork's inherited prefix) are never inputs.

    Raises:
        InvalidInputError: ``fanout`` below 2.
    """
    if fanout < 2:
        raise InvalidInputError(f"segment fanout must be at least 2, got {fanout}")
    out = list(segs)
    if new_pack is None:
        return MergePlan(out, [], 0, -1)
    out.append(Seg(new_pack, 0))
    inputs: list[Seg] = []
    level = 0
    merged = False
    while len(out) >= fanout:
        tail = out[-fanout:]
        lv = tail[-1].level
        if any(s.foreign or s.level != lv for s in tail) or lv >= MAX_LEVEL:
            break
        # the placeholder from the previous round (if any) is the last input; expand it
        new_inputs = []
        for s in tail:
            if s.pack == b"":
                new_inputs.extend(inputs)
            else:
                new_inputs.append(s)
        inputs = new_inputs
        out = out[:-fanout] + [Seg(b"", lv + 1)]
        level = lv + 1
        merged = True
    if len(out) > MAX_OPEN_SEGS:
        # a long chain of forks piles up foreign prefixes: copy everything into one own segment
        # (the cascade's placeholder, if any, stands for its inputs; levels are the same)
        plan = _merge_all(out)
        return MergePlan(plan.segs, [x for s in out for x in (inputs if s.pack == b"" else [s])], plan.level, 0)
    if not merged:
        return MergePlan(out, [], 0, -1)
    return MergePlan(out, inputs, level, len(out) - 1)


def plan_append_bounded(segs: list[Seg], new_pack: bytes | None, limit: int) -> MergePlan:
    """Append the per-save pack ``new_pack`` (None: the save wrote no pack) to ``segs`` keeping at
    most ``limit`` own segments (docs/format.md §10, *Bounded lists*; a fork's foreign segments
    come on top, and the whole list is merged past :data:`MAX_OPEN_SEGS`, as by the counter).

    While the list has room nothing is merged. Once appending makes more than ``limit`` own
    segments, one suffix of own segments is merged into one pack: the shortest (of at least 2 segments) whose
    merged level (its highest level + 1) is at most the level of the segment before it, else
    every own segment. A segment's level is then how many times its entries were rewritten, at
    most, and levels never increase along the list.

    Raises:
        InvalidInputError: ``limit`` below 4.
    """
    if limit < 4:
        raise InvalidInputError(f"segment limit must be at least 4, got {limit}")
    out = list(segs)
    if new_pack is None:
        return MergePlan(out, [], 0, -1)
    out.append(Seg(new_pack, 0))
    if len(out) > MAX_OPEN_SEGS:  # a long chain of forks piles up foreign prefixes
        return _merge_all(out)
    first_own = max((i + 1 for i, s in enumerate(out) if s.foreign), default=0)
    if len(out) - first_own <= limit:
        return MergePlan(out, [], 0, -1)
    j = len(out) - 2
    while j > first_own:
        if max(s.level for s in out[j:]) + 1 <= out[j - 1].level:
            break
        j -= 1
    level = min(MAX_LEVEL, max(s.level for s in out[j:]) + 1)
    return MergePlan(out[:j] + [Seg(b"", level)], out[j:], level, j)


def plan_append_policy(segs: list[Seg], new_pack: bytes | None, fanout: int, limit: int = 0,
                       start: int = 0) -> MergePlan:
    """Append ``new_pack`` by the repository's merge policy (docs/format.md §10): the counter of
    ``fanout`` (:func:`plan_append`) when ``limit`` is 0; bounded lists of ``limit``
    (:func:`plan_append_bounded`) when ``start`` is 0 or the list already holds an own segment of
    level ``start`` or more; else the counter (*Bounded after a level*: a run is merged by the
    counter until it made one segment of level ``start``, about ``fanout**start`` saves).

    Raises:
        InvalidInputError: ``fanout`` below 2, or ``limit`` in 1-3.
    """
    if limit and (start == 0 or any(not s.foreign and s.level >= start for s in segs)):
        return plan_append_bounded(segs, new_pack, limit)
    return plan_append(segs, new_pack, fanout)


def _merge_all(out: list[Seg]) -> MergePlan:
    """Every segment (foreign ones included) copied into one own segment."""
    level = min(MAX_LEVEL, max(s.level for s in out) + 1)
    return MergePlan([Seg(b"", level)], list(out), level, 0)
