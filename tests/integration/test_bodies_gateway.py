"""Through the real gateway: a long session whose bodies are decoded from its last call's
(`gateway/api/bodies.py`) is fitted, forwarded and metered exactly as the same session
whose every body is decoded whole."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson

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


def test_a_session_decoded_from_its_last_call_goes_out_as_one_decoded_whole(
        gateway: Gateway, upstream: Upstream) -> None:
    calls = calls_from_messages(synthetic_session(5, 40)[1], "gpt-4o-mini")
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
