"""Damage to any stored object is detected and named, never returned as data.

A small repository (several checkpoints, a caller-supplied checkpoint id so an index record exists,
a large session state stored as a chunk, a >64 KiB message split into pieces, an edited history) is
built once. Then every object file in it is damaged in turn (one byte flipped at several positions,
truncated, replaced by another object's bytes, deleted) and every checkpoint is read back with a fresh
manager (fresh cache). Each read must either return exactly the saved data or raise the typed error
naming the damaged object's key, and some read or ``verify`` must name it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from snapstore import CheckpointManager
from snapstore.errors import (CheckpointNotFound, IntegrityError, ObjectNotFound, RepositoryError, SnapstoreError,
                              UnsupportedFormatError)
from snapstore.format.config import FORMAT_VERSION, RepoConfig
from snapstore.repo.repository import Repository
from snapstore.stores import LocalStore

RUN = "run-1"
OTHER = "run-2"


def _text(n, seed):
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghij klmnop\n") for _ in range(n))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """Build the small repository; return (root, expected) where expected maps cid -> (messages, state)."""
    root = tmp_path_factory.mktemp("integrity") / "repo"
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    expected = {}
    order = []
    msgs: list = [{"role": "system", "content": "You are a test."}]
    big = _text(150_000, 1)
    for i in range(7):
        kwargs = {}
        if i == 0:
            msgs = msgs + [{"role": "user", "content": "task " * 30}]
        elif i == 2:
            msgs = msgs + [{"role": "tool", "content": big}]  # > 64 KiB: pieces
        elif i == 4:
            msgs = msgs[:2] + [{"role": "user", "content": "edited history"}] + msgs[3:]  # not an append
        else:
            msgs = msgs + [{"role": "assistant", "content": f"step {i} " * 40, "n": i}]
        if i == 3:
            kwargs["checkpoint_id"] = "custom-id-3"  # caller-supplied: an index record
        state = {"i": i, "memory": _text(6000, 100 + i)} if i in (1, 5) else {"i": i}
        cid = mgr.save(RUN, msgs, session_state=state, metadata={"i": i}, **kwargs)
        expected[cid] = (json.dumps(msgs), json.dumps(state))
        order.append(cid)
    # a second run, so the repository holds more than one run's manifests
    ocid = mgr.save(OTHER, [{"role": "user", "content": "other run"}])
    mgr.close()
    return root, expected, order, ocid


def _files(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for f in filenames:
            if not f.startswith("."):
                out.append(os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/"))
    return sorted(out)


@pytest.fixture
def repo(pristine, tmp_path):
    """A private copy of the pristine repository for one test."""
    root, expected, order, ocid = pristine
    dst = tmp_path / "repo"
    shutil.copytree(root, dst)
    return dst, expected, order, ocid


def _kind(key: str) -> str:
    if key == "config":
        return "config"
    if key.startswith("packs/"):
        return "pack"
    if "/m/" in key:
        return "manifest"
    if "/c/" in key:
        return "index"
    if key.startswith("runmarks/"):
        return "runmark"
    return "other"


def _damageable(root: Path) -> list[str]:
    """Every object whose bytes a reader uses: all but run markers (empty objects whose key is
    all they say, docs/format.md §13: their content is never read, so there is nothing to damage)
    and other empty objects (compacted records, §14)."""
    return [k for k in _files(root) if _kind(k) != "runmark" and (root / k).stat().st_size > 0]
    # (and empty objects: a compacted record, §14, has no bytes to damage; tests/repo/test_log_stubs.py
    # covers stubs without a valid copy)


def _read_all(root: Path, expected: dict, order: list, ocid: str) -> list[tuple[str, object]]:
    """Every read a user can do, each with a fresh manager; returns [(what, "ok" | "WRONG..." | exc)]."""
    out = []

    def attempt(what, fn):
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        try:
            res = fn(mgr)
            out.append((what, res))
        except Exception as e:  # noqa: BLE001 - classified by the caller
            out.append((what, e))
        finally:
            mgr.close()

    def latest(m):
        cp = m.latest(RUN)
        if cp is None:
            return "WRONG: latest() returned None"
        want = expected[order[-1]]
        ok = cp.id == order[-1] and json.dumps(cp.messages) == want[0] and json.dumps(cp.session_state) == want[1]
        return "ok" if ok else "WRONG: latest() returned other data"

    def get(cid):
        def f(m):
            cp = m.get(RUN, cid)
            want = expected[cid]
            ok = cp.id == cid and json.dumps(cp.messages) == want[0] and json.dumps(cp.session_state) == want[1]
            return "ok" if ok else f"WRONG: get({cid}) returned other data"
        return f

    def listing(m):
        ids = [s.id for s in m.list(RUN)]
        return "ok" if ids == order[::-1] else f"WRONG: list() returned {ids}"

    def other(m):
        cp = m.get(OTHER, ocid)
        return "ok" if cp.messages == [{"role": "user", "content": "other run"}] else "WRONG: other run"

    attempt("latest", latest)
    for cid in order:
        attempt(f"get {cid}", get(cid))
    def verifying(m):
        # segment tier packs are copies: a read that finds one damaged uses the per-save packs
        # (and a damaged per-save pack whose entries a tier also holds may never be read), so
        # such damage is found by verify, which names the object like a failing read does
        rep = m.verify(read_data=True)
        named = [p for p in rep.errors + rep.warnings if p.code.startswith(("corrupt", "missing"))]
        if named:
            raise _VerifyFound(named)
        return "ok"

    attempt("latest", latest)
    for cid in order:
        attempt(f"get {cid}", get(cid))
    attempt("list", listing)
    attempt("other run", other)
    attempt("verify", verifying)
    return out


class _VerifyFound(IntegrityError):
    """verify reported damage; ``keys`` are the objects its problems name."""

    def __init__(self, problems):
        super().__init__(problems[0].key, "; ".join(str(p) for p in problems))
        self.keys = {p.key for p in problems}


def _check(key: str, results, allowed=(IntegrityError,), config_extra=(UnsupportedFormatError, RepositoryError)):
    """Problems with the reads after damaging ``key`` (empty list: all good)."""
    problems = []
    errors = 0
    for what, res in results:
        if isinstance(res, str):
            if res != "ok":
                problems.append(f"{what}: {res} (silently wrong)")
            continue
        errors += 1
        ok_types = allowed + (_VerifyFound,) + (config_extra if key == "config" else ())
        if not isinstance(res, ok_types):
            problems.append(f"{what}: {type(res).__name__}: {res}")
        elif isinstance(res, _VerifyFound):
            if key not in res.keys:
                problems.append(f"{what}: names {sorted(res.keys)}, not {key}")
        elif isinstance(res, IntegrityError) or isinstance(res, ObjectNotFound):
            if key not in str(res):
                problems.append(f"{what}: error does not name {key}: {res}")
            if getattr(res, "key", key) != key:
                problems.append(f"{what}: error.key is {res.key!r}, expected {key!r}")
    if errors == 0:
        problems.append("damage not detected by any read")
    return problems


def test_pristine_repository_reads_back(repo):
    root, expected, order, ocid = repo
    res = _read_all(root, expected, order, ocid)
    assert all(r == "ok" for _, r in res), res
    kinds = {_kind(k) for k in _files(root)}
    assert kinds == {"config", "pack", "manifest", "index", "runmark"}, _files(root)


POSITIONS = {
    "first": lambda n: 0,
    "byte4": lambda n: 4,    # envelope/pack format version byte
    "byte5": lambda n: 5,    # envelope compression flag
    "byte6": lambda n: 6,    # envelope checksum / pack data
    "quarter": lambda n: n // 4,
    "middle": lambda n: n // 2,
    "last": lambda n: n - 1,
    "second_last_20": lambda n: max(0, n - 20),  # pack trailer: header length / checksum
}


@pytest.mark.parametrize("mask", [0x01, 0xFF], ids=["bit0", "allbits"])
@pytest.mark.parametrize("position", sorted(POSITIONS))
def test_flipped_byte_in_any_object_is_detected_and_named(repo, position, mask):
    root, expected, order, ocid = repo
    failures = {}
    for key in _damageable(root):
        path = root / key
        original = path.read_bytes()
        pos = POSITIONS[position](len(original))
        damaged = bytearray(original)
        damaged[pos] ^= mask
        path.write_bytes(bytes(damaged))
        try:
            problems = _check(key, _read_all(root, expected, order, ocid))
        finally:
            path.write_bytes(original)
        if problems:
            failures[f"{key} ({_kind(key)}) byte {pos} ^ {mask:#x}"] = problems
    assert not failures, json.dumps(failures, indent=1)


@pytest.mark.parametrize("how", ["empty", "half", "minus_one", "plus_garbage"])
def test_truncated_or_extended_object_is_detected_and_named(repo, how):
    root, expected, order, ocid = repo
    failures = {}
    for key in _damageable(root):
        path = root / key
        original = path.read_bytes()
        damaged = {"empty": b"", "half": original[:len(original) // 2], "minus_one": original[:-1],
                   "plus_garbage": original + b"\x00garbage"}[how]
        path.write_bytes(damaged)
        try:
            problems = _check(key, _read_all(root, expected, order, ocid))
        finally:
            path.write_bytes(original)
        if problems:
            failures[f"{key} ({_kind(key)})"] = problems
    assert not failures, json.dumps(failures, indent=1)


def _read_other(root: Path, ocid: str) -> list[tuple[str, object]]:
    """The reads of the second run (one checkpoint): latest and get, each with a fresh manager."""
    out = []
    want = [{"role": "user", "content": "other run"}]
    for what in ("latest", "get"):
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        try:
            cp = mgr.latest(OTHER) if what == "latest" else mgr.get(OTHER, ocid)
            ok = cp is not None and cp.id == ocid and cp.messages == want
            out.append((what, "ok" if ok else f"WRONG: {what} returned other data"))
        except Exception as e:  # noqa: BLE001
            out.append((what, e))
    return out


def test_every_byte_of_a_manifest_and_a_pack(repo):
    """Exhaustive: every single byte position of the second run's manifest and of its pack."""
    root, expected, order, ocid = repo
    files = _files(root)
    rk = [k for k in files if _kind(k) == "manifest"]
    run_dirs = sorted({k.split("/")[1] for k in rk})
    other_manifests = [k for k in rk if len([x for x in rk if x.split("/")[1] == k.split("/")[1]]) == 1]
    assert len(other_manifests) == 1, run_dirs
    manifest = other_manifests[0]
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    before = set(_files(root))
    assert mgr.get(OTHER, ocid)
    packs = [k for k in files if _kind(k) == "pack"]
    # the second run's pack: the one whose removal breaks reading it
    pack = None
    for k in packs:
        data = (root / k).read_bytes()
        (root / k).unlink()
        try:
            CheckpointManager(LocalStore(root, fsync=False)).get(OTHER, ocid)
        except ObjectNotFound:
            pack = k
        finally:
            (root / k).write_bytes(data)
    assert pack is not None and set(_files(root)) == before
    failures = {}
    for key in (manifest, pack):
        path = root / key
        original = path.read_bytes()
        for pos in range(len(original)):
            damaged = bytearray(original)
            damaged[pos] ^= 0x01
            path.write_bytes(bytes(damaged))
            try:
                problems = _check(key, _read_other(root, ocid))
            finally:
                path.write_bytes(original)
            if problems:
                failures[f"{key} byte {pos}"] = problems
    assert not failures, json.dumps(failures, indent=1)


