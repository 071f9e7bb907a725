"""The fast paths of opening a repository and reading a run's newest record in a fresh process
keep every check they replace (docs/format.md §2, §3, §4).

* Envelopes (config, manifests) whose zstd frame declares its content size are decompressed in
  one call into a buffer of that size: a declared size past the object's limit is refused before
  anything is allocated, a frame that inflates to another size than it declares is corrupt, and
  frames without a declared size are still streamed up to the limit.
* The manifest dictionaries are prepared once per process; each thread reuses one decompressor
  per dictionary, and decodes exactly what a fresh decompressor did.
* Run-id key segments (base32) are computed without the standard library's table: the same
  segments, and the same answers for every hostile segment.

Real parts: a local store on a temp dir, fresh managers.
"""

from __future__ import annotations

import base64
import os
import random
import threading

import pytest
import zstandard

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import codec, ids
from snapstore.format.codec import open_envelope, prepared_dict, seal_envelope, zstd_decompress
from snapstore.format.manifest import MANIFEST_DICT_V1, MANIFEST_DICT_V2


def _declare(frame_without_size: bytes, size: int) -> bytes:
    """The frame with an 8-byte content-size field claiming ``size`` (its checksum flag kept)."""
    f = frame_without_size
    return f[:4] + bytes([0xC0 | (f[4] & 0x04)]) + f[5:6] + size.to_bytes(8, "little") + f[6:]


# ------------------------------------------------------------------------------------------------
# one-shot decompression of envelopes

def test_a_declared_content_size_is_decompressed_in_one_call_and_checked():
    raw = os.urandom(500) * 8
    sized = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
    plain = zstandard.ZstdCompressor(write_content_size=False).compress(raw)
    assert zstandard.frame_content_size(sized) == len(raw)
    for frame in (sized, plain, _declare(plain, len(raw))):
        assert zstd_decompress("k", frame, 1 << 20) == raw
    # a frame that inflates to more or less than it declares is corrupt, naming the object
    for lie in (len(raw) - 1, len(raw) + 1, 1):
        with pytest.raises(IntegrityError) as exc:
            zstd_decompress("runs/x/m/y", _declare(plain, lie), 1 << 20)
        assert exc.value.key == "runs/x/m/y"
    # a declared size past the limit is refused before anything is allocated, even a true one
    with pytest.raises(IntegrityError, match="more than 3999 bytes"):
        zstd_decompress("k", sized, len(raw) - 1)
    with pytest.raises(IntegrityError, match="declares 1099511627776"):
        zstd_decompress("k", _declare(plain, 1 << 40), 16 << 20)
    # without a declared size the stream path still stops at the limit
    with pytest.raises(IntegrityError, match="more than 3999 bytes"):
        zstd_decompress("k", plain, len(raw) - 1)
    # above the one-shot size a declared frame is streamed, with the same answers
    old = codec.ONE_SHOT_MAX
    try:
        codec.ONE_SHOT_MAX = 100
        assert zstd_decompress("k", sized, 1 << 20) == raw
        with pytest.raises(IntegrityError):
            zstd_decompress("k", _declare(plain, len(raw) + 1), 1 << 20)
    finally:
        codec.ONE_SHOT_MAX = old
    for bad in (b"", b"garbage!", sized[: len(sized) // 2], sized[:6]):
        with pytest.raises(IntegrityError):
            zstd_decompress("k", bad, 1 << 20)


def test_an_empty_declared_frame_and_trailing_bytes_read_as_before():
    empty = zstandard.ZstdCompressor(write_content_size=True).compress(b"")
    assert zstandard.frame_content_size(empty) == 0
    assert zstd_decompress("k", empty, 100) == b""
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"x" * 300)
    assert zstd_decompress("k", frame + b"trailing garbage", 1000) == b"x" * 300
    assert zstd_decompress("k", frame + frame, 1000) == b"x" * 300  # one frame: anything after it is ignored


def test_envelopes_with_prepared_dictionaries_open_as_with_raw_ones():
    body = b'{"kind":"checkpoint","run":"r","seq":3,"write_id":"","created":"2026-01-01T00:00:00.000000Z"}'
    zd = prepared_dict(MANIFEST_DICT_V1)
    for zdict in (MANIFEST_DICT_V1, zd):
        env = seal_envelope(b"SNMF", 2, body, zdict=MANIFEST_DICT_V1)
        assert env[5] == 2  # the dictionary won
        assert open_envelope("k", b"SNMF", env, zdict) == (2, body)
        with pytest.raises(IntegrityError, match="dictionary"):
            open_envelope("k", b"SNMF", env)
    # a frame made with another dictionary does not decode as this one's (corrupt, named)
    other = zstandard.ZstdCompressor(dict_data=prepared_dict(MANIFEST_DICT_V2), write_dict_id=False).compress(body)
    try:
        got = zstd_decompress("k", other, 1 << 20, zd)
    except IntegrityError as e:
        assert e.key == "k"
    else:
        assert got != body


def test_each_thread_reuses_one_decompressor_per_prepared_dictionary():
    zd = prepared_dict(MANIFEST_DICT_V2)
    assert codec._dict_dctx(zd) is codec._dict_dctx(zd)
    assert codec._dict_dctx(MANIFEST_DICT_V2) is not codec._dict_dctx(MANIFEST_DICT_V2)  # raw bytes: new each time
    bodies = [os.urandom(40).hex().encode() + MANIFEST_DICT_V2[i:i + 300] for i in range(0, 1500, 100)]
    frames = [zstandard.ZstdCompressor(level=19, dict_data=zd, write_dict_id=False).compress(b) for b in bodies]
    seen, errors = [], []

    def worker():
        try:
            seen.append(codec._dict_dctx(zd))
            for _ in range(20):
                for b, f in zip(bodies, frames):
                    assert zstd_decompress("k", f, 1 << 20, zd) == b
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(d) for d in seen}) == 4  # one per thread: a context is not shared


