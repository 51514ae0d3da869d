"""On a later task of an API agent's queue, a result the agent's newest tool-calling turn
copied two values from is drawn from on that turn alone (`drawing.later_task_outputs`,
`drawn_from`'s `latest`): a summary the agent fills records from, one row a call, is not
digested by the step right after its first row, as it was when two of the last three turns
had to copy from it (bench/README.md, "Toolathlon queues' recall, part thirty-two": the
oil-price summary's rows and trades) — the real engine on the embedded Redis, the shipped
configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from tests.context.sessions import drops_add_up, fit_each_call, order_page

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("read_page", "run_report", "add_row")]
FIRST_TURNS = 64
STATEMENT = ("Ticket T-200: run the regional sales report for each quarter and copy every row "
             "of each report into the tracking database, one row per record, with the region code "
             "(such as the four-letter suffix), "
             "the manager and the quarter's total exactly as the report prints them. ")
ROWS = 8
REPORTS = 5  # each after a different number of page reads: the steps fall on every phase


def report(r: int) -> list[tuple[str, str, str]]:
    """Report `r`'s rows: region code, manager, total."""
    return [(f"RG-{r}{i:02d}-{'NSEW'[i % 4]}", f"Manager {chr(65 + r)}{chr(75 + i)}son",
             f"{1000 + 137 * r + 29 * i}.{i}5") for i in range(ROWS)]


def printed(r: int) -> str:
    lines = [f"Region {code} | managed by {who} | quarter total {total} | notes: steady "
             "growth, no returns, audited by the regional office" for code, who, total in report(r)]
    return f"=== REPORT Q{r} ===\n" + "\n".join(lines)


def queue() -> list[dict[str, Any]]:
    """A first task of `FIRST_TURNS` page reads, then `STATEMENT`: per report, a few page
    reads, the report, and one call per row copying its code, manager and total."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You work the task queue with the tools."},
        {"role": "user", "content": "Ticket T-100: audit the orders."}]
    k = 0

    def turn(name: str, args: dict[str, Any], result: str) -> None:
        nonlocal k
        k += 1
        call = f"call_{k:03d}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": result})

    for _ in range(FIRST_TURNS):
        turn("read_page", {"page": f"page-{k + 1}"}, order_page(k + 1))
    messages.append({"role": "assistant", "content": "Ticket T-100 is audited."})
    messages.append({"role": "user", "content": STATEMENT})
    for r in range(REPORTS):
        for _ in range(r + 1):
            turn("read_page", {"page": f"page-{k + 1}"}, order_page(k + 1))
        turn("run_report", {"quarter": f"Q{r}"}, printed(r))
        for code, who, total in report(r):
            turn("add_row", {"region": code, "manager": who, "total": total}, "Row added.")
    messages.append({"role": "assistant", "content": "Every report is in the database."})
    return messages


async def rows_missing(engine: ContextEngine, name: str) -> list[str]:
    """The row values a call copies that the forwarded call did not carry."""
    messages = queue()
    fits = await fit_each_call(engine, messages, TOOLS, "t-queue-newest", name)
    ends = [end for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]
    missing = []
    for end, fit in zip(ends, fits, strict=True):
        assert drops_add_up(fit)
        calls = messages[end].get("tool_calls") or ()
        if not calls or calls[0]["function"]["name"] != "add_row":
            continue
        sent = "\n".join(str(m.get("content")) for m in fit.body["messages"])
        missing += [v for v in orjson.loads(calls[0]["function"]["arguments"]).values()
                    if v not in sent]
    return missing


async def test_a_report_the_newest_turn_copied_from_is_not_digested(
    engine: ContextEngine,
) -> None:
    assert await rows_missing(engine, "queue-newest-copy") == []
