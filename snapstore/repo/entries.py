"""Reading entries: an entry's bytes from its pack, data blocks decompressed with their dictionary.

Layer 3, one part of :class:`snapstore.repo.repository.Repository` (``repo.entries``; the repository's
:meth:`~snapstore.repo.repository.Repository.read_entry` and ``read_entry_in`` are this part's). A data
block compressed with a raw-content dictionary (docs/format.md §8) is decompressed with the
messages the dictionary is cut from: found among the messages a restore decoded so far
(:class:`ReadContext`), else read through the tree (:meth:`EntryReader.resolve_dict`).
"""

from __future__ import annotations

import threading

from ..errors import IntegrityError, ObjectNotFound, SnapstoreError
from ..format.ids import Hasher
from ..format.pack import T_CHUNK, T_PIECES, DictSpec, Pack


class ReadContext:
    """Messages decoded so far by an in-order restore; lets data blocks find their dictionary.

    ``verified``: whether the raws added were each checked against their content id. When not
    (a restore that verifies the whole list afterwards), the raws a dictionary is cut from are
    checked here first: a dictionary made of damaged bytes would decompress a block into
    garbage, and the pack would keep that garbage as its decompressed block."""

    def __init__(self, hasher: Hasher, verified: bool = True, refs: list | None = None, raws: list | None = None):
        """``refs``/``raws``: the list being restored and the list its raws are appended to, in
        order, by the caller (instead of :meth:`add`): message ``i`` is known once ``raws`` holds
        it, and its id is ``refs[i].id``."""
        self.hasher = hasher
        self.verified = verified
        self.refs = refs
        self.ids: list[bytes] = []
        self.raws: list = [] if raws is None else raws

    def add(self, mid: bytes, raw: bytes) -> None:
        """Record message ``mid`` (content id) with its exact JSON ``raw`` as the next one decoded."""
        self.ids.append(mid)
        self.raws.append(raw)

    def _id(self, i: int) -> bytes:
        return self.refs[i].id if self.refs is not None else self.ids[i]

    def dict_for(self, spec: DictSpec) -> bytes | None:
        """The dictionary ``spec`` names, cut from the messages decoded so far, or None when they
        do not hold it (not decoded yet, or not the ones the digest names)."""
        if spec.end > len(self.raws) or spec.start > spec.end:
            return None
        ids = ([r.id for r in self.refs[spec.start:spec.end]] if self.refs is not None
               else self.ids[spec.start:spec.end])
        if self.hasher.content_id(b"".join(ids)) != spec.digest:
            return None
        # the last ``length`` bytes of messages [start, end): join only as many as needed
        parts, acc, i = [], 0, spec.end
        while i > spec.start and acc < spec.length:
            i -= 1
            if not self.verified and self.hasher.content_id(self.raws[i]) != self._id(i):
                return None  # the caller resolves the dictionary from verified reads
            parts.append(self.raws[i])
            acc += len(self.raws[i])
        if acc < spec.length:
            return None
        blob = b"".join(reversed(parts))
        return blob[len(blob) - spec.length:]

