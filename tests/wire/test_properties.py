"""Property tests: random histories in each wire format, fitted at random budgets by the real
engine, come out as requests the real API accepts (the stub's refusal rules), with every
invariant of the format kept, or are refused loudly."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.context.engine import CallContext, ContextEngine
from gateway.errors import ContextBudgetExceeded
from gateway.wire.messages import OMITTED, Messages
from gateway.wire.responses import Responses, item_type
from gateway.wire.view import WireFormat
from tests.stub_wire import messages_refusal, responses_refusal, sign

TEXT = st.text(alphabet="abcdefghij klmnop/.:0123456789\n", min_size=1, max_size=600)
BUDGETS = st.integers(min_value=50, max_value=4000)
# A model of its own: counts of a model with no public tokenizer are corrected from the
# usage other tests' calls report (calibration.py), which would move the budget's units.
CLAUDE = f"claude-props-{uuid.uuid4().hex[:8]}"
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@st.composite
def responses_histories(draw: Any) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXT)}]
    for t in range(draw(st.integers(0, 7))):
        if draw(st.booleans()):
            thought = f"thought {t}"
            items.append({"type": "reasoning", "id": f"rs_{t}", "summary": [
                {"type": "summary_text", "text": thought}], "encrypted_content": sign(thought)})
        shape = draw(st.sampled_from(["calls", "custom", "message", "unknown"]))
        if shape == "calls":
            ids = [f"c{t}_{k}" for k in range(draw(st.integers(1, 2)))]
            items += [{"type": "function_call", "call_id": i, "name": "bash",
                       "arguments": "{}"} for i in ids]
            items += [{"type": "function_call_output", "call_id": i, "output": draw(TEXT)}
                      for i in ids]
        elif shape == "custom":
            items += [{"type": "custom_tool_call", "call_id": f"x{t}", "name": "patch",
                       "input": draw(TEXT)},
                      {"type": "custom_tool_call_output", "call_id": f"x{t}",
                       "output": draw(TEXT)}]
        elif shape == "message":
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": draw(TEXT), "annotations": []}]})
        else:
            items.append({"type": "web_search_call", "id": f"ws_{t}", "status": "completed",
                          "action": {"query": draw(TEXT)}})
        if draw(st.booleans()):
            items.append({"role": "user", "content": [
                {"type": "input_text", "text": draw(TEXT)}]})
    return {"model": "gpt-4.1", "instructions": draw(TEXT), "input": items}


@st.composite
def messages_histories(draw: Any) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(TEXT)}]
    for t in range(draw(st.integers(0, 7))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            thought = f"thinking {t}"
            blocks.append({"type": "thinking", "thinking": thought, "signature": sign(thought)})
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(TEXT)})
        uses = [f"tu_{t}_{k}" for k in range(draw(st.integers(0, 2)))]
        blocks += [{"type": "tool_use", "id": u, "name": "bash", "input": {"n": t}}
                   for u in uses]
        if draw(st.booleans()):
            blocks.append({"type": "future_block", "data": t})
        messages.append({"role": "assistant", "content": blocks or [
            {"type": "text", "text": draw(TEXT)}]})
        answer: list[dict[str, Any]] = [
            {"type": "tool_result", "tool_use_id": u, "content": draw(TEXT)} for u in uses]
        if not answer or draw(st.booleans()):
            answer.append({"type": "text", "text": draw(TEXT)})
        messages.append({"role": "user", "content": answer})
    system = [{"type": "text", "text": draw(TEXT), "cache_control": {"type": "ephemeral"}}]
    last = messages[-1]["content"]
    if isinstance(last, list):
        last[-1] = {**last[-1], "cache_control": {"type": "ephemeral"}}
    return {"model": CLAUDE, "max_tokens": 256, "system": system, "messages": messages}


async def _fit(engine: ContextEngine, wire: WireFormat, body: dict[str, Any],
               budget: int) -> dict[str, Any] | None:
    view = wire.view(body)
    call = CallContext("t-props", uuid.uuid4().hex, {"x-ctxgate-budget-tokens": str(budget),
                                                     "x-ctxgate-session-id": uuid.uuid4().hex})
    try:
        fitted = await engine.fit(view.body, call, compact=view.compact)
    except ContextBudgetExceeded:
        return None
    assert fitted.tokens_after <= budget or fitted.tokens_after == fitted.tokens_before
    return wire.render(body, view, fitted)


def _is_subsequence(sent: list[Any], original: list[Any], same: Any) -> bool:
    it = iter(original)
    return all(any(same(s, o) for o in it) for s in sent)


@PROPERTY
@given(body=responses_histories(), budget=BUDGETS)
async def test_responses_invariants_hold_at_any_budget(engine: ContextEngine,
                                                       body: dict[str, Any],
                                                       budget: int) -> None:
    out = await _fit(engine, Responses(), body, budget)
    if out is None:
        return
    assert responses_refusal(out) is None  # pairs, reasoning followers, signatures
    original, sent = body["input"], out["input"]

    def same_item(s: dict[str, Any], o: dict[str, Any]) -> bool:
        if s == o:
            return True  # as sent; otherwise only the text of a text-only item changed
        return item_type(s) == item_type(o) in ("message", "function_call_output",
                                                 "custom_tool_call_output") and \
            s.get("call_id") == o.get("call_id") and s.get("role") == o.get("role")

    assert _is_subsequence(sent, original, same_item)  # nothing reordered
    for index, item in enumerate(original):
        if item_type(item) in ("reasoning", "web_search_call", "function_call",
                               "custom_tool_call"):
            assert item in sent or all(s != item for s in sent)  # never edited
        if item_type(item) == "web_search_call":
            assert item in sent  # unknown items pinned
        if item_type(item) == "reasoning" and item in sent:
            follower = original[index + 1]
            assert any(same_item(s, follower) for s in sent[sent.index(item) + 1:][:1])
    assert out["instructions"].startswith(body["instructions"])
    assert sent[-1] == original[-1] or item_type(original[-1]) == "message"


@PROPERTY
@given(body=messages_histories(), budget=BUDGETS)
async def test_messages_invariants_hold_at_any_budget(engine: ContextEngine,
                                                      body: dict[str, Any],
                                                      budget: int) -> None:
    out = await _fit(engine, Messages(), body, budget)
    if out is None:
        return
    assert messages_refusal(out) is None  # tool pairs, signatures, <= 4 breakpoints
    original, sent = body["messages"], out["messages"]
    assert out["system"][0] == body["system"][0]
    blocks_sent = [orjson.dumps(b) for m in sent if isinstance(m["content"], list)
                   for b in m["content"]]
    for message in original:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block["type"] == "future_block":
                assert orjson.dumps(block) in blocks_sent  # pinned, byte-for-byte
    last_assistant = max((i for i, m in enumerate(original) if m["role"] == "assistant"),
                         default=None)
    if last_assistant is not None and any(
            b["type"] == "thinking" for b in original[last_assistant]["content"]):
        assert original[last_assistant] in sent  # signed thinking kept in the latest turn
    first = sent[0]  # the API wants a user message first: the task as sent or digested,
    assert first["role"] == "user"  # or, when the engine dropped it, the note
    assert first == original[0] or first["content"] == OMITTED or isinstance(
        first["content"], str) or all(b["type"] == "text" for b in first["content"])
    assert sent[-1] == original[-1]  # the latest turn, and the client's breakpoint on it
