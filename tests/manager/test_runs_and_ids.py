"""Run ids and caller-supplied checkpoint ids are arbitrary strings: each keeps its own data, none
collide, none escape the repository directory, and invalid ones are refused with typed errors."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

import pytest

from snapstore import CheckpointManager
from snapstore.errors import (CheckpointNotFound, ConflictError, InvalidCheckpointIdError, InvalidInputError,
                              InvalidRunIdError)
from snapstore.stores import LocalStore, MemoryStore

NFC = unicodedata.normalize("NFC", "caf\u00e9")
NFD = unicodedata.normalize("NFD", "caf\u00e9")
assert NFC != NFD

# the inline/hashed boundary of the key encoding is at 59/60 UTF-8 bytes (95/96 base32 characters)
NEAR_LIMIT = ["n" * k for k in (57, 58, 59, 60, 61, 62)] + ["\u00e9" * 29, "\u00e9" * 30, "\u6771" * 20]

WEIRD_IDS = [
    "../x", "../../etc/passwd", "a/b", "a\\b", "A", "a", "..", ".", "/abs", "/", "//", "C:\\x", "C:", "x" * 10_000,
    "x" * 9_999 + "y", "\u6771\u4eac", "\U0001F916\U0001F680", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    NFC, NFD, " ", "  ", "\t", "\n", " a ", "a ", "\x00", "a\x00b", "\ud800", "x\udfffy", "runs", "packs", "config",
    "m", "c", ".hidden", "b", "bme", "hdeadbeef", "con", "NUL", "aux.txt", "%2e%2e", "a%2Fb", "*", "?", "~",
    "\u202eRTL", "\ufeffbom", "-", "_",
] + NEAR_LIMIT


def _tree(path: Path, skip: Path | None = None) -> dict:
    """{relative path: (size, mtime_ns) or None for a directory} below ``path``, not descending into
    ``skip`` (stat only: ``path`` may hold the whole session's temporary directories)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        if skip is not None:
            dirnames[:] = [d for d in dirnames if Path(dirpath, d) != skip]
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), path) + "/"] = None
        for f in filenames:
            st = os.lstat(os.path.join(dirpath, f))
            out[os.path.relpath(os.path.join(dirpath, f), path)] = (st.st_size, st.st_mtime_ns)
    return out


def _data_for(i: int, rid: str) -> list:
    return [{"role": "user", "content": f"run #{i}", "id": rid}, {"role": "assistant", "n": i}]


def test_weird_ids_are_distinct(tmp_path):
    assert len(set(WEIRD_IDS)) == len(WEIRD_IDS)


def test_run_ids_store_their_own_data_without_escaping(tmp_path):
    outer = tmp_path.parent
    repo = tmp_path / "repo"
    before = _tree(outer, skip=repo)
    mgr = CheckpointManager(LocalStore(repo, fsync=False))
    first = {}
    second = {}
    for i, rid in enumerate(WEIRD_IDS):
        first[rid] = mgr.save(rid, _data_for(i, rid), metadata={"i": i})
    for i, rid in enumerate(WEIRD_IDS):  # a second checkpoint each, interleaved across runs
        second[rid] = mgr.save(rid, _data_for(i, rid) + [{"role": "user", "content": "more", "i": i}])

    # nothing was written outside the repository directory
    assert _tree(outer, skip=repo) == before
    assert repo.is_dir()
    # every object key is made of safe characters only
    for dirpath, dirnames, filenames in os.walk(repo):
        for n in dirnames + filenames:
            assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789._-" for c in n), n
            assert len(n) < 200

    fresh = CheckpointManager(LocalStore(repo, fsync=False))
    assert fresh.runs() == sorted(WEIRD_IDS)
    for i, rid in enumerate(WEIRD_IDS):
        latest = fresh.latest(rid)
        assert latest.run_id == rid
        assert latest.id == second[rid]
        assert latest.messages == _data_for(i, rid) + [{"role": "user", "content": "more", "i": i}]
        cp = fresh.get(rid, first[rid])
        assert cp.messages == _data_for(i, rid) and cp.metadata == {"i": i} and cp.run_id == rid
        summaries = fresh.list(rid)
        assert [s.id for s in summaries] == [second[rid], first[rid]]
        assert all(s.run_id == rid for s in summaries)
        assert latest.parent_id == first[rid]


