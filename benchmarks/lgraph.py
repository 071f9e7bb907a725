"""The one LangGraph driver of the benchmarks: real graphs, real checkpointers.

Two graphs, for two questions:

* the workload replay graph (:func:`build_graph`), the LangGraph side of ``python -m benchmarks``
  (every system stores the same workload's messages; one checkpoint per turn);
* the chat graph (:func:`build_chat_graph`, :func:`chat_turns`) of ``benchmarks/langgraph_storage.py``,
  ``log_bytes.py`` and ``manifest_encodings.py`` (what each LangGraph saver costs at LangGraph's
  default durability), with the savers it compares (:func:`make_saver`).

The replay graph: ``START -> agent -> END`` over a state with a ``messages`` channel (``add_messages``, or
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

import os
import random
import sqlite3
import threading
import time
from typing import Annotated, Any, TypedDict

try:
    from fsspec import AbstractFileSystem
except ImportError:  # only BotoFS (the objectstorage peer, bench extra, which brings fsspec) needs it
    AbstractFileSystem = object
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
# the chat graph: one deterministic "model" node answering each human message

WORDS = ("the agent tool call result file test error patch function value returns line module import "
         "config repository branch commit review change build output input request response status "
         "check update data model token user system message context state step plan fix run").split()
CHAT_THREAD = "bench"
SNAPSHOT_FREQUENCY = 100
"""The chat graph's ``DeltaChannel`` writes a full snapshot of the messages every 100 updates."""


def chat_text(rng: random.Random, n: int = 360) -> str:
    """``n`` characters of pseudo-random English-like words (about 8% numbers) drawn from ``rng``."""
    out, size = [], 0
    while size < n:
        w = rng.choice(WORDS) if rng.random() > 0.08 else str(rng.randrange(10 ** 6))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


class ChatDeltaState(TypedDict):
    messages: Annotated[list, DeltaChannel(batch_add_messages, snapshot_frequency=SNAPSHOT_FREQUENCY)]


def build_chat_graph(saver, delta: bool):
    """The compiled chat graph ``START -> model`` on checkpointer ``saver`` (``delta``: the
    messages channel is a ``DeltaChannel``); the model answers with :func:`chat_text` of a fixed seed."""
    g = StateGraph(ChatDeltaState if delta else ChatState)
    rng = random.Random(7)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=chat_text(rng))]})
    g.add_edge(START, "model")
    return g.compile(checkpointer=saver)


def chat_turns(graph, turns: int, thread: str = CHAT_THREAD, seed: int = 1) -> list[float]:
    """Invoke ``graph`` ``turns`` times with one human message of :func:`chat_text` each (LangGraph's
    default durability: 3 checkpoints and 2 ``put_writes`` per turn); the seconds of each invoke."""
    rng = random.Random(seed)
    cfg = {"configurable": {"thread_id": thread}}
    times = []
    for _ in range(turns):
        t = time.perf_counter()
        graph.invoke({"messages": [HumanMessage(content=chat_text(rng))]}, cfg)
        times.append(time.perf_counter() - t)
    return times


def make_saver(spec: dict):
    """The checkpointer ``spec`` names.

    Args:
        spec: ``{"kind": "sqlite" | "objectstorage" | "snapstore" | "snapstore-s3" |
            "snapstore-s3-compact", "path": file, directory or s3:// URL, "endpoint": S3 endpoint,
            "bucket": S3 bucket (objectstorage)}``. A local ``snapstore`` fsyncs unless
            ``$BENCH_FSYNC`` is ``0``.
    """
    kind = spec["kind"]
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        return SqliteSaver(sqlite3.connect(spec["path"], check_same_thread=False))
    if kind == "objectstorage":
        import boto3
        from langgraph_checkpoint_objectstorage import ObjectStorageSaver

        client = boto3.client("s3", endpoint_url=spec["endpoint"], region_name="us-east-1")
        return ObjectStorageSaver(BotoFS(client), f"{spec['bucket']}/lg")
    from snapstore.integrations.langgraph import SnapstoreSaver
    if kind == "snapstore-s3-compact":
        return SnapstoreSaver(spec["path"], endpoint_url=spec["endpoint"], addressing_style="path", compact_log=True)
    if kind == "snapstore-s3":
        return SnapstoreSaver(spec["path"], endpoint_url=spec["endpoint"], addressing_style="path")
    if kind != "snapstore":
        raise ValueError(f"unknown saver kind {kind!r}")
    return SnapstoreSaver(spec["path"], fsync=os.environ.get("BENCH_FSYNC", "1") == "1")


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
