"""Replaying a recorded session through the engine, call by call."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine, FittedCall


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
