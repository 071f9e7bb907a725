"""A trajectory file replayed into a repository: its run ids, the resume rule, one save per turn.

Layer 5 (uses :class:`~snapstore.manager.facade.CheckpointManager` and the readers of this
package). ``snapstore import FILE`` and the partitioned import (:mod:`snapstore.importers.plan`)
both call it: :func:`load_for_import` reads and checks the whole file before anything is saved,
:func:`replay` saves each conversation's checkpoints into its run, skipping those the run already
holds (:func:`resume_index`), so importing the same file again after an interruption saves
only what is missing, never a checkpoint twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import ConflictError, InvalidInputError
from ..format.codec import encode_json
from ..format.ids import check_run_id
from . import default_run_id, load_trajectory

__all__ = ["IMPORT_STATE_KEY", "LoadedFile", "ImportResult", "load_for_import", "run_ids", "resume_index",
           "import_state", "other_fields", "message_sizes", "strict_equal", "replay"]

IMPORT_STATE_KEY = "import"
"""The session-state key under which an import keeps a conversation's record (``import --help``)."""


@dataclass
class LoadedFile:
    """One trajectory file read and checked, ready to replay.

    Attributes:
        file: the file's path, as given.
        format: the format it was read as (a member of :data:`snapstore.importers.FORMATS`).
        prefix: the run id (or the prefix of its conversations' run ids).
        conversations: the :class:`~snapstore.importers.Conversation` list, in file order.
        runs: the run id of each conversation (``prefix`` or ``prefix/NAME``).
        states: the session state of each conversation's last checkpoint (:func:`import_state`), or None.
    """

    file: str
    format: str
    prefix: str
    conversations: list
    runs: list
    states: list


@dataclass
class ImportResult:
    """What an import saved; updated as it goes, so a caller interrupted mid-way can say how far it got.

    Attributes:
        per_run: one dict per conversation: ``run``, ``checkpoints`` (in the file), ``saved``,
            ``skipped`` (already in the run).
        saved: checkpoints saved by this import; skipped: checkpoints already present.
        done: checkpoints of the file now stored (saved or skipped so far).
        logical: exact-JSON bytes of the message lists saved (what storing them whole costs).
    """

    per_run: list = field(default_factory=list)
    saved: int = 0
    skipped: int = 0
    done: int = 0
    logical: int = 0


def run_ids(prefix: str, conversations: list) -> list:
    """The run id of each conversation: ``prefix`` for an unnamed one, ``prefix/NAME`` otherwise.

    Raises:
        InvalidInputError: ``prefix`` is empty. InvalidRunIdError: a run id is not valid.
    """
    if prefix == "":
        raise InvalidInputError("run id must not be empty")
    runs = [f"{prefix}/{conv.name}" if conv.name else prefix for conv in conversations]
    for run in runs:  # every run id is checked before the first save
        check_run_id(run)
    return runs


def load_for_import(file: str, run_prefix: str | None = None, format: str | None = None,
                    messages_path: str | None = None) -> LoadedFile:
    """Read and check a whole trajectory file and name its runs; nothing is saved.

    Args:
        file: path of a JSON / JSON Lines trajectory file.
        run_prefix: the run id (or prefix of the conversations' run ids); default
            :func:`~snapstore.importers.default_run_id` of the file.
        format / messages_path: as for :func:`~snapstore.importers.load_trajectory`.
    Returns:
        A :class:`LoadedFile`.
    Raises:
        InvalidInputError: the file is unreadable or malformed (named by record and path), or a run
            id is empty or invalid.
    """
    fmt_name, conversations = load_trajectory(file, format=format, messages_path=messages_path)
    prefix = run_prefix if run_prefix is not None else default_run_id(file)
    runs = run_ids(prefix, conversations)
    states = [import_state(file, fmt_name, conv) for conv in conversations]
    return LoadedFile(file, fmt_name, prefix, conversations, runs, states)


def message_sizes(checkpoint: list, cache: dict) -> int:
    """Total exact-JSON bytes of a message list (what the manifest records as its size); ``cache``
    maps ``id(message)`` -> bytes across the checkpoints of one conversation (they share messages)."""
    total = 0
    for m in checkpoint:
        n = cache.get(id(m))
        if n is None:
            n = cache[id(m)] = len(encode_json(m)[0])
        total += n
    return total


def _json_bytes(value) -> bytes:
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escaped, the same value
        return json.dumps(value, ensure_ascii=True).encode("ascii")


