"""How a managed route fits one call: inline or on the fitting thread, within its time budget.

A large call (`offload.is_large`) is parsed (a piece at a time: `pieces.py`), fitted and
rendered on the fitting thread, so the event loop keeps answering other calls; a small
one inline. Either way fitting has
`CTXGATE_FIT_TIMEOUT_S` from the call's arrival (`offload.py` says how it stops). A call
past it becomes what its task class's `on_fit_timeout` says: `passthrough` (the default)
forwards it as the client sent it, task class `unmanaged`; `refuse` answers 503
`context_fit_timeout`. Both are logged and counted (`ctxgate_fit_timeouts_total`). The
class is the one the `x-ctxgate-task-class` header names, else `default`: a call's class
is only known once fitting has decided it. An engine failure (Redis down, a bug) fails
open the same way, logged as such; when the failure is Redis being down, the call is
still traced (`outage_trace`) so that feedback and the learner get it once Redis is back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway.api.asgi import parse_json_object
from gateway.api.pieces import parse_json_in_pieces
from gateway.context.engine import (
    HEADER_CLASS,
    HEADER_SESSION,
    CallContext,
    FittedCall,
    derive_session_id,
)
from gateway.context.offload import (
    LARGE_MESSAGES,
    Deadline,
    FitDeadline,
    fit_deadline,
    is_large,
)
from gateway.context.taskclass import DEFAULT_CLASS
from gateway.errors import ContextBudgetExceeded, ContextFitTimeout, GatewayError
from gateway.learner.traces import TraceEvent
from gateway.observability.explain import account_of, unmanaged_account
from gateway.store import STORE_DOWN
from gateway.wire.view import WireFormat, unmarked

if TYPE_CHECKING:
    from gateway.api.route import Call
    from gateway.context.engine import ContextEngine
    from gateway.context.offload import Cause, FittingThread
    from gateway.observability.metrics import Metrics

log = logging.getLogger("ctxgate.managed")
UNMANAGED = "unmanaged"
TraceParts = tuple[list[dict[str, Any]], dict[str, Any]]  # messages, account


@dataclass(frozen=True, slots=True)
class Prepared:
    """A call ready to forward: the bytes to send and what fitting made of it."""

    forward: bytes
    task_class: str
    fitted: FittedCall | None = None  # None: sent as the client sent it
    stream: bool = False
    # A call sent as it came whose body was parsed: its session's fidelity record and the
    # baseline signals are taken from it after the response (a timed-out call has none).
    sent: dict[str, Any] | None = None
    outage: bool = False  # fitting failed open because Redis is down: traced all the same


class Fitting:
    """The engine as the managed routes use it: placed on or off the loop, time-bounded."""

    def __init__(self, engine: ContextEngine, metrics: Metrics, timeout_s: float,
                 thread: FittingThread | None = None) -> None:
        self.engine = engine
        self.thread = thread
        self.timeout_s = timeout_s
        self._timeouts = metrics.fit_timeouts
        self._large: set[int] = set()  # ids of large calls' fitted calls not yet released

    async def prepare(self, wire: WireFormat, raw: bytes, call: Call) -> Prepared:
        """Parse, validate, fit and render `raw` within the call's time budget."""
        spent = time.perf_counter() - call.started  # reading the body counts too
        deadline = Deadline(time.monotonic() + self.timeout_s - spent)
        try:
            if self.thread is not None and is_large(raw):
                return self._owned(await self.thread.run(
                    lambda engine: _prepare(engine, wire, raw, call, parse_json_in_pieces),
                    deadline))
            async with fit_deadline(deadline):
                return await _prepare(self.engine, wire, raw, call, parse_json_object)
        except FitDeadline as late:
            return self._late(wire, raw, call, late.cause)
        except ContextBudgetExceeded:
            call.task_class = call.headers.get(HEADER_CLASS, DEFAULT_CLASS)
            raise

    def _owned(self, prepared: Prepared) -> Prepared:
        """A large call's fitted call, to be freed on the fitting thread (`release`)."""
        assert self.thread is not None
        if prepared.fitted is None:
            self.thread.let_go([])
        else:
            self._large.add(id(prepared.fitted))
        return prepared

    def release(self, call: Call) -> None:
        """Done with `call.fitted`: a large call's is freed on the fitting thread."""
        fitted = call.fitted
        if fitted is not None and id(fitted) in self._large and self.thread is not None:
            self._large.discard(id(fitted))
            box: list[Any] = [fitted]
            call.fitted = fitted = None
            self.thread.let_go(box)

    def _late(self, wire: WireFormat, raw: bytes, call: Call, cause: Cause) -> Prepared:
        named = call.headers.get(HEADER_CLASS, DEFAULT_CLASS)
        cls = self.engine.classes.get(named) or self.engine.classes[DEFAULT_CLASS]
        refuse = cls.on_fit_timeout == "refuse"
        self._timeouts.labels(cls.name, cause, "refused" if refuse else UNMANAGED).inc()
        log.warning("fitting took longer than the time budget: %s", "refused" if refuse
                    else "forwarded unmanaged", extra={
                        "trace_id": call.trace_id, "endpoint": wire.name, "cause": cause,
                        "task_class": cls.name, "fit_timeout_s": self.timeout_s,
                        "body_bytes": len(raw)})
        if refuse:
            call.task_class = cls.name
            raise ContextFitTimeout(
                f"Fitting this request's context took longer than its time budget of "
                f"{self.timeout_s:g} s (CTXGATE_FIT_TIMEOUT_S"
                f"{', the fitting queue was full' if cause == 'queue_full' else ''}); task "
                f"class {cls.name!r} refuses such calls (on_fit_timeout: refuse). Retry, or "
                "send a shorter history.")
        return Prepared(raw, UNMANAGED)

    def outage_trace(self, wire: WireFormat, call: Call, response: dict[str, Any]) -> TraceEvent:
        """The trace of a call sent as is because Redis was down: what it forwarded (the
        client's messages) under the class the header or the rules name (the session's
        remembered class is in Redis), no playbook injected, and the explainer's account of
        a call that was not fitted: failed open, the store unavailable."""
        assert call.sent_as_is is not None
        view = wire.view(call.sent_as_is)
        messages = view.body.get("messages") or []
        named = call.headers.get(HEADER_CLASS)
        if named not in self.engine.classes:
            named = self.engine.classifier.by_rules(view.body) or DEFAULT_CLASS
        tenant = call.caller.tenant
        session_id = (call.headers.get(HEADER_SESSION) or view.session_key
                      or derive_session_id(tenant, messages))
        return TraceEvent(tenant=tenant, task_class=named, session_id=session_id,
                          trace_id=call.trace_id, messages=messages, response=response,
                          ts=time.time(),
                          account=unmanaged_account(messages, session_id,
                                                    view.body.get("model")))

    async def trace_parts(self, fitted: FittedCall) -> TraceParts:
        """What a call's trace stores; built on the fitting thread for a large call."""
        if self.thread is None or len(fitted.body["messages"]) < LARGE_MESSAGES:
            return _trace_parts(fitted)

        async def build(_: ContextEngine) -> TraceParts:
            return _trace_parts(fitted)

        parts = await self.thread.run(build, Deadline(time.monotonic() + 10 * self.timeout_s))
        self.thread.let_go([])  # the parts go to the trace writer: freed where it drops them
        return parts


