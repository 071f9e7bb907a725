"""``--messages-path``: where the message lists of a file are, named instead of searched for
(``results[].conversation.messages``): :func:`parse_messages_path` reads the path,
:func:`parse_at_path` takes the lists it names from a file.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidInputError
from .conversation import Conversation, format_path
from .read import describe
from .shapes import Found, conversations_from, list_shape, record_key
from .turns import chat_role

__all__ = ["parse_at_path", "parse_messages_path"]

_ITER = object()  # "[]" in a messages path


def parse_messages_path(text: str) -> list:
    """Parse a messages path: dotted keys, ``[]`` for every element of a list, ``[N]`` for one.

    ``"results[].conversation.messages"`` -> every element of the top-level key ``results``, its
    ``conversation``, its ``messages``. ``"[].traj"``: every element of a top-level list. The path
    is read from the file's top level (from each line of a JSON Lines file). The first ``[]``
    marks the records: each element it iterates over is one record (kept whole, see
    :meth:`Conversation.extras`); without one, the record is the whole file (each line).
    A key holding ``.`` or ``[`` can be quoted: ``a."b.c"[]``.

    Returns:
        a list of steps: ``str`` keys, ``int`` indices, and the iteration marker.
    Raises:
        InvalidInputError: an empty path or a malformed one (naming the offset).
    """
    steps: list = []
    i, n = 0, len(text)
    if not text.strip():
        raise InvalidInputError("empty --messages-path (expected e.g. results[].messages)")
    while i < n:
        c = text[i]
        if c == "[":
            j = text.find("]", i)
            inner = text[i + 1:j] if j >= 0 else None
            if inner is None or not (inner == "" or inner.isdigit()):
                raise InvalidInputError(f"bad --messages-path {text!r} at offset {i}: expected [] or [N]")
            steps.append(_ITER if inner == "" else int(inner))
            i = j + 1
        elif c == ".":
            if i == 0 or i + 1 >= n or text[i + 1] in ".[":
                raise InvalidInputError(f"bad --messages-path {text!r} at offset {i}: empty key")
            i += 1
        elif c == '"':
            j = text.find('"', i + 1)
            if j < 0:
                raise InvalidInputError(f"bad --messages-path {text!r} at offset {i}: unclosed quote")
            steps.append(text[i + 1:j])
            i = j + 1
        else:
            j = i
            while j < n and text[j] not in ".[":
                j += 1
            steps.append(text[i:j])
            i = j
    return steps

def parse_at_path(where: str, kind: str, payload: Any, steps: list, text: str,
                   forced: str | None) -> tuple[str, list[Conversation]]:
    """Conversations at a ``--messages-path``: ``(format, conversations)``."""
    roots = [(f"line {n}", v) for n, v in payload] if kind == "jsonl" else [("", payload)]
    found: list[Found] = []
    for root_label, root in roots:
        # (value, path from the record, record label, record)
        states = [(root, (), root_label, root, None)]  # ..., (list path, index) of a record inside a JSON file
        first_iter = kind == "json"
        for step in steps:
            nxt = []
            for value, p, label, record, origin in states:
                at = f"{label + ': ' if label else ''}{format_path(p) or '(top level)'}"
                if step is _ITER:
                    if not isinstance(value, list):
                        raise InvalidInputError(f"{where}: {at} is {describe(value)}, but --messages-path {text!r} "
                                                "iterates over it with []")
                    for i, x in enumerate(value):
                        if first_iter:
                            nxt.append((x, (), format_path(p + (i,)) if p else f"item {i}", x, (p, i)))
                        else:
                            nxt.append((x, p + (i,), label, record, origin))
                elif isinstance(step, int):
                    if not isinstance(value, list) or step >= len(value):
                        raise InvalidInputError(f"{where}: {at} has no element [{step}] (--messages-path {text!r})")
                    nxt.append((value[step], p + (step,), label, record, origin))
                else:
                    if not isinstance(value, dict) or step not in value:
                        raise InvalidInputError(f"{where}: {at} has no key {step!r} (--messages-path {text!r})")
                    nxt.append((value[step], p + (step,), label, record, origin))
            if step is _ITER:
                first_iter = False
            states = nxt
        for value, p, label, record, origin in states:
            at = f"{label + ': ' if label else ''}{format_path(p) or '(top level)'}"
            place = {} if origin is None else {"outer": root, "list_path": origin[0], "index": origin[1]}
            if isinstance(value, list) and not value:
                found.append(Found(label, record, p, value, "messages", chat_role, key=record_key(record), **place))
                continue
            shape = list_shape(value)
            if shape is None:
                raise InvalidInputError(
                    f"{where}: {at} is {describe(value)} holding no role-bearing messages or action/observation "
                    f"events (--messages-path {text!r})")
            found.append(Found(label, record, p, value, shape[0], shape[1], key=record_key(record), **place))
    if forced is not None:
        wrong = next((f for f in found if f.shape != forced and f.items), None)
        if wrong is not None:
            raise InvalidInputError(f"{where}: {wrong.label or 'the file'}: {format_path(wrong.path) or 'the list'} "
                                    f"holds {wrong.shape}, not {forced}")
    if not found:
        raise InvalidInputError(f"{where}: --messages-path {text!r} found no message list")
    fmt = forced or ("events" if all(f.shape == "events" for f in found if f.items) and any(f.items for f in found)
                     else "messages")
    return fmt, conversations_from(found)

