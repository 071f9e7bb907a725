"""Repacking for GC: copying the live entries of packs into new packs, each pack fetched once.

Layer 3 helpers of :mod:`snapstore.maintenance.gc` (which decides what to repack and writes the forwarding
records; docs/format.md §21, "Repacking" and "Copying while marking"; docs/design-notes.md §2.24).

* :class:`PackWriter` builds and creates the new packs as the copy closes them, a bounded number
  of bytes in flight.
* :func:`copy_live` copies the needed entries of packs into new packs.
* :class:`SegmentRewrites` copies the live entries of a mostly dead segment (a tier pack GC
  rewrites on its own) while :class:`snapstore.maintenance.mark.Marker` still has it cached, right after the
  segment's run is marked, so that GC fetches such a pack once instead of twice (mark, then copy).
  The needs of a pack only grow while mark runs, so a pack that is not mostly dead when its run
  is marked never becomes so; one whose needs grew after its copy was made (another run needs it
  too) is copied again at the end, from a second fetch that the report counts
  (``GCReport.refetched_packs``), and the first copy is deleted (nothing ever named it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import SnapstoreError
from ..format import keys
from ..format.ids import new_pack_id
from ..format.pack import PackBuilder

PUT_PARALLEL = 16
"""Pack writes GC keeps in flight while repacking."""


class PackWriter:
    """Builds and creates new packs as the repack closes them, ``PUT_PARALLEL`` writes at a time and
    at most ``max_pending`` bytes in flight; counts them in ``rep`` (a ``GCReport``: ``new_packs``,
    ``repack_bytes_out``, ``written_bytes``, ``written_objects``). With ``dry_run`` each pack is
    built (so the report says what the real run writes) and nothing is written. :meth:`finish`
    waits for every write and raises the first error (a pack id collision raises
    PreconditionFailed); a writer may be used again after it.

    Args:
        store: the object store.
        rep: the report to count in.
        dry_run: build and count only.
        max_pending: bytes of built packs whose writes may be in flight at once.
        target: uncompressed bytes at which :func:`copy_live` closes a new pack.
        level: zstd level of the new packs.
    """

    MAX_PENDING = 64 << 20

    def __init__(self, store, rep, dry_run: bool, max_pending: int | None = None, target: int = 8 << 20,
                 level: int = 9):
        self.store, self.rep, self.dry_run = store, rep, dry_run
        self.max_pending = max_pending or self.MAX_PENDING
        self.target, self.level = target, level
        self.pool = None
        self.pending: list = []  # (future, bytes)
        self.done: list = []
        self.track: list | None = None  # when a list: receives the id of every pack closed

    def close(self, b: PackBuilder) -> int:
        """Build ``b`` and submit its create-only write (nothing when it is empty). Returns the
        pack's size in bytes (0 when empty)."""
        if b.empty:
            return 0
        data, _ = b.build()  # also in a dry run: its report then says what the real run writes
        if self.track is not None:
            self.track.append(b.pack_id)
        self.rep.new_packs += 1
        self.rep.repack_bytes_out += len(data)
        self.rep.written_bytes += len(data)
        self.rep.written_objects += 1
        if self.dry_run:
            return len(data)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(PUT_PARALLEL, thread_name_prefix="snapstore-gc-put")
        self.pending.append((self.pool.submit(self.store.put, keys.pack_key(b.pack_id), data), len(data)))
        while sum(n for _, n in self.pending) > self.max_pending:
            f, _ = self.pending.pop(0)
            f.exception()  # wait; errors are raised by finish()
            self.done.append(f)
        return len(data)

    def finish(self) -> None:
        """Wait until every pack submitted so far is durable. Raises the first write's error."""
        if self.pool is None:
            return
        pool, self.pool = self.pool, None
        pool.shutdown(wait=True)
        futures = self.done + [f for f, _ in self.pending]
        self.done, self.pending = [], []
        for f in futures:
            f.result()


