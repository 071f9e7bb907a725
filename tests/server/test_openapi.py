"""docs/openapi.json is the document the service serves at /openapi.json (over real HTTP): this
fails when the app's routes or models change without ``python -m snapstore.server.openapi
docs/openapi.json`` being rerun."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from tests.helpers.server_fixtures import TOKEN, running_server  # noqa: E402

from snapstore.server import ServerSettings, create_app  # noqa: E402
from snapstore.server.openapi import render  # noqa: E402
from tests.helpers import paths

DOC = paths.ROOT / "docs" / "openapi.json"


def test_committed_openapi_document_is_what_the_app_serves(tmp_path):
    committed = DOC.read_text(encoding="utf-8")
    app = create_app(str(tmp_path / "repo"), ServerSettings(token=TOKEN, max_body_bytes=1000, cors_origins=("http://x",)))
    with running_server(app) as url:
        served = httpx.get(url + "/openapi.json").json()  # public, whatever the settings
    assert json.loads(committed) == served, "docs/openapi.json is stale: run python -m snapstore.server.openapi docs/openapi.json"
    assert committed == render(served)


def test_document_covers_the_issue_routes():
    doc = json.loads(DOC.read_text(encoding="utf-8"))
    ops = {(m.upper(), p) for p, v in doc["paths"].items() for m in v}
    for need in [("GET", "/agents/{name}/checkpoints"), ("POST", "/agents/{name}/rollback/{checkpointId}"),
                 ("GET", "/runs"), ("DELETE", "/runs/{runId}"), ("GET", "/runs/{runId}/checkpoints"),
                 ("POST", "/runs/{runId}/checkpoints"), ("GET", "/runs/{runId}/checkpoints/{checkpointId}"),
                 ("GET", "/runs/{runId}/checkpoints/{checkpointId}/messages"),
                 ("DELETE", "/runs/{runId}/checkpoints/{checkpointId}"),
                 ("POST", "/runs/{runId}/checkpoints/{checkpointId}/fork"), ("POST", "/prune"), ("POST", "/gc"),
                 ("GET", "/stats"), ("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/runs/{runId}/diff")]:
        assert need in ops, need
    assert doc["components"]["securitySchemes"]["bearerToken"] == {
        "type": "http", "description": "the server's token ($SNAPSTORE_TOKEN or --token-file)", "scheme": "bearer"}
    rb = doc["paths"]["/agents/{name}/rollback/{checkpointId}"]["post"]
    assert {"runId", "expectHead"} <= {p["name"] for p in rb["parameters"]}
    assert {"404", "409"} <= set(rb["responses"])
