"""Learner fixtures: a Redis database of our own, Services, scripted learner answers.

The trace stream is one global key, and the session's gateway runs an in-process worker on
database 0; the learner tests use database 7 so that no other consumer takes their entries.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.learner.traces import TraceEvent
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.playbook.bullet import Operation
from gateway.services import Services
from gateway.settings import Settings
from gateway.store import keys
from tests.harness import Upstream
from tests.playbook.conftest import WordEmbedder

LEARNER_DB = 7


@pytest.fixture
def learner_redis_url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{LEARNER_DB}"


@pytest.fixture
async def lredis(learner_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(learner_redis_url)
    await client.delete(keys.TRACE_STREAM, keys.TRACE_DEAD_LETTER)
    yield client
    await client.aclose()


@pytest.fixture
def models() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"reflector-{tag}", f"curator-{tag}"


ENABLED = {"playbook": {"enabled": True}}


def make_settings(upstream: Upstream, models: tuple[str, str], tmp: Path,
                  **extra: Any) -> Settings:
    classes = {"code": ENABLED, "qa": ENABLED, **extra.pop("task_classes", {})}
    return Settings(
        config=tmp / "absent.yaml", learner_url=f"{upstream.url}/v1",
        reflector_model=models[0], curator_model=models[1], task_classes=classes,
        learner={"reclaim_idle_s": 0.3, "retries": 2, **extra.pop("learner", {})},
        **extra,
    )


def make_services(settings: Settings, redis: aioredis.Redis, tmp: Path) -> Services:
    metrics = Metrics()
    drops = DropLog(str(tmp / "drops.jsonl"), "text", metrics)
    return Services(settings, metrics, redis, drops, WordEmbedder())  # type: ignore[arg-type]


def reflection(tags: list[dict[str, str]] | None = None, insight: str = "x") -> dict[str, Any]:
    return {"content": orjson.dumps({
        "reasoning": "r", "error_identification": "e", "root_cause_analysis": "c",
        "correct_approach": "a", "key_insight": insight, "bullet_tags": tags or []}).decode()}


def curation(operations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"content": orjson.dumps({"reasoning": "r", "operations": operations}).decode()}


def failed_step_event(tenant: str, trace_id: str, injected: list[str] | None = None,
                      said: str = "Running the tests.", task_class: str = "code",
                      tool_output: str = "Traceback (most recent call last):\n"
                                         "ModuleNotFoundError: No module named 'foo'",
                      session_id: str = "s1") -> TraceEvent:
    """A call whose messages end with a tool result (the previous step's outcome)."""
    return TraceEvent(
        tenant=tenant, task_class=task_class, session_id=session_id, trace_id=trace_id,
        messages=[
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test."},
            {"role": "assistant", "content": said, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": tool_output},
        ],
        response={"content": "Let me fix that.", "tool_calls": [], "finish_reason": "stop",
                  "usage": None},
        injected_bullet_ids=injected or [], ts=0.0,
    )


async def cited_clean_step(store: Any, tenant: str, trace_id: str) -> tuple[str, TraceEvent]:
    """A `code` bullet seeded in `tenant`'s playbook and a step that cites it and passes
    (nothing for the Reflector: a credit only): the bullet's id and the step."""
    [seed] = await store.merge(tenant, "code", [
        Operation("ADD", "seed", section="tool_usage", content="Run pytest -x.")])
    return seed.bullet_id, failed_step_event(
        tenant, trace_id, injected=[seed.bullet_id],
        said=f"Per [{seed.bullet_id}] I run pytest -x.", tool_output="5 passed in 0.1s")
