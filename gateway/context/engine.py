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
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.context.apply import apply_decision, drop_events
from gateway.context.classify import Classifier, request_text, system_text
from gateway.context.forecast import Budget, ForecastStore, forecast_budget
from gateway.context.injection import InjectedBlock, PlaybookSource, inject_block
from gateway.context.items import Item, ParsedRequest, base_tokens, content_text, parse_request
from gateway.context.models import ModelTable
from gateway.context.prefix import Prefix, PrefixCache, Reuse
from gateway.context.render import Plan, Rendered, materialize, render_messages
from gateway.context.session import Decision, RedisSessionStore, SessionState, SessionStore
from gateway.context.stages import STAGES, StageContext
from gateway.context.steps import stale_tokens, step_horizon
from gateway.context.summarize import values as summarize_values
from gateway.context.taskclass import DEFAULT_CLASS, STAGE_ORDER, TaskClass, load_task_classes
from gateway.context.tokens import TokenCounter
from gateway.errors import ContextBudgetExceeded, InvalidRequest
from gateway.observability.droplog import DropEvent, DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.embeddings import Embedder

__all__ = ["CallContext", "ContextEngine", "FittedCall", "InjectedBlock", "PlaybookSource"]

HEADER_CLASS = "x-ctxgate-task-class"
HEADER_SESSION = "x-ctxgate-session-id"
HEADER_BUDGET = "x-ctxgate-budget-tokens"


