"""The pack-header and tree-node decoders accept exactly what the format allows, and nothing else.

Each fast decoder (``format/pack.py`` ``parse_header``, ``format/tree.py`` ``decode_node`` and the
spine decoders) is compared with a plain reference decoder written from docs/format.md §8 and §9
(every varint read with ``get_varint``, every read bounds-checked, every rule checked where it
applies): on valid encodings (every varint width, several blocks, many packs) both return the
same values, and on thousands of damaged ones (bytes changed, cut, inserted, removed) both
refuse or both return the same values. A refusal by the fast decoder is the typed error its
callers rely on (``IntegrityError`` naming the pack for a header; ``ValueError`` or ``IndexError``
for a node, which the read path reports as a malformed node naming its pack).

Also here: the tree walk of a fresh manager reads a level's nodes at hand without requests and
still checks every node by its content id (a damaged node copy in a tier pack is read from its
other copy, as before).
"""

from __future__ import annotations

import os
import random

import pytest

from snapstore import CheckpointManager
from snapstore.manager import views
from snapstore.errors import IntegrityError
from snapstore.format.ids import ID_BYTES, PACK_ID_BYTES
from snapstore.format.pack import (ENTRY_TYPES, HEADER_POS, MAX_BLOCKS, MAX_BLOCK_RAW, T_CHUNK, T_HOLE, T_NODE,
                                   T_STATE, Block, DictSpec, Entry, PackBuilder, parse_header)
from snapstore.format.tree import Ref, Spine, TreeParams, decode_node, encode_node
from snapstore.repo.arrays import ArrayReader
from snapstore.stores import LocalStore

# ------------------------------------------------------------------------------------------------
# reference decoders (docs/format.md §8, §9), slow and plain


def _ref_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= end:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _ref_take(buf: bytes, pos: int, n: int, end: int) -> bytes:
    if pos + n > end:
        raise ValueError("truncated")
    return bytes(buf[pos:pos + n])


def ref_parse_header(data: bytes, hstart: int, hend: int, blocks_end: int | None):
    """Pack header ``data[hstart:hend]`` -> (blocks, entries); ValueError when malformed."""
    pos = hstart
    nblocks, pos = _ref_varint(data, pos, hend)
    if nblocks > MAX_BLOCKS:
        raise ValueError("too many blocks")
    blocks, off = [], HEADER_POS
    for _ in range(nblocks):
        kind = _ref_take(data, pos, 1, hend)[0]
        pos += 1
        if kind > 5:
            raise ValueError("kind")
        sid = spk = None
        if kind == 2:
            sid = _ref_take(data, pos, ID_BYTES, hend)
            spk = _ref_take(data, pos + ID_BYTES, PACK_ID_BYTES, hend)
            pos += ID_BYTES + PACK_ID_BYTES
        clen, pos = _ref_varint(data, pos, hend)
        rawlen, pos = _ref_varint(data, pos, hend)
        if rawlen > MAX_BLOCK_RAW or (kind in (3, 5) and clen != rawlen):
            raise ValueError("block lengths")
        if kind >= 4:  # an array block: its item count, then its entries with separators
            nitems, pos = _ref_varint(data, pos, hend)
            if not 0 < nitems < rawlen:
                raise ValueError("array items")
            blocks.append(Block(off, clen, rawlen, None, kind == 5, True, nitems))
            off += clen
            if blocks_end is not None and off > blocks_end:
                raise ValueError("blocks run into the header")
            continue
        spec = None
        if kind in (1, 2):
            dg = _ref_take(data, pos, 16, hend)
            pos += 16
            a, pos = _ref_varint(data, pos, hend)
            b, pos = _ref_varint(data, pos, hend)
            dl, pos = _ref_varint(data, pos, hend)
            if a > b or dl > MAX_BLOCK_RAW:
                raise ValueError("dictionary")
            spec = DictSpec(sid, spk, a, b, dl, dg)
        blocks.append(Block(off, clen, rawlen, spec, kind == 3))
        off += clen
        if blocks_end is not None and off > blocks_end:
            raise ValueError("blocks run into the header")
    if blocks_end is not None and off != blocks_end:
        raise ValueError("blocks end")
    n, pos = _ref_varint(data, pos, hend)
    entries, fill = {}, [0] * nblocks
    parts = {bi: [] for bi, b in enumerate(blocks) if b.array}
    for _ in range(n):
        t = _ref_take(data, pos, 1, hend)[0]
        cont = bool(t & 0x80)
        t &= 0x7F
        if t not in ENTRY_TYPES:
            raise ValueError("type")
        eid = _ref_take(data, pos + 1, ID_BYTES, hend)
        bi, pos = _ref_varint(data, pos + 1 + ID_BYTES, hend)
        ln, pos = _ref_varint(data, pos, hend)
        if bi >= nblocks:
            raise ValueError("entry outside its block")
        if blocks[bi].array:
            if t not in (T_CHUNK, T_HOLE) or (t == T_HOLE and ln):
                raise ValueError("array entry")
            if cont and (not parts[bi] or parts[bi][-1][0] == T_HOLE or t == T_HOLE):
                raise ValueError("continues nothing")
            if not cont:
                fill[bi] += 1  # "[" or ","
            if fill[bi] + ln + 1 > blocks[bi].rawlen:
                raise ValueError("entry outside its block")
            parts[bi].append((t, eid, fill[bi], ln, cont))
        else:
            if cont or t == T_HOLE:
                raise ValueError("array entry outside an array block")
            if fill[bi] + ln > blocks[bi].rawlen:
                raise ValueError("entry outside its block")
        entries[(t, eid)] = Entry(t, eid, bi, fill[bi], ln)
        fill[bi] += ln
    for bi, ps in parts.items():
        b = blocks[bi]
        if sum(1 for x in ps if not x[4]) != b.nitems:
            raise ValueError("array items")
        fill[bi] += 1  # "]"
        blocks[bi] = Block(b.offset, b.clen, b.rawlen, None, b.stored, True, b.nitems, tuple(ps))
    if pos != hend or fill != [b.rawlen for b in blocks]:
        raise ValueError("lengths")
    if any(b.dict and b.dict.state_id is None for b in blocks) and \
            sum(1 for e in entries.values() if e.type == T_STATE) != 1:
        raise ValueError("dictionary state")
    return blocks, entries


