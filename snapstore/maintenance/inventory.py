"""Listing from an S3 Inventory: a repository's packs read from an inventory report, not LISTed.

Layer 3 (uses :mod:`snapstore.stores` and :mod:`snapstore.format.keys`). An S3 Inventory report is
a ``manifest.json`` (``sourceBucket``, ``destinationBucket``, ``creationTimestamp`` in milliseconds
since the epoch as a string, ``fileFormat`` ``CSV`` / ``Parquet`` / ``ORC``, ``fileSchema`` and
``files``: ``[{"key", "size", "MD5checksum"}]``) beside its data files in the destination
bucket. CSV files are gzip-compressed, have no header row, and hold the columns ``fileSchema``
names (``Bucket, Key, Size, LastModifiedDate, ETag, ...``; the key URL-encoded, the date
ISO-8601); Parquet files (read with pyarrow) have the same columns in snake case (``bucket``,
``key``, ``size``, ``last_modified_date`` as a timestamp, ``e_tag``, ``is_delete_marker``,
``is_latest``). ORC is refused.

:func:`read_inventory` turns one into an :class:`Inventory`: the ``ObjectInfo`` of the
repository's packs it lists and the report's creation time. GC uses it instead of a LIST of
``packs/`` (docs/format.md §21, "Listing from an S3 Inventory"): an object the inventory does not
list, or lists with a modification time after the report's creation, is never deleted on its word.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import unquote_plus

from ..errors import IntegrityError, InvalidInputError, MissingDependencyError
from ..format import keys
from ..stores.base import ObjectInfo

__all__ = ["Inventory", "read_inventory", "parse_manifest", "inventory_from_rows"]

REQUIRED_FIELDS = ("Bucket", "Key", "Size", "LastModifiedDate")
"""Fields an inventory must hold for GC (its ``fileSchema``): the key, its size and its time."""

_PARQUET_COLUMNS = {"Bucket": "bucket", "Key": "key", "Size": "size", "LastModifiedDate": "last_modified_date",
                    "ETag": "e_tag", "IsDeleteMarker": "is_delete_marker", "IsLatest": "is_latest"}


@dataclass
class Inventory:
    """What an S3 Inventory report says of a repository's packs.

    Attributes:
        url: the manifest's ``s3://bucket/key``.
        source_bucket: the bucket the report lists.
        created: the report's creation time (seconds since the epoch, UTC; ``creationTimestamp``).
        packs: ``ObjectInfo`` (repository keys, ``packs/...``) of the packs listed with a
            modification time at or before ``created``, current versions only, delete markers left out.
        rows: data rows read (every object of the report, not only the repository's).
        newer: rows under the repository's ``packs/`` left out for a time after ``created``.
        files: data files read.
        requests: requests made to read it, by kind (``GET``).
    """

    url: str
    source_bucket: str
    created: float
    packs: list = field(default_factory=list)
    rows: int = 0
    newer: int = 0
    files: int = 0
    requests: dict = field(default_factory=dict)


def _bad(url: str, what: str) -> InvalidInputError:
    return InvalidInputError(f"malformed S3 Inventory manifest {url}: {what}")


def parse_manifest(url: str, data: bytes) -> dict:
    """Check and return the fields of an inventory's ``manifest.json``.

    Args:
        url: where it was read (named in errors).
        data: its bytes.
    Returns:
        ``{"source_bucket": str, "created": float seconds, "format": "CSV" | "Parquet",
        "schema": [field names], "files": [(key, size or None, md5 hex or None)]}``.
    Raises:
        InvalidInputError: not a JSON object, a field missing or of the wrong type, an ORC or
            unknown ``fileFormat``, a ``fileSchema`` without Bucket, Key, Size and LastModifiedDate.
    """
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _bad(url, f"not JSON ({e})") from None
    if not isinstance(d, dict):
        raise _bad(url, "not a JSON object")
    for name in ("sourceBucket", "creationTimestamp", "fileFormat", "files"):
        if name not in d:
            raise _bad(url, f"no {name!r}")
    src, ts, fmt, files = d["sourceBucket"], d["creationTimestamp"], d["fileFormat"], d["files"]
    if not isinstance(src, str) or not src:
        raise _bad(url, "'sourceBucket' is not a bucket name")
    try:
        created = int(str(ts)) / 1000.0
    except ValueError:
        raise _bad(url, f"'creationTimestamp' {ts!r} is not milliseconds since the epoch") from None
    if fmt not in ("CSV", "Parquet"):
        raise _bad(url, f"'fileFormat' {fmt!r} is not read (CSV or Parquet)")
    schema_text = d.get("fileSchema")
    if fmt == "CSV":
        if not isinstance(schema_text, str):
            raise _bad(url, "no 'fileSchema' string (the CSV columns)")
        schema = [s.strip() for s in schema_text.split(",")]
    else:  # Parquet: the schema is in the files; the manifest's is a Parquet message type
        schema = [k for k in REQUIRED_FIELDS]
    missing = [f for f in REQUIRED_FIELDS if f not in schema]
    if missing:
        raise _bad(url, f"'fileSchema' lacks {', '.join(missing)}")
    if not isinstance(files, list) or not all(isinstance(f, dict) and isinstance(f.get("key"), str) for f in files):
        raise _bad(url, "'files' is not a list of {\"key\": ...} objects")
    out = []
    for f in files:
        size = f.get("size")
        out.append((f["key"], size if isinstance(size, int) else None,
                    f.get("MD5checksum") if isinstance(f.get("MD5checksum"), str) else None))
    return {"source_bucket": src, "created": created, "format": fmt, "schema": schema, "files": out}


def _iso_seconds(text: str) -> float:
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _csv_rows(url: str, name: str, data: bytes, schema: list):
    """``(bucket, key, size, mtime, etag, current)`` of each row of one gzip CSV data file."""
    try:
        text = gzip.decompress(data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"S3 Inventory file {name} of {url} is not gzip-compressed UTF-8 CSV ({e})") from None
    col = {f: i for i, f in enumerate(schema)}
    for n, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row:
            continue
        if len(row) != len(schema):
            raise InvalidInputError(f"S3 Inventory file {name} of {url}, row {n}: {len(row)} fields, "
                                    f"the fileSchema names {len(schema)}")
        try:
            size = int(row[col["Size"]] or 0)
            mtime = _iso_seconds(row[col["LastModifiedDate"]])
        except ValueError as e:
            raise InvalidInputError(f"S3 Inventory file {name} of {url}, row {n}: {e}") from None
        current = True
        if "IsDeleteMarker" in col and row[col["IsDeleteMarker"]].lower() == "true":
            current = False
        if "IsLatest" in col and row[col["IsLatest"]].lower() == "false":
            current = False
        yield (row[col["Bucket"]], unquote_plus(row[col["Key"]]), size, mtime,
               row[col["ETag"]] if "ETag" in col else "", current)


def _parquet_rows(url: str, name: str, data: bytes):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError("a Parquet S3 Inventory needs pyarrow: pip install 'snapstore[dask]'") from None
    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as e:  # pyarrow raises ArrowInvalid and others on a damaged file
        raise InvalidInputError(f"S3 Inventory file {name} of {url} is not Parquet ({e})") from None
    names = set(table.column_names)
    missing = [c for f, c in _PARQUET_COLUMNS.items() if f in REQUIRED_FIELDS and c not in names]
    if missing:
        raise InvalidInputError(f"S3 Inventory file {name} of {url} lacks the columns {', '.join(missing)}")
    cols = {f: table.column(c).to_pylist() for f, c in _PARQUET_COLUMNS.items() if c in names}
    for i in range(table.num_rows):
        t = cols["LastModifiedDate"][i]
        if isinstance(t, datetime):
            mtime = (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()
        elif isinstance(t, (int, float)):
            mtime = t / 1000.0  # TIMESTAMP_MILLIS read as a plain integer
        else:
            raise InvalidInputError(f"S3 Inventory file {name} of {url}, row {i + 1}: no last_modified_date")
        current = not (cols.get("IsDeleteMarker") or [False] * (i + 1))[i] and \
            (cols.get("IsLatest") or [True] * (i + 1))[i] is not False
        yield (cols["Bucket"][i], cols["Key"][i], int(cols["Size"][i] or 0), mtime,
               (cols.get("ETag") or [""] * (i + 1))[i] or "", current)


def inventory_from_rows(url: str, source_bucket: str, created: float, rows, root: str) -> Inventory:
    """The :class:`Inventory` of ``rows`` (``(bucket, key, size, mtime, etag, current)``) for the
    repository whose keys are under ``root`` (its S3 prefix with a trailing ``/``, or ``""``)."""
    inv = Inventory(url, source_bucket, created)
    want = root + keys.PACKS
    for bucket, key, size, mtime, etag, current in rows:
        inv.rows += 1
        if bucket != source_bucket or not current or not key.startswith(want):
            continue
        if mtime > created:
            inv.newer += 1  # written while the report was made: not on its word
            continue
        inv.packs.append(ObjectInfo(key[len(root):], size, etag, mtime))
    return inv


def _split(url: str) -> tuple[str, str]:
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise InvalidInputError(f"an S3 Inventory is named by its manifest, s3://BUCKET/KEY/manifest.json, not {url!r}")
    bucket, _, key = url[5:].partition("/")
    if not bucket or not key:
        raise InvalidInputError(f"an S3 Inventory is named by its manifest, s3://BUCKET/KEY/manifest.json, not {url!r}")
    return bucket, key


def read_inventory(url: str, store) -> Inventory:
    """Read the S3 Inventory whose ``manifest.json`` is at ``url`` for the repository on ``store``.

    The report's files are read with the repository store's own S3 client (its endpoint and
    credentials): one GET for the manifest and one per data file.

    Args:
        url: ``s3://BUCKET/KEY`` of the ``manifest.json``.
        store: the repository's store: an :class:`~snapstore.stores.s3.S3Store`, or a store
            wrapping one (``.inner``, an encrypted repository's :class:`SealedStore`).
    Returns:
        The :class:`Inventory` (its ``packs`` under the repository's prefix).
    Raises:
        InvalidInputError: ``url`` is not ``s3://...``, the repository is not on S3, the manifest
            or a data file is malformed, or the report lists another bucket than the repository's.
        IntegrityError: a data file's MD5 is not the manifest's ``MD5checksum``.
        ObjectNotFound: the manifest or a data file is missing.
        StoreError: S3 failed.
    """
    bucket, key = _split(url)
    s3 = store
    while not hasattr(s3, "bucket") and hasattr(s3, "inner"):
        s3 = s3.inner
    if not hasattr(s3, "bucket") or not hasattr(s3, "get_outside"):
        raise InvalidInputError("--inventory reads an S3 Inventory: the repository must be on S3 (s3://...)")
    requests = {"GET": 0}

    def get(k: str) -> bytes:
        requests["GET"] += 1
        return s3.get_outside(bucket, k)

    man = parse_manifest(url, get(key))
    if man["source_bucket"] != s3.bucket:
        raise InvalidInputError(f"the S3 Inventory {url} lists bucket {man['source_bucket']!r}, "
                                f"not the repository's {s3.bucket!r}")

    def rows():
        for fkey, _, md5 in man["files"]:
            data = get(fkey)
            if md5 and hashlib.md5(data).hexdigest() != md5.lower():
                raise IntegrityError(f"s3://{bucket}/{fkey}", f"the S3 Inventory file's MD5 is not the "
                                     f"manifest's MD5checksum {md5}")
            if man["format"] == "CSV":
                yield from _csv_rows(url, fkey, data, man["schema"])
            else:
                yield from _parquet_rows(url, fkey, data)
    root = s3.prefix + "/" if s3.prefix else ""
    inv = inventory_from_rows(url, man["source_bucket"], man["created"], rows(), root)
    inv.files = len(man["files"])
    inv.requests = requests
    return inv
