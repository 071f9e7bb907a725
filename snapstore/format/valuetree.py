"""Session state as a deduplicated value: cutting a JSON value's exact bytes into pieces, and the
manifest field that names the value's tree.

A session state whose exact JSON (docs/format.md §6) is longer than ``inline_state_max`` is stored
as a *value tree* (docs/format.md §7): its bytes ``S`` are cut into *pieces* whose concatenation
is ``S``; each piece is a chunk (``c`` entry, named by its content id), and the pieces' refs form a
list stored exactly like a message list (§9): sealed nodes (``n``), an upper entry (``u``) and a
*value spine* entry (``v``, the layout of a state entry). The manifest names the spine and the
value's content id (:class:`ValueTree`).

Where the cuts go is the writer's choice (a reader only concatenates); :func:`split_value` cuts at
the value's structure so that a changed key costs about that key and a growing list the new
elements: containers longer than :data:`SPLIT_MIN` bytes are descended into (each starts a piece
and its closing bracket ends one); a member (a dict's value, a list's element) of at least
:data:`OWN_MIN` bytes is a piece of its own, and smaller members are grouped: a piece is cut after
a small member once it holds :data:`PIECE_MIN` bytes and the member's hash says so (1 in
2^:data:`CUT_BITS`), or once it holds :data:`PIECE_TARGET` bytes; leaves longer than
:data:`LEAF_CDC` bytes are cut by FastCDC (:data:`CDC_MIN`/:data:`CDC_AVG`/:data:`CDC_MAX`).
Every piece is at most :data:`PIECE_MAX` bytes.
Cuts depend only on the bytes before them since the last cut, so equal stretches of two versions
of a state give equal pieces (dedup).

Pure functions; no I/O.
"""

from __future__ import annotations

import zlib
from typing import NamedTuple

import orjson

from .codec import _ORJSON_OPTS, dumps_exact
from .ids import ID_BYTES, PACK_ID_BYTES

SPLIT_MIN = 4096
"""A dict or list whose JSON is longer than this is split into its members (bytes)."""
PIECE_MIN = 512
"""No content-defined cut before a piece holds this many bytes."""
OWN_MIN = 1024
"""A member at least this long is a piece of its own (bytes)."""
PIECE_TARGET = 16384
"""A piece is cut at the next member boundary once it holds this many bytes."""
PIECE_MAX = 65536
"""Writers never write a longer piece (bytes)."""
READ_PIECE_MAX = 1 << 20
"""Readers refuse a piece longer than this (bytes)."""
READ_STATE_MAX = 1 << 32
"""Readers refuse a value tree whose manifest says it is this long or longer (bytes)."""
CUT_BITS = 1
"""A member ends a piece (past :data:`PIECE_MIN`) when the low bits of its crc32 are zero."""
LEAF_CDC = 16384
"""A leaf (string, number) or unsplit container longer than this is cut by FastCDC."""
CDC_MIN, CDC_AVG, CDC_MAX = 2048, 8192, 32768
"""FastCDC sizes for long leaves (the normalised "fat" variant of the ``fastcdc`` package)."""
CAND, FORCE = 1, 2
"""Atom cut kinds in :func:`split_value`: a candidate (content-defined) cut, a forced cut."""
MAX_DEPTH = 32
"""Containers nested deeper than this are not descended into (cut as leaves)."""
ENCODE_BUDGET = 8
"""Descending re-encodes members; once it has encoded this many times ``len(S)`` bytes, the
containers left are cut as leaves (so a deeply nested state costs O(len(S)) to cut)."""


def _fastcdc():
    """``fastcdc.fastcdc``, imported on first use: only writers cut large values, and the package
    (with click, which it imports) costs a reader's fresh process about 9 ms of import time."""
    from fastcdc import fastcdc

    return fastcdc


class ValueTree(NamedTuple):
    """The manifest's ``session_state_tree``: what a reader needs to restore the value.

    Attributes:
        id: 16-byte content id of the value's exact JSON bytes ``S``.
        size: ``len(S)`` in bytes.
        flags: ``FLAG_EXACT`` (2) when ``S`` needs the exact decoder, else 0.
        spine: 16-byte id of the value spine entry (``v``).
        pack: 8-byte id of the pack that holds the spine entry (a location hint).
    """

    id: bytes
    size: int
    flags: int
    spine: bytes
    pack: bytes

    def to_json(self) -> list:
        """``["<id hex>", size, flags, "<spine id hex>", "<pack hex>"]`` (the manifest field)."""
        return [self.id.hex(), self.size, self.flags, self.spine.hex(), self.pack.hex()]

    @classmethod
    def from_json(cls, v) -> "ValueTree":
        """Parse the manifest field. Raises ValueError on anything malformed (the manifest decoder
        turns it into an IntegrityError naming the manifest)."""
        if not isinstance(v, list) or len(v) != 5:
            raise ValueError("session_state_tree is not a list of 5 items")
        sid, size, flags, spine, pack = v
        if type(size) is not int or not 0 <= size < READ_STATE_MAX:
            raise ValueError(f"session_state_tree size {size!r} out of range")
        if type(flags) is not int or flags not in (0, 2):
            raise ValueError(f"session_state_tree flags {flags!r} unknown")
        out = []
        for name, h, n in (("id", sid, ID_BYTES), ("spine", spine, ID_BYTES), ("pack", pack, PACK_ID_BYTES)):
            if not isinstance(h, str) or len(h) != 2 * n or h != h.lower():
                raise ValueError(f"session_state_tree {name} {h!r} is not {2 * n} lowercase hex digits")
            out.append(bytes.fromhex(h))
        return cls(out[0], size, flags, out[1], out[2])


