"""Under a budget, a first call of an agent that writes its calls in its turns (code in
`<code>` tags answered by an `Observation:` user turn, no API tools) is cut as an API agent's
is (issue 7 item 2: digest before dropping; bench/README.md, "Under a budget, a text tool's
latest result digested before an older turn is dropped"): the latest finished exchange's
result is digested before any older turn is dropped, and a value the agent's turn took from
a link is listed as that link, whole, when its source is cut."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item, parse_request
from gateway.context.stages import base as stage_base
from gateway.context.stages import ladder
from gateway.context.taskclass import task_class
from gateway.context.tokens import TokenCounter
from tests.context.sessions import drops_add_up

LINK = "https://transit.example.org/schedules/line-7/stops"


def _turn(k: int, code: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Thought: step {k}.\n<code>\n{code}\n</code>"}


def _page(title: str, rows: int) -> str:
    return "Observation:\n" + "\n".join(
        f"{title} row {r}: the train leaves platform {r % 4} at {6 + r // 4}:{r % 60:02d} "
        "and stops at every station on the way; see the timetable for the exceptions."
        for r in range(rows)
    )


def _text_call() -> list[dict[str, Any]]:
    """Two small search results, a large page the agent read last (the latest finished
    exchange), then the open exchange: a turn and the result the call ends on."""
    search = "Observation:\n" + "\n".join(
        f"{k}. [Line 7 stops, part {k}]({LINK if k == 0 else f'https://example.org/{k}'})"
        " - every stop of the line, with its zone and its parking." for k in range(12)
    )
    return [
        {"role": "system", "content": "You are an agent that acts in Python code."},
        {"role": "user", "content": "New task:\nHow many stops does line 7 have?"},
        _turn(1, 'print(web_search(query="line 7 stops"))'),
        {"role": "user", "content": search},
        _turn(2, f'print(visit_webpage(url="{LINK}"))'),
        {"role": "user", "content": _page("Stops", 12)},
        _turn(3, 'print(visit_webpage(url="https://transit.example.org/timetable"))'),
        {"role": "user", "content": _page("Timetable", 160)},
        _turn(4, 'print(final_answer("12"))'),
        {"role": "user", "content": "Observation:\nNone"},
    ]


def _ladder_items(msgs: list[dict[str, Any]]) -> tuple[list[Item], stage_base.StageContext]:
    counter = TokenCounter()
    items = parse_request({"messages": msgs}, counter, "o200k_base").items
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=msgs, first_call=True,
    )
    return items, ctx


def test_a_text_tools_latest_result_is_a_result() -> None:
    items, _ = _ladder_items(_text_call())
    by_message = {i.message_index: i for i in items}
    assert ladder.result(by_message[7]) and ladder.result(by_message[3])
    assert not ladder.result(by_message[6])  # the agent's own turn
    assert not ladder.result(by_message[1])  # the task statement
    chat = parse_request({"messages": [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "What is a stop?"}, {"role": "user", "content": "Thanks"},
    ]}, TokenCounter(), "o200k_base").items
    assert not any(ladder.result(i) for i in chat)  # no call written: a person's turns


def test_a_budget_cut_digests_a_text_tools_latest_result_before_it_drops_a_turn() -> None:
    """At 80% the large page the agent read last is most of what can be cut: it is digested
    before any older turn is dropped, so every older turn is still sent. Before, a text
    tool's result was no `tool_result`: every older turn went down every rung, dropped
    last, before the page was touched."""
    items, ctx = _ladder_items(_text_call())
    target = int(0.8 * sum(i.tokens for i in items))
    kept, made = ladder.cut(items, ctx, "over_budget", target, arguments=True)
    assert sum(i.tokens for i in kept) <= target
    assert not [i.message_index for i in items if ladder.rung(made.get(i.id)) == ladder.DROP]
    page = max(items, key=lambda i: i.tokens)
    assert page.message_index == 7 and page.id in made
    assert {i.message_index for i in kept} == set(range(10))


async def test_with_no_older_turn_the_latest_result_is_not_cut_first(
    engine: ContextEngine,
) -> None:
    """The task statement and one exchange only (an agent's first search and the harness's
    prompt after it): nothing older to drop, so the result and the agent's own turn go by
    age and score as before, the turn's prose first; digested first, the search result lost
    the file the next turn names (AutoCodeRover at 60%)."""
    prose = " ".join(f"I look for the stop list of line {k} in the timetable." for k in range(40))
    msgs = [
        {"role": "system", "content": "You are an agent that acts in Python code."},
        {"role": "user", "content": "New task:\nHow many stops does line 7 have?"},
        _turn(1, f"# {prose}\nprint(visit_webpage(url=\"{LINK}\"))"),
        {"role": "user", "content": _page("Stops", 12)},
        {"role": "user", "content": "Now answer with the number of stops."},
    ]
    body = {"messages": msgs}
    parsed = parse_request(body, engine.counter, "o200k_base")
    turn = next(i for i in parsed.items if i.message_index == 2)
    budget = parsed.tokens - turn.tokens // 3
    fitted = await engine.fit(body, CallContext("t-text-results", uuid.uuid4().hex, {
        "x-ctxgate-session-id": uuid.uuid4().hex, "x-ctxgate-budget-tokens": str(budget),
    }))
    assert fitted.tokens_after <= budget
    sent = fitted.body["messages"]
    assert sent[3] == msgs[3] and sent[2] != msgs[2]
    assert drops_add_up(fitted)


def test_a_mentions_line_names_a_link_whole_on_a_budgets_cut() -> None:
    """The agent's turn visits a link a search result listed; its summary leaves the link
    out (read above), and the search result is then masked: the mask lists the value the
    turn leaned on as the link the agent typed, scheme and all (a value list splits it at
    `:`), on a first call's cut to a budget; other cuts list it as before."""
    for links in (True, False):
        items, ctx = _ladder_items(_text_call())
        cut = ladder.Ladder(items, ctx, links=links)
        search = next(p for p, i in enumerate(items) if i.message_index == 3)
        turn = next(p for p, i in enumerate(items) if i.message_index == 4)
        cut.step(turn, 1, "over_budget", lambda _: True, 10**6)
        assert LINK not in str(cut.current[turn].text)  # left out: read above
        cut.step(search, ladder.MASK, "over_budget", lambda _: True, 10**6)
        masked = cut.current[search]
        assert masked is not None and masked.text.startswith("[ctxgate: omitted ")
        assert (LINK in masked.text) is links
        assert LINK.split("://", 1)[1] in masked.text


async def test_a_text_call_under_a_budget_keeps_its_turns_and_lands_in_band(
    engine: ContextEngine,
) -> None:
    """Through the engine, at 80% and 60%: in the band, every older turn sent, the link
    the agent visited still there, the drop log adding up."""
    body = {"messages": _text_call()}
    tokens = parse_request(body, engine.counter, "o200k_base").tokens
    for share in (0.8, 0.6):
        budget = int(share * tokens)
        fitted = await engine.fit(body, CallContext("t-text-results", uuid.uuid4().hex, {
            "x-ctxgate-session-id": uuid.uuid4().hex,
            "x-ctxgate-budget-tokens": str(budget),
        }))
        assert budget - 0.1 * tokens <= fitted.tokens_after <= budget
        sent = fitted.body["messages"]
        assert len(sent) == len(body["messages"])
        assert any(LINK in str(m["content"]) for m in sent)
        assert drops_add_up(fitted)
