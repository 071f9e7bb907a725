"""The bill (``snapstore stats --cost``): what a repository costs per storage class at S3's public
prices, with the classes' per-object rules and minimum durations (docs/format.md §28, "The bill").

Layer 3. Hot objects are in ``STANDARD``; each bundle is in the class its index record names
(a bundle no index record names counts as ``STANDARD``). Per class: objects, bytes, billed bytes
(:func:`~snapstore.maintenance.bundlegc.billed_bytes`: 128 KiB at least in ``STANDARD_IA`` and
``GLACIER_IR``, 40 KiB more per object in ``GLACIER`` and ``DEEP_ARCHIVE``, 32 KiB of it at the
class's price and 8 KiB at STANDARD's), USD per month, the
early-deletion charge still owed (what deleting every object of the class now would cost: the
rest of the minimum duration), what writing the bundles cost in requests of their class (the
transition), and what restoring or reading every bundle once would cost (requests and per-GB
retrieval at the chosen tier). Prices come from :data:`PRICES`; any of them can be overridden.
"""

from __future__ import annotations

from ..errors import InvalidInputError
from ..format.bundle import STORAGE_CLASSES
from .bundlegc import (PRICE_GB_MONTH, STANDARD_OVERHEAD_BYTES, billed_bytes, class_billed_bytes,
                       early_deletion_fee)

PUT_PER_1000 = {"STANDARD": 0.005, "STANDARD_IA": 0.01, "GLACIER_IR": 0.02, "GLACIER": 0.03,
                "DEEP_ARCHIVE": 0.05, "INTELLIGENT_TIERING": 0.005}
"""USD per 1,000 PUT (or lifecycle transition) requests into each class."""

GET_PER_1000 = {"STANDARD": 0.0004, "STANDARD_IA": 0.001, "GLACIER_IR": 0.01, "GLACIER": 0.0004,
                "DEEP_ARCHIVE": 0.0004, "INTELLIGENT_TIERING": 0.0004}
"""USD per 1,000 GETs (for GLACIER/DEEP_ARCHIVE: of the restored copy)."""

RETRIEVAL_PER_GB = {"STANDARD_IA": {"any": 0.01}, "GLACIER_IR": {"any": 0.03},
                    "GLACIER": {"expedited": 0.03, "standard": 0.01, "bulk": 0.0},
                    "DEEP_ARCHIVE": {"standard": 0.02, "bulk": 0.0025}}
"""USD per GB retrieved, by class and restore tier (``any``: a class read in place)."""

RESTORE_PER_1000 = {"GLACIER": {"expedited": 10.0, "standard": 0.05, "bulk": 0.0},
                    "DEEP_ARCHIVE": {"standard": 0.10, "bulk": 0.025}}
"""USD per 1,000 restore requests, by class and tier."""

MONITORING_PER_1000 = 0.0025
"""USD per 1,000 objects of 128 KiB or more a month in INTELLIGENT_TIERING (smaller ones are not monitored)."""

TIERS = ("bulk", "standard", "expedited")


def prices(overrides: dict | None = None) -> dict:
    """The price table, with ``overrides`` applied.

    Args:
        overrides: ``{"gb_month": {class: usd}, "put_per_1000": {...}, "get_per_1000": {...},
            "retrieval_per_gb": {class: {tier: usd}}, "restore_per_1000": {class: {tier: usd}},
            "monitoring_per_1000": usd}``, any subset (a class's entry replaces that entry only).
    Returns:
        The full table in the same shape.
    Raises:
        InvalidInputError: an unknown table or class, or a price that is not a non-negative number.
    """
    out = {"gb_month": dict(PRICE_GB_MONTH), "put_per_1000": dict(PUT_PER_1000), "get_per_1000": dict(GET_PER_1000),
           "retrieval_per_gb": {c: dict(v) for c, v in RETRIEVAL_PER_GB.items()},
           "restore_per_1000": {c: dict(v) for c, v in RESTORE_PER_1000.items()},
           "monitoring_per_1000": MONITORING_PER_1000}
    for table, v in (overrides or {}).items():
        if table not in out:
            raise InvalidInputError(f"unknown price table {table!r} (one of {', '.join(out)})")
        if table == "monitoring_per_1000":
            out[table] = _price(v, table)
            continue
        if not isinstance(v, dict):
            raise InvalidInputError(f"prices {table!r} must map storage classes to prices")
        for cls, p in v.items():
            if cls not in STORAGE_CLASSES:
                raise InvalidInputError(f"prices {table!r}: unknown storage class {cls!r}")
            out[table][cls] = {t: _price(x, table) for t, x in p.items()} if isinstance(p, dict) else _price(p, table)
    return out