@dataclass(frozen=True)
class CallContext:
    tenant: str
    trace_id: str
    headers: Mapping[str, str]  # lower-cased request headers


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
    tenant: str = ""
    trace_id: str = ""
    prefix_stable: bool | None = None
    stage_seconds: dict[str, float] = field(default_factory=dict)
    # For wire adapters: per message sent, its index and new text or None (None: as sent),
    # before the playbook block; and the block itself, which the adapter places.
    plan: Plan | None = None
    block: InjectedBlock | None = None
    budget_source: str = "config"


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
        prefix_cache_size: int = 256,
    ) -> None:
        self.classes: dict[str, TaskClass] = load_task_classes(
            settings.task_classes, frozenset(STAGES)
        )
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
        self.forecasts = ForecastStore(redis)
        self._caches: dict[str, dict[str, Any]] = {}
        # The previous call's work per session, reused by a call that only appends messages.
        self.prefixes = PrefixCache(prefix_cache_size)

    async def _task_class(
        self, body: dict[str, Any], call: CallContext, state: SessionState, tokens: int
    ) -> TaskClass:
        """Header, else the session's remembered class, else rules, else nearest example."""
        named = call.headers.get(HEADER_CLASS)
        if named is not None:
            if named not in self.classes:
                raise InvalidRequest(
                    f"unknown task class {named!r} in {HEADER_CLASS}", param=HEADER_CLASS
                )
        elif state.task_class in self.classes:
            named = state.task_class
        else:
            named = self.classifier.by_rules(body)
            if named is None:
                if not _worth_embedding(body, tokens):
                    # A one-shot short request: no embedding on the hot path, and nothing
                    # remembered, so the session's first longer call decides its class.
                    return self.classes[DEFAULT_CLASS]
                named, _ = await self.classifier.classify(body)
        if state.task_class != named:
            state.task_class = named
            state.dirty.add("class")
        return self.classes[named]

    async def _playbook(
        self, cls: TaskClass, call: CallContext, session_id: str, body: dict[str, Any],
        state: SessionState,
    ) -> InjectedBlock | None:
        if self.playbook is None or not cls.playbook.get("enabled", False):
            return None
        if state.playbook_pin is not None:  # an open session: its block came with its state
            return self.playbook.pinned_block(state.playbook_pin)
        return await self.playbook.block_for_session(
            call.tenant,
            cls.name,
            session_id,
            request_text(body["messages"]),
            int(cls.playbook.get("cap_tokens", 800)),
        )

    async def fit(
        self, body: dict[str, Any], call: CallContext, *, compact: bool = True
    ) -> FittedCall:
        """`compact=False`: classify, trace and give the playbook, but send every message
        as is (a request that only carries new items of a conversation held upstream)."""
        timer = time.perf_counter()
        seconds: dict[str, float] = {}
        budget_header = _budget_header(call.headers)
        messages: list[Mapping[str, Any]] = body["messages"]
        model = self.models.lookup(body.get("model"))
        parts = self._caches.setdefault("parts", {})
        session_id = call.headers.get(HEADER_SESSION) or derive_session_id(call.tenant, messages)
        prefix = self.prefixes.take(call.tenant, session_id)
        parsed: ParsedRequest | None = None
        if prefix is not None and prefix.extend(messages, model.encoding, self.counter, parts):
            base, _ = base_tokens(body, self.counter, model.encoding)
            tokens_before = base + prefix.item_tokens
        else:
            prefix = None
            parsed = parse_request(body, self.counter, model.encoding, parts)
            base, tokens_before = parsed.base_tokens, parsed.tokens
        state = await self.sessions.load(call.tenant, session_id)
        cls = await self._task_class(body, call, state, tokens_before)
        stats = await self.forecasts.stats(call.tenant, cls.name)
        budget = forecast_budget(cls, model, body, stats, budget_header)
        block = await self._playbook(cls, call, session_id, body, state)
        seconds["parse"] = time.perf_counter() - timer
        fixed = base + (block.tokens if block else 0)
        reuse: Reuse | None = None
        plan: Plan | None = None
        if prefix is not None and compact:
            reuse = prefix.reuse(
                messages, state, cls, budget.input, fixed, self.counter, self._caches
            )
        if not compact:
            prefix = None
            tokens_after, events, digests = tokens_before + fixed - base, [], []
            rendered_changed, rendered_messages = False, messages
        elif reuse is not None:
            if cls.compaction.ages:  # as _fit_items does on a call without a step
                state.calls += 1
                state.dirty.add("horizon")
            tokens_after, events, digests = reuse.tokens_after, reuse.events, reuse.digests
            rendered_changed = reuse.changed
            rendered_messages = materialize(messages, reuse.plan) if reuse.changed else messages
            plan = reuse.plan if reuse.changed else None
        else:
            prefix = None
            if parsed is None:
                parsed = parse_request(body, self.counter, model.encoding, parts)
            pinned = fixed + sum(item.tokens for item in parsed.items if item.pinned)
            if pinned > budget.input:
                return await self._overflow(
                    body, call, cls, session_id, parsed, budget, pinned, state
                )
            final, ctx, stepped = await self._fit_items(
                messages, parsed, cls, budget, state, fixed, seconds
            )
            tokens_after = fixed + sum(item.tokens for item in final)
            if tokens_after > budget.input:  # the ladder ends in drops: only pinned content left
                self.metrics.budget_exceeded.labels(cls.name).inc()
                raise ContextBudgetExceeded(tokens_after, budget.input)
            rendered = render_messages(messages, parsed.items, final)
            events = drop_events(parsed.items, final, ctx.decisions)
            digests, rendered_changed = rendered.digests, rendered.changed
            rendered_messages = rendered.messages
            plan = rendered.plan if rendered.changed else None
            prefix = self._prefix(messages, parsed, final, rendered, events, ctx, stepped, cls)
        out_messages = inject_block(rendered_messages, block) if block else rendered_messages
        stable = self._track_prefix(state, digests, cls) if compact else None
        await self.sessions.save(call.tenant, session_id, state)
        self.drop_log.write(
            events,
            trace_id=call.trace_id,
            session_id=session_id,
            tenant=call.tenant,
            task_class=cls.name,
        )
        if prefix is not None:
            self.prefixes.put(call.tenant, session_id, prefix)
        changed = rendered_changed or block is not None
        self.metrics.context_tokens.labels(cls.name, "before").inc(tokens_before)
        self.metrics.context_tokens.labels(cls.name, "after").inc(tokens_after)
        seconds["total"] = time.perf_counter() - timer
        for stage, spent in seconds.items():
            self.metrics.stage_seconds.labels(stage).observe(spent)
        return FittedCall(
            body={**body, "messages": out_messages} if changed else body,
            changed=changed,
            task_class=cls.name,
            session_id=session_id,
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            drops=events,
            injected_bullet_ids=list(block.bullet_ids) if block else [],
            budget=budget.input,
            tenant=call.tenant,
            trace_id=call.trace_id,
            prefix_stable=stable,
            stage_seconds=seconds,
            plan=plan,
            block=block,
            budget_source=budget.source,
        )

    async def _fit_items(
        self,
        messages: list[Mapping[str, Any]],
        parsed: ParsedRequest,
        cls: TaskClass,
        budget: Budget,
        state: SessionState,
        fixed: int,
        seconds: dict[str, float],
    ) -> tuple[list[Item], StageContext, bool]:
        """The items as sent, the stages' context, and whether stages ran (a step)."""
        remembered = dict(state.decisions)
        known = self._known_values(parsed.items, cls)
        final = self._apply_remembered(parsed.items, remembered, parsed.encoding, known)
        stale = stale_tokens(parsed.items, state, cls, self._caches.setdefault("stale", {}))
        horizon = step_horizon(messages, parsed.items, state, cls, stale)
        total = fixed + sum(item.tokens for item in final)
        over = total > cls.compaction.high_water * budget.input
        turns_step = horizon != state.horizon
        select_always = not cls.compaction.ages and bool(cls.options("select"))
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
            caches=self._caches,
            known=known,
            target=int(cls.compaction.low_water * budget.input) if over else None,
        )
        stepped = over or turns_step or select_always
        if stepped:
            names = STAGE_ORDER if (over or turns_step) else ("select",)
            for name in names:
                if not cls.enabled(name):
                    continue
                if name == "rerank" and not over and "min_relevance" not in cls.options(name):
                    continue  # importance only orders budget cuts: a turns-only step skips it
                start = time.perf_counter()
                result = await STAGES[name](final, budget, ctx)
                final = result.items
                seconds[name] = time.perf_counter() - start
        if cls.compaction.ages:  # the instability budget counts this session's calls
            if horizon != state.horizon:
                state.horizon = horizon
                state.steps += 1
            state.calls += 1
            state.dirty.add("horizon")
        if ctx.decisions != state.decisions:
            state.decisions = ctx.decisions
            state.dirty.add("decisions")
        return final, ctx, stepped

    def _apply_remembered(
        self,
        items: list[Item],
        decisions: Mapping[str, Decision],
        encoding: str,
        known: frozenset[str],
    ) -> list[Item]:
        """The items as sent under the session's remembered decisions (pinned ones as is)."""
        memo = self._caches.setdefault("rewritten", {})
        final: list[Item] = []
        for item in items:
            decision = None if item.pinned else decisions.get(item.id)
            if decision is None:
                final.append(item)
                continue
            new = apply_decision(item, decision, self.counter, encoding, known, memo)
            if new is not None:
                final.append(new)
        return final

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
    ) -> Prefix | None:
        """What the session's next call can reuse. After a step, the next call renders the
        old messages by re-applying the step's decisions, not as the stages returned them,
        so that is what is kept."""
        if parsed.layout is None:
            return None
        if stepped:
            final = self._apply_remembered(parsed.items, ctx.decisions, parsed.encoding, ctx.known)
            rendered = render_messages(messages, parsed.items, final)
            events = drop_events(parsed.items, final, ctx.decisions)
        return Prefix.build(
            messages, parsed.items, final, parsed.layout, rendered, events, ctx.decisions,
            ctx.known, cls.name, parsed.encoding,
        )

    def _known_values(self, items: list[Item], cls: TaskClass) -> frozenset[str]:
        """Values of the session's constant context (system prompt, task statement), as the
        model will see it however old the session gets (stale blocks already stripped)."""
        fixed = [item for item in items if item.kind == "system" or item.goal]
        key = cls.name + "|" + "|".join(item.id for item in fixed)
        memo = self._caches.setdefault("known", {})
        found: frozenset[str] | None = memo.get(key)
        if found is None:
            stale = [rule for rule in cls.options("select").get("stale_patterns") or ()]
            texts = []
            for item in fixed:
                text = item.text
                for rule in stale:
                    if re.search(rule["pattern"], text):
                        text = (
                            ""
                            if rule.get("action", "drop") != "strip"
                            else re.sub(rule["pattern"], "", text)
                        )
                texts.append(text)
            found = frozenset(v for text in texts for v in summarize_values(text))
            memo[key] = found
            if len(memo) > 10_000:
                memo.pop(next(iter(memo)))
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

    async def _overflow(
        self,
        body: dict[str, Any],
        call: CallContext,
        cls: TaskClass,
        session_id: str,
        parsed: ParsedRequest,
        budget: Budget,
        pinned: int,
        state: SessionState,
    ) -> FittedCall:
        self.metrics.budget_exceeded.labels(cls.name).inc()
        await self.sessions.save(call.tenant, session_id, state)
        if cls.on_overflow != "passthrough":
            raise ContextBudgetExceeded(
                pinned,
                budget.input,
                detail="Pinned content (system prompt, latest user message, open tool calls) "
                "alone is over the budget.",
            )
        import logging

        logging.getLogger("ctxgate.context").warning(
            "pinned content needs %d tokens over the budget of %d; forwarded unchanged "
            "(task class %s: on_overflow passthrough)",
            pinned,
            budget.input,
            cls.name,
        )
        return FittedCall(
            body=body,
            changed=False,
            task_class=cls.name,
            session_id=session_id,
            tokens_before=parsed.tokens,
            tokens_after=parsed.tokens,
            drops=[],
            injected_bullet_ids=[],
            budget=budget.input,
            tenant=call.tenant,
            trace_id=call.trace_id,
        )

    async def observe(
        self, fitted: FittedCall, usage: Mapping[str, Any] | None, finish_reason: str | None
    ) -> None:
        completion = usage.get("completion_tokens") if usage else None
        await self.forecasts.observe(
            fitted.tenant,
            fitted.task_class,
            int(completion) if isinstance(completion, int) else None,
            overflow=finish_reason == "length",
        )


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
