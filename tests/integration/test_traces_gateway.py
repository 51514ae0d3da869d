"""Every fitted chat completion leaves a trace for the learners, streamed ones included."""

from __future__ import annotations

import asyncio
import time
import uuid

import openai
import redis.asyncio as aioredis

from gateway.auth import tenant_of_token
from gateway.learner.traces import load_trace
from tests.harness import Gateway


async def wait_for_trace(redis_url: str, tenant: str, trace_id: str) -> dict[str, object]:
    client = aioredis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found = await load_trace(client, tenant, trace_id)
            if found is not None:
                event, _ = found
                return {"task_class": event.task_class, "session_id": event.session_id,
                        "response": event.response, "messages": event.messages}
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    raise AssertionError(f"no trace {trace_id}")


async def test_streamed_tool_calls_are_traced(gateway: Gateway, redis_url: str) -> None:
    key, session = f"sk-trace-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    api = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=key, max_retries=0,
                             default_headers={"x-ctxgate-session-id": session})
    raw = await api.chat.completions.with_raw_response.create(
        model="stub-tools", stream=True,
        messages=[{"role": "user", "content": "Weather in Paris and Oslo?"}])
    async for _ in raw.parse():
        pass
    trace = await wait_for_trace(redis_url, tenant_of_token(key),
                                 raw.headers["x-ctxgate-trace-id"])
    assert trace["session_id"] == session
    response = trace["response"]
    assert isinstance(response, dict) and response["finish_reason"] == "tool_calls"
    assert [c["function"]["arguments"] for c in response["tool_calls"]] == [
        '{"city": "Paris"}', '{"city": "Oslo"}']
    assert trace["messages"] == [{"role": "user", "content": "Weather in Paris and Oslo?"}]


async def test_bypass_leaves_no_trace(gateway: Gateway, redis_url: str) -> None:
    key = f"sk-trace-{uuid.uuid4().hex[:10]}"
    api = openai.AsyncOpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)
    raw = await api.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "untraced"}],
        extra_headers={"x-ctxgate-bypass": "true"})
    assert raw.headers["x-ctxgate-task-class"] == "bypass"
    # A managed call after it: the gateway writes traces in order (one queue, one writer),
    # so once this later trace is in Redis, a trace of the bypassed call would be too.
    later = await api.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "traced"}])
    await wait_for_trace(redis_url, tenant_of_token(key), later.headers["x-ctxgate-trace-id"])
    client = aioredis.from_url(redis_url)
    try:
        assert await load_trace(client, tenant_of_token(key),
                                raw.headers["x-ctxgate-trace-id"]) is None
    finally:
        await client.aclose()
