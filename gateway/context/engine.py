"""The context engine: fit each call to its class's forecast budget, logging every drop.

parse → classify (once per session) → forecast → [remembered decisions] → a compaction step
when a high-water mark is crossed (select → rerank → cluster → compress, each only if the
class enables it) → inject playbook → render. Between steps a call only re-applies the
session's remembered decisions, so consecutive calls share their rendered prefix; and it
reuses its previous call's work on the messages it already had (`prefix.py`), so a call
costs what its new content costs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, is_, itemgetter, ne, not_
from typing import TYPE_CHECKING, Any, NamedTuple

from cachetools import LRUCache

from gateway.context.adjust import ClassForecasts
from gateway.context.agents import (
    AgentClassStore,
    AgentRunStore,
    MemoryAgentClassStore,
    MemoryAgentRunStore,
    RedisAgentClassStore,
    RedisAgentRunStore,
)
from gateway.context.apply import (
    GIST,
    GIST_VALUES,
    apply_decisions,
    changed_decisions,
    drop_events,
    reapply,
    reapply_changed,
    same_texts,
    value_list,
)
from gateway.context.caches import ContextCaches
from gateway.context.calibration import TokenCalibration
from gateway.context.call_ids import ShortIds
from gateway.context.calls import RepeatScan, point_repeats, repeated_calls
from gateway.context.classify import (
    Classifier,
    HistoryRules,
    RequestScan,
    agent_fingerprint,
    request_text,
    system_text,
)
from gateway.context.controller import scaled_class
from gateway.context.drawing import drawn_from
from gateway.context.fidelity import CallSignals, Haystack, observe
from gateway.context.focus import task_focus
from gateway.context.fold import FoldMemo, fold, task_bound
from gateway.context.forecast import Budget, ForecastStore, forecast_budget
from gateway.context.injection import InjectedBlock, PlaybookSource, inject_block
from gateway.context.items import (
    Item,
    Layout,
    ParsedRequest,
    base_tokens,
    content_text,
    message_head,
    parse_request,
)
from gateway.context.models import ModelTable
from gateway.context.offload import check_deadline
from gateway.context.prefix import Lineage, Prefix, PrefixCache
from gateway.context.render import (
    CutMemo,
    Plan,
    Rendered,
    args_cuts,
    materialize_picked,
    render_from,
    render_messages,
    render_plan,
    with_cut_calls,
)
from gateway.context.scratchpad import unpinned_scratchpad
from gateway.context.session import Decision, RedisSessionStore, SessionState, SessionStore
from gateway.context.stages import STAGES, StageContext
from gateway.context.stages.base import decide
from gateway.context.stages.cluster import arrival_duplicates
from gateway.context.stages.ladder import give_back, step_target
from gateway.context.stale import stale_rule, stale_text
from gateway.context.steps import (
    agent_left,
    ages_out,
    ahead_of_share,
    calls_left,
    lagging_tokens,
    on_first_task,
    runs_of_one,
    stale_tokens,
    stated_left,
    step_horizon,
    system_stated,
    tail_mask_repays,
    text_tools_now,
    undecided,
    unrepaid,
    young,
)
from gateway.context.summarize import notable
from gateway.context.summarize import values as summarize_values
from gateway.context.taskclass import (
    ARRIVAL_OPTIONS,
    DEFAULT_CLASS,
    STAGE_ORDER,
    ClusterOptions,
    Compaction,
    CompressKind,
    CompressOptions,
    TaskClass,
    TextTools,
    agent_policy,
    load_task_classes,
)
from gateway.context.tokens import TokenCounter
from gateway.errors import ContextBudgetExceeded, InvalidRequest
from gateway.observability.droplog import DropEvent, DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.embeddings import Embedder

__all__ = ["CallContext", "ContextEngine", "FittedCall", "InjectedBlock", "Lineage",
           "PlaybookSource"]

log = logging.getLogger("ctxgate.context")

HEADER_CLASS = "x-ctxgate-task-class"
HEADER_SESSION = "x-ctxgate-session-id"
HEADER_BUDGET = "x-ctxgate-budget-tokens"


@dataclass(frozen=True)
class CallContext:
    tenant: str
    trace_id: str
    headers: Mapping[str, str]  # lower-cased request headers
    # What the gateway proved of the messages (`prefix.Lineage`); None: the engine checks.
    lineage: Lineage | None = None


@dataclass
class FittedCall:
    body: dict[str, Any]
    changed: bool
    task_class: str
    session_id: str
    tokens_before: int
    tokens_after: int
    drops: list[DropEvent]
    injected_bullet_ids: list[str]
    budget: int
    budget_source: str = "config"  # header | config | forecast (forecast.py)
    calibrate: str | None = None  # the model whose estimated counts this call's usage corrects
    tenant: str = ""
    trace_id: str = ""
    prefix_stable: bool | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # For wire adapters: per message sent, its index and new text or None (None: as sent),
    # before the playbook block; and the block itself, which the adapter places.
    plan: Plan | None = None
    block: InjectedBlock | None = None
    request: dict[str, Any] | None = None  # the client's body, for the explainer
    # The fidelity of the turn that answered the session's previous call (fidelity.py).
    signals: CallSignals | None = None
    # Per tool-call id: the arguments it is sent with, when not as the client sent them
    # (a repeated call's pointer, calls.py); chat messages in `body` carry them already.
    arguments: dict[str, str] | None = None
    # Whether tool-call ids go out short (`call_ids.short_id`, on both sides of each pair):
    # chat messages in `body` carry them already, a wire adapter renames its own items.
    short_ids: bool = False
    # What the gateway proved of `request`'s messages (`CallContext.lineage`).
    lineage: Lineage | None = None


def derive_session_id(tenant: str, messages: list[Mapping[str, Any]]) -> str:
    first_user = next(
        (content_text(m.get("content")) for m in messages if m.get("role") == "user"), ""
    )
    h = hashlib.blake2b(digest_size=8)
    for part in (tenant, system_text(messages), first_user):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


EMBED_MIN_TOKENS = 400


def _worth_embedding(body: dict[str, Any], tokens: int) -> bool:
    """Classify by embedding once a session has history or size: a short single question
    costs more to embed (milliseconds of CPU) than its class could save."""
    return tokens >= EMBED_MIN_TOKENS or any(m.get("role") == "assistant" for m in body["messages"])


def _budget_header(headers: Mapping[str, str]) -> int | None:
    raw = headers.get(HEADER_BUDGET)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value <= 0 or raw.strip() != str(value):
        raise InvalidRequest(
            f"{HEADER_BUDGET} must be a positive integer, got {raw!r}", param=HEADER_BUDGET
        )
    return value


def tool_names(body: Mapping[str, Any]) -> frozenset[str]:
    """The names of the functions a request's `tools` define: chat's `{"function": {"name"}}`,
    or the `{"name"}` of the Responses and Messages APIs (the wire views pass them as sent)."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return frozenset()
    names = ((t["function"] if isinstance(t.get("function"), Mapping) else t).get("name")
             for t in tools if isinstance(t, Mapping))
    return frozenset(n for n in names if isinstance(n, str))


@dataclass(frozen=True)
class _Request:
    """What `fit` knows of a call before fitting it."""

    body: dict[str, Any]
    call: CallContext
    messages: list[Mapping[str, Any]]
    encoding: str
    session_id: str
    prefix: Prefix | None  # the session's previous call, extended by this call's messages
    parsed: ParsedRequest | None  # parsed in full (None: only the new messages were)
    tokens_before: int
    state: SessionState
    cls: TaskClass
    budget: Budget
    block: InjectedBlock | None
    fixed: int  # tokens outside the items: reply priming, tool definitions, playbook block
    calibrate: str | None = None  # the model, when its counts are estimates (calibration.py)
    tools: frozenset[str] = frozenset()  # the names of the tools the request defines
    # what `_task_class` read of the messages (kept with the session's prefix)
    scan: RequestScan | None = None
    # the session's previous call when this one did not extend it (`prefix` None): its
    # items are the messages as the client sent them then (`_edited_start`)
    previous: Prefix | None = None


class _Applied(NamedTuple):
    """A call's items as the session's decisions before it send them, and the ids whose
    decision the call changed (`apply.changed_decisions`, once the stages have run)."""

    decisions: Mapping[str, Decision]
    items: list[Item]
    changed: set[str] | None = None


@dataclass(frozen=True)
class _Fitted:
    """The fitted messages (before the playbook block) and what to log and remember."""

    messages: list[Mapping[str, Any]]
    changed: bool
    tokens_after: int
    events: list[DropEvent]
    digests: list[str]
    prefix: Prefix | None  # what the session's next call may reuse
    plan: Plan | None = None  # how the messages rendered (None: all as sent)
    arguments: dict[str, str] | None = None  # call id -> arguments sent (calls.py)
    short_ids: bool = False  # tool-call ids sent short (call_ids.py)


