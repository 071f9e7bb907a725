"""Tool outcomes: the keys and the object encoding of the writes area ``runs/<R>/w/`` (docs/format.md §25).

Pure functions; no I/O. One object per (anchor, call id):

* key ``runs/<R>/w/<A>/<K>``: ``<A>`` the *anchor*, the checkpoint the call started from
  (``c<16 hex of its log position>.<checkpoint key>``) or, before a run's first checkpoint, the
  run's generation (``n<16 hex of the position after its newest tombstone, 0 for a new run>``);
  ``<K>`` the call id's name segment (:func:`~snapstore.format.ids.name_key`).
* body: an envelope (magic ``SNOC``, version 1) around the exact JSON of
  ``{"call": <call id>, "result": <JSON value>}``.
"""

from __future__ import annotations

from ..errors import IntegrityError, InvalidInputError, InvalidMessageError
from . import codec
from .ids import Hasher, name_from_key, name_key

MAGIC = b"SNOC"
VERSION = 1
BODY_MAX = 4 << 20
"""Largest body (bytes, uncompressed) of an outcome object; a larger result is refused on record."""
CALL_ID_MAX = 4096
"""Longest call id, in UTF-8 bytes."""
OUTCOMES_MAX = 100_000
"""Most outcome objects one anchor may hold: a listing past it is corrupt (bounded reads)."""

codec.ENVELOPE_LIMITS.setdefault(MAGIC, BODY_MAX)


def check_call_id(call_id) -> str:
    """Return ``call_id`` if it is a non-empty ``str`` of at most :data:`CALL_ID_MAX` UTF-8 bytes.

    Raises:
        InvalidInputError: anything else.
    """
    if not isinstance(call_id, str) or call_id == "":
        raise InvalidInputError(f"call id must be a non-empty string, got {call_id!r}")
    if len(call_id.encode("utf-8", "surrogatepass")) > CALL_ID_MAX:
        raise InvalidInputError(f"call id longer than {CALL_ID_MAX} bytes")
    return call_id


def checkpoint_anchor(seq: int, checkpoint_key: str) -> str:
    """The anchor segment of a checkpoint: ``c<16 hex of seq>.<checkpoint key>``.

    Args:
        seq: the checkpoint's log position (0 <= seq < 2^64).
        checkpoint_key: the checkpoint id's name segment (``name_key``).
    """
    if not isinstance(seq, int) or not 0 <= seq < 2**64:
        raise InvalidInputError(f"log position out of range: {seq!r}")
    return f"c{seq:016x}.{checkpoint_key}"


def generation_anchor(generation: int) -> str:
    """The anchor segment before a run's first checkpoint: ``n<16 hex of generation>``, where the
    generation is the log position after the run's newest tombstone (0 for a run with no record)."""
    if not isinstance(generation, int) or not 0 <= generation < 2**64:
        raise InvalidInputError(f"generation out of range: {generation!r}")
    return f"n{generation:016x}"


def parse_anchor(segment: str) -> tuple[str, int, str | None] | None:
    """``("c", seq, checkpoint key)`` or ``("n", generation, None)`` for an anchor segment; None
    for anything else (a stray key)."""
    if len(segment) < 17 or segment[0] not in "cn":
        return None
    digits = segment[1:17]
    if digits.strip("0123456789abcdef"):
        return None
    pos = int(digits, 16)
    if segment[0] == "n":
        return ("n", pos, None) if len(segment) == 17 else None
    if len(segment) < 19 or segment[17] != "." or segment[18] not in "bh":
        return None
    return "c", pos, segment[18:]


def outcomes_prefix(run_key: str) -> str:
    """``runs/<run key>/w/``: every outcome of the run."""
    return f"runs/{run_key}/w/"


def anchor_prefix(run_key: str, anchor: str) -> str:
    """``runs/<run key>/w/<anchor>/``: the outcomes of one checkpoint (or generation)."""
    return f"runs/{run_key}/w/{anchor}/"


def outcome_key(run_key: str, anchor: str, call_id: str, hasher: Hasher) -> str:
    """``runs/<run key>/w/<anchor>/<call key>``."""
    return anchor_prefix(run_key, anchor) + name_key(check_call_id(call_id), hasher)


def parse_outcome_key(key: str) -> tuple[str, str, str] | None:
    """``(run key, anchor, call key)`` of an outcome key, None for any other key."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != "runs" or parts[2] != "w" or parse_anchor(parts[3]) is None:
        return None
    if not parts[4] or parts[4][0] not in "bh":
        return None
    return parts[1], parts[3], parts[4]


def encode_outcome(call_id: str, result) -> bytes:
    """The stored bytes of one outcome (an ``SNOC`` envelope, zstd when smaller).

    Args:
        call_id: the tool call's id (non-empty string).
        result: any JSON value (as :func:`~snapstore.format.codec.validate` accepts).
    Returns:
        The object bytes; equal arguments give equal bytes (what makes a replay a no-op).
    Raises:
        InvalidInputError: a bad call id, or a body larger than :data:`BODY_MAX`.
        InvalidMessageError: ``result`` is not an exact JSON value.
    """
    check_call_id(call_id)
    codec.validate(result, "result")
    body, _exact = codec.encode_json({"call": call_id, "result": result})
    if len(body) > BODY_MAX:
        raise InvalidInputError(f"tool outcome of {len(body)} bytes exceeds the limit of {BODY_MAX} bytes")
    return codec.seal_envelope(MAGIC, VERSION, body)


def decode_outcome(key: str, data: bytes, call_key: str | None = None,
                   hasher: Hasher | None = None) -> tuple[str, object]:
    """Inverse of :func:`encode_outcome`: ``(call id, result)``.

    Args:
        key: the object's key (named in errors).
        data: its bytes.
        call_key: the call-key segment the key names; when given, the decoded call id must map
            to it (an inline ``b`` name is checked without ``hasher``; a hashed ``h`` one needs it).
        hasher: the repository's :class:`Hasher` (for hashed call keys).
    Raises:
        IntegrityError: wrong magic, checksum, version, a body past :data:`BODY_MAX`, JSON of
            another shape, or a call id that is not the one its key names.
    """
    version, body = codec.open_envelope(key, MAGIC, data, limit=BODY_MAX)
    if version != VERSION:
        raise IntegrityError(key, f"unsupported tool-outcome version {version}")
    try:
        obj = codec.loads_exact_fast(body)
    except (ValueError, RecursionError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"tool outcome is not JSON: {e}") from None
    if not isinstance(obj, dict) or set(obj) != {"call", "result"}:
        raise IntegrityError(key, "tool outcome is not an object of 'call' and 'result'")
    call = obj["call"]
    try:
        check_call_id(call)
    except InvalidInputError:
        raise IntegrityError(key, f"tool outcome names an invalid call id {call!r}") from None
    if call_key is not None and (name_key(call, hasher) != call_key if hasher is not None
                                 else call_key.startswith("b") and name_from_key(call_key) != call):
        raise IntegrityError(key, f"tool outcome of call {call!r} stored under another call's key")
    try:
        codec.validate(obj["result"], "result")
    except InvalidMessageError as e:
        raise IntegrityError(key, f"tool outcome result: {e}") from None
    return call, obj["result"]
