"""Latency benchmark: what reads and saves on S3 cost as a user sees them, behind an injected delay.

Run (from the repository root)::

    python benchmarks/latency.py                       # sizes 100,1000,10000 saves, 200 runs, 50 ms delay
    python benchmarks/latency.py --quick               # smoke run (sizes 20,100, 20 runs, 5 ms): < 1 min
    python benchmarks/latency.py --sizes 1000 --delay-ms 30 --no-local --json out.json

Setup: moto's ``ThreadedMotoServer`` on 127.0.0.1 (random port, dummy credentials) and, in front of it,
a latency-injecting HTTP/1.1 proxy on 127.0.0.1 (:class:`LatencyProxy`, in this process): one thread
and one upstream connection per client connection, keep-alive on both sides, any number of concurrent
connections. It reads each request whole, forwards it, reads the response whole, then holds it back
``--delay-ms`` before sending it on (so every request costs at least one delay, and parallel requests
overlap). For every request it logs the method, path + query, status, the time its head arrived and
the time its response was fully sent (``time.monotonic``, the same clock as the child processes').

Runs of ``--sizes`` saves are populated straight to moto (no proxy, no delay, no gc) through
``CheckpointManager("s3://BUCKET/bench", endpoint_url=...)``: the message list starts with a system
prompt and a user task, and every save appends 2 messages (an assistant tool call and a tool result,
1-2 KB each of seeded pseudo-random text with Zipf-like word frequencies) to the previous list, so a
run of n saves ends with 2 + 2n messages. Beside each run the final message list is put, as one
zstd-compressed (level 3) JSON object, outside the repository's prefix: the baseline.

Measured, each in a FRESH child process (``python`` of this interpreter, importing the snapstore of
this checkout) talking to the proxy; the child times the operation itself with ``time.monotonic``
(interpreter start, imports and the construction of the manager / boto3 client, which sends no
request, are outside the timing), and the proxy log between those two instants is the operation's:

* ``latest``: ``CheckpointManager(url, endpoint_url=proxy).latest(run)`` (opening the repository
  included); the message count is checked. Median over ``--trials`` processes.
* ``baseline GET``: one ``get_object`` of the zstd JSON, read, decompressed and ``json.loads``-ed.
* ``list``: ``mgr.list(run)``, every checkpoint (count checked).
* ``runs``: ``mgr.runs()`` on a repository of ``--runs`` runs of 3 saves each (count checked).
* ``save (steady)``: one child opens the run (``latest()``, not counted), makes one warm-up save,
  then 20 saves of 2 more messages each; per save: requests, round trips and wall time, medians.

* ``prune`` (``--prune``; ``--prune-only`` measures only these): ``prune(keep_last=100)`` of one run of
  each size, built through ``CheckpointManager`` in memory and put into moto's backend, its objects aged
  2 h (older than FREE_AFTER: deleted in DeleteObjects batches; ``--prune-young`` also on fresh ones,
  voided one PUT each), timed in a fresh child after the repository is opened; plus a projection to
  1,000,000 checkpoints (linear fit through the two largest sizes; the client's time there is round trips
  x delay + its CPU, since the measured wall also holds moto's CPU in this process).

* ``prune ... all runs`` (``--prune-wide RUNSxSAVES``, default 1000x100): ``prune(keep_last=10)`` with no
  run over a repository of RUNS runs of SAVES saves (one short message each), built in memory and put
  into moto's backend, aged as above, timed in a fresh child after the repository is opened (the
  ``runs()`` listing inside the timing); plus the projection to 1,000,000 checkpoints in runs of the
  same length (requests, round trips, client CPU scaled by the number of runs; client time = round
  trips x delay + CPU). ``--prune-only --sizes '' --prune-wide`` measures only this row.
* ``--bounded`` (only this block): per size, ``latest()``, ``list(limit=10)``, a rollback 5 back, a
  delete of the head checkpoint (``delete(run, head id)``) and a ``fork`` of the head into a new run at each ``--bounded-delays`` (default 20 and 80 ms), fresh
  process each, beside one GET of the history (:func:`bench_bounded`); a fork row also gives the
  payload bytes of its PUTs and the objects and bytes it added to the bucket (target: at most 16 KB).
* ``--objects``: per size, the run is populated through a zero-delay counting proxy; then the bucket's
  objects by kind (manifests ``runs/*/m/``, log segments ``runs/*/l/``, packs, other) with their bytes,
  the payload bytes PUT while populating and their ratio to the bytes stored (write amplification;
  target at 10,000 saves: at most 3x). With ``--bounded`` it counts the bounded block's runs; alone,
  it only populates (no child processes): ``python benchmarks/latency.py --objects --sizes 100,1000``.

Per measurement: requests by kind (GET / PUT / LIST / HEAD / DELETE, from method + path/query; see
:func:`classify`), total, **sequential round trips** (the longest chain of requests each of which
started after the previous one in the chain ended: :func:`sequential_round_trips`), wall time.
Targets are printed beside the figures with PASS/FAIL.

Local part (``--local``, on by default; ``--no-local`` skips it): ``benchmarks/local_read.py``, in
the same run: the coding-agent run with the largest final history (JSON bytes) among the shared
trajectories (``../shared/data/trajectories`` or ``$SNAPSTORE_SHARED_DATA``) is saved into a temporary
local repository, one checkpoint per turn, and its final history written to one JSON file; then
``CheckpointManager(repo).latest()`` against ``open`` + ``json.load`` of the file, each in 15 fresh
processes (interleaved), both timed inside the process around the read only (opening the
repository included; imports and interpreter start outside), medians; the ratio is printed.

The delay is the only thing that models the network: moto's CPU time (shared with this process's
proxy threads, 2 cores here) adds to every request, and bandwidth is unlimited. Round trips and
request counts carry over to S3; wall times are indicative of a region-local client at roughly
``--delay-ms`` per request.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import socketserver
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _lib  # noqa: E402

REPO_ROOT = _lib.REPO_ROOT
DUMMY_ENV, UNSET_ENV = _lib.DUMMY_ENV, _lib.UNSET_ENV
KINDS = ("GET", "PUT", "LIST", "HEAD", "DELETE")
PREFIX = "bench"
RUN = "bench-run"
SEED = 20240901
STEADY_SAVES = 20
LOCAL_TRIALS = 15

clock = time.monotonic  # CLOCK_MONOTONIC on Linux: one clock for the proxy and every child process


# ==================================================================================================
# Round trips


def sequential_round_trips(intervals) -> int:
    """Length of the longest chain of requests, each starting after the previous one ended.

    ``intervals``: ``(start, end)`` pairs. A request ``j`` can precede ``i`` in a chain when
    ``end_j <= start_i``. O(n log n): requests by start time; a pointer over them by end time keeps
    the best chain among those already ended.
    """
    items = sorted((float(s), max(float(e), float(s) + 1e-9)) for s, e in intervals)  # end > start
    n = len(items)
    by_end = sorted(range(n), key=lambda i: items[i][1])
    chain = [0] * n
    best = p = 0
    for i, (start, _) in enumerate(items):
        while p < n and items[by_end[p]][1] <= start:
            best = max(best, chain[by_end[p]])  # computed already: its start < its end <= this start
            p += 1
        chain[i] = best + 1
    return max(chain, default=0)


def classify(method: str, target: str) -> str:
    """Request kind from the HTTP method and the path-style target ``/bucket[/key][?query]``."""
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    key = unquote(parts.path).lstrip("/").partition("/")[2]
    method = method.upper()
    if method == "GET":
        if not key and ("list-type" in query or "versions" in query or "uploads" in query
                        or not set(query) - {"prefix", "delimiter", "marker", "max-keys", "encoding-type",
                                             "continuation-token", "start-after", "fetch-owner"}):
            return "LIST"
        return "GET"  # objects, and bucket sub-resources (?versioning, ?location)
    if method == "POST":
        return "DELETE" if "delete" in query else "PUT"  # DeleteObjects; multipart uploads
    return method if method in KINDS else "OTHER"


def key_group(target: str) -> str:
    """The first segment of the object key (or of a LIST's ``prefix``) below the repository prefix
    (``packs``, ``runs``, ``config``...), or ``?sub-resource`` for other bucket-level requests."""
    parts = urlsplit(target)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    key = unquote(parts.path).lstrip("/").partition("/")[2]
    if not key:
        if "prefix" in query or "list-type" in query:
            key = query.get("prefix", "")
        else:
            return "?" + ",".join(sorted(query)) if query else "(bucket)"
    segs = [s for s in key.split("/") if s]
    if segs and segs[0] == PREFIX:
        segs = segs[1:]
    return segs[0] if segs else "(root)"


def summarize(entries: list) -> dict:
    """Requests by kind, total, sequential round trips and the proxy-side span of log entries."""
    by_kind = {k: 0 for k in KINDS}
    groups: dict = {}
    for e in entries:
        by_kind[e["kind"]] = by_kind.get(e["kind"], 0) + 1
        g = f"{e['kind']} {key_group(e['target'])}"
        groups[g] = groups.get(g, 0) + 1
    span = (max(e["end"] for e in entries) - min(e["start"] for e in entries)) if entries else 0.0
    return {"requests": {k: v for k, v in by_kind.items() if v}, "total": len(entries),
            "ranged_gets": sum(1 for e in entries if e["kind"] == "GET" and e.get("ranged")),
            "bytes_down": sum(e.get("bytes", 0) for e in entries if e["kind"] == "GET"),
            "bytes_up": sum(e.get("bytes_up", 0) for e in entries if e["kind"] == "PUT"),
            "round_trips": sequential_round_trips((e["start"], e["end"]) for e in entries),
            "proxy_span_s": span, "by_key_group": dict(sorted(groups.items())),
            "errors": sum(1 for e in entries if e["status"] >= 500)}


# ==================================================================================================
# The latency-injecting proxy


def _read_head(rf) -> bytes | None:
    """One HTTP message head (start line + headers + blank line), or None at EOF before it."""
    lines = []
    while True:
        line = rf.readline(65537)
        if not line:
            if lines:
                raise ConnectionError("connection closed inside a message head")
            return None
        if not lines and line in (b"\r\n", b"\n"):
            continue  # stray CRLF between messages
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            return b"".join(lines)
        if len(lines) > 200:
            raise ConnectionError("message head too long")


def _headers(head: bytes) -> tuple[list[str], dict]:
    lines = head.decode("latin-1").split("\r\n")
    out: dict = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            out[name.strip().lower()] = value.strip()
    return lines[0].split(" ", 2), out


def _read_body(rf, headers: dict, *, to_eof: bool = False) -> bytes:
    """The message body as raw bytes (chunked bodies stay chunked)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = rf.readline(65537)
            if not size_line:
                raise ConnectionError("connection closed inside a chunked body")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    line = rf.readline(65537)
                    if not line:
                        raise ConnectionError("connection closed inside chunked trailers")
                    parts.append(line)
                    if line in (b"\r\n", b"\n"):
                        return b"".join(parts)
            data = rf.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("connection closed inside a chunk")
            parts.append(data)
    if "content-length" in headers:
        n = int(headers["content-length"])
        data = rf.read(n)
        if len(data) != n:
            raise ConnectionError("connection closed inside a body")
        return data
    return rf.read() if to_eof else b""


def _body_size(headers: dict, body: bytes) -> int:
    """Bytes of payload a request carries: ``x-amz-decoded-content-length`` when the client sent
    one (aws-chunked uploads frame the payload with chunk headers and checksum trailers), else the
    raw body's length."""
    decoded = headers.get("x-amz-decoded-content-length", "")
    return int(decoded) if decoded.isdigit() else len(body)


def _drop_header(head: bytes, name: bytes) -> bytes:
    """``head`` without the header lines named ``name`` (lower case, with the colon)."""
    lines = head.split(b"\r\n")
    return b"\r\n".join(line for line in lines if not line.lower().startswith(name))


class LatencyProxy:
    """HTTP/1.1 forwarder from 127.0.0.1 to ``upstream_port`` on 127.0.0.1 that delays every response.

    ``log``: one dict per request: ``method``, ``target`` (path + query), ``kind`` (:func:`classify`),
    ``status``, ``start`` (request head received), ``end`` (response fully sent), both ``clock()``.
    ``Expect: 100-continue`` is answered by the proxy at once (not delayed, not logged) and stripped.
    Client connections are kept alive even though moto closes its side after every response (its
    ``Connection: close`` is dropped when the body has a length; the proxy reconnects upstream).
    """

    def __init__(self, upstream_port: int, delay_s: float, upstream_host: str = "127.0.0.1"):
        if upstream_host != "127.0.0.1":
            raise ValueError("the proxy only forwards to 127.0.0.1")
        self.upstream = (upstream_host, int(upstream_port))
        self.delay_s = float(delay_s)
        self.log: list = []
        self.lock = threading.Lock()
        self.failures: list = []
        self.connections = 0
        self.max_concurrent = 0
        self._open = 0
        self._in_flight = 0  # requests whose head arrived and whose log entry is not written yet
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                proxy._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True
            request_queue_size = 1024

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="latency-proxy")

    def start(self) -> "LatencyProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every request received so far is logged (a client may read the response before
        the proxy thread that sent it has written its log entry)."""
        deadline = clock() + timeout
        while clock() < deadline:
            with self.lock:
                if not self._in_flight:
                    return
            time.sleep(0.001)

    def entries(self, t0: float, t1: float) -> list:
        """Log entries of requests whose head arrived in ``[t0, t1]`` (after :meth:`settle`)."""
        self.settle()
        with self.lock:
            return [e for e in self.log if t0 <= e["start"] <= t1]

    def _connect(self):
        up = socket.create_connection(self.upstream)
        up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return up, up.makefile("rb")

    def _serve(self, client: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.lock:
            self.connections += 1
            self._open += 1
            self.max_concurrent = max(self.max_concurrent, self._open)
        rf = client.makefile("rb")
        up = urf = None
        counted = False
        try:
            while True:
                head = _read_head(rf)
                if head is None:
                    return
                start = clock()
                with self.lock:
                    self._in_flight += 1
                    counted = True
                (method, target, *version), headers = _headers(head)
                if "100-continue" in headers.get("expect", "").lower():
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = _drop_header(head, b"expect:")
                body = _read_body(rf, headers)
                request = head + body
                client_close = (headers.get("connection", "").lower() == "close"
                                or (version and version[0] == "HTTP/1.0"
                                    and headers.get("connection", "").lower() != "keep-alive"))
                for attempt in (1, 2):  # a kept-alive upstream connection may have been closed: retry once
                    if up is None:
                        up, urf = self._connect()
                    try:
                        up.sendall(request)
                        status_head = _read_head(urf)
                        if status_head is None:
                            raise ConnectionError("upstream closed the connection")
                        break
                    except OSError:
                        up.close()
                        up = urf = None
                        if attempt == 2:
                            raise
                response = [status_head]
                (_, status, *_), rheaders = _headers(status_head)
                while 100 <= int(status) < 200:  # interim responses: pass on with the final one
                    status_head = _read_head(urf)
                    response.append(status_head)
                    (_, status, *_), rheaders = _headers(status_head)
                status, final = int(status), len(response) - 1
                no_body = method.upper() == "HEAD" or status in (204, 304)
                to_eof = not no_body and "content-length" not in rheaders and \
                    "chunked" not in rheaders.get("transfer-encoding", "").lower()
                if not no_body:
                    response.append(_read_body(urf, rheaders, to_eof=to_eof))
                upstream_close = to_eof or rheaders.get("connection", "").lower() == "close"
                if upstream_close and not to_eof:
                    # moto's server closes after every response; the client keeps its connection (as
                    # with S3) and the proxy reconnects upstream (loopback, not delayed) for the next
                    response[final] = _drop_header(status_head, b"connection:")
                if self.delay_s > 0:
                    time.sleep(self.delay_s)
                client.sendall(b"".join(response))
                end = clock()
                with self.lock:
                    self.log.append({"method": method, "target": target, "kind": classify(method, target),
                                     "status": status, "start": start, "end": end,
                                     "ranged": "range" in headers,
                                     "bytes": len(response[-1]) if not no_body else 0,
                                     "bytes_up": _body_size(headers, body)})
                    self._in_flight -= 1
                    counted = False
                if upstream_close:
                    up.close()
                    up = urf = None
                if client_close or to_eof:
                    return
        except (OSError, ValueError) as exc:
            with self.lock:
                self.failures.append(repr(exc))
        finally:
            with self.lock:
                self._open -= 1
                if counted:
                    self._in_flight -= 1
            if up is not None:
                up.close()
            try:
                client.close()
            except OSError:
                pass


# ==================================================================================================
# Synthetic messages

_WORDS: list = []


def _vocabulary() -> list:
    if not _WORDS:
        rng = random.Random(SEED)
        letters = "etaoinshrdlcumwfgypbvkjxqz"
        base = ["the", "a", "to", "of", "in", "and", "is", "for", "that", "with", "file", "test", "def",
                "return", "self", "import", "error", "line", "value", "None", "if", "not", "=", "==", "(", ")",
                "src/", ".py", "assert", "function", "class", "run", "path", "result", "call"]
        words = base + ["".join(rng.choice(letters[:rng.randint(8, 26)]) for _ in range(rng.randint(2, 11)))
                        for _ in range(3000)]
        _WORDS.extend(words)
    return _WORDS


def _text(rng: random.Random, nbytes: int) -> str:
    words = _vocabulary()
    out, size = [], 0
    while size < nbytes:
        i = min(int(rng.paretovariate(1.1)) - 1, len(words) - 1)  # Zipf-like
        w = words[i] if rng.random() < 0.9 else words[rng.randrange(len(words))]
        if rng.random() < 0.08:
            w += "\n" if rng.random() < 0.5 else f" {rng.randrange(10_000)}"
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def prelude(seed: int = SEED) -> list:
    rng = random.Random(seed)
    return [{"role": "system", "content": "You are a coding agent. " + _text(rng, 1500)},
            {"role": "user", "content": "Fix the failing test. " + _text(rng, 800)}]


def turn(seed: int, i: int) -> list:
    """Save ``i``'s 2 new messages: an assistant tool call and its tool result, 1-2 KB each."""
    rng = random.Random(seed * 1_000_003 + i)
    call_id = f"call_{i:06d}_{rng.randrange(16 ** 8):08x}"
    command = f"sed -n {rng.randrange(1, 900)},{rng.randrange(900, 2000)}p src/{_text(rng, 12).split()[0]}.py"
    return [{"role": "assistant", "content": _text(rng, rng.randint(900, 1800)),
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": _text(rng, rng.randint(1000, 2000))}]


def history(saves: int, seed: int = SEED) -> list:
    msgs = prelude(seed)
    for i in range(saves):
        msgs += turn(seed, i)
    return msgs


# ==================================================================================================
# Child processes (fresh interpreter, snapstore of this checkout)


def _child_env() -> dict:
    """The children's environment: this checkout first on the path, dummy AWS credentials."""
    return _lib.child_env(s3=True)


def run_child(spec: dict, timeout: float = 3600) -> dict:
    """Run ``spec`` in a fresh ``python benchmarks/latency.py --child`` process; its JSON result."""
    return _lib.run_child(Path(__file__).resolve(), spec, env=_child_env(), timeout=timeout)


def child_main(spec: dict) -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    task = spec["task"]
    if task == "baseline":
        import boto3
        import zstandard

        client = boto3.client("s3", endpoint_url=spec["endpoint"], region_name="us-east-1")
        t0 = clock()
        body = client.get_object(Bucket=spec["bucket"], Key=spec["key"])["Body"].read()
        msgs = json.loads(zstandard.ZstdDecompressor().decompress(body))
        t1 = clock()
        return {"t0": t0, "t1": t1, "count": len(msgs), "bytes": len(body)}
    from snapstore import CheckpointManager

    mgr = CheckpointManager(spec["url"], endpoint_url=spec["endpoint"])
    if task == "latest":
        t0 = clock()
        cp = mgr.latest(spec["run"])
        t1 = clock()
        return {"t0": t0, "t1": t1, "count": len(cp.messages) if cp else None}
    if task == "list":
        t0 = clock()
        got = mgr.list(spec["run"])
        t1 = clock()
        return {"t0": t0, "t1": t1, "count": len(got)}
    if task == "runs":
        t0 = clock()
        got = mgr.runs()
        t1 = clock()
        return {"t0": t0, "t1": t1, "count": len(got)}
    if task == "save":
        t0 = clock()
        cp = mgr.latest(spec["run"])  # resume the run (not measured)
        msgs, step = list(cp.messages), cp.step
        saves = []
        for k in range(spec["saves"] + 1):  # save 0 is the warm-up
            step += 1
            msgs = msgs + turn(SEED + 1, step)
            s0 = clock()
            mgr.save(spec["run"], msgs, step=step)
            s1 = clock()
            if k:
                saves.append([s0, s1])
        got = mgr.latest(spec["run"])
        return {"t0": t0, "t1": clock(), "saves": saves, "count": len(msgs), "ok": got.messages == msgs}
    if task == "prune":
        return prune_child(mgr, spec)
    if task in ("list_limit", "rollback", "delete_head"):  # the bounded-cost block (issue 26 items 1 and 5)
        return bounded_child(mgr, spec)
    if task == "prune_wide":
        return prune_wide_child(mgr, spec)
    if task == "fork":  # the bounded-cost block's fork row (issue 26 item 3)
        return fork_child(mgr, spec)
    raise ValueError(f"unknown child task {task!r}")


# ==================================================================================================
# The benchmark


def start_moto():
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, int(port)


def s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def new_bucket(endpoint: str, tag: str) -> str:
    name = f"latency-{tag}-{uuid.uuid4().hex[:8]}"
    s3_client(endpoint).create_bucket(Bucket=name)
    return name


def measure(proxy: LatencyProxy, spec: dict, expect_count: int | None = None) -> dict:
    """One fresh child; its requests (proxy log between its t0 and t1), round trips and wall time."""
    before = len(proxy.log)
    out = run_child(spec)
    entries = proxy.entries(out["t0"], out["t1"])
    with proxy.lock:
        outside = len(proxy.log) - before - len(entries)
    res = summarize(entries)
    res.update(wall_s=out["t1"] - out["t0"], outside_window=outside, count=out.get("count"))
    if "cpu_s" in out:
        res["cpu_s"] = out["cpu_s"]
    if expect_count is not None and out.get("count") != expect_count:
        raise AssertionError(f"{spec['task']}: got {out.get('count')}, expected {expect_count}")
    return res


def median_of(trials: list) -> dict:
    """Trials of one measurement: the trial of median wall time, with the min/max wall and totals."""
    ordered = sorted(trials, key=lambda r: r["wall_s"])
    med = dict(ordered[(len(ordered) - 1) // 2])
    med["wall_s"] = statistics.median(r["wall_s"] for r in trials)
    med["trials"] = len(trials)
    med["wall_s_all"] = [r["wall_s"] for r in trials]
    med["total_range"] = [min(r["total"] for r in trials), max(r["total"] for r in trials)]
    med["round_trips_range"] = [min(r["round_trips"] for r in trials), max(r["round_trips"] for r in trials)]
    return med


REPO_SETTINGS: dict = {}
"""Settings of the repositories :func:`populate` creates (``--seg-limit``, ``--seg-from``, ``--fanout``); empty: the
defaults of ``CheckpointManager`` (what a user of ``s3://`` gets)."""


def populate(moto_ep: str, url: str, saves: int, progress: str) -> tuple[list, float]:
    from snapstore import CheckpointManager

    if REPO_SETTINGS:
        from snapstore.repo.repository import Repository
        from snapstore.stores import open_store

        store = open_store(url, endpoint_url=moto_ep)
        Repository.init(store, **REPO_SETTINGS)
        store.close()
    mgr = CheckpointManager(url, endpoint_url=moto_ep)
    msgs = prelude()
    t0 = time.perf_counter()
    for i in range(saves):
        msgs = msgs + turn(SEED, i)
        mgr.save(RUN, msgs, step=i)
        if progress and (i + 1) % 2000 == 0:
            print(f"  {progress}: {i + 1:,}/{saves:,} saves, {time.perf_counter() - t0:.0f} s", flush=True)
    mgr.close()
    return msgs, time.perf_counter() - t0


def bench_size(n: int, moto_ep: str, proxy: LatencyProxy, trials: int, do_save: bool) -> list:
    import zstandard

    bucket = new_bucket(moto_ep, f"s{n}")
    url = f"s3://{bucket}/{PREFIX}"
    msgs, build_s = populate(moto_ep, url, n, f"size {n:,}")
    base_key = f"baseline/final-{n}.json.zst"
    blob = zstandard.ZstdCompressor(level=3).compress(json.dumps(msgs).encode())
    s3_client(moto_ep).put_object(Bucket=bucket, Key=base_key, Body=blob)
    ep = proxy.endpoint
    rows = []
    lat = median_of([measure(proxy, {"task": "latest", "url": url, "endpoint": ep, "run": RUN}, len(msgs))
                     for _ in range(trials)])
    base = median_of([measure(proxy, {"task": "baseline", "endpoint": ep, "bucket": bucket, "key": base_key},
                              len(msgs)) for _ in range(trials)])
    lat.update(op="latest", size=n, messages=len(msgs), build_s=build_s, baseline=base,
               baseline_bytes=len(blob))
    rows.append(lat)
    lst = median_of([measure(proxy, {"task": "list", "url": url, "endpoint": ep, "run": RUN}, n)
                     for _ in range(trials)])
    lst.update(op="list", size=n)
    rows.append(lst)
    if do_save:
        before = len(proxy.log)
        out = run_child({"task": "save", "url": url, "endpoint": ep, "run": RUN, "saves": STEADY_SAVES})
        if not out["ok"]:
            raise AssertionError("steady-state saves: latest() differs from what was saved")
        per = []
        for s0, s1 in out["saves"]:
            r = summarize(proxy.entries(s0, s1))
            r["wall_s"] = s1 - s0
            per.append(r)
        kinds = sorted({k for r in per for k in r["requests"]}, key=KINDS.index)
        rows.append({"op": "save (steady)", "size": n, "saves": len(per),
                     "requests": {k: statistics.median(r["requests"].get(k, 0) for r in per) for k in kinds},
                     "total": statistics.median(r["total"] for r in per),
                     "total_max": max(r["total"] for r in per),
                     "round_trips": statistics.median(r["round_trips"] for r in per),
                     "round_trips_max": max(r["round_trips"] for r in per),
                     "wall_s": statistics.median(r["wall_s"] for r in per),
                     "by_key_group": per[len(per) // 2]["by_key_group"],
                     "process_requests": len(proxy.log) - before})
    return rows


def bench_runs(n_runs: int, moto_ep: str, proxy: LatencyProxy, trials: int) -> dict:
    from snapstore import CheckpointManager

    bucket = new_bucket(moto_ep, "runs")
    url = f"s3://{bucket}/{PREFIX}"
    mgr = CheckpointManager(url, endpoint_url=moto_ep)
    for r in range(n_runs):
        msgs = prelude(SEED + r)
        for i in range(3):
            msgs = msgs + turn(SEED + r, i)
            mgr.save(f"run-{r:04d}", msgs, step=i)
    mgr.close()
    res = median_of([measure(proxy, {"task": "runs", "url": url, "endpoint": ep}, n_runs)
                     for ep in [proxy.endpoint] * trials])
    res.update(op="runs", size=n_runs)
    return res


def largest_coding_run() -> tuple[Path, str, list, list] | None:
    """The largest shared coding-agent conversation (:func:`benchmarks._lib.largest_coding_run`)."""
    sys.path.insert(0, str(REPO_ROOT))
    return _lib.largest_coding_run()


def _local_read():
    sys.path.insert(0, str(REPO_ROOT))
    from benchmarks import local_read

    return local_read


def bench_local() -> dict | None:
    """The local part: :func:`benchmarks.local_read.measure` (both sides in fresh processes, the
    read only, medians of ``LOCAL_TRIALS`` interleaved trials); None without the trajectories."""
    res = _local_read().measure(LOCAL_TRIALS)
    if res is None:
        print("local part skipped: shared trajectories not found (set SNAPSTORE_SHARED_DATA)")
    return res


# ==================================================================================================
# Bounded costs on long runs: list(limit=10), rollback 5 back, latest() at several delays


def bounded_child(mgr, spec: dict) -> dict:
    """Child side of :func:`bench_bounded`: ``list(run, limit=10)``, ``rollback(run, target)`` or
    ``delete(run, target)`` of the head (``spec["target"]``, a checkpoint id the parent found),
    timed around the call only (a fresh manager: opening the repository included). A delete's
    count is 1 when the run's head afterwards is ``spec["after"]`` (read after the timing)."""
    if spec["task"] == "list_limit":
        t0 = clock()
        got = mgr.list(spec["run"], limit=10)
        t1 = clock()
        return {"t0": t0, "t1": t1, "count": len(got)}
    if spec["task"] == "delete_head":
        t0 = clock()
        mgr.delete(spec["run"], spec["target"])
        t1 = clock()
        head = mgr.latest(spec["run"])
        return {"t0": t0, "t1": t1, "count": 1 if head is not None and head.id == spec["after"] else 0}
    t0 = clock()
    cp = mgr.rollback(spec["run"], spec["target"])
    t1 = clock()
    return {"t0": t0, "t1": t1, "count": 1 if cp.id == spec["target"] else 0}


def bench_bounded(n: int, moto_ep: str, moto_port: int, delays_ms: list, trials: int,
                  objects_rows: list | None = None) -> list:
    """``latest()``, ``list(limit=10)``, a rollback 5 checkpoints back, a delete of the head
    checkpoint and a ``fork`` of the head on a run of ``n`` saves, each in fresh child processes behind a proxy of each delay in
    ``delays_ms``, beside one GET of the final history (zstd JSON). The run is populated once;
    every latest/list/baseline trial of every delay runs before the first rollback (a rollback
    changes the head record latest reads). Each rollback trial goes 5 back from the head the
    previous one left (the parent lists the target with its own manager, straight to moto); then
    each head-delete trial deletes the head the previous one left (its head moves back to the
    next live checkpoint, checked in the child after the timing). The
    forks run after every rollback and delete (a fork pins its source, docs/format.md §10): each trial forks
    the source's head into a new run (:func:`bench_fork`). With ``objects_rows`` (a list) the
    population goes through a zero-delay counting proxy and its :func:`objects_row` is appended
    there. Returns rows (``op``, ``size``, ``delay_ms``, the :func:`summarize` fields, ``wall_s``,
    ``baseline_wall_s``; fork rows also ``stored_objects_added``, ``stored_bytes_added``)."""
    import zstandard
    from snapstore import CheckpointManager

    bucket = new_bucket(moto_ep, f"b{n}")
    url = f"s3://{bucket}/{PREFIX}"
    if objects_rows is None:
        msgs, _ = populate(moto_ep, url, n, f"size {n:,}")
    else:
        msgs, obj = populate_counted(moto_ep, moto_port, bucket, n)
        objects_rows.append(obj)
    base_key = f"baseline/final-{n}.json.zst"
    blob = zstandard.ZstdCompressor(level=3).compress(json.dumps(msgs).encode())
    s3_client(moto_ep).put_object(Bucket=bucket, Key=base_key, Body=blob)
    proxies = {d: LatencyProxy(moto_port, d / 1000).start() for d in delays_ms}
    rows, base = [], {}
    try:
        for d, px in proxies.items():
            ep = px.endpoint
            base[d] = median_of([measure(px, {"task": "baseline", "endpoint": ep, "bucket": bucket,
                                              "key": base_key}, len(msgs)) for _ in range(trials)])
            for op, task, count in (("latest", "latest", len(msgs)), ("list(limit=10)", "list_limit", 10)):
                r = median_of([measure(px, {"task": task, "url": url, "endpoint": ep, "run": RUN}, count)
                               for _ in range(trials)])
                r.update(op=op, size=n, delay_ms=d, baseline_wall_s=base[d]["wall_s"])
                rows.append(r)
        mgr = CheckpointManager(url, endpoint_url=moto_ep)
        try:
            for d, px in proxies.items():
                got = []
                for _ in range(trials):
                    target = mgr.list(RUN, limit=6)[5].id
                    got.append(measure(px, {"task": "rollback", "url": url, "endpoint": px.endpoint,
                                            "run": RUN, "target": target}, 1))
                r = median_of(got)
                r.update(op="rollback 5 back", size=n, delay_ms=d, baseline_wall_s=base[d]["wall_s"])
                rows.append(r)
            for d, px in proxies.items():
                got = []
                for _ in range(trials):
                    head, after = (c.id for c in mgr.list(RUN, limit=2))
                    got.append(measure(px, {"task": "delete_head", "url": url, "endpoint": px.endpoint,
                                            "run": RUN, "target": head, "after": after}, 1))
                r = median_of(got)
                r.update(op="delete head", size=n, delay_ms=d, baseline_wall_s=base[d]["wall_s"])
                rows.append(r)
            for d, px in proxies.items():
                r = bench_fork(mgr, moto_ep, bucket, url, px, trials, f"fork-{d:g}ms")
                r.update(op="fork", size=n, delay_ms=d, baseline_wall_s=base[d]["wall_s"])
                rows.append(r)
        finally:
            mgr.close()
    finally:
        for px in proxies.values():
            px.stop()
    return rows


def bounded_targets(rows: list) -> None:
    """Targets of the bounded block: round trips of list(limit=10), of the rollback and of the head
    delete the same at the largest size as at the smallest (per delay), latest() at most 3 round
    trips."""
    sizes = sorted({r["size"] for r in rows})
    for r in rows:
        t, ok = None, None
        if r["op"] == "latest":
            t, ok = "<= 3 RT", r["round_trips"] <= 3
        elif r["op"] == "fork":
            t = f"<= {FORK_LIMIT // 1024} KB PUT and stored"
            ok = r["bytes_up"] <= FORK_LIMIT and r["stored_bytes_added"] <= FORK_LIMIT
        elif r["size"] == sizes[-1] and len(sizes) > 1:
            small = next(x for x in rows if x["op"] == r["op"] and x["delay_ms"] == r["delay_ms"]
                         and x["size"] == sizes[0])
            t, ok = f"RT = at {sizes[0]:,}", r["round_trips"] <= small["round_trips"]
        r["target"], r["verdict"] = t, (None if ok is None else ("PASS" if ok else "FAIL"))


def print_bounded(rows: list, meta: dict) -> None:
    print()
    print(f"bounded costs on S3 (moto behind a proxy of each delay; commit {meta['commit']}"
          f"{' + uncommitted changes' if meta['dirty'] else ''}; fresh process each, median of {meta['trials']})")
    head = ["operation", "saves", "delay", "requests by kind", "total", "seq RT", "wall s", "1 GET s", "target", ""]
    table = []
    for r in sorted(rows, key=lambda r: (r["op"], r["delay_ms"], r["size"])):
        kinds = ", ".join(f"{k} {_num(v)}" for k, v in r["requests"].items())
        rt = _num(r["round_trips"])
        if r["round_trips_range"][0] != r["round_trips_range"][1]:
            rt += f" ({r['round_trips_range'][0]}-{r['round_trips_range'][1]})"
        table.append([r["op"], f"{r['size']:,}", f"{r['delay_ms']:g} ms", kinds, _num(r["total"]), rt,
                      f"{r['wall_s']:.3f}", f"{r['baseline_wall_s']:.3f} ({r['wall_s'] / r['baseline_wall_s']:.1f}x)",
                      r["target"] or "", r["verdict"] or ""])
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    print("1 GET s: one GET of the final message list as zstd JSON (read, decompressed, json.loads), same proxy.")
    forks = sorted((r for r in rows if r["op"] == "fork"), key=lambda r: (r["delay_ms"], r["size"]))
    if forks:
        print("fork: mgr.fork(run, head id, new run) in a fresh process (it returns the new run's checkpoint, messages")
        print("read); bytes PUT: payload of its PUTs (median trial); stored: the bucket's objects and bytes after minus before.")
    for r in forks:
        print(f"  fork {r['size']:,} at {r['delay_ms']:g} ms: {r['requests'].get('PUT', 0)} PUTs, "
              f"{r['bytes_up']:,} bytes PUT; stored +{r['stored_objects_added']} objects, "
              f"+{r['stored_bytes_added']:,} bytes; {r['bytes_down']:,} bytes in GET responses")


# ==================================================================================================
# fork rows (in --bounded) and the objects block (--objects): what a run leaves in the bucket


FORK_LIMIT = 16 * 1024
"""Bytes a fork may add (issue 26): at most 16 KB PUT and 16 KB stored, whatever the history's length."""
OBJECT_KINDS = ("manifests", "log segments", "packs", "other")
WRITE_AMP_LIMIT = 3.0
"""Bytes PUT while populating over bytes stored afterwards, at 10,000 saves and more (issue 26 item 4)."""


def fork_child(mgr, spec: dict) -> dict:
    """Child side of a fork row: ``mgr.fork(spec["run"], spec["target"], spec["new_run"])`` timed
    around the call only (opening the repository included); the count is of the messages of the
    checkpoint it returns."""
    t0 = clock()
    cp = mgr.fork(spec["run"], spec["target"], spec["new_run"])
    t1 = clock()
    return {"t0": t0, "t1": t1, "count": len(cp.messages)}


def object_kind(key: str) -> str:
    """The kind of an object from its key below the repository prefix: ``manifests`` (``runs/*/m/``),
    ``log segments`` (``runs/*/l/``), ``packs`` (``packs/``) or ``other`` (config, run markers, pins,
    a run's other records...)."""
    segs = key.split("/")
    if segs[0] == "packs":
        return "packs"
    if segs[0] == "runs" and len(segs) >= 4 and segs[2] in ("m", "l"):
        return "manifests" if segs[2] == "m" else "log segments"
    return "other"


def bucket_objects(endpoint: str, bucket: str) -> dict:
    """Objects and bytes under the repository prefix of ``bucket`` (LIST pages straight to
    ``endpoint``): ``{"objects": int, "bytes": int, "kinds": {kind: {"objects", "bytes"}}}``, kinds
    as :func:`object_kind`. The baseline object, outside the prefix, is not counted."""
    kinds = {k: {"objects": 0, "bytes": 0} for k in OBJECT_KINDS}
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX + "/")
    for page in pages:
        for o in page.get("Contents", []):
            k = kinds[object_kind(o["Key"][len(PREFIX) + 1:])]
            k["objects"] += 1
            k["bytes"] += o["Size"]
    return {"objects": sum(k["objects"] for k in kinds.values()),
            "bytes": sum(k["bytes"] for k in kinds.values()), "kinds": kinds}


def populate_counted(moto_ep: str, moto_port: int, bucket: str, n: int) -> tuple[list, dict]:
    """:func:`populate` a run of ``n`` saves into ``bucket`` through a zero-delay
    :class:`LatencyProxy` that counts its requests and the payload bytes of its PUTs; then what the
    bucket holds (:func:`bucket_objects`). Returns (final message list, objects row: ``op``,
    ``size``, ``requests``, ``total``, ``bytes_put``, ``stored`` (:func:`bucket_objects`),
    ``write_amp`` (bytes PUT / bytes stored), ``baseline_bytes`` (the final history as one zstd
    level-3 JSON object), ``build_s``)."""
    import zstandard

    px = LatencyProxy(moto_port, 0.0).start()
    try:
        msgs, build_s = populate(px.endpoint, f"s3://{bucket}/{PREFIX}", n, f"size {n:,} (counted)")
        px.settle()
        with px.lock:
            log = list(px.log)
    finally:
        px.stop()
    if px.failures:
        raise AssertionError(f"counting proxy failures: {px.failures[:3]}")
    s = summarize(log)
    stored = bucket_objects(moto_ep, bucket)
    blob = zstandard.ZstdCompressor(level=3).compress(json.dumps(msgs).encode())
    return msgs, {"op": "objects", "size": n, "requests": s["requests"], "total": s["total"],
                  "bytes_put": s["bytes_up"], "stored": stored,
                  "write_amp": s["bytes_up"] / stored["bytes"] if stored["bytes"] else None,
                  "baseline_bytes": len(blob), "build_s": build_s}


def bench_fork(mgr, moto_ep: str, bucket: str, url: str, px: LatencyProxy, trials: int, tag: str) -> dict:
    """``trials`` forks of the run's head (each into a new run ``{tag}-{k}``, each in a fresh child
    behind ``px``); ``mgr`` (straight to moto) finds the head, and the bucket is listed before and
    after each fork. Returns the median trial (:func:`median_of`) with ``stored_objects_added`` and
    ``stored_bytes_added``; the fork's message count is checked against the head's."""
    got = []
    for k in range(trials):
        head = mgr.list(RUN, limit=1)[0]
        before = bucket_objects(moto_ep, bucket)
        r = measure(px, {"task": "fork", "url": url, "endpoint": px.endpoint, "run": RUN, "target": head.id,
                         "new_run": f"{tag}-{k}"}, head.message_count)
        after = bucket_objects(moto_ep, bucket)
        r.update(stored_objects_added=after["objects"] - before["objects"],
                 stored_bytes_added=after["bytes"] - before["bytes"])
        got.append(r)
    return median_of(got)


def bench_objects(sizes: list, moto_ep: str, moto_port: int) -> list:
    """The objects block alone: per size a fresh bucket populated by :func:`populate_counted`."""
    rows = []
    for n in sizes:
        print(f"objects block, run of {n:,} saves ...", flush=True)
        rows.append(populate_counted(moto_ep, moto_port, new_bucket(moto_ep, f"o{n}"), n)[1])
    return rows


def objects_targets(rows: list) -> None:
    """Target of the objects block (issue 26 item 4): bytes PUT at most 3x bytes stored at 10,000
    saves and more; no target below."""
    for r in rows:
        if r["size"] >= 10_000:
            r["target"] = f"PUT/stored <= {WRITE_AMP_LIMIT:g}x"
            r["verdict"] = "PASS" if r["write_amp"] is not None and r["write_amp"] <= WRITE_AMP_LIMIT else "FAIL"
        else:
            r["target"] = r["verdict"] = None


def print_objects(rows: list, meta: dict) -> None:
    """The objects block's table: per size the bucket's objects by kind (count / bytes), bytes PUT
    while populating, bytes stored, their ratio, and the final history as one zstd JSON object."""
    print()
    print(f"objects in the bucket after populating one run (straight to moto through a zero-delay counting proxy, "
          f"no gc; commit {meta['commit']}{' + uncommitted changes' if meta['dirty'] else ''})")
    head = ["saves", "objects", *OBJECT_KINDS, "bytes PUT", "bytes stored", "PUT/stored", "1 zstd JSON",
            "requests", "target", ""]
    table = []
    for r in sorted(rows, key=lambda r: r["size"]):
        st = r["stored"]
        kinds = [f"{st['kinds'][k]['objects']:,} / {st['kinds'][k]['bytes']:,}" for k in OBJECT_KINDS]
        amp = f"{r['write_amp']:.2f}x" if r["write_amp"] is not None else "-"
        reqs = ", ".join(f"{k} {_num(v)}" for k, v in r["requests"].items())
        table.append([f"{r['size']:,}", f"{st['objects']:,}", *kinds, f"{r['bytes_put']:,}", f"{st['bytes']:,}",
                      amp, f"{r['baseline_bytes']:,}", reqs, r.get("target") or "", r.get("verdict") or ""])
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    print("kinds: objects / bytes; manifests runs/*/m/, log segments runs/*/l/, packs packs/, other: config, run")
    print("markers, pins, other run records. bytes PUT: payload of every PUT while populating (objects later")
    print("replaced or deleted included); 1 zstd JSON: the final message list as one zstd level-3 JSON object.")


# ==================================================================================================
# Targets and output


def targets(rows: list, n_runs: int) -> None:
    """Attach ``target`` (text) and ``verdict`` (PASS/FAIL/None) to the rows the targets name."""
    for r in rows:
        t, ok = None, None
        if r["op"] == "latest" and r["size"] == 1000:
            t, ok = "<= 40 req, <= 10 RT", r["total"] <= 40 and r["round_trips"] <= 10
        elif r["op"] == "latest" and r["size"] == 10000:
            t, ok = "<= 4x GET", r["wall_s"] <= 4 * r["baseline"]["wall_s"]
        elif r["op"] == "list" and r["size"] == 1000:
            t, ok = "<= 100 req, <= 12 RT", r["total"] <= 100 and r["round_trips"] <= 12
        elif r["op"] == "runs":
            # run markers (format.md §13): LIST pages only, no GET per run (the config GET and the
            # versioning check of a new manager aside)
            pages = 2 * -(-n_runs // 1000)
            t = "<= 6 RT" + ("" if n_runs == 200 else " (set for 200)") + f", <= {pages + 2} req"
            ok = r["round_trips"] <= 6 and r["total"] <= pages + 2
        elif r["op"] == "save (steady)":
            t, ok = "<= 3 req, ~2 RT (<= 2)", r["total"] <= 3 and r["round_trips"] <= 2
        r["target"], r["verdict"] = t, (None if ok is None else ("PASS" if ok else "FAIL"))


def _num(x) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.1f}"


def print_table(rows: list, local: dict | None, meta: dict) -> None:
    print()
    print(f"snapstore read/save latency on S3 (moto behind a {meta['delay_ms']:g} ms/request proxy on 127.0.0.1; "
          f"commit {meta['commit']}{' + uncommitted changes' if meta['dirty'] else ''})")
    head = ["operation", "size", "requests by kind", "total", "seq RT", "wall s", "baseline s", "target", ""]
    table = []
    for r in rows:
        kinds = ", ".join(f"{k} {_num(v)}" for k, v in r["requests"].items())
        size = f"{r['size']:,} runs" if r["op"] == "runs" else f"{r['size']:,}"
        total, rt = _num(r["total"]), _num(r["round_trips"])
        if r["op"] == "save (steady)":
            total += f" (max {r['total_max']})"
            rt += f" (max {r['round_trips_max']})"
        base = (f"{r['baseline']['wall_s']:.3f} ({r['wall_s'] / r['baseline']['wall_s']:.0f}x)"
                if "baseline" in r else "")
        table.append([r["op"], size, kinds, total, rt, f"{r['wall_s']:.3f}", base, r["target"] or "",
                      r["verdict"] or ""])
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    print()
    print("size: saves in the run (runs: runs in the repository). seq RT: sequential round trips, the longest")
    print("chain of requests each starting after the previous one ended. latest/list/runs: one fresh process")
    print(f"each, median wall of {meta['trials']} (requests and RT of the median trial); baseline: one GET of the")
    print("final message list as zstd JSON, read + decompressed + json.loads, fresh process, same proxy.")
    print(f"save (steady): a warm manager, medians over {STEADY_SAVES} saves after one warm-up save.")
    for r in rows:
        if r["op"] == "latest" and "bytes_down" in r:
            print(f"  {r['op']} {r['size']:,}: {r['bytes_down']:,} bytes in GET responses "
                  f"({r.get('ranged_gets', 0)} ranged GETs; baseline object {r.get('baseline_bytes', 0):,} bytes)")
    for r in rows:
        if r.get("total_range") and r["total_range"][0] != r["total_range"][1]:
            print(f"  note: {r['op']} {r['size']:,}: requests varied over trials {r['total_range']}, "
                  f"RT {r['round_trips_range']}")
        if r.get("outside_window"):
            print(f"  note: {r['op']} {r['size']:,}: {r['outside_window']} request(s) outside the timed window")
    if local:
        print()
        print(_local_read().report(local))


# ==================================================================================================
# prune (--prune): retention decided from the run log's copies (snapstore/manager/summaries.py)

PRUNE_KEEP = 100
PRUNE_AGE_S = 7200
"""Seconds the pruned run's objects are aged (moto's LastModified moved back) before the prune: a run
saved over hours, whose pruned records are older than FREE_AFTER and so are deleted in DeleteObjects
batches. Younger records are replaced by void records instead (docs/format.md §15), one
conditional PUT each: ``--prune-young`` measures that case too."""


def prune_child(mgr, spec: dict) -> dict:
    """Child side of a prune row: open the repository (not timed), then time
    ``prune(keep_last=PRUNE_KEEP, run_id=RUN)``; the count is of checkpoints kept afterwards."""
    mgr.repo  # opening the repository (config GET, versioning check) is outside the timing
    c0, t0 = time.process_time(), clock()
    gone = mgr.prune(keep_last=spec["keep"], run_id=spec["run"])
    t1, c1 = clock(), time.process_time()
    left = mgr.list(spec["run"])
    return {"t0": t0, "t1": t1, "count": len(left), "gone": len(gone), "cpu_s": c1 - c0}


def build_run_in_moto(moto_ep: str, n: int, tag: str) -> tuple[str, float]:
    """A run of ``n`` saves (the benchmark's messages) written through ``CheckpointManager`` into a
    MemoryStore, its objects then put straight into a new bucket through moto's in-process backend
    (the ThreadedMotoServer of this process; populating 10,000 saves over HTTP takes far longer).
    Returns the repository URL and the build time (s)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    from snapstore import CheckpointManager
    from snapstore.stores import MemoryStore

    mem = MemoryStore()
    mgr = CheckpointManager(mem, compact_log=False)  # as on S3 (its default there)
    msgs = prelude()
    t0 = time.perf_counter()
    for i in range(n):
        msgs = msgs + turn(SEED, i)
        mgr.save(RUN, msgs, step=i)
    bucket = new_bucket(moto_ep, tag)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for k, (data, _, _) in list(mem._objects.items()):
        backend.put_object(bucket, f"{PREFIX}/{k}", data)
    return f"s3://{bucket}/{PREFIX}", time.perf_counter() - t0


def age_bucket(bucket: str, seconds: float) -> None:
    """Move the LastModified of every object of ``bucket`` ``seconds`` back (moto's backend)."""
    from datetime import timedelta

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    for key in s3_backends[DEFAULT_ACCOUNT_ID]["aws"].buckets[bucket].keys.values():
        key.last_modified -= timedelta(seconds=seconds)


def bench_prune(sizes: list, moto_ep: str, proxy: LatencyProxy, young: bool = False) -> list:
    """``prune(keep_last=100)`` of one run of each size (fresh child process, through the proxy),
    on records aged PRUNE_AGE_S (and with ``young`` also on fresh ones), and the projection to
    1,000,000 checkpoints: the linear fit through the two largest sizes (requests, round trips,
    wall), i.e. a constant plus a cost per checkpoint."""
    rows = []
    for n in sizes:
        for aged in (True, False) if young else (True,):
            print(f"prune: run of {n:,} saves ({'aged' if aged else 'young'}) ...", flush=True)
            url, build_s = build_run_in_moto(moto_ep, n, f"p{n}{'a' if aged else 'y'}")
            if aged:
                age_bucket(url.split("/")[2], PRUNE_AGE_S)
            r = measure(proxy, {"task": "prune", "url": url, "endpoint": proxy.endpoint, "run": RUN,
                                "keep": PRUNE_KEEP}, min(n, PRUNE_KEEP))
            r.update(op="prune keep_last=100" + ("" if aged else " (young)"), size=n, build_s=build_s,
                     pruned=max(0, n - PRUNE_KEEP))
            rows.append(r)
    aged_rows = [r for r in rows if "young" not in r["op"] and r["size"] > PRUNE_KEEP]
    if len(aged_rows) >= 2:
        a, b = aged_rows[-2], aged_rows[-1]
        target = 1_000_000

        def fit(va, vb):  # the line through (a.size, va) and (b.size, vb) at 1M (never below vb)
            return max(vb, vb + (vb - va) / (b["size"] - a["size"]) * (target - b["size"]))
        kinds = [k for k in KINDS if k in b["requests"]]
        rows.append({"op": "prune keep_last=100 (projected)", "size": target, "projected": True,
                     "requests": {k: round(fit(a["requests"].get(k, 0), b["requests"][k])) for k in kinds},
                     "total": round(fit(a["total"], b["total"])),
                     "round_trips": round(fit(a["round_trips"], b["round_trips"])),
                     "wall_s": fit(a["wall_s"], b["wall_s"]), "from_sizes": [a["size"], b["size"]]})
        p = rows[-1]
        # the client's own time at 1M: the round trips at the delay plus its CPU (from the fit);
        # the measured wall above also holds moto's CPU (in this process, 2 cores)
        p["cpu_s"] = fit(a["cpu_s"], b["cpu_s"])
        p["client_s"] = p["round_trips"] * proxy.delay_s + p["cpu_s"]
    return rows


WIDE_KEEP = 10
"""``keep_last`` of the repository-wide prune row (``--prune-wide``): runs of 100 keep their 10 newest."""


def prune_wide_child(mgr, spec: dict) -> dict:
    """Child side of the repository-wide row: open the repository and list its runs (not timed),
    then time ``prune(keep_last=WIDE_KEEP)`` over every run; the count is of runs pruned."""
    mgr.repo
    c0, t0 = time.process_time(), clock()
    gone = mgr.prune(keep_last=spec["keep"])
    t1, c1 = clock(), time.process_time()
    return {"t0": t0, "t1": t1, "count": len({s.run_id for s in gone}), "gone": len(gone), "cpu_s": c1 - c0}


def build_runs_in_moto(moto_ep: str, runs: int, per_run: int, tag: str) -> tuple[str, float]:
    """``runs`` runs of ``per_run`` saves each (small messages: one short user message a save, so
    the build stays fast), written through ``CheckpointManager`` into a MemoryStore and put
    straight into a new bucket through moto's backend (as :func:`build_run_in_moto`).
    Returns the repository URL and the build time (s)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    from snapstore import CheckpointManager
    from snapstore.stores import MemoryStore

    mem = MemoryStore()
    mgr = CheckpointManager(mem, compact_log=False)
    t0 = time.perf_counter()
    for r in range(runs):
        msgs = prelude()[:1]
        for i in range(per_run):
            msgs = msgs + [{"role": "user", "content": f"run {r} turn {i}"}]
            mgr.save(f"wide-{r:05d}", msgs, step=i)
    bucket = new_bucket(moto_ep, tag)
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for k, (data, _, _) in list(mem._objects.items()):
        backend.put_object(bucket, f"{PREFIX}/{k}", data)
    return f"s3://{bucket}/{PREFIX}", time.perf_counter() - t0


def bench_prune_wide(shape: tuple[int, int], moto_ep: str, proxy: LatencyProxy) -> list:
    """``prune(keep_last=WIDE_KEEP)`` over a repository of ``shape`` = (runs, saves per run), its
    objects aged PRUNE_AGE_S, timed in a fresh child; plus the projection to 1,000,000 checkpoints
    in runs of the same length (requests, round trips and client CPU scaled by the number of runs:
    every run costs the same, and the runs share one bounded pool)."""
    runs, per = shape
    print(f"prune wide: {runs:,} runs x {per:,} saves ...", flush=True)
    url, build_s = build_runs_in_moto(moto_ep, runs, per, f"w{runs}x{per}")
    age_bucket(url.split("/")[2], PRUNE_AGE_S)
    r = measure(proxy, {"task": "prune_wide", "url": url, "endpoint": proxy.endpoint, "keep": WIDE_KEEP},
                runs if per > WIDE_KEEP else 0)
    r.update(op=f"prune keep_last={WIDE_KEEP}, all runs", size=runs * per, runs=runs, build_s=build_s,
             pruned=runs * max(0, per - WIDE_KEEP))
    f = 1_000_000 / (runs * per)
    p = {"op": f"prune keep_last={WIDE_KEEP}, all runs (projected)", "size": 1_000_000, "projected": True,
         "runs": round(runs * f), "requests": {k: round(v * f) for k, v in r["requests"].items()},
         "total": round(r["total"] * f), "round_trips": round(r["round_trips"] * f), "wall_s": r["wall_s"] * f,
         "cpu_s": r["cpu_s"] * f, "from_sizes": [f"{runs:,} x {per:,}"]}
    p["client_s"] = p["round_trips"] * proxy.delay_s + p["cpu_s"]
    return [r, p]


def print_prune_notes(rows: list) -> None:
    """Below the table: per prune row the client's CPU time, and how the projection is made."""
    for r in rows:
        if r["op"].startswith("prune") and "cpu_s" in r:
            extra = (f"; client time at 1M = {r['round_trips']:,} RT x delay + CPU = {r['client_s']:.0f} s "
                     f"(linear fit through sizes {r['from_sizes']}; the measured wall also holds moto's CPU)"
                     if r.get("projected") else f", {r.get('pruned', 0):,} pruned")
            if r.get("runs") and r.get("projected"):
                extra = (f"; {r['runs']:,} runs; client time at 1M = {r['round_trips']:,} RT x delay + CPU = "
                         f"{r['client_s']:.0f} s (measured {r['from_sizes'][0]} scaled by the number of runs)")
            elif r.get("runs"):
                extra += f" in {r['runs']:,} runs"
            print(f"  {r['op']} {r['size']:,}: client CPU {r['cpu_s']:.2f} s{extra}")


def prune_targets(rows: list) -> None:
    """Targets of the prune rows (issue 26): at most 3 requests per 100 checkpoints plus a constant
    (40) on aged records; the 1M projection under 15 minutes."""
    for r in rows:
        if not r["op"].startswith("prune") or "young" in r["op"]:
            continue
        if r.get("projected"):
            r["target"], ok = f"< 900 s (client {r['client_s']:.0f} s)", r["client_s"] < 900
        elif r.get("runs"):
            r["target"], ok = None, None  # the repository-wide row: its target is the projection's
        else:
            limit = 3 * r["size"] / 100 + 40
            r["target"], ok = f"<= {limit:,.0f} req", r["total"] <= limit
        r["verdict"] = None if ok is None else ("PASS" if ok else "FAIL")


git_commit = _lib.commit_stamp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", help="run lengths in saves, comma separated (default 100,1000,10000)")
    ap.add_argument("--runs", type=int, help="runs in the runs() repository, 3 saves each (default 200)")
    ap.add_argument("--delay-ms", type=float, help="delay the proxy adds to every response (default 50)")
    ap.add_argument("--trials", type=int, default=3, help="fresh processes per read measurement (median)")
    ap.add_argument("--local", action=argparse.BooleanOptionalAction, default=True,
                    help="also the local part on the largest shared coding-agent run (default on)")
    ap.add_argument("--no-save", action="store_true", help="skip the steady-state save measurement")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: defaults become sizes 20,100, 20 runs, 5 ms delay (< 1 min)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--prune", action="store_true",
                    help="also prune(keep_last=100) at each size on aged records, and a projection to 1M")
    ap.add_argument("--prune-only", action="store_true", help="only the prune rows (implies --prune, no --local)")
    ap.add_argument("--prune-young", action="store_true", help="prune rows on young records too (void PUTs)")
    ap.add_argument("--bounded", action="store_true",
                    help="only the bounded-cost block: list(limit=10), rollback 5 back, delete head, fork and "
                         "latest() per size at each --bounded-delays")
    ap.add_argument("--bounded-delays", default="20,80", help="delays (ms) of the bounded block (default 20,80)")
    ap.add_argument("--prune-wide", metavar="RUNSxSAVES", nargs="?", const="1000x100",
                    help="also a repository-wide prune(keep_last=10) over RUNS runs of SAVES saves (default "
                         "1000x100) and its projection to 1M checkpoints (--prune-only --sizes '' for only this)")
    ap.add_argument("--seg-limit", type=int, help="create the populated repositories with this seg_limit "
                    "(bounded segment lists, docs/format.md §10; default: the counter)")
    ap.add_argument("--seg-from", type=int, help="with --seg-limit: the counter until an own segment of this "
                    "level, bounded lists after (docs/format.md §10)")
    ap.add_argument("--fanout", type=int, help="create the populated repositories with this seg_fanout")
    ap.add_argument("--objects", action="store_true",
                    help="the objects block: per size the bucket's objects by kind and bytes PUT / bytes stored "
                         "while populating (with --bounded: of the bounded block's runs; alone: only this block)")
    if _lib.child_entry(argv, child_main):
        return 0
    args = ap.parse_args(argv)
    for name, full, quick in (("sizes", "100,1000,10000", "20,100"), ("runs", 200, 20), ("delay_ms", 50.0, 5.0)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    if args.seg_limit is not None:
        REPO_SETTINGS["seg_limit"] = args.seg_limit
    if args.seg_from is not None:
        REPO_SETTINGS["seg_from"] = args.seg_from
    if args.fanout is not None:
        REPO_SETTINGS["seg_fanout"] = args.fanout

    os.environ.update(DUMMY_ENV)
    for k in UNSET_ENV:
        os.environ.pop(k, None)
    sys.path.insert(0, str(REPO_ROOT))
    commit, dirty = git_commit()
    meta = {"delay_ms": args.delay_ms, "trials": args.trials, "commit": commit, "dirty": dirty,
            "settings": dict(REPO_SETTINGS),
            "sizes": sizes, "runs": args.runs, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    t_start = time.perf_counter()
    server, moto_port = start_moto()
    moto_ep = f"http://127.0.0.1:{moto_port}"
    if args.bounded or args.objects:
        objects = [] if args.objects else None
        try:
            rows = []
            for n in sizes if args.bounded else []:
                print(f"bounded block, run of {n:,} saves ...", flush=True)
                rows += bench_bounded(n, moto_ep, moto_port, [float(d) for d in args.bounded_delays.split(",")],
                                      args.trials, objects)
            if not args.bounded:
                objects = bench_objects(sizes, moto_ep, moto_port)
        finally:
            server.stop()
        if args.bounded:
            bounded_targets(rows)
            print_bounded(rows, meta)
        out = {"meta": meta, "rows": rows}
        if objects is not None:
            objects_targets(objects)
            print_objects(objects, meta)
            out["objects"] = objects
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
        return 0
    proxy = LatencyProxy(moto_port, args.delay_ms / 1000).start()
    rows = []
    if args.prune_only:
        args.prune, args.local = True, False
    if args.prune_wide:
        args.prune = True
    try:
        if args.prune:
            rows += bench_prune(sizes, moto_ep, proxy, args.prune_young)
        if args.prune_wide:
            shape = tuple(int(x.replace("_", "")) for x in args.prune_wide.lower().split("x"))
            rows += bench_prune_wide(shape, moto_ep, proxy)
        for n in ([] if args.prune_only else sizes):
            t0 = time.perf_counter()
            print(f"run of {n:,} saves ...", flush=True)
            rows += bench_size(n, moto_ep, proxy, args.trials, not args.no_save)
            print(f"  done in {time.perf_counter() - t0:.0f} s", flush=True)
        if not args.prune_only:
            print(f"runs() on {args.runs} runs ...", flush=True)
            rows.append(bench_runs(args.runs, moto_ep, proxy, args.trials))
    finally:
        proxy.stop()
        server.stop()
    local = None
    if args.local:
        print("local part ...", flush=True)
        local = bench_local()
    targets(rows, args.runs)
    if args.prune:
        prune_targets(rows)
    meta.update(total_s=time.perf_counter() - t_start, proxy_connections=proxy.connections,
                proxy_max_concurrent=proxy.max_concurrent, proxy_failures=proxy.failures[:20])
    print_table(rows, local, meta)
    if args.prune:
        print_prune_notes(rows)
    if proxy.failures:
        print(f"WARNING: {len(proxy.failures)} proxy connection failure(s), e.g. {proxy.failures[0]}")
    print(f"\nproxy: {len(proxy.log):,} requests on {proxy.connections:,} connections "
          f"(at most {proxy.max_concurrent} open at once); total {meta['total_s']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows, "local": local}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
