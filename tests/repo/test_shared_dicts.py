"""A run's own packs compressed against the shared object its records list (docs/format.md §8
block kind 6, §11 manifest version 7, §29 "Dictionaries"): smaller, read back exactly by a fresh
process, kept by GC while any block needs the shared message, refused cleanly by older readers."""

from __future__ import annotations

import json
import random

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError, UnsupportedFormatError
from snapstore.format import keys
from snapstore.format import manifest as manifest_mod
from snapstore.format.manifest import MANIFEST_VERSION_ARRAYS, MANIFEST_VERSION_SHARED_DICT, Manifest, open_manifest
from snapstore.format.pack import T_CHUNK, Pack, PackBuilder
from snapstore.format.shared import shared_epoch
from snapstore.maintenance.gc import gc
from snapstore.stores import MemoryStore
from snapstore.stores.local import LocalStore

WORDS = [f"w{k}x{k * 7 % 13}" for k in range(400)]


def text(rng: random.Random, n: int) -> str:
    out = []
    while sum(map(len, out)) + len(out) < n:
        out.append(rng.choice(WORDS))
    return " ".join(out)


SYSTEM = {"role": "system", "content": "You are an agent. " + text(random.Random(1), 12000),
          "tools": [{"name": f"tool_{k}", "description": text(random.Random(k), 300)} for k in range(8)]}


def run_msgs(r: int, turns: int) -> list:
    rng = random.Random(100 + r)
    out = [SYSTEM, {"role": "user", "content": f"task {r}: " + text(rng, 400)}]
    for i in range(turns):
        out += [{"role": "assistant", "content": text(rng, 900)}, {"role": "tool", "content": text(rng, 1200)}]
    return out


def save_run(m: CheckpointManager, run: str, msgs: list) -> None:
    for n in range(4, len(msgs) + 1, 2):
        m.save(run, msgs[:n])


def own_packs(store) -> list:
    out = []
    for i in store.list(keys.PACKS):
        pid = keys.pack_id_from_key(i.key)
        if shared_epoch(pid) is None:
            out.append(Pack.parse(i.key, store.get(i.key), pid))
    return out


def shared_keys(store) -> list:
    return [i.key for i in store.list(keys.PACKS) if shared_epoch(keys.pack_id_from_key(i.key)) is not None]


def test_own_packs_use_the_shared_message_as_dictionary_and_read_back_exactly(tmp_path):
    stored = {}
    for dicts in (False, True):
        store = LocalStore(tmp_path / f"repo-{dicts}", fsync=False)
        m = CheckpointManager(store)
        m.repo.shared.dictionaries = dicts
        want = {f"r{r}": run_msgs(r, 5) for r in range(4)}
        for run, msgs in want.items():
            save_run(m, run, msgs)
        m.close()
        packs = own_packs(store)
        refs = {b.shared for p in packs for b in p.blocks if b.shared is not None}
        sk = shared_keys(store)
        assert len(sk) == 1
        spid = keys.pack_id_from_key(sk[0])
        if dicts:
            # the per-save packs and the tier packs: every own pack with an array block uses it
            assert all(any(b.shared for b in p.blocks) for p in packs if any(b.array for b in p.blocks))
            assert {r[0] for r in refs} == {spid}
        else:
            assert refs == set()
        stored[dicts] = sum(len(store.get(p.key)) for p in packs)
        fresh = CheckpointManager(LocalStore(tmp_path / f"repo-{dicts}"))
        for run, msgs in want.items():
            assert fresh.latest(run).messages == msgs
            for k, s in enumerate(reversed(fresh.list(run))):
                assert fresh.get(run, s.id).messages == msgs[:4 + 2 * k]
            head = fresh.repo.head(fresh.repo.run_key(run))
            version, _ = open_manifest("m", store.get(keys.manifest_key(fresh.repo.run_key(run), head.seq)))
            assert version == MANIFEST_VERSION_SHARED_DICT  # its list names a shared object (version 7)
        assert not fresh.verify(read_data=True).errors
        fresh.close()
    assert stored[True] < 0.93 * stored[False], stored


def test_a_record_without_a_shared_object_keeps_version_5_and_an_older_reader_refuses_version_7(monkeypatch):
    store = MemoryStore()
    m = CheckpointManager(store)
    m.save("small", [{"role": "user", "content": "hi"}])
    save_run(m, "big", run_msgs(0, 1))
    rk_small, rk_big = m.repo.run_key("small"), m.repo.run_key("big")
    small = store.get(keys.manifest_key(rk_small, 0))
    big = store.get(keys.manifest_key(rk_big, 0))
    assert open_manifest("m", small)[0] == MANIFEST_VERSION_ARRAYS
    assert open_manifest("m", big)[0] == MANIFEST_VERSION_SHARED_DICT
    monkeypatch.setattr(manifest_mod, "MANIFEST_VERSION_MAX", MANIFEST_VERSION_ARRAYS)  # the previous release
    Manifest.from_bytes(keys.manifest_key(rk_small, 0), small)
    with pytest.raises(UnsupportedFormatError):
        Manifest.from_bytes(keys.manifest_key(rk_big, 0), big)