def prefetch_wave(repo, pids: list, start: int, sizes: dict, per_wave: int, budget: int) -> tuple[int, int]:
    """Fetch ``pids[start:end]`` in one parallel wave: at most ``per_wave`` packs and ``budget``
    bytes (by ``sizes``: pack id -> listed bytes; at least one pack), forwarding not followed.
    Returns ``(end, fetched)``: ``fetched`` counts the packs of the wave that were not cached
    (GETs made)."""
    nbytes, end = 0, start
    while end < len(pids) and end - start < per_wave and (end == start or nbytes + sizes.get(pids[end], 0) <= budget):
        nbytes += sizes.get(pids[end], 0)
        end += 1
    wave = pids[start:end]
    with repo.lock:
        fetched = sum(1 for p in wave if p not in repo.cache)
    repo.prefetch(wave, no_forward=set(wave))
    return end, fetched


def copy_live(repo, pid: bytes, pack, needed, builder: PackBuilder | None, writer: PackWriter,
              read=None) -> tuple[PackBuilder | None, set]:
    """Copy the entries ``needed`` (``(type, id)`` pairs) of ``pack`` (parsed, id ``pid``) into new
    packs, in the order they are stored, each verified by its content id: appended to ``builder``
    (a new pack is started, and the full one closed through ``writer``, once ``builder`` holds more
    than ``writer.target`` uncompressed bytes; zstd ``writer.level``). Needed entries the pack does not hold are
    skipped. ``read(etype, eid)``: the entry's bytes (default: the repository's read of the entry
    at ``pid``, which follows a retired pack's forwarding record when its dictionary is gone).
    Returns ``(the open builder, ids of the new packs the entries went to)``.

    Raises:
        IntegrityError / ObjectNotFound: an entry cannot be read.
    """
    moved: set = set()
    if read is None:
        read = lambda etype, eid: repo.read_entry(etype, eid, pid)  # noqa: E731
    order = sorted(needed, key=lambda x: pack.entries[x].offset if x in pack.entries else 0)
    for etype, eid in order:
        if (etype, eid) not in pack.entries:
            continue
        raw = read(etype, eid)
        if builder is None or builder.raw_bytes > writer.target:
            if builder is not None:
                writer.close(builder)
            builder = PackBuilder(new_pack_id(), level=writer.level)
        builder.add(etype, eid, raw)
        moved.add(builder.pack_id)
    return builder, moved


@dataclass
class Rewrite:
    """The copy of one segment's live entries made while it was cached during mark.

    Attributes:
        needs: how many needs mark had recorded for the pack when it was copied (``len`` of its
            needed set, just made of distinct entries by ``Reach.note_usage``). Needs only grow
            while mark runs (a count of distinct entries that grows by at least one for each new
            entry, and by one for an entry needed again), so the same count at the end means the
            same needs: the copy is complete.
        moved: ids of the new packs holding the copy.
        size_in: bytes of the copied pack.
        out_bytes: bytes of the new packs (to undo their count when the copy is discarded).
    """

    needs: int
    moved: list
    size_in: int
    out_bytes: int = 0


