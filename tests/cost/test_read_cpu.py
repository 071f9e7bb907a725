"""The CPU fast paths of a cold read keep every check they replace (docs/design-notes.md §2.20, "CPU of a cold read").

* A restore verifies its list as a whole against the manifest's list digest instead of each
  chunk against its content id: damage the pack checksum does not catch (a pack rebuilt with a
  valid checksum around a changed chunk) still fails the read, naming the damaged pack, and a
  manifest whose digest does not match its list fails it naming the manifest; a dictionary is
  never cut from unverified bytes.
* The decoders that were rewritten for speed (pack header, tree nodes, one-shot decompression of
  recorded lengths, manifest times) accept exactly what they accepted before.

Real parts: a local store on a temp dir, fresh managers (cold caches) for every read.
"""

from __future__ import annotations

import os
import random
from datetime import datetime, timedelta, timezone

import pytest
import zstandard

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import codec, keys
from snapstore.format.codec import zstd_decompress
from snapstore.format.ids import Hasher
from snapstore.format.manifest import Manifest
from snapstore.format.times import format_time, parse_time
from snapstore.format.pack import T_CHUNK, T_NODE, Pack, PackBuilder
from snapstore.format.tree import Ref, decode_node, encode_node
from snapstore.repo.arrays import ArrayReader
from snapstore.stores import LocalStore
from snapstore.repo.prepare import SavePreparer

RUN = "cpu-run"


