"""Crafted (hostile or damaged) repositories: every crafted object gives a typed error, in bounded memory.

A small real repository (one run of 18 saves: tier packs, a log segment, an index record, a
large session state) is copied per case and one object in it is replaced by a crafted one: zstd
bombs whose frame header claims 1 TiB, bombs that really inflate to 1 GiB, truncated or random
bytes, wrong magic, JSON of the wrong shape or nested 100,000 levels deep, non-hex pack hints,
out-of-range config values, symbolic links out of the root. For each, ``tests/helpers/crafted_driver.py``
runs the library (open, latest, list, get, verify) and the CLI (export, list, verify --read-data,
gc) in a subprocess whose address space is limited to 512 MiB (``RLIMIT_AS``). Every outcome must
be success or a ``snapstore.errors`` class (CLI: a one-line error and exit code 1-3), never a
traceback or MemoryError, and at least one operation must name the crafted object.
A few cases also run the real ``python -m snapstore`` entry point under the same limit.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import blake3
import pytest
import zstandard

from snapstore import CheckpointManager
from snapstore.format.codec import open_envelope, seal_envelope
from snapstore.format.logseg import LOG_MAGIC, LOG_VERSION
from snapstore.format.manifest import MANIFEST_DICT_V1, MANIFEST_DICT_V2, MANIFEST_MAGIC, open_manifest
from snapstore.format.config import CONFIG_MAGIC
from snapstore.format.forward import FWD_CACHE_MAGIC, FWD_MAP_MAGIC
from snapstore.format.index import INDEX_MAGIC
from snapstore.format.pack import Pack
from snapstore.format.codec import put_varint
from tests.helpers import paths

LIMIT = 512 << 20
ROOT = paths.ROOT
DRIVER = paths.HELPERS / "crafted_driver.py"
RUN_KEY = "boi"  # name_key("r")


# ------------------------------------------------------------------------------------------------
# bytes of crafted objects

def envelope(magic: bytes, stored: bytes, flag: int, version: int = 2) -> bytes:
    """An envelope with a correct checksum around ``stored`` (compression ``flag``)."""
    digest = blake3.blake3(magic + bytes([version, flag]) + stored).digest(16)
    return struct.pack("<4sBB16s", magic, version, flag, digest) + stored


def frame_claiming(size: int, content: bytes = b"{}") -> bytes:
    """A zstd frame of ``content`` whose header claims ``size`` bytes of content."""
    f = zstandard.ZstdCompressor(write_content_size=False, write_checksum=False).compress(content)
    assert f[4] & 0x23 == 0  # no single-segment flag, no dictionary id, no content size
    out = f[:4] + bytes([0xC0 | (f[4] & 0x04)]) + f[5:6] + size.to_bytes(8, "little") + f[6:]
    assert zstandard.frame_content_size(out) == size
    return out


@lru_cache(maxsize=None)
def frame_inflating(size: int) -> bytes:
    """A small zstd frame that really decompresses to ``size`` zero bytes (no size in its header)."""
    cobj = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    zero = bytes(1 << 20)
    parts = [cobj.compress(zero) for _ in range(size >> 20)]
    parts.append(cobj.flush())
    return b"".join(parts)


def deep_json(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def reseal_manifest(data: bytes, change) -> bytes:
    """Decode a manifest's JSON, let ``change(d)`` edit it, seal it again (valid checksum)."""
    version, body = open_manifest("m", data)
    d = json.loads(body)
    change(d)
    if version >= 4:  # the envelope stored, the body ``codec 0 | JSON`` (docs/format.md §11)
        return envelope(MANIFEST_MAGIC, b"\0" + json.dumps(d).encode(), 0, version)
    return seal_envelope(MANIFEST_MAGIC, 2, json.dumps(d).encode(), MANIFEST_DICT_V1)


def reseal_config(data: bytes, change) -> bytes:
    _, body = open_envelope("config", CONFIG_MAGIC, data)
    d = json.loads(body)
    change(d)
    return seal_envelope(CONFIG_MAGIC, 2, json.dumps(d).encode())


