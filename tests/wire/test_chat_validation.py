"""Structural checks of chat requests (pure); the HTTP side is in tests/proxy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _oracle(messages: list[Any]) -> tuple[str, str | None] | None:
    """The message checks as the API states them, one message after another, plainly."""
    open_calls: set[Any] = set()
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            return "object", where
        role, content = message.get("role"), message.get("content")
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            return "role", where
        if content is None and role not in ("assistant", "function"):
            return "content", where
        if content is not None and not isinstance(content, str) and not (
                isinstance(content, list) and all(isinstance(p, dict) for p in content)):
            return "content", where
        calls = message.get("tool_calls") if role == "assistant" else None
        if calls is not None and not isinstance(calls, list):
            return "tool_calls", where
        for call in calls or ():
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                return "tool_calls", where
            open_calls.add(call["id"])
        if role == "tool" and message.get("tool_call_id") not in open_calls:
            return "tool_call_id", f"{where}.tool_call_id"
    return None


VALUE = st.none() | st.integers(0, 2) | st.sampled_from(["a", "b", "user", ""])
MESSAGE = st.one_of(
    VALUE,
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "tool", "system", "function", "x"])},
        optional={"content": VALUE | st.lists(st.just({"type": "text"}) | VALUE, max_size=2),
                  "tool_calls": VALUE | st.lists(st.fixed_dictionaries(
                      {}, optional={"id": VALUE}) | VALUE, max_size=2),
                  "tool_call_id": VALUE}))


@settings(max_examples=500, deadline=None)
@given(st.lists(MESSAGE, min_size=1, max_size=6))
def test_messages_are_refused_where_and_only_where_the_plain_checks_refuse(
        messages: list[Any]) -> None:
    expected = _oracle(messages)
    try:
        validate_chat_request({"model": "m", "messages": messages})
    except InvalidRequest as error:
        assert expected is not None and error.param == expected[1], (error.message, expected)
        assert expected[0] in error.message or expected[0] in ("object", "content")
    else:
        assert expected is None
