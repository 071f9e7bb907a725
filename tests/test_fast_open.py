"""The fast paths of opening a repository and reading a run's newest record in a fresh process
keep every check they replace (docs/format.md §2, §2a, §3).

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
