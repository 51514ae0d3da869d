"""A scripted OpenAI-protocol upstream for the tests, run as its own process on loopback.

It records every request it receives (`GET /_requests`, `DELETE /_requests`) and answers
chat completions by model name:

- any model: a completion whose content echoes the last message's text;
- `stub-tools`: two parallel tool calls;
- `stub-slow`: a stream of 5 chunks 0.3 s apart; `stub-delay`: answers after 1 s;
- `stub-cut`: two chunks, then the connection is dropped;
- `stub-linger` (streams): the whole answer and `[DONE]`, then the stream stays open 3 s
  before it ends (a client may hang up once it has `[DONE]`);
- `stub-429` / `stub-500`: OpenAI-shaped errors with that status;
- `stub-stall`: nothing for 30 s (streams: one chunk, then nothing); cancellations of
  stalled requests are counted in `GET /_events`;
- scripted: `POST /_script {"model": m, "responses": [completion-or-{"content": s}, ...]}`
  queues answers for model `m` (the last one repeats); used for Reflector and Curator. An
  answer with `"delay_s": s` is sent after s seconds (a slow learner model);
- `GET /_calls`: when each model's chat calls arrived ({model: [unix time, ...]}), kept
  across `DELETE /_requests` (a learner test's account of which calls were made).

`POST /v1/responses` and Anthropic's `POST /v1/messages` (and `/v1/messages/count_tokens`)
are answered by `tests/stub_wire.py`, which refuses what those APIs refuse.

Run: `python -m tests.upstream_stub PORT`.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from typing import Any

import orjson
import uvicorn

from tests import stub_wire

Scope = dict[str, Any]


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.scripts: dict[str, list[Any]] = {}
        self.events: dict[str, int] = {"cancelled": 0}
        # When each model's chat calls arrived (wall clock), never cleared: `GET /_calls`.
        self.calls: dict[str, list[float]] = {}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path, method = scope["path"], scope["method"]
        if path.startswith("/_"):
            await self._control(method, path, body, send)
            return
        self.requests.append({
            "method": method, "path": path, "query": scope["query_string"].decode(),
            "headers": {k.decode(): v.decode() for k, v in scope["headers"]},
            "body_b64": base64.b64encode(body).decode(),
        })
        if path == "/v1/chat/completions" and method == "POST":
            await self._chat(orjson.loads(body), receive, send)
        elif path in ("/v1/responses", "/v1/messages") and method == "POST":
            await self._wire(path, orjson.loads(body), send)
        elif path == "/v1/messages/count_tokens":
            await _json(send, 200, {"input_tokens": len(body) // 4})
        elif path == "/v1/models":
            await _json(send, 200, {"object": "list", "data": [
                {"id": "gpt-4o-mini", "object": "model", "created": 1, "owned_by": "stub"}]})
        elif path == "/v1/embeddings":
            data = orjson.loads(body)
            inputs = data["input"] if isinstance(data["input"], list) else [data["input"]]
            await _json(send, 200, {"object": "list", "model": data["model"], "data": [
                {"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]}
                for i in range(len(inputs))], "usage": {"prompt_tokens": 1, "total_tokens": 1}})
        else:
            await _json(send, 200, {"method": method, "path": path,
                                    "body_b64": base64.b64encode(body).decode()})

    async def _wire(self, path: str, body: dict[str, Any], send: Any) -> None:
        responses = path == "/v1/responses"
        refusal = (stub_wire.responses_refusal if responses else stub_wire.messages_refusal)(body)
        if refusal is not None:
            await _json(send, *refusal)
            return
        answer = (stub_wire.response_object if responses else stub_wire.message_object)(body)
        if body.get("stream") is not True:
            await _json(send, 200, answer)
            return
        events = (stub_wire.response_events if responses else stub_wire.message_events)(answer)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream")]})
        for chunk in stub_wire.sse(events):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _control(self, method: str, path: str, body: bytes, send: Any) -> None:
        if path == "/_requests" and method == "DELETE":
            self.requests.clear()
            await _json(send, 200, {})
        elif path == "/_requests":
            await _json(send, 200, self.requests)
        elif path == "/_events":
            await _json(send, 200, self.events)
        elif path == "/_calls":
            await _json(send, 200, self.calls)
        elif path == "/_script":
            script = orjson.loads(body)
            self.scripts[script["model"]] = list(script["responses"])
            await _json(send, 200, {})
        else:
            await _json(send, 404, {"error": "no such control"})

    async def _chat(self, body: dict[str, Any], receive: Any, send: Any) -> None:
        model = body.get("model", "")
        self.calls.setdefault(model, []).append(time.time())
        stream = body.get("stream") is True
        if model in ("stub-429", "stub-500"):
            status = int(model[-3:])
            error = {"error": {"message": f"scripted {status}", "type": "requests",
                               "param": None, "code": "rate_limit_exceeded"
                               if status == 429 else "server_error"}}
            await _json(send, status, error, [(b"retry-after", b"1")])
            return
        if model == "stub-stall" and not stream:
            await self._stall(receive)
            return
        if model == "stub-delay":
            await asyncio.sleep(1.0)
        queue = self.scripts.get(model)
        if queue and queue[0].get("delay_s"):
            await asyncio.sleep(float(queue[0]["delay_s"]))
        message = self._answer(model, body)
        if stream:
            await self._stream(model, body, message, receive, send)
        else:
            await _json(send, 200, _completion(model, message), [(b"x-request-id", b"req-stub")])

    def _answer(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        queue = self.scripts.get(model)
        if queue:
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            if "choices" in answer:
                return dict(answer["choices"][0]["message"])
            return {"role": "assistant", "content": answer["content"]}
        if model == "stub-tools":
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_a1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "call_b2", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]}
        last = body["messages"][-1].get("content")
        text = last if isinstance(last, str) else orjson.dumps(last).decode()
        return {"role": "assistant", "content": f"echo: {text[:200]}"}

    async def _stall(self, receive: Any) -> None:
        try:
            async with asyncio.timeout(30):
                while (await receive())["type"] != "http.disconnect":
                    pass
        except TimeoutError:
            return
        self.events["cancelled"] += 1

    async def _stream(self, model: str, body: dict[str, Any], message: dict[str, Any],
                      receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"x-request-id", b"req-stub")]})
        for index, chunk in enumerate(_chunks(model, message)):
            await send({"type": "http.response.body", "body": _sse(chunk), "more_body": True})
            if model == "stub-slow":
                await asyncio.sleep(0.3)
            if model == "stub-cut" and index == 1:
                raise RuntimeError("scripted cut")  # uvicorn drops the connection
            if model == "stub-stall":
                await self._stall(receive)
                return
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {**_chunk_base(model), "choices": [], "usage": _USAGE}
            await send({"type": "http.response.body", "body": _sse(usage), "more_body": True})
        if model == "stub-linger":
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n",
                        "more_body": True})
            try:
                async with asyncio.timeout(3):
                    while (await receive())["type"] != "http.disconnect":
                        pass
                return  # the gateway hung up
            except TimeoutError:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n",
                    "more_body": False})


_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _completion(model: str, message: dict[str, Any]) -> dict[str, Any]:
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    message.setdefault("refusal", None)
    return {"id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()),
            "model": model, "system_fingerprint": "fp_stub",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": finish}], "usage": _USAGE}


def _chunk_base(model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model, "system_fingerprint": "fp_stub"}


def _chunks(model: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**_chunk_base(model), "choices": [
            {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        for index, call in enumerate(message["tool_calls"]):
            out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                              "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            out.append(chunk({"tool_calls": [{"index": index, "function": {
                "arguments": call["function"]["arguments"]}}]}))
        out.append(chunk({}, "tool_calls"))
        return out
    text = message.get("content") or ""
    pieces = [text[i:i + 8] for i in range(0, len(text), 8)] or [""]
    while len(pieces) < 4:
        pieces.append("")
    out += [chunk({"content": piece}) for piece in pieces]
    out.append(chunk({}, "stop"))
    return out


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def _json(send: Any, status: int, data: Any,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = orjson.dumps(data)
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    uvicorn.run(Stub(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
                loop="uvloop", http="httptools", access_log=False)
