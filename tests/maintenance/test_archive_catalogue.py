"""The hot catalogue of an archived run (docs/format.md §28): after the switch the whole logs of the
runs a bundle serves are one bundle log (``archive/log/<bundle id>``), each run's ``runs/<R>/l/``
a 0-byte pointer to it (``<hi>.<bundle id>.b``), its manifests 0-byte stubs and its other log
segments gone; runs, list, show, prune, delete, saves on top, unarchive, GC and verify all work
from it, on a local directory and on moto's HTTP server. Archive logs of one run (``.a``, written
by the version before) are still read."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import ConflictError, IntegrityError
from snapstore.format.archlog import decode_frame, encode_frame
from snapstore.format.logseg import ARCHIVE_LEVEL, archlog_key, decode_logseg, encode_archlog, parse_logseg_key
from snapstore.stores.local import LocalStore

from .test_archive import archived, fill, snapshot


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
    """After archive and GC: every manifest is a 0-byte stub, each run has exactly one pointer
    (0 bytes) to the one bundle log and no other log segment; everything reads as before; verify
    passes; and the hot bytes per archived checkpoint (stubs, the bundle log, markers, index
    records) fall. (On S3 stubs are asked for: ``compact_log=True``; by default archive leaves
    manifests full there, below.)"""
    store = store_factory(kind)
    m = CheckpointManager(store, compact_log=True)
    fill(m)
    before = snapshot(m)
    hot_before = sum(i.size for i in store.list("runs/")) + sum(i.size for i in store.list("runmarks/"))
    rep = m.archive()
    assert rep.hot_logs == {} and rep.catalogue_bytes > 0
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    objs = run_objects(store)
    assert objs["m"] and set(objs["m"]) == {0}
    assert all(k.endswith(".b") for k in objs["l"]) and len(objs["l"]) == len(before)
    assert all(i.size == 0 for i in store.list("runs/") if i.key.endswith(".b"))
    assert len(list(store.list("archive/log/"))) == len(rep.bundles) == 1
    f = CheckpointManager(store)
    assert snapshot(f) == before
    assert f.verify(read_data=True).ok
    hot_after = sum(i.size for i in store.list("runs/")) + sum(i.size for i in store.list("runmarks/"))
    assert hot_after < hot_before / 2, (hot_before, hot_after)


def log_errors(errors: list) -> list:
    """Every error of ``errors`` (verify's ``missing-pack`` / ``missing-entry`` after this sequence,
    which were once left out here, were verify's own: tests/maintenance/test_archive_sequences.py)."""
    return list(errors)


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
    assert len(logs) == 1 and logs[0].endswith(".b"), logs
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
    assert [i.key for i in un.store.list(f"runs/{rk}/")] == []  # its pointer went with its log
    assert CheckpointManager(LocalStore(root)).verify(read_data=True).ok
    assert len(list(un.store.list("archive/log/"))) == 1  # the other runs still point at it
    for run in CheckpointManager(LocalStore(root)).runs():
        un.delete(run)
    un.gc(grace_period=0)
    un.gc(grace_period=0)
    assert list(un.store.list("archive/")) == [] and list(un.store.list("runs/")) == []


def test_archive_logs_of_the_version_before_are_read(tmp_path, monkeypatch):
    """A repository archived the way the version before did (one archive log ``.a`` per run,
    :func:`compact_run_log`) reads the same, verifies, and GC keeps it; a save on top and an
    archive of that run now leave it one pointer to a bundle log, its ``.a`` deleted."""
    from snapstore.maintenance import archive as archive_mod
    from snapstore.maintenance.archcat import compact_run_log

    def old_way(repo, bid, runs, hook=None, stub=True, fields=None):  # (the version before wrote no thin logs)
        return {rk: compact_run_log(repo, rk, listed) for rk, listed in runs.items()}
    root = tmp_path / "r"
    m = CheckpointManager(LocalStore(root))
    fill(m)
    before = snapshot(m)
    monkeypatch.setattr(archive_mod, "compact_bundle_logs", old_way)
    m.archive()
    monkeypatch.undo()
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    objs = run_objects(m.store)
    assert objs["l"] and all(k.endswith(".a") for k in objs["l"]) and list(m.store.list("archive/log/")) == []
    f = CheckpointManager(LocalStore(root))
    assert snapshot(f) == before and f.verify(read_data=True).errors == []
    f.save("long", f.latest("long").messages + [{"role": "user", "content": "on top"}], step=77)
    assert CheckpointManager(LocalStore(root)).archive(run_ids=["long"]).runs == ["long"]
    f.gc(grace_period=0)
    f.gc(grace_period=0)
    rk = f.state.repository(False).run_key("long")
    logs = [i.key for i in f.store.list(f"runs/{rk}/l/")]
    assert len(logs) == 1 and logs[0].endswith(".b"), logs
    g = CheckpointManager(LocalStore(root))
    assert g.latest("long").step == 77 and g.verify(read_data=True).errors == []
    assert {k: v for k, v in snapshot(g).items() if k != "long"} == {k: v for k, v in before.items() if k != "long"}


def test_archiving_a_run_on_s3_costs_requests_independent_of_its_length(store_factory):
    """On S3 (moto) archiving a run of 20 and of 300 checkpoints makes the same PUTs (bundle, index
    record, bundle log, pointer: no stub per manifest, which the version before wrote) and a
    number of GETs and LISTs that grows with the run's log segments, not its checkpoints; the
    manifests stay full, the run's log segments go, and everything reads back after GC."""
    counts = {}
    for n in (20, 300):
        store = store_factory("s3")
        m = CheckpointManager(store)
        msgs = [{"role": "system", "content": "You are an agent. " * 40}]
        for i in range(n):
            msgs = msgs + [{"role": "user", "content": f"question {i} " * 6}]
            m.save("r", msgs, step=i)
        was = dict(store.stats.counts)
        rep = m.archive()
        counts[n] = {k: v - was.get(k, 0) for k, v in store.stats.counts.items()}
        assert rep.hot_logs == {} and rep.runs == ["r"]
        sizes = [i.size for i in store.list("runs/") if "/m/" in i.key]
        assert len(sizes) == n and min(sizes) > 0  # manifests left full
        logs = [i.key for i in store.list("runs/") if "/l/" in i.key]
        assert len(logs) == 1 and logs[0].endswith(".b") and len(list(store.list("archive/log/"))) == 1
        m.gc(grace_period=0)
        m.gc(grace_period=0)
        f = CheckpointManager(store)
        assert f.latest("r").messages == msgs and len(f.list("r")) == n
        assert f.verify(read_data=True).errors == []
    assert counts[20]["PUT"] == counts[300]["PUT"] == 4, counts
    reads = {n: c.get("GET", 0) + c.get("LIST", 0) for n, c in counts.items()}
    assert reads[300] <= reads[20] + 40, counts  # 15x the checkpoints: a few more segments read


def test_bundle_log_parts_and_their_gc(tmp_path, monkeypatch):
    """With parts of one run each (``PART_RAW`` 1 byte), every run points at its own part; reads
    and verify are as before. Unarchive writes each run's whole log back hot (an archive log; the
    thin part's records need the bundle, §31) and drops its pointer, so once the bundle serves
    nothing and a run is deleted, GC deletes every part, and every run reads as before."""
    from snapstore.maintenance import archcat
    monkeypatch.setattr(archcat, "PART_RAW", 1)
    root = tmp_path / "r"
    m, before = archived(root)
    parts = sorted(i.key for i in m.store.list("archive/log/"))
    assert len(parts) == len(before) and len({p[:-4] for p in parts}) == 1  # one bundle, a part per run
    f = CheckpointManager(LocalStore(root))
    assert snapshot(f) == before and f.verify(read_data=True).errors == []
    assert f.unarchive(list(before)).runs  # the bundle then serves nothing: its index record goes
    objs = run_objects(f.store)
    assert objs["l"] and not any(k.endswith(".b") for k in objs["l"])  # no pointer left
    f = CheckpointManager(LocalStore(root))  # (the unarchiving manager's own head view is stale)
    f.delete("long")
    f.gc(grace_period=0)
    f.gc(grace_period=0)
    assert list(f.store.list("archive/log/")) == []
    g = CheckpointManager(LocalStore(root))
    assert {k: v for k, v in snapshot(g).items()} == {k: v for k, v in before.items() if k != "long"}
    assert g.verify(read_data=True).errors == []


class _GetLog(LocalStore):
    """A local directory store that records the key of every GET."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.got = []

    def get(self, key, byte_range=None):
        self.got.append(key)
        return super().get(key, byte_range)


def test_thin_bundle_logs_keep_data_fields_in_the_bundle(tmp_path):
    """Bundle logs are thin (version 6): no record in them holds ``messages.digest``,
    ``messages.state``, ``messages.xt`` or ``segs``; the bundle's one ``l`` entry holds them for
    every record. A fresh manager's runs/list/summary GET no bundle; reading a checkpoint does
    (the bundle's suffix: its data and the fields entry), and every checkpoint reads exactly."""
    from snapstore.format.archfields import MOVED, decode_fields
    from snapstore.format.logseg import LOG_VERSION_THIN, decode_bundlelog
    from snapstore.format.pack import T_FIELDS, Pack
    root = tmp_path / "r"
    m, before = archived(root)
    logs = [i.key for i in m.store.list("archive/log/")]
    assert logs
    thin = 0
    for k in logs:
        data = m.store.get(k)
        assert data[4] == LOG_VERSION_THIN
        for rk, copies in decode_bundlelog(k, data).items():
            for c in copies:
                assert c.fill is not None  # every record of these runs is thin
                thin += 1
                assert not any(f'"{n}"'.encode() in c.data for n in MOVED)
    (bkey,) = [i.key for i in m.store.list("archive/data/")]
    bundle = Pack.parse(bkey, m.store.get(bkey), bytes.fromhex(bkey.rsplit("/", 1)[1]))
    (fe,) = [e for e in bundle.entries.values() if e.type == T_FIELDS]
    fields = decode_fields(bkey, bundle.entry_bytes(fe))
    assert sum(len(v) for v in fields.values()) == thin
    assert all("digest" in f and "state" in f for recs in fields.values() for f in recs.values() if f and "xt" in f)
    store = _GetLog(root)
    f = CheckpointManager(store)
    for run, (listed, _latest, _cps) in before.items():
        assert [(s.id, s.step, s.status) for s in f.list(run)] == listed
        f.summary(run, listed[-1][0])
    assert set(f.runs()) == set(before)
    assert not [k for k in store.got if k.startswith("archive/data/")]
    assert snapshot(f) == before
    assert [k for k in store.got if k.startswith("archive/data/")]


def test_bundle_logs_of_version_5_are_still_read(tmp_path, monkeypatch):
    """Bundle logs of whole records (version 5, the version before) still read, verify, GC and
    unarchive as before, beside bundles that have a fields entry."""
    from snapstore.format.logseg import LOG_VERSION_BUNDLE
    from snapstore.maintenance import archcat
    from snapstore.maintenance import archive as archive_mod
    real = archcat.compact_bundle_logs
    monkeypatch.setattr(archive_mod, "compact_bundle_logs",
                        lambda repo, bid, runs, hook=None, stub=True, fields=None: real(repo, bid, runs, hook, stub))
    root = tmp_path / "r"
    m, before = archived(root)
    monkeypatch.undo()
    logs = [i.key for i in m.store.list("archive/log/")]
    assert logs and all(m.store.get(k)[4] == LOG_VERSION_BUNDLE for k in logs)
    f = CheckpointManager(LocalStore(root))
    assert snapshot(f) == before and f.verify(read_data=True).errors == []
    assert f.unarchive(list(before)).runs
    for _ in range(2):
        CheckpointManager(LocalStore(root)).gc(grace_period=0)
    g = CheckpointManager(LocalStore(root))
    assert snapshot(g) == before and g.verify(read_data=True).errors == []


def test_a_thin_record_without_valid_fields_is_an_integrity_error():
    """A thin record whose bundle gives no valid moved fields raises IntegrityError when one is
    used (never a record with made-up fields); its other fields read without them. A fields
    entry of another shape is IntegrityError too."""
    from snapstore.format.archfields import decode_fields, encode_fields, full_body, thin_body
    from snapstore.format.manifest import Manifest
    from datetime import datetime, timezone
    from snapstore.format.segs import Seg
    rec = Manifest(kind="checkpoint", run_id="r", seq=3, write_id="ab" * 8, created=datetime(2026, 1, 1, tzinfo=timezone.utc),
                   checkpoint_id="c3", parent_id="c2", count=2, size=40, digest="d" * 32, state=["e" * 32, "f" * 16],
                   exact=0, exact_tag="0" * 16, arrays=1, segs=[Seg(b"\x01" * 8, 0)])
    data = rec.to_bytes()
    from snapstore.format.manifest import open_manifest
    v, body = open_manifest("runs/r/m/x", data)
    thin, moved = thin_body(body)
    assert set(moved) == {"digest", "state", "xt", "segs"} and b"digest" not in thin
    rec = Manifest.from_body("runs/r/m/x", v, body, run_id="r")
    assert Manifest.from_body("runs/r/m/x", v, full_body(thin, moved), run_id="r") == rec
    ok = Manifest.from_body("runs/r/m/x", v, thin, run_id="r", fill=lambda: ("bundle", moved), where=("log", "r", 3))
    assert ok == rec and ok.state == rec.state and ok.segs == rec.segs
    for bad in ({}, {"digest": 5, "state": None}, {"digest": "d", "state": ["nothex"]}, "x"):
        m = Manifest.from_body("runs/r/m/x", v, thin, run_id="r", fill=lambda bad=bad: ("bundle", bad), where=("log", "r", 3))
        assert m.checkpoint_id == "c3" and m.fields == rec.fields  # listed without the bundle
        with pytest.raises(IntegrityError, match="bundle"):
            m.state
    with pytest.raises(IntegrityError):
        Manifest.from_body("runs/r/m/x", v, body, run_id="r", fill=lambda: ("bundle", moved))  # a thin record holding a moved field
    assert decode_fields("b", encode_fields({"r": {3: moved}})) == {"r": {3: moved}}
    for raw in (b"{}", b'{"runs": {"r": {"x": {}}}}', b'{"runs": {"r": {"3": {"other": 1}}}}', b"[1"):
        with pytest.raises(IntegrityError):
            decode_fields("b", raw)
