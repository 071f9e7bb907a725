"""Workflow helpers on :class:`~snapstore.manager.facade.CheckpointManager`: resumable steps and a
checkpointed tool loop (no extra needed).

* :class:`ResumableWorkflow` (Splinter's shape): a workflow that checkpoints after each step and,
  restarted anywhere, asks where to resume: ``start = wf.try_resume()``, then
  ``wf.checkpoint(step, agent_id=..., status=..., state=..., metrics=...)`` after each step.
* :class:`CheckpointedLoop` (Agentium's automatic checkpointing): wraps a plain OpenAI-style
  chat-completions message loop and saves a checkpoint after every **tool roundtrip** (an
  assistant message with ``tool_calls`` plus every ``role: "tool"`` message answering one of its
  call ids), with the cumulative token usage, the session state and the roundtrip number (the
  checkpoint's ``step``). A restarted process calls :meth:`CheckpointedLoop.resume` and continues.

Both record tool outcomes (docs/format.md §25): :meth:`CheckpointedLoop.run` records each tool's
result (and the model's tool-calling message) beside the checkpoint the roundtrip started from
right after it returns, before the next save; :meth:`ResumableWorkflow.call` does so for any
callable. Resumed after a crash, a call whose outcome is recorded is not run again: its recorded
result is used.

Both use the manager's conflict contract: a second process continuing the same run after this
one saved gets :class:`~snapstore.errors.ConflictError` instead of overwriting it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..manager.facade import CheckpointManager
from ..errors import InvalidInputError, InvalidMessageError

__all__ = ["ResumableWorkflow", "CheckpointedLoop", "add_usage"]

_MODEL_CALL = "#model"
"""The outcome id under which :meth:`CheckpointedLoop.run` records the model's tool-calling message."""


def _manager(m) -> CheckpointManager:
    if not isinstance(m, CheckpointManager):
        raise InvalidInputError(f"checkpoint_manager must be a CheckpointManager, got {type(m).__name__}")
    return m


