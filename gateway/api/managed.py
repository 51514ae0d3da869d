"""A managed route for one wire format: fit the context, relay the answer, record it.

The format's adapter (`gateway/wire/`) turns the request into the engine's chat view and
the engine's plan back into the format's request; everything else here is shared by every
format: fail-open fitting within a time budget, off the event loop for a large call
(`fitting.py`), the client's own bytes forwarded when nothing changed, the
stream relayed event by event as it arrives (watched, never delayed), the x-ctxgate-*
headers, and the forecast and trace after the response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import (
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    read_body,
)
from gateway.api.fitting import Fitting, as_is
from gateway.api.forwarding import is_bypass, relayed_headers, upstream_headers
from gateway.api.route import Call, call_of
from gateway.context.engine import FittedCall
from gateway.context.fidelity import CallSignals
from gateway.context.offload import FitDeadline
from gateway.errors import ClientGone, UpstreamTimeout, UpstreamUnreachable
from gateway.learner.traces import TraceEvent, TraceSink
from gateway.services import Services
from gateway.upstream.client import Upstream, timed_chunks
from gateway.upstream.sse import SSEDecoder
from gateway.wire.view import WireFormat

log = logging.getLogger("ctxgate.managed")
UpstreamHeaders = Callable[[Call], list[tuple[str, str]]]


def openai_headers(call: Call) -> list[tuple[str, str]]:
    """The client's headers for the OpenAI upstream (its credential swapped in `keys` mode)."""
    return upstream_headers(call.headers, call.caller, identity=True)