class ContextEngine:
    def __init__(
        self,
        settings: Settings,
        redis: aioredis.Redis | None,
        metrics: Metrics,
        drop_log: DropLog,
        embedder: Embedder | None,
        playbook: PlaybookSource | None = None,
        *,
        sessions: SessionStore | None = None,
        agents: AgentClassStore | None = None,
        agent_runs: AgentRunStore | None = None,
        class_forecasts: ClassForecasts | None = None,
        prefix_cache_size: int = 256,
    ) -> None:
        self.classes: dict[str, TaskClass] = load_task_classes(settings)
        self.agent_policy = agent_policy(self.classes)
        self._aging: dict[str, TaskClass] = {}  # each class as a tool-using request sees it
        self.models = ModelTable.load(settings.models_file)
        self.counter = TokenCounter()
        self.metrics = metrics
        self.drop_log = drop_log
        self.embedder = embedder
        self.playbook = playbook
        self.classifier = Classifier(self.classes, embedder)
        if sessions is None:
            if redis is None:
                raise ValueError("a Redis client or a session store is required")
            sessions = RedisSessionStore(redis)
        self.sessions = sessions
        if agents is None:
            agents = MemoryAgentClassStore() if redis is None else RedisAgentClassStore(redis)
        self.agents = agents
        if agent_runs is None:
            agent_runs = MemoryAgentRunStore() if redis is None else RedisAgentRunStore(redis)
        self.agent_runs = agent_runs
        self.forecasts = ForecastStore(redis)
        # The caps the controller forecast per class (adjust.py), unless adjustment is off.
        self.adjust = settings.forecast_adjust
        self.class_forecasts = class_forecasts or ClassForecasts(redis)
        self._scaled: dict[tuple[int, float], TaskClass] = {}
        self.calibration = TokenCalibration(redis)
        self.caches = ContextCaches()
        # The previous call's work per session, reused by a call that only appends messages.
        self.prefixes = PrefixCache(prefix_cache_size)
        # Per (tenant, session): its agent's fingerprint, its harness's (the system prompt
        # alone) and the messages they were read from.
        self._agents_of: LRUCache[tuple[str, str], tuple[str | None, str | None, int]] = (
            LRUCache(maxsize=max(1, prefix_cache_size)))
        # Per (tenant, session) of calls sent as is: the fidelity haystack of the last one
        # and the number of its body (`Lineage.body`); a call whose body the gateway proved
        # to continue that one's reads only its new messages (taken out while in use).
        self.sent_seen: LRUCache[tuple[str, str], _SentSeen] | None = (
            LRUCache(maxsize=prefix_cache_size) if prefix_cache_size > 0 else None)

    def _session_agent(self, body: dict[str, Any], tenant: str, session_id: str,
                       prefix: Prefix | None) -> str | None:
        """`classify.agent_fingerprint(body)`, read from the session's last call where this
        one only appends to it (`prefix`: its messages proven unchanged, its tools the same):
        the fingerprint reads the request's first message and tools only, which such a call
        keeps."""
        key = (tenant, session_id)
        known = self._agents_of.get(key)
        messages = body["messages"]
        if known is not None and prefix is not None and known[2] == prefix.start > 0:
            fingerprint, harness = known[0], known[1]
        else:
            fingerprint = agent_fingerprint(body)
            harness = agent_fingerprint({"messages": messages})  # `SessionState.harness_runs`
        self._agents_of[key] = (fingerprint, harness, len(messages))
        return fingerprint

    async def _task_class(
        self, body: dict[str, Any], call: CallContext, state: SessionState, tokens: int,
        scan: RequestScan,
    ) -> TaskClass:
        """Header, else the session's remembered class, else its agent's, else rules (the
        agent policy for a tool-using request none matched), else nearest example. A
        tool-using request ages its old turns whatever its class (`TaskClass.aging_as`).
        `scan`: what the session's earlier calls read of its messages, when its prefix
        proved them unchanged (`classify.RequestScan`; read on from there)."""
        named = call.headers.get(HEADER_CLASS)
        if named is not None:
            if named not in self.classes:
                raise InvalidRequest(
                    f"unknown task class {named!r} in {HEADER_CLASS}", param=HEADER_CLASS
                )
        elif state.task_class in self.classes:
            named = state.task_class
        else:
            named = await self._agent_class(body, call.tenant, tokens)
            if named is None:
                # A one-shot short request: no embedding on the hot path, and nothing
                # remembered, so the session's first longer call decides its class.
                return self.classes[DEFAULT_CLASS]
        if state.task_class != named:
            state.task_class = named
            state.dirty.add("class")
        cls = self.classes[named]
        if not cls.compaction.ages and self.agent_policy is not None:
            messages = body.get("messages") or ()
            # is_agent_request, or tool history a harness keeps inside user turns
            if (body.get("tools") or scan.agent_history(messages)
                    or scan.scratchpads(messages)):
                cls = self._aging.setdefault(named, cls.aging_as(self.agent_policy))
            elif scan.text_tools(messages):  # is_text_tool_request
                key = f"{named}\x00text"
                cls = self._aging.get(key) or self._aging.setdefault(
                    key, text_tools_aging(cls.aging_as(self.agent_policy),
                                          self.agent_policy.text_tools))
            elif scan.resends(messages):  # a harness that re-sends its state
                key = f"{named}\x00resend"
                cls = self._aging.get(key) or self._aging.setdefault(
                    key, resend_aging(cls, self.agent_policy))
                if not (state.calls or state.steps or state.stable_calls):
                    _stable_before(state, messages)
            elif scan.reports(messages):  # an agent whose observations are user turns
                key = f"{named}\x00reports"
                cls = self._aging.get(key) or self._aging.setdefault(
                    key, report_aging(cls, self.agent_policy))
        return cls

    async def _forecast_caps(self, cls: TaskClass) -> tuple[TaskClass, bool]:
        """The class with the caps its forecast sets, and whether the controller set them
        (False: the YAML's hold, adjustment being off or no move made yet)."""
        if not (self.adjust and cls.forecast.adjust):
            return cls, False
        scale = await self.class_forecasts.scale(cls.name)
        if scale is None:
            return cls, False
        key = (id(cls), scale)  # classes live as long as the engine: ids are stable
        scaled = self._scaled.get(key)
        if scaled is None:
            if len(self._scaled) >= 256:
                self._scaled.clear()
            scaled = self._scaled[key] = scaled_class(cls, scale)
        return scaled, True

    async def _agent_class(self, body: dict[str, Any], tenant: str, tokens: int) -> str | None:
        """The class of the agent that sent a session's first call: the one recorded for it,
        else decided now and recorded (None: a short call that decides nothing)."""
        fingerprint = agent_fingerprint(body)
        if fingerprint is not None:
            known = await self.agents.get(tenant, fingerprint)
            if known in self.classes:
                return known
        named = self.classifier.by_rules(body)
        if named is None:
            if not _worth_embedding(body, tokens):
                return None
            named, _ = await self.classifier.classify(body)
        if fingerprint is None:
            return named
        return await self.agents.claim(tenant, fingerprint, named)

    async def _playbook(
        self, cls: TaskClass, call: CallContext, session_id: str, body: dict[str, Any],
        state: SessionState,
    ) -> InjectedBlock | None:
        if self.playbook is None or not cls.playbook.enabled:
            return None
        if state.playbook_pin is not None:  # an open session: its block came with its state
            return self.playbook.pinned_block(state.playbook_pin)
        return await self.playbook.block_for_session(
            call.tenant,
            cls.name,
            session_id,
            request_text(body["messages"]),
            cls.playbook.cap_tokens,
        )

    async def fit(
        self, body: dict[str, Any], call: CallContext, *, compact: bool = True
    ) -> FittedCall:
        """Fit one chat request to its task class's budget and log every drop.

        Returns the body to send upstream (the client's own `body` when nothing changed) with
        the account of the call: tokens before and after, drops, injected bullets, budget. A
        call that only appends messages to its session's previous call reuses that call's
        work (`prefix.py`); any other takes the full path: the session's remembered
        decisions, a compaction step when one is due, render. Either way the playbook block
        is injected last. Raises ContextBudgetExceeded when pinned content alone is over the
        budget (unless the class says `on_overflow: passthrough`), InvalidRequest on a bad
        ctxgate header. `compact=False`: classified, given the playbook and logged, every
        message sent as is (a request that only carries new items of a conversation the
        upstream holds)."""
        timer = time.perf_counter()
        seconds: dict[str, float] = {}
        request = await self._prepare(body, call)
        seconds["parse"] = time.perf_counter() - timer
        check_deadline()  # each phase of a large call takes long: stop between them
        block_tokens = request.block.tokens if request.block else 0
        # a session's first call over the budget is cut just enough (ladder.give_back):
        # pointers found after that fit would leave it under the budget's band
        point = compact and not (
            not request.state.prefix and not request.state.decisions
            and request.tokens_before + block_tokens
            > request.cls.compaction.high_water * request.budget.input)
        fitted = self._reused(request) if compact else _Fitted(
            request.messages, False, request.tokens_before + block_tokens, [], [], None)
        if fitted is None:
            full = await self._fit_full(request, seconds)
            if isinstance(full, FittedCall):  # pinned content over the budget, passed through
                return full
            fitted = full
        if compact:
            fitted = self._cut_calls(request, fitted)
        if point:  # not a first call cut to its budget: it lands in the budget's band
            fitted = self._fold(request, fitted)
        if point:
            fitted = self._point_repeats(request, fitted)
        if compact:
            fitted = self._short_ids(request, fitted)
        check_deadline()  # past the deadline nothing is saved: the call goes out unmanaged
        result = await self._finish(request, fitted, seconds)
        seconds["total"] = time.perf_counter() - timer
        for stage, spent in seconds.items():
            self.metrics.stage_seconds.labels(stage).observe(spent)
        return result

    async def _prepare(self, body: dict[str, Any], call: CallContext) -> _Request:
        """Parse (only the new messages when the session's previous call is cached), load
        the session, decide its class, forecast the budget, fetch the playbook block."""
        budget_header = _budget_header(call.headers)
        messages: list[Mapping[str, Any]] = body["messages"]
        model = self.models.lookup(body.get("model"))
        session_id = call.headers.get(HEADER_SESSION) or derive_session_id(call.tenant, messages)
        prefix = self.prefixes.take(call.tenant, session_id)
        parsed: ParsedRequest | None = None
        tools = tool_names(body)
        previous: Prefix | None = None
        if prefix is not None and prefix.tools == tools and prefix.extend(
            messages, model.encoding, self.counter, self.caches.parts, call.lineage
        ):
            base = base_tokens(body, self.counter, model.encoding)
            tokens_before = base + prefix.item_tokens
        else:
            previous, prefix = prefix, None  # `extend` leaves a prefix it refuses as it was
            parsed = parse_request(body, self.counter, model.encoding, self.caches.parts)
            base, tokens_before = parsed.base_tokens, parsed.tokens
        state = await self.sessions.load(call.tenant, session_id)
        # the prefix proved its messages unchanged (`extend`), those its scan read among them
        scan = prefix.scan if prefix is not None else None
        if prefix is None or scan is None or max(scan.count, scan.text_count,
                                                  scan.pad_count) > prefix.start:
            scan = RequestScan()
        cls, caps_forecast = await self._forecast_caps(
            await self._task_class(body, call, state, tokens_before, scan))
        if cls.compaction.ages and cls.compaction.repay_agent_runs:
            # how long the agent's sessions run, for the calls a step is weighed over
            fingerprint = self._session_agent(body, call.tenant, session_id, prefix)
            if fingerprint is not None:
                state.agent_runs = await self.agent_runs.note(
                    call.tenant, fingerprint, state.calls + 1)
            opts = cls.stages.compress
            known = self._agents_of.get((call.tenant, session_id))
            harness = known[1] if known is not None and fingerprint is not None else None
            if opts is not None and "user" in opts.kinds and harness is not None:
                # a harness whose every task brings its own tools (Toolathlon's MCP
                # servers) is a new agent per task: its record is the system prompt's
                state.harness_runs = (state.agent_runs if harness == fingerprint else
                                      await self.agent_runs.note(call.tenant, f"h:{harness}",
                                                                 state.calls + 1))
        stats = await self.forecasts.stats(call.tenant, cls.name)
        budget = forecast_budget(cls, model, body, stats, budget_header, caps_forecast)
        calibrate = str(body.get("model")) if model.estimated else None
        if calibrate is not None:  # no public tokenizer: fit in estimated tokens
            budget = budget.scaled(await self.calibration.scale(calibrate))
        block = await self._playbook(cls, call, session_id, body, state)
        return _Request(
            body, call, messages, model.encoding, session_id, prefix, parsed, tokens_before,
            state, cls, budget, block, fixed=base + (block.tokens if block else 0),
            calibrate=calibrate, tools=tools, scan=scan, previous=previous,
        )

    def _reused(self, r: _Request) -> _Fitted | None:
        """The call rendered from its session's previous call, when that is safe."""
        if r.prefix is None or _counted_text_run(r.cls, r.messages):
            return None  # a counted run may mask its latest output but one (`_tail_masks`)
        if _tail_output_waits(r.cls, r.messages, r.state):
            return None  # a run's large output may go as its digest (`_tail_digests`)
        reuse = r.prefix.reuse(
            r.messages, r.state, r.cls, r.budget.input, r.fixed, self.counter, self.caches
        )
        if reuse is None:
            return None
        self.prefixes.reused += 1
        if r.cls.compaction.ages:  # as _fit_items does on a call without a step
            r.state.calls += 1
            r.state.dirty.add("horizon")
        messages = (materialize_picked(r.messages, reuse.plan, r.prefix.copies, r.prefix.picks)
                    if reuse.changed else r.messages)
        return _Fitted(
            messages, reuse.changed, reuse.tokens_after, reuse.events, reuse.digests, r.prefix,
            reuse.plan if reuse.changed else None,
        )

    def _parsed(self, r: _Request) -> ParsedRequest:
        """Every item of a call whose session's prefix took only its new messages."""
        if r.prefix is None:
            return parse_request(r.body, self.counter, r.encoding, self.caches.parts)
        return r.prefix.parsed(base_tokens(r.body, self.counter, r.encoding))

    async def _fit_full(self, r: _Request, seconds: dict[str, float]) -> _Fitted | FittedCall:
        """Every item: remembered decisions, a compaction step when due, render."""
        parsed = r.parsed or self._parsed(r)
        pinned = r.fixed + sum(item.tokens for item in parsed.items if item.pinned)
        if pinned > r.budget.input:  # turns the model can do without, rather than refuse
            parsed = unpinned_scratchpad(
                r.messages, _text_call_unpinned(r.messages, parsed), self.counter)
            pinned = r.fixed + sum(item.tokens for item in parsed.items if item.pinned)
        if pinned > r.budget.input:
            return await self._overflow(r, parsed, pinned)
        final, ctx, stepped, applied = await self._fit_items(
            r.messages, parsed, r.cls, r.budget, r.state, r.fixed, seconds, r.prefix, r.tools,
            r.previous,
        )
        check_deadline()
        tokens_after = r.fixed + sum(item.tokens for item in final)
        if tokens_after > r.budget.input:  # the ladder ends in drops: only pinned content left
            self.metrics.budget_exceeded.labels(r.cls.name).inc()
            raise ContextBudgetExceeded(tokens_after, r.budget.input)
        rendered, events = _render(r, parsed.items, final, ctx, applied)
        prefix = self._prefix(r.messages, parsed, final, rendered, events, ctx, stepped, r.cls,
                              applied, r.prefix)
        if prefix is not None:
            prefix.tools = r.tools  # its `known` holds them: a call with other tools parses anew
        return _Fitted(
            rendered.messages, rendered.changed, tokens_after, events, rendered.digests, prefix,
            rendered.plan if rendered.changed else None,
        )

    async def _finish(
        self, r: _Request, fitted: _Fitted, seconds: dict[str, float]
    ) -> FittedCall:
        """Inject the playbook block, remember the session, log the drops, count."""
        block, cls, call = r.block, r.cls, r.call
        messages = inject_block(fitted.messages, block) if block else fitted.messages
        # a request sent as is (compact=False) says nothing of the session's prefix
        stable = self._track_prefix(r.state, fitted.digests, cls) if fitted.digests else None
        seen = (r.prefix.haystack if r.prefix else None) or Haystack()
        signals = observe(r.state, r.messages, fitted.plan, task_class=cls.name,
                          mode="managed", extra=block.text if block else "", haystack=seen)
        if fitted.prefix is not None:
            fitted.prefix.haystack = seen
            fitted.prefix.scan = r.scan  # it read these messages (or none of them)
        await self.sessions.save(call.tenant, r.session_id, r.state)
        self.drop_log.write_call(
            fitted.events,
            trace_id=call.trace_id,
            session_id=r.session_id,
            tenant=call.tenant,
            task_class=cls.name,
            tokens=(r.tokens_before, fitted.tokens_after, block.tokens if block else 0),
            signals=signals,
        )
        if fitted.prefix is not None:  # it holds this call's messages: its body's
            fitted.prefix.body = call.lineage.body if call.lineage is not None else None
            self.prefixes.put(call.tenant, r.session_id, fitted.prefix)
        changed = fitted.changed or block is not None
        self.metrics.context_tokens.labels(cls.name, "before").inc(r.tokens_before)
        self.metrics.context_tokens.labels(cls.name, "after").inc(fitted.tokens_after)
        self.metrics.budget_tokens.labels(cls.name, r.budget.source).observe(r.budget.input)
        return FittedCall(
            body={**r.body, "messages": messages} if changed else r.body,
            changed=changed,
            task_class=cls.name,
            session_id=r.session_id,
            tokens_before=r.tokens_before,
            tokens_after=fitted.tokens_after,
            drops=fitted.events,
            injected_bullet_ids=list(block.bullet_ids) if block else [],
            budget=r.budget.provider_tokens,
            budget_source=r.budget.source,
            calibrate=r.calibrate,
            tenant=call.tenant,
            trace_id=call.trace_id,
            prefix_stable=stable,
            stage_seconds=seconds,
            request=r.body,
            plan=fitted.plan,
            block=block,
            signals=signals,
            arguments=fitted.arguments,
            short_ids=fitted.short_ids,
            lineage=call.lineage,
        )

    def _short_ids(self, r: _Request, fitted: _Fitted) -> _Fitted:
        """Every tool-call id longer than 9 characters sent as `call_ids.short_id` of it,
        call and result alike (a managed call only: the ids then never change within a
        session). A call that reused its session's prefix renames only its new messages."""
        memo = (r.prefix.ids if r.prefix is not None else None) or ShortIds()
        messages = memo.rename(fitted.messages)
        if fitted.prefix is not None:
            fitted.prefix.ids = memo
        if not memo.changed:
            return fitted
        return replace(fitted, messages=messages, changed=True, short_ids=True)

    def _fold(self, r: _Request, fitted: _Fitted) -> _Fitted:
        """Old finished exchanges behind the session's horizon folded into a note in the
        user message before them (`fold.py`, `compress.fold_from_turns`), once the horizon
        has passed that many assistant turns: only the horizon moves it, so between steps
        every call folds the same (the memo, kept with the session's prefix, takes the
        last call's fold and its new messages). In a text-tool agent's queue of tasks it
        stops at the start of the task the horizon is in while that is young
        (`fold.task_bound`): an API agent's fold notes keep each call's values and result
        (tau2-bench telecom's queue, recall 100, lost 0.48 of cost @0.1 with the bound).
        In an API agent's queue on a later task (`Clock.task_statement`), the earlier
        tasks' notes go with their long call lines short (`fold.short_call`). In a queue
        on a later task (`Layout.task_starts`), an earlier task's aged replies are noted
        with the code words the agent typed again (`fold.fold_turns`)."""
        opts = r.cls.stages.compress
        least = opts.fold_from_turns if opts is not None and r.cls.compaction.ages else None
        horizon = r.state.horizon
        if least is None or horizon <= 0:
            return fitted
        memo = (r.prefix.folds if r.prefix is not None else None) or FoldMemo()
        if fitted.prefix is not None:
            fitted.prefix.folds = memo
        messages, encoding, parts = r.messages, r.encoding, self.caches.parts

        def gate() -> bool:
            return sum(1 for m in messages[:horizon] if m.get("role") == "assistant") >= least

        layout = (r.prefix.layout if r.prefix is not None
                  else r.parsed.layout if r.parsed is not None else None)
        if layout is None:
            layout = Layout()
            layout.extend(messages)
        folded = fold(
            fitted.messages, fitted.plan, fitted.events,
            task_bound(horizon, () if layout.clock.api_calls else layout.task_starts,
                       layout.turns, opts.mask_current_turns if opts is not None else None),
            memo.original(messages, encoding, lambda i: message_head(
                i, messages[i], self.counter, encoding, parts)),
            lambda text: self.counter.count(text, encoding), memo, gate,
            layout.clock.task_statement if layout.clock.api_calls else -1, messages,
            layout.task_starts[-1] if layout.task_starts else -1, layout.task_starts)
        if folded is None:
            return fitted
        return replace(fitted, messages=folded.messages, plan=folded.plan, changed=True,
                       tokens_after=fitted.tokens_after + folded.delta, events=folded.events)

    def _cut_calls(self, r: _Request, fitted: _Fitted) -> _Fitted:
        """Old exchanges' tool calls sent with the arguments the budget ladder cut (the
        items, the tokens and the drop events count them already)."""
        decisions = r.state.decisions
        known = r.prefix.cuts if r.prefix is not None else None
        cuts = known[1] if known is not None and known[0] is decisions else args_cuts(decisions)
        memo = (r.prefix.cut if r.prefix is not None else None) or CutMemo()
        if fitted.prefix is not None:  # the next call's decisions, unless a step replaces them
            fitted.prefix.cuts = (decisions, cuts)
            fitted.prefix.cut = memo
        cut = with_cut_calls(fitted.messages, fitted.plan, decisions, cuts, memo)
        if cut is None:
            return fitted
        messages, arguments = cut
        return replace(fitted, messages=messages, changed=True,
                       arguments={**(fitted.arguments or {}), **arguments})

    def _point_repeats(self, r: _Request, fitted: _Fitted) -> _Fitted:
        """Tool calls repeating an earlier call's arguments sent as pointers to it
        (`cluster.on_arrival`, calls.py): found in the forwarded messages alone, so every
        call renders an earlier message the same way. A call that reused its session's
        prefix reads only its new messages, a step call those from its first change
        (`RepeatScan`, kept with the session's prefix)."""
        opts = r.cls.stages.cluster
        if opts is None or not opts.on_arrival or not opts.arrival_calls:
            return fitted
        least = opts.arrival_call_min_chars
        min_chars = opts.arrival_min_chars if least is None else least
        prefix = fitted.prefix
        scan: RepeatScan | None = None
        if prefix is not None:
            # the previous call's scan read messages of this call (its prefix's byte check)
            scan = r.prefix.calls if r.prefix is not None else None
            if scan is None or scan.min_chars != min_chars:
                scan = RepeatScan(min_chars)
            prefix.calls = scan
            repeats = scan.scan(fitted.messages, fitted.plan, extends=prefix is r.prefix)
        else:
            repeats = repeated_calls(fitted.messages, min_chars)
        if not repeats:
            return fitted
        plan = fitted.plan
        indexes = [i for i, _ in plan] if plan is not None else range(len(fitted.messages))
        pointed = point_repeats(
            fitted.messages, indexes, fitted.events,
            lambda text: self.counter.count(text, r.encoding), min_chars, repeats,
            scan.events if scan is not None else None,
        )
        if pointed is None:
            return fitted
        return replace(fitted, messages=pointed.messages, changed=True,
                       tokens_after=fitted.tokens_after - pointed.saved,
                       events=pointed.events,
                       arguments={**(fitted.arguments or {}), **pointed.arguments})

    async def _fit_items(
        self,
        messages: list[Mapping[str, Any]],
        parsed: ParsedRequest,
        cls: TaskClass,
        budget: Budget,
        state: SessionState,
        fixed: int,
        seconds: dict[str, float],
        prefix: Prefix | None = None,
        tools: frozenset[str] = frozenset(),
        previous: Prefix | None = None,
    ) -> tuple[list[Item], StageContext, bool, _Applied]:
        """The items as sent, the stages' context, whether stages ran (a step), and the
        items as the session's decisions before this call send them (`prefix`: the
        session's, when it took this call's new messages; `previous`: the session's, when
        it did not)."""
        remembered = dict(state.decisions)
        known = self._known_values(parsed.items, cls, tools)
        final = prefix.applied(parsed.items, state.decisions, known, self.counter,
                               self.caches) if prefix is not None else None
        if final is None:
            final = self._apply_remembered(parsed.items, remembered, parsed.encoding, known)
        applied = _Applied(state.decisions, final)  # the stages return new lists
        stale = stale_tokens(parsed.items, state, cls, self.caches.stale)
        stale += lagging_tokens(parsed.items, state, cls, messages, known,
                                call_tokens=sum(item.tokens for item in parsed.items)
                                ) if state.calls else 0
        total = fixed + sum(item.tokens for item in final)
        over = total > cls.compaction.high_water * budget.input
        first_call = not state.prefix and not state.decisions
        # A later call over the budget ages what is due (`step_horizon`); a first call has
        # no cached prefix to keep, and the ladder cuts it to the budget just enough.
        forced = over and not first_call
        # a counted run's tail rewrites (`_tail_masks`) spend its instability budget
        tails = _tail_steps(cls, messages, parsed.items, state)
        horizon = step_horizon(messages, parsed.items, replace(state, steps=state.steps + tails)
                               if tails else state, cls, stale, forced=forced)
        turns_step = horizon != state.horizon
        ctx = StageContext(
            task_class=cls,
            counter=self.counter,
            encoding=parsed.encoding,
            embedder=self.embedder,
            fixed_tokens=fixed,
            horizon=horizon if cls.compaction.ages else len(messages),
            query=_current_step(messages),
            originals={i.id: i for i in parsed.items},
            decisions=remembered,
            caches=self.caches,
            known=known,
            focus=task_focus(messages, parsed.layout.clock.task_statement
                             if parsed.layout else -1),
            mask_focus=task_focus(messages),
            messages=messages,
            target=step_target(final, cls, budget.input, fixed, first_call) if over else None,
            first_call=first_call,
            calls=state.calls + 1,
            late_batch=state.late_batch,
            held_turn=_held_turn(parsed.items, state, cls.compaction, forced),
        )
        stepped = over or turns_step or cls.select_every_call
        tailed = False
        before = final
        left_batch = False  # this step's mask batch left out, in whole or in part
        if stepped:
            names = STAGE_ORDER if (over or turns_step) else ("select",)
            final = await self._run_stages(names, final, budget, ctx, over, seconds)
            if turns_step and not over and state.calls:
                final, horizon, left_batch = _leave_unrepaid(
                    messages, before, final, ctx, state.decisions, state, cls.compaction,
                    horizon, ahead_of_share(state, cls.compaction, before))
        marked = parsed.layout.pins if parsed.layout else ()
        newest = _arrival_start(messages, first_call)
        start = _edited_start(messages, parsed.items, before, state, newest, prefix, previous)
        final = arrival_duplicates(final, ctx, newest if start is None else start, marked,
                                   over, newest).items
        if over and first_call and ctx.target is not None:  # cut just enough
            final = give_back(before, final, ctx, ctx.target)
        elif not over and state.calls:
            # a run the agent's record calls one task rewrites at the tail only on a call
            # whose aging step changes its prefix anyway: one the repay rule left whole
            # (`_leave_unrepaid`) is no step (on those too: prefix stable 72.6 / 71.9)
            shifted = horizon != state.horizon  # only a step's call lists its re-send
            final, tailed = _tail_masks(messages, final, ctx, state, shifted, TAIL_ON_STEP,
                                        _first_rewrite(before, final) if shifted else None)
            if not (tailed or turns_step):
                final, tailed = _tail_digests(messages, final, ctx, state)
            stepped = stepped or tailed  # the next call re-applies the decisions (`_prefix`)
        if cls.compaction.ages:  # the instability budget counts this session's calls
            if horizon != state.horizon:
                state.horizon = horizon
                state.steps += 1
            state.calls += 1
            state.dirty.add("horizon")
        # ctx.decisions began as a copy: only the ids the stages touched differ
        changed = changed_decisions(ctx.decisions, state.decisions)
        if cls.compaction.ages and cls.compaction.repay_young_calls:
            # read only there (`compress._expired_digests`): a class without a young window
            # stores its counts as before
            late = _late_batch(state.late_batch, left_batch, ctx.decisions, changed)
            if late != state.late_batch:
                state.late_batch = late
                state.dirty.add("horizon")
        _stamp_step(ctx.decisions, state.decisions, changed)
        if changed:
            state.decide(ctx.decisions, changed)
        else:  # the session's own dict, equal: its prefix is then reused by identity
            ctx.decisions = state.decisions
        return final, ctx, stepped, applied._replace(changed=changed)

    async def _run_stages(
        self,
        names: tuple[str, ...],
        items: list[Item],
        budget: Budget,
        ctx: StageContext,
        over: bool,
        seconds: dict[str, float],
    ) -> list[Item]:
        """One compaction step: the class's stages among `names`, in order, timed."""
        cls = ctx.task_class
        for name in names:
            if not cls.enabled(name):
                continue
            rerank = cls.stages.rerank
            if name == "rerank" and not over and rerank and rerank.min_relevance is None:
                continue  # importance only orders budget cuts: a turns-only step skips it
            check_deadline()
            start = time.perf_counter()
            items = (await STAGES[name](items, budget, ctx)).items
            seconds[name] = time.perf_counter() - start
        return items

    def _apply_remembered(
        self,
        items: list[Item],
        decisions: Mapping[str, Decision],
        encoding: str,
        known: frozenset[str],
    ) -> list[Item]:
        return apply_decisions(
            items, decisions, self.counter, encoding, known, self.caches.rewritten
        )

    def _prefix(
        self,
        messages: list[Mapping[str, Any]],
        parsed: ParsedRequest,
        final: list[Item],
        rendered: Rendered,
        events: list[DropEvent],
        ctx: StageContext,
        stepped: bool,
        cls: TaskClass,
        applied: _Applied,
        extended: Prefix | None,
    ) -> Prefix | None:
        """What the session's next call can reuse. After a step, the next call renders the
        old messages by re-applying the step's decisions, not as the stages returned them,
        so that is what is kept (`applied`: what the decisions before the step gave, kept
        for the items whose decision the step left alone). `extended`: the session's
        previous prefix, extended by this call's messages (their fingerprint is known)."""
        if parsed.layout is None:
            return None
        if stepped:
            again = None if applied.changed is None else reapply_changed(
                parsed.items, ctx.decisions, applied.changed, applied.items, ctx.originals,
                self.counter, parsed.encoding, ctx.known, self.caches.rewritten)
            if again is None:
                again = reapply(parsed.items, ctx.decisions, applied.decisions, applied.items,
                                self.counter, parsed.encoding, ctx.known, self.caches.rewritten)
            if not same_texts(final, again):  # most steps re-apply to what they sent
                rendered = render_messages(messages, parsed.items, again, rendered.copies)
                events = drop_events(parsed.items, again, ctx.decisions)
            final = again
        return Prefix.build(
            messages, parsed.items, final, parsed.layout, rendered, events, ctx.decisions,
            ctx.known, cls.name, parsed.encoding, extended,
            cls.stages.compress if cls.compaction.ages else None,
            lines_min=_lines_min(cls),
            json_min=_json_min(cls),
            arrival_min=_arrival_min(cls),
            turns=_lines_turns(cls),
        )

    def _known_values(
        self, items: list[Item], cls: TaskClass, tools: frozenset[str] = frozenset()
    ) -> frozenset[str]:
        """Values of the session's constant context (system prompt, task statement, the
        names of the tools the request defines), as the model will see it however old the
        session gets (stale blocks already cut). A digest need not list a tool's name: the
        model reads the tool list on every call (agentdojo's turns name the tools they
        weigh; bench/README.md, "Aged turns that made tool calls")."""
        fixed = [item for item in items if item.kind == "system" or item.goal]
        key = "|".join([cls.name, *(item.id for item in fixed), "", *sorted(tools)])
        found = self.caches.known.get(key)
        if found is None:
            texts = []
            for item in fixed:
                rule = stale_rule(item, cls.stale_rules, self.caches.stale, any_age=True)
                texts.append(item.text if rule is None else stale_text(item.text, rule))
            texts.extend(sorted(tools))
            found = frozenset(v for text in texts for v in summarize_values(text))
            self.caches.known[key] = found
        return found

    def _track_prefix(self, state: SessionState, digests: list[str], cls: TaskClass) -> bool | None:
        stable: bool | None = None
        if state.prefix:
            count, _, digest = state.prefix.partition(":")
            n = int(count)
            stable = 0 < n <= len(digests) and digests[n - 1] == digest
            self.metrics.prefix_stable.labels(cls.name, "true" if stable else "false").inc()
        prefix = f"{len(digests)}:{digests[-1] if digests else ''}"
        if prefix != state.prefix:
            state.prefix = prefix
            state.dirty.add("prefix")
        return stable

    async def _overflow(self, r: _Request, parsed: ParsedRequest, pinned: int) -> FittedCall:
        cls, call, budget = r.cls, r.call, r.budget
        self.metrics.budget_exceeded.labels(cls.name).inc()
        await self.sessions.save(call.tenant, r.session_id, r.state)
        if cls.on_overflow != "passthrough":
            raise ContextBudgetExceeded(
                pinned,
                budget.input,
                detail="Pinned content (system prompt, latest user message, open tool calls) "
                "alone is over the budget.",
            )
        log.warning(
            "pinned content needs %d tokens over the budget of %d; forwarded unchanged "
            "(task class %s: on_overflow passthrough)",
            pinned,
            budget.input,
            cls.name,
        )
        return FittedCall(
            body=r.body,
            changed=False,
            task_class=cls.name,
            session_id=r.session_id,
            tokens_before=parsed.tokens,
            tokens_after=parsed.tokens,
            drops=[],
            injected_bullet_ids=[],
            budget=budget.provider_tokens,
            budget_source=budget.source,
            calibrate=r.calibrate,
            tenant=call.tenant,
            trace_id=call.trace_id,
        )

    async def observe(
        self, fitted: FittedCall, usage: Mapping[str, Any] | None, finish_reason: str | None
    ) -> None:
        completion = usage.get("completion_tokens") if usage else None
        prompt = usage.get("prompt_tokens") if usage else None
        if fitted.calibrate is not None and isinstance(prompt, int):
            self.calibration.observe(fitted.calibrate, fitted.tokens_after, prompt)
        await self.forecasts.observe(
            fitted.tenant,
            fitted.task_class,
            int(completion) if isinstance(completion, int) else None,
            overflow=finish_reason == "length",
        )

    async def observe_sent(
        self, body: Mapping[str, Any], call: CallContext, mode: str
    ) -> CallSignals | None:
        """A call forwarded as sent (bypassed, or unmanaged when fitting failed): the
        fidelity of the turn that answered its session's last call (`fidelity.py`), the
        session's record updated. Its class: the header's, the session's, else by rules."""
        messages = body.get("messages") or []
        session_id = call.headers.get(HEADER_SESSION) or derive_session_id(call.tenant, messages)
        state = await self.sessions.load(call.tenant, session_id)
        seen = self._seen_sent(call, session_id)
        named = call.headers.get(HEADER_CLASS) or state.task_class
        if named not in self.classes:
            named = self.classifier.by_rules(
                body, seen.rules if seen is not None else None) or DEFAULT_CLASS
        state.dirty.clear()  # only the fidelity record is this call's to write
        signals = observe(state, messages, None, task_class=named, mode=mode,
                          haystack=seen.haystack if seen is not None else None)
        if seen is not None and call.lineage is not None and self.sent_seen is not None:
            self.sent_seen[(call.tenant, session_id)] = replace(seen, body=call.lineage.body)
        await self.sessions.save(call.tenant, session_id, state)
        return signals

    def _seen_sent(self, call: CallContext, session_id: str) -> _SentSeen | None:
        """What a call sent as is reads its session's messages from: its last such call's
        when the gateway proved this call's body continues that one's (so the messages it
        read are these messages'), new for a body the gateway numbered; None (the messages
        walked, nothing kept) for a call with no lineage, e.g. the replay's."""
        lineage = call.lineage
        if lineage is None or self.sent_seen is None:
            return None
        kept = self.sent_seen.pop((call.tenant, session_id), None)
        if (kept is not None and lineage.after is not None and kept.body == lineage.after
                and max(len(kept.haystack.texts), kept.rules.count) <= lineage.count):
            return kept
        return _SentSeen(lineage.body, Haystack(), HistoryRules())


