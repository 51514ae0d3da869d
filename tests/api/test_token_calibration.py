"""Token counts for a model with no public tokenizer: the gateway's estimate corrected from
the input tokens the provider reports, so that a budget holds in the provider's tokens.

The stub counts 1.5 x (characters / 4) for a model named `skew-300`, far from the gateway's
o200k_base estimate; an agent session through /v1/messages at a 4,000-token budget must,
once the model's first answers were seen, send nothing the provider counts over 4,200.
(The budget leaves room above what every call pins — system, tools, the task and the latest
exchange, ~3,000 of the provider's tokens — so that only the calibration decides the size.)"""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import orjson

from gateway.context.calibration import MAX_SCALE, MIN_SCALE, scale_of
from tests import stub_wire
from tests.harness import Gateway, Upstream

BUDGET = 4000
TOOLS: list[Any] = [{"name": "shell", "description": "Run a command.", "input_schema": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]


def run_agent(gateway: Gateway, model: str, session: str) -> list[httpx.Headers]:
    """A Messages agent loop: the whole history re-sent, long tool results appended."""
    messages: list[Any] = [{"role": "user", "content": "Find the flaky test in pkg 4."}]
    seen: list[httpx.Headers] = []
    while True:
        response = httpx.post(gateway.url + "/v1/messages", timeout=30, headers={
            "x-api-key": "sk-ant-calibration", "anthropic-version": "2023-06-01",
            "x-ctxgate-budget-tokens": str(BUDGET), "x-ctxgate-session-id": session,
        }, json={"model": model, "max_tokens": 512, "system": "You are a coding agent.",
                 "tools": TOOLS, "messages": messages})
        assert response.status_code == 200, response.text
        seen.append(response.headers)
        content = response.json()["content"]
        messages.append({"role": "assistant", "content": content})
        uses = [b for b in content if b["type"] == "tool_use"]
        if not uses:
            return seen
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": u["id"], "content": "\n".join(
                f"pkg/mod_{len(seen)}/test_{i}.py::test_case_{i} PASSED in 0.{i:02d}s"
                for i in range(60))} for u in uses]})


def test_budget_holds_in_the_providers_tokens(gateway: Gateway, upstream: Upstream) -> None:
    model = f"claude-calib-{uuid.uuid4().hex[:8]}-agent-12-skew-300"
    run_agent(gateway, model, uuid.uuid4().hex)  # a first session: the model's first answers
    time.sleep(1.5)  # the observed counts reach Redis once a second
    seen = run_agent(gateway, model, uuid.uuid4().hex)
    assert len(seen) == 13
    sent = [orjson.loads(r["body"]) for r in upstream.requests()
            if r["path"] == "/v1/messages" and model.encode() in r["body"]]
    measured = sent[-len(seen):]
    provider = [stub_wire.message_object(body)["usage"]["input_tokens"] for body in measured]
    estimated = [int(h["x-ctxgate-tokens-after"]) for h in seen]
    assert all(h["x-ctxgate-budget-tokens"] == str(BUDGET) for h in seen)
    # the session grew past the budget: the bound decided each late request's size
    assert int(seen[-1]["x-ctxgate-tokens-before"]) > 2 * BUDGET
    # the estimate alone is far off: fitted to it, these requests would go over
    assert min(p / e for p, e in zip(provider, estimated, strict=True)) > 1.5
    assert max(provider) > 0.4 * BUDGET  # the budget was used, not starved
    assert max(provider) <= 1.05 * BUDGET, (provider, estimated)


def test_a_bogus_usage_report_cannot_unbound_a_budget() -> None:
    """Ten tokens reported for a 2,000-token call is not a tokenizer's difference: the scale
    stays within bounds, so a budget grows at most 1 / MIN_SCALE times, not 200 times."""
    assert scale_of(999, 10) == 1.0  # too little observed yet
    assert scale_of(2000, 2600) == 1.3
    assert scale_of(2000, 10) == MIN_SCALE
    assert scale_of(2000, 2_000_000) == MAX_SCALE
