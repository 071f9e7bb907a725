"""GC of archive bundles (docs/format.md §28, "GC"): which bundles serve nothing, two-phase deletion
of those, and the storage classes' minimum durations.

Layer 3. GC (:mod:`snapstore.maintenance.gc`) lists ``archive/data/`` before it loads the index
records; :func:`plan_bundles` then sorts every listed or indexed bundle into:

* **live**: its index record serves a live checkpoint (log position of a run the log still holds
  live), or mark resolved a needed entry to it (a run that continued after its archive). Kept
  whole, even when most of what it serves is gone (see :data:`KEEP_PARTLY_DEAD`).
* **dead**: an index record that serves no live checkpoint and that mark never reached, or a
  bundle no index record names (an archive killed before its switch). These go through the same
  two-phase deletion as packs (§21): a candidate record names them once they are older than half
  the grace period; a later GC deletes them once that record and the bundle are older than the
  grace period and they are still dead; with a grace period of 0 at once. The index record goes
  first, then the bundle: a crash between leaves an unindexed bundle, which a later GC collects.
* **held**: dead, but in a storage class with a minimum storage duration that has not passed on a
  store that bills by class (S3): deleting it now would cost the rest of the minimum anyway
  (:func:`early_deletion_fee`), so GC keeps it unless asked (``force``) and reports the fee.

Why an archive running beside GC loses nothing: the archive publishes its switch within half the
grace period of starting the bundle's upload (or abandons the bundle, :func:`switch_deadline`), so
a bundle that is older than half the grace period with no index record is never switched later;
and a GC deletes an unindexed bundle only a grace period after it found it so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ObjectNotFound
from ..format.bundle import DATA, INDEX, index_key
from ..format.checks import checked_pack_id

MIN_STORAGE_DAYS = {"STANDARD": 0, "STANDARD_IA": 30, "GLACIER_IR": 90, "GLACIER": 90, "DEEP_ARCHIVE": 180,
                    "INTELLIGENT_TIERING": 0}
"""S3's minimum storage duration per class (days): an object deleted earlier is billed for the rest."""

PRICE_GB_MONTH = {"STANDARD": 0.023, "STANDARD_IA": 0.0125, "GLACIER_IR": 0.004, "GLACIER": 0.0036,
                  "DEEP_ARCHIVE": 0.00099, "INTELLIGENT_TIERING": 0.023}
"""S3's public storage price per class (USD per GB-month, us-east-1; GB = 2**30 bytes;
Intelligent-Tiering at its frequent-access tier)."""

MIN_BILLED_BYTES = {"STANDARD_IA": 128 << 10, "GLACIER_IR": 128 << 10}
"""Classes that bill a smaller object as this many bytes."""

OVERHEAD_BYTES = {"GLACIER": 32 << 10, "DEEP_ARCHIVE": 32 << 10}
"""Classes that bill this many bytes more per object at the class's price (its index)..."""

STANDARD_OVERHEAD_BYTES = {"GLACIER": 8 << 10, "DEEP_ARCHIVE": 8 << 10}
"""... and this many more at STANDARD's price (its name and metadata): 40 KiB in all, as S3 bills
them; only the class part has the minimum duration."""

KEEP_PARTLY_DEAD = True
"""A bundle that still serves a live checkpoint is kept whole, never rewritten: GC does not read
bundles, rewriting one means a retrieval (for GLACIER/DEEP_ARCHIVE a restore, hours) plus the
early-deletion fee of the old one, and its dead part is cheap to keep in the classes bundles go to."""


def class_billed_bytes(storage_class: str, size: int) -> int:
    """Bytes S3 bills at ``storage_class``'s price for one object of ``size`` bytes (its minimum
    size, and the class part of its overhead)."""
    return max(size, MIN_BILLED_BYTES.get(storage_class, 0)) + OVERHEAD_BYTES.get(storage_class, 0)