def test_a_repository_opens_and_reads_with_its_config_and_manifests_one_shot(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    cid = mgr.save("run", [{"role": "user", "content": "hi"}], step=1, metadata={"n": 2 ** 70})
    mgr.close()
    cp = CheckpointManager(str(tmp_path / "r")).latest("run")
    assert cp.id == cid and cp.metadata == {"n": 2 ** 70} and cp.messages == [{"role": "user", "content": "hi"}]
    # a config whose frame lies about its size is corrupt, naming the config
    cfg = (tmp_path / "r" / "config").read_bytes()
    assert cfg[5] == 1
    frame = cfg[22:]
    n = zstandard.frame_content_size(frame)
    plain = zstandard.ZstdCompressor(write_content_size=False).compress(
        zstandard.ZstdDecompressor().decompress(frame))
    import blake3

    for lie in (n - 1, n + 1):
        stored = _declare(plain, lie)
        data = cfg[:6] + blake3.blake3(cfg[:6] + stored).digest(16) + stored
        (tmp_path / "r" / "config").write_bytes(data)
        with pytest.raises(IntegrityError) as exc:
            CheckpointManager(str(tmp_path / "r")).latest("run")
        assert exc.value.key == "config"


# ------------------------------------------------------------------------------------------------
# run-id key segments

def _stdlib_segment(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def _stdlib_name_from_key(segment: str):
    try:
        name = ids.decode_name_key(segment)
    except (ValueError, UnicodeDecodeError):
        return None
    if not name or "b" + _stdlib_segment(name.encode("utf-8", "surrogatepass")) != segment:
        return None
    return name


def test_base32_segments_are_the_standard_librarys():
    for n in range(0, 70):
        for _ in range(40):
            raw = os.urandom(n)
            assert ids.b32_lower(raw) == _stdlib_segment(raw)
    rng = random.Random(7)
    hasher = ids.Hasher(bytes(range(32)))
    alphabet = "ab/.\u00e9\u4e2d\ud800\U0001f600 -_=\x00"
    for _ in range(3000):
        name = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 70)))
        raw = name.encode("utf-8", "surrogatepass")
        enc = _stdlib_segment(raw)
        inline = len(enc) + 1 <= ids.NAME_INLINE_MAX
        assert ids.name_is_inline(name) == inline
        if name:
            assert ids.name_key(name, hasher) == ("b" + enc if inline else "h" + hasher.name_hash(raw))
        assert ids.name_from_key("b" + enc) == _stdlib_name_from_key("b" + enc)


def test_hostile_key_segments_decode_as_before():
    rng = random.Random(11)
    chars = "abcdefghijklmnopqrstuvwxyz234567ABZ=019-_."
    segs = ["", "b", "h", "B", "ba", "bab", "b======", "bmfrgg===", "bmfrgg", "bmfrggA", "b77777777"]
    segs += [rng.choice("bhx") + "".join(rng.choice(chars) for _ in range(rng.randrange(0, 24))) for _ in range(5000)]
    for _ in range(3000):  # valid segments with one character changed or cut short
        name = "".join(rng.choice("ab\u00e9\ud800\U0001f600") for _ in range(rng.randrange(1, 12)))
        seg = "b" + _stdlib_segment(name.encode("utf-8", "surrogatepass"))
        i = rng.randrange(1, len(seg))
        segs.append(seg[:i] + rng.choice(chars) + seg[i + 1:] if rng.random() < 0.7 else seg[:i])
    for seg in segs:
        assert ids.name_from_key(seg) == _stdlib_name_from_key(seg), seg


