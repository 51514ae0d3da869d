"""Under a budget, an agent acting in prose (DA-Code's `Action: Python(file_path=...)`
answered by an `Observation:` user turn, no API tools) has the text call its latest
observation answers cut like any other turn when the pinned content alone is over the
budget, instead of the call being refused (issue 7: a refusal only when nothing else
works; bench/README.md, "Under a budget, a text call's turn is cut, not the call
refused"). An API tool call the call ends on stays pinned: its results need it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.errors import ContextBudgetExceeded
from tests.context.sessions import drops_add_up

SYSTEM = (
    "# CONTEXT #\nYou are a data scientist proficient in analyzing data. You act with Bash "
    "commands and Python code.\n# ACTION SPACE #\n## Bash Action\n* Signature: "
    'Bash(code="shell_command")\n## Python Action\n* Signature: '
    'Python(file_path="path/to/python_file"):\n```python\nexecutable_python_code\n```\n'
    "# TASK #\nTest whether frog B and frog D have the same mean impact force with a "
    "two-sample bootstrap test and write the p-value to result.csv.\n"
)
CODE = "\n".join(
    f"bs_replicates_{k} = draw_bs_reps(frog_shifted_{k}, np.mean, size=10000)"
    for k in range(40)
)
ACTION = (
    "Thought: The dataset is frog_tongue.csv. I will run the bootstrap test in Python.\n\n"
    'Action: Python(file_path="./analyze_frog_data.py"):\n```python\nimport numpy as np\n'
    f"{CODE}\nresult.to_csv('result.csv', index=False)\n```"
)
OBSERVATION = (
    "Observation: Traceback (most recent call last):\n"
    '  File "/workspace/./analyze_frog_data.py", line 13, in <module>\n'
    "    df = pd.read_csv('frog_tongue.csv')\nFileNotFoundError: frog_tongue.csv"
)


def _text_call() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Observation: You are in the folder now."},
        {"role": "assistant", "content": 'Thought: I list the files.\n\nAction: Bash(code="ls")'},
        {"role": "user", "content": "Observation: README.md  frog.csv  tips.md"},
        {"role": "assistant", "content": ACTION},
        {"role": "user", "content": OBSERVATION},
    ]


def _call(budget: int) -> CallContext:
    return CallContext("t-text-budget", uuid.uuid4().hex, {
        "x-ctxgate-session-id": uuid.uuid4().hex,
        "x-ctxgate-budget-tokens": str(budget),
        "x-ctxgate-task-class": "default",
    })


def _sizes(engine: ContextEngine, body: dict[str, Any]) -> tuple[int, dict[int, int], int]:
    """The call's tokens, each message's, and what the engine pins."""
    parsed = parse_request(body, engine.counter, "o200k_base")
    per: dict[int, int] = {}
    for item in parsed.items:
        per[item.message_index] = per.get(item.message_index, 0) + item.tokens
    return parsed.tokens, per, parsed.base_tokens + sum(
        i.tokens for i in parsed.items if i.pinned)


async def test_a_text_call_over_the_budget_is_cut_not_refused(engine: ContextEngine) -> None:
    body = {"messages": _text_call()}
    tokens, per, pinned = _sizes(engine, body)
    assert pinned >= tokens - per[1] - per[2] - per[3]  # the action its observation answers
    # room for the system prompt and the latest observation, not for the action as sent
    budget = pinned - per[4] // 2
    fitted = await engine.fit(body, _call(budget))
    assert fitted.tokens_after <= budget
    out = fitted.body["messages"]
    assert out[0]["content"] == SYSTEM and out[-1]["content"] == OBSERVATION
    action = next(m["content"] for m in out if "Action: Python" in m["content"])
    assert 'Python(file_path="./analyze_frog_data.py")' in action  # a digest, not a drop
    assert len(action) < len(ACTION)
    assert drops_add_up(fitted)


async def test_what_the_protocol_needs_still_refuses(engine: ContextEngine) -> None:
    """Over the budget with the system prompt and the latest observation alone: refused."""
    body = {"messages": _text_call()}
    _, per, _ = _sizes(engine, body)
    with pytest.raises(ContextBudgetExceeded):
        await engine.fit(body, _call(per[0] + per[5] - 5))
    # an API tool call the call ends on stays pinned with its result
    calls = [{"id": "c1", "type": "function",
              "function": {"name": "python", "arguments": '{"code": "' + CODE + '"}'}}]
    api = {"messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Test the frogs' mean impact force."},
        {"role": "assistant", "content": "I run the test.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c1", "content": OBSERVATION},
    ]}
    _, _, pinned = _sizes(engine, api)
    with pytest.raises(ContextBudgetExceeded) as info:
        await engine.fit(api, _call(pinned - 20))
    assert info.value.needed >= pinned - 20


async def test_a_text_exchange_before_the_latest_user_turn_is_cut_too(
    engine: ContextEngine,
) -> None:
    """AutoCodeRover: the harness answers the agent's `search_class("Parent")` with a long
    result, then asks for an analysis in a short user turn. The result, pinned with the
    exchange, is cut rather than the call refused; the latest user turn stays."""
    code = "\n".join(f"<file>tests/app_{k}/models.py</file> <code>class Parent{k}(Model): "
                     f"name_{k} = CharField(max_length={k})</code>" for k in range(60))
    messages = [
        {"role": "system", "content": "You are a software developer maintaining a project."},
        {"role": "user", "content": "<issue>Inherited model ignores -pk ordering.</issue>"},
        {"role": "assistant", "content": 'I will search for the class.\nsearch_class("Parent")'},
        {"role": "user", "content": f'Result of search_class("Parent"):\n{code}'},
        {"role": "user", "content": "Let's analyze collected context first"},
    ]
    body = {"messages": messages}
    tokens, per, pinned = _sizes(engine, body)
    assert pinned >= per[0] + per[2] + per[3] + per[4]  # the exchange is pinned as sent
    budget = int(0.6 * tokens)
    assert per[0] + per[4] < budget < pinned
    fitted = await engine.fit(body, _call(budget))
    assert fitted.tokens_after <= budget
    out = fitted.body["messages"]
    assert out[-1]["content"] == messages[-1]["content"]
    assert any(m["content"].startswith('Result of search_class("Parent")') for m in out)
    assert drops_add_up(fitted)


async def test_the_task_statement_is_dropped_only_after_the_latest_result_is_cut(
    engine: ContextEngine,
) -> None:
    """AutoCodeRover `django-12470` at 80%: the issue (the first user turn, the task every
    step serves) was dropped while a large search result, the latest exchange's, was sent
    nearly whole. A budget's cut digests or masks the task with the old turns (its rewrite
    lists its identifiers) but drops it only after the latest exchange is cut."""
    issue = (
        "<issue>Inherited model doesn't correctly order by \"-pk\" when specified on "
        "Parent.Meta.ordering.\nGiven class Parent(models.Model) with Meta.ordering = [\"-pk\"]"
        "\nand class Child(Parent), Child.objects.all() orders by myapp_parent.id ASC\nin "
        "django/db/models/sql/compiler.py instead of DESC.</issue>"
    )
    code = "\n".join(f"<file>tests/app_{k}/models.py</file> <code>class Parent{k}(Model): "
                     f"name_{k} = CharField(max_length={k})</code>" for k in range(60))
    messages = [
        {"role": "system", "content": "You are a software developer maintaining a project."},
        {"role": "user", "content": issue},
        {"role": "assistant", "content": 'I will search for the class.\nsearch_class("Parent")'},
        {"role": "user", "content": f'Result of search_class("Parent"):\n{code}'},
        {"role": "user", "content": "Let's analyze collected context first"},
    ]
    body = {"messages": messages}
    tokens, per, _ = _sizes(engine, body)
    assert per[3] > 10 * per[1]  # the result dwarfs the task
    budget = int(0.8 * tokens)
    fitted = await engine.fit(body, _call(budget))
    assert budget - 0.1 * tokens <= fitted.tokens_after <= budget
    assert not any(d.action == "drop" and d.message_index == 1 for d in fitted.drops)
    sent = "\n".join(str(m["content"]) for m in fitted.body["messages"])
    for value in ("Parent.Meta.ordering", "myapp_parent.id", "django/db/models/sql/compiler.py"):
        assert value in sent
    assert messages[3]["content"] not in sent  # the result is what was shortened
    assert drops_add_up(fitted)
