"""The persisted record layout (normative: docs/langgraph-layout.md; section numbers are its).

Field names and what they mean, read and written here only:

* Metadata field (``CheckpointSummary.metadata``): ``"lg"`` the record kind (``"C"`` checkpoint,
  ``"W"`` writes; ``"c"``/``"w"`` of the earlier layout, §7), ``"id"``/``"parent"`` the LangGraph
  checkpoint ids, ``"for"`` the checkpoint a writes record is for, ``"chs"`` channels held,
  ``"wch"`` channels of carried writes (§3), ``"acc"``/``"cpos"``/``"cfrom"`` positions (§4, §6).
* Session state (format ``"v": 2``): ``"layout"`` ``[channel, kind, start, count]`` rows into the
  record's message list, ``"meta"`` the position of the meta item, ``"hist"`` DeltaChannel history
  sections, ``"w"``/``"e"``/``"eo"`` write descriptors ``[task, path, channel, idx, kind, start,
  count]``, ``"cf"``/``"c"``/``"cn"`` the checkpoint a writes record carries, ``"ef"`` the
  checkpoint its own early writes are for, ``"k"``/``"x"``/``"h"`` completeness marks (§3-§5).

This module turns those into Python values (:class:`Rec`, :class:`RunIndex`, :func:`covers`) and
back; it does no I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ...errors import IntegrityError, SnapstoreError
from ...manager.retention import NEEDS_KEY
from .deps import Checkpoint, DeltaChannelHistory, writes_sort_key
from .values import ValueCodec

KINDS = ("c", "w", "C", "W")
"""The ``"lg"`` values of this saver's records (current layout upper case, §7 lower case)."""


@dataclass
class Head:
    """What the saver knows of a run's newest record."""

    id: str | None = None          # snapstore checkpoint id (None: empty run)
    items: list | None = None      # its message list (None: not loaded)
    st: Any = None                 # its session state
    md: dict | None = None         # its snapstore metadata field
    seq: int | None = None         # its log position
    read_at: float = field(default_factory=time.monotonic)  # when it was read or written
    parent: str | None = None      # the record's snapstore parent (the record it was built on)
    base: "Head | None" = None     # set on a head with pending-writes objects folded in (§4a): the record itself
    fo: tuple = ()                 # (anchor record id, call id) of each pending-writes object folded in
    folded: dict = field(default_factory=dict)  # LangGraph id -> write rows that came from those objects
    cps: tuple = ()                # checkpoints folded in from pending-checkpoint objects (§4b), oldest first:
                                   # (LangGraph id, items, state, field, (anchor record id, call id))
    ident: dict | None = None      # {id(item): position} of items (a record's own), made once: spans_of

    def item_index(self) -> dict:
        """``{id(item): position}`` of this record's items, made on first use (the items of a
        stored record never change)."""
        if self.ident is None:
            self.ident = {id(x): i for i, x in enumerate(self.items or ())}
        return self.ident


@dataclass
class Rec:
    """One record of a run, from its summary (no data read)."""

    sid: str        # snapstore checkpoint id
    seq: int
    md: dict        # the snapstore metadata field (the "lg" dict)
    view: tuple | None = None  # (items, state) of a checkpoint not in a record of its own (§4b)

    @property
    def kind(self) -> str | None:
        """``"c"`` (a checkpoint record of either layout), ``"w"`` (writes), or None for a
        format-1 fork's base record."""
        k = self.md.get("lg")
        if k == "C":
            return "c"
        if k == "W":
            return "w"
        if k == "c" and self.md.get("id") != self.sid:
            return None  # a format-1 fork's base record (copy_thread): a data carrier, not a checkpoint
        return k


