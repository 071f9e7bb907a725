"""The OpenAPI document the app serves (/openapi.json, committed as docs/openapi.json) says what
the server does: a walk over the document sends, for every path, operation, query parameter and
body field, values the document allows and values it refuses, and checks that the server takes
exactly the first (no 422) and refuses the second (422), and that every status it answers and
the headers it promises are documented.

In-process (ASGI, no sockets); about 2 s. Complements test_fuzz.py (random requests over
real HTTP) with the cases a random walk rarely reaches: 405 with ``Allow``, bodies nested 100,000
deep or not UTF-8, oversized bodies on any route, cursor forms and the prune rules' bounds."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
jsonschema = pytest.importorskip("jsonschema")
from fastapi.testclient import TestClient  # noqa: E402

from tests.helpers.server_fixtures import TOKEN, auth  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.server import ServerSettings, create_app  # noqa: E402
from snapstore.stores.memory import MemoryStore  # noqa: E402

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
MAX_BODY = 1 << 20


@pytest.fixture(scope="module")
def client():
    mgr = CheckpointManager(MemoryStore())
    base = [{"role": "user", "content": "hi"}]
    mgr.save("r", base, checkpoint_id="c1", agent_id="a")
    mgr.save("r", base + [{"role": "assistant", "content": "hello"}], checkpoint_id="c2", agent_id="a")
    app = create_app(mgr, ServerSettings(token=TOKEN, max_body_bytes=MAX_BODY))
    with TestClient(app, raise_server_exceptions=False) as c:
        c.headers.update(auth())
        yield c
    mgr.close()


@pytest.fixture(scope="module")
def doc(client):
    return client.get("/openapi.json").json()


def _concrete(path: str) -> str:
    return path.replace("{runId}", "r").replace("{checkpointId}", "c1").replace("{name}", "a")


def _ops(doc):
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield path, method.upper(), op


def _valid(doc, schema, value) -> bool:
    """Whether ``value`` fits ``schema`` (a fragment of ``doc``; $refs resolved against it)."""
    root = dict(schema, components=doc.get("components", {}))
    return jsonschema.Draft202012Validator(root).is_valid(value)


def _body_schema(doc, op) -> dict:
    return op["requestBody"]["content"]["application/json"]["schema"]


def _documented(op, status: int) -> bool:
    return str(status) in op["responses"]


# ---- status codes and headers ------------------------------------------------------------------

def test_every_path_answers_405_with_allow_naming_exactly_its_documented_methods(client, doc):
    for path, ops in doc["paths"].items():
        documented = {m.upper() for m in ops}
        for method in METHODS:
            if method in documented:
                continue
            r = client.request(method, _concrete(path))
            assert r.status_code == 405, (method, path, r.status_code)
            allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
            assert allow == documented, (method, path, r.headers.get("allow"))
            if method != "HEAD":
                assert r.json()["error"]["code"] == "method_not_allowed"
    assert "405" in doc["info"]["description"] and "Allow" in doc["info"]["description"]


def test_undecodable_and_too_deep_bodies_get_a_documented_status(client, doc):
    bodies = {"100k deep, unclosed": b"[" * 100_000, "100k deep, closed": b"[" * 100_000 + b"]" * 100_000,
              "100k deep objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
              "not UTF-8": b'{"x": "\xff\xfe"}', "truncated": b'{"keepLast": ', "empty object key": b"{,}"}
    seen = 0
    for path, method, op in _ops(doc):
        if "requestBody" not in op:
            continue
        for what, body in bodies.items():
            r = client.request(method, _concrete(path), content=body, headers={"Content-Type": "application/json"})
            assert _documented(op, r.status_code), (method, path, what, r.status_code, r.text[:200])
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", (method, path, what, r.text[:200])
            seen += 1
    assert seen >= 4 * len(bodies)


def test_oversized_bodies_get_a_documented_413_on_every_operation(client, doc):
    for path, method, op in _ops(doc):
        if method == "HEAD":
            continue
        r = client.request(method, _concrete(path), content=b"x" * (MAX_BODY + 1),
                           headers={"Content-Type": "application/json"})
        assert r.status_code == 413, (method, path, r.status_code)
        assert _documented(op, 413), (method, path)


def test_documented_response_headers_are_sent(client, doc):
    anon = TestClient(client.app, raise_server_exceptions=False)
    seen = 0
    for path, method, op in _ops(doc):
        if not op.get("security"):
            continue
        r = anon.request(method, _concrete(path))
        assert r.status_code == 401
        headers = op["responses"]["401"].get("headers", {})
        assert "WWW-Authenticate" in headers, (method, path)
        for name, h in headers.items():
            assert name.lower() in r.headers or not h.get("required"), (method, path, name)
            assert _valid(doc, h["schema"], r.headers[name.lower()]), (method, path, name)
        seen += 1
    assert seen >= 15


# ---- query parameters --------------------------------------------------------------------------

QUERY_PROBES = ["", "0", "1", "5", "50", "1000", "1001", "-1", "1.5", "abc", "9" * 20, "9" * 21, "9" * 41,
                "\u0661\u0662", " 7", "c1"]


def _query_value(schema, text: str):
    """The wire text as the schema's type reads it (None: not that type). OpenAPI leaves the text
    form of an integer open; blanks around the digits are taken as the framework takes them."""
    types = {s.get("type") for s in schema.get("anyOf", [schema])}
    if "integer" in types:
        t = text.strip()
        return int(t) if t.isascii() and t.lstrip("-").isdigit() else None
    return text


def test_query_parameters_are_refused_exactly_when_the_document_refuses_them(client, doc):
    checked = 0
    for path, method, op in _ops(doc):
        if method != "GET":
            continue
        params = [p for p in op.get("parameters", []) if p["in"] == "query"]
        required = {p["name"]: ("r" if p["name"] == "runId" else "c1") for p in params if p.get("required")}
        for p in params:
            if p["name"] in ("runId", "from", "to"):
                continue
            for text in QUERY_PROBES:
                value = _query_value(p["schema"], text)
                ok = value is not None and _valid(doc, p["schema"], value)
                r = client.get(_concrete(path), params={**required, p["name"]: text})
                assert _documented(op, r.status_code), (path, p["name"], text, r.status_code)
                assert (r.status_code != 422) == ok, (path, p["name"], text, "document says " +
                                                      ("valid" if ok else "invalid"), r.status_code, r.text[:200])
                checked += 1
    assert checked >= 5 * len(QUERY_PROBES)


def test_a_next_cursor_fits_the_cursor_parameter(client, doc):
    for path, param in (("/runs/{runId}/checkpoints", "cursor"), ("/agents/{name}/checkpoints", "cursor")):
        op = doc["paths"][path]["get"]
        schema = next(p["schema"] for p in op["parameters"] if p["name"] == param)
        extra = {"runId": "r"} if "agents" in path else {}
        page = client.get(_concrete(path), params={**extra, "limit": 1}).json()
        assert page["nextCursor"] is not None
        assert _valid(doc, schema, page["nextCursor"]), (path, page["nextCursor"], schema)
        nxt_schema = doc["components"]["schemas"]["CheckpointPage"]["properties"]["nextCursor"]
        assert _valid(doc, nxt_schema, page["nextCursor"])


# ---- request bodies: the prune rules -----------------------------------------------------------

DURATION_PROBES = [None, 0, 1, 3600, 1.5, -1, -0.5, 1e13, 86399999999999.0, 86399999999999.98,
                   86400000000000.0, 1e14, 1e300, True, False, "7d", "1d12h", "3600", "1.5h", "2w", "1y",
                   "7D", " 7d", "7d ", "xx", "", "-1d", "7 d", "\u0661\u0662", "1e3", [], {}]
COUNT_PROBES = [None, 0, 1, 1000, 10**9, 10**9 + 1, -1, 1.0, 1.5, True, "3", [], 2**64]


def test_prune_bodies_are_refused_exactly_when_the_document_refuses_them(client, doc):
    op = doc["paths"]["/prune"]["post"]
    schema = _body_schema(doc, op)
    props = doc["components"]["schemas"]["PruneRequest"]["properties"]
    rules = [k for k in props if k not in ("runId", "dryRun")]
    assert set(rules) == {"keepLast", "olderThan", "keepWithin", "keepHourly", "keepDaily", "keepWeekly",
                          "keepMonthly", "keepYearly"}
    cases = [{}, {"dryRun": True}, {"runId": "r", "dryRun": True}, {"keepLast": None, "dryRun": True},
             {"nope": 1, "keepLast": 1, "dryRun": True}, {"dryRun": 1, "keepLast": 1}, {"dryRun": "yes", "keepLast": 1},
             {"runId": "", "keepLast": 1, "dryRun": True}, {"runId": 5, "keepLast": 1, "dryRun": True},
             {"runId": "nope", "keepLast": 1, "dryRun": True}, [], None, "keepLast"]
    for rule in rules:
        for v in (DURATION_PROBES if rule in ("olderThan", "keepWithin") else COUNT_PROBES):
            cases.append({rule: v, "dryRun": True})
            cases.append({rule: v, "keepLast": 1, "dryRun": True})  # another rule keeps the body valid
    for body in cases:
        ok = _valid(doc, schema, body)
        r = client.post("/prune", content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert _documented(op, r.status_code), (body, r.status_code, r.text[:200])
        if ok and isinstance(body, dict) and body.get("runId") == "nope":  # valid, but no such run
            assert r.status_code == 404 and r.json()["error"]["code"] == "run_not_found", (body, r.text[:200])
            continue
        assert (r.status_code == 200) == ok, (body, "document says " + ("valid" if ok else "invalid"),
                                              r.status_code, r.text[:200])
        if not ok:
            assert r.status_code == 422, (body, r.text[:200])


def test_durations_the_pattern_allows_but_that_pass_the_maximum_are_refused_as_documented(client, doc):
    """The one refusal a JSON schema cannot state: text durations longer than 999,999,999 days."""
    op = doc["paths"]["/prune"]["post"]
    desc = doc["components"]["schemas"]["PruneRequest"]["description"]
    assert "999,999,999 days" in desc
    for text in ("2739727y", "99999999999999999999d"):
        body = {"olderThan": text, "dryRun": True}
        assert _valid(doc, _body_schema(doc, op), body)
        r = client.post("/prune", json=body)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", r.text


def test_gc_bodies_are_refused_exactly_when_the_document_refuses_them(client, doc):
    op = doc["paths"]["/gc"]["post"]
    schema = _body_schema(doc, op)
    cases = [None, {}, {"dryRun": True}, {"gracePeriod": 0, "dryRun": True}, {"gracePeriod": -1, "dryRun": True},
             {"gracePeriod": 3153600000, "dryRun": True}, {"gracePeriod": 3153600001, "dryRun": True},
             {"gracePeriod": False, "dryRun": True}, {"gracePeriod": "1h", "dryRun": True}, {"dryRun": 1},
             {"x": 1, "dryRun": True}, [], "x"]
    for body in cases:
        ok = _valid(doc, schema, body)
        r = client.post("/gc", content=json.dumps(body), headers={"Content-Type": "application/json"})
        assert _documented(op, r.status_code), (body, r.status_code)
        assert (r.status_code == 200) == ok, (body, ok, r.status_code, r.text[:200])


def test_the_longest_duration_as_a_float_is_refused_not_overflowed():
    """timedelta.max.total_seconds() rounds up to 86,400,000,000,000.0, which passed the library's
    check and overflowed timedelta (POST /prune answered 500 before the schema bound it)."""
    from snapstore.errors import InvalidInputError
    from snapstore.manager.retention import DURATION_MAX, Policy

    with pytest.raises(InvalidInputError, match="older_than"):
        Policy.make(older_than=DURATION_MAX)
