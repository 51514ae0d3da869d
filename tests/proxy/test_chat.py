"""Chat Completions through the real gateway, driven by the official openai SDK."""

from __future__ import annotations

import itertools
import time

import httpx
import openai
import orjson
import pytest

from tests.harness import Gateway, Upstream
from tests.openapi_oracle import validate

KEY = "sk-test-client-0123456789abcdef"


@pytest.fixture
def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)


@pytest.fixture
def aclient(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0)


def test_small_request_is_forwarded_unchanged_and_answer_is_valid(
        client: openai.OpenAI, upstream: Upstream) -> None:
    upstream.clear()
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}],
        temperature=0.2, extra_body={"some_future_field": {"nested": [1, 2]}})
    completion = raw.parse()
    assert completion.choices[0].message.content == "echo: hello there"
    for header in ("trace-id", "task-class", "tokens-before", "tokens-after",
                   "dropped-items", "overhead-ms"):
        assert raw.headers.get(f"x-ctxgate-{header}"), header
    assert int(raw.headers["x-ctxgate-tokens-before"]) > 0
    forwarded = upstream.last_body()
    assert forwarded == {"model": "gpt-4o-mini", "temperature": 0.2,
                         "messages": [{"role": "user", "content": "hello there"}],
                         "some_future_field": {"nested": [1, 2]}}
    validate("CreateChatCompletionRequest", forwarded)
    validate("CreateChatCompletionResponse", orjson.loads(raw.content))


def test_forwarded_bytes_equal_client_bytes(gateway: Gateway, upstream: Upstream) -> None:
    body = (b'{"model":"gpt-4o-mini",  "messages":[{"role":"user","content":"exact bytes"}],'
            b'"x_unknown":1.50}')
    for extra in ({}, {"x-ctxgate-bypass": "true"}):
        upstream.clear()
        response = httpx.post(f"{gateway.base_url}/chat/completions", content=body,
                              headers={"authorization": f"Bearer {KEY}",
                                       "content-type": "application/json", **extra})
        assert response.status_code == 200, response.text
        assert upstream.client_requests()[-1]["body"] == body


def test_upstream_sees_client_key_in_passthrough_mode(client: openai.OpenAI,
                                                      upstream: Upstream) -> None:
    upstream.clear()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "k"}])
    headers = upstream.client_requests()[-1]["headers"]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert not any(name.startswith("x-ctxgate") for name in headers)


def test_tools_and_parallel_tool_calls_round_trip(client: openai.OpenAI,
                                                  upstream: Upstream) -> None:
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    messages: list[dict[str, object]] = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    first = client.chat.completions.create(model="stub-tools", messages=messages,  # type: ignore[arg-type]
                                           tools=tools, parallel_tool_calls=True)  # type: ignore[arg-type]
    calls = first.choices[0].message.tool_calls
    assert calls is not None and [c.id for c in calls] == ["call_a1", "call_b2"]
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"})
    upstream.clear()
    second = client.chat.completions.create(model="gpt-4o-mini", messages=messages,  # type: ignore[arg-type]
                                            tools=tools)  # type: ignore[arg-type]
    assert second.choices[0].message.content == "echo: sunny, 21C"
    forwarded = upstream.last_body()
    validate("CreateChatCompletionRequest", forwarded)
    assert forwarded["tools"] == tools
    assert [m["role"] for m in forwarded["messages"]] == ["user", "assistant", "tool", "tool"]


def test_content_parts_and_response_format_pass_through(client: openai.OpenAI,
                                                        upstream: Upstream) -> None:
    content = [{"type": "text", "text": "What is in this image?"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=",
                                                   "detail": "low"}}]
    response_format = {"type": "json_schema", "json_schema": {
        "name": "answer", "strict": True, "schema": {
            "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
            "additionalProperties": False}}}
    upstream.clear()
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": content}],  # type: ignore[misc,list-item]
                                   response_format=response_format)  # type: ignore[arg-type]
    forwarded = upstream.last_body()
    assert forwarded["messages"][0]["content"] == content
    assert forwarded["response_format"] == response_format
    validate("CreateChatCompletionRequest", forwarded)


async def test_async_stream_with_usage_and_headers(aclient: openai.AsyncOpenAI,
                                                   upstream: Upstream) -> None:
    upstream.clear()
    raw = await aclient.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "stream me please"}],
        stream=True, stream_options={"include_usage": True})
    assert raw.headers["x-ctxgate-trace-id"]
    assert raw.headers["content-type"].startswith("text/event-stream")
    stream = raw.parse()
    text, usage = "", None
    async for chunk in stream:
        validate("CreateChatCompletionStreamResponse", chunk.model_dump(exclude_unset=True))
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == "echo: stream me please"
    assert usage is not None and usage.total_tokens == 15
    assert upstream.last_body()["stream_options"] == {"include_usage": True}


