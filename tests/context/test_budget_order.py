"""Under a budget the ladder cuts the oldest outputs first (issue 7 item 2, "drop the least
useful first (oldest …)"): a newer output the agent is about to copy from stays whole while
an older one is digested, whatever the rerank score says, so the fit keeps at least what
the plain fit (oldest outputs masked first) keeps. The aging caps keep the score order."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item, parse_request
from gateway.context.stages import base as stage_base
from gateway.context.stages import ladder
from gateway.context.taskclass import task_class
from gateway.context.tokens import TokenCounter

VALUE = "English Entrance Qualification"


def _announcements(course: str, k: int, extra: str = "") -> str:
    rows = [
        {"id": 40 + k * 10 + j, "title": f"Final Exam Announcement - {course}{j}",
         "message": f"The final exam of {course}{j} is in hall {j + k} at {9 + j}:00. "
                    "Bring your student card and a pen; no notes are allowed. " * 3}
        for j in range(6)
    ]
    if extra:
        rows.append({"id": 99, "title": extra, "message": f"See the {extra} result first."})
    return json.dumps({"type": "text", "text": json.dumps(rows, indent=2)})


def _exchange(k: int, name: str, output: str) -> list[dict[str, Any]]:
    cid = f"toolu_{k:03d}"
    return [
        {"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def _canvas_call() -> list[dict[str, Any]]:
    """Toolathlon `canvas-arrange-exam`'s shape: a large early listing, then course
    announcements, one of them (newer) naming the qualification the agent searches next."""
    courses = json.dumps([{"id": 70 + k, "name": f"Course number {k}", "code": f"C{k:03d}"}
                          for k in range(120)], indent=2)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a tool-using agent."},
        {"role": "user", "content": "Fill in the exam schedule table from the announcements."},
        *_exchange(0, "list_courses", courses),
        *_exchange(1, "list_announcements", _announcements("CS", 1)),
        *_exchange(2, "list_announcements", _announcements("DB", 2)),
        *_exchange(3, "list_announcements", _announcements("ENG", 3, VALUE)),
        *_exchange(4, "list_announcements", _announcements("AI", 4)),
        *_exchange(5, "read_file", "Columns: [Course Code, Course Name, Exam Time]"),
    ]
    return msgs


def _ladder_items(
    msgs: list[dict[str, Any]], first: bool = True
) -> tuple[list[Item], stage_base.StageContext]:
    counter = TokenCounter()
    items = parse_request({"messages": msgs}, counter, "o200k_base").items
    # The rerank score the embedder might give: the early listing most like the request,
    # the announcement naming the value least (the score order cuts it first).
    scored = [
        replace(i, score=9.0 if "Course number" in i.text else
                0.0 if VALUE in i.text else 1.0)
        for i in items
    ]
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(scored), query="",
        originals={i.id: i for i in scored}, decisions={}, messages=msgs, first_call=first,
    )
    return scored, ctx


def test_a_budget_cut_takes_the_oldest_output_before_a_newer_one() -> None:
    """A first call's over-budget cut (`arguments=True`) digests the early listing and
    leaves the newer announcement whole, although its score is the lowest: the value
    stays."""
    items, ctx = _ladder_items(_canvas_call())
    total = sum(i.tokens for i in items)
    target = int(0.8 * total)
    kept, made = ladder.cut(items, ctx, "over_budget", target, arguments=True)
    assert sum(i.tokens for i in kept) <= target
    assert any(VALUE in i.text for i in kept if i.kind == "tool_result")
    listing = next(i for i in items if "Course number" in i.text)
    assert listing.id in made  # the oldest output was cut
    newer = next(i for i in items if VALUE in i.text)
    assert newer.id not in made


def test_an_aging_cap_and_a_later_calls_step_keep_the_score_order() -> None:
    """The caps of a class (`history_cap`) and a later call's over-budget step still cut
    the lowest score first: only a first call's cut to a budget goes by age."""
    newer_cut = []
    for first, reason, arguments in ((True, "history_cap", False),
                                     (False, "over_budget", True)):
        items, ctx = _ladder_items(_canvas_call(), first)
        target = int(0.8 * sum(i.tokens for i in items))
        _, made = ladder.cut(items, ctx, reason, target, arguments=arguments)
        newer = next(i for i in items if VALUE in i.text)
        newer_cut.append(newer.id in made)
    assert newer_cut == [True, True]


async def test_a_first_call_under_a_budget_keeps_the_newer_outputs_value(
    engine: ContextEngine,
) -> None:
    """Through the engine at 80% and 60%: in band, the value sent, the log adds up."""
    msgs = _canvas_call()
    body = {"messages": msgs}
    parsed = parse_request(body, engine.counter, "o200k_base")
    for share in (0.8, 0.6):
        budget = int(share * parsed.tokens)
        headers = {"x-ctxgate-session-id": uuid.uuid4().hex,
                   "x-ctxgate-budget-tokens": str(budget)}
        fitted = await engine.fit(
            body, CallContext(tenant="order", trace_id=uuid.uuid4().hex, headers=headers)
        )
        assert budget - 0.1 * parsed.tokens <= fitted.tokens_after <= budget
        sent = json.dumps(fitted.body["messages"])
        assert VALUE in sent
        saved = sum(d.tokens_before - d.tokens_after for d in fitted.drops)
        assert saved == fitted.tokens_before - fitted.tokens_after
