"""Files that snapstore did not write, left in a directory repository by a user (a README, a backup
folder, a note under packs/): stats and verify still work and count them, on a plain and on an
encrypted repository (trial: 'invalid object key', a TypeError, and 256 TiB for a 6-byte file)."""

from __future__ import annotations

from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli

MSGS = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _repo(path, passphrase=None):
    with CheckpointManager(str(path), passphrase=passphrase) as m:
        m.save("r", MSGS)


def _strays(path):
    (path / "README.txt").write_text("mine\n")
    (path / "Backup").mkdir()
    (path / "Backup" / "a").write_text("x\n")
    (path / "packs" / "ab").mkdir(parents=True, exist_ok=True)
    (path / "packs" / "ab" / "notes.txt").write_text("y\n")
    (path / "notes.txt").write_text("hello\n")


def test_stray_files_in_a_plain_repository(tmp_path):
    repo = tmp_path / "r"
    _repo(repo)
    _strays(repo)
    with CheckpointManager(str(repo)) as m:
        st = m.stats()
        assert m.latest("r").messages == MSGS
        rep = m.verify()
    assert st["stored_bytes"] < 1 << 30
    assert rep.ok, rep
    out = CliRunner().invoke(cli, ["--repo", str(repo), "stats"])
    assert out.exit_code == 0, out.output
    assert "TiB" not in out.output


def test_a_stray_file_in_an_encrypted_repository_counts_its_own_size(tmp_path):
    repo = tmp_path / "e"
    _repo(repo, passphrase="pw-123456")
    (repo / "notes.txt").write_text("hello\n")
    with CheckpointManager(str(repo), passphrase="pw-123456") as m:
        st = m.stats()
    assert st["stored_bytes"] < 1 << 30, st["stored_bytes"]
    assert st["objects"]["other"]["bytes"] == 6


def test_gc_plan_on_a_file_says_it_is_not_a_directory(tmp_path):
    repo = tmp_path / "r"
    _repo(repo)
    f = tmp_path / "f"
    f.write_text("x")
    out = CliRunner().invoke(cli, ["--repo", str(repo), "gc", "--plan", str(f)])
    assert out.exit_code == 2 and "not a directory" in out.output, out.output
