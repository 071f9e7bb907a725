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


def test_new_repositories_bound_segment_lists_on_s3_only(s3_inprocess_store, tmp_path):
    """A store that declares ``bounded_segs`` (S3) gets seg_limit 46 and seg_from 4 in repositories
    created on it (docs/format.md §10, *Bounded after a level*) unless init is given a segment
    setting; a directory, memory and a wrapper that declares nothing keep the counter."""
    from snapstore.format.config import NEW_REMOTE_SEG_FROM, NEW_REMOTE_SEG_LIMIT
    from snapstore.repo.repository import Repository
    from snapstore.stores.base import store_capabilities

    assert store_capabilities(s3_inprocess_store).bounded_segs
    cfg = Repository.open(s3_inprocess_store).config
    assert (cfg.seg_fanout, cfg.seg_limit, cfg.seg_from) == (4, NEW_REMOTE_SEG_LIMIT, NEW_REMOTE_SEG_FROM) == (4, 46, 4)
    for store in (LocalStore(str(tmp_path / "d")), MemoryStore()):
        assert not store_capabilities(store).bounded_segs
        cfg = Repository.init(store).config
        assert (cfg.seg_limit, cfg.seg_from) == (0, 0)

    class Declared:
        capabilities = store_capabilities(s3_inprocess_store)

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

    for settings, want in (({"seg_fanout": 16}, (16, 0, 0)), ({"seg_limit": 20}, (4, 20, 0)),
                           ({"seg_limit": 13, "seg_from": 4}, (4, 13, 4))):
        cfg = Repository.init(Declared(MemoryStore()), **settings).config
        assert (cfg.seg_fanout, cfg.seg_limit, cfg.seg_from) == want, settings
