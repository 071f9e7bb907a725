"""Stores declare what they are (:class:`snapstore.stores.base.StoreCapabilities`); callers read
the declaration through ``store_capabilities(store)``, never the store's class."""

from __future__ import annotations

from snapstore.stores.local import LocalStore
from snapstore.stores.memory import MemoryStore


def test_stores_declare_their_capabilities(tmp_path):
    """Each built-in store says what it is (StoreCapabilities) and has the optional methods it
    declares; a wrapper that declares nothing gets the defaults (nothing optional), and callers
    read the declaration, not the store's class: a wrapper of a local directory keeps full logs."""
    from snapstore.repo.log.stubs import default_compact_log
    from snapstore.stores.base import StoreCapabilities, max_concurrency, store_capabilities
    from snapstore.stores.s3 import S3Store

    from snapstore.stores.sqlite import SqliteStore

    local, memory, sqlite = LocalStore(str(tmp_path / "r")), MemoryStore(), SqliteStore(tmp_path / "r.db")
    s3 = S3Store("some-bucket", region_name="us-east-1", max_pool_connections=7)
    for store in (local, memory, s3, sqlite):
        caps = store_capabilities(store)
        assert caps is store.capabilities and isinstance(caps, StoreCapabilities)
        for flag, method in (("leftovers", "leftovers"), ("leftovers", "remove_leftovers"),
                             ("versioning", "check_versioning"), ("empty_dirs", "remove_empty_dirs"),
                             ("vacuum", "compact")):
            assert getattr(caps, flag) == callable(getattr(store, method, None)), (store, method)
    assert local.capabilities.inline_reads and local.capabilities.compact_log
    assert not memory.capabilities.inline_reads and not memory.capabilities.compact_log
    assert not s3.capabilities.inline_reads and not s3.capabilities.compact_log
    assert sqlite.capabilities.inline_reads and sqlite.capabilities.vacuum and not sqlite.capabilities.compact_log
    assert [max_concurrency(s) for s in (local, memory, s3, sqlite)] == [16, 16, 7, 4]
    assert [default_compact_log(s) for s in (local, memory, s3, sqlite)] == [True, False, False, False]
    sqlite.close()
    s3.close()

    class Wrapper:  # an application's store wrapper: delegates the protocol, declares nothing
        def __init__(self, inner):
            self.inner, self.url, self.stats = inner, inner.url, inner.stats

    assert store_capabilities(Wrapper(local)) == StoreCapabilities()
    assert not default_compact_log(Wrapper(local)) and max_concurrency(Wrapper(local), 64) == 64

    class Declared(Wrapper):  # one that forwards the inner store's declaration
        @property
        def capabilities(self):
            return self.inner.capabilities

    assert default_compact_log(Declared(local)) and max_concurrency(Declared(s3)) == 7
