"""Archive bundles (docs/format.md §28) in an encrypted repository (§27), on a local directory and
on moto's HTTP server: archive, GC (the hot packs go), then a fresh manager reads exactly what was
saved from the sealed bundle; verify --read-data passes; the bundle is stored sealed (in its
storage class on S3), a flipped byte is refused (verify names the bundle), and the bundle copied
to the keys of the packs it replaced does not authenticate there (readers go on to the bundle).
A DEEP_ARCHIVE bundle of an encrypted repository is written in its class (its ETag checked against
the one its PUT returned)."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from snapstore.format import sealed2
from snapstore.errors import IntegrityError, ObjectNotFound
from snapstore.maintenance.sealedcheck import encrypted_config, verify_structure
from tests.helpers.sealed_fixtures import put_raw, sealed_store

MARKER = "TAPIR-CANARY-9313"


def sealed(inner):
    return sealed_store(inner, "archive passphrase")


def fill(m):
    msgs = [{"role": "system", "content": f"{MARKER} system prompt " * 100}]
    for i in range(12):
        msgs = msgs + [{"role": "assistant", "content": f"{MARKER} step {i} " * 30}]
        m.save("long", msgs, step=i, session_state={"i": i, "notes": [f"{MARKER} note {k}" * 20 for k in range(i)]})
    for r in range(2):
        m.save(f"small-{r}", msgs[:2] + [{"role": "user", "content": f"{MARKER} run {r}"}], step=0)


def snapshot(m):
    return {run: [(c.id, c.messages, c.session_state) for c in (m.get(run, s.id) for s in m.list(run))]
            for run in sorted(m.runs())}


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_archive_gc_read_verify_encrypted(kind, store_factory):
    inner = store_factory(kind)
    m = CheckpointManager(sealed(inner))
    fill(m)
    before = snapshot(m)
    hot = [i.key for i in inner.list("packs/")]
    rep = m.archive(storage_class="GLACIER_IR")
    assert sorted(rep.runs) == sorted(before) and rep.bundles
    m.gc(grace_period=0)
    m.gc(grace_period=0)
    assert [i.key for i in inner.list("packs/")] == []
    fresh = CheckpointManager(sealed(inner))
    assert snapshot(fresh) == before  # read from the sealed bundles
    v = fresh.verify(read_data=True)
    assert v.ok and not v.errors, v.errors
    # without the key: the structure, every archive key known (a trial saw unknown-key on archive/log/)
    assert [i.key for i in inner.list("archive/log/")]
    vs = verify_structure(inner, encrypted_config(inner))
    assert not vs.errors and {w.code for w in vs.warnings} == {"not-decrypted"}, vs.warnings
    bundle = rep.bundles[0]
    raw = {i.key: inner.get(i.key) for i in inner.list("")}
    assert not [k for k, d in raw.items() if MARKER.encode() in d]
    key_id = sealed(inner).key_id
    assert raw[bundle][-4:].hex() == key_id  # a sealed object of form 2 (it ends in its key id)
    assert sealed2.layout_of(bundle, len(raw[bundle])) is not None
    if kind == "s3-http":
        head = inner._client.head_object(Bucket=inner.bucket, Key=inner._requests.full(bundle))
        assert head["StorageClass"] == "GLACIER_IR"
    # a flipped byte in the bundle: refused, never other data
    bad = bytearray(raw[bundle])
    bad[len(bad) // 3] ^= 1
    put_raw(inner, bundle, bytes(bad))
    # (the reader names the gone hot pack it looked for, as in a plain repository: ObjectNotFound)
    with pytest.raises((IntegrityError, ObjectNotFound)):
        CheckpointManager(sealed(inner)).latest("long")
    v = CheckpointManager(sealed(inner)).verify(read_data=True)
    assert not v.ok and any(bundle in e.key for e in v.errors), v.errors
    put_raw(inner, bundle, raw[bundle])
    assert snapshot(CheckpointManager(sealed(inner))) == before
    # the sealed bundle copied to the keys of the hot packs it replaced (which readers look at
    # first): they do not authenticate there, readers go on to the bundle, verify names them
    for k in hot:
        inner.put(k, raw[bundle])
    again = CheckpointManager(sealed(inner))
    assert snapshot(again) == before
    v = again.verify(read_data=True)
    named = {k for k in hot if any(k in (w.key or "") for w in v.errors + v.warnings)}
    assert named == set(hot), (v.errors, v.warnings)
    with pytest.raises(IntegrityError, match=hot[0]):
        again.repo.store.get(hot[0])


def test_archive_deep_archive_encrypted(store_factory):
    inner = store_factory("s3-http")
    m = CheckpointManager(sealed(inner))
    fill(m)
    rep = m.archive(storage_class="DEEP_ARCHIVE")
    head = inner._client.head_object(Bucket=inner.bucket, Key=inner._requests.full(rep.bundles[0]))
    assert head["StorageClass"] == "DEEP_ARCHIVE"
