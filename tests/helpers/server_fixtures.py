"""Helpers for the HTTP service tests: uvicorn serving an app on 127.0.0.1 in a thread.

``running_server(app)`` is a context manager yielding the base URL (``http://127.0.0.1:PORT``);
the server listens on a free port and is shut down (and waited for) on exit.
"""

from __future__ import annotations

import contextlib
import threading
import time

__all__ = ["running_server", "wait_healthy", "TOKEN", "auth"]

TOKEN = "test-token-0123456789abcdef"


def auth(token: str = TOKEN) -> dict:
    """The Authorization header for ``token``."""
    return {"Authorization": f"Bearer {token}"}


def wait_healthy(proc, url: str, timeout: float) -> None:
    """Wait until the ``snapstore serve`` process ``proc`` (a Popen with stderr piped) answers
    ``GET url/healthz`` with 200; fail the test with its stderr if it exits or ``timeout`` seconds pass."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
        time.sleep(0.1)


@contextlib.contextmanager
def running_server(app, timeout: float = 20.0):
    """Serve ``app`` with uvicorn on 127.0.0.1 (free port) in a thread; yield its base URL."""
    import uvicorn

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                            server_header=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
