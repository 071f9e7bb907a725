"""Writer-side tiered compaction (format 2): merging a run's segments into tier packs.

Layer 3, beside the write path. A save whose segment list completes a tier (see
:func:`snapstore.format.segs.plan_append`) also writes one *tier pack*: a copy of every entry of the
merged segments, oldest first, compressed as whole blocks without a dictionary. Tier packs are
copies: every tree ref keeps its location hint to the per-save pack that first stored the entry
(its *home*, which garbage collection keeps and repacks as before), so losing a tier pack costs
speed, never data. That is what lets a writer delete the tier packs it merged away without
coordinating with readers, forks or GC (docs/format.md §7a).
"""

from __future__ import annotations

import os

from .errors import SnapstoreError
from .format.ids import PACK_ID_BYTES
from .format.pack import PackBuilder
from .format.segs import MergePlan, Seg, plan_append
from .repository import Repository

TIER_LEVELS = {1: 3, 2: 6, 3: 6}
"""zstd level of a tier pack by its segment level (higher levels: 9). A tier of level L holds about
``fanout**L`` saves and is rewritten once per ``fanout**L`` saves, so its compression effort is
spent rarely."""


def tier_zstd_level(level: int) -> int:
    """zstd level for a tier pack of segment level ``level`` (>= 1)."""
    return TIER_LEVELS.get(level, 9)


def build_tier(repo: Repository, inputs: list[Seg], level: int) -> tuple[bytes, bytes, dict, int]:
    """Build the tier pack that merges ``inputs`` (oldest first); nothing is written.

    Every entry of every input pack is copied once (duplicates across inputs are dropped), each
    verified against its content id on the way, chunks in one data block and tree metadata in
    another. Segments are copies, so what cannot be read is left out rather than failing the save:
    an input pack that is gone or corrupt, and a per-save pack's data block whose dictionary GC has
    collected (GC keeps a per-save pack's dictionary only while the pack holds live entries); their
    entries stay reachable through their location hints.

    Args:
        repo: the repository (input packs come from its cache, else one parallel wave of GETs).
        inputs: the segments to merge.
        level: the tier pack's segment level (chooses the zstd level).
    Returns:
        ``(pack id, pack bytes, raw blocks, entries left out)`` (raw blocks: see
        :meth:`Repository.remember_pack`).
    """
    repo.prefetch([s.pack for s in inputs])
    pid = os.urandom(PACK_ID_BYTES)
    pb = PackBuilder(pid, level=tier_zstd_level(level))
    skipped = 0
    for s in inputs:
        try:
            pack = repo.get_pack(s.pack)
        except SnapstoreError:
            skipped += 1
            continue
        bad_blocks = set()
        for e in sorted(pack.entries.values(), key=lambda e: (e.block, e.offset)):
            if (e.type, e.id) in pb:
                continue
            if e.block in bad_blocks:
                skipped += 1
                continue
            try:
                raw = repo._entry_in(pack, e.type, e.id, None)
            except SnapstoreError:
                bad_blocks.add(e.block)
                skipped += 1
                continue
            pb.add(e.type, e.id, raw)
    data, _ = pb.build()
    return pid, data, pb.raw_blocks, skipped


def plan_save(repo: Repository, base: list[Seg], new_pack: bytes | None):
    """Plan and build the segment change of one save.

    Args:
        repo: the repository (its config's ``seg_fanout``).
        base: the segment list of the run's newest record.
        new_pack: the save's own pack id (already remembered in the repository's cache), or None.
    Returns:
        ``(segs, tier, superseded)``: the new record's segment list; ``tier`` is None or
        ``(pack id, bytes, raw blocks)`` of a tier pack to write before the record; ``superseded``
        lists the tier packs (own, level >= 1) the merge replaced, to delete after the record is
        published. What cannot be read is left out of the tier (see :func:`build_tier`).
    """
    plan: MergePlan = plan_append(list(base), new_pack, repo.config.seg_fanout)
    if not plan.inputs:
        return plan.segs, None, []
    pid, data, raws, _ = build_tier(repo, plan.inputs, plan.level)
    segs = list(plan.segs)
    segs[plan.slot] = Seg(pid, plan.level)
    superseded = [s.pack for s in plan.inputs if s.level >= 1 and not s.foreign]
    return segs, (pid, data, raws), superseded
