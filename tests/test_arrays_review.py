"""Review of array blocks (docs/format.md §8, §19 "Array blocks"): defects found by an adversarial
review, each shown by a test here. Real parts: a local store on a temp dir, fresh managers."""

from __future__ import annotations

import os
import random
import time

import pytest

from snapstore import CheckpointManager
from snapstore.format import keys
from snapstore.format.pack import T_CHUNK, T_HOLE, T_PIECES, Pack, PackBuilder
from snapstore.repo.readpath import ReadPath
from s3_fixtures import store_factory  # noqa: F401 - fixture
from test_arrays import _build as build_run, _mgr, _msg

RUN = "review-run"


def _build(root, saves: int, per: int = 2, big: set = frozenset()) -> list:
    return build_run(root, saves, per, big, run=RUN)


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
    msgs = _build(tmp_path, 12, big={2})
    mgr = _mgr(tmp_path)
    head = mgr.repo.head(mgr.state.run_key(RUN))
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
    real_raw, real_arrays = ReadPath.message_raw, ReadPath.read_arrays

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
    monkeypatch.setattr(ReadPath, "message_raw", message_raw)
    monkeypatch.setattr(ReadPath, "read_arrays", read_arrays)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert read["bytes"] <= head.size + head.count + 1, (read["bytes"], head.size)


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
        mgr.save(RUN, msgs, step=s, session_state=_big_state(s, 1 << 20))
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
        mgr.save(RUN, msgs, step=s, session_state=_big_state(s, 1 << 20))
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
    """A fresh ``latest()`` of ``RUN`` in ``store`` through the tree, then through the arrays, each
    GET held back 20 ms as a remote store does: per path ``((GETs, sequential round trips),
    info)``, info for the arrays being whether each read_arrays returned the list (and, with
    ``holes``, the holes of the segments' array blocks). Asserts each read is ``msgs``."""
    real_arrays = ReadPath.read_arrays
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
        monkeypatch.setattr(ReadPath, "read_arrays", read_arrays if arrays else (lambda self, m, segs: None))
        fresh = CheckpointManager(store)
        before = store.stats.snapshot()
        spans.clear()
        cp = fresh.latest(RUN)
        d = store.stats.since(before)
        assert cp.messages == msgs
        if arrays and holes:
            seen.extend(x for s in fresh.state.views[RUN].head_segs for b in fresh.repo._cache[s.pack].blocks
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
        mgr.save(RUN, msgs, step=s, session_state=st)
    fresh = _mgr(tmp_path)
    cp = fresh.latest(RUN)
    assert cp.messages == msgs and cp.session_state == states[-1] and type(cp.session_state["n"]) is int
    # the writer after a read from the arrays
    for s in range(10, 13):
        msgs = msgs + [_msg(2 * s)]
        fresh.save(RUN, msgs, step=s, session_state={"step": s})
    cp = _mgr(tmp_path).latest(RUN)
    assert cp.messages == msgs and cp.session_state == {"step": 12}
    # a fork of the head, appended to
    f = _mgr(tmp_path)
    f.fork(RUN, cp.id, "forked")
    fmsgs = msgs + [_msg(500)]
    f.save("forked", fmsgs, step=1)
    assert _mgr(tmp_path).latest("forked").messages == fmsgs
    # a rollback, then appends (one EXACT)
    r = _mgr(tmp_path)
    hist = r.list(RUN)
    target = hist[len(hist) // 2]
    back = r.rollback(RUN, target.id)
    rmsgs = back.messages + [{"v": 2 ** 80, "s": "\ud800"}, _msg(900)]
    r.save(RUN, rmsgs, step=99)
    got = _mgr(tmp_path).latest(RUN).messages
    assert got == rmsgs and type(got[-2]["v"]) is int and got[-2]["s"] == "\ud800"
    more = rmsgs + [_msg(901)]
    w = _mgr(tmp_path)
    w.latest(RUN)
    w.save(RUN, more, step=100)
    got = _mgr(tmp_path).latest(RUN).messages
    assert got == more and type(got[-3]["v"]) is int
    g = _mgr(tmp_path)
    g.gc(grace_period=0, max_unused=0.0)
    assert _mgr(tmp_path).latest(RUN).messages == more
    assert _mgr(tmp_path).latest("forked").messages == fmsgs
    assert _mgr(tmp_path).verify(read_data=True).ok


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
        mgr.save(RUN, msgs, step=s, session_state=_big_state(s, 1 << 19))
    mgr.close()
    real_arrays = ReadPath.read_arrays

    def cost(arrays: bool, i: int) -> dict:
        monkeypatch.setattr(ReadPath, "read_arrays", real_arrays if arrays else (lambda self, m, segs: None))
        fresh = CheckpointManager(store)
        cp = fresh.latest(RUN)
        before = store.stats.snapshot()
        nxt = cp.messages + [_msg(1000 + i)]
        fresh.save(RUN, nxt, step=100 + i)
        d = store.stats.since(before)
        fresh.close()
        return {k: v for k, v in d.counts.items() if v}

    tree = cost(False, 0)
    arrays = cost(True, 1)
    assert sum(arrays.values()) <= sum(tree.values()), (arrays, tree)


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
    mgr.save(RUN, msgs[:1], step=0)
    mgr.save(RUN, msgs, step=1)
    rk = mgr.state.run_key(RUN)
    head = mgr.repo.head(rk)
    assert head.exact == 1
    key = keys.manifest_key(rk, head.seq)
    path = tmp_path / key
    m = Manifest.from_bytes(key, path.read_bytes())
    m.exact = 0
    path.write_bytes(m.to_bytes())
    try:
        got = _mgr(tmp_path).latest(RUN).messages
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
    import snapstore.repo.readpath as rp

    mgr = _mgr(tmp_path)
    msgs = [{"role": "system", "content": "v1"}]
    for s in range(30):
        if s == 3:
            msgs = [{"role": "system", "content": "v2"}] + msgs[1:]  # edited in place, saved
            mgr.save(RUN, msgs, step=100)
        msgs = msgs + [_msg(s)]
        mgr.save(RUN, msgs, step=s)
    calls = {"n": 0}

    class Counting:
        def __getattr__(self, name):
            return getattr(__import__("orjson"), name)

        @staticmethod
        def loads(b):
            calls["n"] += 1
            return __import__("orjson").loads(b)
    monkeypatch.setattr(rp, "orjson", Counting())
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    assert calls["n"] <= len(msgs), (calls["n"], len(msgs))


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
        ids.append(mgr.save(RUN, msgs, step=s))
    keep = {}
    for cp in mgr.list(RUN):
        keep[cp.id] = mgr.get(RUN, cp.id).messages
    mgr.fork(RUN, ids[20], "fork")
    fmsgs = keep[ids[20]] + [_msg(777, 90_000)]
    mgr.save("fork", fmsgs, step=1)
    mgr.prune(keep_last=3, run_id=RUN)
    live = {c.id for c in mgr.list(RUN)}
    mgr.gc(grace_period=0, max_unused=0.0)
    mgr.gc(grace_period=0, max_unused=0.0)
    after = _mgr(tmp_path)
    for cid in live:
        assert after.get(RUN, cid).messages == keep[cid]
    assert after.latest(RUN).messages == msgs
    assert _mgr(tmp_path).verify(read_data=True).ok
    mgr.delete(RUN)
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

    msgs = _build(tmp_path, 9)
    a, b = _mgr(tmp_path), _mgr(tmp_path)
    assert a.latest(RUN).messages == msgs and b.latest(RUN).messages == msgs
    ma = msgs + [_msg(1001)]
    a.save(RUN, ma, step=50)
    with pytest.raises(ConflictError):
        b.save(RUN, msgs + [_msg(1002)], step=50)
    got = b.latest(RUN).messages
    assert got == ma
    mb = got + [_msg(1003)]
    b.save(RUN, mb, step=51)
    assert _mgr(tmp_path).latest(RUN).messages == mb
    # a crash between the pack and the record
    c = _mgr(tmp_path)
    assert c.latest(RUN).messages == mb
    real = LogRecords.publish

    def boom(self, *a, **k):
        raise SnapstoreError("crash before the record")
    monkeypatch.setattr(LogRecords, "publish", boom)
    with pytest.raises(SnapstoreError):
        c.save(RUN, mb + [_msg(1004)], step=52)
    monkeypatch.setattr(LogRecords, "publish", real)
    assert _mgr(tmp_path).latest(RUN).messages == mb
    d = _mgr(tmp_path)
    d.latest(RUN)
    md = mb + [_msg(1005), _msg(1006)]
    d.save(RUN, md, step=53)
    assert _mgr(tmp_path).latest(RUN).messages == md
    assert _mgr(tmp_path).verify(read_data=True).ok


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
    mgr.save(RUN, msgs, step=0)
    up = []
    for s in range(1, 17):
        msgs = msgs + [{"role": "assistant", "n": s, "content": "ok " * 50}, rep]
        before = mgr.store.stats.snapshot()
        mgr.save(RUN, msgs, step=s)
        up.append(mgr.store.stats.since(before).bytes_up)
    assert _mgr(tmp_path).latest(RUN).messages == msgs
    # a save uploads what is new (the repeat is a hole naming the chunk stored once); the saves
    # that complete a tier rewrite the chunk once, as they did before array blocks
    assert sorted(up)[len(up) // 2] < 2_000, up
    assert sum(up) < 100_000, up


@pytest.mark.parametrize("which", ["random", "chunk", "node", "state"])
def test_holes_naming_what_is_not_a_pieces_list_fall_back_to_the_tree(tmp_path, which):
    """Array items replaced by holes that name a random id, a chunk, a tree node or the state
    (a valid checksum, the item count unchanged): the read falls back to the tree and is exact."""
    msgs = _build(tmp_path, 12, big={2})
    mgr = _mgr(tmp_path)
    head = mgr.repo.head(mgr.state.run_key(RUN))
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
    assert _mgr(tmp_path).latest(RUN).messages == msgs
