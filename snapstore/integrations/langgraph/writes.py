"""Pending writes (layout §4): reading a checkpoint's writes, and ``put_writes``' record.

A writes record (``"lg": "W"``) built on the run's newest record carries on what that one
carries: the latest checkpoint with all its writes (``cf``/``c``/``cn``/``w``), the writes stored
so far for a checkpoint to come (``ef``/``e``) and those of other checkpoints not put yet
(``eo``), so the latest checkpoint and its writes are always one record.
"""

from __future__ import annotations

from typing import Any, Sequence

from ...errors import IntegrityError, SnapstoreError
from .deps import WRITES_IDX_MAP, PendingWrite
from .layout import Head, Rec, covers, dedup, early_sets, head_view, rows, rows_v1
from .needs import carried_needs
from .save import NothingToWrite, put_record
from .state import SaverState


def pending(s: SaverState, rows_: list) -> list[PendingWrite]:
    """LangGraph's pending writes ``(task, channel, value)`` of one checkpoint's write rows
    (deduplicated, in ``writes_sort_key`` order)."""
    return [(task, ch, s.codec.dec_value(kind, its)) for task, _p, ch, _i, kind, its in dedup(rows_)]


def rec_rows(s: SaverState, run: str, r: Rec, reader=None) -> list:
    """The write rows writes record ``r`` holds for its checkpoint (``md["for"]``).

    Raises:
        IntegrityError: the record is not a valid writes record.
    """
    items, st = s.record(run, r.sid, r.seq, reader)
    try:
        if isinstance(st, dict) and st.get("v") == 2:
            for_ = r.md.get("for")
            if r.md.get("fwc"):
                return rows(items, st["fw"][for_])  # a checkpoint record carrying folded writes (§4a)
            if st.get("cf") == for_:
                return rows(items, st["w"])
            if st.get("ef") == for_:
                return rows(items, st["e"])
            return []
        return rows_v1(items, st, r.md)
    except SnapstoreError:
        raise
    except Exception as e:
        raise IntegrityError(f"run {run!r} record {r.sid!r} (log position {r.seq})",
                             f"not a valid LangGraph writes record: {type(e).__name__}: {e}") from e


def chain_heads(recs: list) -> list:
    """Of one checkpoint's writes records (oldest first), those to read: every format-1
    record, and of format-2 records each one not carried by the next (``md["acc"]``: the position of the
    record it was built on, whose writes it carries)."""
    carried = {r.md.get("acc") for r in recs if r.md.get("lg") == "W" and isinstance(r.md.get("acc"), int)}
    return [r for r in recs if r.seq not in carried]


def writes_of(s: SaverState, run: str, recs: list, own: Sequence = (), reader=None) -> list[PendingWrite]:
    """Pending writes of one checkpoint from its writes records (oldest first) and ``own``
    (the rows its checkpoint record carries). A format-2 writes record carries every write
    stored before it for its checkpoint (on that chain), so only the newest of each chain is
    read.

    Raises:
        IntegrityError: a record's writes are not valid.
    """
    rows_: list = list(own)
    for r in chain_heads(recs):
        rows_.extend(rec_rows(s, run, r, reader))
    try:
        return pending(s, rows_)
    except SnapstoreError:
        raise
    except Exception as e:
        raise IntegrityError(f"run {run!r} writes of {recs[0].md.get('for') if recs else '?'!r}",
                             f"not valid LangGraph writes: {type(e).__name__}: {e}") from e


def own_rows(run: str, rec: Rec, items: list, st) -> list:
    """The writes a format-2 checkpoint record carries for its checkpoint (those stored
    before it was put, and, for an id put again, those of the earlier put).

    Raises:
        IntegrityError: the record's descriptors do not fit its items.
    """
    if rec.md.get("lg") != "C" or not isinstance(st, dict) or st.get("v") != 2 or not st.get("w"):
        return []
    try:
        return rows(items, st["w"])
    except Exception as e:
        raise IntegrityError(f"run {run!r} record {rec.sid!r} (log position {rec.seq})",
                             f"not a valid LangGraph checkpoint record: {type(e).__name__}: {e}") from e


def complete(s: SaverState, run: str, rec: Rec) -> bool:
    """True if checkpoint record ``rec`` carries every write stored for its checkpoint before
    it (so the records after it hold the rest): a format-2 record not marked ``"x"``."""
    _items, st = s.cp_record(run, rec)
    return (rec.md.get("lg") == "C" and isinstance(st, dict) and st.get("v") == 2 and st.get("k") == 1
            and not st.get("x"))


