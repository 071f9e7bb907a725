"""What a garbage collection is asked to do (:class:`GCOptions`) and what it did (:class:`GCReport`).

Layer 4's whole-repository operations; shared by :mod:`snapstore.maintenance.gc` and
:mod:`snapstore.maintenance.sweep`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class GCOptions:
    """The arguments of :func:`snapstore.maintenance.gc.gc` (see there), checked.

    Attributes:
        grace_period: seconds (>= 0).
        dry_run: compute and report, change nothing.
        max_unused: fraction within [0, 1].
        small_pack_bytes / target_pack_bytes: bytes.
        repack_level: zstd level.
        lock_timeout: seconds (store time).
        progress: ``progress(phase, done, total)`` or None.
        hooks: test hooks by phase name (``after_list``, ``after_mark``, ``after_repack``,
            ``before_sweep``, ``after_bundle_index_deleted``, ``after_sweep``), or None.
        force: delete dead archive bundles before their class's minimum storage duration.
        inventory: None, or the :class:`~snapstore.maintenance.inventory.Inventory` GC lists the
            packs from.
    """

    grace_period: float = 3600.0
    dry_run: bool = False
    max_unused: float = 0.25
    small_pack_bytes: int = 1 << 20
    target_pack_bytes: int = 8 << 20
    repack_level: int = 9
    lock_timeout: float = 300.0
    progress: Callable[[str, int, int], None] | None = None
    hooks: dict | None = None
    force: bool = False
    inventory: object = None

    def hook(self, name: str, **info) -> None:
        """Call the test hook ``name`` (if any) with ``info``."""
        fn = (self.hooks or {}).get(name)
        if fn is not None:
            fn(**info)

    def report(self) -> "GCReport":
        """A fresh :class:`GCReport` for these options."""
        return GCReport(dry_run=self.dry_run, grace_period=self.grace_period, max_unused=self.max_unused)


@dataclass
class GCReport:
    """What a GC run did (or, with ``dry_run``, would do).

    Attributes:
        dry_run: nothing was changed.
        grace_period: seconds.
        max_unused: the fraction of a live pack's bytes that must be dead before it is rewritten.
        store_time: the store's clock at the start (seconds since the epoch, UTC).
        live_checkpoints / live_packs: what mark found live.
        segment_packs: packs listed as segments by the runs' newest records (format 2): kept whole,
            never repacked.
        deleted: objects deleted by category (``packs``, ``forward``, ``manifests``, ``index``, ``log``
            (format-2 log segments), ``runmarks`` (run markers of removed runs, §13), ``outcomes`` (tool
            outcomes of gone checkpoints, §25), ``gc``).
        reclaimed_bytes: bytes of deleted objects minus bytes of new packs written.
        reclaimed_objects: objects deleted minus objects written.
        repacked_packs / new_packs / repack_bytes_in / repack_bytes_out: the repack step.
        refetched_packs: packs GC fetched again after mark had read them (to judge or to copy
            them): the per-save and format-1 packs it merges, and a mostly dead segment only when
            it had left the pack cache before its run was marked, or another run needed more of
            it after it was copied (a segment is otherwise copied while mark has it cached).
        added_forward: forwarding records written for packs this GC repacked (new or extended).
        redirected_forward: existing forwarding records rewritten to point past a pack deleted now.
        removed_forward: forwarding records dropped from the map (nothing leads to them any more).
        forward_writes: forwarding-map shards written (created or replaced).
        deleted["forward"] counts forwarding-map objects deleted: shards left empty, and per-pack
            records of the older layout once their shard holds them.
        pending_candidates: unreferenced packs waiting for the grace period to pass.
        pending_objects / pending_bytes: other objects no longer needed (hidden or dead log
            records, orphaned index records, log segments whose manifests are all gone) that are
            younger than the grace period: a GC after it has passed deletes them.
            ``pending_kinds`` counts them by the categories of ``deleted``.
        corrupt_packs: keys of the packs found damaged (checksum mismatch, undecodable) while
            marking. A damaged pack whose live entries are all found in other copies (a retired
            pack's forwarding targets, a segment) is unreferenced like any other and deleted once
            the grace period has passed; a damaged pack that is the only copy of a live entry
            stops GC (IntegrityError) before anything is deleted.
        leftovers_removed / leftover_bytes_removed: crash leftovers removed (``dry_run``: that
            would be removed): temporary files a killed process left in a local store, incomplete
            S3 multipart uploads; only those older than the grace period (store time).
        leftovers_pending: younger leftovers, left for a later GC (a write may still be running).
        pending_bundles: dead archive bundles (serving no live checkpoint, or unindexed) waiting
            for the grace period (docs/format.md §28).
        held_bundles: dead bundles kept for their class's minimum storage duration (dicts: key,
            class, bytes, days_left, fee_usd: what deleting now would cost).
        held_fee: the sum of their fees (USD).
        early_deletion_fee: the fee (USD) of the bundles deleted early by ``force``.
        partly_dead_bundles: keys of live bundles some of whose served checkpoints are gone:
            kept whole (never rewritten, §28).
        read_bundles: keys of bundles that serve no live checkpoint but are kept because runs
            that are not archived read from them (forks of archived checkpoints, §28).
        elapsed: seconds.
    """

    dry_run: bool
    grace_period: float
    max_unused: float = 0.25
    store_time: float = 0.0
    live_checkpoints: int = 0
    live_packs: int = 0
    segment_packs: int = 0
    deleted: dict = field(default_factory=lambda: defaultdict(int))
    deleted_bytes: int = 0
    written_bytes: int = 0
    written_objects: int = 0
    repacked_packs: int = 0
    new_packs: int = 0
    repack_bytes_in: int = 0
    repack_bytes_out: int = 0
    refetched_packs: int = 0
    pending_candidates: int = 0
    pending_objects: int = 0
    pending_bytes: int = 0
    pending_kinds: dict = field(default_factory=lambda: defaultdict(int))
    added_forward: int = 0
    redirected_forward: int = 0
    removed_forward: int = 0
    forward_writes: int = 0
    corrupt_packs: list = field(default_factory=list)
    leftovers_removed: int = 0
    leftover_bytes_removed: int = 0
    leftovers_pending: int = 0
    pending_bundles: int = 0
    held_bundles: list = field(default_factory=list)
    held_fee: float = 0.0
    early_deletion_fee: float = 0.0
    partly_dead_bundles: list = field(default_factory=list)
    read_bundles: list = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def reclaimed_bytes(self) -> int:
        """Bytes of deleted objects minus bytes of new objects written."""
        return self.deleted_bytes - self.written_bytes

    @property
    def reclaimed_objects(self) -> int:
        """Objects deleted minus objects written."""
        return sum(self.deleted.values()) - self.written_objects

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"dry_run": self.dry_run, "grace_period": self.grace_period, "max_unused": self.max_unused,
                "store_time": self.store_time,
                "live_checkpoints": self.live_checkpoints, "live_packs": self.live_packs,
                "deleted": dict(self.deleted), "reclaimed_bytes": self.reclaimed_bytes,
                "reclaimed_objects": self.reclaimed_objects, "repacked_packs": self.repacked_packs,
                "new_packs": self.new_packs, "repack_bytes_in": self.repack_bytes_in,
                "repack_bytes_out": self.repack_bytes_out, "refetched_packs": self.refetched_packs,
                "pending_candidates": self.pending_candidates,
                "pending_objects": self.pending_objects, "pending_bytes": self.pending_bytes,
                "pending_kinds": dict(self.pending_kinds),
                "added_forward": self.added_forward, "redirected_forward": self.redirected_forward,
                "removed_forward": self.removed_forward, "forward_writes": self.forward_writes,
                "corrupt_packs": list(self.corrupt_packs), "leftovers_removed": self.leftovers_removed,
                "leftover_bytes_removed": self.leftover_bytes_removed, "leftovers_pending": self.leftovers_pending,
                "pending_bundles": self.pending_bundles, "held_bundles": list(self.held_bundles),
                "held_fee": self.held_fee, "early_deletion_fee": self.early_deletion_fee,
                "partly_dead_bundles": list(self.partly_dead_bundles),
                "read_bundles": list(self.read_bundles),
                "elapsed": round(self.elapsed, 3)}


def account_flush(rep: GCReport, res) -> None:
    """Count a :class:`~snapstore.maintenance.forwarding.FlushResult` ``res`` in ``rep``."""
    rep.written_bytes += res.written_bytes
    rep.written_objects += res.written_objects
    rep.forward_writes += res.writes
    if res.deleted_objects:
        rep.deleted["forward"] += res.deleted_objects
        rep.deleted_bytes += res.deleted_bytes
