"""The bill (``stats --cost``, docs/format.md §28 "The bill"): storage per class at S3's public
prices with the per-object rules and minimum durations, transition and restore estimates; a
repository with bundles in DEEP_ARCHIVE and GLACIER_IR on moto's HTTP server, a local one, and
the issue's figures for a million 20 KB checkpoints."""

from __future__ import annotations

import json

import boto3
import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.maintenance.bill import bill
from snapstore.stores.local import LocalStore
from tests.cli.test_cli import EXAMPLE, run
from tests.helpers.s3_fixtures import new_bucket_name
from tests.maintenance.test_bundle_gc import small_runs

GB = 2 ** 30


def test_a_million_20kb_objects_in_deep_archive_against_16mib_bundles():
    """The issue's comparison: 1M objects of 20 KB in DEEP_ARCHIVE bill 60 KB each (32 KiB of
    overhead at its price, 8 KiB at STANDARD's), about $0.22 a month ($0.24 with GB = 10^9, the
    issue's figure), $50 to write and $100 to restore at the standard tier; packed into 16 MiB
    bundles, cents."""
    now = 1.8e9
    objs = bill((0, 0), [("DEEP_ARCHIVE", 20_000, now)] * 1_000_000, now, tier="bulk")
    row = objs["classes"]["DEEP_ARCHIVE"]
    assert row["billed_bytes"] == 1_000_000 * (20_000 + 40 * 1024)
    assert objs["per_month"] == pytest.approx(1e6 * ((20_000 + 32768) / GB * 0.00099 + 8192 / GB * 0.023))
    assert objs["per_month"] == pytest.approx(0.224, abs=0.001)
    assert objs["transition"]["usd"] == pytest.approx(50.0)
    std = bill((0, 0), [("DEEP_ARCHIVE", 20_000, now)] * 1_000_000, now, tier="standard")["restore_once"]
    # the default estimate is at restore's default tier (a trial found bulk here, standard there)
    assert bill((0, 0), [("DEEP_ARCHIVE", 20_000, now)], now)["restore_once"]["tier"] == "standard"
    assert std["usd"] == pytest.approx(100.0 + 0.4 + 20e9 / GB * 0.02, rel=1e-3)
    assert objs["restore_once"]["usd"] == pytest.approx(1_000_000 * (0.025 / 1000 + 0.0004 / 1000)
                                                        + 20e9 / GB * 0.0025)
    n = 20_000 * 1_000_000 // (16 << 20) + 1
    packed = bill((0, 0), [("DEEP_ARCHIVE", 16 << 20, now)] * n, now, tier="bulk")
    packed_std = bill((0, 0), [("DEEP_ARCHIVE", 16 << 20, now)] * n, now, tier="standard")
    assert packed["per_month"] < 0.02 and packed["transition"]["usd"] + packed_std["restore_once"]["usd"] < 1.0
    # the early-deletion charge owed on day 0 is the whole 180 days; none after them
    assert objs["early_deletion_owed"] == pytest.approx(1e6 * (20_000 + 32768) / GB * 0.00099 * 6)
    assert bill((0, 0), [("DEEP_ARCHIVE", 20_000, now - 181 * 86400)], now)["early_deletion_owed"] == 0


def test_minimum_sizes_overrides_and_bad_input():
    now = 1.8e9
    b = bill((10, 1000), [("GLACIER_IR", 1000, now), ("STANDARD_IA", 1000, now - 40 * 86400)], now)
    assert b["classes"]["GLACIER_IR"]["billed_bytes"] == 128 * 1024  # billed as 128 KiB
    assert b["classes"]["STANDARD_IA"]["early_deletion_owed"] == 0  # past its 30 days
    assert b["classes"]["STANDARD"] == {"objects": 10, "bytes": 1000, "billed_bytes": 1000,
                                        "per_month": pytest.approx(1000 / GB * 0.023), "early_deletion_owed": 0.0}
    o = bill((0, 0), [("GLACIER_IR", GB, now)], now, {"gb_month": {"GLACIER_IR": 0.01}})
    assert o["per_month"] == pytest.approx(0.01) and o["prices"]["gb_month"]["STANDARD"] == 0.023
    for bad in ({"gb_month": {"GLACIER_X": 1}}, {"nope": {}}, {"gb_month": {"STANDARD": -1}},
                {"gb_month": {"STANDARD": float("nan")}}):
        with pytest.raises(InvalidInputError):
            bill((0, 0), [], now, bad)
    with pytest.raises(InvalidInputError, match="tier"):
        bill((0, 0), [], now, tier="fast")


def test_stats_cost_per_class_on_moto_http(store_factory):
    """Bundles written in DEEP_ARCHIVE and GLACIER_IR: the bill puts each in its class (from the
    hot index records, no GET of a cold object), the hot objects in STANDARD, and owes the early
    deletion of both."""
    store = store_factory("s3-http")
    m = CheckpointManager(store)
    small_runs(m, n=2, prefix="deep")
    small_runs(m, n=2, prefix="ir")
    m.archive(["deep-0", "deep-1"], storage_class="DEEP_ARCHIVE")
    m.archive(["ir-0", "ir-1"], storage_class="GLACIER_IR")
    m.gc(grace_period=0)
    st = CheckpointManager(store).stats(cost=True)
    b = st["bill"]
    sizes = {i.key.rsplit("/", 1)[1]: i.size for i in store.list("archive/data/")}
    assert set(b["classes"]) == {"STANDARD", "DEEP_ARCHIVE", "GLACIER_IR"}
    assert b["classes"]["DEEP_ARCHIVE"]["objects"] == 1 and b["classes"]["GLACIER_IR"]["objects"] == 1
    assert b["classes"]["DEEP_ARCHIVE"]["bytes"] + b["classes"]["GLACIER_IR"]["bytes"] == sum(sizes.values())
    assert b["classes"]["STANDARD"]["bytes"] == st["stored_bytes"] - sum(sizes.values())
    assert b["classes"]["DEEP_ARCHIVE"]["early_deletion_owed"] > 0 and b["classes"]["GLACIER_IR"]["early_deletion_owed"] > 0
    assert b["transition"]["requests"] == 2 and b["restore_once"]["requests"] == 1


def test_cli_stats_cost(tmp_path, moto_server):
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1").create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/r?endpoint_url={moto_server}&addressing_style=path&region=us-east-1"
    run(url, "import", str(EXAMPLE), "--run", "demo")
    run(url, "archive", "demo", "--storage-class", "DEEP_ARCHIVE")
    out = run(url, "stats", "--cost", "--tier", "standard").stdout
    print(out)
    assert "DEEP_ARCHIVE" in out and "EARLY DELETION OWED" in out and "at the standard tier" in out
    prices = tmp_path / "p.json"
    prices.write_text(json.dumps({"gb_month": {"DEEP_ARCHIVE": 0.5}}))
    r = json.loads(run(url, "stats", "--cost", "--prices", str(prices), "--json").stdout)
    assert r["bill"]["prices"]["gb_month"]["DEEP_ARCHIVE"] == 0.5
    prices.write_text(json.dumps({"gb_month": {"DEEP": 0.5}}))
    bad = run(url, "stats", "--cost", "--prices", str(prices), ok=False)
    assert bad.exit_code != 0 and "DEEP" in bad.stderr
    local = str(tmp_path / "local")
    run(local, "import", str(EXAMPLE), "--run", "demo")
    r = json.loads(run(local, "stats", "--cost", "--json").stdout)
    assert set(r["bill"]["classes"]) == {"STANDARD"} and CheckpointManager(LocalStore(tmp_path / "local")).runs()
