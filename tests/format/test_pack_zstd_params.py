"""PackBuilder's ``zstd_params`` (bundle blocks with long-range matching, docs/format.md §28): a
pack built with them reads back exactly through the ordinary reader, and a window larger than
readers accept is refused before anything is built; an archive with them round-trips."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.format.pack import T_CHUNK, T_NODE, Pack, PackBuilder
from snapstore.maintenance import archive as archive_mod
from snapstore.stores.local import LocalStore
from tests.maintenance.test_archive import fill, snapshot


def test_ldm_pack_reads_back_and_window_is_bounded():
    pid = os.urandom(8)
    b = PackBuilder(pid, level=19, zstd_params={"enable_ldm": 1, "window_log": 27})
    entries = {(T_CHUNK, os.urandom(16)): (b"agent turn %d " % i) * 500 + os.urandom(64) for i in range(40)}
    entries[(T_NODE, b"\xee" * 16)] = b"node bytes"
    for (t, e), raw in entries.items():
        b.add(t, e, raw)
    data, _ = b.build()
    p = Pack.parse("packs/" + pid.hex()[:2] + "/" + pid.hex(), data, pid)
    assert all(p.entry_bytes(p.entries[k]) == raw for k, raw in entries.items())
    with pytest.raises(InvalidInputError, match="window_log 28"):
        PackBuilder(pid, zstd_params={"window_log": 28})


def test_archive_with_ldm_round_trips(tmp_path, monkeypatch):
    monkeypatch.setattr(archive_mod, "BUNDLE_ZSTD_PARAMS", {"enable_ldm": 1, "window_log": 24})
    m = CheckpointManager(LocalStore(tmp_path / "r"))
    fill(m)
    before = snapshot(m)
    m.archive()
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    f = CheckpointManager(LocalStore(tmp_path / "r"))
    assert snapshot(f) == before and f.verify(read_data=True).ok


def test_a_frame_with_a_window_beyond_the_readers_limit_is_damage():
    """A block whose frame asks for a 256 MiB window (more than MAX_WINDOW) is an IntegrityError
    before any window is allocated, not a 256 MiB allocation."""
    import io

    import zstandard

    from snapstore.errors import IntegrityError
    from snapstore.format.codec import MAX_WINDOW, zstd_decompress
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=28, write_content_size=0)
    buf = io.BytesIO()
    with zstandard.ZstdCompressor(compression_params=params).stream_writer(buf, closefd=False) as w:
        w.write(b"x" * 1000)
    assert zstandard.get_frame_parameters(buf.getvalue()).window_size > MAX_WINDOW
    with pytest.raises(IntegrityError, match="too much memory"):
        zstd_decompress("archive/data/default/never/0123456789abcdef", buf.getvalue(), 1 << 20, expected=1000)
