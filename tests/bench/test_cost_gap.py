"""`bench.cost_gap`'s reading of a forwarded message against the client's."""

from __future__ import annotations

from typing import Any

from bench.baselines import placeholder
from bench.cost_gap import category

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "def main():\n    return 1\n" * 40},
    {"role": "assistant", "content": "Reading the test next."},
    {"role": "user", "content": "Go on."},
]


def test_a_tool_result_under_another_call_id_is_verbatim() -> None:
    renamed = {**MESSAGES[3], "tool_call_id": "call_1_2"}
    assert category(3, renamed, MESSAGES) == "observation verbatim"
    call = {**CALL, "id": "call_1_2"}
    assert category(2, {**MESSAGES[2], "tool_calls": [call]}, MESSAGES) == "assistant verbatim"


def test_a_rewritten_result_is_not_verbatim() -> None:
    assert category(3, placeholder(MESSAGES[3]), MESSAGES) == "observation placeholder"
    digest = {**MESSAGES[3], "content": "def main(): … (40 lines)"}
    assert category(3, digest, MESSAGES) == "observation changed"
    other = {**CALL, "function": {"name": "read_file", "arguments": '{"path": "x.py"}'}}
    assert category(2, {**MESSAGES[2], "tool_calls": [other]}, MESSAGES) == "assistant changed"
    assert category(5, MESSAGES[5], MESSAGES) == "observation latest"
    assert category(1, MESSAGES[1], MESSAGES) == "task verbatim"
