"""Through the real gateway: a long session whose bodies are decoded from its last call's
(`gateway/api/bodies.py`) is fitted, forwarded and metered exactly as the same session
whose every body is decoded whole."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson
import pytest

from bench.wire_convert import CONVERTERS
from gateway.api.bodies import MIN_BYTES
from gateway.context.replay import calls_from_messages
from tests.harness import Gateway, Upstream
from tests.sessions import synthetic_session

HEADERS = ("x-ctxgate-tokens-before", "x-ctxgate-tokens-after", "x-ctxgate-dropped-items",
           "x-ctxgate-task-class")


def _send(gateway: Gateway, upstream: Upstream, raw: bytes, key: str, session: str
          ) -> tuple[list[Any], list[str]]:
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json",
               "x-ctxgate-session-id": session}
    upstream.clear()
    response = httpx.post(f"{gateway.base_url}/chat/completions", content=raw,
                          headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    forwarded = upstream.last_body()["messages"]  # the learner's calls skipped
    return forwarded, [response.headers[name] for name in HEADERS]


# Tools written after the messages, as the openai SDK writes a body: each schema closes
# three arrays, more after the list than the body cache tries from the end.
SCHEMA = {"type": "object", "required": ["mode", "unit"], "properties": {
    "mode": {"type": "string", "enum": ["fast", "slow"]},
    "unit": {"type": "string", "enum": ["s", "ms"]}}}
TOOLS = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": SCHEMA}}
         for k in range(40)]


@pytest.mark.parametrize("tools", [False, True], ids=["messages-last", "tools-after"])
def test_a_session_decoded_from_its_last_call_goes_out_as_one_decoded_whole(
        gateway: Gateway, upstream: Upstream, tools: bool) -> None:
    calls = calls_from_messages(synthetic_session(5, 40)[1], "gpt-4o-mini")
    if tools:
        calls = [{**body, "tools": TOOLS, "tool_choice": "auto"} for body in calls]
    run = uuid.uuid4().hex[:8]
    resumed = 0
    keys = [f"sk-bodies-{kind}-{run}-0000" for kind in ("resumed", "whole")]
    for n, body in enumerate(calls):
        compact = orjson.dumps(body)  # the session's next body starts as its last
        # A new indent for every call: no body starts as one the gateway has seen.
        whole = json.dumps(body, indent=n + 1).encode()
        resumed += len(compact) >= MIN_BYTES
        one = _send(gateway, upstream, compact, keys[0], f"a-{run}")
        other = _send(gateway, upstream, whole, keys[1], f"b-{run}")
        assert one == other, f"call {n}"
    assert resumed >= 10  # the long calls: past the size from which bodies are kept


WIRE_PATHS = {"responses": "/responses", "messages": "/messages"}


def _send_wire(gateway: Gateway, upstream: Upstream, name: str, raw: bytes, key: str,
               session: str) -> tuple[bytes, list[str]]:
    auth = ({"authorization": f"Bearer {key}"} if name == "responses" else
            {"x-api-key": key, "anthropic-version": "2023-06-01"})
    upstream.clear()
    response = httpx.post(f"{gateway.base_url}{WIRE_PATHS[name]}", content=raw, timeout=60,
                          headers={**auth, "content-type": "application/json",
                                   "x-ctxgate-session-id": session})
    assert response.status_code == 200, response.text
    forwarded = upstream.client_requests()[-1]["body"]
    return forwarded, [response.headers[header] for header in HEADERS]


@pytest.mark.parametrize("name", sorted(WIRE_PATHS))
def test_a_wire_session_translated_from_its_last_call_goes_out_as_one_translated_whole(
        gateway: Gateway, upstream: Upstream, name: str) -> None:
    """Responses and Messages: a session sent compact (each body continues the last: its
    new items alone decoded and translated) and the same session re-indented on every
    call (never continues) under another tenant forward the same bytes and headers, and
    so do an edited history, a restart and a changed tool list after it. Fails when a
    view built on from the last differs from the view built whole."""
    calls = [{**CONVERTERS[name](call), **({"max_tokens": 256} if name == "messages" else {})}
             for call in calls_from_messages(synthetic_session(6, 40)[1], "gpt-4o-mini")]
    edited = json.loads(json.dumps(calls[-1]))
    items = "input" if name == "responses" else "messages"
    first = edited[items][0]  # the task, edited by the client
    if isinstance(first["content"], str):
        first["content"] += " (edited)"
    else:
        first["content"][0]["text"] += " (edited)"
    tool = ({"type": "function", "name": "shell", "parameters": {"type": "object"}}
            if name == "responses" else {"name": "shell", "input_schema": {"type": "object"}})
    retooled = {**calls[-1], "tools": [*calls[-1].get("tools", []), tool]}
    run = uuid.uuid4().hex[:8]
    keys = [f"sk-wire-{kind}-{run}-0000" for kind in ("resumed", "whole")]
    for n, body in enumerate([*calls, edited, *calls[-3:], retooled]):
        compact = orjson.dumps(body)
        whole = json.dumps(body, indent=n + 1).encode()
        one, one_headers = _send_wire(gateway, upstream, name, compact, keys[0], f"a-{run}")
        other, other_headers = _send_wire(gateway, upstream, name, whole, keys[1], f"b-{run}")
        assert one_headers == other_headers, f"call {n}"
        if one == compact:  # forwarded as the client sent it: so was the other's
            assert other == whole, f"call {n}"
        else:
            assert one == other, f"call {n}"
