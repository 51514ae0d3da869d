"""POST /v1/messages through the real gateway, driven by the official `anthropic` SDK against
the stub upstream, which refuses what the Messages API refuses."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from tests.harness import Gateway, Upstream

KEY = "sk-ant-test-messages-0000"
TOOLS: list[Any] = [{"name": "shell", "description": "Run a command.", "input_schema": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]
SYSTEM: list[Any] = [{"type": "text", "text": "You are Claude Code, a coding agent.",
                      "cache_control": {"type": "ephemeral"}}]


def client(gateway: Gateway, **headers: str) -> anthropic.Anthropic:
    # ANTHROPIC_BASE_URL is the gateway's root: the SDK adds /v1/messages itself.
    return anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0,
                               default_headers=headers)


def tool_output(step: int, lines: int = 80) -> str:
    return "\n".join(f"src/pkg_{step}/file.py:{i}: checked item_{step}_{i} = {i * 3}"
                     for i in range(lines))


def with_breakpoint(messages: list[Any]) -> list[Any]:
    """Claude Code's habit: a cache breakpoint on the last block of the last message."""
    last = messages[-1]
    blocks = last["content"] if isinstance(last["content"], list) else [
        {"type": "text", "text": last["content"]}]
    marked = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]
    return [*messages[:-1], {**last, "content": marked}]


def run_agent(api: anthropic.Anthropic, steps: int, *, stream: bool) -> list[httpx.Headers]:
    messages: list[Any] = [{"role": "user", "content": [
        {"type": "text", "text": "Find the flaky test in pkg 4 and fix it."}]}]
    seen: list[httpx.Headers] = []
    for _ in range(steps + 1):
        args: dict[str, Any] = {"model": f"stub-agent-{steps}", "max_tokens": 1024,
                                "system": SYSTEM, "tools": TOOLS,
                                "messages": with_breakpoint(messages),
                                "thinking": {"type": "enabled", "budget_tokens": 512}}
        if stream:
            with api.messages.with_streaming_response.create(stream=True, **args) as raw:
                seen.append(raw.headers)
                events = list(raw.parse())
            assert events[0].type == "message_start" and events[-1].type == "message_stop"
            blocks: list[dict[str, Any]] = []
            for event in events:
                if event.type == "content_block_start":
                    blocks.append(event.content_block.model_dump(exclude_none=True))
                elif event.type == "content_block_delta":
                    delta = event.delta.model_dump()
                    block = blocks[event.index]
                    if delta["type"] == "thinking_delta":
                        block["thinking"] += delta["thinking"]
                    elif delta["type"] == "signature_delta":
                        block["signature"] = delta["signature"]
                    elif delta["type"] == "text_delta":
                        block["text"] += delta["text"]
                    elif delta["type"] == "input_json_delta":
                        block["input"] = orjson.loads(delta["partial_json"])
            content = blocks
        else:
            raw_message = api.messages.with_raw_response.create(**args)
            seen.append(raw_message.headers)
            content = [b.model_dump(exclude_none=True) for b in raw_message.parse().content]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        if not uses:
            assert content[-1]["text"].startswith("echo:")
            return seen
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": tool_output(len(seen))}
            for u in uses]})
    raise AssertionError("the agent never finished")


@pytest.mark.parametrize("stream", [False, True])
def test_agent_loop_is_fitted_and_every_request_is_valid(gateway: Gateway, upstream: Upstream,
                                                         stream: bool) -> None:
    session = uuid.uuid4().hex
    upstream.clear()
    seen = run_agent(client(gateway, **{"x-ctxgate-budget-tokens": "2500",
                                        "x-ctxgate-session-id": session}), 8, stream=stream)
    assert len(seen) == 9  # the stub refused nothing: pairs, signatures, breakpoints all valid
    for headers in seen:
        assert headers["x-ctxgate-trace-id"] and headers["x-ctxgate-task-class"]
        assert int(headers["x-ctxgate-tokens-after"]) <= 2500
    last = seen[-1]
    assert int(last["x-ctxgate-tokens-before"]) > 2 * int(last["x-ctxgate-tokens-after"])
    sent = [r for r in upstream.requests() if r["path"] == "/v1/messages"]
    late = orjson.loads(sent[-1]["body"])
    assert late["system"][0] == SYSTEM[0]  # the client's breakpoint kept where it was
    assert late["thinking"] == {"type": "enabled", "budget_tokens": 512}  # passed through
    assert late["messages"][0]["content"][0]["text"].startswith("Find the flaky")
    forwarded = sent[-1]["headers"]  # this SDK sends its key as a bearer token
    assert forwarded["authorization"] == f"Bearer {KEY}" and forwarded["anthropic-version"]


