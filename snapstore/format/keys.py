"""Object keys of a repository (relative to the store root/prefix). See docs/format.md "Keys"."""

from __future__ import annotations

from ..errors import IntegrityError
from .ids import PACK_ID_BYTES

CONFIG = "config"
PACKS = "packs/"
RUNS = "runs/"
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


def index_prefix(run_key: str) -> str:
    """``runs/<run key>/c/``."""
    return f"runs/{run_key}/c/"
