"""What a masked MCP content block keeps beside the cells naming the task: the cells naming
its records (ids, names, e-mail addresses, codes, links), within one character per 8 of its
payload — also of a block whose JSON a framework cut short — the real engine on the embedded
Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import ContextEngine
from gateway.context.focus import task_focus
from gateway.context.summarize import KEPT_CHARS, kept_fields
from tests.context.sessions import drops_add_up, fit_each_call, reading_session

TASK = "Send each customer of the spring promotion a delivery survey by e-mail."
TOOLS = [{"type": "function", "function": {"name": "list_customers",
                                           "parameters": {"type": "object"}}}]


def customers(n: int) -> list[dict[str, Any]]:
    return [{"id": 4100 + i, "email": f"cust{i:02d}_x@mcp.com", "status": "active",
             "note": "regular buyer of garden tools and seeds"} for i in range(n)]


def block(payload: Any) -> str:
    text = orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode()
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


def test_a_masked_block_names_its_records_within_an_eighth_of_it() -> None:
    focus = task_focus([{"role": "user", "content": TASK}])
    text = block(customers(30))
    got = kept_fields(text, focus, names=True)
    assert kept_fields(text, focus) == []  # without `names` (a long session): none named
    # no record names a focus term, yet the addresses are kept, in order, within the bound
    assert got[:4] == ["4100", "cust00_x@mcp.com", "4101", "cust01_x@mcp.com"]
    payload = orjson.loads(text)["text"]
    assert sum(len(c) + 2 for c in got) <= max(KEPT_CHARS, len(payload) // 8)
    assert len(got) < 60  # not every record: the bound cuts the rest
    assert not any("garden" in c for c in got)  # not a naming member
    # a cell whose values the model reads anyway is left out
    assert "cust00_x@mcp.com" not in kept_fields(
        text, focus, frozenset({"cust00_x", "mcp.com"}), names=True)
    # nothing for a text that is not a content block, nor without focus terms
    assert kept_fields(payload, focus, names=True) == []
    assert kept_fields(text, frozenset(), names=True) == []


def test_a_block_cut_short_is_read_for_its_records_too() -> None:
    focus = task_focus([{"role": "user", "content": TASK}])
    whole = block(customers(30))
    cut = whole[: len(whole) // 2]  # cut mid-string: `envelope` cannot read it
    got = kept_fields(cut, focus, names=True)
    assert "cust00_x@mcp.com" in got and "cust03_x@mcp.com" in got


async def test_an_aged_listing_masked_by_the_engine_names_its_customers(
    engine_without_young: ContextEngine,
) -> None:
    engine = engine_without_young  # one task: masked as a queue's later tasks are
    messages = reading_session(TASK, [block(customers(12))] + [block(
        [{"page": k, "text": f"Garden tools catalogue page {k}, section {j}."}
         for j in range(20)]) for k in range(1, 36)], "list_customers")
    fits = await fit_each_call(engine, messages, TOOLS, "t-mrec", "masked-records")
    sent = fits[-1].body["messages"]
    first = next(m["content"] for m in sent if m.get("tool_call_id") == "call_000")
    assert first.startswith("[ctxgate: omitted ")  # masked whole
    assert "cust00_x@mcp.com" in first and "cust05_x@mcp.com" in first
    assert len(first) < len(messages[3]["content"]) // 4
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
