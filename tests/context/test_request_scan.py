"""Whether a session's request is an agent's (tool history, `is_agent_request`) or a text-tool
agent's (`is_text_tool_request`) is read on from what its earlier calls read
(`classify.RequestScan`, kept with the session's prefix): a call reads only its new messages,
and answers as reading every message again does."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.context.classify import RequestScan
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import content_text, text_tool_result
from gateway.settings import Settings
from tests.context.sessions import memory_engine
from tests.context.test_text_tools import _human_chat, _prose_tool_session

RESULT = 'Result of search_class("Editor"):\n' + "class Editor:\n    pass\n" * 20


def _agent(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Every message read again (`is_agent_request` of a body without tools)."""
    return any(m.get("role") in ("tool", "function") or m.get("tool_calls") for m in messages)


def _text_tools(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Every message read again (`is_text_tool_request`)."""
    assistant = ""
    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            assistant = content_text(msg.get("content"))
        elif role == "user" and assistant and text_tool_result(
                assistant, content_text(msg.get("content"))):
            return True
    return False


class _Read(dict[str, Any]):
    """A message already read: reading it again fails the test."""

    def get(self, *_: Any) -> Any:
        raise AssertionError("an old message read again")


MESSAGES = st.sampled_from([
    {"role": "system", "content": "You are a developer."},
    {"role": "user", "content": "Fix the bug."},
    {"role": "user", "content": RESULT},
    {"role": "assistant", "content": 'I will look.\nsearch_class("Editor")'},
    {"role": "assistant", "content": "Done."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "function", "name": "f", "content": "ok"},
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(MESSAGES, max_size=5), st.sampled_from(["both", "agent",
                                                                        "text", "none"])),
                max_size=10))
def test_a_scan_read_on_answers_as_reading_every_message(
    calls: list[tuple[list[dict[str, Any]], str]],
) -> None:
    scan, messages = RequestScan(), []
    for added, asks in calls:
        messages += added
        if asks in ("both", "agent"):  # the messages it read before are not read again
            assert scan.agent_history(_old_read(messages, scan.count)) == _agent(messages)
            assert scan.count == len(messages)
        if asks in ("both", "text"):
            assert scan.text_tools(_old_read(messages, scan.text_count)) == _text_tools(messages)
            assert scan.text_count == len(messages)


def _old_read(messages: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return [_Read(m) for m in messages[:count]] + messages[count:]


def _call(session: str) -> CallContext:
    return CallContext("t1", f"tr-{session}", {"x-ctxgate-session-id": session,
                                               "x-ctxgate-task-class": "default"})


async def _both(cached: ContextEngine, plain: ContextEngine, bodies: list[list[dict[str, Any]]]
                ) -> int:
    """Each body fitted as one session by an engine with a prefix cache and by one without:
    the same body and drops from both; returns the calls whose scan read on from the last
    call's (taken over by the prefix, having read all of that call's messages)."""
    session = uuid.uuid4().hex
    entries = cached.prefixes._entries
    assert entries is not None
    last, read_on = None, 0
    for messages in bodies:
        fitted = await cached.fit({"messages": messages}, _call(session))
        again = await plain.fit({"messages": messages}, _call(session))
        assert (fitted.body, fitted.drops) == (again.body, again.drops), len(messages)
        prefix = entries.get(("t1", session))
        scan = prefix.scan if prefix is not None else None
        if scan is not None:
            assert scan.count == len(messages), len(messages)
            assert scan.agent or scan.text or scan.text_count == len(messages)
            read_on += last is not None and scan is last[0] and last[1] < len(messages)
            last = (scan, len(messages))
        else:
            last = None
    return read_on


async def test_text_tool_and_chat_sessions_fit_as_with_every_message_read(
    settings: Settings, embedder: Any
) -> None:
    cached = memory_engine(settings, embedder, True)
    plain = memory_engine(settings, embedder, False)
    for messages in (_prose_tool_session(14), _human_chat(14)):
        bodies = [messages[:end] for end in range(2, len(messages) + 1, 2)]
        assert await _both(cached, plain, bodies) >= 10


async def test_a_history_rewritten_to_carry_tool_calls_is_read_anew(
    settings: Settings, embedder: Any
) -> None:
    """A call whose older messages changed does not extend the prefix: its scan starts
    over, so an old turn that now carries a tool call makes it an agent's request (aged as
    the agent policy's, not as a text tool's)."""
    cached = memory_engine(settings, embedder, True)
    plain = memory_engine(settings, embedder, False)
    messages = _prose_tool_session(12)
    rewritten = [dict(m) for m in messages]
    rewritten[2]["tool_calls"] = [{"id": "c1", "type": "function",
                                   "function": {"name": "search_class", "arguments": "{}"}}]
    rewritten.insert(3, {"role": "tool", "tool_call_id": "c1", "content": "found"})
    bodies = [messages[:end] for end in range(2, len(messages) + 1, 2)]
    bodies += [rewritten[:end] for end in range(len(messages) - 1, len(rewritten) + 1, 2)]
    assert await _both(cached, plain, bodies) >= 8
