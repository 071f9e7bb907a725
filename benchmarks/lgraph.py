"""The LangGraph side of ``python -m benchmarks``: a real graph, real checkpointers.

The graph: ``START -> agent -> END`` over a state with a ``messages`` channel (``add_messages``, or
the same reducer in LangGraph's ``DeltaChannel``), a ``session_state`` channel (last value) and a
``turn`` input. The node is deterministic: it returns the messages the workload's checkpoint ``turn``
adds (for a rewritten history: ``RemoveMessage(REMOVE_ALL_MESSAGES)`` and the whole new list), and
the new session state when it changed. Each turn is one ``invoke(..., durability="exit")``, so one
checkpoint per turn is written, as the other systems write one.

Messages are LangChain messages carrying exactly the workload's message dicts (:func:`to_lc` /
:func:`from_lc` round-trip them exactly, key order included), so every system stores the same data.

:class:`BotoFS` is a minimal synchronous fsspec filesystem over boto3, for
``langgraph-checkpoint-objectstorage`` on S3: ``s3fs`` pins a botocore older than the boto3 this
project uses, so it is not installed; the saver only calls ``cat_file``, ``pipe_file``, ``makedirs``,
``find``, ``exists`` and ``rm``.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, TypedDict

from fsspec import AbstractFileSystem
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, RemoveMessage, SystemMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

_CLASSES = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
_ROLES = {"system": "system", "human": "user", "ai": "assistant"}
_NOKEY = "_snapbench_missing"


def to_lc(m: dict, mid: str):
    """A LangChain message carrying the message dict ``m`` exactly (id ``mid``).

    ``role`` picks the class (system/user/assistant; any other role is a ``ChatMessage``); a string
    ``content`` is the content; every other key, in order, goes to ``additional_kwargs``; a content
    that is not a string, a missing role or content, or a key order that does not start with role,
    content are recorded there too, so :func:`from_lc` rebuilds the dict exactly.
    """
    if not isinstance(m, dict):
        return ChatMessage(content="", role="", id=mid, additional_kwargs={"_value": m})
    extra = {k: v for k, v in m.items() if k not in ("role", "content")}
    keys = list(m)
    if keys[:2] != ["role", "content"][:len(keys[:2])] or "role" not in m or "content" not in m:
        extra["_order"] = keys
    content = m.get("content", "")
    if not isinstance(content, str):
        extra["_content"] = content
        content = ""
    role = m.get("role", "")
    cls = _CLASSES.get(role) if isinstance(role, str) else None
    if cls is not None:
        return cls(content=content, id=mid, additional_kwargs=extra)
    if not isinstance(role, str):
        extra["_role"] = role
        role = ""
    return ChatMessage(content=content, role=role, id=mid, additional_kwargs=extra)


def from_lc(msg) -> Any:
    """The message dict :func:`to_lc` was given."""
    extra = dict(msg.additional_kwargs)
    if "_value" in extra:
        return extra["_value"]
    role = _ROLES.get(msg.type) or extra.pop("_role", None) or getattr(msg, "role", "")
    extra.pop("_role", None)
    content = extra.pop("_content") if "_content" in extra else msg.content
    order = extra.pop("_order", None)
    full = {"role": role, "content": content, **extra}
    if order is not None:
        return {k: full[k] for k in order}
    return full


def batch_add_messages(state, writes):
    """``add_messages`` folded over a batch of writes (the reducer form ``DeltaChannel`` takes)."""
    for w in writes:
        state = add_messages(state, w)
    return state


class PlainState(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    session_state: Any
    turn: int


class DeltaState(TypedDict, total=False):
    messages: Annotated[list, DeltaChannel(batch_add_messages)]
    session_state: Any
    turn: int


class Feed:
    """What the node returns at each turn: ``updates[thread][turn]`` (a state update dict)."""

    def __init__(self):
        self.updates: dict = {}
        self.lock = threading.Lock()

    def node(self, state, config):
        thread = config["configurable"]["thread_id"]
        return self.updates[thread][state["turn"]]


def build_graph(delta: bool, checkpointer, feed: Feed | None = None):
    """The compiled graph (``delta``: the messages channel is a ``DeltaChannel``)."""
    g = StateGraph(DeltaState if delta else PlainState)
    g.add_node("agent", (feed or Feed()).node)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile(checkpointer=checkpointer)


def turn_updates(run, step_deltas) -> list:
    """Per checkpoint of ``run``, the node's state update (LangChain messages made once, ids by position)."""
    out = []
    prev_state = None
    for i, (kind, new) in enumerate(step_deltas):
        cp = run.checkpoints[i]
        if kind == "append":
            base = len(cp) - len(new)
            upd = {"messages": [to_lc(m, str(base + j)) for j, m in enumerate(new)]}
        else:
            upd = {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)] + [to_lc(m, str(j)) for j, m in enumerate(cp)]}
        if run.states is not None:
            st = run.states[i]
            if st is not prev_state:
                upd["session_state"] = st
            prev_state = st
        out.append(upd)
    return out


