"""The history cap on a queue's later task (an agent calling its tools through the API)
cuts the earlier tasks' exchanges, down to dropping them, before it cuts any of the current
task's: the page id of a listing the agent writes back to next stays whole, where by score
alone the cap digested the listing first (bench/README.md, "Toolathlon queues' recall, part
thirty")."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gateway.context.items import Item, parse_request
from gateway.context.stages import base as stage_base
from gateway.context.stages import ladder
from gateway.context.taskclass import task_class
from gateway.context.tokens import TokenCounter

PAGE = "28ed1b2a-54b2-8166-9111-f2716bce3777"


def _exchange(k: int, output: str, arguments: str = "{}") -> list[dict[str, Any]]:
    cid = f"call_{k:03d}"
    return [
        {"role": "assistant", "content": f"Step {k}.", "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": "query", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": cid, "content": output},
    ]


def _script(k: int) -> str:
    """A done task's call: a script as its arguments (the cap does not cut arguments), a
    short output (nothing left to digest)."""
    lines = [f"total_{j} = sum(row['amount'] for row in sales_{k} if row['week'] == {j})"
             for j in range(12)]
    return json.dumps({"code": "\n".join(lines)})


def _rows(task: str, k: int) -> str:
    return json.dumps([{"row": j, "task": task, "note": f"reading {k}-{j} of the {task} run"}
                       for j in range(25)])


def _queue() -> list[dict[str, Any]]:
    """A first task of 12 tool-calling turns (scripts) and its answer, then a later task's
    statement and three exchanges, the middle one the listing with the page id."""
    later = ("Fetch the monthly prices, analyse the spread and write the results into the two "
             "databases of the Notion page. " * 3)
    listing = json.dumps({"object": "list", "results": [
        {"object": "page",
         "id": PAGE if j == 7 else f"28ed1b2a-54b2-81{j:02d}-9111-f2716bce37{j:02d}",
         "properties": {"Month": f"2024-{j + 1:02d}", "Spread": f"{j * 0.37:.2f}",
                        "Note": f"row {j} of the spread table, to be filled in"}}
        for j in range(12)]})
    return [
        {"role": "system", "content": "You are a tool-using agent."},
        {"role": "user", "content": "Summarise the sales of the shop for the last quarter."},
        *(m for k in range(12) for m in _exchange(k, f"=== STDOUT === done {k}", _script(k))),
        {"role": "assistant", "content": "The quarter's sales are summarised."},
        {"role": "user", "content": later},
        *_exchange(20, _rows("prices", 20)),
        *_exchange(21, listing),
        *_exchange(22, _rows("spread", 22)),
    ]


def _items(msgs: list[dict[str, Any]]) -> tuple[list[Item], stage_base.StageContext]:
    counter = TokenCounter()
    items = parse_request({"messages": msgs}, counter, "o200k_base").items
    # scored as a rerank might: the earlier task's outputs above the listing
    scored = [replace(i, score=0.0 if PAGE in i.text else 1.0) for i in items]
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(msgs), query="",
        originals={i.id: i for i in scored}, decisions={}, messages=msgs, first_call=False,
    )
    return scored, ctx


def test_the_later_tasks_listing_stays_while_the_earlier_task_is_cut() -> None:
    msgs = _queue()
    items, ctx = _items(msgs)
    assert ladder.later_start(items) == 27  # the later task's statement
    target = int(0.5 * sum(i.tokens for i in items))
    kept, made = ladder.cut(items, ctx, "history_cap", target)
    assert sum(i.tokens for i in kept) <= target
    listing = next(i for i in items if PAGE in i.text)
    assert listing.id not in made
    assert any(PAGE in i.text for i in kept)
    # none of the current task's outputs is cut: the earlier task's exchanges went first
    assert all(i.message_index < 27 for i in items if i.id in made)


def test_a_first_task_has_no_later_start() -> None:
    items, _ = _items(_queue()[:27])
    assert ladder.later_start(items) == -1
