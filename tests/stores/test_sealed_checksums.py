"""Checksums put back (docs/format.md §27 "Checksums put back"): an elided object's checksum is
computed once on reading, by the reader that puts it back, and its parser does not compute it a
second time; every byte string that did not come out of that path (a plain repository's, a small
form-2 object's, a copy, another shape's) is checked by its parser as always."""

from __future__ import annotations

import blake3
import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError
from snapstore.format import codec, elide, logseg, pack
from snapstore.format.logseg import decode_logseg, encode_logseg, logseg_key
from snapstore.format.manifest import open_manifest
from snapstore.format.pack import Pack
from snapstore.repo.repository import Repository
from snapstore.stores.local import LocalStore
from tests.helpers.sealed_fixtures import sealed_store


class _Counting:
    """A stand-in for the ``blake3`` module inside one parser module: counts hashers made."""

    def __init__(self):
        self.made = 0

    def blake3(self, *a, **kw):
        self.made += 1
        return blake3.blake3(*a, **kw)


@pytest.fixture
def repo(tmp_path):
    inner = LocalStore(tmp_path / "r", fsync=False)
    store = sealed_store(inner, "pw")
    Repository.init(store)
    mgr = CheckpointManager(store)
    msgs = []
    for i in range(4):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " + "lorem ipsum " * (40 * i)}]
        mgr.save("run", msgs, step=i)
    return inner, msgs


def _parsers(monkeypatch):
    counts = {m: _Counting() for m in (pack, codec, logseg)}
    for m, c in counts.items():
        monkeypatch.setattr(m, "blake3", c)
    return counts


def test_an_elided_pack_and_manifest_are_hashed_once_not_twice(repo, monkeypatch):
    inner, msgs = repo
    store = sealed_store(inner, "pw")
    packs = [i.key for i in inner.list("packs/")]
    manifests = [i.key for i in inner.list("runs/") if "/m/" in i.key and i.size > 30]
    assert packs and manifests
    counts = _parsers(monkeypatch)
    for k in packs:
        data = store.get(k)
        assert type(data) is elide.RestoredPack
        Pack.parse(k, data)
        assert counts[pack].made == 0, "the pack parser hashed a checksum the reader had just put back"
        Pack.parse(k, bytes(data))  # the same bytes, not from that path: checked
        assert counts[pack].made == 1
        counts[pack].made = 0
    for k in manifests:
        counts[codec].made = 0
        data = store.get(k)
        assert type(data) is elide.RestoredEnvelope
        open_manifest(k, data)
        assert counts[codec].made == 0
        open_manifest(k, bytes(data))
        assert counts[codec].made == 1
        counts[codec].made = 0
    monkeypatch.undo()
    assert CheckpointManager(sealed_store(inner, "pw")).latest("run").messages == msgs


def test_an_elided_log_segment_is_hashed_once(repo, monkeypatch):
    inner, _ = repo
    store = sealed_store(inner, "pw")
    body = codec.dumps_exact({"x": 1})
    hi = logseg.span(1) - 1
    plain = encode_logseg([(0, 1, body), (hi, 1, body)])
    k = logseg_key("bx", hi, 1)
    store.put(k, plain)
    assert len(inner.get(k)) == len(plain) + 4  # elided
    counts = _parsers(monkeypatch)
    data = sealed_store(inner, "pw").get(k)
    assert type(data) is elide.RestoredLog and data == plain
    assert [c.seq for c in decode_logseg(k, data)] == [0, hi]
    assert counts[logseg].made == 0
    decode_logseg(k, bytes(data))
    assert counts[logseg].made == 1


def test_bytes_not_restored_are_still_checked(repo):
    inner, _ = repo
    store = sealed_store(inner, "pw")
    k = next(i.key for i in inner.list("packs/"))
    good = bytes(store.get(k))
    bad = bytearray(good)
    bad[-1] ^= 1  # the pack's checksum no longer holds
    with pytest.raises(IntegrityError, match="checksum"):
        Pack.parse(k, bytes(bad))  # plain bytes (a plain repository, a range, a copy): checked
    store.put_if_match(k, bytes(bad), store.head(k).etag)  # sealed whole (small layout), not elided
    got = sealed_store(inner, "pw").get(k)
    assert got == bytes(bad) and type(got) is bytes
    with pytest.raises(IntegrityError, match="checksum"):
        Pack.parse(k, got)
    m = next(i.key for i in inner.list("runs/") if "/m/" in i.key and i.size > 30)
    env = bytearray(store.get(m))
    env[10] ^= 1  # inside the envelope's checksum field
    for wrapped in (bytes(env), elide.RestoredPack(bytes(env)), elide.RestoredLog(bytes(env))):
        # another shape's marker is not this parser's: it checks
        with pytest.raises(IntegrityError, match="checksum"):
            open_manifest(m, wrapped)
    with pytest.raises(IntegrityError, match="checksum"):
        Pack.parse(k, elide.RestoredEnvelope(bytes(bad)))


@pytest.mark.parametrize("magic", [b"SNMF", b"SNPK", b"SNLG"])
def test_restore_types_its_result_by_shape(magic):
    import os
    body = os.urandom(100)
    if magic == b"SNMF":
        plain = codec.seal_envelope(magic, 1, body, compress=False)
        want = elide.RestoredEnvelope
    elif magic == b"SNLG":
        plain = magic + b"\x03" + blake3.blake3(body).digest(16) + body
        want = elide.RestoredLog
    else:
        plain = magic + body
        plain += blake3.blake3(plain).digest(16)
        want = elide.RestoredPack
    got = elide.restore(elide.elide(plain))
    assert type(got) is want and got == plain and type(got[1:]) is bytes
