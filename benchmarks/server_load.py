"""Load check of the HTTP service: N concurrent clients saving and listing for a minute, against
the local store and against moto's S3 server; p50/p99 latency, throughput and errors.

Run (from the repository root; needs the server and test extras)::

    python benchmarks/server_load.py                         # 8 clients, 60 s per store, local and s3
    python benchmarks/server_load.py --clients 16 --seconds 30 --stores local --json out.json

Setup, per store: ``snapstore serve`` in its own process on 127.0.0.1 (a token from
``$SNAPSTORE_TOKEN``, uvicorn), on a fresh local repository (fsync on, the default) or on a fresh
bucket of moto's S3 server (``python -m moto.server`` in another process on 127.0.0.1). The
clients are threads of this process, each with its own keep-alive ``httpx.Client`` and its own
run. Each client loops until the time is up: a save (``POST /runs/{run}/checkpoints`` with the
run's message list plus 2 new messages of ~300-500 bytes, ``expectHead`` = the head it saved
last, so a lost or misordered write would show as a 409), and after every 4th save a listing
(``GET /runs/{run}/checkpoints?limit=20``) whose newest id must be the client's last save, and
one of ``GET /agents/{agent}/checkpoints?runId=``. Every request that is not 2xx, every
transport error and every listing that disagrees with the client's own record is an error.

Reported per store and operation: count, throughput (requests/s over the measured time), p50,
p90, p99 and max latency (ms, client side, request sent to response read). Exit status 1 if any
error was seen. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _lib  # noqa: E402

ROOT = _lib.REPO_ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def start_moto() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(url, proc)
    return proc, url


def start_server(repo: str, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "snapstore", "--repo", repo, "serve", "--port", str(port),
                             "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/healthz", proc)
    return proc, url


def message(rng: random.Random, i: int, kind: str) -> dict:
    words = " ".join(rng.choice(["read", "file", "test", "patch", "error", "line", "value", "config", "run"])
                     for _ in range(rng.randint(40, 70)))
    if kind == "assistant":
        return {"role": "assistant", "content": f"step {i}: {words}", "tool_calls": [
            {"id": f"call-{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": words[:80]})}}]}
    return {"role": "tool", "tool_call_id": f"call-{i}", "content": words}


class Client(threading.Thread):
    """One client: its own run, saving and listing until ``stop`` is set."""

    def __init__(self, idx: int, url: str, token: str, stop: threading.Event, seed: int):
        super().__init__(name=f"client-{idx}", daemon=True)
        self.url, self.token, self.stop = url, token, stop
        self.run_id = f"load/client-{idx}"
        self.agent = f"agent-{idx}"
        self.rng = random.Random(seed)
        self.lat: dict[str, list[float]] = {"save": [], "list": [], "agent-list": []}
        self.errors: list[str] = []

    def timed(self, op: str, c: httpx.Client, method: str, path: str, **kw):
        t0 = time.perf_counter()
        try:
            r = c.request(method, path, **kw)
            r.read()
        except httpx.HTTPError as e:
            self.errors.append(f"{op}: {type(e).__name__}: {e}")
            return None
        self.lat[op].append(time.perf_counter() - t0)
        if not 200 <= r.status_code < 300:
            self.errors.append(f"{op}: HTTP {r.status_code}: {r.text[:200]}")
            return None
        return r.json()

    def run(self) -> None:
        msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
        head = ""
        seg = quote(self.run_id, safe="")
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60) as c:
            i = 0
            while not self.stop.is_set():
                i += 1
                msgs = msgs + [message(self.rng, i, "assistant"), message(self.rng, i, "tool")]
                got = self.timed("save", c, "POST", f"/runs/{seg}/checkpoints",
                                 json={"messages": msgs, "step": i, "agentId": self.agent, "expectHead": head,
                                       "tokenUsage": {"input_tokens": 900 * i, "output_tokens": 60}})
                if got is None:
                    break
                head = got["id"]
                if i % 4 == 0:
                    page = self.timed("list", c, "GET", f"/runs/{seg}/checkpoints", params={"limit": 20})
                    if page is not None and page["checkpoints"][0]["id"] != head:
                        self.errors.append(f"list: newest is {page['checkpoints'][0]['id']}, saved {head}")
                    page = self.timed("agent-list", c, "GET", f"/agents/{self.agent}/checkpoints",
                                      params={"runId": self.run_id, "limit": 20})
                    if page is not None and page["checkpoints"][0]["id"] != head:
                        self.errors.append(f"agent-list: newest is {page['checkpoints'][0]['id']}, saved {head}")


def measure(store: str, clients: int, seconds: float, tmp: str) -> dict:
    token = secrets.token_urlsafe(24)
    env = dict(os.environ, SNAPSTORE_TOKEN=token)
    procs = []
    try:
        if store == "local":
            repo = os.path.join(tmp, "repo")
        else:
            moto, endpoint = start_moto()
            procs.append(moto)
            env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
            for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
                env.pop(k, None)
            import boto3
            boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                         aws_secret_access_key="testing").create_bucket(Bucket="load")
            repo = f"s3://load/bench?endpoint_url={endpoint}&addressing_style=path&region=us-east-1"
        server, url = start_server(repo, env)
        procs.append(server)
        stop = threading.Event()
        workers = [Client(i, url, token, stop, seed=1000 + i) for i in range(clients)]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        time.sleep(seconds)
        stop.set()
        for w in workers:
            w.join(120)
        elapsed = time.perf_counter() - t0
        metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
        store_requests = {line.split('"')[1]: float(line.split()[-1]) for line in metrics.splitlines()
                          if line.startswith("snapstore_store_requests_total{")}
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    ops = {}
    for op in ("save", "list", "agent-list"):
        xs = [x for w in workers for x in w.lat[op]]
        ops[op] = {"count": len(xs), "per_s": round(len(xs) / elapsed, 1),
                   "p50_ms": round(_lib.percentile(xs, 50) * 1000, 1), "p90_ms": round(_lib.percentile(xs, 90) * 1000, 1),
                   "p99_ms": round(_lib.percentile(xs, 99) * 1000, 1), "max_ms": round(max(xs) * 1000, 1) if xs else None}
    total = sum(o["count"] for o in ops.values())
    errors = [e for w in workers for e in w.errors]
    return {"store": store, "clients": clients, "seconds": round(elapsed, 1), "requests": total,
            "requests_per_s": round(total / elapsed, 1), "errors": len(errors), "error_samples": errors[:5],
            "ops": ops, "store_requests": store_requests}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--stores", default="local,s3", help="comma-separated: local, s3")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    results = []
    for store in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="snapstore-server-load-") as tmp:
            res = measure(store.strip(), args.clients, args.seconds, tmp)
        results.append(res)
        print(f"\n{res['store']}: {res['clients']} clients for {res['seconds']} s: {res['requests']} requests "
              f"({res['requests_per_s']}/s), {res['errors']} errors")
        print(f"  {'operation':<11} {'count':>7} {'per s':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for op, o in res["ops"].items():
            print(f"  {op:<11} {o['count']:>7} {o['per_s']:>7} {o['p50_ms']:>8} {o['p90_ms']:>8} {o['p99_ms']:>8} "
                  f"{o['max_ms']:>8}")
        print("  store requests: " + ", ".join(f"{k} {int(v)}" for k, v in sorted(res["store_requests"].items())))
        for e in res["error_samples"]:
            print("  error: " + e)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