def _price(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 0 or x == float("inf"):
        raise InvalidInputError(f"price {name} must be a non-negative number, got {x!r}")
    return float(x)


def bill(hot: tuple[int, int], bundles: list, now: float, overrides: dict | None = None,
         tier: str = "standard") -> dict:
    """The bill of a repository.

    Args:
        hot: ``(objects, bytes)`` of everything but bundles (in STANDARD).
        bundles: ``(storage class, bytes, store timestamp)`` per bundle (seconds since the epoch).
        now: the current time (seconds since the epoch), for ages.
        overrides: price overrides (:func:`prices`).
        tier: restore tier for the restore estimate (``bulk``, ``standard``, ``expedited``).
    Returns:
        ``{"classes": {class: {"objects", "bytes", "billed_bytes", "per_month", "early_deletion_owed"}},
        "per_month", "early_deletion_owed", "transition": {"requests", "usd"}, "restore_once":
        {"tier", "requests", "gb", "usd"}, "prices"}`` (USD; GB = 2**30 bytes).
    Raises:
        InvalidInputError: a bad tier or price override.
    """
    if tier not in TIERS:
        raise InvalidInputError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    p = prices(overrides)
    classes: dict = {}

    def row(cls):
        return classes.setdefault(cls, {"objects": 0, "bytes": 0, "billed_bytes": 0, "per_month": 0.0,
                                        "early_deletion_owed": 0.0, "class_billed": 0})
    n, size = hot
    if n:
        r = row("STANDARD")
        r["objects"], r["bytes"], r["billed_bytes"], r["class_billed"] = n, size, size, size
    transition = restore_n = 0
    transition_usd = restore_usd = restore_gb = 0.0
    for cls, b, mtime in bundles:
        r = row(cls)
        r["objects"] += 1
        r["bytes"] += b
        r["billed_bytes"] += billed_bytes(cls, b)
        age = max(0.0, (now - mtime) / 86400.0)
        r["early_deletion_owed"] += early_deletion_fee(cls, b, age, p["gb_month"][cls])
        r["class_billed"] += class_billed_bytes(cls, b)
        r["per_month"] += STANDARD_OVERHEAD_BYTES.get(cls, 0) / 2 ** 30 * p["gb_month"]["STANDARD"]
        transition += 1
        transition_usd += p["put_per_1000"][cls] / 1000
        gb = b / 2 ** 30
        if cls in p["restore_per_1000"]:
            t = p["restore_per_1000"][cls]
            use = tier if tier in t else "standard"
            restore_n += 1
            restore_usd += t[use] / 1000 + gb * p["retrieval_per_gb"][cls].get(use, 0.0)
        else:
            restore_usd += gb * p["retrieval_per_gb"].get(cls, {}).get("any", 0.0)
        restore_usd += p["get_per_1000"][cls] / 1000
        restore_gb += gb
        if cls == "INTELLIGENT_TIERING" and b >= 128 << 10:
            r["per_month"] += p["monitoring_per_1000"] / 1000
    for cls, r in classes.items():
        r["per_month"] += r.pop("class_billed") / 2 ** 30 * p["gb_month"][cls]
    return {"classes": classes, "per_month": sum(r["per_month"] for r in classes.values()),
            "early_deletion_owed": sum(r["early_deletion_owed"] for r in classes.values()),
            "transition": {"requests": transition, "usd": transition_usd},
            "restore_once": {"tier": tier, "requests": restore_n, "gb": restore_gb, "usd": restore_usd},
            "prices": p}
