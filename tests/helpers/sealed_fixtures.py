"""Helpers for tests of encrypted repositories (docs/format.md §27): a SealedStore with a cheap KDF,
an object written behind the layer's back, the run log's manifest keys."""

from __future__ import annotations

from snapstore.stores.crypt import SealedStore

TEST_SCRYPT_N = 1024
"""scrypt cost for tests: the default (2^17) would cost about 0.3 s per open."""


def sealed_store(inner, passphrase: str) -> SealedStore:
    """``inner`` (any ObjectStore) behind the encrypting layer, opened with ``passphrase``."""
    return SealedStore(inner, passphrase, scrypt_n=TEST_SCRYPT_N)


def put_raw(inner, key: str, data: bytes) -> None:
    """Replace ``key`` in the raw store ``inner`` with ``data`` (what someone with write access to
    the bucket or directory can do): delete, then create."""
    inner.delete_many([key])
    inner.put(key, data)


def manifest_keys(inner, prefix: str = "runs/") -> list[str]:
    """The manifest keys under ``prefix`` in the raw store ``inner``, newest position first (§4)."""
    return sorted(i.key for i in inner.list(prefix) if "/m/" in i.key)
