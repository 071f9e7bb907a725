"""``stats``: what the repository holds and what storing it costs (``estimate_cost``, S3 list prices).

Layer 4's whole-repository walks (uses :mod:`snapstore.maintenance.runs`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from collections import defaultdict

from ..errors import SnapstoreError
from ..format import keys
from ..format.codec import encode_json
from ..format.logseg import BUNDLE_LOGS, parse_logseg_key
from ..format.manifest import Manifest
from ..format import bundle, shared
from ..repo.repository import Repository
from .bill import bill
from .runs import read_all_runs, void_record
from ..stores.base import store_capabilities
from ..stores.crypt import UNSEALED_SIZE

_CATEGORY = {"config": "config", "pack": "packs", "manifest": "manifests", "index": "index", "logseg": "log",
             "fwd": "forward", "gc": "gc", "runmark": "runmarks", "pin": "runmarks"}
"""Kind of :func:`snapstore.format.keys.parse_key` -> the category ``stats`` counts it in (others: ``other``)."""


S3_STANDARD_PRICES = {"gb_month": 0.023, "PUT": 0.005 / 1000, "LIST": 0.005 / 1000, "GET": 0.0004 / 1000,
                      "HEAD": 0.0004 / 1000, "DELETE": 0.0}
"""S3 Standard list prices, us-east-1 (USD): storage per GB-month, and per request by kind."""



def _is_shared_pack(key: str) -> bool:
    """Whether pack ``key`` is a cross-run shared object (docs/format.md §29): its id has the shared
    shape and names an epoch that has begun (a random id merely starting with ``0xff`` rarely does)."""
    try:
        pid = keys.pack_id_from_key(key)
    except (SnapstoreError, ValueError):
        return False
    if pid is None:  # a file under packs/ that names no pack (packs/ab/notes.txt)
        return False
    e = shared.shared_epoch(pid)
    return e is not None and shared.epoch_end(e) - shared.EPOCH_SECONDS <= time.time() + shared.EPOCH_SECONDS

def estimate_cost(stored_bytes: int, requests: dict, prices: dict | None = None) -> dict:
    """Estimate S3 cost in USD.

    Args:
        stored_bytes: bytes stored.
        requests: request counts by kind (``PUT``, ``GET``, ...).
        prices: overrides for :data:`S3_STANDARD_PRICES` (``gb_month`` and per-request prices).
    Returns:
        ``{"prices": ..., "storage_per_month": usd, "requests": usd}``.
    """
    p = dict(S3_STANDARD_PRICES)
    p.update(prices or {})
    return {"prices": p, "storage_per_month": stored_bytes / 1e9 * p["gb_month"],
            "requests": sum(n * p.get(k, 0.0) for k, n in requests.items())}


def session_state_bytes(m: Manifest) -> int:
    """Bytes of checkpoint ``m``'s session state as exact JSON (0 without one): the size its value
    tree or chunk records, or the length of the inline value's encoding."""
    if m.session_state_tree is not None:
        return m.session_state_tree.size
    if m.session_state_ref:
        return int(m.session_state_ref[2])
    if m.has_session_state:
        return len(encode_json(m.session_state)[0])
    return 0


def stats(repo: Repository, prices: dict | None = None, cost: bool = False, class_prices: dict | None = None,
          tier: str = "standard") -> dict:
    """Repository statistics.

    Args:
        repo: the repository.
        prices: price overrides for the cost estimate (see :func:`estimate_cost`).
    Returns:
        dict with ``runs`` and ``checkpoints`` (live), ``logical_bytes`` (the JSON bytes of every
        live checkpoint's messages and session state: the cost of storing every checkpoint whole;
        ``message_bytes`` and ``session_state_bytes`` are its two parts), ``stored_bytes`` (all
        objects), ``ratio`` (logical / stored), ``objects`` (category -> ``{"count", "bytes"}``; ``manifests`` also has ``"stubs"``, the compacted records of 0 bytes, when there are any; ``packs``
        ``"shared"`` and ``"shared_bytes"``, the cross-run shared objects of docs/format.md §29) and
        ``requests`` (this process's store requests so far), and ``cost``: an estimate at S3
        Standard list prices (``storage_per_month`` for what is stored, ``requests`` for the requests
        counted), with the prices used; ``leftovers`` (``{"count", "bytes"}``): crash leftovers
        outside the objects (temporary files of killed processes, incomplete S3 multipart uploads;
        not in ``stored_bytes``), which ``gc`` removes once older than its grace period.
        With ``cost``, also ``bill``: :func:`snapstore.maintenance.bill.bill` per storage class
        (bundles in the class their index records name, ages by the local clock), at S3's public
        prices overridden by ``class_prices``, the restore estimate at ``tier``.
    Raises:
        InvalidInputError: a bad tier or price override (``cost``).
    """
    t = tally(repo.store.list(""))
    fig = live_figures(repo, t)
    return assemble(repo, t.cats, t.total, fig, lambda: (repo.store.stats.as_dict(), repo.store.stats.counts),
                    prices, cost, t.bundle_infos, class_prices, tier)


class Tally:
    """What one pass over listed objects counts (:func:`tally`).

    Attributes:
        cats: category -> ``{"count", "bytes"}`` (plus ``stubs``, ``voids``, ``shared``,
            ``shared_bytes`` where they apply), as in :func:`stats`' ``objects``.
        keys_by_run: run key -> keys of its manifests that hold a record.
        logsegs_by_run: run key -> ``{(hi, level): key}`` of its log segments.
        total: bytes of every object counted (sealed objects at their plaintext size).
        bundle_infos: ObjectInfo of every archive bundle counted.
    """

    def __init__(self):
        self.cats: dict = defaultdict(lambda: {"count": 0, "bytes": 0})
        self.keys_by_run: dict = defaultdict(list)
        self.logsegs_by_run: dict = defaultdict(dict)
        self.total = 0
        self.bundle_infos: list = []


