"""Session state as a deduplicated value tree (docs/format.md §7): exact round trips, what a save
costs, garbage collection keeping the pieces, forks, ``stats``, damaged objects, and repositories
written by the previous release (inline states and ``session_state_ref``)."""

from __future__ import annotations

import base64
import importlib.util
import json
import random
import subprocess
import sys

import pytest

from tests.helpers.fake_text import text
from tests.helpers.old_release import extract_release
from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import keys
from snapstore.format.codec import encode_json
from snapstore.format.manifest import MANIFEST_VERSION_VALUE_TREE, Manifest
from snapstore.format.pack import T_CHUNK, T_NODE, T_VALUE, Pack
from snapstore.format.valuetree import PIECE_MAX, ValueTree, split_value
from snapstore.stores import LocalStore
from snapstore.stores.memory import MemoryStore
from tests.helpers import paths

ROOT = paths.ROOT
PREVIOUS_COMMIT = "14ad0c1"
"""The last commit that wrote large session states as one chunk (``session_state_ref``)."""


def _bench():
    spec = importlib.util.spec_from_file_location("storage_bench", ROOT / "benchmarks" / "storage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _same(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)


def _stored(store) -> int:
    return sum(i.size for i in store.list(""))


def _state(rng, n_keys=40, key_bytes=2000):
    return {f"k{i}": text(rng, key_bytes) for i in range(n_keys)}


# ------------------------------------------------------------------------------------------------
# cutting

@pytest.mark.parametrize("shape", ["dict", "list", "nested", "leaf", "exact", "deep", "empties"])
def test_pieces_concatenate_to_the_exact_encoding(shape):
    rng = random.Random(1)
    value = {
        "dict": _state(rng),
        "list": [{"role": "tool", "content": text(rng, 3000), "n": i} for i in range(60)],
        "nested": {"a": {"b": [_state(rng, 5, 3000), {"c": text(rng, 90_000)}], "d": 1.5e300}, "e": None},
        "leaf": text(rng, 300_000),
        "exact": {"big": 2 ** 100, "s": "\udead" + text(rng, 20_000), "l": [text(rng, 5000) for _ in range(5)]},
        "deep": {"x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[text(rng, 9000)] * 3]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},
        "empties": {"": [], "e": {}, "z": "", "l": [[], {}, "", 0] * 2000},
    }[shape]
    raw, exact = encode_json(value)
    pieces = split_value(value, raw, exact)
    assert b"".join(pieces) == raw
    assert all(0 < len(p) <= PIECE_MAX for p in pieces)


def test_one_changed_key_changes_few_pieces():
    rng = random.Random(2)
    s1 = _state(rng, 100, 3000)
    s2 = dict(s1)
    s2["k57"] = "changed"
    p1 = set(split_value(s1, *encode_json(s1)))
    p2 = split_value(s2, *encode_json(s2))
    new = [p for p in p2 if p not in p1]
    assert sum(map(len, new)) < 8000, [len(p) for p in new]


# ------------------------------------------------------------------------------------------------
# round trips and costs

@pytest.mark.parametrize("value", [
    {"big": 2 ** 80, "s": "\ud800 lone", "blob": "x" * 10_000},
    ["é" * 50_000, {"k": [1, 2.5, None, True]}],
    "just a long string " * 20_000,
    {"z": 1, "a": 2, "m": [{"b": 1, "a": 2}] * 3000},
])
def test_large_states_round_trip_exactly(tmp_path, value):
    mgr = CheckpointManager(tmp_path)
    cid = mgr.save("r", [{"role": "user", "content": "hi"}], session_state=value)
    m = mgr.repo.find_checkpoint(mgr.repo.run_key("r"), cid)
    assert m.session_state_tree is not None and m.session_state_ref is None
    got = CheckpointManager(tmp_path).get("r", cid).session_state
    assert _same(got, value) and got == value


def test_one_key_state_costs_the_key_per_save(tmp_path):
    """The storage benchmark's one-key workload (a 400 KB state with a base64 image whose step
    counter changes), with fewer saves: each save after the first stores at most 4 KB."""
    bench = _bench()
    r = bench.run_state_one_key(tmp_path, saves=24)
    assert r["state_bytes"] > 400_000
    assert r["per_save_bytes"] <= bench.STATE_PER_SAVE_MAX, r
    assert r["read_amplification"] <= bench.READ_AMP_MAX, r


def test_growing_state_costs_the_new_steps(tmp_path):
    """A whole agent state (the message list kept in the state, growing every step) stores within
    1.5x of the same histories saved as messages, and a cold latest() reads at most about twice
    its own compressed bytes."""
    rng = random.Random(5)
    hist, cps = [], []
    for i in range(60):
        hist = hist + [{"role": "assistant", "content": text(rng, 400), "step": i},
                       {"role": "tool", "content": text(rng, 1500)}]
        cps.append(hist)
    sizes = {}
    for mode in ("messages", "state"):
        store = MemoryStore()
        mgr = CheckpointManager(store)
        for i, cp in enumerate(cps):
            if mode == "messages":
                mgr.save("r", cp)
            else:
                mgr.save("r", [], session_state={"messages": cp, "step": i})
        sizes[mode] = _stored(store)
        if mode == "state":
            before = store.stats.snapshot()
            cold = CheckpointManager(store)
            assert _same(cold.latest("r").session_state, {"messages": cps[-1], "step": 59})
            read = store.stats.since(before).bytes_down
            own = MemoryStore()
            CheckpointManager(own).save("r", [], session_state={"messages": cps[-1], "step": 59})
            assert read <= 2 * _stored(own), (read, _stored(own))
    assert sizes["state"] <= 1.5 * sizes["messages"], sizes


def test_whole_agent_state_benchmark_on_a_shared_run(shared_dir, tmp_path):
    path = shared_dir / "claudecode-cctrace-phase0.jsonl"
    if not path.exists():
        pytest.skip(f"{path} not found")
    bench = _bench()
    r = bench.run_state_whole_agent(path, tmp_path, limit=40)
    assert r["state_over_messages"] <= bench.STATE_VS_MESSAGES_MAX, r
    assert r["state_read_amplification"] <= bench.READ_AMP_MAX, r


def test_a_save_with_a_changed_state_makes_the_usual_two_puts():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    rng = random.Random(3)
    s = _state(rng)
    mgr.save("r", [{"role": "user", "content": "a"}], session_state=s)
    mgr.save("r", [{"role": "user", "content": "a"}], session_state=dict(s, k3="new"))  # first tier
    before = store.stats.snapshot()
    mgr.save("r", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
             session_state=dict(s, k3="newer"))
    d = store.stats.since(before)
    assert d.counts["PUT"] == 2 and d.counts["GET"] == 0, d


def test_dedup_against_the_parent_tree_after_a_cold_start(tmp_path):
    rng = random.Random(4)
    s = _state(rng, 60, 4000)
    CheckpointManager(tmp_path).save("r", [], session_state=s)
    store = LocalStore(tmp_path, fsync=False)
    cold = CheckpointManager(store)  # a new process: reads the parent's tree to dedup against it
    cold.latest("r")
    before = store.stats.snapshot()
    cid = cold.save("r", [], session_state=dict(s, k10="changed"))
    assert store.stats.since(before).bytes_up < 6000
    assert CheckpointManager(tmp_path).get("r", cid).session_state == dict(s, k10="changed")


def test_unchanged_state_adds_nothing_and_states_alternate(tmp_path):
    mgr = CheckpointManager(tmp_path)
    rng = random.Random(6)
    s = _state(rng)
    mgr.save("r", [1], session_state=s)
    before = mgr.store.stats.snapshot()
    mgr.save("r", [1, 2], session_state=s)
    m = mgr.repo.head(mgr.repo.run_key("r"))
    prev = mgr.repo.read_manifest_key(keys.manifest_key(mgr.repo.run_key("r"), 0))
    assert m.session_state_tree == prev.session_state_tree  # same tree, same hint
    assert mgr.store.stats.since(before).bytes_up < 2000
    mgr.save("r", [1, 2, 3], session_state=None)
    cid = mgr.save("r", [1, 2, 3, 4], session_state=s)
    assert CheckpointManager(tmp_path).get("r", cid).session_state == s


# ------------------------------------------------------------------------------------------------
# garbage collection, forks, stats

def _states(n, rng):
    base = _state(rng, 30, 3000)
    return [dict(base, step=i, notes=text(rng, 6000)) for i in range(n)]


def test_gc_keeps_state_pieces_when_per_save_packs_are_repacked(format1_writes):
    """Segments off: GC repacks the per-save packs by what mark finds live and deletes them (grace
    0). If mark missed the value tree's spine, nodes or pieces, the state could not be read."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    states = _states(12, random.Random(7))
    ids = [mgr.save("r", [{"role": "user", "content": f"m{i}"}], session_state=s) for i, s in enumerate(states)]
    mgr.prune(keep_last=3)
    packs_before = {i.key for i in store.list(keys.PACKS)}
    for _ in range(2):
        mgr.gc(grace_period=0)
    assert not packs_before & {i.key for i in store.list(keys.PACKS)}  # every original pack is gone
    cold = CheckpointManager(store)
    for cid, s in zip(ids[-3:], states[-3:]):
        assert cold.get("r", cid).session_state == s
    assert cold.verify(read_data=True).ok


def test_gc_rewrite_of_a_mostly_dead_tier_pack_keeps_the_state():
    """Format 2: after a rollback most of the run's tier pack is dead and GC rewrites it with
    exactly the entries mark found live; the state of the remaining checkpoint must be among them."""
    store = MemoryStore()
    mgr = CheckpointManager(store)
    states = _states(16, random.Random(8))
    ids = [mgr.save("r", [{"role": "user", "content": "m"}], session_state=s) for s in states]
    mgr.rollback("r", ids[0])
    for _ in range(3):
        mgr.gc(grace_period=0, max_unused=0.1)
    cold = CheckpointManager(store)
    assert cold.latest("r").session_state == states[0]
    rep = cold.verify(read_data=True)
    assert rep.ok, [str(p) for p in rep.errors]


def test_fork_copies_the_state_tree():
    store = MemoryStore()
    mgr = CheckpointManager(store)
    states = _states(6, random.Random(9))
    ids = [mgr.save("r", [{"role": "user", "content": "m"}], session_state=s) for s in states]
    mgr.fork("r", ids[2], "f")
    mgr.delete("r")
    for _ in range(2):
        mgr.gc(grace_period=0)
    assert CheckpointManager(store).latest("f").session_state == states[2]


def test_stats_counts_session_state_in_the_logical_size(tmp_path):
    mgr = CheckpointManager(tmp_path)
    rng = random.Random(10)
    big = _state(rng)
    small = {"cwd": "/repo"}
    mgr.save("r", [], session_state=big)
    mgr.save("r", [{"role": "user", "content": "hi"}], session_state=small)
    st = mgr.stats()
    want = len(encode_json(big)[0]) + len(encode_json(small)[0])
    assert st["session_state_bytes"] == want
    assert st["logical_bytes"] == want + st["message_bytes"] and st["ratio"] > 1.0


# ------------------------------------------------------------------------------------------------
# damaged objects

def test_malformed_tree_field_is_an_integrity_error_naming_the_manifest():
    for bad in (["zz", 1, 0, "00" * 16, "00" * 8], [], ["00" * 16, -1, 0, "00" * 16, "00" * 8],
                ["00" * 16, 5, 7, "00" * 16, "00" * 8], ["00" * 16, 5, 0, "00" * 16, "0" * 16 + "0"]):
        with pytest.raises(ValueError):
            ValueTree.from_json(bad)
    m = Manifest(kind="checkpoint", run_id="r", seq=0, write_id="w", created=__import__("datetime").datetime.now(
        __import__("datetime").timezone.utc), checkpoint_id="c")
    m.session_state_tree = ValueTree(b"\0" * 16, 10, 0, b"\1" * 16, b"\2" * 8)
    data = m.to_bytes()
    assert data[4] == MANIFEST_VERSION_VALUE_TREE + 2  # version 5 (4's compact records, array blocks), which may hold a value tree
    assert Manifest.from_bytes("k", data, run_id="r").session_state_tree == m.session_state_tree
    from snapstore.format.codec import dumps_exact, seal_envelope
    from snapstore.format.manifest import open_manifest
    body = json.loads(open_manifest("k", data)[1])
    body["session_state_tree"][1] = "ten"
    bad = seal_envelope(b"SNMF", data[4], b"\0" + dumps_exact(body), compress=False)  # body codec 0: JSON
    with pytest.raises(IntegrityError, match="runs/boi/m/0.*session_state_tree"):  # "boi": run "r"
        Manifest.from_bytes("runs/boi/m/0", bad)


def _rewrite_entry(store, key, etype, mutate):
    """Rewrite one entry of the pack at ``key`` (a valid pack again, ids unchanged)."""
    from snapstore.format.pack import PackBuilder
    p = Pack.parse(key, store.get(key))
    pb = PackBuilder(p.id)
    for (t, i), e in p.entries.items():
        raw = p.entry_bytes(e, None if p.blocks[e.block].dict is None else b"")
        pb.add(t, i, mutate(raw) if t == etype else raw)
    data, _ = pb.build()
    store.delete_many([key])
    store.put(key, data)


@pytest.mark.parametrize("etype", [T_VALUE, T_CHUNK])
def test_damaged_tree_entries_are_integrity_errors_naming_the_pack(etype):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    cid = mgr.save("r", [], session_state=_state(random.Random(11)))
    key = next(i.key for i in store.list(keys.PACKS))
    _rewrite_entry(store, key, etype, lambda raw: raw[:-1] + bytes([raw[-1] ^ 1]))
    with pytest.raises(IntegrityError, match=key.split("/")[-1]):
        CheckpointManager(store).get("r", cid)
    rep = CheckpointManager(store).verify(read_data=True)
    assert not rep.ok


def test_size_mismatch_is_refused_before_reading_pieces(tmp_path):
    mgr = CheckpointManager(tmp_path)
    cid = mgr.save("r", [], session_state=_state(random.Random(12)))
    m = mgr.repo.find_checkpoint(mgr.repo.run_key("r"), cid)
    lie = m.session_state_tree._replace(size=m.session_state_tree.size + 1)
    with pytest.raises(IntegrityError, match="pieces hold"):
        CheckpointManager(tmp_path).repo.read_value(lie)


# ------------------------------------------------------------------------------------------------
# repositories of the previous release

OLD_WRITER = r'''
import json, sys
from snapstore import CheckpointManager
root, out = sys.argv[1], sys.argv[2]
m = CheckpointManager(root)
states = [{"cwd": "/repo", "i": 0},                                   # inline
          {"blob": "x" * 6000, "big": 2 ** 70, "s": "\udead"},        # one chunk (session_state_ref)
          {"blob": " ".join(str(i) for i in range(40000))}]           # pieces (session_state_ref)
ids = [m.save("r", [{"role": "user", "content": "m%d" % i}], session_state=s) for i, s in enumerate(states)]
json.dump({"ids": ids, "states": [json.dumps(s) for s in states]}, open(out, "w"))
'''

OLD_READER = r'''
import sys
from snapstore import CheckpointManager
try:
    CheckpointManager(sys.argv[1]).latest("r")
except Exception as e:
    print(type(e).__name__, e)
'''


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory):
    base = tmp_path_factory.mktemp("previous")
    return base, extract_release(PREVIOUS_COMMIT, base)


def _run_old(previous, script, *args):
    base, src = previous
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=str(base),
                          env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=300)


def test_states_of_the_previous_release_read_continue_and_survive_gc(previous_release, tmp_path):
    root, out = tmp_path / "repo", tmp_path / "expect.json"
    proc = _run_old(previous_release, OLD_WRITER, root, out)
    assert proc.returncode == 0, proc.stderr
    expect = json.loads(out.read_text())
    store = LocalStore(root, fsync=False)
    mgr = CheckpointManager(store)
    kinds = []
    for cid, want in zip(expect["ids"], expect["states"]):
        m = mgr.repo.find_checkpoint(mgr.repo.run_key("r"), cid)
        kinds.append("ref" if m.session_state_ref else "inline")
        assert json.dumps(CheckpointManager(store).get("r", cid).session_state) == want
    assert kinds == ["inline", "ref", "ref"]
    # this version continues the run: the next large state is a value tree
    new_state = {"blob": " ".join(str(i) for i in range(40000)), "step": 4}
    cid = mgr.save("r", [{"role": "user", "content": "m2"}, {"role": "user", "content": "m3"}], session_state=new_state)
    assert mgr.repo.find_checkpoint(mgr.repo.run_key("r"), cid).session_state_tree is not None
    for _ in range(2):
        mgr.gc(grace_period=0)
    fresh = CheckpointManager(LocalStore(root, fsync=False))
    for c, want in zip(expect["ids"], expect["states"]):
        assert json.dumps(fresh.get("r", c).session_state) == want
    assert fresh.get("r", cid).session_state == new_state
    assert fresh.verify(read_data=True).ok
    # the previous release refuses the value-tree record instead of returning it without its state
    proc = _run_old(previous_release, OLD_READER, root)
    assert "UnsupportedFormatError" in proc.stdout, (proc.stdout, proc.stderr)


def test_base64_blob_in_state_dedups_like_in_a_message(tmp_path):
    """The issue's case: the same blob inside a message dedups; inside the state it does now too."""
    img = base64.b64encode(random.Random(13).randbytes(200_000)).decode()
    costs = {}
    for where in ("message", "state"):
        store = MemoryStore()
        mgr = CheckpointManager(store)
        for i in range(10):
            if where == "message":
                mgr.save("r", [{"role": "user", "content": img}, {"role": "user", "content": f"step {i}"}])
            else:
                mgr.save("r", [{"role": "user", "content": f"step {i}"}], session_state={"image": img, "step": i})
        costs[where] = _stored(store)
    assert costs["state"] <= 1.2 * costs["message"], costs


def test_cli_stats_of_a_repository_of_states(tmp_path):
    """The issue's case: a repository holding only session states showed "ratio 0.00x"."""
    from click.testing import CliRunner
    from snapstore.cli import cli
    mgr = CheckpointManager(tmp_path)
    rng = random.Random(14)
    s = _state(rng)
    for i in range(5):
        mgr.save("r", [], session_state=dict(s, step=i))
    out = CliRunner().invoke(cli, ["--repo", str(tmp_path), "stats"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "session state" in out.stdout and "ratio" in out.stdout and "0.00x" not in out.stdout, out.stdout
    st = json.loads(CliRunner().invoke(cli, ["--repo", str(tmp_path), "stats", "--json"]).stdout)
    assert st["session_state_bytes"] == 5 * len(encode_json(dict(s, step=0))[0])
    assert st["ratio"] > 3, st


def test_value_tree_on_s3_over_http(s3_http_store):
    """The same on S3 (moto's HTTP server): saves, a cold read, GC keeping the pieces."""
    mgr = CheckpointManager(s3_http_store)
    states = _states(6, random.Random(15))
    ids = [mgr.save("r", [{"role": "user", "content": "m"}], session_state=s) for s in states]
    mgr.prune(keep_last=2)
    for _ in range(2):
        mgr.gc(grace_period=0)
    cold = CheckpointManager(s3_http_store)
    assert cold.latest("r").session_state == states[-1]
    assert cold.get("r", ids[-2]).session_state == states[-2]
    assert cold.verify(read_data=True).ok


def test_state_pieces_equal_to_dictionary_messages_stay_readable(tmp_path):
    """A session state holding the run's own messages (an importer keeping the file's record) has
    pieces with the same content ids as message chunks the save's data-block dictionary is made of.
    Those chunks must not land in the block that dictionary compresses, or a fresh reader resolving
    the dictionary needs the block it is decompressing (it recursed until RecursionError)."""
    import random as _r

    from snapstore import CheckpointManager
    from snapstore.stores import LocalStore

    rng = _r.Random(7)
    msgs = [{"role": "user" if i % 2 else "assistant",
             "content": "".join(rng.choice("abcdefgh ijk\n") for _ in range(2500))} for i in range(6)]
    root = tmp_path / "repo"
    with CheckpointManager(LocalStore(root, fsync=False)) as mgr:
        for k in range(1, 5):  # the 4th save merges the first four packs into a tier pack
            mgr.save("r", msgs[:k])
        cid = mgr.save("r", msgs, session_state={"record": {"history": msgs[:4], "note": "kept"}})
    with CheckpointManager(LocalStore(root, fsync=False)) as fresh:
        cp = fresh.get("r", cid)
        assert cp.messages == msgs and cp.session_state["record"]["history"] == msgs[:4]
    with CheckpointManager(LocalStore(root, fsync=False)) as fresh:
        assert fresh.latest("r").messages == msgs
        assert fresh.verify(read_data=True).ok
