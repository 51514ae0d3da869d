"""An agent that looks up a listing's numeric codes one a call (a course schedule's
8-digit course numbers searched in an exam table) is drawing from the listing, as one
re-typing its names is: a value of `MIN_DIGITS`+ digits names its source, a short number
(a page size, a count) still does not (gateway/context/drawing.py; bench/README.md,
"Codes the agent looks up are drawn values")."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.drawing import MIN_DIGITS, drawn_from, recent_values
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.session import MemorySessionStore
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay

CODES = [f"{61410004 + 1379 * k:08d}" for k in range(30)]
SUBJECTS = ["Algorithm Design", "Modern Optics", "Urban Ecology", "Digital Signals",
            "Applied Genetics", "Coastal Studies"]
SCHEDULE = "\n".join(["Course schedule, autumn term", "code  course  teacher  hours  slot",
                      *(f"{code}  {SUBJECTS[k % 6]} {k // 6 + 1}  Teacher {k}  32  "
                        f"{'morning' if k % 2 else 'afternoon'} room {3300 + k}"
                        for k, code in enumerate(CODES))])
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("read_pdf", "search_exams", "check_status")]


def _assistant(k: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}


def _exam_hits(k: int) -> str:
    return "\n".join(f"Match {i}: exam table line {k}.{i}, sheet row {40 * k + i}, no details"
                     for i in range(40))


def _session(lookups: int, after: int) -> list[dict[str, Any]]:
    """The schedule read once, then `lookups` calls each searching the exam table for one
    of its course codes (the search's reply long enough for steps to come), then `after`
    calls that look up nothing from it."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an assistant with tools."},
        {"role": "user", "content": "Find the exams of every course in my schedule."},
        _assistant(0, "read_pdf", {"path": "/workspace/course.pdf"}),
        {"role": "tool", "tool_call_id": "c0", "content": SCHEDULE},
    ]
    for k in range(1, lookups + 1):
        messages.append(_assistant(k, "search_exams", {"pattern": CODES[k - 1],
                                                       "page_size": 5000}))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": _exam_hits(k)})
    for k in range(lookups + 1, lookups + after + 1):
        messages.append(_assistant(k, "check_status", {"worker": f"w-{k}"}))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": _exam_hits(k)})
    return messages


def _item(i: int, text: str) -> Item:
    return Item(id=f"m{i}", kind="tool_result", unit=f"u{i}", message_index=i, segment=0,
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=i, pinned=False,
                rewritable=True)


def test_a_long_code_names_its_source_a_short_number_does_not() -> None:
    messages = _session(2, 0)
    assert len(CODES[0]) >= MIN_DIGITS
    # the code counts, the page size (and its numeric leaf) does not
    assert recent_values(messages, 1) == [(6, [CODES[1]])]
    assert drawn_from([_item(3, SCHEDULE)], messages, 3) == {"m3"}
    # a table of short numbers only: nothing names it
    short = [*_session(0, 0), _assistant(1, "search_exams", {"pattern": "3301"}),
             {"role": "tool", "content": "x"},
             _assistant(2, "search_exams", {"pattern": "3302"})]
    assert recent_values(short, 2) == [(6, []), (4, [])]


async def test_a_schedule_whose_codes_the_agent_looks_up_stays_until_it_stops(
    settings: Settings, embedder: Embedder
) -> None:
    lookups, after = 14, 10
    messages = _session(lookups, after)
    engine = ContextEngine(without_repay(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    sent = []
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit(
            {"messages": messages[:end], "tools": TOOLS},
            CallContext("t-codes", "tr", {"x-ctxgate-session-id": "drawn-codes"}))
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
        sent.append(fitted)
    # the call that asks for the last look-up: the schedule is still whole, codes not yet
    # looked up with it, while the searches' replies before it were aged
    last = lookups - 1
    assert sent[last].body["messages"][3]["content"] == SCHEDULE
    assert any(d.reason == "aged" for d in sent[last].drops)
    # once the agent stops looking codes up, a later step ages the schedule too
    final = sent[-1].body["messages"][3]["content"]
    assert final != SCHEDULE and len(final) < len(SCHEDULE) // 2
