"""The coding class's instability budget leaves a margin over issue 7's 80% prefix stable.

A long session whose every call has an aging step due takes steps as often as
`max_step_share` allows: at 0.2 that was exactly 80.0% of its calls after the first
extending the previous call's forwarded messages (the synthetic sessions), so any later
rule's extra prefix change put it under. `coding_agent`'s 0.19 leaves a point of margin
(bench/README.md, "Prefix stable at the edge").
"""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from tests.sessions import synthetic_session


async def _stable_share(engine: ContextEngine, messages: list[dict[str, Any]],
                        session: str) -> tuple[float, set[str]]:
    """The share of calls after the first whose forwarded messages start with the previous
    call's, as the replay's yardstick counts it, and the classes the calls went to."""
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
    last: list[Any] | None = None
    stable = calls = 0
    classes = set()
    for end in ends:
        fitted = await engine.fit({"messages": messages[:end]}, CallContext(
            tenant="t1", trace_id="tr", headers={"x-ctxgate-session-id": session}))
        forwarded = fitted.body["messages"]
        classes.add(fitted.task_class)
        if last is not None:
            calls += 1
            stable += forwarded[:len(last)] == last
        last = list(forwarded)
    return stable / calls, classes


async def test_coding_session_keeps_a_margin_over_80(engine: ContextEngine) -> None:
    _, messages, _ = synthetic_session(0, 100)
    share, classes = await _stable_share(engine, messages, "margin-coding")
    assert classes == {"coding_agent"}
    assert share >= 0.81  # 0.2 of the calls stepping: 0.80
