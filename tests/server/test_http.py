"""The HTTP service over real HTTP: uvicorn on 127.0.0.1, httpx as the client, against the local
store on a temp dir and against moto's HTTP server (S3). Every endpoint; auth; 404/409/413/422."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

from tests.helpers.server_fixtures import TOKEN, auth, wait_healthy, running_server  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.server import ServerSettings, create_app  # noqa: E402
from tests.helpers import paths

ROOT = paths.ROOT


def seg(s: str) -> str:
    """A path segment for an id (``/`` as ``%2F``)."""
    return quote(s, safe="")


@pytest.fixture(params=["local", "s3-http"])
def client(request, store_factory):
    mgr = CheckpointManager(store_factory(request.param))
    app = create_app(mgr, ServerSettings(token=TOKEN, max_body_bytes=1 << 20))
    with running_server(app) as url, httpx.Client(base_url=url, headers=auth(), timeout=30) as c:
        c.app = app
        yield c
    mgr.close()


@pytest.fixture
def local_client(tmp_path):
    app = create_app(str(tmp_path / "repo"), ServerSettings(token=TOKEN, max_body_bytes=16 << 20))
    with running_server(app) as url, httpx.Client(base_url=url, headers=auth(), timeout=30) as c:
        yield c


def msgs(n: int) -> list:
    out = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(1, n):
        out.append({"role": "assistant", "content": f"step {i}", "tool_calls": [
            {"id": f"call-{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls {i}"})}}]}
            if i % 2 else {"role": "tool", "tool_call_id": f"call-{i - 1}", "content": "x" * (50 * i)})
    return out


def save(c, run: str, n: int, **fields):
    r = c.post(f"/runs/{seg(run)}/checkpoints", json={"messages": msgs(n), **fields})
    assert r.status_code == 201, r.text
    return r.json()


def error(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()["error"]
    assert body["code"] == code and body["status"] == status and body["message"]
    assert "Traceback" not in r.text
    return body


# ------------------------------------------------------------------------------------------------

def test_auth_refused_without_and_with_a_wrong_token(local_client):
    c = local_client
    save(c, "r", 2)
    base = str(c.base_url)
    with httpx.Client(base_url=base, timeout=10) as anon:
        for method, path in [("GET", "/runs"), ("GET", "/runs/r/checkpoints"), ("POST", "/runs/r/checkpoints"),
                             ("GET", "/agents/a/checkpoints?runId=r"), ("POST", "/gc"), ("GET", "/metrics"),
                             ("GET", "/stats"), ("DELETE", "/runs/r")]:
            r = anon.request(method, path)
            body = error(r, 401, "missing_token")
            assert r.headers["www-authenticate"].startswith("Bearer")
            r = anon.request(method, path, headers={"Authorization": "Bearer " + "w" * len(TOKEN)})
            error(r, 401, "invalid_token")
        error(anon.get("/runs", headers={"Authorization": "Basic " + TOKEN}), 401, "missing_token")
        error(anon.get("/runs", headers={"Authorization": "Bearer " + TOKEN[:-1]}), 401, "invalid_token")
        # nothing was deleted by the refused DELETE
        assert c.get("/runs").json()["runs"] == ["r"]
        # public: liveness, the page shell (no data in it) and the OpenAPI document
        assert anon.get("/healthz").json()["status"] == "ok"
        page = anon.get("/")
        assert page.status_code == 200 and "<title>snapstore</title>" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        assert anon.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        error(anon.get("/ui/nothing.js"), 404, "not_found")
        assert anon.get("/openapi.json").json()["info"]["title"] == "snapstore"


def test_seed_endpoints_list_paginate_and_roll_back(client):
    c = client
    run = "team/run 1"  # a slash and a space: one percent-encoded path segment / query value
    ids = [save(c, run, n, step=n, agentId="coder", tokenUsage={"input_tokens": 100 * n, "output_tokens": 10})["id"]
           for n in range(1, 6)]
    other = save(c, run, 6, step=6, agentId="reviewer")["id"]
    r = c.get("/agents/coder/checkpoints", params={"runId": run})
    page = r.json()
    assert r.status_code == 200 and page["runId"] == run and page["nextCursor"] is None
    assert [x["id"] for x in page["checkpoints"]] == ids[::-1]  # newest first, the reviewer's left out
    assert page["checkpoints"][0]["tokenUsage"] == {"input_tokens": 500, "output_tokens": 10}
    assert page["checkpoints"][0]["messageCount"] == 5 and page["checkpoints"][0]["step"] == 5
    # pagination: limit and cursor walk every checkpoint exactly once
    seen, cursor = [], None
    while True:
        params = {"runId": run, "limit": 2, **({"cursor": cursor} if cursor else {})}
        p = c.get("/agents/coder/checkpoints", params=params).json()
        assert len(p["checkpoints"]) <= 2
        seen += [x["id"] for x in p["checkpoints"]]
        cursor = p["nextCursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    assert [x["id"] for x in c.get(f"/runs/{seg(run)}/checkpoints").json()["checkpoints"]] == [other] + ids[::-1]
    # rollback: conditional on expectHead
    target = ids[1]
    body = error(c.post(f"/agents/coder/rollback/{target}", params={"runId": run, "expectHead": ids[4]}),
                 409, "head_mismatch")
    assert body["head"] == other
    assert len(c.get(f"/runs/{seg(run)}/checkpoints").json()["checkpoints"]) == 6  # nothing changed
    error(c.post(f"/agents/coder/rollback/{other}", params={"runId": run}), 404, "checkpoint_not_found")  # not coder's
    error(c.post("/agents/coder/rollback/no-such-id", params={"runId": run}), 404, "checkpoint_not_found")
    r = c.post(f"/agents/coder/rollback/{target}", params={"runId": run, "expectHead": other})
    assert r.status_code == 200 and r.json()["id"] == target
    left = [x["id"] for x in c.get(f"/runs/{seg(run)}/checkpoints").json()["checkpoints"]]
    assert left == [ids[1], ids[0]]  # later checkpoints deleted
    error(c.get(f"/runs/{seg(run)}/checkpoints/{ids[3]}"), 404, "checkpoint_not_found")
    # unknown run / agent
    error(c.get("/agents/coder/checkpoints", params={"runId": "nope"}), 404, "run_not_found")
    assert c.get("/agents/nobody/checkpoints", params={"runId": run}).json()["checkpoints"] == []
    error(c.get("/agents/coder/checkpoints"), 422, "invalid_request")  # runId missing
    error(c.get("/agents/coder/checkpoints", params={"runId": run, "cursor": "x1"}), 422, "invalid_request")
    error(c.get("/agents/coder/checkpoints", params={"runId": run, "limit": 0}), 422, "invalid_request")


def test_save_read_fork_diff_delete(client):
    c = client
    run = "ünïcode/../run"
    first = save(c, run, 3, expectHead="", sessionState={"cwd": "/repo", "files": ["a.py"]}, metadata={"task": "t"})
    assert first["parentId"] is None and first["metadata"] == {"task": "t"}
    error(c.post(f"/runs/{seg(run)}/checkpoints", json={"messages": msgs(4), "expectHead": ""}), 409, "head_mismatch")
    second = save(c, run, 8, expectHead=first["id"], step=2, checkpointId="my id/2")
    assert second["id"] == "my id/2" and second["parentId"] == first["id"]
    error(c.post(f"/runs/{seg(run)}/checkpoints", json={"messages": msgs(9), "checkpointId": "my id/2"}), 409, "conflict")
    # metadata and messages (streamed, with offset and limit), session state
    meta = c.get(f"/runs/{seg(run)}/checkpoints/{seg('my id/2')}").json()
    assert meta["messageCount"] == 8 and meta["seq"] == 1 and meta["runId"] == run
    full = c.get(f"/runs/{seg(run)}/checkpoints/{seg(first['id'])}/messages").json()
    assert full["messages"] == msgs(3) and full["total"] == 3 and full["sessionState"] == {"cwd": "/repo", "files": ["a.py"]}
    part = c.get(f"/runs/{seg(run)}/checkpoints/{seg('my id/2')}/messages", params={"offset": 2, "limit": 3}).json()
    assert part["messages"] == msgs(8)[2:5] and part["total"] == 8 and part["offset"] == 2
    error(c.get(f"/runs/{seg(run)}/checkpoints/nope/messages"), 404, "checkpoint_not_found")
    # diff
    d = c.get(f"/runs/{seg(run)}/diff", params={"from": first["id"], "to": "my id/2"}).json()
    assert [o["op"] for o in d["ops"]] == ["equal", "insert"]
    assert d["ops"][1]["toMessages"] == msgs(8)[3:] and d["fromCheckpoint"]["id"] == first["id"]
    error(c.get(f"/runs/{seg(run)}/diff", params={"from": first["id"], "to": "nope"}), 404, "checkpoint_not_found")
    # fork (and 409 when the new run exists)
    f = c.post(f"/runs/{seg(run)}/checkpoints/{seg(first['id'])}/fork", json={"newRunId": "forked"})
    assert f.status_code == 201 and f.json()["runId"] == "forked" and f.json()["messageCount"] == 3
    assert c.get("/runs/forked/checkpoints/" + seg(f.json()["id"]) + "/messages").json()["messages"] == msgs(3)
    error(c.post(f"/runs/{seg(run)}/checkpoints/{seg(first['id'])}/fork", json={"newRunId": "forked"}), 409, "conflict")
    error(c.post(f"/runs/{seg(run)}/checkpoints/nope/fork", json={"newRunId": "f2"}), 404, "checkpoint_not_found")
    error(c.post(f"/runs/{seg(run)}/checkpoints/{seg(first['id'])}/fork", json={}), 422, "invalid_request")
    assert c.get("/runs").json()["runs"] == sorted(["forked", run])
    assert c.get("/runs", params={"limit": 1}).json() == {"runs": ["forked"], "nextCursor": "forked"}
    assert c.get("/runs", params={"limit": 1, "cursor": "forked"}).json() == {"runs": [run], "nextCursor": None}
    # rollback on the run route, conditional
    error(c.post(f"/runs/{seg(run)}/checkpoints/{seg(first['id'])}/rollback", params={"expectHead": first["id"]}),
          409, "head_mismatch")
    # delete one checkpoint (conditional), then the run
    error(c.delete(f"/runs/{seg(run)}/checkpoints/{seg('my id/2')}", params={"expectHead": first["id"]}), 409,
          "head_mismatch")
    r = c.delete(f"/runs/{seg(run)}/checkpoints/{seg('my id/2')}", params={"expectHead": "my id/2"})
    assert r.status_code == 200 and r.json() == {"runId": run, "checkpointId": "my id/2"}
    assert [x["id"] for x in c.get(f"/runs/{seg(run)}/checkpoints").json()["checkpoints"]] == [first["id"]]
    error(c.delete(f"/runs/{seg(run)}/checkpoints/{seg('my id/2')}"), 404, "checkpoint_not_found")
    assert c.delete(f"/runs/{seg(run)}").json() == {"runId": run, "checkpointId": None}
    error(c.delete(f"/runs/{seg(run)}"), 404, "run_not_found")
    error(c.get(f"/runs/{seg(run)}/checkpoints"), 404, "run_not_found")
    assert c.get("/runs").json()["runs"] == ["forked"]


def test_prune_gc_stats_metrics(client):
    c = client
    for n in range(1, 7):
        save(c, "long", n)
    r = c.post("/prune", json={"keepLast": 2, "dryRun": True})
    assert r.status_code == 200 and r.json()["dryRun"] is True and len(r.json()["deleted"]) == 4
    assert len(c.get("/runs/long/checkpoints").json()["checkpoints"]) == 6  # dry run deleted nothing
    r = c.post("/prune", json={"keepLast": 2, "runId": "long"})
    assert len(r.json()["deleted"]) == 4
    assert len(c.get("/runs/long/checkpoints").json()["checkpoints"]) == 2
    error(c.post("/prune", json={}), 422, "invalid_request")
    error(c.post("/prune", json={"olderThan": "soon"}), 422, "invalid_request")
    error(c.post("/prune", json={"keepLast": -1}), 422, "invalid_request")
    error(c.post("/prune", json={"keepLast": 1, "unknown": 1}), 422, "invalid_request")
    dry = c.post("/gc", json={"gracePeriod": 0, "dryRun": True}).json()["report"]
    assert dry["dry_run"] is True
    rep = c.post("/gc", json={"gracePeriod": 0}).json()["report"]
    assert rep["dry_run"] is False and rep["live_checkpoints"] == 2
    assert c.post("/gc").status_code == 200  # no body: defaults
    error(c.post("/gc", json={"gracePeriod": -1}), 422, "invalid_request")
    st = c.get("/stats").json()["stats"]
    assert st["runs"] == 1 and st["checkpoints"] == 2 and st["stored_bytes"] > 0
    assert c.get(f"/runs/long/checkpoints/{c.get('/runs/long/checkpoints').json()['checkpoints'][-1]['id']}/messages"
                 ).json()["messages"] == msgs(5)  # what GC kept still restores
    m = c.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    assert 'snapstore_http_requests_total{method="POST",route="/prune",status="200"} 2.0' in text
    assert 'snapstore_http_request_duration_seconds_bucket{le="0.005",method="GET",route="/runs/{runId}/checkpoints"}' \
        in text or 'route="/runs/{runId}/checkpoints"' in text
    assert 'snapstore_store_requests_total{kind="PUT"}' in text and 'snapstore_store_bytes_total{direction="up"}' in text
    put = float(text.split('snapstore_store_requests_total{kind="PUT"} ')[1].split()[0])
    assert put >= 6
    # a run that does not exist is 404, not "nothing to prune" (a trial's typo went unnoticed)
    for dry in (False, True):
        error(c.post("/prune", json={"keepLast": 1, "runId": "nope", "dryRun": dry}), 404, "run_not_found")
    assert len(c.get("/runs/long/checkpoints").json()["checkpoints"]) == 2


def test_bad_requests_are_json_422_413_404_405(client):
    c = client
    save(c, "r", 2)
    error(c.post("/runs/r/checkpoints", json={"step": 1}), 422, "invalid_request")  # no messages
    error(c.post("/runs/r/checkpoints", json={"messages": "not a list"}), 422, "invalid_request")
    error(c.post("/runs/r/checkpoints", content=b"{not json", headers={"content-type": "application/json"}),
          422, "invalid_request")
    # NaN is not exact JSON: the library refuses it and stores nothing
    body = error(c.post("/runs/r/checkpoints", content=b'{"messages": [{"role": "user", "content": NaN}]}',
                        headers={"content-type": "application/json"}), 422, "invalid_message")
    assert "messages[0]" in body["message"]
    error(c.post("/runs/r/checkpoints", json={"messages": [], "checkpointId": ""}), 422, "invalid_request")
    assert len(c.get("/runs/r/checkpoints").json()["checkpoints"]) == 1
    # 413: announced by Content-Length, and streamed (chunked) past the limit
    big = json.dumps({"messages": [{"role": "tool", "content": "y" * (2 << 20)}]}).encode()
    error(c.post("/runs/r/checkpoints", content=big, headers={"content-type": "application/json"}), 413,
          "body_too_large")

    def chunks():
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]
    error(c.post("/runs/r/checkpoints", content=chunks(), headers={"content-type": "application/json"}), 413,
          "body_too_large")
    assert len(c.get("/runs/r/checkpoints").json()["checkpoints"]) == 1
    # a body under the limit still works after the refusals (the server is fine)
    save(c, "r", 3)
    error(c.get("/no/such/route"), 404, "not_found")
    error(c.put("/runs"), 405, "method_not_allowed")
    error(c.get("/runs/r/checkpoints/%FF%FE"), 422, "invalid_input")  # not UTF-8
    m = c.get("/metrics").text
    assert 'route="/runs/{runId}/checkpoints",status="413"' in m or 'status="413"' in m


def test_large_real_history_round_trips_and_streams(local_client, shared_dir):
    from snapstore.importers import load_trajectory
    _, convs = load_trajectory(str(shared_dir / "claudecode-cctrace-phase0.jsonl"))
    history = convs[0].checkpoints[-1]
    c = local_client
    r = c.post("/runs/cc/checkpoints", json={"messages": history, "step": len(history)})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    with c.stream("GET", f"/runs/cc/checkpoints/{seg(cid)}/messages") as resp:
        assert resp.headers.get("transfer-encoding") == "chunked"  # streamed, not one buffered body
        parts = list(resp.iter_raw())
    got = json.loads(b"".join(parts))
    assert got["messages"] == history and got["total"] == len(history)


def test_cors_is_off_unless_configured(tmp_path):
    origin = "http://127.0.0.1:9999"
    pre = {"Origin": origin, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "authorization"}
    app = create_app(str(tmp_path / "a"), ServerSettings(token=TOKEN))
    with running_server(app) as url:
        r = httpx.options(url + "/runs", headers=pre)
        assert "access-control-allow-origin" not in r.headers
        assert "access-control-allow-origin" not in httpx.get(url + "/runs", headers={**auth(), "Origin": origin}).headers
    app = create_app(str(tmp_path / "b"), ServerSettings(token=TOKEN, cors_origins=(origin,)))
    with running_server(app) as url:
        r = httpx.options(url + "/runs", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        r = httpx.options(url + "/runs", headers={**pre, "Origin": "http://evil.example"})
        assert r.headers.get("access-control-allow-origin") != "http://evil.example"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args, env=None, **kw):
    e = {k: v for k, v in os.environ.items() if k != "SNAPSTORE_TOKEN"}
    e.update(env or {})
    return [sys.executable, "-m", "snapstore", *args], dict(cwd=ROOT, env=e, **kw)


def test_cli_serve_token_rules(tmp_path):
    for args, env, needle in [
        (("serve",), {}, "bearer token is required"),
        (("serve", "--no-auth", "--host", "0.0.0.0"), {}, "only allowed on a loopback"),
        (("serve", "--host", "0.0.0.0"), {"SNAPSTORE_TOKEN": "short"}, "at least 16"),
        (("serve", "--token-file", str(tmp_path / "missing")), {}, "cannot read token file"),
    ]:
        cmd, kw = _cli("--repo", str(tmp_path / "r"), *args, env=env)
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw)
        assert p.returncode == 2 and needle in p.stderr, (args, p.stderr)


def test_cli_serve_runs_uvicorn_with_a_token_file(tmp_path):
    tf = tmp_path / "token"
    tf.write_text(TOKEN + "\n")
    port = _free_port()
    cmd, kw = _cli("--repo", str(tmp_path / "repo"), "serve", "--port", str(port), "--token-file", str(tf),
                   "--log-level", "warning")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, 30)
        assert httpx.get(url + "/runs").status_code == 401
        r = httpx.post(url + "/runs/x/checkpoints", headers=auth(), json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 201
        assert httpx.get(url + "/runs", headers=auth()).json()["runs"] == ["x"]
        assert "server" not in httpx.get(url + "/healthz").headers  # no server banner
    finally:
        proc.terminate()
        proc.wait(20)
    assert CheckpointManager(str(tmp_path / "repo")).latest("x").messages == [{"role": "user", "content": "hi"}]
    # a trial's typo in --repo served an empty location silently: the log says so (the repository
    # exists now, so a second start says nothing of the kind)
    err = proc.stderr.read().decode()
    assert f"no repository at {tmp_path / 'repo'} yet; the first save creates it" in err, err
    port = _free_port()
    cmd, kw = _cli("--repo", str(tmp_path / "repo"), "serve", "--port", str(port), "--token-file", str(tf),
                   "--log-level", "warning")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", 30)
    finally:
        proc.terminate()
        proc.wait(20)
    err = proc.stderr.read().decode()
    assert "serving" in err and "no repository" not in err, err


def test_concurrent_conditional_saves_one_wins(local_client):
    """Clients that read the same head and save with expectHead at the same moment: exactly one
    succeeds per round, the others get 409 head_mismatch naming the new head; nothing is lost."""
    import threading
    c = local_client
    head = save(c, "race", 1)["id"]
    base = str(c.base_url)
    for rnd in range(3):
        barrier = threading.Barrier(4)
        results = []

        def attempt(k):
            with httpx.Client(base_url=base, headers=auth(), timeout=30) as own:
                barrier.wait()
                r = own.post("/runs/race/checkpoints",
                             json={"messages": msgs(2 + rnd) + [{"role": "user", "content": f"writer {k}"}],
                                   "expectHead": head})
                results.append((k, r.status_code, r.json()))
        threads = [threading.Thread(target=attempt, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = [r for r in results if r[1] == 201]
        lost = [r for r in results if r[1] == 409]
        assert len(won) == 1 and len(lost) == 3, results
        new = won[0][2]["id"]
        assert all(r[2]["error"]["code"] == "head_mismatch" and r[2]["error"]["head"] == new for r in lost)
        assert won[0][2]["parentId"] == head
        head = new
    assert len(c.get("/runs/race/checkpoints").json()["checkpoints"]) == 4


def test_exact_json_values_round_trip_over_http(client):
    """What the library keeps exactly (lone surrogates, integers beyond 64 bits, key order, huge
    floats) comes back exactly through the JSON bodies too."""
    c = client
    body = ('{"messages": [{"z": 1, "a": "\\ud800 lone", "n": 123456789012345678901234567890}, "x", [], {}],'
            ' "metadata": {"k": "\\udfff", "big": -99999999999999999999999, "huge": 1.5e300}, "step": 7}').encode()
    r = c.post("/runs/exact/checkpoints", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    want = json.loads(body)
    meta = json.loads(c.get(f"/runs/exact/checkpoints/{seg(r.json()['id'])}").content)
    assert meta["metadata"] == want["metadata"] and meta["metadata"]["huge"] == 1.5e300 and meta["step"] == 7
    got = json.loads(c.get(f"/runs/exact/checkpoints/{seg(r.json()['id'])}/messages").content)
    assert got["messages"] == want["messages"]
    assert list(got["messages"][0]) == ["z", "a", "n"]


def test_expect_head_holds_against_another_writer_of_the_repository(tmp_path):
    """A writer outside the server (another manager on the same directory, as another process
    would be) moves the head: a save or rollback with the old expectHead is refused (409
    head_mismatch naming the new head) and changes nothing; a save without expectHead continues
    from the new head."""
    repo = str(tmp_path / "repo")
    app = create_app(repo, ServerSettings(token=TOKEN))
    with running_server(app) as url, httpx.Client(base_url=url, headers=auth(), timeout=30) as c:
        first = save(c, "shared", 2)["id"]
        other = CheckpointManager(repo)
        assert other.latest("shared").id == first
        theirs = other.save("shared", msgs(3))
        body = error(c.post("/runs/shared/checkpoints", json={"messages": msgs(4), "expectHead": first}),
                     409, "head_mismatch")
        assert body["head"] == theirs
        error(c.post(f"/runs/shared/checkpoints/{seg(first)}/rollback", params={"expectHead": first}),
              409, "head_mismatch")
        assert other.latest("shared").id == theirs  # nothing changed
        ours = save(c, "shared", 5)
        assert ours["parentId"] == theirs
        r = c.post(f"/runs/shared/checkpoints/{seg(first)}/rollback", params={"expectHead": ours["id"]})
        assert r.status_code == 200
        assert CheckpointManager(repo).latest("shared").id == first
        other.close()


def test_cli_serve_refuses_an_encrypted_repository_without_its_passphrase(tmp_path):
    """An encrypted repository served with no passphrase, or a wrong one, is refused before the
    server listens (it used to start and answer 500 on every route)."""
    from snapstore import CheckpointManager
    repo = tmp_path / "enc"
    m = CheckpointManager(str(repo), passphrase="right horse battery")
    m.save("r", [{"role": "user", "content": "secret"}])
    m.close()
    e = {k: v for k, v in os.environ.items() if k != "SNAPSTORE_PASSPHRASE"}
    for pw, needle in [(None, "encrypted"), ("wrong one", "wrong passphrase")]:
        env = dict(e, SNAPSTORE_TOKEN=TOKEN)
        if pw is not None:
            env["SNAPSTORE_PASSPHRASE"] = pw
        p = subprocess.run([sys.executable, "-m", "snapstore", "--repo", str(repo), "serve", "--port", "9"],
                           capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert p.returncode == 1 and needle in p.stderr and "serving" not in p.stderr, (pw, p.returncode, p.stderr)


def test_body_errors_say_what_to_send(client):
    # a trial's curl -d without a Content-Type got "body: Input should be a valid dictionary", and
    # bad JSON "body.28: JSON decode error" (28 read like a field: it is a character offset)
    c = client
    r = c.post("/runs/r/checkpoints", content=b'{"messages": []}', headers={"content-type": "application/x-www-form-urlencoded"})
    body = error(r, 422, "invalid_request")
    assert "Content-Type: application/json" in body["message"], body
    r = c.post("/runs/r/checkpoints", content=b'{"messages": [}', headers={"content-type": "application/json"})
    body = error(r, 422, "invalid_request")
    assert body["message"].startswith("the request body is not valid JSON") and "at character" in body["message"]
    assert "Content-Type" not in body["message"]  # the header was right
    body = error(c.post("/runs/r/checkpoints", json={"step": 1}), 422, "invalid_request")
    assert body["message"] == "body.messages: Field required", body