def test_deleted_pack_raises_object_not_found_naming_key(repo):
    root, expected, order, ocid = repo
    failures = {}
    for key in [k for k in _files(root) if _kind(k) == "pack"]:
        path = root / key
        original = path.read_bytes()
        path.unlink()
        try:
            problems = _check(key, _read_all(root, expected, order, ocid), allowed=(ObjectNotFound,))
        finally:
            path.write_bytes(original)
        if problems:
            failures[key] = problems
    assert not failures, json.dumps(failures, indent=1)


@pytest.mark.parametrize("kind", ["pack", "manifest"])
def test_object_replaced_by_another_valid_object_is_detected(repo, kind):
    """A well-formed object under the wrong key (a pack copied over another pack, a manifest copied
    over another manifest: valid checksum, wrong place) is not served as the data of the key it
    sits under: a manifest's run and sequence number must match its key."""
    root, expected, order, ocid = repo
    files = _files(root)
    failures = {}
    for kind in (kind,):
        same = [k for k in files if _kind(k) == kind]
        for i, key in enumerate(same):
            donor = same[(i + 1) % len(same)]
            path = root / key
            original = path.read_bytes()
            path.write_bytes((root / donor).read_bytes())
            try:
                problems = _check(key, _read_all(root, expected, order, ocid))
            finally:
                path.write_bytes(original)
            if problems:
                failures[f"{key} <- {donor}"] = problems
    assert not failures, json.dumps(failures, indent=1)


