"""Under a budget the ladder cuts the oldest outputs first (issue 7 item 2, "drop the least
useful first (oldest …)"): a newer output the agent is about to copy from stays whole while
an older one is digested, whatever the rerank score says, so the fit keeps at least what
the plain fit (oldest outputs masked first) keeps. The results of one turn (a batch of
parallel tool calls) are all of one age: among them the lowest score goes first. The latest
exchange's tool outputs are digested before any older unit is dropped. The aging caps keep
the score order."""

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
from tests.context.sessions import drops_add_up

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
        assert drops_add_up(fitted)


ITEM = "6817146515"
POLICY = "You are a retail support agent. " + " ".join(
    f"Rule {k}: an exchange of item {k} needs the order to be delivered and the user to "
    f"confirm the new item and payment method {k}." for k in range(120)
)


def _order(k: int, first_item: str) -> str:
    items = [
        {"name": name, "product_id": f"{k}{j}04{j}1{k}9{j}",
         "item_id": first_item if j == 0 else f"{k}{j}7{j}1{k}4{j}5{k}",
         "price": 100 + 7 * j + k, "options": {"color": "black", "size": "M"}}
        for j, name in enumerate(["T-Shirt", "Jacket", "Running Shoes", "Water Bottle"])
    ]
    return json.dumps({
        "order_id": f"#W{k}0{k}1{k}2", "user_id": "mei_kovacs_8020", "status": "delivered",
        "address": {"address1": f"{k}17 Hillcrest Drive", "city": "Denver", "zip": f"8020{k}"},
        "items": items,
        "payment_history": [{"transaction_type": "payment", "amount": 412.5 + k,
                             "payment_method_id": f"credit_card_{k}4{k}9"}],
    }, indent=1)


def _batch_call() -> list[dict[str, Any]]:
    """tau2 retail's shape (`trial0-task027`): a long pinned policy, a user lookup, then one
    turn of four parallel order lookups; the first order holds the item the agent exchanges
    next (the most like the request of the four)."""
    calls = [{"id": f"c{k}", "type": "function", "function": {
        "name": "get_order_details", "arguments": json.dumps({"order_id": f"#W{k}0{k}1{k}2"})}}
        for k in range(1, 5)]
    return [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": "Hi, I want to exchange a T-shirt from one of my orders."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function",
             "function": {"name": "find_user", "arguments": '{"name": "Mei Kovacs"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": json.dumps(
            {"user_id": "mei_kovacs_8020", "orders": [f"#W{k}0{k}1{k}2" for k in range(1, 5)]})},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{k}",
           "content": _order(k, ITEM if k == 1 else f"{k}1{k}2{k}3{k}4{k}5")}
          for k in range(1, 5)),
        {"role": "assistant", "content": "Your first order holds the T-Shirt. Which size?"},
        {"role": "user", "content": "Size L, same color please."},
    ]


def test_one_turns_results_go_lowest_score_first() -> None:
    """A first call's budget cut at 80%: the older turn's output is masked first although
    its score is the highest; then, of the batch's four results (one age), the lowest
    scores are masked and the first, the one the agent acts on, is only digested: its item
    id stays. In position order (the first result first) it was masked and the id lost."""
    msgs = _batch_call()
    counter = TokenCounter()
    items = parse_request({"messages": msgs}, counter, "o200k_base").items
    scores = {3: 0.9, 5: 0.70, 6: 0.64, 7: 0.63, 8: 0.67}
    items = [replace(i, score=scores.get(i.message_index, 0.4)) for i in items]
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=msgs, first_call=True,
    )
    target = int(0.8 * sum(i.tokens for i in items))
    kept, made = ladder.cut(items, ctx, "over_budget", target, arguments=True)
    assert sum(i.tokens for i in kept) <= target
    assert any(ITEM in i.text for i in kept)
    rungs = {i.message_index: ladder.rung(made.get(i.id)) for i in items}
    assert rungs[3] == ladder.MASK  # the older turn first, whatever its score
    assert rungs[7] == ladder.MASK  # the batch's lowest score
    assert rungs[5] < ladder.MASK  # the batch's first result digested, not masked


RESERVATIONS = ("NM1VX1", "KC18K6", "H8Q05L")
AIRLINE_POLICY = "# Airline Agent Policy\n" + " ".join(
    f"Rule {k}: a reservation in basic economy cannot be modified; a change of flight {k} "
    f"needs the user's confirmation and a payment method on file." for k in range(60)
)


