"""The readers of the known formats (OpenAI chat, SWE-agent, mini-swe-agent, OpenHands, Claude
Code, tau-bench, ShareGPT) and of the two shape-based ones: :data:`PARSERS` maps each name of
``FORMATS`` to a function ``(where, kind, payload) -> list[Conversation]`` (``where`` the file's
path for messages, ``kind`` and ``payload`` as :func:`~.read.read_payload` returns them).
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..errors import InvalidInputError
from .conversation import Conversation, index_name, narrow, unique_names
from .detect import is_claudecode_record, is_openhands_episode, is_openhands_event, is_openhands_v0_events, is_tau2_results
from .read import describe
from .shapes import parse_by_shape
from .turns import agent_role, chat_role, claudecode_role, cut_turns, event_name, openhands_role, response_key, sharegpt_role

__all__ = ["PARSERS", "openhands_v0_messages", "openhands_v1_messages"]


# Claude Code record types that carry no conversation data.
_CLAUDECODE_SKIPPED = ("file-history-snapshot", "system")

def _expect_json(where: str, kind: str, fmt: str, what: str) -> None:
    if kind != "json":
        raise InvalidInputError(f"{where}: JSON Lines file given, but format {fmt!r} expects {what}")


def _records(where: str, value: Any, label: str, required: str | None = None) -> list:
    """Check that ``value`` is a list of JSON objects (each holding key ``required``) and return it."""
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {label} is {describe(value)}, expected a list of objects")
    for i, record in enumerate(value):
        if not isinstance(record, dict):
            raise InvalidInputError(
                f"{where}: {label}[{i}] is {type(record).__name__}, expected a JSON object"
            )
        if required is not None and required not in record:
            raise InvalidInputError(f"{where}: {label}[{i}] has no {required!r} key")
    return value


def _parse_openai(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = "a list of chat messages, {'messages': [...]}, or a list / JSON Lines of those objects"
    if kind == "jsonl":
        items = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict):
        if "messages" not in payload:
            raise InvalidInputError(f"{where}: {describe(payload)} has no 'messages', expected {what}")
        msgs = _records(where, payload["messages"], "messages", "role")
        return [Conversation("", cut_turns(msgs, chat_role), record=payload, path=("messages",))]
    elif isinstance(payload, list) and payload and isinstance(payload[0], dict) and "role" not in payload[0]:
        items = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list):
        msgs = _records(where, payload, "messages", "role")
        return [Conversation("", cut_turns(msgs, chat_role), record=payload)]
    else:
        raise InvalidInputError(f"{where}: {describe(payload)}, expected {what}")
    conversations = []
    for i, (label, item) in enumerate(items):
        if not isinstance(item, dict) or "messages" not in item:
            raise InvalidInputError(f"{where}: {label} is not a {{'messages': [...]}} object")
        msgs = _records(where, item["messages"], f"{label}: messages", "role")
        conversations.append(Conversation(index_name(i, len(items)), cut_turns(msgs, chat_role), record=item,
                                          path=("messages",), label=label))
    return conversations


def _parse_sweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sweagent", "a .traj JSON object")
    if not isinstance(payload, dict) or "history" not in payload or "trajectory" not in payload:
        raise InvalidInputError(
            f"{where}: {describe(payload)}, expected a SWE-agent .traj object with 'history' and 'trajectory'"
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
        checkpoints = cut_turns(history, agent_role)
    return [Conversation("", checkpoints, record=payload, path=("history",))]


def _parse_minisweagent(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "minisweagent", "a .traj.json JSON object")
    if not isinstance(payload, dict) or "messages" not in payload:
        raise InvalidInputError(
            f"{where}: {describe(payload)}, expected a mini-swe-agent object with 'messages'"
        )
    msgs = _records(where, payload["messages"], "messages", "role")
    return [Conversation("", cut_turns(msgs, agent_role), record=payload, path=("messages",))]


def _parse_openhands(where: str, kind: str, payload: Any) -> list[Conversation]:
    what = ("a list of OpenHands events (V1 with 'kind', or V0 with 'action'/'observation'), or episodes "
            "{'instance_id', 'history': [...]} (JSON Lines or list)")
    if kind == "jsonl":
        episodes = [(f"line {n}", v) for n, v in payload]
    elif isinstance(payload, dict) and isinstance(payload.get("history"), list):
        events = _records(where, payload["history"], "history")
        return [_openhands_conversation(events, payload, ("history",), "")]
    elif isinstance(payload, list) and payload and is_openhands_episode(payload[0]):
        episodes = [(f"item {i}", v) for i, v in enumerate(payload)]
    elif isinstance(payload, list) and (all(is_openhands_event(e) for e in payload) or is_openhands_v0_events(payload)):
        return [_openhands_conversation(payload, payload, (), "")]
    else:
        raise InvalidInputError(f"{where}: {describe(payload)}, expected {what}")
    names, conversations = [], []
    for i, (label, episode) in enumerate(episodes):
        if not isinstance(episode, dict) or "history" not in episode:
            raise InvalidInputError(f"{where}: {label} is not an OpenHands episode with 'history'")
        events = _records(where, episode["history"], f"{label}: history")
        instance_id = episode.get("instance_id")
        names.append(str(instance_id) if instance_id not in (None, "") else index_name(i, len(episodes)))
        conversations.append(_openhands_conversation(events, episode, ("history",), label))
    for conversation, name in zip(conversations, unique_names(names)):
        conversation.name = name
    return conversations


def _openhands_conversation(events: list, record: Any, path: tuple, label: str) -> Conversation:
    """Both generations are normalised to chat messages (:func:`openhands_v0_messages`,
    :func:`openhands_v1_messages`, an episode's ``instruction`` first) and their events are kept
    whole in the record (``--format events`` stores raw events instead)."""
    if is_openhands_v0_events(events):
        messages = openhands_v0_messages(events)
    else:
        instruction = record.get("instruction") if isinstance(record, dict) else None
        messages = openhands_v1_messages(events, instruction)
    return Conversation("", cut_turns(messages, chat_role), record=record, path=path, label=label, derived=True)


def _v1_text(blocks: Any) -> Any:
    """A V1 content value as a chat message's content: a list of text blocks joined into one
    string; any other list as blocks of ``{"type", ...}`` less OpenHands' own flags; else as is."""
    if not isinstance(blocks, list):
        return blocks
    if all(isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) for b in blocks):
        return "\n".join(b["text"] for b in blocks)
    return [{k: v for k, v in b.items() if k != "cache_prompt"} if isinstance(b, dict) else b for b in blocks]