def test_corrupt_config_is_reported(repo):
    root, expected, order, ocid = repo
    path = root / "config"
    original = path.read_bytes()
    for damaged in (b"", original[:10], original[:-1], b"SNCF" + original[4:10] + bytes(16) + original[26:]):
        path.write_bytes(damaged)
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        with pytest.raises((IntegrityError, RepositoryError)) as ei:
            mgr.latest(RUN)
        assert "config" in str(ei.value)
        # the damaged config is left alone (never "repaired" by re-initialising)
        assert path.read_bytes() == damaged
    path.write_bytes(original)


def test_deleted_manifest_only_loses_that_checkpoint(repo):
    root, expected, order, ocid = repo
    mgr = CheckpointManager(LocalStore(root, fsync=False))
    # a run's manifests live under runs/<run key>/m/; the first run is the one with len(order) of them
    keys_m = sorted(k for k in _files(root) if _kind(k) == "manifest")
    # delete the manifest of the second checkpoint (generated id naming its sequence number 1)
    cid = order[1]
    seq = int(cid.rsplit("-", 1)[1], 16)
    assert seq == 1
    run_dirs = {k.split("/")[1] for k in keys_m}
    target = [k for k in keys_m if k.endswith(f"/m/{2**64 - 1 - seq:016x}")
              and len([x for x in keys_m if x.split("/")[1] == k.split("/")[1]]) == len(order)]
    assert len(target) == 1, (target, run_dirs)
    target = target[0]
    (root / target).unlink()
    with pytest.raises(CheckpointNotFound):
        mgr.get(RUN, cid)
    for other in order:
        if other != cid:
            cp = CheckpointManager(LocalStore(root, fsync=False)).get(RUN, other)
            assert (json.dumps(cp.messages), json.dumps(cp.session_state)) == expected[other]


