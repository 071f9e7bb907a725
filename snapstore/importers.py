"""Turn agent-trajectory files from other tools into checkpoint sequences to replay into snapstore.

``load_trajectory(path)`` reads one file, detects its format from its content (not from its name) and
returns a list of :class:`Conversation` objects. A conversation's ``checkpoints[i]`` is the full message
list an agent would have saved after its ``i``-th turn; replaying them in order with one save per
checkpoint reproduces a realistic run.

Records are kept exactly as the source has them: every message, event or transcript record is the
JSON object parsed from the file (same keys, same key order, same values; large integers stay exact),
never normalised to ``{role, content}``. The checkpoint lists of one conversation share those objects:
treat them as read-only.

Where turns end
---------------
A turn is one assistant step plus the tool results answering it. Everything before the first assistant
message (system prompt, user task, demonstrations) belongs to the first checkpoint, and records that
follow the last turn without starting a new one (a user's final reply, mini-swe-agent's ``exit``
message) belong to the last checkpoint, so the last checkpoint is always the whole history. A message
from the user (not a tool result) after a turn starts the next turn. Checkpoint lists grow by appending
(``checkpoints[i]`` is a prefix of ``checkpoints[i + 1]``), except for SWE-agent function-calling files
(see below). A conversation whose history is empty has no checkpoints.

Formats (``FORMATS``)
---------------------
``openai``
    A JSON list of chat messages ``{"role": ..., ...}``, or ``{"messages": [...]}``, or a JSON list /
    JSON Lines file of ``{"messages": [...]}`` objects (one conversation each, named by zero-padded
    index). ``assistant`` messages start turns; ``tool``/``function`` messages (and unknown roles)
    answer them; ``user``/``system``/``developer`` messages after a turn start the next one.
``sweagent``
    SWE-agent ``.traj``: ``{"trajectory": [...], "history": [...], ...}``. When every
    ``trajectory[i]`` carries ``messages`` (SWE-agent >= 1.0 function calling), those are the real,
    history-processed prompts: checkpoint ``i`` is ``trajectory[i]["messages"]`` as stored, plus a final
    checkpoint equal to ``history`` if it differs from the last one. These are not prefixes of each
    other (old tool outputs get rewritten). Otherwise ``history`` is cut into turns; observations come
    back as ``user`` messages in the older format, so every non-assistant message after an assistant
    message belongs to that assistant's turn.
``minisweagent``
    mini-swe-agent ``.traj.json``: ``{"messages": [...], "trajectory_format": "mini-swe-agent-…", ...}``.
    ``messages`` is cut like the older SWE-agent history; the final ``exit`` message joins the last turn.
``openhands``
    OpenHands events, V1 SDK (items with a ``kind`` discriminator) or V0 (items with ``source`` and an
    ``action`` / ``observation`` name). A V0 stream is stored as the chat messages an agent resuming
    needs (:func:`openhands_v0_messages`: system prompt, user messages, each model response's
    assistant message once, tool results; state changes, null observations and recalls dropped),
    cut as ``openai``; its events are kept whole in the record (:meth:`Conversation.extras`,
    ``export --record``). V1 events are stored as they are. Either a bare JSON list of events
    (one conversation) or JSON Lines / a JSON list of evaluation episodes
    ``{"instance_id", "instruction", "history": [...], ...}`` (one conversation per episode, named by
    ``instance_id``, made unique with ``-2``, ``-3``... suffixes). Only the ``history`` events are
    replayed: the episode's top-level fields (``instruction``, ``metadata``, ``metrics``,
    ``test_result``...) are not messages and are not part of any checkpoint. A checkpoint ends after the
    ``ObservationEvent`` records answering an ``ActionEvent``; parallel ``ActionEvent`` records of one LLM
    response (same ``llm_response_id``) and their observations form one turn. An agent
    ``MessageEvent`` is a turn of its own, a user ``MessageEvent`` starts the next turn, and a final
    action without an observation is the last turn.
``claudecode``
    Claude Code session transcript (JSON Lines, one record per line). ``file-history-snapshot`` and
    ``system`` records (editor snapshots and hook summaries, no conversation data) are skipped; every
    other record is kept as its own element, in file order (the ``parentUuid`` chain of a session file
    is linear). One API response is written as several ``assistant`` lines sharing ``message.id``;
    they are not merged, but they belong to one turn together with the ``tool_result`` records
    answering them. A user record that is not a tool result (a human prompt, an interruption notice)
    starts the next turn.
``taubench``
    tau-bench results: a JSON list of ``{"task_id", "trial", "traj": [...], ...}``; one conversation per
    item (``traj`` is an OpenAI chat list, cut as ``openai``), named ``task<task_id>-trial<trial>``.
    tau2-bench results ``{"timestamp", "info", "tasks": [...], "simulations": [...]}``: one conversation
    per simulation (its ``messages``), named the same way; the record is the whole file narrowed to
    that simulation, so ``info`` and ``tasks`` come back with every conversation.
``sharegpt``
    ShareGPT / LLaMA-Factory: a JSON list of ``{"conversations": [{"from", "value"}, ...], ...}``; one
    conversation per item named by zero-padded index (``"0007"``). ``gpt`` and ``function_call``
    records start turns, ``observation`` records answer them, ``human``/``system`` records after a turn
    start the next one. Other item fields (``tools``, ``system``) are not replayed.

``messages`` (recognised by shape, no per-tool rule)
    Any JSON or JSON Lines file whose records hold *role-bearing message lists* at any depth: a list
    of objects that all have a string ``role`` (content a string or a list of typed blocks), or all
    ``from`` + ``value`` (ShareGPT style), or all a LangChain message ``type`` (``human``, ``ai``,
    ``tool``...) with ``content`` or ``data``. One conversation per list found; a list found is not
    searched further. Turns are cut as ``openai``; there, ``model``/``ai``/``gpt`` count as the
    assistant and a user message whose content (or Gemini ``parts``) is only tool-result blocks
    (``tool_result``, ``functionResponse``...) answers the turn instead of starting one.
``events`` (recognised by shape)
    *Event streams*: a list of objects, none with a ``role``, most of them action or observation
    events (``{"action": ...}`` / ``{"observation": ...}``, or a ``kind`` ending in ``Action`` /
    ``Observation``), as the older OpenHands generation writes them. A turn is one model response
    (the actions sharing one ``llm_response_id``, ``response_id`` or embedded ``model_response``, so
    a response repeated on several events is one turn) and the observations answering it; user
    actions and messages (and the ``system`` action) start the next turn; noise events (agent state
    changes, null observations) never start a turn and stay in the history where they were. The
    ``openhands`` format uses the same rule for its events that have no ``kind``.

Records and names for these two: a JSON Lines line, an item of a top-level list, or the element of
the first list on the way from the top level (``results[3]`` for ``results[3].conversation.messages``)
is the conversation's *record*; with no list on the way the whole file is. A file holding one list
in one record has one conversation named ``""``; otherwise conversations are named by their record's
``instance_id``/``id``/``task_id``/... when every record has a distinct one, else by the zero-padded
record index, with ``-1``, ``-2``... when a record holds several lists. ``load_trajectory(...,
messages_path="results[].conversation.messages")`` names the lists instead of searching
(:func:`parse_messages_path`).

Records are kept: :meth:`Conversation.extras` is what the record holds besides its messages
(and :func:`rebuild_record` gives the record back from it and the final history), for every format.
When the records are the elements of a list inside a JSON object that holds more (``{"meta": ...,
"results": [...]}``), a conversation's record is the whole file narrowed to it: every other field
as the file has it, and in that list only this conversation's record.

Values: integers of any size are read exactly (Python's 4,300-digit limit on int conversion is
lifted while a file is read); an object that holds a key twice is refused, naming the key and where
(a JSON reader keeps one of the two values, so the import would silently lose the other).

Errors: every problem with the input (unreadable file, not UTF-8, not JSON or cut short, a broken
JSON Lines line, a duplicate key, NaN/Infinity, a number too large for a float such as ``1e400`` (named by record and path), an
unrecognised or mismatched structure, an unknown ``format`` name) raises
:class:`snapstore.errors.InvalidInputError` with a one-line message naming the file (and the line or
item where it applies).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from snapstore.errors import InvalidInputError
from snapstore.format.codec import any_int_digits

__all__ = ["FORMATS", "Conversation", "default_run_id", "format_path", "load_trajectory", "openhands_v0_messages",
           "parse_messages_path", "rebuild_record"]

FORMATS: tuple[str, ...] = (
    "openai",
    "sweagent",
    "minisweagent",
    "openhands",
    "claudecode",
    "taubench",
    "sharegpt",
    "messages",
    "events",
)

_EXPECTED = (
    "an agent trajectory: an OpenAI chat message list or {'messages': [...]}, a SWE-agent .traj, "
    "a mini-swe-agent .traj.json, OpenHands V0/V1 events or episodes (JSON/JSONL), a Claude Code "
    "session JSONL, a tau-bench results list, a tau2-bench results object or a ShareGPT list"
)

# Turn roles of a record, used to find where checkpoints end.
_ASSISTANT = "assistant"  # starts a turn (unless it continues the same API response)
_RESULT = "result"  # answers the current turn (tool results, observations, neutral records)
_USER = "user"  # after a turn: starts the next turn

# Claude Code record types that carry no conversation data.
_CLAUDECODE_SKIPPED = ("file-history-snapshot", "system")


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


def _narrow(payload: Any, list_path: tuple, index: int) -> tuple[Any, tuple]:
    """The file ``payload`` narrowed to one record: the list at ``list_path`` replaced by a list
    holding only its element ``index``; returns ``(narrowed, path of that element in it)``."""
    items = payload
    for part in list_path:
        items = items[part]
    return _replace_at(payload, list_path, [items[index]]), list_path + (0,)


def _has_outside(payload: Any, list_path: tuple) -> bool:
    """Whether the file holds anything besides the list at ``list_path`` (a key beside it on the way)."""
    value = payload
    for part in list_path:
        if isinstance(value, dict) and len(value) > 1:
            return True
        if not isinstance(value, dict):
            return False
        value = value[part]
    return False


def _outside_fields(payload: Any, list_path: tuple) -> list[str]:
    """The names (``info``, ``meta.run``) of what the file holds beside the list at ``list_path``."""
    out, value, at = [], payload, ()
    for part in list_path:
        if not isinstance(value, dict):
            break
        out.extend(format_path(at + (k,)) for k in value if k != part)
        value, at = value[part], at + (part,)
    return out


def default_run_id(path: str | os.PathLike) -> str:
    """The run id an import of ``path`` uses by default: the file name without its trajectory
    suffixes (``.json``, ``.jsonl``, ``.traj``, in any combination): ``x.traj.json`` -> ``x``,
    ``run.jsonl`` -> ``run``, ``output.critic_attempt_1.jsonl`` -> ``output.critic_attempt_1``."""
    name = os.path.basename(os.fspath(path))
    changed = True
    while changed:
        changed = False
        for suffix in (".jsonl", ".json", ".traj"):
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, changed = name[: -len(suffix)], True
    return name


def load_trajectory(
    path: str | os.PathLike, format: str | None = None, messages_path: str | None = None
) -> tuple[str, list[Conversation]]:
    """Read a trajectory file and return ``(format_name, conversations)``.

    Args:
        path: a JSON or JSON Lines file (UTF-8; a leading BOM is ignored). JSON Lines is read line by
            line, blank lines are ignored.
        format: one of :data:`FORMATS` to skip detection; ``None`` detects the format from the
            content (the file name is not used).
        messages_path: where the message lists are, as :func:`parse_messages_path` reads it
            (``"results[].conversation.messages"``); implies format ``messages`` (or ``events``
            when the lists found are event streams). Cannot be combined with another ``format``.

    Returns:
        ``(format_name, conversations)``: the format used (a member of :data:`FORMATS`) and a list of
        :class:`Conversation` in file order. Single-conversation formats return one conversation named
        ``""``; multi-conversation files return one per item/line with unique names.

    Raises:
        InvalidInputError: the file cannot be read or decoded, is not JSON / JSON Lines (a broken
            JSON Lines line is named by its 1-based line number), contains NaN/Infinity or a number
            too large for a float (named by record and path), does not look like any known format
            or shape, does not match the ``format`` or ``messages_path`` given, or ``format`` is
            unknown.
    """
    with any_int_digits():  # integers of any size (Python refuses more than 4,300 digits by default)
        return _load(os.fspath(path), format, messages_path)


def _load(where: str, format: str | None, messages_path: str | None) -> tuple[str, list[Conversation]]:
    if format is not None and format not in FORMATS:
        raise InvalidInputError(
            f"{where}: unknown trajectory format {format!r} (expected one of {', '.join(FORMATS)})"
        )
    steps = None
    if messages_path is not None:
        if format not in (None, "messages", "events"):
            raise InvalidInputError(f"{where}: --messages-path cannot be combined with format {format!r}")
        steps = parse_messages_path(messages_path)
    kind, payload = _read(where)
    if steps is not None:
        return _parse_at_path(where, kind, payload, steps, messages_path, format)
    name = format if format is not None else _detect(where, kind, payload)
    conversations = _PARSERS[name](where, kind, payload)
    return name, conversations


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


# --------------------------------------------------------------------------------------------------
# Reading


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(name)


class _Overflow(ValueError):
    pass


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):
        raise _Overflow(text)
    return value


_INF = float("inf")


class _DuplicateKey(ValueError):
    """A JSON object of the text holds a key twice: ``key``, ``path`` (from the parsed value)."""

    def __init__(self, key: str, path: str):
        super().__init__(key)
        self.key, self.path = key, path


def _loads(text: str) -> Any:
    """Parse JSON text: NaN/Infinity, floats that overflow and objects holding a key twice are
    refused (:class:`_NonFinite`, :class:`_Overflow`, :class:`_DuplicateKey`); integers of any
    size are kept (the caller lifts Python's digit limit, see :func:`any_int_digits`)."""
    dups: list = []

    def pairs(items: list) -> dict:
        obj = dict(items)
        if len(obj) != len(items) and not dups:
            seen: set = set()
            key = next(k for k, _ in items if k in seen or seen.add(k))
            dups.append((key, obj))
        return obj

    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_parse_float, object_pairs_hook=pairs)
    except RecursionError:
        raise _TooDeep() from None
    if dups:
        key, obj = dups[0]
        raise _DuplicateKey(key, _path_of(value, obj))
    return value


