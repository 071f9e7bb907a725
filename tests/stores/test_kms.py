"""KMS key slots (docs/format.md §27 "KMS slots") on moto's HTTP server, which serves KMS and S3
on one endpoint: a repository on S3 created with a KMS key alone, read by a new store with the same
key; a passphrase slot and a KMS slot side by side; another KMS key, a slot moved to another
repository and a KMS slot rotated are refused or kept as documented."""

from __future__ import annotations

import json

import boto3
import pytest

from snapstore import CheckpointManager
from snapstore.errors import WrongPassphrase
from snapstore.format.codec import open_envelope
from snapstore.maintenance import keyslots
from snapstore.stores.crypt import SealedStore
from snapstore.stores.kms import KmsKey

MSGS = [{"role": "user", "content": "KIWI-CANARY-8080 behind KMS"}]


@pytest.fixture
def kms_keys(moto_server):
    """Two KMS keys on moto's server: ``(endpoint, arn1, arn2)``."""
    kms = boto3.client("kms", endpoint_url=moto_server, region_name="us-east-1")
    return (moto_server, kms.create_key(Description="one")["KeyMetadata"]["Arn"],
            kms.create_key(Description="two")["KeyMetadata"]["Arn"])


def key(endpoint, arn):
    return KmsKey(arn, endpoint_url=endpoint, region_name="us-east-1")


def section(inner):
    return json.loads(open_envelope("config", b"SNCF", inner.get("config"))[1])["encryption"]


def test_kms_only_repository_on_s3(kms_keys, store_factory):
    endpoint, arn1, arn2 = kms_keys
    inner = store_factory("s3-http")
    CheckpointManager(SealedStore(inner, kms=key(endpoint, arn1))).save("r", MSGS)
    slots = section(inner)["slots"]
    assert [s["kdf"] for s in slots] == ["kms"] and slots[0]["key"] == arn1
    assert not [i.key for i in inner.list("") if b"KIWI-CANARY" in inner.get(i.key)]
    assert CheckpointManager(SealedStore(inner, kms=key(endpoint, arn1))).latest("r").messages == MSGS
    with pytest.raises(WrongPassphrase, match="KMS key"):
        CheckpointManager(SealedStore(inner, kms=key(endpoint, arn2))).latest("r")
    # the KMS key can rotate the data key and rekey; its slot is the one kept
    store = SealedStore(inner, kms=key(endpoint, arn1))
    new_id = keyslots.rotate_key(store)
    keyslots.rekey(store)
    assert section(inner)["key_id"] == new_id and [s["kdf"] for s in section(inner)["slots"]] == ["kms"]
    assert CheckpointManager(SealedStore(inner, kms=key(endpoint, arn1))).latest("r").messages == MSGS


def test_kms_slot_beside_a_passphrase_and_moved(kms_keys, store_factory):
    endpoint, arn1, _ = kms_keys
    inner = store_factory("local")
    CheckpointManager(SealedStore(inner, "pw", scrypt_n=1024)).save("r", MSGS)
    slot = keyslots.add_kms_slot(SealedStore(inner, "pw", scrypt_n=1024), key(endpoint, arn1))
    listed = keyslots.list_slots(SealedStore(inner, kms=key(endpoint, arn1)))
    assert [s["kdf"] for s in listed] == ["scrypt", "kms"] and listed[1] == {"id": slot, "kdf": "kms", "key": arn1}
    assert CheckpointManager(SealedStore(inner, kms=key(endpoint, arn1))).latest("r").messages == MSGS
    assert CheckpointManager(SealedStore(inner, "pw")).latest("r").messages == MSGS
    # the KMS slot copied into another repository's config (same KMS key): its context names the
    # first repository, KMS refuses it
    other = store_factory("local")
    CheckpointManager(SealedStore(other, "pw2", scrypt_n=1024)).save("r", MSGS)
    from snapstore.format.config import RepoConfig
    cfg = RepoConfig.from_bytes("config", other.get("config"))
    cfg.encryption = dict(cfg.encryption, slots=cfg.encryption["slots"] + [section(inner)["slots"][1]])
    other.delete_many(["config"])
    other.put("config", cfg.to_bytes())
    with pytest.raises(WrongPassphrase, match="does not open"):
        CheckpointManager(SealedStore(other, kms=key(endpoint, arn1))).latest("r")


def test_manager_takes_a_kms_key_id(kms_keys, store_factory, monkeypatch):
    """CheckpointManager(kms_key_id=...) and $SNAPSTORE_KMS_KEY: a repository created and opened
    with a KMS key alone, credentials and endpoint from the environment; another key refused."""
    endpoint, arn1, arn2 = kms_keys
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("SNAPSTORE_PASSPHRASE", raising=False)
    inner = store_factory("local")
    CheckpointManager(inner, kms_key_id=arn1).save("r", MSGS)
    assert [s["kdf"] for s in section(inner)["slots"]] == ["kms"] and section(inner)["slots"][0]["key"] == arn1
    assert not [i.key for i in inner.list("") if b"KIWI-CANARY" in inner.get(i.key)]
    assert CheckpointManager(inner, kms_key_id=arn1).latest("r").messages == MSGS
    monkeypatch.setenv("SNAPSTORE_KMS_KEY", arn1)
    assert CheckpointManager(inner).latest("r").messages == MSGS
    with pytest.raises(WrongPassphrase, match="KMS key"):
        CheckpointManager(inner, kms_key_id=arn2).latest("r")


def test_cli_init_and_key_add_with_a_kms_key(kms_keys, tmp_path, monkeypatch):
    """`snapstore init --encrypt --kms-key ARN`, then every command opened through
    $SNAPSTORE_KMS_KEY without a passphrase, `key add --kms-key` a second KMS key, which opens it
    alone; `--kms-key` without `--encrypt` is a usage error."""
    from click.testing import CliRunner

    from snapstore.cli import cli
    endpoint, arn1, arn2 = kms_keys
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for v in ("SNAPSTORE_PASSPHRASE", "SNAPSTORE_KMS_KEY"):
        monkeypatch.delenv(v, raising=False)
    repo = str(tmp_path / "repo")

    def run(*args, env=None, code=0):
        r = CliRunner().invoke(cli, ["--repo", repo, *args], env=env, catch_exceptions=False)
        assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
        return r

    assert "--encrypt" in run("init", "--kms-key", arn1, code=2).stderr
    assert "initialized encrypted" in run("init", "--encrypt", "--kms-key", arn1).stdout
    from snapstore.stores.local import LocalStore
    inner = LocalStore(repo)
    assert [s["kdf"] for s in section(inner)["slots"]] == ["kms"]
    CheckpointManager(repo, kms_key_id=arn1).save("r", MSGS)
    one = {"SNAPSTORE_KMS_KEY": arn1}
    assert "kms" in run("key", "list", env=one).stdout
    assert "added KMS key slot" in run("key", "add", "--kms-key", arn2, env=one).stdout
    assert [s["key"] for s in section(inner)["slots"]] == [arn1, arn2]
    assert CheckpointManager(repo, kms_key_id=arn2).latest("r").messages == MSGS
    assert run("runs", env={"SNAPSTORE_KMS_KEY": arn2}).stdout.split() == ["r"]
    assert "KIWI-CANARY-8080" in run("export", "r", env={"SNAPSTORE_KMS_KEY": arn2}).stdout
    assert run("export", "r", code=1).exit_code == 1  # neither a passphrase nor a KMS key: refused
