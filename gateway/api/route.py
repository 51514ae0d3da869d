"""The one route skeleton: what every API route does around its own work.

`Route(app, ...)` wraps a pure-ASGI route: it resolves the caller (tenant and upstream
credential), opens the request's server span (joining the client's W3C trace), renders
any gateway error in the route's API envelope (the only place errors are rendered),
records the request metrics and the request log line, and, once the response is sent and
the span closed, runs the route's after-response hook. The route reads what the skeleton
knows about the request (headers, caller, trace id) from `call_of(scope)` and writes back
what it did (task class, upstream timings, the fitted call).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanKind, Tracer

from gateway.api.asgi import ASGIApp, Message, Receive, Scope, Send, request_headers, send_response
from gateway.auth import Principal
from gateway.errors import (
    ClientGone,
    Envelope,
    GatewayError,
    InternalError,
    StoreUnavailable,
    openai_envelope,
)
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import parent_context, trace_id_of
from gateway.settings import Settings
from gateway.store import STORE_DOWN
from gateway.upstream.client import UpstreamWait

if TYPE_CHECKING:
    from gateway.context.engine import FittedCall, Lineage

log = logging.getLogger("ctxgate.route")
CALL = "ctxgate.call"  # the scope key under which a route finds its Call
CLIENT_CLOSED = 499  # nginx's "client closed request": the client hung up first

Authenticate = Callable[[Mapping[str, str], Settings], Principal]


@dataclass(slots=True)
class Call:
    """One request as the skeleton and its route see it: who, which trace, what it did."""

    headers: dict[str, str]  # lower-cased, parsed once
    trace_id: str
    started: float
    principal: Principal | None = None  # None on routes that take no tenant credential
    status: int = 0  # the response's status once it has started, 0 before
    answered: bool = False  # a relayed stream's last event has reached the client
    task_class: str = "none"
    stream: bool = False
    fitted: FittedCall | None = None
    sent_as_is: dict[str, Any] | None = None  # bypassed or unmanaged: its body, for fidelity
    lineage: Lineage | None = None  # what the body cache proved of `sent_as_is`'s messages
    # Why fitting failed open (None: it did not): the call went out as the client sent
    # it (`sent_raw`) and is traced all the same, with that reason.
    unmanaged: str | None = None
    sent_raw: bytes | None = None
    response: dict[str, Any] | None = None  # the upstream's answer, for the learners
    ttfb_s: float | None = None
    upstream_s: float = 0.0
    wait: UpstreamWait = field(default_factory=UpstreamWait)  # upstream wait, not our time

    @property
    def caller(self) -> Principal:
        """The authenticated caller, on a route that authenticates."""
        if self.principal is None:
            raise InternalError("This route reads a caller it does not authenticate.")
        return self.principal

    def trace_header(self) -> tuple[bytes, bytes]:
        return (b"x-ctxgate-trace-id", self.trace_id.encode())


AfterResponse = Callable[[Call], Awaitable[None]]


def call_of(scope: Scope) -> Call:
    """The Call the skeleton made for this request."""
    call: Call = scope[CALL]
    return call


class _StatusRecorder:
    """An ASGI `send` that notes the response's status on the call as it starts."""

    __slots__ = ("_call", "_send")

    def __init__(self, send: Send, call: Call) -> None:
        self._send = send
        self._call = call

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._call.status = message["status"]
        await self._send(message)


class Route:
    """Pure-ASGI wrapper giving `app` the gateway's auth, span, errors, metrics and log.

    Options: `endpoint` is the metrics label; `authenticate` resolves the caller (None for
    routes with their own check, e.g. the admin key); `envelope` renders gateway errors in
    the route's API format; `after` runs once a 200 response is sent; `log_as` names the
    request log line (None: no line, as for the verbatim /v1 passthrough).
    """

    def __init__(self, app: ASGIApp, *, settings: Settings, metrics: Metrics, tracer: Tracer,
                 endpoint: str, authenticate: Authenticate | None = None,
                 envelope: Envelope = openai_envelope, after: AfterResponse | None = None,
                 log_as: str | None = None) -> None:
        self._app = app
        self._settings = settings
        self._tracer = tracer
        self._endpoint = endpoint
        self._authenticate = authenticate
        self._envelope = envelope
        self._after = after
        self._log_as = log_as
        self._requests = metrics.requests
        # One series per route: bound once, not looked up per request.
        self._duration = metrics.request_duration.labels(endpoint)
        self._overhead = metrics.overhead.labels(endpoint)
        self._ttfb = metrics.upstream_ttfb.labels(endpoint)
        self._upstream = metrics.upstream_duration.labels(endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        with self._tracer.start_as_current_span(
            f"{scope['method']} {scope['path']}", context=parent_context(headers),
            kind=SpanKind.SERVER,
        ) as span:
            call = Call(headers, trace_id_of(span), time.perf_counter())
            scope[CALL] = call
            await self._serve(scope, receive, send, call)
            span.set_attribute("http.status_code", call.status)
            span.set_attribute("ctxgate.task_class", call.task_class)
            self._record(call)
        if call.status == 200 and self._after is not None:
            await self._after(call)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, call: Call) -> None:
        try:
            if self._authenticate is not None:
                call.principal = self._authenticate(call.headers, self._settings)
            await self._app(scope, receive, _StatusRecorder(send, call))
        except GatewayError as error:
            await self._fail(send, call, error, error.status)
        except ClientGone:
            call.status = CLIENT_CLOSED
        except STORE_DOWN as error:  # feedback, admin: nothing to fail open to
            log.warning("redis unavailable", extra={"trace_id": call.trace_id,
                                                    "path": scope["path"],
                                                    "error": type(error).__name__})
            await self._fail(send, call, StoreUnavailable(
                "The gateway's store (Redis) is not answering; retry shortly."), 503)
        except Exception:  # a bug: an enveloped 500 with its trace id, never a bare one
            log.exception("request failed", extra={"trace_id": call.trace_id,
                                                   "path": scope["path"]})
            await self._fail(send, call, InternalError(
                f"The gateway failed on this request; trace id {call.trace_id}."), 500)

    async def _fail(self, send: Send, call: Call, error: GatewayError, status: int) -> None:
        """Render `error` in this route's envelope, unless the response already started."""
        started = call.status != 0
        call.status = status
        if not started:
            await send_response(send, error.status, self._envelope(error),
                                [call.trace_header(), *error.headers])

    def _record(self, call: Call) -> None:
        total = time.perf_counter() - call.started
        self._requests.labels(self._endpoint, str(call.status), call.task_class).inc()
        self._duration.observe(total)
        self._overhead.observe(max(total - call.wait.seconds, 0.0))
        if call.ttfb_s is not None:
            self._ttfb.observe(call.ttfb_s)
            self._upstream.observe(call.upstream_s)
        if self._log_as is not None:
            fitted = call.fitted
            log.info(self._log_as, extra={
                "trace_id": call.trace_id, "status": call.status,
                "task_class": call.task_class, "stream": call.stream,
                "duration_ms": round(total * 1000, 3),
                "upstream_ms": round(call.upstream_s * 1000, 3),
                "tokens_before": fitted.tokens_before if fitted else None,
                "tokens_after": fitted.tokens_after if fitted else None,
            })
