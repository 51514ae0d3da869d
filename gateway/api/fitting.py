"""How a managed route fits one call: inline or on the fitting thread, within its time budget.

A large call (`offload.is_large`) is parsed (past a megabyte a piece at a time:
`pieces.py`), fitted and rendered on the fitting thread, so the event loop keeps answering
other calls; a small one inline. A large bypassed call's body is parsed and validated
there too, and observed and freed there after the response (`parse_as_is`). Either way
fitting has `CTXGATE_FIT_TIMEOUT_S` from the call's arrival (`offload.py` says how it
stops). A call past it becomes what its task class's `on_fit_timeout` says: `passthrough`
(the default) forwards it as the client sent it, task class `unmanaged`; `refuse` answers
503 `context_fit_timeout`. Both are logged and counted (`ctxgate_fit_timeouts_total`). The
class is the one the `x-ctxgate-task-class` header names, else `default`: a call's class
is only known once fitting has decided it. An engine failure (Redis down, a bug) fails
open the same way, logged as such. A call that went out unmanaged is traced all the same
(`unmanaged_trace`), with the explainer's account of a call not fitted and why, so that
`ctxgate explain`, feedback and the learner find it (a Redis outage's once Redis is back);
a large one's trace is built on the fitting thread, as a large fitted call's is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from gateway.api.asgi import parse_json_object
from gateway.api.bodies import (
    LARGE_BYTES,
    MAX_BODY_BYTES,
    MAX_LARGE_BYTES,
    BodyCache,
    BodyEncoder,
    Decode,
)
from gateway.api.pieces import parse_large
from gateway.context.engine import (
    HEADER_CLASS,
    HEADER_SESSION,
    CallContext,
    FittedCall,
    Lineage,
    derive_session_id,
)
from gateway.context.offload import (
    LARGE_BODY_BYTES,
    LARGE_MESSAGES,
    Deadline,
    FitDeadline,
    fit_deadline,
    is_large,
)
from gateway.context.taskclass import DEFAULT_CLASS
from gateway.errors import ContextBudgetExceeded, ContextFitTimeout, GatewayError
from gateway.learner.traces import TraceEvent
from gateway.observability.explain import (
    STORE_DOWN_REASON,
    AccountPieces,
    Pieces,
    unmanaged_account,
)
from gateway.store import STORE_DOWN
from gateway.wire.view import ChatView, UnmarkedMessages, Views, WireFormat, unmarked

if TYPE_CHECKING:
    from gateway.api.route import Call
    from gateway.context.engine import ContextEngine
    from gateway.context.fidelity import CallSignals
    from gateway.context.offload import Cause, FittingThread, Job
    from gateway.observability.metrics import Metrics

log = logging.getLogger("ctxgate.managed")
UNMANAGED = "unmanaged"
TraceParts = tuple[list[dict[str, Any]], bytes, Pieces]  # messages, account (JSON), pieces
Trim = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]  # the trace writer's `trim`
T = TypeVar("T")
# How long after-response work (a large call's trace, its fidelity record) and a large
# bypassed call's parse may take on the fitting thread, at least (10 fit budgets if
# longer): the bound frees a stuck turn.
TRACE_BUILD_S = 10.0
# Why a call went out unmanaged, as its explainer account says (and `past_budget`).
ENGINE_FAILED = "the context engine failed"
QUEUE_FULL = "the fitting queue was full"


def past_budget(timeout_s: float) -> str:
    return f"fitting passed its time budget of {timeout_s:g} s"


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
    unmanaged: str | None = None  # why fitting failed open, if it did: traced all the same


class Fitting:
    """The engine as the managed routes use it: placed on or off the loop, time-bounded."""

    def __init__(self, engine: ContextEngine, metrics: Metrics, timeout_s: float,
                 thread: FittingThread | None = None) -> None:
        self.engine = engine
        self.thread = thread
        self.timeout_s = timeout_s
        self._timeouts = metrics.fit_timeouts
        self._large: set[int] = set()  # ids of large calls' fitted calls not yet released
        self._pieces = AccountPieces()  # each session's latest account pieces
        self._sent = UnmarkedMessages()  # each session's latest messages as traced
        self.bodies = BodyCache()  # a session's body decoded from where its last one ended
        # The same for the other wire formats, one cache each (a lineage names a body of
        # its own format only); a Responses body grows its `input`.
        self._bodies: dict[str, BodyCache] = {}
        self._bodies_lock = threading.Lock()
        self.views = Views()  # a Messages/Responses body's chat view built on from its last
        self.encoder = BodyEncoder()  # a body to forward encoded from its unchanged runs
        # The same for a body of a megabyte or more, on the fitting thread only: its runs
        # hold such bodies' messages, so they are dropped (and freed) there only.
        self.large_encoder = BodyEncoder(LARGE_BYTES, per_tenant=MAX_LARGE_BYTES)

    def bodies_of(self, wire: WireFormat) -> BodyCache:
        """The body cache of `wire`'s bodies (chat's is `bodies`)."""
        if wire.name == "/v1/chat/completions":
            return self.bodies
        with self._bodies_lock:
            cache = self._bodies.get(wire.name)
            if cache is None:
                cache = self._bodies[wire.name] = BodyCache(
                    name=getattr(wire, "items", "messages"))
            return cache

    async def prepare(self, wire: WireFormat, raw: bytes, call: Call) -> Prepared:
        """Parse, validate, fit and render `raw` within the call's time budget."""
        spent = time.perf_counter() - call.started  # reading the body counts too
        deadline = Deadline(time.monotonic() + self.timeout_s - spent)
        # Its new messages decoded and validated (the rest was, in its session's last call).
        resumed = self.bodies_of(wire).resume_traced(call.caller.tenant, raw,
                                                     (wire.name, wire.validate_from))
        checked = resumed is not None
        lineage: list[Lineage] = []  # what the body cache proved of the body, once decoded
        try:
            if self.thread is not None and _large(wire, raw, resumed and resumed[0]):
                # Validated as decoded: a body of a megabyte or more resumed there is
                # validated from where its last one's validation ended.
                decode = self._decoder(wire, call, parse_large, resumed, lineage,
                                       validate=not checked)
                return self._owned(await self.thread.run(
                    lambda engine: _prepare(engine, wire, raw, call, decode, True,
                                            self._encode(wire, raw, call, True), lineage,
                                            self.views,
                                            large=len(raw) >= MAX_BODY_BYTES),
                    deadline))
            async with fit_deadline(deadline):
                return await _prepare(self.engine, wire, raw, call,
                                      self._decoder(wire, call, parse_json_object, resumed,
                                                    lineage),
                                      checked, self._encode(wire, raw, call), lineage,
                                      self.views)
        except FitDeadline as late:
            return self._late(wire, raw, call, late.cause)
        except ContextBudgetExceeded:
            call.task_class = call.headers.get(HEADER_CLASS, DEFAULT_CLASS)
            raise

    async def parse_as_is(self, wire: WireFormat, raw: bytes, call: Call) -> dict[str, Any]:
        """A bypassed call's body, parsed and validated (`as_is`): on the fitting thread
        for a large one (a piece at a time: 0.6-0.9 s for 3.5 MB, where orjson took 0.15 s
        holding the loop throughout), which then frees it there (`release`). Not a fit: bounded
        as after-response work is, so that a slow parse is not done twice; one the thread
        cannot take (its queue full, or stuck) is parsed inline, as a small one is. A body
        that continues one the session sent before has only its new messages decoded: it
        stays on the loop (validated from where that one's validation ended), and a large
        one is observed and freed on the thread all the same."""
        resumed = self.bodies_of(wire).resume_traced(call.caller.tenant, raw,
                                                     (wire.name, wire.validate_from))
        if resumed is not None:
            body, call.lineage = resumed
            if self.thread is not None and _large(wire, raw, body):
                self._large.add(id(body))
            return body
        lineage: list[Lineage] = []
        inline = self._decoder(wire, call, parse_json_object, traced=lineage)
        if self.thread is None or not is_large(raw):
            body = as_is(wire, raw, inline)
        else:
            try:
                # Validated as decoded: resumed, from where its last body's validation
                # ended; else whole.
                body = await self.thread.run(_as_job(lambda _: as_is(
                    wire, raw, self._decoder(wire, call, parse_large, traced=lineage,
                                             validate=True), checked=True)),
                    self._later())
            except FitDeadline:
                log.info("the fitting thread is busy: a large bypassed call is parsed inline",
                         extra={"trace_id": call.trace_id, "endpoint": wire.name})
                return as_is(wire, raw, inline)
            self._large.add(id(body))
        call.lineage = lineage[-1] if lineage else None
        return body

    def _decoder(self, wire: WireFormat, call: Call, whole: Decode,
                 resumed: tuple[dict[str, Any], Lineage] | None = None,
                 traced: list[Lineage] | None = None, validate: bool = False) -> Decode:
        """`whole`, or the session's last body's values and the new messages decoded
        (`resumed`: already decoded so). What the body cache proved of the body (its
        `Lineage`, when it keeps it) is appended to `traced`. `parse_large` decodes on the
        fitting thread only: there a body of a megabyte or more is resumed and kept too
        (`BodyCache.decode_traced(off_loop=True)`), never on the loop; a Messages or
        Responses one's view is then built on from its last body's there, and kept apart
        (`Views.view(..., large=True)`: dropped on that thread only). `validate`: the body
        is validated as well (its error raised), a resumed one from where its last one's
        validation ended (`resumed` is validated already)."""
        if resumed is not None:
            body, lineage = resumed
            if traced is not None:
                traced.append(lineage)
            return lambda _raw: body
        tenant, bodies = call.caller.tenant, self.bodies_of(wire)
        off_loop = whole is parse_large
        if traced is None and not validate:
            return lambda raw: bodies.decode(tenant, raw, whole, off_loop)

        check = (wire.name, wire.validate_from) if validate else None

        def decode(raw: bytes) -> dict[str, Any]:
            body, lineage = bodies.decode_traced(tenant, raw, whole, off_loop, check)
            if lineage is not None and traced is not None:
                traced.append(lineage)
            if validate and (lineage is None or lineage.after is None):
                wire.validate(body)  # not resumed: validated whole
            return body

        return decode

    def _encode(self, wire: WireFormat, raw: bytes, call: Call, on_thread: bool = False
                ) -> Callable[[dict[str, Any]], bytes]:
        """How the fitted body of a call sent as `raw` is encoded: by runs (`BodyEncoder`)
        under a megabyte. A body from a megabyte on is fitted and freed on the fitting
        thread (issue 10): there by the runs of `large_encoder` (its items, per tenant),
        which only that thread uses, so that only it drops (and frees) what they hold;
        elsewhere (no thread) whole."""
        if len(raw) < MAX_BODY_BYTES:
            return self.encoder.dumps
        if not on_thread:
            return orjson.dumps
        return partial(self.large_encoder.dumps, name=wire.items, tenant=call.caller.tenant)

    def _owned(self, prepared: Prepared) -> Prepared:
        """A large call's fitted call, or its parsed body when the engine failed on it, to
        be freed on the fitting thread (`release`)."""
        assert self.thread is not None
        held = prepared.fitted if prepared.fitted is not None else prepared.sent
        if held is None:
            self.thread.let_go([])
        else:
            self._large.add(id(held))
        return prepared

    def release(self, call: Call) -> None:
        """Done with the call: a large call's fitted call (or parsed body) is freed on the
        fitting thread."""
        if self.thread is None:
            return
        if call.fitted is not None and id(call.fitted) in self._large:
            self._large.discard(id(call.fitted))
            box: list[Any] = [call.fitted]
            call.fitted = None
            self.thread.let_go(box)
        if call.sent_as_is is not None and id(call.sent_as_is) in self._large:
            self._large.discard(id(call.sent_as_is))
            box = [call.sent_as_is]
            call.sent_as_is = None
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
        return Prepared(raw, UNMANAGED, unmanaged=QUEUE_FULL if cause == "queue_full"
                        else past_budget(self.timeout_s))

    async def unmanaged_trace(self, wire: WireFormat, call: Call, response: dict[str, Any],
                              trim: Trim) -> TraceEvent:
        """The trace of a call that went out as the client sent it (`call.unmanaged` says
        why), built on the fitting thread for a large call: its body may be 100,000
        messages, parsed again (a timed-out call's never finished) and walked for the
        account; only the trimmed messages and the account come back to the loop."""
        assert call.sent_raw is not None and call.unmanaged is not None
        build = partial(_unmanaged_trace, wire=wire, raw=call.sent_raw, body=call.sent_as_is,
                        tenant=call.caller.tenant, trace_id=call.trace_id,
                        headers=call.headers, response=response, reason=call.unmanaged,
                        trim=trim)
        if self.thread is None or not is_large(call.sent_raw):
            return build(self.engine, parse=parse_json_object)
        return await self._on_thread(_as_job(partial(build, parse=parse_large)))

    async def observe_sent(self, wire: WireFormat, call: Call, body: dict[str, Any]
                           ) -> CallSignals | None:
        """A call sent as is (bypassed, or unmanaged): its session's fidelity record and
        baseline signals (`ContextEngine.observe_sent`), on the fitting thread for a large
        call whose body was parsed there (a walk of its every message)."""
        mode = UNMANAGED if call.unmanaged is not None else "bypass"
        on_thread = self.thread is not None and id(body) in self._large
        observe = partial(_observe_sent, wire=wire, body=body, mode=mode, context=CallContext(
            call.caller.tenant, call.trace_id, call.headers, call.lineage), views=self.views,
            large=on_thread)  # its view kept apart: dropped on the thread only
        if not on_thread:
            return await observe(self.engine)
        return await self._on_thread(observe)

    async def trace_parts(self, fitted: FittedCall) -> TraceParts:
        """What a call's trace stores; built on the fitting thread for a large call."""
        if self.thread is None or len(fitted.body["messages"]) < LARGE_MESSAGES:
            return _trace_parts(fitted, self._pieces, self._sent)
        return await self._on_thread(_as_job(
            lambda _: _trace_parts(fitted, self._pieces, self._sent)))

    def _later(self) -> Deadline:
        """The bound of work on the fitting thread that is not a fit."""
        return Deadline(time.monotonic() + max(10 * self.timeout_s, TRACE_BUILD_S))

    async def _on_thread(self, job: Job[T]) -> T:
        """After-response `job(engine)` on the fitting thread (what it leaves behind is
        freed there)."""
        assert self.thread is not None
        result = await self.thread.run(job, self._later())
        self.thread.let_go([])  # the result is the caller's: freed where it drops it
        return result


