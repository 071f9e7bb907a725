"""GC listing from an S3 Inventory (snapstore/maintenance/inventory.py), on moto's HTTP server:
real inventory reports (manifest.json beside gzip CSV or Parquet files in another bucket) written
here from the source bucket's own listing. A pack newer than the inventory, or missing from it, is
never deleted on its word; a malformed manifest is a typed error."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import time

import pytest

from snapstore import CheckpointManager
from snapstore.errors import IntegrityError, InvalidInputError, ObjectNotFound
from snapstore.maintenance.gc import gc
from snapstore.maintenance.inventory import read_inventory
from snapstore.stores import open_store

CSV_SCHEMA = "Bucket, Key, Size, LastModifiedDate, ETag, StorageClass, IsMultipartUploaded"


def _client(endpoint):
    import boto3
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def _repo(endpoint):
    bucket = f"inv-src-{os.urandom(4).hex()}"
    dest = f"inv-dst-{os.urandom(4).hex()}"
    c = _client(endpoint)
    c.create_bucket(Bucket=bucket)
    c.create_bucket(Bucket=dest)
    url, opts = f"s3://{bucket}/repo", {"endpoint_url": endpoint}
    return CheckpointManager(open_store(url, **opts)), bucket, dest


def _save_run(mgr, run, turns=3):
    msgs, ids = [], []
    for i in range(turns):
        msgs = msgs + [{"role": "user", "content": f"{run} turn {i} " + "words " * 40}]
        ids.append(mgr.save(run, msgs, step=i))
    return msgs


def _objects(c, bucket):
    out = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out += page.get("Contents", [])
    return out


def _packs(c, bucket):
    return {o["Key"] for o in _objects(c, bucket) if o["Key"].startswith("repo/packs/")}


def write_inventory(c, bucket, dest, created, skip=(), fmt="CSV", manifest_extra=None):
    """An S3 Inventory report of ``bucket`` as S3 writes one, into ``dest``: its objects now (less
    ``skip``), ``creationTimestamp`` ``created`` (seconds); returns the manifest's URL."""
    rows = [o for o in _objects(c, bucket) if o["Key"] not in skip]
    base = f"inv/{bucket}/cfg/{time.strftime('%Y-%m-%dT%H-%MZ', time.gmtime(created))}"
    if fmt == "CSV":
        buf = io.StringIO()
        w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for o in rows:
            lm = o["LastModified"].strftime("%Y-%m-%dT%H:%M:%S.000Z")
            w.writerow([bucket, o["Key"].replace("/", "%2F"), o["Size"], lm, o["ETag"].strip('"'), "STANDARD", "FALSE"])
        data, name = gzip.compress(buf.getvalue().encode()), f"inv/{bucket}/cfg/data/part-0.csv.gz"
        schema = CSV_SCHEMA
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        t = pa.table({"bucket": [bucket] * len(rows), "key": [o["Key"] for o in rows],
                      "size": pa.array([o["Size"] for o in rows], pa.int64()),
                      "last_modified_date": pa.array([o["LastModified"] for o in rows], pa.timestamp("ms", tz="UTC")),
                      "e_tag": [o["ETag"].strip('"') for o in rows],
                      "is_delete_marker": [False] * len(rows)})
        sink = io.BytesIO()
        pq.write_table(t, sink)
        data, name = sink.getvalue(), f"inv/{bucket}/cfg/data/part-0.parquet"
        schema = "message s3.inventory { required binary bucket (STRING); required binary key (STRING); ... }"
    c.put_object(Bucket=dest, Key=name, Body=data)
    man = {"sourceBucket": bucket, "destinationBucket": f"arn:aws:s3:::{dest}", "version": "2016-11-30",
           "creationTimestamp": str(int(created * 1000)), "fileFormat": fmt, "fileSchema": schema,
           "files": [{"key": name, "size": len(data), "MD5checksum": hashlib.md5(data).hexdigest()}]}
    man.update(manifest_extra or {})
    c.put_object(Bucket=dest, Key=f"{base}/manifest.json", Body=json.dumps(man).encode())
    return f"s3://{dest}/{base}/manifest.json"


