"""The framework surfaces on an encrypted repository (docs/format.md §27): SnapstoreSaver (a real
LangGraph graph) and SnapstoreSession (the OpenAI Agents session protocol), on a local directory
and on S3 (moto's HTTP server), opened with ``passphrase=``: what one object saved, a second one
(another process would do the same) reads; no text is stored in the clear; a wrong passphrase and
a missing one are typed errors; a flipped byte is an IntegrityError, never other data."""

from __future__ import annotations

import asyncio
from typing import Annotated, TypedDict

import boto3
import pytest

pytest.importorskip("langgraph")
pytest.importorskip("agents")

from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from snapstore.errors import EncryptionError, IntegrityError, WrongPassphrase  # noqa: E402
from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402
from snapstore.integrations.openai_agents import SnapstoreSession  # noqa: E402
from snapstore.stores import open_store  # noqa: E402
from tests.helpers.s3_fixtures import new_bucket_name  # noqa: E402

MARKER = "OKAPI-CANARY-5120"
PW = "surface passphrase"


@pytest.fixture(params=["local", "s3-http"])
def location(request, tmp_path, monkeypatch):
    """``(url, store options)`` of a fresh repository: a directory, or a bucket on moto's HTTP server."""
    if request.param == "local":
        return str(tmp_path / "repo"), {}
    endpoint = request.getfixturevalue("moto_server")
    bucket = new_bucket_name()
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/enc", {"endpoint_url": endpoint, "addressing_style": "path"}


def _raw(url, opts) -> dict[str, bytes]:
    store = open_store(url, **opts)
    try:
        return {i.key: store.get(i.key) for i in store.list("")}
    finally:
        store.close()


def _flip_packs(url, opts) -> None:
    store = open_store(url, **opts)
    try:
        for i in store.list("packs/"):
            data = bytearray(store.get(i.key))
            data[len(data) // 2] ^= 1
            store.delete_many([i.key])
            store.put(i.key, bytes(data))
    finally:
        store.close()


class State(TypedDict):
    messages: Annotated[list, add_messages]


def _graph(saver):
    g = StateGraph(State)
    g.add_node("model", lambda s: {"messages": [AIMessage(content=f"{MARKER} reply {len(s['messages'])}")]})
    g.add_edge(START, "model")
    return g.compile(checkpointer=saver)


def test_langgraph_saver_encrypted(location):
    url, opts = location
    cfg = {"configurable": {"thread_id": "secret-thread"}}
    with SnapstoreSaver(url, passphrase=PW, **opts) as saver:
        graph = _graph(saver)
        for i in range(4):
            out = graph.invoke({"messages": [HumanMessage(content=f"{MARKER} question {i}")]}, cfg)
        assert len(out["messages"]) == 8
    with SnapstoreSaver(url, passphrase=PW, **opts) as again:
        assert _graph(again).get_state(cfg).values["messages"] == out["messages"]
        assert len(list(again.list(cfg))) >= 8
    raw = _raw(url, opts)
    assert raw and not [k for k, v in raw.items() if MARKER.encode() in v]
    with pytest.raises(WrongPassphrase):
        with SnapstoreSaver(url, passphrase="not it", **opts) as wrong:
            wrong.get_tuple(cfg)
    with pytest.raises(EncryptionError, match="encrypted"):
        with SnapstoreSaver(url, **opts) as none:
            none.get_tuple(cfg)
    _flip_packs(url, opts)
    with pytest.raises(IntegrityError, match="packs/"):
        with SnapstoreSaver(url, passphrase=PW, **opts) as damaged:
            _graph(damaged).get_state(cfg)


def test_openai_session_encrypted(location):
    url, opts = location
    items = [{"role": "user", "content": f"{MARKER} hello"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"q\": \"x\"}"},
             {"type": "function_call_output", "call_id": "c1", "output": f"{MARKER} tool output " * 50}]
    s = SnapstoreSession("conv", url, passphrase=PW, **opts)
    asyncio.run(s.add_items(items))
    assert asyncio.run(s.pop_item()) == items[-1]
    s.close()
    other = SnapstoreSession("conv", url, passphrase=PW, **opts)
    assert asyncio.run(other.get_items()) == items[:-1]
    other.close()
    raw = _raw(url, opts)
    assert raw and not [k for k, v in raw.items() if MARKER.encode() in v]
    wrong = SnapstoreSession("conv", url, passphrase="not it", **opts)
    with pytest.raises(WrongPassphrase):
        asyncio.run(wrong.get_items())
    wrong.close()
    none = SnapstoreSession("conv", url, **opts)
    with pytest.raises(EncryptionError, match="encrypted"):
        asyncio.run(none.get_items())
    none.close()
    _flip_packs(url, opts)
    damaged = SnapstoreSession("conv", url, passphrase=PW, **opts)
    with pytest.raises(IntegrityError, match="packs/"):
        asyncio.run(damaged.get_items())
    damaged.close()
