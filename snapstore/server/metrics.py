"""Prometheus metrics of the service (``GET /metrics``, text exposition format), on
``prometheus_client`` with a registry per app (several apps in one process do not mix).

Metrics:
    snapstore_http_requests_total{method,route,status}: requests answered (``route`` is the
        route template, e.g. ``/checkpoints/{checkpoint_id}``, or ``unmatched``).
    snapstore_http_request_duration_seconds{method,route}: latency histogram (seconds, until the
        last body byte was handed to the server).
    snapstore_http_requests_in_progress: requests being served.
    snapstore_http_request_body_bytes_total / snapstore_http_response_body_bytes_total: body bytes.
    snapstore_store_requests_total{kind}: requests the store made (PUT, GET, HEAD, LIST, DELETE).
    snapstore_store_bytes_total{direction}: payload bytes sent to (``up``) and read from
        (``down``) the store.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Metrics", "MetricsMiddleware", "CONTENT_TYPE_LATEST"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StoreCollector:
    """Reads the store's request counters (``store.stats``) at each scrape."""

    def __init__(self, store):
        self.store = store

    def collect(self):
        st = self.store.stats
        req = CounterMetricFamily("snapstore_store_requests", "Requests made to the object store", labels=["kind"])
        for kind, n in sorted(st.counts.items()):
            req.add_metric([kind], n)
        yield req
        b = CounterMetricFamily("snapstore_store_bytes", "Payload bytes moved to and from the object store",
                                labels=["direction"])
        b.add_metric(["up"], st.bytes_up)
        b.add_metric(["down"], st.bytes_down)
        yield b


class Metrics:
    """The service's metrics.

    Args:
        store: the object store whose ``stats`` (RequestStats) are exported.
    """

    def __init__(self, store):
        disable_created_metrics()  # no *_created series (process-wide setting of prometheus_client)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("snapstore_http_requests", "HTTP requests answered", ["method", "route", "status"],
                                registry=r)
        self.latency = Histogram("snapstore_http_request_duration_seconds", "HTTP request latency in seconds",
                                 ["method", "route"], buckets=_BUCKETS, registry=r)
        self.in_progress = Gauge("snapstore_http_requests_in_progress", "HTTP requests being served", registry=r)
        self.body_in = Counter("snapstore_http_request_body_bytes", "Request body bytes received", registry=r)
        self.body_out = Counter("snapstore_http_response_body_bytes", "Response body bytes sent", registry=r)
        r.register(_StoreCollector(store))

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Counts and times every HTTP request into ``metrics``."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        m = self.metrics
        t0 = time.perf_counter()
        status = 500
        sent = 0

        async def counting_receive():
            msg = await receive()
            if msg["type"] == "http.request":
                m.body_in.inc(len(msg.get("body", b"")))
            return msg

        async def watching_send(msg):
            nonlocal status, sent
            if msg["type"] == "http.response.start":
                status = msg["status"]
            elif msg["type"] == "http.response.body":
                sent += len(msg.get("body", b""))
            await send(msg)

        m.in_progress.inc()
        try:
            await self.app(scope, counting_receive, watching_send)
        finally:
            m.in_progress.dec()
            route = scope.get("route")
            tmpl = getattr(route, "path", None) or "unmatched"
            method = scope.get("method", "")
            m.requests.labels(method, tmpl, str(status)).inc()
            m.latency.labels(method, tmpl).observe(time.perf_counter() - t0)
            m.body_out.inc(sent)
