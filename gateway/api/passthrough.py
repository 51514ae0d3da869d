"""Every other method and path under /v1/: forwarded verbatim, response bodies streamed.

Models, embeddings, responses, files...: the route skeleton authenticates the caller, this
route swaps the credential in `keys` mode and otherwise relays bytes both ways untouched
(compressed bodies stay compressed).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import Receive, Scope, Send, cancel_on_disconnect, read_body
from gateway.api.forwarding import relayed_headers, upstream_headers
from gateway.api.route import Call, call_of
from gateway.upstream.client import Upstream, timed_chunks

ENDPOINT = "/v1/*"


class Passthrough:
    """Relays one request under /v1/ to the same path upstream."""

    def __init__(self, upstream: Upstream, tracer: Tracer, *, max_body_bytes: int,
                 strip: str = "/v1/",
                 headers: Callable[[Call], list[tuple[str, str]]] | None = None) -> None:
        self._upstream = upstream
        self._tracer = tracer
        self._max_body_bytes = max_body_bytes
        self._strip = strip  # the part of the path the upstream's base URL already has
        self._headers = headers or (
            lambda call: upstream_headers(call.headers, call.caller, identity=False))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = call_of(scope)
        body = await read_body(receive, self._max_body_bytes,
                               call.headers.get("content-length"))
        await cancel_on_disconnect(receive, self._relay(scope, send, body, call))

    async def _relay(self, scope: Scope, send: Send, body: bytes, call: Call) -> None:
        method, path = scope["method"], scope["path"].removeprefix(self._strip)
        outgoing = self._headers(call)
        with self._tracer.start_as_current_span(f"upstream {method} {path}",
                                                kind=SpanKind.CLIENT):
            sent = time.perf_counter()
            response = await self._upstream.open(method, path, headers=outgoing,
                                                 content=body or None,
                                                 query=scope.get("query_string", b""))
            call.ttfb_s = time.perf_counter() - sent
            call.wait.seconds += call.ttfb_s
            try:
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": [*relayed_headers(response, keep_length=True),
                                        call.trace_header()]})
                try:
                    async for chunk in timed_chunks(response, call.wait):
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": True})
                except httpx.HTTPError:
                    pass  # the upstream cut the body: end ours; the client sees it short
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            finally:
                await response.aclose()
                call.upstream_s = time.perf_counter() - sent
