"""Data-key rotation (docs/format.md §27 "Rotation") on a local directory and on S3 (moto's HTTP
server): after `rotate` new objects are sealed under the new key id and old ones still read;
`rekey` rewrites every old object (copy then switch; a crash after any object loses nothing and a
second run finishes) and drops the retired key; a holder of the revoked passphrase and the old
config reads nothing afterwards; the CLI commands."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.errors import IntegrityError, WrongPassphrase
from snapstore.format import sealed2
from snapstore.maintenance import keyslots
from tests.helpers.sealed_fixtures import sealed_store

KINDS = ["local", "s3-http"]


def sealed(inner, pw="first"):
    return sealed_store(inner, pw)


def msgs(n, tag):
    return [{"role": "user", "content": f"{tag} {i} " * 50} for i in range(n)]


def key_ids(inner) -> dict[str, str]:
    out = {}
    for i in inner.list(""):
        if i.key != "config":
            out[i.key] = inner.get(i.key, (-sealed2.KEY_ID, None)).hex()  # (form 2: every object ends in its key id)
    return out


def snapshot(m):
    return {r: [(c.id, c.messages) for c in (m.get(r, s.id) for s in m.list(r))] for r in sorted(m.runs())}


@pytest.mark.parametrize("kind", KINDS)
def test_rotate_rekey_revoke(kind, store_factory):
    inner = store_factory(kind)
    first = sealed(inner)
    m = CheckpointManager(first)
    for i in range(5):
        m.save("r", msgs(i + 1, "old"))
    keyslots.add_slot(first, "second", scrypt_n=1024)  # a passphrase to revoke
    old_config = inner.get("config")
    old_id = first.key_id
    new_id = keyslots.rotate_key(first, scrypt_n=1024)
    assert new_id != old_id and set(key_ids(inner).values()) == {old_id}
    for i in range(5, 8):
        m.save("r", msgs(i + 1, "old"))  # the same manager: sealed under the new key now
    m.save("new-run", msgs(2, "new"))
    ids = key_ids(inner)
    assert {ids[k] for k in ids if k.startswith("runs/") and "/m/" in k} == {old_id, new_id}
    with pytest.raises(WrongPassphrase):
        CheckpointManager(sealed(inner, "second")).latest("r")  # its slot went with the rotation
    before = snapshot(CheckpointManager(sealed(inner)))
    assert [c[1] for c in before["r"]][0] == msgs(8, "old")
    # rekey, crashing after the third object: everything still reads; a second run finishes
    calls = []

    def crash(phase, done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt("killed")
    with pytest.raises(KeyboardInterrupt):
        keyslots.rekey(sealed(inner), progress=crash)
    assert snapshot(CheckpointManager(sealed(inner))) == before
    got = keyslots.rekey(sealed(inner))
    assert got["dropped"] == [old_id] and got["key_id"] == new_id and got["rewritten"] > 0
    assert set(key_ids(inner).values()) == {new_id}
    again = CheckpointManager(sealed(inner))
    assert snapshot(again) == before and again.verify(read_data=True).ok
    assert keyslots.rekey(sealed(inner)) == {"rewritten": 0, "dropped": [], "key_id": new_id}
    # the revoked passphrase with the config it could read before: opens the old key, reads nothing
    thief = store_factory(kind)
    for i in inner.list(""):
        thief.put(i.key, old_config if i.key == "config" else inner.get(i.key))
    with pytest.raises(IntegrityError, match=new_id):
        CheckpointManager(sealed(thief, "second")).latest("r")


def test_cli_rotate_and_rekey(tmp_path):
    repo = str(tmp_path / "repo")
    run = CliRunner()
    env = {"SNAPSTORE_PASSPHRASE": "cli rotate"}
    assert run.invoke(cli, ["--repo", repo, "init", "--encrypt"], env=env).exit_code == 0
    assert run.invoke(cli, ["--repo", repo, "import", "examples/demo-run.json", "--run", "demo"], env=env).exit_code == 0
    add = run.invoke(cli, ["--repo", repo, "key", "add"], env={**env, "SNAPSTORE_NEW_PASSPHRASE": "second one"})
    assert add.exit_code == 0, add.output
    second = add.output.split()[-1]
    listed = run.invoke(cli, ["--repo", repo, "key", "list"], env=env).output.splitlines()
    mine, = [line.split()[0] for line in listed if line.split()[0] != second]  # "<id>  scrypt n=..."
    out = run.invoke(cli, ["--repo", repo, "key", "rotate"], env=env)
    assert out.exit_code == 0 and "new data key" in out.output, out.output
    # only the other slot is listed to add back, not the one the passphrase opened (a trial's snag)
    assert out.output.count("passphrase: SNAPSTORE_NEW_PASSPHRASE=...") == 1, out.output
    assert f"(yours was {mine}):" in out.output and f"  {mine} " not in out.output, (mine, out.output)
    # the slot rotation dropped is named, with the command that adds it back
    assert f"{second} passphrase: SNAPSTORE_NEW_PASSPHRASE=... snapstore --repo {repo} key add" in out.output, out.output
    assert "you opened with is kept" in out.output and "2 slots; the 1 other than yours" in out.output, out.output
    out = run.invoke(cli, ["--repo", repo, "key", "rekey"], env=env)
    assert out.exit_code == 0 and "dropped retired key(s): " in out.output and "none" not in out.output, out.output
    out = run.invoke(cli, ["--repo", repo, "verify", "--read-data"], env=env)
    assert out.exit_code == 0, out.output
    out = run.invoke(cli, ["--repo", repo, "export", "demo", "-o", str(tmp_path / "x.json")], env=env)
    assert out.exit_code == 0, out.output


def test_cli_rekey_interrupted_says_what_is_done_and_resumes(tmp_path, monkeypatch):
    repo = str(tmp_path / "repo")
    run = CliRunner()
    env = {"SNAPSTORE_PASSPHRASE": "cli rekey"}
    assert run.invoke(cli, ["--repo", repo, "init", "--encrypt"], env=env).exit_code == 0
    assert run.invoke(cli, ["--repo", repo, "import", "examples/demo-run.json", "--run", "demo"], env=env).exit_code == 0
    assert run.invoke(cli, ["--repo", repo, "key", "rotate"], env=env).exit_code == 0
    real, calls = keyslots._rewrite, []

    def ctrl_c_at_the_third(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*a, **k)
    monkeypatch.setattr(keyslots, "_rewrite", ctrl_c_at_the_third)
    out = run.invoke(cli, ["--repo", repo, "key", "rekey"], env=env)
    assert out.exit_code == 130, out.output
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: 2 object(s) rewritten"), out.stderr
    assert f"snapstore --repo {repo} key rekey' again to resume" in lines[0] and "Traceback" not in out.output
    monkeypatch.setattr(keyslots, "_rewrite", real)
    out = run.invoke(cli, ["--repo", repo, "key", "rekey"], env=env)
    assert out.exit_code == 0 and "dropped retired key(s): " in out.output and "none" not in out.output, out.output
    assert run.invoke(cli, ["--repo", repo, "verify", "--read-data"], env=env).exit_code == 0
