"""Checkpoint records (layout §3): encoding a LangGraph checkpoint, and ``put``'s record."""

from __future__ import annotations

import json

from ...manager.retention import NEEDS_KEY
from .deps import Checkpoint
from .history import history_for
from .layout import Head, append_rows, covers, early_sets, rows
from .needs import DELTA_CHAIN, needs_from
from . import sidewrites
from .save import put_record
from .state import SaverState


def encode_checkpoint(s: SaverState, run: str, checkpoint: Checkpoint, md: dict, parent: str | None,
                      head: Head) -> tuple[list, dict, list]:
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
    _carry_folded(head, checkpoint["id"], items, state)
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


def put_checkpoint(s: SaverState, run: str, checkpoint: Checkpoint, md: dict, parent: str | None) -> None:
    """Store ``checkpoint`` (LangGraph metadata ``md``, parent id ``parent``) as ``run``'s new
    newest record, built on the one there now. The caller holds the run's lock. Raises what
    :func:`~.save.put_record` raises."""
    cid = checkpoint["id"]

    def build(head: Head):
        items, state, chs = encode_checkpoint(s, run, checkpoint, md, parent, head)
        field_md = {"lg": "C", "id": cid, "parent": parent, "chs": chs, **s.codec.md_field(md)}
        if state.get("w"):
            field_md["wch"] = sorted({row[2] for row in state["w"]})  # channels of the writes it carries
        if state.get("fw"):
            # writes for other checkpoints folded from pending-writes objects (layout §4a):
            # listing finds them from the field, as it finds writes records
            field_md["fw"] = {k: sorted({row[2] for row in d}) for k, d in state["fw"].items()}
        need = needs_from(s, run, head, parent, md, chs)
        if need is not None:
            field_md[NEEDS_KEY] = {"from": need, "by": DELTA_CHAIN}
        # LangGraph numbers the input checkpoint -1; snapstore's step is a non-negative int (the
        # exact value stays in the metadata)
        step = md.get("step") if isinstance(md.get("step"), int) and md.get("step") >= 0 else None
        return items, state, field_md, step

    _sid, base = put_record(s, run, build, head_of=lambda: sidewrites.current(s, run))
    s.note_put(run, cid)
    if base.fo:
        sidewrites.delete_folded(s, run, base.fo)  # carried by the record saved: not needed beside it
