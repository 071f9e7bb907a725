"""Checkpoint records (layout §3): encoding a LangGraph checkpoint, and ``put``'s record."""

from __future__ import annotations

import json
import secrets
import time

from ...errors import CheckpointNotFound, ConflictError, InvalidInputError
from ...manager.retention import NEEDS_KEY
from .deps import Checkpoint
from .history import history_for
from .layout import Head, append_rows, covers, decode_checkpoint, early_sets, head_view, rows, spans_of
from .needs import DELTA_CHAIN, needs_from
from . import sidewrites
from .save import put_record
from .state import SaverState


def encode_checkpoint(s: SaverState, run: str, checkpoint: Checkpoint, md: dict, parent: str | None,
                      head: Head, fold: bool = True) -> tuple[list, dict, list]:
    """``(items, session state, channels)`` of a checkpoint record (format ``v`` 2).

    Items: the message-list channel values (one item per message), then for each DeltaChannel
    channel the checkpoint does not hold (named in the metadata's
    ``counters_since_delta_snapshot``) its history section (what
    ``get_delta_channel_history`` returns for this checkpoint: the seed and the on-path
    writes, each after a small marker item), then the other channel values (one serde item
    each; a graph input such as ``{"messages": [...]}`` as kind ``d``: a header item and its
    messages), then one *meta* item: the checkpoint without its values (versions, ts...), its
    LangGraph metadata and parent. Every item is a chunk of the pack, so what repeats from
    record to record (messages, markers) is stored once and the rest compresses with the
    run's other records when packs are merged; the manifest keeps only the small layout.
    ``fold``: also carry what ``head`` folded from pending objects (§4a ``fw``/``fo``, §4b
    ``cx``): a record does; a pending-checkpoint object does not (its readers fold it on top
    of the same objects).

    Raises:
        UnsupportedValueError: the serializer refuses a value (its path names the channel).
    """
    values = checkpoint.get("channel_values") or {}
    old = s.enc.get(run) or {}
    cache: dict = {}
    items: list = []
    layout: list = []
    blobs = []
    for ch in sorted(values):
        kind, its = s.codec.enc_value(values[ch], cache, old, f"channel {ch!r}")
        if kind in ("b", "d"):
            # after the history sections: the record's items then start with what the parent's
            # did (the run's message list grows at its end), so each save stores only its end
            blobs.append((ch, kind, its))
            continue
        layout.append([ch, kind, len(items), len(its)])
        items.extend(its)
    hist = {}
    for ch, sec in sorted((history_for(head, parent, values, md) or {}).items()):
        hist[ch] = [len(items), len(sec)]
        items.extend(sec)
    for ch, kind, its in blobs:
        layout.append([ch, kind, len(items), len(its)])
        items.extend(its)
    skeleton = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
    meta = {"cp": s.codec.json_or_blob(skeleton, "the checkpoint's versions"), "parent": parent,
            **s.codec.md_field(md)}
    # "k": this record carries every write set its newest record held (the records of
    # earlier releases did not carry those stored before the parent was put: readers list
    # the run for them)
    state = {"v": 2, "k": 1, "layout": layout, "meta": len(items)}
    items.append({"lgmeta": meta})
    if hist:
        state["hist"] = hist
    _carry_writes(s, run, head, checkpoint["id"], items, state)
    if fold:
        _carry_folded(head, checkpoint["id"], items, state)
        _carry_cps(head, checkpoint["id"], items, state)
    with s.lock:
        s.enc[run] = cache
    return items, state, sorted(values)


def _carry_writes(s: SaverState, run: str, head: Head, cid: str, items: list, state: dict) -> None:
    """Add to a checkpoint record (``items``, ``state``) the writes it carries: its own stored
    before it (``w``), the others stored before their checkpoints (``eo``), and the mark ``x``
    when this saver stored writes for it that the newest record does not carry."""
    # writes stored before their checkpoint (LangGraph's async durability puts a task's
    # writes before the checkpoint they are for, even before its parent is put): the newest
    # record carries every such set; this record takes its own and carries the others on
    sets = early_sets(head, s.put_ids.get(run, ()), s.early_sets)
    own = sets.pop(cid, None)
    again = covers(head, cid)  # a checkpoint id put again: its writes so far
    mine = list(again["rows"]) if again is not None and again["base"] == "c" else []
    try:
        if own:
            mine.extend(rows(head.items, own))
        others = {k: rows(head.items, d) for k, d in sets.items()}
    except (KeyError, TypeError, ValueError):
        others = {}  # a damaged newest record: what it carries is not used (see "x")
    if mine:
        state["w"] = append_rows(items, mine)
    if not s.seen.get((run, cid), set()) <= {(r[0], r[3]) for r in mine}:
        state["x"] = 1  # this saver stored writes for it that the newest record does not carry
    if others:
        state["eo"] = {k: append_rows(items, rows_) for k, rows_ in others.items()}