@dataclass
class RunIndex:
    """A run's records grouped: checkpoints by LangGraph id, writes by the checkpoint they are for."""

    recs: list = field(default_factory=list)       # newest first
    head: str | None = None                        # the run's head (newest live checkpoint, any kind)
    cps: dict = field(default_factory=dict)        # checkpoint id -> Rec (the newest record of that id)
    writes: dict = field(default_factory=dict)     # checkpoint id -> [Rec] oldest first
    head_parent: str | None = None                 # the head record's snapstore parent
    listed: int = 0                                # summaries listed (ours or not)

    @classmethod
    def of(cls, summaries) -> "RunIndex":
        """The index of ``CheckpointSummary`` objects, newest first (records of others skipped)."""
        ix = cls()
        summaries = list(summaries)
        ix.listed = len(summaries)
        ix.head = summaries[0].id if summaries else None
        ix.head_parent = summaries[0].parent_id if summaries else None
        for s in summaries:
            md = s.metadata
            if not isinstance(md, dict) or md.get("lg") not in KINDS:
                continue
            r = Rec(s.id, s.seq, md)
            ix.recs.append(r)
            if r.kind == "c":
                ix.cps.setdefault(md["id"], r)
                cx = md.get("cx") if md.get("lg") == "C" else None
                if isinstance(cx, dict):
                    # checkpoints it carries, folded from pending-checkpoint objects (§4b); put
                    # before the record's own checkpoint, so an id it also holds is its own
                    for k, f in cx.items():
                        if isinstance(f, dict):
                            need = {NEEDS_KEY: md[NEEDS_KEY]} if NEEDS_KEY in md else {}
                            ix.cps.setdefault(k, Rec(s.id, s.seq, {**f, "lg": "C", "id": k, **need, "cxc": 1}))
                fw = md.get("fw") if md.get("lg") == "C" else None
                if isinstance(fw, dict):
                    # writes of other checkpoints it carries, folded from pending-writes
                    # objects (§4a): read as a writes record of each
                    for k, chs in fw.items():
                        ix.writes.setdefault(k, []).insert(0, Rec(s.id, s.seq, {"lg": "W", "for": k, "chs": chs,
                                                                                "fwc": 1}))
            elif r.kind == "w":
                ix.writes.setdefault(md.get("for"), []).insert(0, r)
        return ix

    def latest(self) -> Rec | None:
        """The newest checkpoint record, or None."""
        for r in self.recs:
            if r.kind == "c":
                return r
        return None

    def all_of(self, checkpoint_id: str) -> list:
        """Every record of LangGraph checkpoint ``checkpoint_id``: each put of it and its writes."""
        return [r for r in self.recs if (r.kind == "c" and (r.md.get("id") == checkpoint_id
                                                            or checkpoint_id in (r.md.get("cx") or ())))
                or (r.kind == "w" and r.md.get("for") == checkpoint_id)]


def spans_of(base: list, items: list, index: dict | None = None) -> list:
    """``items`` as references into ``base`` (§4b): a list whose elements are ``[start, count]``
    (``base[start:start + count]``) or an item itself (a JSON object: items are objects), in order.
    Items are matched by identity (the same Python object; ``index``: ``{id(item): position}``
    of ``base``, built when not given), which is what a record built on ``base`` shares with it."""
    if index is None:
        index = {id(x): i for i, x in enumerate(base)}
    out: list = []
    for it in items:
        j = index.get(id(it))
        if j is None or base[j] is not it:
            out.append(it)
        elif out and isinstance(out[-1], list) and out[-1][0] + out[-1][1] == j:
            out[-1][1] += 1
        else:
            out.append([j, 1])
    return out


def unspan(base: list, sp: list) -> list:
    """The items :func:`spans_of` described, given ``base``. Raises ValueError when a span
    falls outside ``base`` or an element is neither a span nor an object."""
    out: list = []
    for e in sp:
        if isinstance(e, dict):
            out.append(e)
        elif isinstance(e, list) and len(e) == 2 and all(type(x) is int and x >= 0 for x in e):
            part = base[e[0]:e[0] + e[1]]
            if len(part) != e[1]:
                raise ValueError(f"span {e} outside the {len(base)} items it refers to")
            out.extend(part)
        else:
            raise ValueError(f"not an item or a span: {e!r}")
    return out


def carried_view(items: list, st: Any, checkpoint_id: str) -> tuple[list, dict]:
    """``(items, state)`` of checkpoint ``checkpoint_id`` as a record carrying it (state
    ``cx``, §4b) holds it, from that record's ``items`` and state ``st``. Raises KeyError,
    TypeError or ValueError when the record does not carry it validly."""
    cx = st["cx"][checkpoint_id]
    return unspan(items, cx["sp"]), cx["st"]


