"""x-ctxgate-budget-tokens and x-ctxgate-budget-source on every managed call of the three
routes, streamed or not: the client's header, the class's configured cap, or the model's
window minus the output reserve (here the request's own max tokens)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import Gateway

KEY = "sk-test-budget-headers-000"
# The default class caps input at 120,000 tokens (config/gateway.yaml); gpt-4o's window is
# 128,000 (config/models.yaml): with 60,000 reserved for output, the window is the bound.
CONFIG_BOUND, WINDOW_BOUND = 120_000, 128_000 - 60_000


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
    body[out] = max_out or 256  # a small reserve leaves the class's cap in force
    body["stream"] = stream
    return path, body


def post(gateway: Gateway, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    auth = {"x-api-key": KEY} if path == "/v1/messages" else {"authorization": f"Bearer {KEY}"}
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
def test_budget_from_the_class_cap_or_the_window(gateway: Gateway, route: str,
                                                 stream: bool) -> None:
    path, body = request(route, stream=stream, max_out=None)
    capped = post(gateway, path, body)
    assert capped.headers["x-ctxgate-budget-tokens"] == str(CONFIG_BOUND)
    assert capped.headers["x-ctxgate-budget-source"] == "config"
    path, body = request(route, stream=stream, max_out=60_000)
    windowed = post(gateway, path, body)
    assert windowed.headers["x-ctxgate-budget-tokens"] == str(WINDOW_BOUND)
    assert windowed.headers["x-ctxgate-budget-source"] == "forecast"


@pytest.mark.parametrize("route", ROUTES)
def test_bypass_names_no_budget(gateway: Gateway, route: str) -> None:
    path, body = request(route, stream=False, max_out=None)
    response = post(gateway, path, body, **{"x-ctxgate-bypass": "true"})
    assert response.headers["x-ctxgate-task-class"] == "bypass"
    assert "x-ctxgate-budget-source" not in response.headers