@dataclass(frozen=True, slots=True)
class _SentSeen:
    """What the calls of a session sent as is read of its messages (`observe_sent`): the
    fidelity haystack and what the class rules read, as of the body numbered `body`."""

    body: int
    haystack: Haystack
    rules: HistoryRules


def _render(
    r: _Request, items: list[Item], final: list[Item], ctx: StageContext, applied: _Applied
) -> tuple[Rendered, list[DropEvent]]:
    """A call's fitted items rendered, and its drop events. A step call whose session's
    prefix took its new messages reads only the items from the prefix's last mark before
    its first change: what comes before renders and logs as the prefix did."""
    mark = None
    if r.prefix is not None:  # the decisions this call changed, when they were the prefix's
        changed = applied.changed if applied.decisions is r.prefix.decisions else None
        mark = r.prefix.resume(final, ctx.decisions, ctx.originals, changed)
    if r.prefix is None or mark is None:
        return (render_messages(r.messages, items, final,
                                r.prefix.copies if r.prefix is not None else None),
                drop_events(items, final, ctx.decisions))
    items, final = _from_message(items, mark.index), _from_message(final, mark.index)
    rendered = render_from(r.messages, items, final, mark,
                           (r.prefix.plan, r.prefix.digests, r.prefix.marks), r.prefix.copies)
    return rendered, r.prefix.events_before(mark.index) + drop_events(items, final, ctx.decisions)


