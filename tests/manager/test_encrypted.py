"""An encrypted repository end to end (docs/format.md §27) on a local directory and on S3
(moto's HTTP server): save, list, get, rollback, GC and verify work; objects swapped, moved to
another run or repository, flipped or dropped in as plaintext are refused with IntegrityError
(never wrong data); a wrong or missing passphrase is one typed error; no message text is found in
any stored byte."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.format.codec import open_envelope
from snapstore.errors import EncryptionError, IntegrityError, WrongPassphrase
from snapstore.importers import load_trajectory
from tests.helpers.shared_data import SHARED
from tests.helpers.sealed_fixtures import sealed_store

MARKER = "ZEBRA-CANARY-7731"
KINDS = ["local", "s3-http"]
TRAJ = SHARED / "minisweagent-astroid1333-chat.traj.json"


def sealed(inner, pw="correct horse"):
    return sealed_store(inner, pw)


def history(n, run="r"):
    msgs, out = [], []
    for i in range(n):
        msgs = msgs + [{"role": "user", "content": f"{MARKER} {run} turn {i} " + "lorem ipsum " * 200},
                       {"role": "tool", "content": f"result {i} {MARKER}"}]
        out.append(msgs)
    return out


def raw_objects(inner) -> dict[str, bytes]:
    return {i.key: inner.get(i.key) for i in inner.list("")}


def replace_raw(inner, key, data):
    inner.delete_many([key])
    inner.put(key, data)


def keys_of(inner, part):
    return sorted(i.key for i in inner.list("") if part in i.key)


@pytest.mark.parametrize("kind", KINDS + ["sqlite"])
def test_save_list_get_rollback_gc_verify_encrypted(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(sealed(inner))
    lists = history(40)
    ids = [mgr.save("r", lst, step=i, session_state={"secret": MARKER * 400}) for i, lst in enumerate(lists)]
    mgr.save("other", lists[3])
    fresh = CheckpointManager(sealed(inner))  # another machine: nothing cached
    assert fresh.latest("r").messages == lists[-1]
    assert fresh.get("r", ids[7]).messages == lists[7]
    assert [s.id for s in fresh.list("r")] == ids[::-1]
    assert fresh.runs() == ["other", "r"]
    fresh.rollback("r", ids[9])
    fresh.delete("other")
    report = fresh.gc(grace_period=0)
    assert report.reclaimed_bytes > 0
    again = CheckpointManager(sealed(inner))
    assert again.latest("r").messages == lists[9]
    assert again.latest("r").session_state == {"secret": MARKER * 400}
    assert again.runs() == ["r"]
    assert again.verify(read_data=True).ok
    stored = raw_objects(inner)
    cfg = json.loads(open_envelope("config", b"SNCF", stored["config"])[1])
    assert "key" not in cfg and cfg["encryption"]["slots"]  # the content key is not in the clear
    leaks = [k for k, v in stored.items() if MARKER.encode() in v or b"lorem ipsum" in v]
    assert leaks == []


@pytest.mark.parametrize("kind", KINDS)
def test_tampering_is_refused_never_wrong_data(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(sealed(inner))
    a, b = history(1, "a")[0], history(1, "b")[0]
    mgr.save("a", a)
    mgr.save("b", b)
    packs = keys_of(inner, "packs/")
    assert len(packs) == 2
    pa, pb = (inner.get(k) for k in packs)
    replace_raw(inner, packs[0], pb)  # the two runs' packs swapped
    replace_raw(inner, packs[1], pa)
    for run in ("a", "b"):
        with pytest.raises(IntegrityError, match="packs/"):
            CheckpointManager(sealed(inner)).latest(run)
    assert not CheckpointManager(sealed(inner)).verify(read_data=True).ok
    replace_raw(inner, packs[0], pa)
    replace_raw(inner, packs[1], pb)
    assert CheckpointManager(sealed(inner)).latest("a").messages == a
    # a manifest moved to another run
    ma, mb = keys_of(inner, "/m/")
    replace_raw(inner, mb, inner.get(ma))
    with pytest.raises(IntegrityError, match="/m/"):
        CheckpointManager(sealed(inner)).latest("b")  # (keys sort as runs a, b)
    # a flipped byte in each pack
    for k, data in zip(packs, (pa, pb)):
        bad = bytearray(data)
        bad[len(bad) // 2] ^= 1
        replace_raw(inner, k, bytes(bad))
    with pytest.raises(IntegrityError, match="packs/"):
        CheckpointManager(sealed(inner)).latest("a")


@pytest.mark.parametrize("kind", KINDS)
def test_objects_from_another_repository_or_plaintext_are_refused(kind, store_factory):
    one, two, plain = store_factory(kind), store_factory(kind), store_factory(kind)
    CheckpointManager(sealed(one)).save("r", history(2)[1])
    CheckpointManager(sealed(two)).save("r", history(1)[0])  # same passphrase, same run id
    CheckpointManager(plain).save("r", history(3)[2])
    head_key = keys_of(two, "/m/")[0]
    replace_raw(two, head_key, one.get(keys_of(one, "/m/")[0]))  # copied from the other repository
    with pytest.raises(IntegrityError, match=head_key):
        CheckpointManager(sealed(two)).latest("r")
    replace_raw(two, head_key, plain.get(keys_of(plain, "/m/")[0]))  # a plaintext record dropped in
    with pytest.raises(IntegrityError, match=head_key):
        CheckpointManager(sealed(two)).latest("r")
    for k in keys_of(plain, "packs/"):
        two.put(k, plain.get(k))  # plaintext packs beside: verify names them, nothing is read as data
    replace_raw(two, head_key, b"")  # a plaintext 0-byte object (a stub's size) in place of the head
    with pytest.raises(IntegrityError):
        CheckpointManager(sealed(two)).latest("r")


@pytest.mark.parametrize("kind", KINDS)
def test_passphrases(kind, store_factory, monkeypatch):
    inner = store_factory(kind)
    CheckpointManager(sealed(inner, "right")).save("r", history(1)[0])
    with pytest.raises(WrongPassphrase, match="^wrong passphrase"):
        CheckpointManager(inner, passphrase="wrong").latest("r")
    with pytest.raises(EncryptionError, match="is encrypted"):
        CheckpointManager(inner).latest("r")
    monkeypatch.setenv("SNAPSTORE_PASSPHRASE", "right")
    assert CheckpointManager(inner).latest("r").messages == history(1)[0]
    plain = store_factory(kind)
    monkeypatch.delenv("SNAPSTORE_PASSPHRASE")
    CheckpointManager(plain).save("p", history(1)[0])
    with pytest.raises(EncryptionError, match="not encrypted"):
        CheckpointManager(plain, passphrase="right").latest("p")


def test_cli_init_encrypt_key_add_remove(tmp_path):
    repo = str(tmp_path / "repo")
    run = CliRunner()
    env = {"SNAPSTORE_PASSPHRASE": "first"}
    out = run.invoke(cli, ["--repo", repo, "init", "--encrypt"], env=env)
    assert out.exit_code == 0 and "initialized encrypted" in out.output
    src = tmp_path / "run.json"
    src.write_text(json.dumps([{"role": "user", "content": MARKER}, {"role": "assistant", "content": "ok"}]))
    assert run.invoke(cli, ["--repo", repo, "import", str(src), "--run", "demo"], env=env).exit_code == 0
    out = run.invoke(cli, ["--repo", repo, "key", "add"], env={**env, "SNAPSTORE_NEW_PASSPHRASE": "second"})
    assert out.exit_code == 0, out.output
    new_slot = out.output.split()[-1]
    out = run.invoke(cli, ["--repo", repo, "export", "demo"], env={"SNAPSTORE_PASSPHRASE": "second"})
    assert out.exit_code == 0 and MARKER in out.stdout
    slots = run.invoke(cli, ["--repo", repo, "key", "list"], env=env).output.split("\n")
    first_slot = [s.split()[0] for s in slots if s and not s.startswith(new_slot)][0]
    assert run.invoke(cli, ["--repo", repo, "key", "remove", first_slot], env=env).exit_code == 0
    out = run.invoke(cli, ["--repo", repo, "list", "demo"], env=env)
    assert out.exit_code == 1 and out.output.strip().splitlines() == [out.output.strip()]
    assert "wrong passphrase" in out.output
    out = run.invoke(cli, ["--repo", repo, "key", "remove", new_slot], env={"SNAPSTORE_PASSPHRASE": "second"})
    assert out.exit_code == 1 and "last one" in out.output
    out = run.invoke(cli, ["--repo", repo, "verify", "--read-data"], env={"SNAPSTORE_PASSPHRASE": "second"})
    assert out.exit_code == 0, out.output
    copy = str(tmp_path / "copy")  # copied as stored (ciphertext), then verified with the passphrase
    out = run.invoke(cli, ["--repo", repo, "copy", copy], env={"SNAPSTORE_PASSPHRASE": "second"})
    assert out.exit_code == 0 and "verify: OK" in out.output, out.output
    out = run.invoke(cli, ["--repo", copy, "export", "demo"], env={"SNAPSTORE_PASSPHRASE": "second"})
    assert out.exit_code == 0 and MARKER in out.stdout
    for root, _dirs, files in [*os.walk(repo), *os.walk(copy)]:
        for f in files:
            assert MARKER.encode() not in open(os.path.join(root, f), "rb").read(), f


def test_cli_key_add_refuses_a_passphrase_a_slot_already_opens(tmp_path):
    repo = str(tmp_path / "repo")
    run = CliRunner()
    env = {"SNAPSTORE_PASSPHRASE": "first"}
    assert run.invoke(cli, ["--repo", repo, "init", "--encrypt"], env=env).exit_code == 0
    before = run.invoke(cli, ["--repo", repo, "key", "list"], env=env).output
    first_slot = before.split()[0]
    out = run.invoke(cli, ["--repo", repo, "key", "add"], env={**env, "SNAPSTORE_NEW_PASSPHRASE": "first"})
    assert out.exit_code == 1, out.output
    assert out.output.strip().splitlines() == [out.output.strip()]
    assert f"already opens key slot {first_slot}" in out.output and "no slot added" in out.output
    assert run.invoke(cli, ["--repo", repo, "key", "list"], env=env).output == before
    out = run.invoke(cli, ["--repo", repo, "key", "add"], env={**env, "SNAPSTORE_NEW_PASSPHRASE": "second"})
    assert out.exit_code == 0, out.output
    second_slot = out.output.split()[-1]
    # a passphrase that opens the second slot, added through the first one: refused, naming the second
    out = run.invoke(cli, ["--repo", repo, "key", "add"], env={**env, "SNAPSTORE_NEW_PASSPHRASE": "second"})
    assert out.exit_code == 1 and f"already opens key slot {second_slot}" in out.output, out.output
    assert len(run.invoke(cli, ["--repo", repo, "key", "list"], env=env).output.splitlines()) == 2


@pytest.mark.skipif(not TRAJ.is_file(), reason=f"shared trajectory {TRAJ} missing")
def test_a_real_agent_run_encrypted_on_s3(store_factory):
    _fmt, convs = load_trajectory(str(TRAJ))
    lists = convs[0].checkpoints
    inner = store_factory("s3-http")
    mgr = CheckpointManager(sealed(inner))
    ids = [mgr.save("agent", lst) for lst in lists]
    fresh = CheckpointManager(sealed(inner))
    assert fresh.latest("agent").messages == lists[-1]
    assert fresh.get("agent", ids[len(ids) // 2]).messages == lists[len(ids) // 2]
    probe = next(m["content"] for m in lists[-1] if isinstance(m.get("content"), str) and len(m["content"]) > 200)
    needle = probe[40:100].encode()
    assert not [k for k, v in raw_objects(inner).items() if needle in v]


def test_cli_an_empty_or_missing_passphrase_is_one_line(tmp_path):
    """An empty $SNAPSTORE_PASSPHRASE is an error saying so (it used to prompt and exit 130 with no
    line when stdin was not a terminal); so is no passphrase on a closed stdin. Nothing is created."""
    import subprocess
    import sys
    repo = tmp_path / "repo"
    base = {k: v for k, v in os.environ.items() if k not in ("SNAPSTORE_PASSPHRASE", "SNAPSTORE_NEW_PASSPHRASE")}
    # exit 2 for a bad value, 1 for no key at all (as every command that needs one and has none)
    for extra, needle, code in [({"SNAPSTORE_PASSPHRASE": ""}, "set but empty", 2), ({}, "no passphrase", 1)]:
        p = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(repo), "init", "--encrypt"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, env={**base, **extra})
        assert p.returncode == code and needle in p.stderr, (extra, p.returncode, p.stderr)
        assert not (repo / "config").exists()