def test_stream_is_relayed_as_it_arrives(client: openai.OpenAI) -> None:
    arrivals = []
    stream = client.chat.completions.create(
        model="stub-slow", messages=[{"role": "user", "content": "slowly"}], stream=True)
    for _ in stream:
        arrivals.append(time.monotonic())
    # 5+ chunks 0.3 s apart upstream: buffering would deliver them all at once.
    assert len(arrivals) >= 5
    assert arrivals[-1] - arrivals[0] > 1.0
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert sum(gap > 0.2 for gap in gaps) >= 4


def test_cut_stream_ends_client_stream_and_gateway_survives(client: openai.OpenAI,
                                                            gateway: Gateway) -> None:
    received = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(
                model="stub-cut", messages=[{"role": "user", "content": "cut"}], stream=True):
            received.append(chunk)
    assert 1 <= len(received) <= 2
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200
    ok = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "after"}])
    assert ok.choices[0].message.content == "echo: after"


def test_client_hang_up_cancels_upstream(gateway: Gateway, upstream: Upstream) -> None:
    before = upstream.events()["cancelled"]
    body = {"model": "stub-stall", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body,
                      headers={"authorization": f"Bearer {KEY}"}, timeout=10) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the first chunk arrives, then the upstream stalls
    deadline = time.monotonic() + 5
    while upstream.events()["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.events()["cancelled"] == before + 1


@pytest.mark.parametrize("status", [429, 500])
def test_upstream_errors_are_relayed_unchanged(client: openai.OpenAI, status: int) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=f"stub-{status}",
                                       messages=[{"role": "user", "content": "e"}])
    assert caught.value.status_code == status
    assert caught.value.body == {"message": f"scripted {status}", "type": "requests",
                                 "param": None, "code": "rate_limit_exceeded"
                                 if status == 429 else "server_error"}
    assert caught.value.response.headers["retry-after"] == "1"


def test_upstream_stall_is_a_504(client: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="stub-stall",
                                       messages=[{"role": "user", "content": "s"}])
    assert caught.value.status_code == 504
    assert caught.value.code == "upstream_timeout"


def test_overhead_excludes_the_upstream_wait(client: openai.OpenAI, gateway: Gateway) -> None:
    before = gateway.metric("ctxgate_overhead_seconds_sum", endpoint="/v1/chat/completions")
    count = gateway.metric("ctxgate_overhead_seconds_count", endpoint="/v1/chat/completions")
    started = time.monotonic()
    raw = client.chat.completions.with_raw_response.create(
        model="stub-delay", messages=[{"role": "user", "content": "take your time"}])
    assert time.monotonic() - started >= 1.0
    assert 0 < float(raw.headers["x-ctxgate-overhead-ms"]) < 250
    added = gateway.metric("ctxgate_overhead_seconds_sum", endpoint="/v1/chat/completions")
    assert gateway.metric("ctxgate_overhead_seconds_count",
                          endpoint="/v1/chat/completions") == count + 1
    assert 0 < added - before < 0.25
    slow = gateway.metric("ctxgate_upstream_duration_seconds_sum",
                          endpoint="/v1/chat/completions")
    assert slow >= 1.0


def test_client_hang_up_before_any_answer_cancels_upstream(gateway: Gateway,
                                                           upstream: Upstream) -> None:
    before = upstream.events()["cancelled"]
    body = {"model": "stub-stall", "messages": [{"role": "user", "content": "never mind"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
        httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=0.5,
                   headers={"authorization": f"Bearer {KEY}"})
    deadline = time.monotonic() + 5
    while upstream.events()["cancelled"] == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.events()["cancelled"] == before + 1


def test_a_client_that_hangs_up_after_the_last_event_completes_its_call(
        gateway: Gateway) -> None:
    """A client may close its stream as soon as it has `[DONE]` (Codex does), before the
    upstream's own end arrives: the answer was whole, so the call is a 200, not a 499."""
    def served(status: str) -> float:
        return gateway.metric("ctxgate_requests_total", endpoint="/v1/chat/completions",
                              status=status)

    before, gone = served("200"), served("499")
    body = {"model": "stub-linger", "stream": True,
            "messages": [{"role": "user", "content": "quick"}]}
    received = b""
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body,
                      headers={"authorization": f"Bearer {KEY}"}, timeout=10) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            received += chunk
            if b"data: [DONE]" in received:
                break  # hang up while the upstream's stream is still open
    text = "".join(orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                   for line in received.split(b"\n\n") if line.startswith(b"data: {"))
    assert text == "echo: quick"
    deadline = time.monotonic() + 10
    while served("200") == before and served("499") == gone and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (served("200"), served("499")) == (before + 1, gone)
