"""The route skeleton alone, in-process: auth, errors in the route's envelope, 499, 500,
metrics and the after-response hook, around small ASGI apps."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from gateway.api.asgi import ASGIApp, Receive, Scope, Send, send_response
from gateway.api.route import Call, Route, call_of
from gateway.auth import authenticate
from gateway.errors import ClientGone, GatewayError, InvalidRequest
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

ENDPOINT = "/v1/test"


def anthropic_envelope(error: GatewayError) -> bytes:
    """What the Messages route will plug in: Anthropic's error body."""
    return orjson.dumps({"type": "error",
                         "error": {"type": "invalid_request_error", "message": error.message}})


async def ok(scope: Scope, receive: Receive, send: Send) -> None:
    call = call_of(scope)
    call.task_class = "code"
    await send_response(send, 200, orjson.dumps({"tenant": call.caller.tenant}), [])


async def invalid(scope: Scope, receive: Receive, send: Send) -> None:
    raise InvalidRequest("no messages", param="messages")


async def bug(scope: Scope, receive: Receive, send: Send) -> None:
    raise KeyError("oops")


async def hung_up(scope: Scope, receive: Receive, send: Send) -> None:
    raise ClientGone


class Served:
    def __init__(self, app: ASGIApp, **options: Any) -> None:
        self.metrics = Metrics(CollectorRegistry())
        self.after: list[Call] = []

        async def after(call: Call) -> None:
            self.after.append(call)

        settings = Settings(auth_mode="keys", keys={"gk-1": "team-a"})
        tracer = TracerProvider().get_tracer("test")
        self.route = Route(app, settings=settings, metrics=self.metrics, tracer=tracer,
                           endpoint=ENDPOINT, after=after, **options)

    def post(self, key: str | None = "gk-1") -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.route)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                headers = {"authorization": f"Bearer {key}"} if key else {}
                return await client.post(ENDPOINT, headers=headers, content=b"{}")
        return asyncio.run(go())

    def count(self, status: str, task_class: str = "none") -> float:
        value = self.metrics.registry.get_sample_value(
            "ctxgate_requests_total",
            {"endpoint": ENDPOINT, "status": status, "task_class": task_class})
        return value or 0.0


def test_a_served_request_is_authenticated_counted_and_followed_up() -> None:
    served = Served(ok, authenticate=authenticate)
    response = served.post()
    assert response.status_code == 200 and response.json() == {"tenant": "team-a"}
    assert served.count("200", "code") == 1
    [call] = served.after
    assert call.status == 200 and call.caller.tenant == "team-a" and len(call.trace_id) == 32


@pytest.mark.parametrize("key", ["gk-unknown", None])
def test_an_unknown_key_is_refused_before_the_route_runs(key: str | None) -> None:
    served = Served(bug, authenticate=authenticate)
    response = served.post(key)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert served.count("401") == 1 and served.after == []


def test_gateway_errors_render_in_the_routes_envelope() -> None:
    openai_style = Served(invalid).post()
    assert openai_style.status_code == 400
    assert openai_style.json() == {"error": {"message": "no messages",
                                             "type": "invalid_request_error",
                                             "param": "messages", "code": "invalid_request"}}
    assert openai_style.headers["x-ctxgate-trace-id"]
    anthropic_style = Served(invalid, envelope=anthropic_envelope).post()
    assert anthropic_style.status_code == 400
    assert anthropic_style.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "no messages"}}


def test_a_bug_is_an_enveloped_500_with_its_trace_id() -> None:
    served = Served(bug)
    response = served.post()
    assert response.status_code == 500
    trace_id = response.headers["x-ctxgate-trace-id"]
    assert response.json()["error"]["code"] == "internal_error"
    assert trace_id in response.json()["error"]["message"]
    assert served.count("500") == 1 and served.after == []


def test_a_client_that_hangs_up_is_counted_as_499() -> None:
    served = Served(hung_up)
    with pytest.raises(Exception):  # noqa: B017 - nothing was sent: the transport complains
        served.post()
    assert served.count("499") == 1 and served.after == []
