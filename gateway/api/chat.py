"""POST /v1/chat/completions: fit the context, relay the answer as it arrives, record it.

The client's body is parsed once and forwarded as the client's own bytes whenever the
engine changed nothing; when it did, only `messages` differs. Streams are relayed chunk
by chunk as they arrive; a client that hangs up cancels the upstream request; an upstream
that cuts a stream ends the client's stream with an error event.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    TrackedSend,
    cancel_on_disconnect,
    parse_json_object,
    read_body,
    request_headers,
    send_error,
)
from gateway.api.forwarding import is_bypass, relayed_headers, upstream_headers
from gateway.api.validation import validate_chat_request
from gateway.auth import Principal, authenticate
from gateway.context.engine import CallContext, FittedCall
from gateway.errors import GatewayError, InternalError, UpstreamTimeout, UpstreamUnreachable
from gateway.observability.tracing import parent_context, trace_id_of
from gateway.services import Services
from gateway.upstream.client import Upstream, UpstreamWait, timed_chunks
from gateway.upstream.sse import ChatStreamCollector, SSEDecoder, response_of_completion

log = logging.getLogger("ctxgate.chat")
ENDPOINT = "/v1/chat/completions"
CUT_STREAM_EVENT = (
    b'data: {"error": {"message": "The upstream API ended the stream early.", '
    b'"type": "server_error", "param": null, "code": "upstream_stream_cut"}}\n\n'
)


@dataclass
class Call:
    """What one request did, for metrics and logs."""

    started: float
    trace_id: str
    status: int = 0
    task_class: str = "none"
    upstream_s: float = 0.0
    ttfb_s: float | None = None
    wait: UpstreamWait = field(default_factory=UpstreamWait)  # upstream wait, not our time
    fitted: FittedCall | None = None
    principal: Principal | None = None
    stream: bool = False
    response: dict[str, Any] = field(default_factory=dict)


class ChatCompletions:
    """The chat completions route, as a pure ASGI app."""

    def __init__(self, services: Services, upstream: Upstream, tracer: Tracer) -> None:
        self._services = services
        self._upstream = upstream
        self._tracer = tracer
        self._settings = services.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        with self._tracer.start_as_current_span(
            f"POST {ENDPOINT}", context=parent_context(headers), kind=SpanKind.SERVER
        ) as span:
            call = Call(started=time.perf_counter(), trace_id=trace_id_of(span))
            tracked = TrackedSend(send)
            try:
                await self._serve(receive, tracked, headers, call)
            except GatewayError as error:
                call.status = error.status
                await send_error(send, error, [(b"x-ctxgate-trace-id", call.trace_id.encode())])
            except ClientGone:
                call.status = 499  # client closed request
            except Exception:
                log.exception("chat completion failed", extra={"trace_id": call.trace_id})
                call.status = 500
                if not tracked.started:
                    await send_error(send, InternalError(
                        f"The gateway failed on this request; trace id {call.trace_id}."),
                        [(b"x-ctxgate-trace-id", call.trace_id.encode())])
            finally:
                span.set_attribute("http.status_code", call.status)
                span.set_attribute("ctxgate.task_class", call.task_class)
                self._record(call)
        if call.status == 200 and call.fitted is not None:
            await self._after(call)

    async def _serve(self, receive: Receive, send: Send, headers: dict[str, str],
                     call: Call) -> None:
        raw = await read_body(receive, self._settings.max_body_bytes, headers.get("content-length"))
        call.principal = authenticate(headers, self._settings)
        body = parse_json_object(raw)
        validate_chat_request(body)
        call.stream = body.get("stream") is True
        forward = raw
        if is_bypass(headers) or self._services.engine is None:
            call.task_class = "bypass"
        else:
            await self._fit(body, headers, call)
            if call.fitted is not None and call.fitted.changed:
                forward = orjson.dumps(call.fitted.body)
        outgoing = upstream_headers(headers, call.principal, identity=True)
        await cancel_on_disconnect(receive, self._relay(send, forward, outgoing, call))

    async def _fit(self, body: dict[str, Any], headers: dict[str, str], call: Call) -> None:
        """Fit the context; if the engine itself fails (Redis down, a bug), fail open: the
        call goes out as the client sent it, task class `unmanaged`, with the error logged."""
        assert call.principal is not None
        context = CallContext(call.principal.tenant, call.trace_id, headers)
        try:
            call.fitted = await self._services.engine.fit(body, context)
        except GatewayError:
            call.task_class = headers.get("x-ctxgate-task-class", "default")
            raise
        except Exception:
            log.exception("context engine failed: forwarding unmanaged",
                          extra={"trace_id": call.trace_id})
            call.task_class = "unmanaged"
            return
        call.task_class = call.fitted.task_class

    async def _relay(self, send: Send, forward: bytes, outgoing: list[tuple[str, str]],
                     call: Call) -> None:
        with self._tracer.start_as_current_span("upstream POST chat/completions",
                                                kind=SpanKind.CLIENT):
            sent = time.perf_counter()
            response = await self._upstream.open("POST", "chat/completions",
                                                 headers=outgoing, content=forward)
            call.ttfb_s = time.perf_counter() - sent
            call.wait.seconds += call.ttfb_s
            try:
                streaming = response.headers.get("content-type", "").startswith(
                    "text/event-stream")
                if streaming and response.status_code < 400:
                    await self._relay_stream(send, response, call)
                else:
                    await self._relay_whole(send, response, call)
            finally:
                await response.aclose()
                call.upstream_s = time.perf_counter() - sent

    def _our_headers(self, call: Call) -> list[tuple[bytes, bytes]]:
        fitted = call.fitted
        overhead_ms = (time.perf_counter() - call.started - call.wait.seconds) * 1000
        before = fitted.tokens_before if fitted else 0
        after = fitted.tokens_after if fitted else 0
        dropped = len(fitted.drops) if fitted else 0
        return [
            (b"x-ctxgate-trace-id", call.trace_id.encode()),
            (b"x-ctxgate-task-class", call.task_class.encode()),
            (b"x-ctxgate-tokens-before", str(before).encode()),
            (b"x-ctxgate-tokens-after", str(after).encode()),
            (b"x-ctxgate-dropped-items", str(dropped).encode()),
            (b"x-ctxgate-overhead-ms", f"{overhead_ms:.3f}".encode()),
        ]

    async def _relay_whole(self, send: Send, response: httpx.Response, call: Call) -> None:
        reading = time.perf_counter()
        try:
            data = await response.aread()
            call.wait.seconds += time.perf_counter() - reading
        except httpx.TimeoutException:
            raise UpstreamTimeout("The upstream API stalled while answering.") from None
        except httpx.HTTPError:
            raise UpstreamUnreachable("The upstream API ended the response early.") from None
        call.status = response.status_code
        headers = [*relayed_headers(response), *self._our_headers(call),
                   (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": call.status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        if call.status == 200 and call.fitted is not None:
            try:
                call.response = response_of_completion(orjson.loads(data))
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                call.response = {}

    async def _relay_stream(self, send: Send, response: httpx.Response, call: Call) -> None:
        call.status = response.status_code
        headers = [*relayed_headers(response), *self._our_headers(call)]
        await send({"type": "http.response.start", "status": call.status, "headers": headers})
        watch = call.fitted is not None
        decoder, collector = SSEDecoder(), ChatStreamCollector()
        try:
            async for chunk in timed_chunks(response, call.wait):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if watch:
                    for data in decoder.feed(chunk):
                        collector.add(data)
        except httpx.HTTPError as exc:
            log.warning("upstream stream cut", extra={"trace_id": call.trace_id,
                                                      "error": type(exc).__name__})
            call.status = 502
            await send({"type": "http.response.body", "body": CUT_STREAM_EVENT,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if watch:
            for data in decoder.flush():
                collector.add(data)
            call.response = collector.response()

    def _record(self, call: Call) -> None:
        metrics = self._services.metrics
        total = time.perf_counter() - call.started
        metrics.requests.labels(ENDPOINT, str(call.status), call.task_class).inc()
        metrics.request_duration.labels(ENDPOINT).observe(total)
        metrics.overhead.labels(ENDPOINT).observe(max(total - call.wait.seconds, 0.0))
        if call.ttfb_s is not None:
            metrics.upstream_ttfb.labels(ENDPOINT).observe(call.ttfb_s)
            metrics.upstream_duration.labels(ENDPOINT).observe(call.upstream_s)
        log.info("chat completion", extra={
            "trace_id": call.trace_id, "status": call.status, "task_class": call.task_class,
            "stream": call.stream, "duration_ms": round(total * 1000, 3),
            "upstream_ms": round(call.upstream_s * 1000, 3),
            "tokens_before": call.fitted.tokens_before if call.fitted else None,
            "tokens_after": call.fitted.tokens_after if call.fitted else None,
        })

    async def _after(self, call: Call) -> None:
        """Feed the forecast and the learner; never fails the (already sent) response."""
        fitted, services = call.fitted, self._services
        assert fitted is not None and call.principal is not None
        try:
            await services.engine.observe(fitted, call.response.get("usage"),
                                          call.response.get("finish_reason"))
            if services.traces is not None and call.response:
                from gateway.learner.traces import TraceEvent

                services.traces.publish(TraceEvent(
                    tenant=call.principal.tenant, task_class=fitted.task_class,
                    session_id=fitted.session_id, trace_id=call.trace_id,
                    messages=fitted.body["messages"], response=call.response,
                    injected_bullet_ids=fitted.injected_bullet_ids, ts=time.time(),
                ))
        except Exception:
            log.exception("after-response hook failed", extra={"trace_id": call.trace_id})
