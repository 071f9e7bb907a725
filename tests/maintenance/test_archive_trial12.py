"""Archive as the README tells it (trial 12): after ``archive`` and a ``gc()`` within the grace
period a checkpoint's data is still read from the hot packs (the README's comment said "from the
bundle"); once a gc after it deleted them, from the bundle. A run at or above the grouping
threshold gets a bundle of its own, smaller runs share one (the threshold lowered through
``bundle_min`` to keep the test fast)."""

from __future__ import annotations

import os

import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.maintenance.archive import BUNDLE_MIN
from snapstore.stores.local import LocalStore


class _Reads(LocalStore):
    """A local store recording every successful GET's key."""

    def __init__(self, root):
        super().__init__(root)
        self.read: list[str] = []

    def get(self, key, byte_range=None):
        data = super().get(key, byte_range)
        self.read.append(key)
        return data


def _data_reads(root) -> tuple[set, set]:
    """A fresh manager's ``latest("run-1")``: the (hot pack keys, bundle keys) it read."""
    store = _Reads(root)
    CheckpointManager(store).latest("run-1")
    return ({k for k in store.read if k.startswith("packs/")},
            {k for k in store.read if k.startswith("archive/data/")})


def test_readme_example_reads_hot_packs_until_gc_after_the_grace_period_deletes_them(tmp_path):
    root = str(tmp_path / "r")
    mgr = CheckpointManager(root)
    for i in range(5):
        mgr.save("run-1", [{"role": "user", "content": f"turn {j} " * 50} for j in range(i + 1)])
    want = mgr.latest("run-1").messages
    rep = mgr.archive(["run-1"], storage_class="GLACIER_IR")
    mgr.gc()
    packs, bundles = _data_reads(root)
    assert packs and bundles == set(rep.bundles)  # the data from the hot packs; the bundle's suffix too
    mgr.gc(grace_period=0)
    assert not any(files for _, _, files in os.walk(os.path.join(root, "packs")))
    packs, bundles = _data_reads(root)
    assert packs == set() and bundles == set(rep.bundles)
    assert CheckpointManager(root).latest("run-1").messages == want


def test_a_run_at_the_threshold_gets_its_own_bundle(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    big = [{"role": "tool", "content": os.urandom(6000).hex()} for _ in range(4)]  # ~48 KB raw
    for i in range(1, 5):
        mgr.save("large", big[:i])
    for i in range(3):
        mgr.save(f"small-{i}", [{"role": "user", "content": f"small {i}"}])
    dry = mgr.archive(dry_run=True, bundle_min=32 << 10)
    assert [b["runs"] for b in dry.bundles] == [["large"], ["small-0", "small-1", "small-2"]]
    assert dry.bundles[0]["raw_bytes"] >= 32 << 10 > dry.bundles[1]["raw_bytes"]
    rep = mgr.archive(bundle_min=32 << 10)
    served = [{r for r, _ in ((v["run"], 0) for v in ix.runs.values())}
              for ix in mgr.repo.bundles.load().values()]
    assert len(rep.bundles) == 2 and sorted(map(sorted, served)) == [["large"], ["small-0", "small-1", "small-2"]]


def test_below_the_default_threshold_runs_share_a_bundle_and_a_bad_threshold_is_refused(tmp_path):
    assert BUNDLE_MIN == 16 << 20  # the README states it
    mgr = CheckpointManager(str(tmp_path / "r"))
    for r in ("a", "b"):
        mgr.save(r, [{"role": "user", "content": os.urandom(3000).hex()}])
    assert [b["runs"] for b in mgr.archive(dry_run=True).bundles] == [["a", "b"]]
    assert [b["runs"] for b in mgr.archive(dry_run=True, bundle_min=1000).bundles] == [["a"], ["b"]]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidInputError, match="bundle_min"):
            mgr.archive(dry_run=True, bundle_min=bad)