def _reservation(rid: str, k: int) -> str:
    return json.dumps({
        "reservation_id": rid, "user_id": "sophia_silva_7557", "origin": "MSP",
        "destination": "EWR", "cabin": "economy", "flights": [
            {"flight_number": f"HAT{100 + 10 * k + j}", "date": f"2024-05-{20 + j}",
             "origin": "MSP", "destination": "EWR", "price": 150 + j} for j in range(2)],
        "passengers": [{"first_name": "Sophia", "last_name": "Silva", "dob": "1957-10-05"}],
        "payment_history": [{"payment_id": f"credit_card_{k}4{k}9", "amount": 300 + k}],
    }, indent=1)


def _flights(n: int, origin: str) -> str:
    return json.dumps([
        [{"flight_number": f"HAT{(7 * j) % 300:03d}", "origin": origin, "destination": "DTW",
          "scheduled_departure_time_est": f"{6 + j % 12:02d}:00:00", "status": "available",
          "available_seats": {"basic_economy": j % 9, "economy": j % 7, "business": j % 5},
          "prices": {"basic_economy": 90 + j, "economy": 150 + j, "business": 400 + j}},
         {"flight_number": f"HAT{(11 * j) % 300:03d}", "origin": "DTW", "destination": "EWR",
          "scheduled_departure_time_est": f"{9 + j % 12:02d}:30:00", "status": "available",
          "available_seats": {"basic_economy": j % 8, "economy": j % 6, "business": j % 4},
          "prices": {"basic_economy": 80 + j, "economy": 140 + j, "business": 380 + j}}]
        for j in range(n)
    ], indent=1)


def _airline_call() -> list[dict[str, Any]]:
    """tau-bench airline `trial3-task33`'s shape: a pinned policy, the user's reservations
    looked up one by one, the agent's own summary naming their ids, a cancellation, then a
    large one-stop flight search (the newest finished output, most of the call) and the
    exchange still open."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": AIRLINE_POLICY},
        {"role": "user", "content": "Hi! I'd like to make some changes to my flight reservations."},
        {"role": "assistant", "content": "Sure. Could you give me your user id?"},
        {"role": "user", "content": "My user id is sophia_silva_7557."},
    ]
    for k, rid in enumerate(RESERVATIONS):
        msgs += _exchange(10 + k, "get_reservation_details", _reservation(rid, k))
    msgs += [
        {"role": "assistant", "content": "Here are your reservations:\n" + "\n".join(
            f"{k + 1}. **Reservation {rid}**: MSP to EWR, economy, two flights."
            for k, rid in enumerate(RESERVATIONS))
            + "\nWhich of them would you like to change?"},
        {"role": "user", "content": "Could you check one-stop flights from MSP for the first "
                                    "two, and direct flights for the last?"},
        *_exchange(20, "search_onestop_flight", _flights(40, "MSP")),
        *_exchange(21, "search_direct_flight", _flights(2, "JFK")),
    ]
    return msgs


def test_a_budget_cut_digests_the_latest_output_before_it_drops_a_turn() -> None:
    """A first call's cut at 60% where the newest finished output (a large flight search)
    is most of what can be cut: it is digested before any older unit is dropped, so every
    older turn is still sent (masked or digested) and the reservations' ids with them.
    Before, the latest exchange was cut only once every older unit was dropped: the turns
    went, ids and all, and the search was sent digested."""
    msgs = _airline_call()
    counter = TokenCounter()
    items = parse_request({"messages": msgs}, counter, "o200k_base").items
    items = [replace(i, score=0.5) for i in items]
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=msgs, first_call=True,
    )
    target = int(0.6 * sum(i.tokens for i in items))
    kept, made = ladder.cut(items, ctx, "over_budget", target, arguments=True)
    assert sum(i.tokens for i in kept) <= target
    dropped = {i.message_index for i in items if ladder.rung(made.get(i.id)) == ladder.DROP}
    assert not dropped
    search = max(items, key=lambda i: i.tokens if i.kind == "tool_result" else 0)
    assert search.id in made
    sent = " ".join(i.text for i in kept)
    assert all(rid in sent for rid in RESERVATIONS)
