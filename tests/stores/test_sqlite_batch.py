"""SqliteStore.write_batch: conditional puts and deletes in one transaction, all or none, one commit.

The commits are counted twice: by the store's own counter and, independently, by SQLite's trace
of the statements the writing connection runs (every ``COMMIT`` it sends)."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

from snapstore.errors import InvalidInputError, ObjectNotFound, PreconditionFailed
from snapstore.stores.base import store_capabilities
from snapstore.stores.batch import BatchPut, BatchRefused
from snapstore.stores.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path):
    st = SqliteStore(tmp_path / "b.db", beside_min=4096)
    st.put("config", b"x")  # the file and its writing connection exist
    yield st
    st.close()


def traced(store) -> list:
    """The statements the store's writing connection runs from now on (SQLite's trace callback)."""
    seen: list = []
    store._shared().writer.set_trace_callback(seen.append)
    return seen


def rows(path) -> dict:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
        return dict(c.execute("SELECT key, etag FROM snapstore_objects").fetchall())


def test_declared(store):
    assert store_capabilities(store).atomic_batch


def test_a_batch_is_one_commit_and_all_of_it_lands(store):
    store.put("packs/aa/old", b"old")
    c0, sql = store.commits, traced(store)
    infos = store.write_batch([BatchPut("packs/aa/p1", b"pack"), BatchPut("runs/r/m/1", b"manifest"),
                               BatchPut("big", b"b" * 5000)], deletes=["packs/aa/old", "packs/aa/missing"])
    assert store.commits - c0 == 1
    assert [s for s in sql if s.strip().upper() == "COMMIT"] == ["COMMIT"]
    assert [i.key for i in infos] == ["packs/aa/p1", "runs/r/m/1", "big"]
    assert store.get("packs/aa/p1") == b"pack" and store.get("runs/r/m/1") == b"manifest"
    assert store.get("big") == b"b" * 5000  # a value beside the file, in the same batch
    assert infos[1].etag == store.head("runs/r/m/1").etag
    with pytest.raises(ObjectNotFound):
        store.get("packs/aa/old")


@pytest.mark.parametrize("last", ["exists", "cas-mismatch", "same-differs"])
def test_a_refused_batch_writes_nothing(store, tmp_path, last):
    store.put("runs/r/m/1", b"theirs")
    store.put("packs/aa/doomed", b"d")
    before = rows(store.path)
    refused = {"exists": BatchPut("runs/r/m/1", b"ours"),
               "cas-mismatch": BatchPut("runs/r/m/1", b"ours", etag='"not-its-etag"'),
               "same-differs": BatchPut("runs/r/m/1", b"ours", if_exists="same")}[last]
    c0 = store.commits
    with pytest.raises(BatchRefused) as e:
        store.write_batch([BatchPut("packs/aa/p1", b"pack"), BatchPut("big", b"v" * 9000), refused],
                          deletes=["packs/aa/doomed"])
    assert isinstance(e.value, PreconditionFailed) and e.value.key == "runs/r/m/1"
    assert e.value.same is (False if last == "same-differs" else None)
    assert store.commits == c0
    assert rows(store.path) == before
    assert store.leftovers() == []  # the big value's file went with the refusal


def test_conditions(store):
    a = store.put("a", b"1")
    store.put("s", b"kept")
    infos = store.write_batch([BatchPut("a", b"2", etag=a.etag),            # compare-and-swap
                               BatchPut("s", b"other", if_exists="skip"),   # taken: left as it is
                               BatchPut("p", b"new", if_exists="same")])    # absent: written
    assert store.get("a") == b"2" and store.get("s") == b"kept" and store.get("p") == b"new"
    assert infos[1] is None
    again = store.write_batch([BatchPut("p", b"new", if_exists="same")])  # the same bytes: counts as written
    assert again[0].etag == infos[2].etag
    with pytest.raises(BatchRefused):
        store.write_batch([BatchPut("a", b"3", etag=a.etag)])  # the ETag it had is gone


def test_deletes_unless_a_key_exists(store):
    """``deletes_unless``: the deletes are skipped when that key exists inside the transaction
    (a fork's pin, docs/format.md §10); the puts land either way, at one commit."""
    store.put("packs/aa/m1", b"merged")
    c0 = store.commits
    store.write_batch([BatchPut("runs/r/m/1", b"one")], ["packs/aa/m1"], deletes_unless="runs/r/f/forked")
    with pytest.raises(ObjectNotFound):
        store.get("packs/aa/m1")  # no pin: deleted in the batch
    store.put("packs/aa/m2", b"merged")
    store.put("runs/r/f/forked", b"")
    store.write_batch([BatchPut("runs/r/m/2", b"two")], ["packs/aa/m2"], deletes_unless="runs/r/f/forked")
    assert store.get("packs/aa/m2") == b"merged" and store.get("runs/r/m/2") == b"two"  # pinned: kept
    assert store.commits - c0 == 4  # two batches and two puts: one commit each


@pytest.mark.parametrize("bad", [
    [BatchPut("a", b"1"), BatchPut("a", b"2")],
    [BatchPut("../x", b"1")],
    [BatchPut("a", b"1", if_exists="maybe")],
    [BatchPut("a", b"1", etag='"e"', if_exists="skip")],
    [("a", b"1")],
])
def test_malformed_batches_are_refused_by_type(store, bad):
    c0 = store.commits
    with pytest.raises(InvalidInputError):
        store.write_batch(bad)
    assert store.commits == c0


def test_put_and_delete_of_one_key(store):
    with pytest.raises(InvalidInputError):
        store.write_batch([BatchPut("a", b"1")], deletes=["a"])


def test_two_stores_of_one_file_race_for_a_key(tmp_path):
    """Two processes' worth of stores (separate objects) on one file: exactly one batch claims the key."""
    a, b = SqliteStore(tmp_path / "r.db"), SqliteStore(tmp_path / "r.db")
    try:
        a.write_batch([BatchPut("packs/aa/1", b"A"), BatchPut("runs/r/m/9", b"A")])
        with pytest.raises(BatchRefused):
            b.write_batch([BatchPut("packs/aa/2", b"B"), BatchPut("runs/r/m/9", b"B")])
        assert a.get("runs/r/m/9") == b"A"
        with pytest.raises(ObjectNotFound):
            a.get("packs/aa/2")
    finally:
        a.close()
        b.close()