class ManagedRoute:
    """One wire format's model-call route, as a pure ASGI app."""

    def __init__(self, wire: WireFormat, upstream: Upstream, tracer: Tracer, *,
                 fitting: Fitting | None, traces: TraceSink | None, max_body_bytes: int,
                 upstream_headers: UpstreamHeaders, cut_event: bytes,
                 services: Services | None = None) -> None:
        self._wire = wire
        self._upstream = upstream
        self._tracer = tracer
        self._fitting = fitting  # None: every call goes out as sent
        self._traces = traces
        self._max_body_bytes = max_body_bytes
        self._upstream_headers = upstream_headers
        self._cut_event = cut_event  # ends the client's stream when the upstream cuts it
        self._services = services  # its `evidence` store gets each call's fidelity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        call = call_of(scope)
        raw = await read_body(receive, self._max_body_bytes, call.headers.get("content-length"))
        if is_bypass(call.headers) or self._fitting is None:
            call.sent_as_is = (as_is(self._wire, raw) if self._fitting is None
                               else await self._fitting.parse_as_is(self._wire, raw, call))
            call.stream = call.sent_as_is.get("stream") is True
            call.task_class = "bypass"
            forward = raw
        else:
            prepared = await self._fitting.prepare(self._wire, raw, call)
            call.stream, call.task_class = prepared.stream, prepared.task_class
            call.fitted, forward = prepared.fitted, prepared.forward
            call.sent_as_is, call.unmanaged = prepared.sent, prepared.unmanaged
            if call.unmanaged is not None:
                call.sent_raw = raw  # the trace of a call not fitted is built from it
            if prepared.fitted is not None and prepared.fitted.signals is not None:
                await self._record(prepared.fitted.signals)
            del prepared
        try:
            await cancel_on_disconnect(
                receive, self._relay(send, forward, self._upstream_headers(call), call))
        except ClientGone:
            if not call.answered:  # gone mid-stream: no after_response
                if self._fitting is not None:
                    self._fitting.release(call)
                raise
            # Gone after the stream's last event (a client may close as soon as it has it,
            # before the upstream's end arrives): the answer was whole, the call completes.
        except BaseException:  # an upstream error: no after_response
            if self._fitting is not None:
                self._fitting.release(call)
            raise
        if call.status != 200 and self._fitting is not None:
            self._fitting.release(call)  # no after_response either: done with it now

    async def _relay(self, send: Send, forward: bytes, outgoing: list[tuple[str, str]],
                     call: Call) -> None:
        path = self._wire.upstream_path
        with self._tracer.start_as_current_span(f"upstream POST {path}", kind=SpanKind.CLIENT):
            sent = time.perf_counter()
            response = await self._upstream.open("POST", path, headers=outgoing,
                                                 content=forward)
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

    async def _relay_whole(self, send: Send, response: httpx.Response, call: Call) -> None:
        reading = time.perf_counter()
        try:
            data = await response.aread()
            call.wait.seconds += time.perf_counter() - reading
        except httpx.TimeoutException:
            raise UpstreamTimeout("The upstream API stalled while answering.") from None
        except httpx.HTTPError:
            raise UpstreamUnreachable("The upstream API ended the response early.") from None
        headers = [*relayed_headers(response), *managed_headers(call),
                   (b"content-length", str(len(data)).encode())]
        status = response.status_code
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})
        if status == 200 and _traced(call):
            try:
                call.response = self._wire.summary(orjson.loads(data))
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                call.response = None

    async def _relay_stream(self, send: Send, response: httpx.Response, call: Call) -> None:
        headers = [*relayed_headers(response), *managed_headers(call)]
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": headers})
        watch = _traced(call)
        decoder, summary = SSEDecoder(), self._wire.stream_summary()
        last_events, tail = self._wire.last_events, b""
        try:
            async for chunk in timed_chunks(response, call.wait):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if not call.answered:  # a marker may straddle two chunks
                    seen = tail + chunk
                    call.answered = any(marker in seen for marker in last_events)
                    tail = seen[-32:]
                if watch:
                    for data in decoder.feed(chunk):
                        summary.add(data)
        except httpx.HTTPError as exc:
            log.warning("upstream stream cut", extra={"trace_id": call.trace_id,
                                                      "error": type(exc).__name__})
            call.status = 502  # recorded as failed; the client saw 200 and the error event
            await send({"type": "http.response.body", "body": self._cut_event,
                        "more_body": True})
        finally:  # also when the client hung up after the last event (`answered`)
            if watch:
                for data in decoder.flush():
                    summary.add(data)
                call.response = summary.response()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _record(self, signals: CallSignals) -> None:
        """One turn's fidelity signals (fidelity.py) to the metrics and the evidence store."""
        if self._fitting is not None:
            self._fitting.engine.metrics.fidelity(
                signals.task_class, signals.mode, signals.needed, signals.found,
                signals.tool_calls, signals.refetches, signals.repeats)
        if self._services is not None and self._services.evidence is not None:
            await self._services.evidence.record(signals)

    async def _observe_sent(self, call: Call, body: dict[str, Any]) -> None:
        """A call forwarded as sent: its session's fidelity record and baseline signals."""
        if self._fitting is None:
            return
        try:
            signals = await self._fitting.observe_sent(self._wire, call, body)
            if signals is not None:
                await self._record(signals)
        except Exception:
            log.warning("fidelity signals of a call sent as is failed",
                        extra={"trace_id": call.trace_id}, exc_info=True)

    async def _trace_unmanaged(self, call: Call) -> None:
        """A call that went out as sent because fitting failed open is traced all the same
        (a Redis outage's waits for Redis in the trace writer: traces.py)."""
        if self._fitting is None or self._traces is None or not call.response:
            return
        try:
            event = await self._fitting.unmanaged_trace(self._wire, call, call.response,
                                                        self._traces.trim)
            self._traces.publish(event, trimmed=True)
        except FitDeadline:  # the fitting thread's queue is full: a lesson, not a response
            log.warning("a call sent unmanaged is not traced: the fitting thread is busy",
                        extra={"trace_id": call.trace_id, "unmanaged": call.unmanaged})
        except Exception:
            log.exception("tracing a call sent unmanaged failed",
                          extra={"trace_id": call.trace_id, "unmanaged": call.unmanaged})

    async def _learn(self, call: Call, fitting: Fitting, fitted: FittedCall) -> None:
        """A fitted call's usage to the forecast, its trace to the learner."""
        response = call.response or {}
        await fitting.engine.observe(fitted, response.get("usage"),
                                     response.get("finish_reason"))
        if self._traces is not None and response:
            messages, account, pieces = await fitting.trace_parts(fitted)
            self._traces.publish(TraceEvent(
                tenant=call.caller.tenant, task_class=fitted.task_class,
                session_id=fitted.session_id, trace_id=call.trace_id,
                messages=messages, response=response,
                injected_bullet_ids=fitted.injected_bullet_ids, ts=time.time(),
                account=account, pieces=pieces,
            ))

    async def after_response(self, call: Call) -> None:
        """Feed the forecast and the learner; never fails the (already sent) response."""
        fitting = self._fitting
        try:
            if call.sent_as_is is not None:
                await self._observe_sent(call, call.sent_as_is)
            if call.unmanaged is not None:
                await self._trace_unmanaged(call)
            if call.fitted is not None and fitting is not None:
                await self._learn(call, fitting, call.fitted)
        except Exception:
            log.exception("after-response hook failed", extra={"trace_id": call.trace_id})
        finally:  # the call's own references are the last: freed where release says
            if fitting is not None:
                fitting.release(call)


def _traced(call: Call) -> bool:
    """Whether the call's answer is summarised for its trace."""
    return call.fitted is not None or call.unmanaged is not None


def managed_headers(call: Call) -> list[tuple[bytes, bytes]]:
    """The x-ctxgate-* response headers of a managed call."""
    fitted = call.fitted
    overhead_ms = (time.perf_counter() - call.started - call.wait.seconds) * 1000
    headers = [
        (b"x-ctxgate-trace-id", call.trace_id.encode()),
        (b"x-ctxgate-task-class", call.task_class.encode()),
        (b"x-ctxgate-tokens-before", str(fitted.tokens_before if fitted else 0).encode()),
        (b"x-ctxgate-tokens-after", str(fitted.tokens_after if fitted else 0).encode()),
        (b"x-ctxgate-dropped-items", str(len(fitted.drops) if fitted else 0).encode()),
        (b"x-ctxgate-overhead-ms", f"{overhead_ms:.3f}".encode()),
    ]
    if fitted is not None:
        headers += [(b"x-ctxgate-budget-tokens", str(fitted.budget).encode()),
                    (b"x-ctxgate-budget-source", fitted.budget_source.encode())]
    return headers
