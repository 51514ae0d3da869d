"""A budget header through the real gateway (issue 7 item 2): the forwarded call lands
between the budget minus 10 points of the call and the budget, and the drop log adds up."""

from __future__ import annotations

import json
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


SQL_TOOLS = [{"type": "function", "function": {"name": "sql", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "db": {"type": "string"}}}}}]


def test_budget_cuts_old_tool_call_arguments_just_enough(
    gateway: Gateway, upstream: Upstream
) -> None:
    """Exchanges that are mostly tool-call arguments (intercode's queries): under 80% and
    60% budgets the old exchanges' arguments are cut (still JSON objects with their keys),
    the open exchange's stay whole, the call lands in the band and the log adds up."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You answer with SQL run by the sql tool."},
        {"role": "user", "content": "Which customers ordered more than twice in 2021?"},
    ]
    for t in range(3):
        cols = ", ".join(f"orders_{t}.col_{k} AS c{t}_{k}" for k in range(40))
        query = f"SELECT {cols} FROM orders_{t} JOIN customers ON id = cust_{t} WHERE n > {t}"
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"q{t}", "type": "function",
                "function": {"name": "sql", "arguments": json.dumps({"query": query, "db": "s"})},
            }]},
            {"role": "tool", "tool_call_id": f"q{t}", "content": f"{t} rows"},
        ]
    probe = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "1000000"})
    raw = probe.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=SQL_TOOLS)  # type: ignore[arg-type]
    size = int(raw.headers["x-ctxgate-tokens-before"])
    for share in (0.8, 0.6):
        budget = int(share * size)
        api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": str(budget)})
        upstream.clear()
        raw = api.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=messages, tools=SQL_TOOLS)  # type: ignore[arg-type]
        after = int(raw.headers["x-ctxgate-tokens-after"])
        assert budget - 0.1 * size <= after <= budget
        forwarded = upstream.last_body()
        validate("CreateChatCompletionRequest", forwarded)
        assert forwarded["messages"][-2:] == messages[-2:]  # the open exchange whole
        calls = [c for m in forwarded["messages"] for c in m.get("tool_calls") or ()]
        cut = [json.loads(c["function"]["arguments"]) for c in calls
               if "chars cut]" in c["function"]["arguments"]]
        assert cut and all(set(a) == {"query", "db"} for a in cut)
        trace_id = raw.headers["x-ctxgate-trace-id"]
        logged = [c for c in reconstruct(gateway.drops()) if c.trace_id == trace_id]
        assert sum(d["tokens_before"] - d["tokens_after"] for d in logged[0].drops) == (
            size - after)
        assert any(d["kind"] == "tool_call" and d["tokens_after"] for d in logged[0].drops)
