"""Review of messages.a and the one-pass read from array blocks (docs/format.md §8, §11): cases
where a record said ``a`` = 1 while the arrays' first ``count`` items were not its list, or where
a run lost its read from arrays.

Real parts: a local store on a temp dir, fresh managers (cold caches) for every read.
"""

from __future__ import annotations

from snapstore.format import keys
from snapstore.format.pack import T_CHUNK
from s3_fixtures import moto_server  # noqa: F401
from test_arrays import RUN, _heads, _mgr, _msg, _reseal, passes, paths  # noqa: F401


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


def _bench_s3():
    import importlib.util
    import sys
    from pathlib import Path

    bdir = Path(__file__).resolve().parent.parent / "benchmarks"
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


def test_a_new_message_larger_than_a_pack_block_still_saves_and_reads_back(tmp_path):
    """A message larger than a block may be (``MAX_BLOCK_RAW``, 128 MiB) is cut into pieces of at
    most 256 KiB, which go into 1 MiB data blocks: it saved before a new large message became
    one array item of its pieces (an item must fit one block). It must still save, and read back."""
    import os

    big = {"role": "tool", "content": os.urandom(65 << 20).hex()}  # 130 MiB of JSON, no piece repeated
    msgs = [{"role": "user", "content": "hi"}, big]
    _mgr(tmp_path).save(RUN, msgs, step=0)
    assert _mgr(tmp_path).latest(RUN).messages == msgs


def test_a_run_parsed_in_one_call_stays_within_array_run_unless_one_item_is_longer(tmp_path, monkeypatch):
    """``ArrayReader.ARRAY_RUN`` (48 KiB): a run of consecutive items parsed in one ``orjson.loads``
    call is at most that long, or one item on its own (docs/format.md §11). A new large message
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
