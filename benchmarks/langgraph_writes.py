"""Pending writes and interrupts through real LangGraph graphs, SnapstoreSaver against
InMemorySaver (issue 27): ``python -m benchmarks.langgraph_writes --trials 100``.

The graph: ``agent`` fans out with ``Send`` to ``width`` parallel ``tool`` branches; a branch
either writes its result (a reducer appends it) or calls ``interrupt()``. Each trial is one
thread: invoke, then resume every interrupt (``Command(resume=...)``) until the graph ends, with
a given durability (``async``, LangGraph's default; ``sync``; ``exit``). Counted per trial:

* ``missing``: pending writes or interrupts the saver lost (the interrupts the first invoke
  reports must equal the branches that interrupt; every completed branch must not run again);
* ``reruns``: tool calls that ran again on resume (a branch that wrote and interrupted-none must
  run once; an interrupting branch runs once more on resume, as LangGraph re-runs it);
* ``wrong``: the final state differs from the same trial on InMemorySaver.

Each tool sleeps a little (``delay``), so the checkpoint puts and the writes overlap as they do
with a real model or tool call.
"""

from __future__ import annotations

import argparse
import operator
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from typing import Annotated, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt


class State(TypedDict):
    results: Annotated[list, operator.add]


class Branch(TypedDict):
    i: int


def build(saver, width: int, interrupting: set, calls: Counter, delay: float):
    """The fan-out graph on ``saver``; ``calls[(thread, i)]`` counts runs of branch ``i``."""
    lock = threading.Lock()

    def agent(state: State):
        return {}

    def fan(state: State):
        if state["results"]:
            return END
        return [Send("tool", {"i": i}) for i in range(width)]

    def tool(b: Branch, config):
        i = b["i"]
        with lock:
            calls[(config["configurable"]["thread_id"], i)] += 1
        time.sleep(delay * (1 + (i % 3)))
        if i in interrupting:
            answer = interrupt({"branch": i})
            return {"results": [f"r{i}:{answer}"]}
        return {"results": [f"r{i}"]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", fan, ["tool", END])
    g.add_edge("tool", END)
    return g.compile(checkpointer=saver)


def _stored(reader, conf) -> Counter:
    """The latest checkpoint's pending writes per channel, as ``reader`` reads them."""
    t = reader.get_tuple(conf)
    return Counter(ch for _task, ch, _v in (t.pending_writes if t else ()))


def trial(saver, durability: str, width: int, interrupting: set, delay: float, reader=None) -> dict:
    """One thread through the graph on ``saver``; returns what it saw (``stored``: the pending
    writes after the first invoke per channel, read by ``reader``, e.g. a fresh saver on the same
    repository; default ``saver``)."""
    calls: Counter = Counter()
    graph = build(saver, width, interrupting, calls, delay)
    thread = uuid.uuid4().hex
    conf = {"configurable": {"thread_id": thread}}
    out = graph.invoke({"results": []}, conf, durability=durability)
    first = sorted(x.value["branch"] for x in out.get("__interrupt__", ()))
    stored = _stored(reader or saver, conf)
    stored = {"__interrupt__": stored["__interrupt__"], "results": stored["results"]}
    rounds = 0
    while out.get("__interrupt__") and rounds < len(interrupting) + 2:
        rounds += 1
        resume = {x.id: f"ok{x.value['branch']}" for x in out["__interrupt__"]}
        out = graph.invoke(Command(resume=resume), conf, durability=durability)
    st = graph.get_state(conf)
    return {"first": first, "stored": stored, "calls": {i: calls[(thread, i)] for i in range(width)},
            "final": sorted(st.values.get("results", [])), "next": st.next, "rounds": rounds}


def expected_calls(width: int, interrupting: set) -> dict:
    """Runs of each branch when nothing is lost: once, twice for an interrupting branch."""
    return {i: 2 if i in interrupting else 1 for i in range(width)}


def compare(make_saver, durability: str, trials: int, width: int = 8, interrupting: set = frozenset({7}),
            delay: float = 0.0005) -> dict:
    """``trials`` trials on a saver from ``make_saver()`` (called twice: the writer and a fresh
    reader of the same repository) and on InMemorySaver; counts of trials with missing writes or
    interrupts, re-runs and wrong final states."""
    mem = InMemorySaver()
    want = trial(mem, durability, width, set(interrupting), delay)
    assert want["first"] == sorted(interrupting), want
    assert want["calls"] == expected_calls(width, set(interrupting)), want
    counts = {"trials": trials, "missing": 0, "reruns": 0, "wrong": 0}
    saver = make_saver()
    reader = make_saver()
    try:
        for _ in range(trials):
            got = trial(saver, durability, width, set(interrupting), delay, reader)
            if got["first"] != want["first"] or got["rounds"] != want["rounds"] or got["stored"] != want["stored"]:
                counts["missing"] += 1
            if got["calls"] != want["calls"]:
                counts["reruns"] += 1
            if got["final"] != want["final"] or got["next"] != want["next"]:
                counts["wrong"] += 1
    finally:
        for sv in (saver, reader):
            close = getattr(sv, "close", None)
            if close:
                close()
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--durability", default="async,sync,exit")
    ap.add_argument("--dir", default=None, help="directory for the repositories (default: a temp dir)")
    args = ap.parse_args(argv)
    from snapstore.integrations.langgraph import SnapstoreSaver

    base = args.dir or tempfile.mkdtemp(prefix="lgwrites-")
    n = iter(range(10 ** 6))
    for dur in args.durability.split(","):
        for name, inter in (("1 of %d interrupts" % args.width, {args.width - 1}),
                            ("all %d interrupt" % args.width, set(range(args.width)))):
            t0 = time.perf_counter()
            repo = os.path.join(base, f"repo{next(n)}")
            c = compare(lambda: SnapstoreSaver(repo), dur, args.trials, args.width, inter)
            print(f"durability={dur:5} {name:18} trials={c['trials']} missing={c['missing']} "
                  f"reruns={c['reruns']} wrong={c['wrong']} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