class ResumableWorkflow:
    """A workflow run ``workflow_id`` that checkpoints after each step and resumes where it stopped.

    Args:
        workflow_id: the snapstore run id (any non-empty string).
        checkpoint_manager: a :class:`CheckpointManager` (local directory or S3).

    Usage::

        wf = ResumableWorkflow("nightly-eval", CheckpointManager("s3://bucket/ckpt"))
        start = wf.try_resume()                 # 0 for a new workflow
        state = wf.state or {}
        for step in range(start, 10):
            state = do_step(step, state)
            wf.checkpoint(step, agent_id="planner", status="running", state=state, metrics={"s": 1.5})

    Attributes (after :meth:`try_resume`): ``is_resumed`` (a checkpoint was found), ``last_step``
    (the step of that checkpoint, or None), ``state`` and ``metrics`` (saved with it, or None),
    ``messages`` (its message list; ``[]`` for a new workflow).
    """

    def __init__(self, workflow_id: str, checkpoint_manager: CheckpointManager):
        if not isinstance(workflow_id, str) or not workflow_id:
            raise InvalidInputError(f"workflow_id must be a non-empty string, got {workflow_id!r}")
        self.workflow_id = workflow_id
        self.manager = _manager(checkpoint_manager)
        self.is_resumed = False
        self.last_step = None
        self.state = None
        self.metrics = None
        self.messages: list = []
        self.last_checkpoint_id: str | None = None
        self._recorded: dict | None = None  # outcomes beside last_checkpoint_id, read on first call()

    def try_resume(self) -> int:
        """Read the workflow's latest checkpoint; return the step to resume from.

        Returns:
            The step after the last checkpointed one (``last_step + 1``; a step saved as None
            counts as its log position), or 0 when the workflow has no checkpoint. Sets
            ``is_resumed``, ``last_step``, ``state``, ``metrics`` and ``messages``.
        Raises:
            StoreError: the store failed (nothing changed).
        """
        rp = self.manager.resume_point(self.workflow_id)
        if rp is None:
            self.is_resumed, self.last_step, self.state, self.metrics, self.messages = False, None, None, None, []
            self.last_checkpoint_id = None
            self._recorded = None
            return 0
        step, cp = rp
        self._recorded = None
        self.is_resumed = True
        self.last_step = step
        self.state, self.metrics, self.messages = cp.session_state, cp.metrics, list(cp.messages)
        self.last_checkpoint_id = cp.id
        return step + 1

    def checkpoint(self, step: int, *, agent_id=None, status: str | None = "running", state=None, metrics=None,
                   messages: list | None = None, token_usage=None, metadata=None) -> str:
        """Save a checkpoint after ``step``; return its checkpoint id.

        Args:
            step: the step just completed (non-negative int).
            agent_id: who ran it (normally a string). status: a string (default ``"running"``).
            state: the workflow state (any JSON value; large states dedup between saves).
            metrics: an object of numbers (seconds, counts...).
            messages: the message list at this step (default: the list last saved or resumed,
                ``[]`` at first).
            token_usage, metadata: as :meth:`CheckpointManager.save` takes them.
        Raises:
            InvalidMessageError: a bad field (``step`` not a non-negative int, ...); nothing stored.
            ConflictError: another process saved this workflow since this object last saw it.
        """
        msgs = self.messages if messages is None else list(messages)
        cid = self.manager.save(self.workflow_id, msgs, step=step, agent_id=agent_id, status=status,
                                session_state=state, metrics=metrics, token_usage=token_usage, metadata=metadata)
        self.messages, self.last_step, self.state, self.metrics = msgs, step, state, metrics
        self.last_checkpoint_id = cid
        self._recorded = {}  # a new checkpoint: no outcome beside it yet
        return cid

    def call(self, call_id: str, fn: Callable[..., Any], *args, **kwargs):
        """Run a side-effecting call once per checkpoint: ``fn(*args, **kwargs)``, its result
        recorded beside the workflow's last checkpoint (None before the first) right after it
        returns. A call whose outcome is already recorded there (the process died after it ran,
        before the next :meth:`checkpoint`) is not run again: the recorded result is returned.

        Args:
            call_id: names the call within the step (non-empty string, e.g. ``"send-email"``).
            fn: the callable; its result must be a JSON value.
        Returns:
            ``fn``'s result, or the recorded one.
        Raises:
            InvalidInputError / InvalidMessageError: a bad call id, a result that is not JSON.
            ConflictError: another process recorded another result, or saved the workflow since.
            CheckpointNotFound: the last checkpoint was rolled back or deleted meanwhile.
        """
        if self._recorded is None:
            if self.last_checkpoint_id is None:  # not resumed: the next save goes on top of the head
                h = self.manager.head(self.workflow_id)
                self.last_checkpoint_id = h.id if h is not None else None
            self._recorded = self.manager.outcomes(self.workflow_id, self.last_checkpoint_id)
        if call_id in self._recorded:
            return self._recorded[call_id]
        result = fn(*args, **kwargs)
        self.manager.record_outcome(self.workflow_id, self.last_checkpoint_id, call_id, result)
        self._recorded[call_id] = result
        return result


def add_usage(total: dict | None, usage: Mapping | None) -> dict | None:
    """Return ``total + usage``: numbers added key by key, nested objects (``*_details``) likewise,
    None values skipped. Neither argument is modified.

    Raises:
        InvalidMessageError: a value is neither a number, None nor an object of those.
    """
    if usage is None:
        return total
    out = dict(total or {})
    for k, v in usage.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, Mapping)):
            raise InvalidMessageError(f"token usage {k!r} must be a number or an object of numbers, got {v!r}")
        if isinstance(v, Mapping):
            out[k] = add_usage(out.get(k) if isinstance(out.get(k), dict) else None, v)
        else:
            prev = out.get(k)
            out[k] = v + (prev if isinstance(prev, (int, float)) else 0)
    return out


