"""The gateway's own errors: OpenAI's envelope with the codes of INTERFACE.md, never a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import Gateway

AUTH = {"authorization": "Bearer sk-test-errors-000000", "content-type": "application/json"}
OK_MESSAGES = [{"role": "user", "content": "hi"}]


def post(gateway: Gateway, content: bytes, headers: dict[str, str] | None = None
         ) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/chat/completions", content=content,
                      headers={**AUTH, **(headers or {})}, timeout=10)


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]
    assert response.headers.get("x-ctxgate-trace-id")
    return dict(error)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"", b'"text"'])
def test_invalid_json(gateway: Gateway, content: bytes) -> None:
    assert_error(post(gateway, content), 400, "invalid_json")


@pytest.mark.parametrize("body,param", [
    (b'{"model": "m"}', "messages"),
    (b'{"model": "m", "messages": []}', "messages"),
    (b'{"model": "m", "messages": "hi"}', "messages"),
    (b'{"model": 3, "messages": [{"role": "user", "content": "x"}]}', "model"),
    (b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}', "messages[0]"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "x"},'
     b' {"role": "tool", "tool_call_id": "call_none", "content": "r"}]}',
     "messages[1].tool_call_id"),
    (b'{"model": "m", "max_tokens": "ten", "messages": [{"role": "user", "content": "x"}]}',
     "max_tokens"),
])
def test_invalid_request(gateway: Gateway, body: bytes, param: str) -> None:
    error = assert_error(post(gateway, body), 400, "invalid_request")
    assert error["param"] == param


@pytest.mark.parametrize("headers", [
    {"x-ctxgate-budget-tokens": "-5"}, {"x-ctxgate-budget-tokens": "lots"},
    {"x-ctxgate-task-class": "no-such-class"}, {"x-ctxgate-bypass": "maybe"},
])
def test_bad_ctxgate_header(gateway: Gateway, headers: dict[str, str]) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    assert_error(post(gateway, body, headers), 400, "invalid_request")


def test_body_too_large(gateway: Gateway) -> None:
    limit = int(gateway.env["CTXGATE_MAX_BODY_BYTES"])
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * limit + b'"}]}'
    assert_error(post(gateway, big), 413, "request_too_large")


def test_unknown_route_is_enveloped(gateway: Gateway) -> None:
    response = httpx.get(f"{gateway.url}/nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
