"""A smaller output of the exchange a tail digest takes a large one of goes as its digest on
the same call (`engine._tail_joiners`), and so does one of an exchange before it still
waiting for an aging step (`engine._tail_waiting`): that call changes the cached prefix at
the exchange anyway, so the smaller digest re-sends little, where left whole it waited for
the next aging step. Never alone: an exchange with no large output changes no prefix for
it (bench/README.md, "Session 75, tla75")."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.engine import CallContext, ContextEngine

HEADERS = {"x-ctxgate-task-class": "agent"}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("list_products", "list_orders", "get_weather")]


def _block(records: list[dict[str, Any]]) -> str:
    """`records` as the JSON of an MCP content block (a tool server's payload)."""
    return json.dumps({"type": "text", "text": json.dumps(records, separators=(",", ":"))})


def _products(n: int = 300) -> str:
    """A product listing of some 40 tokens a record (300: 12,000), over `TAIL_MIN_TOKENS`."""
    return _block([{"id": 5000 + i, "name": f"Widget model {i}", "sku": f"WX-{i:04d}-B",
                    "price": round(3.5 * i + 0.99, 2), "stock": (i * 37) % 91,
                    "description": f"A sturdy widget of series {i % 7} for shelf {i % 13}"}
                   for i in range(n)])


def _orders(n: int = 30) -> str:
    """An order listing of some 24 tokens a record (30: 700), under `TAIL_MIN_TOKENS`, over
    `TAIL_JOIN_TOKENS`."""
    return _block([{"order": 81000 + i, "customer": f"Customer {i}", "total": 17.5 * i + 2.25,
                    "status": ("paid", "shipped", "open")[i % 3]} for i in range(n)])


def _run(products: bool = True) -> list[dict[str, Any]]:
    """The agent lists the products (unless not `products`) and the orders in one exchange,
    then calls for the weather, then answers."""
    calls = [("call_p", "list_products", _products())] if products else []
    calls.append(("call_o", "list_orders", _orders()))
    return [
        {"role": "system", "content": "You are a shop assistant agent with tools."},
        {"role": "user", "content": "Report the weather in Oslo and check our shop."},
        {"role": "assistant", "content": "Listing the shop.", "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}
            for cid, name, _ in calls]},
        *({"role": "tool", "tool_call_id": cid, "content": text} for cid, _, text in calls),
        {"role": "assistant", "content": "Now the weather.", "tool_calls": [
            {"id": "call_w", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C, light rain."},
        {"role": "assistant", "content": "Oslo has light rain at 4 C."},
    ]


async def _orders_sent(engine: ContextEngine, messages: list[dict[str, Any]], sid: str,
                       tools: list[dict[str, Any]] = TOOLS) -> list[tuple[str, set[str]]]:
    """The order listing's text as each call of the session forwards it, and the reasons of
    that call's drop events on the message (the tenant, and so the harness's record, is
    the session's name up to its `-record-`: one per test)."""
    out = []
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 2]:
        fitted = await engine.fit({"model": "gpt-4o", "messages": messages[:end], "tools": tools},
                                  CallContext(sid.split("-record-")[0], f"tr-{sid}-{end}",
                                              {**HEADERS, "x-ctxgate-session-id": sid}))
        index, text = next((i, str(m["content"])) for i, m in enumerate(fitted.body["messages"])
                           if m.get("tool_call_id") == "call_o")
        out.append((text, {d.reason for d in fitted.drops if d.message_index == index}))
    return out


async def _record(engine: ContextEngine, messages: list[dict[str, Any]], sid: str) -> None:
    """Six earlier sessions of the agent's harness, each with a tool of its own (a new agent
    each, Toolathlon's MCP servers): the system prompt's record says runs of one task."""
    for k in range(6):
        own = {"type": "function", "function": {"name": f"task_{k}_tool",
                                                "parameters": {"type": "object"}}}
        await _orders_sent(engine, messages, f"{sid}-record-{k}", [*TOOLS, own])


async def test_a_smaller_output_joins_the_large_ones_tail_digest(
    engine: ContextEngine,
) -> None:
    messages = _run()
    await _record(engine, messages, "join-beside")
    (first, _), (after, reasons) = await _orders_sent(engine, messages, "join-beside")
    assert len(first) > 0.9 * len(_orders())  # the call it arrives on reads it whole
    assert len(after) < 0.7 * len(first)  # the large one's tail digest takes it along
    assert "tail_run" in reasons
    assert "81000" in after  # its digest names its records


async def test_a_smaller_output_alone_waits_for_a_step(engine: ContextEngine) -> None:
    """The same exchange without the large listing: no tail digest takes it (the aging
    step of this small call may)."""
    messages = _run(products=False)
    await _record(engine, messages, "join-alone")
    sent = await _orders_sent(engine, messages, "join-alone")
    assert not any("tail_run" in reasons for _, reasons in sent)


def _orders_first() -> list[dict[str, Any]]:
    """The agent lists the orders (some 2,100 tokens), then the products (some 8,000), then
    calls for the weather, then answers: the order listing waits whole while the products
    arrive. Its digest repays what it makes re-sent (`steps.unrepaid`): itself, the turn
    after it and the products' digest."""
    return [
        {"role": "system", "content": "You are a shop assistant agent with tools."},
        {"role": "user", "content": "Report the weather in Oslo and check our shop."},
        {"role": "assistant", "content": "Listing the orders.", "tool_calls": [
            {"id": "call_o", "type": "function",
             "function": {"name": "list_orders", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_o", "content": _orders(90)},
        {"role": "assistant", "content": "Now the products.", "tool_calls": [
            {"id": "call_p", "type": "function",
             "function": {"name": "list_products", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_p", "content": _products(200)},
        {"role": "assistant", "content": "Now the weather.", "tool_calls": [
            {"id": "call_w", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "Oslo: 4 C, light rain."},
        {"role": "assistant", "content": "Oslo has light rain at 4 C."},
    ]


async def test_a_waiting_output_joins_a_later_tail_digest(engine: ContextEngine) -> None:
    messages = _orders_first()
    await _record(engine, messages, "join-waiting")
    sent = await _orders_sent(engine, messages, "join-waiting")
    (first, _), (waited, _), (after, reasons) = sent
    assert len(first) > 0.9 * len(_orders(90))
    assert waited == first  # whole while the products are the newest
    assert len(after) < 0.7 * len(first)  # the products' tail digest takes it along
    assert "tail_run" in reasons