def _path_of(value: Any, target: Any) -> tuple:
    """The path (``(3, "traj", 2)``) of the object ``target`` (by identity) inside ``value``."""
    stack: list = [(value, ())]
    while stack:
        v, p = stack.pop()
        if v is target:
            return p
        if isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())) if isinstance(x, (dict, list)))
        elif isinstance(v, list):
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))) if isinstance(x, (dict, list)))
    return ()


def _duplicate_error(where: str, line: int | None, e: _DuplicateKey) -> InvalidInputError:
    """``file: item 3: traj[2]: the object holds the key 'content' twice ...`` (``line N:`` in JSON
    Lines; the top-level object is named as such)."""
    path = e.path
    at = [] if line is None else [f"line {line}"]
    if line is None and path and isinstance(path[0], int):
        at.append(f"item {path[0]}")
        path = path[1:]
    at.append(format_path(path) or ("the top-level object" if not at else ""))
    at = [a for a in at if a]
    return InvalidInputError(
        f"{where}: {': '.join(at)}: the object holds the key {e.key!r} twice (JSON readers keep only one of "
        "the two values, so part of the file would be lost); nothing was imported")


def _syntax_error(e: json.JSONDecodeError, text: str) -> str:
    """What a JSON syntax error says, as a whole sentence (the decoder's "Unterminated string
    starting at" expects a position after it), and, when the text stops inside a value, that the
    file looks cut short."""
    msg = e.msg
    if msg.endswith(" starting at"):
        msg = msg[: -len(" at")] + " there"
    if e.msg.startswith("Unterminated string") or e.pos >= len(text.rstrip()):
        msg += " (the text ends inside a value: the file looks truncated)"
    return msg


