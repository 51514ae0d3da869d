"""Repeated tool calls on arrival (`cluster.on_arrival`, gateway/context/calls.py): a call
whose arguments repeat, byte for byte, an earlier forwarded call's goes out with pointers in
place of its string values, in each wire format as that format carries arguments (Chat and
Responses: a JSON object's text; Anthropic: `tool_use.input` an object). The first copy
stays, nothing sent before changes, and the drop log still adds up."""

from __future__ import annotations

import json
import uuid
from typing import Any

from bench.wire_convert import CONVERTERS
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.replay import WIRE_FORMATS, fit_as
from tests.context.sessions import drops_add_up

TOOLS = [{"type": "function",
          "function": {"name": "execute_sql", "parameters": {"type": "object"}}}]
QUERY = ("SELECT city.Name FROM city JOIN country ON city.CountryCode = country.Code "
         "WHERE country.Continent = 'Europe' AND country.Population > 1000000")
POINTER = "[ctxgate: same as call call_0]"


def _call(session: str) -> CallContext:
    return CallContext("t-calls", uuid.uuid4().hex, {"x-ctxgate-session-id": session})


def _session(commands: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You query a MySQL database with execute_sql."},
        {"role": "user", "content": "Which European cities have over a million people?"},
    ]
    for k, command in enumerate(commands):
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{k}", "type": "function",
             "function": {"name": "execute_sql", "arguments": json.dumps({"command": command})}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": f"({k},)"})
    return messages


def _arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(c["function"]["arguments"])
            for m in messages for c in m.get("tool_calls") or ()]


async def test_a_repeated_call_is_a_pointer_and_the_first_copy_stays(
    engine: ContextEngine,
) -> None:
    session = uuid.uuid4().hex
    messages = _session([QUERY, "SHOW TABLES", QUERY, QUERY])
    previous: list[Any] | None = None
    for end in range(4, len(messages) + 1, 2):  # each call ends on a tool result
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        forwarded = fitted.body["messages"]
        if previous is not None:
            assert forwarded[: len(previous)] == previous  # the sent prefix never changes
        assert drops_add_up(fitted)
        previous = list(forwarded)
    assert _arguments(previous or []) == [
        {"command": QUERY}, {"command": "SHOW TABLES"}, {"command": POINTER},
        {"command": POINTER}]
    assert [(d.reason, d.kind, d.message_index) for d in fitted.drops] == [
        ("repeated_call", "tool_call", 6), ("repeated_call", "tool_call", 8)]
    assert fitted.arguments == {"call_2": json.dumps({"command": POINTER},
                                                     separators=(",", ":")),
                                "call_3": json.dumps({"command": POINTER},
                                                     separators=(",", ":"))}


