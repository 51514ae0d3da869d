"""A lean scripted OpenAI upstream for the overhead benchmark.

`tests/upstream_stub.py` records every request and runs on uvicorn; at the rates this
benchmark drives it would be the bottleneck. This one is a bare asyncio protocol on uvloop
with httptools' parser and precomputed answers, so one core serves far more requests per
second than any proxy under test (the direct row of the results shows its ceiling).

Answers to `POST /v1/chat/completions`: a request that carries `tools` and ends with a user
turn gets two tool calls, anything else a short text; `"stream": true` gets the same answer
as server-sent events, one chunked-encoding chunk (and one socket write) per event, with a
usage chunk when `stream_options.include_usage` asks for it. `GET /v1/models` lists the
model. `POST /v1/responses` and `POST /v1/messages` (Anthropic) answer the same way in their
own formats (tool calls when the request has tools and ends with a user message; streams
as those APIs' named events), built once with the stub upstream's own builders
(`tests/stub_wire.py`). Everything else is a 404.

Run: `python -m bench.upstream PORT`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, cast

import httptools
import orjson
import uvloop

from tests import stub_wire

MODEL = "gpt-4o-mini"
_USAGE = {"prompt_tokens": 412, "completion_tokens": 24, "total_tokens": 436}
_TEXT = "The build fails because the lockfile pins an old version; bump it and re-run."
_TOOL_CALLS = [
    {"id": "call_bench_1", "type": "function",
     "function": {"name": "read_file", "arguments": '{"path": "src/app/config.py"}'}},
    {"id": "call_bench_2", "type": "function",
     "function": {"name": "run_tests", "arguments": '{"selector": "tests/unit"}'}},
]


def _completion(message: dict[str, Any], finish: str) -> bytes:
    return orjson.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()),
        "model": MODEL, "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "message": {**message, "refusal": None}, "logprobs": None,
                     "finish_reason": finish}],
        "usage": _USAGE,
    })


def _events(message: dict[str, Any], finish: str, usage: bool) -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": MODEL, "system_fingerprint": "fp_bench"}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                     "finish_reason": finish_reason}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        for index, call in enumerate(message["tool_calls"]):
            chunks.append(chunk({"tool_calls": [{
                "index": index, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            chunks.append(chunk({"tool_calls": [{
                "index": index, "function": {"arguments": call["function"]["arguments"]}}]}))
    else:
        words = message["content"].split(" ")
        for start in range(0, len(words), 4):
            chunks.append(chunk({"content": " ".join(words[start:start + 4]) + " "}))
    chunks.append(chunk({}, finish))
    if usage:
        chunks.append({**base, "choices": [], "usage": _USAGE})
    events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks]
    events.append(b"data: [DONE]\n\n")
    return _chunked(events)


def _chunked(events: list[bytes]) -> list[bytes]:
    """Server-sent events as chunked-encoding chunks, one per event, and the last chunk."""
    return [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]


def _wire_answers() -> dict[tuple[str, str], dict[str, Any]]:
    """(route, kind) -> the answer: the stub upstream's text answer, or `_TOOL_CALLS`."""
    response = stub_wire.response_object({"model": MODEL, "input": _TEXT})
    message = stub_wire.message_object(
        {"model": MODEL, "messages": [{"role": "user", "content": _TEXT}]})
    calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in _TOOL_CALLS]
    return {
        ("responses", "text"): response,
        ("responses", "tools"): {**response, "output": [
            {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": name,
             "arguments": arguments, "status": "completed"} for i, name, arguments in calls]},
        ("messages", "text"): message,
        ("messages", "tools"): {**message, "stop_reason": "tool_use", "content": [
            {"type": "tool_use", "id": f"toolu_{i}", "name": name,
             "input": orjson.loads(arguments)} for i, name, arguments in calls]},
    }


def _wire_kind(route: str, body: dict[str, Any]) -> str:
    """`tools` for a request with tools that ends with the user's words, else `text`."""
    if not body.get("tools"):
        return "text"
    items = body.get("input") if route == "responses" else body.get("messages")
    if not isinstance(items, list):
        return "tools"
    last = items[-1] if items else {}
    content = last.get("content")
    answered = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return "tools" if last.get("role") == "user" and not answered else "text"


