"""A tiny TCP proxy for tests that records the raw bytes HTTP clients send, to check request
headers as they are on the wire (after every botocore handler ran).

    proxy = RecordingProxy("127.0.0.1", moto_port)      # listens on 127.0.0.1:proxy.port
    ... point a client at http://127.0.0.1:{proxy.port} ...
    for req in proxy.requests(): req.method, req.path, req.headers (lower-case names)
    proxy.close()
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass


@dataclass
class WireRequest:
    """One HTTP/1.1 request as the client sent it: request line, headers (names lower-cased, in
    order), and how many body bytes followed the head."""

    method: str
    path: str
    headers: dict
    body_len: int


def parse_requests(raw: bytes) -> list[WireRequest]:
    """Split the client-to-server bytes of one connection into requests (Content-Length and
    chunked bodies). A trailing incomplete request is ignored."""
    out = []
    pos = 0
    while True:
        end = raw.find(b"\r\n\r\n", pos)
        if end < 0:
            return out
        lines = raw[pos:end].decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        pos = end + 4
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = 0
            while True:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    return out
                size = int(raw[pos:eol].split(b";")[0], 16)
                pos = eol + 2 + size + 2
                body += size
                if size == 0:
                    break
        else:
            body = int(headers.get("content-length", "0") or 0)
            if len(raw) < pos + body:
                return out
            pos += body
        out.append(WireRequest(method, path, headers, body))


class RecordingProxy:
    """Forward 127.0.0.1:``port`` to ``upstream_host:upstream_port`` byte for byte, recording what
    each client connection sends.

    Args:
        upstream_host / upstream_port: where to forward (e.g. moto's ThreadedMotoServer).
        delay: seconds to hold each chunk a client sends before passing it on (simulated network
            latency, so that concurrent requests really overlap; a request sent in one piece waits
            once, one whose body waits for ``100 Continue`` twice).
    """

    def __init__(self, upstream_host: str, upstream_port: int, delay: float = 0.0):
        self._upstream = (upstream_host, int(upstream_port))
        self.delay = float(delay)
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._lock = threading.Lock()
        self._streams: list[bytearray] = []
        self._open: list[socket.socket] = []
        self._active = 0
        self.max_active = 0  #: most connections open at once so far
        threading.Thread(target=self._accept, daemon=True, name="wire-proxy-accept").start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        """Open the upstream side of one connection (off the accept loop, so that a burst of
        connections is not serialised by the proxy) and start both directions."""
        try:
            upstream = socket.create_connection(self._upstream)
        except OSError:
            client.close()
            return
        buf = bytearray()
        with self._lock:
            self._streams.append(buf)
            self._open += [client, upstream]
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        threading.Thread(target=self._pump, args=(client, upstream, buf, self.delay), daemon=True).start()
        self._pump(upstream, client, None, 0.0, True)

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray | None,
              delay: float = 0.0, counts: bool = False) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:  # recorded before forwarding: complete once the reply arrives
                    with self._lock:
                        record.extend(data)
                if delay:
                    time.sleep(delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if counts:  # the upstream-to-client side ends last: both sockets are closed (were
                # kept open, 2 descriptors per connection: after ~10,000 connections accept()
                # failed with EMFILE and the proxy stopped accepting)
                for s in (src, dst):
                    s.close()
                with self._lock:
                    self._open = [x for x in self._open if x is not src and x is not dst]
                    self._active -= 1

    def requests(self) -> list[WireRequest]:
        """Every complete request recorded so far (connection by connection, in order)."""
        with self._lock:
            raws = [bytes(b) for b in self._streams]
        return [r for raw in raws for r in parse_requests(raw)]

    def connections(self) -> int:
        """How many client connections were accepted so far."""
        with self._lock:
            return len(self._streams)

    def clear(self) -> None:
        """Forget what was recorded (open connections keep being recorded from here on)."""
        with self._lock:
            for b in self._streams:
                del b[:]

    def close(self) -> None:
        """Stop listening and close every proxied connection."""
        self._sock.close()
        with self._lock:
            socks, self._open = self._open, []
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
