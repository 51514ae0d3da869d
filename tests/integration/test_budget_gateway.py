"""A budget header through the real gateway (issue 7 item 2): the forwarded call lands
between the budget minus 10 points of the call and the budget, and the drop log adds up."""

from __future__ import annotations

import json
import uuid
from typing import Any

import openai
import pytest

from gateway.observability.reconstruct import reconstruct
from tests.context.test_budget_text_results import LINK, _text_call
from tests.harness import Gateway, Upstream
from tests.integration.test_engine_gateway import TOOLS, client, long_session
from tests.openapi_oracle import validate


def call_size(gateway: Gateway, messages: list[dict[str, object]],
              tools: list[dict[str, object]]) -> int:
    """The call's size in tokens, as the gateway counts it (a budget it fits under)."""
    probe = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "1000000"})
    raw = probe.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=tools)  # type: ignore[arg-type]
    assert int(raw.headers["x-ctxgate-tokens-after"]) == int(raw.headers["x-ctxgate-tokens-before"])
    return int(raw.headers["x-ctxgate-tokens-before"])


def budgeted(gateway: Gateway, upstream: Upstream, messages: list[dict[str, object]],
             tools: list[dict[str, object]], budget: int) -> tuple[int, str, dict[str, Any]]:
    """A session's first call under `budget`: (tokens after, trace id, forwarded body)."""
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": str(budget)})
    upstream.clear()
    raw = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=tools)  # type: ignore[arg-type]
    forwarded = upstream.last_body()
    validate("CreateChatCompletionRequest", forwarded)
    return int(raw.headers["x-ctxgate-tokens-after"]), raw.headers["x-ctxgate-trace-id"], forwarded


def logged_drops(gateway: Gateway, trace_id: str) -> list[dict[str, Any]]:
    """The drop-log events of one call, read back from the log."""
    return next(c for c in reconstruct(gateway.drops()) if c.trace_id == trace_id).drops


def test_budget_header_cuts_just_enough(gateway: Gateway, upstream: Upstream) -> None:
    messages = long_session(turns=12)
    size = call_size(gateway, messages, TOOLS)  # fits: nothing cut
    budget = int(0.8 * size)
    after, trace_id, forwarded = budgeted(gateway, upstream, messages, TOOLS, budget)
    assert budget - 0.1 * size <= after <= budget
    answered = {m["tool_call_id"] for m in forwarded["messages"] if m["role"] == "tool"}
    called = {c["id"] for m in forwarded["messages"] for c in m.get("tool_calls") or ()}
    assert answered == called
    assert forwarded["messages"][1] == messages[1]  # the task survives a 20% cut
    drops = logged_drops(gateway, trace_id)
    assert sum(d["tokens_before"] - d["tokens_after"] for d in drops) == size - after


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
    size = call_size(gateway, messages, SQL_TOOLS)
    for share in (0.8, 0.6):
        budget = int(share * size)
        after, trace_id, forwarded = budgeted(gateway, upstream, messages, SQL_TOOLS, budget)
        assert budget - 0.1 * size <= after <= budget
        assert forwarded["messages"][-2:] == messages[-2:]  # the open exchange whole
        calls = [c for m in forwarded["messages"] for c in m.get("tool_calls") or ()]
        cut = [json.loads(c["function"]["arguments"]) for c in calls
               if "chars cut]" in c["function"]["arguments"]]
        assert cut and all(set(a) == {"query", "db"} for a in cut)
        drops = logged_drops(gateway, trace_id)
        assert sum(d["tokens_before"] - d["tokens_after"] for d in drops) == size - after
        assert any(d["kind"] == "tool_call" and d["tokens_after"] for d in drops)


def _scratchpad(steps: int, newest_lines: int = 40) -> list[dict[str, object]]:
    """A structured-chat agent's call: the system prompt and ONE user message holding the
    objective and every earlier step (`Thought:` / `Action:` / `Observation:`)."""
    def step(k: int, lines: int = 40) -> str:
        listing = "\n".join(f"{n} def handler_{k}_{n}(value): return value * {n}"
                            for n in range(1, lines + 1))
        return (f"Thought: I open module_{k}.py next.\nAction:\n```json\n"
                f'{{"action": "open_file", "action_input": {{"path": "module_{k}.py"}}}}\n```\n'
                f"Observation: The content of module_{k}.py is:\n{listing}\n")
    text = ("Objective: find where `parse_config_v2` reads `retry_limit`.\nAgent scratchpad:\n"
            + "".join(step(k) for k in range(steps - 1)) + step(steps - 1, newest_lines)
            + "Thought:")
    return [{"role": "system", "content": "Use a json blob to call open_file. Format:\n"
                                          "Thought: ...\nAction: ...\nObservation: ..."},
            {"role": "user", "content": text}]


def test_a_scratchpad_over_the_budget_is_cut_not_refused(
    gateway: Gateway, upstream: Upstream
) -> None:
    """The one user message is over the budget: its older steps are cut (the objective and
    the newest step sent as written), the call lands in the band, the log adds up; with no
    room for the objective and the newest step, the call is still refused."""
    messages = _scratchpad(6)
    size = call_size(gateway, messages, [])
    budget = int(0.7 * size)
    after, trace_id, forwarded = budgeted(gateway, upstream, messages, [], budget)
    assert budget - 0.1 * size <= after <= budget
    text, sent = str(messages[1]["content"]), forwarded["messages"][1]["content"]
    assert sent.startswith(text[:text.index("Thought:")])
    assert sent.endswith(text[text.rindex("Thought: I open module_5.py"):])
    drops = logged_drops(gateway, trace_id)
    assert sum(d["tokens_before"] - d["tokens_after"] for d in drops) == size - after
    huge = _scratchpad(3, newest_lines=400)
    api = client(gateway, uuid.uuid4().hex,
                 **{"x-ctxgate-budget-tokens": str(call_size(gateway, huge, []) // 2)})
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model="gpt-4o-mini", messages=huge)  # type: ignore[arg-type]
    assert caught.value.code == "context_budget_exceeded"


def test_a_text_tool_agents_first_call_keeps_its_turns_under_a_budget(
    gateway: Gateway, upstream: Upstream
) -> None:
    """An agent acting in `<code>` answered by `Observation:` user turns, every content a
    list of text parts (smolagents' shape): at 80% the large page it read last is digested
    before any older turn is dropped, the call lands in the band with every turn sent, the
    link its turn visited still named whole, and the log adds up."""
    messages: list[dict[str, object]] = [
        {**m, "content": [{"type": "text", "text": m["content"]}]} for m in _text_call()]
    size = call_size(gateway, messages, [])
    budget = int(0.8 * size)
    after, trace_id, forwarded = budgeted(gateway, upstream, messages, [], budget)
    assert budget - 0.1 * size <= after <= budget
    assert len(forwarded["messages"]) == len(messages)
    assert LINK in json.dumps(forwarded["messages"])
    drops = logged_drops(gateway, trace_id)
    assert sum(d["tokens_before"] - d["tokens_after"] for d in drops) == size - after