def _head(status: bytes, content_type: bytes, length: int | None) -> bytes:
    framing = b"content-length: %d" % length if length is not None else (
        b"transfer-encoding: chunked")
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type
            + b"\r\nx-request-id: req-bench\r\n" + framing + b"\r\n\r\n")


class Answers:
    """Every response the stub can give, serialised once."""

    def __init__(self) -> None:
        text = {"role": "assistant", "content": _TEXT}
        tools = {"role": "assistant", "content": None, "tool_calls": _TOOL_CALLS}
        self.whole = {kind: _completion(m, f) for kind, m, f in
                      (("text", text, "stop"), ("tools", tools, "tool_calls"))}
        self.stream = {(kind, usage): _events(m, f, usage)
                       for kind, m, f in (("text", text, "stop"), ("tools", tools, "tool_calls"))
                       for usage in (False, True)}
        models = orjson.dumps({"object": "list", "data": [
            {"id": MODEL, "object": "model", "created": 1, "owned_by": "bench"}]})
        self.models = _head(b"200 OK", b"application/json", len(models)) + models
        self.wire_whole: dict[tuple[str, str], bytes] = {}
        self.wire_stream: dict[tuple[str, str], list[bytes]] = {}
        for (route, kind), answer in _wire_answers().items():
            data = orjson.dumps(answer)
            self.wire_whole[(route, kind)] = _head(b"200 OK", b"application/json",
                                                   len(data)) + data
            events = (stub_wire.response_events if route == "responses"
                      else stub_wire.message_events)(answer)
            self.wire_stream[(route, kind)] = _chunked(stub_wire.sse(events))
        missing = b'{"error": {"message": "no such route", "type": "invalid_request_error"}}'
        self.missing = _head(b"404 Not Found", b"application/json", len(missing)) + missing


class UpstreamProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests are answered in arrival order."""

    def __init__(self, answers: Answers) -> None:
        self._answers = answers
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            assert self._transport is not None
            self._transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._body = b"", []

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        transport, answers = self._transport, self._answers
        assert transport is not None
        method = self._parser.get_method()
        path = self._url.split(b"?", 1)[0]
        if method == b"POST" and path == b"/v1/chat/completions":
            self._chat(transport, b"".join(self._body))
        elif method == b"POST" and path in (b"/v1/responses", b"/v1/messages"):
            self._wire(transport, path.decode().rsplit("/", 1)[1], b"".join(self._body))
        elif method == b"GET" and path == b"/v1/models":
            transport.write(answers.models)
        else:
            transport.write(answers.missing)
        if not self._parser.should_keep_alive():
            transport.close()

    def _chat(self, transport: asyncio.Transport, raw: bytes) -> None:
        body = orjson.loads(raw)
        messages = body.get("messages") or [{}]
        kind = "tools" if body.get("tools") and messages[-1].get("role") == "user" else "text"
        if body.get("stream") is True:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            transport.write(_head(b"200 OK", b"text/event-stream", None))
            for event in self._answers.stream[(kind, usage)]:
                transport.write(event)  # one write per event, as a token stream would arrive
        else:
            data = self._answers.whole[kind]
            transport.write(_head(b"200 OK", b"application/json", len(data)) + data)


    def _wire(self, transport: asyncio.Transport, route: str, raw: bytes) -> None:
        body = orjson.loads(raw)
        key = (route, _wire_kind(route, body))
        if body.get("stream") is True:
            transport.write(_head(b"200 OK", b"text/event-stream", None))
            for event in self._answers.wire_stream[key]:
                transport.write(event)
        else:
            transport.write(self._answers.wire_whole[key])

async def serve(port: int, host: str = "127.0.0.1") -> None:
    loop = asyncio.get_running_loop()
    answers = Answers()
    server = await loop.create_server(lambda: UpstreamProtocol(answers), host, port,
                                      backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