def writes_to_store(head: Head, cid: str, seen: set, writes, task_id: str) -> list:
    """The writes of one ``put_writes`` call (``[(channel, value)]``) for checkpoint ``cid`` that
    are not stored yet: neither in ``seen`` (``{(task id, index)}`` this saver stored) nor in the
    writes view of ``head`` (:func:`covers`). Returns ``[(index, channel, value)]``; the index is
    LangGraph's (``WRITES_IDX_MAP`` for special channels, else the position in ``writes``)."""
    view = covers(head, cid)
    known = set(seen)
    if view is not None:
        known.update((r[0], r[3]) for r in view["rows"])
    todo = []
    for idx, (ch, v) in enumerate(writes):
        widx = WRITES_IDX_MAP.get(ch, idx)
        if widx >= 0 and (task_id, widx) in known:
            continue
        todo.append((widx, ch, v))
    return todo


def put_writes(s: SaverState, run: str, cid: str, writes: Sequence[tuple[str, Any]], task_id: str,
               task_path: str) -> None:
    """Store task ``task_id``'s ``writes`` (``(channel, value)`` pairs) for checkpoint ``cid`` of
    ``run`` as one writes record, skipping those stored already (per task and index). The
    caller holds the run's lock. Raises what :func:`~.save.put_record` raises."""
    seen = s.seen.setdefault((run, cid), set())
    done: list = []

    def build(head: Head):
        todo = writes_to_store(head, cid, seen, writes, task_id)
        done[:] = todo
        if not todo:
            raise NothingToWrite
        return writes_record(s, run, head, cid, encode_rows(s, run, todo, task_id, task_path))

    try:
        put_record(s, run, build)
    except NothingToWrite:
        return
    seen.update((task_id, w) for w, _, _ in done if w >= 0)


def encode_rows(s: SaverState, run: str, todo: list, task_id: str, task_path: str) -> list:
    """Write rows ``(task, path, channel, idx, kind, items)`` of ``todo`` (``(index, channel,
    value)``) of task ``task_id``.

    Raises:
        UnsupportedValueError: the serializer refuses a value.
    """
    cache = s.enc.setdefault(run, {})
    out = []
    for widx, ch, v in todo:
        kind, its = s.codec.enc_value(v, cache, None, f"write to channel {ch!r} (task {task_id})")
        out.append((task_id, task_path, ch, widx, kind, its))
    return out


def writes_record(s: SaverState, run: str, head: Head, cid: str, new_rows: list) -> tuple[list, dict, dict, None]:
    """``(items, session state, metadata field, step)`` of a writes record for ``cid`` holding
    ``new_rows`` (encoded write rows, :func:`encode_rows`), built on the run's newest record
    ``head`` (layout §4). Pure: no I/O."""
    hv = head_view(head)
    v2 = isinstance(head.st, dict) and head.st.get("v") == 2 and head.items is not None
    items = list(head.items) if v2 else []
    state: dict = {"v": 2}
    if hv is not None:
        pcid, pv = hv
        state.update(cf=pcid, c=pv["cst"], cn=len(pv["items"]), w=list(pv["wdesc"]))
        if pv["pre"]:
            state["x"] = 1
        if pv["stale"]:
            state["h"] = 1
    # every write set the newest record carries for checkpoints not put yet goes on
    # with this record (LangGraph's async durability stores a task's writes before the
    # checkpoint they are for, even before that checkpoint's parent is put)
    sets = early_sets(head, s.put_ids.get(run, ()), s.early_sets) if v2 else {}
    own = sets.pop(cid, None)
    latest = hv[0] if hv is not None else None
    if latest is not None:
        sets = {k: d for k, d in sets.items() if k >= latest}
    mine = v2 and (head.md or {}).get("lg") == "W" and head.md.get("for") == cid
    if hv is not None and hv[0] == cid:
        # writes for the latest checkpoint: carried on with it
        desc = state["w"]
        carried = mine
    else:
        carried = mine and own is not None and head.st.get("ef") == cid
        if hv is not None and (cid in s.put_ids.get(run, ()) or cid < hv[0]):
            # writes for a checkpoint put before the latest (LangGraph's async
            # durability may store a task's writes after the next checkpoint):
            # the history sections built since may miss them, so they are not used
            state["h"] = 1
        state.update(ef=cid, e=list(own or ()))
        desc = state["e"]
    if sets:
        state["eo"] = sets  # descriptors into the items copied from the newest record
    chs = {row[2] for row in desc}
    for task_id, task_path, ch, widx, kind, its in new_rows:
        desc.append([task_id, task_path, ch, widx, kind, len(items), len(its)])
        items.extend(its)
        chs.add(ch)
    field_md = {"lg": "W", "for": cid, "chs": sorted(chs)}  # tasks and paths: in the descriptors
    if hv is not None:
        field_md.update(carried_needs(head))
    if carried:
        field_md["acc"] = head.seq
    return items, state, field_md, None
