"""Plan-aware retention: an old tool result the agent is still copying values from stays as
it is until it stops drawing from it, then ages (gateway/context/drawing.py)."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from gateway.context.drawing import drawn_from, recent_values
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.session import MemorySessionStore, SessionState
from gateway.context.steps import lagging_tokens
from gateway.context.taskclass import load_task_classes
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import without_repay

FIRST = ["Applied", "Modern", "Medieval", "Digital", "Urban", "Coastal", "Rural", "Global"]
SECOND = ["Poetry", "Ecology", "Marketing", "Genetics", "Optics"]
NAMES = [f"{a} {b} Seminar" for a in FIRST for b in SECOND]  # 40 names, no digits
TABLE = "\n".join(["| Course Name | Instructor | Room |", "|---|---|---|",
                   *(f"| {name} | Teacher {name.split()[0]}son | Hall {name.split()[1]} |"
                     for name in NAMES)])
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("list_courses", "fill_form", "check_status")]


def _call(session: str) -> CallContext:
    return CallContext("t-drawing", "tr", {"x-ctxgate-session-id": session})


def _assistant(k: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{k}", "type": "function",
         "function": {"name": name, "arguments": orjson.dumps(args).decode()}}]}


def _noise(k: int) -> str:
    return "\n".join(f"status line {k}.{i}: queue worker heartbeat ok, nothing to report"
                     for i in range(40))


def _session(fills: int, after: int) -> list[dict[str, Any]]:
    """A table read once, `fills` calls each re-typing one of its rows into a form (the
    form's reply long enough for steps to come), then `after` calls that draw nothing."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an assistant with tools."},
        {"role": "user", "content": "Register every course of the catalogue in the form."},
        _assistant(0, "list_courses", {}),
        {"role": "tool", "tool_call_id": "c0", "content": TABLE},
    ]
    for k in range(1, fills + 1):
        messages.append(_assistant(k, "fill_form", {"course": NAMES[k - 1]}))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": _noise(k)})
    for k in range(fills + 1, fills + after + 1):
        messages.append(_assistant(k, "check_status", {"worker": f"w-{k}"}))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": _noise(k)})
    return messages


def _drawn_off(settings: Settings) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    for spec in classes.values():
        compress = spec.get("stages", {}).get("compress") if isinstance(spec, dict) else None
        if isinstance(compress, dict):
            compress["drawn_turns"] = 0
    return settings.model_copy(update={"task_classes": classes})


async def _run(settings: Settings, embedder: Embedder, session: str,
               messages: list[dict[str, Any]]) -> list[Any]:
    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore())
    out = []
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        assert sum(d.tokens_saved for d in fitted.drops) == (
            fitted.tokens_before - fitted.tokens_after)
        out.append(fitted)
    return out


def item(i: int, text: str) -> Item:
    return Item(id=f"m{i}", kind="tool_result", unit=f"u{i}", message_index=i, segment=0,
                text=text, tokens=len(text) // 4, fixed_tokens=0, turn=i, pinned=False,
                rewritable=True)


def test_values_are_credited_to_the_latest_result_that_holds_them() -> None:
    messages = [{"role": "user", "content": "go"},
                _assistant(0, "a", {}), {"role": "tool", "content": "x"},
                _assistant(1, "fill", {"v": "Digital Optics Seminar"}),
                {"role": "tool", "content": "x"},
                _assistant(2, "fill", {"v": "Modern Poetry Seminar", "n": 7, "s": "ab",
                                        "bid": "1005", "price": 548.21}),
                {"role": "tool", "content": "x"}]
    # short values and short bare numbers (an element id, a price) name no source
    assert recent_values(messages, 1) == [(5, ["Modern Poetry Seminar"])]
    table = item(2, TABLE)
    assert drawn_from([table], messages, 3) == {"m2"}  # two turns drew from it
    assert drawn_from([table], messages, 1) == {"m2"}  # (one turn looked at: that one)
    # the latest result that holds a value is its source: one turn each, a look-up
    again = item(4, "| Modern Poetry Seminar | again |")
    assert drawn_from([table, again], messages, 3) == set()
    assert drawn_from([table], messages, 3, frozenset({"Modern Poetry Seminar"})) == set()
    assert drawn_from([table], messages, 0) == set()
    assert drawn_from([item(6, TABLE)], messages, 3) == set()  # after the calls: no source


async def test_a_table_the_agent_copies_from_stays_until_it_stops(
    settings: Settings, embedder: Embedder
) -> None:
    fills, after = 14, 10
    messages = _session(fills, after)
    on = await _run(without_repay(settings), embedder, "drawing-on", messages)
    off = await _run(_drawn_off(without_repay(settings)), embedder, "drawing-off", messages)
    # the call that asks for the last fill: rows not yet typed are still there with
    # retention, gone from the digest without it
    last_fill = fills - 1
    sent_on = on[last_fill].body["messages"][3]["content"]
    sent_off = off[last_fill].body["messages"][3]["content"]
    assert sent_on == TABLE
    assert sent_off != TABLE and NAMES[fills + 5] not in sent_off
    # both aged the form replies the agent did not draw from
    assert any(d.reason == "aged" for d in on[last_fill].drops)
    # once the agent stops drawing, a later step ages the table too
    final = on[-1].body["messages"][3]["content"]
    assert final != TABLE and len(final) < len(TABLE) // 2


def test_a_result_still_drawn_from_does_not_lag(settings: Settings) -> None:
    """A result a step kept because the agent drew from it does not count as lagging (it
    would only hasten a step that keeps it); once the latest calls stop drawing, it does."""
    agent = load_task_classes(settings)["agent"]
    table = item(3, TABLE)
    state = SessionState(horizon=6)
    drawing = _session(2, 0)
    assert lagging_tokens([table], state, agent, drawing) == 0
    assert lagging_tokens([table], state, agent) == table.tokens  # no messages: as before
    stopped = _session(2, 3)
    assert lagging_tokens([table], state, agent, stopped) == table.tokens