def _from_message(items: list[Item], index: int) -> list[Item]:
    """The items of messages[index:] (`items` run in message order)."""
    return items[bisect_left(items, index, key=lambda item: item.message_index):]


def _harness_left(state: SessionState, c: Compaction) -> int | None:
    """The calls a step of a new agent is weighed over when its harness's record says runs
    of one task (`steps.runs_of_one` of `SessionState.harness_runs`): at most `repay_calls`,
    not the session's age. The age says a session of 40 calls has 40 to come; the runs of a
    harness whose every task brings its own tools (Toolathlon's MCP servers: each a new
    agent, so no agent record bounds it, `steps.agent_left`) have 14-23 calls left on
    average at every age from 3 to 40, so a long run's late steps re-sent more than the
    calls after them repaid. Toolathlon runs, late / recall / cost @0.1, tune · holdout:
    claude 45.658 / 99.525 / 21.450 · 47.430 / 99.515 / 25.617 -> 45.565 / 99.525 / 21.616
    · 46.342 / 99.515 / 26.856, deepseek 49.702 / 99.696 / 32.678 · 51.224 / 99.290 /
    34.318 -> 48.907 / 99.696 / 33.053 · 50.226 / 99.290 / 34.702 (bench/README.md,
    "Session 74, tla74"). An agent with its own record is weighed by it, as before."""
    own = state.agent_runs
    if own is not None and own[0] - 1 > c.repay_ahead_runs:
        return None
    return c.repay_calls if runs_of_one(state.calls + 1, c, state.harness_runs) else None