def billed_bytes(storage_class: str, size: int) -> int:
    """All the bytes S3 bills for one object of ``size`` bytes in ``storage_class`` (the class part
    and the part at STANDARD's price)."""
    return class_billed_bytes(storage_class, size) + STANDARD_OVERHEAD_BYTES.get(storage_class, 0)


def early_deletion_fee(storage_class: str, size: int, age_days: float, price_gb_month: float | None = None) -> float:
    """USD S3 charges for deleting an object of ``size`` bytes in ``storage_class`` at ``age_days``
    days old: the rest of the class's minimum duration for its class-billed bytes at its price
    (``price_gb_month``, default :data:`PRICE_GB_MONTH`); 0 once the minimum has passed."""
    left = max(0.0, MIN_STORAGE_DAYS.get(storage_class, 0) - age_days)
    price = PRICE_GB_MONTH.get(storage_class, 0.0) if price_gb_month is None else price_gb_month
    return class_billed_bytes(storage_class, size) / 2 ** 30 * price * left / 30.0


def switch_deadline(grace_period: float) -> float | None:
    """Seconds after starting a bundle's upload by which an archive must write its index record
    (half the grace period), or None with a grace period of 0 (GC runs only while nothing else does)."""
    return grace_period / 2 if grace_period > 0 else None


@dataclass
class Held:
    """A dead bundle kept for its class's minimum duration (``force`` deletes it and pays ``fee``)."""

    key: str
    storage_class: str
    size: int
    days_left: float
    fee: float

    def as_dict(self) -> dict:
        """JSON-friendly form."""
        return {"key": self.key, "class": self.storage_class, "bytes": self.size,
                "days_left": round(self.days_left, 2), "fee_usd": self.fee}


@dataclass
class BundleSweep:
    """What GC does to bundles (decided by :func:`plan_bundles`).

    Attributes:
        delete: ``(bundle id, index key or None, bundle key or None, index bytes, bundle bytes)``
            of the dead bundles deleted now (index record first).
        new_candidates: hex ids of dead bundles that become candidates.
        pending: dead bundles waiting for the grace period.
        held: :class:`Held` bundles (minimum duration).
        partly_dead: keys of live bundles some of whose served checkpoints are gone (kept whole).
        read: keys of bundles serving no live checkpoint, kept because a run that is not
            archived reads from them (mark reached them: a fork of an archived checkpoint).
        fee: early-deletion fee (USD) of what ``force`` deletes now.
    """

    delete: list = field(default_factory=list)
    new_candidates: list = field(default_factory=list)
    pending: int = 0
    held: list = field(default_factory=list)
    partly_dead: list = field(default_factory=list)
    read: list = field(default_factory=list)
    fee: float = 0.0


def list_bundle_objects(store) -> tuple[dict, dict]:
    """``archive/data/`` then ``archive/index/`` listed (two LISTs, in that order: a bundle switched
    between them is seen indexed): ``(bundle id -> ObjectInfo, bundle id -> index ObjectInfo)``;
    keys that do not end in a bundle id are skipped."""
    data, index = {}, {}
    for prefix, out in ((DATA, data), (INDEX, index)):
        for info in store.list(prefix):
            try:
                out[checked_pack_id(info.key.rsplit("/", 1)[1])] = info
            except Exception:  # noqa: BLE001 - not a bundle key: verify reports it
                continue
    return data, index