async def test_each_wire_format_carries_the_pointer_as_its_own_arguments(
    engine: ContextEngine,
) -> None:
    body = {"messages": _session([QUERY, QUERY]), "tools": TOOLS}
    sent = {fmt: CONVERTERS[fmt](body) for fmt in ("responses", "messages")}
    out = {}
    for fmt, wire_body in sent.items():
        fitted, out[fmt] = await fit_as(engine, WIRE_FORMATS[fmt], wire_body,
                                        _call(uuid.uuid4().hex))
        assert fitted.tokens_before - fitted.tokens_after == sum(
            d.tokens_before - d.tokens_after for d in fitted.drops) > 0
    calls = [i for i in out["responses"]["input"] if i.get("type") == "function_call"]
    assert [json.loads(c["arguments"]) for c in calls] == [{"command": QUERY},
                                                         {"command": POINTER}]
    uses = [b for m in out["messages"]["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b.get("type") == "tool_use"]
    assert [u["input"] for u in uses] == [{"command": QUERY}, {"command": POINTER}]
    assert uses[1]["id"] == "call_1" and uses[1]["name"] == "execute_sql"


async def test_short_or_unparsable_repeats_go_as_sent(engine: ContextEngine) -> None:
    messages = _session(["SHOW TABLES", "SHOW TABLES"])
    bad = {"id": "call_9", "type": "function",
           "function": {"name": "execute_sql", "arguments": "not json " + QUERY}}
    messages += [{"role": "assistant", "content": None, "tool_calls": [bad]},
                 {"role": "tool", "tool_call_id": "call_9", "content": "error"},
                 {"role": "assistant", "content": None, "tool_calls": [{**bad, "id": "c10"}]},
                 {"role": "tool", "tool_call_id": "c10", "content": "error"}]
    fitted = await engine.fit({"messages": messages, "tools": TOOLS}, _call(uuid.uuid4().hex))
    assert fitted.arguments is None
    assert not [d for d in fitted.drops if d.reason == "repeated_call"]


async def test_a_first_call_cut_to_its_budget_gets_no_pointers(engine: ContextEngine) -> None:
    """A session's first call over its budget is cut just enough to land in the budget's
    band; pointers found after that fit would leave it below, so it goes without them."""
    rows = "\n".join(f"('City {k}', {1000 + k})" for k in range(300))
    messages = _session([QUERY, QUERY])
    messages[3]["content"] = rows  # the first call's output: most of the request
    body = {"messages": messages, "tools": TOOLS}
    unbudgeted = await engine.fit(body, _call(uuid.uuid4().hex))
    assert unbudgeted.arguments is not None  # the same call within its budget: a pointer
    call = CallContext("t-calls", uuid.uuid4().hex, {
        "x-ctxgate-session-id": uuid.uuid4().hex,
        "x-ctxgate-budget-tokens": str(unbudgeted.tokens_before * 8 // 10)})
    fitted = await engine.fit(body, call)
    assert fitted.tokens_after < fitted.tokens_before
    assert fitted.arguments is None
    assert not [d for d in fitted.drops if d.reason == "repeated_call"]


async def test_arrival_calls_false_keeps_every_call_as_written(
    redis_client: Any, embedder: Any, tmp_path: Any,
) -> None:
    """`cluster.arrival_calls: false` (every class): the repeats go out as the model wrote
    them, while repeated tool results are still pointers (`on_arrival` stays on)."""
    import yaml

    from gateway.observability.droplog import DropLog
    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings
    from tests.context.conftest import CONFIG

    config = yaml.safe_load(CONFIG.read_text())
    for spec in config["task_classes"].values():
        cluster = (spec.get("stages") or {}).get("cluster")
        if isinstance(cluster, dict):
            cluster["arrival_calls"] = False
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    metrics = Metrics()
    log = DropLog(str(tmp_path / "drops.jsonl"), "hash", metrics)
    engine = ContextEngine(Settings(config=path), redis_client, metrics, log, embedder)
    try:
        session = uuid.uuid4().hex
        messages = _session([QUERY, "SHOW TABLES", QUERY, QUERY])
        for end in range(4, len(messages) + 1, 2):
            fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS},
                                      _call(session))
            assert _arguments(fitted.body["messages"]) == _arguments(messages[:end])
    finally:
        log.close()


async def test_a_short_repeated_call_is_a_pointer_past_arrival_call_min_chars(
    engine: ContextEngine,
) -> None:
    """The shipped classes point repeated calls of 40+ characters of arguments
    (`arrival_call_min_chars`), shorter than the 120 a repeated output needs."""
    short = "SELECT Name FROM city WHERE Population > 160000"  # 62 characters as arguments
    session = uuid.uuid4().hex
    messages = _session([short, "SHOW TABLES", short])
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
    sent = _arguments(fitted.body["messages"])
    assert sent[0] == {"command": short}  # the first copy stays
    assert sent[2] == {"command": POINTER}
    assert [d.reason for d in fitted.drops] == ["repeated_call"]


async def test_a_call_between_steps_hands_on_the_last_calls_pointed_events(
    engine: ContextEngine,
) -> None:
    """A call that only appends to its session's last call makes the repeats' drop events
    of that call again, equal: it hands on the very objects (`RepeatScan.events`), so the
    drop log reads them as logged instead of walking every event after the first repeat."""
    session = uuid.uuid4().hex
    commands = [QUERY, "SHOW TABLES", QUERY] + [f"SELECT {k} FROM city" for k in range(8)]
    messages = _session(commands)
    previous: list[Any] = []
    handed = 0
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        assert drops_add_up(fitted)
        repeats = [d for d in fitted.drops if d.reason == "repeated_call"]
        if previous:
            assert [(d.message_index, d.tokens_after) for d in repeats] == [
                (d.message_index, d.tokens_after) for d in previous]
            assert all(a is b for a, b in zip(repeats, previous, strict=True)), end
            handed += 1
        previous = repeats
    assert handed >= 7


async def test_a_call_between_steps_forwards_the_last_calls_pointed_messages_again(
    engine: ContextEngine,
) -> None:
    """A call that only appends to its session's last call forwards that call's messages as
    the very same objects, a message rewritten with pointers (its ids sent short too)
    included: `point_repeats` takes the last call's copy of the same message with the same
    pointers (`PointedEvents.pointed`), so `ShortIds` and the body encoder's runs, which go
    by identity, find it again instead of encoding an equal copy on every call."""
    session = uuid.uuid4().hex
    commands = [QUERY, "SHOW TABLES", QUERY] + [f"SELECT {k} FROM city" for k in range(6)]
    messages = _session(commands)
    for m in messages:  # ids as a client sends them (past 9 characters: sent short)
        for c in m.get("tool_calls") or ():
            c["id"] = f"call_{c['id']:0>24}"
        if m.get("tool_call_id"):
            m["tool_call_id"] = f"call_{m['tool_call_id']:0>24}"
    previous: list[Any] = []
    checked = 0
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        forwarded = fitted.body["messages"]
        if len(previous) > 6:  # the repeat (message 6) was forwarded last time
            assert POINTER not in json.dumps(forwarded)  # its id went short
            assert "same as call" in json.dumps(forwarded[6])
            assert forwarded[: len(previous)] == previous
            assert all(a is b for a, b in zip(forwarded, previous, strict=False)), end
            checked += 1
        previous = list(forwarded)
    assert checked >= 5