def _leave_unrepaid(
    messages: list[Mapping[str, Any]],
    before: list[Item],
    final: list[Item],
    ctx: StageContext,
    remembered: Mapping[str, Decision],
    state: SessionState,
    c: Compaction,
    horizon: int,
    ahead: bool = False,
) -> tuple[list[Item], int, bool]:
    """An aging step without the rewrites that do not repay the re-send they cause
    (`steps.unrepaid`): those messages go out as the decisions before the step sent them,
    and keep those decisions. A step left with no rewrite is not taken (the horizon stays;
    the session's step budget is not spent). `ahead`: the step is one the share does not
    allow yet (`steps.ahead_of_share`), weighed over fewer calls. Also whether a left-out
    message held one of the step's digests' mask batch (`_batch_mask`): the session records
    that the next batch is late (`SessionState.late_batch`)."""
    new_from = next((i for i in range(len(messages) - 1, -1, -1)
                     if messages[i].get("role") == "assistant"), len(messages))
    if len(before) != len(final) or {i.id for i in before} != {i.id for i in final}:
        return final, horizon, False  # a step that dropped or added items: left as it is
    text = text_tools_now(ctx.task_class, before)
    if text is not None and text.repay_calls is not None:
        c = c.model_copy(update={"repay_calls": text.repay_calls})
    counted = calls_left(messages)
    if counted is None:
        counted = _harness_left(state, c)
    left = unrepaid(before, final, new_from, state.calls + 1, c, counted,
                    stated_left(messages), state.agent_runs, ahead, system_stated(messages))
    if not left:
        return final, horizon, False
    was = {item.id: item for item in before}
    kept: list[Item] = []
    batch = False
    for item in final:
        if item.message_index in left and item.id in was:
            item = was[item.id]
            made = remembered.get(item.id)
            batch = batch or (made != ctx.decisions.get(item.id)
                              and _batch_mask(ctx.decisions.get(item.id)))
            if made is None:
                ctx.decisions.pop(item.id, None)
            else:
                ctx.decisions[item.id] = made
        kept.append(item)
    # only a batch left out by a weighed step on the session's first task is late
    # (`steps.young`); past it the next batch masks every digest due
    batch = batch and young(state.calls + 1, c, on_first_task(
        before, through=runs_of_one(state.calls + 1, c, state.agent_runs)))
    if all(a.text == b.text for a, b in zip(before, kept, strict=True)):
        return kept, state.horizon, batch
    return kept, horizon, batch


TAIL = "tail"  # the reason of a counted run's tail rewrite (`_tail_masks`)
TAIL_ON_STEP = "tail_on_step"  # one on a call whose aging step changed the prefix anyway


def _counted_text_run(cls: TaskClass, messages: list[Mapping[str, Any]]) -> bool:
    """Whether `_tail_masks` may act on a call that would not step: a class that ages an
    agent whose tools are text and a harness that counts the calls left (`calls_left`).
    Such a call takes the full path; a run of one by its agent's record rewrites at the
    tail only on a step call, which takes it anyway."""
    opts = cls.stages.compress
    return (cls.compaction.ages and opts is not None and "user" not in opts.kinds
            and calls_left(messages) is not None)


def _tail_left(cls: TaskClass, messages: list[Mapping[str, Any]],
               state: SessionState) -> int | None:
    """The calls `_tail_masks` weighs a rewrite over on this call (None: it may not act): a
    class that ages an agent whose tools are text (its results, user turns, never digested:
    `text_tools_aging`), and either a harness that counts the calls left (`calls_left`) or
    an agent whose record says its sessions are runs of one task (`steps.runs_of_one`, off
    a queue's: its later tasks run long), then the calls that record leaves
    (`steps.agent_left`) or the session's age, at least `repay_calls`. Such a call takes the
    full path."""
    c, opts = cls.compaction, cls.stages.compress
    if not c.ages or opts is None or "user" in opts.kinds:
        return None
    left = calls_left(messages)
    calls = state.calls + 1
    if left is not None or not runs_of_one(calls, c, state.agent_runs):
        return left
    bound = agent_left(calls, c, state.agent_runs)
    return max(calls, c.repay_calls) if bound is None else bound


def _tail_steps(cls: TaskClass, messages: list[Mapping[str, Any]], items: list[Item],
                state: SessionState) -> int:
    """The calls that took a tail rewrite (`_tail_masks`) while the session is a counted
    text-tool run of one task (or one its agent's record says is: `_tail_left`): each
    changed the prefix, so each counts as an aging step against `max_step_share` (else the
    run's prefix stable fell to 78.8%, tune). Not once a later task opens (a queue's:
    `steps.text_tools_now`), whose steps then come as without them: counted for good, they
    cost MINT's queues 0.17 point of cost @0.1 (tune). Elsewhere: the calls that digested
    a run's large output at the tail (`_tail_digests`), likewise (uncounted, Toolathlon
    runs' prefix stable fell to 72.4 · 73.4%)."""
    if _tail_left(cls, messages, state) is None or text_tools_now(cls, items) is None:
        if not on_first_task(items):  # a queue's later task steps as without them
            return 0
        return len({made.step for made in state.decisions.values() if made.reason == TAIL_RUN})
    return len({made.step for made in state.decisions.values() if made.reason == TAIL})


