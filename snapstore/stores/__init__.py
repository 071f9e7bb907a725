"""Object-store backends and :func:`open_store`, which picks one from a URL or path."""

from __future__ import annotations

import os

from .base import ObjectInfo, ObjectStore, RequestStats
from .local import LocalStore
from .memory import MemoryStore


def open_store(location: "str | os.PathLike | ObjectStore | None" = None, **options) -> ObjectStore:
    """Return an object store for ``location``.

    Args:
        location: ``s3://BUCKET[/PREFIX][?options]`` (S3 via boto3), ``memory://`` (in-memory),
            ``sqlite:///abs/file.db`` or ``sqlite://relative.db`` (``?synchronous=normal``) or a
            plain path ending in ``.db`` that is not an existing directory (one SQLite file),
            ``file:///path`` or a plain directory path (local store), an existing store object
            (returned as is), or None: ``$SNAPSTORE_URL`` if set, else ``./.snapstore``.
        **options: backend keyword options (S3: ``endpoint_url``, ``region_name``, ...; local:
            ``fsync``; SQLite: ``synchronous``, ``fsync``, ``lock_timeout``).
    Raises:
        InvalidInputError: an unknown URL scheme.
    """
    from ..errors import InvalidInputError

    if location is None:
        location = os.environ.get("SNAPSTORE_URL") or ".snapstore"
    if not isinstance(location, (str, os.PathLike)):
        return location
    loc = os.fspath(location)
    if loc == "":
        raise InvalidInputError("empty repository location (give a directory, s3://BUCKET/PREFIX or memory://)")
    if loc.startswith("s3://"):
        from .s3 import S3Store

        return S3Store.from_url(loc, **options)
    if loc.startswith("memory://"):
        return MemoryStore(**options)
    scheme = loc.partition(":")[0].lower()
    if "://" not in loc and scheme in ("sqlite", "s3", "memory", "file") and not os.path.exists(loc):
        # 'sqlite:/x.db' or 's3:bucket' is a mistyped URL, not a directory to create
        raise InvalidInputError(f"{loc!r} looks like a {scheme} URL without '//': write {scheme}://... "
                                + ("(sqlite:///abs/path.db or sqlite://relative.db)" if scheme == "sqlite" else
                                   "(s3://BUCKET/PREFIX)" if scheme == "s3" else ""))
    plain_db = "://" not in loc and not os.path.isdir(loc) and loc.partition("?")[0].endswith(".db")
    if loc.startswith("sqlite://") or plain_db:
        from .sqlite import SqliteStore, parse_sqlite_url

        if not loc.startswith("sqlite://") and "?" in loc:
            loc = "sqlite://" + loc  # a path with options, as the URL form takes them
        path, opts = parse_sqlite_url(loc) if loc.startswith("sqlite://") else (loc, {})
        return SqliteStore(path, **{**opts, **options})
    if loc.startswith("file://"):
        return LocalStore(loc[len("file://"):], **options)
    if "://" in loc:
        raise InvalidInputError(f"unsupported repository URL scheme: {loc}")
    return LocalStore(loc, **options)


__all__ = ["ObjectInfo", "ObjectStore", "RequestStats", "LocalStore", "MemoryStore", "open_store"]
