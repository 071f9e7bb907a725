"""Recognition by shape (formats ``messages`` and ``events``): role-bearing message lists and
action/observation event streams found at any depth of a file, the record each belongs to, and
how the conversations found are named (see the package's documentation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import InvalidInputError
from .conversation import Conversation, format_path, has_outside, index_name, narrow, outside_fields, unique_names
from .turns import LC_TYPES, chat_role, cut_turns, event_name, event_role, sharegpt_role, typed_role

__all__ = ["Found", "conversations_from", "list_shape", "parse_by_shape", "record_key", "shape_conversations"]

_ID_FIELDS = ("instance_id", "id", "task_id", "conversation_id", "session_id", "trajectory_id", "name")

_MAX_DEPTH = 200  # how deep the shape search looks (records nest a few levels; data can nest deeper)


def list_shape(value: Any) -> tuple[str, Callable] | None:
    """``("messages", role_of)`` for a role-bearing message list (or ShareGPT ``from``/``value``
    records), ``("events", role_of)`` for an action/observation event stream, else None."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return None
    if all(isinstance(v.get("role"), str) for v in value):
        return "messages", chat_role
    if all(isinstance(v.get("from"), str) and "value" in v for v in value):
        return "messages", sharegpt_role
    if all(v.get("type") in LC_TYPES and ("content" in v or isinstance(v.get("data"), dict)) for v in value):
        return "messages", typed_role
    if any("role" in v for v in value):
        return None
    names = [event_name(v)[0] for v in value]
    events = sum(1 for n in names if n in ("action", "observation", "message"))
    if any(n in ("action", "message") for n in names) and events + names.count("noise") >= len(names) / 2 and events:
        return "events", event_role
    return None


@dataclass
class Found:
    """One message list or event stream found in a file, with the record it belongs to (what
    :func:`conversations_from` makes a :class:`~.conversation.Conversation` of)."""

    label: str  # the record: "line 3", "item 2", "results[4]" or "" (the whole file)
    record: Any
    path: tuple  # from the record to the list
    items: list
    shape: str
    role_of: Callable
    jsonl: bool = False
    key: Any = None  # the record's own id, if any
    outer: Any = None  # the whole file, when the record is an element of a list inside it
    list_path: tuple = ()  # where that list is in the file
    index: int = 0  # the record's index in it


def _search(value: Any) -> list[tuple[tuple, list, str, Callable]]:
    """Every message list / event stream in ``value``, in file order: ``(path, list, shape, role_of)``.
    A list found is not searched further."""
    out = []
    stack: list = [(value, ())]
    while stack:
        v, p = stack.pop()
        if len(p) > _MAX_DEPTH:
            continue
        if isinstance(v, list):
            shape = list_shape(v)
            if shape is not None:
                out.append((p, v, shape[0], shape[1]))
                continue
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))) if isinstance(x, (list, dict)))
        elif isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())) if isinstance(x, (list, dict)))
    return out


def record_key(record: Any) -> Any:
    """A record's own id (``instance_id``, ``id``, ``task_id``, ... the first non-empty string or
    integer), or None; conversations are named by it when every record has a distinct one."""
    if isinstance(record, dict):
        for key in _ID_FIELDS:
            v = record.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and v != "":
                return v
    return None


def shape_conversations(where: str, kind: str, payload: Any) -> list[Found]:
    """The conversations a file holds by shape (see module doc, format ``messages`` / ``events``)."""
    if kind == "jsonl":
        lines = [v for _, v in payload]
        shape = list_shape(lines)
        if shape is not None:
            return [Found("", lines, (), lines, shape[0], shape[1], jsonl=True)]
        found = []
        for number, value in payload:
            for p, items, sh, role in _search(value):
                found.append(Found(f"line {number}", value, p, items, sh, role, key=record_key(value)))
        return found
    shape = list_shape(payload)
    if shape is not None:
        return [Found("", payload, (), payload, shape[0], shape[1])]
    found = []
    for p, items, sh, role in _search(payload):
        cut = next((k for k, part in enumerate(p) if isinstance(part, int)), None)
        if cut is None:
            found.append(Found("", payload, p, items, sh, role))
            continue
        record = payload
        for part in p[: cut + 1]:
            record = record[part]
        label = f"item {p[0]}" if cut == 0 else format_path(p[: cut + 1])
        found.append(Found(label, record, p[cut + 1:], items, sh, role, key=record_key(record),
                            outer=payload, list_path=p[:cut], index=p[cut]))
    return found


def conversations_from(found: list[Found]) -> list[Conversation]:
    """Cut what was found into conversations and name them (unique, stable, file order)."""
    single = len(found) == 1 and found[0].label == ""
    per_record: dict = {}
    for f in found:
        per_record.setdefault(f.label, []).append(f)
    ordinal = {label: i for i, label in enumerate(per_record)}
    keys = [fs[0].key for fs in per_record.values()]
    use_keys = all(k is not None for k in keys) and len(set(map(str, keys))) == len(keys)
    names, conversations = [], []
    for f in found:
        if single:
            names.append("")
        else:
            base = str(f.key) if use_keys else index_name(ordinal[f.label], len(per_record))
            siblings = per_record[f.label]
            names.append(base if len(siblings) == 1 else f"{base}-{siblings.index(f) + 1}")
        conv = Conversation("", cut_turns(f.items, f.role_of), record=f.record, path=f.path, label=f.label,
                            jsonl=f.jsonl)
        if f.outer is not None and has_outside(f.outer, f.list_path):  # keep what is around the records
            conv.record, at = narrow(f.outer, f.list_path, f.index)
            conv.shown, conv.path, conv.record_at = conv.where, at + f.path, at
            conv.file_fields = outside_fields(f.outer, f.list_path)
        conversations.append(conv)
    for conversation, name in zip(conversations, unique_names(names) if not single else names):
        conversation.name = name
    return conversations


def parse_by_shape(wanted: str) -> Callable[[str, str, Any], list[Conversation]]:
    """The reader of format ``wanted`` (``"messages"`` or ``"events"``): a function ``(where, kind,
    payload) -> conversations`` of the lists of that shape found anywhere in the file, raising
    InvalidInputError when there is none."""
    def parse(where: str, kind: str, payload: Any) -> list[Conversation]:
        found = [f for f in shape_conversations(where, kind, payload) if f.shape == wanted]
        if not found:
            what = ("role-bearing message lists ({'role': ...} or {'from', 'value'} records)" if wanted == "messages"
                    else "action/observation event streams")
            raise InvalidInputError(f"{where}: no {what} found at any depth (give --messages-path to name where)")
        return conversations_from(found)
    return parse

