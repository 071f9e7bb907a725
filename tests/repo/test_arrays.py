"""Array blocks: a run that only appends is read from its segments' arrays, without the tree
(docs/format.md §8, §19 "Array blocks"); every other run, and every damaged array, is read
through the tree as before.

Sections: reads from arrays; forged and damaged arrays (holes, counts, separators, brackets: the
read stays exact or falls back to the tree); what reads and saves from arrays cost on S3; arrays
through session state, forks, rollbacks, GC, crashes and two writers; ``messages.a`` (whether the
writer knew the run's arrays hold exactly the list), including emptied heads, records older than
the flag, blind appends and seeded call sequences.

Real parts: a local store on a temp dir (moto for the S3 cases), fresh managers (cold caches) for
every read.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK, T_HOLE, T_PIECES, Pack, PackBuilder
from snapstore.repo.arrays import ArrayReader
from snapstore.repo.trees import TreeReader
from snapstore.stores import LocalStore
from tests.helpers.paths import ROOT

RUN = "arrays-run"
EDGE_RUN = "edge-run"
"""The run of the forged-array and cost sections."""


def _msg(i: int, size: int = 300) -> dict:
    rng = random.Random(i)
    return {"role": "tool" if i % 2 else "assistant", "n": i,
            "content": "".join(rng.choice("abcdefgh ") for _ in range(size))}


def _mgr(root) -> CheckpointManager:
    return CheckpointManager(LocalStore(root, fsync=False))


def _build(root, saves: int, per: int = 2, big: set = frozenset(), run: str = RUN) -> list:
    """A run of ``saves`` appends of ``per`` messages (message i of save s is large if s in ``big``)."""
    mgr = _mgr(root)
    msgs = [{"role": "system", "content": "You are a test."}]
    for s in range(saves):
        msgs = msgs + [_msg(per * s + k, 90_000 if s in big and k == 0 else 300) for k in range(per)]
        mgr.save(run, msgs, step=s)
    mgr.close()
    return msgs


@pytest.fixture
def paths(monkeypatch):
    """Which path fresh reads take: counts of tree walks and of array reads that returned a list."""
    seen = {"tree": 0, "arrays": 0}
    real_expand, real_arrays = TreeReader.expand, ArrayReader.read

    def expand(self, spine, nodes=None):
        seen["tree"] += 1
        return real_expand(self, spine, nodes)

    def read_arrays(self, m, segs):
        out = real_arrays(self, m, segs)
        seen["arrays"] += out is not None
        return out
    monkeypatch.setattr(TreeReader, "expand", expand)
    monkeypatch.setattr(ArrayReader, "read", read_arrays)
    return seen


@pytest.mark.parametrize("saves", [1, 2, 3, 4, 5, 15, 16, 17, 21, 64])
def test_a_run_that_only_appends_is_read_from_its_arrays_at_every_length(tmp_path, paths, saves):
    msgs = _build(tmp_path, saves)
    mgr = _mgr(tmp_path)
    cp = mgr.latest(RUN)
    assert cp.messages == msgs
    assert paths == {"tree": 0, "arrays": 1}
    # the head by id too, and the writer state the read leaves continues the list exactly
    assert _mgr(tmp_path).get(RUN, cp.id).messages == msgs
    msgs2 = msgs + [_msg(10_000)]
    mgr.save(RUN, msgs2, step=saves)
    assert _mgr(tmp_path).latest(RUN).messages == msgs2
    assert _mgr(tmp_path).verify(read_data=True).ok


def _array_parts(mgr) -> list:
    return [x for p in (mgr.repo.cache[s.pack] for s in mgr.state.views[RUN].head_segs)
            for b in p.blocks if b.array for x in b.parts]


def test_a_new_large_message_is_an_item_of_its_pieces_and_one_sharing_pieces_is_a_hole(tmp_path, paths):
    w = _mgr(tmp_path)  # one writer throughout: it knows the pieces it stored
    msgs = [{"role": "system", "content": "You are a test."}]
    for s in range(9):
        msgs = msgs + [_msg(2 * s, 90_000 if s in (2, 6) else 300), _msg(2 * s + 1)]
        w.save(RUN, msgs, step=s)
    mgr = _mgr(tmp_path)
    assert mgr.latest(RUN).messages == msgs
    assert paths == {"tree": 0, "arrays": 1}
    # a large message none of whose pieces was stored: its pieces, in order, are its array item
    # (continuation parts), stored once, beside the messages around it
    parts = _array_parts(mgr)
    assert not [x for x in parts if x[0] == T_HOLE]
    assert sum(1 for x in parts if x[4]) >= 2  # each large message is more than one piece
    big = msgs[5]
    # the same large message again: its pieces are not stored again (a hole, not a copy)
    before = w.store.stats.snapshot()
    msgs = msgs + [big]
    w.save(RUN, msgs, step=99)
    assert w.store.stats.since(before).bytes_up < 20_000
    # an edit of it (most of its pieces shared): a hole, only the new pieces stored
    before = w.store.stats.snapshot()
    msgs = msgs + [dict(big, content=big["content"] + " and one more line")]
    w.save(RUN, msgs, step=100)
    assert w.store.stats.since(before).bytes_up < 20_000
    fresh = _mgr(tmp_path)
    paths.update(tree=0, arrays=0)
    assert fresh.latest(RUN).messages == msgs
    assert paths == {"tree": 0, "arrays": 1}
    assert len([x for x in _array_parts(fresh) if x[0] == T_HOLE]) == 2
    assert fresh.verify(read_data=True).ok


def test_a_repeated_message_is_repeated_in_the_arrays_or_a_hole_when_large(tmp_path, paths):
    mgr = _mgr(tmp_path)
    big = _msg(999, 10_000)  # >= HOLE_MIN: repeats are holes naming the chunk stored once
    msgs = [{"role": "user", "content": "continue"}, big]
    for s in range(6):
        msgs = msgs + [_msg(s), {"role": "user", "content": "continue"}, big]
        mgr.save(RUN, msgs, step=s)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert paths["arrays"] == 1 and paths["tree"] == 0
    mgr.fork(RUN, mgr.latest(RUN).id, "forked")
    paths.update(tree=0, arrays=0)
    fresh = _mgr(tmp_path)
    assert fresh.latest("forked").messages == msgs
    assert paths == {"tree": 0, "arrays": 1}
    # the fork lists its source's segments (a reference, docs/format.md §10): count over all of them
    holes = [x for seg in fresh.state.views["forked"].head_segs for b in fresh.repo.cache[seg.pack].blocks
             if b.array for x in b.parts if x[0] == T_HOLE]
    # the 6 repeats of the large message, and its first copy: a message of 8 KiB or more in a
    # run's first save is stored in a shared pack (docs/format.md §29), a hole in the arrays too
    assert len(holes) == 7
    assert fresh.verify(read_data=True).ok


def test_runs_whose_arrays_are_not_the_list_read_through_the_tree(tmp_path, paths):
    mgr = _mgr(tmp_path)
    # a rewrite: the first message changes at save 5
    msgs = [{"role": "system", "content": "v1"}]
    for s in range(8):
        if s == 5:
            msgs = [{"role": "system", "content": "v2"}] + msgs[1:]
        msgs = msgs + [_msg(s)]
        mgr.save("rewritten", msgs, step=s)
    # a rollback, then appends
    ids = [mgr.save("rolled", [_msg(k) for k in range(s + 1)], step=s) for s in range(6)]
    mgr.rollback("rolled", ids[2])
    mgr.save("rolled", [_msg(k) for k in range(3)] + [_msg(99)], step=9)
    # a big integer needs the exact parser: the manifest says so (messages.x) and the tree reads it
    big = [{"role": "tool", "content": "n", "value": 2 ** 80}, _msg(1)]
    mgr.save("exact", big[:1], step=0)
    mgr.save("exact", big, step=1)
    fresh = _mgr(tmp_path)
    paths.update(tree=0, arrays=0)
    assert fresh.latest("rewritten").messages == msgs
    assert fresh.latest("rolled").messages == [_msg(k) for k in range(3)] + [_msg(99)]
    got = fresh.latest("exact").messages
    assert got == big and type(got[0]["value"]) is int
    assert paths == {"tree": 3, "arrays": 0}
    # a checkpoint from before the rollback is the arrays' first items: read from them
    assert fresh.get("rolled", ids[1]).messages == [_msg(k) for k in range(2)]
    assert paths == {"tree": 3, "arrays": 1}


def test_every_checkpoint_of_a_run_that_only_appends_is_read_from_its_arrays(tmp_path, paths):
    mgr = _mgr(tmp_path)
    msgs, ids, lists = [], [], []
    for s in range(21):
        msgs = msgs + ([_msg(s, 90_000)] if s == 7 else [_msg(s), _msg(100 + s)])
        ids.append(mgr.save(RUN, msgs, step=s))
        lists.append(msgs)
    paths.update(tree=0, arrays=0)
    fresh = _mgr(tmp_path)
    for cid, want in zip(ids, lists):
        assert fresh.get(RUN, cid).messages == want
    assert paths == {"tree": 0, "arrays": 21}


def test_after_gc_rewrites_a_runs_tier_packs_its_reads_stay_exact(tmp_path):
    msgs = _build(tmp_path, 40)
    mgr = _mgr(tmp_path)
    mgr.prune(keep_last=2, run_id=RUN)
    mgr.gc(grace_period=0, max_unused=0.0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert _mgr(tmp_path).verify(read_data=True).ok


def _rebuild_array_pack(root, pid: bytes, change) -> None:
    """Rewrite pack ``pid`` keeping its layout (array items and holes included) with
    ``change(eid, raw) -> raw`` applied to every chunk: the same ids, a valid checksum."""
    path = root / keys.pack_key(pid)
    pack = Pack.parse(str(path), path.read_bytes(), pid)
    pb = PackBuilder(pid)
    for bi, b in enumerate(pack.blocks):
        raw = pack.raw_block(bi)
        if not b.array:
            for e in sorted((e for e in pack.entries.values() if e.block == bi), key=lambda e: e.offset):
                pb.add(e.type, e.id, change(e.id, raw[e.offset:e.offset + e.length]) if e.type == T_CHUNK
                       else raw[e.offset:e.offset + e.length])
            continue
        item: list = []
        for t, eid, off, ln, cont in b.parts:
            if not cont and item:
                pb.add_item(item)
                item = []
            if t == T_HOLE:
                pb.add_hole(eid)
            else:
                item.append((eid, change(eid, raw[off:off + ln])))
        if item:
            pb.add_item(item)
    data, _ = pb.build()
    path.write_bytes(data)


def test_a_changed_message_in_an_array_under_a_valid_checksum_fails_the_read_naming_the_pack(tmp_path, paths):
    _build(tmp_path, 16)
    head = _mgr(tmp_path).repo.head(_mgr(tmp_path).state.run_key(RUN))
    tier = head.segment_list()[0].pack
    target = b'"n":3,'

    def change(eid, raw):
        return raw.replace(target, b'"n":4,') if target in raw else raw
    _rebuild_array_pack(tmp_path, tier, change)
    with pytest.raises(IntegrityError) as e:
        _mgr(tmp_path).latest(RUN)
    assert e.value.key == keys.pack_key(tier)
    assert paths["arrays"] == 0  # never returned from the arrays
    assert not _mgr(tmp_path).verify(read_data=True).ok


def test_arrays_that_are_valid_json_but_not_the_list_are_not_returned(tmp_path, paths):
    """A pack rebuilt with its array items reordered (valid JSON, a valid checksum, every chunk
    matching its id) does not match the list digest: the tree path reads the list as saved."""
    msgs = _build(tmp_path, 16)
    head = _mgr(tmp_path).repo.head(_mgr(tmp_path).state.run_key(RUN))
    tier = head.segment_list()[0].pack
    path = tmp_path / keys.pack_key(tier)
    pack = Pack.parse(str(path), path.read_bytes(), tier)
    pb = PackBuilder(tier)
    for bi, b in enumerate(pack.blocks):
        raw = pack.raw_block(bi)
        if b.array:
            items = [[(eid, raw[off:off + ln])] for t, eid, off, ln, cont in b.parts]
            items.reverse()
            for it in items:
                pb.add_item(it)
        else:
            for e in (e for e in pack.entries.values() if e.block == bi):
                pb.add(e.type, e.id, raw[e.offset:e.offset + e.length])
    path.write_bytes(pb.build()[0])
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert paths == {"tree": 1, "arrays": 0}


def test_the_manifest_says_how_many_messages_need_the_exact_parser(tmp_path):
    mgr = _mgr(tmp_path)
    mgr.save(RUN, [_msg(0)], step=0)
    mgr.save(RUN, [_msg(0), {"v": 2 ** 70}], step=1)
    mgr.save(RUN, [_msg(0), {"v": 2 ** 70}, {"s": "\ud800"}], step=2)
    rk = mgr.state.run_key(RUN)
    assert mgr.repo.head(rk).exact == 2
    # a hostile count is refused when the record is read
    from snapstore.format.manifest import Manifest
    m = mgr.repo.head(rk)
    m.exact = m.count + 1
    with pytest.raises(IntegrityError):
        Manifest.from_bytes("k", m.to_bytes())


def test_a_fork_is_read_from_its_arrays_and_so_are_its_appends(tmp_path, paths):
    msgs = _build(tmp_path, 9, big={3})
    mgr = _mgr(tmp_path)
    mgr.fork(RUN, mgr.latest(RUN).id, "forked")
    paths.update(tree=0, arrays=0)
    assert _mgr(tmp_path).latest("forked").messages == msgs
    assert paths == {"tree": 0, "arrays": 1}
    m2 = _mgr(tmp_path)
    m2.latest("forked")
    m2.save("forked", msgs + [_msg(777)])
    paths.update(tree=0, arrays=0)
    assert _mgr(tmp_path).latest("forked").messages == msgs + [_msg(777)]
    assert paths == {"tree": 0, "arrays": 1}
    assert _mgr(tmp_path).verify(read_data=True).ok


def test_verify_checks_messages_x_against_the_tree_and_its_keyed_tag(tmp_path):
    """A record whose ``messages.x`` is wrong (a buggy writer: the tag recomputed for the wrong
    count) or whose tag does not bind it (a record re-sealed) is an error naming the manifest."""
    from snapstore.format.manifest import Manifest

    mgr = _mgr(tmp_path)
    msgs = [_msg(0), {"role": "tool", "content": "n", "value": 2 ** 80}]
    for i in range(1, 30):
        msgs.append(_msg(i))
        mgr.save(RUN, msgs, step=i)  # enough saves for sealed nodes below the spine
    assert _mgr(tmp_path).verify().ok
    rk = mgr.state.run_key(RUN)
    head = mgr.repo.head(rk)
    assert head.exact == 1
    key = keys.manifest_key(rk, head.seq)
    path = tmp_path / key
    good = path.read_bytes()
    for exact, tag in ((0, mgr.repo.hasher.exact_tag(head.digest, 0)), (1, "0" * 16)):
        m = Manifest.from_bytes(key, good)
        m.exact, m.exact_tag = exact, tag
        path.write_bytes(m.to_bytes())
        rep = _mgr(tmp_path).verify()
        assert [p.key for p in rep.errors if p.code == "corrupt-manifest"] == [key], rep.errors
    path.write_bytes(good)
    assert _mgr(tmp_path).verify().ok


# --------------------------------------------------------------------------------------------------
# Forged and damaged arrays: holes, counts, separators and brackets under a valid checksum
# read exactly, as the list, or through the tree; never other messages, never more than the list


def _build_edge(root, saves: int, per: int = 2, big: set = frozenset()) -> list:
    return _build(root, saves, per, big, run=EDGE_RUN)


def _rebuild(root, pid: bytes, item) -> None:
    """Rewrite pack ``pid`` (same id, valid checksum): every array item goes through
    ``item(parts, raw) -> ("hole", id) | ("item", [(id, bytes)])``; every chunk an array held is
    also kept as an ordinary entry (so that the tree path still finds it)."""
    path = root / keys.pack_key(pid)
    pack = Pack.parse(str(path), path.read_bytes(), pid)
    pb = PackBuilder(pid)
    keep = []
    for bi, b in enumerate(pack.blocks):
        raw = pack.raw_block(bi)
        if not b.array:
            for e in sorted((e for e in pack.entries.values() if e.block == bi), key=lambda e: e.offset):
                keep.append((e.type, e.id, raw[e.offset:e.offset + e.length]))
            continue
        items, cur = [], []
        for t, eid, off, ln, cont in b.parts:
            if not cont and cur:
                items.append(cur)
                cur = []
            cur.append((t, eid, raw[off:off + ln]))
        items.append(cur)
        for it in items:
            for t, eid, r in it:
                if t == T_CHUNK:
                    keep.append((t, eid, r))
            kind, what = item(it, raw)
            if kind == "hole":
                pb.add_hole(what)
            else:
                pb.add_item(what)
    for t, eid, r in keep:
        pb.add(t, eid, r)
    path.write_bytes(pb.build()[0])


def test_holes_cannot_make_a_read_from_arrays_read_more_than_the_list(tmp_path, monkeypatch):
    """A pack rebuilt so that every array item is a hole naming the run's one large message (the
    item count unchanged, a valid checksum) is not the list, which the digest says; but before it
    says so, read_arrays must not have read (and parsed) the large message once per item: the
    bytes it reads are bounded by the manifest's ``messages.bytes`` (docs/format.md §19:
    "Memory: the list's JSON once")."""
    msgs = _build_edge(tmp_path, 12, big={2})
    mgr = _mgr(tmp_path)
    head = mgr.repo.head(mgr.state.run_key(EDGE_RUN))
    segs = head.segment_list()
    big = None
    for s in segs:
        path = tmp_path / keys.pack_key(s.pack)
        pack = Pack.parse(str(path), path.read_bytes(), s.pack)
        for t, eid in pack.entries:
            if t == T_PIECES:
                big = eid  # the large message (an item of its pieces): every item a hole naming it
    assert big is not None
    for s in segs:
        _rebuild(tmp_path, s.pack, lambda it, raw: ("hole", big))
    read = {"bytes": 0, "in": False}
    real_raw, real_arrays = TreeReader.message_raw, ArrayReader.read

    def message_raw(self, ref, ctx=None, verify=True):
        out = real_raw(self, ref, ctx, verify)
        if read["in"]:
            read["bytes"] += len(out)
        return out

    def read_arrays(self, m, segs):
        read["in"] = True
        try:
            return real_arrays(self, m, segs)
        finally:
            read["in"] = False
    monkeypatch.setattr(TreeReader, "message_raw", message_raw)
    monkeypatch.setattr(ArrayReader, "read", read_arrays)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == msgs
    assert read["bytes"] <= head.size + head.count + 1, (read["bytes"], head.size)


@pytest.mark.parametrize("which", ["random", "chunk", "node", "state"])
def test_holes_naming_what_is_not_a_pieces_list_fall_back_to_the_tree(tmp_path, which):
    """Array items replaced by holes that name a random id, a chunk, a tree node or the state
    (a valid checksum, the item count unchanged): the read falls back to the tree and is exact."""
    msgs = _build_edge(tmp_path, 12, big={2})
    mgr = _mgr(tmp_path)
    head = mgr.repo.head(mgr.state.run_key(EDGE_RUN))
    segs = head.segment_list()
    names = {"random": os.urandom(16), "state": bytes.fromhex(head.state[0])}
    for s in segs:
        path = tmp_path / keys.pack_key(s.pack)
        pack = Pack.parse(str(path), path.read_bytes(), s.pack)
        for (t, eid) in pack.entries:
            if t == T_CHUNK:
                names.setdefault("chunk", eid)
            elif t == b"n"[0]:
                names.setdefault("node", eid)
    target = names.get(which)
    if target is None:
        pytest.skip(f"no {which} entry in the segments")
    for s in segs:
        _rebuild(tmp_path, s.pack, lambda it, raw: ("hole", target))
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == msgs


def test_a_manifest_whose_exact_count_was_changed_does_not_turn_big_integers_into_floats(tmp_path):
    """``messages.x`` is the one manifest field the read from arrays trusts that nothing keyed
    covers: the list digest is over the bytes, which are the same whichever parser reads them. A
    record re-sealed with ``x`` = 0 (a valid checksum; anyone with write access can compute it)
    must not make a big integer come back through orjson as a float (DESIGN.md: exact round trip;
    hostile repository content is input too): the tree path, whose refs carry the EXACT flag
    under keyed content ids, reads it exactly, or the read fails naming the record."""
    from snapstore.errors import SnapstoreError
    from snapstore.format.manifest import Manifest

    mgr = _mgr(tmp_path)
    msgs = [_msg(0), {"role": "tool", "content": "n", "value": 2 ** 80}]
    mgr.save(EDGE_RUN, msgs[:1], step=0)
    mgr.save(EDGE_RUN, msgs, step=1)
    rk = mgr.state.run_key(EDGE_RUN)
    head = mgr.repo.head(rk)
    assert head.exact == 1
    key = keys.manifest_key(rk, head.seq)
    path = tmp_path / key
    m = Manifest.from_bytes(key, path.read_bytes())
    m.exact = 0
    path.write_bytes(m.to_bytes())
    try:
        got = _mgr(tmp_path).latest(EDGE_RUN).messages
    except SnapstoreError:
        return  # refused: acceptable
    assert got == msgs and type(got[1]["value"]) is int, got[1]["value"]


def test_a_run_whose_arrays_hold_as_many_items_as_its_list_but_not_the_list_is_parsed_once(tmp_path, monkeypatch):
    """A message edited in place (same count: a system prompt changed, a tool result redacted)
    leaves arrays that hold as many items as the list but are not the list, on every later
    checkpoint of the run (a rewrite writes no array; appends then add to both). Every fresh read
    of such a run must not parse the whole list twice (once from the arrays, thrown away when the
    digest does not match, then again through the tree): the arrays are parsed only once their
    digest is the list's (read_arrays' own docstring: "nothing is parsed before that")."""
    import snapstore.repo.arrays as rp

    mgr = _mgr(tmp_path)
    msgs = [{"role": "system", "content": "v1"}]
    for s in range(30):
        if s == 3:
            msgs = [{"role": "system", "content": "v2"}] + msgs[1:]  # edited in place, saved
            mgr.save(EDGE_RUN, msgs, step=100)
        msgs = msgs + [_msg(s)]
        mgr.save(EDGE_RUN, msgs, step=s)
    calls = {"n": 0}

    class Counting:
        def __getattr__(self, name):
            return getattr(__import__("orjson"), name)

        @staticmethod
        def loads(b):
            calls["n"] += 1
            return __import__("orjson").loads(b)
    monkeypatch.setattr(rp, "orjson", Counting())
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == msgs
    assert calls["n"] <= len(msgs), (calls["n"], len(msgs))


def _forge_split_number_pack(root, pid: bytes) -> None:
    """Rewrite pack ``pid`` (the one pack of a run saved as ``[123]``) so that its array block is
    ``[1`` + ``2`` + hole + ``]``: an item ``1``, the byte ``2`` where a comma belongs, and a hole
    naming a chunk ``3``. Hashed as the reader hashes arrays, that is ``[123]`` (the list digest);
    parsed item by item, it is ``[1, 3]``. A valid trailing checksum; the other entries kept."""
    one, three = b"\x01" * 16, b"\x03" * 16

    def build(pb):
        pb.add_item([(one, b"1")])
        pb.add_hole(three)
        pb.add(T_CHUNK, three, b"3")

    def patch(raw):
        assert bytes(raw) == b"[1,]"
        raw[2] = ord("2")
    _forge_pack(root, pid, build, patch)


def test_a_forged_separator_and_count_do_not_make_the_arrays_return_other_messages(tmp_path):
    """The manifest's ``count`` is not under the key (only ``digest``, ``x`` and ``a`` are, by
    ``xt``), and the array path hashes the bytes between items without looking at them: a pack
    whose separator byte is a digit of a number, with the record's count raised by one, hashes to
    the list digest and would parse as other messages. The reader must refuse it (the tree then
    reads the list and names the damage): a restore never returns other messages than were saved."""
    from snapstore.errors import SnapstoreError

    mgr = _mgr(tmp_path)
    mgr.save(RUN, [123], step=0)
    (m,) = _heads(mgr, RUN)
    assert m.arrays == 1 and m.exact == 0
    _forge_split_number_pack(tmp_path, m.segment_list()[0].pack)
    _reseal(tmp_path, mgr, m, count=2)
    try:
        got = _mgr(tmp_path).latest(RUN).messages
    except SnapstoreError:
        return  # refused, typed
    assert got == [123]


def _forge_pack(root, pid: bytes, build, patch) -> None:
    """Rewrite pack ``pid``: ``build(pb)`` adds the forged array items, the pack's other entries
    are kept, then ``patch(raw bytearray of the stored array block)`` edits its bytes in place;
    a valid trailing checksum."""
    import blake3

    from snapstore.format.pack import Pack, PackBuilder

    path = root / keys.pack_key(pid)
    pack = Pack.parse(str(path), path.read_bytes(), pid)
    pb = PackBuilder(pid)
    build(pb)
    for bi, b in enumerate(pack.blocks):
        if b.array:
            continue
        raw = pack.raw_block(bi)
        for e in sorted((e for e in pack.entries.values() if e.block == bi), key=lambda e: e.offset):
            pb.add(e.type, e.id, raw[e.offset:e.offset + e.length])
    data = bytearray(pb.build()[0])
    forged = Pack.parse(str(path), bytes(data), pid)
    (bi,) = [bi for bi, b in enumerate(forged.blocks) if b.array]
    b = forged.blocks[bi]
    assert b.stored
    raw = bytearray(data[b.offset:b.offset + b.clen])
    patch(raw)
    data[b.offset:b.offset + b.clen] = raw
    data[-16:] = blake3.blake3(bytes(data[:-16])).digest(16)
    path.write_bytes(bytes(data))


def test_a_forged_block_whose_brackets_are_not_hashed_does_not_parse_as_other_messages(tmp_path):
    """A block parsed whole (``orjson.loads(raw)``) is parsed with its first and last bytes,
    which the hash does not cover (the reader hashes ``[`` + the bytes between them + ``]``). A
    list saved as ``[[1,2]]`` (one message, an array), forged as the block `` [1,2] `` of two
    items ``[1`` and ``2]`` and a count of 2, hashes to the list digest and parses as ``[1, 2]``."""
    from snapstore.errors import SnapstoreError

    mgr = _mgr(tmp_path)
    mgr.save(RUN, [[1, 2]], step=0)
    (m,) = _heads(mgr, RUN)
    assert m.arrays == 1 and m.exact == 0

    def build(pb):
        pb.add_item([(b"\x01" * 16, b"[1")])
        pb.add_item([(b"\x02" * 16, b"2]")])

    def patch(raw):
        assert bytes(raw) == b"[[1,2]]"
        raw[0] = raw[-1] = ord(" ")
    _forge_pack(tmp_path, m.segment_list()[0].pack, build, patch)
    _reseal(tmp_path, mgr, m, count=2)
    try:
        got = _mgr(tmp_path).latest(RUN).messages
    except SnapstoreError:
        return  # refused, typed
    assert got == [[1, 2]]


def test_a_run_parsed_in_one_call_stays_within_array_run_unless_one_item_is_longer(tmp_path, monkeypatch):
    """``ArrayReader.ARRAY_RUN`` (48 KiB): a run of consecutive items parsed in one ``orjson.loads``
    call is at most that long, or one item on its own (docs/format.md §19). A new large message
    (an item of several pieces) after a few small items must not make their run as long as it."""
    import orjson

    import snapstore.repo.arrays as rp

    sizes = []

    class Counting:
        def __getattr__(self, name):
            return getattr(orjson, name)

        @staticmethod
        def loads(b):
            sizes.append(len(b))
            return orjson.loads(b)
    mgr = _mgr(tmp_path)
    msgs = [_msg(0, 2_000), _msg(1, 900_000)]  # one item of 2 kB, then one of its pieces (<= 256 KiB each)
    mgr.save(RUN, msgs, step=0)
    monkeypatch.setattr(rp.ArrayReader, "ARRAY_RUN", 300 << 10)  # longer than any piece: the first one joins the run
    monkeypatch.setattr(rp, "orjson", Counting())
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    longest = max(len(orjson.dumps(m)) for m in msgs) + 2
    assert sizes and max(sizes) <= max(rp.ArrayReader.ARRAY_RUN, longest), (sizes, longest)
    assert len(sizes) == 2


# --------------------------------------------------------------------------------------------------
# What reads and saves from arrays cost (moto S3, ranged reads): no more requests or round trips
# than the tree path; a save uploads only what is new


def _big_state(i: int, nbytes: int) -> dict:
    rnd = random.Random(i)
    return {"step": i, "blob": rnd.randbytes(nbytes // 2).hex()}


def test_a_ranged_read_from_arrays_with_holes_makes_no_more_requests_than_the_tree(store_factory, monkeypatch):
    """S3 (moto): a run whose tier packs are large (a large session state every save) and whose
    list holds large messages (new ones: array items of their pieces) is read with byte ranges. A
    fresh ``latest()`` through the arrays must be exact and make no more GETs than the same read
    through the tree (the tree path fetches the pieces of every large message in one parallel
    wave; one GET per large message, one after another, would be a regression)."""
    store = store_factory("s3")
    mgr = CheckpointManager(store)
    msgs = [{"role": "system", "content": "You are a test."}]
    for s in range(16):
        msgs = msgs + [_msg(2 * s, 90_000 if s % 2 else 300), _msg(2 * s + 1)]
        mgr.save(EDGE_RUN, msgs, step=s, session_state=_big_state(s, 1 << 20))
    mgr.close()
    (tree, _), (arrays, used) = _ranged_costs(store, monkeypatch, msgs)
    assert used == [True]
    assert arrays[0] <= tree[0] and arrays[1] <= tree[1], (arrays, tree)


def test_a_ranged_read_of_many_holes_sharing_pieces_makes_no_more_round_trips_than_the_tree(store_factory, monkeypatch):
    """S3 (moto): a large message edited at every save (a file re-read into the context: most of
    its pieces shared, so every copy after the first is a hole whose pieces sit in earlier packs'
    blocks), tier packs read with byte ranges. A fresh ``latest()`` through the arrays fetches the
    holes' blocks in parallel waves, not one hole after another: no more GETs or round trips than
    the tree path."""
    store = store_factory("s3")
    mgr = CheckpointManager(store)  # one writer: it knows the pieces it stored
    base = _msg(7, 200_000)["content"]
    msgs = [{"role": "system", "content": "You are a test."}]
    for s in range(16):
        msgs = msgs + [{"role": "tool", "content": base + f" edit {s}"}, _msg(2 * s + 1)]
        mgr.save(EDGE_RUN, msgs, step=s, session_state=_big_state(s, 1 << 20))
    mgr.close()
    (tree, _), (arrays, (used, holes)) = _ranged_costs(store, monkeypatch, msgs, holes=True)
    assert used == [True] and len(holes) >= 10
    # the LIST-free part of the read: config, manifest, segment tails, then the holes' blocks in
    # two waves (one per hole, one after another, was 12 round trips for 15 holes)
    assert arrays[1] <= 5 and arrays[0] <= tree[0] and arrays[1] <= tree[1], (arrays, tree)
    # the tree path fetches the large messages' pieces lists and pieces in two waves as well
    # (it took two round trips per large message: 12)
    assert tree[1] <= 6, tree


def _ranged_costs(store, monkeypatch, msgs, holes: bool = False):
    """A fresh ``latest()`` of ``EDGE_RUN`` in ``store`` through the tree, then through the arrays, each
    GET held back 20 ms as a remote store does: per path ``((GETs, sequential round trips),
    info)``, info for the arrays being whether each read_arrays returned the list (and, with
    ``holes``, the holes of the segments' array blocks). Asserts each read is ``msgs``."""
    real_arrays = ArrayReader.read
    used, seen = [], []

    def read_arrays(self, m, segs):
        out = real_arrays(self, m, segs)
        used.append(out is not None)
        return out

    spans = []
    real_get = type(store).get

    def get(self, key, *a, **k):
        t0 = time.monotonic()
        time.sleep(0.02)
        try:
            return real_get(self, key, *a, **k)
        finally:
            spans.append((t0, time.monotonic()))
    monkeypatch.setattr(type(store), "get", get)

    def cost(arrays: bool) -> tuple[int, int]:
        monkeypatch.setattr(ArrayReader, "read", read_arrays if arrays else (lambda self, m, segs: None))
        fresh = CheckpointManager(store)
        before = store.stats.snapshot()
        spans.clear()
        cp = fresh.latest(EDGE_RUN)
        d = store.stats.since(before)
        assert cp.messages == msgs
        if arrays and holes:
            seen.extend(x for s in fresh.state.views[EDGE_RUN].head_segs for b in fresh.repo.cache[s.pack].blocks
                        if b.array for x in b.parts if x[0] == T_HOLE)
        fresh.close()
        return d.counts["GET"], _round_trips(spans)

    tree = cost(False)
    return (tree, None), (cost(True), (used, seen) if holes else used)


def _round_trips(intervals) -> int:
    """The longest chain of requests each started after the one before it ended."""
    items = sorted(intervals)
    chain = []
    for i, (s, _) in enumerate(items):
        chain.append(1 + max((chain[j] for j in range(i) if items[j][1] <= s), default=0))
    return max(chain, default=0)


def test_the_first_save_after_a_ranged_read_from_arrays_makes_no_more_requests_than_after_the_tree(
        store_factory, monkeypatch):
    """S3 (moto), large tier packs read with byte ranges: the first save after a fresh ``latest()``
    loads the list's refs from the tree (``ListState.refs_pending``); it must not cost more
    requests than the same save after a read through the tree."""
    store = store_factory("s3")
    mgr = CheckpointManager(store)
    msgs = [{"role": "system", "content": "You are a test."}]
    for s in range(21):
        msgs = msgs + [_msg(2 * s, 90_000 if s % 5 == 1 else 300), _msg(2 * s + 1)]
        mgr.save(EDGE_RUN, msgs, step=s, session_state=_big_state(s, 1 << 19))
    mgr.close()
    real_arrays = ArrayReader.read

    def cost(arrays: bool, i: int) -> dict:
        monkeypatch.setattr(ArrayReader, "read", real_arrays if arrays else (lambda self, m, segs: None))
        fresh = CheckpointManager(store)
        cp = fresh.latest(EDGE_RUN)
        before = store.stats.snapshot()
        nxt = cp.messages + [_msg(1000 + i)]
        fresh.save(EDGE_RUN, nxt, step=100 + i)
        d = store.stats.since(before)
        fresh.close()
        return {k: v for k, v in d.counts.items() if v}

    tree = cost(False, 0)
    arrays = cost(True, 1)
    assert sum(arrays.values()) <= sum(tree.values()), (arrays, tree)


def test_a_repeated_message_below_the_piece_threshold_is_not_uploaded_again_every_save(tmp_path):
    """DESIGN.md: per-checkpoint cost (storage, bytes written) scales with what is new. A 50 KB
    message (below ``cdc_threshold``, so one chunk, not a hole) that a run appends again every
    save (a repeated tool output, reminder or image) was deduplicated before array blocks (the
    tree references the chunk stored once); an array that stored it again in every save's pack
    made every save upload it again. A repeat of at least ``HOLE_MIN`` bytes is a hole."""
    rng = random.Random(5)
    rep = {"role": "user", "content": rng.randbytes(25_000).hex()}
    mgr = _mgr(tmp_path)
    msgs = [{"role": "system", "content": "s"}, rep]
    mgr.save(EDGE_RUN, msgs, step=0)
    up = []
    for s in range(1, 17):
        msgs = msgs + [{"role": "assistant", "n": s, "content": "ok " * 50}, rep]
        before = mgr.store.stats.snapshot()
        mgr.save(EDGE_RUN, msgs, step=s)
        up.append(mgr.store.stats.since(before).bytes_up)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == msgs
    # a save uploads what is new (the repeat is a hole naming the chunk stored once); the saves
    # that complete a tier rewrite the chunk once, as they did before array blocks
    assert sorted(up)[len(up) // 2] < 2_000, up
    assert sum(up) < 100_000, up


def _bench_s3():
    import importlib.util
    import sys

    bdir = ROOT / "benchmarks"
    if str(bdir) not in sys.path:
        sys.path.insert(0, str(bdir))
    spec = importlib.util.spec_from_file_location("bench_s3_review2", bdir / "s3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_s3_benchmarks_round_trips_work_after_a_read_from_arrays(moto_server):
    """``benchmarks/s3.py`` ``round_trips`` measures the tree depth from the reader's list state
    after ``latest()``; a read from arrays leaves ``spine`` None (the next save loads it), so it
    must find the depth elsewhere, not fail with an AttributeError."""
    from snapstore import CheckpointManager

    bench = _bench_s3()
    url = f"s3://{bench.new_bucket(moto_server)}/bench"
    w = CheckpointManager(url, endpoint_url=moto_server)
    msgs = []
    for s in range(30):
        msgs = msgs + [_msg(s, 200)]
        w.save(bench.RUN, msgs, step=s)
    w.close()
    got = bench.round_trips(url, moto_server)
    assert got["messages"] == len(msgs) and got["depth"] >= 1


# --------------------------------------------------------------------------------------------------
# Arrays through session state, forks, rollbacks, GC, crashes and two writers


def test_arrays_with_session_state_forks_rollbacks_exact_messages_and_gc_stay_exact(tmp_path):
    """A walk through what a run with arrays goes through: session state (inline and a value tree,
    a big integer in it), large and repeated messages, a fresh read from the arrays followed by
    saves, a fork, a rollback, an EXACT message; every fresh read exact (types too), verify clean
    after GC."""
    mgr = _mgr(tmp_path)
    msgs = [{"role": "system", "content": "You are a test."}]
    states = []
    for s in range(10):
        msgs = msgs + [_msg(2 * s, 90_000 if s == 3 else 300), {"role": "user", "content": "continue"}]
        st = {"step": s, "n": 2 ** 70, "blob": _big_state(s, 5000 if s % 2 else 10)}
        states.append(st)
        mgr.save(EDGE_RUN, msgs, step=s, session_state=st)
    fresh = _mgr(tmp_path)
    cp = fresh.latest(EDGE_RUN)
    assert cp.messages == msgs and cp.session_state == states[-1] and type(cp.session_state["n"]) is int
    # the writer after a read from the arrays
    for s in range(10, 13):
        msgs = msgs + [_msg(2 * s)]
        fresh.save(EDGE_RUN, msgs, step=s, session_state={"step": s})
    cp = _mgr(tmp_path).latest(EDGE_RUN)
    assert cp.messages == msgs and cp.session_state == {"step": 12}
    # a fork of the head, appended to
    f = _mgr(tmp_path)
    f.fork(EDGE_RUN, cp.id, "forked")
    fmsgs = msgs + [_msg(500)]
    f.save("forked", fmsgs, step=1)
    assert _mgr(tmp_path).latest("forked").messages == fmsgs
    # a rollback, then appends (one EXACT)
    r = _mgr(tmp_path)
    hist = r.list(EDGE_RUN)
    target = hist[len(hist) // 2]
    back = r.rollback(EDGE_RUN, target.id)
    rmsgs = back.messages + [{"v": 2 ** 80, "s": "\ud800"}, _msg(900)]
    r.save(EDGE_RUN, rmsgs, step=99)
    got = _mgr(tmp_path).latest(EDGE_RUN).messages
    assert got == rmsgs and type(got[-2]["v"]) is int and got[-2]["s"] == "\ud800"
    more = rmsgs + [_msg(901)]
    w = _mgr(tmp_path)
    w.latest(EDGE_RUN)
    w.save(EDGE_RUN, more, step=100)
    got = _mgr(tmp_path).latest(EDGE_RUN).messages
    assert got == more and type(got[-3]["v"]) is int
    g = _mgr(tmp_path)
    g.gc(grace_period=0, max_unused=0.0)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == more
    assert _mgr(tmp_path).latest("forked").messages == fmsgs
    assert _mgr(tmp_path).verify(read_data=True).ok


def test_gc_with_holes_repeats_prunes_and_a_fork_of_a_deleted_run_keeps_every_live_message(tmp_path):
    """GC (mark, rewriting tier packs, forwarding) over array blocks with holes and repeated
    messages: after pruning, deleting the source of a fork and collecting with no grace, every
    live checkpoint still reads exactly and verify --read-data is clean."""
    mgr = _mgr(tmp_path)
    msgs = [{"role": "system", "content": "You are a test."}]
    ids = []
    for s in range(40):
        msgs = msgs + [_msg(s, 90_000 if s % 7 == 2 else 300), {"role": "user", "content": "continue"}]
        if s % 9 == 4:
            msgs = msgs + [msgs[5]]  # an earlier large message again (a hole for it again)
        ids.append(mgr.save(EDGE_RUN, msgs, step=s))
    keep = {}
    for cp in mgr.list(EDGE_RUN):
        keep[cp.id] = mgr.get(EDGE_RUN, cp.id).messages
    mgr.fork(EDGE_RUN, ids[20], "fork")
    fmsgs = keep[ids[20]] + [_msg(777, 90_000)]
    mgr.save("fork", fmsgs, step=1)
    mgr.prune(keep_last=3, run_id=EDGE_RUN)
    live = {c.id for c in mgr.list(EDGE_RUN)}
    mgr.gc(grace_period=0, max_unused=0.0)
    mgr.gc(grace_period=0, max_unused=0.0)
    after = _mgr(tmp_path)
    for cid in live:
        assert after.get(EDGE_RUN, cid).messages == keep[cid]
    assert after.latest(EDGE_RUN).messages == msgs
    assert _mgr(tmp_path).verify(read_data=True).ok
    mgr.delete(EDGE_RUN)
    mgr.gc(grace_period=0, max_unused=0.0)
    mgr.gc(grace_period=0, max_unused=0.0)
    fresh = _mgr(tmp_path)
    assert fresh.latest("fork").messages == fmsgs
    got = sorted((fresh.get("fork", c.id).messages for c in fresh.list("fork")), key=len)
    assert got == [keep[ids[20]], fmsgs]
    assert _mgr(tmp_path).verify(read_data=True).ok
    assert live  # the pruned run's survivors were read before it was deleted


def test_two_writers_after_reads_from_arrays_and_a_crash_between_pack_and_record(tmp_path, monkeypatch):
    """Two managers read the head from the arrays; one saves, the other gets ConflictError and,
    after reading again, continues the list. A save that dies after its pack and before its
    record leaves the run as it was; the next save and every fresh read are exact."""
    from snapstore.errors import ConflictError, SnapstoreError
    from snapstore.repo.log.records import LogRecords

    msgs = _build_edge(tmp_path, 9)
    a, b = _mgr(tmp_path), _mgr(tmp_path)
    assert a.latest(EDGE_RUN).messages == msgs and b.latest(EDGE_RUN).messages == msgs
    ma = msgs + [_msg(1001)]
    a.save(EDGE_RUN, ma, step=50)
    with pytest.raises(ConflictError):
        b.save(EDGE_RUN, msgs + [_msg(1002)], step=50)
    got = b.latest(EDGE_RUN).messages
    assert got == ma
    mb = got + [_msg(1003)]
    b.save(EDGE_RUN, mb, step=51)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == mb
    # a crash between the pack and the record
    c = _mgr(tmp_path)
    assert c.latest(EDGE_RUN).messages == mb
    real = LogRecords.publish

    def boom(self, *a, **k):
        raise SnapstoreError("crash before the record")
    from snapstore.repo.log import onecommit
    real_one = onecommit.publish_with_data

    def boom_one(*a, **k):  # at one commit (the directory store's batch): the batch never lands
        raise SnapstoreError("crash before the record")
    monkeypatch.setattr(LogRecords, "publish", boom)
    monkeypatch.setattr(onecommit, "publish_with_data", boom_one)
    with pytest.raises(SnapstoreError):
        c.save(EDGE_RUN, mb + [_msg(1004)], step=52)
    monkeypatch.setattr(LogRecords, "publish", real)
    monkeypatch.setattr(onecommit, "publish_with_data", real_one)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == mb
    d = _mgr(tmp_path)
    d.latest(EDGE_RUN)
    md = mb + [_msg(1005), _msg(1006)]
    d.save(EDGE_RUN, md, step=53)
    assert _mgr(tmp_path).latest(EDGE_RUN).messages == md
    assert _mgr(tmp_path).verify(read_data=True).ok


def test_a_new_message_larger_than_a_pack_block_still_saves_and_reads_back(tmp_path):
    """A message larger than a block may be (``MAX_BLOCK_RAW``, 128 MiB) is cut into pieces of at
    most 256 KiB, which go into 1 MiB data blocks: it saved before a new large message became
    one array item of its pieces (an item must fit one block). It must still save, and read back."""
    import os

    big = {"role": "tool", "content": os.urandom(65 << 20).hex()}  # 130 MiB of JSON, no piece repeated
    msgs = [{"role": "user", "content": "hi"}, big]
    _mgr(tmp_path).save(RUN, msgs, step=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs


# --------------------------------------------------------------------------------------------
# messages.a: whether the writer knew the run's arrays hold exactly the list


def _heads(mgr, run) -> list:
    """Every checkpoint record of ``run``, oldest first (as stored)."""
    from snapstore.format.manifest import KIND_CHECKPOINT, Manifest, is_void
    rk = mgr.state.run_key(run)
    out = []
    for info in mgr.store.list(keys.manifests_prefix(rk)):
        if is_void(info.size):
            continue  # a deleted record's position kept taken (docs/format.md §15)
        m = Manifest.from_bytes(info.key, mgr.store.get(info.key))
        if m.kind == KIND_CHECKPOINT:
            out.append(m)
    return out[::-1]  # keys sort newest first


@pytest.fixture
def passes(monkeypatch):
    """Counts of the passes over array blocks fresh reads make (hashing only / hashing and parsing)."""
    seen = {"hash": 0, "parse": 0}
    real = ArrayReader._pass

    def one(self, plan, parse):
        seen["parse" if parse else "hash"] += 1
        return real(self, plan, parse)
    monkeypatch.setattr(ArrayReader, "_pass", one)
    return seen


def test_appends_forks_and_new_runs_say_their_arrays_hold_the_list_and_are_read_in_one_pass(tmp_path, passes):
    mgr = _mgr(tmp_path)
    msgs = []
    for s in range(9):
        msgs = msgs + [_msg(s), _msg(50 + s, 90_000 if s == 4 else 300)]
        mgr.save(RUN, msgs, step=s)
    assert [m.arrays for m in _heads(mgr, RUN)] == [1] * 9
    # a cold writer (a fresh manager) continues it
    _mgr(tmp_path).save(RUN, msgs + [_msg(99)], step=9)
    assert _heads(mgr, RUN)[-1].arrays == 1
    # a fork lists its source's segments (§10): of the source's head, their arrays hold exactly
    # its list; of an older checkpoint they hold more (the fork and its appends say 0)
    old = _mgr(tmp_path).fork(RUN, _heads(mgr, RUN)[4].checkpoint_id, "forked-old")
    _mgr(tmp_path).save("forked-old", old.messages + [_msg(7000)], step=20)
    assert [m.arrays for m in _heads(mgr, "forked-old")] == [0, 0]
    assert _mgr(tmp_path).latest("forked-old").messages == old.messages + [_msg(7000)]
    fork = _mgr(tmp_path).fork(RUN, _heads(mgr, RUN)[-1].checkpoint_id, "forked")
    f = _mgr(tmp_path)
    f.save("forked", fork.messages + [_msg(7000)], step=20)
    assert [m.arrays for m in _heads(mgr, "forked")] == [1, 1]
    # a deleted run saved again is a new run: nothing in its arrays before its messages
    f.delete("forked")
    f.save("forked", [_msg(1)], step=0)
    assert _heads(mgr, "forked")[-1].arrays == 1
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs + [_msg(99)]
    assert _mgr(tmp_path).latest("forked").messages == [_msg(1)]
    assert passes == {"hash": 0, "parse": 2}
    assert _mgr(tmp_path).verify(read_data=True).ok


@pytest.mark.parametrize("how", ["rewrite", "rollback", "delete-head", "older-parent", "emptied"])
def test_a_save_after_which_the_arrays_hold_more_or_another_list_says_so_and_reads_through_the_tree(
        tmp_path, paths, passes, how):
    mgr = _mgr(tmp_path)
    lists, ids = [], []
    msgs = []
    for s in range(6):
        msgs = msgs + [_msg(s)]
        ids.append(mgr.save(RUN, msgs, step=s))
        lists.append(msgs)
    if how == "rewrite":
        want = [{"role": "system", "content": "edited"}] + msgs[1:] + [_msg(100)]
        mgr.save(RUN, want, step=6)
    elif how == "rollback":
        mgr.rollback(RUN, ids[2])
        want = lists[2] + [_msg(100)]
        mgr.save(RUN, want, step=6)
    elif how == "delete-head":
        mgr.delete(RUN, ids[-1])
        want = lists[-2] + [_msg(100)]
        mgr.save(RUN, want, step=6)
    elif how == "older-parent":
        want = lists[2] + [_msg(100)]
        mgr.save(RUN, want, step=6, parent_id=ids[2])
    else:
        mgr.save(RUN, [], step=6)
        want = [_msg(100)]
        mgr.save(RUN, want, step=7)
    head = _heads(mgr, RUN)[-1]
    assert head.arrays == 0
    # and every later append keeps saying so (the arrays never again end with the list)
    mgr.save(RUN, want + [_msg(101)], step=8)
    assert _heads(mgr, RUN)[-1].arrays == 0
    _mgr(tmp_path).save(RUN, want + [_msg(101), _msg(102)], step=9)
    assert _heads(mgr, RUN)[-1].arrays == 0
    paths.update(tree=0, arrays=0)
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == want + [_msg(101), _msg(102)]
    assert paths["arrays"] == 0 and passes == {"hash": 0, "parse": 0}  # straight to the tree
    # the checkpoints saved before are still their arrays' first items: read from them (hashed
    # first: the arrays hold more than such a list, one pass is for the arrays' last checkpoint)
    assert _mgr(tmp_path).get(RUN, ids[1]).messages == lists[1]
    assert paths["arrays"] == 1 and passes == {"hash": 1, "parse": 1}
    assert _mgr(tmp_path).verify(read_data=True).ok


def _reseal(tmp_path, mgr, m, **changes) -> None:
    """Write record ``m`` again with ``changes`` (what a writer of another version, or a damaged
    or hostile one, could have written), under its key."""
    key = keys.manifest_key(mgr.state.run_key(m.run_id), m.seq)
    for k, v in changes.items():
        setattr(m, k, v)
    (tmp_path / key).write_bytes(m.to_bytes())


def test_records_without_messages_a_are_hashed_before_they_are_parsed(tmp_path, passes):
    """A record of the version before ``messages.a`` (its tag covers ``x`` alone) is read from
    the arrays only after a first pass found their hash to be the list's: a run whose arrays
    hold another list is then not parsed at all before the tree reads it."""
    mgr = _mgr(tmp_path)
    msgs = []
    for s in range(5):
        msgs = msgs + [_msg(s)]
        mgr.save(RUN, msgs, step=s)
    # edited in place, same count and size: the arrays hold as many bytes as the list
    edited = [dict(msgs[0], content="X" + msgs[0]["content"][1:])] + msgs[1:]
    mgr.save("edited", msgs, step=0)
    mgr.save("edited", edited, step=1)
    h = mgr.repo.hasher
    for run in (RUN, "edited"):
        m = _heads(mgr, run)[-1]
        _reseal(tmp_path, mgr, m, arrays=None, exact_tag=h.exact_tag(m.digest, m.exact))
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert passes == {"hash": 1, "parse": 1}
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest("edited").messages == edited
    assert passes == {"hash": 1, "parse": 0}
    assert _mgr(tmp_path).verify().ok


def test_a_record_that_claims_its_arrays_hold_the_list_when_they_do_not_still_reads_exactly(tmp_path, passes):
    """``messages.a`` = 1 on a run whose arrays hold another list (a writer's bug, or a record
    re-sealed with the key): parsed once from the arrays, dropped on the digest, read through the
    tree; without the key the claim is not believed (the tag) and the tree reads it directly."""
    mgr = _mgr(tmp_path)
    msgs = [_msg(0), _msg(1)]
    mgr.save(RUN, msgs, step=0)
    edited = [dict(msgs[0], content="X" + msgs[0]["content"][1:]), _msg(1)]
    mgr.save(RUN, edited, step=1)
    m = _heads(mgr, RUN)[-1]
    assert m.arrays == 0
    _reseal(tmp_path, mgr, m, arrays=1, exact_tag=mgr.repo.hasher.exact_tag(m.digest, m.exact, 1))
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == edited
    assert passes == {"hash": 0, "parse": 1}
    _reseal(tmp_path, mgr, m, arrays=1, exact_tag=mgr.repo.hasher.exact_tag(m.digest, m.exact, 0))
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == edited
    assert passes == {"hash": 0, "parse": 0}
    rep = _mgr(tmp_path).verify()
    assert not rep.ok and any("messages.xt" in p.message for p in rep.errors)


def test_messages_a_other_than_0_or_1_is_a_corrupt_record(tmp_path):
    from snapstore.format.manifest import Manifest
    mgr = _mgr(tmp_path)
    mgr.save(RUN, [_msg(0)], step=0)
    m = _heads(mgr, RUN)[-1]
    key = keys.manifest_key(mgr.state.run_key(RUN), m.seq)
    m.arrays = 2
    with pytest.raises(IntegrityError, match="messages.a"):
        Manifest.from_bytes(key, m.to_bytes())


# --------------------------------------------------------------------------------------------------
# messages.a after an emptied head, records older than the flag, blind appends and seeded call sequences


def test_a_save_after_reading_an_emptied_head_says_the_arrays_do_not_hold_the_list(tmp_path, passes):
    """An emptied list (``save(run, [])``) leaves the arrays holding the old messages. A manager
    that read that head (latest) and then appends must not say ``a`` = 1: every read of that
    record (and of every later append) would parse the old messages and drop them on the digest."""
    mgr = _mgr(tmp_path)
    mgr.save(RUN, [_msg(0), _msg(1)], step=0)
    mgr.save(RUN, [], step=1)
    assert _heads(mgr, RUN)[-1].arrays == 0
    w = _mgr(tmp_path)
    assert w.latest(RUN).messages == []
    w.save(RUN, [_msg(100)], step=2)
    w.save(RUN, [_msg(100), _msg(101)], step=3)
    passes.update(hash=0, parse=0)
    assert _mgr(tmp_path).latest(RUN).messages == [_msg(100), _msg(101)]
    assert passes == {"hash": 0, "parse": 0}, "a wasted parse of the old messages"
    assert [m.arrays for m in _heads(mgr, RUN)] == [1, 0, 0, 0]


def test_a_run_written_before_messages_a_and_continued_keeps_its_read_from_arrays(tmp_path, paths, passes):
    """A run whose records predate ``messages.a`` (their tag covers ``x`` alone) is read from its
    arrays (hash first). Continuing it with this version must not turn that off for good: the
    writer does not know whether the arrays hold the list, so it says nothing (``a`` absent, hash
    first), rather than ``a`` = 0 (straight to the tree on every later checkpoint of the run)."""
    mgr = _mgr(tmp_path)
    msgs = []
    for s in range(4):
        msgs = msgs + [_msg(s)]
        mgr.save(RUN, msgs, step=s)
    h = mgr.repo.hasher
    for m in _heads(mgr, RUN):
        _reseal(tmp_path, mgr, m, arrays=None, exact_tag=h.exact_tag(m.digest, m.exact))
    paths.update(tree=0, arrays=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert paths == {"tree": 0, "arrays": 1}  # as before this version
    for cold in (False, True):  # a writer that read the head, and one that did not
        w = _mgr(tmp_path)
        if not cold:
            w.latest(RUN)
        msgs = msgs + [_msg(100 + cold)]
        w.save(RUN, msgs, step=10 + cold)
        assert _heads(mgr, RUN)[-1].arrays != 0
        paths.update(tree=0, arrays=0)
        assert _mgr(tmp_path).latest(RUN).messages == msgs
        assert paths == {"tree": 0, "arrays": 1}
    assert _mgr(tmp_path).verify(read_data=True).ok


def test_a_writer_that_appended_without_reading_can_then_rewrite_the_list(tmp_path):
    """A manager that continues a run without reading it first (its first save loads only the
    head's spine, and encodes the last messages for the dictionary, which for a short list is
    all of them) and then saves an edited list must save it, not fail with a TypeError
    (``parent.refs`` is None: the refs of a list it never walked). Not new in this change."""
    _mgr(tmp_path).save(RUN, [_msg(0), _msg(1)], step=0)
    w = _mgr(tmp_path)
    w.save(RUN, [_msg(0), _msg(1), _msg(2)], step=1)
    edited = [_msg(9), _msg(1), _msg(2)]
    w.save(RUN, edited, step=2)
    assert _mgr(tmp_path).latest(RUN).messages == edited
    assert _mgr(tmp_path).verify(read_data=True).ok


def _replay(root, seed: int, steps: int) -> dict:
    """A seeded random sequence of API calls on two runs (appends, explicit parents, rollbacks,
    deletes, rewrites, emptied lists, GC with no grace, prune, forks; fresh managers and reads in
    between), then a fresh read of every live checkpoint: ``{(run, id): messages}`` expected."""
    import random

    from snapstore.errors import ConflictError

    rng = random.Random(seed)
    mgr = _mgr(root)

    def bigmsg(k, n):
        r = random.Random(k)
        return {"role": "tool", "k": k, "content": "".join(r.choice("abcdefghij \n") for _ in range(n))}
    pool = [bigmsg(k, rng.choice([70_000, 150_000])) for k in range(3)]
    expect, cur, ids, ctr = {}, {"A": [], "B": []}, {"A": [], "B": []}, [1000]

    def newmsg():
        ctr[0] += 1
        r = rng.random()
        if r < 0.1:
            return rng.choice(pool)
        if r < 0.15:
            b = rng.choice(pool)
            return dict(b, content=b["content"][:30000] + str(ctr[0]) + b["content"][30000:])
        if r < 0.2:
            return bigmsg(ctr[0], 90_000)
        if r < 0.25:
            return ctr[0] * 1000 + 123
        return _msg(ctr[0], rng.choice([50, 300, 5000]))

    def drop_dead(w, run):
        live = {x.id for x in w.list(run)}
        for k in [k for k in expect if k[0] == run and k[1] not in live]:
            expect.pop(k)
    for step in range(steps):
        run = rng.choice("AB")
        op = rng.random()
        w = mgr if rng.random() < 0.6 else _mgr(root)
        if rng.random() < 0.3 and ids[run]:
            w.latest(run)
        try:
            if op < 0.55 or not ids[run]:
                msgs = cur[run] + [newmsg() for _ in range(rng.randint(0, 3))]
                if rng.random() < 0.05:
                    msgs = msgs[:-1] if msgs else msgs
                cid = w.save(run, msgs, step=step)
            elif op < 0.65:
                c = ids[run][rng.randrange(len(ids[run]))]
                if (run, c) not in expect:
                    continue
                msgs = expect[(run, c)] + [newmsg()]
                cid = w.save(run, msgs, step=step, parent_id=c)
            elif op < 0.72:
                c = rng.choice(ids[run])
                if (run, c) not in expect:
                    continue
                w.rollback(run, c)
                cur[run] = expect[(run, c)]
                drop_dead(w, run)
                continue
            elif op < 0.77:
                c = rng.choice(ids[run])
                if (run, c) not in expect:
                    continue
                w.delete(run, c)
                expect.pop((run, c))
                drop_dead(w, run)
                try:
                    cur[run] = w.latest(run).messages
                except Exception:
                    cur[run] = []
                continue
            elif op < 0.82:
                msgs = [newmsg()] + cur[run][1:]
                cid = w.save(run, msgs, step=step)
            elif op < 0.86:
                w.gc(grace_period=0, max_unused=rng.choice([0.0, 0.5]))
                continue
            elif op < 0.9:
                w.prune(keep_last=rng.randint(1, 4), run_id=run)
                drop_dead(w, run)
                continue
            elif op < 0.93 and ids["A"]:
                c = rng.choice(ids["A"])
                if ("A", c) not in expect:
                    continue
                w.fork("A", c, f"F{step}")
                continue
            else:
                msgs = []
                cid = w.save(run, msgs, step=step)
            cur[run] = msgs
            expect[(run, cid)] = msgs
            ids[run].append(cid)
        except ConflictError:
            continue
        finally:
            if w is not mgr:
                w.close()
    return expect


def test_a_seeded_sequence_of_calls_leaves_no_record_saying_a_1_over_other_items(tmp_path, monkeypatch):
    """Found by a seeded random sequence (seed 10, 100 calls): afterwards the first checkpoint of
    run A (one message, ``a`` = 1) is parsed from arrays whose first item is another message
    (the head's one tier pack holds 5 items, only recent ones). Every read stays exact; the cost
    is a wasted parse on every read of that checkpoint. Root cause not pinned down (GC with no
    grace and tier merges are in the sequence)."""
    from snapstore.repo.arrays import ArrayReader
    from snapstore.repo.trees import TreeReader

    wasted = []
    real_pass, real_parse = ArrayReader._pass, ArrayReader._parse

    def parse_arrays(self, m, plan, hash_first):
        self._review_digest = (m.digest, m.run_id, m.seq)
        return real_parse(self, m, plan, hash_first)

    def one(self, plan, parse):
        got = real_pass(self, plan, parse)
        if parse and (got is None or got[0].hexdigest(16) != self._review_digest[0]):
            wasted.append(self._review_digest[1:])
        return got
    monkeypatch.setattr(ArrayReader, "_parse", parse_arrays)
    monkeypatch.setattr(ArrayReader, "_pass", one)
    expect = _replay(tmp_path, 10, 100)
    for (run, c), msgs in expect.items():
        assert _mgr(tmp_path).get(run, c).messages == msgs
    assert not wasted, wasted


def test_a_seeded_sequence_of_calls_saves_without_missing_packs(tmp_path):
    """Found by the same seeded sequence (seed 16, 100 calls; also on main, so not from this
    change): at call 27 the long-lived manager's ``save(run, ..., parent_id=c)`` of a live
    checkpoint ``c`` fails with ObjectNotFound (the parent's state is looked for in a pack that is
    gone), while a fresh manager reads ``c`` and verify passes. A save from a live checkpoint must
    save, or conflict, not fail on a missing pack. Not reduced further."""
    expect = _replay(tmp_path, 16, 100)
    for (run, c), msgs in expect.items():
        assert _mgr(tmp_path).get(run, c).messages == msgs
