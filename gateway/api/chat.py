"""POST /v1/chat/completions: fit the context, relay the answer as it arrives, record it.

The client's body is parsed once and forwarded as the client's own bytes whenever the
engine changed nothing; when it did, only `messages` differs. Streams are relayed chunk
by chunk as they arrive; a client that hangs up cancels the upstream request; an upstream
that cuts a stream ends the client's stream with an error event. Authentication, the
request span, metrics and error rendering are the route skeleton's (`route.py`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import orjson
from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import (
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    parse_json_object,
    read_body,
)
from gateway.api.forwarding import is_bypass, relayed_headers, upstream_headers
from gateway.api.route import Call, call_of
from gateway.api.validation import validate_chat_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.errors import GatewayError, UpstreamTimeout, UpstreamUnreachable
from gateway.learner.traces import TraceEvent, TraceSink
from gateway.observability.explain import account_of, budget_source
from gateway.upstream.client import Upstream, timed_chunks
from gateway.upstream.sse import ChatStreamCollector, SSEDecoder, response_of_completion

log = logging.getLogger("ctxgate.chat")
ENDPOINT = "/v1/chat/completions"
CUT_STREAM_EVENT = (
    b'data: {"error": {"message": "The upstream API ended the stream early.", '
    b'"type": "server_error", "param": null, "code": "upstream_stream_cut"}}\n\n'
)


class ChatCompletions:
    """The chat completions route, as a pure ASGI app."""

    def __init__(self, upstream: Upstream, tracer: Tracer, *, engine: ContextEngine | None,
                 traces: TraceSink | None, max_body_bytes: int) -> None:
        self._upstream = upstream
        self._tracer = tracer
        self._engine = engine  # None: every call goes out as sent (no context engine)
        self._traces = traces
        self._max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = call_of(scope)
        headers = call.headers
        raw = await read_body(receive, self._max_body_bytes, headers.get("content-length"))
        body = parse_json_object(raw)
        validate_chat_request(body)
        call.stream = body.get("stream") is True
        forward = raw
        if is_bypass(headers) or self._engine is None:
            call.task_class = "bypass"
        else:
            await self._fit(self._engine, body, call)
            if call.fitted is not None and call.fitted.changed:
                forward = orjson.dumps(call.fitted.body)
        outgoing = upstream_headers(headers, call.caller, identity=True)
        await cancel_on_disconnect(receive, self._relay(send, forward, outgoing, call))

    async def _fit(self, engine: ContextEngine, body: dict[str, Any], call: Call) -> None:
        """Fit the context; if the engine itself fails (Redis down, a bug), fail open: the
        call goes out as the client sent it, task class `unmanaged`, with the error logged."""
        context = CallContext(call.caller.tenant, call.trace_id, call.headers)
        try:
            call.fitted = await engine.fit(body, context)
        except GatewayError:
            call.task_class = call.headers.get("x-ctxgate-task-class", "default")
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
        headers = [*relayed_headers(response), *self._our_headers(call),
                   (b"content-length", str(len(data)).encode())]
        status = response.status_code
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        if status == 200 and call.fitted is not None:
            try:
                call.response = response_of_completion(orjson.loads(data))
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                call.response = None

    async def _relay_stream(self, send: Send, response: httpx.Response, call: Call) -> None:
        headers = [*relayed_headers(response), *self._our_headers(call)]
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": headers})
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
            call.status = 502  # recorded as failed; the client saw 200 and the error event
            await send({"type": "http.response.body", "body": CUT_STREAM_EVENT,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        if watch:
            for data in decoder.flush():
                collector.add(data)
            call.response = collector.response()

    async def after_response(self, call: Call) -> None:
        """Feed the forecast and the learner; never fails the (already sent) response."""
        fitted = call.fitted
        if fitted is None or self._engine is None:
            return
        response = call.response or {}
        try:
            await self._engine.observe(fitted, response.get("usage"),
                                       response.get("finish_reason"))
            if self._traces is not None and response:
                self._traces.publish(TraceEvent(
                    tenant=call.caller.tenant, task_class=fitted.task_class,
                    session_id=fitted.session_id, trace_id=call.trace_id,
                    messages=fitted.body["messages"], response=response,
                    injected_bullet_ids=fitted.injected_bullet_ids, ts=time.time(),
                    account=account_of(fitted, await budget_source(self._engine, fitted,
                                                                   call.headers)),
                ))
        except Exception:
            log.exception("after-response hook failed", extra={"trace_id": call.trace_id})