def _cdc(raw: bytes) -> list[bytes]:
    return [raw[c.offset:c.offset + c.length]
            for c in _fastcdc()(raw, min_size=CDC_MIN, avg_size=CDC_AVG, max_size=CDC_MAX, fat=True)]


def split_value(value, raw: bytes, exact: bool) -> list[bytes]:
    """Cut the exact JSON bytes ``raw`` of ``value`` into pieces (see the module docstring).

    Args:
        value: the JSON value (already validated).
        raw: its exact encoding (:func:`snapstore.format.codec.encode_json`).
        exact: True when ``raw`` was written by :func:`dumps_exact` (then every member is too).
    Returns:
        Pieces (bytes, each 1 to :data:`PIECE_MAX` long) whose concatenation is ``raw``. If the
        members' encodings do not concatenate to ``raw`` (they always should), ``raw`` is cut by
        FastCDC alone.
    """
    encode = dumps_exact if exact else (lambda v: orjson.dumps(v, option=_ORJSON_OPTS))
    budget = [ENCODE_BUDGET * len(raw)]  # bytes the descent may encode again: bounded CPU

    def enc(v) -> bytes:
        b = encode(v)
        budget[0] -= len(b)
        return b
    # atoms: (bytes, cut after it: 0 / CAND / FORCE, hash deciding a CAND cut); in order. A member
    # is a candidate with the crc32 of its whole encoding; separators and keys are not (the ","
    # after a member starts the next piece).
    atoms: list[tuple[bytes, int, int]] = []
    stack: list = [("v", value, raw, 0, False)]  # explicit stack: no recursion limit
    while stack:
        item = stack.pop()
        if item[0] == "b":  # literal bytes (brackets, separators, keys); maybe ending a member
            atoms.append((item[1], item[2], item[3]))
            continue
        _, v, b, depth, cand = item
        if b is None:
            b = enc(v)
        h = zlib.crc32(b) if cand else 0
        is_dict = isinstance(v, dict)
        if len(b) <= SPLIT_MIN or depth >= MAX_DEPTH or not (is_dict or isinstance(v, (list, tuple))) or not v \
                or budget[0] < len(b):
            if len(b) > LEAF_CDC:
                # a long leaf gets pieces of its own: cuts before it, at its CDC cuts, after it
                atoms.append((b"", FORCE, 0))
                atoms.extend((p, FORCE, 0) for p in _cdc(b))
            elif cand and len(b) >= OWN_MIN:
                # a member of at least PIECE_MIN bytes is a piece of its own (like a message chunk):
                # appending to a list then costs the new members, not a rewritten last piece
                atoms.append((b"", FORCE, 0))
                atoms.append((b, FORCE, 0))
            else:
                atoms.append((b, CAND if cand else 0, h))
            continue
        # a split container starts a piece, and its closing bracket ends one
        todo: list = [("b", b"", FORCE, 0), ("b", b"{" if is_dict else b"[", 0, 0)]
        members = list(v.items()) if is_dict else list(v)
        for i, m in enumerate(members):
            if i:
                todo.append(("b", b",", 0, 0))
            if is_dict:
                todo.append(("b", enc(m[0]) + b":", 0, 0))
                m = m[1]
            todo.append(("v", m, None, depth + 1, True))
        todo.append(("b", b"}" if is_dict else b"]", FORCE, 0))
        stack.extend(reversed(todo))
    if b"".join(a[0] for a in atoms) != raw:
        return _group([(p, FORCE, 0) for p in _cdc(raw)])
    return _group(atoms)


def _group(atoms: list[tuple[bytes, int, int]]) -> list[bytes]:
    """Group atoms into pieces: cut after a FORCE atom; after a CAND atom once the piece holds
    PIECE_MIN bytes and the atom's hash has its low CUT_BITS bits zero, or once it holds
    PIECE_TARGET bytes; and before an atom that would make the piece longer than PIECE_MAX (atoms
    are at most CDC_MAX, LEAF_CDC or SPLIT_MIN bytes, all below it)."""
    out: list[bytes] = []
    cur: list[bytes] = []
    acc = 0
    mask = (1 << CUT_BITS) - 1
    for b, cut, h in atoms:
        if cur and acc + len(b) > PIECE_MAX:
            out.append(b"".join(cur))
            cur, acc = [], 0
        if b:
            cur.append(b)
            acc += len(b)
        if cur and (cut == FORCE or (cut == CAND and (acc >= PIECE_TARGET or (acc >= PIECE_MIN and (h & mask) == 0)))):
            out.append(b"".join(cur))
            cur, acc = [], 0
    if cur:
        out.append(b"".join(cur))
    return out