def rebuild_pack(data: bytes, block1: bytes | None = None, rawlen1: int | None = None,
                 nentries: int | None = None) -> bytes:
    """Re-serialise a pack (dictionary-free blocks only) with its chunk data block's compressed
    bytes (``block1``: block 1 in packs that put metadata first, block 0 in those that put it last)
    and/or recorded raw length replaced, or an entry count claimed; the checksum is recomputed."""
    p = Pack.parse("p", data)
    assert all(b.dict is None for b in p.blocks)
    out = bytearray(data[:13])
    comps = [data[b.offset:b.offset + b.clen] for b in p.blocks]
    db = min(e.block for e in p.entries.values() if e.type == b"c"[0])  # the (first) data block
    if block1 is not None:
        comps[db] = block1
    header = bytearray()
    put_varint(header, len(p.blocks))
    for i, b in enumerate(p.blocks):
        stored = b.stored and not (i == db and block1 is not None)
        header.append(3 if stored else 0)
        put_varint(header, len(comps[i]))
        put_varint(header, rawlen1 if (i == db and rawlen1 is not None) else b.rawlen)
        out += comps[i]
    entries = sorted(p.entries.values(), key=lambda e: (e.block, e.offset))
    put_varint(header, nentries if nentries is not None else len(entries))
    for e in entries:
        header.append(e.type)
        header += e.id
        put_varint(header, e.block)
        put_varint(header, e.length)
    out += header + struct.pack("<I", len(header))
    out += blake3.blake3(bytes(out)).digest(16)
    return bytes(out)


# ------------------------------------------------------------------------------------------------
# the base repository

@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("crafted") / "base"
    mgr = CheckpointManager(str(root))
    msgs = []
    for i in range(18):
        msgs = msgs + [{"role": "user", "content": f"message {i} " * 30}]
        mgr.save("r", msgs, step=i, metadata={"i": i}, checkpoint_id="custom" if i == 3 else None,
                 session_state={"blob": "s" * 6000, "i": i} if i % 6 == 0 else {"i": i})
    mgr.close()
    return root


def _files(root: Path, sub: str) -> list[Path]:
    return sorted(p for p in (root / sub).rglob("*") if p.is_file())


def _head(root: Path) -> Path:
    return _files(root, f"runs/{RUN_KEY}/m")[0]


def _oldest(root: Path) -> Path:
    return _files(root, f"runs/{RUN_KEY}/m")[-1]


def _biggest_pack(root: Path) -> Path:
    """The largest pack without dictionary blocks (a tier pack)."""
    packs = sorted(_files(root, "packs"), key=lambda p: -p.stat().st_size)
    for p in packs:
        if all(b.dict is None for b in Pack.parse("p", p.read_bytes()).blocks):
            return p
    raise AssertionError("no tier pack")


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix()


def _put(root: Path, p: Path, data: bytes) -> str:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return _rel(root, p)


# Each crafter edits the copy at ``root`` and returns the text the operations must name.

def manifest_claims_1tib(root, outside):
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, frame_claiming(1 << 40), 1))


def manifest_inflates_1gib(root, outside):
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, frame_inflating(1 << 30), 1))


def manifest_dict_claims_1tib(root, outside):
    zd = zstandard.ZstdCompressionDict(MANIFEST_DICT_V1, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    f = zstandard.ZstdCompressor(dict_data=zd, write_dict_id=False, write_content_size=False).compress(b"{}")
    f = f[:4] + bytes([0xC0 | (f[4] & 0x04)]) + f[5:6] + (1 << 40).to_bytes(8, "little") + f[6:]
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, f, 2))


def manifest_v4_codec1_inflates_1gib(root, outside):
    """Version 4: the envelope is stored, its body ``codec | data`` (docs/format.md §11)."""
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, b"\1" + frame_inflating(1 << 30), 0, 4))


def manifest_v4_dict2_claims_1tib(root, outside):
    zd = zstandard.ZstdCompressionDict(MANIFEST_DICT_V2, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    f = zstandard.ZstdCompressor(dict_data=zd, write_dict_id=False, write_content_size=False).compress(b"{}")
    f = f[:4] + bytes([0xC0 | (f[4] & 0x04)]) + f[5:6] + (1 << 40).to_bytes(8, "little") + f[6:]
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, b"\3" + f, 0, 4))


