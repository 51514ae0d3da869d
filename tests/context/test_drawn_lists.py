"""Lists the agent works through one record a call: its own compiled list (a turn's prose),
and a short file of records (a CSV read as an MCP content block), stay while it draws from
them; a masked CSV block names the cells that tell its rows apart; a digest's value list
ranks kebab-case names (`lueyang-dev`) with snake_case ones. The real engine on the
embedded Redis, the shipped configuration (gateway/context/drawing.py, stages/compress.py,
summarize.py)."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.drawing import drawn_from
from gateway.context.engine import ContextEngine
from gateway.context.focus import task_focus
from gateway.context.items import Item
from gateway.context.summarize import kept_fields, summarize
from tests.context.sessions import drops_add_up, fit_each_call
from tests.context.test_whole_blocks import TOOLS, page

FIRST = ["Alice", "Angela", "Charles", "Debra", "Emily", "Jeffrey", "Lisa", "Martha",
         "Michael", "Nancy", "Rebecca", "Samuel", "Tracy", "Shirley", "Gregory"]
LAST = ["Jackson", "Moore", "Castillo", "Smith", "James", "Davis", "Morales", "Diaz",
        "Robinson", "Gray", "Stewart", "Young", "Reyes", "Collins", "Thomas"]
PEOPLE = [f"{f} {s}" for f, s in zip(FIRST, LAST, strict=True)]


def _item(i: int, kind: str, text: str) -> Item:
    return Item(id=f"m{i}", kind=kind, unit=f"u{i}", message_index=i, segment=0,  # type: ignore[arg-type]
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=i, pinned=False,
                rewritable=True)


def _call(k: int, name: str, args: dict[str, Any], content: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call_{k:03d}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}


def _block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def test_a_list_the_agent_compiled_itself_is_drawn_from() -> None:
    """The agent read each record in a result, wrote them out as a numbered list in its own
    turn, then re-types one record a call: its list is where it reads them now."""
    resumes = "\n".join(f"Name: {p}\nSchool: School of {p.split()[1]}" for p in PEOPLE)
    plan = "Candidates:\n" + "\n".join(
        f"{k + 1}. **{p}** - School: School of {p.split()[1]}" for k, p in enumerate(PEOPLE))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Add every candidate to the HR database."},
        _call(0, "read_resumes", {}), {"role": "tool", "content": resumes},
        _call(1, "add_page", {"name": PEOPLE[0]}, plan), {"role": "tool", "content": "ok"},
        _call(2, "add_page", {"name": PEOPLE[1]}), {"role": "tool", "content": "ok"},
        _call(3, "add_page", {"name": PEOPLE[2]}), {"role": "tool", "content": "ok"},
    ]
    sources = [_item(2, "tool_result", resumes), _item(3, "tool_call", plan)]
    drawn = drawn_from(sources, messages, 3)
    assert "m3" in drawn  # the agent's own list
    assert "m2" in drawn  # the result it read them in keeps its credit, as before
    # a short remark restating one value is not a list
    remark = _item(3, "tool_call", f"Adding {PEOPLE[1]} and {PEOPLE[2]} next.")
    assert "m3" not in drawn_from([sources[0], remark], messages, 3)
    # a list written before the result the value was read in is not where it was read
    late = [_item(1, "assistant", plan), _item(2, "tool_result", resumes)]
    assert drawn_from(late, messages, 3) == {"m2"}



def test_a_list_the_user_restated_is_not_the_agents_source() -> None:
    """A customer-service agent summarises the orders for the user in a long turn; the user
    answers with the orders and items to change; the calls that follow copy them from the
    user's message, newer than the agent's summary: the summary is not credited."""
    orders = [f"#W{4000000 + 1111 * k}" for k in range(6)]
    records = "\n".join(f"order {o}: status delivered, card credit_card_{k}" for k, o in
                        enumerate(orders))
    summary = "Your orders:\n" + "\n".join(
        f"{k + 1}. {o} - delivered, paid with credit_card_{k}" for k, o in enumerate(orders))
    reply = f"Please exchange the items of {orders[0]}, {orders[1]} and {orders[2]}."
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Help me with my orders."},
        _call(0, "get_orders", {}), {"role": "tool", "content": records},
        {"role": "assistant", "content": summary},
        {"role": "user", "content": reply},
        _call(1, "exchange", {"order_id": orders[0]}), {"role": "tool", "content": "ok"},
        _call(2, "exchange", {"order_id": orders[1]}), {"role": "tool", "content": "ok"},
        _call(3, "exchange", {"order_id": orders[2]}), {"role": "tool", "content": "ok"},
    ]
    sources = [_item(2, "tool_result", records), _item(3, "assistant", summary)]
    assert drawn_from(sources, messages, 3) == {"m2"}
    # the same turns without the user's message in between: the agent's list is its source
    del messages[4]
    sources = [_item(2, "tool_result", records), _item(3, "assistant", summary)]
    assert drawn_from(sources, messages, 3) == {"m2", "m3"}

def _roster() -> str:
    return "user_id,name,email,state\r\n" + "".join(
        f"{170 + k},{p},{p.split()[0].lower()}@example.com,active\r\n"
        for k, p in enumerate(PEOPLE))


def test_a_masked_csv_block_names_its_rows() -> None:
    focus = task_focus([{"role": "user", "content": "Grade every student's homework."}])
    got = kept_fields(_block(_roster()), focus, names=True)
    assert got[:4] == ["170", "Alice Jackson", "alice@example.com", "171"]
    assert "active" not in got  # the same on every row: tells no row apart
    # not a table: a line with another count of commas
    ragged = _roster() + "one,more\r\n"
    assert "Alice Jackson" not in kept_fields(_block(ragged), focus, names=True)


def test_a_digest_lists_kebab_case_names_with_snake_case_ones() -> None:
    branches = [f"{p.split()[0].lower()}-dev" for p in PEOPLE[:5]] + [
        f"{p.split()[0].lower()}_dev" for p in PEOPLE[5:10]] + [
        p.split()[1].lower() for p in PEOPLE[10:]]
    text = _block(orjson.dumps([{"name": b, "sha": f"{k:040x}", "protected": False}
                                for k, b in enumerate(branches)]).decode())
    digest = summarize(text, "tool_result", 3)
    for name in branches[:10]:  # kebab and snake names before the plain words
        assert name in digest, name


ROSTER = [f"{f} {s}" for s in LAST[:3] for f in FIRST]  # 45 students, ~400 tokens


def _roster_session(search: bool) -> list[dict[str, Any]]:
    """The roster read first (a short text block, kept whole), then 33 long pages, each read
    by a call that searches one student of the roster by name (`search`) or by page only.
    One tool, `read_page`, as in test_whole_blocks: calls of `read_file` with paths class the
    session `coding_agent`, whose aging digests the roster (no `whole_block_tokens`) five
    turns on, so the rule under test never decides."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "Enroll every student of the class roster in the course."},
        _call(0, "read_page", {"page": "class roster"}),
        {"role": "tool", "tool_call_id": "call_000", "content": _block(
            "# Class roster\n\n" + "\n".join(f"- {p}" for p in ROSTER))},
    ]
    for k in range(1, 34):
        args = {"page": "orders", "name": ROSTER[k]} if search else {"page": f"orders {k}"}
        messages.append(_call(k, "read_page", args))
        messages.append({"role": "tool", "tool_call_id": f"call_{k:03d}",
                         "content": _block(page(k))})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def test_a_short_block_the_agent_searches_from_stays_out_of_the_mask_batch(
    engine: ContextEngine,
) -> None:
    """A roster kept whole (`whole_block`) is masked with the digests' batch ten turns on;
    one the agent is searching one name a call waits for a later batch
    (`compress._drawn_blocks`): the names it searches next are in it."""
    last: dict[bool, list[dict[str, Any]]] = {}
    for search in (False, True):
        fits = await fit_each_call(engine, _roster_session(search), TOOLS, "t-roster",
                                   f"roster-{search}")
        last[search] = fits[-1].body["messages"]
        assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up

    def result(search: bool, call: str) -> str:
        return str(next(m["content"] for m in last[search] if m.get("tool_call_id") == call))

    # the pages read beside it are masked in both sessions
    assert result(False, "call_001").startswith("[ctxgate: omitted")
    assert result(True, "call_001").startswith("[ctxgate: omitted")
    # the roster nobody searches goes with them; the one searched stays whole
    assert result(False, "call_000").startswith("[ctxgate: omitted")
    assert all(p in result(True, "call_000") for p in ROSTER)
