"""The measuring code of benchmarks/latency.py: its proxy's log and the sequential round-trip count."""

from __future__ import annotations

import http.client
import json
import http.server
import importlib.util
import threading

import pytest
from tests.helpers import paths

DELAY = 0.1


def _load_bench():
    path = paths.ROOT / "benchmarks" / "latency.py"
    spec = importlib.util.spec_from_file_location("latency_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _load_bench()


class _Upstream(http.server.BaseHTTPRequestHandler):
    """A tiny keep-alive HTTP/1.1 server: GET/HEAD answer 5 bytes, PUT/POST echo the body length."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, body: bytes, close: bool = False):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self._reply(b"hello", close="close" in self.path)

    do_HEAD = do_GET

    def do_PUT(self):
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            n = 0
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                self.rfile.read(size + 2)
                n += size
                if not size:
                    break
        else:
            n = len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self._reply(str(n).encode())

    do_POST = do_DELETE = do_PUT


@pytest.fixture
def proxy():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    p = bench.LatencyProxy(server.server_address[1], DELAY).start()
    try:
        yield p
    finally:
        p.stop()
        server.shutdown()
        server.server_close()


def _log(p):
    p.settle()  # the client can read a response before the proxy thread has logged it
    return p.log


def _conn(p):
    return http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)


def test_round_trips_of_intervals():
    rt = bench.sequential_round_trips
    assert rt([]) == 0
    assert rt([(0, 1), (2, 3), (4, 5)]) == 3
    assert rt([(0, 1), (0.1, 1.1), (0.2, 1.2)]) == 1
    # two sequential pairs of parallel requests, then one long request overlapping all: 2
    assert rt([(0, 1), (0, 1), (1.5, 2), (1.6, 2.1), (0.5, 3)]) == 2
    # the longest chain skips the long request: a(0-1) -> b(1-2) -> c(2-3), beside x(0-2.5) -> y(2.6-3)
    assert rt([(0, 2.5), (2.6, 3), (0, 1), (1, 2), (2, 3)]) == 3


def test_classify():
    c = bench.classify
    assert c("GET", "/bkt/bench/runs/x/0001") == "GET"
    assert c("GET", "/bkt?list-type=2&prefix=bench%2Fruns%2F&max-keys=1") == "LIST"
    assert c("GET", "/bkt?versioning") == "GET"
    assert c("PUT", "/bkt/bench/packs/ab/cd") == "PUT"
    assert c("HEAD", "/bkt/bench/config") == "HEAD"
    assert c("DELETE", "/bkt/bench/packs/ab/cd") == "DELETE"
    assert c("POST", "/bkt?delete") == "DELETE"
    assert bench.key_group("/bkt?list-type=2&prefix=bench%2Fruns%2Fx") == "runs"
    assert bench.key_group("/bkt/bench/packs/ab/cd") == "packs"


def test_three_sequential_gets_on_one_kept_alive_connection(proxy):
    c = _conn(proxy)
    for i in range(3):
        c.request("GET", f"/bkt/k{i}")
        r = c.getresponse()
        assert r.read() == b"hello"
    c.request("HEAD", "/bkt/k0")
    r = c.getresponse()
    assert r.read() == b"" and r.status == 200
    c.close()
    s = bench.summarize(_log(proxy)[:3])
    assert s["requests"] == {"GET": 3} and s["round_trips"] == 3
    assert bench.summarize(_log(proxy))["requests"] == {"GET": 3, "HEAD": 1}
    assert proxy.connections == 1  # keep-alive
    assert all(e["end"] - e["start"] >= DELAY for e in _log(proxy))


def test_three_parallel_gets(proxy):
    barrier = threading.Barrier(3)
    got = []

    def one(i):
        c = _conn(proxy)
        barrier.wait()
        c.request("GET", f"/bkt/k{i}")
        got.append(c.getresponse().read())
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [b"hello"] * 3
    s = bench.summarize(_log(proxy))
    assert s["requests"] == {"GET": 3} and s["total"] == 3 and s["round_trips"] == 1


def test_bodies_and_upstream_close_keep_the_client_connection(proxy):
    c = _conn(proxy)
    c.request("PUT", "/bkt/a", body=b"x" * 100_000)
    assert c.getresponse().read() == b"100000"
    c.request("PUT", "/bkt/b", body=iter([b"abc", b"defg"]), encode_chunked=True,
              headers={"Transfer-Encoding": "chunked"})
    assert c.getresponse().read() == b"7"
    c.request("PUT", "/bkt/c", body=b"12", headers={"Expect": "100-continue"})
    assert c.getresponse().read() == b"2"
    c.request("GET", "/bkt/close-after")  # upstream says Connection: close; the client stays connected
    r = c.getresponse()
    assert r.read() == b"hello" and r.getheader("Connection") is None
    c.request("POST", "/bkt?delete", body=b"<Delete/>")
    assert c.getresponse().read() == b"9"
    c.close()
    assert proxy.connections == 1 and not proxy.failures
    s = bench.summarize(_log(proxy))
    assert s["requests"] == {"PUT": 3, "GET": 1, "DELETE": 1} and s["round_trips"] == 5


def test_proxy_logs_request_payload_bytes(proxy):
    c = _conn(proxy)
    c.request("PUT", "/bkt/a", body=b"x" * 1234)
    assert c.getresponse().read() == b"1234"
    # an aws-chunked upload: the framed body is longer than the payload the header declares
    framed = b"4;chunk-signature=0\r\nabcd\r\n0;chunk-signature=0\r\n\r\n"
    c.request("PUT", "/bkt/b", body=framed, headers={"x-amz-decoded-content-length": "4"})
    assert c.getresponse().read() == str(len(framed)).encode()
    c.request("GET", "/bkt/a")
    assert c.getresponse().read() == b"hello"
    c.close()
    assert [e["bytes_up"] for e in _log(proxy)] == [1234, 4, 0]
    assert bench.summarize(_log(proxy))["bytes_up"] == 1238  # PUTs only


def test_object_kind():
    k = bench.object_kind
    assert k("runs/boi/m/ffffffffffffffff") == "manifests"
    assert k("runs/boi/l/0000000000000000.ffff") == "log segments"
    assert k("packs/1f/1f2e3d") == "packs"
    assert [k(x) for x in ("config", "runmarks/boi.ffff.l", "runs/boi/f", "runs/m")] == ["other"] * 4


@pytest.fixture
def bench_env(monkeypatch):
    """main() sets the benchmark's dummy AWS environment in this process: undone after the test."""
    for k, v in bench.DUMMY_ENV.items():
        monkeypatch.setenv(k, v)
    for k in bench.UNSET_ENV:
        monkeypatch.delenv(k, raising=False)


def test_bounded_fork_row_and_objects_block(tmp_path, bench_env):
    """The new rows end to end on a tiny run: moto's HTTP server, the proxy, fresh child processes."""
    out = tmp_path / "out.json"
    assert bench.main(["--bounded", "--objects", "--sizes", "12", "--trials", "1", "--bounded-delays", "1",
                       "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    fork = next(r for r in res["rows"] if r["op"] == "fork")
    assert fork["size"] == 12 and fork["verdict"] == "PASS"
    assert fork["requests"]["PUT"] >= 1 and 0 < fork["bytes_up"] <= bench.FORK_LIMIT
    assert fork["stored_objects_added"] >= 1 and 0 < fork["stored_bytes_added"] <= bench.FORK_LIMIT
    assert {r["op"] for r in res["rows"]} == {"latest", "list(limit=10)", "rollback 5 back", "fork", "delete head"}
    (obj,) = res["objects"]
    st = obj["stored"]
    assert obj["size"] == 12 and st["objects"] == sum(v["objects"] for v in st["kinds"].values())
    assert st["bytes"] == sum(v["bytes"] for v in st["kinds"].values())
    assert st["kinds"]["manifests"]["objects"] >= 1 and st["kinds"]["packs"]["objects"] >= 1
    assert obj["requests"]["PUT"] >= 12  # at least one PUT per save
    assert obj["bytes_put"] >= st["bytes"] > 0  # every stored byte was PUT once at least
    assert obj["write_amp"] == obj["bytes_put"] / st["bytes"]
    assert obj["verdict"] is None  # the 3x target applies at 10,000 saves and more


def test_objects_block_alone(tmp_path, bench_env):
    """--objects without --bounded: populations only, no child processes; larger runs hold more."""
    out = tmp_path / "out.json"
    assert bench.main(["--objects", "--sizes", "3,20", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["rows"] == []
    small, big = res["objects"]
    assert (small["size"], big["size"]) == (3, 20)
    assert big["bytes_put"] > small["bytes_put"] and big["stored"]["bytes"] > small["stored"]["bytes"]
    assert big["baseline_bytes"] > small["baseline_bytes"]