TAIL_RUN = "tail_run"  # the reason of a run's large output digested at the tail (`_tail_digests`)
TAIL_MIN_TOKENS = 2500  # the least tokens of an output `_tail_digests` rewrites
# ... and of one beside it in the same exchange, which joins its digest (`_tail_joiners`)
TAIL_JOIN_TOKENS = 500
TAIL_MIN_CHARS = TAIL_MIN_TOKENS  # `_tail_output_waits`'s bound in characters


def _aging_exchange(messages: Sequence[Mapping[str, Any]]) -> range:
    """The message indexes of the exchange the latest assistant turn answered: the
    messages between the assistant turn before it and it (empty when there is none)."""
    turns = [i for i in range(len(messages) - 1, -1, -1)
             if messages[i].get("role") == "assistant"][:2]
    return range(turns[1] + 1, turns[0]) if len(turns) == 2 else range(0)


def _tail_output_waits(cls: TaskClass, messages: Sequence[Mapping[str, Any]],
                       state: SessionState) -> bool:
    """Whether a call may take a tail digest (`_tail_digests`), by the characters of the
    tool results the latest assistant turn answered: such a call takes the full path. Only
    where the agent's record says its sessions are runs of one task (`steps.runs_of_one`,
    as `_tail_left` for a text-tool run): a queue's first task is a run too, but a digest
    there moves every later aging step of the session (the step share it takes), and the
    queue's later tasks lose what those steps kept (Toolathlon deepseek queues' holdout
    recall −0.145, claude queues' cost @0.1 −0.16 · −0.12; bench/README.md, "Session 71,
    tla71"). A queue's record (its sessions run past the last mark) leaves it off, and so
    does no record: an agent's first sessions take the base's path."""
    opts, c = cls.stages.compress, cls.compaction
    if not (c.ages and state.calls and opts is not None
            and "tool_result" in opts.kinds and "user" in opts.kinds
            and runs_of_one(state.calls + 1, c, state.harness_runs)):
        return False
    return any(messages[i].get("role") == "tool"
               and _content_block(text := content_text(messages[i].get("content")))
               and len(text) >= TAIL_MIN_CHARS
               for i in _aging_exchange(messages))


def _content_block(text: str) -> bool:
    """Whether a tool result is sent as the JSON of its MCP content blocks (`{"type":
    "text", …}`), parsed or cut short by its harness (`summarize.envelope` reads only
    whole ones): a tool server's payload (a sheet's cells, a page, a listing), which an
    agent reads once, not a file view or a build log in plain text, which a coding agent
    reads again (Claude Code runs' tune recall −1.06 with those; bench/README.md, "Session
    68, tla68")."""
    head = text[:24].lstrip()
    return head.startswith('{"type"') or head.startswith('[{"type"')


def _tail_digests(
    messages: list[Mapping[str, Any]], final: list[Item], ctx: StageContext,
    state: SessionState,
) -> tuple[list[Item], bool]:
    """A large tool result (`TAIL_MIN_TOKENS`) of an agent that calls tools through the
    API, rewritten as its digest on the call where it stops being the newest, while the
    session is on its first task (`steps.young`): the rewrite lands at the tail of what the
    last call sent and re-sends only itself, where an aging step reaches it only after
    some calls, re-sending all after it, or never on a short run (its repay rule leaves it
    out). Only a structured payload (its text opens as JSON, or as a JSON envelope the
    recorder cut: a sheet's cells, a listing), not a file view or a page of text, which a
    coding agent reads again (Claude Code runs' tune recall −1.06 with those too). Not one
    the agent's latest turn drew a value from (`drawing.drawn_from`), nor one
    the step's own rules keep whole (`steps.ages_out`). Taken only when it repays over the
    calls the agent's record or the session's age says are left (`steps.tail_mask_repays`);
    each such call counts as a step against the instability budget (`_tail_steps`)."""
    cls = ctx.task_class
    c, opts = cls.compaction, cls.stages.compress
    if not _tail_output_waits(cls, messages, state) or opts is None:
        return final, False
    runs = state.agent_runs
    calls = state.calls + 1
    if not young(calls, c, on_first_task(final, through=runs_of_one(calls, c, runs))):
        return final, False
    exchange = _aging_exchange(messages)
    candidates = _tail_outputs(final, exchange, ctx, opts, TAIL_MIN_TOKENS)
    if not candidates:
        return final, False
    drawn = drawn_from(candidates, messages, 1, ctx.known)
    chosen = {item.id: Decision("compress", "compress", TAIL_RUN, "summary", opts.level)
              for item in candidates if item.id not in drawn}
    if not chosen:
        return final, False
    chosen.update(_tail_joiners(messages, final, exchange, ctx, opts))
    left = agent_left(calls, c, runs)
    left = max(calls, c.repay_calls) if left is None else left
    final, taken = _repaid(final, chosen, ctx, left)
    if not taken:
        return final, False
    return _tail_waiting(messages, final, exchange, ctx, state), True


def _tail_outputs(final: list[Item], exchange: range, ctx: StageContext,
                  opts: CompressOptions, least: int, below: int | None = None) -> list[Item]:
    """The tool results of the aging `exchange` a tail digest may take (`_tail_digests`):
    content blocks of `least` tokens or more (below `below`, when given), undecided, that
    the step's own rules would age out (`steps.ages_out`)."""
    return [item for item in final if item.message_index in exchange
            and item.kind == "tool_result" and least <= item.tokens
            and (below is None or item.tokens < below)
            and _content_block(ctx.originals.get(item.id, item).text)
            and undecided(item, ctx.decisions)
            and ages_out(ctx.originals.get(item.id, item), opts)]


def _tail_joiners(
    messages: list[Mapping[str, Any]], final: list[Item], exchange: range,
    ctx: StageContext, opts: CompressOptions,
) -> dict[str, Decision]:
    """The smaller outputs (`TAIL_JOIN_TOKENS` up to `TAIL_MIN_TOKENS`) of the exchange a
    tail digest takes a large one of, as digests too, but for those the agent's latest turn
    drew a value from: the call changes the cached prefix at that exchange anyway, so
    digesting them there re-sends only their digests, where left whole they waited for the
    next aging step (cached, but whole on every call until then) and its re-send. An agent
    that calls its tools in parallel (Claude on Toolathlon: a listing beside a record or
    two) gets several outputs an exchange. Never alone: a call with no large output breaks
    no prefix for them (tail digests from 1,000 tokens, every such call one more prefix
    change: prefix stable 80.6 -> 75.8%, claude tune recall -0.03; bench/README.md,
    "Session 74, tla74", E1). Toolathlon runs, late / recall / cost @0.1, tune · holdout:
    claude 45.565 / 99.525 / 21.616 · 46.342 / 99.515 / 26.856 -> 45.667 / 99.525 / 21.816
    · 46.514 / 99.515 / 27.029, deepseek tune 33.053 -> 33.076, holdout the same
    (bench/README.md, "Session 75, tla75")."""
    joiners = _tail_outputs(final, exchange, ctx, opts, TAIL_JOIN_TOKENS, TAIL_MIN_TOKENS)
    drawn = drawn_from(joiners, messages, 1, ctx.known)
    return {item.id: Decision("compress", "compress", TAIL_RUN, "summary", opts.level)
            for item in joiners if item.id not in drawn}


def _tail_waiting(
    messages: list[Mapping[str, Any]], final: list[Item], exchange: range,
    ctx: StageContext, state: SessionState,
) -> list[Item]:
    """`final`, after a tail digest (`_tail_digests`), with the smaller outputs
    (`TAIL_JOIN_TOKENS` up to `TAIL_MIN_TOKENS`) of the exchanges since the last aging step
    (`SessionState.horizon`) as digests too, but for those the agent's turns since drew a
    value from, and but for those whose rewrite does not repay what it makes re-sent
    (`steps.unrepaid`, over the calls the harness's record bounds, `_harness_left`): the
    call changes the cached prefix at the exchange anyway, so reaching back a turn or two
    re-sends only what lies between, where left whole they waited, whole on every call,
    for the next aging step and its re-send. The larger outputs the tail digest left (the
    agent drew from them then) stay for that step: taken here too, the deepseek runs' tune
    recall fell 99.696 -> 99.687 (a channel's statistics whose numbers a later sum
    re-typed). Toolathlon runs, cost @0.1, tune · holdout, with `_tail_joiners`: claude
    21.816 · 27.029 -> 21.855 · 27.339, deepseek 33.076 · 34.702 -> 33.114 · 34.769, recall
    and prefix stable as before (bench/README.md, "Session 75, tla75")."""
    opts = ctx.task_class.stages.compress
    if opts is None:
        return final
    waiting = _tail_outputs(final, range(state.horizon, exchange.start), ctx, opts,
                            TAIL_JOIN_TOKENS, TAIL_MIN_TOKENS)
    if not waiting:
        return final
    first = waiting[0].message_index
    turns = sum(1 for m in messages[first:] if m.get("role") == "assistant")
    drawn = drawn_from(waiting, messages, turns, ctx.known)
    chosen = {item.id: Decision("compress", "compress", TAIL_RUN, "summary", opts.level)
              for item in waiting if item.id not in drawn}
    if not chosen:
        return final
    c = ctx.task_class.compaction
    calls = state.calls + 1
    result = decide(final, chosen, replace(ctx, decisions=dict(ctx.decisions)))
    left = unrepaid(final, result.items, exchange.stop, calls, c, _harness_left(state, c))
    kept = {item.id: chosen[item.id] for item in waiting
            if item.id in chosen and item.message_index not in left}
    if not kept:
        return final
    result = decide(final, kept, replace(ctx, decisions=dict(ctx.decisions)))
    ctx.decisions.update(result.decisions)
    return result.items


def _first_rewrite(before: Sequence[Item], final: Sequence[Item]) -> int | None:
    """The message index of the first item `final` sends otherwise than `before` (the
    items as the decisions before this call send them): where a step's re-send begins,
    None when it sends every item as before."""
    was = {item.id: item.text for item in before}
    return next((item.message_index for item in final if was.get(item.id) != item.text),
                None)


