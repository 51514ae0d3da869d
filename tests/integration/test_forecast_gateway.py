"""Budgets that adjust themselves, on the real gateway: its controller moves a class from
evidence in Redis, `GET /admin/forecast` and `ctxgate forecast` show it, and the next call
says `x-ctxgate-budget-source: forecast` (`config` while the YAML's caps hold)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from gateway.cli import app
from gateway.context.adjust import ClassForecasts
from gateway.context.controller import Counts, Judgement
from gateway.context.evidence import EvidenceStore
from gateway.context.fidelity import CallSignals
from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import Gateway

RUN = uuid.uuid4().hex[:6]
MOVING, STILL, OFF = f"fc_moving_{RUN}", f"fc_still_{RUN}", f"fc_off_{RUN}"


def write_config(directory: Path) -> Path:
    path = directory / "gateway.yaml"
    adjusting = "{adjust: true, min_evidence_calls: 10, step: 0.2}"
    path.write_text(
        "task_classes:\n"
        f"  {MOVING}:\n    budget: {{history: 20000}}\n    forecast: {adjusting}\n"
        f"  {STILL}:\n    forecast: {adjusting}\n"
        f"  {OFF}:\n    forecast: {{adjust: false}}\n")
    return path


# Not ahead: it judges and moves caps in the session's Redis, which must not happen while
# other modules' tests run on the session's gateway.
@module_gateway(ahead=False)
def forecast_gateway(start: ModuleStart) -> dict[str, str]:
    return {**gateway_env(start.upstream, start.redis_url),
            "CTXGATE_CONFIG": str(write_config(start.workdir)),
            "CTXGATE_FORECAST_ADJUST": "true", "CTXGATE_FORECAST_JUDGE_EVERY_S": "0.2"}


@pytest.fixture(scope="module")
def config(forecast_gateway: Gateway) -> Path:
    """The YAML the module's gateway reads."""
    return Path(forecast_gateway.env["CTXGATE_CONFIG"])


async def _evidence(redis_url: str, task_class: str, calls: int, found: int) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        evidence = EvidenceStore(redis)
        for _ in range(calls):
            await evidence.record(CallSignals(task_class, "managed", 10, found, 1, 0))
        await evidence.flush()
    finally:
        await redis.aclose()


async def _move(redis_url: str, task_class: str, scale: float) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        forecasts = ClassForecasts(redis, 0)
        state = await forecasts.state(task_class)
        j = Judgement("tighten", 1.0, scale, "by hand", Counts(), 0.07, "configured")
        assert await forecasts.commit(task_class, state["version"], Counts(), j)
    finally:
        await redis.aclose()


def forecast(gw: Gateway) -> dict[str, Any]:
    response = httpx.get(f"{gw.url}/admin/forecast",
                         headers={"authorization": f"Bearer {gw.admin_key}"})
    assert response.status_code == 200, response.text
    return {c["task_class"]: c for c in response.json()["classes"]}


def call(gw: Gateway, task_class: str, **headers: str) -> httpx.Response:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Say hi."}]}
    response = httpx.post(f"{gw.base_url}/chat/completions", json=body, timeout=30, headers={
        "authorization": "Bearer sk-forecast-test-0001", "x-ctxgate-task-class": task_class,
        **headers})
    assert response.status_code == 200, response.text
    return response


def test_the_gateway_moves_a_class_from_evidence(forecast_gateway: Gateway,
                                                 redis_url: str) -> None:
    asyncio.run(_evidence(redis_url, MOVING, 12, 10))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not forecast(forecast_gateway)[MOVING]["history"]:
        time.sleep(0.2)
    shown = forecast(forecast_gateway)[MOVING]
    assert shown["source"] == "forecast" and shown["scale"] == 0.8
    assert shown["caps"]["history"] == 16_000 and shown["config_caps"]["history"] == 20_000
    assert shown["history"][0]["action"] == "tighten" and shown["history"][0]["calls"] == 12
    assert shown["evidence"]["managed"]["recall"] == 1.0
    assert '"msg": "forecast tighten"' in forecast_gateway.log.replace('":"', '": "')
    moved = call(forecast_gateway, MOVING)
    assert moved.headers["x-ctxgate-budget-source"] == "forecast"
    assert call(forecast_gateway, STILL).headers["x-ctxgate-budget-source"] == "config"
    header = call(forecast_gateway, MOVING, **{"x-ctxgate-budget-tokens": "5000"})
    assert header.headers["x-ctxgate-budget-source"] == "header"
    assert header.headers["x-ctxgate-budget-tokens"] == "5000"


def test_a_class_with_adjustment_off_keeps_its_yaml_caps(forecast_gateway: Gateway,
                                                        redis_url: str) -> None:
    asyncio.run(_move(redis_url, OFF, 0.5))  # a scale left in Redis from when it was on
    assert call(forecast_gateway, OFF).headers["x-ctxgate-budget-source"] == "config"
    shown = forecast(forecast_gateway)[OFF]
    assert shown["adjust"] is False and shown["source"] == "config" and shown["scale"] == 1.0


def test_the_admin_route_needs_the_admin_key(forecast_gateway: Gateway) -> None:
    response = httpx.get(f"{forecast_gateway.url}/admin/forecast")
    assert response.status_code in (401, 403)
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_the_cli_shows_forecast_evidence_and_history(
    forecast_gateway: Gateway, redis_url: str, config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_move(redis_url, STILL, 0.9))
    monkeypatch.setenv("CTXGATE_REDIS_URL", redis_url)
    monkeypatch.setenv("CTXGATE_CONFIG", str(config))
    runner = CliRunner()
    text = runner.invoke(app, ["forecast"])
    assert text.exit_code == 0, text.output
    assert f"{STILL}  adjust=on  source=forecast  scale=0.9" in text.output
    assert "tighten 1 -> 0.9: by hand" in text.output
    as_json = {c["task_class"]: c for c in orjson.loads(
        runner.invoke(app, ["forecast", "--json"]).output)}
    assert as_json[STILL]["caps"]["history"] == round(0.9 * 64_000)
    reset = runner.invoke(app, ["forecast", "--reset", STILL])
    assert reset.exit_code == 0 and f"{STILL}  adjust=on  source=config" in reset.output
    assert runner.invoke(app, ["forecast", "--reset", "nope"]).exit_code != 0
