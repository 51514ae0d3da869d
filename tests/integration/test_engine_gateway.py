"""The context engine inside the real gateway: budgets, drops, headers, sessions, corpus."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.context.replay import load_calls
from gateway.observability.reconstruct import reconstruct
from tests.harness import Gateway, Upstream
from tests.openapi_oracle import validate

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpora" / "swe-agent"
KEY = "sk-test-engine-0000000000"
DROP_FIELDS = {"stage", "action", "reason", "item_id", "kind", "message_index",
               "tokens_before", "tokens_after", "kept_as", "preview", "step"}


def client(gateway: Gateway, session: str, **headers: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0,
                         default_headers={"x-ctxgate-session-id": session, **headers})


def long_session(turns: int, tool_output_lines: int = 60) -> list[dict[str, Any]]:
    """A tool-using agent session with bulky, log-like tool output."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an autonomous programmer working in a repo."},
        {"role": "user", "content": "Fix the failing test in tests/test_parser.py."}]
    for turn in range(turns):
        call_id = f"call_{turn:03d}"
        messages.append({"role": "assistant", "content": f"Step {turn}: run the tests.",
                         "tool_calls": [{"id": call_id, "type": "function", "function": {
                             "name": "bash", "arguments": f'{{"cmd": "pytest -k case_{turn}"}}'}}]})
        lines = [f"tests/test_parser.py::test_case_{turn}_{i} PASSED [{i}%] module_{i}.py"
                 for i in range(tool_output_lines)]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)})
    messages.append({"role": "user", "content": "Now fix parser.py line 88 and rerun."})
    return messages


TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]


def test_over_budget_pinned_content_is_refused_loudly(gateway: Gateway) -> None:
    before = gateway.metric("ctxgate_budget_exceeded_total")
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "20"})
    with pytest.raises(openai.BadRequestError) as caught:
        api.chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "system", "content": "You are a careful assistant. " * 20},
            {"role": "user", "content": "Summarise the plan."}])
    assert caught.value.code == "context_budget_exceeded"
    message = str(caught.value.message)
    assert "needs" in message and "allows 20" in message
    assert gateway.metric("ctxgate_budget_exceeded_total") == before + 1


def test_long_session_is_fitted_with_every_drop_logged(gateway: Gateway,
                                                       upstream: Upstream) -> None:
    session = uuid.uuid4().hex
    api = client(gateway, session, **{"x-ctxgate-budget-tokens": "3000"})
    messages = long_session(turns=12)
    upstream.clear()
    raw = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    before = int(raw.headers["x-ctxgate-tokens-before"])
    after = int(raw.headers["x-ctxgate-tokens-after"])
    assert before > 6000 and after <= 3000
    forwarded = upstream.last_body()
    validate("CreateChatCompletionRequest", forwarded)
    assert forwarded["messages"][0] == messages[0]  # pinned: byte-identical
    assert forwarded["messages"][-1] == messages[-1]
    answered = {m["tool_call_id"] for m in forwarded["messages"] if m["role"] == "tool"}
    called = {c["id"] for m in forwarded["messages"] for c in m.get("tool_calls") or ()}
    assert answered == called  # tool calls and results still paired
    trace_id = raw.headers["x-ctxgate-trace-id"]
    calls = [c for c in reconstruct(gateway.drops()) if c.trace_id == trace_id]
    drops = calls[0].drops
    assert len(drops) == int(raw.headers["x-ctxgate-dropped-items"]) > 0
    assert all(set(d) == DROP_FIELDS for d in drops)
    assert sum(d["tokens_before"] - d["tokens_after"] for d in drops) == before - after
    assert calls[0].call["session_id"] == session


def test_streaming_carries_the_engine_headers(gateway: Gateway) -> None:
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "3000"})
    raw = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=long_session(turns=10), tools=TOOLS, stream=True)  # type: ignore[arg-type]
    assert int(raw.headers["x-ctxgate-tokens-after"]) <= 3000
    assert int(raw.headers["x-ctxgate-tokens-before"]) > int(raw.headers["x-ctxgate-tokens-after"])
    assert "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)


