"""Every run-scoped endpoint answers a request about an unknown run with 404 ``run_not_found``,
a JSON error naming the run (in its message and its ``runId``), whatever checkpoint id the path
names (trial 12). The endpoints are taken from the app's own OpenAPI document, so a new one is
covered; a run that exists with an unknown checkpoint is ``checkpoint_not_found`` naming both."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.server import ServerSettings, create_app  # noqa: E402
from tests.helpers.server_fixtures import TOKEN, auth  # noqa: E402

GHOST = "ghost run"


def _run_scoped(doc: dict):
    """(method, path template, query names) of every operation taking a run id (path or query)."""
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            params = op.get("parameters", [])
            names = {p["name"] for p in params}
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if "runId" in names or (path == "/prune"):
                yield method.upper(), path, {p["name"] for p in params if p["in"] == "query"}, bool(body)


def _request(client, method, path, query, cid, run):
    url = path.replace("{runId}", run.replace(" ", "%20")).replace("{checkpointId}", cid).replace("{name}", "agent")
    params = {}
    if "runId" in query:
        params["runId"] = run
    if "from" in query:
        params.update({"from": cid, "to": cid})
    body = None
    if path.endswith("/fork"):
        body = {"newRunId": "forked"}
    elif path == "/prune":
        body = {"runId": run, "keepLast": 1}
    elif method == "POST" and path == "/runs/{runId}/checkpoints":
        return None  # a save creates the run: not a request about an unknown run
    return client.request(method, url, params=params, json=body, headers=auth())


def test_every_run_scoped_endpoint_is_404_naming_an_unknown_run(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    cid = mgr.save("real", [{"role": "user", "content": "hello"}], agent_id="agent")
    app = create_app(mgr, ServerSettings(token=TOKEN))
    client = TestClient(app)
    ops = list(_run_scoped(app.openapi()))
    assert len(ops) >= 12, ops  # the agents', runs', checkpoints' routes and /prune
    seen = 0
    for method, path, query, _ in ops:
        r = _request(client, method, path, query, cid, GHOST)
        if r is None:
            continue
        seen += 1
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        err = r.json()["error"]
        assert err["code"] == "run_not_found" and err["runId"] == GHOST, (method, path, err)
        assert repr(GHOST) in err["message"], (method, path, err)
    assert seen == len(ops) - 1
    assert mgr.runs() == ["real"]  # nothing was created or changed


def test_an_unknown_checkpoint_of_a_known_run_names_both(tmp_path):
    mgr = CheckpointManager(str(tmp_path / "repo"))
    mgr.save("real", [{"role": "user", "content": "hello"}])
    client = TestClient(create_app(mgr, ServerSettings(token=TOKEN)))
    ghost_cp = "01a200000000000000ff-0"
    for method, url in (("GET", f"/runs/real/checkpoints/{ghost_cp}"), ("GET", f"/runs/real/checkpoints/{ghost_cp}/messages"),
                        ("DELETE", f"/runs/real/checkpoints/{ghost_cp}"),
                        ("POST", f"/runs/real/checkpoints/{ghost_cp}/rollback")):
        r = client.request(method, url, headers=auth())
        err = r.json()["error"]
        assert r.status_code == 404 and err["code"] == "checkpoint_not_found" and err["runId"] == "real", err
        assert ghost_cp in err["message"] and "'real'" in err["message"]
