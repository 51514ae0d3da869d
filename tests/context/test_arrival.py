"""cluster.on_arrival: a new tool result that repeats, byte for byte, one the model still reads
verbatim goes out as a pointer from its first call on. Nothing is lost (the copy is in the
same request) and nothing sent before changes (every call extends the previous one)."""

from __future__ import annotations

import uuid
from typing import Any

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


def _call(session: str) -> CallContext:
    return CallContext("t-arrival", uuid.uuid4().hex, {"x-ctxgate-session-id": session})


def _session(outputs: list[str]) -> list[dict[str, Any]]:
    return sql_session("How many cities have more than 1000 people?", outputs, "SELECT 1")


async def test_a_repeated_output_is_a_pointer_from_its_first_call(
    settings: Settings, embedder: Any
) -> None:
    # 4 calls, no step: without the young session's credit the share's first is on the 5th
    engine = ContextEngine(without_credit(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    session = uuid.uuid4().hex
    messages = _session(["Error: table cities does not exist", ROWS, ROWS, ROWS])
    previous: list[Any] | None = None
    for end in range(4, len(messages) + 1, 2):  # each call ends on a tool result
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        forwarded = fitted.body["messages"]
        if previous is not None:
            assert forwarded[: len(previous)] == previous  # the sent prefix never changes
        assert drops_add_up(fitted)
        previous = list(forwarded)
    contents = [m["content"] for m in previous or [] if m["role"] == "tool"]
    assert contents[1] == ROWS  # the first copy stays as sent
    assert contents[2].startswith("[ctxgate: repeats an earlier tool result: ")  # and the latest
    assert contents[3].startswith("[ctxgate: repeats an earlier tool result: ")
    assert [d.reason for d in fitted.drops] == ["duplicate", "duplicate"]


async def test_a_repeat_of_a_digested_output_stays_as_sent(engine: ContextEngine) -> None:
    """The copy a pointer names must be there verbatim: once it was digested, a repeat of it
    is the model's only full copy."""
    session = uuid.uuid4().hex
    other = [f"other output {k}\n" + "\n".join(f"line {k}.{i} of it" for i in range(60))
             for k in range(6)]
    messages = _session([ROWS, *other, ROWS])
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
    forwarded = fitted.body["messages"]
    tools = [m["content"] for m in forwarded if m["role"] == "tool"]
    assert tools[0] != ROWS  # aged into a digest by a step
    assert tools[-1] == ROWS


async def test_turns_and_wire_pinned_messages_are_never_pointers(engine: ContextEngine) -> None:
    """Only tool results and user turns become pointers, and never a message a wire adapter
    pinned (opaque content, a signed thinking block): those go upstream byte for byte."""
    messages = _session([ROWS])
    messages.append({"role": "assistant", "content": ROWS})  # the agent quotes the output
    messages.append({"role": "user", "content": ROWS, "ctxgate_pinned": True})
    fitted = await engine.fit({"messages": messages, "tools": TOOLS}, _call(uuid.uuid4().hex))
    forwarded = fitted.body["messages"]
    assert [m["content"] for m in forwarded[-3:]] == [ROWS, ROWS, ROWS]
    assert not fitted.drops


async def test_the_same_young_session_steps_once_on_credit(engine: ContextEngine) -> None:
    """With the shipped agent policy the session above takes one step ahead of the share
    (`steps.on_credit`: a small call, most of it verbatim behind the latest exchange) on its
    4th call, where the share allows the first on the 5th; the calls before extend the
    previous one, and nothing is lost: the older copies point to the latest."""
    session = uuid.uuid4().hex
    messages = _session(["Error: table cities does not exist", ROWS, ROWS, ROWS])
    previous: list[Any] | None = None
    changed = []
    for end in range(4, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
        forwarded = fitted.body["messages"]
        if previous is not None:
            changed.append(forwarded[: len(previous)] != previous)
        assert drops_add_up(fitted)
        previous = list(forwarded)
    assert changed == [False, False, True]
    contents = [m["content"] for m in previous or [] if m["role"] == "tool"]
    assert contents[0] == "Error: table cities does not exist"
    assert contents[-1] == ROWS


async def test_a_result_the_client_edits_after_it_arrived_is_decided_again(
    settings: Settings, embedder: Any
) -> None:
    """A harness that appends a reminder to the newest message and removes it on the next
    call (OpenHands' "ENVIRONMENT REMINDER") changes that message's text: its id, and the
    decision made on its arrival, are lost. It is decided as arriving again: the output,
    now a repeat byte for byte of one sent verbatim above, goes out as a pointer (the
    client's edit broke the cached prefix from it on anyway)."""
    engine = ContextEngine(without_credit(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    session = uuid.uuid4().hex
    reminder = "\n\nENVIRONMENT REMINDER: You have 7 turns left to complete the task."
    messages = _session(["Error: table cities does not exist", ROWS, ROWS, "3 rows"])
    for end in (4, 6):
        await engine.fit({"messages": messages[:end], "tools": TOOLS}, _call(session))
    # the third call's newest result carries the reminder, the fourth's no longer does
    third = [*messages[:7], {**messages[7], "content": ROWS + reminder}]
    fitted = await engine.fit({"messages": third, "tools": TOOLS}, _call(session))
    assert fitted.body["messages"][7]["content"].endswith(reminder)
    fitted = await engine.fit({"messages": messages[:10], "tools": TOOLS}, _call(session))
    assert drops_add_up(fitted)
    tools = [m["content"] for m in fitted.body["messages"] if m["role"] == "tool"]
    assert tools[1] == ROWS  # the first copy stays as sent
    assert tools[2].startswith("[ctxgate: repeats an earlier tool result: ")
    assert tools[3] == "3 rows"
