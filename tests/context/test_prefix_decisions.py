"""A call between steps that takes the full path (a new output repeats an earlier one, so
`cluster.on_arrival` decides it there) and changes no decision keeps its session's own
decisions with the prefix it leaves, so that the next call reuses that prefix (its check is
by identity) instead of taking the full path again with every decision re-applied."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

TOOLS = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}]


def _session(turns: int) -> list[dict[str, Any]]:
    """A shell session whose outputs repeat now and then (one in three the same text)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You run shell commands with sh."},
        {"role": "user", "content": "Find the failing test in the repository."},
    ]
    for k in range(turns):
        output = ("collected 12 items; 1 failed: test_parse_dates " * 12 if k % 3 == 2
                  else f"log line {k}: reading module_{k}.py " * 12)
        messages.append({"role": "assistant", "content": f"Running step {k}.", "tool_calls": [
            {"id": f"call_{k}", "type": "function",
             "function": {"name": "sh", "arguments": f'{{"command": "pytest -x -k c{k}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": output})
    return messages


async def test_a_full_path_call_that_changes_nothing_leaves_the_sessions_decisions(
    settings: Settings, embedder: Any
) -> None:
    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore(), prefix_cache_size=1024)
    session = uuid.uuid4().hex
    messages = _session(60)
    checked = 0
    for end in range(3, len(messages)):
        if messages[end]["role"] != "assistant":
            continue
        body = {"model": "gpt-4o", "messages": messages[:end], "tools": TOOLS}
        await engine.fit(body, CallContext("t1", f"c{end}", {"x-ctxgate-session-id": session}))
        prefix = engine.prefixes.take("t1", session)
        state = await engine.sessions.load("t1", session)
        if prefix is not None:
            engine.prefixes.put("t1", session, prefix)
            if state.decisions:
                assert prefix.decisions is state.decisions, end
                checked += 1
    assert checked > 20
