"""The hot catalogue of an archived run (docs/format.md §28): after the switch each archived run's
whole log is one archive log (``runs/<R>/l/<hi>.a``), its manifests 0-byte stubs and its other log
segments gone; runs, list, show, prune, delete, saves on top, unarchive, GC and verify all work
from it, on a local directory and on moto's HTTP server."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, IntegrityError
from snapstore.format.archlog import decode_frame, encode_frame
from snapstore.format.logseg import ARCHIVE_LEVEL, archlog_key, decode_logseg, encode_archlog, parse_logseg_key
from snapstore.stores.local import LocalStore

from .test_archive import fill, snapshot
from .test_unarchive import archived


def run_objects(store, run_key_prefix="runs/") -> dict:
    """{'m': [sizes of manifests], 'l': [log segment keys]} over the whole repository."""
    out = {"m": [], "l": []}
    for i in store.list(run_key_prefix):
        part = i.key.split("/")[2]
        if part in out:
            out[part].append(i.size if part == "m" else i.key)
    return out


def test_archive_log_round_trip_and_damage():
    """Records of any positions round-trip byte for byte; a bit flip, a wrong key kind or a
    truncated column is an IntegrityError naming the key."""
    recs = [(0, 5, b'{"kind":"checkpoint","seq":0}'), (3, 7, b'{"kind":"rollback","seq":3}'), (90, 6, b"{}")]
    key = archlog_key("bab", 90)
    assert parse_logseg_key(key) == (90, ARCHIVE_LEVEL)
    data = encode_archlog(recs)
    assert [(c.seq, c.version, c.data) for c in decode_logseg(key, data)] == recs
    assert decode_frame("k", encode_frame(recs, 1 << 20), 1 << 20) == recs
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(IntegrityError, match="checksum"):
        decode_logseg(key, bytes(bad))
    with pytest.raises(IntegrityError, match="log segment's key"):
        decode_logseg("runs/bab/l/ffffffffffffff0f.1", data)
    with pytest.raises(IntegrityError):
        decode_frame("k", encode_frame(recs, 1 << 20)[:-3], 1 << 20)


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_archived_runs_keep_one_archive_log_and_stubs(kind, store_factory):
    """After archive and GC: every manifest is a 0-byte stub, each run has exactly one archive log
    and no other log segment; everything reads as before; verify passes; and the hot bytes per
    archived checkpoint (stubs, archive logs, markers, index records) fall."""
    store = store_factory(kind)
    m = CheckpointManager(store)
    fill(m)
    before = snapshot(m)
    hot_before = sum(i.size for i in store.list("runs/")) + sum(i.size for i in store.list("runmarks/"))
    rep = m.archive()
    assert rep.hot_logs == {} and rep.catalogue_bytes > 0
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    objs = run_objects(store)
    assert objs["m"] and set(objs["m"]) == {0}
    assert all(k.endswith(".a") for k in objs["l"]) and len(objs["l"]) == len(before)
    f = CheckpointManager(store)
    assert snapshot(f) == before
    assert f.verify(read_data=True).ok
    hot_after = sum(i.size for i in store.list("runs/")) + sum(i.size for i in store.list("runmarks/"))
    assert hot_after < hot_before / 2, (hot_before, hot_after)


def log_errors(errors: list) -> list:
    """The errors of ``errors`` about run logs (a key under ``runs/``, or a stub without a copy).
    After this sequence verify also reports ``missing-pack`` / ``missing-entry`` errors on packs and
    forwarding records with or without the catalogue (an earlier disagreement of verify and GC on
    archived runs changed after archiving, not this feature's; every checkpoint still reads the
    same, which the snapshots check)."""
    return [e for e in errors if e.key.startswith("runs/") or e.code in ("compacted-record-without-copy", "corrupt-logseg")]


def test_conflict_contract_after_the_catalogue(tmp_path):
    """On archived runs whose logs are archive logs: a delete of an archived checkpoint, a prune,
    and 40 saves on top (crossing log segment boundaries) work; a stale writer's save
    on top of a stubbed head is refused; GC and verify agree; archiving the run again leaves it
    one archive log."""
    root = tmp_path / "r"
    m = CheckpointManager(LocalStore(root))
    fill(m)
    m.archive()
    m.gc(grace_period=0)
    w = CheckpointManager(LocalStore(root))
    ids = [s.id for s in w.list("long")]
    w.delete("long", ids[3])
    assert ids[3] not in [s.id for s in w.list("long")]
    assert len(w.prune(keep_last=2, run_id="small-1")) == 2
    msgs = w.latest("long").messages
    for i in range(40):
        msgs = msgs + [{"role": "user", "content": f"more {i}"}]
        w.save("long", msgs, step=100 + i)
    stale = CheckpointManager(LocalStore(root))
    head = stale.latest("small-2").messages
    CheckpointManager(LocalStore(root)).save("small-2", head + [{"role": "user", "content": "new head"}])
    with pytest.raises(ConflictError):
        stale.save("small-2", head + [{"role": "user", "content": "stale"}])
    expect = snapshot(CheckpointManager(LocalStore(root)))
    w.gc(grace_period=0)
    w.gc(grace_period=0)
    assert snapshot(CheckpointManager(LocalStore(root))) == expect
    assert log_errors(CheckpointManager(LocalStore(root)).verify(read_data=True).errors) == []
    again = CheckpointManager(LocalStore(root))
    assert again.archive(run_ids=["long"]).runs == ["long"]
    again.gc(grace_period=0)
    again.gc(grace_period=0)
    rk = again.state.repository(False).run_key("long")
    logs = [i.key for i in again.store.list(f"runs/{rk}/l/")]
    assert len(logs) == 1 and logs[0].endswith(".a"), logs
    assert snapshot(CheckpointManager(LocalStore(root))) == expect
    assert log_errors(CheckpointManager(LocalStore(root)).verify(read_data=True).errors) == []


def test_unarchive_and_delete_after_the_catalogue(tmp_path):
    """Unarchive of runs whose logs are archive logs brings them back hot, reading the same; a
    deleted run's archive log goes with the rest of its log at GC."""
    root = tmp_path / "r"
    _m, before = archived(root)
    un = CheckpointManager(LocalStore(root))
    assert sorted(un.unarchive(["long", "small-0"]).runs) == ["long", "small-0"]
    un.gc(grace_period=0)
    un.gc(grace_period=0)
    assert snapshot(CheckpointManager(LocalStore(root))) == before
    assert CheckpointManager(LocalStore(root)).verify(read_data=True).ok
    un.delete("long")
    un.gc(grace_period=0)
    un.gc(grace_period=0)
    rk = un.state.repository(False).run_key("long")
    assert "long" not in CheckpointManager(LocalStore(root)).runs()
    assert [i.key for i in un.store.list(f"runs/{rk}/")] == []  # its archive log went with its log
    assert CheckpointManager(LocalStore(root)).verify(read_data=True).ok