def test_a_kind_6_block_needs_its_shared_object_and_names_only_shared_packs():
    msg = json.dumps(SYSTEM).encode()
    item = json.dumps(run_msgs(0, 1)[2]).encode()
    pb = PackBuilder(b"\x01" * 8)
    with pytest.raises(Exception):
        pb.set_array_dictionary(b"\x01" * 8, b"\x02" * 16, msg)  # not a shared pack id
    pb.set_array_dictionary(b"\xff" + b"\x00" * 7, b"\x02" * 16, msg)
    pb.add_item([(b"\x03" * 16, item)])
    data, _ = pb.build()
    p = Pack.parse("packs/01/x", data, b"\x01" * 8)
    (bi, b), = [(i, b) for i, b in enumerate(p.blocks) if b.array]
    assert b.shared == (b"\xff" + b"\x00" * 7, b"\x02" * 16)
    with pytest.raises(IntegrityError, match="shared object"):
        p.raw_block(bi)  # no reader of shared objects at hand
    p.shared_dicts = lambda pid, cid: msg
    assert p.raw_block(bi) == b"[" + item + b"]"
    # a kind-6 block naming an ordinary pack is malformed
    bad = bytearray(data)
    at = bad.index(b"\xff" + b"\x00" * 7)
    bad[at] = 0x01
    hdr_end = len(bad) - 20
    import blake3
    bad[-16:] = blake3.blake3(bytes(bad[:hdr_end + 4])).digest(16)
    with pytest.raises(IntegrityError, match="not a shared object"):
        Pack.parse("packs/01/x", bytes(bad), b"\x01" * 8)


def test_gc_keeps_the_shared_object_a_dictionary_needs_after_the_prompt_left_every_list():
    """Run ``a`` drops its system prompt (a rewrite keeping the rest) and is pruned to that
    checkpoint: no live list holds the prompt any more, but ``a``'s tier pack still holds the live
    messages, compressed against it. GC (grace 0) must keep the shared object; the other run
    deleted, it is ``a``'s blocks alone that need it."""
    store = MemoryStore()
    m = CheckpointManager(store, gc_grace_period=0)
    msgs = run_msgs(0, 5)
    save_run(m, "a", msgs)
    save_run(m, "b", run_msgs(1, 2))
    m.save("a", msgs[1:])  # the prompt gone from the newest list
    m.prune(keep_last=1, run_id="a")
    m.delete("b")
    gc(m.repo, grace_period=0)
    assert len(shared_keys(store)) == 1
    fresh = CheckpointManager(store)
    assert fresh.latest("a").messages == msgs[1:]
    assert not fresh.verify(read_data=True).errors


def test_a_fork_reads_exactly_after_its_source_is_deleted_and_collected():
    store = MemoryStore()
    m = CheckpointManager(store, gc_grace_period=0)
    msgs = run_msgs(2, 3)
    save_run(m, "src", msgs)
    m.fork("src", m.latest("src").id, "fork")
    more = msgs + run_msgs(3, 3)[2:]
    save_run(m, "fork", more)
    m.delete("src")
    gc(m.repo, grace_period=0)
    fresh = CheckpointManager(store)
    assert fresh.latest("fork").messages == more
    assert not fresh.verify(read_data=True).errors


def test_archived_runs_read_back_exactly():
    store = MemoryStore()
    m = CheckpointManager(store, gc_grace_period=0)
    want = {f"r{r}": run_msgs(r, 5) for r in range(2)}
    for run, msgs in want.items():
        save_run(m, run, msgs)
    m.archive(list(want))
    gc(m.repo, grace_period=0)
    fresh = CheckpointManager(store)
    for run, msgs in want.items():
        assert fresh.latest(run).messages == msgs
    assert not fresh.verify(read_data=True).errors


def test_a_ranged_read_of_dictionary_packs_restores_exactly(tmp_path):
    """A fresh reader reading packs with byte ranges (a small suffix first, then the blocks it
    needs) decompresses the kind-6 blocks it fetches with the shared message."""
    store = LocalStore(tmp_path / "repo", fsync=False)
    m = CheckpointManager(store)
    msgs = run_msgs(5, 12)
    save_run(m, "long", msgs)
    m.close()
    fresh = CheckpointManager(LocalStore(tmp_path / "repo"))
    fresh.repo.cache.RANGE_TAIL = 1024
    fresh.repo.cache.range_tail = lambda m: 1024  # every pack longer than 1 KiB read in ranges
    assert fresh.latest("long").messages == msgs
    # a pack with kind-6 blocks was read in ranges
    assert any(not p.whole and any(b.shared for b in p.blocks) for p in fresh.repo.cache.packs.values())
    for k, s in enumerate(reversed(fresh.list("long"))):
        assert fresh.get("long", s.id).messages == msgs[:4 + 2 * k]
    fresh.close()