def as_is(wire: WireFormat, raw: bytes,
          parse: Callable[[bytes], dict[str, Any]] = parse_json_object,
          checked: bool = False) -> dict[str, Any]:
    """A call's body as the client sent it, parsed and validated (`checked`: `parse`
    validates it), or the OpenAI-shaped error that refuses it, cut loose from the frames
    (and their half-parsed body) that raised it: on the fitting thread, those are freed
    there."""
    try:
        body = parse(raw)
        if not checked:
            wire.validate(body)
    except GatewayError as refused:
        error = refused
    else:
        return body
    body = {}  # the last reference to the parsed body: dropped where this runs
    error.__traceback__ = error.__context__ = error.__cause__ = None
    raise error


def _large(wire: WireFormat, raw: bytes, body: dict[str, Any] | None) -> bool:
    """`offload.is_large`, with the messages (a Responses body's input items) counted
    when the body is already decoded."""
    if body is None:
        return is_large(raw)
    return len(raw) >= LARGE_BODY_BYTES or len(body[wire.items]) >= LARGE_MESSAGES


def _as_job(build: Callable[[ContextEngine], T]) -> Job[T]:
    async def job(engine: ContextEngine) -> T:
        return build(engine)

    return job


async def _observe_sent(engine: ContextEngine, *, wire: WireFormat, body: dict[str, Any],
                        mode: str, context: CallContext, views: Views | None = None,
                        large: bool = False) -> CallSignals | None:
    # what is proven of the view's messages
    view, lineage = _view(wire, body, context.lineage, views, large)
    if view.session_key is not None and HEADER_SESSION not in context.headers:
        context = CallContext(context.tenant, context.trace_id,
                              {**context.headers, HEADER_SESSION: view.session_key}, lineage)
    elif lineage is not context.lineage:
        context = CallContext(context.tenant, context.trace_id, context.headers, lineage)
    return await engine.observe_sent(view.body, context, mode)


