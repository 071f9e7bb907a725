"""Atomic batches of conditional writes: the optional ``write_batch`` method of a store.

A store that declares ``StoreCapabilities(atomic_batch=True)`` has
``write_batch(puts, deletes=(), deletes_unless=None) -> list[ObjectInfo | None]``: every put's condition is decided
and every write applied in one transaction, so either all of them are durable when it returns or
none of them happened (a SQLite file: one ``BEGIN IMMEDIATE`` ... ``COMMIT``, one WAL fsync).
The save path uses it to write a checkpoint's pack and its manifest at one commit
(docs/format.md §18); a store without it gets the ordered writes of ``put``.

A put's condition (:class:`BatchPut`):

* ``etag=None`` and ``if_exists="fail"`` (default): create-only, as ``put``: the batch is refused
  if the key exists.
* ``if_exists="same"``: create-only, but an existing object holding exactly ``data`` counts as
  written (a retry of a pack an earlier attempt wrote); other bytes refuse the batch.
* ``if_exists="skip"``: create-only, an existing object (any bytes) is left as it is and the
  batch goes on (a marker that a racing writer or an earlier attempt may have written).
* ``etag="..."``: compare-and-swap, as ``put_if_match``: the batch is refused unless the key
  holds that ETag.

A refused batch raises :class:`BatchRefused` (a :class:`~snapstore.errors.PreconditionFailed`)
naming the first put whose condition failed, and changes nothing. Deletes (keys that do not exist
are ignored) are applied after the puts, in the same transaction, unless the key
``deletes_unless`` names exists then (decided inside the transaction: a save's merged packs are
deleted only while no fork pin exists, docs/format.md §10).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidInputError, PreconditionFailed
from .base import check_key

IF_EXISTS = ("fail", "same", "skip")
"""What a create-only :class:`BatchPut` does when its key exists (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class BatchPut:
    """One conditional write of an atomic batch (see the module docstring).

    Attributes:
        key: a valid object key (:func:`~snapstore.stores.base.check_key`).
        data: the object's bytes.
        etag: None for a create-only write; an ETag (from ``head``/``put``) for compare-and-swap.
        if_exists: for a create-only write, what an existing object does: ``"fail"`` refuses the
            batch, ``"same"`` refuses it unless the object holds exactly ``data``, ``"skip"``
            leaves the object and goes on.
    """

    key: str
    data: bytes
    etag: str | None = None
    if_exists: str = "fail"


class BatchRefused(PreconditionFailed):
    """A put's condition in an atomic batch failed; nothing of the batch was written.

    Attributes:
        key: the put whose condition failed (the first one, in batch order).
        same: for an ``if_exists="same"`` put, False when the key holds other bytes (None for
            other conditions).
    """

    def __init__(self, key: str, same: bool | None = None):
        super().__init__(key, f"atomic batch refused, nothing written: {key} "
                         + ("holds other bytes" if same is False else "exists or changed"))
        self.same = same


def check_batch(puts, deletes=()) -> tuple[list[BatchPut], list[str]]:
    """Validate an atomic batch's arguments and return them as lists.

    Args:
        puts: :class:`BatchPut` items, keys distinct.
        deletes: keys to delete after the puts (none of them also put).
    Returns:
        ``(puts, deletes)`` with ``data`` as bytes.
    Raises:
        InvalidInputError: not a BatchPut, a malformed key, an unknown ``if_exists``, an
            ``if_exists`` other than ``"fail"`` with an ETag, or a key named twice.
    """
    out, seen = [], set()
    for p in puts:
        if not isinstance(p, BatchPut):
            raise InvalidInputError(f"an atomic batch takes BatchPut items, not {type(p).__name__}")
        check_key(p.key)
        if p.if_exists not in IF_EXISTS:
            raise InvalidInputError(f"if_exists must be one of {', '.join(IF_EXISTS)}, not {p.if_exists!r}")
        if p.etag is not None and p.if_exists != "fail":
            raise InvalidInputError(f"{p.key}: a compare-and-swap put takes no if_exists")
        if p.key in seen:
            raise InvalidInputError(f"{p.key} is put twice in one atomic batch")
        seen.add(p.key)
        out.append(BatchPut(p.key, bytes(p.data), p.etag, p.if_exists))
    dels = [check_key(k) for k in deletes]
    both = seen.intersection(dels)
    if both:
        raise InvalidInputError(f"{sorted(both)[0]} is both put and deleted in one atomic batch")
    return out, dels
