"""Tool-call ids sent short (gateway/context/call_ids.py): a managed call sends every
client id longer than 9 characters as a 9-character id derived from it, on both sides of
each pair, in every wire format; a session's forwarded prefix never changes for it; the
drop log still adds up (ids are no tokens the engine counts)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

from bench.wire_convert import CONVERTERS
from gateway.context.call_ids import SHORT_ID_CHARS, short_id
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import WIRE_FORMATS, fit_as
from gateway.wire.messages import Messages
from tests.context.sessions import drops_add_up

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("get_reservation_details", "search_direct_flight", "calculate")]
QUERY = ("SELECT flight_number, origin, destination FROM flights WHERE origin = 'JFK' "
         "AND destination = 'SEA' AND date = '2024-05-20' ORDER BY price")


def _call(session: str) -> CallContext:
    return CallContext("t-ids", uuid.uuid4().hex, {"x-ctxgate-session-id": session})


def _openai_id(seed: str) -> str:
    """An id shaped as OpenAI's (`call_` and 24 characters), fixed per seed."""
    return "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]


def _support_session(tickets: int) -> list[dict[str, Any]]:
    """A support agent's queue as tau-bench records it: a customer turn, a lookup with its
    result, the agent's answer; a repeated search now and then."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an airline agent. Follow the policy."},
        {"role": "user", "content": "Hi, I want to change my flight."},
    ]
    for k in range(tickets):
        messages.append({"role": "user", "content": f"My reservation is R{k:05d}, thanks."})
        for j, (name, args) in enumerate((
            ("get_reservation_details", {"reservation_id": f"R{k:05d}"}),
            ("search_direct_flight", {"query": QUERY}),
        )):
            cid = _openai_id(f"{k}-{j}")
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args)}}]})
            messages.append({"role": "tool", "tool_call_id": cid, "content": "\n".join(
                f"flight HAT{k:03d}{i} JFK-SEA 2024-05-{10 + i} seat {i}A price {100 + i}"
                for i in range(8))})
        messages.append({"role": "assistant", "content": f"R{k:05d} is now on HAT{k:03d}1."})
    return messages


def _chat_pairs(messages: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """The ids of the calls and, in order, the call id each tool message answers; asserts
    each answers a call made before it."""
    calls: list[str] = []
    answers: list[str] = []
    for m in messages:
        for c in m.get("tool_calls") or ():
            calls.append(c["id"])
        if m.get("role") == "tool":
            assert m["tool_call_id"] in calls, m["tool_call_id"]
            answers.append(m["tool_call_id"])
    return calls, answers


def _responses_pairs(items: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    calls: list[str] = []
    answers: list[str] = []
    for item in items:
        if item.get("type") == "function_call":
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            assert item["call_id"] in calls, item["call_id"]
            answers.append(item["call_id"])
    return calls, answers


def _messages_pairs(messages: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """Anthropic: every tool_result answers a tool_use of the assistant message right
    before its user message."""
    calls: list[str] = []
    answers: list[str] = []
    previous: list[str] = []
    for m in messages:
        blocks = m["content"] if isinstance(m["content"], list) else []
        if m["role"] == "assistant":
            previous = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            calls += previous
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                assert b["tool_use_id"] in previous, b["tool_use_id"]
                answers.append(b["tool_use_id"])
    return calls, answers


PAIRS = {"chat": lambda body: _chat_pairs(body["messages"]),
         "responses": lambda body: _responses_pairs(body["input"]),
         "messages": lambda body: _messages_pairs(body["messages"])}


async def test_every_wire_format_sends_short_ids_that_still_pair(
    engine: ContextEngine,
) -> None:
    messages = _support_session(8)
    originals = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 2]
    sent_ids: dict[str, list[str]] = {}
    for fmt in ("chat", "responses", "messages"):
        session = uuid.uuid4().hex
        for end in ends:
            body = {"messages": messages[:end], "tools": TOOLS}
            wire_body = CONVERTERS[fmt](body) if fmt != "chat" else body
            fitted, out = await fit_as(engine, WIRE_FORMATS[fmt], wire_body, _call(session))
            has_calls = any(m.get("tool_calls") for m in body["messages"])
            assert fitted.short_ids is has_calls
            assert drops_add_up(fitted)
            calls, answers = PAIRS[fmt](out)  # every result answers a call sent before it
            assert all(len(c) <= SHORT_ID_CHARS for c in calls)
            assert len(set(calls)) == len(calls)
            # each call of the session sends a call's id alike: a function of the client's
            assert calls == [short_id(c) for c in originals[: len(calls)]]
            assert len(calls) == sum(len(m.get("tool_calls") or ()) for m in body["messages"])
        sent_ids[fmt] = calls
        assert answers == [c for c in calls if c in answers]  # each call's result follows it
    # the same id for the same call in every format, none the client's
    assert sent_ids["chat"] == sent_ids["responses"] == sent_ids["messages"]
    assert not set(sent_ids["chat"]) & set(originals)


async def test_a_repeated_call_points_at_the_earlier_call_by_the_id_it_is_sent_with(
    engine: ContextEngine,
) -> None:
    messages = _support_session(2)
    fitted = await engine.fit({"messages": messages, "tools": TOOLS}, _call(uuid.uuid4().hex))
    sent = fitted.body["messages"]
    ids = [c["id"] for m in sent for c in m.get("tool_calls") or ()]
    pointers = [c["function"]["arguments"] for m in sent for c in m.get("tool_calls") or ()
                if "same as call" in c["function"]["arguments"]]
    assert pointers, "the second search repeats the first"
    first = ids[1]  # the first search: its id as sent
    assert len(first) <= SHORT_ID_CHARS
    assert all(f"[ctxgate: same as call {first}]" in p for p in pointers)


async def test_anthropic_calls_beside_signed_thinking_keep_their_ids(
    engine: ContextEngine,
) -> None:
    """The latest assistant message with thinking goes out as sent (pinned): its tool_use
    ids, and the results answering them, stay the client's; older calls go short."""
    old, new = "toolu_01" + "A" * 22, "toolu_01" + "B" * 22
    body = {"model": "claude", "system": "You are an airline agent.", "max_tokens": 512,
            "tools": [{"name": "calculate", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "What is 2 + 3, then times 7?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": old, "name": "calculate",
                     "input": {"expression": "2 + 3"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": old, "content": "5"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Now times 7.", "signature": "sig"},
                    {"type": "tool_use", "id": new, "name": "calculate",
                     "input": {"expression": "5 * 7"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": new, "content": "35"}]},
            ]}
    fitted, out = await fit_as(engine, Messages(), body, _call(uuid.uuid4().hex))
    assert fitted.short_ids
    calls, answers = _messages_pairs(out["messages"])
    assert calls == answers == [short_id(old), new]
    assert out["messages"][3] == body["messages"][3]  # the signed turn as sent


def test_a_step_that_leaves_messages_out_renames_none_of_the_others_again() -> None:
    """`ShortIds.rename` after a step that left messages out (the later ones moved up): each
    message renamed before is sent as the very copy made then, wherever it now stands, and
    the list is the one renaming every message afresh gives."""
    from operator import is_

    from gateway.context.call_ids import ShortIds, renamed

    messages: list[dict[str, Any]] = []
    for k in range(6):
        cid = f"call_{k:024d}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": f"result {k}"})
    memo = ShortIds()
    first = memo.rename(messages)
    step = messages[:2] + messages[4:] + [{"role": "user", "content": "next"}]
    out = memo.rename(step)
    assert out == [renamed(m) for m in step]
    assert all(map(is_, out[:2], first[:2])) and all(map(is_, out[2:-1], first[4:]))