# ------------------------------------------------------------------------------------------------
# record JSON through orjson

def _same(a, b) -> bool:
    """Equal JSON values with equal types all the way down (1 is not 1.0), dict order included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def _random_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([0, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63 - 1, 10 ** 30, -10 ** 19,
                           rng.randrange(-10 ** 18, 10 ** 18), 1234567890123456789])
    if kind == 1:
        return rng.choice([0.0, -0.0, 1.5, 1e16, 1e-300, 5e-324, 1.7976931348623157e308, 0.1 + 0.2,
                           rng.random() * 10 ** rng.randrange(-30, 30), float(2 ** 63), 1234567890123456789.0])
    if kind == 2:
        return "".join(rng.choice("ab\"\\/\n\x00\x1f\u00e9\u2028\ud800\udfff\U0001f600 09") for _ in range(rng.randrange(8)))
    if kind == 3:
        return rng.choice([None, True, False])
    if kind in (4, 5):
        return rng.choice(["", "x", "2026-01-01T00:00:00.000000Z", "0123456789" * 3])
    if kind in (6, 7):
        return {"".join(rng.choice("ab\ud800") for _ in range(rng.randrange(3))) + str(i): _random_value(rng, depth + 1)
                for i in range(rng.randrange(4))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_record_json_reads_exactly_as_the_exact_parser():
    rng = random.Random(5)
    docs = [codec.dumps_exact(_random_value(rng)) for _ in range(3000)]
    docs += [b"NaN", b"[Infinity]", b"1e999", b"-0", b"[\"\\ud800\"]", b"{\"a\":1,\"a\":2}", b"\xef\xbb\xbf{}",
             b"[1,]", b"\xff", b"", b" {} ", b"[1.0e+2, 1E-2]", b"18446744073709551616", b"\"\\u0000\"",
             b"[" * 3 + b"]" * 3, b"{\"k\": 9223372036854775807}", b"[12345678901234567890.5]"]
    for d in list(docs[:500]):  # damaged documents: both refuse, or both read the same value
        for _ in range(3):
            i = rng.randrange(len(d) + 1)
            docs.append(d[:i] + bytes([rng.randrange(256)]) + d[i + 1:])
    for d in docs:
        try:
            want = codec.loads_exact(d, 3)
        except (ValueError, UnicodeDecodeError) as e:
            with pytest.raises(type(e) if isinstance(e, UnicodeDecodeError) else ValueError):
                codec.loads_exact_fast(d, 3)
            continue
        assert _same(codec.loads_exact_fast(d, 3), want), d


def test_big_integers_and_surrogates_in_manifest_fields_come_back_exactly(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    meta = {"big": 2 ** 64, "neg": -2 ** 63 - 1, "float": 1e16, "n": 10 ** 40}
    mgr.save("run", [{"m": 1}], step=3, metadata=meta, token_usage={"input_tokens": 2 ** 70})
    mgr.save("run-\ud800", [{"m": 1}], step=4, metadata=dict(meta, s="\ud800x"))
    fresh = CheckpointManager(str(tmp_path / "r"))
    cp = fresh.latest("run")
    assert _same(cp.metadata, meta) and _same(cp.token_usage, {"input_tokens": 2 ** 70}) and cp.step == 3
    assert _same(fresh.latest("run-\ud800").metadata, dict(meta, s="\ud800x"))


# ------------------------------------------------------------------------------------------------
# the local store's LIST with a small limit and its GET

def _walked(store, prefix, limit):
    """What the full walk answers (the general path of LocalStore.list)."""
    return [k for k in sorted(store._walk(prefix))][:limit]


def test_a_small_limit_lists_what_the_full_walk_lists(tmp_path):
    from snapstore.stores.local import LocalStore

    store = LocalStore(tmp_path / "s", fsync=False)
    names = ["ff", "fe", "f", "a0", "b", "b0", "zz", "0", "00"]
    for n in names:
        store.put(f"runs/x/m/{n}", n.encode())
    base = dict(store.stats.counts)
    for limit in (1, 2, 5, 63):
        got = list(store.list("runs/x/m/", limit=limit))
        assert [i.key for i in got] == _walked(store, "runs/x/m/", limit)
        assert all(i.size == len(i.key.rsplit("/", 1)[1]) for i in got)
        assert [i.etag for i in got] == [store.head(i.key).etag for i in got]
    assert store.stats.counts["LIST"] - base["LIST"] == 4  # one LIST each
    # dot files are not keys; a subdirectory among the smallest names makes the walk answer
    (tmp_path / "s" / "runs" / "x" / "m" / ".tmp-123").write_bytes(b"x")
    (tmp_path / "s" / "runs" / "x" / "m" / ".hidden").mkdir()
    assert [i.key for i in store.list("runs/x/m/", limit=1)] == ["runs/x/m/0"]
    os.makedirs(tmp_path / "s" / "runs" / "x" / "m" / "0-dir")
    (tmp_path / "s" / "runs" / "x" / "m" / "0-dir" / "k").write_bytes(b"deep")
    os.makedirs(tmp_path / "s" / "runs" / "x" / "m" / "a")
    (tmp_path / "s" / "runs" / "x" / "m" / "a" / "k").write_bytes(b"deep")
    for limit in (1, 2, 3, 4, 20):
        assert [i.key for i in store.list("runs/x/m/", limit=limit)] == _walked(store, "runs/x/m/", limit)
    assert [i.key for i in store.list("runs/x/m/", limit=4)] == ["runs/x/m/0", "runs/x/m/0-dir/k", "runs/x/m/00",
                                                              "runs/x/m/a/k"]
    # a missing directory, a prefix through a file, a linked directory: nothing listed
    assert list(store.list("runs/nope/m/", limit=1)) == []
    assert list(store.list("runs/x/m/ff/", limit=1)) == []
    os.symlink(tmp_path / "s" / "runs" / "x", tmp_path / "s" / "runs" / "y")
    assert list(store.list("runs/y/m/", limit=1)) == [] and _walked(store, "runs/y/m/", 1) == []
    # a linked file is listed as itself (reading it reports it), as the walk does
    os.symlink(tmp_path / "outside", tmp_path / "s" / "runs" / "x" / "m" / "-link")
    first = list(store.list("runs/x/m/", limit=1))
    assert [i.key for i in first] == ["runs/x/m/-link"] == _walked(store, "runs/x/m/", 1)
    with pytest.raises(IntegrityError, match="symbolic link"):
        store.get(first[0].key)
    # a name that is no key is refused as the walk's listing refuses it
    (tmp_path / "s" / "runs" / "x" / "m" / "+Bad").write_bytes(b"x")
    from snapstore.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        list(store.list("runs/x/m/", limit=1))


def test_an_entry_gone_between_listing_and_stat_falls_back_to_the_walk(tmp_path, monkeypatch):
    from snapstore.stores.local import LocalStore

    store = LocalStore(tmp_path / "s", fsync=False)
    for n in ("a", "b", "c"):
        store.put(f"p/{n}", b"x")
    real_listdir = os.listdir

    def listdir_then_delete(fd):
        names = real_listdir(fd)
        if (tmp_path / "s" / "p" / "a").exists():
            os.unlink(tmp_path / "s" / "p" / "a")  # deleted after the listing, before the stat
        return names
    monkeypatch.setattr(os, "listdir", listdir_then_delete)
    assert [i.key for i in store.list("p/", limit=1)] == ["p/b"]


def test_local_get_reads_whole_files_ranges_and_empty_ones(tmp_path):
    from snapstore.stores.local import LocalStore

    store = LocalStore(tmp_path / "s", fsync=False)
    big = os.urandom(3 << 20)
    store.put("packs/aa/big", big)
    store.put("runs/x/m/empty", b"")
    assert store.get("packs/aa/big") == big
    assert store.get("runs/x/m/empty") == b""
    assert store.get("packs/aa/big", (10, 20)) == big[10:20]
    assert store.get("packs/aa/big", (-5, None)) == big[-5:]
    assert store.stats.bytes_down == len(big) + 15
    from snapstore.errors import ObjectNotFound

    os.makedirs(tmp_path / "s" / "packs" / "aa" / "dir")
    for missing in ("packs/aa/none", "packs/aa/dir", "packs/aa/big/x", "nope/x"):
        with pytest.raises(ObjectNotFound):
            store.get(missing)


def test_local_get_reads_a_file_that_grew_since_its_size_was_taken(tmp_path, monkeypatch):
    from snapstore.stores import local

    store = local.LocalStore(tmp_path / "s", fsync=False)
    store.put("k", b"abc")
    real_fstat = os.fstat

    def stale_fstat(fd):  # the size the read is planned with is short of the file
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, 1,
                               st.st_atime, st.st_mtime, st.st_ctime))
    monkeypatch.setattr(local.os, "fstat", stale_fstat)
    assert store.get("k") == b"abc"
