"""Numbers out of range and booleans where numbers belong (issue 20): ``prune`` with durations
past what a timedelta holds raises InvalidInputError naming the rule (it raised a bare
OverflowError, and ``POST /prune`` answered 500); the service refuses ``false``/``true`` where a
number is expected (422 ``invalid_request``) instead of taking ``false`` as 0."""

from __future__ import annotations

import math

import httpx
import pytest

from snapstore import CheckpointManager
from snapstore.errors import InvalidInputError
from snapstore.server import ServerSettings, create_app
from tests.helpers.server_fixtures import TOKEN, auth, running_server


@pytest.fixture
def mgr(tmp_path):
    m = CheckpointManager(str(tmp_path / "repo"))
    m.save("r", [{"role": "user", "content": "a"}])
    m.save("r", [{"role": "user", "content": "b"}])
    yield m
    m.close()


@pytest.mark.parametrize("rule", ["older_than", "keep_within"])
@pytest.mark.parametrize("value", [1e16, 10 ** 20, math.inf, math.nan, "100000000000y", "9" * 400])
def test_prune_refuses_durations_out_of_range(mgr, rule, value):
    with pytest.raises(InvalidInputError, match=rule):
        mgr.prune(**{rule: value})
    assert len(mgr.list("r")) == 2


def test_prune_takes_the_longest_duration(mgr):
    assert mgr.prune(older_than=86400 * 999_999_999, dry_run=True) == []
    assert mgr.prune(keep_within="1000y", keep_last=0, dry_run=True) == []


@pytest.fixture
def client(tmp_path):
    app = create_app(str(tmp_path / "repo"), ServerSettings(token=TOKEN, max_body_bytes=1 << 20))
    with running_server(app) as url, httpx.Client(base_url=url, headers=auth(), timeout=30) as c:
        r = c.post("/runs/r/checkpoints", json={"messages": [{"role": "user", "content": "a"}]})
        assert r.status_code == 201, r.text
        yield c


@pytest.mark.parametrize("path, body", [
    ("/gc", {"gracePeriod": False}),
    ("/gc", {"gracePeriod": True, "dryRun": True}),
    ("/gc", {"dryRun": 1}),
    ("/prune", {"keepLast": False}),
    ("/prune", {"keepLast": True}),
    ("/prune", {"olderThan": False}),
    ("/prune", {"keepWithin": True}),
    ("/prune", {"keepLast": 1, "dryRun": 0}),
])
def test_booleans_are_not_numbers(client, path, body):
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request"
    assert client.get("/runs/r/checkpoints").json()["checkpoints"], "nothing may have been deleted"


@pytest.mark.parametrize("rule", ["olderThan", "keepWithin"])
def test_prune_duration_overflow_is_422_not_500(client, rule):
    r = client.post("/prune", json={rule: 1e16})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] in ("invalid_input", "invalid_request")  # 422 either way (schema or library)
    assert any(name in r.text for name in ("older_than", "keep_within", "olderThan", "keepWithin"))


@pytest.mark.parametrize("clock", [1.5, "now", lambda: 1.5, lambda: __import__("datetime").datetime(2020, 1, 1)])
def test_a_wall_clock_that_is_not_an_aware_datetime_is_refused(tmp_path, clock):
    # a trial passed a float and got AttributeError from deep inside the save
    with pytest.raises(InvalidInputError, match="wall_clock"):
        m = CheckpointManager(str(tmp_path / "r"), wall_clock=clock)
        m.save("r", [{"role": "user", "content": "a"}])
    assert CheckpointManager(str(tmp_path / "r")).list("r") == []  # nothing half-saved
