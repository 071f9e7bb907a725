"""Damaged packs that readers can still touch, and crash leftovers (docs/format.md §19, §21).

After a GC with a grace period the repacked per-save packs (retired packs, with forwarding records
to their rewrite) and rewritten tier segments stay until a later GC deletes them, and readers read
them first. One flipped byte in such a pack must not break a restore while an intact copy exists;
``verify --read-data`` must report damage wherever a reader can meet it; GC must report such a pack
and delete it once its data is safe elsewhere instead of aborting. GC also removes the temporary
files a killed process left (and incomplete S3 multipart uploads) once older than the grace period.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from click.testing import CliRunner

import snapstore
from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.cli.maint_cmds import gc_lines
from snapstore.errors import IntegrityError, SnapstoreError
from snapstore.format import keys
from snapstore.maintenance.forwarding import read_forward_map
from snapstore.stores import LocalStore, MemoryStore

from tests.helpers.format1 import use_format1_writes
from tests.helpers.fake_clock import Clock
from tests.helpers.repo_checks import assert_clean

G = 100.0


def msg(tag: str, i: int, size: int = 300) -> dict:
    return {"role": "user" if i % 2 else "assistant", "content": f"{tag}-{i} " + "words and more words " * (size // 21)}


def flip(data: bytes, pos: int | None = None) -> bytes:
    pos = len(data) // 2 if pos is None else pos
    return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1:]


def build(format1: bool):
    """A small repository whose newest saves still hint at retired packs that still exist.

    Two runs; three GCs a grace period apart retire the first saves' packs and delete them (their
    forwarding records stay, so readers meet 404s and load ``gc/fwd-cache``); more saves (and a
    prune, or in format 2 a rollback, so that a tier pack is mostly dead and rewritten); a fourth
    GC retires packs that stay; then more saves. Returns ``(store, manager, expect)`` with
    ``expect``: ``{(run, checkpoint id): messages}`` of every live checkpoint.
    """
    clock = Clock()
    store = MemoryStore(clock=clock)
    m = CheckpointManager(store, clock=clock, gc_grace_period=G)
    expect: dict = {}
    msgs: dict = {"a": [], "b": []}

    def save(run, n, tag=None):
        for _ in range(n):
            msgs[run] = msgs[run] + [msg(tag or run, len(msgs[run]))]
            expect[(run, m.save(run, msgs[run]))] = msgs[run]
            clock.advance(1)
    save("a", 5)
    save("b", 5)
    m.gc()
    clock.advance(G)
    m.gc()
    clock.advance(G + 1)
    m.gc()
    save("a", 3)
    save("b", 3)
    if format1:
        m.prune(keep_last=6)
    else:
        target = [k for k in expect if k[0] == "a"][1]
        m.rollback("a", target[1])
        msgs["a"] = expect[target]
    rep = m.gc()
    assert rep.repacked_packs >= 1
    save("a", 2, "ax")
    save("b", 2, "bx")
    live = {(r, s.id) for r in ("a", "b") for s in m.list(r)}
    return store, m, {k: v for k, v in expect.items() if k in live}


def dump(store: MemoryStore, root) -> None:
    local = LocalStore(root, fsync=False)
    for k, v in store.raw().items():
        local.put(k, v)


def restore_all(root, expect: dict) -> None:
    """Every restore a user has: get() of every live checkpoint, latest() and CLI export of each
    run, each from a new process state (a new manager). Raises what the first failing one raised."""
    m = CheckpointManager(LocalStore(root, fsync=False))
    for (run, cid), msgs in expect.items():
        assert json.dumps(m.get(run, cid).messages) == json.dumps(msgs), (run, cid)
    for run in sorted({r for r, _ in expect}):
        cp = CheckpointManager(LocalStore(root, fsync=False)).latest(run)
        assert json.dumps(cp.messages) == json.dumps(expect[(run, cp.id)])
        res = CliRunner().invoke(cli, ["--repo", str(root), "export", run], catch_exceptions=False)
        if res.exit_code != 0:
            raise SnapstoreError(f"export {run} failed: {res.output}")
        assert json.dumps(json.loads(res.stdout)) == json.dumps(expect[(run, cp.id)])


def verify_names(root, key: str) -> bool:
    """Does ``verify --read-data`` report ``key`` as an error (and exit non-zero)?"""
    try:
        rep = CheckpointManager(LocalStore(root, fsync=False)).verify(read_data=True)
    except SnapstoreError as e:  # e.g. a damaged config: nothing can be opened, the error names it
        return key in str(e)
    named = any(key in p.key or key in p.message for p in rep.errors)
    if named:
        res = CliRunner().invoke(cli, ["--repo", str(root), "verify", "--read-data", "-q"])
        assert res.exit_code != 0, res.output
    return named


@pytest.mark.parametrize("fmt", ["format1", "format2"])
def test_one_flipped_byte_in_any_object_is_survived_or_reported(fmt, tmp_path, monkeypatch):
    """The corruption sweep: for every object of the repository in turn, flip one byte (then put
    it back). Either every restore still succeeds with exact content, or the restore's error names
    the damaged object and ``verify --read-data`` reports it as an error (exit code non-zero)."""
    if fmt == "format1":
        use_format1_writes(monkeypatch)
    store, m, expect = build(fmt == "format1")
    retired = {keys.pack_key(p) for p in read_forward_map(m.repo).to} & set(store.raw())
    assert retired, "the repository must hold retired packs that still exist"
    root = tmp_path / "repo"
    dump(store, root)
    restore_all(root, expect)
    survived, failed = [], []
    for k in sorted(store.raw()):
        if k.startswith("runmarks/") or not store.raw()[k]:
            continue  # run markers: empty, only their key is read (docs/format.md §13); stubs (§14): empty
        path = os.path.join(root, *k.split("/"))
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(flip(data))
        try:
            try:
                restore_all(root, expect)
            except SnapstoreError as e:
                failed.append(k)
                assert k in str(e), f"damaged {k}, but the restore error names something else: {e}"
                assert verify_names(root, k), f"restores fail with {k} damaged, but verify --read-data does not say so"
            else:
                survived.append(k)
        finally:
            with open(path, "wb") as f:
                f.write(data)
    # the damage readers must survive: a retired pack whose entries are also in its rewrite
    assert retired & set(survived), (sorted(retired), failed)
    assert "config" in failed  # the sweep does break things (and each such break was reported)


def one_gc(store, clock):
    """Six saves, a GC with a grace period (it retires the six per-save packs, which stay), two
    more saves whose trees still hint at them. Returns ``(manager, expect)``."""
    m = CheckpointManager(store, clock=clock, gc_grace_period=G)
    msgs, expect = [], {}
    for i in range(8):
        if i == 6:
            assert m.gc().repacked_packs == 6
        msgs = msgs + [msg("r", i)]
        expect[("r", m.save("r", msgs))] = msgs
        clock.advance(1)
    return m, expect


def test_a_reader_reads_past_a_corrupt_retired_pack_and_verify_warns(monkeypatch):
    use_format1_writes(monkeypatch)
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = one_gc(store, clock)
    retired = [p for p in read_forward_map(m.repo).to if keys.pack_key(p) in store.raw()]
    assert len(retired) == 6
    for p in retired:
        store.corrupt(keys.pack_key(p), flip(store.raw()[keys.pack_key(p)]))
    reader = CheckpointManager(store)
    for (run, cid), msgs in expect.items():
        assert json.dumps(reader.get(run, cid).messages) == json.dumps(msgs)
    # the reader did read them first (the live trees' hints name them) and used the copies
    assert set(reader.repo.corrupt_packs()) and set(reader.repo.corrupt_packs()) <= set(retired)
    rep = CheckpointManager(store).verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]
    warned = {p.key for p in rep.warnings if p.code == "corrupt-unneeded-pack"}
    assert warned == {keys.pack_key(p) for p in retired}


def test_a_corrupt_retired_pack_and_a_damaged_copy_name_the_damage(monkeypatch):
    """No intact copy left: the restore fails with an IntegrityError naming a damaged pack (not a
    missing one), and verify reports it as an error."""
    use_format1_writes(monkeypatch)
    store, m, expect = build(True)
    fmap = read_forward_map(m.repo)
    # a retired pack that a live tree hints at, and every pack its record leads to
    old = next(p for p in fmap.to if keys.pack_key(p) in store.raw() and fmap.to[p])
    damaged = {old, *fmap.to[old]}
    for p in damaged:
        store.corrupt(keys.pack_key(p), flip(store.raw()[keys.pack_key(p)]))
    damaged_keys = {keys.pack_key(p) for p in damaged}
    failures = 0
    for (r, c), msgs in expect.items():
        try:
            CheckpointManager(store).get(r, c)
        except IntegrityError as e:
            failures += 1
            assert any(k in str(e) for k in damaged_keys), str(e)
    assert failures
    rep = CheckpointManager(store).verify(read_data=True)
    assert any(p.key in damaged_keys or any(k in p.message for k in damaged_keys) for p in rep.errors)


def test_format2_a_corrupt_rewritten_segment_is_read_from_its_rewrite():
    store, m, expect = build(False)
    fmap = read_forward_map(m.repo)
    segs = {sg.pack for r in ("a", "b") for sg in m.repo.head(m.repo.run_key(r)).segment_list()}
    rewritten = [p for p in fmap.to if p in segs and keys.pack_key(p) in store.raw()]
    assert rewritten, "GC rewrote a mostly dead tier segment that the newest record still lists"
    for p in rewritten:
        store.corrupt(keys.pack_key(p), flip(store.raw()[keys.pack_key(p)]))
    for (run, cid), msgs in expect.items():
        assert json.dumps(CheckpointManager(store).get(run, cid).messages) == json.dumps(msgs)
    rep = CheckpointManager(store).verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]
    assert {keys.pack_key(p) for p in rewritten} <= {p.key for p in rep.warnings if p.code == "corrupt-unneeded-pack"}


def test_gc_reports_a_corrupt_retired_pack_and_deletes_it_once_its_data_is_safe(monkeypatch):
    use_format1_writes(monkeypatch)
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = one_gc(store, clock)
    # the per-save pack holding the state of a checkpoint saved before the GC: retired, hinted
    first = m.repo.find_checkpoint(m.repo.run_key("r"), next(iter(expect))[1])
    bad = bytes.fromhex(first.state[1])
    assert bad in read_forward_map(m.repo).to
    key = keys.pack_key(bad)
    store.corrupt(key, flip(store.raw()[key]))
    rep = CheckpointManager(store, clock=clock).gc(grace_period=G)  # used to stop: checksum mismatch
    assert rep.corrupt_packs == [key]
    assert key in "\n".join(v for _, v in gc_lines(rep))
    for _ in range(3):
        clock.advance(G + 1)
        CheckpointManager(store, clock=clock).gc(grace_period=G)
    assert key not in store.raw()
    assert_clean(store, expect)


def test_gc_stops_on_a_corrupt_pack_that_is_the_only_copy_of_live_data(monkeypatch):
    use_format1_writes(monkeypatch)
    store = MemoryStore()
    m = CheckpointManager(store)
    msgs = []
    for i in range(3):
        msgs = msgs + [msg("r", i)]
        m.save("r", msgs)
    head = m.repo.head(m.repo.run_key("r"))
    key = keys.pack_key(bytes.fromhex(head.state[1]))
    store.corrupt(key, flip(store.raw()[key]))
    before = set(store.raw())
    with pytest.raises(IntegrityError) as ei:
        CheckpointManager(store).gc(grace_period=0)
    assert key in str(ei.value)
    assert set(store.raw()) >= before - {"gc/lock"}  # nothing deleted
    assert not CheckpointManager(store).verify(read_data=True).ok


# ------------------------------------------------------------------------------------------------
# crash leftovers

_KILLED_SAVE = textwrap.dedent("""
    import os, stat, sys, time
    root, marker = sys.argv[1], sys.argv[2]
    from snapstore import CheckpointManager
    from snapstore.stores import LocalStore
    def stopping(real):
        def sync(fd):  # the pack's temp file is written (the journal's record or the file synced): stop until killed
            real(fd)
            if stat.S_ISREG(os.fstat(fd).st_mode) and not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(120)
        return sync
    m = CheckpointManager(LocalStore(root))
    msgs = m.latest("r").messages
    os.fsync, os.fdatasync = stopping(os.fsync), stopping(os.fdatasync)
    m.save("r", msgs + [{"role": "assistant", "content": "never published " * 200}])
