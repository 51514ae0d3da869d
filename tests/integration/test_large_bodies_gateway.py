"""Through the real gateway: a long session whose bodies pass a megabyte, each resumed from
its last call's on the fitting thread (`gateway/api/bodies.py`, `off_loop`), is fitted,
forwarded and metered exactly as the same session whose every body is decoded whole (a
piece at a time, `gateway/api/pieces.py`), fitted and bypassed alike; in Messages and
Responses form too (their chat views built on from the last call's on the thread)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson
import pytest

from bench.wire_convert import CONVERTERS
from gateway.api.bodies import MAX_BODY_BYTES
from gateway.context.replay import calls_from_messages
from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import Gateway, Upstream
from tests.integration.test_bodies_gateway import HEADERS, TOOLS, WIRE_PATHS
from tests.sessions import synthetic_session

CALLS = 8  # the session's last calls sent: the first under a megabyte, the others past it


@module_gateway()
def large_gateway(start: ModuleStart) -> dict[str, str]:
    """The session's gateway takes bodies up to 1 MiB; this one up to 8 MiB (learner off:
    started ahead, it would take the session gateway's traces)."""
    return {**gateway_env(start.upstream, start.redis_url),
            "CTXGATE_MAX_BODY_BYTES": str(8 << 20), "CTXGATE_WORKER": "off"}


def _calls() -> list[dict[str, Any]]:
    """A synthetic session's last `CALLS` calls in the openai SDK's order (tools after the
    messages), its first tool output padded so that only the first of them is under a
    megabyte (an old output: the fitted calls drop it)."""
    calls = calls_from_messages(synthetic_session(7, 40)[1], "gpt-4o-mini")[-CALLS:]
    pad = MAX_BODY_BYTES - 1_000 - len(orjson.dumps({**calls[0], "tools": TOOLS}))
    out = []
    for body in calls:
        messages = list(body["messages"])
        at = next(n for n, message in enumerate(messages) if message["role"] == "tool")
        lines = "".join(f"line {k}: lorem ipsum dolor. " for k in range(pad // 20))
        messages[at] = {**messages[at], "content": messages[at]["content"] + "\n" + lines[:pad]}
        out.append({"model": body["model"], "messages": messages, "tools": TOOLS,
                    "tool_choice": "auto"})
    return out


def _send(gateway: Gateway, upstream: Upstream, raw: bytes, key: str, session: str,
          bypass: bool) -> tuple[Any, list[str]]:
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json",
               "x-ctxgate-session-id": session, **({"x-ctxgate-bypass": "true"} if bypass
                                                  else {})}
    upstream.clear()
    response = httpx.post(f"{gateway.base_url}/chat/completions", content=raw,
                          headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return upstream.last_body()["messages"], [response.headers[name] for name in HEADERS]


@pytest.mark.parametrize("bypass", [False, True], ids=["fitted", "bypassed"])
def test_a_session_past_a_megabyte_resumed_goes_out_as_one_decoded_whole(
        large_gateway: Gateway, upstream: Upstream, bypass: bool) -> None:
    calls = _calls()
    sizes = [len(orjson.dumps(body)) for body in calls]
    assert sizes[0] < MAX_BODY_BYTES <= sizes[1]
    run = uuid.uuid4().hex[:8]
    keys = [f"sk-large-{kind}-{run}-0000" for kind in ("resumed", "whole")]
    for n, body in enumerate(calls):
        compact = orjson.dumps(body)  # the session's next body starts as its last
        # A new indent for every call: no body starts as one the gateway has seen.
        whole = json.dumps(body, indent=n + 1).encode()
        one = _send(large_gateway, upstream, compact, keys[0], f"a-{run}", bypass)
        other = _send(large_gateway, upstream, whole, keys[1], f"b-{run}", bypass)
        assert one == other, f"call {n}"
    if not bypass:  # the later calls were fitted: a megabyte of task is over any budget
        assert int(one[1][2]) > 0


def _send_wire(gateway: Gateway, upstream: Upstream, name: str, raw: bytes, key: str,
               session: str, bypass: bool) -> tuple[bytes, list[str], float]:
    auth = ({"authorization": f"Bearer {key}"} if name == "responses" else
            {"x-api-key": key, "anthropic-version": "2023-06-01"})
    upstream.clear()
    response = httpx.post(f"{gateway.base_url}{WIRE_PATHS[name]}", content=raw, timeout=120,
                          headers={**auth, "content-type": "application/json",
                                   "x-ctxgate-session-id": session,
                                   **({"x-ctxgate-bypass": "true"} if bypass else {})})
    assert response.status_code == 200, response.text
    return (upstream.client_requests()[-1]["body"],
            [response.headers[header] for header in HEADERS],
            float(response.headers["x-ctxgate-overhead-ms"]))


@pytest.mark.parametrize("bypass", [False, True], ids=["fitted", "bypassed"])
@pytest.mark.parametrize("name", sorted(WIRE_PATHS))
def test_a_wire_session_past_a_megabyte_resumed_goes_out_as_one_translated_whole(
        large_gateway: Gateway, upstream: Upstream, name: str, bypass: bool) -> None:
    """Messages and Responses: the session of `_calls` in that format, sent compact (each
    body past a megabyte resumed from its last call's on the fitting thread, its chat view
    built on from that one's there) and re-indented on every call (never resumed) under
    another tenant, fitted and bypassed, forwards the same bytes and headers."""
    calls = [{**CONVERTERS[name](body), **({"max_tokens": 256} if name == "messages" else {})}
             for body in _calls()]
    sizes = [len(orjson.dumps(body)) for body in calls]
    assert sizes[1] >= MAX_BODY_BYTES
    run = uuid.uuid4().hex[:8]
    keys = [f"sk-large-{name}-{kind}-{run}-0000" for kind in ("resumed", "whole")]
    for n, body in enumerate(calls):
        compact = orjson.dumps(body)
        whole = json.dumps(body, indent=n + 1).encode()
        one = _send_wire(large_gateway, upstream, name, compact, keys[0], f"a-{run}", bypass)
        other = _send_wire(large_gateway, upstream, name, whole, keys[1], f"b-{run}", bypass)
        assert one[1] == other[1], f"call {n}"
        if one[0] == compact:  # forwarded as the client sent it: so was the other's
            assert other[0] == whole, f"call {n}"
        else:
            assert one[0] == other[0], f"call {n}"
    if not bypass:
        assert int(one[1][2]) > 0  # the later calls were fitted
