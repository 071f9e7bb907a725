"""Property-based tests (hypothesis): any JSON value and any run id either round-trips exactly or
is refused with a typed error, and a refused save stores nothing.

Values cover what breaks JSON stores: nesting up to 400 levels (the limit is 254), integers far
outside 64 bits, lone and paired surrogates, NUL, strings long enough to be split by FastCDC,
odd dict keys (empty, NUL, surrogates, very long), NaN/Infinity, non-string keys and non-JSON
objects. Run ids: any string (``../x``, slashes, surrogates, NUL, 300 characters), the empty
string and non-strings. Each example runs against a real local store in a fresh temporary
directory; "nothing stored" is checked on the files themselves.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError, InvalidMessageError, InvalidRunIdError
from snapstore.format.codec import MAX_DEPTH
from snapstore.stores.local import LocalStore

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                         HealthCheck.data_too_large])

# every code point, surrogates and NUL included
chars = st.characters(exclude_categories=(), include_characters="\x00")
text = st.text(chars, max_size=40)
tricky_text = st.lists(st.sampled_from(["\ud800", "\udc00", "\udbff\udfff", "\x00", "a", "\u00e9", "\U0001f600", '"', "\\"]),
                      max_size=8).map("".join)
long_text = st.builds(lambda c, n: c * n, st.text(chars, min_size=1, max_size=3), st.integers(20_000, 60_000))
odd_keys = st.one_of(text, st.sampled_from(["", "\x00", "\ud800", "\udfff\ud800", "__proto__", "k" * 5000]))
big_ints = st.integers(min_value=-(2 ** 300), max_value=2 ** 300)
scalars = st.one_of(st.none(), st.booleans(), st.integers(), big_ints, st.floats(allow_nan=False, allow_infinity=False),
                    text, tricky_text)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                           st.dictionaries(odd_keys, inner, max_size=4)),
                           max_leaves=12)


def _nest(leaf, depth: int, kinds: str):
    v = leaf
    for i in range(depth):
        v = [v] if kinds[i % len(kinds)] == "l" else {"k": v}
    return v


deep = st.builds(_nest, scalars, st.integers(MAX_DEPTH - 4, MAX_DEPTH + 150) | st.integers(1, 400),
                 st.sampled_from(["l", "d", "ld"]))
bad_leaf = st.sampled_from([float("nan"), float("inf"), -float("inf"), {1: "int key"}, {None: 1}, {1, 2}, b"bytes",
                            object(), (1, {"x": float("nan")})])
bad_values = st.builds(_nest, bad_leaf, st.integers(0, 5), st.sampled_from(["l", "d"]))
values = st.one_of(json_values, json_values, json_values, deep, long_text, bad_values,
                   st.lists(json_values, max_size=3).map(lambda x: x + [float("nan")]))


def is_json(v) -> bool:
    """Independent oracle: an exact JSON value snapstore must accept (iterative; depth limit)."""
    stack = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if x is None or type(x) in (bool, int, str):
            continue
        if type(x) is float:
            if not math.isfinite(x):
                return False
            continue
        if type(x) in (list, dict):
            if depth > MAX_DEPTH:
                return False
            if type(x) is dict:
                if not all(type(k) is str for k in x):
                    return False
                stack.extend((y, depth + 1) for y in x.values())
            else:
                stack.extend((y, depth + 1) for y in x)
            continue
        return False
    return True


def canon(v) -> str:
    """A representation that tells 1, 1.0, True and -0.0 apart and keeps key order."""
    return json.dumps(v, ensure_ascii=True, allow_nan=True)


def _files(root: str) -> dict:
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out[p] = os.path.getsize(p)
    return out


@SETTINGS
@given(messages=st.lists(values, min_size=1, max_size=3), state=values, metadata=values)
def test_any_value_round_trips_exactly_or_is_refused_with_nothing_stored(messages, state, metadata):
    valid = all(is_json(m) for m in messages) and is_json(state) and is_json(metadata)
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        try:
            if not valid:
                # an empty location: refused before a repository is created
                with pytest.raises(InvalidMessageError):
                    mgr.save("run", messages, session_state=state, metadata=metadata)
                assert not os.path.exists(root) or _files(root) == {}
                # an existing repository: refused, nothing new stored
                mgr.save("run", [{"ok": 1}])
                before = _files(root)
                with pytest.raises(InvalidMessageError):
                    mgr.save("run", [{"ok": 1}] + messages, session_state=state, metadata=metadata)
                assert _files(root) == before
                assert [canon(m) for m in mgr.latest("run").messages] == [canon({"ok": 1})]
                return
            cid = mgr.save("run", messages, session_state=state, metadata=metadata)
        finally:
            mgr.close()
        again = CheckpointManager(LocalStore(root, fsync=False))  # a cold reader: nothing cached
        try:
            cp = again.get("run", cid)
            assert [canon(m) for m in cp.messages] == [canon(m) for m in messages]
            assert canon(cp.session_state) == canon(state)
            assert canon(cp.metadata) == canon(metadata)
        finally:
            again.close()


run_ids = st.one_of(st.text(chars, min_size=1, max_size=30), st.sampled_from(["../x", "a/b", "/", ".", "..", "A", "a",
                                                                          "\x00", "\ud800", "x" * 300, " "]),
                    st.text(chars, min_size=100, max_size=300))
bad_run_ids = st.one_of(st.just(""), st.integers(), st.none(), st.binary(max_size=5), st.lists(st.text(max_size=2)))


@SETTINGS
@given(ids=st.lists(run_ids, min_size=1, max_size=4, unique=True), bad=bad_run_ids)
def test_any_run_id_round_trips_or_is_refused(ids, bad):
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "repo")
        mgr = CheckpointManager(LocalStore(root, fsync=False))
        try:
            with pytest.raises(InvalidRunIdError):
                mgr.save(bad, [{"m": 1}])
            assert not os.path.exists(root) or _files(root) == {}
            for i, rid in enumerate(ids):
                mgr.save(rid, [{"run": rid, "i": i}])
            before = _files(root)
            with pytest.raises(InvalidInputError):
                mgr.save(bad, [{"m": 1}])
            assert _files(root) == before
        finally:
            mgr.close()
        again = CheckpointManager(LocalStore(root, fsync=False))
        try:
            assert again.runs() == sorted(ids)
            for i, rid in enumerate(ids):
                assert canon(again.latest(rid).messages) == canon([{"run": rid, "i": i}])
                assert again.latest(rid).run_id == rid
        finally:
            again.close()