def strict_equal(a: list, b: list) -> bool:
    """Equal as JSON documents, including key order and the int/float distinction."""
    if a != b:
        return False
    return _json_bytes(a) == _json_bytes(b)


def resume_index(mgr, run: str, checkpoints: list, where: str) -> int:
    """Index of the first checkpoint of ``checkpoints`` not yet in ``run`` (0 for a new run): one
    past the newest checkpoint whose messages are exactly the run's latest.

    Args:
        mgr: the :class:`~snapstore.manager.facade.CheckpointManager`.
        run: the run id.
        checkpoints: the conversation's message lists, in order.
        where: the file (and conversation) for the error message.
    Raises:
        ConflictError: the run has content that matches none of the checkpoints.
    """
    latest = mgr.latest(run)
    if latest is None:
        return 0
    for k in range(len(checkpoints) - 1, -1, -1):
        if len(checkpoints[k]) == latest.message_count and strict_equal(checkpoints[k], latest.messages):
            return k + 1
    raise ConflictError(
        f"run {run!r} already exists and its latest checkpoint {latest.id} ({latest.message_count} messages) "
        f"matches none of the {len(checkpoints)} checkpoints of {where}; refusing to add to it "
        "(import under another id with --run, or delete the run first)")


def import_state(file: str, fmt_name: str, conv) -> dict | None:
    """The session state of a conversation's last checkpoint: ``{"import": {...}}`` holding where it
    came from (the file's base name, format, conversation, where in the file) and
    :meth:`snapstore.importers.Conversation.extras` (the record's other fields); None without extras."""
    extras = conv.extras()
    if extras is None:
        return None
    return {IMPORT_STATE_KEY: {"file": os.path.basename(file), "format": fmt_name, "conversation": conv.name,
                               "where": conv.where, **extras}}


def other_fields(conv) -> list:
    """The names of what the conversation's record holds besides the messages: the file's own
    fields around the records (tau2-bench ``info``, ``tasks``...), the record's fields, skipped
    records, the raw events that the messages were made from."""
    rec = conv.record
    out = list(conv.file_fields)
    for part in conv.record_at:  # the conversation's own record inside the (narrowed) file
        rec = rec[part]
    inner = conv.path[len(conv.record_at):]
    if isinstance(rec, dict):
        out.extend(k for k in rec if not (len(inner) == 1 and k == inner[0]) or conv.derived)
    if conv.derived:
        events = rec
        for part in inner:
            events = events[part]
        out.append(f"{len(events)} raw events")
    if conv.omitted:
        out.append(f"{len(conv.omitted)} non-message records")
    return out


def replay(mgr, loaded: LoadedFile, result: ImportResult | None = None, progress=None) -> ImportResult:
    """Save every conversation of ``loaded`` into its run, one checkpoint per turn (``step`` = the
    turn's index; the last checkpoint carries the import record as its session state), skipping
    the checkpoints the run already holds.

    Args:
        mgr: the :class:`~snapstore.manager.facade.CheckpointManager` to save with.
        loaded: the :class:`LoadedFile`.
        result: an :class:`ImportResult` to update as saves succeed (default: a new one).
        progress: optional ``progress(conversation index, conversations, done, total checkpoints)``,
            called before each save.
    Returns:
        ``result``.
    Raises:
        ConflictError: a run holds checkpoints that match none of its conversation's.
        SnapstoreError: a save failed (the checkpoints saved before it stay; a re-run resumes).
    """
    res = result if result is not None else ImportResult()
    convs = loaded.conversations
    total = sum(len(c.checkpoints) for c in convs)
    for ci, (run, conv, state) in enumerate(zip(loaded.runs, convs, loaded.states)):
        cps = conv.checkpoints
        if not cps:
            res.per_run.append({"run": run, "checkpoints": 0, "saved": 0, "skipped": 0})
            continue
        start = resume_index(mgr, run, cps, loaded.file + (f" conversation {conv.name!r}" if conv.name else ""))
        res.skipped += start
        res.done += start
        sizes: dict = {}
        for i in range(start, len(cps)):
            if progress:
                progress(ci, len(convs), res.done, total)
            last = i == len(cps) - 1
            mgr.save(run, cps[i], step=i, session_state=state if last else None)
            res.logical += message_sizes(cps[i], sizes)
            res.saved += 1
            res.done += 1
        res.per_run.append({"run": run, "checkpoints": len(cps), "saved": len(cps) - start, "skipped": start})
    return res