def plan_bundles(g, matured: set, pending: set, force: bool = False) -> BundleSweep:
    """Sort the bundles of GC ``g`` (a :class:`~snapstore.maintenance.gc.GCPlan` after mark, with
    ``bundle_objs``/``bundle_index_infos`` from :func:`list_bundle_objects` and ``bundles`` the
    index records loaded after them) into live, deleted, candidates, pending and held.

    Args:
        g: the GC plan.
        matured / pending: bundle hex ids named by candidate records older / younger than the
            grace period.
        force: delete dead bundles whose class's minimum duration has not passed (the fee is
            reported in ``BundleSweep.fee``).
    Returns:
        A :class:`BundleSweep`. Issues a HEAD per unindexed bundle on a store that bills by class
        (its class is not recorded anywhere else).
    """
    out = BundleSweep()
    store, now, grace, mature = g.repo.store, g.now, g.grace, g.mature
    settled = now - grace / 2
    billed_by_class = getattr(store, "put_with_storage_class", None) is not None
    live_seqs = {rk: {m.seq for m in log.live} for rk, log in g.logs.items()}
    reached = set(g.reach.packs)
    objs, ix_infos = g.bundle_objs, g.bundle_index_infos
    for bid in sorted(set(objs) | set(g.bundles)):
        ix = g.bundles.get(bid)
        if ix is not None:
            served = {rk: set(v["seqs"]) & live_seqs.get(rk, set()) for rk, v in ix.runs.items()}
            if any(served.values()) or bid in reached:
                if not any(served.values()):
                    out.read.append(ix.key)
                elif any(set(v["seqs"]) - served[rk] for rk, v in ix.runs.items()):
                    out.partly_dead.append(ix.key)
                continue
        info = objs.get(bid)
        iinfo = ix_infos.get(bid) if ix is not None else None
        times = [i.mtime for i in (info, iinfo) if i is not None]
        if grace == 0:
            due = True
        else:
            due = bid.hex() in matured and all(t <= mature for t in times)
            if not due:
                if bid.hex() not in pending and all(t <= settled for t in times):
                    out.new_candidates.append(bid.hex())
                out.pending += 1
                continue
        if info is not None and billed_by_class:
            cls = ix.storage_class if ix is not None else _class_of(store, info.key)
            age = (now - info.mtime) / 86400.0
            fee = early_deletion_fee(cls, info.size, age)
            if age < MIN_STORAGE_DAYS.get(cls, 0):
                if not force:
                    out.held.append(Held(info.key, cls, info.size, MIN_STORAGE_DAYS[cls] - age, fee))
                    if bid.hex() in matured:
                        out.new_candidates.append(bid.hex())  # stays a candidate while held
                    continue
                out.fee += fee
        out.delete.append((bid, index_key(bid) if ix is not None else None, info.key if info is not None else None,
                           iinfo.size if iinfo is not None else 0, info.size if info is not None else 0))
    return out


def _class_of(store, key: str) -> str:
    """The storage class S3 holds ``key`` in (one HEAD); STANDARD when the store does not say."""
    fn = getattr(store, "storage_class_of", None)
    if fn is None:
        return "STANDARD"
    try:
        return fn(key)
    except ObjectNotFound:
        return "STANDARD"


def execute_bundles(g, sweep: BundleSweep, apply: bool) -> None:
    """Delete ``sweep.delete`` (each index record before its bundle) and count it in ``g.rep``
    (``deleted["bundle index"]``, ``deleted["bundles"]``); ``apply=False`` (a dry run) counts only.
    Calls the GC hook ``after_bundle_index_deleted`` (``bundle=``) between the two deletions."""
    rep, store = g.rep, g.repo.store
    for bid, ikey, bkey, isize, bsize in sweep.delete:
        if ikey is not None:
            if apply:
                store.delete_many([ikey])
                g.opts.hook("after_bundle_index_deleted", bundle=bid)
            rep.deleted["bundle index"] += 1
            rep.deleted_bytes += isize
        if bkey is not None:
            if apply:
                store.delete_many([bkey])
            rep.deleted["bundles"] += 1
            rep.deleted_bytes += bsize
    rep.pending_bundles = sweep.pending
    rep.held_bundles = [h.as_dict() for h in sweep.held]
    rep.early_deletion_fee = sweep.fee
    rep.held_fee = sum(h.fee for h in sweep.held)
    rep.partly_dead_bundles = list(sweep.partly_dead)
    rep.read_bundles = list(sweep.read)
