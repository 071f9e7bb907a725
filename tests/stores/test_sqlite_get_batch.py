"""SqliteStore.get_batch and the restore that uses it: a fresh reader's segment wave reads its
packs in one ``SELECT ... key IN (...)`` instead of one statement per pack, and keeps every check.

Statements are counted by SQLite's own trace of the reading connection. Real parts: SQLite files in
temp dirs, fresh managers on them.
"""

from __future__ import annotations

import sqlite3

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError, InvalidInputError
from snapstore.stores.sqlite import TABLE, SqliteStore


@pytest.fixture
def store(tmp_path):
    st = SqliteStore(tmp_path / "g.db", beside_min=4096)
    yield st
    st.close()


def test_get_batch_returns_blobs_within_the_bound_and_leaves_the_rest(store):
    store.put("packs/aa/one", b"1" * 10)
    store.put("packs/bb/two", b"2" * 100)
    store.put("packs/cc/big", b"3" * 5000)  # a value file beside the database
    before = store.stats.counts["GET"]
    got = store.get_batch(["packs/aa/one", "packs/bb/two", "packs/aa/one", "packs/cc/big", "packs/dd/none"], 1000)
    assert got == {"packs/aa/one": b"1" * 10, "packs/bb/two": b"2" * 100}
    assert store.stats.counts["GET"] - before == 2
    # the bound is strict: an object of exactly max_size bytes is left to get()
    assert store.get_batch(["packs/aa/one", "packs/bb/two"], 100) == {"packs/aa/one": b"1" * 10}
    assert store.get_batch([], 1000) == {}
    with pytest.raises(InvalidInputError):
        store.get_batch(["packs/aa/one", "../x"], 1000)


def test_get_batch_of_a_missing_file_finds_nothing_and_creates_nothing(tmp_path):
    st = SqliteStore(tmp_path / "none.db")
    try:
        assert st.get_batch(["packs/aa/one", "packs/bb/two"], 1000) == {}
        assert not (tmp_path / "none.db").exists()
    finally:
        st.close()


def test_get_batch_reads_more_keys_than_one_statement_binds(store):
    keys = [f"packs/{i:04d}" for i in range(1203)]
    for k in keys:
        store.put(k, k.encode())
    seen: list = []
    store._reader().set_trace_callback(seen.append)
    got = store.get_batch(keys + ["packs/none"], 1 << 20)
    assert got == {k: k.encode() for k in keys}
    assert sum(" IN (" in s for s in seen) == 3  # 500 keys a statement


def _saved_run(path, turns: int = 9) -> list:
    msgs: list = []
    with CheckpointManager(str(path)) as mgr:
        for i in range(turns):
            msgs = msgs + [{"role": "user", "content": f"question {i} " * 20},
                           {"role": "assistant", "content": f"answer {i} " * 30}]
            mgr.save("r", msgs, step=i)
    return msgs


def test_a_fresh_restore_reads_its_packs_in_one_statement(tmp_path):
    path = tmp_path / "repo.db"
    msgs = _saved_run(path)
    st = SqliteStore(path)
    try:
        seen: list = []
        st._reader().set_trace_callback(seen.append)
        cp = CheckpointManager(st).latest("r")
        assert cp.messages == msgs
        pack_reads = [s for s in seen if "'packs/" in s or "key IN" in s]
        batched = [s for s in pack_reads if " IN (" in s]
        assert len(batched) == 1 and batched[0].count("'packs/") >= 2, seen
        assert len(pack_reads) == 1, pack_reads  # no pack read again one by one
    finally:
        st.close()


def test_a_damaged_pack_read_in_the_batch_is_still_an_integrity_error(tmp_path):
    path = tmp_path / "repo.db"
    _saved_run(path)
    conn = sqlite3.connect(path)
    try:
        keys = [k for (k,) in conn.execute(f"SELECT key FROM {TABLE} WHERE key LIKE 'packs/%' ORDER BY size DESC")]
        assert len(keys) >= 2
        data = bytearray(conn.execute(f"SELECT data FROM {TABLE} WHERE key = ?", (keys[0],)).fetchone()[0])
        data[len(data) // 2] ^= 0xFF  # inside the blocks: the pack's checksum no longer matches
        with conn:
            conn.execute(f"UPDATE {TABLE} SET data = ? WHERE key = ?", (bytes(data), keys[0]))
    finally:
        conn.close()
    with CheckpointManager(str(path)) as mgr:
        with pytest.raises(IntegrityError) as exc:
            mgr.latest("r")
    assert exc.value.key == keys[0]
