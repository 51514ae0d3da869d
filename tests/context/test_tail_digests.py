"""A run's large tool output goes as its digest on the call where it stops being the newest
(`engine._tail_digests`): the rewrite lands at the tail of what the last call sent, so it
re-sends only itself, where an aging step reaches it calls later, re-sending all after it,
or never on a short run. Not one the agent's latest turn drew a value from (bench/README.md,
"Session 68, tla68"). Only for an agent whose record says its sessions are runs of one task
(`steps.runs_of_one`): a queue's first task is such a run, but a digest there moves every
later step of the queue (bench/README.md, "Session 71, tla71", "Session 72, tla72")."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.engine import CallContext, ContextEngine

HEADERS = {"x-ctxgate-task-class": "agent"}
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("list_products", "get_weather")]


def _listing() -> str:
    """A product listing of some 12,000 tokens, sent as the JSON of its MCP content block (a
    tool server's payload): a call over `early_max_tokens`, whose steps are weighed
    (`steps.young`)."""
    return json.dumps({"type": "text", "text": _records()})


def _records() -> str:
    return json.dumps([{"id": 5000 + i, "name": f"Widget model {i}", "sku": f"WX-{i:04d}-B",
                        "price": round(3.5 * i + 0.99, 2), "stock": (i * 37) % 91,
                        "description": f"A sturdy widget of series {i % 7} for shelf {i % 13}"}
                       for i in range(300)], separators=(",", ":"))


def _run(second: str, listing: str = "") -> list[dict[str, Any]]:
    """The agent lists the products (`listing`, the content block by default), then calls
    `second` (its arguments JSON), then answers."""
    listing = listing or _listing()
    return [
        {"role": "system", "content": "You are a shop assistant agent with tools."},
        {"role": "user", "content": "Report the weather in Oslo and check our products."},
        {"role": "assistant", "content": "Listing the products.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "list_products", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": listing},
        {"role": "assistant", "content": "Now the weather.", "tool_calls": [
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": second}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "Oslo: 4 C, light rain."},
        {"role": "assistant", "content": "Oslo has light rain at 4 C."},
    ]


async def _listing_sent(
    engine: ContextEngine, messages: list[dict[str, Any]], sid: str,
    tools: list[dict[str, Any]] = TOOLS,
) -> list[str]:
    """The listing's text as each call of the session forwards it (the tenant, and so the
    agent's record, is the session's name up to its `-record-`: one per test)."""
    out = []
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 3]:
        fitted = await engine.fit({"model": "gpt-4o", "messages": messages[:end], "tools": tools},
                                  CallContext(sid.split("-record-")[0], f"tr-{sid}-{end}",
                                              {**HEADERS, "x-ctxgate-session-id": sid}))
        out.append(next(str(m["content"]) for m in fitted.body["messages"]
                        if m.get("tool_call_id") == "call_1"))
    return out


async def _record(engine: ContextEngine, messages: list[dict[str, Any]], sid: str) -> None:
    """Six earlier sessions of the agent's harness, each `messages` call by call: its record.
    Each task brings a tool of its own (Toolathlon's MCP servers), so each is a new agent
    (`classify.agent_fingerprint`): the record is the system prompt's."""
    for k in range(6):
        own = {"type": "function", "function": {"name": f"task_{k}_tool",
                                                "parameters": {"type": "object"}}}
        await _listing_sent(engine, messages, f"{sid}-record-{k}", [*TOOLS, own])


def _queue() -> list[dict[str, Any]]:
    """The agent's session of a queue of tasks: `_run`, then 30 more calls on later tasks
    (32 in all, the record's last mark)."""
    messages = _run('{"city": "Oslo"}')
    for k in range(15):
        messages += [
            {"role": "user", "content": f"Next task {k}: the weather in city {k}."},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": f"call_q{k}", "type": "function",
                 "function": {"name": "get_weather", "arguments": f'{{"city": "c{k}"}}'}}]},
            {"role": "tool", "tool_call_id": f"call_q{k}", "content": f"c{k}: 9 C, dry."},
            {"role": "assistant", "content": f"City {k} is dry at 9 C."},
        ]
    return messages


async def test_a_large_output_goes_as_its_digest_once_it_is_not_the_newest(
    engine: ContextEngine,
) -> None:
    messages = _run('{"city": "Oslo"}')
    first, after = await _listing_sent(engine, messages, "tail-read-once-record-first")
    assert after == first  # no record yet: the base's path
    await _record(engine, messages, "tail-read-once")  # runs of one task each
    first, after = await _listing_sent(engine, messages, "tail-read-once")
    assert len(first) > 0.9 * len(_listing())  # the call it arrives on reads it whole
    assert len(after) < 0.5 * len(first)  # the next goes with its digest
    assert "5000" in after  # which names its records


async def test_a_queue_agents_output_stays_whole(engine: ContextEngine) -> None:
    """The same run, of an agent whose earlier sessions each went on to later tasks past the
    record's last mark (a queue's): its first task is left to the steps."""
    await _record(engine, _queue(), "tail-queue")
    first, after = (await _listing_sent(engine, _run('{"city": "Oslo"}'), "tail-queue"))
    assert len(first) > 0.9 * len(_listing())
    assert after == first


async def test_an_output_the_agent_draws_from_stays_whole(engine: ContextEngine) -> None:
    messages = _run('{"city": "Oslo", "sku": "WX-0042-B"}')
    await _record(engine, messages, "tail-drawn")
    first, after = await _listing_sent(engine, messages, "tail-drawn")
    assert after == first


async def test_a_plain_text_output_stays_whole(engine: ContextEngine) -> None:
    """The same records as plain text, not a content block: a file view or a log a coding
    agent reads again is left to the steps."""
    messages = _run('{"city": "Oslo"}', _records())
    await _record(engine, messages, "tail-plain")
    first, after = await _listing_sent(engine, messages, "tail-plain")
    assert after == first