def test_nfc_and_nfd_and_case_are_different_runs(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    for rid in (NFC, NFD, "A", "a", "Run", "run", "RUN"):
        mgr.save(rid, [rid])
    fresh = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    for rid in (NFC, NFD, "A", "a", "Run", "run", "RUN"):
        assert fresh.latest(rid).messages == [rid]
    assert len(fresh.runs()) == 7


def test_deleting_one_run_leaves_look_alikes(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    ids = ["a", "A", "a/b", "a\\b", "x" * 10_000, "x" * 9_999 + "y", NFC, NFD]
    for rid in ids:
        mgr.save(rid, [rid])
    mgr.delete("a")
    mgr.delete("x" * 10_000)
    mgr.delete(NFC)
    fresh = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    assert fresh.runs() == sorted(set(ids) - {"a", "x" * 10_000, NFC})
    for rid in set(ids) - {"a", "x" * 10_000, NFC}:
        assert fresh.latest(rid).messages == [rid]
    assert fresh.latest("a") is None and fresh.latest(NFC) is None


def test_unknown_run_is_empty(tmp_path):
    mgr = CheckpointManager(MemoryStore())
    mgr.save("known", [1])
    assert mgr.latest("unknown") is None
    assert mgr.list("unknown") == []
    assert mgr.resume_point("unknown") is None
    with pytest.raises(CheckpointNotFound):
        mgr.get("unknown", "whatever")
    assert mgr.runs() == ["known"]


BAD_RUN_IDS = ["", None, 1, 0, b"run", ["a"], ("a",), {"a": 1}, 1.5, True]


@pytest.mark.parametrize("bad", BAD_RUN_IDS, ids=repr)
def test_bad_run_ids_refused(bad):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    good = mgr.save("good", [{"a": 1}])
    before = store.raw()
    calls = {
        "save": lambda: mgr.save(bad, [{"a": 1}]),
        "latest": lambda: mgr.latest(bad),
        "get": lambda: mgr.get(bad, good),
        "list": lambda: mgr.list(bad),
        "delete": lambda: mgr.delete(bad),
        "delete_one": lambda: mgr.delete(bad, good),
        "rollback": lambda: mgr.rollback(bad, good),
        "resume_point": lambda: mgr.resume_point(bad),
        "fork_source": lambda: mgr.fork(bad, good, "new"),
        "fork_target": lambda: mgr.fork("good", good, bad),
    }
    if bad is not None:  # prune(run_id=None) means "every run"
        calls["prune"] = lambda: mgr.prune(keep_last=1, run_id=bad)
    wrong = {}
    for name, call in calls.items():
        try:
            call()
            wrong[name] = "no error"
        except InvalidRunIdError as e:
            assert isinstance(e, InvalidInputError) and isinstance(e, ValueError)
        except Exception as e:  # noqa: BLE001
            wrong[name] = f"{type(e).__name__}: {e}"
    assert not wrong, wrong
    assert store.raw() == before
    assert mgr.runs() == ["good"]


# --- caller-supplied checkpoint ids ----------------------------------------------------------------

CHECKPOINT_IDS = WEIRD_IDS + ["00000000000000000000-5", "00000000000000000000-0", "ffffffffffffffffffff-1",
                              "custom-1", "Custom-1"]


def test_custom_checkpoint_ids(tmp_path):
    repo = tmp_path / "repo"
    outer = tmp_path.parent
    before = _tree(outer, skip=repo)
    mgr = CheckpointManager(LocalStore(repo, fsync=False))
    msgs: list = []
    saved = []
    for i, cid in enumerate(CHECKPOINT_IDS):
        msgs = msgs + [{"i": i, "cid": cid}]
        got = mgr.save("run", msgs, checkpoint_id=cid)
        assert got == cid
        saved.append((cid, list(msgs)))
    # the same ids in a second run are fine: ids are per run
    for cid in CHECKPOINT_IDS[:10]:
        mgr.save("other", [cid], checkpoint_id=cid)
    assert _tree(outer, skip=repo) == before

    fresh = CheckpointManager(LocalStore(repo, fsync=False))
    for k, (cid, m) in enumerate(saved):
        cp = fresh.get("run", cid)
        assert cp.id == cid and cp.messages == m and cp.seq == k
        assert cp.parent_id == (saved[k - 1][0] if k else None)
    assert [s.id for s in fresh.list("run")] == [c for c, _ in saved][::-1]
    assert fresh.latest("run").id == saved[-1][0]
    for cid in CHECKPOINT_IDS[:10]:
        assert fresh.get("other", cid).messages == [cid]
    # rollback by a custom id, then the later ids are gone
    target = saved[3][0]
    fresh.rollback("run", target)
    assert [s.id for s in fresh.list("run")] == [c for c, _ in saved[:4]][::-1]
    for cid, _ in saved[4:]:
        with pytest.raises(CheckpointNotFound):
            CheckpointManager(LocalStore(repo, fsync=False)).get("run", cid)


def test_duplicate_custom_checkpoint_id_conflicts(tmp_path):
    root = tmp_path / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    mgr.save("run", [1], checkpoint_id="dup")
    c2 = mgr.save("run", [1, 2], checkpoint_id="other")
    manifests_before = sorted(p for p in (root / "runs").rglob("*") if p.is_file() and p.parent.name == "m")
    with pytest.raises(ConflictError) as ei:
        mgr.save("run", [1, 2, 3], checkpoint_id="dup")
    assert "dup" in str(ei.value)
    manifests_after = sorted(p for p in (root / "runs").rglob("*") if p.is_file() and p.parent.name == "m")
    assert manifests_after == manifests_before
    fresh = CheckpointManager(LocalStore(root, fsync=False))
    assert [s.id for s in fresh.list("run")] == ["other", "dup"]
    assert fresh.get("run", "dup").messages == [1]
    # the manager goes on from the head it knows
    c3 = mgr.save("run", [1, 2, 3], checkpoint_id="third")
    assert fresh.get("run", c3).parent_id == c2


def test_duplicate_of_a_generated_checkpoint_id_conflicts(tmp_path):
    """A caller-supplied id equal to a live generated id of the run must not create a second
    checkpoint with the same id."""
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    gen = mgr.save("run", [1])
    with pytest.raises(ConflictError):
        mgr.save("run", [1, 2], checkpoint_id=gen)
    fresh = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    ids = [s.id for s in fresh.list("run")]
    assert ids == [gen]
    assert fresh.get("run", gen).messages == [1]


def test_checkpoint_id_reusable_after_its_checkpoint_is_gone(tmp_path):
    mgr = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    a = mgr.save("run", [1], checkpoint_id="a")
    mgr.save("run", [1, 2], checkpoint_id="b")
    mgr.rollback("run", a)
    mgr.save("run", [1, 3], checkpoint_id="b")  # "b" is no longer live: allowed
    fresh = CheckpointManager(LocalStore(tmp_path / "repo", fsync=False))
    assert fresh.get("run", "b").messages == [1, 3]
    assert [s.id for s in fresh.list("run")] == ["b", "a"]
    mgr.delete("run", "b")
    mgr.save("run", [1, 4], checkpoint_id="b")
    assert CheckpointManager(LocalStore(tmp_path / "repo", fsync=False)).get("run", "b").messages == [1, 4]


BAD_CHECKPOINT_IDS = ["", None, 5, b"x", ["a"], 1.0]


@pytest.mark.parametrize("bad", BAD_CHECKPOINT_IDS, ids=repr)
def test_bad_checkpoint_ids_refused(bad):
    store = MemoryStore()
    mgr = CheckpointManager(store)
    mgr.save("run", [1])
    before = store.raw()
    calls = {
        "get": lambda: mgr.get("run", bad),
        "rollback": lambda: mgr.rollback("run", bad),
        "fork": lambda: mgr.fork("run", bad, "new"),
    }
    if bad is not None:  # None is the default of these parameters ("generate one", "the head", "the run")
        calls["save_checkpoint_id"] = lambda: mgr.save("run", [1, 2], checkpoint_id=bad)
        calls["save_parent_id"] = lambda: mgr.save("run", [1, 2], parent_id=bad)
        calls["delete"] = lambda: mgr.delete("run", bad)
    wrong = {}
    for name, call in calls.items():
        try:
            call()
            wrong[name] = "no error"
        except InvalidCheckpointIdError as e:
            assert isinstance(e, InvalidInputError) and isinstance(e, ValueError)
        except Exception as e:  # noqa: BLE001
            wrong[name] = f"{type(e).__name__}: {e}"
    assert not wrong, wrong
    assert store.raw() == before


def test_unknown_checkpoint_ids(tmp_path):
    mgr = CheckpointManager(MemoryStore())
    c = mgr.save("run", [1])
    for unknown in ["nope", c + "0", c[:-1] + "9", "00000000000000000000-0", "../" + c]:
        with pytest.raises(CheckpointNotFound) as ei:
            mgr.get("run", unknown)
        assert isinstance(ei.value, LookupError)
        with pytest.raises(CheckpointNotFound):
            mgr.rollback("run", unknown)
        with pytest.raises(CheckpointNotFound):
            mgr.delete("run", unknown)
        with pytest.raises(CheckpointNotFound):
            mgr.fork("run", unknown, "new")
        with pytest.raises(CheckpointNotFound):
            mgr.save("run", [1, 2], parent_id=unknown)
    # a checkpoint id of one run is unknown in another
    mgr.save("run2", [2])
    with pytest.raises(CheckpointNotFound):
        mgr.get("run2", c)
    assert [s.id for s in mgr.list("run")] == [c]
