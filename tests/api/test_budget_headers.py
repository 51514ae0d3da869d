"""x-ctxgate-budget-tokens and x-ctxgate-budget-source on every managed call of the three
routes, streamed or not: the client's header; the class's caps bounded by the model's window
less the configured output reserve or the request's own (`config`); or less the reserve
forecast from the class's observed completions (`forecast`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from gateway.context.forecast import FLUSH_EVERY_S, MIN_SAMPLES, STATS_TTL_S
from tests.harness import Gateway

KEY = "sk-test-budget-headers-000"
# The default class caps input at 120,000 tokens (config/gateway.yaml); gpt-4o's window is
# 128,000 (config/models.yaml): with 60,000 reserved for output, the window is the bound.
CLASS_CAP, WINDOW_BOUND = 120_000, 128_000 - 60_000


def request(route: str, *, stream: bool, max_out: int | None) -> tuple[str, dict[str, Any]]:
    """The path and body of a small request on `route`, asking for `max_out` output tokens."""
    text = "What is the capital of France? Answer in one word."
    if route == "chat":
        body: dict[str, Any] = {"model": "gpt-4o", "messages": [
            {"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]}
        out, path = "max_tokens", "/v1/chat/completions"
    elif route == "responses":
        body = {"model": "gpt-4o", "instructions": "Be brief.", "input": text}
        out, path = "max_output_tokens", "/v1/responses"
    else:
        body = {"model": "gpt-4o", "system": "Be brief.",
                "messages": [{"role": "user", "content": text}]}
        out, path = "max_tokens", "/v1/messages"
    if max_out is not None or route == "messages":  # Messages requires max_tokens
        body[out] = max_out or 256
    body["stream"] = stream
    return path, body


def post(gateway: Gateway, path: str, body: dict[str, Any], key: str = KEY,
         **headers: str) -> httpx.Response:
    auth = {"x-api-key": key} if path == "/v1/messages" else {"authorization": f"Bearer {key}"}
    response = httpx.post(gateway.url + path, json=body, headers={**auth, **headers},
                          timeout=30)
    assert response.status_code == 200, response.text
    if body["stream"]:
        assert response.headers["content-type"].startswith("text/event-stream")
    return response


ROUTES = ["chat", "responses", "messages"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ROUTES)
def test_budget_from_the_header(gateway: Gateway, route: str, stream: bool) -> None:
    path, body = request(route, stream=stream, max_out=None)
    response = post(gateway, path, body, **{"x-ctxgate-budget-tokens": "3000"})
    assert response.headers["x-ctxgate-budget-tokens"] == "3000"
    assert response.headers["x-ctxgate-budget-source"] == "header"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ROUTES)
def test_budget_from_the_configured_or_requested_reserve(gateway: Gateway, route: str,
                                                         stream: bool) -> None:
    key = f"sk-fresh-{uuid.uuid4().hex}"  # a tenant whose class has no observed completions
    path, body = request(route, stream=stream, max_out=None)
    capped = post(gateway, path, body, key)
    assert capped.headers["x-ctxgate-budget-tokens"] == str(CLASS_CAP)
    assert capped.headers["x-ctxgate-budget-source"] == "config"
    path, body = request(route, stream=stream, max_out=60_000)
    windowed = post(gateway, path, body, key)
    assert windowed.headers["x-ctxgate-budget-tokens"] == str(WINDOW_BOUND)
    assert windowed.headers["x-ctxgate-budget-source"] == "config"


def test_budget_from_the_forecast(gateway: Gateway) -> None:
    key = f"sk-forecast-{uuid.uuid4().hex}"
    for _ in range(MIN_SAMPLES):  # answered completions: the class's forecast learns
        path, body = request("chat", stream=False, max_out=None)
        assert post(gateway, path, body, key).headers["x-ctxgate-budget-source"] == "config"
    time.sleep(FLUSH_EVERY_S + STATS_TTL_S + 0.5)  # counts flushed, the cached copy expired
    for route in ROUTES:
        for stream in (False, True):
            path, body = request(route, stream=stream, max_out=None)
            response = post(gateway, path, body, key)
            # Messages always names its own max_tokens: the request's reserve, `config`
            expected = "config" if route == "messages" else "forecast"
            assert response.headers["x-ctxgate-budget-source"] == expected, route
            assert response.headers["x-ctxgate-budget-tokens"] == str(CLASS_CAP)


@pytest.mark.parametrize("route", ROUTES)
def test_bypass_names_no_budget(gateway: Gateway, route: str) -> None:
    path, body = request(route, stream=False, max_out=None)
    response = post(gateway, path, body, **{"x-ctxgate-bypass": "true"})
    assert response.headers["x-ctxgate-task-class"] == "bypass"
    assert "x-ctxgate-budget-source" not in response.headers
