"""An agent harness that resends its memory as chat messages whose contents are lists of
text parts, with a text tool history: code in `<code>…</code>` tags, the harness's record of
each call as a Python repr (`Calling tools:\\n[{'id': 'call_2', 'type': 'function',
'function': {'name': ...}}]`, single quotes) and the result as a user turn that opens with
`Observation:` or names the call's id (`Call id: call_2`). Such a history is a text-tool
agent's, and its turns, lists of text parts only, can be rewritten as string contents are
(bench/README.md, "smolagents: a text tool history in typed parts"). Made-up fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.context.classify import is_agent_request, is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request, text_parts, text_tool_result
from gateway.context.tokens import TokenCounter

QUEUE = Path("/tmp/gen60/out/smolagents-queue/sessions.jsonl")
SYSTEM = ("You solve tasks by writing Python. Write your code between '<code>' and "
          "'</code>'. What it prints appears in the 'Observation:' field.\n"
          + "".join(f"Tool {i}: lookup_{i}(query) returns text about query.\n"
                    for i in range(30)))


def _parts(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def _code_turn(k: int) -> str:
    return (f"Thought: I look up item {k}.\n<code>\nresult = lookup_1(query=\"item {k}\")\n"
            f"print(result)\n</code>\nCalling tools:\n[{{'id': 'call_{k}', 'type': "
            f"'function', 'function': {{'name': 'python_interpreter', 'arguments': "
            f"'result = lookup_1(query=\"item {k}\")'}}}}]")


def _record_turn(k: int) -> str:
    """A turn with no code and no call in prose: only the harness's record of it."""
    return (f"Calling tools:\n[{{'id': 'call_{k}', 'type': 'function', 'function': "
            f"{{'name': 'web_search', 'arguments': {{'query': 'item {k}'}}}}}}]")


def _observation(k: int) -> str:
    return "Observation:\n" + "".join(
        f"Row {j} of item {k}: weight {100 + j * k} kg, shelf S-{k}-{j}, batch b{k}{j}x.\n"
        for j in range(20))


def _session(turns: int, turn=_code_turn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _parts(SYSTEM)},
        {"role": "user", "content": _parts("New task:\nFind the heaviest item on shelf S-3.")}]
    for k in range(turns):
        messages.append({"role": "assistant", "content": _parts(turn(k))})
        messages.append({"role": "user", "content": _parts(_observation(k))})
    return messages


def test_code_tags_and_call_records_are_a_text_tool_history() -> None:
    # code in <code> tags, answered by an Observation label (however short)
    assert text_tool_result("Thought: sum it.\n<code>\nprint(2 + 2)\n</code>", "Observation:\n4")
    # no code: the call only as the harness recorded it, a Python repr with single quotes
    assert text_tool_result(_record_turn(3), "Observation:\n## Search results")
    assert text_tool_result('[{"id": "call_3", "function": {"name": "web_search"}}]',
                            "Observation:\n## Search results")
    # the result names the call's id first (an error after a recorded call)
    assert text_tool_result(_code_turn(2), "Call id: call_2\nError:\nValueError: no credits")
    # a person's reply: no label after a record, no id, no code
    assert not text_tool_result(_record_turn(3), "Thanks, now try another query.")
    assert not text_tool_result(_record_turn(3), "Call id: call_33\nObservation:\nx")
    assert not text_tool_result("I would use <code> tags.", "Thanks! What next?")
    assert not text_tool_result("The answer is 4.", "Observation:\n4")
    session = _session(2)[:-1]
    assert is_text_tool_request({"messages": session})
    assert not is_agent_request({"messages": session})
    assert is_text_tool_request({"messages": _session(2, _record_turn)[:-1]})


def test_a_list_of_text_parts_is_rewritable() -> None:
    assert text_parts(_parts("a")) and text_parts([*_parts("a"), *_parts("b")])
    assert not text_parts([])
    assert not text_parts([{"type": "image_url", "image_url": {"url": "data:x"}}])
    assert not text_parts([{"type": "text", "text": "a", "cache_control": {"type": "x"}}])
    counter = TokenCounter()
    parsed = parse_request({"messages": _session(2)}, counter, "o200k_base")
    assert all(item.rewritable for item in parsed.items)
    marked = [{"role": "user", "content": [{"type": "text", "text": "a" * 400},
                                           {"type": "image_url", "image_url": {"url": "x"}}]}]
    assert not parse_request({"messages": marked}, counter, "o200k_base").items[0].rewritable


async def test_a_text_part_sessions_old_turns_age(engine: ContextEngine) -> None:
    """The first 20 calls of a recorded queue of such an agent (read from the converted
    corpus at test time): sent as is before, its old turns now age."""
    if not QUEUE.exists():
        pytest.skip(f"{QUEUE} absent: convert it with bench/smolagents.py")
    with QUEUE.open() as lines:
        messages = orjson.loads(next(lines))["messages"]
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"][:20]
    fitted = None
    for end in ends:  # each call ends right before an assistant turn
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-parts", "s", {"x-ctxgate-session-id": "parts"}))
    assert fitted is not None and fitted.tokens_after < fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    sent = fitted.body["messages"]
    # an aged turn goes out as a string content; the latest turn as the client sent it
    assert any(isinstance(m["content"], str) for m in sent)
    assert sent[-1] == messages[ends[-1] - 1] and sent[0] == messages[0]
