"""Writer-side tiered compaction (format 2): merging a run's segments into tier packs.

Layer 3, beside the write path. A save whose segment list completes a tier (see
:func:`snapstore.format.segs.plan_append`) also writes one *tier pack*: every entry of the merged
segments, oldest first, compressed as whole blocks without a dictionary. Once the record listing
it is published, the writer deletes the merged packs: the segments of a run's newest record are
where its entries live, and readers and GC look an entry up there before following the location
hint in its ref (docs/format.md §10). A fork lists its source run's segments as *foreign*
segments, which its own writers never merge or delete; the source run's writer keeps the packs it
merges once a fork pinned the run (:mod:`snapstore.repo.pins`), leaving them to GC.
"""

from __future__ import annotations


from ..errors import IntegrityError, ObjectNotFound, SnapstoreError
from ..format.ids import new_pack_id
from ..format.pack import T_CHUNK, T_HOLE, PackBuilder
from ..format.segs import MergePlan, Seg, plan_append_policy
from .repository import Repository

TIER_LEVELS = {1: 3, 2: 6, 3: 6}
"""zstd level of a tier pack by its segment level (higher levels: 9). A tier of level L holds about
``fanout**L`` saves and is rewritten once per ``fanout**L`` saves, so its compression effort is
spent rarely."""


TIER_SMALL_LEVEL = 19
"""zstd level of the blocks of at most :data:`~snapstore.format.pack.SMALL_BLOCK` raw bytes of a
tier pack compressed against a shared object (docs/format.md §29, "Dictionaries"): a short run
that starts with a shared prompt stores mostly such small packs (about 25 ms for 13 kB of
messages, once per ``seg_fanout`` saves). Other tier packs keep :data:`TIER_LEVELS`."""


def tier_zstd_level(level: int) -> int:
    """zstd level for a tier pack of segment level ``level`` (>= 1)."""
    return TIER_LEVELS.get(level, 9)


def _input_packs(repo: Repository, pack_id: bytes, depth: int = 0) -> list:
    """The packs holding a segment's entries: the segment itself, or, for a segment GC rewrote
    (retired, then deleted, or damaged), the packs its forwarding record leads to (GC writes those
    holding only that segment's live entries). Unreadable ones are left out."""
    try:
        return [repo.get_pack(pack_id, ranged=True)]  # entries are verified by content id when copied
    except (ObjectNotFound, IntegrityError):
        pass  # gone or damaged: a segment GC rewrote has an intact copy of its live entries
    except SnapstoreError:
        return []
    out = []
    if depth < 4:
        try:
            to = repo.forward(pack_id) or ()
        except SnapstoreError:
            to = ()
        for t in to:
            out.extend(_input_packs(repo, t, depth + 1))
    return out


def build_tier(repo: Repository, inputs: list[Seg], level: int, first=(), listed=()) -> tuple[bytes, bytes, dict, int]:
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
        first: content ids of chunks to place first among the data blocks (the newest
            checkpoint's messages), so that a ranged read of them skips the rest (session-state
            pieces of older checkpoints; docs/format.md §8).
        listed: ids of the packs the record publishing the tier pack lists besides it: its array
            blocks are compressed against the message of the first shared pack among them
            (docs/format.md §8 block kind 6, §29 "Dictionaries").
    Returns:
        ``(pack id, pack bytes, raw blocks, entries left out)`` (raw blocks: see
        :meth:`Repository.remember_pack`).
    """
    repo.prefetch([s.pack for s in inputs])
    pid = new_pack_id()
    pb = PackBuilder(pid, level=tier_zstd_level(level))
    pb.first_ids = frozenset(first or ())
    sd = repo.shared.dictionary(listed)
    if sd is not None:
        pb.set_array_dictionary(*sd)
        pb.small_level = TIER_SMALL_LEVEL
    skipped = 0
    content_id = repo.hasher.content_id
    for s in inputs:
        for pack in _input_packs(repo, s.pack):
            arrays = [bi for bi, b in enumerate(pack.blocks) if b.array]
            if not pack.whole:  # read with byte ranges by a restore: the blocks not read yet, one GET
                repo.fetch_pack_blocks({pack: {e.block for e in pack.entries.values()} | set(arrays)})
            # the segments' array blocks, item by item and in order, become the tier pack's: the
            # run's lists in the order they were appended (docs/format.md §8, §10)
            bad_blocks = set()
            for bi in arrays:
                try:
                    raw = pack.raw_block(bi)
                    items, cur = [], []
                    for etype, cid, off, ln, cont in pack.blocks[bi].parts:
                        part = raw[off:off + ln]
                        if etype == T_CHUNK and content_id(part) != cid:
                            raise IntegrityError(pack.key, f"entry {cid.hex()} (c) does not match its content id")
                        if not cont and cur:
                            items.append(cur)
                            cur = []
                        cur.append((etype, cid, part))
                    items.append(cur)
                except SnapstoreError:
                    bad_blocks.add(bi)
                    skipped += len(pack.blocks[bi].parts)
                    continue
                for item in items:
                    if item[0][0] == T_HOLE:
                        pb.add_hole(item[0][1])
                    else:
                        pb.add_item([(cid, part) for _, cid, part in item])
            for e in sorted(pack.entries.values(), key=lambda e: (e.block, e.offset)):
                if (e.type, e.id) in pb or pack.blocks[e.block].array:
                    continue
                if e.block in bad_blocks:
                    skipped += 1
                    continue
                try:
                    raw = repo.read_entry_in(pack, e.type, e.id, None)
                except SnapstoreError:
                    bad_blocks.add(e.block)
                    skipped += 1
                    continue
                pb.add(e.type, e.id, raw)
    data, _ = pb.build()
    return pid, data, pb.raw_blocks, skipped


def plan_save(repo: Repository, base: list[Seg], new_pack: bytes | None, first=()):
    """Plan and build the segment change of one save.

    Args:
        repo: the repository (its config's ``seg_fanout``).
        base: the segment list of the run's newest record.
        new_pack: the save's own pack id (already remembered in the repository's cache), or None.
        first: content ids of the saved list's messages (placed first in a tier pack, see
            :func:`build_tier`).
    Returns:
        ``(segs, tier, superseded)``: the new record's segment list; ``tier`` is None or
        ``(pack id, bytes, raw blocks)`` of a tier pack to write before the record; ``superseded``
        lists the packs the merge replaced (the run's own per-save and tier packs), to delete
        after the record is published. What cannot be read is left out of the tier (see :func:`build_tier`).
    """
    if repo.config.seg_fanout == 0:  # segments off: format-1 writes (every record without a list)
        return None, None, []
    cfg = repo.config
    plan: MergePlan = plan_append_policy(list(base), new_pack, cfg.seg_fanout, cfg.seg_limit, cfg.seg_from)
    if not plan.inputs:
        return plan.segs, None, []
    listed = [s.pack for i, s in enumerate(plan.segs) if i != plan.slot and s.foreign]
    pid, data, raws, _ = build_tier(repo, plan.inputs, plan.level, first, listed)
    segs = list(plan.segs)
    segs[plan.slot] = Seg(pid, plan.level)
    superseded = [s.pack for s in plan.inputs if not s.foreign]
    return segs, (pid, data, raws), superseded
