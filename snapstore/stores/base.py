"""The object-store protocol: bytes under keys.

This is the lowest layer. Everything above it (format, repository, api) talks to storage only through
:class:`ObjectStore`. Keys are relative to the store's root/prefix, use ``/`` as separator and only the
characters ``[a-z0-9._-/]`` (see :func:`check_key`); the repository layer guarantees that.

Semantics every backend must provide (the repository's invariants depend on them):

* ``put`` is create-only: it fails with :class:`~snapstore.errors.PreconditionFailed` if the key exists
  (S3: ``If-None-Match: *``; local: ``link(2)`` of a fsynced temp file). A successful ``put`` is
  durable when it returns.
* ``put_if_match`` is compare-and-swap on the ETag returned by ``head``/``put``; ``etag=None`` means
  "only if absent" (same as ``put``).
* ``get``/``head`` raise :class:`~snapstore.errors.ObjectNotFound` for a missing key.
* ``list`` yields keys in lexicographic (byte) order, all of them, paging internally.
* ``delete_many`` ignores keys that do not exist and batches as the backend requires.
* Reads after a successful write see it (strong read-after-write consistency).

What a store is, beyond these semantics, it declares in its ``capabilities``
(:class:`StoreCapabilities`): how many requests are worth having in flight, whether reads are
cheap enough to make one after another on the calling thread, whether writers compact run logs
by default, and which optional methods it has (``leftovers()``/``remove_leftovers(items)``: what
interrupted writes left outside the keys, local temporary files or incomplete S3 multipart
uploads, as :class:`Leftover` items, which GC removes once older than its grace period;
``check_versioning()``; ``remove_empty_dirs()``; ``write_batch(puts, deletes)``: conditional
writes decided and applied in one transaction, :mod:`snapstore.stores.batch`). Callers read them with
:func:`store_capabilities` and never probe a store for attributes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Protocol, runtime_checkable

from ..errors import InvalidInputError, ObjectTooLarge

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*(/[a-z0-9._-]+)*$")


def check_key(key: str) -> str:
    """Validate an object key and return it.

    Args:
        key: a ``/``-separated key of segments made of ``[a-z0-9._-]``, not starting with ``.``,
            no empty, ``.`` or ``..`` segments.
    Raises:
        InvalidInputError: when the key could escape the store root or is otherwise malformed.
    """
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise InvalidInputError(f"invalid object key: {key!r}")
    for seg in key.split("/"):
        if seg in (".", "..") or seg.startswith("."):
            raise InvalidInputError(f"invalid object key: {key!r}")
    return key


def check_range(key: str, byte_range) -> tuple[int, int | None] | None:
    """Validate a ``byte_range`` argument of :meth:`ObjectStore.get` and return it as a tuple.

    Args:
        key: the object key (named in the error).
        byte_range: None (the whole object); ``(start, end)``: bytes ``[start, end)``, truncated
            at the object's end like a slice (``0 <= start <= end``); ``(start, None)``: from byte
            ``start`` to the end; ``(-n, None)``: the last ``n`` bytes (``n >= 1``; the whole
            object when it is shorter: an S3 suffix range ``bytes=-n``).
    Returns:
        ``(start, end)`` with ``end`` None for open and suffix ranges, or None.
    Raises:
        InvalidInputError: anything else (non-integers, bools, negative ends, ``end < start``,
            a suffix range with an end).
    """
    if byte_range is None:
        return None
    try:
        start, end = byte_range
    except (TypeError, ValueError):
        raise InvalidInputError(f"invalid byte range {byte_range!r} for {key}: expected (start, end)") from None

    def is_int(x):
        return isinstance(x, int) and not isinstance(x, bool)
    if not is_int(start) or not (end is None or is_int(end)):
        raise InvalidInputError(f"invalid byte range {byte_range!r} for {key}: integers expected")
    if end is None or 0 <= start <= end:
        return start, end
    raise InvalidInputError(f"invalid byte range {byte_range!r} for {key}: need 0 <= start <= end, "
                            f"(start, None) or (-n, None)")


def slice_range(data: bytes, byte_range: tuple[int, int | None] | None) -> bytes:
    """Apply a range :func:`check_range` returned to an object's whole ``data`` (bytes)."""
    if byte_range is None:
        return data
    start, end = byte_range
    return data[start:] if end is None else data[start:end]


