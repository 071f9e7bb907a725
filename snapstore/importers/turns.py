"""Cutting a record list into turns: the role each record plays (starts a turn, answers it, starts
the next one) for each kind of record, and :func:`cut_turns`, which makes the growing checkpoints.

A role function takes one record and returns ``(role, response_key)``: ``role`` one of
:data:`ASSISTANT`, :data:`RESULT`, :data:`USER`; ``response_key`` the id of the model response an
assistant record belongs to (records of one response form one turn), or None.
"""

from __future__ import annotations

import json
from typing import Any, Callable

__all__ = ["ASSISTANT", "LC_TYPES", "RESULT", "USER", "agent_role", "chat_role", "claudecode_role", "cut_turns",
           "event_name", "event_role", "openhands_role", "response_key", "sharegpt_role", "typed_role"]

# Turn roles of a record, used to find where checkpoints end.
ASSISTANT = "assistant"  # starts a turn (unless it continues the same API response)
RESULT = "result"  # answers the current turn (tool results, observations, neutral records)
USER = "user"  # after a turn: starts the next turn


_ROLE_ASSISTANT = ("assistant", "model", "ai", "gpt", "bot", "agent")
_ROLE_USER = ("user", "human", "system", "developer")
_RESULT_BLOCKS = ("tool_result", "function_result", "tool_response", "function_response", "functionResponse",
                  "function_call_output")

# Event names that only record a state change (no conversation data); they never start a turn.
_NOISE_EVENTS = ("change_agent_state", "agent_state_changed", "null", "none", "AgentStateChangedObservation",
                 "NullObservation", "NullAction", "ChangeAgentStateAction")


# LangChain-style messages: {"type": "human" | "ai" | "tool" | ..., "content" | "data": {...}}
LC_TYPES = ("human", "ai", "tool", "system", "function", "chat", "HumanMessage", "AIMessage", "ToolMessage",
             "SystemMessage", "FunctionMessage", "ChatMessage", "AIMessageChunk")
_LC_ROLE = {"human": "user", "HumanMessage": "user", "ai": "assistant", "AIMessage": "assistant",
            "AIMessageChunk": "assistant", "system": "system", "SystemMessage": "system"}


def typed_role(message: dict) -> tuple[str, Any]:
    """LangChain-style messages: ``ai`` starts a turn, ``human``/``system`` start the next one, the
    rest (``tool``, ``function``...) answer."""
    role = _LC_ROLE.get(message.get("type"))
    if role == "assistant":
        return ASSISTANT, None
    if role is not None:
        return USER, None
    return RESULT, None


def event_name(event: dict) -> tuple[str | None, str | None]:
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


def response_key(event: dict) -> Any:
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


def event_role(event: dict) -> tuple[str, Any]:
    """An event stream record: an agent action or message starts a turn (actions of one model
    response continue it), a user action or message (or the system prompt) starts the next turn
    after one, observations answer; noise and unknown events never start a turn."""
    what, name = event_name(event)
    if what in ("action", "message"):
        source = event.get("source")
        if source == "user" or name == "system" or (name and name.startswith("SystemPrompt")):
            return USER, None
        return ASSISTANT, response_key(event)
    return RESULT, None

def cut_turns(records: list, role_of: Callable[[Any], tuple[str, Any]]) -> list[list]:
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
        if role == ASSISTANT:
            if in_turn and (rkey is None or rkey != key):
                ends.append(i)
            in_turn, key = True, rkey
        elif role == USER and in_turn:
            ends.append(i)
            in_turn, key = False, None
    if in_turn or not ends:
        if records:
            ends.append(len(records))
    else:
        ends[-1] = len(records)
    return [records[:end] for end in ends]


def chat_role(message: dict) -> tuple[str, Any]:
    """Chat messages: ``assistant`` (and ``model``, ``ai``, ``gpt``...) starts a turn; tool/function
    messages and unknown roles answer it; ``user``/``system``/``developer``/``human`` start the next
    turn, except a user message whose content (or Gemini ``parts``) is only tool-result blocks
    (Anthropic ``tool_result``, ``function_response``...), which answers."""
    role = message.get("role")
    if role in _ROLE_ASSISTANT:
        return ASSISTANT, None
    if role in _ROLE_USER:
        blocks = message.get("content")
        if not isinstance(blocks, list) or not blocks:
            blocks = message.get("parts")
        if isinstance(blocks, list) and blocks and all(_is_result_block(b) for b in blocks):
            return RESULT, None
        return USER, None
    return RESULT, None


def _is_result_block(block: Any) -> bool:
    if not isinstance(block, dict):
        return False
    return block.get("type") in _RESULT_BLOCKS or any(k in block for k in _RESULT_BLOCKS)


def agent_role(message: dict) -> tuple[str, Any]:
    """SWE-agent / mini-swe-agent: everything that is not the assistant answers the assistant."""
    return (ASSISTANT if message.get("role") == "assistant" else RESULT), None


_SHAREGPT_ASSISTANT = ("gpt", "function_call", "assistant", "model")
_SHAREGPT_RESULT = ("observation", "tool", "function", "function_response")


def sharegpt_role(record: dict) -> tuple[str, Any]:
    """ShareGPT ``{"from", "value"}`` records: ``gpt``/``function_call`` start a turn,
    ``observation``/``tool``... answer, ``human``/``system`` and the rest start the next one."""
    origin = record.get("from")
    if origin in _SHAREGPT_ASSISTANT:
        return ASSISTANT, None
    if origin in _SHAREGPT_RESULT:
        return RESULT, None
    return USER, None


def openhands_role(event: dict) -> tuple[str, Any]:
    """OpenHands V1 events: an ``ActionEvent`` or agent ``MessageEvent`` starts a turn (events of
    one ``llm_response_id`` continue it), a user ``MessageEvent`` or ``SystemPromptEvent`` starts the
    next one, the rest answer; events without ``kind`` by :func:`event_role`."""
    kind = event.get("kind")
    if kind == "ActionEvent":
        return ASSISTANT, event.get("llm_response_id")
    if kind == "MessageEvent":
        if event.get("source") == "agent":
            return ASSISTANT, event.get("llm_response_id")
        return USER, None
    if kind == "SystemPromptEvent":
        return USER, None
    if kind is None:  # the older generation: {"action": ...} / {"observation": ...} events
        return event_role(event)
    return RESULT, None


def claudecode_role(record: dict) -> tuple[str, Any]:
    """Claude Code records: ``assistant`` starts a turn (lines of one ``message.id`` continue it), a
    ``user`` record holding a ``tool_result`` answers, any other ``user`` record starts the next one."""
    rtype = record.get("type")
    message = record.get("message")
    if rtype == "assistant":
        return ASSISTANT, message.get("id") if isinstance(message, dict) else None
    if rtype == "user":
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return RESULT, None
        return USER, None
    return RESULT, None

