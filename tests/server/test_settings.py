"""The service's token rules (snapstore.server.settings): no server without a token unless it is
on loopback and asked to run without one."""

from __future__ import annotations

import pytest

from snapstore.errors import InvalidInputError
from snapstore.server.settings import ServerSettings, is_loopback, resolve_token

TOKEN = "t" * 24


@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
                                       ("localhost", True), ("LOCALHOST", True), ("0.0.0.0", False),
                                       ("::", False), ("10.0.0.1", False), ("example.org", False), ("", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_resolve_token(tmp_path):
    assert resolve_token("0.0.0.0", environ={"SNAPSTORE_TOKEN": f"  {TOKEN}\n"}) == TOKEN
    f = tmp_path / "tok"
    f.write_text(TOKEN + "\nsecond line ignored\n")
    assert resolve_token("0.0.0.0", token_file=str(f), environ={"SNAPSTORE_TOKEN": "x" * 30}) == TOKEN
    assert resolve_token("127.0.0.1", no_auth=True, environ={"SNAPSTORE_TOKEN": TOKEN}) is None
    for kwargs, needle in [
        (dict(host="127.0.0.1", environ={}), "token is required"),
        (dict(host="0.0.0.0", no_auth=True, environ={}), "only allowed on a loopback"),
        (dict(host="127.0.0.1", no_auth=True, token_file=str(f), environ={}), "contradict"),
        (dict(host="127.0.0.1", environ={"SNAPSTORE_TOKEN": "short"}), "at least 16"),
        (dict(host="127.0.0.1", environ={"SNAPSTORE_TOKEN": "with space " * 3}), "without spaces"),
        (dict(host="127.0.0.1", token_file=str(tmp_path / "missing"), environ={}), "cannot read token file"),
    ]:
        host = kwargs.pop("host")
        with pytest.raises(InvalidInputError, match=needle):
            resolve_token(host, **kwargs)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(InvalidInputError, match="at least 16"):
        resolve_token("127.0.0.1", token_file=str(tmp_path / "empty"), environ={})


def test_settings_are_checked():
    with pytest.raises(InvalidInputError):
        ServerSettings(max_body_bytes=0)
    with pytest.raises(InvalidInputError):
        ServerSettings(token="short")
    assert ServerSettings(token=TOKEN).max_body_bytes == 64 << 20
