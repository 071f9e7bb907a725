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

Layout: :mod:`.read` reads the file, :mod:`.detect` tells its format, :mod:`.formats` holds the
readers of the known formats, :mod:`.shapes` the recognition by shape and :mod:`.paths` the
``messages_path`` reader; :mod:`.turns` cuts record lists into turns and :mod:`.conversation`
holds :class:`Conversation` and the record it keeps.
"""

from __future__ import annotations

import os

from ..errors import InvalidInputError
from ..format.codec import any_int_digits
from .conversation import Conversation, format_path, rebuild_record
from .detect import detect_format
from .formats import PARSERS, openhands_v0_messages
from .paths import parse_at_path, parse_messages_path
from .read import read_payload

__all__ = ["FORMATS", "Conversation", "default_run_id", "format_path", "load_trajectory", "openhands_v0_messages",
           "parse_messages_path", "rebuild_record"]


FORMATS: tuple[str, ...] = tuple(PARSERS)
"""The format names ``load_trajectory(format=...)`` takes, known tools first, then ``messages`` and
``events`` (by shape): ``openai``, ``sweagent``, ``minisweagent``, ``openhands``, ``claudecode``,
``taubench``, ``sharegpt``, ``messages``, ``events``."""


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
    kind, payload = read_payload(where)
    if steps is not None:
        return parse_at_path(where, kind, payload, steps, messages_path, format)
    name = format if format is not None else detect_format(where, kind, payload)
    conversations = PARSERS[name](where, kind, payload)
    return name, conversations