def test_an_inventory_older_than_a_packs_grace_period_never_deletes_the_newer_pack(moto_server):
    mgr, bucket, dest = _repo(moto_server)
    c = _client(moto_server)
    kept = _save_run(mgr, "kept")
    _save_run(mgr, "old")
    mgr.delete("old")
    created = mgr.repo.store_time()
    before = _packs(c, bucket)
    time.sleep(1.1)  # (S3's LastModified has second resolution)
    _save_run(mgr, "new")
    mgr.delete("new")
    newer = _packs(c, bucket) - before
    assert newer
    absent = write_inventory(c, bucket, dest, created, skip=newer)  # as S3 made it at ``created``
    late = write_inventory(c, bucket, dest, created + 0.001)  # lists them, modified after its creation
    inv = read_inventory(late, mgr.store)
    assert inv.newer == len(newer) and {i.key for i in inv.packs} == {k[len("repo/"):] for k in before}
    time.sleep(0.6)  # every pack now older than half the grace period
    gc(mgr.repo, grace_period=1, inventory=absent)  # candidates
    time.sleep(1.1)  # the candidate records, and every pack, older than the grace period
    rep = gc(mgr.repo, grace_period=1, inventory=late)
    left = _packs(c, bucket)
    assert newer <= left, "a pack newer than the inventory was deleted on its word"
    assert rep.deleted["packs"] > 0 and not (before - left) & newer
    # grace 0 (no writer) with the inventory: still only what it lists goes
    gc(mgr.repo, grace_period=0, inventory=absent)
    assert newer <= _packs(c, bucket)
    assert mgr.latest("kept").messages == kept
    # a LIST sees the newer packs: they are collected the ordinary way
    gc(mgr.repo, grace_period=0)
    gc(mgr.repo, grace_period=0)
    assert not newer & _packs(c, bucket)
    assert mgr.latest("kept").messages == kept


def test_a_pack_missing_from_the_inventory_is_kept_parquet(moto_server):
    mgr, bucket, dest = _repo(moto_server)
    c = _client(moto_server)
    kept = _save_run(mgr, "kept")
    live = _packs(c, bucket)
    for r in ("gone-1", "gone-2", "gone-3"):
        _save_run(mgr, r)
        mgr.delete(r)
    dead = sorted(_packs(c, bucket) - live)
    assert len(dead) >= 2
    time.sleep(1.1)
    url = write_inventory(c, bucket, dest, mgr.repo.store_time(), skip={dead[0]}, fmt="Parquet")
    rep = gc(mgr.repo, grace_period=0, inventory=url)
    left = _packs(c, bucket)
    assert dead[0] in left and not set(dead[1:]) & left and live <= left
    assert rep.deleted["packs"] == len(dead) - 1
    assert mgr.latest("kept").messages == kept


def test_a_partitioned_gc_lists_from_the_inventory(moto_server, tmp_path):
    from snapstore.maintenance.partsweep import partitioned_gc
    mgr, bucket, dest = _repo(moto_server)
    c = _client(moto_server)
    kept = _save_run(mgr, "kept")
    live = _packs(c, bucket)
    for r in ("gone-1", "gone-2", "gone-3"):
        _save_run(mgr, r)
        mgr.delete(r)
    dead = sorted(_packs(c, bucket) - live)
    time.sleep(1.1)
    url = write_inventory(c, bucket, dest, mgr.repo.store_time(), skip={dead[0]})
    rep = partitioned_gc(f"s3://{bucket}/repo", str(tmp_path / "job"), 2, grace_period=0, inventory=url,
                         store_options={"endpoint_url": moto_server})
    left = _packs(c, bucket)
    assert rep["listing"] == f"inventory {url}" and rep["listed_packs"] == len(live) + len(dead) - 1
    assert dead[0] in left and not set(dead[1:]) & left and live <= left
    assert rep["deleted_packs"] == len(dead) - 1 and rep["requests"]["LIST"] > 0
    assert mgr.latest("kept").messages == kept


