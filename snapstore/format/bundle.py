"""Archive bundles and their hot index records (docs/format.md §28).

A *bundle* is an ordinary pack (``SNPK``, §8) stored under ``archive/data/...`` instead of
``packs/``: everything the archived runs' live checkpoints need, compressed hard. Its *index
record* (``archive/index/<bundle hex>``, envelope magic ``SNAB``) stays hot and says where the
bundle is, what it serves (runs and log positions) and which hot packs it replaces.

Pure functions; no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..errors import IntegrityError, InvalidInputError
from .checks import checked_int, checked_pack_id, checked_str
from .codec import loads_exact, open_envelope, seal_envelope
from .config import FORMAT_VERSION

INDEX_MAGIC = b"SNAB"
INDEX_LIMIT = 16 << 20
"""Largest index record body (bytes, uncompressed)."""

ARCHIVE = "archive/"
DATA = "archive/data/"
INDEX = "archive/index/"

STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE", "INTELLIGENT_TIERING")
"""Storage classes a bundle may be written with (S3's names)."""
COLD_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
"""Classes whose objects must be restored before a GET (not readable in place)."""

_SEGMENT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_MONTH = re.compile(r"^(never|[0-9]{4}-(0[1-9]|1[0-2]))$")


def check_storage_class(storage_class: str) -> str:
    """Return ``storage_class`` if it is one of :data:`STORAGE_CLASSES`.

    Raises:
        InvalidInputError: any other value.
    """
    if storage_class not in STORAGE_CLASSES:
        raise InvalidInputError(f"storage class must be one of {', '.join(STORAGE_CLASSES)}, not {storage_class!r}")
    return storage_class


def check_retention_class(name: str) -> str:
    """Return ``name`` if it is a valid retention-class key segment (``[a-z0-9._-]``, 1-63
    characters, starting with a letter or digit). Raises InvalidInputError otherwise."""
    if not isinstance(name, str) or not _SEGMENT.match(name):
        raise InvalidInputError(f"retention class must match [a-z0-9][a-z0-9._-]{{0,62}}, not {name!r}")
    return name


def bundle_key(retention: str, month: str, bundle_id: bytes) -> str:
    """``archive/data/<retention class>/<YYYY-MM or never>/<16 hex>``: where bundle ``bundle_id``
    (8 bytes) goes. ``month`` is the month its data may expire in (a lifecycle rule on the prefix
    ``archive/data/<class>/<month>/`` expires whole bundles). Raises InvalidInputError."""
    check_retention_class(retention)
    if not _MONTH.match(month):
        raise InvalidInputError(f"expiry month must be YYYY-MM or 'never', not {month!r}")
    return f"{DATA}{retention}/{month}/{bundle_id.hex()}"


def index_key(bundle_id: bytes) -> str:
    """``archive/index/<16 hex>``: the hot index record of bundle ``bundle_id``."""
    return f"{INDEX}{bundle_id.hex()}"


def bundle_id_from_index_key(key: str) -> bytes | None:
    """Inverse of :func:`index_key`; None if ``key`` is not an index record key."""
    if not key.startswith(INDEX):
        return None
    try:
        return checked_pack_id(key[len(INDEX):])
    except (IntegrityError, ValueError):
        return None


@dataclass
class BundleIndex:
    """One bundle's hot index record.

    Attributes:
        bundle: the bundle's id (8 bytes; also its pack id inside the bundle).
        key: the bundle's object key (:func:`bundle_key`).
        storage_class: the class it was written with (enforced on S3, recorded elsewhere).
        size: the bundle's length (bytes).
        checksum: unkeyed blake3-128 of the bundle's bytes (16 bytes).
        created: ISO-8601 UTC time of writing.
        runs: run key -> ``{"run": run id, "seqs": [log positions served]}``.
        replaces: ids of the hot packs whose entries the bundle holds for those checkpoints.
    """

    bundle: bytes
    key: str
    storage_class: str
    size: int
    checksum: bytes
    created: str
    runs: dict = field(default_factory=dict)
    replaces: list = field(default_factory=list)

    def served(self, run_key: str) -> set:
        """Log positions of run ``run_key`` this bundle serves."""
        r = self.runs.get(run_key)
        return set(r["seqs"]) if r else set()


def encode_index(ix: BundleIndex) -> bytes:
    """Encode an index record (envelope ``SNAB``, JSON body with sorted keys)."""
    body = {"bundle": ix.bundle.hex(), "key": ix.key, "class": ix.storage_class, "size": ix.size,
            "checksum": ix.checksum.hex(), "created": ix.created,
            "runs": {rk: {"run": v["run"], "seqs": sorted(v["seqs"])} for rk, v in sorted(ix.runs.items())},
            "replaces": sorted(p.hex() for p in ix.replaces)}
    return seal_envelope(INDEX_MAGIC, FORMAT_VERSION, json.dumps(body, sort_keys=True, ensure_ascii=False).encode())


def decode_index(key: str, data: bytes) -> BundleIndex:
    """Decode an index record read at ``key``.

    Raises:
        IntegrityError: bad envelope or a body not of the documented shape (names ``key``).
    """
    _, body = open_envelope(key, INDEX_MAGIC, data, limit=INDEX_LIMIT)
    try:
        d = loads_exact(body, 5)
        bid = checked_pack_id(d["bundle"])
        bkey = checked_str(d["key"], "key")
        if not bkey.startswith(DATA) or not bkey.endswith("/" + bid.hex()):
            raise ValueError(f"bundle key {bkey!r} does not name bundle {bid.hex()}")
        if bundle_id_from_index_key(key) not in (None, bid):
            raise ValueError("the record's key names another bundle")
        cls = checked_str(d["class"], "class")
        if cls not in STORAGE_CLASSES:
            raise ValueError(f"unknown storage class {cls!r}")
        checksum = bytes.fromhex(checked_str(d["checksum"], "checksum"))
        if len(checksum) != 16:
            raise ValueError("checksum is not 16 bytes")
        runs = {}
        for rk, v in d["runs"].items():
            runs[checked_str(rk, "run key")] = {"run": checked_str(v["run"], "run"),
                                               "seqs": [checked_int(s, "seq") for s in v["seqs"]]}
        return BundleIndex(bid, bkey, cls, checked_int(d["size"], "size"), checksum, checked_str(d["created"], "created"),
                           runs, [checked_pack_id(p) for p in d["replaces"]])
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise IntegrityError(key, f"malformed bundle index record: {e}") from None
