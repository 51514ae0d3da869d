"""POST /v1/responses through the real gateway, driven by the official `openai` SDK against
the stub upstream, which refuses what the Responses API refuses."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.harness import Gateway, Upstream

KEY = "sk-test-responses-00000000"
TOOLS: list[Any] = [{"type": "function", "name": "shell", "description": "Run a command.",
                     "parameters": {"type": "object", "properties": {
                         "cmd": {"type": "string"}}, "required": ["cmd"]}}]


def client(gateway: Gateway, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0,
                         default_headers=headers)


def tool_output(step: int, lines: int = 80) -> str:
    return "\n".join(f"src/module_{step}.py:{i}: ok value_{step}_{i} = {i * 7}"
                     for i in range(lines))


def run_agent(api: openai.OpenAI, steps: int, key: str, *, stream: bool = False,
              ) -> list[httpx.Headers]:
    """An agent loop as Codex runs it: the whole history re-sent, outputs appended."""
    history: list[Any] = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Find why the build of module 3 fails and fix it."}]}]
    seen: list[httpx.Headers] = []
    for _ in range(steps + 1):
        args: dict[str, Any] = {"model": f"stub-agent-{steps}", "input": history,
                                "instructions": "You are a coding agent. Use the shell.",
                                "tools": TOOLS, "prompt_cache_key": key}
        if stream:
            with api.responses.with_streaming_response.create(stream=True, **args) as raw:
                seen.append(raw.headers)
                events = list(raw.parse())
            assert events[0].type == "response.created"
            assert events[-1].type == "response.completed"
            response = events[-1].response
        else:
            raw_response = api.responses.with_raw_response.create(**args)
            seen.append(raw_response.headers)
            response = raw_response.parse()
        output = [item.model_dump(exclude_none=True) for item in response.output]
        history += output
        calls = [item for item in output if item["type"] == "function_call"]
        if not calls:
            assert response.output_text.startswith("echo:")
            return seen
        for call in calls:
            history.append({"type": "function_call_output", "call_id": call["call_id"],
                            "output": tool_output(len(seen))})
    raise AssertionError("the agent never finished")


@pytest.mark.parametrize("stream", [False, True])
def test_agent_loop_is_fitted_and_every_request_is_valid(gateway: Gateway, upstream: Upstream,
                                                         stream: bool) -> None:
    key = f"codex-{uuid.uuid4().hex}"
    upstream.clear()
    seen = run_agent(client(gateway, **{"x-ctxgate-budget-tokens": "2500"}), 8, key,
                     stream=stream)
    assert len(seen) == 9  # the stub refused nothing: every forwarded request was valid
    for headers in seen:
        for name in ("x-ctxgate-trace-id", "x-ctxgate-task-class", "x-ctxgate-overhead-ms",
                     "x-ctxgate-dropped-items"):
            assert name in headers
        assert int(headers["x-ctxgate-tokens-after"]) <= 2500
        assert headers["x-ctxgate-budget-tokens"] == "2500"
    last = seen[-1]
    assert int(last["x-ctxgate-tokens-before"]) > 2 * int(last["x-ctxgate-tokens-after"])
    sent = [orjson.loads(r["body"]) for r in upstream.requests() if r["path"] == "/v1/responses"]
    late = sent[-1]
    assert late["instructions"].startswith("You are a coding agent.")
    assert late["prompt_cache_key"] == key and late["tools"] == TOOLS  # passed through
    assert late["input"][0]["content"][0]["text"].startswith("Find why")  # the task, pinned
    drops = [d for d in gateway.drops()
             if d["session_id"] == key and d["event"] == "context.decision"]
    assert drops, "the session is named by its prompt_cache_key"


def test_unknown_items_and_reasoning_go_out_byte_for_byte(gateway: Gateway,
                                                          upstream: Upstream) -> None:
    unknown = {"type": "future_tool_call", "id": "ft_1", "payload": {"deep": [1, 2, 3]}}
    reasoning = {"type": "reasoning", "id": "rs_x", "summary": [], "encrypted_content": "gAAA=="}
    history: list[Any] = [{"role": "user", "content": "start"}, unknown]
    for step in range(6):
        history += [{"type": "function_call", "call_id": f"c{step}", "name": "shell",
                     "arguments": "{}"},
                    {"type": "function_call_output", "call_id": f"c{step}",
                     "output": tool_output(step)}]
    history += [reasoning, {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "done", "annotations": []}]},
        {"role": "user", "content": "next"}]
    upstream.clear()
    api = client(gateway, **{"x-ctxgate-budget-tokens": "900"})
    raw = api.responses.with_raw_response.create(model="gpt-4.1", input=history, tools=TOOLS)
    assert int(raw.headers["x-ctxgate-tokens-after"]) <= 900
    forwarded = upstream.last_body()["input"]
    assert unknown in forwarded and reasoning in forwarded
    at = forwarded.index(reasoning)
    assert forwarded[at + 1]["role"] == "assistant"  # with the item it precedes
    assert len(orjson.dumps(forwarded)) < len(orjson.dumps(history)) / 2  # outputs compacted


def test_chained_request_is_traced_but_not_compacted(gateway: Gateway,
                                                     upstream: Upstream) -> None:
    items = [{"type": "function_call_output", "call_id": "c_prev", "output": tool_output(1)}]
    upstream.clear()
    api = client(gateway, **{"x-ctxgate-budget-tokens": "200"})
    raw = api.responses.with_raw_response.create(
        model="gpt-4.1", input=items, previous_response_id="resp_earlier")  # type: ignore[arg-type]
    assert raw.headers["x-ctxgate-dropped-items"] == "0"
    assert raw.headers["x-ctxgate-tokens-before"] == raw.headers["x-ctxgate-tokens-after"]
    assert upstream.last_body()["input"] == items


def test_the_rest_of_the_responses_api_passes_through(gateway: Gateway,
                                                      upstream: Upstream) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    for method, path in (("GET", "/v1/responses/resp_1"), ("DELETE", "/v1/responses/resp_1"),
                         ("GET", "/v1/responses/resp_1/input_items"),
                         ("POST", "/v1/responses/compact")):
        answer = httpx.request(method, gateway.url + path, headers=headers,
                               content=b'{"model": "m", "input": []}' if method == "POST"
                               else None)
        assert answer.status_code == 200
        assert answer.json()["path"] == path
        assert "x-ctxgate-tokens-before" not in answer.headers


def test_gateway_errors_use_openai_envelope(gateway: Gateway) -> None:
    api = client(gateway, **{"x-ctxgate-budget-tokens": "lots"})
    with pytest.raises(openai.BadRequestError) as caught:
        api.responses.create(model="gpt-4.1", input="hi")
    assert caught.value.code == "invalid_request"
