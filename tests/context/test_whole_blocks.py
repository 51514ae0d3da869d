"""A short MCP content block of text (a requirements file, a form's questions, an e-mail)
is not digested: it goes as sent until a batch masks the digests, which masks it with them
(`compress.whole_block_tokens`, `steps.whole_block`) — the real engine on the embedded
Redis, the shipped configuration."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Clock, Item
from gateway.context.steps import ages_out, whole_block
from gateway.context.taskclass import CompressOptions
from tests.context.sessions import drops_add_up

TASK = "Build the feedback form the requirements file describes, then mail every customer."
TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
QUESTIONS = [f"Question {k}: How would you rate the {topic} of your last order?"
             for k, topic in enumerate(["packaging", "delivery speed", "product quality",
                                        "checkout page", "customer service", "return policy",
                                        "price level", "gift wrapping", "tracking e-mails",
                                        "invoice layout"], 1)]


def block(text: str) -> str:
    return orjson.dumps({"type": "text", "text": text, "annotations": None}).decode()


DOC = block("# Feedback form requirements\n\n" + "\n".join(
    f"- **Question:** {q}\n- **Required:** Yes" for q in QUESTIONS))


def page(k: int) -> str:
    """A long text page (over the bound): digested as before."""
    return block("\n".join(f"Order {1000 * k + i}: shipped to warehouse {k}-{i} on day {i}, "
                           f"carrier batch {k * 7 + i}, weight {i + 3} kg" for i in range(60)))


def item(text: str, tokens: int, turns: int = 5) -> Item:
    return Item(id="m1", kind="tool_result", unit="u1", message_index=3, segment=0, text=text,
                tokens=tokens, fixed_tokens=0, turn=1, pinned=False, rewritable=True,
                clock=Clock(turns))


def test_which_results_are_kept_whole() -> None:
    opts = CompressOptions(kinds=("tool_result",), min_tokens=25, whole_block_tokens=600,
                           whole_block_turns=60)
    assert whole_block(item(DOC, 300), opts) and not ages_out(item(DOC, 300), opts)
    assert not whole_block(item(DOC, 700), opts)  # over the bound: digested
    assert not whole_block(item(DOC, 300, turns=60), opts)  # a long session: digested
    # a block whose payload is JSON (records, an acknowledgement), or no block: digested
    assert not whole_block(item(block('{"id": 7, "status": "sent"}'), 300), opts)
    assert not whole_block(item(orjson.loads(DOC)["text"], 300), opts)
    assert ages_out(item(orjson.loads(DOC)["text"], 300), opts)
    off = CompressOptions(kinds=("tool_result",), min_tokens=25)
    assert not whole_block(item(DOC, 300), off) and ages_out(item(DOC, 300), off)


async def test_a_short_text_block_goes_whole_until_the_digests_are_masked(
    engine: ContextEngine,
) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": TASK},
    ]
    for k in range(34):
        call = f"call_{k:03d}"
        name = "form_requirements.md" if k == 0 else f"orders_{k}.txt"
        messages.append({"role": "assistant", "content": f"Reading {name}.", "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "read_page", "arguments": f'{{"path": "{name}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": DOC if k == 0 else page(k)})
    messages.append({"role": "assistant", "content": "Done reading."})
    sent: dict[int, list[dict[str, Any]]] = {}
    fits = []
    for end in range(3, len(messages)):
        if messages[end]["role"] == "assistant":
            fit = await engine.fit(
                {"model": "gpt-4o", "messages": messages[:end], "tools": TOOLS},
                CallContext("t-whole", f"tr-whole-{end}", {"x-ctxgate-session-id": "whole"}))
            fits.append(fit)
            sent[(end - 2) // 2] = fit.body["messages"]

    def result(turn: int, call: str) -> str:
        return str(next(m["content"] for m in sent[turn] if m.get("tool_call_id") == call))

    # ten turns on, the pages read next to it are digests; the short document goes whole
    assert len(result(10, "call_001")) < len(page(1)) / 2
    assert orjson.loads(result(10, "call_000"))["text"] == orjson.loads(DOC)["text"]
    for turn in range(1, 20):
        assert all(q in result(turn, "call_000") for q in QUESTIONS), turn
    # once the digests are masked, it is masked with them
    assert result(33, "call_000").startswith("[ctxgate: omitted")
    assert result(33, "call_001").startswith("[ctxgate: omitted")
    assert all(drops_add_up(fit) for fit in fits)  # the drop log still adds up
