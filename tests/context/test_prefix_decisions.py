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


HARNESS = ("Based on the issue, you can use the search APIs below to get more context.\n"
           + "".join(f"    search_api_{k}(name: str): search for a name, form {k}.\n"
                     for k in range(12)))


def _text_tool_session(turns: int) -> list[dict[str, Any]]:
    """An agent whose tools are text: the harness's prompt listing its search calls comes
    back every fourth turn, word for word; the other user turns are the calls' results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a software developer fixing an issue."},
        {"role": "user", "content": "Issue: plotting a 3D surface fails in get_facecolors."},
        {"role": "user", "content": HARNESS},
    ]
    for k in range(turns):
        messages.append({"role": "assistant",
                         "content": f'I will call search_class("Poly{k}") next.'})
        if k % 4 == 3:
            messages.append({"role": "user", "content": HARNESS})
        else:
            messages.append({"role": "user", "content": f'Result of search_class("Poly{k}"):\n'
                             + f"class Poly{k}(Collection): def get_facecolors(self): ...\n" * 9})
    messages.append({"role": "assistant", "content": "Done."})
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


async def test_a_decided_item_whose_pin_lapsed_is_applied_on_the_prefix(
    settings: Settings, embedder: Any
) -> None:
    """`Prefix.applied` takes an item whose pin lapsed since it was decided (a text-tool
    agent's latest user turn, a harness prompt repeated and pointed to its earlier copy
    while pinned, once the next user turn comes) as `apply_decisions` over every item
    would give it: it no longer declines, which sent the call to re-apply every remembered
    decision."""
    from gateway.context import prefix as prefix_module
    from gateway.context.apply import apply_decisions

    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore(), prefix_cache_size=1024)
    original = prefix_module.Prefix.applied
    lapsed: list[int] = []

    def applied(self: Any, items: Any, decisions: Any, known: Any, counter: Any,
                caches: Any) -> Any:
        out = original(self, items, decisions, known, counter, caches)
        if decisions is self.decisions and known == self.known:
            restate = self.layout.restate
            lapsed.append(sum(1 for sent in self.final if sent.pinned and sent.id in decisions
                              and not restate(sent).pinned))
            assert out == apply_decisions(items, decisions, counter, self.encoding, known)
        return out

    prefix_module.Prefix.applied = applied  # type: ignore[method-assign]
    try:
        session = uuid.uuid4().hex
        messages = _text_tool_session(40)
        for end in range(3, len(messages)):
            if messages[end]["role"] == "assistant":
                body = {"model": "gpt-4o", "messages": messages[:end]}
                await engine.fit(body, CallContext("t1", f"c{end}",
                                                   {"x-ctxgate-session-id": session}))
    finally:
        prefix_module.Prefix.applied = original  # type: ignore[method-assign]
    assert any(lapsed), lapsed  # main declined on that call (None)
