"""From a trace stream entry to merged operations: signal, episode, delta, merge.

The delta of an episode is computed once and kept in Redis before it is merged, so a worker
that dies after the merge and before the acknowledgement leaves a delta that the next worker
re-merges as duplicates: exactly once, even though the LLM would answer differently.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import orjson

from gateway.learner.reflect import Episode, ReflectorCurator
from gateway.learner.signals import (
    cited_ids,
    explicit_signal,
    implicit_signal,
    text_of,
    trailing_tool_step,
)
from gateway.learner.traces import TraceEvent, load_trace
from gateway.playbook.bullet import Operation
from gateway.playbook.config import ClassPlaybook, class_playbook
from gateway.playbook.refine import Origin, PlaybookEditor
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings


def implicit_episode(event: TraceEvent, cls: ClassPlaybook) -> Episode | None:
    """The previous step of the session, judged by the tool results this call carries."""
    signal = implicit_signal(event.messages, cls.feedback)
    step = trailing_tool_step(event.messages)
    if signal is None or step is None:
        return None
    said = text_of(event.messages[step.call_index].get("content"))
    return Episode(
        key=f"{event.trace_id}:implicit", tenant=event.tenant, task_class=event.task_class,
        session_id=event.session_id, trace_id=event.trace_id, messages=event.messages,
        shown=event.injected_bullet_ids, cited=cited_ids(said, event.injected_bullet_ids),
        signal=signal,
    )


def explicit_episode(event: TraceEvent, feedback: dict[str, Any]) -> Episode:
    """The call itself, judged by the user's verdict."""
    answer = {"role": "assistant", "content": event.response.get("content")}
    if event.response.get("tool_calls"):
        answer["tool_calls"] = event.response["tool_calls"]
    return Episode(
        key=f"{event.trace_id}:explicit", tenant=event.tenant, task_class=event.task_class,
        session_id=event.session_id, trace_id=event.trace_id,
        messages=[*event.messages, answer], shown=event.injected_bullet_ids,
        cited=cited_ids(text_of(event.response.get("content")), event.injected_bullet_ids),
        signal=explicit_signal(feedback),
    )


def credit_citations(episode: Episode) -> list[Operation]:
    """A clean step without reflection: the bullets it cited helped."""
    return [Operation("TAG", f"{episode.key}:cite:{bid}", id=bid, helpful=1,
                      sources=(episode.trace_id,)) for bid in episode.cited]


def _encode_ops(ops: list[Operation]) -> bytes:
    return orjson.dumps([asdict(op) for op in ops])


def _decode_ops(raw: bytes | str) -> list[Operation]:
    return [Operation(**{**d, "sources": tuple(d["sources"])}) for d in orjson.loads(raw)]


class TraceLearner:
    """Handles one trace-stream entry; raises LearnerError when the LLM fails."""

    def __init__(
        self, redis: aioredis.Redis, editor: PlaybookEditor, brain: ReflectorCurator,
        settings: Settings, metrics: Metrics | None = None, delta_ttl_s: int = 86400,
    ) -> None:
        self._redis = redis
        self._editor = editor
        self._brain = brain
        self._settings = settings
        self._metrics = metrics
        self._delta_ttl_s = delta_ttl_s
        self._classes: dict[str, ClassPlaybook] = {}  # validated once, not per entry

    async def handle(self, fields: dict[str, str]) -> list[Operation] | None:
        """Learn from one entry; returns the delta merged (empty: no signal, no learning),
        or None when its trace is not stored (expired, or not written yet): nothing read."""
        loaded = await load_trace(self._redis, fields["tenant"], fields["trace_id"])
        if loaded is None:
            return None
        event, feedback = loaded
        cls = self._classes.get(event.task_class)
        if cls is None:
            cls = self._classes[event.task_class] = class_playbook(self._settings,
                                                                   event.task_class)
        if not cls.enabled:
            return []  # no playbook is injected for this class: lessons would go unused
        if fields.get("kind") == "feedback":
            episode = explicit_episode(event, feedback) if feedback else None
        else:
            episode = implicit_episode(event, cls)
        if episode is None:
            return []
        if self._metrics is not None and episode.signal.source == "implicit":
            # explicit feedback is counted where it arrives (POST /v1/feedback)
            self._metrics.feedback_events.labels(
                episode.signal.source, episode.signal.outcome).inc()
        ops = await self._delta(episode, cls)
        await self._editor.apply(event.tenant, event.task_class, ops, cls,
                                 Origin(event.trace_id, event.session_id))
        return ops

    async def learn(self, episode: Episode, cls: ClassPlaybook) -> list[Operation]:
        """Offline form: learn from an episode built by the caller."""
        ops = await self._delta(episode, cls)
        await self._editor.apply(episode.tenant, episode.task_class, ops, cls,
                                 Origin(episode.trace_id, episode.session_id))
        return ops

    async def _delta(self, episode: Episode, cls: ClassPlaybook) -> list[Operation]:
        signal = episode.signal
        if signal.source == "implicit" and signal.outcome not in cls.feedback.learn_on:
            # Deterministic, so a redelivery recomputes the same delta: nothing to keep.
            return credit_citations(episode) if signal.outcome == "success" else []
        delta_key = keys.playbook_delta(episode.tenant, episode.key)
        cached = await self._redis.get(delta_key)
        if cached is not None:
            return _decode_ops(cached)
        ops = await self._reflect(episode)
        if await self._redis.set(delta_key, _encode_ops(ops), nx=True, ex=self._delta_ttl_s):
            return ops
        return _decode_ops(await self._redis.get(delta_key) or b"[]")  # another worker won

    async def _reflect(self, episode: Episode) -> list[Operation]:
        store = self._editor.store
        started = time.perf_counter()
        playbook = await store.bullets(episode.tenant, episode.task_class)
        version = await store.version(episode.tenant, episode.task_class)
        ops = await self._brain.operations(episode, playbook, version)
        if self._metrics is not None:
            self._metrics.reflection_duration.observe(time.perf_counter() - started)
        return ops