def _msg(i: int) -> dict:
    rng = random.Random(i)
    return {"role": "tool" if i % 2 else "assistant", "n": i,
            "content": " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "x" * 40]) for _ in range(60 + i % 50))}


def _build(root, saves: int = 24) -> tuple[list, list]:
    """A run of ``saves`` saves of 2 messages each (tier packs merged on the way); returns the
    final list and the checkpoint ids."""
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    msgs, ids = [{"role": "system", "content": "You are a test."}], []
    for s in range(saves):
        msgs = msgs + [_msg(2 * s), _msg(2 * s + 1)]
        ids.append(mgr.save(RUN, msgs, step=s))
    mgr.close()
    return msgs, ids


def _fresh(root) -> CheckpointManager:
    return CheckpointManager(LocalStore(root, fsync=False))


def _pack_path(root, pid: bytes):
    return root / keys.pack_key(pid)


def _rebuild(root, pid: bytes, change) -> None:
    """Rewrite pack ``pid`` with ``change(etype, eid, raw) -> raw`` applied to its entries: the
    same entries under the same ids, a valid checksum (damage only content ids can see)."""
    path = _pack_path(root, pid)
    pack = Pack.parse(str(path), path.read_bytes(), pid)
    pb = PackBuilder(pid)
    for e in sorted(pack.entries.values(), key=lambda e: (e.block, e.offset)):
        raw = pack.entry_bytes(e)
        pb.add(e.type, e.id, change(e.type, e.id, raw))
    data, _ = pb.build()
    path.write_bytes(data)


def _tier_packs(mgr) -> list[bytes]:
    head = mgr.repo.head(mgr.state.run_key(RUN))
    return [sg.pack for sg in head.segment_list() if sg.level >= 1]


def test_a_fresh_restore_hashes_the_list_once_not_every_chunk(tmp_path, monkeypatch):
    msgs, _ = _build(tmp_path)
    calls = []
    real = Hasher.content_id
    monkeypatch.setattr(Hasher, "content_id", lambda self, data: calls.append(len(data)) or real(self, data))
    mgr = _fresh(tmp_path)
    cp = mgr.latest(RUN)
    assert cp.messages == msgs
    # tree entries (state, upper, nodes) are still checked one by one; the messages are not
    assert len(calls) < len(msgs) // 2, calls
    # and the writer state it leaves continues the list exactly
    msgs2 = msgs + [_msg(1000)]
    mgr.save(RUN, msgs2, step=99)
    assert _fresh(tmp_path).latest(RUN).messages == msgs2
    assert _fresh(tmp_path).verify(read_data=True).ok


def test_a_changed_chunk_under_a_valid_pack_checksum_fails_the_read_naming_the_pack(tmp_path):
    msgs, _ = _build(tmp_path)
    mgr = _fresh(tmp_path)
    tier = _tier_packs(mgr)[0]
    victim = {}

    def change(etype, eid, raw):
        if etype == T_CHUNK and not victim and b'"n":' in raw:
            victim["id"] = eid
            return raw.replace(b"alpha", b"ALPHA", 1) if b"alpha" in raw else raw.replace(b"beta", b"BETA", 1)
        return raw
    _rebuild(tmp_path, tier, change)
    assert victim
    with pytest.raises(IntegrityError) as exc:
        _fresh(tmp_path).latest(RUN)
    assert exc.value.key == keys.pack_key(tier)
    assert victim["id"].hex() in str(exc.value) and "content id" in str(exc.value)
    rep = _fresh(tmp_path).verify(read_data=True)
    assert not rep.ok and any(p.key == keys.pack_key(tier) for p in rep.errors)


def test_a_manifest_whose_list_digest_is_wrong_fails_the_read_naming_the_manifest(tmp_path):
    msgs, ids = _build(tmp_path, saves=6)
    mgr = _fresh(tmp_path)
    rk = mgr.state.run_key(RUN)
    head = mgr.repo.head(rk)
    key = keys.manifest_key(rk, head.seq)
    m = Manifest.from_bytes(key, (tmp_path / key).read_bytes())
    good = m.digest
    m.digest = ("0" if good[0] != "0" else "1") + good[1:]
    (tmp_path / key).write_bytes(m.to_bytes())
    with pytest.raises(IntegrityError) as exc:
        _fresh(tmp_path).latest(RUN)
    assert exc.value.key == key and "list digest" in str(exc.value)
    # an older checkpoint (its own manifest intact) still reads
    assert _fresh(tmp_path).get(RUN, ids[-2]).messages == msgs[:-2]


def test_digests_written_by_the_first_release_and_missing_digests_still_read(tmp_path, monkeypatch):
    """The first release (a576e36) stored the keyed hash of the concatenated message ids as the
    list digest; a manifest may also carry none. Both take the per-entry path and read."""
    monkeypatch.setattr(ArrayReader, "read", lambda self, m, segs: None)  # the tree path
    msgs, _ = _build(tmp_path, saves=6)
    mgr = _fresh(tmp_path)
    rk = mgr.state.run_key(RUN)
    key = keys.manifest_key(rk, mgr.repo.head(rk).seq)
    mgr.latest(RUN)
    ids = [r.id for r in mgr.state.views[RUN].list_state.refs]
    original = (tmp_path / key).read_bytes()
    for digest in (mgr.repo.hasher.content_id(b"".join(ids)).hex(), ""):
        m = Manifest.from_bytes(key, original)
        m.digest = digest
        (tmp_path / key).write_bytes(m.to_bytes())
        assert _fresh(tmp_path).latest(RUN).messages == msgs


def test_a_dictionary_is_never_cut_from_unverified_bytes(tmp_path, monkeypatch):
    """The newest save's own pack compresses its data block against the messages before it (as
    the previous version wrote appends, and as rewrites are written). If one of those is damaged
    in a tier pack, the read names the tier pack (where the damage is), not the newest pack, whose
    block would otherwise have decompressed into garbage."""
    monkeypatch.setattr(SavePreparer, "WRITE_ARRAYS", False)
    msgs, _ = _build(tmp_path, saves=25)
    mgr = _fresh(tmp_path)
    head = mgr.repo.head(mgr.state.run_key(RUN))
    last = head.segment_list()[-1]
    assert last.level == 0
    newest = Pack.parse("p", _pack_path(tmp_path, last.pack).read_bytes(), last.pack)
    assert any(b.dict is not None for b in newest.blocks), "the newest pack has a dictionary block"
    # damage the message just before the newest ones (inside every dictionary window)
    target = _fresh(tmp_path)
    target.latest(RUN)
    refs = target.state.views[RUN].list_state.refs
    victim = refs[len(refs) - 3].id
    for pid in _tier_packs(mgr):
        path = _pack_path(tmp_path, pid)
        if (T_CHUNK, victim) in Pack.parse("p", path.read_bytes(), pid).entries:
            _rebuild(tmp_path, pid, lambda t, i, raw: raw.replace(b"a", b"A", 3) if i == victim else raw)
            break
    else:
        pytest.fail("victim not in a tier pack")
    with pytest.raises(IntegrityError) as exc:
        _fresh(tmp_path).latest(RUN)
    assert exc.value.key == keys.pack_key(pid)


def test_exact_and_pieced_messages_restore_through_the_fast_path(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path, fsync=False))
    big = {"role": "tool", "content": "".join(random.Random(3).choice("abcdef \n") for _ in range(100_000))}
    odd = [{"n": 2**70}, {"s": "lone \ud800 surrogate"}, {"f": 1.5e-300, "e": ""}, big, [1, [2, [3]]], "plain", None]
    msgs: list = []
    for i, m in enumerate(odd * 3):
        msgs = msgs + [m, _msg(i)]
        mgr.save(RUN, msgs, step=i)
    got = _fresh(tmp_path).latest(RUN).messages
    assert got == msgs and repr(got) == repr(msgs)


