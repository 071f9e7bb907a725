"""Verify of an encrypted repository without its key (docs/format.md §27): the structure is checked
from the stored bytes (sizes, trailers, key names, log positions) on a local directory and on
moto's HTTP server, through the API and the CLI; plaintext, truncated, foreign-key and missing
objects are errors; what needs the key (a flipped byte inside a ciphertext) is found only with it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from snapstore import CheckpointManager
from snapstore.cli import cli
from snapstore.errors import EncryptionError
from tests.helpers.sealed_fixtures import manifest_keys, put_raw, sealed_store

KINDS = ["local", "s3-http"]


def sealed(inner, pw="structure passphrase"):
    return sealed_store(inner, pw)


def fill(m):
    msgs = []
    ids = []
    for i in range(20):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " * 40}]
        ids.append(m.save("r", msgs, step=i))
    m.rollback("r", ids[15])        # a rollback record (20); positions 16-19 voided (a removal record)
    for i in range(3):
        ids.append(m.save("r", msgs[:16] + [{"role": "user", "content": f"again {i}"}] * (i + 1)))  # 21-23
    for i in range(6):
        m.save("other", msgs[:i + 1])
    m.prune(keep_last=3, run_id="other")  # a removal record
    return ids


def codes(problems):
    return sorted({p.code for p in problems})


@pytest.mark.parametrize("kind", KINDS)
def test_structure_without_the_key(kind, store_factory):
    inner = store_factory(kind)
    mgr = CheckpointManager(sealed(inner))
    fill(mgr)
    rk = mgr.state.run_key("r")
    v = CheckpointManager(inner).verify()  # no passphrase: structure only, not a refusal
    assert v.ok, v.errors
    assert codes(v.warnings) == ["not-decrypted"]
    n = sum(1 for i in inner.list("") if i.key != "config")
    assert v.checked["objects"] == v.checked["trailers"] == n and v.checked["runs"] == 2
    with pytest.raises(EncryptionError):
        CheckpointManager(inner).verify(accept_missing=True)

    plain = store_factory(kind)
    CheckpointManager(plain).save("p", [{"role": "user", "content": "plain"}])
    pk = next(i.key for i in plain.list("packs/"))
    inner.put(pk, plain.get(pk))                        # a plaintext pack dropped in
    other = store_factory(kind)
    CheckpointManager(sealed(other)).save("o", [{"role": "user", "content": "elsewhere"}])
    ok_ = next(i.key for i in other.list("packs/"))
    inner.put(ok_, other.get(ok_))                      # sealed by another repository (another key id)
    victim = next(i for i in inner.list("packs/") if i.key not in (pk, ok_))
    put_raw(inner, victim.key, inner.get(victim.key)[:-1])  # truncated by one byte
    middle = manifest_keys(inner, f"runs/{rk}/")[1]         # r's record at 22: above the removal record's 19
    inner.delete_many([middle])
    inner.put("stray/object", b"x" * 100)               # a key outside the layout
    v = CheckpointManager(inner).verify()
    bad = {p.key: p for p in v.errors}
    assert set(bad) >= {pk, ok_, victim.key, middle, "stray/object"}, v.errors
    assert bad[pk].code == bad[victim.key].code == bad[ok_].code == "corrupt-sealed"
    assert "key id" in bad[ok_].message and bad[middle].code == "missing-manifest"
    assert "stray/object" in {p.key for p in v.warnings if p.code == "unknown-key"}
    # the same findings with the key, and more: a full verify
    assert not CheckpointManager(sealed(inner)).verify().ok


@pytest.mark.parametrize("kind", KINDS)
def test_a_flipped_ciphertext_byte_needs_the_key(kind, store_factory):
    inner = store_factory(kind)
    fill(CheckpointManager(sealed(inner)))
    k = next(i.key for i in inner.list("packs/"))
    bad = bytearray(inner.get(k))
    bad[10] ^= 1
    put_raw(inner, k, bytes(bad))
    assert CheckpointManager(inner).verify().ok  # sizes and trailers are intact: not seen without the key
    full = CheckpointManager(sealed(inner)).verify(read_data=True)
    assert k in {p.key for p in full.errors + full.warnings}, (full.errors, full.warnings)


def test_cli_verify_without_and_with_the_passphrase(tmp_path):
    repo = str(tmp_path / "repo")
    run = CliRunner()
    env = {"SNAPSTORE_PASSPHRASE": "cli structure"}
    assert run.invoke(cli, ["--repo", repo, "init", "--encrypt"], env=env).exit_code == 0
    assert run.invoke(cli, ["--repo", repo, "import", "examples/demo-run.json", "--run", "demo"], env=env).exit_code == 0
    out = run.invoke(cli, ["--repo", repo, "verify", "--json"], env={"SNAPSTORE_PASSPHRASE": ""})
    assert out.exit_code == 4, out.output  # partial: a script must not take it for a full check
    rep = json.loads(out.output)
    assert rep["ok"] and [w["code"] for w in rep["warnings"]] == ["not-decrypted"] and rep["checked"]["trailers"] > 3
    assert rep["complete"] is False and rep["exit_code"] == 4
    out = run.invoke(cli, ["--repo", repo, "verify"], env={"SNAPSTORE_PASSPHRASE": ""})
    assert out.exit_code == 4 and out.output.splitlines()[-1].startswith("PARTIAL: checked "), out.output
    out = run.invoke(cli, ["--repo", repo, "verify"], env=env)
    assert out.exit_code == 0 and "not-decrypted" not in out.output, out.output
    m = sorted(p for p in (tmp_path / "repo" / "runs").rglob("*") if p.is_file() and p.parent.name == "m")
    m[len(m) // 2].unlink()  # a manifest deleted outside snapstore
    out = run.invoke(cli, ["--repo", repo, "verify"], env={"SNAPSTORE_PASSPHRASE": ""})
    assert out.exit_code == 2 and "missing-manifest" in out.output, out.output
