"""A turn the client edits after it arrived (`engine._edited_start`): found from the
session's previous call kept in memory, without rendering the old messages again (that
render took time in proportion to the whole session on every such call: bench/README.md,
"The edited-turn check without a render of the session"), with the same answer."""

from __future__ import annotations

import uuid
from typing import Any
from unittest.mock import patch

from gateway.context import engine as engine_module
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up
from tests.sessions import sql_session

from .conftest import without_credit

TOOLS = [{"type": "function",
          "function": {"name": "execute_sql", "parameters": {"type": "object"}}}]
ROWS = "\n".join(f"('City {k}', {1000 + k})" for k in range(40))  # ~800 characters
REMINDER = "\n\nENVIRONMENT REMINDER: You have 7 turns left to complete the task."


def _engine(settings: Settings, embedder: Any, prefixes: int = 256) -> ContextEngine:
    return ContextEngine(without_credit(settings), None, Metrics(),
                         DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=prefixes)


def _call(session: str) -> CallContext:
    return CallContext("t-edited", uuid.uuid4().hex, {"x-ctxgate-session-id": session})


class _Renders:
    """Counts the renders of old messages the edited-turn check makes (the engine's only
    use of `render_plan`), each passed on to the real one."""

    def __init__(self) -> None:
        self.calls = 0
        self.real = engine_module.render_plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real(*args, **kwargs)


async def _edited_session(engine: ContextEngine) -> list[str]:
    """The tool results the fourth call forwards, after the third call's newest result
    carried a reminder the fourth call's no longer does."""
    session = uuid.uuid4().hex
    messages = sql_session("How many cities have more than 1000 people?",
                           ["Error: table cities does not exist", ROWS, ROWS, "3 rows"],
                           "SELECT 1")
    for end in (4, 6):
        await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
    third = [*messages[:7], {**messages[7], "content": ROWS + REMINDER}]
    fitted = await engine.fit({"messages": third, "tools": TOOLS}, _call(session))
    assert fitted.body["messages"][7]["content"].endswith(REMINDER)
    fitted = await engine.fit({"messages": messages[:10], "tools": TOOLS}, _call(session))
    assert drops_add_up(fitted)
    return [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]


async def test_an_edited_turn_is_found_without_rendering_the_session_again(
    settings: Settings, embedder: Any
) -> None:
    """The fourth call does not extend the third (the client edited its newest result):
    the third call's items, kept in memory, show which message changed; the edited result,
    now a repeat of one sent above, goes out as a pointer as before."""
    renders = _Renders()
    with patch.object(engine_module, "render_plan", renders):
        tools = await _edited_session(_engine(settings, embedder))
    assert tools[1] == ROWS
    assert tools[2].startswith("[ctxgate: repeats an earlier tool result: ")
    assert tools[3] == "3 rows"
    assert renders.calls == 0


async def test_without_the_previous_call_in_memory_the_check_renders(
    settings: Settings, embedder: Any
) -> None:
    """A gateway that keeps no previous call (another replica took it, or the cache is
    off) still finds the edit, by rendering the old messages under the decisions."""
    renders = _Renders()
    with patch.object(engine_module, "render_plan", renders):
        tools = await _edited_session(_engine(settings, embedder, prefixes=0))
    assert tools[2].startswith("[ctxgate: repeats an earlier tool result: ")
    assert renders.calls > 0


async def test_a_step_call_that_extends_the_previous_call_renders_nothing_again(
    settings: Settings, embedder: Any
) -> None:
    """A call that appends an exchange and takes a compaction step (the full path) reads
    the digest of what the previous call sent from the prefix it extends; an unedited
    session forwards what it did with the render (its prefix stays as sent)."""
    renders = _Renders()
    engine = _engine(settings, embedder)
    session = uuid.uuid4().hex
    other = [f"other output {k}\n" + "\n".join(f"line {k}.{i} of it" for i in range(60))
             for k in range(10)]
    messages = sql_session("How many cities have more than 1000 people?", [ROWS, *other])
    steps = 0
    with patch.object(engine_module, "render_plan", renders):
        for end in range(4, len(messages) + 1, 2):
            fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS},
                                      _call(session))
            assert drops_add_up(fitted)
            steps += any(d.reason != "duplicate" for d in fitted.drops)
    assert steps  # the full path ran, with the session's previous call extended
    assert renders.calls == 0


async def test_an_edit_further_back_is_decided_again_from_the_first_changed_message(
    settings: Settings, embedder: Any
) -> None:
    """A client that goes back a step and takes others (Moatless Tools' redo) sends more
    than one exchange after what it kept of the previous call: the messages from the first
    it changed on are decided as arriving, so a redone result that repeats one sent above
    goes out as a pointer (it went out verbatim: arrival looked at the latest exchange only)."""
    engine = _engine(settings, embedder)
    session = uuid.uuid4().hex
    question = "How many cities have more than 1000 people?"
    first = sql_session(question, ["Error: table cities does not exist", ROWS, "2 tables"])
    for end in (4, 6, 8):  # the third call's last step is the one the client takes back
        await engine.fit({"messages": first[:end], "tools": TOOLS}, _call(session))
    redo = sql_session(question, ["Error: table cities does not exist", ROWS, ROWS,
                                  "3 rows", "done"], "SELECT {k} FROM cities")
    redo[:6] = first[:6]  # kept as sent; from message 6 on the client's other steps
    fitted = await engine.fit({"messages": redo, "tools": TOOLS}, _call(session))
    assert drops_add_up(fitted)
    tools = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    assert tools[1] == ROWS  # the first copy stays as sent
    assert tools[2].startswith("[ctxgate: repeats an earlier tool result: ")
    assert tools[3:] == ["3 rows", "done"]
