"""Every other method and path under /v1/: forwarded verbatim, response bodies streamed.

Models, embeddings, responses, files...: the gateway authenticates the caller, swaps the
credential in `keys` mode, and otherwise relays bytes both ways untouched (compressed
bodies stay compressed).
"""

from __future__ import annotations

import time

import httpx
from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    read_body,
    request_headers,
    send_error,
)
from gateway.api.forwarding import relayed_headers, upstream_headers
from gateway.auth import authenticate
from gateway.errors import GatewayError
from gateway.observability.tracing import parent_context, trace_id_of
from gateway.services import Services
from gateway.upstream.client import Upstream, UpstreamWait, timed_chunks

ENDPOINT = "/v1/*"


class Passthrough:
    """Relays one request under /v1/ to the same path upstream."""

    def __init__(self, services: Services, upstream: Upstream, tracer: Tracer) -> None:
        self._services = services
        self._upstream = upstream
        self._tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        method, path = scope["method"], scope["path"].removeprefix("/v1/")
        started = time.perf_counter()
        timing = {"upstream": 0.0}
        wait = UpstreamWait()
        status = 0
        with self._tracer.start_as_current_span(
            f"{method} /v1/{path}", context=parent_context(headers), kind=SpanKind.SERVER
        ) as span:
            trace = [(b"x-ctxgate-trace-id", trace_id_of(span).encode())]
            try:
                limit = self._services.settings.max_body_bytes
                body = await read_body(receive, limit, headers.get("content-length"))
                principal = authenticate(headers, self._services.settings)
                outgoing = upstream_headers(headers, principal, identity=False)
                status = await cancel_on_disconnect(receive, self._relay(
                    send, method, path, scope.get("query_string", b""), outgoing, body,
                    trace, timing, wait))
            except GatewayError as error:
                status = error.status
                await send_error(send, error, trace)
            except ClientGone:
                status = 499
            span.set_attribute("http.status_code", status)
        self._record(status, time.perf_counter() - started, timing["upstream"], wait.seconds)

    async def _relay(self, send: Send, method: str, path: str, query: bytes,
                     outgoing: list[tuple[str, str]], body: bytes,
                     trace: list[tuple[bytes, bytes]], timing: dict[str, float],
                     wait: UpstreamWait) -> int:
        sent = time.perf_counter()
        with self._tracer.start_as_current_span(f"upstream {method} {path}",
                                                kind=SpanKind.CLIENT):
            response = await self._upstream.open(method, path, headers=outgoing,
                                                 content=body or None, query=query)
            wait.seconds += time.perf_counter() - sent
            self._services.metrics.upstream_ttfb.labels(ENDPOINT).observe(wait.seconds)
            try:
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": [*relayed_headers(response, keep_length=True), *trace]})
                try:
                    async for chunk in timed_chunks(response, wait):
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": True})
                except httpx.HTTPError:
                    pass  # the upstream cut the body: end ours; the client sees it short
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
                timing["upstream"] = time.perf_counter() - sent
        return response.status_code

    def _record(self, status: int, total: float, upstream_s: float, waited_s: float) -> None:
        metrics = self._services.metrics
        metrics.requests.labels(ENDPOINT, str(status), "none").inc()
        metrics.request_duration.labels(ENDPOINT).observe(total)
        metrics.overhead.labels(ENDPOINT).observe(max(total - waited_s, 0.0))
        if upstream_s:
            metrics.upstream_duration.labels(ENDPOINT).observe(upstream_s)