class EntryReader:
    """Entries' bytes, verified by content id; dictionaries resolved and remembered.

    Args:
        repo: the :class:`~snapstore.repo.repository.Repository` this part belongs to (its
            ``hasher``, ``cache``, ``locator``, ``forwarding`` and ``trees``).
    """

    DICTS_MAX = 64
    """Most resolved dictionaries remembered; cleared when full."""

    def __init__(self, repo):
        self.repo = repo
        self._dicts: dict = {}  # (pack id, DictSpec) -> dictionary bytes
        self._resolving = threading.local()  # .keys: (pack id, DictSpec) pairs this thread is resolving

    def _resolving_now(self) -> set:
        """The ``(pack id, DictSpec)`` pairs whose dictionary this thread is resolving."""
        busy = getattr(self._resolving, "keys", None)
        if busy is None:
            busy = self._resolving.keys = set()
        return busy

    def read_entry(self, etype: int, eid: bytes, pack_id: bytes, ctx: ReadContext | None = None,
                   verify: bool = True) -> bytes:
        """The bytes of entry ``(etype, eid)`` (type code, content id), looked for first in pack
        ``pack_id`` (its location hint; see :meth:`Locator.locate`), checked against its content id
        unless ``verify`` is False. ``ctx``: the messages an in-order restore decoded so far, where a
        data block's dictionary is found first. A copy that fails (a tier pack, a retired pack
        whose dictionary is gone) is worked around through the hint and the forwarding records.

        Raises:
            IntegrityError: the entry is damaged or its pack corrupt (names the pack).
            ObjectNotFound: the entry is nowhere to be found.
        """
        locator = self.repo.locator
        pack = locator.locate(pack_id, etype, eid)
        try:
            return self.read_entry_in(pack, etype, eid, ctx, verify)
        except SnapstoreError as first:
            if pack.id != pack_id and self.repo.segments.is_indexed(pack.id):
                # a tier pack (a copy) failed: read the entry where its hint says instead; if that
                # is gone too (merged away), the tier pack's failure is the one to name
                try:
                    return self.read_entry_in(locator.locate(pack_id, etype, eid, set()), etype, eid, ctx)
                except (ObjectNotFound, IntegrityError):
                    raise first from None
            # A retired pack exists until GC deletes it, but what its data block's dictionary is
            # made of may already be gone: GC keeps a retired pack's dependencies only while the pack
            # itself holds a live entry. Its live entries were copied (without a dictionary) to the
            # packs its forwarding record names, so read the entry there.
            for new in self.repo.forwarding.forward(pack.id) or ():
                try:
                    return self.read_entry_in(locator.locate(new, etype, eid, {pack.id}), etype, eid, ctx)
                except (ObjectNotFound, IntegrityError):
                    continue
            raise

    def read_entry_in(self, pack: Pack, etype: int, eid: bytes, ctx: ReadContext | None = None,
                      verify: bool = True) -> bytes:
        """An entry's bytes from ``pack``, checked against its content id unless ``verify`` is
        False (a caller that verifies what it reads as a whole: :meth:`TreeReader.read_list`).
        ``ctx`` as for :meth:`read_entry`.

        Raises:
            IntegrityError: the entry does not match its id, or its block does not decompress.
            KeyError: ``pack`` does not hold the entry.
        """
        e = pack.entries[(etype, eid)]
        spec = pack.blocks[e.block].dict
        d = None
        if spec is not None and pack.held_block(e.block) is None:
            d = ctx.dict_for(spec) if ctx is not None else None
            if d is None:
                d = self.resolve_dict(pack, spec)
        raw = pack.entry_bytes(e, d)
        if verify and etype != T_PIECES and self.repo.hasher.content_id(raw) != eid:
            raise IntegrityError(pack.key, f"entry {eid.hex()} ({chr(etype)}) does not match its content id")
        return raw

    def shared_dict(self, shared_pack: bytes, content_id: bytes) -> bytes:
        """The dictionary of an array block of kind 6 (docs/format.md §8, §29): the bytes of chunk
        ``content_id`` (16 bytes) in shared pack ``shared_pack`` (8 bytes), read through the pack
        cache (the shared pack is a segment of every record listing a pack that uses it, so it is
        at hand after the segment wave) and checked against its content id.

        Raises:
            IntegrityError: the shared pack does not hold that chunk, or it does not match its id.
            ObjectNotFound: the shared pack is gone.
        """
        pack = self.repo.cache.get_pack(shared_pack, ranged=True)
        if pack.blocks and any(b.shared is not None for b in pack.blocks):
            raise IntegrityError(pack.key, "a shared object used as a dictionary has a dictionary itself")
        try:
            return self.read_entry_in(pack, T_CHUNK, content_id)
        except KeyError:
            raise IntegrityError(pack.key, f"shared object does not hold chunk {content_id.hex()}, "
                                 "the dictionary a pack's array block names") from None

    def resolve_dict(self, pack: Pack, spec: DictSpec) -> bytes:
        """The dictionary ``spec`` of a data block of ``pack``: the last ``spec.length`` bytes of
        messages ``[spec.start, spec.end)`` of the list the pack's state names, read through the
        tree and checked against ``spec.digest`` (remembered: at most 64 dictionaries).

        Raises:
            IntegrityError: the messages do not match the digest, are too short, or are stored only
                in the block they compress (names the pack).
            ObjectNotFound: a message is nowhere to be found.
        """
        key = (pack.id, spec)
        with self.repo.cache.lock:
            d = self._dicts.get(key)
        if d is not None:
            return d
        busy = self._resolving_now()
        trees = self.repo.trees
        if key in busy:
            # the dictionary's own messages were found only in the block it compresses (written
            # before writers kept those chunks out of it): a cycle, not data
            raise IntegrityError(pack.key, "the data block's dictionary is made of chunks stored only in that block")
        busy.add(key)
        try:
            spine = trees.read_state(*pack.dict_state(spec))
            refs = trees.refs_range(spine, spec.start, spec.end)
            if self.repo.hasher.content_id(b"".join(r.id for r in refs)) != spec.digest:
                raise IntegrityError(pack.key, "dictionary messages do not match the recorded digest")
            raw = b"".join(trees.message_raw(r) for r in refs)
        finally:
            busy.discard(key)
        if len(raw) < spec.length:
            raise IntegrityError(pack.key, "dictionary shorter than recorded")
        d = raw[len(raw) - spec.length:]
        with self.repo.cache.lock:
            if len(self._dicts) > self.DICTS_MAX:
                self._dicts.clear()
            self._dicts[key] = d
        return d