def _v1_observation(obs: Any) -> Any:
    """What a V1 observation told the model: its ``output`` (with the command's ``metadata.suffix``
    as OpenHands appends it), else its ``content`` blocks, else its ``message``, else the
    observation as JSON."""
    if not isinstance(obs, dict):
        return obs if isinstance(obs, str) else json.dumps(obs, ensure_ascii=False)
    if isinstance(obs.get("output"), str):
        meta = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else {}
        suffix = meta.get("suffix") if isinstance(meta.get("suffix"), str) else ""
        return obs["output"] + suffix
    if "content" in obs and obs["content"] is not None:
        return _v1_text(obs["content"])
    if isinstance(obs.get("message"), str):
        return obs["message"]
    return json.dumps({k: v for k, v in obs.items() if k != "kind"}, ensure_ascii=False)


def openhands_v1_messages(events: list, instruction: Any = None) -> list[dict]:
    """The chat messages an agent resuming an OpenHands V1 (SDK) event stream needs, in event order.

    * an episode's ``instruction`` (a non-empty string) -> the first ``{"role": "user", "content"}``,
      unless the stream starts with a user message of that text;
    * ``SystemPromptEvent`` -> ``{"role": "system", "content"}`` (its ``system_prompt`` text);
    * ``MessageEvent`` -> its ``llm_message``'s ``role`` and ``content`` (text blocks joined), and
      its ``tool_calls`` / ``tool_call_id`` / ``name`` when set;
    * ``ActionEvent`` s of one model response (``llm_response_id``) -> one assistant message: the
      ``thought`` text as content, every action's ``tool_call`` as an OpenAI tool call
      (``{"id", "type": "function", "function": {"name", "arguments"}}``), ``reasoning_content``
      when set;
    * ``ObservationEvent`` / ``AgentErrorEvent`` / ``UserRejectObservation`` answering a tool call
      -> ``{"role": "tool", "tool_call_id", "name", "content"}`` (:func:`_v1_observation`, or the
      error / rejection text);
    * any other kind (state updates, pauses, condensations) -> nothing.

    Args:
        events: the V1 event objects (``{"kind", "source", ...}``).
        instruction: the episode's top-level ``instruction`` (None for a bare event list).
    Returns:
        New message dicts (the events are not changed).
    """
    out: list[dict] = []
    if isinstance(instruction, str) and instruction:
        first = next((e for e in events if isinstance(e, dict) and e.get("kind") == "MessageEvent"), None)
        said = first.get("llm_message") if isinstance(first, dict) else None
        if not (isinstance(said, dict) and said.get("role") == "user" and _v1_text(said.get("content")) == instruction):
            out.append({"role": "user", "content": instruction})
    responses: dict = {}  # llm_response_id -> its assistant message (actions of one response share it)
    for event in events:
        kind = event.get("kind") if isinstance(event, dict) else None
        if kind == "SystemPromptEvent":
            prompt = event.get("system_prompt")
            out.append({"role": "system", "content": _v1_text(prompt.get("text") if isinstance(prompt, dict) else prompt)})
        elif kind == "MessageEvent":
            said = event.get("llm_message") if isinstance(event.get("llm_message"), dict) else {}
            msg = {"role": said.get("role") or ("user" if event.get("source") == "user" else "assistant"),
                   "content": _v1_text(said.get("content"))}
            for k in ("tool_calls", "tool_call_id", "name"):
                if said.get(k) not in (None, [], ""):
                    msg[k] = said[k]
            out.append(msg)
        elif kind == "ActionEvent":
            rid = event.get("llm_response_id") or event.get("id")
            msg = responses.get(rid) if rid is not None else None
            if msg is None:
                thought = _v1_text(event.get("thought") or [])
                msg = {"role": "assistant", "content": thought if thought not in ([], None) else ""}
                if event.get("reasoning_content"):
                    msg["reasoning_content"] = event["reasoning_content"]
                out.append(msg)
                if rid is not None:
                    responses[rid] = msg
            call = event.get("tool_call") if isinstance(event.get("tool_call"), dict) else None
            if call is not None or event.get("tool_call_id") is not None:
                call = call or {}
                msg.setdefault("tool_calls", []).append({
                    "id": call.get("id", event.get("tool_call_id")), "type": "function",
                    "function": {"name": call.get("name", event.get("tool_name")),
                                 "arguments": call.get("arguments", "")}})
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            if kind == "ObservationEvent":
                content = _v1_observation(event.get("observation"))
            else:
                content = event.get("error") or event.get("rejection_reason") or ""
            out.append({"role": "tool", "tool_call_id": event.get("tool_call_id"), "name": event.get("tool_name"),
                        "content": content})
    return out


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
        what, name = event_name(event)
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
                key = response_key(event)
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
    elif is_claudecode_record(payload):
        lines = [(1, payload)]
    else:
        raise InvalidInputError(f"{where}: {describe(payload)}, expected Claude Code session JSON Lines")
    records, omitted = [], []
    for i, (number, record) in enumerate(lines):
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise InvalidInputError(f"{where}: line {number}: not a Claude Code record with a 'type'")
        if record["type"] not in _CLAUDECODE_SKIPPED:
            records.append(record)
        else:
            omitted.append((i, record))
    whole = [record for _, record in lines]
    return [Conversation("", cut_turns(records, claudecode_role), record=whole,
                         path=(), omitted=omitted, jsonl=kind == "jsonl")]


