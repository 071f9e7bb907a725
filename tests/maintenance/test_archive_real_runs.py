"""Archive real imported runs whose data blocks are compressed against earlier messages (kind-1
dictionaries) held in per-save packs that a merge has since deleted: archive reads them through the
run's segments as a restore does (trial: 'missing pack' on sweagent-marshmallow1867, and a
repository-wide archive that archived nothing because of it)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli


def test_archive_an_imported_run_whose_dictionaries_sat_in_merged_packs(tmp_path, shared_dir):
    repo = str(tmp_path / "r")
    run = CliRunner()
    src = str(Path(shared_dir) / "sweagent-marshmallow1867-fcreplace.traj")
    assert run.invoke(cli, ["--repo", repo, "import", src], catch_exceptions=False).exit_code == 0
    with CheckpointManager(repo) as m:
        (name,) = m.runs()
        before = [(c.id, m.get(name, c.id).messages) for c in m.list(name)]
    out = run.invoke(cli, ["--repo", repo, "archive"])
    assert out.exit_code == 0, out.output
    assert run.invoke(cli, ["--repo", repo, "gc", "--grace-period", "0"]).exit_code == 0
    with CheckpointManager(repo) as fresh:
        assert [(c.id, fresh.get(name, c.id).messages) for c in fresh.list(name)] == before
        assert fresh.verify(read_data=True).ok