def _stored(body: int) -> int:
    """The most stored bytes of an object whose body is at most ``body`` bytes uncompressed: a
    zstd frame of it (at most ``body + body/256 + 64 KiB``, above zstd's compress bound) plus an
    envelope header and a codec byte (docs/format.md §2), rounded up generously."""
    return body + (body >> 8) + (64 << 10) + 64


PACK_WHOLE_READ_MAX = 256 << 20
"""Largest pack (bytes) a store returns whole from one ``get`` without a range. The format allows
packs of up to 4,096 blocks of 128 MiB (docs/format.md §3), far more than one read should hold in
memory: a larger pack raises :class:`~snapstore.errors.ObjectTooLarge` and the read path reads it
in byte ranges (its checksum streamed, its blocks fetched as needed)."""

OTHER_WHOLE_READ_MAX = 64 << 20
"""Largest whole read (bytes) of a key of no kind the format bounds (keys outside the layout):
such keys are only listed, never needed whole."""

_FIXED_LIMITS = {"config": (_stored(1 << 20), "a config"), "gc/fwd-cache": (_stored(32 << 20), "a forwarding-record cache"),
                 "gc/lock": (1 << 20, "the GC lock")}


def whole_read_limit(key: str) -> tuple[int, str]:
    """The most bytes a whole read (``get`` without a range) of ``key`` may return, by the kind of
    object its shape names (docs/format.md §4 keys, §3 limits), and that kind's name.

    The limits are on stored bytes: the uncompressed limit of the kind plus what compression and
    the envelope may add (a compressed object is bounded again when it is decompressed). Packs are
    bounded by :data:`PACK_WHOLE_READ_MAX` (larger ones are read in ranges), keys of no known kind
    by :data:`OTHER_WHOLE_READ_MAX`.

    Args:
        key: a valid object key (see :func:`check_key`).
    Returns:
        ``(limit in bytes, what the key is, e.g. "a manifest")``.
    """
    fixed = _FIXED_LIMITS.get(key)
    if fixed is not None:
        return fixed
    parts = key.split("/")
    top = parts[0]
    if top == "packs":
        return PACK_WHOLE_READ_MAX, "a pack read whole"
    if top == "runs" and len(parts) == 4:
        kind = parts[2]
        if kind == "m":
            return _stored(16 << 20), "a manifest"
        if kind == "c":
            return _stored(64 << 10), "an index record"
        if kind == "l":
            return _stored(64 << 20), "a log segment"
    if top == "runs" and len(parts) == 5 and parts[2] == "w":
        return _stored(4 << 20), "a tool outcome"
    if top == "runmarks":
        return 64 << 10, "a run marker"
    if top == "fwd" and len(parts) == 2:
        return (_stored(1 << 20), "a per-pack forwarding record") if len(parts[1]) > 1 else \
            (_stored(16 << 20), "a forwarding-map shard")
    if top == "gc":
        if len(parts) == 3 and parts[1] == "candidates":
            return _stored(16 << 20), "a GC candidate record"
        if len(parts) == 2 and parts[1].startswith("clock-"):
            return 64 << 10, "a GC clock object"
    return OTHER_WHOLE_READ_MAX, "an object outside the snapstore layout"


def check_whole_read(key: str, size: int) -> None:
    """Refuse a whole read of ``key``, an object of ``size`` bytes, that is larger than its kind
    allows (:func:`whole_read_limit`), before any of it is read.

    Raises:
        ObjectTooLarge: naming the key, its size and the limit (an IntegrityError).
    """
    limit, what = whole_read_limit(key)
    if size > limit:
        raise ObjectTooLarge(key, size, limit, what)


