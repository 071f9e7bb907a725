"""Byte-range reads: the stores' ranged ``get`` (whole, ``[start, end)``, open and suffix ranges)
on the local store, the memory store and S3 (moto in process and over HTTP), and the reader's
ranged fetch of packs much larger than what a checkpoint needs (docs/format.md §8, §19)."""

from __future__ import annotations

import os

import pytest

from snapstore.errors import IntegrityError, InvalidInputError, ObjectNotFound

KINDS = ("memory", "local", "s3", "s3-http")
DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.mark.parametrize("kind", KINDS)
def test_store_ranges(kind, store_factory):  # noqa: F811
    store = store_factory(kind)
    store.put("packs/ab/abcdef0123456789", DATA)
    key = "packs/ab/abcdef0123456789"
    before = store.stats.snapshot()
    cases = {None: DATA, (0, 10): DATA[:10], (100, 5000): DATA[100:5000], (10_000, 20_000): DATA[10_000:],
             (10_240, 10_300): b"", (7, 7): b"", (5000, None): DATA[5000:], (0, None): DATA,
             (-36, None): DATA[-36:], (-10_240, None): DATA, (-1 << 40, None): DATA}
    for rng, want in cases.items():
        assert store.get(key, rng) == want, rng
    d = store.stats.since(before)
    assert d.counts["GET"] + d.counts["HEAD"] == len(cases)
    assert d.bytes_down == sum(len(v) for v in cases.values())
    for bad in ((-1, 5), (5, 4), (1.0, 2), (0, True), "0-4", (1, 2, 3), (-5, 10)):
        with pytest.raises(InvalidInputError):
            store.get(key, bad)
    with pytest.raises(ObjectNotFound):
        store.get("packs/ab/abcdef0123456780", (-20, None))


def test_local_range_refuses_links(tmp_path):
    from snapstore.stores.local import LocalStore

    store = LocalStore(str(tmp_path / "s"))
    store.put("packs/aa/aaaaaaaaaaaaaaaa", DATA)
    os.symlink(tmp_path / "s" / "packs" / "aa" / "aaaaaaaaaaaaaaaa", tmp_path / "s" / "packs" / "aa" / "bbbbbbbbbbbbbbbb")
    assert store.get("packs/aa/aaaaaaaaaaaaaaaa", (-4, None)) == DATA[-4:]
    with pytest.raises(IntegrityError):
        store.get("packs/aa/bbbbbbbbbbbbbbbb", (-4, None))
    with pytest.raises(IntegrityError):
        store.get("packs/aa/bbbbbbbbbbbbbbbb", (0, 4))


# ------------------------------------------------------------------------------------------------
# the read path: packs much larger than what a checkpoint needs are read with byte ranges

def _packs_bytes(store) -> int:
    return sum(o.size for o in store.list("packs/"))


def _fresh(store):
    from snapstore import CheckpointManager

    return CheckpointManager(store)


