"""A budget header through the real gateway (issue 7 item 2): the forwarded call lands
between the budget minus 10 points of the call and the budget, and the drop log adds up."""

from __future__ import annotations

import uuid

from gateway.observability.reconstruct import reconstruct
from tests.harness import Gateway, Upstream
from tests.integration.test_engine_gateway import TOOLS, client, long_session
from tests.openapi_oracle import validate


def test_budget_header_cuts_just_enough(gateway: Gateway, upstream: Upstream) -> None:
    messages = long_session(turns=12)
    probe = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "1000000"})
    raw = probe.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    size = int(raw.headers["x-ctxgate-tokens-before"])
    assert int(raw.headers["x-ctxgate-tokens-after"]) == size  # fits: nothing cut
    budget = int(0.8 * size)
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": str(budget)})
    upstream.clear()
    raw = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    after = int(raw.headers["x-ctxgate-tokens-after"])
    assert budget - 0.1 * size <= after <= budget
    forwarded = upstream.last_body()
    validate("CreateChatCompletionRequest", forwarded)
    answered = {m["tool_call_id"] for m in forwarded["messages"] if m["role"] == "tool"}
    called = {c["id"] for m in forwarded["messages"] for c in m.get("tool_calls") or ()}
    assert answered == called
    assert forwarded["messages"][1] == messages[1]  # the task survives a 20% cut
    trace_id = raw.headers["x-ctxgate-trace-id"]
    calls = [c for c in reconstruct(gateway.drops()) if c.trace_id == trace_id]
    assert sum(d["tokens_before"] - d["tokens_after"] for d in calls[0].drops) == size - after