@dataclass(frozen=True, slots=True)
class Leftover:
    """A crash leftover a store holds outside its keys: a local temporary file a killed process
    left (``.tmp-*``), or an S3 multipart upload that was never completed nor aborted.

    Attributes:
        name: where it is: the path relative to the store root (local) or the object key relative
            to the store prefix (S3).
        size: bytes it occupies (0 when the store does not say: S3 uploads).
        mtime: when it was written or initiated, seconds since the epoch (UTC), the store's clock.
        upload_id: the S3 multipart upload id (None for local files).
    """

    name: str
    size: int
    mtime: float
    upload_id: str | None = None


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a store knows about one object.

    Attributes:
        key: the object's key.
        size: length in bytes.
        etag: opaque version tag; changes whenever the object is replaced.
        mtime: last-modified time as seconds since the epoch (UTC), taken from the store, not the
            caller's clock.
    """

    key: str
    size: int
    etag: str
    mtime: float


@dataclass
class RequestStats:
    """Counts of store requests by kind and bytes moved.

    Attributes:
        counts: requests by kind: ``PUT``, ``GET``, ``HEAD``, ``LIST`` (one per page of at most
            1,000 keys), ``DELETE`` (one per batch of at most 1,000 keys).
        bytes_up: payload bytes sent by PUTs.
        bytes_down: payload bytes received by GETs.
    """

    counts: dict = field(default_factory=lambda: {k: 0 for k in ("PUT", "GET", "HEAD", "LIST", "DELETE")})
    bytes_up: int = 0
    bytes_down: int = 0

    def snapshot(self) -> "RequestStats":
        """Return an independent copy."""
        return RequestStats(dict(self.counts), self.bytes_up, self.bytes_down)

    def since(self, earlier: "RequestStats") -> "RequestStats":
        """Return the difference ``self - earlier`` (requests made after ``earlier`` was taken)."""
        return RequestStats({k: v - earlier.counts.get(k, 0) for k, v in self.counts.items()},
                            self.bytes_up - earlier.bytes_up, self.bytes_down - earlier.bytes_down)

    def total(self) -> int:
        """Total number of requests."""
        return sum(self.counts.values())

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"requests": dict(self.counts), "bytes_up": self.bytes_up, "bytes_down": self.bytes_down}


DEFAULT_CONCURRENCY = 16
"""Parallel requests assumed for a store that does not say (see :func:`max_concurrency`)."""


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What a store declares about itself (its ``capabilities`` attribute), for callers to tune
    to instead of probing it. The defaults are what a store that declares nothing gets (a wrapper
    store of a test or an application): no optional methods, reads through a thread pool, full
    run logs.

    Attributes:
        max_concurrency: how many requests are worth having in flight at once (a count; S3: the
            HTTP connection pool size; local and memory: 16); None: the caller's default.
        inline_reads: True when a read costs no network round trip (a local directory, memory), so
            a few reads are made one after another on the calling thread rather than through a
            thread pool.
        compact_log: True when writers compact run logs into stubs by default (a local directory:
            each manifest is a file costing a 4 KiB disk block; see
            :func:`snapstore.repo.log.stubs.default_compact_log`).
        leftovers: the store has ``leftovers() -> list[Leftover]`` and
            ``remove_leftovers(items) -> int`` (crash leftovers outside the keys).
        versioning: the store has ``check_versioning() -> bool`` (an S3 bucket: whether object
            versioning is enabled, which keeps deleted bytes).
        empty_dirs: the store has ``remove_empty_dirs() -> None`` (a local directory: GC removes
            the directories its deletes emptied).
        vacuum: the store has ``compact() -> dict`` (a SQLite file: GC gives the pages its deletes
            freed back to the file system).
        atomic_batch: the store has ``write_batch(puts, deletes=()) -> list[ObjectInfo | None]``
            (:mod:`snapstore.stores.batch`): conditional puts and deletes decided and applied in
            one transaction, all or none (a SQLite file: one commit, one WAL fsync). A save then
            writes its pack and its manifest at one commit.
    """

    max_concurrency: int | None = None
    inline_reads: bool = False
    compact_log: bool = False
    leftovers: bool = False
    versioning: bool = False
    empty_dirs: bool = False
    vacuum: bool = False
    atomic_batch: bool = False


