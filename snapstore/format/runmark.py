"""Run markers: keys under ``runmarks/`` that say, from a LIST alone, which runs are live (format 2).

Pure functions; no I/O. See ``docs/format.md`` §13. A run marker is an empty object whose key
names a run key, a log position and what the record at that position did to the run's liveness:

``runmarks/<R>.<S>.<code>[.<extra>]``

- ``<R>``: the run's key segment (§4: ``b`` + base32, or ``h`` + 32 hex digits);
- ``<S>``: 16 lowercase hex digits of ``2^64-1-seq`` (newest position first, like manifests);
- ``<code>``: ``l`` (commit: the record at ``seq`` is a checkpoint that made the run live),
  ``t`` (commit: the record at ``seq`` is a tombstone), ``il`` / ``it`` (intent: such a record
  may be being published at ``seq``), ``r`` (a rollback record may be at ``seq``: whether it
  leaves a live checkpoint depends on its target, so readers read that run's head);
- ``<extra>``: for ``l`` of a hashed run key, optionally ``n`` + the run id as lowercase unpadded
  base32 (so a long run id is read from the listing); for ``t``, ``e`` + 16 hex digits of
  ``blake3(ETag of the tombstone object)[:8]`` (required); for intents, 16 hex digits of a random
  nonce (required: each attempt writes its own).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass

import blake3

from .keys import RUNMARKS, SEQ_MAX

PREFIX = RUNMARKS
"""Key prefix of run markers (one LIST of it lists every marker of the repository)."""

NAME_MAX = 250
"""Longest marker name segment written (characters): below the 255-byte file-name limit of
local file systems. A hashed run id whose base32 does not fit is left out of the key."""

LIVE, TOMB, ROLLBACK = "l", "t", "r"
_RUN_KEY = re.compile(r"b[a-z2-7]{1,95}|h[0-9a-f]{32}")
_HEX16 = re.compile(r"[0-9a-f]{16}")
_B32 = re.compile(r"[a-z2-7]+")


@dataclass(frozen=True, slots=True)
class RunMark:
    """One parsed run-marker key.

    Attributes:
        key: the whole key (``runmarks/...``).
        run_key: the run's key segment.
        seq: the log position it is about.
        kind: ``"l"`` (a checkpoint that made the run live), ``"t"`` (a tombstone) or ``"r"``
            (a rollback record).
        intent: True for an intent (the record may not have landed) and for ``r`` markers
            (written before the rollback record), False for a commit.
        name: the run id carried in the key (``l`` commits of hashed runs), else None.
        tag: ``t`` commits: 16 hex digits naming the tombstone object's ETag; else None.
    """

    key: str
    run_key: str
    seq: int
    kind: str
    intent: bool
    name: str | None = None
    tag: str | None = None


def etag_tag(etag: str) -> str:
    """16 hex digits naming an ETag (``blake3(etag)[:8]``), as a ``t`` commit carries it."""
    return blake3.blake3(etag.encode("utf-8", "surrogatepass")).hexdigest(8)


def _pos(seq: int) -> str:
    if not 0 <= seq < SEQ_MAX:
        raise ValueError(f"sequence number out of range: {seq}")
    return f"{SEQ_MAX - seq:016x}"


def run_prefix(run_key: str) -> str:
    """``runmarks/<R>.``: every marker of one run (a LIST of it lists only that run's)."""
    return f"{PREFIX}{run_key}."


def live_key(run_key: str, seq: int, run_id: str | None = None) -> str:
    """Key of the commit "the checkpoint at ``seq`` made the run live".

    Args:
        run_key: the run's key segment.
        seq: the checkpoint's log position.
        run_id: the run id, carried in the key when ``run_key`` is hashed and it fits in
            :data:`NAME_MAX` characters (ignored for ``b`` run keys, which already hold it).
    """
    base = f"{PREFIX}{run_key}.{_pos(seq)}.{LIVE}"
    if run_id is not None and run_key.startswith("h"):
        enc = base64.b32encode(run_id.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=").lower()
        extra = f".n{enc}"
        if len(base) - len(PREFIX) + len(extra) <= NAME_MAX:
            return base + extra
    return base


def tomb_key(run_key: str, seq: int, etag: str) -> str:
    """Key of the commit "the record at ``seq`` is a tombstone whose object has ETag ``etag``"."""
    return f"{PREFIX}{run_key}.{_pos(seq)}.{TOMB}.e{etag_tag(etag)}"


def intent_key(run_key: str, seq: int, kind: str, nonce: bytes) -> str:
    """Key of an intent: a record of ``kind`` (``"l"``/``"t"``) may be being published at ``seq``.

    Args:
        nonce: 8 random bytes, new for each attempt (so an attempt never reuses an older object).
    """
    if kind not in (LIVE, TOMB) or len(nonce) != 8:
        raise ValueError("intent kind must be 'l' or 't' and the nonce 8 bytes")
    return f"{PREFIX}{run_key}.{_pos(seq)}.i{kind}.{nonce.hex()}"


def rollback_key(run_key: str, seq: int) -> str:
    """Key of the marker "a rollback record may be at ``seq``" (written before it)."""
    return f"{PREFIX}{run_key}.{_pos(seq)}.{ROLLBACK}"


def parse(key: str) -> RunMark | None:
    """Parse a run-marker key; None for anything that is not one (ignored by readers, reported
    by ``verify``). A carried run id that is not valid base32 UTF-8 makes the key invalid."""
    if not isinstance(key, str) or not key.startswith(PREFIX) or "/" in key[len(PREFIX):]:
        return None
    parts = key[len(PREFIX):].split(".")
    if len(parts) not in (3, 4) or not _RUN_KEY.fullmatch(parts[0]) or not _HEX16.fullmatch(parts[1]):
        return None
    inv = int(parts[1], 16)
    if inv == 0:
        return None
    seq = SEQ_MAX - inv
    code, extra = parts[2], (parts[3] if len(parts) == 4 else None)
    if code == ROLLBACK:
        return RunMark(key, parts[0], seq, ROLLBACK, True) if extra is None else None
    if code in ("il", "it"):
        if extra is None or not _HEX16.fullmatch(extra):
            return None
        return RunMark(key, parts[0], seq, code[1], True)
    if code == TOMB:
        if extra is None or len(extra) != 17 or extra[0] != "e" or not _HEX16.fullmatch(extra[1:]):
            return None
        return RunMark(key, parts[0], seq, TOMB, False, tag=extra[1:])
    if code == LIVE:
        name = None
        if extra is not None:
            if not parts[0].startswith("h") or extra[:1] != "n" or not _B32.fullmatch(extra[1:]):
                return None
            enc = extra[1:].upper()
            try:
                name = base64.b32decode(enc + "=" * (-len(enc) % 8)).decode("utf-8", "surrogatepass")
            except (ValueError, UnicodeDecodeError):
                return None
            if not name:
                return None
        return RunMark(key, parts[0], seq, LIVE, False, name=name)
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a run's markers say about it (see :func:`judge`).

    Attributes:
        state: ``"live"`` (certain from the listing), ``"dead?"`` (dead if the run's newest
            manifest is the tombstone ``newest`` names: one LIST to confirm), or ``"unknown"``
            (no markers, or an intent beyond the newest commit: read the head).
        newest: the newest commit, when there is one.
    """

    state: str
    newest: RunMark | None = None


def judge(marks: list[RunMark]) -> Verdict:
    """Decide a run's liveness from its markers alone.

    The newest commit decides, unless an intent or rollback marker at a later position exists (a
    record that changes liveness, or whose liveness depends on another record, may have landed
    after it) or two commits of different kinds share the newest position: then ``unknown``. A ``t`` commit is ``dead?``: it is checked against the listed
    head, so a marker left from an earlier life of the run id (GC deleted its log and positions
    started again) never hides a run.
    """
    commits = [m for m in marks if not m.intent]
    if not commits:
        return Verdict("unknown")
    top = max(m.seq for m in commits)
    at_top = {m.kind for m in commits if m.seq == top}
    if len(at_top) != 1 or any(m.intent and m.seq > top for m in marks):
        return Verdict("unknown")
    newest = next(m for m in commits if m.seq == top)
    return Verdict("live" if newest.kind == LIVE else "dead?", newest)
