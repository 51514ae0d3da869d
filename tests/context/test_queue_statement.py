"""A text-tool agent's queue keeps its current task's statement (`steps.queue_statement`):
a later task's statement, split into sections (the issue's code block, its `### Steps to
reproduce`), is not digested while that task lasts, as the first task's statement (the goal)
never is; once the next task opens it ages as any earlier task's message (bench/README.md,
"A text-tool queue's current task keeps its statement")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item, Layout
from gateway.context.steps import queue_statement
from tests.context.test_fold_current_task import TEMPLATE, _turn


def _call(session: str) -> CallContext:
    return CallContext("t-queue-statement", "tr", {"x-ctxgate-session-id": session,
                                                    "x-ctxgate-task-class": "default"})


def _statement(t: int) -> str:
    code = "\n".join(f"    record_{t}_{i} = parse_header_{t}(raw[{i}], strict=True)"
                     for i in range(12))
    return (f"{TEMPLATE}Module mod_{t} raises KeyError in parse_{t}() on an empty header.\n\n"
            f"### Steps to reproduce\n\n```python\nfrom pkg.mod_{t} import parse_header_{t}\n"
            f"def check_{t}(raw):\n{code}\n```\n\n### Expected behaviour\n\n"
            + f"The header of mod_{t} parses to an empty mapping, as documented. " * 12)


def _queue(tasks: int, turns: int) -> tuple[list[dict[str, Any]], list[int]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a shell agent."}]
    starts = []
    for t in range(tasks):
        starts.append(len(messages))
        messages.append({"role": "user", "content": _statement(t)})
        for k in range(turns):
            messages.extend(_turn(t, k))
        messages.append({"role": "assistant", "content": (
            "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A\n```")})
    return messages[:-1], starts


def test_the_current_statement_of_a_text_tool_queue() -> None:
    messages, starts = _queue(3, 8)
    layout = Layout()
    units = layout.extend(messages)
    items = [Item(f"i{i}", "knowledge" if i in starts else "user", units[i], i, 0,
                  str(m["content"]), 40, 4, 0, False, True, False, 0.0, layout.clock)
             for i, m in enumerate(messages) if m["role"] == "user"]
    held = [item.message_index for item in items if queue_statement(item)]
    assert held == [starts[2]]  # the latest task's only: the earlier ones age
    layout.clock.api_calls = True  # an API agent's queue: its user messages age as before
    assert not any(queue_statement(item) for item in items)


async def test_a_later_tasks_statement_is_not_digested_while_current(
        engine: ContextEngine) -> None:
    messages, starts = _queue(3, 30)
    digested_current = digested_earlier = 0
    for end in (i + 1 for i, m in enumerate(messages) if m["role"] == "user" and i > 1):
        fitted = await engine.fit({"messages": messages[:end]}, _call("queue-statement"))
        current = max(s for s in starts if s < end)
        for d in fitted.drops:
            if d.message_index in starts[1:] and d.message_index != current:
                digested_earlier += 1  # masked, folded: gone as a finished task's are
            elif d.message_index == current and d.action == "compress":
                digested_current += 1
        assert (sum(d.tokens_saved for d in fitted.drops)
                == fitted.tokens_before - fitted.tokens_after)
    assert digested_earlier > 0  # a finished task's statement still goes
    assert digested_current == 0
