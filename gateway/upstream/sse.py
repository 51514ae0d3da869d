"""A pure, incremental server-sent-events decoder (no I/O), after openai-python's.

Feed it bytes as they arrive, in chunks of any size (a CR/LF pair may be split across
chunks); it yields the `data` of each complete event. Used to watch a relayed stream
without delaying it: the bytes themselves go to the client untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """Yield the data of every event completed by `chunk`."""
        self._buffer += chunk
        while True:
            line, sep, rest = self._split_line(self._buffer)
            if not sep:
                return
            self._buffer = rest
            if not line:  # a blank line ends the event
                if self._data:
                    yield b"\n".join(self._data)
                    self._data = []
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                self._data.append(value[1:] if value.startswith(b" ") else value)

    @staticmethod
    def _split_line(buffer: bytes) -> tuple[bytes, bytes, bytes]:
        """(line, separator, rest); an empty separator means no complete line yet."""
        lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
        if cr == -1 and lf == -1:
            return b"", b"", buffer
        if cr == -1 or (lf != -1 and lf < cr):
            return buffer[:lf], b"\n", buffer[lf + 1:]
        if cr + 1 == len(buffer):  # a lone \r at the end: its \n may come in the next chunk
            return b"", b"", buffer
        skip = 2 if buffer[cr + 1] == 0x0A else 1
        return buffer[:cr], buffer[cr:cr + skip], buffer[cr + skip:]

    def flush(self) -> Iterator[bytes]:
        """At the end of the stream: the data of an unterminated last event, if any."""
        tail = list(self.feed(b"\n\n")) if self._buffer or self._data else []
        yield from tail


@dataclass
class ChatStreamCollector:
    """Rebuilds a chat completion (content, tool calls, finish, usage) from stream chunks."""

    content: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def add(self, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        if isinstance(chunk.get("error"), dict):
            self.error = chunk["error"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            self._add_delta(choice.get("delta") or {})

    def _add_delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        for call in delta.get("tool_calls") or ():
            slot = self.tool_calls.setdefault(
                call.get("index", 0), {"id": None, "type": "function",
                                       "function": {"name": "", "arguments": ""}})
            if call.get("id"):
                slot["id"] = call["id"]
            function = call.get("function") or {}
            slot["function"]["name"] += function.get("name") or ""
            slot["function"]["arguments"] += function.get("arguments") or ""

    def response(self) -> dict[str, Any]:
        return {
            "content": "".join(self.content) if self.content else None,
            "tool_calls": [self.tool_calls[i] for i in sorted(self.tool_calls)],
            "finish_reason": self.finish_reason,
            "usage": self.usage,
        }


def response_of_completion(completion: dict[str, Any]) -> dict[str, Any]:
    """The same summary as ChatStreamCollector.response(), from a non-streamed completion."""
    choices = completion.get("choices") or [{}]
    first = choices[0] if isinstance(choices[0], dict) else {}
    message = first.get("message") or {}
    return {
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls") or [],
        "finish_reason": first.get("finish_reason"),
        "usage": completion.get("usage"),
    }