@dataclass
class SegmentRewrites:
    """Copies the live entries of mostly dead segments while mark has them cached (see the module
    docstring). GC's marker (:class:`snapstore.maintenance.gc.GCMarker`) calls :meth:`on_run` as each run is marked.

    A pack is copied when it is a segment GC keeps whole (``keep``: the newest records' segments;
    packs standing in for segments an earlier GC rewrote, and the segments of records mark read
    again, count too), is listed (``listed``: pack id -> listing info), has no forwarding record (``fwd``), has level >= 1 (``levels``; a
    stand-in counts as level 1) and more than ``max_unused`` of its raw bytes are not needed.
    That is the rule GC applies after mark (``snapstore.maintenance.gc``), evaluated with the needs known when
    the pack's run is marked.

    Args:
        repo: the repository.
        writer: where the new packs go (shared with the rest of the segment rewrites; its
            ``target`` and ``level`` shape them).
        keep, listed, fwd, levels, max_unused: as above.
    """

    repo: object
    writer: PackWriter
    keep: dict
    listed: dict
    fwd: dict
    levels: dict
    max_unused: float
    copies: dict = field(default_factory=dict)  # pack id -> Rewrite
    discarded: list = field(default_factory=list)  # ids of new packs of copies made obsolete

    def eligible(self, reach, pid: bytes) -> bool:
        """Is ``pid`` a segment GC would rewrite on its own if it is mostly dead?"""
        return ((pid in self.keep or pid in reach.seg_standins or pid in reach.fresh_segs) and pid in self.listed
                and pid not in self.fwd and self.levels.get(pid, 1) >= 1)

    def on_run(self, reach, pids) -> None:
        """Called by mark once a run is marked, with the packs it met (``reach.usage`` holds their
        live and total raw bytes): copy the live entries of each eligible, mostly dead one that is
        still cached. A pack that is not cached, or whose entries cannot be read, is left to the
        copy after mark (which reads it again, and reports what is wrong)."""
        repo = self.repo
        for pid in pids:
            u = reach.usage.get(pid)
            if u is None or not self.eligible(reach, pid):
                continue
            live, total, n = u
            if n != len(reach.packs.get(pid, ())):
                continue  # not measured with its present needs (it was not cached just now)
            if 1 - live / (total or 1) <= self.max_unused:
                continue
            prev = self.copies.get(pid)
            if prev is not None and prev.needs == n:
                continue
            with repo.lock:
                pack = repo.cache.get(pid)
            if pack is None or not pack.whole:
                continue
            if prev is not None:
                self.discard(pid)
            out0 = self.writer.rep.repack_bytes_out
            self.writer.track = closed = []
            try:
                b, moved = copy_live(repo, pid, pack, reach.needed_entries(pid, pack), None, self.writer,
                                     read=lambda etype, eid, pack=pack: repo.read_entry_in(pack, etype, eid, None))
                if b is not None:
                    self.writer.close(b)
            except SnapstoreError:
                # the copy after mark reads it again and reports the error; new packs this copy
                # already closed are deleted like a discarded copy's
                self._drop(Rewrite(n, closed, 0, self.writer.rep.repack_bytes_out - out0))
                continue
            finally:
                self.writer.track = None
            self.copies[pid] = Rewrite(n, sorted(moved), len(pack.data), self.writer.rep.repack_bytes_out - out0)

    def take(self, pid: bytes, needs: int) -> Rewrite | None:
        """The copy of ``pid`` if it holds every need (``needs``: the count mark ended with);
        else None, and a stale copy is discarded."""
        c = self.copies.pop(pid, None)
        if c is not None and c.needs != needs:
            self._drop(c)
            return None
        return c

    def discard(self, pid: bytes) -> None:
        """Forget the copy of ``pid`` (its new packs are deleted by :meth:`delete_discarded`)."""
        c = self.copies.pop(pid, None)
        if c is not None:
            self._drop(c)

    def discard_all(self) -> None:
        """Discard every copy not taken (packs that GC did not rewrite after all)."""
        for pid in list(self.copies):
            self.discard(pid)

    def _drop(self, c: Rewrite) -> None:
        rep = self.writer.rep
        rep.new_packs -= len(c.moved)
        rep.repack_bytes_out -= c.out_bytes
        rep.written_bytes -= c.out_bytes
        rep.written_objects -= len(c.moved)
        self.discarded.extend(c.moved)

    def delete_discarded(self, store, dry_run: bool) -> None:
        """Delete the new packs of discarded copies, once :meth:`PackWriter.finish` made every
        write durable. Nothing names them (no forwarding record, no hint: their ids are new), so
        they can go at once."""
        if self.discarded and not dry_run:
            doomed = [keys.pack_key(p) for p in self.discarded]
            for i in range(0, len(doomed), 1000):
                store.delete_many(doomed[i:i + 1000])
        self.discarded = []
