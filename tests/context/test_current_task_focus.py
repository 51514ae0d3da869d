"""A queue's later task is what its digests are chosen against: at a user message that reads
as a new task's statement (`Clock.task_statement`: after the agent worked through the API
on its own, and long), that statement's terms join the focus beside the first task's; a
customer's reply in a conversation (tau-bench) or a text-tool agent's observation changes
nothing; and a capped value list keeps the order the first task's terms gave it
(`focus.task_focus`, `focus.Focus`; bench/README.md, "Toolathlon queues' recall, part
twenty-five")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import ContextEngine
from gateway.context.focus import Focus, task_focus
from gateway.context.items import NEW_TASK_CALLS, Layout
from gateway.context.summarize import summarize
from tests.context.sessions import fit_each_call, task_queue

TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
FIRST = "Ticket T-100: audit the warehouse orders."
SECOND = ("Find the cheapest red kettle in the Homeware category and add it to the cart. "
          "The store lists its products over many result pages; read them in order, compare "
          "the prices of the kettles that are red, and keep the model number of the cheapest "
          "one so the order can be placed with it afterwards.")
ROW = "[b037] row 37: red kettle model_k9 price 19.99 stock 4"


def _page(k: int) -> str:
    rows = [f"[b{i:03d}] row {i}: blue teapot model_{k}_{i} price {100 + i} stock {7 * i}"
            for i in range(60)]
    if k == NEW_TASK_CALLS + 6:
        rows[37] = ROW
    return f"Results page {k}\n" + "\n".join(rows)


def _queue(first_turns: int, second_turns: int, second: str = SECOND) -> list[dict[str, Any]]:
    return task_queue("You work the queue with the tools.",
                      [(FIRST, first_turns, "Done."), (second, second_turns, "Done.")], _page)


def _statement(messages: list[dict[str, Any]]) -> int:
    layout = Layout()
    layout.extend(messages)
    return layout.clock.task_statement


def test_the_current_tasks_terms_join_the_first_tasks() -> None:
    messages = _queue(NEW_TASK_CALLS, 2)
    start = next(i for i, m in enumerate(messages) if m.get("content") == SECOND)
    assert _statement(messages) == start
    focus = task_focus(messages, start)
    assert {"kettle", "homeware", "cheapest"} <= focus  # the current task's
    assert {"warehouse", "orders", "t-100"} <= focus  # the first task's stay
    assert "kettle" not in task_focus(messages)  # no task statement: the first task's only


def test_a_reply_in_a_conversation_starts_no_task_statement() -> None:
    # a few calls before it (a customer's agent looking an order up), or a short message
    assert _statement(_queue(NEW_TASK_CALLS - 1, 2)) == -1
    assert _statement(_queue(NEW_TASK_CALLS, 2, "Yes, go ahead with the red one.")) == -1
    # a text-tool agent: its observations are user messages, it calls no tool by the API
    text_agent: list[dict[str, Any]] = [{"role": "system", "content": "Act in ReAct."},
                                        {"role": "user", "content": FIRST}]
    for k in range(NEW_TASK_CALLS + 2):
        text_agent += [{"role": "assistant", "content": f"Thought: read.\nsearch[page {k}]"},
                       {"role": "user", "content": SECOND}]
    assert _statement(text_agent) == -1


def test_a_capped_value_list_keeps_the_first_tasks_order() -> None:
    # the current task's words (`city`) reorder nothing the first task's ranking listed: the
    # capped list is the one the first task's terms give, `Field_5` not pushed out by `City`
    # (a plain union put `City` first: the claude queues' tune split lost a header that way);
    # `City` follows it (`summarize._extra`, "part twenty-six")
    text = "\n".join(["header row", "Field_0 = City",
                      *(f"Field_{i} = value" for i in range(1, 40)), "last"])
    lead = frozenset({"header"})
    alone = summarize(text, "tool_result", 2, frozenset(), lead)
    both = summarize(text, "tool_result", 2, frozenset(), Focus(lead | {"city"}, lead))
    assert "Field_5" in both
    assert both == alone.replace("Field_5 (+37 more)", "Field_5 City (+36 more)")
    assert "City Field_0" in summarize(text, "tool_result", 2, frozenset(), lead | {"city"})


async def test_a_later_tasks_digest_keeps_the_row_its_task_names(
    engine: ContextEngine,
) -> None:
    messages = _queue(NEW_TASK_CALLS, 30)
    own = next(m["tool_call_id"] for m in messages
               if m["role"] == "tool" and ROW in str(m["content"]))
    fits = await fit_each_call(engine, messages, TOOLS, "t-focus", "later-task-focus")
    digests = [str(m["content"]) for fit in fits for m in fit.body["messages"]
               if m["role"] == "tool" and m["tool_call_id"] == own
               and len(str(m["content"])) < len(_page(NEW_TASK_CALLS + 6)) / 2]
    assert digests  # the page aged into a digest within the later task
    assert all(ROW in d for d in digests)  # each keeps the row the current task names
