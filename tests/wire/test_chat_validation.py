"""Structural checks of chat requests (pure); the HTTP side is in tests/proxy."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import InvalidRequest
from gateway.wire.chat import validate_chat_request


def body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **extra}


def test_valid_requests_pass_including_unknown_fields_and_parts() -> None:
    validate_chat_request(body(
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        future_field={"x": 1}, max_tokens=5, stream=False))


@pytest.mark.parametrize("bad,param", [
    (body(), "messages"),
    ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    (body({"role": "user"}), "messages[0]"),
    (body({"role": "user", "content": 5}), "messages[0]"),
    (body({"role": "tool", "tool_call_id": "z", "content": "r"}), "messages[0].tool_call_id"),
    (body({"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}),
     "messages[0]"),
    (body({"role": "user", "content": "x"}, max_tokens=True), "max_tokens"),
    (body({"role": "user", "content": "x"}, stream="yes"), "stream"),
])
def test_invalid_requests_name_the_parameter(bad: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        validate_chat_request(bad)
    assert caught.value.param == param