def _as_dict(obj) -> dict:
    """An OpenAI SDK object (pydantic, ``model_dump``) or a mapping as a plain JSON dict."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(exclude_none=True)
    raise InvalidInputError(f"expected a message dict or an OpenAI SDK object, got {type(obj).__name__}")


class CheckpointedLoop:
    """An OpenAI-style message loop that saves a checkpoint after every tool roundtrip.

    Args:
        manager: a :class:`CheckpointManager`.
        run_id: the run to save into.
        messages: the conversation so far (e.g. system and user messages); ignored by
            :meth:`resume` when the run has checkpoints.
        session_state: any JSON value saved with each checkpoint (change it via :attr:`state`).
        agent_id: saved with each checkpoint.

    Feed it every message (:meth:`record`), or let :meth:`run` drive a whole loop. A roundtrip is
    complete when every call id of an assistant message's ``tool_calls`` has its ``role: "tool"``
    message (``tool_call_id``); the checkpoint then holds the whole list, ``step`` = roundtrip
    number (1, 2, ...), ``token_usage`` = the sum of every usage passed so far, ``session_state``
    = :attr:`state`, ``status="running"``. :meth:`finish` saves a final checkpoint.
    """

    def __init__(self, manager: CheckpointManager, run_id: str, messages: list | None = None, *,
                 session_state=None, agent_id=None):
        self.manager = _manager(manager)
        if not isinstance(run_id, str) or not run_id:
            raise InvalidInputError(f"run_id must be a non-empty string, got {run_id!r}")
        self.run_id = run_id
        self.messages: list = list(messages or [])
        self.state = session_state
        self.agent_id = agent_id
        self.token_usage: dict | None = None
        self.roundtrip = 0
        self._open: set | None = None  # call ids of the open roundtrip still unanswered
        self.checkpoint_ids: list[str] = []
        self._final: dict | None = None  # the final answer of a finished loop (nothing recorded since)
        self.last_checkpoint_id: str | None = None  # the checkpoint the open roundtrip started from
        self._recorded: dict | None = None  # tool outcomes beside it, read on the first run() roundtrip

    def resume(self) -> bool:
        """Continue from the run's latest checkpoint if it has one: messages, cumulative token
        usage, session state and roundtrip number are restored. Returns True if it resumed."""
        cp = self.manager.latest(self.run_id)
        if cp is None:
            return False
        self.messages = list(cp.messages)
        self.token_usage = cp.token_usage
        self.state = cp.session_state
        self.roundtrip = cp.step if isinstance(cp.step, int) else 0
        self._open = None
        self.last_checkpoint_id, self._recorded = cp.id, None
        last = self.messages[-1] if self.messages else None
        finished = cp.status not in (None, "running") and isinstance(last, dict) and \
            last.get("role") == "assistant" and not last.get("tool_calls")
        self._final = last if finished else None
        return True

    def record(self, message, usage: Mapping | None = None) -> str | None:
        """Append one message (a dict, or an OpenAI SDK message object) and the usage of the call
        that produced it (``{"prompt_tokens": ..., "completion_tokens": ...}`` or the SDK's usage
        object); save if it completes a tool roundtrip.

        Returns:
            The new checkpoint's id if this message completed a roundtrip, else None.
        Raises:
            InvalidInputError: a message that is not a dict/SDK object, or a tool message while
                no roundtrip is open or answering an unknown call id.
            InvalidMessageError / ConflictError: from the save.
        """
        msg = _as_dict(message)
        self._final = None  # the conversation goes on
        if usage is not None:
            self.token_usage = add_usage(self.token_usage, usage if isinstance(usage, Mapping) else _as_dict(usage))
        role = msg.get("role")
        if role == "tool":
            cid = msg.get("tool_call_id")
            if self._open is None or cid not in self._open:
                raise InvalidInputError(f"tool message answers call id {cid!r}, which no open tool roundtrip has")
            self.messages.append(msg)
            self._open.discard(cid)
            if not self._open:
                self._open = None
                self.roundtrip += 1
                return self._save("running")
            return None
        if self._open:
            raise InvalidInputError(f"a {role!r} message arrived before the tool results for call ids "
                                    f"{sorted(self._open)}")
        self.messages.append(msg)
        calls = msg.get("tool_calls") if role == "assistant" else None
        if calls:
            ids = {c.get("id") if isinstance(c, Mapping) else None for c in calls}
            if None in ids or len(ids) != len(calls):
                raise InvalidInputError("every tool call needs a distinct id")
            self._open = ids
        return None

    def finish(self, status: str = "completed") -> str:
        """Save a final checkpoint with ``status`` (default ``"completed"``); return its id."""
        return self._save(status)

    def _save(self, status: str) -> str:
        cid = self.manager.save(self.run_id, self.messages, step=self.roundtrip, token_usage=self.token_usage,
                                session_state=self.state, agent_id=self.agent_id, status=status)
        self.checkpoint_ids.append(cid)
        self.last_checkpoint_id, self._recorded = cid, {}  # a new checkpoint has no outcome yet
        return cid

    def run(self, complete: Callable[[list], Any], tools: Mapping[str, Callable[..., Any]], *,
            max_roundtrips: int = 50) -> dict:
        """Drive the loop until the model answers without tool calls; return that final message.

        On a finished loop (this one already ran to its final answer, or :meth:`resume` found a
        checkpoint saved by :meth:`finish` whose last message is that answer) and nothing recorded
        since, returns the final answer again without calling the model or saving: running a
        finished loop twice does not append a second answer. Record a new user message first to
        continue the conversation.

        Args:
            complete: ``complete(messages) -> (assistant message, usage)`` or an OpenAI
                ``ChatCompletion`` (its first choice's message and its usage are used), e.g.
                ``lambda m: client.chat.completions.create(model=..., messages=m, tools=...)``.
            tools: tool name -> callable taking the call's JSON arguments as keywords; its result
                (a string, else JSON-encoded) is the tool message's content. Each result is
                recorded as a tool outcome (call id -> content) beside the checkpoint the
                roundtrip started from as soon as the tool returns, and so is the model's
                tool-calling message (call id ``"#model"``); a resumed loop reuses recorded ones
                instead of calling the model or the tool again.
            max_roundtrips: stop with InvalidInputError past this many roundtrips in this call.
        Raises:
            InvalidInputError: an unknown tool name, arguments that are not a JSON object, or
                more than ``max_roundtrips`` roundtrips.
        """
        import json

        if self._final is not None:
            return self._final
        for i in range(max_roundtrips + 1):
            if self._recorded is None:  # resumed (or new): what the interrupted roundtrip recorded
                if self.last_checkpoint_id is None:  # never resumed: the save goes on top of the head
                    h = self.manager.head(self.run_id)
                    self.last_checkpoint_id = h.id if h is not None else None
                self._recorded = self.manager.outcomes(self.run_id, self.last_checkpoint_id)
            anchor, recorded = self.last_checkpoint_id, self._recorded
            model = recorded.get(_MODEL_CALL)
            if isinstance(model, dict) and isinstance(model.get("message"), dict):
                msg, usage = model["message"], model.get("usage")
            else:
                out = complete(self.messages)
                if isinstance(out, tuple):
                    msg, usage = out
                else:
                    msg, usage = out.choices[0].message, getattr(out, "usage", None)
                msg = _as_dict(msg)
                if usage is not None and not isinstance(usage, Mapping):
                    usage = _as_dict(usage)
                if msg.get("tool_calls"):  # the calls to come are recorded: so is what asked for them
                    self.manager.record_outcome(self.run_id, anchor, _MODEL_CALL, {"message": msg, "usage": usage})
            self.record(msg, usage)
            calls = msg.get("tool_calls") or []
            if not calls:
                self.finish()
                self._final = msg
                return msg
            if i == max_roundtrips:
                raise InvalidInputError(f"more than {max_roundtrips} tool roundtrips")
            for c in calls:
                fn = c.get("function") or {}
                name = fn.get("name")
                if name not in tools:
                    raise InvalidInputError(f"the model called unknown tool {name!r}")
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except ValueError:
                    args = None
                if not isinstance(args, dict):
                    raise InvalidInputError(f"tool {name!r} arguments are not a JSON object: {fn.get('arguments')!r}")
                if c["id"] in recorded and c["id"] != _MODEL_CALL:
                    content = recorded[c["id"]]  # ran before the crash: not run again
                else:
                    res = tools[name](**args)
                    content = res if isinstance(res, str) else json.dumps(res)
                    self.manager.record_outcome(self.run_id, anchor, c["id"], content)
                    recorded[c["id"]] = content
                self.record({"role": "tool", "tool_call_id": c["id"], "content": content})
        raise AssertionError("unreachable")  # pragma: no cover
