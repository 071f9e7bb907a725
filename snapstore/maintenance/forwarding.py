"""The forwarding map: where the live entries of packs retired by repacking went.

Layer 3 (uses :mod:`snapstore.repo.repository`; used by :mod:`snapstore.maintenance.verify` and :mod:`snapstore.maintenance.gc`).
See docs/format.md, section 13.

The map is stored in at most 16 shards, ``fwd/<1 hex>``, each holding the records of the retired
packs whose ids start with that hex digit: ``retired pack -> (new packs, store time of the GC that wrote
the record)``. Only GC writes shards (holding ``gc/lock``, with conditional writes on each shard's
ETag); readers read one shard when they meet a pack that is gone
(:meth:`snapstore.repo.repository.Repository.forward`). Repositories written before the map have one
object per record, ``fwd/<16 hex>``: they are read as records of the map, and the first GC that
writes the map moves them into their shards and deletes them.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import ConflictError, ObjectNotFound, PreconditionFailed, SnapstoreError
from ..format import keys
from ..format.forward import decode_forward, decode_forward_shard, encode_forward_shard
from ..repo.repository import Repository
from ..stores.base import ObjectInfo

WRITE_PARALLEL = 16
"""Shard writes in flight during :meth:`ForwardMap.flush`."""


@dataclass
class FlushResult:
    """What :meth:`ForwardMap.flush` wrote and deleted.

    Attributes:
        written_bytes: bytes of the shards written minus the bytes they replaced (may be negative).
        written_objects: shards created.
        writes: shards written (created or replaced).
        deleted_objects / deleted_bytes: shards that became empty and per-pack records moved into
            shards, deleted; their bytes.
    """

    written_bytes: int = 0
    written_objects: int = 0
    writes: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0


@dataclass
class ForwardMap:
    """Every forwarding record of a repository, as read at one moment, and GC's changes to them.

    Attributes:
        to: retired pack id -> the pack ids its live entries moved to (in order).
        time: retired pack id -> store time (seconds since the epoch, UTC) at which the record was
            last written (a per-pack record's own timestamp).
        shards: shard key -> its ObjectInfo (as listed, then as this map wrote it).
        legacy: per-pack record key -> ObjectInfo, for records in the layout before the map.
        errors: ``(key, error)`` for objects that could not be read or decoded.
    """

    repo: Repository
    to: dict = field(default_factory=dict)
    time: dict = field(default_factory=dict)
    shards: dict = field(default_factory=dict)
    legacy: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    etag_like: str = ""  # an ETag of this store: its length sizes the ETags a dry-run flush invents
    _dirty: set = field(default_factory=set)

    @classmethod
    def load(cls, repo: Repository, listing, cache: dict | None = None) -> "ForwardMap":
        """Read the map from the objects listed under ``fwd/`` (``listing``: ObjectInfo items).

        ``cache``: ``gc/fwd-cache`` as decoded (pack -> (shard ETag, targets, time)); a shard whose
        listed ETag is the one the cache recorded for it is taken from the cache instead of read
        (GC writes the cache from the whole map, so it holds every record of that shard version).
        Shards and per-pack records are read in parallel on the repository's GET pool. Objects
        deleted since the listing are skipped; unreadable ones go to :attr:`errors`. A per-pack
        record whose pack has no record in its shard is taken into the map and its shard marked
        for writing, so the next :meth:`flush` migrates it.
        """
        fm = cls(repo)
        cached: dict[str, dict] = {}
        for pid, (etag, to, t) in (cache or {}).items():
            if t is not None:
                cached.setdefault(keys.fwd_shard_key(pid), {}).setdefault(etag, {})[pid] = (to, t)
        shard_infos, record_infos = [], []
        for info in listing:
            kind = keys.parse_fwd_key(info.key)
            if kind is None:
                continue
            if kind[0] == "shard" and info.etag and info.etag in cached.get(info.key, {}):
                fm.shards[info.key] = info
                for pid, (to, t) in cached[info.key][info.etag].items():
                    fm.to[pid], fm.time[pid] = list(to), t
                continue
            (shard_infos if kind[0] == "shard" else record_infos).append((info, kind[1]))

        def read(item):
            info, name = item
            try:
                data = repo.store.get(info.key)
                if isinstance(name, str):  # a shard, named by its hex digit
                    return info, decode_forward_shard(info.key, data, name), None
                return info, decode_forward(info.key, data), None
            except ObjectNotFound:
                return info, None, None
            except SnapstoreError as e:
                return info, None, e

        items = shard_infos + record_infos
        got = list(repo.pool.map(read, items)) if len(items) > 1 else [read(i) for i in items]
        for info, value, err in got[:len(shard_infos)]:
            if err is not None:
                fm.errors.append((info.key, err))
            elif value is not None:
                fm.shards[info.key] = info
                for pid, (to, t) in value.items():
                    fm.to[pid], fm.time[pid] = to, t
        for (info, value, err), (_, pid) in zip(got[len(shard_infos):], record_infos):
            if err is not None:
                fm.errors.append((info.key, err))
                continue
            if value is None:
                continue
            fm.legacy[info.key] = info
            if pid not in fm.to:  # not migrated yet
                fm.to[pid], fm.time[pid] = value, info.mtime
            fm._dirty.add(keys.fwd_shard_key(pid))
        return fm

    def shard_etag(self, pack_id: bytes) -> str:
        """ETag of the shard holding ``pack_id``'s record ("" if not written yet)."""
        info = self.shards.get(keys.fwd_shard_key(pack_id))
        return info.etag if info is not None else ""

    def set(self, pack_id: bytes, to: list[bytes], now: float) -> None:
        """Record (or replace) that ``pack_id``'s live entries are in ``to`` (written by :meth:`flush`).
        ``now``: the store time of the GC writing it (seconds)."""
        self.to[pack_id] = list(to)
        self.time[pack_id] = now
        self._dirty.add(keys.fwd_shard_key(pack_id))

    def remove(self, pack_id: bytes) -> None:
        """Drop ``pack_id``'s record (written by :meth:`flush`)."""
        if self.to.pop(pack_id, None) is not None:
            self.time.pop(pack_id, None)
            self._dirty.add(keys.fwd_shard_key(pack_id))

    def flush(self, dry_run: bool = False) -> FlushResult:
        """Write every changed shard (conditionally on the ETag it was read with; create-only when
        new), delete shards left empty, then delete per-pack records whose shard now holds them.

        Returns:
            A :class:`FlushResult` (``dry_run``: what would be written; nothing is, but the map
            then describes the shards as if it had been, so it must not be flushed for real).
        Raises:
            ConflictError: a shard changed since it was read (another GC took over the lock).
            StoreError: the store failed; shards written before the failure stay written.
        """
        res = FlushResult()
        by_shard: dict[str, dict] = {k: {} for k in self._dirty}
        for pid, to in self.to.items():
            k = keys.fwd_shard_key(pid)
            if k in by_shard:
                by_shard[k][pid] = (to, self.time[pid])
        writes, deletes = [], []
        for k, entries in sorted(by_shard.items()):
            old = self.shards.get(k)
            if entries:
                writes.append((k, encode_forward_shard(entries), old))
            elif old is not None:
                deletes.append((k, old))

        def write(item):
            k, data, old = item
            if dry_run:  # what the shard would look like (so a later flush counts from there); an
                # ETag as long as the store's (the forwarding cache records them), but not a real one
                like = old.etag if old is not None else self.etag_like
                fake = _dry_run_etag(like, len(data))
                return k, ObjectInfo(k, len(data), fake, 0.0)
            try:
                return k, self.repo.store.put_if_match(k, data, old.etag if old is not None else None)
            except PreconditionFailed:
                raise ConflictError(f"forwarding-map shard {k} changed while this GC held the lock "
                                    "(another GC took it over?); GC stopped, run it again") from None

        if len(writes) > 1 and not dry_run:
            with ThreadPoolExecutor(min(WRITE_PARALLEL, len(writes)), thread_name_prefix="snapstore-fwd") as pool:
                done = list(pool.map(write, writes))
        else:
            done = [write(w) for w in writes]
        res.writes = len(writes)
        for (k, data, old), (_, info) in zip(writes, done):
            res.written_bytes += len(data) - (old.size if old is not None else 0)
            res.written_objects += old is None
            self.shards[k] = info
        migrated = [k for k in self.legacy
                    if keys.fwd_shard_key(keys.parse_fwd_key(k)[1]) in by_shard]
        if not dry_run and deletes + migrated:
            self.repo.store.delete_many([k for k, _ in deletes] + migrated)
        for k, old in deletes:
            res.deleted_objects += 1
            res.deleted_bytes += old.size
            del self.shards[k]
        for k in migrated:
            res.deleted_objects += 1
            res.deleted_bytes += self.legacy.pop(k).size
        self._dirty.clear()
        return res


_LOCAL_ETAG = re.compile(r"^([0-9a-f]+)\.([0-9a-f]+)\.([0-9a-f]+)$")


def _dry_run_etag(like: str, size: int) -> str:
    """An ETag shaped like ``like`` (an ETag of the same store) for a shard of ``size`` bytes that a
    dry run does not write, so that the forwarding cache it sizes compresses like the real one: a
    local ETag (``inode.mtime_ns.size`` in hex) gets a nearby inode, the current time and the
    real size; any other (S3's quoted MD5) keeps its punctuation with every hex digit random."""
    if not like:
        return "(dry run)"
    m = _LOCAL_ETAG.match(like)
    if m:
        rnd = int.from_bytes(os.urandom(6), "big")
        ino = int(m.group(1), 16) + 1 + (rnd & 0x3F)
        mtime = time.time_ns() + (rnd >> 6) % 10_000_000  # written within milliseconds
        return f"{ino:x}.{mtime:x}.{size:x}"
    digits = iter(os.urandom(len(like)).hex())
    return "".join(next(digits) if c in "0123456789abcdefABCDEF" else c for c in like)


def read_forward_map(repo: Repository) -> ForwardMap:
    """List ``fwd/`` and load the whole forwarding map (see :meth:`ForwardMap.load`)."""
    return ForwardMap.load(repo, list(repo.store.list(keys.FWD)))


__all__ = ["ForwardMap", "FlushResult", "read_forward_map"]