@pytest.mark.parametrize("bad, says", [
    (b"{not json", "not JSON"),
    (json.dumps({"sourceBucket": "SRC", "creationTimestamp": "1", "fileFormat": "CSV", "files": []}).encode(),
     "fileSchema"),
    (json.dumps({"sourceBucket": "SRC", "creationTimestamp": "1", "fileFormat": "ORC", "fileSchema": "x",
                 "files": []}).encode(), "ORC"),
    (json.dumps({"sourceBucket": "SRC", "creationTimestamp": "yesterday", "fileFormat": "CSV",
                 "fileSchema": CSV_SCHEMA, "files": []}).encode(), "creationTimestamp"),
    (json.dumps({"sourceBucket": "SRC", "creationTimestamp": "1", "fileFormat": "CSV",
                 "fileSchema": "Bucket, Key", "files": []}).encode(), "Size"),
    (json.dumps({"sourceBucket": "another-bucket", "creationTimestamp": "1", "fileFormat": "CSV",
                 "fileSchema": CSV_SCHEMA, "files": []}).encode(), "another-bucket"),
])
def test_a_malformed_manifest_is_a_typed_error_and_gc_deletes_nothing(moto_server, bad, says):
    mgr, bucket, dest = _repo(moto_server)
    c = _client(moto_server)
    _save_run(mgr, "gone")
    mgr.delete("gone")
    packs = _packs(c, bucket)
    c.put_object(Bucket=dest, Key="inv/manifest.json", Body=bad.replace(b"SRC", bucket.encode()))
    with pytest.raises(InvalidInputError, match=says):
        gc(mgr.repo, grace_period=0, inventory=f"s3://{dest}/inv/manifest.json")
    assert _packs(c, bucket) == packs
    with pytest.raises(ObjectNotFound):
        gc(mgr.repo, grace_period=0, inventory=f"s3://{dest}/inv/absent/manifest.json")
    with pytest.raises(InvalidInputError):
        gc(mgr.repo, grace_period=0, inventory="/local/manifest.json")


def test_a_data_file_whose_md5_differs_from_the_manifest_is_an_integrity_error(moto_server):
    mgr, bucket, dest = _repo(moto_server)
    c = _client(moto_server)
    _save_run(mgr, "gone")
    mgr.delete("gone")
    url = write_inventory(c, bucket, dest, mgr.repo.store_time(), manifest_extra={})
    key = url[len(f"s3://{dest}/"):]
    man = json.loads(c.get_object(Bucket=dest, Key=key)["Body"].read())
    man["files"][0]["MD5checksum"] = "0" * 32
    c.put_object(Bucket=dest, Key=key, Body=json.dumps(man).encode())
    packs = _packs(c, bucket)
    with pytest.raises(IntegrityError, match="MD5"):
        gc(mgr.repo, grace_period=0, inventory=url)
    assert _packs(c, bucket) == packs


def test_an_inventory_needs_a_repository_on_s3(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "r"))
    _save_run(mgr, "a")
    with pytest.raises(InvalidInputError, match="on S3"):
        gc(mgr.repo, grace_period=0, inventory="s3://b/inv/manifest.json")


def test_cli_gc_inventory_on_a_local_repository_is_one_line(tmp_path):
    from click.testing import CliRunner

    from snapstore.cli import cli
    root = str(tmp_path / "r")
    _save_run(CheckpointManager(root), "a")
    for extra in ([], ["--plan", str(tmp_path / "job"), "-n"]):
        r = CliRunner().invoke(cli, ["--repo", root, "gc", "--inventory", "s3://b/inv/manifest.json", *extra])
        assert r.exit_code != 0 and "on S3" in r.output, r.output
        assert len([ln for ln in r.output.splitlines() if ln.startswith("snapstore")]) == 1, r.output
