"""The learning loop on the Responses and Messages routes: the playbook block is injected where
each format keeps its system prompt, pinned per session, and every call leaves a chat-shaped
trace whose tool results the implicit feedback reads as on chat."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import httpx
import openai
import orjson

from gateway.auth import tenant_of_token
from gateway.learner.signals import implicit_signal
from gateway.playbook.config import FeedbackRules
from tests.api.test_routes import admin_client
from tests.harness import Gateway, Upstream
from tests.integration.test_traces_gateway import wait_for_trace

CLASS = "coding_agent"
FAILED = "Traceback (most recent call last):\n  File \"x.py\", line 3\nValueError: bad"


def last_sent(upstream: Upstream, path: str) -> Any:
    """The last body forwarded to `path` (the in-process learner also calls the stub)."""
    return orjson.loads([r for r in upstream.requests() if r["path"] == path][-1]["body"])


def seed_playbook(gateway: Gateway, key: str) -> str:
    """A one-bullet playbook for this key's tenant; returns the bullet's content."""
    content = f"Run the narrowest test first ({uuid.uuid4().hex[:6]})."
    with admin_client(gateway) as admin:
        added = admin.post(f"/admin/playbooks/{tenant_of_token(key)}/{CLASS}/bullets",
                           json={"section": "Testing", "content": content})
        assert added.status_code == 201, added.text
    return content


async def test_responses_playbook_in_instructions_and_traces(
        gateway: Gateway, upstream: Upstream, redis_url: str) -> None:
    key = f"sk-learn-r-{uuid.uuid4().hex[:10]}"
    lesson = seed_playbook(gateway, key)
    api = openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0,
                        default_headers={"x-ctxgate-task-class": CLASS})
    history: list[Any] = [{"role": "user", "content": "Fix the failing parser test."}]
    cache_key = uuid.uuid4().hex
    blocks = []
    for step in range(2):
        upstream.clear()
        raw = api.responses.with_raw_response.create(
            model="stub-agent-2", input=history, instructions="You are a coding agent.",
            prompt_cache_key=cache_key)
        sent = last_sent(upstream, "/v1/responses")
        assert sent["instructions"].startswith("You are a coding agent.\n\n")
        assert lesson in sent["instructions"]
        blocks.append(sent["instructions"])
        history += [item.model_dump(exclude_none=True) for item in raw.parse().output]
        history.append({"type": "function_call_output", "call_id": f"call_{step}",
                        "output": FAILED})
    assert blocks[0] == blocks[1]  # pinned per session
    trace = await wait_for_trace(redis_url, tenant_of_token(key), raw.headers["x-ctxgate-trace-id"])
    assert trace["task_class"] == CLASS and trace["session_id"] == cache_key
    response: Any = trace["response"]
    assert response["tool_calls"][0]["function"]["name"] == "shell"
    assert response["usage"]["prompt_tokens"] > 0
    messages: Any = trace["messages"]
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_0", "content": FAILED}
    signal = implicit_signal(messages, FeedbackRules())
    assert signal is not None and signal.outcome == "failure" and "Traceback" in signal.detail


async def test_messages_playbook_in_a_system_block_and_traces(
        gateway: Gateway, upstream: Upstream, redis_url: str) -> None:
    key = f"sk-ant-learn-{uuid.uuid4().hex[:10]}"
    lesson = seed_playbook(gateway, key)
    api = anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0,
                              default_headers={"x-ctxgate-task-class": CLASS})
    system = [{"type": "text", "text": "You are a coding agent.",
               "cache_control": {"type": "ephemeral"}}]
    messages: list[Any] = [{"role": "user", "content": "Fix the failing parser test."}]
    with api.messages.with_streaming_response.create(
            model="stub-agent-2", max_tokens=256, system=system,  # type: ignore[arg-type]
            messages=messages, stream=True) as raw:
        for _ in raw.parse():
            pass
    sent = last_sent(upstream, "/v1/messages")
    assert sent["system"][0] == system[0]  # the client's block and breakpoint first
    assert lesson in sent["system"][1]["text"] and "cache_control" not in sent["system"][1]
    trace = await wait_for_trace(redis_url, tenant_of_token(key), raw.headers["x-ctxgate-trace-id"])
    response: Any = trace["response"]
    assert response["finish_reason"] == "tool_calls"
    assert response["tool_calls"][0]["function"]["arguments"] == '{"cmd":"step 0"}'
    assert response["usage"]["completion_tokens"] == 7


def test_bypass_is_not_managed(gateway: Gateway, upstream: Upstream) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    raw = httpx.post(f"{gateway.url}/v1/messages", json=body,
                     headers={"x-api-key": "k", "x-ctxgate-bypass": "true"})
    assert raw.status_code == 200 and raw.headers["x-ctxgate-task-class"] == "bypass"
