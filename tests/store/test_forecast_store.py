"""The forecast in Redis: evidence batched per class and mode, judgements applied once
(whatever the number of replicas judging), moves logged and kept as a capped history."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.context import adjust
from gateway.context.adjust import ClassForecasts, ForecastController
from gateway.context.controller import Counts
from gateway.context.evidence import EvidenceStore
from gateway.context.fidelity import CallSignals
from gateway.context.taskclass import TaskClass, task_class
from gateway.store import keys


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def a_class(**policy: object) -> TaskClass:
    return task_class(f"fc-{uuid.uuid4().hex[:8]}", {
        "budget": {"history": 10_000},
        "forecast": {"adjust": True, "min_evidence_calls": 20, "step": 0.2, **policy}})


async def record(evidence: EvidenceStore, cls: TaskClass, calls: int, found: int,
                 mode: str = "managed") -> None:
    for _ in range(calls):
        await evidence.record(CallSignals(cls.name, mode, 10, found, 2, 0))
    await evidence.flush()


def controller(redis: aioredis.Redis, cls: TaskClass, enabled: bool = True) -> ForecastController:
    return ForecastController({cls.name: cls}, EvidenceStore(redis), ClassForecasts(redis, 0),
                              enabled=enabled)


async def test_evidence_is_batched_then_kept_per_mode(redis: aioredis.Redis) -> None:
    cls = a_class()
    evidence = EvidenceStore(redis, flush_every_s=0.05)
    await evidence.record(CallSignals(cls.name, "managed", 4, 3, 2, 1))
    await evidence.record(CallSignals(cls.name, "bypass", 5, 5, 1, 0))
    await evidence.record(CallSignals(cls.name, "sideways", 5, 5, 1, 0))  # unknown: ignored
    assert (await evidence.read(cls.name))["managed"] == Counts()  # not written yet
    await asyncio.sleep(0.3)
    modes = await evidence.read(cls.name)
    assert modes["managed"] == Counts(1, 4, 3, 2, 1)
    assert modes["bypass"] == Counts(1, 5, 5, 1, 0) and modes["unmanaged"] == Counts()


async def test_a_batch_moves_the_class_once_and_is_logged(
    redis: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    cls = a_class()
    ctl = controller(redis, cls)
    await record(ctl.evidence, cls, 19, 10)
    assert await ctl.judge(cls.name) is None  # under the minimum of evidence
    assert await ctl.forecasts.scale(cls.name) is None
    await record(ctl.evidence, cls, 1, 10)
    with caplog.at_level(logging.INFO, logger="ctxgate.forecast"):
        moved = await ctl.judge(cls.name)
    assert moved is not None and moved.action == "tighten" and moved.scale_to == 0.8
    assert await ctl.forecasts.scale(cls.name) == 0.8
    line = next(r for r in caplog.records if r.name == "ctxgate.forecast")
    assert line.task_class == cls.name and line.action == "tighten"  # type: ignore[attr-defined]
    assert "recall at target" in line.reason  # type: ignore[attr-defined]
    assert await ctl.judge(cls.name) is None  # that batch is spent
    await record(ctl.evidence, cls, 20, 5)  # recall 50%: loosen
    loosened = await ctl.judge(cls.name)
    assert loosened is not None and loosened.action == "loosen" and loosened.scale_to == 1.25
    history = await ctl.forecasts.history(cls.name)
    assert [h["action"] for h in history] == ["loosen", "tighten"]
    assert history[0]["calls"] == 20 and history[0]["recall"] == 0.5
    assert (await ctl.forecasts.state(cls.name))["calm"] == 0
    await record(ctl.evidence, cls, 20, 10)  # healthy, but the first since loosening
    held = await ctl.judge(cls.name)
    assert held is not None and held.action == "hold"
    assert (await ctl.forecasts.state(cls.name))["calm"] == 1


async def test_replicas_judging_together_move_once(redis: aioredis.Redis) -> None:
    cls = a_class()
    replicas = [controller(redis, cls) for _ in range(4)]
    await record(replicas[0].evidence, cls, 40, 10)
    judged = await asyncio.gather(*(r.judge(cls.name) for r in replicas))
    assert sum(j is not None for j in judged) == 1
    assert await replicas[1].forecasts.scale(cls.name) == 0.8
    assert len(await replicas[2].forecasts.history(cls.name)) == 1


async def test_history_is_capped(redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adjust, "HISTORY_CAP", 3)
    cls = a_class(min_scale=0.01)
    ctl = controller(redis, cls)
    for _ in range(5):
        await record(ctl.evidence, cls, 20, 10)
        assert await ctl.judge(cls.name) is not None
    history = await ctl.forecasts.history(cls.name)
    assert len(history) == 3 and history[0]["scale_to"] == round(0.8 ** 5, 4)


async def test_off_globally_or_per_class_nothing_moves(redis: aioredis.Redis) -> None:
    for cls, enabled in ((a_class(), False), (a_class(adjust=False), True)):
        ctl = controller(redis, cls, enabled=enabled)
        await record(ctl.evidence, cls, 30, 10)
        assert await ctl.run_once() == []
        shown = await ctl.describe(cls.name)
        assert shown["adjust"] is False and shown["source"] == "config"
        assert shown["evidence"]["managed"]["calls"] == 30


async def test_describe_and_reset(redis: aioredis.Redis) -> None:
    cls = a_class()
    ctl = controller(redis, cls)
    await record(ctl.evidence, cls, 20, 10)
    await record(ctl.evidence, cls, 25, 9, mode="bypass")
    await ctl.judge(cls.name)
    await record(ctl.evidence, cls, 3, 10)
    shown = await ctl.describe(cls.name)
    assert shown["source"] == "forecast" and shown["scale"] == 0.8
    assert shown["caps"]["history"] == 8_000 and shown["config_caps"]["history"] == 10_000
    assert shown["evidence"]["bypass"]["recall"] == 0.9
    assert shown["since_last_judgement"]["calls"] == 3
    assert shown["history"][0]["action"] == "tighten"
    await ctl.forecasts.reset(cls.name)
    assert await ctl.forecasts.scale(cls.name) is None
    assert (await ctl.describe(cls.name))["source"] == "config"


async def test_evidence_that_expired_starts_a_new_batch(redis: aioredis.Redis) -> None:
    cls = a_class()
    ctl = controller(redis, cls)
    await record(ctl.evidence, cls, 30, 10)
    assert await ctl.judge(cls.name) is not None
    await redis.delete(keys.class_evidence(cls.name))  # as its TTL would after 30 idle days
    await record(ctl.evidence, cls, 20, 10)
    again = await ctl.judge(cls.name)
    assert again is not None and again.evidence.calls == 20
