"""In an API agent's queue on a later task, the fold notes the earlier tasks' runs with
their call lines short (`fold.short_call`): a done task's scripts, sent as tool-call
arguments, go as their start and the words that carry a value, while the current task's
notes keep every call whole. Whole, a done task's scripts made its notes 30k characters
and more on the Toolathlon queues, the room a later task's calls paid for (bench/README.md,
"Toolathlon queues' recall, part thirty-one")."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.fold import FOLD_HEAD

PATH = "/workspace/dumps/report_q3_final.xlsx"
LOOP = "total += row['amount'] * weight"  # script text that carries no value


def _call(session: str) -> CallContext:
    return CallContext("t-fold-scripts", "tr", {"x-ctxgate-session-id": session,
                                                 "x-ctxgate-task-class": "default"})


def _script(t: int, k: int) -> str:
    lines = [f"import pandas as pd\ndf = pd.read_excel('{PATH}')"]
    lines += [f"for row in rows:\n    {LOOP}" for _ in range(30)]
    return json.dumps({"code": "\n".join(lines)})


def _exchange(t: int, k: int) -> list[dict[str, Any]]:
    cid = f"call_{t}_{k:03d}"
    output = "\n".join(f"week {j}: {1000 + 37 * j + k} units, store S{t}{k}{j}"
                       for j in range(40))
    return [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "run_python", "arguments": _script(t, k)}}]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def _statement(t: int) -> str:
    return (f"Task {t}: read the sales workbook and write the weekly totals of every store "
            "into the summary sheet, then report the three largest. " * 3)


def _queue(statement: str) -> list[dict[str, Any]]:
    """An API agent's session: a task's statement, 80 tool calls (scripts) and a reply, then
    `statement` and 15 more calls."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                      {"role": "user", "content": _statement(0)}]
    for k in range(80):
        messages += _exchange(0, k)
    messages.append({"role": "assistant", "content": "Task 0 is done."})
    messages.append({"role": "user", "content": statement})
    for k in range(15):
        messages += _exchange(1, k)
    return messages


async def _earlier_notes(engine: ContextEngine, statement: str, session: str) -> str:
    """The fold notes before `statement` at the session's last call."""
    messages = _queue(statement)
    fitted = None
    for end in (i + 1 for i, m in enumerate(messages) if m["role"] == "tool"):
        fitted = await engine.fit({"messages": messages[:end]}, _call(session))
        assert (sum(d.tokens_saved for d in fitted.drops)
                == fitted.tokens_before - fitted.tokens_after)
    assert fitted is not None
    sent = fitted.body["messages"]
    later = next(i for i, m in enumerate(sent) if m.get("content") == statement)
    return "".join(str(m.get("content")) for m in sent[:later]
                   if m.get("role") == "user" and FOLD_HEAD in str(m.get("content")))


async def test_a_later_tasks_call_notes_the_earlier_tasks_scripts_short(
    engine: ContextEngine,
) -> None:
    notes = await _earlier_notes(engine, _statement(1), "fold-scripts")
    assert notes.count("run_python(") >= 40  # the earlier task's calls are folded
    assert PATH in notes  # the value a script carries stays
    assert LOOP not in notes  # its other text goes
    assert len(notes) < 200 * 80


async def test_a_reply_that_starts_no_task_leaves_the_notes_whole(
    engine: ContextEngine,
) -> None:
    # a short user message after the agent's answer (a customer's reply) is no new task's
    # statement (`Clock.task_statement`): the calls before it stay whole in their notes
    notes = await _earlier_notes(engine, "Thanks. And the totals of last week?", "fold-reply")
    assert notes.count("run_python(") >= 40
    assert LOOP in notes and PATH in notes