def _resent_results(messages: Sequence[Mapping[str, Any]], aging: int,
                    since: int | None) -> frozenset[int]:
    """The results a run of one's tail rewrite lists on a step call (`_tail_masks`): the
    one the last call ended with, and every one after the step's first rewrite
    (`_first_rewrite`), which the step re-sends anyway: a result that aged on a call that
    took no step waits verbatim for the next step, where its list adds no re-send. mini-SWE
    runs, late / recall / cost @0.1, tune · holdout: 44.066 / 99.483 / 23.211 · 42.446 /
    99.656 / 20.655 -> 46.870 / 99.539 / 26.988 · 45.450 / 99.678 / 24.505 (bench/README.md,
    "Session 75, mswe75"). Not one
    a later result repeats: the repeats point to it (`arrival_duplicates`), and with it
    listed the next repeat goes whole (TapeAgents runs' tune cost @0.1 −0.18 with those)."""
    if since is None:
        return frozenset({aging})
    waiting = [i for i in range(since + 1, aging) if messages[i].get("role") == "user"]
    texts = Counter(content_text(messages[i].get("content"))
                    for i in range(since + 1, len(messages)) if messages[i].get("role") == "user")
    return frozenset({aging} | {i for i in waiting
                                if texts[content_text(messages[i].get("content"))] < 2})


def _tail_masks(
    messages: list[Mapping[str, Any]], final: list[Item], ctx: StageContext,
    state: SessionState, shared: bool = True, reason: str = TAIL,
    since: int | None = None,
) -> tuple[list[Item], bool]:
    """A text-tool agent's result rewritten on the call where it stops being the newest,
    when its harness counts the calls left, or on a step call when its agent's record
    says runs of one task (`_tail_left`), and the rewrite repays over
    them (`steps.tail_mask_repays`). Such a run is too short for an aging step to repay
    (`steps.unrepaid`): a step rewrites older messages and re-sends everything after them,
    where this rewrite lands at the tail of what the last call sent (that result) and
    re-sends only itself. The result goes as a gist (`apply.gist`) when the gist lists every
    notable value it names that the task statement does not, else as its digest (the values
    the model has not read above; `summarize`): keep-1's placeholder keeps none. While the
    run is counted, each such rewrite counts as a step against the instability budget
    (`_tail_steps`), so its next aging step waits for the share. MINT runs (1-5 calls),
    tune, late / recall / cost @0.1: 2.62 / 99.98 / 1.59 -> 6.67 / 99.99 / 1.81, prefix
    stable 98.2 -> 80.4% (bench/README.md, "Short runs beside masking at equal recall").
    A run of one by its record lists, on a step call, also every result after the step's
    first rewrite (`since`, `_resent_results`). Also whether a result was rewritten."""
    opts = ctx.task_class.stages.compress
    left = _tail_left(ctx.task_class, messages, state)
    if opts is None or left is None or text_tools_now(ctx.task_class, final) is None:
        return final, False
    if calls_left(messages) is not None:
        reason = TAIL  # a counted run's: every such call counts against the share
    elif not shared:
        return final, False  # a run of one by its record: not every call (prefix stable 39%)
    latest = next((i for i in range(len(messages) - 1, -1, -1)
                   if messages[i].get("role") == "assistant"), -1)
    aging = latest - 1  # the result the last call ended with
    if aging < 1 or messages[aging].get("role") != "user":
        return final, False
    least = opts.mask_turns_min_tokens or 0
    results = (_resent_results(messages, aging, since) if reason == TAIL_ON_STEP
               else frozenset({aging}))
    chosen: dict[str, Decision] = {}
    for item in final:
        original = ctx.originals.get(item.id, item)
        if (item.message_index not in results or item.kind != "user" or item.goal or item.pinned
                or not original.rewritable or original.tokens < least
                or not undecided(item, ctx.decisions)):
            continue
        if reason == TAIL_ON_STEP:  # a run of one by its record: every value it names
            chosen[item.id] = Decision("compress", "mask", reason, "mask", 1,
                                       text=value_list(original, ctx.known))
            continue
        named = {v for v in summarize_values(original.text) if notable(v)} - ctx.known
        chosen[item.id] = (Decision("compress", "mask", reason, "mask", 1, arg=GIST)
                           if len(named) <= GIST_VALUES else
                           Decision("compress", "compress", reason, "summary", opts.level))
    if not chosen:
        return final, False
    return _repaid(final, chosen, ctx, left)


def _repaid(
    final: list[Item], chosen: dict[str, Decision], ctx: StageContext, left: int,
) -> tuple[list[Item], bool]:
    """The tail rewrite `chosen` applied to `final` when it repays over the `left` calls
    (`steps.tail_mask_repays`), with whether it was: decided on a probe first, so a rewrite
    that does not repay leaves `ctx.decisions` as it was."""
    probe = replace(ctx, decisions=dict(ctx.decisions))
    result = decide(final, chosen, probe)
    before = sum(item.tokens for item in final if item.id in chosen)
    after = sum(item.tokens for item in result.items if item.id in chosen)
    if not (after < before and tail_mask_repays(
            before, after, left, ctx.task_class.compaction.cached_price)):
        return final, False
    ctx.decisions.update(result.decisions)
    return result.items, True


def _held_turn(items: list[Item], state: SessionState, c: Compaction, forced: bool) -> int:
    """The turn the last step left verbatim as the latest answer because the session's
    large calls are weighed (`steps.horizon_after`: such a step reaches only the latest
    turn), -1 when they are not: a weighed session now, on a large call not over the budget.
    Its digest keeps its commands whole (`StageContext.held_turn`), as it would have had
    the step digested it on time, one of the agent's latest turns."""
    if (not c.ages or forced or not state.calls
            or sum(item.tokens for item in items) <= c.early_max_tokens
            or not young(state.calls + 1, c, on_first_task(
                items, through=runs_of_one(state.calls + 1, c, state.agent_runs)))):
        return -1
    return state.horizon


def _late_batch(late: bool, left: bool, decisions: Mapping[str, Decision],
                changed: Collection[str]) -> bool:
    """Whether the session's next mask batch is late after this call (`late`: it was
    before): a step that left a batch out (`left`, `_leave_unrepaid`) makes it so; a call
    whose decisions (`changed` among `decisions`) mask one of a batch ends it."""
    return left or (late and not any(_batch_mask(decisions.get(i)) for i in changed))


def _batch_mask(decision: Decision | None) -> bool:
    """Whether `decision` is one of the digests' mask batch (`compress._expired_digests`)."""
    return (decision is not None and decision.stage == "compress"
            and decision.method == "mask" and decision.reason == "aged")


def _stamp_step(decisions: dict[str, Decision], remembered: Mapping[str, Decision],
                changed: Collection[str]) -> None:
    """Number the decisions this call took: one step after the session's latest, so the
    drop log logs each once and a call line names the steps in force. `changed`: the ids
    whose decision differs from `remembered`'s (`apply.changed_decisions`); the others are
    the remembered ones."""
    if not changed:
        return
    step = 1 + max(map(_step_of, remembered.values()), default=0)
    for item_id in changed:
        decision = decisions.get(item_id)
        if decision is None:  # undone
            continue
        old = remembered.get(item_id)
        if old is None or replace(decision, step=old.step) != old:
            decisions[item_id] = replace(decision, step=step)


_step_of = attrgetter("step")


def _json_min(cls: TaskClass) -> int | None:
    """With `cluster.arrival_json`, the least new output sent minified (lines.minified)."""
    opts = cls.stages.cluster
    return opts.arrival_min_chars if opts and opts.on_arrival and opts.arrival_json else None


def _arrival_min(cls: TaskClass) -> int | None:
    """With `cluster.on_arrival`, the least item a repeat on arrival points to."""
    opts = cls.stages.cluster
    return opts.arrival_min_chars if opts and opts.on_arrival else None


def _lines_min(cls: TaskClass) -> int | None:
    """With `cluster.arrival_lines`, the least run of repeated lines sent as a marker."""
    opts = cls.stages.cluster
    return opts.arrival_min_chars if opts and opts.on_arrival and opts.arrival_lines else None


def _lines_turns(cls: TaskClass) -> bool:
    """With `cluster.arrival_lines`, whether the assistant's turns are lines a marker names."""
    opts = cls.stages.cluster
    return _lines_min(cls) is not None and opts is not None and opts.arrival_from_turns


def _arrival_start(messages: list[Mapping[str, Any]], first_call: bool) -> int:
    """Where this call's new messages start: the latest assistant turn (a call ends right
    before the next one), the latest message without one; all of them on a first call."""
    if first_call:
        return 0
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if messages[i].get("role") == "assistant"), None)
    return len(messages) - 1 if last is None else last


def _edited_start(
    messages: list[Mapping[str, Any]], items: list[Item], applied: list[Item],
    state: SessionState, newest: int, extended: Prefix | None = None,
    previous: Prefix | None = None,
) -> int | None:
    """Where arrival rules start looking at messages the client edited after they arrived,
    when it did (None: it changed nothing it sent).

    The previous call's new messages (from the assistant turn before the latest), when the
    client appended one exchange to that call's messages but edited one of them: those,
    rendered under the session's decisions (`applied`), are not what it sent
    (`SessionState.prefix`). A client may edit its newest message after it arrived
    (OpenHands' harness removes its "ENVIRONMENT REMINDER" from the previous newest turn):
    the message has another id, so its arrival decision is lost, and it is decided again
    as arriving (the edit broke the provider's cache from it on anyway; bench/README.md,
    "A turn the client edits after it arrived").

    The session's previous call, kept in memory, answers without rendering the old
    messages again: `extended` (this call extends it) rendered them under these very
    decisions (`_sent_digest`), `previous` (it does not) holds their items as the client
    sent them then (`_first_edit`). Without it they are rendered again
    (`_edited_by_render`). With `previous`, an edit further back (a client that went back
    a step and took another, or edited an older message) is decided again from the first
    message it changed."""
    if not state.prefix or newest <= 0:
        return None
    first = _first_edit(previous, items, newest) if (
        extended is None and previous is not None) else None
    count, _, digest = state.prefix.partition(":")
    if not count.isdigit() or int(count) != newest:
        return first
    before = next((i for i in range(newest - 1, -1, -1)
                   if messages[i].get("role") == "assistant"), None)
    if before is None:
        return first
    if extended is not None:
        sent = _sent_digest(extended, applied, newest)
        if sent is not None:
            return before if sent != digest else None
    elif first is not None:  # an edited message has another id: the render's digest differs
        return min(before, first)
    return before if _edited_by_render(messages, items, applied, newest, digest) else None


def _edited_by_render(
    messages: list[Mapping[str, Any]], items: list[Item], applied: list[Item], newest: int,
    digest: str,
) -> bool:
    """Whether messages[:newest], rendered under the session's decisions (`applied`), do
    not give `digest` (what the previous call forwarded)."""
    _, _, digests, _ = render_plan(
        messages[:newest], [i for i in items if i.message_index < newest],
        [i for i in applied if i.message_index < newest], 0, None)
    return not digests or digests[-1] != digest