def _view(wire: WireFormat, body: dict[str, Any], lineage: Lineage | None,
          views: Views | None, large: bool = False) -> tuple[ChatView, Lineage | None]:
    """`wire.view(body)` and what is proven of its messages: the body's lineage when the
    view is the body (chat), else the view's as `views` builds it (None: nothing; `large`:
    on the fitting thread, a large body's, kept apart)."""
    if views is not None:
        return views.view(wire, body, lineage, large)
    view = wire.view(body)
    return view, lineage if view.body is body else None


def _unmanaged_trace(engine: ContextEngine, *, wire: WireFormat, raw: bytes,
                     body: dict[str, Any] | None, tenant: str, trace_id: str,
                     headers: dict[str, str], response: dict[str, Any], reason: str,
                     trim: Trim, parse: Callable[[bytes], dict[str, Any]]) -> TraceEvent:
    """A call sent as is, as its trace: what it forwarded (the client's messages, as the
    trace writer keeps them) under the class the header or the rules name (the session's
    remembered class is in Redis, which may be what failed), no playbook injected, and the
    explainer's account of a call not fitted: every message sent as is, and why."""
    if body is None:  # timed out: its body was never (fully) parsed
        body = parse(raw)
        wire.validate(body)
    view = wire.view(body)
    messages = view.body.get("messages") or []
    named = headers.get(HEADER_CLASS)
    if named not in engine.classes:
        named = engine.classifier.by_rules(view.body) or DEFAULT_CLASS
    session_id = (headers.get(HEADER_SESSION) or view.session_key
                  or derive_session_id(tenant, messages))
    return TraceEvent(tenant=tenant, task_class=named, session_id=session_id,
                      trace_id=trace_id, messages=unmarked(trim(messages)), response=response,
                      ts=time.time(), account=orjson.dumps(unmanaged_account(
                          messages, session_id, view.body.get("model"), reason)))


