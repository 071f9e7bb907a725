"""GC of archive bundles (docs/format.md §28, "GC"): a bundle serving no live checkpoint and an
unindexed one go through two-phase deletion (index record first), a partly needed one is kept
whole, a class's minimum duration holds a bundle unless forced (the fee reported), a run deleted
and saved again is never taken for archived; with real kills, a GC beside an archive, on a local
directory, a SQLite file and moto's HTTP server."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError
from snapstore.format.bundle import DATA, INDEX
from snapstore.maintenance.bundlegc import early_deletion_fee
from snapstore.stores.local import LocalStore
from tests.maintenance.test_archive import SYSTEM, fill, packs, snapshot


def keys_under(store, prefix: str) -> list:
    return [i.key for i in store.list(prefix)]


def small_runs(m: CheckpointManager, n: int = 3, prefix: str = "s") -> None:
    for r in range(n):
        msgs = [SYSTEM]
        for i in range(3):
            msgs = msgs + [{"role": "user", "content": f"{prefix} run {r} question {i}"}]
            m.save(f"{prefix}-{r}", msgs, step=i)


@pytest.mark.parametrize("kind", ["local", "sqlite", "s3-http"])
def test_bundle_of_deleted_runs_goes_index_first_then_tombstones(kind, store_factory):
    """Every run a bundle serves deleted: GC (grace 0) deletes its index record and the bundle,
    keeps the runs' tombstones while the index record exists, and a second GC removes them; the
    repository verifies and holds nothing of the runs."""
    store = store_factory(kind)
    m = CheckpointManager(store)
    small_runs(m)
    rep = m.archive(storage_class="STANDARD")
    assert len(rep.bundles) == 1 and keys_under(store, INDEX)
    m.gc(grace_period=0)  # the hot copy goes; the bundle serves every live checkpoint
    assert keys_under(store, DATA) == rep.bundles and packs(store) == []
    for r in range(3):
        m.delete(f"s-{r}")
    g = m.gc(grace_period=0)
    assert g.deleted["bundles"] == 1 and g.deleted["bundle index"] == 1, g.as_dict()
    assert keys_under(store, DATA) == [] and keys_under(store, INDEX) == []
    assert g.deleted_bytes >= rep.bytes_after
    m.gc(grace_period=0)
    f = CheckpointManager(store)
    assert f.runs() == [] and keys_under(store, "runs/") == []
    v = f.verify(read_data=True)
    assert v.ok and not v.errors and not v.warnings, (v.errors, v.warnings)


def test_partly_needed_bundle_is_kept_whole(tmp_path):
    """Runs of a group bundle deleted but one, the long run pruned to its head: GC keeps the
    bundles (reported as partly dead), and what is left reads back exactly."""
    m = CheckpointManager(LocalStore(tmp_path / "r"))
    fill(m)
    m.archive()
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    kept_bundles = keys_under(m.store, DATA)
    m.delete("small-0")
    m.delete("small-1")
    m.prune(keep_last=1, run_id="long")
    before = snapshot(CheckpointManager(LocalStore(tmp_path / "r")))
    g = m.gc(grace_period=0)
    assert g.deleted["bundles"] == 0 and g.partly_dead_bundles == kept_bundles, g.as_dict()
    assert keys_under(m.store, DATA) == kept_bundles
    f = CheckpointManager(LocalStore(tmp_path / "r"))
    assert snapshot(f) == before and f.verify(read_data=True).ok


KILL_ARCHIVE = textwrap.dedent("""
    import os, signal, sys
    from snapstore import CheckpointManager
    from snapstore.stores.local import LocalStore
    m = CheckpointManager(LocalStore(sys.argv[1]))
    m.archive(hooks={"after_bundle_put": lambda **kw: os.kill(os.getpid(), signal.SIGKILL)})