# ------------------------------------------------------------------------------------------------
# the rewritten decoders


def test_node_decoding_round_trips_every_varint_width_and_rejects_truncation():
    rng = random.Random(1)
    for level in (0, 1, 4):
        for n in (0, 1, 9, 130):
            packs = [os.urandom(8) for _ in range(rng.choice([1, 3, 200]))]
            items = [Ref(os.urandom(16), rng.choice([0, 127, 128, 16383, 16384, 2**21, 2**35]),
                         1 if level == 0 else rng.choice([1, 127, 128, 20000]),
                         rng.choice([0, 1, 2, 3]) if level == 0 else 0, rng.choice(packs)) for _ in range(n)]
            data = encode_node(level, items)
            assert decode_node(data) == (level, items)
            assert decode_node(memoryview(data)) == (level, items)
            for cut in range(1, min(len(data), 40)):
                with pytest.raises((ValueError, IndexError)):
                    decode_node(data[:-cut])


def test_pack_headers_round_trip_with_long_varints_and_reject_damage():
    pid = os.urandom(8)
    pb = PackBuilder(pid)
    rng = random.Random(2)
    want = {}
    for i in range(500):  # lengths of 1-3 byte varints; > 128 blocks: 2-byte block indexes
        raw = os.urandom(rng.choice([1, 100, 200, 9_000, 14_000]))
        t = T_CHUNK if i % 3 else T_NODE
        eid = os.urandom(16)
        pb.add(t, eid, raw)
        want[(t, eid)] = raw
    data, _ = pb.build(block_max=15_000)
    pack = Pack.parse("k", data, pid)
    assert len(pack.blocks) > 128
    assert {k: pack.entry_bytes(e) for k, e in pack.entries.items()} == want
    assert Pack.parse("k", bytearray(data), pid).entries == pack.entries
    import blake3
    hlen = int.from_bytes(data[-20:-16], "little")
    for cut in (1, 5, 17, 19):
        body = bytearray(data[:-20 - hlen]) + data[-20 - hlen:-20 - cut] + (hlen - cut).to_bytes(4, "little")
        body += blake3.blake3(bytes(body)).digest(16)
        with pytest.raises(IntegrityError, match="malformed header"):
            Pack.parse("k", bytes(body), pid)


def test_one_shot_decompression_keeps_the_bounds(monkeypatch):
    raw = os.urandom(3000) * 20
    plain = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    sized = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    for frame in (plain, sized):
        assert zstd_decompress("k", frame, 1 << 20, expected=len(raw)) == raw
        with pytest.raises(IntegrityError, match="more than|does not decompress"):
            zstd_decompress("k", frame, 1 << 20, expected=len(raw) - 1)
        with pytest.raises(IntegrityError, match=f"expected {len(raw) + 1}"):
            zstd_decompress("k", frame, 1 << 20, expected=len(raw) + 1)
    # a frame that claims 1 TiB but is checked against a recorded length allocates nothing
    claim = sized[:4] + bytes([0xC0 | (sized[4] & 0x04)]) + sized[5:6] + (1 << 40).to_bytes(8, "little") + sized[6:]
    with pytest.raises(IntegrityError):
        zstd_decompress("k", claim, 1 << 20, expected=len(raw))
    # above the one-shot size the stream path applies, with the same answers
    monkeypatch.setattr(codec, "ONE_SHOT_MAX", 1000)
    assert zstd_decompress("k", plain, 1 << 20, expected=len(raw)) == raw
    with pytest.raises(IntegrityError, match="more than"):
        zstd_decompress("k", plain, 1 << 20, expected=len(raw) - 1)


def test_manifest_times_parse_as_strptime_did():
    rng = random.Random(4)
    base = datetime(1970, 1, 1, tzinfo=timezone.utc)
    for _ in range(500):
        t = base + timedelta(microseconds=rng.randrange(0, 2**56))
        s = format_time(t)
        assert parse_time(s) == t == datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    for s in ("2026-11-29T21:18:28.58Z", "2026-1-29T21:18:28.581882Z"):  # forms only strptime reads
        assert parse_time(s) == datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    for bad in ("2026-02-30T21:18:28.581882Z", "2026-11-29T25:18:28.581882Z", "2026-11-29 21:18:28.581882Z",
                "+026-11-29T21:18:28.581882Z", "2026-11-29T21:18:28.58188ZZ", "2026-11-29T21:18:28.５81882Z", ""):
        with pytest.raises(ValueError):
            parse_time(bad)
