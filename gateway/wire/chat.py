"""OpenAI Chat Completions (`POST /v1/chat/completions`): the engine's own shape.

The request already is what the engine fits, so its view is the request itself (message k
stands for message k) and the request to forward is the engine's own rendering. What is
left for this adapter is the chat-specific part of the route: the structural checks made
before anything acts on a request, and the summary of the answer, whole or streamed.

Validation checks only what the gateway relies on (the upstream validates the rest):
`messages` is a non-empty list of objects with a legal role, and every `tool` message
answers a tool call of an earlier assistant message. Unknown fields are never rejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from gateway.errors import InvalidRequest
from gateway.wire.view import ChatView

if TYPE_CHECKING:
    from gateway.context.engine import FittedCall

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def validate_chat_request(body: Mapping[str, Any]) -> None:
    """Raise InvalidRequest (naming the parameter) if the gateway cannot handle `body`."""
    check_chat_request(body)


def check_chat_request(body: Mapping[str, Any], start: int = 0,
                       calls: frozenset[str] = frozenset()) -> frozenset[str]:
    """`validate_chat_request` of a body whose first `start` messages passed it before (in
    an earlier call's body that this one continues: `gateway/api/bodies.py`), `calls` being
    the tool call ids they opened: only the rest is walked, and the same error is raised
    as by the whole walk. Returns the tool call ids of all its messages, from which a later
    body continuing this one is checked."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    if not isinstance(body.get("model"), str):
        raise InvalidRequest("'model' must be a string.", param="model")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidRequest(f"'{key}' must be an integer.", param=key)
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise InvalidRequest("'stream' must be a boolean.", param="stream")
    open_calls: set[str] = set()  # opened from `start` on; `calls` before it
    for index in range(start, len(messages)):
        message = messages[index]
        # The common message (a dict, a known role, string content, no tool calls) is
        # checked in a few type tests: a long session's call has hundreds of them.
        if type(message) is not dict:
            raise InvalidRequest(f"messages[{index}] must be an object.",
                                 param=f"messages[{index}]")
        role = message.get("role")
        if type(message.get("content")) is not str or role not in ROLES:
            _check_message(message, role, f"messages[{index}]")
        if role == "assistant":
            if message.get("tool_calls") is not None:
                open_calls.update(_tool_call_ids(message, f"messages[{index}]"))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or (call_id not in open_calls
                                                and call_id not in calls):
                where = f"messages[{index}]"
                raise InvalidRequest(
                    f"{where} is a 'tool' message whose tool_call_id {call_id!r} answers no "
                    "tool call of an earlier assistant message.",
                    param=f"{where}.tool_call_id",
                )
    return calls | open_calls if open_calls else calls


def _check_message(message: dict[str, Any], role: Any, where: str) -> None:
    if role not in ROLES:
        raise InvalidRequest(f"{where}.role must be one of {sorted(ROLES)}.", param=where)
    _check_content(message, role, where)


def _check_content(message: dict[str, Any], role: str, where: str) -> None:
    content = message.get("content")
    if content is None:
        if role in ("assistant", "function"):
            return
        raise InvalidRequest(f"{where}.content is required for role '{role}'.", param=where)
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise InvalidRequest(
            f"{where}.content must be a string or an array of content parts.", param=where
        )


def _tool_call_ids(message: dict[str, Any], where: str) -> list[str]:
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise InvalidRequest(f"{where}.tool_calls must be an array.", param=where)
    ids = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("id"), str):
            raise InvalidRequest(f"{where}.tool_calls entries need a string 'id'.", param=where)
        ids.append(call["id"])
    return ids


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


def response_of_completion(completion: Mapping[str, Any]) -> dict[str, Any]:
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


class ChatCompletions:
    """The Chat Completions wire format: the identity view."""

    name = "/v1/chat/completions"
    upstream_path = "chat/completions"
    items = "messages"  # the member a session's later bodies extend (`gateway/api/bodies.py`)
    last_events: tuple[bytes, ...] = (b"data: [DONE]",)

    def validate(self, body: Mapping[str, Any]) -> None:
        validate_chat_request(body)

    def validate_from(self, body: Mapping[str, Any], start: int, state: Any) -> Any:
        return check_chat_request(body, start, state or frozenset())

    def view(self, body: dict[str, Any]) -> ChatView:
        return ChatView(body, range(len(body["messages"])))

    def render(self, body: dict[str, Any], view: ChatView,
               fitted: FittedCall) -> dict[str, Any]:
        return fitted.body  # the engine rendered the chat messages and placed the block

    def summary(self, answer: Mapping[str, Any]) -> dict[str, Any]:
        return response_of_completion(answer)

    def stream_summary(self) -> ChatStreamCollector:
        return ChatStreamCollector()
