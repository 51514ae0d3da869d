"""The engine fits a class to the caps its forecast sets: the same call sent under a class
the controller tightened goes out smaller, says `forecast`, and a switched-off forecast
leaves the YAML's caps in force."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.adjust import ClassForecasts
from gateway.context.controller import Counts, Judgement
from gateway.context.engine import CallContext, ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.sessions import synthetic_session


def _engine(settings: Settings, redis: aioredis.Redis, embedder: Embedder, tmp: Path,
            **classes: dict[str, Any]) -> ContextEngine:
    shipped = settings.task_classes["coding_agent"]
    specs = {name: {**shipped, "forecast": spec} for name, spec in classes.items()}
    adjusted = settings.model_copy(update={
        "task_classes": {**settings.task_classes, **specs}})
    return ContextEngine(adjusted, redis, Metrics(), DropLog(str(tmp / "d.jsonl"), "none", None),
                         embedder)


async def _tighten(redis: aioredis.Redis, task_class: str, scale: float) -> None:
    forecasts = ClassForecasts(redis, 0)
    j = Judgement("tighten", 1.0, scale, "test", Counts(), 0.07, "configured")
    assert await forecasts.commit(task_class, 0, Counts(), j)


async def _fit(engine: ContextEngine, task_class: str, messages: list[dict[str, Any]]) -> Any:
    """The session replayed call by call (compaction steps come with its calls): the last."""
    headers = {"x-ctxgate-task-class": task_class,
               "x-ctxgate-session-id": f"{task_class}-{uuid.uuid4().hex}"}
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 1]
    for end in ends:
        fitted = await engine.fit({"model": "gpt-4o", "messages": messages[:end]},
                                  CallContext("forecast-engine", "t", headers))
    return fitted


async def test_a_tightened_class_is_fitted_smaller(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    as_yaml, tightened, off = f"yaml_{run}", f"tight_{run}", f"off_{run}"
    engine = _engine(settings, redis_client, embedder, tmp_path, **{
        as_yaml: {"adjust": True}, tightened: {"adjust": True, "min_scale": 0.03},
        off: {"adjust": False}})
    await _tighten(redis_client, tightened, 0.03)
    await _tighten(redis_client, off, 0.05)
    _, body, _ = synthetic_session(7, turns=40)
    base = await _fit(engine, as_yaml, body)
    small = await _fit(engine, tightened, body)
    same = await _fit(engine, off, body)
    assert base.budget_source == "config" and same.budget_source == "config"
    assert small.budget_source == "forecast"
    assert small.tokens_before == base.tokens_before
    # measured 2,239 against 3,650 (shorter placeholders took the YAML class from 5,632 to
    # 3,650, under a cap scaled by 0.05: 0.03 binds)
    assert small.tokens_after < 0.7 * base.tokens_after
    assert same.tokens_after == base.tokens_after
    switched_off = ContextEngine(
        settings.model_copy(update={
            "task_classes": {**settings.task_classes, tightened: {
                **settings.task_classes["coding_agent"], "forecast": {"adjust": True}}},
            "forecast_adjust": False}),
        redis_client, Metrics(), DropLog(str(tmp_path / "e.jsonl"), "none", None), embedder)
    globally_off = await _fit(switched_off, tightened, body)
    assert globally_off.budget_source == "config"
    assert globally_off.tokens_after == base.tokens_after
