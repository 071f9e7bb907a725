"""An encrypted repository's config swapped for a plain one (docs/format.md §27): a client that
has the passphrase refuses the repository (EncryptionError) and writes nothing; a client without
one finds the sealed objects corrupt (IntegrityError), never their plaintext; what it cannot
notice is a repository replaced whole (plain config and plain objects)."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.errors import EncryptionError, IntegrityError
from tests.helpers.sealed_fixtures import put_raw, sealed_store

KINDS = ["local", "s3-http"]
SECRET = [{"role": "user", "content": "WOMBAT-CANARY-2210 the secret"}]


def sealed(inner):
    return sealed_store(inner, "swap passphrase")


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_config_swapped_in(kind, store_factory):
    inner = store_factory(kind)
    CheckpointManager(sealed(inner)).save("r", SECRET)
    plain = store_factory(kind)
    CheckpointManager(plain).save("r", [{"role": "user", "content": "attacker's"}])
    put_raw(inner, "config", plain.get("config"))  # the attacker's plain config in place of the sealed one
    before = {i.key: inner.get(i.key) for i in inner.list("")}
    with pytest.raises(EncryptionError, match="not encrypted"):
        CheckpointManager(sealed(inner)).latest("r")
    with pytest.raises(EncryptionError, match="not encrypted"):
        CheckpointManager(sealed(inner)).save("r", SECRET + SECRET)
    assert {i.key: inner.get(i.key) for i in inner.list("")} == before  # nothing written
    with pytest.raises(IntegrityError):
        CheckpointManager(inner).latest("r")  # no passphrase: the sealed record is corrupt, not plaintext
    # what a client without the passphrase cannot notice: the repository replaced whole
    for i in list(inner.list("")):
        inner.delete_many([i.key])
    for i in plain.list(""):
        inner.put(i.key, plain.get(i.key))
    assert CheckpointManager(inner).latest("r").messages == [{"role": "user", "content": "attacker's"}]
    with pytest.raises(EncryptionError, match="not encrypted"):
        CheckpointManager(sealed(inner)).latest("r")
