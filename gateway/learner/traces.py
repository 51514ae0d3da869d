"""Trace events: what each call forwarded and got back, for the learner.

The HTTP layer calls `TraceSink.publish` after every non-bypass chat completion. Publishing
never delays the response: the Redis writes run in a background task (a bounded set; past
the bound events are shed and counted). Each event is kept in a tenant-scoped hash with the
learner's TTL (so `POST /v1/feedback` can find it, and only for its own tenant), but it is
announced on the trace stream that the workers consume only when it may teach something
(`signals.may_teach`: a trailing tool exchange in a class with a playbook). A call with no
signal costs the learner nothing; explicit feedback on it queues it later
(`record_feedback`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson

from gateway.learner.signals import may_teach
from gateway.observability.explain import ACCOUNT_FIELD
from gateway.playbook.config import ClassPlaybook, class_playbook, learner_settings
from gateway.services import Services
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings

log = logging.getLogger(__name__)

BATCH = 64  # traces per pipeline: one round trip carries many under load
EVENT_FIELD = "event"
FEEDBACK_FIELD = "feedback"


@dataclass(frozen=True)
class TraceEvent:
    tenant: str
    task_class: str
    session_id: str
    trace_id: str
    messages: list[dict[str, Any]]  # what was forwarded
    response: dict[str, Any]  # {"content", "tool_calls", "finish_reason", "usage"}
    injected_bullet_ids: list[str] = field(default_factory=list)
    ts: float = 0.0
    account: dict[str, Any] | None = None  # the explainer's record, stored beside the event

    def to_json(self) -> bytes:
        return orjson.dumps(self)  # orjson serialises dataclasses natively, without a copy

    @classmethod
    def from_json(cls, raw: bytes | str) -> TraceEvent:
        record = orjson.loads(raw)
        return cls(
            tenant=record["tenant"], task_class=record["task_class"],
            session_id=record["session_id"], trace_id=record["trace_id"],
            messages=list(record.get("messages") or []),
            response=dict(record.get("response") or {}),
            injected_bullet_ids=list(record.get("injected_bullet_ids") or []),
            ts=float(record.get("ts") or 0.0),
        )


def keep_recent(messages: list[dict[str, Any]], max_chars: int) -> list[dict[str, Any]]:
    """The first message and the newest ones within `max_chars` of JSON: the learner never
    shows more than that, so a long session's traces need not keep its whole history."""
    if len(messages) < 3:
        return messages
    # Sized from the newest back, only as far as they fit: a long session's trace costs
    # what it keeps, not its whole history.
    budget, start = max_chars - len(orjson.dumps(messages[0])), len(messages)
    while start > 1:
        size = len(orjson.dumps(messages[start - 1]))
        if size > budget:
            break
        start -= 1
        budget -= size
    if start == 1:  # every message fits
        return messages
    start = min(start, len(messages) - 1)  # the newest message is always kept
    while start > 1 and messages[start].get("role") == "tool":
        start -= 1  # never cut a tool exchange from the call that asked for it
    note = {"role": "system", "content": f"[{start - 1} earlier messages not kept]"}
    return [messages[0], note, *messages[start:]]


