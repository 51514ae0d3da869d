"""Issue 12's live fidelity signals through the real gateway: a session's second call
measures the answer to its first against what the gateway forwarded, on /metrics and in
the drop log's call line; bypassed calls give the baseline."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import jsonschema

from gateway.context.needed import needed_values, recall
from gateway.observability.droplog import SCHEMA
from tests.harness import Gateway, Upstream
from tests.integration.test_engine_gateway import TOOLS, client, long_session

REPEAT = {"id": "call_again", "type": "function",
          "function": {"name": "bash", "arguments": '{"cmd": "pytest -k case_0"}'}}
REPEAT_TURN = {"role": "assistant", "content": "", "tool_calls": [REPEAT]}


def _answer_and_result(first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The second call: the first, the agent re-running its first command, its result."""
    return [*first, REPEAT_TURN,
            {"role": "tool", "tool_call_id": "call_again", "content": "1 passed"}]


def _signals(gateway: Gateway, task_class: str, mode: str) -> dict[str, float]:
    labels = {"task_class": task_class, "mode": mode}
    return {name: gateway.metric(f"ctxgate_{name}_total", **labels) for name in (
        "recall_turns", "recall_needed_values", "recall_found_values",
        "refetch_tool_calls", "refetch_refetches", "refetch_repeats")}


def _moved(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def test_a_managed_session_measures_recall_and_refetch(gateway: Gateway,
                                                       upstream: Upstream) -> None:
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-budget-tokens": "3000"})
    first = long_session(turns=12)
    upstream.clear()
    raw = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=first, tools=TOOLS)  # type: ignore[arg-type]
    task_class = raw.headers["x-ctxgate-task-class"]
    forwarded = upstream.last_body()["messages"]
    # what the yardstick says of the turn that will answer this call
    needed = needed_values(REPEAT_TURN, first)
    found = round((recall(needed, forwarded) or 0) * len(needed))
    result_kept = any(m.get("tool_call_id") == "call_000" and m["content"] == first[3]["content"]
                      for m in forwarded)
    assert not result_kept  # the 3000-token budget digested or dropped the first result
    before = _signals(gateway, task_class, "managed")
    second = api.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=_answer_and_result(first), tools=TOOLS)  # type: ignore[arg-type]
    moved = _moved(before, _signals(gateway, task_class, "managed"))
    assert moved == {"recall_turns": 1, "recall_needed_values": len(needed),
                     "recall_found_values": found, "refetch_tool_calls": 1,
                     "refetch_refetches": 1, "refetch_repeats": 1}
    trace_id = second.headers["x-ctxgate-trace-id"]
    line = next(d for d in gateway.drops()
                if d["event"] == "context.call" and d["trace_id"] == trace_id)
    assert line["fidelity"] == {"needed": len(needed), "found": found, "tool_calls": 1,
                                "refetches": 1, "repeats": 1}
    jsonschema.validate(line, json.loads(SCHEMA.read_text()))


def test_bypassed_calls_give_the_baseline(gateway: Gateway) -> None:
    api = client(gateway, uuid.uuid4().hex, **{"x-ctxgate-bypass": "true",
                                               "x-ctxgate-task-class": "default"})
    first = long_session(turns=12)
    api.chat.completions.create(model="gpt-4o-mini", messages=first, tools=TOOLS)  # type: ignore[arg-type]
    before = _signals(gateway, "default", "bypass")
    api.chat.completions.create(model="gpt-4o-mini", messages=_answer_and_result(first),
                                tools=TOOLS)  # type: ignore[arg-type]
    needed = len(needed_values(REPEAT_TURN, first))
    deadline = time.monotonic() + 5  # measured after the response: wait for it
    while time.monotonic() < deadline:
        moved = _moved(before, _signals(gateway, "default", "bypass"))
        if moved["recall_turns"]:
            break
        time.sleep(0.05)
    assert needed >= 1
    # forwarded as sent: recall is the ceiling, and the repeat is the agent's own rate
    assert moved == {"recall_turns": 1, "recall_needed_values": needed,
                     "recall_found_values": needed, "refetch_tool_calls": 1,
                     "refetch_refetches": 1, "refetch_repeats": 1}