def test_thinking_and_unknown_blocks_are_never_edited(gateway: Gateway,
                                                      upstream: Upstream) -> None:
    unknown = {"type": "container_upload", "file_id": "file_1", "extra": [1, {"a": None}]}
    messages: list[Any] = [{"role": "user", "content": "Start."}]
    for step in range(5):
        messages += [
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": f"think {step}", "signature": f"sig{step}"},
                {"type": "tool_use", "id": f"tu_{step}", "name": "shell", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"tu_{step}",
                 "content": [{"type": "text", "text": tool_output(step)}]}]}]
    messages[2]["content"].append(unknown)
    upstream.clear()
    api = client(gateway, **{"x-ctxgate-budget-tokens": "2200"})
    model = f"claude-x-{uuid.uuid4().hex[:8]}"  # no scale learned from earlier tests' answers
    raw = api.messages.with_raw_response.create(model=model, max_tokens=64,
                                                messages=messages, tools=TOOLS)
    assert int(raw.headers["x-ctxgate-tokens-after"]) <= 2200
    forwarded = upstream.last_body()["messages"]
    assert forwarded[-2] == messages[-2]  # the latest assistant turn, thinking and all
    assert any(unknown in m["content"] for m in forwarded if isinstance(m["content"], list))
    for message in forwarded:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block["type"] == "thinking":
                step = int(block["thinking"].split()[-1])
                assert block == messages[1 + 2 * step]["content"][0]
    assert len(orjson.dumps(forwarded)) < len(orjson.dumps(messages)) / 2


def test_gateway_errors_use_anthropic_envelope(gateway: Gateway) -> None:
    api = client(gateway, **{"x-ctxgate-budget-tokens": "-1"})
    with pytest.raises(anthropic.BadRequestError) as caught:
        api.messages.create(model="claude-x", max_tokens=8,
                            messages=[{"role": "user", "content": "hi"}])
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "x-ctxgate-budget-tokens" in body["error"]["message"]
    answer = httpx.post(f"{gateway.url}/v1/messages", content=b"{not json",
                        headers={"x-api-key": KEY})
    assert answer.status_code == 400 and answer.json()["type"] == "error"


def test_upstream_refusals_are_relayed_unchanged(gateway: Gateway) -> None:
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
              for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(gateway).messages.create(model="claude-x", max_tokens=8,
                                        messages=[{"role": "user", "content": blocks}])
    assert "maximum of 4 blocks with cache_control" in str(caught.value)


def test_count_tokens_passes_through_to_the_anthropic_upstream(gateway: Gateway,
                                                               upstream: Upstream) -> None:
    upstream.clear()
    counted = client(gateway).messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "hello there"}])
    assert counted.input_tokens > 0
    assert upstream.client_requests()[-1]["path"] == "/v1/messages/count_tokens"


def test_x_api_key_and_anthropic_headers_go_upstream_unchanged(gateway: Gateway,
                                                               upstream: Upstream) -> None:
    """Claude Code's way: `x-api-key`, `anthropic-version`, `anthropic-beta`."""
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01",
               "anthropic-beta": "context-management-2025-06-27"}
    body = {"model": "claude-x", "max_tokens": 16, "context_management": {"edits": []},
            "messages": [{"role": "user", "content": "hello"}]}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        upstream.clear()
        answer = httpx.post(gateway.url + path, headers=headers, json=body)
        assert answer.status_code == 200
        recorded = upstream.client_requests()[-1]
        assert recorded["path"] == path
        for name, value in headers.items():
            assert recorded["headers"][name] == value
        assert "authorization" not in recorded["headers"]
        assert orjson.loads(recorded["body"])["context_management"] == {"edits": []}
    assert answer.headers.get("x-ctxgate-trace-id")


def test_budget_cuts_old_tool_use_input_and_keeps_it_an_object(gateway: Gateway,
                                                                upstream: Upstream) -> None:
    """Old exchanges that are mostly tool input (long commands), under a budget: their
    `tool_use.input` is sent cut, still an object with the same keys; the latest one whole.
    A model of its own: the budget is in the provider's tokens, and the scale the shared
    gateway learned for `claude-x` from earlier tests' answers would move it (calibration).
    The probe that sizes the call names another model: its answer teaches its model a scale
    (the scripted upstream counts otherwise), which a call more than SCALE_TTL_S later (a
    loaded machine) would fit by, leaving the call uncut under a budget below its size."""
    model = f"claude-x-{uuid.uuid4().hex[:8]}"
    probe_model = f"claude-x-probe-{uuid.uuid4().hex[:8]}"
    messages: list[Any] = [{"role": "user", "content": "Clean up the build scripts."}]
    for step in range(3):
        cmd = f"find /srv/build_{step} " + " ".join(f"-name 'part_{step}_{k}.o'" for k in range(60))
        messages += [
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"tu_{step}", "name": "shell", "input": {"cmd": cmd}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"tu_{step}", "content": "ok"}]}]
    probe = client(gateway, **{"x-ctxgate-budget-tokens": "1000000",
                               "x-ctxgate-session-id": uuid.uuid4().hex})
    size = int(probe.messages.with_raw_response.create(
        model=probe_model, max_tokens=64, messages=messages, tools=TOOLS
    ).headers["x-ctxgate-tokens-before"])
    budget = int(0.8 * size)
    upstream.clear()
    raw = client(gateway, **{"x-ctxgate-budget-tokens": str(budget),  # a first call
                             "x-ctxgate-session-id": uuid.uuid4().hex}).messages \
        .with_raw_response.create(model=model, max_tokens=64, messages=messages,
                                  tools=TOOLS)
    assert budget - 0.1 * size <= int(raw.headers["x-ctxgate-tokens-after"]) <= budget
    forwarded = upstream.last_body()["messages"]
    assert forwarded[-2:] == messages[-2:]
    uses = [b for m in forwarded if isinstance(m["content"], list) for b in m["content"]
            if b["type"] == "tool_use"]
    cut = [b for b in uses if "chars cut]" in b["input"]["cmd"]]
    assert cut and all(set(b["input"]) == {"cmd"} for b in uses)
