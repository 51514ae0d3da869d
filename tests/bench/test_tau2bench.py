"""`bench/tau2bench.py` on a tiny tau2-bench-shaped checkout and results file written here
(not the real data): the agent's prompt and tools rebuilt from the source, only what the
agent saw kept (the customer's own tool calls left out), results after the calls they
answer, ticket queues cut by calls, and `bench/replay.py`'s loader reading both folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import corpora, tau2bench
from bench.yardstick import call_ends

AGENT = '''
AGENT_INSTRUCTION = """
You are a customer service agent.
""".strip()

SYSTEM_PROMPT = """
<instructions>
{agent_instruction}
</instructions>
<policy>
{domain_policy}
</policy>
""".strip()
'''

TOOLS = '''
from typing import List, Optional
from tau2.environment.toolkit import ToolKitBase, ToolType, is_tool


class TelecomTools(ToolKitBase):
    @is_tool(ToolType.READ)
    def get_bills(self, customer_id: str, limit: int = 12) -> List[str]:
        """
        Gets a customer's bills.

        Most recent first.

        Args:
            customer_id: The customer.
            limit: How many bills.
        """

    def _helper(self, x: str) -> str:
        """Not a tool."""

    @is_tool(ToolType.WRITE)
    def refuel(self, line_ids: List[str], gb: Optional[float]) -> str:
        """Adds data."""
'''

POLICY = "# Telecom policy\nBe kind."


def checkout(root: Path) -> Path:
    (root / "src/tau2/agent").mkdir(parents=True)
    (root / "src/tau2/agent/llm_agent.py").write_text(AGENT)
    (root / "src/tau2/domains/telecom").mkdir(parents=True)
    (root / "src/tau2/domains/telecom/tools.py").write_text(TOOLS)
    return root


def simulation(task: str, turns: int) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "tool_calls": None},
        {"role": "user", "content": f"My line for {task} is slow.", "tool_calls": None},
    ]
    for t in range(turns):
        a, b = f"call_{t}a", f"call_{t}b"  # the same ids in every simulation
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": a, "name": "get_bills", "arguments": {"customer_id": task},
                 "requestor": "assistant"},
                {"id": b, "name": "refuel", "arguments": {"line_ids": [task], "gb": 2.0},
                 "requestor": "assistant"}],
             "raw_data": {"message": {"tool_calls": [
                 {"id": a, "function": {"name": "get_bills",
                                        "arguments": f'{{"customer_id": "{task}"}}'}}]}}},
            # results answer by id, here in the other order
            {"role": "tool", "id": b, "content": "refuelled", "requestor": "assistant"},
            {"role": "tool", "id": a, "content": f"bills of {task}: B{t}",
             "requestor": "assistant"},
            {"role": "assistant", "content": "Please toggle airplane mode.", "tool_calls": None},
            # the customer acts on their phone: the agent never sees these two
            {"role": "user", "content": None, "tool_calls": [
                {"id": f"u{t}", "name": "toggle_airplane_mode", "arguments": {},
                 "requestor": "user"}]},
            {"role": "tool", "id": f"u{t}", "content": "Airplane mode: OFF",
             "requestor": "user"},
            {"role": "user", "content": "Done." if t < turns - 1 else "Thanks ###STOP###",
             "tool_calls": None},
        ]
    return {"id": f"sim-{task}", "task_id": task, "trial": 0, "messages": msgs}


def results(tasks: list[str], turns: dict[str, int]) -> dict[str, Any]:
    return {
        "timestamp": "2025-08-01T16:23:24",
        "info": {"git_commit": "abc1234", "agent_info": {"implementation": "llm_agent",
                                                         "llm": "gpt-4.1"},
                 "user_info": {"llm": "gpt-4.1"},
                 "environment_info": {"domain_name": "telecom", "policy": POLICY}},
        "tasks": [{"id": t} for t in tasks],
        # recorded out of task order: the converter follows the task list
        "simulations": [simulation(t, turns[t]) for t in reversed(tasks)],
    }


def test_converts_simulations_and_queues_that_the_replay_reads(tmp_path: Path) -> None:
    repo = checkout(tmp_path / "tau2-bench")
    tasks = ["[mobile]a", "[mms]b", "[service]c", "[mobile]d"]
    source = tmp_path / "telecom.json"
    source.write_text(json.dumps(results(tasks, {"[mobile]a": 1, "[mms]b": 2,
                                                  "[service]c": 3, "[mobile]d": 1})))
    out = tmp_path / "out"

    written = tau2bench.convert([source], repo, out, queue_calls=10)

    # a simulation of n turns makes 1 + 2n calls: 3, 5, 7, 3 = 18
    assert written == {"tau2-telecom-gpt-4.1": 4, "tau2-telecom-gpt-4.1-queue": 2}
    assert corpora.extra_jsonl(out) == ["tau2-telecom-gpt-4.1", "tau2-telecom-gpt-4.1-queue"]
    sims = corpora.load("tau2-telecom-gpt-4.1", out)
    queues = corpora.load("tau2-telecom-gpt-4.1-queue", out)
    system = ("<instructions>\nYou are a customer service agent.\n</instructions>\n"
              f"<policy>\n{POLICY}\n</policy>")
    for session in sims + queues:
        assert session.messages[0] == {"role": "system", "content": system}
        assert sum(m["role"] == "system" for m in session.messages) == 1
        assert not any("airplane mode: off" in (m.get("content") or "").lower()
                       for m in session.messages)
        ids = [c["id"] for m in session.messages for c in m.get("tool_calls") or ()]
        assert len(ids) == len(set(ids))
    assert [s.id for s in sims] == [f"tau2-telecom-gpt-4.1/trial0-task{i:03d}" for i in range(4)]
    one = sims[1].messages  # task "[mms]b", 2 turns
    assert [m["role"] for m in one] == ["system", "assistant", "user"] + [
        "assistant", "tool", "tool", "assistant", "user"] * 2
    call = one[3]["tool_calls"]
    assert call[0] == {"id": "call_0a", "type": "function", "function": {
        "name": "get_bills", "arguments": '{"customer_id": "[mms]b"}'}}  # as sent (raw)
    assert call[1]["function"]["arguments"] == '{"line_ids":["[mms]b"],"gb":2.0}'
    assert [(m["tool_call_id"], m["content"]) for m in one[4:6]] == [
        ("call_0b", "refuelled"), ("call_0a", "bills of [mms]b: B0")]
    assert len(call_ends(one)) == 5
    tools = sims[0].tools or []
    assert [t["function"]["name"] for t in tools] == ["get_bills", "refuel"]
    bills = tools[0]["function"]
    assert bills["description"] == "Gets a customer's bills.\n\nMost recent first."
    assert bills["parameters"]["required"] == ["customer_id"]
    assert bills["parameters"]["properties"]["limit"] == {
        "description": "How many bills.", "title": "Limit", "type": "integer", "default": 12}
    assert tools[1]["function"]["parameters"]["properties"]["line_ids"]["type"] == "array"
    # Queues: 18 calls / 10 -> 2 queues, cut at the boundary nearest 9 (after b: 3 + 5 = 8)
    assert [s.id for s in queues] == ["tau2-telecom-gpt-4.1-queue/trial0-task000-task001-q0",
                                      "tau2-telecom-gpt-4.1-queue/trial0-task002-task003-q1"]
    first = queues[0].messages
    assert [m["content"] for m in first if m["role"] == "user"] == [
        "My line for [mobile]a is slow.", "Thanks ###STOP###", "My line for [mms]b is slow.",
        "Done.", "Thanks ###STOP###"]
    assert [c["id"] for m in first for c in m.get("tool_calls") or ()] == [
        "call_0a", "call_0b", "call_0a_3", "call_0b_4", "call_1a", "call_1b"]
    assert len(call_ends(first)) == 3 + 5
    readme = (out / "tau2-telecom-gpt-4.1" / "README.md").read_text()
    assert "MIT" in readme and "left out" in readme
    assert "Ticket queues" in (out / "tau2-telecom-gpt-4.1-queue" / "README.md").read_text()