# --- repository format and config ------------------------------------------------------------------


def _snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def _all_operations(root: Path):
    def mgr():
        return CheckpointManager(LocalStore(root, fsync=False))
    return {
        "save": lambda: mgr().save(RUN, [{"role": "user", "content": "x"}]),
        "latest": lambda: mgr().latest(RUN),
        "get": lambda: mgr().get(RUN, "00000000000000000000-0"),
        "list": lambda: mgr().list(RUN),
        "runs": lambda: mgr().runs(),
        "delete": lambda: mgr().delete(RUN),
        "fork": lambda: mgr().fork(RUN, "00000000000000000000-0", "new"),
        "Repository.open": lambda: Repository.open(LocalStore(root, fsync=False)),
    }


@pytest.mark.parametrize("with_data", [False, True], ids=["empty", "with-data"])
def test_newer_format_version_is_refused_and_nothing_modified(tmp_path, with_data):
    root = tmp_path / "repo"
    store = LocalStore(root, fsync=True)
    if with_data:
        mgr = CheckpointManager(store)
        mgr.save(RUN, [{"role": "user", "content": "old"}])
        old = RepoConfig.from_bytes("config", store.get("config"))
        newer = RepoConfig(repo_id=old.repo_id, key=old.key, created=old.created, version=FORMAT_VERSION + 1)
        store.put_if_match("config", newer.to_bytes(), store.head("config").etag)
    else:
        cfg = RepoConfig(repo_id="0123456789abcdef", key=os.urandom(32), created=datetime.now(timezone.utc),
                         version=FORMAT_VERSION + 1)
        store.put("config", cfg.to_bytes())
    before = _snapshot(root)
    wrong = {}
    for name, op in _all_operations(root).items():
        try:
            op()
            wrong[name] = "no error"
        except UnsupportedFormatError as e:
            assert str(FORMAT_VERSION + 1) in str(e)
        except Exception as e:  # noqa: BLE001
            wrong[name] = f"{type(e).__name__}: {e}"
    assert not wrong, wrong
    assert _snapshot(root) == before