def _trace_parts(fitted: FittedCall, pieces: AccountPieces,
                 sent: UnmarkedMessages | None = None) -> TraceParts:
    """A fitted call's messages and its account, serialised where it is built: a large
    call's account (a role and a plan entry per message) is megabytes of JSON, stored in
    pieces that the session's later calls share (`AccountPieces`: only those that changed
    are built); its messages unmarked from what the session's last call's gave (`sent`)."""
    messages = fitted.body["messages"]
    return (unmarked(messages) if sent is None
            else sent.of((fitted.tenant, fitted.session_id), messages),
            *pieces.of(fitted, fitted.budget_source))


async def _prepare(engine: ContextEngine, wire: WireFormat, raw: bytes, call: Call,
                   parse: Callable[[bytes], dict[str, Any]], checked: bool = False,
                   encode: Callable[[dict[str, Any]], bytes] = orjson.dumps,
                   lineage: list[Lineage] | None = None, views: Views | None = None,
                   large: bool = False) -> Prepared:
    """The call's body parsed (validated already when `checked`), fitted, rendered and
    encoded, on whichever loop runs it: it reads `call` and never writes it (a late result
    must not touch a call already sent on). `lineage`: what the body cache proved of the
    body as `parse` decoded it (its last entry), handed to the engine, which then skips its
    own byte check of the messages proven: the client's messages themselves (chat), or
    the view's messages built on from the last body's view (`views`; `large`: a body of a
    megabyte or more, on the fitting thread, its view kept apart)."""
    body = parse(raw)
    if not checked:
        wire.validate(body)
    stream = body.get("stream") is True
    view, proven = _view(wire, body, lineage[-1] if lineage else None, views, large)
    headers = call.headers
    if view.session_key is not None and HEADER_SESSION not in headers:
        headers = {**headers, HEADER_SESSION: view.session_key}
    context = CallContext(call.caller.tenant, call.trace_id, headers, proven)
    try:
        fitted = await engine.fit(view.body, context, compact=view.compact)
    except (GatewayError, FitDeadline):
        raise
    except Exception as exc:
        log.exception("context engine failed: forwarding unmanaged",
                      extra={"trace_id": call.trace_id, "endpoint": wire.name})
        return Prepared(raw, UNMANAGED, stream=stream, sent=body, unmanaged=STORE_DOWN_REASON
                        if isinstance(exc, STORE_DOWN) else ENGINE_FAILED)
    forward = encode(wire.render(body, view, fitted)) if fitted.changed else raw
    return Prepared(forward, fitted.task_class, fitted, stream)
