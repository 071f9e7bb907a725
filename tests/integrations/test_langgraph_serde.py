"""SafeSerializer (snapstore.integrations.serde): exact LangGraph state values without module paths
in stored data (issue 27 item 7). Real StateGraphs, a real local repository, fresh processes."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
from fractions import Fraction
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

import ormsgpack  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.serde.base import SerializerProtocol  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.graph import START, StateGraph  # noqa: E402
from langgraph.types import Command, Interrupt, Send, interrupt  # noqa: E402

from snapstore.errors import (IntegrityError, InvalidInputError, UnregisteredTypeError,  # noqa: E402
                              UnsupportedValueError)
from snapstore.integrations.langgraph import SnapstoreSaver  # noqa: E402
from snapstore.integrations.serde import TYPE, SafeSerializer  # noqa: E402

from tests.helpers import serde_values as sv  # noqa: E402

from tests.helpers.paths import ROOT


def _fresh_read(repo, mode: str, threads) -> dict:
    """Each thread's verdict from a fresh process's SnapstoreSaver (tests/helpers/serde_values.py)."""
    out = subprocess.run([sys.executable, "-m", "tests.helpers.serde_values", str(repo), mode, *threads], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _run_each(saver, names) -> dict:
    """Invoke the graph once per value (thread = value name); ``{name: error or None}``."""
    g, vals, errs = sv.graph(saver), sv.values(), {}
    for k in names:
        try:
            g.invoke({"v": vals[k]}, {"configurable": {"thread_id": k}})
            errs[k] = None
        except Exception as e:
            errs[k] = e
    return errs


def test_before_langgraph_serializer_refuses_or_changes_them(tmp_path):
    """The baseline: InMemorySaver and the default SnapstoreSaver fail the same values."""
    names = list(sv.values())
    mem = InMemorySaver()
    errs = _run_each(mem, names)
    refused = sorted(k for k, e in errs.items() if e is not None)
    assert refused == sorted(sv.REFUSED_BY_LANGGRAPH)
    g = sv.graph(mem)
    changed = sorted(k for k in names if errs[k] is None and sv.verdict(
        g.get_state({"configurable": {"thread_id": k}}).values["v"], sv.values()[k]) != "ok")
    assert changed == sorted(sv.CHANGED_BY_LANGGRAPH)
    errs = _run_each(SnapstoreSaver(tmp_path / "r"), names)
    assert sorted(k for k, e in errs.items() if e is not None) == sorted(sv.REFUSED_BY_LANGGRAPH)
    back = _fresh_read(tmp_path / "r", "default", [k for k in names if errs[k] is None])
    assert sorted(k for k, v in back.items() if v != "ok") == sorted(sv.CHANGED_BY_LANGGRAPH)


def test_after_every_value_round_trips_in_a_fresh_process(tmp_path):
    saver = SnapstoreSaver(tmp_path / "r", serde=SafeSerializer(types=sv.TYPES))
    errs = _run_each(saver, list(sv.values()))
    assert {k: e for k, e in errs.items() if e is not None} == {}
    back = _fresh_read(tmp_path / "r", "safe", list(sv.values()))
    assert back == {k: "ok" for k in sv.values()}


def test_reads_what_the_default_serializer_wrote_and_continues(tmp_path):
    """Turning SafeSerializer on for an existing repository: old records decode, new ones are safe."""
    repo = tmp_path / "r"
    legacy_ok = [k for k in sv.values() if k not in sv.REFUSED_BY_LANGGRAPH + sv.CHANGED_BY_LANGGRAPH]
    assert _run_each(SnapstoreSaver(repo), legacy_ok) == {k: None for k in legacy_ok}
    back = _fresh_read(repo, "safe", legacy_ok)
    assert back == {k: "ok" for k in legacy_ok}
    # a further step with SafeSerializer on a thread written by the default
    safe = SnapstoreSaver(repo, serde=SafeSerializer(types=sv.TYPES))
    cfg = {"configurable": {"thread_id": "enum"}}
    sv.graph(safe).invoke({"v": (sv.Color.RED, sv.values()["fraction"])}, cfg)
    hist = list(sv.graph(SnapstoreSaver(repo, serde=SafeSerializer(types=sv.TYPES))).get_state_history(cfg))
    assert len(hist) == 6  # two invokes of 3 checkpoints each; the older 3 written by the default
    assert [(h.metadata["source"], type(h.values.get("v")).__name__) for h in hist] == [
        ("loop", "tuple"), ("loop", "tuple"), ("input", "Color"),  # SafeSerializer's
        ("loop", "Color"), ("loop", "Color"), ("input", "NoneType")]  # the default's, decoded
    got = sv.graph(SnapstoreSaver(repo, serde=SafeSerializer(types=sv.TYPES))).get_state(cfg).values["v"]
    assert sv.same(got, (sv.Color.RED, sv.values()["fraction"]))


def test_unknown_type_is_refused_at_put_naming_type_and_path(tmp_path):
    class Opaque:
        pass

    saver = SnapstoreSaver(tmp_path / "r", serde="safe")
    cfg = {"configurable": {"thread_id": "t"}}
    with pytest.raises(UnsupportedValueError) as ei:
        sv.graph(saver).invoke({"v": {"a": [1, {"b": Opaque()}]}}, cfg)
    e = ei.value
    assert "Opaque" in e.type_name and e.type_name.startswith(__name__)
    assert e.path == "channel '__start__' ['v']['a'][1]['b']"  # the input checkpoint holds it first
    assert isinstance(e, InvalidInputError)
    assert saver.get_tuple(cfg) is None  # nothing stored
    # a node's output: its write is refused, naming the channel and the task
    b = StateGraph(sv.State)
    b.add_node("n", lambda s: {"v": {"k": (1, Opaque())}})
    b.add_edge(START, "n")
    with pytest.raises(UnsupportedValueError) as ei:
        b.compile(checkpointer=saver).invoke({"v": 1}, cfg)
    assert ei.value.path.startswith("write to channel 'v' (task ") and ei.value.path.endswith(") ['k'][1]")
    assert saver.get_tuple(cfg).checkpoint["channel_values"]["v"] == 1  # the step before it
    # an unregistered enum: the hint says how to register it
    with pytest.raises(UnsupportedValueError, match=r"SafeSerializer\(types=\[Color\]\)"):
        sv.graph(saver).invoke({"v": sv.Color.RED}, {"configurable": {"thread_id": "t2"}})
    # a subclass of a builtin is not silently stored as its base
    class MyDict(dict):
        pass
    with pytest.raises(UnsupportedValueError, match="subclasses of builtin"):
        SafeSerializer().dumps_typed([MyDict()])


def test_stored_data_names_no_module_and_decoding_imports_nothing():
    s = SafeSerializer(types=sv.TYPES)
    t, b = s.dumps_typed(list(sv.values().values()))
    assert t == TYPE
    for word in (b"fractions", b"pathlib", b"pydantic", b"serde_values", b"decimal", b"langchain_core", b"uuid"):
        assert word not in b, word
    # a stored name only ever looks up the registry: a module path is just an unknown name
    crafted = ormsgpack.packb(ormsgpack.Ext(61, ormsgpack.packb(["os.system", {"command": "true"}])))
    with pytest.raises(UnregisteredTypeError, match="os.system"):
        s.loads_typed((TYPE, crafted))
    with pytest.raises(IntegrityError, match="type tag 99"):
        s.loads_typed((TYPE, ormsgpack.packb(ormsgpack.Ext(99, b"\x90"))))
    with pytest.raises(IntegrityError):
        s.loads_typed((TYPE, b"\xc1"))
    # written with Color registered, read without: a typed error naming it
    t, b = s.dumps_typed({"c": sv.Color.RED})
    with pytest.raises(UnregisteredTypeError, match="'Color'"):
        SafeSerializer().loads_typed((t, b))


def test_protocol_options_and_registration_errors(tmp_path):
    assert isinstance(SafeSerializer(), SerializerProtocol)
    assert isinstance(SnapstoreSaver(tmp_path / "a", serde="safe").serde, SafeSerializer)
    assert isinstance(SnapstoreSaver(tmp_path / "b").serde, JsonPlusSerializer)  # the default stays
    with pytest.raises(InvalidInputError, match="unknown serde"):
        SnapstoreSaver(tmp_path / "c", serde="pickle")
    with pytest.raises(InvalidInputError, match="none of them"):
        SafeSerializer(types=[int])
    with pytest.raises(InvalidInputError, match="not a usable name"):
        SafeSerializer(types={"lg.Mine": sv.Color})
    s = SafeSerializer(types={"colour": sv.Color})
    assert s.loads_typed(s.dumps_typed(sv.Color.RED)) is sv.Color.RED
    with pytest.raises(UnsupportedValueError, match="nested more than"):
        cyc: list = []
        cyc.append(cyc)
        s.dumps_typed(cyc)


class S(TypedDict):
    items: list
    out: Annotated[list, operator.add]


def test_send_interrupt_and_resume_in_a_fresh_saver(tmp_path):
    """Parallel Send branches carrying exact values, an interrupt, a resume from another saver."""
    def fan(s):
        return [Send("work", {"x": x}) for x in s["items"]]

    def work(s):
        return {"out": [(s["x"], s["x"] * 2)]}

    def ask(s):
        answer = interrupt({"question": Fraction(1, 3), "where": sv.values()["pure_posix_path"]})
        return {"out": [answer]}

    def build(saver):
        b = StateGraph(S)
        b.add_node("work", work)
        b.add_node("ask", ask)
        b.add_conditional_edges(START, fan, ["work"])
        b.add_edge("work", "ask")
        return b.compile(checkpointer=saver)

    repo = tmp_path / "r"
    cfg = {"configurable": {"thread_id": "t"}}
    items = [Fraction(1, 2), complex(1, 1), Fraction(5)]
    first = build(SnapstoreSaver(repo, serde="safe")).invoke({"items": items, "out": []}, cfg)
    intr = first["__interrupt__"][0]
    assert isinstance(intr, Interrupt) and intr.value["question"] == Fraction(1, 3)
    g2 = build(SnapstoreSaver(repo, serde="safe"))  # a fresh saver: interrupt read from the store
    pending = g2.get_state(cfg).tasks[0].interrupts[0]
    assert sv.same(pending.value, intr.value)
    done = g2.invoke(Command(resume=range(3)), cfg)
    assert sorted(done["out"][:3], key=repr) == sorted([(x, x * 2) for x in items], key=repr)
    assert all(type(o) is tuple for o in done["out"][:3])
    assert done["out"][3] == range(3)


LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), st.binary(),
    st.fractions(), st.complex_numbers(allow_nan=False), st.decimals(allow_nan=False),
    st.builds(range, st.integers(-5, 5), st.integers(-5, 5), st.integers(1, 3)),
    st.builds(lambda s: sv.pathlib.PurePosixPath("/" + s), st.text("abc/ ", max_size=8)),
    st.builds(lambda s: sv.pathlib.PureWindowsPath("C:\\" + s), st.text("abc\\", max_size=8)),
    st.uuids(), st.datetimes(timezones=st.none() | st.timezones()), st.dates(), st.times(), st.timedeltas(),
    st.sampled_from(list(sv.Color)),
)
HASHABLE = st.one_of(st.integers(), st.text(), st.fractions(), st.tuples(st.integers(), st.text()),
                     st.frozensets(st.integers(), max_size=3))
VALUES = st.recursive(
    LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner),
        st.dictionaries(st.text(), inner, max_size=4), st.dictionaries(HASHABLE, inner, max_size=3),
        st.sets(HASHABLE, max_size=3), st.builds(sv.Pair, inner, inner),
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_property_nested_values_round_trip_exactly(v):
    s = SafeSerializer(types=sv.TYPES)
    back = s.loads_typed(s.dumps_typed(v))
    assert sv.same(back, v), (v, back)
