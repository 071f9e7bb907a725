"""Archived records' data-locating fields, moved out of the hot catalogue into the bundle
(docs/format.md §28, "Thin bundle logs").

A record of a thin bundle log (log segment version 6) is the manifest's JSON body without the
fields only a reader of the checkpoint's data needs: ``messages.digest``, ``messages.state``,
``messages.xt`` and ``segs`` (:data:`MOVED`). Those sit in the bundle the archive wrote, in its one
``l`` entry (the *fields entry*, in the bundle's metadata block), whose raw bytes are the JSON
``{"runs": {"<run key>": {"<seq>": {"digest": ..., "state": ..., "xt": ..., "segs": ...}}}}``
(each record's moved fields that it has, keys sorted). Listing, retention, GC's mark of archived
runs and verify read only the hot rest; a reader of an archived checkpoint's data reads the
fields entry with the bundle's suffix, which it reads anyway.

:func:`thin_body` splits a body, :func:`full_body` puts one back together, :func:`encode_fields`
/ :func:`decode_fields` are the fields entry. Pure functions; no I/O.
"""

from __future__ import annotations

import orjson

from ..errors import IntegrityError
from .codec import dumps_exact, loads_exact

MOVED = ("digest", "state", "xt", "segs")
"""The names of the moved fields in a fields entry: ``messages.digest``, ``messages.state``,
``messages.xt`` and the top-level ``segs`` of a record."""
_IN_MESSAGES = ("digest", "state", "xt")
MAX_FIELDS_RAW = 128 << 20
"""Largest fields entry a reader decodes (bytes; a pack block's limit)."""


def moved_of(body: dict) -> dict:
    """The moved fields (:data:`MOVED`) a decoded record body ``body`` holds, by name."""
    out = {}
    msgs = body.get("messages")
    if isinstance(msgs, dict):
        for k in _IN_MESSAGES:
            if k in msgs:
                out[k] = msgs[k]
    if "segs" in body:
        out["segs"] = body["segs"]
    return out


def thin_body(body: bytes, max_depth: int = 64) -> tuple[bytes, dict]:
    """Split a record's JSON body into ``(thin body, moved fields)``: the body without
    :data:`MOVED` (its other members in their order) and those fields by name.

    Raises:
        ValueError: ``body`` is not a JSON object.
    """
    d = loads_exact(body, max_depth)
    if not isinstance(d, dict):
        raise ValueError("a record body is not a JSON object")
    moved = moved_of(d)
    msgs = d.get("messages")
    if isinstance(msgs, dict):
        for k in _IN_MESSAGES:
            msgs.pop(k, None)
    d.pop("segs", None)
    return dumps_exact(d), moved


def full_body(thin: bytes, moved: dict, max_depth: int = 64) -> bytes:
    """Inverse of :func:`thin_body` as the writers of records order them: ``digest`` and
    ``state`` after ``messages.bytes``, ``xt`` last in ``messages``, ``segs`` last.

    Raises:
        ValueError: ``thin`` is not a JSON object, or ``moved`` names messages fields for a record
            without ``messages``.
    """
    d = loads_exact(thin, max_depth)
    if not isinstance(d, dict):
        raise ValueError("a record body is not a JSON object")
    inner = {k: moved[k] for k in _IN_MESSAGES if k in moved}
    if inner:
        msgs = d.get("messages")
        if not isinstance(msgs, dict):
            raise ValueError("moved messages fields for a record without messages")
        out = {}
        for k, v in msgs.items():
            out[k] = v
            if k == "bytes":
                for m in ("digest", "state"):
                    if m in inner:
                        out[m] = inner[m]
        for m in ("digest", "state"):
            if m in inner and m not in out:
                out[m] = inner[m]
        if "xt" in inner:
            out["xt"] = inner["xt"]
        d["messages"] = out
    if "segs" in moved:
        d["segs"] = moved["segs"]
    return dumps_exact(d)


def encode_fields(runs: dict) -> bytes:
    """The raw bytes of a bundle's fields entry: ``runs`` is ``{run key: {seq: moved fields}}``."""
    return dumps_exact({"runs": {rk: {str(s): dict(sorted(f.items())) for s, f in sorted(recs.items())}
                                 for rk, recs in sorted(runs.items())}})


def decode_fields(key: str, raw: bytes) -> dict:
    """Inverse of :func:`encode_fields`: ``{run key: {seq: moved fields}}``.

    Raises:
        IntegrityError: not the documented shape, or a name outside :data:`MOVED` (names ``key``).
    """
    try:
        if len(raw) > MAX_FIELDS_RAW:
            raise ValueError(f"{len(raw)} bytes")
        # orjson: the entry holds strings, lists of strings and nulls only (no integer to keep
        # exact), its shape is checked below, and orjson bounds the nesting itself
        d = orjson.loads(raw)
        out = {}
        for rk, recs in d["runs"].items():
            if not isinstance(recs, dict):
                raise ValueError(f"run {rk!r} is not an object")
            got = out[rk] = {}
            for s, f in recs.items():
                if not s.isdigit() or not isinstance(f, dict) or not set(f) <= set(MOVED):
                    raise ValueError(f"run {rk!r} position {s!r}")
                got[int(s)] = f
        return out
    except (ValueError, KeyError, TypeError, AttributeError, orjson.JSONDecodeError) as e:
        raise IntegrityError(key, f"malformed fields entry of an archive bundle: {e}") from None
