"""Replaying a recorded session through the engine, call by call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.context.engine import CallContext, ContextEngine, FittedCall
from gateway.context.session import MemorySessionStore
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings


async def fit_each_call(
    engine: ContextEngine,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    tenant: str,
    session: str,
) -> list[FittedCall]:
    """Every call of the session (each prefix that ends right before an assistant message,
    from the fourth message on), fitted in order as one session of `tenant`."""
    fits = []
    for end in range(3, len(messages)):
        if messages[end]["role"] == "assistant":
            fits.append(await engine.fit(
                {"model": "gpt-4o", "messages": messages[:end], "tools": tools},
                CallContext(tenant, f"tr-{session}-{end}", {"x-ctxgate-session-id": session})))
    return fits


def reading_session(task: str, results: list[str], tool: str, *, say: str | None = None,
                    key: str = "page", closing: str = "Done reading.") -> list[dict[str, Any]]:
    """A session where the agent reads one page a call: the system prompt, the task, then for
    each of `results` an assistant turn `say` (default "Reading page k.") calling `tool`
    (`{key: k}`, id `call_{k:03d}`) and its result, and a `closing` answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": task},
    ]
    for k, result in enumerate(results):
        call = f"call_{k:03d}"
        text = f"Reading page {k}." if say is None else say
        messages.append({"role": "assistant", "content": text, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": tool, "arguments": f'{{"{key}": {k}}}'}}]})
        messages.append({"role": "tool", "tool_call_id": call, "content": result})
    messages.append({"role": "assistant", "content": closing})
    return messages


def order_page(k: int) -> str:
    """Page `k` of an order listing: 40 lines, each with its own order number and values."""
    return "\n".join(f"Order {1000 * k + i}: shipped to warehouse {k}-{i} on day {i}, "
                     f"carrier batch {k * 7 + i}, weight {i + 3} kg" for i in range(40))


def ticket_queue(first_turns: int, second_turns: int) -> list[dict[str, Any]]:
    """Two tickets (`T-100`, `T-200`) worked one after the other in one session, each a run
    of `read_page` calls returning `order_page`s, each closed by an answer."""
    return task_queue("You work the ticket queue with the tools.", [
        (f"Ticket {ticket}: audit the orders.", turns, f"Ticket {ticket} is audited.")
        for ticket, turns in (("T-100", first_turns), ("T-200", second_turns))], order_page)


def task_queue(system: str, tasks: list[tuple[str, int, str]],
               page: Callable[[int], str]) -> list[dict[str, Any]]:
    """One session working `tasks` (statement, `read_page` calls, closing answer) one after
    the other; the k-th call of the session returns `page(k)`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    k = 0
    for statement, turns, closing in tasks:
        messages.append({"role": "user", "content": statement})
        for _ in range(turns):
            k += 1
            call = f"call_{k:03d}"
            messages.append({"role": "assistant", "content": f"Reading page {k}.",
                             "tool_calls": [{"id": call, "type": "function", "function": {
                                 "name": "read_page", "arguments": f'{{"page": {k}}}'}}]})
            messages.append({"role": "tool", "tool_call_id": call, "content": page(k)})
        messages.append({"role": "assistant", "content": closing})
    return messages


async def fit_both(
    cached: ContextEngine, plain: ContextEngine, messages: list[dict[str, Any]],
    tools: list[dict[str, Any]], session: str,
) -> AsyncIterator[tuple[int, FittedCall, FittedCall, bool]]:
    """Every call of the session fitted by an engine with a prefix cache and by one without
    (same tenant `t1`, same session): yields the call's end, both fits and whether the
    cached engine took this call on its prefix."""
    for end in range(3, len(messages)):
        if messages[end]["role"] != "assistant":
            continue
        body = {"model": "gpt-4o", "messages": messages[:end], "tools": tools}
        call = CallContext("t1", f"tr-{session}-{end}", {"x-ctxgate-session-id": session})
        reused = cached.prefixes.reused
        fitted = await cached.fit(body, call)
        yield end, fitted, await plain.fit(body, call), cached.prefixes.reused > reused


def memory_engine(settings: Settings, embedder: Any, cache: bool) -> ContextEngine:
    """An engine on an in-memory session store, with its prefix cache or without it."""
    return ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None), embedder,
                         sessions=MemorySessionStore(), prefix_cache_size=1024 if cache else 0)


async def fit_agreed(cached: ContextEngine, plain: ContextEngine, body: dict[str, Any],
                     call: CallContext) -> FittedCall:
    """The call fitted by an engine with its prefix cache, checked against the full path
    (`plain`, no cache) on the same call: both must forward and log the same."""
    fitted = await cached.fit(body, call)
    again = await plain.fit(body, call)
    assert (again.body, again.drops, again.tokens_after) == (
        fitted.body, fitted.drops, fitted.tokens_after)
    return fitted


def drops_add_up(fit: FittedCall) -> bool:
    """Whether the call's drop log accounts for every token the call saved."""
    return sum(d.tokens_before - d.tokens_after for d in fit.drops) == (
        fit.tokens_before - fit.tokens_after)