def test_task_class_header_and_session_stickiness(gateway: Gateway) -> None:
    session = uuid.uuid4().hex
    first = client(gateway, session, **{"x-ctxgate-task-class": "data_sql"})
    raw = first.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}])
    assert raw.headers["x-ctxgate-task-class"] == "data_sql"
    later = client(gateway, session).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"},
                                       {"role": "assistant", "content": "hi"},
                                       {"role": "user", "content": "and now?"}])
    assert later.headers["x-ctxgate-task-class"] == "data_sql"


def test_tool_names_classify_a_coding_agent(gateway: Gateway) -> None:
    raw = client(gateway, uuid.uuid4().hex).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "go"}], tools=TOOLS)  # type: ignore[arg-type]
    assert raw.headers["x-ctxgate-task-class"] == "coding_agent"


@pytest.mark.skipif(not CORPUS.exists(), reason="../shared/corpora/swe-agent is absent")
def test_recorded_swe_agent_session_through_the_gateway(gateway: Gateway,
                                                        upstream: Upstream) -> None:
    path = CORPUS / ("replay__marshmallow-code__marshmallow-1867__function_calling__"
                     "install-1__marshmallow-code__marshmallow-1867.traj")
    calls = load_calls(path, model="gpt-4o")
    session = uuid.uuid4().hex
    stable_before = gateway.metric("ctxgate_prefix_stable_total")
    results = []
    for body in calls:
        response = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30,
                              headers={"authorization": f"Bearer {KEY}",
                                       "x-ctxgate-session-id": session})
        assert response.status_code == 200, response.text
        results.append((int(response.headers["x-ctxgate-tokens-before"]),
                        int(response.headers["x-ctxgate-tokens-after"])))
        validate("CreateChatCompletionRequest", upstream.last_body())
    assert all(after <= before for before, after in results)
    late = results[len(results) * 2 // 3:]
    saved = 1 - sum(a for _, a in late) / sum(b for b, _ in late)
    assert saved > 0.3, results  # replay of the same file: 40% (bench/README.md)
    assert gateway.metric("ctxgate_prefix_stable_total") >= stable_before + len(calls) - 1


def test_sessions_of_one_agent_share_its_class(gateway: Gateway) -> None:
    """The first session starts with a short call (nothing decided yet); once it grows, its
    class is decided and recorded for the agent, and the agent's next session has it from
    its first, short call on."""
    system = {"role": "system",
              "content": f"You are the analytics desk of Acme Retail ({uuid.uuid4().hex})."}
    short = [system, {"role": "user", "content": "Which customers had the highest revenue?"}]
    first = client(gateway, uuid.uuid4().hex)
    raw = first.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=short)
    assert raw.headers["x-ctxgate-task-class"] == "default"
    grown = [*short, {"role": "assistant", "content": "For which period?"},
             {"role": "user", "content": "Last quarter, grouped by region."}]
    raw = first.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=grown)  # type: ignore[arg-type]
    assert raw.headers["x-ctxgate-task-class"] == "data_sql"
    raw = client(gateway, uuid.uuid4().hex).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=short)
    assert raw.headers["x-ctxgate-task-class"] == "data_sql"


def test_tool_using_agent_in_no_named_class_is_compacted(gateway: Gateway,
                                                         upstream: Upstream) -> None:
    tools = [{"type": "function", "function": {"name": "open_page", "parameters": {
        "type": "object", "properties": {"url": {"type": "string"}}}}}]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You browse an intranet for the user."},
        {"role": "user", "content": "Find the on-call rota for the storage team."}]
    api = client(gateway, uuid.uuid4().hex)
    results = []
    for k in range(12):
        messages.append({"role": "assistant", "content": f"Open page {k}.", "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "open_page", "arguments": f'{{"url": "/wiki/p{k}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "\n".join(
            f"[{k}{i:03d}] link 'Storage page {k}-{i}: rota, runbook, contacts'"
            for i in range(80))})
        raw = api.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=messages, tools=tools)  # type: ignore[arg-type]
        assert raw.headers["x-ctxgate-task-class"] == "agent"
        results.append((int(raw.headers["x-ctxgate-tokens-before"]),
                        int(raw.headers["x-ctxgate-tokens-after"])))
        validate("CreateChatCompletionRequest", upstream.last_body())
    before, after = results[-1]
    assert after < 0.6 * before, results  # no budget header: aging alone cut it
    assert upstream.last_body()["messages"][-1] == messages[-1]
