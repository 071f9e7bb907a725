"""Reading session-state value trees (docs/format.md §7).

Layer 3, one part of :class:`snapstore.repo.repository.Repository` (``repo.values``): a session state
larger than 4 KiB is stored as a value tree whose leaves are pieces of its JSON; this part reads
its spine and nodes (:meth:`ValueReader.refs`), what a writer dedups against
(:meth:`ValueReader.known`), and the state itself (:meth:`ValueReader.read`,
:meth:`ValueReader.load_session_state`).
"""

from __future__ import annotations

from ..errors import IntegrityError
from ..format import keys
from ..format.codec import decode_json
from ..format.manifest import Manifest
from ..format.pack import T_CHUNK, T_VALUE
from ..format.tree import FLAG_EXACT, Ref, Spine
from ..format.valuetree import READ_PIECE_MAX, ValueTree
from .liststate import ValueKnown


class ValueReader:
    """Session-state value trees: their pieces, what a writer knows of them, their bytes.

    Holds no state. Args:
        repo: the :class:`~snapstore.repo.repository.Repository` this part belongs to (its
            ``hasher``, ``locator``, ``entries`` and ``trees``).
    """

    def __init__(self, repo):
        self.repo = repo

    def refs(self, tree: ValueTree, nodes: dict | None = None) -> tuple[Spine, list[Ref]]:
        """Read a session-state value tree's spine and expand it: ``(spine, piece refs in order)``.

        ``nodes``, if given, records every node read (node id -> pack id). Checks that the pieces'
        sizes add up to ``tree.size`` and that none is longer than READ_PIECE_MAX before anything
        is fetched, so a damaged tree cannot make a reader allocate more than the manifest says.

        Raises:
            IntegrityError: a malformed spine or node, or sizes that do not match (names the pack).
            ObjectNotFound: an entry is nowhere to be found.
        """
        spine = self.repo.trees.read_state(tree.spine, tree.pack, T_VALUE)
        refs = self.repo.trees.expand(spine, nodes)
        total = 0
        for r in refs:
            if r.flags or r.size > READ_PIECE_MAX or r.size == 0:
                raise IntegrityError(keys.pack_key(tree.pack), f"value spine {tree.spine.hex()}: piece {r.id.hex()} "
                                     f"has flags {r.flags} and size {r.size} (pieces are plain, 1 to {READ_PIECE_MAX} bytes)")
            total += r.size
        if total != tree.size:
            raise IntegrityError(keys.pack_key(tree.pack), f"value spine {tree.spine.hex()}: pieces hold {total} bytes, "
                                 f"the manifest says {tree.size}")
        return spine, refs

    def known(self, tree: ValueTree) -> ValueKnown:
        """What a writer needs to dedup a new session state against stored value tree ``tree``
        (its pieces and sealed nodes, with their pack hints); reads the tree (not the pieces)."""
        nodes: dict = {}
        spine, refs = self.refs(tree, nodes)
        return ValueKnown(tree, {r.id: r for r in refs}, nodes, spine.upper)

    def read(self, tree: ValueTree) -> bytes:
        """Return a session-state value tree's exact JSON bytes, verified piece by piece and as a
        whole against ``tree.id``. Raises IntegrityError (naming the pack) / ObjectNotFound."""
        _, refs = self.refs(tree)
        self.repo.locator.prefetch(self.repo.locator.packs_to_fetch((T_CHUNK, r.id, r.pack) for r in refs))
        self.repo.locator.fetch_blocks((T_CHUNK, r.id, r.pack) for r in refs)
        out = bytearray()
        for r in refs:
            piece = self.repo.entries.read_entry(T_CHUNK, r.id, r.pack)
            if len(piece) != r.size:
                raise IntegrityError(keys.pack_key(r.pack), f"piece {r.id.hex()} is {len(piece)} bytes, its ref says {r.size}")
            out += piece
        raw = bytes(out)
        if self.repo.hasher.content_id(raw) != tree.id:
            raise IntegrityError(keys.pack_key(tree.pack), f"session state {tree.id.hex()} (value spine "
                                 f"{tree.spine.hex()}) does not match its content id")
        return raw

    def load_session_state(self, m: Manifest):
        """Return the checkpoint's session state (inline, from its value tree, or from the chunk
        an earlier version wrote), or None.

        Raises:
            IntegrityError: the stored state is damaged (the error names the object).
            ObjectNotFound: part of it is gone.
        """
        if m.session_state_tree is not None:
            tree = m.session_state_tree
            raw = self.read(tree)
            try:
                return decode_json(raw, bool(tree.flags & FLAG_EXACT))
            except (ValueError, UnicodeDecodeError) as e:
                raise IntegrityError(keys.pack_key(tree.pack), f"session state {tree.id.hex()} is not JSON: {e}") from None
        if m.session_state_ref is None:
            return m.session_state
        sid, pack, size, flags = m.session_state_ref
        raw = self.repo.trees.message_raw(Ref(bytes.fromhex(sid), size, 1, flags, bytes.fromhex(pack)))
        return decode_json(raw, bool(flags & FLAG_EXACT), f"session state {sid} (hinted in packs/{pack[:2]}/{pack})")