def _ref_items(buf: bytes, pos: int, level: int, packs: list) -> tuple[list, int]:
    n, pos = _ref_varint(buf, pos, len(buf))
    items = []
    for _ in range(n):
        rid = _ref_take(buf, pos, ID_BYTES, len(buf))
        size, pos = _ref_varint(buf, pos + ID_BYTES, len(buf))
        if level == 0:
            flags, count = _ref_take(buf, pos, 1, len(buf))[0], 1
            pos += 1
        else:
            count, pos = _ref_varint(buf, pos, len(buf))
            flags = 0
        pi, pos = _ref_varint(buf, pos, len(buf))
        if pi >= len(packs):
            raise ValueError("pack index")
        items.append(Ref(rid, size, count, flags, packs[pi]))
    return items, pos


def _ref_table(buf: bytes, pos: int) -> tuple[list, int]:
    n, pos = _ref_varint(buf, pos, len(buf))
    if pos + n * PACK_ID_BYTES > len(buf):
        raise ValueError("pack table")
    return [bytes(buf[pos + i * PACK_ID_BYTES:pos + (i + 1) * PACK_ID_BYTES]) for i in range(n)], pos + n * PACK_ID_BYTES


def ref_decode_node(data: bytes):
    if not data:
        raise ValueError("empty")
    packs, pos = _ref_table(data, 1)
    items, pos = _ref_items(data, pos, data[0], packs)
    if pos != len(data):
        raise ValueError("trailing")
    return data[0], items


def ref_decode_state(data: bytes):
    if not data or data[0] != 1:
        raise ValueError("version")
    packs, pos = _ref_table(data, 1)
    flag = _ref_take(data, pos, 1, len(data))[0]
    upper = None
    if flag:
        uid = _ref_take(data, pos + 1, ID_BYTES, len(data))
        pi, pos = _ref_varint(data, pos + 1 + ID_BYTES, len(data))
        if pi >= len(packs):
            raise ValueError("pack index")
        upper = (uid, packs[pi])
    else:
        pos += 1
    run0, pos = _ref_items(data, pos, 0, packs)
    if pos != len(data):
        raise ValueError("trailing")
    return run0, upper