def manifest_v4_unknown_codec(root, outside):
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, b"\x09{}", 0, 4))


def manifest_v4_raw_huge(root, outside):
    body = b'\0{"kind":"checkpoint","pad":"' + b"x" * (20 << 20) + b'"}'
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, body, 0, 4))


def manifest_v4_rd_of_another_run(root, outside):
    from snapstore.format.ids import run_digest
    p = _head(root)
    v, body = open_manifest("m", p.read_bytes())
    d = json.loads(body)
    d["rd"] = run_digest("another run")
    return _put(root, p, envelope(MANIFEST_MAGIC, b"\0" + json.dumps(d).encode(), 0, 4))


def manifest_uncompressed_huge(root, outside):
    body = b'{"kind":"checkpoint","pad":"' + b"x" * (20 << 20) + b'"}'
    return _put(root, _head(root), envelope(MANIFEST_MAGIC, body, 0))


def manifest_truncated(root, outside):
    p = _head(root)
    return _put(root, p, p.read_bytes()[:30])


def manifest_random(root, outside):
    p = _head(root)
    return _put(root, p, os.urandom(p.stat().st_size))


def manifest_wrong_magic(root, outside):
    p = _head(root)
    return _put(root, p, b"SNPK" + p.read_bytes()[4:])


def manifest_json_list(root, outside):
    return _put(root, _head(root), seal_envelope(MANIFEST_MAGIC, 2, b"[1,2,3]", MANIFEST_DICT_V1))


def manifest_deep_json(root, outside):
    return _put(root, _head(root), seal_envelope(MANIFEST_MAGIC, 2, deep_json(100_000), MANIFEST_DICT_V1))


def manifest_deep_metadata(root, outside):
    p = _head(root)
    data = reseal_manifest(p.read_bytes(), lambda d: d.update(metadata="@"))
    _, body = open_envelope("m", MANIFEST_MAGIC, data, MANIFEST_DICT_V1)
    body = body.replace(b'"@"', deep_json(50_000)[:-1] + b"1" + b"]" * 50_000)
    return _put(root, p, seal_envelope(MANIFEST_MAGIC, 2, body, MANIFEST_DICT_V1))


def manifest_state_not_hex(root, outside):
    p = _head(root)
    return _put(root, p, reseal_manifest(p.read_bytes(), lambda d: d["messages"].update(state=["zz" * 16, "!" * 16])))


def manifest_state_wrong_type(root, outside):
    p = _head(root)
    return _put(root, p, reseal_manifest(p.read_bytes(), lambda d: d["messages"].update(state={"a": 1}, count="7")))


def manifest_segs_not_hex(root, outside):
    p = _head(root)
    return _put(root, p, reseal_manifest(p.read_bytes(), lambda d: d.update(segs="xyz-not-hex-at-all0")))


def manifest_state_ref_not_hex(root, outside):
    p = _oldest(root)  # the first save has the large session state
    data = reseal_manifest(p.read_bytes(), lambda d: d.update(session_state_ref=["nothex", "00", -1, 9]))
    return _put(root, p, data)


def manifest_big_seq(root, outside):
    p = _head(root)
    return _put(root, p, reseal_manifest(p.read_bytes(), lambda d: d.update(seq=10 ** 40)))


def pack_claims_1tib(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, rebuild_pack(p.read_bytes(), rawlen1=1 << 40))


def pack_block_inflates_1gib(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, rebuild_pack(p.read_bytes(), block1=frame_inflating(1 << 30)))


def pack_frame_claims_1tib(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, rebuild_pack(p.read_bytes(), block1=frame_claiming(1 << 40)))


def pack_claims_many_entries(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, rebuild_pack(p.read_bytes(), nentries=10 ** 12))