class TeachingFilter:
    """`may_teach` for trace events, with each class's playbook settings resolved once."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._classes: dict[str, ClassPlaybook] = {}

    def __call__(self, event: TraceEvent) -> bool:
        cls = self._classes.get(event.task_class)
        if cls is None:
            cls = self._classes[event.task_class] = class_playbook(self._settings,
                                                                   event.task_class)
        return may_teach(event.messages, event.injected_bullet_ids, cls)


class TraceSink:
    """Writes trace events to Redis in the background, batched; `aclose` flushes them.

    `teaches` decides which events are queued for the workers (all of them when None);
    every event is stored for feedback either way.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        metrics: Metrics | None = None,
        *,
        ttl_s: int = 86400,
        stream_maxlen: int = 100_000,
        max_pending: int = 1000,
        keep_chars: int = 48_000,
        teaches: Callable[[TraceEvent], bool] | None = None,
        shards: int = 1,
    ) -> None:
        self._redis = redis
        self._shards = shards
        self._metrics = metrics
        self._ttl_s = ttl_s
        self._maxlen = stream_maxlen
        self._max_pending = max_pending
        self._keep_chars = keep_chars
        self._teaches = teaches
        self._queue: deque[tuple[TraceEvent, bool]] = deque()
        self._in_flight = 0
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    def from_services(cls, services: Services) -> TraceSink:
        """The app's sink, with its limits from the `learner:` settings."""
        learner = learner_settings(services.settings)
        return cls(services.redis, services.metrics, ttl_s=learner.trace_ttl_s,
                   stream_maxlen=learner.stream_maxlen, max_pending=learner.pending_tasks,
                   keep_chars=2 * learner.max_trace_chars,
                   teaches=TeachingFilter(services.settings), shards=learner.trace_shards)

    def publish(self, event: TraceEvent) -> None:
        """Queue `event`; one writer task sends queued events in batched pipelines."""
        if self.pending >= self._max_pending:
            if self._metrics is not None:  # Redis is slower than traffic: shed, never block
                self._metrics.worker_failure(
                    "trace_shed", keys.trace_shard(event.tenant, self._shards))
            return
        self._queue.append((event, self._teaches is None or self._teaches(event)))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Write until the queue is empty: under load, many traces share one round trip."""
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            self._in_flight = len(batch)
            try:
                await self._write(batch)
            finally:
                self._in_flight = 0

    async def _write(self, batch: list[tuple[TraceEvent, bool]]) -> None:
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for event, teaches in batch:
                    trace_key = keys.trace(event.tenant, event.trace_id)
                    kept = replace(event, messages=keep_recent(event.messages, self._keep_chars),
                                   account=None)
                    pipe.hset(trace_key, EVENT_FIELD, kept.to_json())
                    if event.account is not None:
                        pipe.hset(trace_key, ACCOUNT_FIELD, orjson.dumps(event.account))
                        pipe.set(keys.trace_owner(event.trace_id), event.tenant, ex=self._ttl_s)
                    pipe.expire(trace_key, self._ttl_s)
                    if not teaches:
                        continue  # stored for feedback; nothing for a worker to do now
                    pipe.xadd(
                        keys.trace_stream(keys.trace_shard(event.tenant, self._shards)),
                        {"kind": "trace", "tenant": event.tenant, "trace_id": event.trace_id},
                        maxlen=self._maxlen, approximate=True,
                    )
                await pipe.execute()
        except Exception:  # a lost trace costs a lesson, never a response
            log.warning("%d traces not recorded", len(batch), exc_info=True)
            if self._metrics is not None:
                per_shard = Counter(keys.trace_shard(event.tenant, self._shards)
                                    for event, _ in batch)
                for shard, n in sorted(per_shard.items()):
                    self._metrics.worker_failure("trace_write", shard, n)

    @property
    def pending(self) -> int:
        return len(self._queue) + self._in_flight

    async def flush(self) -> None:
        """Wait until every trace published so far has been written (or given up on)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def aclose(self) -> None:
        await self.flush()


async def load_trace(
    redis: aioredis.Redis, tenant: str, trace_id: str
) -> tuple[TraceEvent, dict[str, Any] | None] | None:
    """The trace event and its explicit feedback (if any), or None when unknown."""
    raw = await redis.hmget(keys.trace(tenant, trace_id), [EVENT_FIELD, FEEDBACK_FIELD])
    if not raw[0]:
        return None
    feedback = orjson.loads(raw[1]) if raw[1] else None
    return TraceEvent.from_json(raw[0]), feedback


async def record_feedback(
    redis: aioredis.Redis, tenant: str, trace_id: str, feedback: dict[str, Any],
    stream_maxlen: int = 100_000, shards: int = 1,
) -> bool:
    """Attach explicit feedback to a trace and queue it; False when the trace is unknown."""
    trace_key = keys.trace(tenant, trace_id)
    if not await redis.hexists(trace_key, EVENT_FIELD):
        return False
    await redis.hset(trace_key, FEEDBACK_FIELD, orjson.dumps(feedback))
    await redis.xadd(
        keys.trace_stream(keys.trace_shard(tenant, shards)),
        {"kind": "feedback", "tenant": tenant, "trace_id": trace_id},
        maxlen=stream_maxlen, approximate=True,
    )
    return True