def _parse_taubench(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "taubench", "a tau-bench results list of {'task_id', 'trial', 'traj': [...]} or a "
                 "tau2-bench results object {'info', 'tasks', 'simulations': [...]}")
    if is_tau2_results(payload):
        return _parse_tau2(where, payload)
    if isinstance(payload, dict):
        raise InvalidInputError(f"{where}: {describe(payload)}, expected a tau-bench results list of "
                                "{'task_id', 'trial', 'traj': [...]} or a tau2-bench results object "
                                "{'info', 'tasks', 'simulations': [...]}")
    items = _records(where, payload, "tau-bench results", "traj")
    names, conversations = [], []
    for i, item in enumerate(items):
        traj = _records(where, item["traj"], f"item {i}: traj", "role")
        trial = item.get("trial")
        names.append(f"task{item.get('task_id', i)}" + (f"-trial{trial}" if trial is not None else ""))
        conversations.append(Conversation("", cut_turns(traj, chat_role), record=item, path=("traj",),
                                          label=f"item {i}"))
    for conversation, name in zip(conversations, unique_names(names)):
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
        record, at = narrow(payload, ("simulations",), i)
        conversations.append(Conversation("", cut_turns(msgs, chat_role), record=record, path=at + ("messages",),
                                          label=f"simulations[{i}]", shown=f"simulations[{i}].messages",
                                          file_fields=outside, record_at=at))
    for conversation, name in zip(conversations, unique_names(names)):
        conversation.name = name
    return conversations


def _parse_sharegpt(where: str, kind: str, payload: Any) -> list[Conversation]:
    _expect_json(where, kind, "sharegpt", "a JSON list of {'conversations': [{'from', 'value'}, ...]}")
    items = _records(where, payload, "ShareGPT items", "conversations")
    conversations = []
    for i, item in enumerate(items):
        records = _records(where, item["conversations"], f"item {i}: conversations", "from")
        conversations.append(Conversation(index_name(i, len(items)), cut_turns(records, sharegpt_role), record=item,
                                          path=("conversations",), label=f"item {i}"))
    return conversations


PARSERS: dict[str, Callable[[str, str, Any], list[Conversation]]] = {
    "openai": _parse_openai,
    "sweagent": _parse_sweagent,
    "minisweagent": _parse_minisweagent,
    "openhands": _parse_openhands,
    "claudecode": _parse_claudecode,
    "taubench": _parse_taubench,
    "sharegpt": _parse_sharegpt,
    "messages": parse_by_shape("messages"),
    "events": parse_by_shape("events"),
}