def _row_key(row) -> str:
    """A write row as a comparable value (task, path, channel, index, kind, items)."""
    return json.dumps(list(row[:5]) + [row[5]], sort_keys=True)


def _carry_folded(head: Head, cid: str, items: list, state: dict) -> None:
    """Add to a checkpoint record the writes folded into ``head`` from pending-writes objects
    (layout §4a) that it does not carry already as its own (``w``) or early (``eo``) writes:
    those of its parent and of other checkpoints put before (``fw``: ``{LangGraph id:
    descriptors}``), and ``fo``, the call ids of the objects folded (deleted once it is saved)."""
    if not head.fo:
        return
    fw = {}
    for k, rows_ in head.folded.items():
        desc = state.get("w") if k == cid else (state.get("eo") or {}).get(k)
        held = {_row_key(r) for r in rows(items, desc)} if desc else set()
        left = [r for r in rows_ if _row_key(r) not in held]  # a set the early ones' limit cut, say
        if left:
            fw[k] = append_rows(items, left)
    if fw:
        state["fw"] = fw
    state["fo"] = sorted({call for _a, call in head.fo})


def _carry_cps(head: Head, cid: str, items: list, state: dict) -> None:
    """Add to a checkpoint record the checkpoints folded into ``head`` from pending-checkpoint
    objects (layout §4b), other than ``cid`` itself: state ``cx``, ``{LangGraph id: {"st": its
    state, "sp": its items as spans of this record's items}}`` (items this record does not
    hold yet are appended first), and the call ids in ``fo`` (so they are deleted once it is
    saved)."""
    if not head.cps:
        return
    cx = {}
    index = {id(x): i for i, x in enumerate(items)}
    for vcid, vitems, vst, _f, _oc in head.cps:
        if vcid == cid:
            continue  # put again: this record is the checkpoint
        for it in vitems:
            if id(it) not in index:
                index[id(it)] = len(items)
                items.append(it)
        cx[vcid] = {"st": {k: v for k, v in vst.items() if k not in ("eo", "fw", "fo")},
                    "sp": spans_of(items, vitems, index)}
    if cx:
        state["cx"] = cx
    state["fo"] = sorted({call for _a, call in head.fo})


def _same_run(a: dict, b: dict) -> bool:
    """True if LangGraph metadata ``a`` and ``b`` name the same LangGraph run (``run_id``; both
    absent counts as the same): ``delete_for_runs`` deletes a record with all it carries."""
    return a.get("run_id") == b.get("run_id")


def cheap(s: SaverState, head: Head, md: dict, parent: str | None) -> bool:
    """True if a put of a checkpoint (LangGraph metadata ``md``, parent ``parent``) on the
    newest record ``head`` (folded) is a pending-checkpoint object (layout §4b) rather than a
    record: LangGraph's input checkpoint (``source`` ``"input"``: the loop's first checkpoint
    follows within the same invoke), and the checkpoint put right after it on it (the one
    after ``__start__``), at most ``CP_OBJECTS`` beside one record, all of one LangGraph run."""
    if not sidewrites.is_v2(head) or len(head.cps) >= s.cp_objects:
        return False
    if any(not _same_run(s.codec.md_from(c[3]), md) for c in head.cps):
        return False
    if md.get("source") == "input":
        return True
    hv = head_view(head)
    return (hv is not None and hv[0] == parent and bool(head.cps) and head.cps[-1][0] == parent
            and s.codec.md_from(head.cps[-1][3]).get("source") == "input")


def _field(s: SaverState, run: str, head: Head, cid: str, parent: str | None, md: dict, state: dict,
           chs: list) -> dict:
    """The metadata field of checkpoint ``cid``'s record (or pending-checkpoint object) with
    state ``state``, built on ``head`` (layout §3, §4a ``fw``, §4b ``cx``)."""
    field_md = {"lg": "C", "id": cid, "parent": parent, "chs": chs, **s.codec.md_field(md)}
    if state.get("w"):
        field_md["wch"] = sorted({row[2] for row in state["w"]})  # channels of the writes it carries
    if state.get("fw"):
        # writes for other checkpoints folded from pending-writes objects (layout §4a):
        # listing finds them from the field, as it finds writes records
        field_md["fw"] = {k: sorted({row[2] for row in d}) for k, d in state["fw"].items()}
    need = needs_from(s, run, head, parent, md, chs)
    if state.get("cx"):
        # checkpoints it carries (layout §4b): listing finds them from the field; it needs
        # what each of them needs
        # (each carried field without "lg", "id" and NEEDS_KEY: a reader puts back "C", the
        # key and this record's NEEDS_KEY, which is at most each carried one's)
        field_md["cx"] = {}
        for c in head.cps:
            if c[0] in state["cx"]:
                n = c[3].get(NEEDS_KEY)
                if isinstance(n, dict) and isinstance(n.get("from"), int):
                    need = n["from"] if need is None else min(need, n["from"])
                field_md["cx"][c[0]] = {k: v for k, v in c[3].items() if k not in ("lg", "id", NEEDS_KEY)}
    if need is not None:
        field_md[NEEDS_KEY] = {"from": need, "by": DELTA_CHAIN}
    return field_md


