"""Old finished exchanges folded (gateway/context/fold.py) through the real gateway, in each
wire format: a support agent's long ticket queue sent call by call with the official SDKs
(`openai` for Chat Completions and Responses, `anthropic` for Messages) to the scripted
upstream, which refuses what those APIs refuse (a result with no call, a call with no
result). The last forwarded body has old exchanges folded into notes, every remaining call
paired, roles valid, the values kept; a short queue goes through unfolded."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import anthropic
import openai
import pytest

from bench.wire_convert import to_messages, to_responses
from gateway.context.fold import FOLD_HEAD
from gateway.wire.messages import build_view as messages_view
from gateway.wire.responses import build_view as responses_view
from tests.context.test_fold import TOOLS, TURNS_MARK, check_structure, support_queue
from tests.harness import Gateway, Upstream

KEY = "sk-test-fold-0000000000000"
MODEL = "gpt-4o"


def _calls(tickets: int) -> list[dict[str, Any]]:
    """The queue's calls: each prefix ending right before an assistant turn."""
    messages = support_queue(tickets)
    return [{"model": MODEL, "messages": messages[:end], "tools": TOOLS}
            for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]


def _chat(gateway: Gateway, upstream: Upstream, calls: list[dict[str, Any]], session: str
          ) -> list[dict[str, Any]]:
    api = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0,
                        default_headers={"x-ctxgate-session-id": session})
    for body in calls:
        api.chat.completions.create(model=MODEL, messages=body["messages"],
                                    tools=body["tools"])
    messages: list[dict[str, Any]] = upstream.last_body()["messages"]
    return messages


def _responses(gateway: Gateway, upstream: Upstream, calls: list[dict[str, Any]],
               session: str) -> list[dict[str, Any]]:
    api = openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0,
                        default_headers={"x-ctxgate-session-id": session})
    for body in calls:
        sent = to_responses(body)
        api.responses.create(model=MODEL, input=sent["input"], tools=sent["tools"],
                             instructions=sent["instructions"])
    forwarded = upstream.last_body()
    items = forwarded["input"]
    for k, item in enumerate(items):  # every output answers a call before it, and back
        if item.get("type") == "function_call_output":
            assert any(c.get("type") == "function_call" and c["call_id"] == item["call_id"]
                       for c in items[:k])
        if item.get("type") == "function_call":
            assert any(o.get("type") == "function_call_output"
                       and o["call_id"] == item["call_id"] for o in items[k:])
    return [m for m in responses_view(forwarded).body["messages"] if m["role"] != "system"]


def _messages(gateway: Gateway, upstream: Upstream, calls: list[dict[str, Any]],
              session: str) -> list[dict[str, Any]]:
    api = anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0,
                              default_headers={"x-ctxgate-session-id": session})
    for body in calls:
        sent = to_messages(body)
        api.messages.create(model=MODEL, max_tokens=256, system=sent["system"],
                            tools=sent["tools"], messages=sent["messages"])
    forwarded = upstream.last_body()
    wire = forwarded["messages"]
    roles = [m["role"] for m in wire]
    assert roles[0] == "user" and all(a != b for a, b in pairwise(roles))
    assert all(m["content"] for m in wire)  # no user message left empty
    return [m for m in messages_view(forwarded).body["messages"] if m["role"] != "system"]


SEND: dict[str, Callable[[Gateway, Upstream, list[dict[str, Any]], str],
                         list[dict[str, Any]]]] = {
    "chat": _chat, "responses": _responses, "messages": _messages}


@pytest.mark.parametrize("wire", ["chat", "responses", "messages"])
def test_a_long_queue_goes_out_with_old_exchanges_folded(
        gateway: Gateway, upstream: Upstream, wire: str) -> None:
    sent = SEND[wire](gateway, upstream, _calls(36), f"fold-long-{wire}-{uuid.uuid4().hex}")
    check_structure(sent)
    # the old turns go as notes (fold_turns, one a block of client messages), the exchanges
    # folded in them as their fold's call lines without each run's header; the last folded
    # turn's reply stays after each
    notes = [m["content"] for m in sent if m["role"] == "user" and TURNS_MARK in m["content"]]
    assert len(notes) >= 2, wire
    assert all(n.startswith("[ctxgate: ") and FOLD_HEAD not in n for n in notes)
    note = "\n".join(notes)
    folded = [int(n) for n in re.findall(r"\nget_reservation\(RES(\d{3})X", note)]
    assert len(folded) >= 20, wire
    for k in folded:  # the folded lookups' values stay; of the replies, their values
        assert f"\nget_reservation(RES{k:03d}X, cust_{k:03d}_4411) → " in note
    assert "is confirmed." not in note
    assert sum(1 for m in sent if m["role"] == "tool") <= 36 - len(folded)
    for at in (i for i, m in enumerate(sent) if m["content"] in notes):
        assert sent[at + 1]["role"] == "assistant" and not sent[at + 1].get("tool_calls")


@pytest.mark.parametrize("wire", ["chat", "messages"])
def test_a_short_queue_goes_out_unfolded(
        gateway: Gateway, upstream: Upstream, wire: str) -> None:
    sent = SEND[wire](gateway, upstream, _calls(12), f"fold-short-{wire}-{uuid.uuid4().hex}")
    check_structure(sent)
    assert not any(FOLD_HEAD in str(m.get("content")) for m in sent)
    assert sum(1 for m in sent if m["role"] == "tool") == 12