def restored_values(app, thread_id: str) -> tuple[list, Any]:
    """(message dicts, session state) of the thread's latest checkpoint, through ``get_state``."""
    st = app.get_state({"configurable": {"thread_id": thread_id}})
    vals = st.values or {}
    return [from_lc(m) for m in vals.get("messages", [])], vals.get("session_state")


# ------------------------------------------------------------------------------------------------

class BotoFS(AbstractFileSystem):
    """A synchronous fsspec filesystem over one boto3 S3 client (paths ``bucket/key``).

    Counts requests by kind in ``counts`` (``PUT``, ``GET``, ``LIST`` pages, ``HEAD``, ``DELETE``
    batches). Only what ``ObjectStorageSaver`` calls is implemented.
    """

    protocol = "botofs"
    cachable = False

    def __init__(self, client, **kw):
        super().__init__(**kw)
        self.client = client
        self.counts = {"PUT": 0, "GET": 0, "LIST": 0, "HEAD": 0, "DELETE": 0}
        self._lock = threading.Lock()

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] += 1

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.lstrip("/").partition("/")
        return bucket, key

    def cat_file(self, path, start=None, end=None, **kw):
        from botocore.exceptions import ClientError

        bucket, key = self._split(path)
        self._count("GET")
        try:
            return self.client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise FileNotFoundError(path) from e
            raise

    def pipe_file(self, path, value, **kw):
        bucket, key = self._split(path)
        self._count("PUT")
        self.client.put_object(Bucket=bucket, Key=key, Body=value)

    def makedirs(self, path, exist_ok=False):
        return None

    def _list(self, path: str) -> list:
        bucket, key = self._split(path)
        prefix = key.rstrip("/") + "/" if key else ""
        out, token = [], None
        while True:
            kw = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            self._count("LIST")
            r = self.client.list_objects_v2(**kw)
            out += r.get("Contents", [])
            if not r.get("IsTruncated"):
                return [(bucket, o) for o in out]
            token = r["NextContinuationToken"]

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kw):
        found = {f"{b}/{o['Key']}": {"name": f"{b}/{o['Key']}", "size": o["Size"], "type": "file",
                                    "LastModified": o["LastModified"]} for b, o in self._list(path)}
        return found if detail else sorted(found)

    def exists(self, path, **kw):
        from botocore.exceptions import ClientError

        bucket, key = self._split(path)
        self._count("HEAD")
        try:
            self.client.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError:
            return bool(self._list(path))

    def rm(self, path, recursive=False, maxdepth=None):
        items = self._list(path)
        for i in range(0, len(items), 1000):
            batch = items[i:i + 1000]
            self._count("DELETE")
            self.client.delete_objects(Bucket=batch[0][0],
                                       Delete={"Objects": [{"Key": o["Key"]} for _, o in batch]})

    def ls(self, path, detail=True, **kw):
        found = self.find(path, detail=True)
        return list(found.values()) if detail else sorted(found)