""")


def test_unindexed_bundle_two_phase_after_a_kill(tmp_path):
    """An archive SIGKILLed before its switch leaves an unindexed bundle: GC with a grace period
    leaves it while young, makes it a candidate once older than half the grace period, and deletes
    it only a grace period after that; nothing readable changes."""
    root = tmp_path / "r"
    m = CheckpointManager(LocalStore(root))
    small_runs(m)
    before = snapshot(m)
    p = subprocess.run([sys.executable, "-c", KILL_ARCHIVE, str(root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, (p.returncode, p.stderr)
    left = keys_under(m.store, DATA)
    assert len(left) == 1 and keys_under(m.store, INDEX) == []
    grace = 2.0
    g = m.gc(grace_period=grace)  # younger than grace/2: not even a candidate
    assert g.pending_bundles == 1 and keys_under(m.store, DATA) == left
    time.sleep(grace / 2 + 0.2)
    m.gc(grace_period=grace)  # now a candidate
    g = m.gc(grace_period=grace)  # its candidate record is younger than the grace period
    assert g.pending_bundles == 1 and keys_under(m.store, DATA) == left
    time.sleep(grace + 0.2)
    g = m.gc(grace_period=grace)
    assert g.deleted["bundles"] == 1 and g.deleted["bundle index"] == 0 and keys_under(m.store, DATA) == []
    f = CheckpointManager(LocalStore(root))
    assert snapshot(f) == before
    assert "unindexed-bundle" not in {w.code for w in f.verify().warnings}


def test_gc_beside_an_archive_keeps_the_young_bundle(store_factory):
    """On moto's HTTP server, a GC (default grace period) run at each moment of an archive between
    the bundle's upload and its switch deletes nothing of it; the archive switches and GC then
    reclaims the hot copy; everything reads the same."""
    store = store_factory("s3-http")
    m = CheckpointManager(store, gc_grace_period=30)
    fill(m)
    before = snapshot(m)
    seen = []

    def beside(**kw):
        g = CheckpointManager(store).gc(grace_period=30)
        seen.append((g.pending_bundles, g.deleted["bundles"], keys_under(store, DATA)))
    rep = m.archive(hooks={"after_bundle_put": beside, "after_readback": beside})
    assert [s[:2] for s in seen] == [(1, 0), (1, 0)] and all(s[2] == rep.bundles for s in seen)
    assert keys_under(store, DATA) == rep.bundles
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    assert packs(store) == [] and snapshot(CheckpointManager(store)) == before


def test_archive_past_half_the_grace_period_does_not_switch(tmp_path):
    """An archive whose bundle took longer than half the grace period to write and check deletes
    it and raises ConflictError (a GC beside may already have judged it unindexed); nothing
    changed, and a later archive succeeds."""
    m = CheckpointManager(LocalStore(tmp_path / "r"), gc_grace_period=1.0)
    small_runs(m)
    before = snapshot(m)
    with pytest.raises(ConflictError, match="half the GC grace period"):
        m.archive(hooks={"after_bundle_put": lambda **kw: time.sleep(0.7)})
    assert keys_under(m.store, DATA) == [] and keys_under(m.store, INDEX) == []
    assert snapshot(CheckpointManager(LocalStore(tmp_path / "r"))) == before
    assert len(m.archive().bundles) == 1


KILL_GC = textwrap.dedent("""
    import os, signal, sys
    from snapstore import CheckpointManager
    from snapstore.stores.local import LocalStore
    m = CheckpointManager(LocalStore(sys.argv[1]))
    m.gc(grace_period=0, hooks={"after_bundle_index_deleted": lambda **kw: os.kill(os.getpid(), signal.SIGKILL)})
""")


def test_gc_killed_between_index_and_bundle_deletion(tmp_path):
    """A GC SIGKILLed after deleting a dead bundle's index record and before the bundle: the
    repository verifies (the bundle is an unindexed-bundle warning), the live runs read the same,
    and the next GC deletes the bundle."""
    root = tmp_path / "r"
    m = CheckpointManager(LocalStore(root))
    small_runs(m, prefix="dead")
    m.archive(["dead-0", "dead-1", "dead-2"], storage_class="STANDARD")
    small_runs(m, prefix="live")
    for r in range(3):
        m.delete(f"dead-{r}")
    before = snapshot(m)
    p = subprocess.run([sys.executable, "-c", KILL_GC, str(root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, (p.returncode, p.stderr)
    f = CheckpointManager(LocalStore(root))
    assert keys_under(f.store, INDEX) == [] and len(keys_under(f.store, DATA)) == 1
    v = f.verify(read_data=True)
    assert not v.errors and "unindexed-bundle" in {w.code for w in v.warnings}, (v.errors, v.warnings)
    assert snapshot(f) == before
    g = f.gc(grace_period=0)
    assert g.deleted["bundles"] == 1 and keys_under(f.store, DATA) == []
    assert snapshot(CheckpointManager(LocalStore(root))) == before


def test_minimum_duration_holds_until_forced_and_a_reused_run_id_is_not_archived(store_factory):
    """On moto's HTTP server: a dead DEEP_ARCHIVE bundle is held (its fee reported, the fee S3's
    180-day rule gives) while its index record keeps the deleted run's tombstone, so a run saved
    again under the same id continues after it and is never taken for archived; ``force`` deletes
    it and reports the fee paid."""
    store = store_factory("s3-http")
    m = CheckpointManager(store)
    small_runs(m, n=1)
    m.archive(storage_class="DEEP_ARCHIVE")
    m.gc(grace_period=0)
    (bkey,) = keys_under(store, DATA)
    size = store.head(bkey).size
    m.delete("s-0")
    for _ in range(2):
        g = m.gc(grace_period=0)
        assert g.deleted["bundles"] == 0 and len(g.held_bundles) == 1, g.as_dict()
    h = g.held_bundles[0]
    assert h["key"] == bkey and h["class"] == "DEEP_ARCHIVE" and 179.9 < h["days_left"] <= 180
    assert g.held_fee == pytest.approx(early_deletion_fee("DEEP_ARCHIVE", size, 0.0), rel=1e-3)
    assert g.held_fee == pytest.approx((size + 32 * 1024) / 2 ** 30 * 0.00099 * 6, rel=1e-3)
    again = [SYSTEM, {"role": "user", "content": "a new run under an old id"}]
    CheckpointManager(store).save("s-0", again, step=0)  # a new manager: it knows nothing of the run
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    assert CheckpointManager(store).latest("s-0").messages == again  # its hot pack was kept
    g = m.gc(grace_period=0, force=True)
    assert g.deleted["bundles"] == 1 and g.early_deletion_fee == pytest.approx(h["fee_usd"], rel=1e-3)
    assert keys_under(store, DATA) == [] and keys_under(store, INDEX) == []
    f = CheckpointManager(store)
    assert f.latest("s-0").messages == again and f.verify(read_data=True).ok
