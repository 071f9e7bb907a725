"""Array blocks: a run that only appends is read from its segments' arrays, without the tree
(docs/format.md §8, §19 "Array blocks"); every other run, and every damaged array, is read
through the tree as before.

Real parts: a local store on a temp dir, fresh managers (cold caches) for every read.
"""

from __future__ import annotations

import random

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK, T_HOLE, Pack, PackBuilder
from snapstore.repo.readpath import ReadPath
from snapstore.stores import LocalStore

RUN = "arrays-run"


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
    real_expand, real_arrays = ReadPath.expand, ReadPath.read_arrays

    def expand(self, spine, nodes=None):
        seen["tree"] += 1
        return real_expand(self, spine, nodes)

    def read_arrays(self, m, segs):
        out = real_arrays(self, m, segs)
        seen["arrays"] += out is not None
        return out
    monkeypatch.setattr(ReadPath, "expand", expand)
    monkeypatch.setattr(ReadPath, "read_arrays", read_arrays)
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
    return [x for p in (mgr.repo._cache[s.pack] for s in mgr.state.views[RUN].head_segs)
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
    pk = fresh.repo._cache[fresh.state.views["forked"].head_segs[0].pack]
    holes = [x for b in pk.blocks if b.array for x in b.parts if x[0] == T_HOLE]
    assert len(holes) == 6  # the 6 repeats of the large message (its first copy is an item)
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
    real = ReadPath._array_pass

    def one(self, plan, parse):
        seen["parse" if parse else "hash"] += 1
        return real(self, plan, parse)
    monkeypatch.setattr(ReadPath, "_array_pass", one)
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
    fork = _mgr(tmp_path).fork(RUN, _heads(mgr, RUN)[4].checkpoint_id, "forked")
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
