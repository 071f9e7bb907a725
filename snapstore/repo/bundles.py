"""The archive catalogue as readers see it: bundle index records (docs/format.md §28).

Readers meet a bundle only when a hot pack is gone and the forwarding map has no record of it:
:meth:`BundleCatalogue.forward` then names the bundles that replace it, and
:meth:`BundleCatalogue.key` where each bundle is stored, so the pack cache reads it (with byte
ranges) like any pack. The catalogue is loaded with one LIST of ``archive/index/`` and a GET per
record, once, and again on a miss at most every :attr:`BundleCatalogue.RELOAD_AFTER` seconds.
"""

from __future__ import annotations

import threading
import time

from ..errors import ColdObjectError, ObjectNotFound
from ..format.bundle import COLD_CLASSES, INDEX, BundleIndex, decode_index
from ..stores.base import ObjectStore


class BundleCatalogue:
    """Bundle id -> :class:`BundleIndex`, and replaced hot pack id -> bundle ids.

    Args:
        store: the object store.
    """

    RELOAD_AFTER = 30.0
    """Seconds after a load before a miss loads the catalogue again."""

    def __init__(self, store: ObjectStore):
        self.store = store
        self._lock = threading.Lock()
        self._loaded_at: float | None = None
        self.bundles: dict[bytes, BundleIndex] = {}
        self._replaced: dict[bytes, list[bytes]] = {}
        self._readable: set = set()  # cold bundles seen restored

    def load(self) -> dict[bytes, BundleIndex]:
        """List and read every index record now; return bundle id -> index.

        Raises:
            IntegrityError: a record is corrupt. StoreError: the store failed.
        """
        out: dict[bytes, BundleIndex] = {}
        for info in self.store.list(INDEX):
            try:
                ix = decode_index(info.key, self.store.get(info.key))
            except ObjectNotFound:
                continue
            out[ix.bundle] = ix
        self.install(out)
        return out

    def install(self, bundles: dict) -> None:
        """Take ``bundles`` (bundle id -> :class:`BundleIndex`, records a caller such as verify
        listed and decoded itself, skipping corrupt ones) as the loaded catalogue, as :meth:`load`
        would, without reading them again; so reads of those bundles find their keys."""
        replaced: dict[bytes, list[bytes]] = {}
        for bid, ix in sorted(bundles.items()):
            for p in ix.replaces:
                replaced.setdefault(p, []).append(bid)
        with self._lock:
            self.bundles, self._replaced, self._loaded_at = dict(bundles), replaced, time.monotonic()

    def forward(self, pack_id: bytes) -> list[bytes] | None:
        """The bundles replacing hot pack ``pack_id`` (loading the catalogue if needed), or None."""
        with self._lock:
            at = self._loaded_at
            hit = self._replaced.get(pack_id)
        if hit is None and (at is None or time.monotonic() - at > self.RELOAD_AFTER):
            self.load()
            with self._lock:
                hit = self._replaced.get(pack_id)
        return list(hit) if hit else None

    def known(self, pack_id: bytes) -> list[bytes] | None:
        """The bundles replacing ``pack_id`` as far as the catalogue already loaded says (no request)."""
        with self._lock:
            hit = self._replaced.get(pack_id)
        return list(hit) if hit else None

    def key_loaded(self, bundle_id: bytes) -> str | None:
        """The key of bundle ``bundle_id``, loading the catalogue once if it does not know it yet
        (None: no index record names it); no class check (:meth:`key` does that on reading)."""
        with self._lock:
            ix = self.bundles.get(bundle_id)
        if ix is None:
            self.load()
            with self._lock:
                ix = self.bundles.get(bundle_id)
        return None if ix is None else ix.key

    def key(self, pack_id: bytes) -> str | None:
        """The key of bundle ``pack_id`` if it is a known bundle, else None (a hot pack).

        Raises:
            ColdObjectError: the bundle is in a class that needs a restore first and this
                process has not seen it restored (names the ``snapstore restore`` command).
        """
        with self._lock:
            ix = self.bundles.get(pack_id)
        if ix is None:
            return None
        if ix.storage_class in COLD_CLASSES and not self._restored(ix):
            runs = " ".join(sorted(v["run"] for v in ix.runs.values()))
            raise ColdObjectError(ix.key, f"bundle {ix.key} is in {ix.storage_class} and not restored; "
                                          f"run 'snapstore restore {runs}' first")
        return ix.key

    def _restored(self, ix: BundleIndex) -> bool:
        """One HEAD the first time (a restored bundle is remembered; an unrestored one asked again)."""
        if ix.bundle in self._readable:
            return True
        head = getattr(self.store, "restore_state", None)
        if head is None or head(ix.key) in ("restored", "readable"):  # no head: the class is only recorded
            with self._lock:
                self._readable.add(ix.bundle)
            return True
        return False


def served_positions(bundles: dict) -> dict[str, set]:
    """run key -> the log positions the bundles ``bundles`` (bundle id -> :class:`BundleIndex`) serve."""
    out: dict[str, set] = {}
    for ix in bundles.values():
        for rk, v in ix.runs.items():
            out.setdefault(rk, set()).update(v["seqs"])
    return out


def archived_runs(bundles: dict, live: dict) -> set:
    """The run keys of ``live`` (run key -> live checkpoint positions) that are *archived*: they
    have a live checkpoint and bundles serve every one of them (docs/format.md §28). GC marks
    such a run by its bundles (no tree walk, no read of a bundle) and verify checks its bundles."""
    served = served_positions(bundles)
    return {rk for rk, seqs in live.items() if seqs and set(seqs) <= served.get(rk, set())}