def append_rows(items: list, rows: list) -> list:
    """Append the items of writes ``rows`` to ``items``; return their descriptors."""
    desc = []
    for task, path, ch, idx, kind, its in rows:
        desc.append([task, path, ch, idx, kind, len(items), len(its)])
        items.extend(its)
    return desc


def rows(items: list, desc: list) -> list:
    """The writes ``desc`` describes: ``(task, path, channel, idx, kind, items)``, oldest
    first (each descriptor ``[task, path, channel, idx, kind, start, count]`` names
    ``items[start:start + count]``). Raises ValueError when items are missing."""
    out = []
    for task, path, ch, idx, kind, start, count in desc:
        its = items[start:start + count]
        if len(its) != count:
            raise ValueError(f"{count} items expected at {start}, found {len(its)}")
        out.append((task, path, ch, idx, kind, its))
    return out


def rows_v1(items: list, st: dict, md: dict) -> list:
    """The writes of a writes record of the earlier layout (§7), as :func:`rows` gives them."""
    off = st["off"]
    task, path = md.get("task", ""), md.get("path", "")
    out = []
    for ch, idx, kind, start, count in st["w"]:
        if kind == "b":
            its = [st["blobs"][start]]
        else:
            its = items[off + start:off + start + count]
            if len(its) != count:
                raise ValueError(f"{count} messages expected at {off + start}, found {len(its)}")
        out.append((task, path, ch, idx, "m" if kind == "ml" else kind, its))
    return out


def dedup(rows: list) -> list:
    """One checkpoint's writes, deduplicated per (task, index) (first kept; special negative
    indexes: last kept), in ``writes_sort_key`` order."""
    got: dict = {}
    for row in rows:
        task, path, _ch, idx, _k, _its = row
        key = (task, idx)
        if key in got and idx >= 0:
            continue
        got[key] = row
    return sorted(got.values(), key=lambda r: writes_sort_key(r[1], r[0], r[3]))


def early_sets(head: Head | None, put_ids, limit: int, latest: str | None = None) -> dict:
    """The writes the run's newest record ``head`` carries for checkpoints not put yet:
    ``{checkpoint id: descriptors into head.items}`` (oldest set first: the ``eo`` sets, then
    a writes record's own set, ``ef``/``e``). Sets of checkpoints in ``put_ids`` (put by this
    saver since), or (``latest``: the latest checkpoint's id) with an id below the latest's, are
    no longer early and are left out; at most ``limit``, the newest."""
    if head is None or head.id is None or head.items is None or not isinstance(head.st, dict):
        return {}
    st, md = head.st, head.md or {}
    if st.get("v") != 2:
        return {}
    out: dict = {}
    eo = st.get("eo")
    if isinstance(eo, dict):
        out.update((k, list(v)) for k, v in eo.items() if isinstance(k, str) and isinstance(v, list))
    if md.get("lg") == "W" and isinstance(st.get("ef"), str) and isinstance(st.get("e"), list):
        out.pop(st["ef"], None)
        out[st["ef"]] = list(st["e"])
    for k in list(out):
        if not out[k] or k in put_ids or (latest is not None and k < latest):
            del out[k]
    while len(out) > limit:
        del out[next(iter(out))]
    return out


def covers(head: Head | None, checkpoint_id: str) -> dict | None:
    """What the run's newest record ``head`` holds of checkpoint ``checkpoint_id``: ``{"base":
    "c" or None, "items": the checkpoint's items, "cst": its state, "pre": true when writes
    for it may exist that the record does not carry, "rows": its writes so far (oldest first),
    "wdesc": their descriptors, "stale": true when writes for an earlier checkpoint landed
    after this one was put, so its history section may miss them}``, or None when it is not
    about it.

    ``base == "c"``: ``head`` carries the checkpoint and all its writes so far: it is the
    checkpoint's record (which also carries the writes stored before it), or a writes record
    (which carries the run's latest checkpoint, ``cf``, with its writes, plus the writes
    stored so far for the checkpoint to come, ``ef``: LangGraph's default async durability
    may store a task's writes before the checkpoint they are for). So the latest checkpoint
    and its writes are one record, and so is the parent of a new checkpoint with its writes.
    ``base is None``: ``head`` carries writes stored before ``checkpoint_id`` was put."""
    if head is None or head.id is None or head.items is None or not isinstance(head.st, dict):
        return None
    md, st = head.md or {}, head.st
    if st.get("v") != 2:
        return None
    try:
        if md.get("lg") == "C" and md.get("id") == checkpoint_id:
            wd = list(st.get("w", ()))
            return {"base": "c", "items": head.items[:st["meta"] + 1],
                    "cst": {k: v for k, v in st.items() if k not in ("w", "eo")},
                    "pre": st.get("x") or not st.get("k"),
                    "rows": rows(head.items, wd), "wdesc": wd, "stale": False}
        if md.get("lg") == "W" and st.get("cf") == checkpoint_id:
            wd = list(st["w"])
            return {"base": "c", "items": head.items[:st["cn"]], "cst": st["c"],
                    "pre": st.get("x") or not st["c"].get("k"),
                    "rows": rows(head.items, wd), "wdesc": wd, "stale": st.get("h")}
        if md.get("lg") == "W" and st.get("ef") == checkpoint_id:
            wd = list(st["e"])
        elif checkpoint_id in (st.get("eo") or {}):
            wd = list(st["eo"][checkpoint_id])
        else:
            return None
        return {"base": None, "items": None, "cst": None, "pre": None,
                "rows": rows(head.items, wd), "wdesc": wd, "stale": None}
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
    return None