# ------------------------------------------------------------------------------------------------
# mutations


def _mutants(data: bytes, rng: random.Random, count: int, lo: int = 0):
    """Damaged copies of ``data``: bytes changed (mostly at ``lo`` and after), cut, inserted, removed."""
    for _ in range(count):
        b = bytearray(data)
        op = rng.randrange(5)
        if op == 0 and len(b) > lo:  # change 1-3 bytes
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(lo, len(b))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif op == 1:  # cut the end
            del b[max(lo, len(b) - rng.randint(1, 40)):]
        elif op == 2:  # insert bytes
            at = rng.randrange(lo, len(b) + 1)
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        elif op == 3 and len(b) > lo:  # remove bytes
            at = rng.randrange(lo, len(b))
            del b[at:at + rng.randint(1, 3)]
        else:  # a byte bumped by one (a varint or a count off by one)
            if len(b) > lo:
                at = rng.randrange(lo, len(b))
                b[at] = (b[at] + rng.choice([1, 255])) % 256
        yield bytes(b)


def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (ValueError, IndexError):
        return ("refused", None)


# ------------------------------------------------------------------------------------------------
# pack headers


def _headers(rng: random.Random):
    """Valid packs: (pack bytes) of several shapes (1- to 3-byte lengths, many blocks, dictionaries)."""
    out = []
    for shape in range(6):
        pb = PackBuilder(os.urandom(8))
        nent = rng.choice([0, 1, 5, 60, 300])
        for i in range(nent):
            t = rng.choice([T_CHUNK, T_CHUNK, T_NODE, T_STATE, b"u"[0], b"p"[0], b"v"[0]])
            pb.add(t, os.urandom(16), os.urandom(rng.choice([1, 50, 127, 128, 300, 16383, 16384, 20000])))
        if shape == 5 and nent:
            # a dictionary data block naming its state explicitly (kind 2)
            pb.add(T_CHUNK, os.urandom(16), b"x" * 500)
            pb.set_dictionary(DictSpec(os.urandom(16), os.urandom(8), 0, 3, 100, os.urandom(16)), b"y" * 100)
        if shape >= 3:
            # array blocks (kinds 4 and 5): whole messages, messages in several chunks, holes,
            # a message repeated
            same = (os.urandom(16), b'{"r":1}')
            for i in range(rng.choice([1, 7, 90])):
                k = rng.randrange(5)
                if k == 0:
                    pb.add_hole(os.urandom(16))
                elif k == 1:
                    pb.add_item([(os.urandom(16), b'"' + os.urandom(8).hex().encode()),
                                 (os.urandom(16), os.urandom(rng.choice([5, 200])).hex().encode() + b'"')])
                elif k == 2:
                    pb.add_item([same])
                else:
                    pb.add_item([(os.urandom(16), b'"' + os.urandom(rng.choice([1, 60, 9000])).hex().encode() + b'"')])
        data, _ = pb.build(block_max=rng.choice([MAX_BLOCK_RAW, 30_000]), data_block_max=rng.choice([1 << 20, 40_000]))
        out.append(data)
    return out


def _header_bounds(data: bytes) -> tuple[int, int]:
    hlen = int.from_bytes(data[-20:-16], "little")
    return len(data) - 20 - hlen, len(data) - 20


def test_pack_headers_decode_as_the_reference_decoder_on_valid_and_damaged_headers():
    rng = random.Random(7)
    checked = refused = 0
    for data in _headers(rng):
        hstart, hend = _header_bounds(data)
        want = ref_parse_header(data, hstart, hend, hstart)
        assert parse_header("k", data, hstart, hend, hstart) == want
        assert parse_header("k", data, hstart, hend, None) == want  # a ranged read's tail
        assert parse_header("k", memoryview(data), hstart, hend, hstart) == want
        # damage inside the header (the pack's trailer and blocks as they were: the header
        # length moves with inserted and removed bytes)
        head, tail = data[:hstart], data[hend:]
        for bad in _mutants(data[hstart:hend], rng, 500):
            buf = head + bad + tail
            end = hstart + len(bad)
            ref = _outcome(ref_parse_header, buf, hstart, end, hstart)
            try:
                got = ("ok", parse_header("k", buf, hstart, end, hstart))
            except IntegrityError as e:
                assert "malformed header" in str(e) and e.key == "k"
                got = ("refused", None)
            assert got == ref
            checked += 1
            refused += got[0] == "refused"
    assert checked >= 3000 and 0 < refused < checked  # both sides of the boundary were exercised