def _put_object(s: SaverState, run: str, checkpoint: Checkpoint, md: dict, parent: str | None) -> bool:
    """Store ``checkpoint`` as a pending-checkpoint object beside the run's newest record
    (layout §4b) if :func:`cheap` says so: one PUT, then a LIST (limit 1) of the head to see it
    did not move (else it is stored again beside the new head, or put as a record). Returns
    False when it is to be a record. The caller holds the run's lock.

    Raises:
        ConflictError: the run kept moving (``save_attempts`` times).
    """
    cid = checkpoint["id"]
    for _attempt in range(s.save_attempts):
        head = sidewrites.current(s, run)
        if not cheap(s, head, md, parent):
            return False
        items, state, chs = encode_checkpoint(s, run, checkpoint, md, parent, head, fold=False)
        field_md = _field(s, run, head, cid, parent, md, state, chs)
        base = head.base or head
        sp = spans_of(base.items, items, base.item_index())
        call = secrets.token_hex(8)
        try:
            s.manager.record_outcome(run, base.id, call, sidewrites.cp_payload(field_md, state, sp, time.time_ns()))
        except CheckpointNotFound:
            s.forget(run)  # the record went: build again on the new head
            continue
        except InvalidInputError:
            return False  # larger than a tool outcome may be: a record
        now = s.manager.head(run)
        if now is not None and now.id == base.id:
            s.heads[run] = sidewrites.fold_cp(head, base.id, call, items, state, field_md)
            s.note_put(run, cid)
            return True
        s.forget(run)  # the run moved meanwhile: its new head may not have folded it, store it there too
    raise ConflictError(f"put: run {run!r} kept moving ({s.save_attempts} attempts)")


class _OtherRun(Exception):
    """Raised by a record's build when the pending-checkpoint objects folded into the newest
    record (``head``) are of another LangGraph run than the checkpoint being put (layout §4b):
    they are put in a record of their own first (:func:`materialize`), so that no record
    carries checkpoints of two runs."""

    def __init__(self, head: Head):
        super().__init__("pending checkpoints of another LangGraph run")
        self.head = head


def materialize(s: SaverState, run: str, head: Head | None = None) -> None:
    """Put the latest pending-checkpoint object beside the run's newest record (layout §4b)
    again as a record, which carries the others (``cx``) and their writes, so every
    checkpoint of the run is in a record (before ``delete_for_runs`` and ``prune``, which act
    on records). Nothing when there is none. The caller holds the run's lock.

    Raises:
        What :func:`~.save.put_record` raises.
    """
    if head is None:
        head = sidewrites.current(s, run, fresh=True)
    if not head.cps:
        return
    vcid, vitems, vst, vf, _oc = head.cps[-1]
    cp = decode_checkpoint(s.codec, vitems, vst, vcid, run)
    put_checkpoint(s, run, cp, s.codec.md_from(vf), vf.get("parent"), objects=False)
    sidewrites.flush_deletes(s)  # the objects it folded go now (a record deleted next would bring them back)


def put_checkpoint(s: SaverState, run: str, checkpoint: Checkpoint, md: dict, parent: str | None,
                   objects: bool = True) -> None:
    """Store ``checkpoint`` (LangGraph metadata ``md``, parent id ``parent``) as ``run``'s new
    newest record, built on the one there now. The caller holds the run's lock. Raises what
    :func:`~.save.put_record` raises."""
    cid = checkpoint["id"]
    if objects and _put_object(s, run, checkpoint, md, parent):
        return

    def build(head: Head):
        if head.cps and any(not _same_run(s.codec.md_from(c[3]), md) for c in head.cps):
            raise _OtherRun(head)
        items, state, chs = encode_checkpoint(s, run, checkpoint, md, parent, head)
        field_md = _field(s, run, head, cid, parent, md, state, chs)
        # LangGraph numbers the input checkpoint -1; snapstore's step is a non-negative int (the
        # exact value stays in the metadata)
        step = md.get("step") if isinstance(md.get("step"), int) and md.get("step") >= 0 else None
        return items, state, field_md, step

    for _attempt in range(s.save_attempts):
        try:
            _sid, base = put_record(s, run, build, head_of=lambda: sidewrites.current(s, run))
            break
        except _OtherRun as e:
            materialize(s, run, e.head)  # (its run's checkpoints go in a record of their own)
    else:
        raise ConflictError(f"put: run {run!r} kept moving ({s.save_attempts} attempts)")
    s.note_put(run, cid)
    if base.fo:
        sidewrites.delete_folded(s, run, base.fo)  # carried by the record saved: not needed beside it