def tally(infos) -> Tally:
    """Count listed objects by category, and file the run-log keys among them by run.

    Args:
        infos: an iterable of :class:`~snapstore.stores.base.ObjectInfo` (one LIST, or part of one:
            a partition's key range of ``runs/``, or everything outside ``runs/``).
    Returns:
        A :class:`Tally`.
    """
    t = Tally()
    cats = t.cats
    for info in infos:
        if info.size >= UNSEALED_SIZE:  # not a sealed object (a stray file): counted at its stored size
            info = replace(info, size=info.size - UNSEALED_SIZE)
        k = info.key
        where = keys.parse_key(k)
        c = _CATEGORY.get(where.kind, "packs" if k.startswith(keys.PACKS) else "other")
        if c == "other" and k.startswith(bundle.ARCHIVE):  # §28: bundles, their hot index records and logs
            c = "bundles" if k.startswith(bundle.DATA) else "bundle logs" if k.startswith(BUNDLE_LOGS) else "bundle index"
            if c == "bundles":
                t.bundle_infos.append(info)
        if c == "manifests":
            if void_record(info):
                cats[c]["voids"] = cats[c].get("voids", 0) + 1  # void records (§15): no record
            else:
                t.keys_by_run[where.run_key].append(k)
            if info.size == 0:
                cats[c]["stubs"] = cats[c].get("stubs", 0) + 1  # compacted records (§14)
        elif c == "packs" and _is_shared_pack(k):
            cats[c]["shared"] = cats[c].get("shared", 0) + 1  # cross-run shared objects (§29)
            cats[c]["shared_bytes"] = cats[c].get("shared_bytes", 0) + info.size
        elif c == "log":
            pos = parse_logseg_key(k)
            if pos is not None:
                t.logsegs_by_run[where.run_key][pos] = k
        cats[c]["count"] += 1
        cats[c]["bytes"] += info.size
        t.total += info.size
    return t


def live_figures(repo: Repository, t: Tally) -> dict:
    """The live checkpoints' figures of the runs in ``t``: their logs read in bulk (the records log
    segments cover from them, one GET per segment, not per manifest).

    Args:
        repo: the repository.
        t: a :class:`Tally` whose ``keys_by_run`` / ``logsegs_by_run`` name the runs to read.
    Returns:
        ``{"runs": runs with a live checkpoint, "checkpoints": live checkpoints, "message_bytes",
        "session_state_bytes"}`` (bytes of exact JSON), plus ``"per_run"``: run key ->
        ``(checkpoints, message_bytes, session_state_bytes)`` of every run with one.
    """
    logs = read_all_runs(repo, t.keys_by_run, logsegs_by_run=t.logsegs_by_run)
    per_run = {}
    for rk, log in logs.items():
        if log.live:
            per_run[rk] = (len(log.live), sum(m.size for m in log.live), sum(session_state_bytes(m) for m in log.live))
    return {"runs": len(per_run), "checkpoints": sum(v[0] for v in per_run.values()),
            "message_bytes": sum(v[1] for v in per_run.values()),
            "session_state_bytes": sum(v[2] for v in per_run.values()), "per_run": per_run}


def assemble(repo: Repository, cats: dict, total: int, fig: dict, requests,
             prices: dict | None = None, cost: bool = False, bundle_infos: list = (),
             class_prices: dict | None = None, tier: str = "standard") -> dict:
    """:func:`stats`' report from its parts (the one-process walk's, or a partitioned job's merged).

    Args:
        repo: the repository (its crash leftovers are looked up here; its bundle index with ``cost``).
        cats: category -> counts, as :attr:`Tally.cats`; total: bytes of every object.
        fig: :func:`live_figures`' figures (``runs``, ``checkpoints``, ``message_bytes``, ``session_state_bytes``).
        requests: ``requests() -> (entry, counts)``, called once the leftovers are looked up: the
            report's ``requests`` entry (the requests made) and request kind -> count, priced in
            the cost estimate.
        prices / cost / class_prices / tier: as for :func:`stats`; bundle_infos: the bundles listed (``cost``).
    Returns:
        The report dict described at :func:`stats`.
    """
    message_bytes, state_bytes = fig["message_bytes"], fig["session_state_bytes"]
    logical = message_bytes + state_bytes
    find = repo.store.leftovers if store_capabilities(repo.store).leftovers else None
    try:
        left = find() if find is not None else []
    except SnapstoreError:
        left = []  # e.g. not allowed to list multipart uploads
    entry, counts = requests()
    out = {"runs": fig["runs"], "checkpoints": fig["checkpoints"],
           "logical_bytes": logical, "message_bytes": message_bytes, "session_state_bytes": state_bytes,
           "stored_bytes": total, "ratio": (logical / total) if total else 0.0,
           "objects": dict(cats), "requests": entry,
           "cost": estimate_cost(total, counts, prices),
           "leftovers": {"count": len(left), "bytes": sum(it.size for it in left)}}
    if cost:
        cls = {ix.key: ix.storage_class for ix in repo.bundles.load().values()}
        hot = (sum(v["count"] for k, v in cats.items() if k != "bundles"),
               sum(v["bytes"] for k, v in cats.items() if k != "bundles"))
        out["bill"] = bill(hot, [(cls.get(i.key, "STANDARD"), i.size, i.mtime) for i in bundle_infos], time.time(),
                           class_prices, tier)
    return out
