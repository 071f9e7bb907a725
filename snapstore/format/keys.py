"""Object keys of a repository (relative to the store root/prefix). See docs/format.md "Keys"."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import IntegrityError
from .ids import PACK_ID_BYTES

CONFIG = "config"
PACKS = "packs/"
RUNS = "runs/"
RUNMARKS = "runmarks/"
"""Prefix of run markers (:mod:`snapstore.format.runmark`)."""
SEQ_MAX = 2**64 - 1
POSITION_LIMIT = 2**48
"""Log positions are below this (a run would need 2^48 saves to reach it): a manifest key naming
a higher one is a stray name (IntegrityError), so no reader sizes anything by such a position."""


def pack_key(pack_id: bytes) -> str:
    """``packs/<first 2 hex>/<16 hex>`` for an 8-byte pack id."""
    h = pack_id.hex()
    return f"packs/{h[:2]}/{h}"


def pack_id_from_key(key: str) -> bytes | None:
    """Inverse of :func:`pack_key`; None if ``key`` is not a pack key."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "packs" or len(parts[2]) != 2 * PACK_ID_BYTES:
        return None
    try:
        return bytes.fromhex(parts[2])
    except ValueError:
        return None


FWD = "fwd/"
GC = "gc/"
FWD_CACHE = "gc/fwd-cache"
"""Written by GC: the whole forwarding map, each record with its shard's ETag and its time
(advisory; see docs/format.md §21)."""
GC_LOCK = "gc/lock"
"""The GC lock: created create-only by the one GC running, refreshed and removed by it."""
GC_CANDIDATES = "gc/candidates/"
"""Prefix of GC candidate records (:mod:`snapstore.format.gcstate`): packs and forwarding records
found unreferenced, deleted by a later GC once the grace period has passed."""
GC_CLOCK = "gc/clock-"
"""Prefix of the store-clock probes (an object written to read the store's time; removed at once,
and by GC once left older than the lock timeout)."""


def fwd_shard(pack_id: bytes) -> str:
    """The forwarding-map shard of a pack: the first hex digit of its id."""
    return pack_id.hex()[0]


def fwd_shard_key(pack_id: bytes) -> str:
    """``fwd/<1 hex>``: the forwarding-map shard holding the record of a retired pack whose id
    starts with that hex digit (at most 16 shards, written only by GC)."""
    return f"fwd/{fwd_shard(pack_id)}"


def fwd_key(pack_id: bytes) -> str:
    """``fwd/<16 hex>``: a per-pack forwarding record, the layout before the forwarding map.
    Still read (and migrated into the map by GC); never written."""
    return f"fwd/{pack_id.hex()}"


def parse_fwd_key(key: str) -> tuple[str, str | bytes] | None:
    """``("shard", <hex digit>)`` for a forwarding-map shard key, ``("record", <pack id>)`` for a
    per-pack record key, None for anything else."""
    if not key.startswith(FWD):
        return None
    rest = key[len(FWD):]
    if len(rest) == 1 and rest in "0123456789abcdef":
        return "shard", rest
    if len(rest) == 2 * PACK_ID_BYTES:
        try:
            return "record", bytes.fromhex(rest)
        except ValueError:
            return None
    return None


def run_prefix(run_key: str) -> str:
    """``runs/<run key>/``: everything belonging to one run."""
    return f"runs/{run_key}/"


def manifests_prefix(run_key: str) -> str:
    """``runs/<run key>/m/``: the run's manifests, newest first in key order."""
    return f"runs/{run_key}/m/"


def manifest_key(run_key: str, seq: int) -> str:
    """``runs/<run key>/m/<16 hex of 2^64-1-seq>``: the newest sequence number sorts first."""
    if not 0 <= seq < SEQ_MAX:
        raise ValueError(f"sequence number out of range: {seq}")
    return f"runs/{run_key}/m/{SEQ_MAX - seq:016x}"


