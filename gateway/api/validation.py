"""Cheap structural checks of a Chat Completions request, before anything acts on it.

Only what the gateway relies on is checked (the upstream validates the rest): `messages`
is a non-empty list of objects with a legal role, and every `tool` message answers a tool
call of an earlier assistant message. Unknown fields are never rejected.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequest

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def validate_chat_request(body: dict[str, Any]) -> None:
    """Raise InvalidRequest (naming the parameter) if the gateway cannot handle `body`."""
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
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where} must be an object.", param=where)
        role = message.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"{where}.role must be one of {sorted(ROLES)}.", param=where)
        _check_content(message, role, where)
        if role == "assistant":
            open_calls.update(_tool_call_ids(message, where))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or call_id not in open_calls:
                raise InvalidRequest(
                    f"{where} is a 'tool' message whose tool_call_id {call_id!r} answers no "
                    "tool call of an earlier assistant message.",
                    param=f"{where}.tool_call_id",
                )


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