def test_a_header_entry_in_a_block_the_pack_lacks_or_past_its_block_is_refused_with_a_clear_reason():
    pb = PackBuilder(os.urandom(8))
    for i in range(4):
        pb.add(T_CHUNK, os.urandom(16), os.urandom(300))
    data, _ = pb.build()
    hstart, hend = _header_bounds(data)
    h = bytearray(data[hstart:hend])
    # the last entry: type, id, block index (1 byte), length (2 bytes)
    h[-3] = 5  # a block index past the table (the pack has one data block and an empty metadata block)
    with pytest.raises(IntegrityError, match="block the pack does not have"):
        parse_header("k", data[:hstart] + bytes(h) + data[hend:], hstart, hend, hstart)
    h = bytearray(data[hstart:hend])
    h[-1] += 1  # the last entry 128 bytes longer: past its block
    with pytest.raises(IntegrityError, match="sum of its entries"):
        parse_header("k", data[:hstart] + bytes(h) + data[hend:], hstart, hend, hstart)
    h = bytearray(data[hstart:hend])
    h[-20] = ord("z")  # an unknown entry type
    with pytest.raises(IntegrityError, match="unknown entry type 122"):
        parse_header("k", data[:hstart] + bytes(h) + data[hend:], hstart, hend, hstart)


# ------------------------------------------------------------------------------------------------
# tree nodes and spines


def _nodes(rng: random.Random):
    for level in (0, 0, 1, 3):
        for n in (0, 1, 2, 8, 64, 130):
            packs = [os.urandom(8) for _ in range(rng.choice([1, 1, 2, 130]))]
            items = [Ref(os.urandom(16), rng.choice([0, 5, 127, 128, 3000, 16383, 16384, 2 ** 21, 2 ** 40]),
                         1 if level == 0 else rng.choice([1, 127, 128, 70000]),
                         rng.choice([0, 1, 2, 3, 200]) if level == 0 else 0, rng.choice(packs)) for _ in range(n)]
            yield level, items


def test_tree_nodes_decode_as_the_reference_decoder_on_valid_and_damaged_nodes():
    rng = random.Random(11)
    checked = refused = 0
    for level, items in _nodes(rng):
        data = encode_node(level, items)
        assert decode_node(data) == ref_decode_node(data) == (level, items)
        assert decode_node(memoryview(data)) == (level, items)
        assert all(type(r.id) is bytes and type(r.pack) is bytes for r in decode_node(memoryview(data))[1])
        for bad in _mutants(data, rng, 150):
            ref = _outcome(ref_decode_node, bad)
            got = _outcome(decode_node, bad)
            assert got == ref, (level, len(items), bad.hex())
            checked += 1
            refused += got[0] == "refused"
    assert checked >= 3000 and 0 < refused < checked


def test_a_hostile_count_is_refused_before_anything_is_allocated():
    # a pack table or item count of 2**62 in a 30-byte node: refused at once (no list of that size)
    big = bytearray()
    x = 2 ** 62
    while x >= 0x80:
        big.append((x & 0x7F) | 0x80)
        x >>= 7
    big.append(x)
    for data in (bytes([0]) + bytes(big) + os.urandom(20),
                 bytes([0, 1]) + os.urandom(8) + bytes(big) + os.urandom(20)):
        with pytest.raises(ValueError):
            decode_node(data)


