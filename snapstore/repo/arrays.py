"""The one-pass array read: a checkpoint's messages from its segments' array blocks, without the tree.

Layer 3, one part of :class:`snapstore.repo.repository.Repository` (``repo.arrays``). A writer keeps,
in each segment, an array block holding the messages it appended as one JSON array; for a run that
only appended, any checkpoint's list is the arrays' first ``count`` items (docs/format.md §19,
"Array blocks"). :meth:`ArrayReader.read` plans where the list is, then hashes (and parses) it in
one pass; anything that is not exactly this list returns None and the tree path reads it.
"""

from __future__ import annotations

import orjson

from ..errors import SnapstoreError
from ..format.manifest import Manifest
from ..format.pack import T_CHUNK, T_HOLE, T_PIECES, Pack
from ..format.tree import FLAG_PIECES, Ref, decode_pieces


class ArrayReader:
    """Reads message lists from array blocks (and fetches what large messages need).

    Holds no state. Args:
        repo: the :class:`~snapstore.repo.repository.Repository` this part belongs to (its
            ``hasher``, ``cache``, ``locator``, ``entries`` and ``trees``).
    """

    def __init__(self, repo):
        self.repo = repo

    def read(self, m: Manifest, segs) -> tuple[list, object] | None:
        """Restore checkpoint ``m``'s messages from the array blocks of the segments ``segs`` (the
        run's newest record's, already fetched), without the tree (docs/format.md §19, "Array
        blocks"): ``(messages, digest)`` (digest as :meth:`TreeReader.read_list` returns it), or None when
        that is not this list (the caller then reads it through the tree).

        The arrays of the segments, in order, hold every message the run appended, in order; for
        a run that only appended, any checkpoint's list is their first ``count`` items. They are
        used only when none of ``m``'s messages needs the exact parser (the manifest's
        ``messages.x`` is 0, bound to the list by its keyed tag ``messages.xt``) and the keyed
        hash of those items' JSON (holes filled in with the messages they name) is ``m``'s list
        digest (a record saying ``messages.a`` = 1 is parsed while it is hashed, and what was parsed
        is dropped if the hash differs; one without ``messages.a`` is parsed only after the hash
        matched; ``messages.a`` = 0 is not read from arrays). Anything else (a run rewritten, rolled back or
        repacked by GC, a damaged block, a record without ``messages.x``) returns None, and the tree
        path reads, verifies and names damage as always. Memory: the list's JSON once, as when
        reading it through the tree.
        """
        if not m.count or m.exact != 0 or len(m.digest) != 32:
            return None
        if m.arrays == 0:
            return None  # the writer knew the arrays hold more than this list, or another one
        if m.exact_tag != self.repo.hasher.exact_tag(m.digest, 0, m.arrays):
            return None  # x and a not bound to this list under the key (a record re-sealed): the tree
        with self.repo.cache.lock:
            packs = [self.repo.cache.get(s.pack) for s in segs]
        if None in packs:
            return None  # a segment GC rewrote, evicted or gone: the tree path finds its entries
        blocks, held, total = [], 0, 0  # the array blocks holding the first ``count`` items
        for p in packs:
            for bi, b in enumerate(p.blocks):
                if b.array:
                    if held < m.count:
                        blocks.append((p, bi))
                        held += b.nitems
                    total += b.nitems
        if held < m.count:
            return None
        ranged = {p: {bi for q, bi in blocks if q is p} for p in packs if not p.whole}
        if ranged:
            self.repo.cache.fetch_pack_blocks(ranged)
            self._fetch_holes(blocks)
        # the list's JSON is at most messages.bytes plus its brackets and separators: items that
        # come to more are not this list (holes would read a large message once per hole before
        # the digest says so), so what is read stays within what the manifest says the list is
        budget = m.size + m.count + 1
        plan = self._plan(m, blocks, budget)
        if plan is None:
            return None
        # one pass only where the writer's knowledge still holds: the arrays hold exactly this
        # list (the head of a run that only appended). An older checkpoint's items are the
        # arrays' first ones too, unless GC dropped arrays since (its copies hold none, and a
        # later merge concatenates what is left): hashed first, so that such a run is not
        # parsed on every read only to be dropped
        return self._parse(m, plan, hash_first=not (m.arrays == 1 and total == m.count))

    ARRAY_RUN = 48 << 10
    """Most bytes of array items :meth:`read` parses in one call (a run of consecutive
    items; a longer item on its own). Small enough that the parser's buffers and the copy come
    from memory the previous run freed, rather than fresh pages; large enough that per-call costs
    do not show."""

    def _plan(self, m: Manifest, blocks, budget: int):
        """Where checkpoint ``m``'s list is in the array blocks ``blocks`` (``(pack, block index)``
        in list order): per block ``(pack, index, runs, stop)``. ``runs`` cover its items in
        order: ``(start, end, n, None)`` for ``n`` consecutive items stored in the block (their
        bytes, commas between them, are ``[start, end)``), ``(offset, offset, 1, raw)`` for a hole
        (``raw``: the message it names, read here); ``stop`` is where the list's bytes in the block
        end (before the closing bracket, or before the comma after its last item).

        Returns None when the items come to more than ``budget`` bytes or a hole's message cannot
        be read: not this list.
        """
        left = m.count  # items still to take: the list is the arrays' first ``count`` items
        plan = []
        run_max = self.ARRAY_RUN
        for p, bi in blocks:
            if not left:
                break
            b = p.blocks[bi]
            runs: list = []
            stop = b.rawlen - 1
            rs = re = -1  # the current run of stored items: bytes [rs, re), ``rn`` items
            rn = 0
            cur = -1  # where the current item starts
            for t, mid, off, ln, cont in b.parts:
                budget -= ln
                if cont:
                    re = off + ln
                    if rn > 1 and re - rs > run_max:
                        # a multi-part item that made the run too long: it starts a run of its own
                        runs.append((rs, cur - 1, rn - 1, None))
                        rs, rn = cur, 1
                    continue
                cur = off
                if not left:  # past the checkpoint's list (an older checkpoint of the run)
                    stop = off - 1  # before the comma
                    budget += ln
                    break
                left -= 1
                if t == T_HOLE:
                    if rn:
                        runs.append((rs, re, rn, None))
                        rn = 0
                    hraw = self._hole_raw(p, mid, budget)
                    if hraw is None:
                        return None
                    budget -= len(hraw)
                    runs.append((off, off, 1, hraw))
                elif rn and off + ln - rs <= run_max:
                    re = off + ln
                    rn += 1
                else:
                    if rn:
                        runs.append((rs, re, rn, None))
                    rs, re, rn = off, off + ln, 1
            if rn:
                runs.append((rs, re, rn, None))
            if budget < 0:
                return None
            plan.append((p, bi, runs, stop))
        return plan if not left else None

    def _fetch_holes(self, blocks) -> None:
        """Fetch the blocks of ranged packs that the holes of the array blocks ``blocks`` (``(pack,
        block index)``) name (see :meth:`fetch_large`), so that :meth:`_hole_raw` then reads them
        from memory: one round trip per wave, not one per hole."""
        holes = [(x[1], p.id) for p, bi in blocks for x in p.blocks[bi].parts if x[0] == T_HOLE]
        if holes:
            self.fetch_large(holes, chunks=True)

    def fetch_large(self, messages, chunks: bool = False) -> None:
        """Fetch, in two parallel waves, the blocks of ranged packs that large messages need:
        their pieces lists (and, with ``chunks``, the chunk under the message's id, for a message
        that may be stored whole), then the pieces those lists name. ``messages``: ``(message id,
        hinted pack id)``, looked up as :meth:`Locator.fetch_blocks` does. Best effort: what cannot be
        found or read is left to the read, which reports it."""
        messages = list(messages)
        items = [(T_PIECES, mid, hp) for mid, hp in messages]
        if chunks:
            items += [(T_CHUNK, mid, hp) for mid, hp in messages]
        self.repo.locator.fetch_blocks(items)
        pieces = []
        for mid, hp in messages:
            home = self.repo.locator.holder((T_PIECES, mid), hp)
            if home is None:
                continue
            try:
                pieces.extend((T_CHUNK, x.id, x.pack) for x in decode_pieces(self.repo.entries.read_entry(T_PIECES, mid, home.id)))
            except (IndexError, ValueError, SnapstoreError):
                continue
        if pieces:
            self.repo.locator.fetch_blocks(pieces)


    def _hole_raw(self, p: Pack, mid: bytes, budget: int) -> bytes | None:
        """The message a hole in pack ``p`` names (``mid``: its content id): a chunk under its id,
        or a pieces list; its size is known before its bytes are read, and a message larger than
        ``budget`` bytes is not read (None, as for one that cannot be found or read)."""
        ck = (T_CHUNK, mid)
        home = self.repo.locator.holder(ck, p)
        if home is not None:
            hsize, flags = home.entries[ck].length, 0
        else:
            # a pieces list: in this pack, or (a repeat of a large message stored before) in the
            # segment that holds it
            home = self.repo.locator.holder((T_PIECES, mid), p)
            if home is None:
                return None
            try:
                hsize = sum(x.size for x in decode_pieces(self.repo.entries.read_entry(T_PIECES, mid, home.id)))
            except (IndexError, ValueError, SnapstoreError):
                return None
            flags = FLAG_PIECES
        if hsize > budget:
            return None
        try:
            hraw = self.repo.trees.message_raw(Ref(mid, hsize, 1, flags, home.id), verify=False)
        except SnapstoreError:
            return None
        return hraw if len(hraw) == hsize else None

    def _parse(self, m: Manifest, plan, hash_first: bool) -> tuple[list, object] | None:
        """Read the list from the planned array blocks: ``(messages, digest)``, or None when the
        keyed hash of the items' JSON is not ``m``'s list digest or a block or an item is damaged
        (the tree path then reads the list and names the damage).

        Each block is decompressed when its turn comes and dropped after (kept in the pack only
        when read a second time: :meth:`Pack.raw_block` ``keep=False``), the list's JSON is hashed in order (``[``, each
        block's part of the list with its holes' messages in place, commas between blocks), and
        each run of items is parsed in one call. The head of a run whose writer knew the arrays
        held exactly this list, and that they still hold exactly ``count`` items (``messages.a``
        = 1), is parsed while it is hashed, in one pass; what was parsed is dropped if the hash
        differs (a damaged or forged record). Otherwise (``hash_first``: a record written before
        ``messages.a``, or an older checkpoint, whose arrays GC may have thinned), a first pass
        hashes and a second parses only if the hash matched, so that a run whose arrays hold
        another list is not parsed on every read.
        """
        if hash_first:
            got = self._pass(plan, False)
            if got is None or got[0].hexdigest(16) != m.digest:
                return None
        got = self._pass(plan, True)
        if got is None or got[0].hexdigest(16) != m.digest or len(got[2]) != m.count:
            return None  # not this list (a run rewritten, rolled back...)
        return got[2], got[1]

    def _pass(self, plan, parse: bool):
        """One pass over the planned array blocks: ``(digest of the list's JSON, digest without the
        closing bracket, messages)`` (messages empty unless ``parse``), or None when a block does
        not decompress or an item does not parse as the plan says."""
        digest = self.repo.hasher.new_digest()
        update = digest.update
        loads = orjson.loads
        out: list = []
        extend = out.extend
        try:
            for j, (p, bi, runs, stop) in enumerate(plan):
                b = p.blocks[bi]
                raw = p.raw_block(bi, keep=False)  # kept if read again: a process reading many checkpoints
                mv = memoryview(raw)
                update(b"," if j else b"[")
                pos = 1
                close = b.rawlen - 1  # the block's closing bracket
                for s, e, n, hraw in runs:
                    # the bytes around each run and hole are what the hash takes as the list's
                    # brackets and commas (it hashes ``[`` and ``,`` of its own before a block and
                    # the bytes between its brackets), so that parsing the runs apart is parsing
                    # the hashed list: a forged byte there (a digit of a number split in two, a
                    # space for a bracket of a block parsed whole) is not this list
                    c = raw[s - 1]
                    if c != 0x2C and not (s == 1 and c == 0x5B):
                        return None
                    c = raw[e]
                    if c != 0x2C and not (e == close and c == 0x5D):
                        return None
                    if hraw is not None:
                        update(mv[pos:s])
                        update(hraw)
                        pos = s
                        if parse:
                            out.append(loads(hraw))
                    elif parse:
                        if s == 1 and e == stop == close:
                            got = loads(raw)  # the whole block: its own brackets
                        else:
                            got = loads(b"".join((b"[", mv[s:e], b"]")))
                        if type(got) is not list or len(got) != n:
                            return None
                        extend(got)
                update(mv[pos:stop])
                del mv
        except (ValueError, RecursionError, SnapstoreError):
            return None
        last = digest.copy()
        last.update(b"]")
        return last, digest, out