_UNDECLARED = StoreCapabilities()


def store_capabilities(store: object) -> StoreCapabilities:
    """The :class:`StoreCapabilities` ``store`` declares in its ``capabilities`` attribute, or the
    defaults (nothing optional) for a store that declares none, such as a wrapper."""
    caps = getattr(store, "capabilities", None)
    return caps if isinstance(caps, StoreCapabilities) else _UNDECLARED


def max_concurrency(store: object, default: int = DEFAULT_CONCURRENCY) -> int:
    """How many requests are worth having in flight at once on ``store`` (a count): the
    ``max_concurrency`` its :class:`StoreCapabilities` declare when it is a positive int, else
    ``default``."""
    n = store_capabilities(store).max_concurrency
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else default


@runtime_checkable
class ObjectStore(Protocol):
    """Bytes under keys. See the module docstring for the required semantics.

    Every store has a ``stats`` attribute (:class:`RequestStats`) counting the requests it made,
    a ``url`` attribute naming where it is, and a ``capabilities`` attribute
    (:class:`StoreCapabilities`) saying what else it is and has. Callers read the latter through
    :func:`store_capabilities` (and size their thread pools with :func:`max_concurrency`), which
    give the defaults for a wrapper store that declares none, so such wrappers keep working.
    """

    url: str
    stats: RequestStats
    capabilities: StoreCapabilities

    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Create ``key`` holding ``data``; fail if it exists.

        Raises:
            PreconditionFailed: the key already exists (nothing was changed).
            StoreError: the backend failed.
        """

    def put_if_match(self, key: str, data: bytes, etag: str | None) -> ObjectInfo:
        """Replace ``key`` only if its current ETag is ``etag`` (``None``: only if it is absent).

        Raises:
            PreconditionFailed: the object changed (or exists / is missing) meanwhile.
        """

    def get(self, key: str, byte_range: tuple[int, int | None] | None = None) -> bytes:
        """Return the object's bytes, or a ranged part of them (one request either way).

        Args:
            byte_range: None for the whole object; ``(start, end)`` for bytes ``[start, end)``
                (truncated at the object's end, like a slice); ``(start, None)`` from ``start`` to
                the end; ``(-n, None)`` for the last ``n`` bytes (the whole object when shorter; S3
                ``Range: bytes=-n``). See :func:`check_range`.
        Raises:
            ObjectNotFound: no such key.
            InvalidInputError: a malformed range.
        """

    def head(self, key: str) -> ObjectInfo:
        """Return the object's :class:`ObjectInfo`. Raises ObjectNotFound."""

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> Iterator[ObjectInfo]:
        """Yield objects whose key starts with ``prefix``, in lexicographic order.

        Args:
            prefix: key prefix ("" for everything).
            start_after: only keys strictly greater than this.
            limit: stop after this many (``limit=1`` costs one request on every backend).
        """

    def list_dirs(self, prefix: str) -> Iterator[str]:
        """Yield the distinct next path segments below ``prefix`` (which ends in ``/``), sorted.

        E.g. keys ``runs/a/m/1`` and ``runs/b/c/2`` with prefix ``runs/`` yield ``a``, ``b``.
        """

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete the keys; keys that do not exist are ignored. Batches of at most 1,000."""

    def close(self) -> None:
        """Release resources (connections, thread pools)."""