def _trace_parts(fitted: FittedCall) -> TraceParts:
    return unmarked(fitted.body["messages"]), account_of(fitted, fitted.budget_source)


async def _prepare(engine: ContextEngine, wire: WireFormat, raw: bytes, call: Call,
                   parse: Callable[[bytes], dict[str, Any]]) -> Prepared:
    """The call's body parsed, fitted and rendered, on whichever loop runs it: it reads
    `call` and never writes it (a late result must not touch a call already sent on)."""
    body = parse(raw)
    wire.validate(body)
    stream = body.get("stream") is True
    view = wire.view(body)
    headers = call.headers
    if view.session_key is not None and HEADER_SESSION not in headers:
        headers = {**headers, HEADER_SESSION: view.session_key}
    context = CallContext(call.caller.tenant, call.trace_id, headers)
    try:
        fitted = await engine.fit(view.body, context, compact=view.compact)
    except (GatewayError, FitDeadline):
        raise
    except Exception as exc:
        log.exception("context engine failed: forwarding unmanaged",
                      extra={"trace_id": call.trace_id, "endpoint": wire.name})
        return Prepared(raw, UNMANAGED, stream=stream, sent=body,
                        outage=isinstance(exc, STORE_DOWN))
    forward = orjson.dumps(wire.render(body, view, fitted)) if fitted.changed else raw
    return Prepared(forward, fitted.task_class, fitted, stream)