def pack_truncated(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, p.read_bytes()[: p.stat().st_size // 2])


def pack_random(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, os.urandom(p.stat().st_size))


def pack_wrong_magic(root, outside):
    p = _biggest_pack(root)
    return _put(root, p, b"SNMF" + p.read_bytes()[4:])


def _config(root, change):
    p = root / "config"
    p.write_bytes(reseal_config(p.read_bytes(), change))
    return "config"


def config_level_99(root, outside):
    return _config(root, lambda d: d.update(level=99))


def config_max_items_0(root, outside):
    return _config(root, lambda d: d.update(max_items=0))


def config_leaf_bits_0(root, outside):
    return _config(root, lambda d: d.update(leaf_bits=0))


def config_key_4_bytes(root, outside):
    return _config(root, lambda d: d.update(key="deadbeef"))


def config_cdc_sizes_0(root, outside):
    return _config(root, lambda d: d.update(cdc_min=0, cdc_avg=0, cdc_max=0, cdc_threshold=0))


def config_setting_not_int(root, outside):
    return _config(root, lambda d: d.update(seg_fanout="4", dict_bytes=1.5))


def config_claims_1tib(root, outside):
    (root / "config").write_bytes(envelope(CONFIG_MAGIC, frame_claiming(1 << 40), 1))
    return "config"


def config_deep_json(root, outside):
    (root / "config").write_bytes(seal_envelope(CONFIG_MAGIC, 2, deep_json(100_000)))
    return "config"


def index_not_int(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/c")[0]
    return _put(root, p, envelope(INDEX_MAGIC, b'{"seq": "x", "write_id": 5}', 0))


def index_claims_1tib(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/c")[0]
    return _put(root, p, envelope(INDEX_MAGIC, frame_claiming(1 << 40), 1))


# A log segment is a copy: a corrupt one is a verify warning, and listing reads the manifests.

def _logseg(frame: bytes) -> bytes:
    return struct.pack("<4sB16s", LOG_MAGIC, LOG_VERSION, blake3.blake3(frame).digest(16)) + frame


def logseg_claims_1tib(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/l")[0]
    return "warn", _put(root, p, _logseg(frame_claiming(1 << 40)))


def logseg_inflates_1gib(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/l")[0]
    return "warn", _put(root, p, _logseg(frame_inflating(1 << 30)))


def logseg_claims_many_records(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/l")[0]
    body = bytearray()
    put_varint(body, 10 ** 15)
    return "warn", _put(root, p, _logseg(zstandard.ZstdCompressor().compress(bytes(body))))


def _missing_pack(root) -> str:
    """Delete the largest tier pack; return its hex id (readers now read its forwarding shard)."""
    p = _biggest_pack(root)
    p.unlink()
    return p.name


def fwd_shard_not_hex(root, outside):
    pid = _missing_pack(root)
    body = json.dumps({pid: [1, ["not-a-pack-id", 7]]}).encode()
    return _put(root, root / "fwd" / pid[0], envelope(FWD_MAP_MAGIC, body, 0))


def fwd_shard_inflates_1gib(root, outside):
    pid = _missing_pack(root)
    return _put(root, root / "fwd" / pid[0], envelope(FWD_MAP_MAGIC, frame_inflating(1 << 30), 0))


def fwd_shard_wrong_shape(root, outside):
    pid = _missing_pack(root)
    return _put(root, root / "fwd" / pid[0], envelope(FWD_MAP_MAGIC, b'{"a": {"b": null}}', 0))


def fwd_cache_claims_1tib(root, outside):
    pid = _missing_pack(root)  # the cache is advisory: ignored, the missing pack is reported
    _put(root, root / "gc" / "fwd-cache", envelope(FWD_CACHE_MAGIC, frame_claiming(1 << 40), 0))
    return f"packs/{pid[:2]}/{pid}"


def gc_candidates_not_hex(root, outside):
    body = b'{"packs": ["../../etc", 5], "fwd": {}}'
    _put(root, root / "gc" / "candidates" / "0000000000001-aaaaaaaa", envelope(b"SNGC", body, 0))
    return None  # GC ignores a record it cannot read; nothing else reads it


def gc_lock_garbage(root, outside):
    _put(root, root / "gc" / "lock", deep_json(100_000))
    return None


def symlink_head_manifest(root, outside):
    p = _head(root)
    shutil.copy(p, outside / "manifest")
    p.unlink()
    p.symlink_to(outside / "manifest")
    return _rel(root, p)


def symlink_pack_dir(root, outside):
    p = _biggest_pack(root)
    d = p.parent
    shutil.copytree(d, outside / "packdir")
    shutil.rmtree(d)
    d.symlink_to(outside / "packdir", target_is_directory=True)
    return _rel(root, p)


def symlink_config(root, outside):
    shutil.copy(root / "config", outside / "config")
    (root / "config").unlink()
    (root / "config").symlink_to(outside / "config")
    return "config"


def symlink_run_dir(root, outside):
    d = root / "runs" / RUN_KEY
    shutil.copytree(d, outside / "run")
    shutil.rmtree(d)
    d.symlink_to(outside / "run", target_is_directory=True)
    return None  # a linked run directory is not followed: the run is not there (export: run not found)


def stray_absurd_positions(root, outside):
    """3,000 manifest names whose positions decode near 2^64 (issue 20: ``list`` died with
    MemoryError building a range over the gap; ``gc`` and ``stats`` aborted)."""
    d = root / "runs" / RUN_KEY / "m"
    for i in range(1, 3001):
        _put(root, d / f"{i:016x}", b"x" * 40)
    return f"runs/{RUN_KEY}/m/{1:016x}"


def stray_manifest_names(root, outside):
    _put(root, root / "runs" / RUN_KEY / "m" / "not-a-position", b"x")
    _put(root, root / "packs" / "zz" / "not-a-pack", b"x")
    _put(root, root / "runs" / RUN_KEY / "l" / "garbage.1", b"x")
    return f"runs/{RUN_KEY}/m/not-a-position"


# Odd files (issue 20): sparse files far larger than their kind may be, FIFOs at keys. A whole
# read must be refused from the file's size before a byte is read, and nothing may open a FIFO
# (the open alone blocks until a writer comes); each case must finish within SLOW seconds.

def _sparse(p: Path, size: int) -> None:
    with open(p, "r+b") as f:
        f.truncate(size)  # a hole: no disk space, but a read of it would allocate ``size`` bytes


def sparse_manifest_2gib(root, outside):
    p = _head(root)
    _sparse(p, 2 << 30)
    return _rel(root, p)


def sparse_config_2gib(root, outside):
    _sparse(root / "config", 2 << 30)
    return "config"


def sparse_pack_100gib(root, outside):
    """Verify and GC read packs whole: a 100 GiB one is read in ranges and found corrupt (its
    tail is zeros: no header)."""
    p = _biggest_pack(root)
    _sparse(p, 100 << 30)
    return _rel(root, p)


def sparse_logseg_2gib(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/l")[0]
    _sparse(p, 2 << 30)
    return "warn", _rel(root, p)


def _fifo(p: Path) -> str:
    p.unlink()
    os.mkfifo(p)
    return str(p)


def fifo_config(root, outside):
    _fifo(root / "config")
    return "config"


def fifo_head_manifest(root, outside):
    p = _head(root)
    _fifo(p)
    return _rel(root, p)


def fifo_pack(root, outside):
    p = _biggest_pack(root)
    _fifo(p)
    return _rel(root, p)


def fifo_index_record(root, outside):
    p = _files(root, f"runs/{RUN_KEY}/c")[0]
    _fifo(p)
    return _rel(root, p)


ODD_FILES = ("sparse", "fifo")
SLOW = 10.0
"""Seconds one crafted case of odd files may take in the driver (library and CLI operations)."""


CASES = [f for name, f in sorted(globals().items()) if callable(f) and name.split("_")[0] in (
    "manifest", "pack", "config", "index", "logseg", "fwd", "gc", "symlink", "stray", *ODD_FILES)
    and f.__module__ == __name__
    and not name.startswith("_")]


def _drive(*repos: Path) -> dict:
    """Run the driver on ``repos`` in one subprocess limited to LIMIT bytes of address space."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MALLOC_ARENA_MAX="2")
    r = subprocess.run([sys.executable, str(DRIVER), str(LIMIT), *map(str, repos)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"driver failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def outcomes(base, tmp_path_factory) -> dict:
    """Every case crafted and driven (four subprocesses, each a share of the cases);
    ``name -> (named text, result)``."""
    work = tmp_path_factory.mktemp("cases")
    jobs = {}
    for f in CASES:
        root = work / f.__name__ / "repo"
        outside = work / f.__name__ / "outside"
        outside.mkdir(parents=True)
        shutil.copytree(base, root, symlinks=True)
        jobs[f.__name__] = (f(root, outside), root)
    names = list(jobs)
    shares = [names[i::4] for i in range(4)]  # four driver processes, two at a time
    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(lambda share: _drive(*(jobs[n][1] for n in share)), shares))
    results = {k: v for part in parts for k, v in part.items()}
    return {name: (jobs[name][0], results[str(jobs[name][1])]) for name in names}


def test_the_base_repository_is_healthy(base):
    res = _drive(base)[str(base)]
    assert all(v[0] == "ok" for v in res["lib"].values()), res["lib"]
    assert all(v[0] == 0 for v in res["cli"].values()), res["cli"]


@pytest.mark.parametrize("case", [f.__name__ for f in CASES])
def test_crafted_object_gives_typed_errors(outcomes, case):
    named, res = outcomes[case]
    for op, (outcome, text) in res["lib"].items():
        assert outcome != "CRASH", f"{case}: library {op} crashed:\n{text}"
        assert "MemoryError" not in text and "RecursionError" not in text, f"{case}: {op}: {text}"
    for cmd, (code, text) in res["cli"].items():
        assert code in (0, 1, 2, 3), f"{case}: CLI {cmd} exit {code}:\n{text}"
        assert "Traceback" not in text and "MemoryError" not in text, f"{case}: CLI {cmd}:\n{text}"
        if code:
            assert "snapstore: error:" in text or "error:" in text, f"{case}: CLI {cmd} failed silently:\n{text}"
    if case.split("_")[0] in ODD_FILES:
        assert res["seconds"] < SLOW, f"{case}: took {res['seconds']:.1f} s"
    if named is None:
        return
    if isinstance(named, tuple):  # a copy: reported by verify as a warning, everything else works
        assert all(outcome == "ok" for op, (outcome, _) in res["lib"].items()), res["lib"]
        assert named[1] in res["lib"]["verify_warnings"][1], res["lib"]["verify_warnings"]
        return
    failures = {op: text for op, (outcome, text) in res["lib"].items() if outcome != "ok"}
    assert failures, f"{case}: every library operation succeeded on a crafted {named}"
    assert any(named in text for text in failures.values()), \
        f"{case}: no error names {named}: {json.dumps(failures, indent=1)[:3000]}"
    cli_failures = {cmd: text for cmd, (code, text) in res["cli"].items() if code}
    assert cli_failures, f"{case}: every CLI command succeeded on a crafted {named}"
    assert any(named in text for text in cli_failures.values()), \
        f"{case}: no CLI error names {named}: {json.dumps(cli_failures, indent=1)[:3000]}"


HEADLINE = ["manifest_claims_1tib", "manifest_inflates_1gib", "pack_frame_claims_1tib", "config_level_99",
            "symlink_head_manifest", "manifest_deep_json"]


@pytest.mark.parametrize("case", HEADLINE)
def test_python_m_snapstore_under_the_memory_limit(base, tmp_path, case):
    """The real entry point (``python -m snapstore export``) under RLIMIT_AS: one error line, exit 1."""
    root, outside = tmp_path / "repo", tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(base, root, symlinks=True)
    named = globals()[case](root, outside)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    env = dict(os.environ, PYTHONPATH=str(ROOT), MALLOC_ARENA_MAX="2")
    r = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(root), "export", "r"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.startswith("snapstore: error:") and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    if not case.startswith("pack"):  # a corrupt tier pack: the reader falls back to hints, which may name another pack
        assert named in r.stderr
    assert r.stdout == ""