def head_view(head: Head | None) -> tuple[str, dict] | None:
    """``(checkpoint id, view)`` of the checkpoint the run's newest record carries whole
    (the latest checkpoint, :func:`covers` with ``base == "c"``), or None."""
    if head is None or head.id is None or not isinstance(head.st, dict):
        return None
    md, st = head.md or {}, head.st
    cid = md.get("id") if md.get("lg") == "C" else st.get("cf") if md.get("lg") == "W" else None
    if not isinstance(cid, str):
        return None
    view = covers(head, cid)
    return (cid, view) if view is not None and view["base"] == "c" else None


def parse_hist(codec: ValueCodec, items: list, start: int, count: int, ch: str) -> DeltaChannelHistory:
    """The DeltaChannel history of channel ``ch`` from its section ``items[start:start + count]``
    (§5: an optional ``{"lgs": [kind, n]}`` seed marker first, then ``{"lgw": [task, kind, n]}``
    write markers, each followed by its ``n`` items). Raises ValueError when truncated."""
    sec = items[start:start + count]
    if len(sec) != count:
        raise ValueError(f"history section of {count} items at {start}, found {len(sec)}")
    out: DeltaChannelHistory = {"writes": []}
    i = 0
    while i < len(sec):
        mark = sec[i]
        if "lgs" in mark and i == 0:
            kind, n = mark["lgs"]
            out["seed"] = codec.dec_value(kind, sec[i + 1:i + 1 + n])
        else:
            task, kind, n = mark["lgw"]
            out["writes"].append((task, ch, codec.dec_value(kind, sec[i + 1:i + 1 + n])))
        if i + 1 + n > len(sec):
            raise ValueError("history section truncated")
        i += 1 + n
    return out


def decode_checkpoint(codec: ValueCodec, items: list, st: dict, checkpoint_id: str, run: str = "?") -> Checkpoint:
    """The LangGraph checkpoint of a stored record's ``items`` and session state ``st``.

    Raises:
        IntegrityError: the record is not a valid LangGraph checkpoint record.
    """
    try:
        return _decode_checkpoint_raw(codec, items, st, checkpoint_id)
    except SnapstoreError:
        raise
    except Exception as e:
        raise IntegrityError(f"run {run!r} checkpoint {checkpoint_id!r}",
                             f"not a valid LangGraph checkpoint record: {type(e).__name__}: {e}") from e


def _decode_checkpoint_raw(codec: ValueCodec, items: list, st: dict, checkpoint_id: str) -> Checkpoint:
    if st.get("v") == 2:
        skeleton = codec.unjson(items[st["meta"]]["lgmeta"]["cp"])
    else:
        skeleton = codec.unjson(st["cp"])
    values: dict = {}
    for ch, kind, start, count in st["layout"]:
        its = items[start:start + count]
        if len(its) != count:
            raise ValueError(f"channel {ch!r}: {count} items expected at {start}, found {len(its)}")
        values[ch] = codec.dec_value("m" if kind == "m" else kind, its)
    out = dict(skeleton)
    out["id"] = checkpoint_id
    out["channel_values"] = values
    return out