def seq_from_manifest_key(key: str) -> int:
    """Inverse of :func:`manifest_key` (sequence number of a manifest key).

    Raises:
        IntegrityError: the key's last segment is not 16 lowercase hex digits of a valid position
            (below :data:`POSITION_LIMIT`): a stray object among a run's manifests.
    """
    name = key.rsplit("/", 1)[-1]
    if len(name) != 16 or name.strip("0123456789abcdef") or name == "0" * 16:
        raise IntegrityError(key, "not a manifest key (16 lowercase hex digits of a log position)")
    seq = SEQ_MAX - int(name, 16)
    if seq >= POSITION_LIMIT:
        raise IntegrityError(key, f"not a manifest key: it names log position {seq}, beyond 2^48 (a stray name)")
    return seq


def index_key(run_key: str, checkpoint_key: str) -> str:
    """``runs/<run key>/c/<checkpoint key>``: maps a checkpoint id to its sequence number."""
    return f"runs/{run_key}/c/{checkpoint_key}"


PIN_NAME = "forked"
"""The one object name of a run's ``f`` area (:func:`pin_key`)."""


def pin_key(run_key: str) -> str:
    """``runs/<run key>/f/forked``: the run's fork pin, an empty object saying that a fork lists
    this run's segments, so that its writer keeps the packs it merges (docs/format.md §10)."""
    return f"runs/{run_key}/f/{PIN_NAME}"


def index_prefix(run_key: str) -> str:
    """``runs/<run key>/c/``."""
    return f"runs/{run_key}/c/"


RUN_AREAS = {"m": "manifest", "c": "index", "l": "logseg", "x": "removals", "f": "pin"}
"""The areas of a run's folder, ``runs/<run key>/<area>/<name>``, by letter -> the kind
:func:`parse_key` names them with."""


class KeyParts(NamedTuple):
    """A key split by :func:`parse_key`.

    Attributes:
        kind: ``"config"``, ``"pack"``, ``"fwd"``, ``"gc"``, ``"runmark"``, one of the values of
            :data:`RUN_AREAS` (``"manifest"``, ``"index"``, ``"logseg"``, ``"removals"``, ``"pin"``), ``"run"``
            (a run area of another letter) or ``"other"`` (not part of the layout).
        run_key: the run key segment for the run kinds, else None.
        rest: what follows the kind's prefix: the object name in a run area (for ``"run"``:
            ``<area>/<name>``), the 16 hex digits of a pack, the part after ``fwd/``, ``gc/`` or
            ``runmarks/``, the whole key for ``"other"``, "" for ``"config"``.
    """

    kind: str
    run_key: str | None
    rest: str


def parse_key(key: str) -> KeyParts:
    """Say what a repository key is by its shape (docs/format.md "Keys"): the one parser of key
    layouts. Only the shape is judged: a ``"manifest"`` key may still name no valid position
    (:func:`seq_from_manifest_key` says), a ``"logseg"`` or ``"removals"`` key no valid range
    (their format modules say).

    Args:
        key: an object key relative to the repository root, e.g. ``runs/<R>/m/<16 hex>``.
    Returns:
        A :class:`KeyParts`.
    """
    if key == CONFIG:
        return KeyParts("config", None, "")
    parts = key.split("/")
    if parts[0] == "runs" and len(parts) == 4:
        kind = RUN_AREAS.get(parts[2])
        if kind is not None:
            return KeyParts(kind, parts[1], parts[3])
        return KeyParts("run", parts[1], f"{parts[2]}/{parts[3]}")
    if pack_id_from_key(key) is not None:
        return KeyParts("pack", None, parts[2])
    for prefix, kind in ((FWD, "fwd"), (GC, "gc"), (RUNMARKS, "runmark")):
        if key.startswith(prefix):
            return KeyParts(kind, None, key[len(prefix):])
    return KeyParts("other", None, key)
