"""MemoryStore's test helpers (a clock, raw objects, corruption) and ``open_store``, which picks the
store a location names (the ObjectStore contract itself: tests/stores/test_contract.py)."""

from __future__ import annotations

import pytest

from snapstore.errors import InvalidInputError
from snapstore.stores import LocalStore, MemoryStore, open_store


def test_memory_store_helpers():
    m = MemoryStore(clock=lambda: 1234.5)
    info = m.put("a", b"1")
    assert info.mtime == 1234.5 and m.head("a").mtime == 1234.5
    assert m.raw() == {"a": b"1"}
    m.corrupt("a", b"2")
    assert m.get("a") == b"2"
    assert m.head("a").etag != info.etag


def test_open_store_picks_backends(tmp_path):
    assert isinstance(open_store(str(tmp_path / "x")), LocalStore)
    assert isinstance(open_store(tmp_path / "y"), LocalStore)
    assert isinstance(open_store(f"file://{tmp_path}/z"), LocalStore)
    assert isinstance(open_store("memory://"), MemoryStore)
    m = MemoryStore()
    assert open_store(m) is m
    with pytest.raises(InvalidInputError):
        open_store("ftp://host/x")