def test_spines_decode_as_the_reference_decoder_on_valid_and_damaged_states():
    rng = random.Random(12)
    params = TreeParams()
    checked = 0
    for n in (0, 1, 7, 40):
        for with_upper in (False, True):
            sp = Spine(params)
            sp.levels = [[Ref(os.urandom(16), rng.choice([3, 300, 20000]), 1, rng.choice([0, 2]), os.urandom(8))
                          for _ in range(n)]]
            if with_upper:
                sp.levels.append([Ref(os.urandom(16), 900, 9, 0, os.urandom(8))])
            data = sp.encode_state(lambda uid, ub: os.urandom(8), lambda b: os.urandom(16))
            assert Spine.decode_state(data) == ref_decode_state(data)
            for bad in _mutants(data, rng, 200):
                assert _outcome(Spine.decode_state, bad) == _outcome(ref_decode_state, bad)
                checked += 1
    assert checked >= 1500


# ------------------------------------------------------------------------------------------------
# the walk


def _msgs(n: int) -> list:
    rng = random.Random(n)
    return [{"role": "tool", "n": i, "content": "".join(rng.choice("abcdefgh ") for _ in range(rng.randrange(50, 4000)))}
            for i in range(n)]


def _run(tmp_path, n: int = 300, every: int = 10) -> list:
    mgr = CheckpointManager(LocalStore(tmp_path, fsync=False))
    msgs = _msgs(n)
    for k in range(every, n + 1, every):
        mgr.save("r", msgs[:k])
    mgr.close()
    return msgs


def test_a_fresh_walk_reads_every_node_at_hand_verified_and_without_requests(tmp_path, monkeypatch):
    monkeypatch.setattr(ArrayReader, "read", lambda self, m, segs: None)  # the tree path
    msgs = _run(tmp_path)
    fresh = CheckpointManager(LocalStore(tmp_path, fsync=False))
    repo = fresh.repo
    hashed = []
    real = repo.hasher.content_id

    def spy(data):
        hashed.append(bytes(data))
        return real(data)
    monkeypatch.setattr(repo.hasher, "content_id", spy)
    slow = []
    real_read_node = type(repo).read_node
    monkeypatch.setattr(type(repo), "read_node", lambda self, nid, pid: slow.append(nid) or real_read_node(self, nid, pid))
    assert fresh.latest("r").messages == msgs
    assert len(repo.trees.nodes) > 10, "the list has sealed nodes"
    assert not slow  # every node was at hand (in a segment): no read_node, no fetch, for any of them
    assert set(repo.trees.nodes) <= {real(b) for b in hashed}  # ... and each was checked by its content id


def test_a_node_copy_that_does_not_match_its_id_is_not_taken_by_the_walk(tmp_path, monkeypatch):
    """A node whose bytes in the pack at hand do not match its content id (damage under a valid
    pack checksum) is left to read_node: the walk never decodes it, and with no other copy the read
    fails naming the pack that holds it."""
    from snapstore.format import keys

    monkeypatch.setattr(ArrayReader, "read", lambda self, m, segs: None)  # the tree path
    msgs = _run(tmp_path)
    fresh = CheckpointManager(LocalStore(tmp_path, fsync=False))
    assert fresh.latest("r").messages == msgs
    repo = fresh.repo
    m = views.load_view(fresh, "r").head
    want = [r.id for r in repo.load_with_state(m)[1].refs]
    spine = repo.read_state(bytes.fromhex(m.state[0]), bytes.fromhex(m.state[1]))
    top = [r for lv in range(len(spine.levels) - 1, 0, -1) for r in spine.levels[lv]]
    assert top, "the spine has sealed nodes above its open run"
    victim = top[0]
    holder = repo.cache[repo.segments.entries[(T_NODE, victim.id)]]
    e = holder.entries[(T_NODE, victim.id)]
    raw = bytearray(holder._raw[e.block])
    raw[e.offset + 2] ^= 0x01  # the first pack id in the node's pack table: decodes, but is not the node
    holder._raw[e.block] = bytes(raw)
    repo.trees.forget_nodes()
    assert victim.id not in repo.trees.nodes_at_hand(top)
    assert all(r.id in repo.trees.nodes_at_hand(top) for r in top[1:])
    other_copy = holder.id != victim.pack and (tmp_path / keys.pack_key(victim.pack)).exists()
    if other_copy:  # the save's own pack is still there: the node is read from it, verified
        assert [r.id for r in repo.expand(spine)] == want
    else:  # the only copy: the read fails naming the pack that holds it
        with pytest.raises(IntegrityError, match=keys.pack_key(holder.id)):
            repo.expand(spine)
