"""Schemathesis against the committed OpenAPI document (docs/openapi.json), over real HTTP to
uvicorn on 127.0.0.1 with a local store: property-based requests to every operation, with and
without valid data; no response may be a 5xx, and every response must conform to the document
(status code documented, content type, body schema).

Generated ids are swapped, for about half the cases, for those of a run seeded before each
case, so that fuzzed saves, rollbacks, forks and deletes also meet real checkpoints."""

from __future__ import annotations

import json
import zlib

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,  # noqa: E402
                                               status_code_conformance)

from tests.helpers.server_fixtures import TOKEN, auth, running_server  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.server import ServerSettings, create_app  # noqa: E402
from tests.helpers import paths

DOC = paths.ROOT / "docs" / "openapi.json"
schema = schemathesis.openapi.from_dict(json.loads(DOC.read_text(encoding="utf-8")))

RUN = "demo/run"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    mgr = CheckpointManager(str(tmp_path_factory.mktemp("fuzz") / "repo"))
    app = create_app(mgr, ServerSettings(token=TOKEN, max_body_bytes=1 << 20))
    with running_server(app) as url:
        yield url, mgr
    mgr.close()


def _seed(mgr: CheckpointManager) -> None:
    """Re-create the seeded run if a fuzzed request changed it (in a thread of its own: a fresh
    caller of the manager, as each request of the server is)."""
    import threading
    failed = []

    def run():
        try:
            _seed_now(mgr)
        except BaseException as e:  # re-raised in the test's thread
            failed.append(e)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    if failed:
        raise failed[0]


def _seed_now(mgr: CheckpointManager) -> None:
    ids = [s.id for s in mgr.list(RUN)]
    if "cp-2" in ids:
        return
    if ids:
        mgr.delete(RUN)
    base = [{"role": "user", "content": "hi"}]
    mgr.save(RUN, base, step=1, agent_id="coder", checkpoint_id="cp-1")
    mgr.save(RUN, base + [{"role": "assistant", "content": "hello", "tool_calls": []}], step=2,
             agent_id="coder", checkpoint_id="cp-2", parent_id="cp-1")


def _aim(case) -> None:
    """Point about half the generated cases at the seeded run and its checkpoints."""
    h = zlib.crc32(repr((case.path_parameters, case.query)).encode())
    if h % 2:
        return
    pp = case.path_parameters or {}
    for k, v in (("runId", RUN), ("checkpointId", "cp-1" if h % 3 else "cp-2"), ("name", "coder")):
        if k in pp:
            pp[k] = v
    q = case.query if isinstance(case.query, dict) else None
    if q is not None and "runId" in q:
        q["runId"] = RUN
    if q is not None and "expectHead" in q and h % 5 == 0:
        q["expectHead"] = "cp-2"


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much, HealthCheck.data_too_large])
def test_fuzz_api_conforms_and_never_5xx(case, served):
    url, mgr = served
    _seed(mgr)
    _aim(case)
    case.call_and_validate(base_url=url, headers=auth(), checks=CHECKS, timeout=30)


def test_fuzz_refuses_every_operation_without_a_token(served):
    """Each operation that needs the token answers 401 (documented) without it."""
    import httpx
    url, _ = served
    doc = json.loads(DOC.read_text(encoding="utf-8"))
    seen = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if not op.get("security"):
                continue
            assert "401" in op["responses"], (method, path)
            concrete = path.replace("{runId}", "r").replace("{checkpointId}", "c").replace("{name}", "a")
            r = httpx.request(method.upper(), url + concrete)
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token", (method, path, r.text)
            seen += 1
    assert seen >= 15