@pytest.mark.parametrize("content", [
    b"[core]\n\tbare = false\n",
    b'{"format": "something-else", "version": 1}',
    b"\x00" * 64,
], ids=["gitconfig", "json", "zeros"])
def test_foreign_config_file_is_a_clear_error(tmp_path, content):
    """A directory holding someone else's ``config`` (not even our magic bytes) is not a snapstore
    repository: ``RepositoryError`` as documented in snapstore.errors ("e.g. a foreign object at
    ``config``"), not "corrupt object", and nothing is written into it."""
    root = tmp_path / "foreign"
    root.mkdir()
    (root / "config").write_bytes(content)
    (root / "notes.txt").write_text("keep me")
    before = _snapshot(root)
    wrong = {}
    for name, op in _all_operations(root).items():
        try:
            op()
            wrong[name] = "no error"
        except RepositoryError as e:
            assert "config" in str(e) or str(root) in str(e), str(e)
        except Exception as e:  # noqa: BLE001
            wrong[name] = f"{type(e).__name__}: {e}"
    assert _snapshot(root) == before
    assert not wrong, wrong


@pytest.mark.parametrize("content", [b"", b"SNCF", b"SNCF\x01\x00" + bytes(16)], ids=["empty", "magic-only", "header-only"])
def test_damaged_config_is_a_clear_error(tmp_path, content):
    """A truncated snapstore config: RepositoryError or IntegrityError naming ``config``."""
    root = tmp_path / "damaged"
    root.mkdir()
    (root / "config").write_bytes(content)
    before = _snapshot(root)
    for name, op in _all_operations(root).items():
        with pytest.raises((RepositoryError, IntegrityError)) as ei:
            op()
        assert "config" in str(ei.value), (name, str(ei.value))
    assert _snapshot(root) == before


def test_foreign_config_never_overwritten(tmp_path):
    """Whatever the error class, a foreign config is never replaced and no data is written."""
    root = tmp_path / "foreign"
    root.mkdir()
    (root / "config").write_bytes(b"[core]\n")
    before = _snapshot(root)
    for name, op in _all_operations(root).items():
        with pytest.raises(SnapstoreError):
            op()
    assert _snapshot(root) == before


def test_init_twice_is_refused(tmp_path):
    store = LocalStore(tmp_path / "repo", fsync=True)
    repo = Repository.init(store)
    before = _snapshot(tmp_path / "repo")
    with pytest.raises(RepositoryError):
        Repository.init(store)
    with pytest.raises(RepositoryError):
        Repository.init(LocalStore(tmp_path / "repo"))
    assert _snapshot(tmp_path / "repo") == before
    again = Repository.init(store, exist_ok=True)
    assert again.config.repo_id == repo.config.repo_id and again.config.key == repo.config.key
    assert Repository.open(LocalStore(tmp_path / "repo")).config.repo_id == repo.config.repo_id


@pytest.mark.parametrize("exists", [True, False], ids=["empty-dir", "missing-dir"])
def test_repository_initialises_itself_on_first_save(tmp_path, exists):
    root = tmp_path / "new" / "repo"
    if exists:
        root.mkdir(parents=True)
    mgr = CheckpointManager(LocalStore(root, fsync=True))
    cid = mgr.save(RUN, [{"role": "user", "content": "hello"}])
    assert (root / "config").is_file()
    cfg = RepoConfig.from_bytes("config", (root / "config").read_bytes())
    assert cfg.version == FORMAT_VERSION
    fresh = CheckpointManager(str(root))
    assert fresh.get(RUN, cid).messages == [{"role": "user", "content": "hello"}]
    assert fresh.repo.config.repo_id == cfg.repo_id


def test_concurrent_first_saves_share_one_config(tmp_path):
    """Two managers (own store objects) initialising the same empty directory at once end up with
    one config: data written by each is readable by everyone."""
    root = tmp_path / "repo"
    results = {}
    errors = []
    barrier = threading.Barrier(4)

    def work(i):
        try:
            mgr = CheckpointManager(LocalStore(root, fsync=True))
            barrier.wait()
            results[i] = mgr.save(f"run{i}", [{"i": i, "content": "same text everywhere " * 20}])
        except BaseException as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    fresh = CheckpointManager(LocalStore(root, fsync=False))
    for i, cid in results.items():
        assert fresh.get(f"run{i}", cid).messages == [{"i": i, "content": "same text everywhere " * 20}]
