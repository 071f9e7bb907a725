"""benchmarks/encryption.py runs end to end on one shared file (skipped without the shared data):
both sides saved and restored exactly, the ratios computed from the figures reported, and the
encrypted side stores more bytes than the plain one (49 bytes an object) but not twice as many."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import paths
from tests.helpers.shared_data import shared_data_dir

sys.path.insert(0, str(paths.ROOT / "benchmarks"))
import encryption  # noqa: E402


@pytest.mark.skipif(shared_data_dir() is None, reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
def test_one_file_one_trial(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert encryption.main(["--limit", "1", "--trials", "1", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    (name, f), = r["files"].items()
    p, e = f["plain"], f["encrypted"]
    assert p["bytes"] < e["bytes"] < 2 * p["bytes"]
    assert f["ratios"]["bytes"] == pytest.approx(e["bytes"] / p["bytes"])
    assert f["ratios"]["sealing"] == pytest.approx(e["bytes"] / e["plaintext_bytes"]) and 1 < f["ratios"]["sealing"] < 1.1
    assert e["unlock_ms"] > 0 and p["unlock_ms"] is None and e["restore_ms"] > 0
    assert r["pooled"]["plain"]["saves"] == r["pooled"]["encrypted"]["saves"] == f["checkpoints"]
    out_text = capsys.readouterr().out
    assert name[:40] in out_text and "total (sums of the per-file medians)" in out_text
    t = r["totals"]
    assert t["restore_ms"]["plain"] == pytest.approx(p["restore_ms"])  # one file: the sum is its median
    assert t["ratios"]["restore"] == pytest.approx(e["restore_ms"] / p["restore_ms"])
    for row in (f, t):
        for k, limit in encryption.TARGETS.items():
            assert row["verdicts"][k] == ("PASS" if row["ratios"][k] <= limit else "FAIL")
            assert f"{row['ratios'][k]:.3f} {row['verdicts'][k]}" in out_text


def test_verdicts_against_the_targets():
    v = encryption.verdicts({"save_p50": 1.1, "restore": 1.1001, "bytes": float("nan")})
    assert v == {"save_p50": "PASS", "restore": "FAIL", "bytes": "FAIL"}


@pytest.mark.skipif(shared_data_dir() is None, reason="shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
def test_instructions_children_restore_exactly(tmp_path):
    import encryption_instructions as ei

    name = "sweagent-humanevalfix0.traj"
    convs = ei._convs(name)
    for side in ("plain", "encrypted"):
        encryption.save_side(side, tmp_path / side, convs, False)
        assert ei.main(["--child", side, str(tmp_path / side), name, "2"]) == 0
    r = {"file": name, "plain": 100, "encrypted": 110, "ratio": 1.1}
    assert ei.report(r) == f"{name}: one restore, plain 100 instructions, encrypted 110 (+10); encrypted/plain 1.100"