def _sent_digest(extended: Prefix, applied: list[Item], newest: int) -> str | None:
    """The digest messages[:newest] render to under the session's decisions (`applied`),
    read from the prefix this call extends: its bytes are the previous call's up to
    `extended.start`, and where `applied` sends those messages' items as the prefix
    rendered them (`Prefix.applied` takes most as the very items; one it restates, a pin
    that may have lapsed, with the same id, text and cost renders the same), its digests
    are theirs. None: not known so (a lapsed pin let a decision apply, other decisions,
    fewer messages)."""
    if extended.start < newest or len(extended.plan) != len(extended.digests):
        return None
    final = extended.final
    n = bisect_left(final, newest, key=_message_index)
    if len(applied) < n:
        return None
    # what render_plan reads of an item: its message, id, text and fixed cost
    for k in compress(range(n), map(not_, map(is_, applied[:n], final[:n]))):
        a, b = applied[k], final[k]
        if (a.id != b.id or a.text != b.text or a.fixed_tokens != b.fixed_tokens
                or a.message_index != b.message_index):
            return None
    if n < len(applied) and applied[n].message_index < newest:
        return None
    k = bisect_left(extended.plan, newest, key=itemgetter(0))
    return extended.digests[k - 1] if k else ""


def _first_edit(previous: Prefix, items: list[Item], newest: int) -> int | None:
    """The first of messages[:newest] whose items are not those of the session's previous
    call (its messages as the client sent them; an item's id is its message's place and
    text), among the messages that call had; None: none changed."""
    old = previous.items
    limit = min(newest, previous.layout.count)
    n = bisect_left(items, limit, key=_message_index)
    m = bisect_left(old, limit, key=_message_index)
    k = next(compress(range(min(n, m)), map(ne, map(_item_id, items[:n]), map(_item_id, old[:m]))),
             min(n, m))
    if k < n and k < m:
        return min(items[k].message_index, old[k].message_index)
    if n == m:
        return None
    return items[k].message_index if k < n else old[k].message_index


_item_id = attrgetter("id")
_message_index = attrgetter("message_index")


def _current_step(messages: list[Mapping[str, Any]]) -> str:
    """The latest result and the request it answers: what relevance is measured against."""
    texts = []
    for msg in reversed(messages):
        text = content_text(msg.get("content"))
        if text:
            texts.append(text[:1500])
        if msg.get("role") == "assistant" or len(texts) >= 2:
            break
    return "\n".join(reversed(texts))


def resend_arrivals(cls: TaskClass, policy: TaskClass) -> TaskClass:
    """A class that does not age turns, for a session whose harness re-sends its state in
    each prompt (`RequestScan.resends`): it takes the agent policy's repeats on arrival, so
    a new prompt's runs of lines that an earlier one has go out as markers to it (lossless,
    and nothing sent before changes)."""
    arrival, own = policy.stages.cluster, cls.stages.cluster
    if arrival is None or not arrival.on_arrival:
        return cls
    cluster = (own or ClusterOptions()).model_copy(update={
        name: getattr(arrival, name) for name in ARRIVAL_OPTIONS} | {"arrival_from_turns": True})
    return cls.model_copy(update={"stages": cls.stages.model_copy(update={"cluster": cluster})})


# A session that re-sends its state steps on at most this share of its calls (the agent
# policy's: 0.2). Counting the calls before it aged (`_stable_before`) brings its steps
# earlier; at 0.2 the ChatDev queues' tune prefix stable fell to 80.0% (0.17: 82.9%;
# bench/README.md, "A harness that re-sends its state, part two").
RESEND_STEP_SHARE = 0.17
# What of a re-sending session ages: its prompts, whether read as one turn or as sections
# (`segments.find_documents` makes a prompt of two or more markdown sections of 80+
# characters `knowledge` spans). Its prompts' sections are parts of an older copy of the
# state, not documents a task retrieved: with user turns only, no section of a sectioned
# prompt ever aged (OpenDevin's micro-agent queues, tune late reduction 43.2 -> 52.4;
# bench/README.md, "Fresh-prompt queues, part two").
PROMPT_KINDS: tuple[CompressKind, ...] = ("user", "knowledge")


def _stable_before(state: SessionState, messages: Sequence[Mapping[str, Any]]) -> None:
    """Record on a session that starts aging as a harness that re-sends its state the calls
    it made before (one per assistant turn): it is recognised only at its third re-sending
    prompt, 5-13 calls in, and those calls kept their prefix. Counted from zero, its first
    step waited five calls more, on runs that end 12-20 calls in (ChatDev runs, tune, every
    aged prompt a placeholder: late reduction 59.0% counted from zero, 63.5% counted from the
    session's start at 1 step in 6; bench/README.md, "A harness that re-sends its state,
    part two")."""
    state.stable_calls = sum(1 for m in messages if m.get("role") == "assistant")
    state.dirty.add("horizon")


def resend_aging(cls: TaskClass, policy: TaskClass) -> TaskClass:
    """The agent policy's aging for a session whose harness re-sends its state in each
    prompt (`RequestScan.resends`), on its prompts only (`PROMPT_KINDS`, their sections
    too): an old prompt is a superseded copy
    of the state the newest one holds whole, so old user turns age (digests, then gists in
    the policy's batches) while the agents' own turns stay as written (no digest, no fold):
    what they wrote is what a later turn quotes. New prompts' runs of lines an earlier
    prompt or turn has go out as markers on arrival (`resend_arrivals`). A prompt that
    later prompts re-send goes straight to its placeholder (`superseded_turns`)."""
    aged = resend_arrivals(cls.aging_as(policy), policy)
    compress = aged.stages.compress
    if compress is None or not aged.compaction.ages:
        return aged
    compress = compress.model_copy(update={"kinds": PROMPT_KINDS, "fold_from_turns": None,
                                           "mask_turns_from_turns": 0, "mask_after_turns": 4,
                                           "superseded_turns": True})
    share = min(aged.compaction.max_step_share, RESEND_STEP_SHARE)
    return aged.model_copy(update={
        "stages": aged.stages.model_copy(update={"compress": compress}),
        "compaction": aged.compaction.model_copy(update={"max_step_share": share})})


# What of an agent's session without tools ages (`report_aging`): the user turns its
# observations come in, as a single turn or as sections (`PROMPT_KINDS`).
REPORT_KINDS: tuple[CompressKind, ...] = PROMPT_KINDS
# Such a session steps on at most this share of its calls (the agent policy's: 0.2). Its
# client rewrites the tail of every call (the question it asks the model each round), so
# only the part up to that break is cached at all; tune split, Magentic-One runs / queues,
# late / cost saved @0.1 / engine prefix stable up to the client's break (before the
# checks for re-sent and labelled turns): 0.2 28.6 / 14.6 / 86.4 and 49.4 / 28.6 / 88.0;
# 0.34 35.9 / 17.8 / 82.0 and 56.2 / 37.5 / 83.0; 0.5 38.2 / 19.7 / 78.3 and 55.5 / 39.2
# / 78.1 (bench/README.md, "An agent without tools whose observations are user turns").
REPORT_STEP_SHARE = 0.34
# How old an aged report is when the digests' batches mask it (the policy's: 10 turns),
# from the session's first turn on (`mask_turns_from_turns`; the policy's: 60): runs of 3
# to 33 calls never reached the policy's. Tune, runs, as above: 2 turns 36.6 / 99.83 /
# 17.9, 4 turns 35.9 / 99.87 / 17.8 (late / recall / cost @0.1).
REPORT_MASK_TURNS = 4


def report_aging(cls: TaskClass, policy: TaskClass) -> TaskClass:
    """The agent policy's aging for an agent without tools whose observations come as user
    turns (`RequestScan.reports`), on its user turns only (`REPORT_KINDS`): old reports
    age into digests in the policy's steps, then join its batches as gists, while the
    agent's own turns (its plan, its instructions) stay as written: a later turn quotes
    them (digested too, the tune queues' recall fell 99.93 -> 98.49: the plan's facts).
    The latest user turn is pinned and the task statement kept, as in any session; the
    newest report is not pinned (no open call pins it as one pins a tool's result): held
    verbatim at each step, the runs' tune late calls were 25.3% smaller instead of 34.2%,
    cost @0.1 9.5% instead of 17.1%, at the same recall (99.91)."""
    aged = cls.aging_as(policy)
    compress = aged.stages.compress
    if compress is None or not aged.compaction.ages:
        return aged
    compress = compress.model_copy(update={
        "kinds": REPORT_KINDS, "fold_from_turns": None, "mask_turns_from_turns": 0,
        "mask_after_turns": REPORT_MASK_TURNS, "restated_turns": True})
    share = min(max(aged.compaction.max_step_share, REPORT_STEP_SHARE), 1.0)
    return aged.model_copy(update={
        "stages": aged.stages.model_copy(update={"compress": compress}),
        "compaction": aged.compaction.model_copy(update={"max_step_share": share})})


def text_tools_aging(cls: TaskClass, text: TextTools | None = None) -> TaskClass:
    """The agent policy's aging for an agent whose tools are text (`is_text_tool_request`):
    its user turns, the results of its calls, are not digested (a digest kept too few of
    the names a later patch quotes); its own turns age. On a long session old user turns
    still go as gists with the digests' batches (`mask_turns_min_tokens`); on a run of one
    task, as the policy's `text_tools` sets (`TextTools`, `steps.text_tools_now`)."""
    compress = cls.stages.compress
    if compress is None:
        return cls
    kinds = tuple(k for k in compress.kinds if k != "user")
    stages = cls.stages.model_copy(update={"compress": compress.model_copy(
        update={"kinds": kinds})})
    return cls.model_copy(update={"stages": stages, "text_tools": text or TextTools()})


def _text_call_unpinned(
    messages: Sequence[Mapping[str, Any]], parsed: ParsedRequest
) -> ParsedRequest:
    """`parsed` with the text call the latest observation answers unpinned. An agent that
    acts in prose (`Action: Bash(code=...)`, `search_class("X")`, answered by user turns)
    has its latest such exchange pinned as an open one (`Layout.open_from`), but no protocol
    ties those user turns to the call (an API tool result needs its call, a user turn does
    not): when the pinned content alone is over the budget, the exchange's turns but the
    latest user message are cut as any older turn rather than the call refused (issue 7: a
    refusal only when nothing else works)."""
    layout = parsed.layout
    start = layout.open_from if layout is not None else None
    if layout is None or start is None or messages[start].get("tool_calls"):
        return parsed
    items = [
        replace(item, pinned=False)
        if (item.pinned and item.message_index >= start and item.kind != "system"
            and item.message_index not in layout.pins
            and not (item.message_index == layout.latest_user and item.kind != "knowledge"))
        else item
        for item in parsed.items
    ]
    return replace(parsed, items=items)
