"""``verify`` of an encrypted repository whose head manifest was replaced by a plaintext one
(docs/format.md §27): the plaintext object is the one problem, reported once as the integrity
error it is; no ``missing-pack`` error and no ``unreferenced-pack`` warning follow from it."""

from __future__ import annotations

import pytest

from snapstore import CheckpointManager
from tests.helpers.sealed_fixtures import manifest_keys, put_raw, sealed_store


@pytest.mark.parametrize("kind", ["local", "s3-http"])
def test_a_plaintext_head_manifest_is_one_error(kind, store_factory):
    inner, plain = store_factory(kind), store_factory(kind)
    m = CheckpointManager(sealed_store(inner, "pw"))
    p = CheckpointManager(plain)
    msgs = []
    for i in range(6):
        msgs = msgs + [{"role": "user", "content": f"turn {i} " * 40}]
        m.save("r", msgs, step=i)
        p.save("r", msgs, step=i)
    assert CheckpointManager(sealed_store(inner, "pw")).verify(read_data=True).ok
    head = manifest_keys(inner, f"runs/{m.state.run_key('r')}/")[0]
    put_raw(inner, head, plain.get(manifest_keys(plain)[0]))
    for read_data in (False, True):
        rep = CheckpointManager(sealed_store(inner, "pw")).verify(read_data=read_data)
        assert [p.key for p in rep.errors] == [head], [str(e) for e in rep.errors]
        assert rep.errors[0].code.startswith("corrupt"), str(rep.errors[0])
        assert not [w for w in rep.warnings if w.code in ("unreferenced-pack", "missing-pack")], \
            [str(w) for w in rep.warnings]
