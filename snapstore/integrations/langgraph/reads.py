"""Reading checkpoints: ``get_tuple`` from the run's newest record, and ``list``."""

from __future__ import annotations

from typing import Any, Iterator

from ...errors import CheckpointNotFound, IntegrityError, SnapstoreError
from .deps import CheckpointTuple
from .gcpause import paused_gc
from .ids import config_for
from .layout import Head, Rec, RunIndex, decode_checkpoint, head_view
from . import sidewrites
from .state import SaverState
from .writes import complete, own_rows, pending, writes_of


def tuple_of(s: SaverState, run: str, thread_id: str, ns: str, rec: Rec, wrecs: list, reader=None,
             extra: list = ()) -> CheckpointTuple:
    """The ``CheckpointTuple`` of checkpoint record ``rec`` with the writes of ``wrecs`` (its
    writes records, oldest first) and ``extra`` (write rows of pending-writes objects, §4a);
    ``reader``: a ``RunReader`` of the run, or None.

    Raises:
        IntegrityError: a record is not a valid LangGraph record.
        CheckpointNotFound: a record was deleted meanwhile.
    """
    items, st = s.cp_record(run, rec, reader)
    own = own_rows(run, rec, items, st)
    parent = rec.md.get("parent")
    return CheckpointTuple(
        config=config_for(thread_id, ns, rec.md["id"]),
        checkpoint=decode_checkpoint(s.codec, items, st, rec.md["id"], run),
        metadata=s.codec.md_from(rec.md),
        parent_config=config_for(thread_id, ns, parent) if parent else None,
        pending_writes=writes_of(s, run, wrecs, list(own) + list(extra), reader),
    )


def latest_from_head(s: SaverState, run: str, thread_id: str, ns: str, h: Head) -> CheckpointTuple | None:
    """The latest checkpoint with its pending writes from the run's newest record alone (plus
    the record of writes stored before their checkpoint, if any), or None when that record
    does not carry the latest checkpoint (an older saver's record, writes for another
    checkpoint): then the run is listed.

    Raises:
        IntegrityError: the record is not a valid LangGraph record.
    """
    hv = head_view(h)
    if hv is None:
        return None
    cid, view = hv
    if view["pre"]:
        return None
    try:
        meta = view["items"][view["cst"]["meta"]]["lgmeta"]
        checkpoint = decode_checkpoint(s.codec, view["items"], view["cst"], cid, run)
        pend = pending(s, view["rows"])
        metadata = s.codec.md_from(meta)
    except SnapstoreError:
        raise
    except Exception as e:
        raise IntegrityError(f"run {run!r} record {h.id!r} (log position {h.seq})",
                             f"not a valid LangGraph record: {type(e).__name__}: {e}") from e
    parent = meta.get("parent")
    return CheckpointTuple(config=config_for(thread_id, ns, cid), checkpoint=checkpoint, metadata=metadata,
                           parent_config=config_for(thread_id, ns, parent) if parent else None,
                           pending_writes=pend)


def get_tuple(s: SaverState, run: str, thread_id: str, ns: str, cid: str | None) -> CheckpointTuple | None:
    """Checkpoint ``cid`` (None: the latest) of ``run`` with its pending writes, or None: from
    the newest record when it carries it, else from the newest records listed down to it (the
    whole run when its record may miss writes stored before it)."""
    with s.rlock(run), paused_gc():  # a long run's latest: many small objects, no cycles
        h = sidewrites.current(s, run, fresh=True)
        if h.id is None:
            return None
        tup = latest_from_head(s, run, thread_id, ns, h)
        if tup is not None and (cid is None or cid == tup.config["configurable"]["checkpoint_id"]):
            return tup
        for vcid, items, st, field_md, _oc in h.cps:
            if vcid == cid:  # a pending-checkpoint object beside the newest record (§4b)
                rec = Rec(h.id, h.seq, field_md, view=(items, st))
                return tuple_of(s, run, thread_id, ns, rec, [], extra=(h.folded or {}).get(cid, ()))
        ix, target = s.window(run, cid)
        if target is None:
            return None
        try:
            if not complete(s, run, target):
                # writes for it may precede it by any number of records (async durability,
                # an older layout): the whole run's
                ix = s.index(run)
                target = ix.cps.get(target.md["id"])
                if target is None:
                    return None
            extra = (h.folded or {}).get(target.md["id"], ())  # beside the newest record (§4a)
            return tuple_of(s, run, thread_id, ns, target, ix.writes.get(target.md["id"], []), extra=extra)
        except CheckpointNotFound:
            return None  # deleted meanwhile


def list_tuples(s: SaverState, runs: list, only: str | None, filter: dict[str, Any] | None,
                before_id: str | None, limit: int | None) -> Iterator[CheckpointTuple]:
    """``list``'s checkpoints of ``runs`` (``(run, thread_id, ns)``), newest id first: only id
    ``only`` if given, those whose metadata has ``filter``'s pairs, ids below ``before_id``, at
    most ``limit``. Each run is read through one ``CheckpointManager.read_run``."""
    rows = []
    for run, thread_id, ns in runs:
        rd = s.manager.read_run(run)  # one listing; each record's data without its manifest GET
        ix = RunIndex.of(rd.summaries)
        extra, virt = sidewrites.extra_rows(s, run, ix.head, ix.head_parent, reader=rd) if ix.recs else ({}, {})
        ix.cps.update(virt)  # pending-checkpoint objects (§4b): newer than any record of their id
        for cid, rec in ix.cps.items():
            if only and cid != only:
                continue
            if before_id and cid >= before_id:
                continue
            if filter:
                md = s.codec.md_from(rec.md)
                if not all(md.get(k) == v for k, v in filter.items()):
                    continue
            rows.append((cid, run, thread_id, ns, rec, ix.writes.get(cid, []), rd, extra.get(cid, ())))
    rows.sort(key=lambda r: r[0], reverse=True)
    if limit is not None:
        rows = rows[:limit]
    for cid, run, thread_id, ns, rec, wrecs, rd, more in rows:
        try:
            yield tuple_of(s, run, thread_id, ns, rec, wrecs, rd, more)
        except CheckpointNotFound:
            continue