def _big_state(i: int, nbytes: int) -> dict:
    import base64
    import random

    rnd = random.Random(i)
    return {"step": i, "blob": base64.b64encode(rnd.randbytes(nbytes * 3 // 4)).decode()}


@pytest.mark.parametrize("kind", ("local", "s3"))
def test_old_checkpoint_beside_large_states_reads_bounded_bytes(kind, store_factory):  # noqa: F811
    """An old checkpoint of a run whose newest tier pack is large (16 saves of a 1 MiB state,
    rewritten whole each time) is read with byte ranges: its bytes, not the pack's."""
    from snapstore.format.pack import Pack

    store = store_factory(kind)
    mgr = _fresh(store)
    msgs = [{"role": "user", "content": "fix the bug"}]
    first = mgr.save("r", msgs, step=0)
    for i in range(1, 16):
        msgs = msgs + [{"role": "assistant", "content": f"tool call {i} " * 20}]
        mgr.save("r", msgs, step=i, session_state=_big_state(i, 1 << 20))
    total = _packs_bytes(store)
    big = max(store.list("packs/"), key=lambda o: o.size)
    assert big.size > 10 << 20  # one tier pack holds the states
    parsed = Pack.parse(big.key, store.get(big.key))
    assert len(parsed.blocks) > 12 and all(b.rawlen <= 1 << 20 for b in parsed.blocks[:-1])  # data blocks <= 1 MiB

    before = store.stats.snapshot()
    cp = _fresh(store).get("r", first)
    d = store.stats.since(before)
    assert cp.messages == msgs[:1] and cp.session_state is None
    assert d.bytes_down < 2.5 * (1 << 20), (d.bytes_down, total)  # a 1 MiB tail, the meta block, one data block

    before = store.stats.snapshot()
    cp = _fresh(store).latest("r")
    d = store.stats.since(before)
    assert cp.messages == msgs and cp.session_state == _big_state(15, 1 << 20)
    assert d.bytes_down < 5 * (1 << 20), (d.bytes_down, total)  # the newest state (1 MiB) and framing
    assert d.bytes_down < total / 3


def test_checkpoint_with_large_state_beside_messages(store_factory):  # noqa: F811
    """A checkpoint with a several-MiB session state beside a few messages reads back exactly;
    the small checkpoints before and after it are read without the state's bytes."""
    store = store_factory("local")
    mgr = _fresh(store)
    state = _big_state(7, 6 << 20)
    ids = []
    msgs = []
    for i in range(8):
        msgs = msgs + [{"role": "user", "content": f"message {i}"}]
        ids.append(mgr.save("r", msgs, step=i, session_state=state if i == 3 else {"step": i}))
    for i in (0, 2, 5, 7):
        before = store.stats.snapshot()
        cp = _fresh(store).get("r", ids[i])
        d = store.stats.since(before)
        assert cp.messages == msgs[:i + 1] and cp.session_state == {"step": i}
        assert d.bytes_down < 2.5 * (1 << 20), (i, d.bytes_down)
    before = store.stats.snapshot()
    cp = _fresh(store).get("r", ids[3])
    assert cp.session_state == state and cp.messages == msgs[:4]
    assert store.stats.since(before).bytes_down < len(state["blob"]) + (2 << 20)

    # a writer that read the run with byte ranges merges the large pack into a tier pack (fetching
    # the blocks it did not read), and verify and GC on that same manager read packs whole
    m = _fresh(store)
    assert m.latest("r").session_state == {"step": 7}
    for i in range(8, 16):
        msgs = msgs + [{"role": "user", "content": f"message {i}"}]
        ids.append(m.save("r", msgs, step=i, session_state={"step": i}))
    assert len(list(store.list("packs/"))) == 1  # one tier pack of level 2 holds the run
    rep = m.verify(read_data=True)
    assert rep.ok, rep
    m.gc(grace_period=0)
    cp = _fresh(store).get("r", ids[3])
    assert cp.session_state == state and cp.messages == msgs[:4]
    assert _fresh(store).latest("r").messages == msgs


def test_corrupt_range_names_the_pack(store_factory):  # noqa: F811
    """A block damaged far from the tail of a large pack (outside the suffix a ranged read starts
    with) fails the read that needs it with IntegrityError naming the pack; reads that do not need
    it still work; verify reports it."""
    from snapstore.format.pack import Pack

    store = store_factory("memory")
    mgr = _fresh(store)
    msgs = [{"role": "user", "content": "hello " * 50}]
    ids = [mgr.save("r", msgs, step=0)]
    for i in range(1, 16):
        msgs = msgs + [{"role": "assistant", "content": str(i)}]
        ids.append(mgr.save("r", msgs, step=i, session_state=_big_state(i, 1 << 20)))
    big = max(store.list("packs/"), key=lambda o: o.size)
    data = bytearray(store.get(big.key))
    pack = Pack.parse(big.key, bytes(data))
    blk = pack.blocks[0]  # the first data block: pieces of the oldest state, far from the tail
    assert blk.offset + blk.clen < big.size - (1 << 20)
    for pos in range(blk.offset + 1, blk.offset + blk.clen, 7):
        data[pos] ^= 0xFF
    store.corrupt(big.key, bytes(data))
    with pytest.raises(IntegrityError) as ei:
        _fresh(store).get("r", ids[1])
    assert big.key in str(ei.value)
    cp = _fresh(store).latest("r")
    assert cp.messages == msgs and cp.session_state == _big_state(15, 1 << 20)
    assert _fresh(store).get("r", ids[0]).messages == msgs[:1]
    assert not _fresh(store).verify().ok


def test_parse_tail_matches_whole_parse_and_refuses_damage():
    """format.pack.parse_tail: a pack parsed from its tail yields the same entries as a whole
    parse, fetching only the blocks read; a tail that is the whole pack is checksum-verified; a
    pack shorter than its header says, or a damaged header, is IntegrityError naming the key."""
    import random

    from snapstore.format.pack import DATA_BLOCK_MAX, T_CHUNK, T_NODE, Pack, PackBuilder
    from snapstore.format.rangedpack import parse_tail

    rnd = random.Random(5)
    pb = PackBuilder(b"\x01" * 8)
    chunks = {bytes([i]) * 16: rnd.randbytes(300_000) for i in range(1, 12)}
    for cid, raw in chunks.items():
        pb.add(T_CHUNK, cid, raw)
    pb.add(T_NODE, b"\xee" * 16, b"node bytes")
    data, _ = pb.build()
    whole = Pack.parse("packs/01/0101010101010101", data)
    assert all(b.rawlen <= DATA_BLOCK_MAX for b in whole.blocks)
    assert whole.entries[(T_NODE, b"\xee" * 16)].block == len(whole.blocks) - 1  # metadata last
    reads = []

    def fetch(a, b):
        reads.append((a, b))
        return data[a:] if b is None else data[a:b]
    tail = data[-(64 << 10):]
    p = parse_tail("packs/01/0101010101010101", tail, 64 << 10, b"\x01" * 8, fetch)
    assert not p.whole and p.size == len(data) and p.entries == whole.entries
    e = p.entries[(T_CHUNK, bytes([3]) * 16)]
    assert p.entry_bytes(e) == chunks[bytes([3]) * 16]
    assert reads == [(whole.blocks[e.block].offset, whole.blocks[e.block].offset + whole.blocks[e.block].clen)]
    # the whole pack in the tail: parsed and verified like Pack.parse
    assert parse_tail("k", data, len(data) + 1, b"\x01" * 8, fetch).whole
    bad = bytearray(data)
    bad[100] ^= 1
    with pytest.raises(IntegrityError, match="checksum"):
        parse_tail("packs/01/0101010101010101", bytes(bad), len(data) + 5, b"\x01" * 8, fetch)
    # a block cut short (the object is shorter than its header says)
    p = parse_tail("packs/01/0101010101010101", tail, 64 << 10, b"\x01" * 8, lambda a, b: data[a:a + 10])
    with pytest.raises(IntegrityError, match="packs/01/0101010101010101"):
        p.entry_bytes(p.entries[(T_CHUNK, bytes([1]) * 16)])
    # a damaged header length
    bad = bytearray(tail)
    bad[-20:-16] = (1 << 31).to_bytes(4, "little")
    with pytest.raises(IntegrityError, match="packs/01/0101010101010101"):
        parse_tail("packs/01/0101010101010101", bytes(bad), 64 << 10, b"\x01" * 8, fetch)
    bad = bytearray(tail)
    bad[-21] ^= 0x55  # inside the entry table
    with pytest.raises(IntegrityError, match="packs/01/0101010101010101"):
        parse_tail("packs/01/0101010101010101", bytes(bad), 64 << 10, b"\x01" * 8, fetch)
