"""Values and classes shared by tests/integrations/test_langgraph_serde.py and the fresh processes it starts.

``python -m tests.helpers.serde_values REPO MODE THREAD...`` (from the project root) opens a fresh SnapstoreSaver on REPO (MODE
``safe``: with ``SafeSerializer(types=TYPES)``; ``default``: LangGraph's serializer), reads each
thread's state through a real StateGraph and prints one JSON object ``{thread: verdict}``: ``"ok"``
when the state equals :func:`values` ``[thread]`` with the same types all the way down.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import fractions
import json
import pathlib
import sys
import uuid
from collections import OrderedDict, deque
from typing import Any, NamedTuple, TypedDict
from zoneinfo import ZoneInfo

import pydantic
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph


class Color(enum.Enum):
    RED = "r"
    BLUE = "b"


@dataclasses.dataclass
class Point:
    x: int
    y: fractions.Fraction
    tag: str = dataclasses.field(default="p", init=False)


class Model(pydantic.BaseModel):
    a: int
    url: pydantic.HttpUrl
    names: tuple[str, ...]


class Pair(NamedTuple):
    left: Any
    right: Any


TYPES = [Color, Point, Model, Pair]
"""The classes both sides register."""


def values() -> dict[str, Any]:
    """One state value per thread name: those LangGraph's serializer refuses or changes, then
    those it already handles."""
    tz = datetime.timezone(datetime.timedelta(hours=5, minutes=30), "IST")
    return {
        "fraction": fractions.Fraction(-3, 7),
        "complex": complex(1.5, -2.0),
        "range": range(2, 20, 3),
        "pure_posix_path": pathlib.PurePosixPath("/srv/a b/c.txt"),
        "pure_windows_path": pathlib.PureWindowsPath(r"C:\Users\x\y.txt"),
        "any_url": pydantic.AnyUrl("https://example.com/a?b=1#c"),
        "http_url": pydantic.HttpUrl("https://example.com/"),
        "tuple": (1, "a", (2.5, None), ()),
        "big_int": 2**100,
        "tuple_keys": {(1, "a"): "x", frozenset({2}): [3]},
        "path": pathlib.Path("/tmp/q"),
        "decimal": decimal.Decimal("1.10"),
        "datetime_tz": datetime.datetime(2024, 5, 1, 12, 0, 1, 5, tzinfo=tz),
        "datetime_zoneinfo": datetime.datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
        "date_time_delta": [datetime.date(2020, 2, 29), datetime.time(23, 59, tzinfo=datetime.timezone.utc),
                            datetime.timedelta(days=-1, microseconds=3)],
        "uuid": uuid.UUID(int=12345),
        "set": {1, 2, 3},
        "frozenset": frozenset({"a", "b"}),
        "bytes": b"\x00\xff",
        "bytearray": bytearray(b"ab"),
        "enum": Color.BLUE,
        "dataclass": Point(1, fractions.Fraction(1, 3)),
        "pydantic": Model(a=1, url="https://x.org/p", names=("a", "b")),
        "namedtuple": Pair(1, (2, 3)),
        "ordered_deque": [OrderedDict([("b", 1), ("a", 2)]), deque([1, 2], maxlen=3)],
        "int_keys": {1: "a", 2: "b"},
        "messages_in_dict": {"m": [HumanMessage("hi", id="h1"), AIMessage("yo", id="a1"),
                                   ToolMessage("r", tool_call_id="c1", id="t1")]},
        "nested": {"a": [fractions.Fraction(1, 2), {"b": (complex(0, 1), range(3))}],
                   "c": pathlib.PurePosixPath("x")},
    }


REFUSED_BY_LANGGRAPH = ["fraction", "complex", "range", "pure_posix_path", "pure_windows_path", "any_url",
                        "http_url", "big_int", "tuple_keys",
                        "dataclass", "pydantic", "nested"]  # these three hold a refused value inside
"""Threads whose put fails with LangGraph's serializer (JsonPlusSerializer, langgraph-checkpoint 4.3)."""
CHANGED_BY_LANGGRAPH = ["tuple", "namedtuple", "ordered_deque", "datetime_zoneinfo"]
"""Threads it stores but reads back different: tuples as lists (also inside a namedtuple), an
OrderedDict as a dict, a deque without its maxlen, a ZoneInfo datetime as a fixed offset (fold lost)."""


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (a tuple is not a list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, datetime.datetime):
        return a == b and a.fold == b.fold and a.tzinfo == b.tzinfo
    if isinstance(a, Point):
        return same(a.x, b.x) and same(a.y, b.y) and a.tag == b.tag
    return a == b


class State(TypedDict):
    v: Any


def graph(saver):
    """A one-node StateGraph that writes its input value back to channel ``v``."""
    b = StateGraph(State)
    b.add_node("n", lambda s: {"v": s["v"]})
    b.add_edge(START, "n")
    return b.compile(checkpointer=saver)


def verdict(got: Any, want: Any) -> str:
    return "ok" if same(got, want) else f"differs: {got!r} ({type(got).__name__})"


def main() -> None:
    """The fresh-process reader (see the module docstring)."""
    from snapstore.integrations.langgraph import SnapstoreSaver
    from snapstore.integrations.serde import SafeSerializer

    repo, mode, *threads = sys.argv[1:]
    saver = SnapstoreSaver(repo, serde=SafeSerializer(types=TYPES) if mode == "safe" else None)
    g, want, out = graph(saver), values(), {}
    for t in threads:
        try:
            out[t] = verdict(g.get_state({"configurable": {"thread_id": t}}).values["v"], want[t])
        except Exception as e:  # reported to the parent test, which fails on it
            out[t] = f"{type(e).__name__}: {e}"
    print(json.dumps(out))


if __name__ == "__main__":
    from tests.helpers import serde_values  # the classes as the parent test process names them (not __main__.Color)

    serde_values.main()