class _TooDeep(ValueError):
    pass


def _overflow_path(value: Any) -> str:
    """The path (``history[3].metrics.cost``) of the first float in ``value`` that is infinite."""
    stack: list = [(value, ())]
    while stack:
        v, p = stack.pop()
        if type(v) is float and v in (_INF, -_INF):
            return format_path(p) or "(the value itself)"
        if isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))))
    return "?"


def _overflow_error(where: str, text: str, number: str, line: int | None) -> InvalidInputError:
    """Name the record and the path of a number too large for a float (1e400)."""
    value = json.loads(text)  # the same text, parsed without the check: infinities in place
    if isinstance(value, list) and line is None:
        for i, item in enumerate(value):
            path = _overflow_path(item)
            if path != "?":
                label = f"item {i}: {path}"
                break
        else:
            label = "?"
    else:
        label = ("" if line is None else f"line {line}: ") + _overflow_path(value)
    return InvalidInputError(
        f"{where}: {label}: the number {number[:40]} is too large for a float (it would be Infinity, "
        "which JSON and snapstore do not allow); nothing was imported")


def _read(where: str) -> tuple[str, Any]:
    """Return ``("json", value)`` or ``("jsonl", [(line_number, value), ...])``."""
    try:
        with open(where, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InvalidInputError(f"{where}: cannot read trajectory file: {e.strerror or e}") from e
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{where}: not UTF-8 text (bad byte at offset {e.start})") from e
    if not text.strip(" \t\r\n"):
        raise InvalidInputError(f"{where}: empty file, expected {_EXPECTED}")
    try:
        return "json", _loads(text)
    except _DuplicateKey as e:
        raise _duplicate_error(where, None, e) from None
    except _NonFinite as e:
        raise InvalidInputError(f"{where}: {e} is not a JSON value (NaN/Infinity are not allowed)") from None
    except _Overflow as e:
        raise _overflow_error(where, text, str(e), None) from None
    except _TooDeep:
        raise InvalidInputError(f"{where}: JSON nested too deeply to read") from None
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":
            raise InvalidInputError(
                f"{where}: invalid JSON at line {e.lineno} column {e.colno}: {_syntax_error(e, text)}") from None
    # More than one JSON value: JSON Lines. Split on "\n" only: JSON strings may hold raw U+2028 etc.
    lines: list[tuple[int, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.strip(" \t\r")
        if not line:
            continue
        try:
            lines.append((number, _loads(line)))
        except _DuplicateKey as e:
            raise _duplicate_error(where, number, e) from None
        except _NonFinite as e:
            raise InvalidInputError(
                f"{where}: line {number}: {e} is not a JSON value (NaN/Infinity are not allowed)"
            ) from None
        except _Overflow as e:
            raise _overflow_error(where, line, str(e), number) from None
        except _TooDeep:
            raise InvalidInputError(f"{where}: line {number}: JSON nested too deeply to read") from None
        except json.JSONDecodeError as e:
            raise InvalidInputError(
                f"{where}: line {number}: invalid JSON Lines record (column {e.colno}: {_syntax_error(e, line)})"
            ) from None
    return "jsonl", lines


# --------------------------------------------------------------------------------------------------
# Detection


def _is_claudecode_record(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and any(k in value for k in ("uuid", "parentUuid", "sessionId", "messageId", "leafUuid"))
    )


def _is_openhands_episode(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and "trajectory" not in value
        and ("instance_id" in value or "instruction" in value)
    )


def _is_openhands_event(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("kind"), str) and "role" not in value


def _is_openhands_v0_events(value: Any) -> bool:
    """An OpenHands V0 event stream: a non-empty list of objects, each with a ``source`` and an
    ``action`` or ``observation`` name (no ``kind``, no ``role``)."""
    return (isinstance(value, list) and bool(value) and all(
        isinstance(e, dict) and "kind" not in e and "role" not in e and "source" in e
        and (isinstance(e.get("action"), str) or isinstance(e.get("observation"), str)) for e in value))


def _is_minisweagent(value: dict) -> bool:
    fmt = value.get("trajectory_format")
    info = value.get("info")
    return (isinstance(fmt, str) and fmt.startswith("mini-swe-agent")) or (
        isinstance(info, dict) and "mini_version" in info
    )


def _detect(where: str, kind: str, payload: Any) -> str:
    known = _detect_known(kind, payload)
    if known is not None:
        return known
    shaped = _detect_shape(kind, payload)
    if shaped is not None:
        return shaped
    if kind == "jsonl":
        raise InvalidInputError(
            f"{where}: unrecognised JSON Lines records (line {payload[0][0]}), expected Claude Code "
            "session records, OpenHands episodes, {'messages': [...]} objects, or records holding "
            "role/content message lists or action/observation events at any depth (or give "
            "--messages-path)"
        )
    raise InvalidInputError(
        f"{where}: unrecognised JSON {_shape(payload)}, expected {_EXPECTED}, or records holding "
        "role/content message lists or action/observation events at any depth (or give --messages-path)"
    )


def _detect_known(kind: str, payload: Any) -> str | None:
    """The known format a file is in, by the rules of the known tools (their exact handling)."""
    if kind == "jsonl":
        first = payload[0][1]
        if _is_claudecode_record(first):
            return "claudecode"
        if _is_openhands_episode(first):
            return "openhands"
        if isinstance(first, dict) and isinstance(first.get("messages"), list):
            return "openai"
        return None
    value = payload
    if isinstance(value, dict):
        if _is_tau2_results(value):
            return "taubench"
        if isinstance(value.get("history"), list) and isinstance(value.get("trajectory"), list):
            return "sweagent"
        if isinstance(value.get("messages"), list):
            return "minisweagent" if _is_minisweagent(value) else "openai"
        if _is_openhands_episode(value):
            return "openhands"
        if _is_claudecode_record(value):
            return "claudecode"
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        first = value[0]
        if isinstance(first.get("traj"), list):
            return "taubench"
        if isinstance(first.get("conversations"), list):
            return "sharegpt"
        if _is_openhands_episode(first) or _is_openhands_event(first) or _is_openhands_v0_events(value):
            return "openhands"
        if "role" in first or isinstance(first.get("messages"), list):
            return "openai"
    return None


def _detect_shape(kind: str, payload: Any) -> str | None:
    """``"messages"`` or ``"events"`` when the file holds message lists / event streams somewhere."""
    found = _shape_conversations("", kind, payload)
    if not found:
        return None
    return "events" if all(f.shape == "events" for f in found) else "messages"


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        keys = ", ".join(list(value)[:6])
        return f"object with keys [{keys}{', ...' if len(value) > 6 else ''}]"
    if isinstance(value, list):
        if not value:
            return "empty list"
        return f"list of {type(value[0]).__name__}"
    return type(value).__name__


# --------------------------------------------------------------------------------------------------
# Recognition by shape: role-bearing message lists and event streams at any depth

_ROLE_ASSISTANT = ("assistant", "model", "ai", "gpt", "bot", "agent")
_ROLE_RESULT = ("tool", "function", "ipython", "observation", "tool_result", "environment", "exit")
_ROLE_USER = ("user", "human", "system", "developer")
_RESULT_BLOCKS = ("tool_result", "function_result", "tool_response", "function_response", "functionResponse",
                  "function_call_output")

# Event names that only record a state change (no conversation data); they never start a turn.
_NOISE_EVENTS = ("change_agent_state", "agent_state_changed", "null", "none", "AgentStateChangedObservation",
                 "NullObservation", "NullAction", "ChangeAgentStateAction")

_ID_FIELDS = ("instance_id", "id", "task_id", "conversation_id", "session_id", "trajectory_id", "name")

# LangChain-style messages: {"type": "human" | "ai" | "tool" | ..., "content" | "data": {...}}
_LC_TYPES = ("human", "ai", "tool", "system", "function", "chat", "HumanMessage", "AIMessage", "ToolMessage",
             "SystemMessage", "FunctionMessage", "ChatMessage", "AIMessageChunk")
_LC_ROLE = {"human": "user", "HumanMessage": "user", "ai": "assistant", "AIMessage": "assistant",
            "AIMessageChunk": "assistant", "system": "system", "SystemMessage": "system"}


def _typed_role(message: dict) -> tuple[str, Any]:
    """LangChain-style messages: ``ai`` starts a turn, ``human``/``system`` start the next one, the
    rest (``tool``, ``function``...) answer."""
    role = _LC_ROLE.get(message.get("type"))
    if role == "assistant":
        return _ASSISTANT, None
    if role is not None:
        return _USER, None
    return _RESULT, None


_MAX_DEPTH = 200  # how deep the shape search looks (records nest a few levels; data can nest deeper)


def _event_name(event: dict) -> tuple[str | None, str | None]:
    """``("action" | "observation" | "message" | "noise" | "other" | None, name)`` of an event record."""
    kind = event.get("kind")
    if isinstance(kind, str):
        if kind in _NOISE_EVENTS:
            return "noise", kind
        if kind == "MessageEvent":
            return "message", kind
        if kind.endswith("Action") or kind == "ActionEvent":
            return "action", kind
        if kind.endswith("Observation") or kind == "ObservationEvent":
            return "observation", kind
        return "other", kind
    action = event.get("action")
    if isinstance(action, str) and action:
        if action in _NOISE_EVENTS:
            return "noise", action
        return ("message" if action == "message" else "action"), action
    observation = event.get("observation")
    if isinstance(observation, str) and observation:
        return ("noise" if observation in _NOISE_EVENTS else "observation"), observation
    return None, None


def _response_key(event: dict) -> Any:
    """The id of the model response an action event came from (several events can share one), or
    None: ``llm_response_id``, ``response_id``, or the ``id`` of an embedded ``model_response``
    (at the top or under ``tool_call_metadata``), or the embedded response itself."""
    for key in ("llm_response_id", "response_id"):
        if event.get(key) not in (None, ""):
            return event[key]
    for holder in (event, event.get("tool_call_metadata")):
        if isinstance(holder, dict):
            response = holder.get("model_response")
            if isinstance(response, dict):
                rid = response.get("id")
                return rid if rid not in (None, "") else json.dumps(response, sort_keys=True)[:4096]
    return None


def _event_role(event: dict) -> tuple[str, Any]:
    """An event stream record: an agent action or message starts a turn (actions of one model
    response continue it), a user action or message (or the system prompt) starts the next turn
    after one, observations answer; noise and unknown events never start a turn."""
    what, name = _event_name(event)
    if what in ("action", "message"):
        source = event.get("source")
        if source == "user" or name == "system" or (name and name.startswith("SystemPrompt")):
            return _USER, None
        return _ASSISTANT, _response_key(event)
    return _RESULT, None


def _list_shape(value: Any) -> tuple[str, Callable] | None:
    """``("messages", role_of)`` for a role-bearing message list (or ShareGPT ``from``/``value``
    records), ``("events", role_of)`` for an action/observation event stream, else None."""
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        return None
    if all(isinstance(v.get("role"), str) for v in value):
        return "messages", _chat_role
    if all(isinstance(v.get("from"), str) and "value" in v for v in value):
        return "messages", _sharegpt_role
    if all(v.get("type") in _LC_TYPES and ("content" in v or isinstance(v.get("data"), dict)) for v in value):
        return "messages", _typed_role
    if any("role" in v for v in value):
        return None
    names = [_event_name(v)[0] for v in value]
    events = sum(1 for n in names if n in ("action", "observation", "message"))
    if any(n in ("action", "message") for n in names) and events + names.count("noise") >= len(names) / 2 and events:
        return "events", _event_role
    return None


@dataclass
class _Found:
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
            shape = _list_shape(v)
            if shape is not None:
                out.append((p, v, shape[0], shape[1]))
                continue
            stack.extend((x, p + (i,)) for i, x in reversed(list(enumerate(v))) if isinstance(x, (list, dict)))
        elif isinstance(v, dict):
            stack.extend((x, p + (k,)) for k, x in reversed(list(v.items())) if isinstance(x, (list, dict)))
    return out


def _record_key(record: Any) -> Any:
    if isinstance(record, dict):
        for key in _ID_FIELDS:
            v = record.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and v != "":
                return v
    return None


def _shape_conversations(where: str, kind: str, payload: Any) -> list[_Found]:
    """The conversations a file holds by shape (see module doc, format ``messages`` / ``events``)."""
    if kind == "jsonl":
        lines = [v for _, v in payload]
        shape = _list_shape(lines)
        if shape is not None:
            return [_Found("", lines, (), lines, shape[0], shape[1], jsonl=True)]
        found = []
        for number, value in payload:
            for p, items, sh, role in _search(value):
                found.append(_Found(f"line {number}", value, p, items, sh, role, key=_record_key(value)))
        return found
    shape = _list_shape(payload)
    if shape is not None:
        return [_Found("", payload, (), payload, shape[0], shape[1])]
    found = []
    for p, items, sh, role in _search(payload):
        cut = next((k for k, part in enumerate(p) if isinstance(part, int)), None)
        if cut is None:
            found.append(_Found("", payload, p, items, sh, role))
            continue
        record = payload
        for part in p[: cut + 1]:
            record = record[part]
        label = f"item {p[0]}" if cut == 0 else format_path(p[: cut + 1])
        found.append(_Found(label, record, p[cut + 1:], items, sh, role, key=_record_key(record),
                            outer=payload, list_path=p[:cut], index=p[cut]))
    return found


def _conversations_from(found: list[_Found]) -> list[Conversation]:
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
            base = str(f.key) if use_keys else _padded(ordinal[f.label], len(per_record))
            siblings = per_record[f.label]
            names.append(base if len(siblings) == 1 else f"{base}-{siblings.index(f) + 1}")
        conv = Conversation("", _cut(f.items, f.role_of), record=f.record, path=f.path, label=f.label,
                            jsonl=f.jsonl)
        if f.outer is not None and _has_outside(f.outer, f.list_path):  # keep what is around the records
            conv.record, at = _narrow(f.outer, f.list_path, f.index)
            conv.shown, conv.path, conv.record_at = conv.where, at + f.path, at
            conv.file_fields = _outside_fields(f.outer, f.list_path)
        conversations.append(conv)
    for conversation, name in zip(conversations, _unique(names) if not single else names):
        conversation.name = name
    return conversations


def _parse_by_shape(wanted: str) -> Callable[[str, str, Any], list[Conversation]]:
    def parse(where: str, kind: str, payload: Any) -> list[Conversation]:
        found = [f for f in _shape_conversations(where, kind, payload) if f.shape == wanted]
        if not found:
            what = ("role-bearing message lists ({'role': ...} or {'from', 'value'} records)" if wanted == "messages"
                    else "action/observation event streams")
            raise InvalidInputError(f"{where}: no {what} found at any depth (give --messages-path to name where)")
        return _conversations_from(found)
    return parse


def _parse_at_path(where: str, kind: str, payload: Any, steps: list, text: str,
                   forced: str | None) -> tuple[str, list[Conversation]]:
    """Conversations at a ``--messages-path``: ``(format, conversations)``."""
    roots = [(f"line {n}", v) for n, v in payload] if kind == "jsonl" else [("", payload)]
    found: list[_Found] = []
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
                        raise InvalidInputError(f"{where}: {at} is {_shape(value)}, but --messages-path {text!r} "
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
                found.append(_Found(label, record, p, value, "messages", _chat_role, key=_record_key(record), **place))
                continue
            shape = _list_shape(value)
            if shape is None:
                raise InvalidInputError(
                    f"{where}: {at} is {_shape(value)} holding no role-bearing messages or action/observation "
                    f"events (--messages-path {text!r})")
            found.append(_Found(label, record, p, value, shape[0], shape[1], key=_record_key(record), **place))
    if forced is not None:
        wrong = next((f for f in found if f.shape != forced and f.items), None)
        if wrong is not None:
            raise InvalidInputError(f"{where}: {wrong.label or 'the file'}: {format_path(wrong.path) or 'the list'} "
                                    f"holds {wrong.shape}, not {forced}")
    if not found:
        raise InvalidInputError(f"{where}: --messages-path {text!r} found no message list")
    fmt = forced or ("events" if all(f.shape == "events" for f in found if f.items) and any(f.items for f in found)
                     else "messages")
    return fmt, _conversations_from(found)


# --------------------------------------------------------------------------------------------------
# Turn cutting


def _cut(records: list, role_of: Callable[[Any], tuple[str, Any]]) -> list[list]:
    """Cut ``records`` into growing checkpoints (prefixes of ``records``).

    ``role_of(record)`` returns ``(turn_role, response_key)``. An assistant record starts a new turn
    unless the current turn's assistant had the same non-None ``response_key`` (one API response
    split over several records); a user record starts a new turn if the current one has an assistant
    record; result records never start one. Leading records join the first turn and trailing records
    without an assistant record join the last one.
    """
    ends: list[int] = []
    in_turn = False  # the current turn has an assistant record
    key: Any = None
    for i, record in enumerate(records):
        role, rkey = role_of(record)
        if role == _ASSISTANT:
            if in_turn and (rkey is None or rkey != key):
                ends.append(i)
            in_turn, key = True, rkey
        elif role == _USER and in_turn:
            ends.append(i)
            in_turn, key = False, None
    if in_turn or not ends:
        if records:
            ends.append(len(records))
    else:
        ends[-1] = len(records)
    return [records[:end] for end in ends]


def _chat_role(message: dict) -> tuple[str, Any]:
    """Chat messages: ``assistant`` (and ``model``, ``ai``, ``gpt``...) starts a turn; tool/function
    messages and unknown roles answer it; ``user``/``system``/``developer``/``human`` start the next
    turn, except a user message whose content (or Gemini ``parts``) is only tool-result blocks
    (Anthropic ``tool_result``, ``function_response``...), which answers."""
    role = message.get("role")
    if role in _ROLE_ASSISTANT:
        return _ASSISTANT, None
    if role in _ROLE_USER:
        blocks = message.get("content")
        if not isinstance(blocks, list) or not blocks:
            blocks = message.get("parts")
        if isinstance(blocks, list) and blocks and all(_is_result_block(b) for b in blocks):
            return _RESULT, None
        return _USER, None
    return _RESULT, None


def _is_result_block(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    return block.get("type") in _RESULT_BLOCKS or any(k in block for k in _RESULT_BLOCKS)


def _agent_role(message: dict) -> tuple[str, Any]:
    """SWE-agent / mini-swe-agent: everything that is not the assistant answers the assistant."""
    return (_ASSISTANT if message.get("role") == "assistant" else _RESULT), None


_SHAREGPT_ASSISTANT = ("gpt", "function_call", "assistant", "model")
_SHAREGPT_RESULT = ("observation", "tool", "function", "function_response")


def _sharegpt_role(record: dict) -> tuple[str, Any]:
    origin = record.get("from")
    if origin in _SHAREGPT_ASSISTANT:
        return _ASSISTANT, None
    if origin in _SHAREGPT_RESULT:
        return _RESULT, None
    return _USER, None


def _openhands_role(event: dict) -> tuple[str, Any]:
    kind = event.get("kind")
    if kind == "ActionEvent":
        return _ASSISTANT, event.get("llm_response_id")
    if kind == "MessageEvent":
        if event.get("source") == "agent":
            return _ASSISTANT, event.get("llm_response_id")
        return _USER, None
    if kind == "SystemPromptEvent":
        return _USER, None
    if kind is None:  # the older generation: {"action": ...} / {"observation": ...} events
        return _event_role(event)
    return _RESULT, None


def _claudecode_role(record: dict) -> tuple[str, Any]:
    rtype = record.get("type")
    message = record.get("message")
    if rtype == "assistant":
        return _ASSISTANT, message.get("id") if isinstance(message, dict) else None
    if rtype == "user":
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return _RESULT, None
        return _USER, None
    return _RESULT, None


# --------------------------------------------------------------------------------------------------
# Parsers: (where, kind, payload) -> list[Conversation]


def _expect_json(where: str, kind: str, fmt: str, what: str) -> None:
    if kind != "json":
        raise InvalidInputError(f"{where}: JSON Lines file given, but format {fmt!r} expects {what}")


def _records(where: str, value: Any, label: str, required: str | None = None) -> list:
    """Check that ``value`` is a list of JSON objects (each holding key ``required``) and return it."""
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {label} is {_shape(value)}, expected a list of objects")
    for i, record in enumerate(value):
        if not isinstance(record, dict):
            raise InvalidInputError(
                f"{where}: {label}[{i}] is {type(record).__name__}, expected a JSON object"
            )
        if required is not None and required not in record:
            raise InvalidInputError(f"{where}: {label}[{i}] has no {required!r} key")
    return value


def _padded(index: int, count: int) -> str:
    return str(index).zfill(max(4, len(str(max(count - 1, 0)))))


def _unique(names: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, n = name, 2
        while candidate in seen:
            candidate, n = f"{name}-{n}", n + 1
        seen.add(candidate)
        out.append(candidate)
    return out


def _parse_openai(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = "a list of chat messages, {'messages': [...]}, or a list / JSON Lines of those objects"
    if kind == "jsonl":
        items = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict):
        if "messages" not in payload:
            raise InvalidInputError(f"{where}: {_shape(payload)} has no 'messages', expected {what}")
        msgs = _records(where, payload["messages"], "messages", "role")
        return [Conversation("", _cut(msgs, _chat_role), record=payload, path=("messages",))]
    elif isinstance(payload, list) and payload and isinstance(payload[0], dict) and "role" not in payload[0]:
        items = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list):
        msgs = _records(where, payload, "messages", "role")
        return [Conversation("", _cut(msgs, _chat_role), record=payload)]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected {what}")
    conversations = []
    for i, (label, item) in enumerate(items):
        if not isinstance(item, dict) or "messages" not in item:
            raise InvalidInputError(f"{where}: {label} is not a {{'messages': [...]}} object")
        msgs = _records(where, item["messages"], f"{label}: messages", "role")
        conversations.append(Conversation(_padded(i, len(items)), _cut(msgs, _chat_role), record=item,
                                          path=("messages",), label=label))
    return conversations


def _parse_sweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sweagent", "a .traj JSON object")
    if not isinstance(payload, dict) or "history" not in payload or "trajectory" not in payload:
        raise InvalidInputError(
            f"{where}: {_shape(payload)}, expected a SWE-agent .traj object with 'history' and 'trajectory'"
        )
    history = _records(where, payload["history"], "history", "role")
    steps = _records(where, payload["trajectory"], "trajectory")
    if steps and all(isinstance(step.get("messages"), list) for step in steps):
        checkpoints = [
            list(_records(where, step["messages"], f"trajectory[{i}].messages"))
            for i, step in enumerate(steps)
        ]
        if checkpoints[-1] != history:
            checkpoints.append(list(history))
    else:
        checkpoints = _cut(history, _agent_role)
    return [Conversation("", checkpoints, record=payload, path=("history",))]


def _parse_minisweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "minisweagent", "a .traj.json JSON object")
    if not isinstance(payload, dict) or "messages" not in payload:
        raise InvalidInputError(
            f"{where}: {_shape(payload)}, expected a mini-swe-agent object with 'messages'"
        )
    msgs = _records(where, payload["messages"], "messages", "role")
    return [Conversation("", _cut(msgs, _agent_role), record=payload, path=("messages",))]


def _parse_openhands(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = ("a list of OpenHands events (V1 with 'kind', or V0 with 'action'/'observation'), or episodes "
            "{'instance_id', 'history': [...]} (JSON Lines or list)")
    if kind == "jsonl":
        episodes = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict) and isinstance(payload.get("history"), list):
        events = _records(where, payload["history"], "history")
        return [_openhands_conversation(events, payload, ("history",), "")]
    elif isinstance(payload, list) and payload and _is_openhands_episode(payload[0]):
        episodes = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list) and (all(_is_openhands_event(e) for e in payload) or _is_openhands_v0_events(payload)):
        return [_openhands_conversation(payload, payload, (), "")]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected {what}")
    names, conversations = [], []
    for i, (label, episode) in enumerate(episodes):
        if not isinstance(episode, dict) or "history" not in episode:
            raise InvalidInputError(f"{where}: {label} is not an OpenHands episode with 'history'")
        events = _records(where, episode["history"], f"{label}: history")
        instance_id = episode.get("instance_id")
        names.append(str(instance_id) if instance_id not in (None, "") else _padded(i, len(episodes)))
        conversations.append(_openhands_conversation(events, episode, ("history",), label))
    for conversation, name in zip(conversations, _unique(names)):
        conversation.name = name
    return conversations


def _openhands_conversation(events: list, record: Any, path: tuple, label: str) -> Conversation:
    """V1 events are checkpointed as they are; a V0 stream is normalised to chat messages
    (:func:`openhands_v0_messages`) and its events are kept whole in the record."""
    if _is_openhands_v0_events(events):
        messages = openhands_v0_messages(events)
        return Conversation("", _cut(messages, _chat_role), record=record, path=path, label=label, derived=True)
    return Conversation("", _cut(events, _openhands_role), record=record, path=path, label=label)


_V0_SKIPPED = ("recall",)  # microagent-knowledge lookups: context the runtime adds, not conversation


def openhands_v0_messages(events: list) -> list[dict]:
    """The chat messages an agent resuming an OpenHands V0 event stream needs, in event order.

    * the ``system`` action -> ``{"role": "system", "content"}``;
    * a user ``message`` action -> ``{"role": "user", "content"}`` (``args.content``);
    * agent actions that came from one model response (``tool_call_metadata.model_response``)
      -> that response's assistant message (``choices[0].message``, exactly as stored), once per
      response however many actions it produced; an action with tool-call metadata but no stored
      response -> an assistant message with that one tool call (``args`` less ``thought`` as its
      JSON arguments); an agent action or message without any -> ``{"role": "assistant",
      "content"}`` (its ``args.content``, ``args.thought`` or ``message``);
    * an observation answering a tool call (its own ``tool_call_metadata``, or that of the action
      its ``cause`` names) -> ``{"role": "tool", "tool_call_id", "name", "content"}``; one without
      (agents without function calling) ->
      ``{"role": "user", "content"}``, as OpenHands sent it to the model;
    * noise (agent state changes, ``null`` observations and actions) and ``recall`` events -> nothing.

    Args:
        events: the V0 event objects (``{"id", "source", "action" | "observation", ...}``).
    Returns:
        New message dicts (the events are not changed; a stored assistant message is shared).
    """
    out: list[dict] = []
    seen: set = set()
    metas: dict = {}  # action event id -> its tool-call metadata (for observations naming it as their cause)
    for event in events:
        what, name = _event_name(event)
        if what in (None, "noise", "other") or name in _V0_SKIPPED:
            continue
        meta = event.get("tool_call_metadata") if isinstance(event.get("tool_call_metadata"), dict) else None
        if meta is None and not isinstance(event.get("action"), str):
            cause = event.get("cause")
            meta = metas.get(cause) if isinstance(cause, (int, str)) and not isinstance(cause, bool) else None
        elif meta is not None and isinstance(event.get("id"), (int, str)):
            metas[event["id"]] = meta
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if isinstance(event.get("action"), str):
            source = event.get("source")
            if name == "system":
                out.append({"role": "system", "content": args.get("content", event.get("message", ""))})
            elif source == "user":
                if name == "message":
                    out.append({"role": "user", "content": args.get("content", event.get("message", ""))})
            elif meta is not None and isinstance(meta.get("model_response"), dict):
                key = _response_key(event)
                if key in seen:
                    continue
                seen.add(key)
                choices = meta["model_response"].get("choices")
                message = choices[0].get("message") if isinstance(choices, list) and choices and \
                    isinstance(choices[0], dict) else None
                out.append(message if isinstance(message, dict) else
                           {"role": "assistant", "content": args.get("thought") or event.get("message", "")})
            elif meta is not None:
                call_args = {k: v for k, v in args.items() if k != "thought"}
                out.append({"role": "assistant", "content": args.get("thought") or "",
                            "tool_calls": [{"id": meta.get("tool_call_id"), "type": "function",
                                            "function": {"name": meta.get("function_name"),
                                                         "arguments": json.dumps(call_args, ensure_ascii=False)}}]})
            else:
                content = args.get("content") if name == "message" else None
                out.append({"role": "assistant",
                            "content": content if content is not None else args.get("thought") or event.get("message", "")})
        elif meta is not None:
            out.append({"role": "tool", "tool_call_id": meta.get("tool_call_id"), "name": meta.get("function_name"),
                        "content": event.get("content", "")})
        else:
            out.append({"role": "user", "content": event.get("content", "")})
    return out


def _parse_claudecode(where: str, kind: str, payload: Any) -> list[Conversation]:
    if kind == "jsonl":
        lines = payload
    elif _is_claudecode_record(payload):
        lines = [(1, payload)]
    else:
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected Claude Code session JSON Lines")
    records, omitted = [], []
    for i, (number, record) in enumerate(lines):
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise InvalidInputError(f"{where}: line {number}: not a Claude Code record with a 'type'")
        if record["type"] not in _CLAUDECODE_SKIPPED:
            records.append(record)
        else:
            omitted.append((i, record))
    whole = [record for _, record in lines]
    return [Conversation("", _cut(records, _claudecode_role), record=whole,
                         path=(), omitted=omitted, jsonl=kind == "jsonl")]


def _is_tau2_results(value: Any) -> bool:
    """A tau2-bench results object: ``{"timestamp", "info", "tasks": [...], "simulations": [...]}``."""
    return (isinstance(value, dict) and isinstance(value.get("simulations"), list)
            and ("tasks" in value or "info" in value))


def _parse_taubench(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "taubench", "a tau-bench results list of {'task_id', 'trial', 'traj': [...]} or a "
                 "tau2-bench results object {'info', 'tasks', 'simulations': [...]}")
    if _is_tau2_results(payload):
        return _parse_tau2(where, payload)
    if isinstance(payload, dict):
        raise InvalidInputError(f"{where}: {_shape(payload)}, expected a tau-bench results list of "
                                "{'task_id', 'trial', 'traj': [...]} or a tau2-bench results object "
                                "{'info', 'tasks', 'simulations': [...]}")
    items = _records(where, payload, "tau-bench results", "traj")
    names, conversations = [], []
    for i, item in enumerate(items):
        traj = _records(where, item["traj"], f"item {i}: traj", "role")
        trial = item.get("trial")
        names.append(f"task{item.get('task_id', i)}" + (f"-trial{trial}" if trial is not None else ""))
        conversations.append(Conversation("", _cut(traj, _chat_role), record=item, path=("traj",),
                                          label=f"item {i}"))
    for conversation, name in zip(conversations, _unique(names)):
        conversation.name = name
    return conversations


def _parse_tau2(where: str, payload: dict) -> list[Conversation]:
    """tau2-bench: one conversation per simulation, its record the whole file narrowed to it (the
    file's ``timestamp``, ``info`` and ``tasks`` kept with every conversation)."""
    sims = _records(where, payload["simulations"], "simulations", "messages")
    outside = [k for k in payload if k != "simulations"]
    names, conversations = [], []
    for i, sim in enumerate(sims):
        msgs = _records(where, sim["messages"], f"simulations[{i}].messages", "role")
        trial = sim.get("trial")
        task = sim.get("task_id", i)
        names.append(f"task{task}" + (f"-trial{trial}" if trial is not None else ""))
        record, at = _narrow(payload, ("simulations",), i)
        conversations.append(Conversation("", _cut(msgs, _chat_role), record=record, path=at + ("messages",),
                                          label=f"simulations[{i}]", shown=f"simulations[{i}].messages",
                                          file_fields=outside, record_at=at))
    for conversation, name in zip(conversations, _unique(names)):
        conversation.name = name
    return conversations


def _parse_sharegpt(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sharegpt", "a JSON list of {'conversations': [{'from', 'value'}, ...]}")
    items = _records(where, payload, "ShareGPT items", "conversations")
    conversations = []
    for i, item in enumerate(items):
        records = _records(where, item["conversations"], f"item {i}: conversations", "from")
        conversations.append(Conversation(_padded(i, len(items)), _cut(records, _sharegpt_role), record=item,
                                          path=("conversations",), label=f"item {i}"))
    return conversations


_PARSERS: dict[str, Callable[[str, str, Any], list[Conversation]]] = {
    "openai": _parse_openai,
    "sweagent": _parse_sweagent,
    "minisweagent": _parse_minisweagent,
    "openhands": _parse_openhands,
    "claudecode": _parse_claudecode,
    "taubench": _parse_taubench,
    "sharegpt": _parse_sharegpt,
    "messages": _parse_by_shape("messages"),
    "events": _parse_by_shape("events"),
}