""")


def test_gc_removes_the_temp_file_of_a_process_killed_mid_save(tmp_path):
    root = tmp_path / "repo"
    m = CheckpointManager(LocalStore(root))
    msgs = [msg("r", i) for i in range(3)]
    cid = m.save("r", msgs)
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(snapstore.__file__)))
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(root), str(marker)], env=env)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert proc.poll() is None, "the saving process ended early"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    store = LocalStore(root)
    left = store.leftovers()  # the batch's temp files (pack, manifest: one save at one commit)
    assert 1 <= len(left) <= 2 and all(x.name.split("/")[-1].startswith(".tmp-") and x.size > 0 for x in left)
    paths = [os.path.join(root, *x.name.split("/")) for x in left]
    assert all(os.path.exists(p) for p in paths)
    total = sum(x.size for x in left)
    rep = CheckpointManager(store).verify()
    assert rep.ok and sorted(p.key for p in rep.warnings if p.code == "temp-file") == sorted(x.name for x in left)
    assert CheckpointManager(store).stats()["leftovers"] == {"count": len(left), "bytes": total}
    res = CliRunner().invoke(cli, ["--repo", str(root), "stats"])
    assert res.exit_code == 0 and f"{len(left)} temporary file" in res.output, res.output
    # younger than the grace period: a write may still be running, so they stay
    g = CheckpointManager(store).gc(grace_period=3600)
    assert g.leftovers_removed == 0 and g.leftovers_pending == len(left) and all(os.path.exists(p) for p in paths)
    # two hours old (their mtime is the store's clock for them): a dry run reports them, a gc removes them
    for p in paths:
        t = os.stat(p).st_mtime - 7200
        os.utime(p, (t, t))
    dry = CheckpointManager(store).gc(grace_period=3600, dry_run=True)
    assert dry.leftovers_removed == len(left) and dry.leftover_bytes_removed == total and all(map(os.path.exists, paths))
    res = CliRunner().invoke(cli, ["--repo", str(root), "gc", "--dry-run"])
    assert res.exit_code == 0 and "crash leftover" in res.output, res.output
    done = CheckpointManager(store).gc(grace_period=3600)
    assert done.leftovers_removed == len(left) and not any(map(os.path.exists, paths))
    assert store.leftovers() == []
    assert CheckpointManager(store).stats()["leftovers"] == {"count": 0, "bytes": 0}
    rep = CheckpointManager(store).verify(read_data=True)
    assert rep.ok and not [p for p in rep.warnings if p.code == "temp-file"]
    assert CheckpointManager(store).get("r", cid).messages == msgs


def test_remove_leftovers_refuses_names_that_are_not_temp_files(tmp_path):
    from snapstore.errors import InvalidInputError
    from snapstore.stores.base import Leftover
    store = LocalStore(tmp_path / "repo")
    store.put("config", b"x")
    with pytest.raises(InvalidInputError):
        store.remove_leftovers([Leftover("config", 1, 0.0)])
    with pytest.raises(InvalidInputError):
        store.remove_leftovers([Leftover("../.tmp-x", 1, 0.0)])
    assert store.get("config") == b"x"


def test_gc_aborts_an_incomplete_s3_multipart_upload(s3_inprocess_store, monkeypatch):
    """snapstore starts multipart uploads for objects over ``multipart_threshold``; a writer killed
    between CreateMultipartUpload and its completion (simulated: the abort in its cleanup never
    runs) leaves an upload S3 bills until it is aborted."""
    store = s3_inprocess_store
    m = CheckpointManager(store)
    m.save("r", [msg("r", 0)])
    store.multipart_threshold = 1 << 10

    def killed(*a, **kw):
        raise KeyboardInterrupt("killed")
    monkeypatch.setattr(store._writes, "_abort", lambda *a, **kw: None)
    monkeypatch.setattr(store._client, "complete_multipart_upload", killed)
    with pytest.raises(KeyboardInterrupt):
        store.put("packs/00/0000000000000001", b"x" * 4096)
    monkeypatch.undo()
    left = store.leftovers()
    assert [it.name for it in left] == ["packs/00/0000000000000001"] and left[0].upload_id
    assert any(p.code == "incomplete-upload" for p in CheckpointManager(store).verify().warnings)
    # moto lists every upload as initiated in 2010, so it is older than any grace period here
    dry = CheckpointManager(store).gc(grace_period=3600, dry_run=True)
    assert dry.leftovers_removed == 1 and len(store.leftovers()) == 1
    assert CheckpointManager(store).gc(grace_period=3600).leftovers_removed == 1
    assert store.leftovers() == []
    assert CheckpointManager(store).verify(read_data=True).ok


def test_format2_a_writer_merging_a_corrupt_rewritten_segment_copies_its_rewrite():
    """A writer's tiered compaction merges the newest record's segments and then deletes them; a
    segment GC rewrote that is damaged must be merged from its rewrite (its forwarding record), or
    the new tier pack would lack its entries and, once GC deletes the rewrite, they are lost."""
    store, m, expect = build(False)
    fmap = read_forward_map(m.repo)
    run_key = m.repo.run_key("a")
    rewritten = [sg.pack for sg in m.repo.head(run_key).segment_list()
                 if sg.pack in fmap.to and keys.pack_key(sg.pack) in store.raw()]
    assert rewritten
    for p in rewritten:
        store.corrupt(keys.pack_key(p), flip(store.raw()[keys.pack_key(p)]))
    w = CheckpointManager(store)
    msgs = w.latest("a").messages
    for i in range(16):  # enough saves for the counter to merge the damaged segment away
        msgs = msgs + [msg("merge", i)]
        expect[("a", w.save("a", msgs))] = msgs
    assert not set(rewritten) & {sg.pack for sg in w.repo.head(run_key).segment_list()}
    for _ in range(2):
        CheckpointManager(store).gc(grace_period=0)
    assert_clean(store, expect)


def test_a_retired_pack_with_a_valid_checksum_but_undecodable_data_is_read_past(monkeypatch):
    """Damage the checksum does not catch (a pack rewritten with a matching checksum: the bytes of
    an entry no longer match its content id, or its frame does not decode): readers take the
    entry from the forwarding targets."""
    import blake3
    use_format1_writes(monkeypatch)
    clock = Clock()
    store = MemoryStore(clock=clock)
    m, expect = one_gc(store, clock)
    retired = [p for p in read_forward_map(m.repo).to if keys.pack_key(p) in store.raw()]
    for p in retired:
        data = bytearray(store.raw()[keys.pack_key(p)])
        for pos in range(13, 13 + 40):  # inside block 0 (tree nodes, state): no dictionary
            data[pos] ^= 0x55
        data[-16:] = blake3.blake3(bytes(data[:-16])).digest(16)
        store.corrupt(keys.pack_key(p), bytes(data))
    for (run, cid), msgs in expect.items():
        assert json.dumps(CheckpointManager(store).get(run, cid).messages) == json.dumps(msgs)
    rep = CheckpointManager(store).verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]
    assert {p.key for p in rep.warnings if p.code == "corrupt-unneeded-pack"} == {keys.pack_key(p) for p in retired}
    g = CheckpointManager(store, clock=clock).gc(grace_period=G)  # reads past them too
    assert g.live_checkpoints == len(expect)
