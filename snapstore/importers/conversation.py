"""A conversation found in a trajectory file, and the record it came from.

:class:`Conversation` holds the checkpoints (growing message lists) and where they were in the
file; :meth:`Conversation.extras` and :func:`rebuild_record` keep and give back everything else the
record holds. Also the path helpers the readers share (:func:`format_path`, :func:`narrow`...)
and the naming of conversations within a file (:func:`index_name`, :func:`unique_names`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInputError

__all__ = ["Conversation", "format_path", "has_outside", "index_name", "narrow", "outside_fields", "rebuild_record",
           "unique_names"]


@dataclass
class Conversation:
    """One conversation of a trajectory file, as a sequence of checkpoints.

    Attributes:
        name: ``""`` for a single-conversation file (SWE-agent, mini-swe-agent, Claude Code, one chat
            list, a bare OpenHands event list); in a file that is a list / JSON Lines of
            conversations (even a one-item one), a suffix that is stable, unique within the file and
            usable in a run id: the episode's ``instance_id`` (OpenHands), ``task<id>-trial<n>``
            (tau-bench) or the zero-padded item index such as ``"0007"`` (ShareGPT, OpenAI lists).
        checkpoints: ``checkpoints[i]`` is the full message list (a ``list`` of the source's own JSON
            records) after turn ``i``, in order. The last one is the conversation's whole history;
            the list is empty when the source history is empty.
    """

    name: str
    checkpoints: list[list] = field(default_factory=list)
    record: Any = None
    path: tuple = ()
    label: str = ""
    omitted: list = field(default_factory=list)
    jsonl: bool = False
    derived: bool = False
    shown: str = ""
    file_fields: list = field(default_factory=list)
    record_at: tuple = ()

    @property
    def messages(self) -> list:
        """The full history: the last checkpoint, or ``[]`` when there are no checkpoints."""
        return self.checkpoints[-1] if self.checkpoints else []

    @property
    def where(self) -> str:
        """Where the messages are in the file, for people: ``"line 3: history"``, ``"results[2].messages"``
        or ``"(the whole file)"``."""
        if self.shown:
            return self.shown
        inner = format_path(self.path)
        if self.label and inner:
            return f"{self.label}: {inner}"
        return self.label or inner or "(the whole file)"

    def extras(self) -> dict | None:
        """What the file holds for this conversation besides its messages, as a JSON object.

        ``{"record": R, "messages_path": [...], "omitted": [[i, element], ...], "jsonl": bool}``:
        ``R`` is the conversation's record (its JSON Lines line, list item or the whole file) with
        the message list at ``messages_path`` (keys and list indices) replaced by ``null``;
        ``omitted`` are the elements of that list that are not messages (Claude Code's
        ``file-history-snapshot`` and ``system`` records), by their index in the list; ``jsonl`` is
        true when the record is a whole JSON Lines file (a list of its lines). With ``"derived":
        true`` the messages were made from the record (OpenHands V0 events normalised to chat
        messages): ``R`` is then the record whole, its events in place, and ``messages_path``
        names where they are. None when the conversation has no record (made by hand).
        :func:`rebuild_record` inverts it.

        When the file holds more than its conversations' records (a tau2-bench results object:
        ``timestamp``, ``info``, ``tasks`` around ``simulations``), the record is the whole file
        narrowed to this conversation: every field as the file has it, and in the list of records
        only this one (``{"timestamp", "info", "tasks", "simulations": [this one]}``).
        """
        if self.record is None and not self.path:
            return None
        if self.derived:
            return {"record": self.record, "messages_path": list(self.path), "omitted": [], "jsonl": self.jsonl,
                    "derived": True}
        return {"record": _replace_at(self.record, self.path, None), "messages_path": list(self.path),
                "omitted": [[i, e] for i, e in self.omitted], "jsonl": self.jsonl}


def rebuild_record(extras: dict, messages: list) -> Any:
    """The record as the file had it, from :meth:`Conversation.extras` and the conversation's final
    message list.

    Args:
        extras: the dict :meth:`Conversation.extras` returned (as stored and read back).
        messages: the conversation's whole history (its last checkpoint).
    Returns:
        The record: equal to the file's JSON value, key order kept.
    Raises:
        InvalidInputError: ``extras`` is not of that shape.
    """
    if not isinstance(extras, dict) or not isinstance(extras.get("messages_path"), list) or "record" not in extras:
        raise InvalidInputError("not an imported record (expected {'record', 'messages_path', ...})")
    if extras.get("derived") is True:  # the messages were made from the record, which is kept whole
        return extras["record"]
    full = list(messages)
    for item in extras.get("omitted") or []:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and 0 <= item[0] <= len(full)):
            raise InvalidInputError(f"bad omitted element {str(item)[:60]} in an imported record")
        full.insert(item[0], item[1])
    path = tuple(extras["messages_path"])
    if not path:
        return full
    return _replace_at(extras["record"], path, full)


def format_path(path: tuple) -> str:
    """``("results", 2, "messages")`` -> ``"results[2].messages"``; ``()`` -> ``""``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _replace_at(value: Any, path: tuple, new: Any) -> Any:
    """A copy of ``value`` with the element at ``path`` replaced by ``new``; only the containers on
    the path are copied (key order kept)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        out = dict(value)
        out[head] = _replace_at(value[head], rest, new)
        return out
    out = list(value)
    out[head] = _replace_at(value[head], rest, new)
    return out


def narrow(payload: Any, list_path: tuple, index: int) -> tuple[Any, tuple]:
    """The file ``payload`` narrowed to one record: the list at ``list_path`` replaced by a list
    holding only its element ``index``; returns ``(narrowed, path of that element in it)``."""
    items = payload
    for part in list_path:
        items = items[part]
    return _replace_at(payload, list_path, [items[index]]), list_path + (0,)


def has_outside(payload: Any, list_path: tuple) -> bool:
    """Whether the file holds anything besides the list at ``list_path`` (a key beside it on the way)."""
    value = payload
    for part in list_path:
        if isinstance(value, dict) and len(value) > 1:
            return True
        if not isinstance(value, dict):
            return False
        value = value[part]
    return False


def outside_fields(payload: Any, list_path: tuple) -> list[str]:
    """The names (``info``, ``meta.run``) of what the file holds beside the list at ``list_path``."""
    out, value, at = [], payload, ()
    for part in list_path:
        if not isinstance(value, dict):
            break
        out.extend(format_path(at + (k,)) for k in value if k != part)
        value, at = value[part], at + (part,)
    return out

def index_name(index: int, count: int) -> str:
    """The name of item ``index`` of ``count``: zero-padded to at least 4 digits (``"0007"``), more
    when ``count`` needs them, so the names sort in file order."""
    return str(index).zfill(max(4, len(str(max(count - 1, 0)))))


def unique_names(names: list[str]) -> list[str]:
    """``names`` with repeats made unique by ``-2``, ``-3``... suffixes (the first keeps its name), in order."""
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 2
        while candidate in seen:
            candidate, n = f"{name}-{n}", n + 1
        seen.add(candidate)
        out.append(candidate)
    return out

