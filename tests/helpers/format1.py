"""Format-1 writes for the tests of the machinery format-1 repositories still depend on."""


def use_format1_writes(monkeypatch) -> None:
    """Repositories created from here on have segments off (``seg_fanout=0``): every save's pack
    stays where its hints name it and GC repacks the per-save packs, as in a format-1 repository.
    For the tests of that machinery (forwarding map, repacking), which format-1 repositories still
    depend on; format 2's own paths are tested without it."""
    from snapstore.repo.repository import Repository
    orig = Repository.init.__func__

    def init(cls, store, exist_ok=False, **settings):
        settings.setdefault("seg_fanout", 0)
        return orig(cls, store, exist_ok, **settings)
    monkeypatch.setattr(Repository, "init", classmethod(init))
