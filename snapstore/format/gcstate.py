"""GC candidate records (docs/format.md §21): ``gc/candidates/<13 hex ms>-<8 hex>``, each naming the
packs and forwarding records one GC found unreferenced. The record's store timestamp says when; a
later GC deletes what it names once that is older than the grace period and still unreferenced.

The body is an envelope (magic ``SNGC``, :func:`snapstore.format.codec.seal_envelope`) around the
JSON object ``{"packs": [16 hex, ...], "fwd": [16 hex, ...]}``, plus ``"bundles": [16 hex, ...]`` when
it names archive bundles (docs/format.md §28; readers of earlier releases ignore the member).
"""

from __future__ import annotations

import json

from ..errors import IntegrityError
from .codec import loads_exact, open_envelope, seal_envelope
from .ids import is_pack_hex
from .keys import GC_CANDIDATES
from .config import FORMAT_VERSION

CANDIDATES_MAGIC = b"SNGC"


def candidates_key(store_time: float, suffix: str) -> str:
    """The key of a new candidate record.

    Args:
        store_time: the store's clock (seconds since the epoch, UTC) when the GC started.
        suffix: 8 random hex digits, so that two records never collide.
    Returns:
        ``gc/candidates/<store time in ms, 13 hex>-<suffix>``.
    """
    return f"{GC_CANDIDATES}{int(store_time * 1000):013x}-{suffix}"


def encode_candidates(packs: list[str], fwd: list[str], bundles: list[str] = ()) -> bytes:
    """A candidate record's bytes.

    Args:
        packs: hex ids (16 lowercase hex digits) of unreferenced packs.
        fwd: hex ids of the retired packs whose forwarding records are unreferenced.
        bundles: hex ids of archive bundles that serve no live checkpoint, or that no index record
            names (§28); the member is written only when there are some.
    Returns:
        The sealed envelope.
    """
    body = {"packs": packs, "fwd": fwd}
    if bundles:
        body["bundles"] = list(bundles)
    return seal_envelope(CANDIDATES_MAGIC, FORMAT_VERSION, json.dumps(body).encode())


def decode_candidate_bundles(key: str, data: bytes) -> set:
    """The bundle hex ids a candidate record read from ``key`` names (empty for a record without
    the member).

    Raises:
        IntegrityError: not a candidate record, or an id is not 16 lowercase hex digits.
    """
    decode_candidates(key, data)
    try:
        out = set(loads_exact(open_envelope(key, CANDIDATES_MAGIC, data)[1], 2).get("bundles", []))
    except (ValueError, TypeError, AttributeError) as e:
        raise IntegrityError(key, f"malformed candidate record: {e}") from None
    if not all(isinstance(h, str) and is_pack_hex(h) for h in out):
        raise IntegrityError(key, "malformed candidate record: a bundle id is not 16 lowercase hex digits")
    return out


def decode_candidates(key: str, data: bytes) -> tuple[set, set]:
    """Decode a candidate record read from ``key``.

    Returns:
        ``(pack hex ids, forwarding-record hex ids)``, two sets of str.
    Raises:
        IntegrityError: not a candidate record (bad envelope, JSON or id).
    """
    _, body = open_envelope(key, CANDIDATES_MAGIC, data)
    try:
        d = loads_exact(body, 2)
        out = set(d.get("packs", [])), set(d.get("fwd", []))
    except (ValueError, TypeError, AttributeError) as e:
        raise IntegrityError(key, f"malformed candidate record: {e}") from None
    if not all(isinstance(h, str) and is_pack_hex(h) for part in out for h in part):
        raise IntegrityError(key, "malformed candidate record: an id is not 16 lowercase hex digits")
    return out
