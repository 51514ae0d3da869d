"""Tool-call arguments rendered shorter (gateway/context/calls.py): the result is always a
JSON object with the original keys (valid as a Chat `arguments` string, a Responses
`function_call.arguments` and an Anthropic `tool_use.input`), and what a later call needs
stays readable."""

from __future__ import annotations

import json
from typing import Any

import orjson

from gateway.context import calls
from gateway.context.calls import cut_arguments, repeat_pointer, repeated_calls
from gateway.context.needed import needed_values, recall
from gateway.context.tokens import TokenCounter

QUERY = ("SELECT city.Name FROM city JOIN country ON city.CountryCode = country.Code "
         "WHERE country.Continent = 'Europe' AND country.Population > 1000000")


def _call(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function",
         "function": {"name": "execute_sql", "arguments": json.dumps(arguments)}}]}


def _session(commands: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Which European cities?"}]
    for k, command in enumerate(commands):
        messages.append(_call(f"call_{k}", {"command": command, "limit": 50}))
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": f"rows {k}"})
    return messages


def test_a_pointer_keeps_the_keys_and_the_non_string_values() -> None:
    raw = json.dumps({"command": QUERY, "limit": 50, "options": {"db": "world_1"}})
    out = repeat_pointer(raw, "call_0")
    assert out is not None
    parsed = json.loads(out)
    assert list(parsed) == ["command", "limit", "options"]
    assert parsed["limit"] == 50
    assert parsed["command"] == "[ctxgate: same as call call_0]"
    assert parsed["options"] == {"db": "[ctxgate: same as call call_0]"}


def test_arguments_that_are_not_a_json_object_are_left_alone() -> None:
    assert repeat_pointer("not json", "c0") is None
    assert repeat_pointer('["a list"]', "c0") is None
    assert cut_arguments('"a string"', 10) is None


def test_only_repeats_of_an_earlier_call_become_pointers() -> None:
    messages = _session([QUERY, "SHOW TABLES", QUERY, QUERY])
    rewritten = repeated_calls(messages, min_chars=40)
    # the first copy (message 1) stays; the short command is never a repeat candidate
    assert sorted(rewritten) == [(5, 0), (7, 0)]
    for text in rewritten.values():
        assert json.loads(text)["command"] == "[ctxgate: same as call call_0]"
    assert repeated_calls(messages, min_chars=10_000) == {}


def test_a_repeat_found_from_earlier_messages_alone_keeps_its_rendering() -> None:
    """Appending messages never changes how an earlier repeat renders (prefix stability)."""
    short = repeated_calls(_session([QUERY, QUERY]), min_chars=40)
    longer = repeated_calls(_session([QUERY, QUERY, "SHOW TABLES", QUERY]), min_chars=40)
    assert short.items() <= longer.items()


def test_the_value_a_repeated_call_needs_stays_readable() -> None:
    """The yardstick's needed value (the whole command) is still in the request: the first
    copy of the call is sent as it came."""
    messages = _session([QUERY, QUERY, QUERY])
    rewritten = repeated_calls(messages, min_chars=40)
    forwarded = [dict(m) for m in messages]
    for (i, k), text in rewritten.items():
        calls = [dict(c) for c in forwarded[i]["tool_calls"]]
        calls[k] = {**calls[k], "function": {**calls[k]["function"], "arguments": text}}
        forwarded[i] = {**forwarded[i], "tool_calls": calls}
    nxt = _call("call_9", {"command": QUERY, "limit": 50})
    needed = needed_values(nxt, messages)
    assert QUERY in needed
    assert recall(needed, forwarded) == 1.0
    assert sum(len(json.dumps(m.get("tool_calls"))) for m in forwarded) < sum(
        len(json.dumps(m.get("tool_calls"))) for m in messages)


def test_a_cut_marks_what_it_cut_and_keeps_what_is_reused() -> None:
    raw = json.dumps({"command": QUERY, "note": "short"})
    out = cut_arguments(raw, max_chars=80, keep_chars=20)
    assert out is not None
    parsed = json.loads(out)
    assert list(parsed) == ["command", "note"]
    assert parsed["command"] == f"{QUERY[:20]}…[ctxgate: {len(QUERY) - 20} chars cut]"
    assert parsed["note"] == "short"
    assert cut_arguments(raw, max_chars=80, keep={QUERY}) is None  # nothing cut: None
    assert cut_arguments(raw, max_chars=len(QUERY)) is None


def test_cut_to_save_cuts_just_enough_and_keeps_json_objects() -> None:
    """The budget ladder's arguments rung: one message's calls cut to the same length, the
    longest that still saves what is needed; every result a JSON object with its keys."""
    counter = TokenCounter()

    def count(text: str) -> int:
        return counter.count(text, "o200k_base")

    raws = [
        orjson.dumps({"query": "SELECT " + ", ".join(f"col_{k}" for k in range(80)),
                      "db": "shop", "n": 3}).decode(),
        orjson.dumps({"command": "grep -rn 'needle \\u00e9 \"q\"' " + "/srv/x/" * 60}).decode(),
        orjson.dumps({"short": "ls"}).decode(),
    ]
    most = calls.cut_to_save(raws, 10_000, count)
    assert most is not None
    cut, saved = most
    assert cut[2] is None  # nothing long to cut: sent as is
    assert saved == sum(count(r) - count(c) for r, c in zip(raws, cut, strict=True) if c)
    for raw, new in zip(raws, cut, strict=True):
        if new is not None:
            assert orjson.loads(new).keys() == orjson.loads(raw).keys()
    some = calls.cut_to_save(raws, 40, count)
    assert some is not None
    assert 40 <= some[1] < saved  # just enough: far less than everything
    assert calls.cut_to_save([raws[2]], 10, count) is None
    assert calls.cut_to_save(["not json"], 10, count) is None
