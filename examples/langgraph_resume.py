"""A LangGraph agent checkpointed in S3 with SnapstoreSaver, interrupted, and resumed in another process.

The graph: a deterministic "model" node (standing in for an LLM, no network) that answers a
question with a tool call, a tool node that needs a human's approval (``interrupt_before``), and
the model's final answer. Process 1 runs until the interrupt and exits; process 2, with nothing but
the S3 URL, finds the pending tool call and resumes the run to the end.

Run it all locally (needs ``pip install '.[langgraph,test]'``: moto provides the S3 endpoint)::

    python examples/langgraph_resume.py demo

or against any S3 endpoint, one phase per process::

    python examples/langgraph_resume.py start  --url s3://bucket/agents --endpoint-url http://127.0.0.1:5555
    python examples/langgraph_resume.py resume --url s3://bucket/agents --endpoint-url http://127.0.0.1:5555

Each phase prints one JSON line: the phase, the next node(s) and the conversation so far.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Annotated, TypedDict

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402

THREAD = {"configurable": {"thread_id": "support-ticket-42"}}


class State(TypedDict):
    messages: Annotated[list, add_messages]


def model(state: State) -> dict:
    """The stand-in model: a tool call for a question, an answer once the tool replied."""
    last = state["messages"][-1]
    if isinstance(last, HumanMessage):
        return {"messages": [AIMessage(content="", tool_calls=[
            {"name": "refund", "args": {"order": "A-1001", "amount_eur": 25}, "id": "call-1"}])]}
    return {"messages": [AIMessage(content=f"Done: {last.content}")]}


def refund(state: State) -> dict:
    """The tool (runs only after the interrupt is resumed)."""
    call = state["messages"][-1].tool_calls[0]
    return {"messages": [ToolMessage(content=f"refunded {call['args']['amount_eur']} EUR on {call['args']['order']}",
                                     tool_call_id=call["id"])]}


def build(saver: SnapstoreSaver):
    """Compile the graph with ``saver``, interrupting before the tool runs."""
    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("refund", refund)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", lambda s: "refund" if s["messages"][-1].tool_calls else END, ["refund", END])
    g.add_edge("refund", "model")
    return g.compile(checkpointer=saver, interrupt_before=["refund"])


def report(phase: str, graph) -> None:
    st = graph.get_state(THREAD)
    print(json.dumps({"phase": phase, "next": list(st.next),
                      "messages": [[type(m).__name__, m.content] for m in st.values["messages"]]}))


def run_phase(phase: str, url: str, endpoint_url: str | None) -> None:
    opts = {"endpoint_url": endpoint_url, "addressing_style": "path"} if endpoint_url else {}
    with SnapstoreSaver(url, **opts) as saver:
        graph = build(saver)
        if phase == "start":
            graph.invoke({"messages": [HumanMessage(content="Please refund order A-1001.")]}, THREAD)
        else:
            if graph.get_state(THREAD).next != ("refund",):
                raise SystemExit("nothing to resume: no pending tool call in the store")
            graph.invoke(None, THREAD)  # approve: run the tool and finish
        report(phase, graph)


def demo() -> None:
    """Start moto's S3 server on 127.0.0.1, then run each phase in its own process."""
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request access log

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        os.environ.setdefault(k, v)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="agents")
        for phase in ("start", "resume"):
            subprocess.run([sys.executable, __file__, phase, "--url", "s3://agents/langgraph",
                            "--endpoint-url", endpoint], check=True)
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=["start", "resume", "demo"])
    ap.add_argument("--url", help="repository: s3://bucket/prefix or a directory")
    ap.add_argument("--endpoint-url", help="S3 endpoint (e.g. moto or MinIO)")
    a = ap.parse_args()
    if a.phase == "demo":
        demo()
    else:
        if not a.url:
            ap.error("--url is required")
        run_phase(a.phase, a.url, a.endpoint_url)


if __name__ == "__main__":
    main()
